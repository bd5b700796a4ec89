//! understudy-proto: the wire formats, kept apart from the domain.
//!
//! Component map:
//! - [`backup`]: the export document and its item-by-item reading;
//! - [`config_zip`]: Nacos 3's config export, a ZIP with a
//!   `.metadata.yml`, written and read (bounded);
//! - [`nacos3`]: the Nacos 3 v3 API's page and namespace bodies;
//! - [`nacos`]: Nacos JSON bodies of the HTTP Open API (ServiceInfo,
//!   instances, beats, the v2 `Result` envelope, service and namespace
//!   bodies, switches, login) with their exact Nacos field names, and the
//!   conversions between them and `understudy-core` types. Conversions
//!   from the wire are `TryFrom` with a typed [`DecodeError`].
//! - [`grpc`]: the Nacos gRPC envelope (`Payload`) and services,
//!   generated at build time by protox and tonic-prost-build (no system
//!   protoc);
//! - [`nacos_rpc`]: the JSON bodies carried in that envelope, lenient on
//!   input and strict on output.
//! - [`native`]: understudy's own API (`understudy.v1`): watches that
//!   never miss a change, and listings;
//! - [`raft`]: the raft transport between nodes (`understudy.raft.v1`):
//!   opaque payloads, so openraft's types never leak into the schema.

pub mod backup;
pub mod config_zip;
pub mod nacos;
pub mod nacos3;
pub mod nacos3_rpc;
pub mod nacos_ai;
pub mod nacos_rpc;
mod native_conv;
mod peer_conv;

use thiserror::Error;

/// At most 64 characters of client input, for messages.
pub fn clip(raw: &str) -> &str {
    match raw.char_indices().nth(64) {
        Some((i, _)) => &raw[..i],
        None => raw,
    }
}

/// A wire value that cannot become a domain value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid {field}: {reason}")]
pub struct DecodeError {
    /// The Nacos name of the offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl DecodeError {
    /// An error naming `field`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// understudy's native API (`understudy.v1`): watches and listings.
pub mod native {
    #![allow(missing_docs, unreachable_pub)] // generated code
    #![allow(clippy::all, clippy::pedantic)] // generated code
    include!(concat!(env!("OUT_DIR"), "/understudy.v1.rs"));
}

/// The generated Nacos gRPC envelope: `Payload`, `Metadata` and the
/// `Request` / `BiRequestStream` services.
pub mod grpc {
    #![allow(missing_docs, unreachable_pub, non_camel_case_types)] // generated code
    #![allow(clippy::all, clippy::pedantic)] // generated code
    include!(concat!(env!("OUT_DIR"), "/_.rs"));
}

/// The raft transport between nodes (`understudy.raft.v1`): the `Raft`
/// service and its opaque request and reply envelopes.
pub mod raft {
    #![allow(missing_docs, unreachable_pub)] // generated code
    #![allow(clippy::all, clippy::pedantic)] // generated code
    include!(concat!(env!("OUT_DIR"), "/understudy.raft.v1.rs"));
}

/// Node-to-node control (`understudy.peer.v1`): the `Peer` service on the
/// raft port, with typed messages for forwarded writes and beats, status,
/// fault settings, take-over and pings.
pub mod peer {
    #![allow(missing_docs, unreachable_pub)] // generated code
    #![allow(clippy::all, clippy::pedantic)] // generated code
    include!(concat!(env!("OUT_DIR"), "/understudy.peer.v1.rs"));
}
