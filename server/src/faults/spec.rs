//! The fault settings as text: a link (`40ms~10ms,loss=1%`), a DC pair's
//! link (`hz-sh=…`) and durations (`250us`, `40ms`, `1.5s`: decimals are
//! accepted, which humantime's grammar does not, so the parser is ours).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The faults of one directed link. The default is a perfect link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Link {
    /// Partitioned: a message on this link fails as unreachable at once.
    pub cut: bool,
    /// One-way latency added to every message on this link.
    #[serde(with = "millis", rename = "latencyMs")]
    pub delay: Duration,
    /// Each message's latency varies uniformly by up to this much either
    /// way (never below zero).
    #[serde(with = "millis", rename = "jitterMs")]
    pub jitter: Duration,
    /// Probability in `[0, 1]` that an RPC sent over this link is lost; a
    /// lost RPC fails as unreachable after its delay.
    pub loss: f64,
}

impl Link {
    pub(super) fn is_perfect(&self) -> bool {
        *self == Self::default()
    }

    pub(super) fn check(&self) -> Result<(), InvalidLink> {
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(InvalidLink::Loss(self.loss));
        }
        Ok(())
    }

    pub(super) fn draws(&self) -> bool {
        self.loss > 0.0 || !self.jitter.is_zero()
    }
}

impl fmt::Display for Link {
    /// The spec syntax: `40ms~10ms,loss=1%,cut`, or `perfect`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.delay.is_zero() || !self.jitter.is_zero() {
            let mut latency = format!("{}ms", self.delay.as_millis());
            if !self.jitter.is_zero() {
                latency.push_str(&format!("~{}ms", self.jitter.as_millis()));
            }
            parts.push(latency);
        }
        if self.loss > 0.0 {
            parts.push(format!("loss={}%", self.loss * 100.0));
        }
        if self.cut {
            parts.push("cut".into());
        }
        if parts.is_empty() {
            f.write_str("perfect")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

pub(super) mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(in crate::faults) fn serialize<S: Serializer>(
        d: &Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub(in crate::faults) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// A link setting that cannot be applied or parsed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum InvalidLink {
    /// The loss is not a probability.
    #[error("loss {0} is not a probability between 0 and 1 (or 0% and 100%)")]
    Loss(f64),
    /// The text is not a link spec.
    #[error("'{text}' {why}")]
    Syntax {
        /// The text given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
}

/// One link setting in the spec syntax: `FROM-TO=FAULTS` sets both
/// directions between datacenters `FROM` and `TO`, `FROM->TO=FAULTS` one
/// direction. `FAULTS` is a comma-separated list of a latency with an
/// optional jitter (`40ms`, `40ms~10ms`; units `us`, `ms`, `s`),
/// `loss=1%` (or `loss=0.01`), `cut`, or `perfect` alone.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    /// The sending DC.
    pub from: String,
    /// The receiving DC.
    pub to: String,
    /// Whether the reverse direction gets the same faults.
    pub both: bool,
    /// The faults.
    pub link: Link,
}

impl FromStr for LinkSpec {
    type Err = InvalidLink;

    fn from_str(text: &str) -> Result<Self, InvalidLink> {
        let bad = |why: &str| InvalidLink::Syntax {
            text: text.to_owned(),
            why: why.to_owned(),
        };
        let (pair, faults) = text
            .split_once('=')
            .ok_or_else(|| bad("is not FROM-TO=FAULTS (e.g. hz-sh=40ms~10ms,loss=1%)"))?;
        let (from, to, both) = match pair.split_once("->") {
            Some((from, to)) => (from, to, false),
            None => match pair.split('-').collect::<Vec<_>>()[..] {
                [from, to] => (from, to, true),
                _ => {
                    return Err(bad(
                        "needs two DC names joined by '-' (both ways) or '->' (one way)",
                    ))
                }
            },
        };
        let (from, to) = (from.trim(), to.trim());
        if from.is_empty() || to.is_empty() {
            return Err(bad("needs a DC name on each side"));
        }
        Ok(LinkSpec {
            from: from.to_owned(),
            to: to.to_owned(),
            both,
            link: parse_faults(faults).map_err(|why| bad(&why.to_string()))?,
        })
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = if self.both { "-" } else { "->" };
        write!(f, "{}{arrow}{}={}", self.from, self.to, self.link)
    }
}

/// Faults that cannot be read. The message continues a sentence that
/// names the text: `'hz-sh=40' has '40' without a unit (us, ms or s)`.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum InvalidFaults {
    /// A loss that is not a number.
    #[error("has loss '{0}', not a number or a percentage")]
    Loss(String),
    /// A latency or jitter that is not a duration.
    #[error(transparent)]
    Duration(#[from] InvalidDuration),
    /// Values that make no link.
    #[error(transparent)]
    Link(#[from] InvalidLink),
}

/// A duration that cannot be read. The message continues a sentence that
/// names the text, as [`InvalidFaults`]' does.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidDuration {
    /// A number alone.
    #[error("has '{0}' without a unit (us, ms or s)")]
    NoUnit(String),
    /// A unit other than us, ms and s.
    #[error("has unit '{unit}' in '{text}'; use us, ms or s")]
    Unit {
        /// The text.
        text: String,
        /// Its unit.
        unit: String,
    },
    /// No number.
    #[error("has '{0}', not a duration such as 40ms")]
    Number(String),
    /// Too long to hold.
    #[error("has '{0}' out of range")]
    Range(String),
}

/// Parses the faults part of a [`LinkSpec`].
pub fn parse_faults(text: &str) -> Result<Link, InvalidFaults> {
    let mut link = Link::default();
    for part in text.split(',').map(str::trim) {
        match part {
            "perfect" if text.trim() == "perfect" => {}
            "cut" | "partition" => link.cut = true,
            _ if part.starts_with("loss=") => {
                let value = &part["loss=".len()..];
                let loss = match value.strip_suffix('%') {
                    Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
                    None => value.trim().parse::<f64>(),
                }
                .map_err(|_| InvalidFaults::Loss(value.to_owned()))?;
                link.loss = loss;
            }
            _ => {
                let (latency, jitter) = match part.split_once('~') {
                    Some((latency, jitter)) => (latency, Some(jitter)),
                    None => (part, None),
                };
                link.delay = parse_duration(latency)?;
                if let Some(jitter) = jitter {
                    link.jitter = parse_duration(jitter)?;
                }
            }
        }
    }
    link.check()?;
    Ok(link)
}

/// A DC's apply delay that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidApplyDelay {
    /// Not `DC=DELAY`.
    #[error("'{0}' is not DC=DELAY")]
    Syntax(String),
    /// The delay is not a duration.
    #[error("'{text}' {why}")]
    Delay {
        /// The text given.
        text: String,
        /// What is wrong with its delay.
        why: InvalidDuration,
    },
}

/// Parses `DC=DELAY`, such as `sh=500ms`: committed entries reach that
/// DC's read view this late.
pub fn parse_apply_delay(text: &str) -> Result<(String, Duration), InvalidApplyDelay> {
    let (dc, delay) = text
        .split_once('=')
        .ok_or_else(|| InvalidApplyDelay::Syntax(text.to_owned()))?;
    let delay = parse_duration(delay).map_err(|why| InvalidApplyDelay::Delay {
        text: text.to_owned(),
        why,
    })?;
    Ok((dc.trim().to_owned(), delay))
}

/// Parses `250us`, `40ms`, `1.5s`.
pub fn parse_duration(text: &str) -> Result<Duration, InvalidDuration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "" => return Err(InvalidDuration::NoUnit(text.to_owned())),
        other => {
            return Err(InvalidDuration::Unit {
                text: text.to_owned(),
                unit: other.to_owned(),
            })
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| InvalidDuration::Number(text.to_owned()))?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| InvalidDuration::Range(text.to_owned()))
}
