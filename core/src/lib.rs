//! understudy-core: the registry domain, synchronous and free of I/O.
//!
//! Component map:
//! - [`name`](crate::NamespaceId): validated namespace, group, service and
//!   cluster names and the [`ServiceKey`] that combines them;
//! - `instance`: [`InstanceSpec`] (what a provider asks for), [`Instance`]
//!   (what is stored), [`Owner`], per-instance [`HealthTimeouts`] and
//!   [`Limits`];
//! - `service`: [`Service`], an immutable value behind an `Arc`, and Nacos'
//!   instance selection with the protect threshold;
//! - `command`: [`Command`] and [`Op`], every mutation as a value carrying
//!   its timestamp;
//! - `event`: [`Change`] and [`Event`], what a command did, each with its
//!   revision, and the bounded change log behind watch resume;
//! - `registry`: [`Registry`], which applies commands, answers queries and
//!   takes and restores [`RegistrySnapshot`]s;
//! - `import`: [`plan_import`], the writes that merge an export document's
//!   items into the registry, checked against a copy of it;
//! - `config`: config items ([`ConfigKey`], [`ConfigItem`]) of the Nacos
//!   config service, with their md5;
//! - `pattern`: [`GroupKeyPattern`], the `namespace>>group>>name` patterns
//!   of Nacos 3's fuzzy watch;
//! - `liveness`: [`Liveness`], the beat and connection deadlines kept by
//!   the node responsible for an instance, outside the replicated state.
//!
//! Time is always an argument ([`Millis`] since the epoch); nothing here
//! reads a clock, spawns, locks or touches the network. The server owns
//! all of that, which keeps replicas deterministic and tests clock-free.

#![warn(missing_docs)]

pub mod access;
mod command;
mod config;
mod error;
mod event;
mod import;
mod instance;
mod instances;
mod kind;
mod liveness;
mod metadata;
mod name;
mod pattern;
mod registry;
mod service;

pub use command::{Command, HealthSource, Op, RemovalCause, UpdateMode};
pub use config::{
    content_md5, gray_for, ConfigItem, ConfigKey, ConfigSource, ConfigSpec, GrayRelease, GrayRule,
    HistoryEntry, HistoryOp, HistoryRetention,
};
pub use error::Error;
pub use event::{Change, Event, NamespaceDetails};
pub use import::{
    plan_import, ConfigImport, ImportError, ImportItems, InstanceImport, NamespaceImport,
    ServiceImport, Step,
};
pub use instance::{
    check_ip, check_weight, HealthTimeouts, Instance, InstanceKey, InstancePatch, InstanceSpec,
    Limits, Metadata, Owner, MAX_WEIGHT, META_BEAT_INTERVAL, META_BEAT_TIMEOUT,
    META_DELETE_TIMEOUT,
};
pub use kind::ServiceKind;
pub use liveness::{
    beat_ring, responsible, responsible_for, BeatOutcome, LiveKey, Liveness, Transition,
};
pub use name::{
    ClusterName, GroupName, NamespaceId, ServiceKey, ServiceKeyParts, ServiceName, DEFAULT_CLUSTER,
    DEFAULT_GROUP, DEFAULT_NAMESPACE, GROUP_SEPARATOR,
};
pub use pattern::{GroupKeyPattern, PATTERN_SEPARATOR};
pub use registry::{
    Counts, LockName, NamespaceInfo, NamespaceSummary, NamespaceView, Page, Registry,
    RegistryOptions, RegistrySnapshot,
};
pub use service::{
    check_protect_threshold, select, Selected, Selection, Selector, Service, ServiceMeta,
    ServiceMetaPatch,
};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;
