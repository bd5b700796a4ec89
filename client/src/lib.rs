//! understudy-client: the consumer side of a multi-DC deployment.
//!
//! Component map:
//! - [`Client`] and [`ClientBuilder`]: the settings, and the directories,
//!   views and provider session a client starts;
//! - `connection`: what those tasks share: server endpoints (the local
//!   DC's first), credentials, reconnect backoff with jitter, the return
//!   to the local DC once it answers again, and the owner of every
//!   background task, all stopped when the client is shut down or dropped;
//! - `watch`: one native watch followed across reconnects, resuming from
//!   its last revision, for a [`Directory`] (the live instance list of one
//!   service; one writer, many cheap readers of `Arc` snapshots;
//!   empty-push protection) or a [`View`] (a namespace's or group's
//!   services); which node serves it ([`ServedBy`]);
//! - provider sessions (`session`): [`Client::register`] keeps instances
//!   alive on a native session and registers them again after reconnects,
//!   with the provider's start time in their metadata (`metadata`);
//! - [`discover`]: a directory as tower's service discovery, for
//!   `tower::balance` and tonic's balanced channel;
//! - [`cluster`]: what a consumer does on each call: routers, load
//!   balancers, cluster strategies, statistics and breakers, limits, the
//!   retry budget, deadlines; and the provider's side (execute limit,
//!   drain).
//!
//! The crate has no global config and creates no runtime of its own: it
//! spawns its tasks on the caller's tokio runtime. Its errors are its own
//! types, never tonic's.

#![warn(missing_docs)]

mod client;
pub mod cluster;
mod connection;
mod directory;
pub mod discover;
mod error;
mod metadata;
mod session;
mod view;
mod watch;

pub use client::{Client, ClientBuilder};
pub use connection::EmptyProtection;
pub use directory::{Directory, Instance};
pub use error::ClientError;
pub use session::InstanceSpec;
pub use understudy_core as core;
pub use view::{Services, View};
pub use watch::ServedBy;
