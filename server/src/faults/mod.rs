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
//!
//! `spec.rs` reads and writes the settings (`hz-sh=40ms~10ms,loss=1%`);
//! this module holds the live model that the raft transport, the push
//! fan-out, the apply path, config reads and the sim consult.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::member::NodeId;

mod kills;
mod spec;
#[cfg(test)]
mod tests;

pub use kills::{KillRefused, KillRequest};
pub use spec::{
    parse_apply_delay, parse_duration, parse_faults, InvalidApplyDelay, InvalidDuration,
    InvalidFaults, InvalidLink, Link, LinkSpec,
};

/// How many loss draws of each link [`LinkFaults::loss_patterns`] keeps.
pub const PATTERN_DRAWS: usize = 256;

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
/// the admin API shows (as JSON) and what a node hands its peers when it
/// changes (as the peer service's `FaultState` message).
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
    /// Config read lags by DC, ms: for this long after a config is
    /// written, that DC's nodes answer reads of it as before the write.
    pub config_read_lags_ms: BTreeMap<String, u64>,
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
    /// Where kill requests go: the runner of the nodes, if one took them.
    kills: Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<KillRequest>>>>,
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
    /// Per-DC time a config write stays unseen by formal reads.
    config_read_lags: BTreeMap<String, Duration>,
}

/// Faults on the pushes a DC's nodes send their Nacos subscribers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PushFault {
    /// Every push waits this long before it is sent.
    #[serde(with = "spec::millis", rename = "delayMs")]
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
                config_read_lags: BTreeMap::new(),
            })),
            push_faulted: Arc::new(AtomicBool::new(false)),
            kills: Arc::new(Mutex::new(None)),
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
    /// delays, push faults and config read lags.
    pub fn clear_all(&self) {
        let mut faults = self.lock();
        faults.links.clear();
        faults.dc_links.clear();
        faults.paused.clear();
        faults.apply_delays.clear();
        faults.push_faults.clear();
        faults.config_read_lags.clear();
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
            config_read_lags_ms: faults
                .config_read_lags
                .iter()
                .map(|(dc, d)| (dc.clone(), d.as_millis() as u64))
                .collect(),
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
        faults.config_read_lags = state
            .config_read_lags_ms
            .iter()
            .filter(|(_, ms)| **ms > 0)
            .map(|(dc, ms)| (dc.clone(), Duration::from_millis(*ms)))
            .collect();
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

    /// Sets DC `dc`'s config read lag (zero removes it): for `lag` after a
    /// node of that DC applies a config write, its formal reads of that
    /// config answer as before the write, as Nacos' reads do until its
    /// asynchronous dump catches up.
    pub fn set_config_read_lag(&self, dc: &str, lag: Duration) {
        let mut faults = self.lock();
        if lag.is_zero() {
            faults.config_read_lags.remove(dc);
        } else {
            faults.config_read_lags.insert(dc.to_owned(), lag);
        }
    }

    /// DC `dc`'s config read lag.
    pub fn config_read_lag(&self, dc: &str) -> Duration {
        self.lock()
            .config_read_lags
            .get(dc)
            .copied()
            .unwrap_or_default()
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
