//! Metadata: string pairs sorted by key, as a map to every reader and on
//! the wire. Stored as one string of packed pairs, not a map or a vector
//! of strings: instances carry a few short pairs each, and a registry
//! holds hundreds of thousands of instances.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Instance or service metadata: sorted so listings and snapshots are stable.
///
/// Held as one allocation of text: each pair, in key order, as
/// `{key length}:{value length}:{key}{value}`. A registry holds hundreds
/// of thousands of instances with a few short pairs each, and one string
/// per key and value (with its allocation's header and slack) would cost
/// several times the text itself. Reads walk the pairs; changes rebuild.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Metadata(Box<str>);

/// The pairs of a [`Metadata`] in key order.
#[derive(Debug, Clone)]
pub struct Pairs<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let (key_len, rest) = length(self.rest);
        let (value_len, rest) = length(rest);
        let (key, rest) = rest.split_at(key_len);
        let (value, rest) = rest.split_at(value_len);
        self.rest = rest;
        Some((key, value))
    }
}

/// Reads `{n}:` off the front of `text`.
fn length(text: &str) -> (usize, &str) {
    let (digits, rest) = text
        .split_once(':')
        .expect("metadata text is written by Metadata alone");
    (
        digits
            .parse()
            .expect("metadata text is written by Metadata alone"),
        rest,
    )
}

impl Metadata {
    /// No pairs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds from pairs already sorted by key, each key once.
    fn packed<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut text = String::new();
        for (key, value) in pairs {
            use fmt::Write as _;
            let _ = write!(text, "{}:{}:{key}{value}", key.len(), value.len());
        }
        Self(text.into_boxed_str())
    }

    /// Pairs.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter()
            .take_while(|(k, _)| *k <= key)
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let old = self.get(&key).map(str::to_owned);
        let mut pairs: Vec<(&str, &str)> = self.iter().filter(|(k, _)| *k != key).collect();
        let at = pairs.partition_point(|(k, _)| *k < key.as_str());
        pairs.insert(at, (&key, &value));
        *self = Self::packed(pairs);
        old
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let old = self.get(key)?.to_owned();
        *self = Self::packed(self.iter().filter(|(k, _)| *k != key));
        Some(old)
    }

    /// The packed text, which [`Metadata::value_span`] indexes.
    pub(crate) fn text(&self) -> &str {
        &self.0
    }

    /// Where the value of `key` is in the packed text.
    pub(crate) fn value_span(&self, key: &str) -> Option<std::ops::Range<usize>> {
        self.get(key).map(|value| self.span(value))
    }

    /// Where a value equal to `value` is in the packed text.
    pub(crate) fn span_of_value(&self, value: &str) -> Option<std::ops::Range<usize>> {
        self.values().find(|v| *v == value).map(|v| self.span(v))
    }

    /// The span of `value`, a slice of the packed text.
    fn span(&self, value: &str) -> std::ops::Range<usize> {
        let start = value.as_ptr() as usize - self.0.as_ptr() as usize;
        start..start + value.len()
    }

    /// The pairs in key order.
    pub fn iter(&self) -> Pairs<'_> {
        Pairs { rest: &self.0 }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(_, v)| v)
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, String)> for Metadata {
    /// Later pairs win over earlier ones with the same key, as a map's
    /// inserts do.
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        let mut pairs: Vec<(String, String)> = pairs.into_iter().collect();
        // Stable: equal keys keep their order, and the last one stays.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<(String, String)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match unique.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => unique.push(pair),
            }
        }
        Self::packed(unique.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl<const N: usize> From<[(String, String); N]> for Metadata {
    fn from(pairs: [(String, String); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl From<std::collections::BTreeMap<String, String>> for Metadata {
    fn from(map: std::collections::BTreeMap<String, String>) -> Self {
        Self::packed(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl Extend<(String, String)> for Metadata {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, pairs: I) {
        let old: Vec<(String, String)> = self
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        *self = old.into_iter().chain(pairs).collect();
    }
}

impl IntoIterator for Metadata {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a str, &'a str);
    type IntoIter = Pairs<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = Metadata;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Metadata, A::Error> {
                let mut pairs = Vec::with_capacity(access.size_hint().unwrap_or(0).min(64));
                while let Some(pair) = access.next_entry::<String, String>()? {
                    pairs.push(pair);
                }
                Ok(pairs.into_iter().collect())
            }
        }
        deserializer.deserialize_map(Pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn behaves_as_a_sorted_map() {
        let mut m: Metadata = [pair("b", "2"), pair("a", "1"), pair("b", "3")].into();
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("b"), Some("3"));
        assert_eq!(m.insert("c".into(), "4".into()), None);
        assert_eq!(m.insert("a".into(), "5".into()), Some("1".into()));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(m.remove("b"), Some("3".into()));
        assert_eq!(m.remove("b"), None);
        assert!(!m.contains_key("b"));
        m.extend([pair("a", "6"), pair("d", "7")]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"a":"6","c":"4","d":"7"}"#);
        let back: Metadata = serde_json::from_str(r#"{"d":"7","a":"6","c":"4"}"#).unwrap();
        assert_eq!(back, m);
        let bytes = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<Metadata>(&bytes).unwrap(), m);
    }

    #[test]
    fn any_text_survives_packing() {
        let odd = [
            pair("", ""),
            pair("1:2:", "3:4:"),
            pair("ключ", "значение:"),
            pair("k", &"v".repeat(300)),
        ];
        let m: Metadata = odd.clone().into();
        assert_eq!(m.len(), 4);
        for (k, v) in &odd {
            assert_eq!(m.get(k), Some(v.as_str()), "{k}");
        }
        let mut sorted = odd.to_vec();
        sorted.sort();
        assert_eq!(m.clone().into_iter().collect::<Vec<_>>(), sorted);
        assert_eq!(m.get("zzz"), None);
    }
}
