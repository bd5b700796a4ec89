//! What a call through the cluster layer can fail with. Each error names
//! what happened: which router left nothing and why, which phase timed
//! out, which limit refused, whether the retry budget ran dry.

use std::time::Duration;

use thiserror::Error;

/// How the caller's own call failed. This decides what may be retried: a
/// call that never reached a provider may always be retried; one that may
/// have reached it only when it is idempotent; a provider's answer never.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CallFailure {
    /// The request provably never reached the provider: the connection was
    /// refused or reset before the request was written.
    #[error("not sent: {message}")]
    NotSent {
        /// What the transport said.
        message: String,
    },
    /// The transport failed after the request may have been written.
    #[error("transport failure: {message}")]
    Transport {
        /// What the transport said.
        message: String,
    },
    /// The provider answered with an error: retrying elsewhere would not
    /// change the answer.
    #[error("application error: {message}")]
    Application {
        /// The provider's error.
        message: String,
    },
}

/// Which part of a call ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// An attempt in the caller's own zone (zone-aware strategy).
    Local,
    /// The cross-zone attempt (zone-aware strategy).
    CrossZone,
    /// An attempt of any other strategy.
    Attempt,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Local => "local-zone attempt",
            Phase::CrossZone => "cross-zone attempt",
            Phase::Attempt => "attempt",
        })
    }
}

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Too many calls of the method in flight for longer than the timeout.
    Concurrency {
        /// The limit.
        max: usize,
    },
    /// Too many calls of the method within the window.
    Rate {
        /// Calls allowed per window.
        permits: u32,
        /// The window.
        per: Duration,
    },
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitKind::Concurrency { max } => write!(f, "more than {max} calls in flight"),
            LimitKind::Rate { permits, per } => write!(f, "more than {permits} calls per {per:?}"),
        }
    }
}

/// Why a call through the cluster layer failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClusterError {
    /// No instance was left to call; `reason` says which step left none
    /// and why (e.g. the zone router in strict mode, or an empty list).
    #[error("no provider available for {service} ({method}): {reason}")]
    NoProvider {
        /// The service.
        service: String,
        /// The method.
        method: String,
        /// Which router or filter left nothing, and why.
        reason: String,
    },
    /// An attempt ran out of time.
    #[error("{phase} of {method} on {instance} timed out after {after:?}")]
    Timeout {
        /// The method.
        method: String,
        /// The instance called.
        instance: String,
        /// Which attempt.
        phase: Phase,
        /// The attempt's timeout.
        after: Duration,
    },
    /// Every instance left after routing has its circuit breaker open.
    #[error("circuit open for {service} ({method}): all {open} instances left are ejected")]
    CircuitOpen {
        /// The service.
        service: String,
        /// The method.
        method: String,
        /// How many instances are open.
        open: usize,
    },
    /// The whole call's deadline passed before any attempt answered; the
    /// attempt in flight then was abandoned.
    #[error("{method} did not finish within its deadline of {deadline:?}")]
    DeadlineExceeded {
        /// The method.
        method: String,
        /// The deadline.
        deadline: Duration,
    },
    /// A consumer-side limit refused the call.
    #[error("limit exceeded for {method}: {limit}")]
    LimitExceeded {
        /// The method.
        method: String,
        /// Which limit.
        limit: LimitKind,
    },
    /// A retry was needed but the retry budget is spent; `last` is the
    /// failure that would have been retried.
    #[error("retry budget exhausted for {method}; last failure: {last}")]
    BudgetExhausted {
        /// The method.
        method: String,
        /// The failure that was not retried.
        last: Box<ClusterError>,
    },
    /// The caller's call failed.
    #[error("{method} on {instance} failed: {failure}")]
    Failed {
        /// The method.
        method: String,
        /// The instance called.
        instance: String,
        /// How it failed.
        failure: CallFailure,
    },
}

impl ClusterError {
    /// Whether the failed attempt provably never reached a provider.
    pub fn never_reached_provider(&self) -> bool {
        match self {
            ClusterError::Failed { failure, .. } => matches!(failure, CallFailure::NotSent { .. }),
            ClusterError::NoProvider { .. }
            | ClusterError::CircuitOpen { .. }
            | ClusterError::LimitExceeded { .. } => true,
            ClusterError::Timeout { .. } | ClusterError::DeadlineExceeded { .. } => false,
            ClusterError::BudgetExhausted { last, .. } => last.never_reached_provider(),
        }
    }

    /// Whether the failure is the provider's own answer.
    pub fn is_application(&self) -> bool {
        match self {
            ClusterError::Failed { failure, .. } => {
                matches!(failure, CallFailure::Application { .. })
            }
            ClusterError::BudgetExhausted { last, .. } => last.is_application(),
            _ => false,
        }
    }

    /// Whether it is a timeout.
    pub fn is_timeout(&self) -> bool {
        match self {
            ClusterError::Timeout { .. } | ClusterError::DeadlineExceeded { .. } => true,
            ClusterError::BudgetExhausted { last, .. } => last.is_timeout(),
            _ => false,
        }
    }
}
