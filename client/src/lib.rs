//! understudy-client: the consumer side of a multi-DC deployment.
//!
//! Component map (filled by later work, see DESIGN "Client"):
//! - session: server endpoints preferring the local DC, failover, backoff,
//!   re-registration and watch resume after reconnect;
//! - directory: the live instance list of one service, one writer and many
//!   cheap `Arc` readers, with empty-push protection;
//! - cluster layer: routers -> load balancers -> cluster strategies ->
//!   the caller's own async call, with per-instance stats, circuit
//!   breaking and limits.
//!
//! The crate has no global config and creates no runtime of its own.

#![warn(missing_docs)]

pub use understudy_core as core;
