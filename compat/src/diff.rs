//! Field-by-field comparison of a recorded answer with a replayed one,
//! and the allowlist of differences kept on purpose.

use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;

/// One field that differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// Where: `body.hosts.0.weight`.
    pub path: String,
    /// What the recorded server answered (`None`: absent).
    pub expected: Option<Value>,
    /// What the replayed server answered (`None`: absent).
    pub actual: Option<Value>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| match v {
            Some(v) => v.to_string(),
            None => "(absent)".to_owned(),
        };
        write!(
            f,
            "{}: recorded {}, got {}",
            self.path,
            show(&self.expected),
            show(&self.actual)
        )
    }
}

/// Every field where `actual` differs from `expected`.
pub fn compare(expected: &Value, actual: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    walk(String::new(), Some(expected), Some(actual), &mut out);
    out
}

fn walk(path: String, expected: Option<&Value>, actual: Option<&Value>, out: &mut Vec<Difference>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (expected, actual) {
        (Some(Value::Object(e)), Some(Value::Object(a))) => {
            let keys: std::collections::BTreeSet<&String> = e.keys().chain(a.keys()).collect();
            for key in keys {
                walk(join(key), e.get(key), a.get(key), out);
            }
        }
        (Some(Value::Array(e)), Some(Value::Array(a))) => {
            for i in 0..e.len().max(a.len()) {
                walk(join(&i.to_string()), e.get(i), a.get(i), out);
            }
        }
        (e, a) if numbers_equal(e, a) => {}
        (e, a) if e != a => out.push(Difference {
            path,
            expected: e.cloned(),
            actual: a.cloned(),
        }),
        _ => {}
    }
}

/// `1.0` and `1` are one number to every JSON client.
fn numbers_equal(e: Option<&Value>, a: Option<&Value>) -> bool {
    match (e, a) {
        (Some(Value::Number(e)), Some(Value::Number(a))) => e.as_f64() == a.as_f64(),
        _ => false,
    }
}

/// Why a difference is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// understudy refuses bad input that Nacos takes (or fails on).
    Stricter,
    /// understudy answers with what was just written where Nacos lags.
    StrongerConsistency,
    /// Anything else, said in the reason.
    Other,
}

impl Kind {
    /// Its name in the allowlist.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Stricter => "stricter",
            Kind::StrongerConsistency => "stronger-consistency",
            Kind::Other => "other",
        }
    }
}

/// One allowed difference.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowed {
    /// The recorded server's version it applies to; every version when
    /// absent.
    pub nacos: Option<String>,
    /// The sequence.
    pub sequence: String,
    /// The step's index in the sequence (from 0).
    pub step: usize,
    /// The field paths allowed to differ (a prefix covers what is under
    /// it); the whole answer when empty.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Which kind of difference.
    pub kind: Kind,
    /// Why understudy answers otherwise.
    pub reason: String,
}

impl Allowed {
    /// Whether it covers `difference` in step `step` of `sequence`
    /// recorded from `version`.
    pub fn covers(
        &self,
        version: &str,
        sequence: &str,
        step: usize,
        difference: &Difference,
    ) -> bool {
        self.nacos.as_deref().is_none_or(|v| v == version)
            && self.sequence == sequence
            && self.step == step
            && (self.paths.is_empty()
                || self.paths.iter().any(|p| {
                    difference.path == *p || difference.path.starts_with(&format!("{p}."))
                }))
    }
}

/// The allowlist file: `[[allow]]` entries.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowlist {
    /// The entries.
    #[serde(default)]
    pub allow: Vec<Allowed>,
}

impl Allowlist {
    /// Reads `path`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_their_paths() {
        let d = compare(
            &json!({"a": 1, "b": [1, 2], "c": {"x": "y"}, "n": 1.0}),
            &json!({"a": 1, "b": [1], "c": {"x": "z", "w": 0}, "n": 1}),
        );
        let paths: Vec<_> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, vec!["b.1", "c.w", "c.x"]);
    }
}
