//! Config history over HTTP: the lookups both APIs share (a config's
//! entries, one entry checked against the key it is asked under, a
//! config's newest entry) and Nacos 2.x's v1 endpoints
//! (`/nacos/v1/cs/history`, `/previous`, `/configs`). The v3 endpoints
//! are in `v3/config.rs`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use understudy_core::{ConfigKey, HistoryEntry, NamespaceId};
use understudy_proto::nacos::ErrorCode;
use understudy_proto::nacos3::Page;

use super::config::{key, Api};
use super::error::ApiError;
use super::params::Params;
use crate::node::Node;

type Input = Result<Params, ApiError>;

/// A page of a config's history, newest first.
pub(crate) fn page_of(
    node: &Node,
    key: &ConfigKey,
    page_no: u64,
    page_size: u64,
) -> Page<Arc<HistoryEntry>> {
    let registry = node.registry();
    Page::slice(registry.config_history(key).cloned(), page_no, page_size)
}

/// The entry `nid`, which must be about `key` (Nacos refuses one asked
/// under another key with 403).
pub(crate) fn entry(node: &Node, nid: u64, key: &ConfigKey) -> Result<Arc<HistoryEntry>, ApiError> {
    let found = node.registry().history_entry(nid).cloned();
    about(found, key, || {
        format!("certain config history for nid = {nid} not exist")
    })
}

/// The newest entry of the config whose id is `id`, which must be about
/// `key`.
pub(crate) fn previous(
    node: &Node,
    id: u64,
    key: &ConfigKey,
) -> Result<Arc<HistoryEntry>, ApiError> {
    let found = node.registry().latest_history_of(id).cloned();
    about(found, key, || {
        format!("no history for the config whose id is {id}")
    })
}

/// `found`, if there is one and it is about `key`.
fn about(
    found: Option<Arc<HistoryEntry>>,
    key: &ConfigKey,
    missing: impl FnOnce() -> String,
) -> Result<Arc<HistoryEntry>, ApiError> {
    let entry = found.ok_or_else(|| ApiError::not_found(ErrorCode::ResourceNotFound, missing()))?;
    if entry.key != *key {
        return Err(ApiError::denied(
            "Please check dataId, group or namespaceId.",
        ));
    }
    Ok(entry)
}

/// A required numeric id parameter.
pub(crate) fn id_param(p: &Params, name: &'static str) -> Result<u64, ApiError> {
    p.number::<u64>(name)?
        .ok_or_else(|| ApiError::missing(name))
}

/// A history entry as Nacos 2.x's `ConfigHistoryInfo`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HistoryV1 {
    id: u64,
    last_id: i64,
    data_id: String,
    group: String,
    tenant: String,
    app_name: String,
    md5: String,
    content: String,
    src_ip: String,
    src_user: String,
    op_type: &'static str,
    created_time: u64,
    last_modified_time: u64,
    encrypted_data_key: String,
}

impl HistoryV1 {
    fn new(entry: &HistoryEntry) -> Self {
        let item = &entry.item;
        Self {
            id: entry.nid,
            last_id: -1,
            data_id: entry.key.data_id.clone(),
            group: entry.key.group.clone(),
            tenant: tenant(&entry.key.namespace),
            app_name: item.app_name.clone(),
            md5: item.md5.clone(),
            content: item.content.clone(),
            src_ip: entry.source.ip.clone(),
            src_user: entry.source.user.clone(),
            op_type: entry.op.letter(),
            created_time: entry.at,
            last_modified_time: entry.at,
            encrypted_data_key: item.encrypted_data_key.clone(),
        }
    }
}

/// Nacos 2.x names the default namespace `""` in config bodies.
fn tenant(namespace: &NamespaceId) -> String {
    if namespace.is_public() {
        String::new()
    } else {
        namespace.to_string()
    }
}

fn json<T: Serialize>(result: Result<T, ApiError>) -> Response {
    result.map_or_else(ApiError::v1, |body| Json(body).into_response())
}

/// `GET /nacos/v1/cs/history`: with `nid`, one entry; else
/// (`search=accurate`) a page of the config's history, newest first.
pub(crate) async fn v1(State(node): State<Node>, params: Input) -> Response {
    let p = match params {
        Ok(p) => p,
        Err(e) => return e.v1(),
    };
    if p.get("nid").is_some() {
        return json(
            id_param(&p, "nid")
                .and_then(|nid| entry(&node, nid, &key(&p, Api::V1)?))
                .map(|e| HistoryV1::new(&e)),
        );
    }
    json((|| {
        let key = key(&p, Api::V1)?;
        let page_no = p.number::<u64>("pageNo")?.unwrap_or(1).max(1);
        let page_size = p.number::<u64>("pageSize")?.unwrap_or(100).clamp(1, 500);
        let page = page_of(&node, &key, page_no, page_size);
        let items = page.page_items.iter().map(|e| HistoryV1::new(e)).collect();
        Ok(Page::of(page.total_count, page_no, page_size, items))
    })())
}

/// `GET /nacos/v1/cs/history/previous?id=`: the newest entry of the
/// config with that id.
pub(crate) async fn v1_previous(State(node): State<Node>, params: Input) -> Response {
    json(params.and_then(|p| {
        let id = id_param(&p, "id")?;
        previous(&node, id, &key(&p, Api::V1)?).map(|e| HistoryV1::new(&e))
    }))
}

/// A config in `GET /nacos/v1/cs/history/configs`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigV1 {
    id: u64,
    data_id: String,
    group: String,
    tenant: String,
    app_name: String,
    #[serde(rename = "type")]
    kind: String,
    last_modified: u64,
}

/// `GET /nacos/v1/cs/history/configs?tenant=`: the namespace's configs.
pub(crate) async fn v1_configs(State(node): State<Node>, params: Input) -> Response {
    json(params.and_then(|p| {
        let namespace = NamespaceId::parse(p.get("tenant").unwrap_or(""))
            .map_err(|e| ApiError::invalid("tenant", e.to_string()))?;
        let registry = node.registry();
        Ok(registry
            .configs_in(&namespace)
            .map(|(k, item)| ConfigV1 {
                id: item.id,
                data_id: k.data_id.clone(),
                group: k.group.clone(),
                tenant: tenant(&k.namespace),
                app_name: item.app_name.clone(),
                kind: item.kind.clone(),
                last_modified: item.last_modified,
            })
            .collect::<Vec<_>>())
    }))
}
