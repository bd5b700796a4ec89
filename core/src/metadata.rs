//! Metadata: string pairs sorted by key, as a map to every reader and on
//! the wire. Stored as one exactly-sized sorted vector, not a B-tree whose
//! first node holds room for eleven pairs: instances carry a few pairs
//! each, and a registry holds hundreds of thousands of instances.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Instance or service metadata: sorted so listings and snapshots are stable.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Metadata(Box<[(String, String)]>);

impl Metadata {
    /// No pairs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pairs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.find(key).ok().map(|at| &self.0[at].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                let mut pairs = std::mem::take(&mut self.0).into_vec();
                pairs.insert(at, (key, value));
                self.0 = pairs.into_boxed_slice();
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.find(key).ok()?;
        let mut pairs = std::mem::take(&mut self.0).into_vec();
        let (_, value) = pairs.remove(at);
        self.0 = pairs.into_boxed_slice();
        Some(value)
    }

    /// The pairs in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &String)> + ExactSizeIterator {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(_, v)| v)
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
        Self(unique.into_boxed_slice())
    }
}

impl<const N: usize> From<[(String, String); N]> for Metadata {
    fn from(pairs: [(String, String); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl From<std::collections::BTreeMap<String, String>> for Metadata {
    fn from(map: std::collections::BTreeMap<String, String>) -> Self {
        Self(map.into_iter().collect::<Vec<_>>().into_boxed_slice())
    }
}

impl Extend<(String, String)> for Metadata {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, pairs: I) {
        let old = std::mem::take(&mut self.0).into_vec();
        *self = old.into_iter().chain(pairs).collect();
    }
}

impl IntoIterator for Metadata {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
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
        assert_eq!(m.get("b").map(String::as_str), Some("3"));
        assert_eq!(m.insert("c".into(), "4".into()), None);
        assert_eq!(m.insert("a".into(), "5".into()), Some("1".into()));
        assert_eq!(
            m.keys().map(String::as_str).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
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
}
