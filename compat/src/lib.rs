//! understudy's Nacos compatibility recorder.
//!
//! A corpus of request sequences ([`corpus`]) is sent to a server
//! ([`run`]) and its answers written as transcripts ([`transcript`]).
//! Transcripts of a real Nacos are replayed against another server and
//! compared answer by answer, field by field ([`diff`]), after the
//! normalisations of [`normalise`]; a difference fails unless the
//! allowlist keeps it, with its kind and reason.
//! `understudy compat record` and `understudy compat check` drive it from
//! the command line; the replay test runs it against understudy.

pub mod cli;
pub mod corpus;
pub mod diff;
pub mod normalise;
pub mod run;
pub mod transcript;

use std::path::Path;

use anyhow::Context as _;

use corpus::Sequence;
use diff::{Allowlist, Difference, Kind};
use run::Target;
use transcript::{Meta, Transcript};

/// The version a server reports of itself: Nacos 2's
/// `GET /nacos/v1/console/server/state`, or Nacos 3's
/// `GET /nacos/v3/admin/core/state` (where the first answers 410).
pub async fn server_version(target: &Target) -> anyhow::Result<String> {
    let state = |path: &'static str| async move {
        let answer = reqwest::get(format!("{}{path}", target.http)).await?;
        if !answer.status().is_success() {
            return anyhow::Ok(None);
        }
        let body: serde_json::Value = answer.json().await?;
        let state = body.get("data").unwrap_or(&body);
        Ok(state["version"].as_str().map(str::to_owned))
    };
    if let Some(version) = state("/nacos/v1/console/server/state").await? {
        return Ok(version);
    }
    state("/nacos/v3/admin/core/state")
        .await?
        .context("the server reports no version at /nacos/v1/console/server/state or /nacos/v3/admin/core/state")
}

/// The major version of a version string (`2.5.1` → 2).
pub fn major(version: &str) -> u32 {
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Sends every sequence that runs on `major` to `target`, in order.
pub async fn record(
    target: &Target,
    sequences: &[Sequence],
    major: u32,
) -> anyhow::Result<Vec<Transcript>> {
    let mut out = Vec::new();
    for sequence in sequences.iter().filter(|s| s.runs_on(major)) {
        let start = std::time::Instant::now();
        let transcript = run::run(target, sequence).await?;
        eprintln!(
            "{:<38} {} answers in {} ms",
            sequence.name,
            transcript.answers.len(),
            start.elapsed().as_millis()
        );
        out.push(transcript);
    }
    Ok(out)
}

/// One answer that differs, and whether the allowlist keeps it.
#[derive(Debug, Clone)]
pub struct Diverged {
    /// The sequence.
    pub sequence: String,
    /// The step's index.
    pub step: usize,
    /// The step, as sent.
    pub request: String,
    /// The fields that differ.
    pub differences: Vec<Difference>,
    /// The kind of the allowlist entry covering every difference.
    pub allowed: Option<Kind>,
}

/// What a replay found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The recorded server's version.
    pub version: String,
    /// Sequences replayed.
    pub sequences: usize,
    /// Answers compared.
    pub answers: usize,
    /// Answers that differ.
    pub diverged: Vec<Diverged>,
    /// Allowlist entries for this version that no answer needed.
    pub unused_allows: Vec<String>,
}

impl Report {
    /// The answers that differ without an allowlist entry.
    pub fn failures(&self) -> impl Iterator<Item = &Diverged> {
        self.diverged.iter().filter(|d| d.allowed.is_none())
    }

    /// How many answers the allowlist keeps.
    pub fn allowed(&self) -> usize {
        self.diverged.iter().filter(|d| d.allowed.is_some()).count()
    }

    /// A readable account of every difference.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "Nacos {}: {} sequences, {} answers, {} allowed differences, {} not allowed\n",
            self.version,
            self.sequences,
            self.answers,
            self.allowed(),
            self.failures().count()
        );
        for d in &self.diverged {
            let tag = match d.allowed {
                Some(kind) => format!("allowed ({})", kind.name()),
                None => "DIFFERS".to_owned(),
            };
            out.push_str(&format!(
                "{tag}: {} step {} ({})\n",
                d.sequence, d.step, d.request
            ));
            for difference in &d.differences {
                out.push_str(&format!("    {difference}\n"));
            }
        }
        for unused in &self.unused_allows {
            out.push_str(&format!("UNUSED allowlist entry: {unused}\n"));
        }
        out
    }
}

/// Replays the transcripts in `golden` against `target` and compares.
/// The corpus must still hold every recorded sequence, step for step.
pub async fn check(
    target: &Target,
    golden: &Path,
    sequences: &[Sequence],
    allowlist: &Allowlist,
) -> anyhow::Result<Report> {
    let (meta, recorded) = transcript::read(golden)?;
    check_transcripts(target, &meta, &recorded, sequences, allowlist).await
}

/// [`check`] on transcripts already read.
pub async fn check_transcripts(
    target: &Target,
    meta: &Meta,
    recorded: &[Transcript],
    sequences: &[Sequence],
    allowlist: &Allowlist,
) -> anyhow::Result<Report> {
    let mut report = Report {
        version: meta.version.clone(),
        sequences: recorded.len(),
        ..Report::default()
    };
    let mut used = vec![false; allowlist.allow.len()];
    for expected in recorded {
        let sequence = sequences
            .iter()
            .find(|s| s.name == expected.name)
            .ok_or_else(|| {
                anyhow::anyhow!("the corpus has no sequence {}: record again", expected.name)
            })?;
        let replayed = run::run(target, sequence).await?;
        anyhow::ensure!(
            replayed.answers.len() == expected.answers.len()
                && replayed
                    .answers
                    .iter()
                    .zip(&expected.answers)
                    .all(|(a, b)| a.request == b.request),
            "sequence {} changed since it was recorded: record again",
            expected.name
        );
        for (step, (want, got)) in expected.answers.iter().zip(&replayed.answers).enumerate() {
            report.answers += 1;
            let differences = diff::compare(
                &normalise::normalise(want.compared()),
                &normalise::normalise(got.compared()),
            );
            if differences.is_empty() {
                continue;
            }
            let covering = |d: &Difference| {
                allowlist
                    .allow
                    .iter()
                    .position(|a| a.covers(&meta.version, &expected.name, step, d))
            };
            let positions: Vec<Option<usize>> = differences.iter().map(covering).collect();
            let allowed = if positions.iter().all(Option::is_some) {
                let first = positions[0].expect("all covered");
                for p in positions.iter().flatten() {
                    used[*p] = true;
                }
                Some(allowlist.allow[first].kind)
            } else {
                None
            };
            report.diverged.push(Diverged {
                sequence: expected.name.clone(),
                step,
                request: want.request.clone(),
                differences,
                allowed,
            });
        }
    }
    for (i, entry) in allowlist.allow.iter().enumerate() {
        let applies = entry.nacos.as_deref().is_none_or(|v| v == meta.version)
            && recorded.iter().any(|t| t.name == entry.sequence);
        if applies && !used[i] {
            report
                .unused_allows
                .push(format!("{} step {}", entry.sequence, entry.step));
        }
    }
    Ok(report)
}
