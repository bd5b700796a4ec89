//! `/nacos/v3/client/cs` and `/nacos/v3/admin/cs`: reading, publishing,
//! removing and listing configs. Keys are `dataId`, `groupName` and
//! `namespaceId`; publishing and removal go through the shared config
//! handlers (and so through compare-and-set and the core's checks).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::Json;
use serde::Serialize;
use understudy_core::{ConfigItem, ConfigKey, GrayRule, HistoryEntry, NamespaceId, Op};
use understudy_proto::nacos::{ErrorCode, NacosResult};
use understudy_proto::nacos3::Page;

use super::super::caller::Caller;
use super::super::config::{self as shared, Api};
use super::super::error::ApiError;
use super::super::history;
use super::super::params::Params;
use super::{done, page, reply, Route};
use crate::node::Node;

type Input = Result<Params, ApiError>;

pub(super) fn routes() -> Vec<Route> {
    vec![
        ("/nacos/v3/client/cs/config", get(client_get)),
        (
            "/nacos/v3/admin/cs/config",
            get(admin_get).post(publish).delete(remove),
        ),
        ("/nacos/v3/admin/cs/config/list", get(list)),
        (
            "/nacos/v3/admin/cs/config/beta",
            get(beta_get).delete(beta_stop),
        ),
        ("/nacos/v3/admin/cs/config/batch", delete(remove_batch)),
        ("/nacos/v3/admin/cs/history/list", get(history_list)),
        ("/nacos/v3/admin/cs/history", get(history_get)),
        ("/nacos/v3/admin/cs/history/previous", get(history_previous)),
        ("/nacos/v3/admin/cs/history/configs", get(history_configs)),
    ]
}

fn existing(node: &Node, p: &Params) -> Result<(ConfigKey, Arc<ConfigItem>), ApiError> {
    let key = shared::key(p, Api::V3)?;
    let item = node
        .formal_config(&key)
        .ok_or_else(|| ApiError::not_found(ErrorCode::ResourceNotFound, NOT_FOUND))?;
    Ok((key, item))
}

/// What `GET /v3/client/cs/config` answers: Nacos 3 hands back its gRPC
/// `ConfigQueryResponse`, response fields and all.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientConfig {
    content: String,
    encrypted_data_key: String,
    content_type: String,
    md5: String,
    last_modified: u64,
    beta: bool,
    tag: Option<String>,
    result_code: u32,
    error_code: u32,
    success: bool,
    message: Option<String>,
    request_id: Option<String>,
}

/// `GET /v3/client/cs/config`: what the caller gets (a beta release
/// whose addresses include the caller's, else the formal content; tag
/// releases are not read over HTTP, as in Nacos). A config that does not
/// exist answers HTTP 200 with code 20004 and no data, as Nacos does.
async fn client_get(State(node): State<Node>, caller: Caller, params: Input) -> Response {
    let found = params.and_then(|p| {
        let key = shared::key(&p, Api::V3)?;
        Ok(node.config_for(&key, &caller.ip, None))
    });
    let (item, gray) = match found {
        Err(e) => return reply::<()>(Err(e)),
        Ok(None) => {
            let code = ErrorCode::ResourceNotFound;
            return Json(NacosResult {
                code: code.code(),
                message: code.message().to_owned(),
                data: (),
            })
            .into_response();
        }
        Ok(Some(found)) => found,
    };
    reply(Ok(ClientConfig {
        content: item.content.clone(),
        encrypted_data_key: item.encrypted_data_key.clone(),
        content_type: item.kind.clone(),
        md5: item.md5.clone(),
        last_modified: item.last_modified,
        beta: matches!(gray, Some(GrayRule::Beta { .. })),
        tag: match gray {
            Some(GrayRule::Tag { tag }) => Some(tag),
            _ => None,
        },
        result_code: 200,
        error_code: 0,
        success: true,
        message: None,
        request_id: None,
    }))
}

/// Nacos' answer to an admin read of a config that does not exist.
const NOT_FOUND: &str = "Config not exist, please publish Config first.";

/// A gray release as Nacos' `ConfigGrayInfo`: the detail, its name and
/// its rule.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GrayInfo {
    #[serde(flatten)]
    config: ConfigInfo,
    gray_name: String,
    gray_rule: String,
}

/// `GET /cs/config/beta`: the config's beta release.
async fn beta_get(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = shared::key(&p, Api::V3)?;
        let registry = node.registry();
        let gray = registry
            .grays(&key)
            .iter()
            .find(|g| matches!(g.rule, GrayRule::Beta { .. }))
            .ok_or_else(|| {
                ApiError::not_found(ErrorCode::ResourceNotFound, "Config is not in beta.")
            })?;
        Ok(GrayInfo {
            config: ConfigInfo::new(&key, &gray.item, true),
            gray_name: gray.rule.name(),
            gray_rule: gray.rule.to_nacos_json(),
        })
    }))
}

/// `DELETE /cs/config/beta`: stops the beta release (its clients get the
/// formal content again); `true` also when there was none.
async fn beta_stop(State(node): State<Node>, caller: Caller, params: Input) -> Response {
    done(
        async {
            let p = params?;
            let key = shared::key(&p, Api::V3)?;
            let source = caller.source(&p);
            let name = "beta".to_owned();
            node.propose(Op::RemoveConfigGray { key, name, source })
                .await?;
            Ok(())
        }
        .await,
    )
}

/// A config as Nacos' `ConfigBasicInfo` (lists) and, with its content,
/// `ConfigDetailInfo` (`GET /cs/config`); a history entry as
/// `ConfigHistoryBasicInfo` and `ConfigHistoryDetailInfo`. Ids are
/// strings, as Nacos writes them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigInfo {
    id: String,
    namespace_id: String,
    group_name: String,
    data_id: String,
    /// `null` where Nacos' query reads no md5 (history lists).
    md5: Option<String>,
    /// `null` where Nacos' query reads no type (history lists).
    #[serde(rename = "type")]
    kind: Option<String>,
    app_name: String,
    create_time: u64,
    modify_time: u64,
    #[serde(flatten)]
    detail: Option<Detail>,
    #[serde(flatten)]
    history: Option<History>,
}

/// What a detail adds to the basic info; a creator or tags not set are
/// `null`, as Nacos reads them from its database.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    content: String,
    desc: String,
    encrypted_data_key: String,
    create_user: Option<String>,
    create_ip: String,
    config_tags: Option<String>,
}

/// What a history entry adds; in a list, as Nacos' list query reads
/// it: no source user (`null`) and no gray name.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct History {
    src_ip: String,
    src_user: Option<String>,
    op_type: &'static str,
    publish_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    gray_name: Option<String>,
}

impl ConfigInfo {
    fn new(key: &ConfigKey, item: &ConfigItem, detail: bool) -> Self {
        Self {
            id: item.id.to_string(),
            namespace_id: key.namespace.to_string(),
            group_name: key.group.clone(),
            data_id: key.data_id.clone(),
            md5: Some(item.md5.clone()),
            kind: Some(item.kind.clone()),
            app_name: item.app_name.clone(),
            create_time: item.created,
            modify_time: item.last_modified,
            detail: detail.then(|| Detail {
                content: item.content.clone(),
                desc: item.desc.clone(),
                encrypted_data_key: item.encrypted_data_key.clone(),
                create_user: shared::set(&item.created_by.user),
                create_ip: item.created_by.ip.clone(),
                config_tags: shared::set(&item.tags),
            }),
            history: None,
        }
    }

    /// A history entry: its id is the entry's, its times the entry's,
    /// and its item what the entry recorded. Listed (not `detail`), it
    /// reads as Nacos' list query: md5, type and source user `null`.
    fn entry(entry: &HistoryEntry, detail: bool) -> Self {
        let mut info = Self::new(&entry.key, &entry.item, detail);
        info.id = entry.nid.to_string();
        info.create_time = entry.at;
        info.modify_time = entry.at;
        if !detail {
            info.md5 = None;
            info.kind = None;
        }
        info.history = Some(History {
            src_ip: entry.source.ip.clone(),
            src_user: detail.then(|| entry.source.user.clone()),
            op_type: entry.op.letter(),
            publish_type: if entry.gray_name.is_empty() {
                "formal"
            } else {
                "gray"
            },
            gray_name: detail.then(|| entry.gray_name.clone()),
        });
        info
    }
}

async fn admin_get(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (key, item) = existing(&node, &p)?;
        Ok(ConfigInfo::new(&key, &item, true))
    }))
}

async fn publish(
    State(node): State<Node>,
    caller: Caller,
    headers: HeaderMap,
    params: Input,
) -> Response {
    done(async { shared::publish(&node, &params?, &headers, Api::V3, &caller).await }.await)
}

async fn remove(State(node): State<Node>, caller: Caller, params: Input) -> Response {
    done(async { shared::remove(&node, &params?, Api::V3, &caller).await }.await)
}

/// How `GET /cs/config/list` matches `dataId`, `groupName` and the tags,
/// as Nacos 3 does: `blur` (the default) reads `*` as any run of
/// characters, `accurate` compares exactly; neither adds wildcards of its
/// own, and a blank pattern matches everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    Accurate,
    Blur,
}

fn matches(search: Search, pattern: &str, value: &str) -> bool {
    match search {
        _ if pattern.is_empty() => true,
        Search::Blur if pattern.contains('*') => glob(pattern, value),
        Search::Accurate | Search::Blur => pattern == value,
    }
}

/// Whether `value` matches `pattern`, where `*` is any run of characters
/// (export's `dataId`).
pub(super) fn glob_or_equal(pattern: &str, value: &str) -> bool {
    matches(Search::Blur, pattern, value)
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().expect("split yields one part");
    let Some(mut remaining) = value.strip_prefix(first) else {
        return false;
    };
    let (last, middle) = rest.split_last().expect("a pattern with '*' has two parts");
    for part in middle {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last)
}

/// `GET /cs/config/list`: a page of the namespace's configs whose
/// `dataId`, `groupName`, `appName`, `type` (blur only) and `configTags`
/// (any of them) match.
async fn list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let namespace = NamespaceId::parse(p.get("namespaceId").unwrap_or(""))
            .map_err(|e| ApiError::invalid("namespaceId", e.to_string()))?;
        let search = if p.blur(true)? {
            Search::Blur
        } else {
            Search::Accurate
        };
        let data_id = p.get("dataId").unwrap_or("").trim();
        let group = p.get("groupName").unwrap_or("").trim();
        let app = p.get("appName").unwrap_or("").trim();
        let kinds: Vec<&str> = p
            .get("type")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        let tags: Vec<&str> = p
            .get("configTags")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        let detail = p.flag("configDetail", false);
        let registry = node.registry();
        let found = registry
            .configs_in(&namespace)
            .filter(|(k, _)| matches(search, data_id, &k.data_id))
            .filter(|(k, _)| matches(search, group, &k.group))
            .filter(|(_, c)| app.is_empty() || c.app_name == app)
            // Nacos reads `type` in blur searches only.
            .filter(|(_, c)| {
                search == Search::Accurate || kinds.is_empty() || kinds.contains(&c.kind.as_str())
            })
            .filter(|(_, c)| {
                tags.is_empty()
                    || c.tags
                        .split(',')
                        .any(|t| tags.iter().any(|p| matches(search, p, t.trim())))
            })
            .map(|(k, c)| ConfigInfo::new(k, c, detail));
        Ok(Page::slice(found, page_no, page_size))
    }))
}

/// `DELETE /cs/config/batch?ids=1,2`: removes the configs with these ids
/// (unknown ids are skipped), in one log entry.
async fn remove_batch(State(node): State<Node>, caller: Caller, params: Input) -> Response {
    done(
        async {
            let p = params?;
            let raw = p.required("ids")?;
            let mut ids = Vec::new();
            for id in raw.split(',').map(str::trim).filter(|id| !id.is_empty()) {
                ids.push(id.parse::<u64>().map_err(|_| {
                    ApiError::invalid(
                        "ids",
                        format!("'{}' is not a config id", super::super::params::clip(id)),
                    )
                })?);
            }
            let source = caller.source(&p);
            let ops: Vec<Op> = {
                let registry = node.registry();
                ids.iter()
                    .filter_map(|id| registry.config_by_id(*id).map(|(k, _)| k.clone()))
                    .map(|key| Op::RemoveConfigFrom {
                        key,
                        source: source.clone(),
                    })
                    .collect()
            };
            node.propose_all(ops).await?;
            Ok(())
        }
        .await,
    )
}

/// `GET /cs/history/list`: a page of a config's history, newest first.
async fn history_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = shared::key(&p, Api::V3)?;
        let (page_no, page_size) = page(&p)?;
        let page = history::page_of(&node, &key, page_no, page_size);
        let items = page
            .page_items
            .iter()
            .map(|e| ConfigInfo::entry(e, false))
            .collect();
        Ok(Page::of(page.total_count, page_no, page_size, items))
    }))
}

/// `GET /cs/history?nid=`: one entry with its content.
async fn history_get(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let nid = history::id_param(&p, "nid")?;
        let entry = history::entry(&node, nid, &shared::key(&p, Api::V3)?)?;
        Ok(ConfigInfo::entry(&entry, true))
    }))
}

/// `GET /cs/history/previous?id=`: the newest entry of the config whose
/// id is `id`.
async fn history_previous(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let id = history::id_param(&p, "id")?;
        let entry = history::previous(&node, id, &shared::key(&p, Api::V3)?)?;
        Ok(ConfigInfo::entry(&entry, true))
    }))
}

/// `GET /cs/history/configs?namespaceId=`: the namespace's configs.
async fn history_configs(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let namespace = NamespaceId::parse(p.required("namespaceId")?)
            .map_err(|e| ApiError::invalid("namespaceId", e.to_string()))?;
        let registry = node.registry();
        // As Nacos' query reads them: in the order they were created, with
        // no id (0) and no md5.
        let mut configs: Vec<_> = registry.configs_in(&namespace).collect();
        configs.sort_by_key(|(_, item)| item.id);
        Ok(configs
            .into_iter()
            .map(|(k, item)| ConfigInfo {
                id: "0".to_owned(),
                md5: None,
                ..ConfigInfo::new(k, item, false)
            })
            .collect::<Vec<_>>())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blur_search_reads_stars_and_parts_accurate_search_is_exact() {
        assert!(matches(Search::Blur, "app*", "app.yaml"));
        assert!(matches(Search::Blur, "*.yaml", "app.yaml"));
        assert!(matches(Search::Blur, "a*p*l", "app.yaml.l"));
        assert!(!matches(Search::Blur, "*.json", "app.yaml"));
        assert!(
            !matches(Search::Blur, "pp.ya", "app.yaml"),
            "no implicit wildcard"
        );
        assert!(matches(Search::Blur, "*pp.ya*", "app.yaml"));
        assert!(matches(Search::Blur, "", "anything"));
        assert!(matches(Search::Accurate, "app.yaml", "app.yaml"));
        assert!(!matches(Search::Accurate, "app", "app.yaml"));
        assert!(!matches(Search::Accurate, "app*", "app.yaml"));
    }
}
