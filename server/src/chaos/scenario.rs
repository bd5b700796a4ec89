//! Scenario files: a cluster, a workload and a timeline of faults, one
//! directive per line (`#` starts a comment).
//!
//! ```text
//! name partition-and-heal
//! seed 7
//! dc hz 2
//! dc sh 1
//! link hz-sh=40ms~10ms,loss=1%
//! providers 2            # per DC, each registering and deregistering
//! watchers 2             # per DC, native watch streams
//! write-interval 200ms   # per provider
//! duration 60s
//! at 5s partition hz|sh
//! at 20s heal
//! at 30s kill 2
//! at 40s link hz-sh=300ms
//! at 45s apply-delay sh=500ms
//! at 50s push sh delay=100ms drop=10%
//! at 52s pause 3
//! at 55s resume 3
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::raft::links::{parse_duration, parse_faults, LinkSpec, PushFault};
use crate::raft::NodeId;

/// A scenario line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {message}")]
pub struct ScenarioError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// One fault action of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Cut two DCs apart.
    Partition(String, String),
    /// Heal two DCs, or (`None`) every cut and pause.
    Heal(Option<(String, String)>),
    /// Set a DC link.
    Link(LinkSpec),
    /// Set a DC's apply delay.
    ApplyDelay(String, Duration),
    /// Set a DC's push faults.
    Push(String, PushFault),
    /// Kill a node as a crash would.
    Kill(NodeId),
    /// Pause a node (all its links cut).
    Pause(NodeId),
    /// Resume a paused node.
    Resume(NodeId),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Partition(a, b) => write!(f, "partition {a}|{b}"),
            Action::Heal(None) => f.write_str("heal"),
            Action::Heal(Some((a, b))) => write!(f, "heal {a}|{b}"),
            Action::Link(spec) => write!(f, "link {spec}"),
            Action::ApplyDelay(dc, d) => write!(f, "apply-delay {dc}={}ms", d.as_millis()),
            Action::Push(dc, p) => write!(
                f,
                "push {dc} delay={}ms drop={}%",
                p.delay.as_millis(),
                p.drop * 100.0
            ),
            Action::Kill(id) => write!(f, "kill {id}"),
            Action::Pause(id) => write!(f, "pause {id}"),
            Action::Resume(id) => write!(f, "resume {id}"),
        }
    }
}

/// A timed action.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When, from the start of the workload.
    pub at: Duration,
    /// What.
    pub action: Action,
}

/// A parsed scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Its name.
    pub name: String,
    /// Seed of every draw (links, workload).
    pub seed: u64,
    /// DCs and their node counts, in node id order.
    pub dcs: Vec<(String, u64)>,
    /// Link faults from the start.
    pub links: Vec<LinkSpec>,
    /// Apply delays from the start.
    pub apply_delays: BTreeMap<String, Duration>,
    /// Providers per DC.
    pub providers: u32,
    /// Watchers per DC.
    pub watchers: u32,
    /// Each provider's pause between writes.
    pub write_interval: Duration,
    /// How long the workload runs.
    pub duration: Duration,
    /// The timeline, in time order.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// Parses a scenario file's text.
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let mut s = Scenario {
            name: "scenario".into(),
            seed: 1,
            dcs: Vec::new(),
            links: Vec::new(),
            apply_delays: BTreeMap::new(),
            providers: 2,
            watchers: 2,
            write_interval: Duration::from_millis(200),
            duration: Duration::from_secs(30),
            steps: Vec::new(),
        };
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let err = |message: String| ScenarioError { line, message };
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let words: Vec<&str> = content.split_whitespace().collect();
            let rest = &words[1..];
            match words[0] {
                "name" => s.name = rest.join(" "),
                "seed" => s.seed = number(rest, "seed").map_err(err)?,
                "dc" => match rest {
                    [name, count] => {
                        let count: u64 = count
                            .parse()
                            .ok()
                            .filter(|c| (1..=9).contains(c))
                            .ok_or_else(|| {
                                err(format!("dc {name}: count '{count}' is not 1 to 9"))
                            })?;
                        s.dcs.push(((*name).to_owned(), count));
                    }
                    _ => return Err(err("expected: dc NAME COUNT".into())),
                },
                "link" => s.links.push(link(rest).map_err(err)?),
                "apply-delay" => {
                    let (dc, delay) = apply_delay(rest).map_err(err)?;
                    s.apply_delays.insert(dc, delay);
                }
                "providers" => s.providers = number(rest, "providers").map_err(err)?,
                "watchers" => s.watchers = number(rest, "watchers").map_err(err)?,
                "write-interval" => s.write_interval = duration(rest).map_err(err)?.0,
                "duration" => s.duration = duration(rest).map_err(err)?.0,
                "at" => {
                    let (at, used) = duration(rest).map_err(err)?;
                    let action = action(&rest[used..]).map_err(err)?;
                    s.steps.push(Step { at, action });
                }
                other => return Err(err(format!("unknown directive '{other}'"))),
            }
        }
        let err = |message: String| ScenarioError { line: 0, message };
        if s.dcs.is_empty() {
            return Err(err("no dc lines: a scenario needs at least one DC".into()));
        }
        let nodes: u64 = s.dcs.iter().map(|(_, n)| n).sum();
        let dcs: Vec<&str> = s.dcs.iter().map(|(d, _)| d.as_str()).collect();
        for step in &s.steps {
            let bad_node = match &step.action {
                Action::Kill(id) | Action::Pause(id) | Action::Resume(id) => {
                    (*id == 0 || *id > nodes).then_some(*id)
                }
                _ => None,
            };
            if let Some(id) = bad_node {
                return Err(err(format!(
                    "'{}' names node {id}; the nodes are 1 to {nodes}",
                    step.action
                )));
            }
            let named: Vec<&str> = match &step.action {
                Action::Partition(a, b) | Action::Heal(Some((a, b))) => vec![a, b],
                Action::Link(spec) => vec![&spec.from, &spec.to],
                Action::ApplyDelay(dc, _) | Action::Push(dc, _) => vec![dc],
                _ => vec![],
            };
            if let Some(unknown) = named.iter().find(|d| !dcs.contains(d)) {
                return Err(err(format!(
                    "'{}' names DC {unknown}, which has no dc line",
                    step.action
                )));
            }
            if step.at > s.duration {
                return Err(err(format!(
                    "'{}' at {:?} is after the duration {:?}",
                    step.action, step.at, s.duration
                )));
            }
        }
        s.steps.sort_by_key(|step| step.at);
        Ok(s)
    }

    /// The same scenario with every time (steps, duration, write
    /// interval) multiplied by `scale`; link latencies are kept.
    pub fn scaled(&self, scale: f64) -> Self {
        let by = |d: Duration| d.mul_f64(scale);
        Scenario {
            duration: by(self.duration),
            write_interval: by(self.write_interval).max(Duration::from_millis(20)),
            steps: self
                .steps
                .iter()
                .map(|s| Step {
                    at: by(s.at),
                    action: s.action.clone(),
                })
                .collect(),
            ..self.clone()
        }
    }

    /// Every link setting the scenario ever makes, for sizing raft's
    /// timers.
    pub fn all_links(&self) -> Vec<crate::raft::links::Link> {
        self.links
            .iter()
            .map(|l| l.link)
            .chain(self.steps.iter().filter_map(|s| match &s.action {
                Action::Link(spec) => Some(spec.link),
                _ => None,
            }))
            .collect()
    }
}

fn number<T: std::str::FromStr>(rest: &[&str], what: &str) -> Result<T, String> {
    match rest {
        [n] => n
            .parse()
            .map_err(|_| format!("{what}: '{n}' is not a number")),
        _ => Err(format!("expected: {what} NUMBER")),
    }
}

/// A duration at the start of `words`, as `5s` or `5 s`; answers how many
/// words it took.
fn duration(words: &[&str]) -> Result<(Duration, usize), String> {
    match words {
        [n, unit, ..] if n.parse::<f64>().is_ok() && ["us", "ms", "s"].contains(unit) => {
            Ok((parse_duration(&format!("{n}{unit}"))?, 2))
        }
        [d, ..] => Ok((parse_duration(d).map_err(|e| format!("duration {e}"))?, 1)),
        [] => Err("expected a duration such as 5s".into()),
    }
}

fn link(rest: &[&str]) -> Result<LinkSpec, String> {
    rest.join("")
        .parse()
        .map_err(|e: crate::raft::links::InvalidLink| format!("link {e}"))
}

fn apply_delay(rest: &[&str]) -> Result<(String, Duration), String> {
    let text = rest.join("");
    let (dc, delay) = text
        .split_once('=')
        .ok_or_else(|| format!("apply-delay '{text}' is not DC=DELAY"))?;
    Ok((dc.to_owned(), parse_duration(delay)?))
}

fn pair(rest: &[&str]) -> Result<(String, String), String> {
    match rest {
        [one] => one
            .split_once('|')
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .ok_or_else(|| format!("'{one}' is not A|B")),
        [a, b] => Ok(((*a).to_owned(), (*b).to_owned())),
        _ => Err("expected two DCs, A|B".into()),
    }
}

fn node(rest: &[&str], verb: &str) -> Result<NodeId, String> {
    let id = match rest {
        ["node", id] | [id] => id,
        _ => return Err(format!("expected: {verb} NODE_ID")),
    };
    id.parse()
        .map_err(|_| format!("{verb}: '{id}' is not a node id"))
}

fn action(words: &[&str]) -> Result<Action, String> {
    let Some((verb, rest)) = words.split_first() else {
        return Err("expected an action after the time".into());
    };
    Ok(match *verb {
        "partition" => {
            let (a, b) = pair(rest)?;
            Action::Partition(a, b)
        }
        "heal" if rest.is_empty() => Action::Heal(None),
        "heal" => Action::Heal(Some(pair(rest)?)),
        "link" => Action::Link(link(rest)?),
        "apply-delay" => {
            let (dc, delay) = apply_delay(rest)?;
            Action::ApplyDelay(dc, delay)
        }
        "push" => {
            let Some((dc, settings)) = rest.split_first() else {
                return Err("expected: push DC [delay=D] [drop=P%]".into());
            };
            let mut fault = PushFault::default();
            for setting in settings {
                match setting.split_once('=') {
                    Some(("delay", d)) => fault.delay = parse_duration(d)?,
                    Some(("drop", p)) => fault.drop = parse_faults(&format!("loss={p}"))?.loss,
                    _ => return Err(format!("push: '{setting}' is not delay=D or drop=P%")),
                }
            }
            Action::Push((*dc).to_owned(), fault)
        }
        "kill" => Action::Kill(node(rest, "kill")?),
        "pause" => Action::Pause(node(rest, "pause")?),
        "resume" => Action::Resume(node(rest, "resume")?),
        other => return Err(format!("unknown action '{other}'")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_parses_with_its_timeline_sorted_and_scales() {
        let s = Scenario::parse(
            "name demo\nseed 7\ndc hz 2\ndc sh 1\nlink hz-sh=40ms~10ms,loss=1%\nduration 60 s\n\
             at 20s heal # comment\nat 5 s partition hz|sh\nat 30s kill node 2\n\
             at 40s link hz-sh=300ms\nat 50s push sh delay=100ms drop=10%\n",
        )
        .unwrap();
        assert_eq!(s.name, "demo");
        assert_eq!(s.seed, 7);
        assert_eq!(s.dcs, vec![("hz".into(), 2), ("sh".into(), 1)]);
        let timeline: Vec<String> = s
            .steps
            .iter()
            .map(|st| format!("{}s {}", st.at.as_secs(), st.action))
            .collect();
        assert_eq!(
            timeline,
            [
                "5s partition hz|sh",
                "20s heal",
                "30s kill 2",
                "40s link hz-sh=300ms",
                "50s push sh delay=100ms drop=10%"
            ]
        );
        let short = s.scaled(0.1);
        assert_eq!(short.duration, Duration::from_secs(6));
        assert_eq!(short.steps[0].at, Duration::from_millis(500));
        assert_eq!(short.links, s.links, "latencies are not scaled");
    }

    #[test]
    fn bad_lines_are_refused_by_number() {
        for (text, line, says) in [
            ("dc hz 2\nat 5s explode", 2, "unknown action"),
            ("dc hz 2\nfrobnicate", 2, "unknown directive"),
            ("dc hz 2\nat soon heal", 2, "duration"),
            ("dc hz 2\nat 5s kill 9", 0, "node 9"),
            ("dc hz 2\nat 5s partition hz|sh", 0, "DC sh"),
            (
                "dc hz 2\nduration 10s\nat 50s heal",
                0,
                "after the duration",
            ),
            ("seed 3", 0, "no dc lines"),
            ("dc hz 0", 1, "count"),
        ] {
            let e = Scenario::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }
}
