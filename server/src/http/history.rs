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

use super::config::{key, set, tenant, typed, v1_refusal, Api, JSON_UTF8};
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

/// A history entry as Nacos 2.x's `ConfigHistoryInfo`. A list (`detail`
/// false) carries no content, md5 or key, as Nacos' list query reads none;
/// what is not set is `null`; `opType` is padded to its column's 10
/// characters, as Nacos' embedded database gives it back.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HistoryV1 {
    id: u64,
    last_id: i64,
    data_id: String,
    group: String,
    tenant: String,
    app_name: String,
    md5: Option<String>,
    content: Option<String>,
    src_ip: String,
    src_user: Option<String>,
    op_type: String,
    publish_type: &'static str,
    gray_name: String,
    ext_info: String,
    created_time: u64,
    last_modified_time: u64,
    encrypted_data_key: Option<String>,
}

impl HistoryV1 {
    fn new(entry: &HistoryEntry, detail: bool) -> Self {
        let item = &entry.item;
        let detailed = |value: &str| detail.then(|| value.to_owned());
        Self {
            id: entry.nid,
            last_id: -1,
            data_id: entry.key.data_id.clone(),
            group: entry.key.group.clone(),
            tenant: tenant(&entry.key.namespace),
            app_name: item.app_name.clone(),
            md5: detailed(&item.md5),
            content: detailed(&item.content),
            src_ip: entry.source.ip.clone(),
            src_user: set(&entry.source.user),
            op_type: format!("{:<10}", entry.op.letter()),
            publish_type: if entry.gray_name.is_empty() {
                "formal"
            } else {
                "gray"
            },
            gray_name: entry.gray_name.clone(),
            ext_info: ext_info(entry),
            created_time: entry.at,
            last_modified_time: entry.at,
            encrypted_data_key: detailed(&item.encrypted_data_key),
        }
    }
}

/// An entry's `extInfo`, as Nacos' `ConfigExtInfoUtil` writes it: the
/// recorded config's type, tags, creator and description (those set), or
/// a gray release's name and publisher.
fn ext_info(entry: &HistoryEntry) -> String {
    let item = &entry.item;
    let fields: [(&str, &str); 4] = if entry.gray_name.is_empty() {
        [
            ("type", &item.kind),
            ("config_tags", &item.tags),
            ("src_user", &item.created_by.user),
            ("c_desc", &item.desc),
        ]
    } else {
        [
            ("gray_name", &entry.gray_name),
            ("src_user", &entry.source.user),
            ("", ""),
            ("", ""),
        ]
    };
    // Written by hand to keep Nacos' order of the fields.
    let written: Vec<String> = fields
        .iter()
        .filter(|(_, value)| !value.trim().is_empty())
        .map(|(name, value)| {
            format!(
                "{}:{}",
                serde_json::Value::from(*name),
                serde_json::Value::from(*value)
            )
        })
        .collect();
    format!("{{{}}}", written.join(","))
}

/// A v1 history answer: JSON, or the refusal, under Nacos' content type.
fn json<T: Serialize>(result: Result<T, ApiError>) -> Response {
    match result {
        Ok(body) => typed(Json(body).into_response(), JSON_UTF8),
        Err(e) => v1_refusal(e),
    }
}

/// `GET /nacos/v1/cs/history`: with `nid`, one entry; else
/// (`search=accurate`) a page of the config's history, newest first.
pub(crate) async fn v1(State(node): State<Node>, params: Input) -> Response {
    let p = match params {
        Ok(p) => p,
        Err(e) => return v1_refusal(e),
    };
    if p.get("nid").is_some() {
        return json(
            id_param(&p, "nid")
                .and_then(|nid| entry(&node, nid, &key(&p, Api::V1)?))
                .map(|e| HistoryV1::new(&e, true)),
        );
    }
    json((|| {
        let key = key(&p, Api::V1)?;
        let page_no = p.number::<u64>("pageNo")?.unwrap_or(1).max(1);
        let page_size = p.number::<u64>("pageSize")?.unwrap_or(100).clamp(1, 500);
        let page = page_of(&node, &key, page_no, page_size);
        let items = page
            .page_items
            .iter()
            .map(|e| HistoryV1::new(e, false))
            .collect();
        Ok(Page::of(page.total_count, page_no, page_size, items))
    })())
}

/// `GET /nacos/v1/cs/history/previous?id=`: the newest entry of the
/// config with that id.
pub(crate) async fn v1_previous(State(node): State<Node>, params: Input) -> Response {
    json(params.and_then(|p| {
        let id = id_param(&p, "id")?;
        previous(&node, id, &key(&p, Api::V1)?).map(|e| HistoryV1::new(&e, true))
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
