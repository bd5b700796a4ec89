//! Load balancers. (Skeleton: to be written.)

use rand::rngs::StdRng;
use tokio::time::Instant;

use super::{Invocation, Target};

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

/// Skeleton.
#[derive(Debug, Default)]
pub struct WeightedRandom;

impl WeightedRandom {
    /// Skeleton.
    pub fn new() -> Self {
        Self
    }
}

impl LoadBalance for WeightedRandom {
    fn name(&self) -> &'static str {
        "random"
    }

    fn pick(&self, targets: &[Target], _i: &Invocation, cx: &mut PickContext<'_>) -> usize {
        use rand::RngExt;
        cx.rng.random_range(0..targets.len())
    }
}
