//! Transcripts: what a server answered to each step of each sequence,
//! one JSON file per sequence in a folder with `meta.json`, the server's
//! own reported version, the commit it was built from and the date.

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `meta.json`: which server answered, and the order the sequences ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The server's own reported version (`/nacos/v1/console/server/state`).
    pub version: String,
    /// The commit the server was built from, as the recorder was told.
    pub commit: String,
    /// The date of the recording (`YYYY-MM-DD`).
    pub recorded: String,
    /// How the server ran (settings that matter to the answers).
    pub settings: String,
    /// The sequences, in the order they ran.
    pub sequences: Vec<String>,
}

/// One sequence's answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcript {
    /// The sequence's name.
    pub name: String,
    /// What it shows.
    pub about: String,
    /// One answer per step, in order.
    pub answers: Vec<Answer>,
}

/// What a server answered to one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The step, as sent: `GET /path?query`, `grpc InstanceRequest @main`,
    /// `push NotifySubscriberRequest @b`, `close @a`.
    pub request: String,
    /// The HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The HTTP content type, lower case without spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The gRPC payload's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The body: JSON as JSON, anything else as a string.
    pub body: Value,
    /// How many times the request was sent before its `until` held (1:
    /// at once).
    pub attempts: u32,
    /// How long the answer took to settle, ms (0 when at once).
    pub settled_ms: u64,
}

impl Answer {
    /// The answer as compared: its kind of status and its body.
    pub fn compared(&self) -> Value {
        serde_json::json!({
            "status": self.status,
            "contentType": self.content_type,
            "kind": self.kind,
            "body": self.body,
        })
    }
}

/// Writes `meta` and the transcripts into `dir` (created if absent).
pub fn write(dir: &Path, meta: &Meta, transcripts: &[Transcript]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut text = serde_json::to_string_pretty(meta)?;
    text.push('\n');
    std::fs::write(dir.join("meta.json"), text)?;
    for t in transcripts {
        let mut text = serde_json::to_string_pretty(t)?;
        text.push('\n');
        std::fs::write(dir.join(format!("{}.json", t.name)), text)?;
    }
    Ok(())
}

/// Reads the transcripts of `dir`, in the order `meta.json` lists them.
pub fn read(dir: &Path) -> anyhow::Result<(Meta, Vec<Transcript>)> {
    let meta: Meta = serde_json::from_slice(
        &std::fs::read(dir.join("meta.json"))
            .with_context(|| format!("reading {}/meta.json", dir.display()))?,
    )?;
    let transcripts = meta
        .sequences
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.json"));
            let bytes =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((meta, transcripts))
}
