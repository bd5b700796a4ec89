//! What a raft snapshot holds, and how it is read: in this build's
//! format; in format 4, whose registry held no locks (it loads with none);
//! or in format 3, whose configs had no ids, origins, gray releases or
//! history. A data dir or a peer of those versions still loads; format-3
//! configs get ids in key order and empty histories.

use std::sync::Arc;

use openraft::{LogId, StoredMembership};
use serde::{Deserialize, Serialize};
use understudy_core::{
    ConfigItem, ConfigKey, ConfigSource, Millis, NamespaceId, NamespaceInfo, RegistrySnapshot,
    Service,
};

use super::codec;
use super::{Member, NodeId};

/// The snapshot's content.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SnapshotBody {
    pub(super) last_applied: Option<LogId<NodeId>>,
    pub(super) membership: StoredMembership<NodeId, Member>,
    pub(super) registry: RegistrySnapshot,
    /// The cluster's history id (the state machine's genesis).
    pub(super) genesis: Option<String>,
}

/// Reads a snapshot body of this build's format (format 5's bodies are
/// the same), or of formats 4 and 3.
pub(super) fn decode_body(bytes: &[u8]) -> Result<SnapshotBody, codec::CodecError> {
    match bytes.split_first() {
        Some((&FORMAT_3, body)) => Ok(read_format_3(body)?),
        Some((&FORMAT_4, body)) => Ok(read_format_4(body)?),
        _ => codec::decode(bytes),
    }
}

/// The format before locks.
const FORMAT_4: u8 = 4;

#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct SnapshotBodyV4 {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
    registry: RegistryV4,
    genesis: Option<String>,
}

/// [`RegistrySnapshot`] as format 4 wrote it: the same fields, without
/// `locks`.
#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct RegistryV4 {
    revision: u64,
    namespaces: Vec<(NamespaceId, NamespaceInfo)>,
    services: Vec<Arc<Service>>,
    configs: Vec<(ConfigKey, Arc<ConfigItem>)>,
    grays: Vec<(ConfigKey, Arc<understudy_core::GrayRelease>)>,
    history: Vec<Arc<understudy_core::HistoryEntry>>,
    users: Vec<(String, String)>,
    roles: Vec<(String, String)>,
    permissions: Vec<understudy_core::access::Permission>,
    serial: u64,
    lost_nodes: Vec<u64>,
}

/// Reads a format-4 body (without its version byte).
fn read_format_4(body: &[u8]) -> Result<SnapshotBody, postcard::Error> {
    let old: SnapshotBodyV4 = postcard::from_bytes(body)?;
    let r = old.registry;
    Ok(SnapshotBody {
        last_applied: old.last_applied,
        membership: old.membership,
        registry: RegistrySnapshot {
            revision: r.revision,
            namespaces: r.namespaces,
            services: r.services,
            configs: r.configs,
            grays: r.grays,
            history: r.history,
            users: r.users,
            roles: r.roles,
            permissions: r.permissions,
            serial: r.serial,
            lost_nodes: r.lost_nodes,
            locks: Vec::new(),
        },
        genesis: old.genesis,
    })
}

/// The previous version's format.
const FORMAT_3: u8 = 3;

#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct SnapshotBodyV3 {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
    registry: RegistryV3,
    genesis: Option<String>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct RegistryV3 {
    revision: u64,
    namespaces: Vec<(NamespaceId, NamespaceInfo)>,
    services: Vec<Arc<Service>>,
    configs: Vec<(ConfigKey, ConfigItemV3)>,
    lost_nodes: Vec<u64>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct ConfigItemV3 {
    content: String,
    md5: String,
    kind: String,
    last_modified: Millis,
    app_name: String,
    desc: String,
    tags: String,
    encrypted_data_key: String,
}

/// Reads a format-3 body (without its version byte).
fn read_format_3(body: &[u8]) -> Result<SnapshotBody, postcard::Error> {
    let old: SnapshotBodyV3 = postcard::from_bytes(body)?;
    let mut serial = 0;
    let configs = old
        .registry
        .configs
        .into_iter()
        .map(|(key, item)| {
            serial += 1;
            let item = ConfigItem {
                id: serial,
                created: item.last_modified,
                created_by: ConfigSource::default(),
                content: item.content,
                md5: item.md5,
                kind: item.kind,
                last_modified: item.last_modified,
                app_name: item.app_name,
                desc: item.desc,
                tags: item.tags,
                encrypted_data_key: item.encrypted_data_key,
            };
            (key, Arc::new(item))
        })
        .collect();
    Ok(SnapshotBody {
        last_applied: old.last_applied,
        membership: old.membership,
        registry: RegistrySnapshot {
            revision: old.registry.revision,
            namespaces: old.registry.namespaces,
            services: old.registry.services,
            configs,
            grays: Vec::new(),
            history: Vec::new(),
            users: Vec::new(),
            roles: Vec::new(),
            permissions: Vec::new(),
            serial,
            lost_nodes: old.registry.lost_nodes,
            locks: Vec::new(),
        },
        genesis: old.genesis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_3_snapshot_loads_with_ids_for_its_configs() {
        let item = |content: &str| ConfigItemV3 {
            content: content.to_owned(),
            md5: understudy_core::content_md5(content),
            kind: "text".to_owned(),
            last_modified: 42,
            app_name: String::new(),
            desc: String::new(),
            tags: String::new(),
            encrypted_data_key: String::new(),
        };
        let written = SnapshotBodyV3 {
            last_applied: None,
            membership: StoredMembership::default(),
            registry: RegistryV3 {
                revision: 7,
                namespaces: vec![],
                services: vec![],
                configs: vec![
                    (ConfigKey::parse("", "g", "a").unwrap(), item("one")),
                    (ConfigKey::parse("", "g", "b").unwrap(), item("two")),
                ],
                lost_nodes: vec![3],
            },
            genesis: Some("cluster".to_owned()),
        };
        let mut bytes = vec![FORMAT_3];
        postcard::to_io(&written, &mut bytes).unwrap();
        let body = decode_body(&bytes).expect("format 3 loads");
        assert_eq!(body.registry.revision, 7);
        assert_eq!(body.registry.lost_nodes, vec![3]);
        assert_eq!(body.genesis.as_deref(), Some("cluster"));
        let configs: Vec<(&str, &str, u64)> = body
            .registry
            .configs
            .iter()
            .map(|(k, i)| (k.data_id.as_str(), i.content.as_str(), i.id))
            .collect();
        assert_eq!(configs, vec![("a", "one", 1), ("b", "two", 2)]);
        assert_eq!(body.registry.serial, 2, "new ids start after them");
        assert_eq!(body.registry.configs[0].1.created, 42);
    }

    #[test]
    fn a_format_4_snapshot_loads_with_no_locks() {
        let written = SnapshotBodyV4 {
            last_applied: None,
            membership: StoredMembership::default(),
            registry: RegistryV4 {
                revision: 9,
                namespaces: vec![],
                services: vec![],
                configs: vec![],
                grays: vec![],
                history: vec![],
                users: vec![("u".to_owned(), "hash".to_owned())],
                roles: vec![],
                permissions: vec![],
                serial: 4,
                lost_nodes: vec![2],
            },
            genesis: Some("cluster".to_owned()),
        };
        let mut bytes = vec![FORMAT_4];
        postcard::to_io(&written, &mut bytes).unwrap();
        let body = decode_body(&bytes).expect("format 4 loads");
        assert_eq!(body.registry.revision, 9);
        assert_eq!(
            body.registry.users,
            vec![("u".to_owned(), "hash".to_owned())]
        );
        assert_eq!(
            (body.registry.serial, body.registry.lost_nodes),
            (4, vec![2])
        );
        assert!(body.registry.locks.is_empty());
    }
}
