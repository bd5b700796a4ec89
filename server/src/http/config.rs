//! Nacos config HTTP API: v1 get / publish (with CAS) / delete and the
//! long-polling listener, and the v2 endpoints with the `Result` envelope.
//! Long polling subscribes to config changes before it compares md5s, so a
//! change between the two answers the held request.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{OriginalUri, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

use understudy_core::{ConfigItem, ConfigKey, ConfigSpec, GrayRule, Millis, NamespaceId, Op};
use understudy_proto::nacos::{ErrorCode, NacosResult};

use super::caller::Caller;
use super::error::{plain, v2_true, ApiError};
use super::params::Params;
use crate::node::Node;

type Input = Result<Params, ApiError>;

/// Separates the fields of a listening record.
const WORD: char = '\u{2}';
/// Ends a listening record.
const LINE: char = '\u{1}';
/// Most records in one listener request, as Nacos.
const MAX_RECORDS: usize = 10_000;

/// Which parameters name the namespace and the group: v1 `tenant` and
/// `group`, v2 `namespaceId` and `group`, v3 `namespaceId` and
/// `groupName`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    V1,
    V2,
    V3,
}

pub(crate) fn key(p: &Params, api: Api) -> Result<ConfigKey, ApiError> {
    let data_id = p.required("dataId")?;
    let group_field = match api {
        Api::V3 => "groupName",
        Api::V1 | Api::V2 => "group",
    };
    let group = p.required(group_field)?;
    let tenant = match api {
        Api::V1 => p.raw("tenant"),
        Api::V2 | Api::V3 => p.raw("namespaceId"),
    };
    ConfigKey::parse(tenant.unwrap_or(""), group, data_id).map_err(|e| match e {
        // The core names the group by its v1/v2 parameter.
        understudy_core::Error::Invalid {
            field: "group",
            reason,
        } => ApiError::invalid(group_field, reason),
        other => other.into(),
    })
}

/// The content type Nacos gives every v1 config answer but a config's
/// content and the exception handler's 500s, and the v2 read's success.
pub(crate) const JSON_UTF8: &str = "application/json;charset=UTF-8";

/// `response` with `content_type` instead of its own.
pub(crate) fn typed(mut response: Response, content_type: &'static str) -> Response {
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A v1 config refusal: the plain text, under Nacos' JSON content type.
pub(crate) fn v1_refusal(error: ApiError) -> Response {
    typed(error.v1(), JSON_UTF8)
}

/// v1's bare `true`, as Nacos' config controller writes it.
fn v1_true(result: Result<(), ApiError>) -> Response {
    match result {
        Ok(()) => typed(Json(true).into_response(), JSON_UTF8),
        Err(e) => v1_refusal(e),
    }
}

/// Nacos' parameter filter's refusal of a non-empty `dataId` (at most 256
/// characters) or `group` (128) that is too long or holds other
/// characters than letters, digits and `-_:.` (an empty one it lets
/// through to the handler).
pub(crate) fn illegal_name(field: &str, value: &str) -> Option<String> {
    let max = match field {
        "dataId" => 256,
        "group" => 128,
        _ => return None,
    };
    let problem = if value.is_empty() {
        return None;
    } else if value.chars().count() > max {
        format!("the param length should not exceed {max}.")
    } else if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
    {
        "illegal characters should not appear in the param.".to_owned()
    } else {
        return None;
    };
    Some(format!("Param '{field}' is illegal, {problem}"))
}

/// What Nacos checks before a v1 config handler runs, in its order: its
/// parameter filter (a non-empty `dataId` or `group` of other characters
/// than letters, digits and `-_:.`, or too long, answers 400 with its
/// line), then Spring's required parameters (`required`, absent: 400 with
/// Spring's error body, as Nacos 3 answers; Nacos 2 answers 500). A blank
/// one is refused by the handler. `None` lets the request through.
fn v1_refused(node: &Node, p: &Params, required: &[&'static str], path: &str) -> Option<Response> {
    for field in ["dataId", "group"] {
        if let Some(problem) = p.raw(field).and_then(|v| illegal_name(field, v)) {
            // The filter writes its line with a CRLF.
            return Some(typed(
                (StatusCode::BAD_REQUEST, format!("{problem}\r\n")).into_response(),
                JSON_UTF8,
            ));
        }
    }
    let missing = required.iter().find(|field| p.raw(field).is_none())?;
    Some(spring_missing(node.now(), missing, path))
}

/// Spring's answer to a missing required parameter, as Nacos 3 gives it.
fn spring_missing(now: Millis, field: &str, path: &str) -> Response {
    let at = UNIX_EPOCH + Duration::from_millis(now);
    let timestamp = humantime::format_rfc3339_millis(at)
        .to_string()
        .replace('Z', "+00:00");
    let body = serde_json::json!({
        "timestamp": timestamp,
        "status": 400,
        "error": "Bad Request",
        "message": format!("Required parameter '{field}' is not present."),
        "path": path,
    });
    typed(
        (StatusCode::BAD_REQUEST, Json(body)).into_response(),
        JSON_UTF8,
    )
}

pub(crate) fn content_type(kind: &str) -> &'static str {
    match kind {
        "json" => "application/json;charset=UTF-8",
        "xml" => "application/xml;charset=UTF-8",
        "html" => "text/html;charset=UTF-8",
        _ => "text/plain;charset=UTF-8",
    }
}

/// A config as one caller reads it, and the gray release's rule if the
/// content is a gray release's.
pub(crate) type ReadFor = (Arc<ConfigItem>, Option<GrayRule>);

/// What the caller gets of the config `p` names: a gray release whose
/// rule takes it (by its address, or the `tag` it asks for), else the
/// formal content as this node's config read lag lets it be seen; and
/// which release, if any.
pub(crate) fn read_for(
    node: &Node,
    p: &Params,
    api: Api,
    caller: &Caller,
) -> Result<Option<ReadFor>, ApiError> {
    let key = key(p, api)?;
    Ok(node.config_for(&key, &caller.ip, p.get("tag").map(str::trim)))
}

/// The parameters of a v1 config call, or Nacos' answer when one of
/// `required` is missing or refused.
fn v1_params(
    node: &Node,
    params: Input,
    required: &[&'static str],
    path: &str,
) -> Result<Params, Box<Response>> {
    let p = params.map_err(|e| Box::new(v1_refusal(e)))?;
    match v1_refused(node, &p, required, path) {
        Some(refused) => Err(Box::new(refused)),
        None => Ok(p),
    }
}

pub(crate) async fn get_v1(
    State(node): State<Node>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    params: Input,
) -> Response {
    let p = match v1_params(&node, params, &["dataId", "group"], uri.path()) {
        Ok(p) => p,
        Err(refused) => return *refused,
    };
    if p.raw("show") == Some("all") {
        return detail_v1(&node, &p);
    }
    match read_for(&node, &p, Api::V1, &caller) {
        Err(e) => v1_refusal(e),
        Ok(None) => typed(
            (StatusCode::NOT_FOUND, "config data not exist\n").into_response(),
            JSON_UTF8,
        ),
        Ok(Some((item, gray))) => {
            let mut headers = HeaderMap::new();
            let mut set = |name: &'static str, value: &str| {
                if let Ok(value) = HeaderValue::from_str(value) {
                    headers.insert(name, value);
                }
            };
            set("content-type", content_type(&item.kind));
            set("config-type", &item.kind);
            set("content-md5", &item.md5);
            let modified = UNIX_EPOCH + Duration::from_millis(item.last_modified);
            set("last-modified", &httpdate::fmt_http_date(modified));
            set("pragma", "no-cache");
            set("expires", "Thu, 01 Jan 1970 00:00:00 GMT");
            set("cache-control", "no-cache,no-store");
            if !item.encrypted_data_key.is_empty() {
                set("encrypted-data-key", &item.encrypted_data_key);
            }
            match &gray {
                Some(GrayRule::Beta { .. }) => set("isBeta", "true"),
                Some(GrayRule::Tag { tag }) => set("tag", tag),
                None => {}
            }
            (headers, item.content.clone()).into_response()
        }
    }
}

/// A config as Nacos' `ConfigAllInfo` (`GET /v1/cs/configs?show=all`):
/// what is not set is `null`, the id a string, the default namespace `""`
/// (as Nacos 2 writes it; Nacos 3 writes `public`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConfigAllInfo {
    id: String,
    data_id: String,
    group: String,
    content: String,
    md5: String,
    encrypted_data_key: String,
    tenant: String,
    app_name: String,
    #[serde(rename = "type")]
    kind: String,
    create_time: u64,
    modify_time: u64,
    create_user: Option<String>,
    create_ip: String,
    desc: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    effect: Option<String>,
    schema: Option<String>,
    config_tags: Option<String>,
}

/// Nacos 2.x names the default namespace `""` in config bodies.
pub(crate) fn tenant(namespace: &NamespaceId) -> String {
    if namespace.is_public() {
        String::new()
    } else {
        namespace.to_string()
    }
}

/// `Some` of a set value, `None` of an empty one.
pub(crate) fn set(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// `GET /v1/cs/configs?show=all`: the formal config's detail; a config
/// that does not exist answers 200 with no body, as Nacos' null does.
fn detail_v1(node: &Node, p: &Params) -> Response {
    let key = match key(p, Api::V1) {
        Ok(key) => key,
        Err(e) => return v1_refusal(e),
    };
    let Some(item) = node.formal_config(&key) else {
        return typed(StatusCode::OK.into_response(), JSON_UTF8);
    };
    let detail = ConfigAllInfo {
        id: item.id.to_string(),
        data_id: key.data_id.clone(),
        group: key.group.clone(),
        content: item.content.clone(),
        md5: item.md5.clone(),
        encrypted_data_key: item.encrypted_data_key.clone(),
        tenant: tenant(&key.namespace),
        app_name: item.app_name.clone(),
        kind: item.kind.clone(),
        create_time: item.created,
        modify_time: item.last_modified,
        create_user: set(&item.created_by.user),
        create_ip: item.created_by.ip.clone(),
        desc: set(&item.desc),
        usage: None,
        effect: None,
        schema: None,
        config_tags: set(&item.tags),
    };
    typed(Json(detail).into_response(), JSON_UTF8)
}

/// `GET /nacos/v2/cs/config`. Its success carries Nacos' JSON content
/// type with the charset, its 404 none at all (Nacos writes that body
/// itself), and a missing `dataId` or `group` reads as Spring words it.
pub(crate) async fn get_v2(State(node): State<Node>, caller: Caller, params: Input) -> Response {
    let found = params.and_then(|p| {
        if let Some(field) = ["dataId", "group"].into_iter().find(|f| p.raw(f).is_none()) {
            return Err(ApiError::bad_request(
                ErrorCode::ParameterMissing,
                format!(
                    "Required request parameter '{field}' for method parameter type String is not present"
                ),
            ));
        }
        read_for(&node, &p, Api::V2, &caller)
    });
    match found {
        Err(e) => e.v2(),
        Ok(None) => {
            let mut response =
                ApiError::not_found(ErrorCode::ResourceNotFound, "config data not exist").v2();
            response.headers_mut().remove(CONTENT_TYPE);
            response
        }
        Ok(Some((item, _))) => typed(
            Json(NacosResult::success(item.content.clone())).into_response(),
            JSON_UTF8,
        ),
    }
}

pub(crate) async fn publish(
    node: &Node,
    p: &Params,
    headers: &HeaderMap,
    api: Api,
    caller: &Caller,
) -> Result<(), ApiError> {
    let key = key(p, api)?;
    let content = p
        .raw("content")
        .ok_or_else(|| ApiError::missing("content"))?;
    let spec = ConfigSpec {
        content: content.to_owned(),
        kind: p.get("type").unwrap_or("").to_owned(),
        app_name: p.get("appName").unwrap_or("").to_owned(),
        desc: p.get("desc").unwrap_or("").to_owned(),
        tags: p
            .get_any(&["config_tags", "configTags"])
            .unwrap_or("")
            .to_owned(),
        encrypted_data_key: p.get("encryptedDataKey").unwrap_or("").to_owned(),
    };
    let beta_ips = headers
        .get("betaIps")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let gray = GrayRule::requested(beta_ips, p.get("tag").unwrap_or(""))?;
    let cas_md5 = headers
        .get("casMd5")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().is_empty())
        .map(str::to_owned);
    let source = caller.source(p);
    // A gray release is not compared: it replaces the one of its name.
    let op = Op::publish_config(key, spec, cas_md5, source, gray);
    node.propose(op).await?;
    Ok(())
}

pub(crate) async fn remove(
    node: &Node,
    p: &Params,
    api: Api,
    caller: &Caller,
) -> Result<(), ApiError> {
    let key = key(p, api)?;
    let source = caller.source(p);
    // With a tag, the gray release of that tag goes, not the config.
    let op = match p.get("tag").map(str::trim) {
        Some(tag) => match node.registry().gray_named(&key, tag) {
            Some(name) => Op::RemoveConfigGray { key, name, source },
            None => return Ok(()),
        },
        None => Op::RemoveConfigFrom { key, source },
    };
    node.propose(op).await?;
    Ok(())
}

/// Nacos 2's answer to a v1 publish whose `casMd5` is not the config's
/// (its exception handler's 500; Nacos 3 answers `false`).
const CAS_FAILED_V1: &str = "caused: Cas publish fail, server md5 may have changed.;";

pub(crate) async fn publish_v1(
    State(node): State<Node>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    params: Input,
) -> Response {
    let p = match v1_params(&node, params, &["dataId", "group", "content"], uri.path()) {
        Ok(p) => p,
        Err(refused) => return *refused,
    };
    match publish(&node, &p, &headers, Api::V1, &caller).await {
        // Only a failed compare-and-set conflicts on a config publish.
        Err(e) if e.status() == StatusCode::CONFLICT => {
            (StatusCode::INTERNAL_SERVER_ERROR, plain(CAS_FAILED_V1)).into_response()
        }
        result => v1_true(result),
    }
}

pub(crate) async fn publish_v2(
    State(node): State<Node>,
    caller: Caller,
    headers: HeaderMap,
    params: Input,
) -> Response {
    v2_true(async { publish(&node, &params?, &headers, Api::V2, &caller).await }.await)
}

pub(crate) async fn remove_v1(
    State(node): State<Node>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    params: Input,
) -> Response {
    let p = match v1_params(&node, params, &["dataId", "group"], uri.path()) {
        Ok(p) => p,
        Err(refused) => return *refused,
    };
    v1_true(remove(&node, &p, Api::V1, &caller).await)
}

pub(crate) async fn remove_v2(State(node): State<Node>, caller: Caller, params: Input) -> Response {
    v2_true(async { remove(&node, &params?, Api::V2, &caller).await }.await)
}

/// One record of `Listening-Configs`: the key, the tenant as the client
/// wrote it, and the md5 it holds.
#[derive(Debug, Clone)]
pub(crate) struct Listening {
    key: ConfigKey,
    data_id: String,
    group: String,
    tenant: String,
    md5: String,
}

pub(crate) fn parse_listening(raw: &str) -> Result<Vec<Listening>, ApiError> {
    // Clients encode the value once more on top of the form encoding.
    let decoded: String =
        form_urlencoded::parse(format!("v={}", raw.replace('+', "%2B")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
    let mut records = Vec::new();
    for line in decoded.split(LINE).filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(WORD).collect();
        let (data_id, group, md5, tenant) = match fields.as_slice() {
            [d, g, m] => (*d, *g, *m, ""),
            [d, g, m, t] => (*d, *g, *m, *t),
            _ => {
                return Err(ApiError::invalid(
                    "Listening-Configs",
                    "invalid probeModify: a record must have 3 or 4 fields",
                ))
            }
        };
        let key = ConfigKey::parse(tenant, group, data_id)
            .map_err(|e| ApiError::invalid("Listening-Configs", e.to_string()))?;
        records.push(Listening {
            key,
            data_id: data_id.to_owned(),
            group: group.to_owned(),
            tenant: tenant.to_owned(),
            md5: md5.to_owned(),
        });
        if records.len() > MAX_RECORDS {
            return Err(ApiError::invalid(
                "Listening-Configs",
                format!("more than {MAX_RECORDS} records"),
            ));
        }
    }
    if records.is_empty() {
        return Err(ApiError::invalid(
            "Listening-Configs",
            "invalid probeModify: no record",
        ));
    }
    Ok(records)
}

/// The records whose md5 differs from what this client gets (a gray
/// release meant for its address, else the formal content).
fn changed<'a>(node: &Node, ip: &str, records: &'a [Listening]) -> Vec<&'a Listening> {
    let registry = node.registry();
    records
        .iter()
        .filter(|r| match registry.config_for(&r.key, ip, None) {
            Some((item, _)) => item.md5 != r.md5,
            None => !r.md5.is_empty(),
        })
        .collect()
}

fn answer(changed: &[&Listening]) -> Response {
    let mut body = String::new();
    for record in changed {
        body.push_str(&record.data_id);
        body.push(WORD);
        body.push_str(&record.group);
        if !record.tenant.is_empty() {
            body.push(WORD);
            body.push_str(&record.tenant);
        }
        body.push(LINE);
    }
    let encoded: String = form_urlencoded::byte_serialize(body.as_bytes()).collect();
    let mut headers = HeaderMap::new();
    headers.insert("pragma", HeaderValue::from_static("no-cache"));
    headers.insert(
        "expires",
        HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"),
    );
    headers.insert(
        "cache-control",
        HeaderValue::from_static("no-cache,no-store"),
    );
    typed((headers, format!("{encoded}\n")).into_response(), JSON_UTF8)
}

/// `POST /nacos/v1/cs/configs/listener`.
pub(crate) async fn listen(
    State(node): State<Node>,
    caller: Caller,
    headers: HeaderMap,
    params: Input,
) -> Response {
    let p = match params {
        Ok(p) => p,
        Err(e) => return v1_refusal(e),
    };
    let records = match p.required("Listening-Configs").and_then(parse_listening) {
        Ok(records) => records,
        Err(e) => return v1_refusal(e),
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Subscribe before comparing, so a change in between is not missed.
    let mut changes = node.state().config_changes();
    let now_changed = changed(&node, &caller.ip, &records);
    let hold = header("Long-Pulling-Timeout").and_then(|t| t.trim().parse::<u64>().ok());
    let no_hangup = header("Long-Pulling-Timeout-No-Hangup") == Some("true");
    let Some(hold) = hold.filter(|_| now_changed.is_empty() && !no_hangup) else {
        return answer(&now_changed);
    };
    let floor = node.config().http.long_poll_floor;
    let hold = Duration::from_millis(hold.saturating_sub(500)).max(floor);
    let watched: BTreeMap<&ConfigKey, ()> = records.iter().map(|r| (&r.key, ())).collect();
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        let key = match tokio::time::timeout_at(deadline, changes.recv()).await {
            Err(_) => return answer(&[]),
            Ok(Ok(key)) => key,
            // Missed some changes: compare everything again.
            Ok(Err(RecvError::Lagged(_))) => {
                let now_changed = changed(&node, &caller.ip, &records);
                if now_changed.is_empty() {
                    continue;
                }
                return answer(&now_changed);
            }
            Ok(Err(RecvError::Closed)) => return answer(&[]),
        };
        if watched.contains_key(&key) {
            let now_changed: Vec<&Listening> = changed(&node, &caller.ip, &records)
                .into_iter()
                .filter(|r| r.key == key)
                .collect();
            if !now_changed.is_empty() {
                return answer(&now_changed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_filter_words_names_as_nacos() {
        assert_eq!(illegal_name("dataId", "app.yaml:1_a-b"), None);
        assert_eq!(illegal_name("dataId", ""), None, "left to the handler");
        assert_eq!(
            illegal_name("dataId", "cs bad").as_deref(),
            Some("Param 'dataId' is illegal, illegal characters should not appear in the param.")
        );
        assert_eq!(
            illegal_name("group", &"g".repeat(129)).as_deref(),
            Some("Param 'group' is illegal, the param length should not exceed 128.")
        );
        assert_eq!(illegal_name("group", &"g".repeat(128)), None);
        assert_eq!(illegal_name("tenant", "a b"), None, "not the filter's");
    }
}
