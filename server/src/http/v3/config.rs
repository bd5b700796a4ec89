//! `/nacos/v3/client/cs` and `/nacos/v3/admin/cs`: reading, publishing,
//! removing and listing configs. Keys are `dataId`, `groupName` and
//! `namespaceId`; publishing and removal go through the shared config
//! handlers (and so through compare-and-set and the core's checks).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use serde::Serialize;
use understudy_core::{ConfigItem, ConfigKey, NamespaceId};
use understudy_proto::nacos::ErrorCode;
use understudy_proto::nacos3::Page;

use super::super::config::{self as shared, Api};
use super::super::error::ApiError;
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
    ]
}

fn existing(node: &Node, p: &Params) -> Result<(ConfigKey, Arc<ConfigItem>), ApiError> {
    let key = shared::key(p, Api::V3)?;
    let item = node.registry().config(&key).ok_or_else(|| {
        ApiError::not_found(
            ErrorCode::ResourceNotFound,
            format!(
                "config dataId={} groupName={} namespaceId={} does not exist",
                key.data_id, key.group, key.namespace
            ),
        )
    })?;
    Ok((key, item))
}

/// What `GET /v3/client/cs/config` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientConfig {
    content: String,
    encrypted_data_key: String,
    content_type: String,
    md5: String,
    last_modified: u64,
    beta: bool,
}

/// `GET /v3/client/cs/config`. A config that does not exist answers HTTP
/// 200 with code 20004, as Nacos does.
async fn client_get(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (_, item) = existing(&node, &p).map_err(|e| {
            if e.status() == axum::http::StatusCode::NOT_FOUND {
                e.with_status(axum::http::StatusCode::OK)
            } else {
                e
            }
        })?;
        Ok(ClientConfig {
            content: item.content.clone(),
            encrypted_data_key: item.encrypted_data_key.clone(),
            content_type: item.kind.clone(),
            md5: item.md5.clone(),
            last_modified: item.last_modified,
            beta: false,
        })
    }))
}

/// A config as Nacos' `ConfigBasicInfo` (lists) and, with its content,
/// `ConfigDetailInfo` (`GET /cs/config`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigInfo {
    namespace_id: String,
    group_name: String,
    data_id: String,
    md5: String,
    #[serde(rename = "type")]
    kind: String,
    app_name: String,
    create_time: u64,
    modify_time: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    desc: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    encrypted_data_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    config_tags: Option<String>,
}

impl ConfigInfo {
    fn new(key: &ConfigKey, item: &ConfigItem, detail: bool) -> Self {
        let detail_of = |value: &String| detail.then(|| value.clone());
        Self {
            namespace_id: key.namespace.to_string(),
            group_name: key.group.clone(),
            data_id: key.data_id.clone(),
            md5: item.md5.clone(),
            kind: item.kind.clone(),
            app_name: item.app_name.clone(),
            create_time: item.last_modified,
            modify_time: item.last_modified,
            content: detail_of(&item.content),
            desc: detail_of(&item.desc),
            encrypted_data_key: detail_of(&item.encrypted_data_key),
            config_tags: detail_of(&item.tags),
        }
    }
}

async fn admin_get(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (key, item) = existing(&node, &p)?;
        Ok(ConfigInfo::new(&key, &item, true))
    }))
}

async fn publish(State(node): State<Node>, headers: HeaderMap, params: Input) -> Response {
    done(async { shared::publish(&node, &params?, &headers, Api::V3).await }.await)
}

async fn remove(State(node): State<Node>, params: Input) -> Response {
    done(async { shared::remove(&node, &params?, Api::V3).await }.await)
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
        let search = match p.get("search").unwrap_or("blur") {
            "blur" => Search::Blur,
            "accurate" => Search::Accurate,
            other => {
                return Err(ApiError::invalid(
                    "search",
                    format!(
                        "'{}' is neither accurate nor blur",
                        super::super::params::clip(other)
                    ),
                ))
            }
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
