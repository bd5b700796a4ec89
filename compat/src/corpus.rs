//! The corpus: named request sequences, read from TOML. Each sequence is
//! a list of steps sent in order to one server; a step is an HTTP request,
//! a Nacos gRPC request on a named connection, a wait for the next
//! request the server pushes on a connection, or a connection closed.
//!
//! ```toml
//! [[sequence]]
//! name = "v1-register-and-list"
//! about = "A v1 registration, then the list"
//!
//! [[sequence.step]]
//! http = "POST /nacos/v1/ns/instance"
//! form = "serviceName=cx-a&ip=10.1.0.1&port=80"
//!
//! [[sequence.step]]
//! http = "GET /nacos/v1/ns/instance/list?serviceName=cx-a"
//! until = { path = "hosts", len = 1 }
//! ```

use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;

/// The corpus shipped with understudy, one file per area.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("naming-v1.toml", include_str!("../corpus/naming-v1.toml")),
    ("naming-v2.toml", include_str!("../corpus/naming-v2.toml")),
    ("config.toml", include_str!("../corpus/config.toml")),
    ("core.toml", include_str!("../corpus/core.toml")),
    (
        "grpc-naming.toml",
        include_str!("../corpus/grpc-naming.toml"),
    ),
    (
        "grpc-config.toml",
        include_str!("../corpus/grpc-config.toml"),
    ),
    ("v3.toml", include_str!("../corpus/v3.toml")),
    (
        "grpc-nacos3.toml",
        include_str!("../corpus/grpc-nacos3.toml"),
    ),
];

/// One file of sequences.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// The sequences, in the order they run.
    #[serde(rename = "sequence", default)]
    pub sequences: Vec<Sequence>,
}

/// A named list of steps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sequence {
    /// Unique across the corpus; names its transcript file.
    pub name: String,
    /// What it shows.
    pub about: String,
    /// The Nacos major versions it runs on (`[3]`: Nacos 3 only); every
    /// version when absent.
    #[serde(default)]
    pub nacos: Vec<u32>,
    /// The steps.
    #[serde(rename = "step", default)]
    pub steps: Vec<Step>,
}

impl Sequence {
    /// Whether it runs against a server of major version `major`.
    pub fn runs_on(&self, major: u32) -> bool {
        self.nacos.is_empty() || self.nacos.contains(&major)
    }
}

/// One request, wait or close.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// `METHOD /path?query`.
    pub http: Option<String>,
    /// A form body (`a=1&b=2`, already encoded).
    pub form: Option<String>,
    /// Request headers.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// A Nacos gRPC request type, whose body is `body`.
    pub grpc: Option<String>,
    /// The JSON body of a gRPC request (`headers` and `requestId` are
    /// added when absent).
    pub body: Option<String>,
    /// Waits for the next request of this type the server sends on
    /// `conn` (answering it, as clients do).
    pub push: Option<String>,
    /// Closes connection `conn` (its ephemeral instances go).
    pub close: Option<String>,
    /// The gRPC connection; `main` when absent. Opened at first use.
    pub conn: Option<String>,
    /// Repeat the request (or skip pushes) until the answer matches:
    /// where Nacos is eventually consistent, the transcript records the
    /// settled answer and how long it took to settle.
    pub until: Option<Until>,
}

/// A condition on an answer's status and JSON body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Until {
    /// The HTTP status.
    pub status: Option<u16>,
    /// A dotted path into the body (`data.hosts`, `hosts.0.ip`).
    pub path: Option<String>,
    /// The length of the array, string or object at `path`.
    pub len: Option<usize>,
    /// The value at `path` (TOML, read as JSON).
    pub equals: Option<toml::Value>,
}

impl Until {
    /// Whether an answer of `status` and `body` meets it.
    pub fn met(&self, status: u16, body: &Value) -> bool {
        if self.status.is_some_and(|s| s != status) {
            return false;
        }
        let Some(path) = &self.path else { return true };
        let found = path
            .split('.')
            .filter(|p| !p.is_empty())
            .try_fold(body, |v, part| match v {
                Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
                Value::Object(map) => map.get(part),
                _ => None,
            });
        let length = |v: &Value| match v {
            Value::Array(a) => Some(a.len()),
            Value::Object(o) => Some(o.len()),
            Value::String(s) => Some(s.chars().count()),
            _ => None,
        };
        if let Some(len) = self.len {
            if found.and_then(length) != Some(len) {
                return false;
            }
        }
        if let Some(expected) = &self.equals {
            let expected = serde_json::to_value(expected).unwrap_or(Value::Null);
            if found != Some(&expected) {
                return false;
            }
        }
        self.len.is_some() || self.equals.is_some() || found.is_some()
    }
}

/// Reads one corpus file's text.
pub fn parse(name: &str, text: &str) -> anyhow::Result<Vec<Sequence>> {
    let file: File = toml::from_str(text).with_context(|| format!("corpus file {name}"))?;
    for sequence in &file.sequences {
        for (i, step) in sequence.steps.iter().enumerate() {
            let kinds = [
                step.http.is_some(),
                step.grpc.is_some(),
                step.push.is_some(),
                step.close.is_some(),
            ];
            anyhow::ensure!(
                kinds.iter().filter(|k| **k).count() == 1,
                "{name}: sequence {} step {i}: give exactly one of http, grpc, push, close",
                sequence.name
            );
        }
    }
    Ok(file.sequences)
}

/// The built-in corpus, then every `*.toml` of `extra` (sorted by name).
pub fn load(extra: Option<&Path>) -> anyhow::Result<Vec<Sequence>> {
    let mut all = Vec::new();
    for (name, text) in BUILT_IN {
        all.extend(parse(name, text)?);
    }
    if let Some(dir) = extra {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("corpus folder {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path)?;
            all.extend(parse(&path.display().to_string(), &text)?);
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for s in &all {
        anyhow::ensure!(
            names.insert(s.name.clone()),
            "two sequences are named {}",
            s.name
        );
    }
    Ok(all)
}
