//! Load balancers: each picks one target of the non-empty list the routers
//! left, using the targets' weights (ramped up over a warm-up, as Dubbo
//! does) and statistics, the invocation, an injected seedable RNG and an
//! injected `now`. They follow Dubbo's balancers (weighted random, smooth
//! weighted round robin, least active, shortest response, consistent hash
//! on an MD5 ring) plus tower's power of two choices over a peak EWMA, and
//! a zone-first least active. A balancer only chooses: it never calls,
//! never awaits, never reads a clock or a global RNG, and never fails; the
//! state some of them keep (round-robin counters, hash rings) sits behind a
//! plain mutex held for the pick alone.
//!
//! Weights: a target's Nacos weight, with anything that is not a finite
//! positive number counted as 0, ramped up by
//! [`InstanceStats::effective_weight`](super::stats::InstanceStats::effective_weight).
//! A target of weight 0 is never picked unless every target has weight 0;
//! then they all count the same.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use md5::{Digest, Md5};
use rand::rngs::StdRng;
use rand::RngExt;
use tokio::time::Instant;

use super::{Invocation, Target};

/// Dubbo's default warm-up: a new instance reaches its full weight ten
/// minutes after it appeared.
pub const DEFAULT_WARMUP: Duration = Duration::from_secs(10 * 60);

/// How long round robin remembers an instance it no longer sees (Dubbo's
/// `RECYCLE_PERIOD`), so removed instances do not leak.
pub const ROUND_ROBIN_RECYCLE: Duration = Duration::from_secs(60);

/// Dubbo's default number of points per instance on a consistent-hash ring.
pub const DEFAULT_VIRTUAL_NODES: usize = 160;

/// The largest weight honoured. Nacos caps weights at 10 000; the cap keeps
/// sums finite and round-robin integers far from overflow whatever a
/// corrupt entry says.
const MAX_WEIGHT: f64 = 1e9;

/// Round robin works on weights × 1000 in integers, so its sequence is
/// exact and does not drift with float rounding.
const ROUND_ROBIN_SCALE: f64 = 1000.0;

/// What a balancer may use besides the targets and the invocation.
#[derive(Debug)]
pub struct PickContext<'a> {
    /// The time of the pick (tokio's clock, so tests may pause it).
    pub now: Instant,
    /// The cluster's RNG, seedable.
    pub rng: &'a mut StdRng,
    /// The caller's zone, if known.
    pub local_zone: Option<&'a str>,
}

/// Picks one target of a non-empty slice.
pub trait LoadBalance: Send + Sync + std::fmt::Debug {
    /// The balancer's name, for spans and metrics.
    fn name(&self) -> &'static str;

    /// The index in `targets` (never empty) of the target to call.
    fn pick(&self, targets: &[Target], invocation: &Invocation, cx: &mut PickContext<'_>) -> usize;
}

/// `new()` with Dubbo's ten-minute warm-up, `warmup(d)` and `Default`, for
/// the balancers whose only setting is their warm-up.
macro_rules! warm_up_settings {
    ($($balancer:ident),*) => {$(
        impl $balancer {
            /// A balancer with Dubbo's ten-minute warm-up.
            pub fn new() -> Self {
                Self {
                    warmup: DEFAULT_WARMUP,
                }
            }

            /// Sets the warm-up (zero turns it off).
            pub fn warmup(mut self, warmup: Duration) -> Self {
                self.warmup = warmup;
                self
            }
        }

        impl Default for $balancer {
            fn default() -> Self {
                Self::new()
            }
        }
    )*};
}

warm_up_settings!(
    WeightedRandom,
    LeastActive,
    ShortestResponse,
    ZoneFirstLeastActive
);

/// Dubbo's `random`: a weighted random pick. When every weight is the same
/// it is a plain uniform pick; otherwise an offset in `[0, total)` is walked
/// down the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedRandom {
    /// How long a new instance takes to reach its full weight.
    pub warmup: Duration,
}

impl LoadBalance for WeightedRandom {
    fn name(&self) -> &'static str {
        "random"
    }

    fn pick(&self, targets: &[Target], _: &Invocation, cx: &mut PickContext<'_>) -> usize {
        let weights = weights(targets, self.warmup, cx.now);
        weighted_pick(&eligible(&weights), &weights, cx.rng)
    }
}

/// Dubbo's `roundrobin`: smooth weighted round robin, as nginx does it.
/// On each pick every target's counter grows by its weight, the largest
/// counter wins (the first in slice order on a tie) and gives back the
/// total, so weights 5/1/1 give `a a b a c a a` rather than `a a a a a b c`.
///
/// Counters are kept per method and address; one not seen for
/// [`ROUND_ROBIN_RECYCLE`] is forgotten.
#[derive(Debug)]
pub struct RoundRobin {
    /// How long a new instance takes to reach its full weight.
    pub warmup: Duration,
    /// Method -> address -> counter.
    counters: Mutex<HashMap<String, HashMap<String, Counter>>>,
}

#[derive(Debug, Clone, Copy)]
struct Counter {
    current: i64,
    seen: Instant,
}

impl RoundRobin {
    /// A round-robin balancer with Dubbo's ten-minute warm-up.
    pub fn new() -> Self {
        Self {
            warmup: DEFAULT_WARMUP,
            counters: Mutex::default(),
        }
    }

    /// Sets the warm-up (zero turns it off).
    pub fn warmup(mut self, warmup: Duration) -> Self {
        self.warmup = warmup;
        self
    }
}

impl Default for RoundRobin {
    fn default() -> Self {
        Self::new()
    }
}

impl LoadBalance for RoundRobin {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn pick(&self, targets: &[Target], invocation: &Invocation, cx: &mut PickContext<'_>) -> usize {
        let weights = weights(targets, self.warmup, cx.now);
        let any_positive = weights.iter().any(|w| *w > 0.0);
        let mut all = lock(&self.counters);
        let counters = all.entry(invocation.method.clone()).or_default();

        let mut total: i64 = 0;
        let mut counted = 0;
        let mut best: Option<(usize, i64)> = None;
        for (i, target) in targets.iter().enumerate() {
            let weight = if any_positive {
                scaled(weights[i])
            } else {
                // All weights are 0: they all count the same.
                scaled(1.0)
            };
            if weight == 0 {
                continue;
            }
            counted += 1;
            // Unlike Dubbo, a changed weight (as during warm-up) keeps the
            // counter: over a stable list the counters still sum to zero
            // after every pick, so a ramping instance gets no burst.
            let counter = counters.entry(target.address()).or_insert(Counter {
                current: 0,
                seen: cx.now,
            });
            counter.current = counter.current.saturating_add(weight);
            counter.seen = cx.now;
            total = total.saturating_add(weight);
            if best.is_none_or(|(_, current)| counter.current > current) {
                best = Some((i, counter.current));
            }
        }
        let picked = best.map_or(0, |(i, _)| i);
        if let Some(counter) = counters.get_mut(&targets[picked].address()) {
            counter.current = counter.current.saturating_sub(total);
        }
        if counters.len() > counted {
            let now = cx.now;
            counters.retain(|_, c| now.saturating_duration_since(c.seen) <= ROUND_ROBIN_RECYCLE);
        }
        picked
    }
}

/// Dubbo's `leastactive`: the target with the fewest calls in flight; a tie
/// is broken by a weighted random pick among the tied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeastActive {
    /// How long a new instance takes to reach its full weight.
    pub warmup: Duration,
}

impl LoadBalance for LeastActive {
    fn name(&self) -> &'static str {
        "leastactive"
    }

    fn pick(&self, targets: &[Target], _: &Invocation, cx: &mut PickContext<'_>) -> usize {
        let weights = weights(targets, self.warmup, cx.now);
        least_active(targets, &eligible(&weights), &weights, cx.rng)
    }
}

/// Dubbo's `shortestresponse`: the target whose average successful latency
/// over the last [`RESPONSE_WINDOW`] times its calls in flight plus one is
/// the smallest, that is the one expected to answer first; a tie is broken
/// by a weighted random pick. A target with no successful call in the
/// window counts as instant, so a new instance gets tried, and so does one
/// that was slow once and has not been called since.
///
/// [`RESPONSE_WINDOW`]: super::stats::RESPONSE_WINDOW
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortestResponse {
    /// How long a new instance takes to reach its full weight (for ties).
    pub warmup: Duration,
}

impl LoadBalance for ShortestResponse {
    fn name(&self) -> &'static str {
        "shortestresponse"
    }

    fn pick(&self, targets: &[Target], _: &Invocation, cx: &mut PickContext<'_>) -> usize {
        let weights = weights(targets, self.warmup, cx.now);
        let candidates = eligible(&weights);
        // Each estimate is read once, so a count moving under us cannot
        // make the minimum and the tie disagree.
        let estimates: Vec<u128> = candidates
            .iter()
            .map(|&i| {
                let stats = &targets[i].stats;
                let latency = stats
                    .recent_success_latency(cx.now)
                    .unwrap_or_default()
                    .as_nanos();
                latency.saturating_mul(u128::from(stats.active()) + 1)
            })
            .collect();
        let Some(&shortest) = estimates.iter().min() else {
            return 0;
        };
        let tied: Vec<usize> = candidates
            .iter()
            .zip(&estimates)
            .filter(|(_, e)| **e == shortest)
            .map(|(i, _)| *i)
            .collect();
        weighted_pick(&tied, &weights, cx.rng)
    }
}

/// Dubbo's `consistenthash`: a ring of MD5 points, [`DEFAULT_VIRTUAL_NODES`]
/// per instance address (`ip:port`), and the call goes to the first point
/// clockwise of the MD5 of the chosen arguments, so the same arguments go
/// to the same instance and adding or removing one instance moves only
/// about `1/N` of the keys. The ring is built exactly as Dubbo builds it,
/// so a Dubbo consumer and this one agree on where a key goes.
///
/// Weights and statistics play no part, except that an instance of weight
/// 0 is left off the ring (unless all are). The ring is cached per method
/// and rebuilt only when the set of addresses changes.
#[derive(Debug)]
pub struct ConsistentHash {
    virtual_nodes: usize,
    arguments: Vec<usize>,
    /// Method -> the ring last built for it.
    rings: Mutex<HashMap<String, Arc<Ring>>>,
}

/// A hash ring over a sorted, deduplicated list of addresses.
#[derive(Debug)]
struct Ring {
    /// `(ip, port)`, sorted: the identity of the list the ring was built for.
    nodes: Vec<(String, u16)>,
    /// Point -> index in `nodes`.
    points: BTreeMap<u32, usize>,
}

impl ConsistentHash {
    /// A ring of 160 points per instance hashing the first argument.
    pub fn new() -> Self {
        Self {
            virtual_nodes: DEFAULT_VIRTUAL_NODES,
            arguments: vec![0],
            rings: Mutex::default(),
        }
    }

    /// Sets the number of points per instance (Dubbo's `hash.nodes`),
    /// rounded down to a multiple of 4, at least 4.
    pub fn virtual_nodes(mut self, virtual_nodes: usize) -> Self {
        self.virtual_nodes = virtual_nodes;
        // Rings built with the old count would be stale.
        self.rings = Mutex::default();
        self
    }

    /// Sets which arguments are hashed, by index into the invocation's
    /// arguments (Dubbo's `hash.arguments`); indexes past the end are
    /// skipped.
    pub fn arguments(mut self, arguments: impl IntoIterator<Item = usize>) -> Self {
        self.arguments = arguments.into_iter().collect();
        self
    }

    /// The key of a call: the chosen arguments concatenated, as Dubbo's
    /// `toKey` does (without a separator, to stay on Dubbo's ring).
    fn key(&self, invocation: &Invocation) -> String {
        self.arguments
            .iter()
            .filter_map(|&i| invocation.arguments.get(i))
            .map(String::as_str)
            .collect()
    }

    /// The ring for `method` over `nodes`: the cached one if it was built
    /// for the same addresses, else a new one.
    fn ring(&self, method: &str, nodes: &[(&str, u16)]) -> Arc<Ring> {
        if let Some(ring) = lock(&self.rings).get(method) {
            if ring.is_over(nodes) {
                return Arc::clone(ring);
            }
        }
        // Built outside the lock: hashing 160 points per instance should not
        // hold up picks of other methods.
        let ring = Arc::new(Ring::build(nodes, self.virtual_nodes));
        lock(&self.rings).insert(method.to_owned(), Arc::clone(&ring));
        ring
    }
}

impl Default for ConsistentHash {
    fn default() -> Self {
        Self::new()
    }
}

impl Ring {
    fn build(nodes: &[(&str, u16)], virtual_nodes: usize) -> Self {
        let mut points = BTreeMap::new();
        for (n, (ip, port)) in nodes.iter().enumerate() {
            for i in 0..(virtual_nodes / 4).max(1) {
                let digest = md5(&format!("{ip}:{port}{i}"));
                for h in 0..4 {
                    points.insert(point(&digest, h), n);
                }
            }
        }
        Self {
            nodes: nodes
                .iter()
                .map(|(ip, port)| ((*ip).to_owned(), *port))
                .collect(),
            points,
        }
    }

    fn is_over(&self, nodes: &[(&str, u16)]) -> bool {
        self.nodes.len() == nodes.len()
            && self
                .nodes
                .iter()
                .zip(nodes)
                .all(|((a, p), (b, q))| a == b && p == q)
    }

    /// The node owning `point`: the first at or after it, wrapping round.
    fn owner(&self, point: u32) -> Option<&(String, u16)> {
        self.points
            .range(point..)
            .next()
            .or_else(|| self.points.iter().next())
            .and_then(|(_, &n)| self.nodes.get(n))
    }
}

impl LoadBalance for ConsistentHash {
    fn name(&self) -> &'static str {
        "consistenthash"
    }

    fn pick(&self, targets: &[Target], invocation: &Invocation, _: &mut PickContext<'_>) -> usize {
        // Only the configured weight's sign matters here: warm-up never
        // takes a positive weight to 0, and a ring that moved with weights
        // would move keys.
        let configured: Vec<f64> = targets
            .iter()
            .map(|t| sanitize(t.instance.weight))
            .collect();
        let candidates = eligible(&configured);
        let mut nodes: Vec<(&str, u16)> = candidates
            .iter()
            .map(|&i| (targets[i].instance.ip.as_str(), targets[i].instance.port))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let ring = self.ring(&invocation.method, &nodes);
        let key = point(&md5(&self.key(invocation)), 0);
        let Some((ip, port)) = ring.owner(key) else {
            return candidates.first().copied().unwrap_or(0);
        };
        candidates
            .iter()
            .copied()
            .find(|&i| targets[i].instance.ip == *ip && targets[i].instance.port == *port)
            .or_else(|| candidates.first().copied())
            .unwrap_or(0)
    }
}

/// Power of two choices over a peak EWMA of latency, as tower's
/// `balance::p2c` with `PeakEwma`: two distinct targets drawn at random,
/// and the one with the lower peak EWMA times calls in flight plus one
/// wins (the first drawn on a tie). It avoids slow instances without
/// herding every caller onto the single fastest one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeakEwmaP2c;

impl PeakEwmaP2c {
    /// The cost of sending one more call to `target`.
    fn cost(target: &Target, now: Instant) -> f64 {
        target.stats.peak_ewma(now) * (f64::from(target.stats.active()) + 1.0)
    }
}

impl LoadBalance for PeakEwmaP2c {
    fn name(&self) -> &'static str {
        "p2c"
    }

    fn pick(&self, targets: &[Target], _: &Invocation, cx: &mut PickContext<'_>) -> usize {
        let configured: Vec<f64> = targets
            .iter()
            .map(|t| sanitize(t.instance.weight))
            .collect();
        let candidates = eligible(&configured);
        match candidates.len() {
            0 => 0,
            1 => candidates[0],
            n => {
                let a = cx.rng.random_range(0..n);
                // Drawn from the other n - 1, so the two always differ.
                let mut b = cx.rng.random_range(0..n - 1);
                if b >= a {
                    b += 1;
                }
                let (a, b) = (candidates[a], candidates[b]);
                if Self::cost(&targets[a], cx.now) <= Self::cost(&targets[b], cx.now) {
                    a
                } else {
                    b
                }
            }
        }
    }
}

/// Least active within the caller's zone: the targets in
/// [`PickContext::local_zone`] if there are any, else all of them, then
/// [`LeastActive`]'s rule. Zone routers decide *whether* to cross zones
/// (with thresholds and reasons); this is the simple preference for a
/// cluster without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneFirstLeastActive {
    /// How long a new instance takes to reach its full weight.
    pub warmup: Duration,
}

impl LoadBalance for ZoneFirstLeastActive {
    fn name(&self) -> &'static str {
        "zonefirst"
    }

    fn pick(&self, targets: &[Target], _: &Invocation, cx: &mut PickContext<'_>) -> usize {
        let weights = weights(targets, self.warmup, cx.now);
        let candidates = eligible(&weights);
        let local: Vec<usize> = match cx.local_zone.filter(|z| !z.is_empty()) {
            Some(zone) => candidates
                .iter()
                .copied()
                .filter(|&i| targets[i].zone() == zone)
                .collect(),
            None => Vec::new(),
        };
        let pool = if local.is_empty() {
            &candidates
        } else {
            &local
        };
        least_active(targets, pool, &weights, cx.rng)
    }
}

/// A configured weight as balancers use it: not a finite positive number
/// counts as 0 (a corrupt entry must not take all the traffic), and very
/// large ones are capped.
fn sanitize(weight: f64) -> f64 {
    if weight.is_finite() && weight > 0.0 {
        weight.min(MAX_WEIGHT)
    } else {
        0.0
    }
}

/// Every target's weight at `now`, warm-up included.
fn weights(targets: &[Target], warmup: Duration, now: Instant) -> Vec<f64> {
    targets
        .iter()
        .map(|t| {
            sanitize(
                t.stats
                    .effective_weight(sanitize(t.instance.weight), warmup, now),
            )
        })
        .collect()
}

/// The indexes of the targets that may be picked: those of positive
/// weight, or all of them when none has one.
fn eligible(weights: &[f64]) -> Vec<usize> {
    let positive: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0).collect();
    if positive.is_empty() {
        (0..weights.len()).collect()
    } else {
        positive
    }
}

/// Dubbo's weighted random pick among `candidates`: uniform when their
/// weights are all the same (or all 0), else an offset in `[0, total)`
/// walked down the list.
fn weighted_pick(candidates: &[usize], weights: &[f64], rng: &mut StdRng) -> usize {
    let Some(&first) = candidates.first() else {
        return 0;
    };
    let total: f64 = candidates.iter().map(|&i| weights[i]).sum();
    let same = candidates.iter().all(|&i| weights[i] == weights[first]);
    if same || total <= 0.0 {
        return candidates[rng.random_range(0..candidates.len())];
    }
    let mut offset = rng.random_range(0.0..total);
    for &i in candidates {
        offset -= weights[i];
        if offset < 0.0 {
            return i;
        }
    }
    // Float rounding can leave the offset at 0 after the whole walk: the
    // draw was at the very end, which belongs to the last weighted one.
    candidates
        .iter()
        .rev()
        .copied()
        .find(|&i| weights[i] > 0.0)
        .unwrap_or(first)
}

/// Dubbo's least active among `candidates`, ties by weighted random.
fn least_active(
    targets: &[Target],
    candidates: &[usize],
    weights: &[f64],
    rng: &mut StdRng,
) -> usize {
    // Each count is read once, so a call starting under us cannot make the
    // minimum and the tie disagree.
    let active: Vec<u32> = candidates
        .iter()
        .map(|&i| targets[i].stats.active())
        .collect();
    let Some(&least) = active.iter().min() else {
        return 0;
    };
    let tied: Vec<usize> = candidates
        .iter()
        .zip(&active)
        .filter(|(_, a)| **a == least)
        .map(|(i, _)| *i)
        .collect();
    weighted_pick(&tied, weights, rng)
}

/// A weight as a round-robin integer; a positive weight is at least 1, so
/// a tiny one still gets its turn.
fn scaled(weight: f64) -> i64 {
    if weight > 0.0 {
        // `as` saturates, and the weight is capped, so this cannot wrap.
        ((weight * ROUND_ROBIN_SCALE).round() as i64).max(1)
    } else {
        0
    }
}

fn md5(text: &str) -> [u8; 16] {
    Md5::digest(text.as_bytes()).into()
}

/// Dubbo's `hash(digest, h)`: the `h`-th 4-byte slice of an MD5 digest,
/// little-endian.
fn point(digest: &[u8; 16], h: usize) -> u32 {
    let at = h * 4;
    u32::from_le_bytes([digest[at], digest[at + 1], digest[at + 2], digest[at + 3]])
}

/// The balancers' state is counters and rings: a panic elsewhere while
/// holding the lock leaves them usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
