//! Moving configs in bulk, as Nacos 3's admin plane does: export to a
//! ZIP (`GET /cs/config/export`), import one (`POST /cs/config/import`,
//! multipart `file`) and clone configs into another namespace
//! (`POST /cs/config/clone`). Import and clone share Nacos' policies for
//! a config that already exists: `ABORT` (the default: stop there, keep
//! what was written before it), `SKIP` and `OVERWRITE`. Every item is
//! checked before anything is written, and what is written goes in one
//! log entry.

use axum::extract::{Multipart, RawQuery, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;
use understudy_core::{ConfigKey, ConfigSource, ConfigSpec, NamespaceId, Op};
use understudy_proto::config_zip::{self, ArchiveError, ArchivedConfig};
use understudy_proto::nacos::{ErrorCode, NacosResult};

use super::super::caller::Caller;
use super::super::error::ApiError;
use super::super::params::Params;
use super::{reply, Route};
use crate::node::Node;

pub(super) fn routes() -> Vec<Route> {
    vec![
        ("/nacos/v3/admin/cs/config/export", get(export)),
        ("/nacos/v3/admin/cs/config/import", post(import)),
        ("/nacos/v3/admin/cs/config/clone", post(clone)),
    ]
}

/// `GET /cs/config/export`: the configs with the given `ids` (any
/// namespace), or else those of `namespaceId` whose `dataId` matches
/// (`*` any run of characters) and whose `groupName` and `appName` are
/// the ones given.
async fn export(State(node): State<Node>, params: Result<Params, ApiError>) -> Response {
    let archive = params.and_then(|p| {
        let ids = ids(&p)?;
        let registry = node.registry();
        let configs: Vec<ArchivedConfig> = if ids.is_empty() {
            let namespace = namespace(&p)?;
            let data_id = p.get("dataId").unwrap_or("").trim();
            let group = p.get("groupName").unwrap_or("").trim();
            let app = p.get("appName").unwrap_or("").trim();
            registry
                .configs_in(&namespace)
                .filter(|(k, _)| {
                    data_id.is_empty() || super::config::glob_or_equal(data_id, &k.data_id)
                })
                .filter(|(k, _)| group.is_empty() || k.group == group)
                .filter(|(_, c)| app.is_empty() || c.app_name == app)
                .map(|(k, c)| archived(k, c))
                .collect()
        } else {
            ids.iter()
                .filter_map(|id| registry.config_by_id(*id))
                .map(|(k, c)| archived(k, c))
                .collect()
        };
        Ok(config_zip::write(&configs))
    });
    match archive {
        Err(e) => e.v2(),
        Ok(bytes) => {
            let name = format!(
                "attachment;filename=nacos_config_export_{}.zip",
                stamp(node.clock().wall_ms())
            );
            (
                [
                    (CONTENT_TYPE, "application/zip".to_owned()),
                    (CONTENT_DISPOSITION, name),
                ],
                bytes,
            )
                .into_response()
        }
    }
}

fn archived(key: &ConfigKey, item: &understudy_core::ConfigItem) -> ArchivedConfig {
    ArchivedConfig {
        group: key.group.clone(),
        data_id: key.data_id.clone(),
        content: item.content.clone(),
        kind: item.kind.clone(),
        app_name: item.app_name.clone(),
        desc: item.desc.clone(),
    }
}

/// `yyyyMMddHHmmss` (UTC) of an epoch-ms time: RFC 3339's digits.
fn stamp(ms: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .chars()
        .filter(char::is_ascii_digit)
        .collect()
}

/// `ids`: comma-separated config ids; none when absent or blank.
fn ids(p: &Params) -> Result<Vec<u64>, ApiError> {
    p.get("ids")
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| {
            id.parse::<u64>().map_err(|_| {
                ApiError::invalid(
                    "ids",
                    format!("'{}' is not a config id", super::super::params::clip(id)),
                )
            })
        })
        .collect()
}

fn namespace(p: &Params) -> Result<NamespaceId, ApiError> {
    NamespaceId::parse(p.get("namespaceId").unwrap_or(""))
        .map_err(|e| ApiError::invalid("namespaceId", e.to_string()))
}

/// What to do with an item whose config already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Abort,
    Skip,
    Overwrite,
}

fn policy(p: &Params) -> Result<Policy, ApiError> {
    match p.get("policy").unwrap_or("ABORT").trim() {
        "ABORT" => Ok(Policy::Abort),
        "SKIP" => Ok(Policy::Skip),
        "OVERWRITE" => Ok(Policy::Overwrite),
        other => Err(ApiError::invalid(
            "policy",
            format!(
                "'{}' is none of ABORT, SKIP, OVERWRITE",
                super::super::params::clip(other)
            ),
        )),
    }
}

/// An item named in a result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    data_id: String,
    group: String,
}

/// Nacos' import and clone result.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Outcome {
    succ_count: usize,
    skip_count: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fail_data: Vec<Item>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skip_data: Vec<Item>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unrecognized_count: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unrecognized_data: Vec<serde_json::Value>,
}

/// A failure Nacos answers with HTTP 200 and its code in the body.
fn failed(code: u32, message: &str, data: serde_json::Value) -> Response {
    (
        StatusCode::OK,
        axum::Json(NacosResult {
            code,
            message: message.to_owned(),
            data,
        }),
    )
        .into_response()
}

/// Writes `items` into `namespace` under `policy`: every item is checked
/// first (a bad one refuses the whole request, naming it); then the plan
/// is made against the state now and written in one log entry.
async fn write(
    node: &Node,
    namespace: &NamespaceId,
    items: Vec<ArchivedConfig>,
    policy: Policy,
    source: &ConfigSource,
) -> Result<Outcome, ApiError> {
    let max = node.config().registry.limits.max_config_bytes;
    let mut checked = Vec::with_capacity(items.len());
    for item in items {
        let key =
            ConfigKey::parse(namespace.as_str(), &item.group, &item.data_id).map_err(|e| {
                ApiError::invalid("file", format!("{}/{}: {e}", item.group, item.data_id))
            })?;
        if item.content.trim().is_empty() || item.content.len() > max {
            return Err(ApiError::invalid(
                "file",
                format!(
                    "{}/{}: the content must not be blank nor larger than max_config_bytes ({max})",
                    item.group, item.data_id
                ),
            ));
        }
        checked.push((key, item));
    }
    let mut outcome = Outcome::default();
    let mut ops = Vec::new();
    {
        let registry = node.registry();
        let mut aborted = false;
        for (key, item) in checked {
            let named = Item {
                data_id: item.data_id.clone(),
                group: item.group.clone(),
            };
            if aborted {
                outcome.skip_data.push(named);
                continue;
            }
            if registry.config(&key).is_some() {
                match policy {
                    Policy::Abort => {
                        outcome.fail_data.push(named);
                        aborted = true;
                        continue;
                    }
                    Policy::Skip => {
                        outcome.skip_data.push(named);
                        continue;
                    }
                    Policy::Overwrite => {}
                }
            }
            ops.push(Op::PublishConfigFrom {
                key,
                spec: ConfigSpec {
                    content: item.content,
                    kind: item.kind,
                    app_name: item.app_name,
                    desc: item.desc,
                    ..ConfigSpec::default()
                },
                cas_md5: None,
                source: source.clone(),
            });
        }
    }
    outcome.skip_count = outcome.skip_data.len();
    let results = node.propose_all(ops).await?;
    outcome.succ_count = results.iter().filter(|r| r.is_ok()).count();
    Ok(outcome)
}

/// The namespace must exist (the default one always does).
fn existing_namespace(node: &Node, namespace: &NamespaceId) -> bool {
    namespace.is_public()
        || node
            .registry()
            .namespaces()
            .iter()
            .any(|n| n.id == *namespace && n.explicit)
}

/// `POST /cs/config/import`: multipart `file` (a ZIP as export writes
/// it), `namespaceId`, `policy`, `src_user`. As in Nacos, an unusable
/// file answers HTTP 200 with the failure's code (100002 invalid
/// metadata, 100004 unreadable, 100005 empty) and `{"succCount":0}`.
async fn import(
    State(node): State<Node>,
    caller: Caller,
    RawQuery(query): RawQuery,
    mut multipart: Multipart,
) -> Response {
    let mut p = match Params::decode(query.unwrap_or_default().as_bytes(), b"") {
        Ok(p) => p,
        Err(e) => return e.v2(),
    };
    let mut file = None;
    loop {
        match multipart.next_field().await {
            Ok(None) => break,
            Ok(Some(field)) => {
                let name = field.name().unwrap_or("").to_owned();
                let bytes = match field.bytes().await {
                    Ok(bytes) => bytes,
                    Err(e) => return ApiError::invalid("file", e.body_text()).v2(),
                };
                if name == "file" {
                    file = Some(bytes);
                } else {
                    p.push(name, String::from_utf8_lossy(&bytes).into_owned());
                }
            }
            Err(e) => return ApiError::invalid("file", e.body_text()).v2(),
        }
    }
    let settings = namespace(&p).and_then(|ns| Ok((ns, policy(&p)?)));
    let (namespace, policy) = match settings {
        Ok(settings) => settings,
        Err(e) => return e.v2(),
    };
    let Some(file) = file.filter(|f| !f.is_empty()) else {
        return failed(100_005, "Imported file data is empty", json!({}));
    };
    if !existing_namespace(&node, &namespace) {
        return failed(
            ErrorCode::NamespaceNotExist.code(),
            "namespace not exist",
            json!({"succCount": 0}),
        );
    }
    // A config may be as large as configs may be; all of them together
    // at most 64 times what was uploaded (and at least 16 MiB): text
    // packs well, but not a thousandfold.
    let max = node.config().registry.limits.max_config_bytes;
    let max_total = file.len().saturating_mul(64).max(16 << 20);
    let archive = match config_zip::read(&file, max, max_total) {
        Ok(archive) => archive,
        Err(ArchiveError::Metadata(why)) => {
            return failed(
                100_002,
                &format!("Imported metadata is invalid: {why}"),
                json!({"succCount": 0}),
            )
        }
        Err(e) => {
            return failed(
                100_004,
                &format!("Failed to parse data: {e}"),
                json!({"succCount": 0}),
            )
        }
    };
    if archive.configs.is_empty() {
        return failed(
            100_005,
            "Imported file data is empty",
            json!({"succCount": 0}),
        );
    }
    let source = caller.source(&p);
    reply(
        write(&node, &namespace, archive.configs, policy, &source)
            .await
            .map(|mut outcome| {
                if !archive.unrecognized.is_empty() {
                    outcome.unrecognized_count = Some(archive.unrecognized.len());
                    outcome.unrecognized_data = archive
                        .unrecognized
                        .into_iter()
                        .map(|name| json!({"itemName": name}))
                        .collect();
                }
                outcome
            }),
    )
}

/// One config to clone.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CloneItem {
    config_id: serde_json::Value,
    #[serde(default)]
    target_group_name: Option<String>,
    #[serde(default)]
    target_data_id: Option<String>,
}

/// `POST /cs/config/clone?namespaceId=&policy=&src_user=` with a JSON list
/// of `{configId, targetGroupName, targetDataId}`: copies those configs
/// (from any namespace) into `namespaceId`, renamed where the item says.
async fn clone(
    State(node): State<Node>,
    caller: Caller,
    RawQuery(query): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    let p = match Params::decode(query.unwrap_or_default().as_bytes(), b"") {
        Ok(p) => p,
        Err(e) => return e.v2(),
    };
    let request = (|| -> Result<_, ApiError> {
        let namespace = NamespaceId::parse(p.required("namespaceId")?)
            .map_err(|e| ApiError::invalid("namespaceId", e.to_string()))?;
        let policy = policy(&p)?;
        let items: Vec<CloneItem> = serde_json::from_slice(&body).map_err(|e| {
            ApiError::invalid(
                "body",
                format!("not a JSON list of {{configId, targetGroupName, targetDataId}}: {e}"),
            )
        })?;
        Ok((namespace, policy, items))
    })();
    let (namespace, policy, items) = match request {
        Ok(request) => request,
        Err(e) => return e.v2(),
    };
    if items.is_empty() {
        return failed(
            100_006,
            "No configuration selected",
            json!({"succCount": 0}),
        );
    }
    if !existing_namespace(&node, &namespace) {
        return failed(
            ErrorCode::NamespaceNotExist.code(),
            "namespace not exist",
            json!({"succCount": 0}),
        );
    }
    let configs: Vec<ArchivedConfig> = {
        let registry = node.registry();
        items
            .iter()
            .filter_map(|item| {
                let id = match &item.config_id {
                    serde_json::Value::Number(n) => n.as_u64(),
                    serde_json::Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                }?;
                let (key, config) = registry.config_by_id(id)?;
                let mut archived = archived(key, config);
                if let Some(group) = item
                    .target_group_name
                    .as_deref()
                    .filter(|g| !g.trim().is_empty())
                {
                    archived.group = group.trim().to_owned();
                }
                if let Some(data_id) = item
                    .target_data_id
                    .as_deref()
                    .filter(|d| !d.trim().is_empty())
                {
                    archived.data_id = data_id.trim().to_owned();
                }
                Some(archived)
            })
            .collect()
    };
    if configs.is_empty() {
        return failed(
            100_005,
            "Imported file data is empty",
            json!({"succCount": 0}),
        );
    }
    let source = caller.source(&p);
    reply(write(&node, &namespace, configs, policy, &source).await)
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_names_carry_the_utc_time() {
        assert_eq!(super::stamp(0), "19700101000000");
        assert_eq!(super::stamp(1_796_299_772_445), "20261203120932");
        assert_eq!(super::stamp(951_782_400_000), "20000229000000");
    }
}
