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
//! at 51s config-read-lag sh 500ms
//! at 52s pause 3
//! at 55s resume 3
//! ```
//!
//! Serving providers, consumers and the network between them
//! ([`serving`] parses their keys):
//!
//! ```text
//! providers hz 4 service=lognormal(8ms,0.5) threads=200 timeout=2500ms
//! consumers sh 2 rate=150/s non-idempotent=20% router=prefer-local balancer=zone-first
//! call-link hz-sh=10ms~5ms,loss=0.1%
//! at 20s call-link hz-sh=10ms~5ms,loss=3%
//! at 30s kill-providers hz
//! at 40s restart-providers hz
//! at 50s pause-provider sh/1 8s
//! at 70s slow-providers sh x3 for 10s
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use thiserror::Error;
use understudy_server::faults::{parse_duration, parse_faults, LinkSpec, PushFault};
use understudy_server::raft::NodeId;

mod hold;
pub mod serving;

pub use hold::Hold;
pub use serving::{Api, BalancerSpec, ConsumerGroup, ProviderGroup, RouterSpec, ServiceTime};

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
    /// Set a DC's config read lag (zero removes it).
    ConfigReadLag(String, Duration),
    /// Kill a node as a crash would.
    Kill(NodeId),
    /// Pause a node (all its links cut).
    Pause(NodeId),
    /// Resume a paused node.
    Resume(NodeId),
    /// Kill serving providers: calls in flight are reset, new connections
    /// refused, their registrations end as a crashed process's would.
    KillProviders(ProviderTarget),
    /// Start killed providers again (registering after their `delay`).
    RestartProviders(ProviderTarget),
    /// Stop one provider for a while, as a long GC pause does: no call
    /// answered and no keepalive or health check sent, then it resumes.
    PauseProvider(ProviderTarget, Duration),
    /// Multiply a zone's providers' service time for a while.
    SlowProviders {
        /// The zone.
        zone: String,
        /// The factor.
        factor: f64,
        /// For how long.
        lasting: Duration,
    },
    /// Set a link of the call network.
    CallLink(LinkSpec),
    /// Set a client-race hold on every running node.
    Hold(Hold),
}

/// Which serving providers an action names: a zone's, or one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTarget {
    /// The zone.
    pub zone: String,
    /// One provider, counted from 1; `None` for all of the zone's.
    pub index: Option<u32>,
}

impl fmt::Display for ProviderTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}/{i}", self.zone),
            None => f.write_str(&self.zone),
        }
    }
}

impl Action {
    /// Whether the action is a fault on serving providers.
    pub fn is_provider_fault(&self) -> bool {
        matches!(
            self,
            Action::KillProviders(_) | Action::PauseProvider(..) | Action::SlowProviders { .. }
        )
    }
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
            Action::ConfigReadLag(dc, lag) => {
                write!(f, "config-read-lag {dc} {}ms", lag.as_millis())
            }
            Action::Kill(id) => write!(f, "kill {id}"),
            Action::Pause(id) => write!(f, "pause {id}"),
            Action::Resume(id) => write!(f, "resume {id}"),
            Action::KillProviders(t) => write!(f, "kill-providers {t}"),
            Action::RestartProviders(t) => write!(f, "restart-providers {t}"),
            Action::PauseProvider(t, d) => write!(f, "pause-provider {t} {}ms", d.as_millis()),
            Action::SlowProviders {
                zone,
                factor,
                lasting,
            } => write!(
                f,
                "slow-providers {zone} x{factor} for {}ms",
                lasting.as_millis()
            ),
            Action::CallLink(spec) => write!(f, "call-link {spec}"),
            Action::Hold(hold) => hold.fmt(f),
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
    /// Churning registrants per DC (the registry workload).
    pub providers: u32,
    /// Serving providers, per zone.
    pub serving: Vec<ProviderGroup>,
    /// Consumers, per zone.
    pub consumers: Vec<ConsumerGroup>,
    /// Call network links from the start.
    pub call_links: Vec<LinkSpec>,
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
            serving: Vec::new(),
            consumers: Vec::new(),
            call_links: Vec::new(),
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
                "providers" if rest.len() == 1 => {
                    s.providers = number(rest, "providers").map_err(err)?
                }
                "providers" => {
                    let group = serving::provider_group(rest).map_err(err)?;
                    if s.serving.iter().any(|g| g.zone == group.zone) {
                        return Err(err(format!(
                            "providers {} declared twice; give one line per zone",
                            group.zone
                        )));
                    }
                    s.serving.push(group);
                }
                "consumers" => {
                    let group = serving::consumer_group(rest).map_err(err)?;
                    if s.consumers.iter().any(|g| g.zone == group.zone) {
                        return Err(err(format!(
                            "consumers {} declared twice; give one line per zone",
                            group.zone
                        )));
                    }
                    s.consumers.push(group);
                }
                "call-link" => s.call_links.push(link(rest).map_err(err)?),
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
        s.check_zones()
            .map_err(|(line, message)| ScenarioError { line, message })?;
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
                Action::Link(spec) | Action::CallLink(spec) => vec![&spec.from, &spec.to],
                Action::ApplyDelay(dc, _) | Action::Push(dc, _) | Action::ConfigReadLag(dc, _) => {
                    vec![dc]
                }
                Action::SlowProviders { zone, .. } => vec![zone],
                Action::KillProviders(t)
                | Action::RestartProviders(t)
                | Action::PauseProvider(t, _) => vec![&t.zone],
                _ => vec![],
            };
            if let Some(unknown) = named.iter().find(|d| !dcs.contains(d)) {
                return Err(err(format!(
                    "'{}' names DC {unknown}, which has no dc line",
                    step.action
                )));
            }
            if let Some(message) = s.provider_target_problem(&step.action) {
                return Err(err(format!("'{}' {message}", step.action)));
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
    /// interval, the durations of `slow-providers`) multiplied by
    /// `scale`; link latencies, timeouts and `pause-provider` durations
    /// are kept (a pause must still outlast a session to mean what it
    /// says).
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
                    action: match &s.action {
                        Action::SlowProviders {
                            zone,
                            factor,
                            lasting,
                        } => Action::SlowProviders {
                            zone: zone.clone(),
                            factor: *factor,
                            lasting: by(*lasting),
                        },
                        other => other.clone(),
                    },
                })
                .collect(),
            ..self.clone()
        }
    }

    /// Whether the scenario has serving providers or consumers.
    pub fn serves(&self) -> bool {
        !self.serving.is_empty() || !self.consumers.is_empty()
    }

    /// The serving providers of `zone`.
    pub fn providers_of(&self, zone: &str) -> Option<&ProviderGroup> {
        self.serving.iter().find(|g| g.zone == zone)
    }

    /// Every zone named by a provider, consumer or call link has a dc
    /// line, and consumers have providers to call.
    fn check_zones(&self) -> Result<(), (usize, String)> {
        let known = |zone: &str| self.dcs.iter().any(|(d, _)| d == zone);
        let named = self
            .serving
            .iter()
            .map(|g| ("providers", g.zone.as_str()))
            .chain(
                self.consumers
                    .iter()
                    .map(|g| ("consumers", g.zone.as_str())),
            )
            .chain(
                self.call_links
                    .iter()
                    .flat_map(|l| [("call-link", l.from.as_str()), ("call-link", l.to.as_str())]),
            );
        for (what, zone) in named {
            if !known(zone) {
                return Err((0, format!("{what} names zone {zone}, which has no dc line")));
            }
        }
        if !self.consumers.is_empty() && self.serving.is_empty() {
            return Err((
                0,
                "consumers need serving providers to call: add a 'providers ZONE N service=…' line"
                    .into(),
            ));
        }
        Ok(())
    }

    /// What is wrong with a provider action's target, if anything.
    fn provider_target_problem(&self, action: &Action) -> Option<String> {
        let target = match action {
            Action::KillProviders(t)
            | Action::RestartProviders(t)
            | Action::PauseProvider(t, _) => t,
            Action::SlowProviders { zone, .. } => {
                return self
                    .providers_of(zone)
                    .is_none()
                    .then(|| format!("names zone {zone}, which has no serving providers"));
            }
            _ => return None,
        };
        let Some(group) = self.providers_of(&target.zone) else {
            return Some(format!(
                "names zone {}, which has no serving providers",
                target.zone
            ));
        };
        match target.index {
            Some(i) if i == 0 || i > group.count => Some(format!(
                "names provider {i} of {}; they are 1 to {}",
                target.zone, group.count
            )),
            _ => None,
        }
    }

    /// Every link setting the scenario ever makes, for sizing raft's
    /// timers.
    pub fn all_links(&self) -> Vec<understudy_server::faults::Link> {
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
        [n, unit, ..] if n.parse::<f64>().is_ok() && ["us", "ms", "s"].contains(unit) => Ok((
            parse_duration(&format!("{n}{unit}")).map_err(|e| e.to_string())?,
            2,
        )),
        [d, ..] => Ok((parse_duration(d).map_err(|e| format!("duration {e}"))?, 1)),
        [] => Err("expected a duration such as 5s".into()),
    }
}

fn link(rest: &[&str]) -> Result<LinkSpec, String> {
    rest.join("")
        .parse()
        .map_err(|e: understudy_server::faults::InvalidLink| format!("link {e}"))
}

fn apply_delay(rest: &[&str]) -> Result<(String, Duration), String> {
    let text = rest.join("");
    let (dc, delay) = text
        .split_once('=')
        .ok_or_else(|| format!("apply-delay '{text}' is not DC=DELAY"))?;
    Ok((
        dc.to_owned(),
        parse_duration(delay).map_err(|e| e.to_string())?,
    ))
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

/// `ZONE` or `ZONE/I`.
fn provider_target(rest: &[&str], verb: &str) -> Result<ProviderTarget, String> {
    let [word] = rest else {
        return Err(format!("expected: {verb} ZONE or ZONE/I"));
    };
    Ok(match word.split_once('/') {
        None => ProviderTarget {
            zone: (*word).to_owned(),
            index: None,
        },
        Some((zone, index)) => ProviderTarget {
            zone: zone.to_owned(),
            index: Some(index.parse().map_err(|_| {
                format!("{verb}: '{word}' is not ZONE/I with I a provider number from 1")
            })?),
        },
    })
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
                    Some(("delay", d)) => {
                        fault.delay = parse_duration(d).map_err(|e| e.to_string())?
                    }
                    Some(("drop", p)) => {
                        fault.drop = parse_faults(&format!("loss={p}"))
                            .map_err(|e| e.to_string())?
                            .loss
                    }
                    _ => return Err(format!("push: '{setting}' is not delay=D or drop=P%")),
                }
            }
            Action::Push((*dc).to_owned(), fault)
        }
        "config-read-lag" => match rest {
            [dc, lag] => {
                let lag = parse_duration(lag).map_err(|e| format!("config-read-lag: lag {e}"))?;
                Action::ConfigReadLag((*dc).to_owned(), lag)
            }
            _ => return Err("expected: config-read-lag DC LAG".into()),
        },
        "kill" => Action::Kill(node(rest, "kill")?),
        "kill-providers" => Action::KillProviders(provider_target(rest, "kill-providers")?),
        "restart-providers" => {
            Action::RestartProviders(provider_target(rest, "restart-providers")?)
        }
        "pause-provider" => match rest {
            [target, lasting] => {
                let target = provider_target(&[target], "pause-provider")?;
                if target.index.is_none() {
                    return Err("pause-provider names one provider, ZONE/I".into());
                }
                let lasting =
                    parse_duration(lasting).map_err(|e| format!("pause-provider: duration {e}"))?;
                Action::PauseProvider(target, lasting)
            }
            _ => return Err("expected: pause-provider ZONE/I DURATION".into()),
        },
        "slow-providers" => match rest {
            [zone, factor, "for", lasting] => {
                let factor = factor
                    .strip_prefix('x')
                    .and_then(|k| k.parse::<f64>().ok())
                    .filter(|k| k.is_finite() && *k > 0.0)
                    .ok_or_else(|| {
                        format!("slow-providers: '{factor}' is not a factor such as x3 or x1.5")
                    })?;
                let lasting =
                    parse_duration(lasting).map_err(|e| format!("slow-providers: duration {e}"))?;
                Action::SlowProviders {
                    zone: (*zone).to_owned(),
                    factor,
                    lasting,
                }
            }
            _ => return Err("expected: slow-providers ZONE xK for DURATION".into()),
        },
        "call-link" => Action::CallLink(link(rest)?),
        "hold" => Action::Hold(Hold::parse(rest)?),
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
             at 40s link hz-sh=300ms\nat 50s push sh delay=100ms drop=10%\n\
             at 55s config-read-lag sh 0.5s\n",
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
                "50s push sh delay=100ms drop=10%",
                "55s config-read-lag sh 500ms"
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
            ("dc hz 1\nproviders hz 2", 2, "missing required key service"),
            ("dc hz 1\nconsumers hz 2 rate=1/s speed=9", 2, "unknown key 'speed'"),
            ("dc hz 1\nproviders sh 2 service=lognormal(1ms,0)", 0, "zone sh"),
            ("dc hz 1\nconsumers hz 2 rate=1/s", 0, "need serving providers"),
            (
                "dc hz 1\nproviders hz 2 service=lognormal(1ms,0)\nproviders hz 1 service=lognormal(1ms,0)",
                3,
                "declared twice",
            ),
            (
                "dc hz 1\nproviders hz 2 service=lognormal(1ms,0)\nat 1s kill-providers hz/3",
                0,
                "provider 3 of hz",
            ),
            (
                "dc hz 1\ndc sh 1\nproviders hz 2 service=lognormal(1ms,0)\nat 1s restart-providers sh",
                0,
                "no serving providers",
            ),
            ("dc hz 1\nat 1s pause-provider hz 5s", 2, "ZONE/I"),
            ("dc hz 1\nat 1s slow-providers hz 3 for 5s", 2, "factor"),
            ("dc hz 1\nat 1s config-read-lag hz", 2, "config-read-lag DC LAG"),
            ("dc hz 1\nat 1s config-read-lag sh 1s", 0, "DC sh"),
            ("dc hz 1\ncall-link hz-sh=10ms", 0, "zone sh"),
        ] {
            let e = Scenario::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_serving_scenario_parses_its_actions_and_scales_all_but_pauses() {
        let s = Scenario::parse(
            "dc hz 2\ndc sh 1\nduration 120s\n\
             providers hz 4 service=lognormal(8ms,0.5) timeout=2500ms\n\
             providers sh 4 service=lognormal(8ms,0.5) api=nacos delay=1s\n\
             consumers hz 2 rate=150/s non-idempotent=20%\n\
             call-link hz-sh=10ms~10ms,loss=0.1%\n\
             at 20s call-link hz-sh=20ms~10ms,loss=3%\n\
             at 60s kill-providers hz\nat 90s restart-providers hz\n\
             at 30s pause-provider sh/2 8s\nat 40s slow-providers sh x2.5 for 10s\n",
        )
        .unwrap();
        assert_eq!(s.serving.len(), 2);
        assert_eq!(s.consumers[0].zone, "hz");
        assert_eq!(s.call_links[0].to_string(), "hz-sh=10ms~10ms,loss=0.1%");
        let timeline: Vec<String> = s.steps.iter().map(|st| st.action.to_string()).collect();
        assert_eq!(
            timeline,
            [
                "call-link hz-sh=20ms~10ms,loss=3%",
                "pause-provider sh/2 8000ms",
                "slow-providers sh x2.5 for 10000ms",
                "kill-providers hz",
                "restart-providers hz"
            ]
        );
        assert!(s.steps[1].action.is_provider_fault());
        assert!(!s.steps[4].action.is_provider_fault());
        let short = s.scaled(0.25);
        assert_eq!(short.duration, Duration::from_secs(30));
        assert_eq!(
            short.steps[1].action,
            Action::PauseProvider(
                ProviderTarget {
                    zone: "sh".into(),
                    index: Some(2)
                },
                Duration::from_secs(8)
            ),
            "a pause keeps its length"
        );
        assert_eq!(
            short.steps[2].action.to_string(),
            "slow-providers sh x2.5 for 2500ms"
        );
    }
}
