//! The link model: injected faults on the links between nodes, which the
//! raft transport obeys for every message, so partitions, latency and
//! loss act on real raft traffic (elections, stalls and catch-up happen as
//! they would across real DCs).
//!
//! Faults are set per pair of datacenters (`hz-sh=40ms~10ms,loss=1%`, see
//! [`LinkSpec`]) and, for tests that need one link alone, per pair of
//! nodes; a node-level setting wins over its DCs'. A paused node's links
//! are all cut. Randomness (loss and jitter) is drawn from one RNG per
//! directed node link seeded from the model's seed, so a run replays: the
//! n-th message on a link is lost, or delayed by the same jitter, whatever
//! happens on other links. The first draws of every link are kept as its
//! loss pattern, so two runs can be compared.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::NodeId;

/// How many loss draws of each link [`LinkFaults::loss_patterns`] keeps.
pub const PATTERN_DRAWS: usize = 256;

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
    fn is_perfect(&self) -> bool {
        *self == Self::default()
    }

    fn check(&self) -> Result<(), InvalidLink> {
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(InvalidLink::Loss(self.loss));
        }
        Ok(())
    }

    fn draws(&self) -> bool {
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

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
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
            link: parse_faults(faults).map_err(|why| bad(&why))?,
        })
    }
}

impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = if self.both { "-" } else { "->" };
        write!(f, "{}{arrow}{}={}", self.from, self.to, self.link)
    }
}

/// Parses the faults part of a [`LinkSpec`].
pub fn parse_faults(text: &str) -> Result<Link, String> {
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
                .map_err(|_| format!("has loss '{value}', not a number or a percentage"))?;
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
    link.check().map_err(|e| e.to_string())?;
    Ok(link)
}

/// Parses `250us`, `40ms`, `1.5s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "" => return Err(format!("has '{text}' without a unit (us, ms or s)")),
        other => return Err(format!("has unit '{other}' in '{text}'; use us, ms or s")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("has '{text}', not a duration such as 40ms"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("has '{text}' out of range"))
}

/// One DC-level link setting as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DcLink {
    /// The sending DC.
    pub from: String,
    /// The receiving DC.
    pub to: String,
    /// The faults.
    #[serde(flatten)]
    pub link: Link,
}

/// The whole runtime fault model apart from node-level test links: what
/// the admin API shows and what a node hands its peers when it changes
/// (serialised as JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultState {
    /// The seed of the draws (informative; a node keeps its own).
    pub seed: u64,
    /// DC links, one direction each.
    pub links: Vec<DcLink>,
    /// Apply delays by DC, ms.
    pub apply_delays_ms: BTreeMap<String, u64>,
    /// Push faults by DC.
    pub push_faults: BTreeMap<String, PushFault>,
    /// Paused nodes.
    pub paused: Vec<NodeId>,
}

/// Why a message did not get through a link.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LinkDown {
    /// The link is cut.
    #[error("link {from}->{to} is cut")]
    Cut {
        /// The sender.
        from: NodeId,
        /// The receiver.
        to: NodeId,
    },
    /// The message was lost.
    #[error("an RPC on link {from}->{to} was lost")]
    Lost {
        /// The sender.
        from: NodeId,
        /// The receiver.
        to: NodeId,
    },
}

/// The injected faults of every directed link, shared by all clones and
/// changeable at run time (the admin API and chaos scenarios change them
/// while raft runs).
///
/// An RPC from `a` to `b` travels the link `a->b` and its answer travels
/// `b->a`: the request fails at once if `a->b` is cut, waits the delay of
/// `a->b` (plus its jitter draw), is lost with the loss probability of
/// `a->b` (one draw per RPC), and, once answered, waits the delay of
/// `b->a` and is lost if `b->a` is cut by then. The helpers that act on a
/// pair set both directions, so a symmetric link with delay `d` gives a
/// round trip of `2 d`.
#[derive(Clone)]
pub struct LinkFaults {
    shared: Arc<Mutex<Faults>>,
    /// Whether any DC's pushes are faulted: every push asks, and without
    /// push faults it need not take the lock.
    push_faulted: Arc<AtomicBool>,
}

struct Faults {
    seed: u64,
    /// Node-level settings; only imperfect links are stored.
    links: HashMap<(NodeId, NodeId), Link>,
    /// DC-level settings; only imperfect links are stored.
    dc_links: BTreeMap<(String, String), Link>,
    /// Each node's DC, as far as the model has been told.
    dcs: HashMap<NodeId, String>,
    paused: BTreeSet<NodeId>,
    /// Kept when a link is cleared, so a replay that sets and clears links
    /// in the same order draws the same losses.
    rngs: HashMap<(NodeId, NodeId), StdRng>,
    /// Jitter draws of answers, apart, so a link's request draws do not
    /// depend on how many answers travelled it.
    answer_rngs: HashMap<(NodeId, NodeId), StdRng>,
    /// The first [`PATTERN_DRAWS`] loss draws of each link.
    patterns: BTreeMap<(NodeId, NodeId), Vec<bool>>,
    /// Per-DC delay before committed entries reach the read view.
    apply_delays: BTreeMap<String, Duration>,
    /// Per-DC faults on pushes to subscribers, with their drop draws.
    push_faults: BTreeMap<String, PushFault>,
    push_rngs: HashMap<String, StdRng>,
}

/// Faults on the pushes a DC's nodes send their Nacos subscribers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PushFault {
    /// Every push waits this long before it is sent.
    #[serde(with = "millis", rename = "delayMs")]
    pub delay: Duration,
    /// Probability in `[0, 1]` that a push is dropped (never sent; the
    /// client's answer never comes, so it is retried as an unanswered
    /// push is).
    pub drop: f64,
}

/// What to do with one push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushFate {
    /// Send it after this delay (zero: at once).
    Send(Duration),
    /// Drop it.
    Drop,
}

impl fmt::Debug for LinkFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = self.lock();
        f.debug_struct("LinkFaults")
            .field("seed", &faults.seed)
            .field("links", &faults.links)
            .field("dc_links", &faults.dc_links)
            .field("paused", &faults.paused)
            .finish()
    }
}

impl LinkFaults {
    /// A perfect network whose future loss and jitter draws follow `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Faults {
                seed,
                links: HashMap::new(),
                dc_links: BTreeMap::new(),
                dcs: HashMap::new(),
                paused: BTreeSet::new(),
                rngs: HashMap::new(),
                answer_rngs: HashMap::new(),
                patterns: BTreeMap::new(),
                apply_delays: BTreeMap::new(),
                push_faults: BTreeMap::new(),
                push_rngs: HashMap::new(),
            })),
            push_faulted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The seed the draws follow (print it when a test fails).
    pub fn seed(&self) -> u64 {
        self.lock().seed
    }

    /// Tells the model which DC `node` is in.
    pub fn set_dc(&self, node: NodeId, dc: &str) {
        self.lock().dcs.insert(node, dc.to_owned());
    }

    /// The DC of `node`, if known.
    pub fn dc_of(&self, node: NodeId) -> Option<String> {
        self.lock().dcs.get(&node).cloned()
    }

    /// Sets the faults of the link `from->to`, overriding their DCs'.
    pub fn set(&self, from: NodeId, to: NodeId, link: Link) -> Result<(), InvalidLink> {
        link.check()?;
        let mut faults = self.lock();
        if link.is_perfect() {
            faults.links.remove(&(from, to));
        } else {
            faults.links.insert((from, to), link);
        }
        Ok(())
    }

    /// Sets the same faults on `a->b` and `b->a`.
    pub fn set_both(&self, a: NodeId, b: NodeId, link: Link) -> Result<(), InvalidLink> {
        self.set(a, b, link)?;
        self.set(b, a, link)
    }

    /// Applies a DC-level setting (one or both directions).
    pub fn apply(&self, spec: &LinkSpec) -> Result<(), InvalidLink> {
        spec.link.check()?;
        let mut faults = self.lock();
        faults.set_dc_link(&spec.from, &spec.to, spec.link);
        if spec.both {
            faults.set_dc_link(&spec.to, &spec.from, spec.link);
        }
        Ok(())
    }

    /// The DC-level faults of `from->to`.
    pub fn dc_link(&self, from: &str, to: &str) -> Link {
        let faults = self.lock();
        faults
            .dc_links
            .get(&(from.to_owned(), to.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Every imperfect DC link as a one-way [`LinkSpec`], sorted.
    pub fn dc_links(&self) -> Vec<LinkSpec> {
        self.lock()
            .dc_links
            .iter()
            .map(|((from, to), link)| LinkSpec {
                from: from.clone(),
                to: to.clone(),
                both: false,
                link: *link,
            })
            .collect()
    }

    /// Partitions DCs `a` and `b` in both directions, keeping their delay
    /// and loss for when the cut heals.
    pub fn partition(&self, a: &str, b: &str) {
        let mut faults = self.lock();
        for (from, to) in [(a, b), (b, a)] {
            let key = (from.to_owned(), to.to_owned());
            faults.dc_links.entry(key).or_default().cut = true;
        }
    }

    /// Removes the cut between DCs `a` and `b`; their delay and loss stay.
    pub fn heal_dcs(&self, a: &str, b: &str) {
        let mut faults = self.lock();
        for (from, to) in [(a, b), (b, a)] {
            let key = (from.to_owned(), to.to_owned());
            if let Some(link) = faults.dc_links.get_mut(&key) {
                link.cut = false;
                if link.is_perfect() {
                    faults.dc_links.remove(&key);
                }
            }
        }
    }

    /// Makes the link `from->to` follow its DCs again.
    pub fn clear(&self, from: NodeId, to: NodeId) {
        self.lock().links.remove(&(from, to));
    }

    /// The faults in force on the link `from->to`: its own setting, else
    /// its DCs', cut while either end is paused.
    pub fn link(&self, from: NodeId, to: NodeId) -> Link {
        self.lock().link(from, to)
    }

    /// Every imperfect node-level link as `(from, to, faults)`, sorted.
    pub fn links(&self) -> Vec<(NodeId, NodeId, Link)> {
        let mut links: Vec<_> = self
            .lock()
            .links
            .iter()
            .map(|(&(from, to), &link)| (from, to, link))
            .collect();
        links.sort_by_key(|&(from, to, _)| (from, to));
        links
    }

    /// Partitions nodes `a` and `b` in both directions, keeping their
    /// delay and loss for when the cut heals.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        let mut faults = self.lock();
        for link in [(a, b), (b, a)] {
            let current = faults.link(link.0, link.1);
            faults.links.entry(link).or_insert(current).cut = true;
        }
    }

    /// Removes the node-level cut between `a` and `b` in both directions;
    /// their delay and loss stay.
    pub fn heal(&self, a: NodeId, b: NodeId) {
        let mut faults = self.lock();
        for link in [(a, b), (b, a)] {
            faults.uncut(link);
        }
    }

    /// Removes every cut, node- and DC-level, and resumes paused nodes;
    /// delays and losses stay.
    pub fn heal_all(&self) {
        let mut faults = self.lock();
        let cut: Vec<_> = faults.links.keys().copied().collect();
        for link in cut {
            faults.uncut(link);
        }
        faults.dc_links.retain(|_, link| {
            link.cut = false;
            !link.is_perfect()
        });
        faults.paused.clear();
    }

    /// Makes every link perfect, resumes paused nodes and removes apply
    /// delays and push faults.
    pub fn clear_all(&self) {
        let mut faults = self.lock();
        faults.links.clear();
        faults.dc_links.clear();
        faults.paused.clear();
        faults.apply_delays.clear();
        faults.push_faults.clear();
        self.push_faulted.store(false, Ordering::Release);
    }

    /// Cuts every link of `node` until [`resume`](Self::resume).
    pub fn pause(&self, node: NodeId) {
        self.lock().paused.insert(node);
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self, node: NodeId) {
        self.lock().paused.remove(&node);
    }

    /// The runtime fault model as a value.
    pub fn state(&self) -> FaultState {
        let faults = self.lock();
        FaultState {
            seed: faults.seed,
            links: faults
                .dc_links
                .iter()
                .map(|((from, to), link)| DcLink {
                    from: from.clone(),
                    to: to.clone(),
                    link: *link,
                })
                .collect(),
            apply_delays_ms: faults
                .apply_delays
                .iter()
                .map(|(dc, d)| (dc.clone(), d.as_millis() as u64))
                .collect(),
            push_faults: faults.push_faults.clone(),
            paused: faults.paused.iter().copied().collect(),
        }
    }

    /// Replaces the runtime fault model (not the seed, nor node-level
    /// links) with `state`, after checking all of it.
    pub fn set_state(&self, state: &FaultState) -> Result<(), InvalidLink> {
        for link in &state.links {
            link.link.check()?;
        }
        for fault in state.push_faults.values() {
            if !(0.0..=1.0).contains(&fault.drop) {
                return Err(InvalidLink::Loss(fault.drop));
            }
        }
        let mut faults = self.lock();
        faults.dc_links = state
            .links
            .iter()
            .filter(|l| !l.link.is_perfect())
            .map(|l| ((l.from.clone(), l.to.clone()), l.link))
            .collect();
        faults.apply_delays = state
            .apply_delays_ms
            .iter()
            .filter(|(_, ms)| **ms > 0)
            .map(|(dc, ms)| (dc.clone(), Duration::from_millis(*ms)))
            .collect();
        faults.push_faults = state
            .push_faults
            .iter()
            .filter(|(_, f)| **f != PushFault::default())
            .map(|(dc, f)| (dc.clone(), *f))
            .collect();
        self.push_faulted
            .store(!faults.push_faults.is_empty(), Ordering::Release);
        faults.paused = state.paused.iter().copied().collect();
        Ok(())
    }

    /// Sets DC `dc`'s apply delay (zero removes it).
    pub fn set_apply_delay(&self, dc: &str, delay: Duration) {
        let mut faults = self.lock();
        if delay.is_zero() {
            faults.apply_delays.remove(dc);
        } else {
            faults.apply_delays.insert(dc.to_owned(), delay);
        }
    }

    /// DC `dc`'s apply delay.
    pub fn apply_delay(&self, dc: &str) -> Duration {
        self.lock()
            .apply_delays
            .get(dc)
            .copied()
            .unwrap_or_default()
    }

    /// Every DC's apply delay.
    pub fn apply_delays(&self) -> BTreeMap<String, Duration> {
        self.lock().apply_delays.clone()
    }

    /// Sets the faults on DC `dc`'s pushes (the default removes them).
    pub fn set_push_fault(&self, dc: &str, fault: PushFault) -> Result<(), InvalidLink> {
        if !(0.0..=1.0).contains(&fault.drop) {
            return Err(InvalidLink::Loss(fault.drop));
        }
        let mut faults = self.lock();
        if fault == PushFault::default() {
            faults.push_faults.remove(dc);
        } else {
            faults.push_faults.insert(dc.to_owned(), fault);
        }
        self.push_faulted
            .store(!faults.push_faults.is_empty(), Ordering::Release);
        Ok(())
    }

    /// Every DC's push faults.
    pub fn push_faults(&self) -> BTreeMap<String, PushFault> {
        self.lock().push_faults.clone()
    }

    /// What happens to the next push a node in `dc` sends.
    pub fn push_fate(&self, dc: &str) -> PushFate {
        if !self.push_faulted.load(Ordering::Acquire) {
            return PushFate::Send(Duration::ZERO);
        }
        let mut faults = self.lock();
        let Some(fault) = faults.push_faults.get(dc).copied() else {
            return PushFate::Send(Duration::ZERO);
        };
        if fault.drop > 0.0 {
            let seed = faults.seed;
            let rng = faults.push_rngs.entry(dc.to_owned()).or_insert_with(|| {
                StdRng::seed_from_u64(seed ^ fnv(dc.as_bytes()).rotate_left(17))
            });
            if rng.random::<f64>() < fault.drop {
                return PushFate::Drop;
            }
        }
        PushFate::Send(fault.delay)
    }

    /// The paused nodes.
    pub fn paused(&self) -> Vec<NodeId> {
        self.lock().paused.iter().copied().collect()
    }

    /// The first [`PATTERN_DRAWS`] loss draws of every link that has
    /// drawn, as `(from, to, pattern)` with `x` for a lost message and `.`
    /// for one let through.
    pub fn loss_patterns(&self) -> Vec<(NodeId, NodeId, String)> {
        self.lock()
            .patterns
            .iter()
            .map(|(&(from, to), draws)| {
                let pattern = draws.iter().map(|&l| if l { 'x' } else { '.' }).collect();
                (from, to, pattern)
            })
            .collect()
    }

    /// Carries one RPC from `from` to `to` through the faults (see the
    /// type's documentation): `call` is the RPC itself and is not started
    /// unless the request gets through.
    pub async fn carry<F: Future>(
        &self,
        from: NodeId,
        to: NodeId,
        call: F,
    ) -> Result<F::Output, LinkDown> {
        let (delay, lost) = self.send(from, to)?;
        sleep(delay).await;
        if lost {
            return Err(LinkDown::Lost { from, to });
        }
        // A cut made while the request was in flight drops it too.
        self.admits(from, to)?;
        let answer = call.await;
        let back = self.lock().answer_delay(to, from);
        sleep(back).await;
        self.admits(to, from)?;
        Ok(answer)
    }

    /// The request leg of a message on `from->to`: refused at once if cut,
    /// else its delay (jitter drawn) and whether it is lost.
    pub fn send(&self, from: NodeId, to: NodeId) -> Result<(Duration, bool), LinkDown> {
        self.lock().send(from, to)
    }

    /// Whether a message on `from->to` may be received now: only the cut
    /// counts, so a receiver can refuse a partitioned peer without
    /// charging the delay and loss the sender already applied.
    pub fn admits(&self, from: NodeId, to: NodeId) -> Result<(), LinkDown> {
        if self.link(from, to).cut {
            Err(LinkDown::Cut { from, to })
        } else {
            Ok(())
        }
    }

    fn lock(&self) -> MutexGuard<'_, Faults> {
        // The guard is never held across a panic point that leaves the
        // maps half-changed, so a poisoned lock still holds valid faults.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Faults {
    fn link(&self, from: NodeId, to: NodeId) -> Link {
        let mut link = match self.links.get(&(from, to)) {
            Some(link) => *link,
            None => match (self.dcs.get(&from), self.dcs.get(&to)) {
                (Some(a), Some(b)) => self
                    .dc_links
                    .get(&(a.clone(), b.clone()))
                    .copied()
                    .unwrap_or_default(),
                _ => Link::default(),
            },
        };
        if self.paused.contains(&from) || self.paused.contains(&to) {
            link.cut = true;
        }
        link
    }

    fn set_dc_link(&mut self, from: &str, to: &str, link: Link) {
        let key = (from.to_owned(), to.to_owned());
        if link.is_perfect() {
            self.dc_links.remove(&key);
        } else {
            self.dc_links.insert(key, link);
        }
    }

    fn uncut(&mut self, link: (NodeId, NodeId)) {
        if let Some(faults) = self.links.get_mut(&link) {
            faults.cut = false;
            if faults.is_perfect() {
                self.links.remove(&link);
            }
        }
    }

    fn rng(&mut self, from: NodeId, to: NodeId) -> &mut StdRng {
        let seed = self.seed;
        self.rngs
            .entry((from, to))
            .or_insert_with(|| StdRng::seed_from_u64(link_seed(seed, from, to)))
    }

    /// The request leg: refused at once if cut, else its delay and whether
    /// it is lost. Draws only on lossy or jittery links, so a perfect link
    /// never consumes randomness.
    fn send(&mut self, from: NodeId, to: NodeId) -> Result<(Duration, bool), LinkDown> {
        let link = self.link(from, to);
        if link.cut {
            return Err(LinkDown::Cut { from, to });
        }
        if !link.draws() {
            return Ok((link.delay, false));
        }
        let rng = self.rng(from, to);
        let lost = rng.random::<f64>() < link.loss;
        let delay = jittered(link, rng.random::<f64>());
        if link.loss > 0.0 {
            let pattern = self.patterns.entry((from, to)).or_default();
            if pattern.len() < PATTERN_DRAWS {
                pattern.push(lost);
            }
        }
        Ok((delay, lost))
    }

    /// The answer leg's delay (jitter drawn; loss applies to requests).
    fn answer_delay(&mut self, from: NodeId, to: NodeId) -> Duration {
        let link = self.link(from, to);
        if link.jitter.is_zero() {
            return link.delay;
        }
        let seed = self.seed;
        let draw = self
            .answer_rngs
            .entry((from, to))
            .or_insert_with(|| StdRng::seed_from_u64(!link_seed(seed, from, to)))
            .random::<f64>();
        jittered(link, draw)
    }
}

/// `link`'s delay moved by its jitter: `draw` in `[0, 1)` maps onto
/// `[-jitter, +jitter)`.
fn jittered(link: Link, draw: f64) -> Duration {
    if link.jitter.is_zero() {
        return link.delay;
    }
    let offset = link.jitter.as_secs_f64() * (2.0 * draw - 1.0);
    Duration::from_secs_f64((link.delay.as_secs_f64() + offset).max(0.0))
}

/// FNV-1a, to seed a DC's draws from its name.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A per-link seed: distinct links get unrelated streams from one seed.
fn link_seed(seed: u64, from: NodeId, to: NodeId) -> u64 {
    seed ^ from.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ to.rotate_left(32).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
}

async fn sleep(delay: Duration) {
    // A zero sleep still registers a timer and yields; perfect links skip it.
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::Instant;

    const MS: Duration = Duration::from_millis(1);
    /// Far longer than any test step takes.
    const LONG: Duration = Duration::from_secs(5);

    fn delayed(delay: Duration) -> Link {
        Link {
            delay,
            ..Link::default()
        }
    }

    fn lossy(loss: f64) -> Link {
        Link {
            loss,
            ..Link::default()
        }
    }

    // The server crate has no tokio `test-util`, so these run on real time:
    // delays are asserted as lower bounds, and "at once" as far below a
    // delay too long to be mistaken for it.

    #[tokio::test]
    async fn a_cut_fails_both_directions_at_once_without_running_the_call_and_heals() {
        let faults = LinkFaults::new(1);
        faults.set_both(1, 2, delayed(LONG)).unwrap();
        faults.cut(1, 2);
        let runs = AtomicUsize::new(0);
        let start = Instant::now();
        for (from, to) in [(1, 2), (2, 1)] {
            let result = faults
                .carry(from, to, async { runs.fetch_add(1, Ordering::SeqCst) })
                .await;
            assert_eq!(result, Err(LinkDown::Cut { from, to }));
        }
        assert!(start.elapsed() < LONG / 2, "{:?}", start.elapsed());
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        assert!(
            faults.carry(1, 3, async {}).await.is_ok(),
            "other links unaffected"
        );

        faults.heal(2, 1);
        assert_eq!(
            faults.link(1, 2),
            delayed(LONG),
            "the delay outlives the cut"
        );
        assert!(faults.admits(1, 2).is_ok() && faults.admits(2, 1).is_ok());
        faults.clear(1, 2);

        faults.cut(1, 2);
        faults.cut(3, 4);
        faults.heal_all();
        assert_eq!(
            faults.links(),
            vec![(2, 1, delayed(LONG))],
            "cut-only links vanish"
        );
        faults.clear_all();
        assert!(faults.links().is_empty());
    }

    #[tokio::test]
    async fn the_request_waits_its_link_delay_and_the_answer_the_reverse_one() {
        let faults = LinkFaults::new(1);
        faults.set(1, 2, delayed(40 * MS)).unwrap();
        faults.set(2, 1, delayed(10 * MS)).unwrap();
        let start = Instant::now();
        let ran_at = faults.carry(1, 2, async { Instant::now() }).await.unwrap();
        let answered = start.elapsed();
        assert!(ran_at - start >= 40 * MS, "ran after {:?}", ran_at - start);
        assert!(
            answered >= (ran_at - start) + 10 * MS,
            "answered after {answered:?}"
        );
        assert!(answered < LONG, "answered after {answered:?}");
    }

    #[tokio::test]
    async fn a_lost_rpc_fails_after_its_delay_and_a_cut_in_flight_drops_it() {
        let faults = LinkFaults::new(1);
        faults
            .set(
                1,
                2,
                Link {
                    delay: 40 * MS,
                    loss: 1.0,
                    ..Link::default()
                },
            )
            .unwrap();
        let start = Instant::now();
        let lost = faults.carry(1, 2, async { unreachable!("lost") }).await;
        assert_eq!(lost, Err::<(), _>(LinkDown::Lost { from: 1, to: 2 }));
        assert!(start.elapsed() >= 40 * MS, "{:?}", start.elapsed());

        faults.set(1, 2, delayed(40 * MS)).unwrap();
        let runs = AtomicUsize::new(0);
        // `join` polls in order: the request is in flight when the cut lands.
        let (in_flight, ()) = tokio::join!(
            faults.carry(1, 2, async { runs.fetch_add(1, Ordering::SeqCst) }),
            async { faults.cut(1, 2) }
        );
        assert_eq!(in_flight, Err(LinkDown::Cut { from: 1, to: 2 }));
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_one_way_cut_loses_the_answer_after_the_call_ran() {
        let faults = LinkFaults::new(1);
        faults
            .set(
                2,
                1,
                Link {
                    cut: true,
                    ..Link::default()
                },
            )
            .unwrap();
        let runs = AtomicUsize::new(0);
        let result = faults
            .carry(1, 2, async { runs.fetch_add(1, Ordering::SeqCst) })
            .await;
        assert_eq!(result, Err(LinkDown::Cut { from: 2, to: 1 }));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(faults.admits(1, 2).is_ok());
        assert!(faults.admits(2, 1).is_err());
    }

    async fn losses(faults: &LinkFaults, from: NodeId, to: NodeId, n: usize) -> Vec<bool> {
        let mut lost = Vec::with_capacity(n);
        for _ in 0..n {
            lost.push(faults.carry(from, to, async {}).await.is_err());
        }
        lost
    }

    #[tokio::test]
    async fn seeded_loss_replays_and_does_not_depend_on_other_links() {
        let a = LinkFaults::new(7);
        let b = LinkFaults::new(7);
        for faults in [&a, &b] {
            faults.set(1, 2, lossy(0.3)).unwrap();
            faults.set(1, 3, lossy(0.5)).unwrap();
        }
        let first = losses(&a, 1, 2, 200).await;
        // Traffic on another lossy link in between must not shift the draws.
        let _ = losses(&b, 1, 3, 37).await;
        let again = losses(&b, 1, 2, 200).await;
        assert_eq!(first, again, "seed {}", a.seed());
        let lost = first.iter().filter(|&&l| l).count();
        assert!((30..=90).contains(&lost), "lost {lost} of 200 at 30%");

        let other = LinkFaults::new(8);
        other.set(1, 2, lossy(0.3)).unwrap();
        assert_ne!(losses(&other, 1, 2, 200).await, first);
    }

    #[test]
    fn a_loss_that_is_not_a_probability_is_refused_by_value() {
        let faults = LinkFaults::new(1);
        for loss in [-0.1, 1.5, f64::NAN] {
            assert!(matches!(
                faults.set(1, 2, lossy(loss)),
                Err(InvalidLink::Loss(_))
            ));
        }
        assert!(faults.links().is_empty());
    }

    fn spec(text: &str) -> LinkSpec {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn link_specs_parse_and_print_back() {
        let s = spec("hz-sh=40ms~10ms,loss=1%");
        assert_eq!((s.from.as_str(), s.to.as_str(), s.both), ("hz", "sh", true));
        assert_eq!(s.link.delay, 40 * MS);
        assert_eq!(s.link.jitter, 10 * MS);
        assert!((s.link.loss - 0.01).abs() < 1e-12);
        assert_eq!(s.to_string(), "hz-sh=40ms~10ms,loss=1%");
        let one_way = spec("sh->hz=1.5s,cut");
        assert!(!one_way.both && one_way.link.cut);
        assert_eq!(one_way.link.delay, Duration::from_millis(1500));
        assert_eq!(spec("a-b=loss=0.5").link.loss, 0.5);
        assert_eq!(spec("a-b=perfect").link, Link::default());
        for (text, names) in [
            ("hz-sh", "FROM-TO=FAULTS"),
            ("us-east-sh=1ms", "two DC names"),
            ("hz-=1ms", "a DC name on each side"),
            ("hz-sh=40", "without a unit"),
            ("hz-sh=40min", "unit 'min'"),
            ("hz-sh=loss=150%", "not a probability"),
            ("hz-sh=loss=lots", "not a number"),
        ] {
            let e = text.parse::<LinkSpec>().unwrap_err().to_string();
            assert!(e.contains(names), "{text}: {e}");
        }
    }

    #[tokio::test]
    async fn dc_links_act_on_their_nodes_and_node_links_win() {
        let faults = LinkFaults::new(1);
        for (node, dc) in [(1, "hz"), (2, "hz"), (3, "sh")] {
            faults.set_dc(node, dc);
        }
        faults.apply(&spec("hz-sh=40ms")).unwrap();
        assert_eq!(faults.link(1, 3).delay, 40 * MS);
        assert_eq!(faults.link(3, 2).delay, 40 * MS);
        assert_eq!(faults.link(1, 2), Link::default(), "inside hz");
        assert_eq!(faults.link(1, 4), Link::default(), "DC unknown");

        faults.partition("hz", "sh");
        assert_eq!(faults.admits(3, 1), Err(LinkDown::Cut { from: 3, to: 1 }));
        assert!(faults.admits(2, 1).is_ok());
        faults.heal_dcs("sh", "hz");
        assert_eq!(faults.link(1, 3), delayed(40 * MS), "the latency stays");

        faults.set(1, 3, Link::default()).unwrap();
        assert_eq!(faults.link(1, 3), delayed(40 * MS), "perfect = follow DCs");
        faults.set(1, 3, lossy(0.5)).unwrap();
        assert_eq!(faults.link(1, 3), lossy(0.5));

        faults.pause(2);
        assert!(faults.link(1, 2).cut && faults.link(2, 3).cut);
        faults.heal_all();
        assert!(!faults.link(1, 2).cut);
        assert_eq!(faults.dc_links().len(), 2);
    }

    #[tokio::test]
    async fn jitter_spreads_delays_around_the_latency_and_replays() {
        let draw = |seed| {
            let faults = LinkFaults::new(seed);
            faults
                .set(
                    1,
                    2,
                    Link {
                        delay: 40 * MS,
                        jitter: 10 * MS,
                        ..Link::default()
                    },
                )
                .unwrap();
            (0..200)
                .map(|_| faults.send(1, 2).unwrap().0)
                .collect::<Vec<_>>()
        };
        let delays = draw(3);
        assert!(delays.iter().all(|d| (30 * MS..=50 * MS).contains(d)));
        assert!(delays.iter().any(|d| *d < 35 * MS) && delays.iter().any(|d| *d > 45 * MS));
        assert_eq!(delays, draw(3));
        assert_ne!(delays, draw(4));
    }
}
