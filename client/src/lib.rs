//! understudy-client: the consumer side of a multi-DC deployment.
//!
//! Component map:
//! - [`Client`] and [`ClientBuilder`]: server endpoints (the local DC's
//!   first), reconnect backoff with jitter, and the owner of every
//!   background task, all stopped when the client is shut down or dropped;
//! - [`Directory`]: the live instance list of one service, fed by a native
//!   watch that resumes from its last revision after a reconnect; one
//!   writer, many cheap readers of `Arc` snapshots; empty-push protection;
//! - provider sessions (`session`): [`Client::register`] keeps instances
//!   alive on a native session and registers them again after reconnects;
//! - later: routers, load balancers, cluster strategies
//!   and governance (see DESIGN "Client").
//!
//! The crate has no global config and creates no runtime of its own: it
//! spawns its tasks on the caller's tokio runtime. Its errors are its own
//! types, never tonic's.

#![warn(missing_docs)]

mod client;
pub mod cluster;
mod directory;
mod error;
mod metadata;
mod session;
mod view;
mod watch;

pub use client::{Client, ClientBuilder, EmptyProtection};
pub use directory::{Directory, Instance};
pub use error::ClientError;
pub use session::InstanceSpec;
pub use understudy_core as core;
pub use view::{Services, View};
pub use watch::ServedBy;
