//! The call network: the links consumers' calls to providers cross,
//! separate from the registry's raft links. Per pair of zones (a
//! same-zone pair such as `hz-hz` included) a latency, a jitter and a
//! loss, in the raft links' syntax (`hz-sh=10ms~5ms,loss=0.1%`). A lost
//! packet is not an instant failure: it costs a TCP retransmission, at
//! least 200 ms and doubling on each further loss of the same packet. A
//! cut link delivers nothing: the packet waits until the caller gives
//! up.
//!
//! Draws come from one RNG per directed zone pair, seeded from the
//! scenario's seed and the pair's names, so the n-th packet on a pair
//! gets the same fate in every run with that seed, whatever the other
//! pairs carry. The first draws of every lossy pair are kept as its loss
//! pattern for the report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use understudy_server::faults::{Link, LinkSpec};

/// The least a retransmission costs (Linux's minimum RTO).
pub const MIN_RTO: Duration = Duration::from_millis(200);

/// How many draws of each pair the loss pattern keeps.
pub const PATTERN_DRAWS: usize = 128;

/// One packet's way across a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passage {
    /// It arrives after this long, retransmissions included.
    After(Duration),
    /// The link is cut: it never arrives.
    Cut,
}

#[derive(Debug)]
struct Pair {
    link: Link,
    rng: StdRng,
    /// `x` lost, `.` through, for the first draws.
    pattern: String,
}

#[derive(Debug)]
struct State {
    seed: u64,
    pairs: BTreeMap<(String, String), Pair>,
}

/// The call network's links and their draws. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CallNet {
    state: Arc<Mutex<State>>,
}

/// A seed for the pair `from -> to`: FNV-1a of the names over the
/// scenario's seed, so a pair's draws do not depend on which pairs exist.
fn pair_seed(seed: u64, from: &str, to: &str) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ seed;
    for byte in from.bytes().chain([b'>']).chain(to.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl CallNet {
    /// A perfect network whose draws are seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                seed,
                pairs: BTreeMap::new(),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets a link (both ways for `A-B`); the pair keeps its draws.
    pub fn apply(&self, spec: &LinkSpec) {
        let mut state = self.lock();
        let seed = state.seed;
        let mut set = |from: &str, to: &str| {
            state
                .pairs
                .entry((from.to_owned(), to.to_owned()))
                .or_insert_with(|| Pair {
                    link: Link::default(),
                    rng: StdRng::seed_from_u64(pair_seed(seed, from, to)),
                    pattern: String::new(),
                })
                .link = spec.link;
        };
        set(&spec.from, &spec.to);
        if spec.both && spec.from != spec.to {
            set(&spec.to, &spec.from);
        }
    }

    /// The link from `from` to `to` (perfect unless set).
    pub fn link(&self, from: &str, to: &str) -> Link {
        self.lock()
            .pairs
            .get(&(from.to_owned(), to.to_owned()))
            .map(|p| p.link)
            .unwrap_or_default()
    }

    /// One packet from zone `from` to zone `to`.
    pub fn send(&self, from: &str, to: &str) -> Passage {
        let mut state = self.lock();
        let Some(pair) = state.pairs.get_mut(&(from.to_owned(), to.to_owned())) else {
            return Passage::After(Duration::ZERO);
        };
        let link = pair.link;
        if link.cut {
            return Passage::Cut;
        }
        let mut delay = link.delay;
        if !link.jitter.is_zero() {
            let spread = link.jitter.as_secs_f64();
            let offset = pair.rng.random_range(-spread..=spread);
            delay = Duration::from_secs_f64((delay.as_secs_f64() + offset).max(0.0));
        }
        if link.loss > 0.0 {
            let mut rto = MIN_RTO.max(2 * link.delay);
            loop {
                let lost = pair.rng.random_bool(link.loss.min(1.0));
                if pair.pattern.len() < PATTERN_DRAWS {
                    pair.pattern.push(if lost { 'x' } else { '.' });
                }
                if !lost {
                    break;
                }
                delay += rto;
                rto *= 2;
            }
        }
        Passage::After(delay)
    }

    /// Each lossy pair's first draws, `from->to` to pattern.
    pub fn loss_patterns(&self) -> BTreeMap<String, String> {
        self.lock()
            .pairs
            .iter()
            .filter(|(_, p)| !p.pattern.is_empty())
            .map(|((from, to), p)| (format!("{from}->{to}"), p.pattern.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> LinkSpec {
        text.parse().unwrap()
    }

    #[test]
    fn an_unset_pair_is_perfect_and_a_set_one_goes_both_ways() {
        let net = CallNet::new(1);
        assert_eq!(net.send("hz", "sh"), Passage::After(Duration::ZERO));
        net.apply(&spec("hz-sh=20ms"));
        net.apply(&spec("hz-hz=1ms"));
        assert_eq!(
            net.send("hz", "sh"),
            Passage::After(Duration::from_millis(20))
        );
        assert_eq!(
            net.send("sh", "hz"),
            Passage::After(Duration::from_millis(20))
        );
        assert_eq!(
            net.send("hz", "hz"),
            Passage::After(Duration::from_millis(1))
        );
        net.apply(&spec("sh->hz=cut"));
        assert_eq!(net.send("sh", "hz"), Passage::Cut);
        assert_eq!(
            net.send("hz", "sh"),
            Passage::After(Duration::from_millis(20))
        );
    }

    #[test]
    fn a_lost_packet_costs_retransmissions_that_double() {
        let net = CallNet::new(7);
        net.apply(&spec("hz-sh=10ms,loss=50%"));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let Passage::After(d) = net.send("hz", "sh") else {
                panic!("not cut")
            };
            seen.insert(d.as_millis());
        }
        // 10 ms, then + 200, + 400, + 800 ... for each further loss.
        for expected in [10, 210, 610, 1410] {
            assert!(seen.contains(&expected), "{seen:?}");
        }
        // Nothing else: 10 + 200 × (2^k − 1) for k losses.
        assert!(
            seen.iter()
                .all(|ms| ((ms - 10) / 200 + 1).is_power_of_two() && (ms - 10) % 200 == 0),
            "{seen:?}"
        );
    }

    #[test]
    fn one_seed_gives_the_same_draws_on_each_pair_whatever_else_is_sent() {
        let draws = |seed: u64, noise: bool| {
            let net = CallNet::new(seed);
            net.apply(&spec("hz-sh=10ms~5ms,loss=10%"));
            net.apply(&spec("hz-bj=30ms,loss=20%"));
            let mut out = Vec::new();
            for i in 0..100 {
                if noise && i % 3 == 0 {
                    net.send("hz", "bj");
                }
                out.push(net.send("hz", "sh"));
            }
            (out, net.loss_patterns()["hz->sh"].clone())
        };
        assert_eq!(draws(5, false), draws(5, true));
        assert_ne!(draws(5, false).1, draws(6, false).1);
    }
}
