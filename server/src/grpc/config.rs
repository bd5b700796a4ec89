//! The config requests of the Nacos gRPC API: query, publish (with CAS),
//! remove and batch listen. Listeners are subscriptions of the
//! connection's config subscriber; the tenant each listener sent is kept
//! as its variant and echoed in answers and pushes.

use understudy_core::{ConfigKey, ConfigSource, ConfigSpec, Error as CoreError, GrayRule, Op};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos_rpc::{
    seal, ConfigBatchListenRequest, ConfigChangeNotify, ConfigChangedBody, ConfigContext,
    ConfigPublishRequest, ConfigQueryBody, ConfigQueryRequest, Empty, Envelope, Response,
    ServerRequest, CONFIG_NOT_FOUND, INVALID_PARAM, OVER_THRESHOLD, SERVER_ERROR,
};
use understudy_proto::DecodeError;

use super::conn::Conn;
use super::kind::Failure;
use crate::http::config::illegal_name;
use crate::node::{Node, ProposeError};

/// The tag a request reads gray releases under: its own `tag`, else the
/// `Vipserver-Tag` label its connection announced.
fn tag_of<'a>(conn: &'a Conn, tag: Option<&'a str>) -> Option<&'a str> {
    tag.map(str::trim)
        .filter(|t| !t.is_empty())
        .or_else(|| conn.tag())
}

/// Answers a query with what this client gets: a gray release whose rule
/// takes it (its address, its tag), else the formal content.
pub(crate) fn query(node: &Node, conn: &Conn, envelope: &Envelope) -> Result<Payload, Failure> {
    let request: ConfigQueryRequest = envelope.decode()?;
    let key = request.key()?;
    let found = node.config_for(&key, conn.remote_ip(), tag_of(conn, request.tag.as_deref()));
    let response = match found {
        Some((item, gray)) => Response::ok(ConfigQueryBody {
            content: Some(item.content.clone()),
            encrypted_data_key: Some(item.encrypted_data_key.clone()),
            content_type: Some(item.kind.clone()),
            md5: Some(item.md5.clone()),
            last_modified: item.last_modified,
            beta: matches!(gray, Some(GrayRule::Beta { .. })),
            tag: match gray {
                Some(GrayRule::Tag { tag }) => Some(tag),
                _ => None,
            },
        }),
        None => Response::failed(
            CONFIG_NOT_FOUND,
            "config data not exist",
            ConfigQueryBody {
                content: None,
                encrypted_data_key: None,
                content_type: None,
                md5: None,
                last_modified: 0,
                beta: false,
                tag: None,
            },
        ),
    };
    Ok(seal("ConfigQueryResponse", &response))
}

/// Nacos' words for a failed compare-and-set.
const CAS_FAILED: &str = "Cas publish fail, server md5 may have changed.";

/// Publish and remove fail in their own response type, as Nacos does.
fn own_failure(kind: &str, error: ProposeError) -> Payload {
    let (code, message) = match &error {
        ProposeError::Rejected(CoreError::CasMismatch { .. }) => {
            (SERVER_ERROR, CAS_FAILED.to_owned())
        }
        ProposeError::Rejected(CoreError::OverLimit { .. }) | ProposeError::Busy => {
            (OVER_THRESHOLD, error.to_string())
        }
        ProposeError::Rejected(_) => (INVALID_PARAM, error.to_string()),
        _ => (SERVER_ERROR, error.to_string()),
    };
    seal(kind, &Response::failed(code, message, Empty {}))
}

/// Why Nacos refuses a publish before it stores anything, in its words:
/// its parameter filter's for a `dataId` or `group` of illegal characters
/// or length, then its handler's for a blank `dataId`, `group` or
/// content (the value written after the colon, `null` when absent).
fn publish_refusal(request: &ConfigPublishRequest) -> Option<String> {
    let common = &request.common;
    for (field, value) in [("dataId", &common.data_id), ("group", &common.group)] {
        if let Some(problem) = value.as_deref().and_then(|v| illegal_name(field, v)) {
            return Some(format!("Param check invalid:{problem}"));
        }
    }
    let blank = |v: &Option<String>| v.as_deref().is_none_or(|v| v.trim().is_empty());
    let written = |v: &Option<String>| v.clone().unwrap_or_else(|| "null".to_owned());
    if blank(&common.data_id) {
        Some(format!("invalid dataId : {}", written(&common.data_id)))
    } else if blank(&common.group) {
        Some(format!("invalid group : {}", written(&common.group)))
    } else if blank(&request.content) {
        Some(format!("content is blank : {}", written(&request.content)))
    } else {
        None
    }
}

/// The `ConfigChangeNotifyRequest` that tells a listener `key` changed,
/// naming the tenant as it listened with it.
pub(crate) fn change_notice(request_id: &str, key: &ConfigKey, tenant: &str) -> Payload {
    let body = ConfigChangeNotify {
        data_id: key.data_id.clone(),
        group: key.group.clone(),
        tenant: tenant.to_owned(),
    };
    seal(
        "ConfigChangeNotifyRequest",
        &ServerRequest::new(request_id, "config", body),
    )
}

fn invalid(kind: &str, error: DecodeError) -> Payload {
    seal(
        kind,
        &Response::failed(INVALID_PARAM, error.to_string(), Empty {}),
    )
}

/// Who a connection's config change comes from: its address, and the
/// `src_user` the request names.
fn source(conn: &Conn, user: String) -> ConfigSource {
    ConfigSource {
        ip: conn.remote_ip().to_owned(),
        user,
    }
}

pub(crate) async fn publish(
    node: &Node,
    conn: &Conn,
    envelope: &Envelope,
) -> Result<Payload, Failure> {
    const KIND: &str = "ConfigPublishResponse";
    let request: ConfigPublishRequest = envelope.decode()?;
    if let Some(message) = publish_refusal(&request) {
        return Ok(seal(
            KIND,
            &Response::failed(INVALID_PARAM, message, Empty {}),
        ));
    }
    let key = match request.common.key() {
        Ok(key) => key,
        Err(e) => return Ok(invalid(KIND, e)),
    };
    let gray = match GrayRule::requested(&request.addition("betaIps"), &request.addition("tag")) {
        Ok(gray) => gray,
        Err(e) => return Ok(invalid(KIND, DecodeError::from(e))),
    };
    let spec = ConfigSpec {
        content: request.content.clone().unwrap_or_default(),
        kind: request.addition("type"),
        app_name: request.addition("appName"),
        desc: request.addition("desc"),
        tags: request.addition("config_tags"),
        encrypted_data_key: request.addition("encryptedDataKey"),
    };
    let source = source(conn, request.addition("src_user"));
    let cas_md5 = request.cas_md5.filter(|m| !m.trim().is_empty());
    let op = Op::publish_config(key, spec, cas_md5, source, gray);
    Ok(match node.propose(op).await {
        Ok(_) => seal(KIND, &Response::ok(Empty {})),
        Err(e) => own_failure(KIND, e),
    })
}

pub(crate) async fn remove(
    node: &Node,
    conn: &Conn,
    envelope: &Envelope,
) -> Result<Payload, Failure> {
    const KIND: &str = "ConfigRemoveResponse";
    let request: ConfigQueryRequest = envelope.decode()?;
    let key = match request.key() {
        Ok(key) => key,
        Err(e) => return Ok(invalid(KIND, e)),
    };
    let source = source(conn, String::new());
    // With a tag, the gray release of that tag goes, not the config.
    let op = match request
        .tag
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        Some(tag) => match node.registry().gray_named(&key, tag) {
            Some(name) => Op::RemoveConfigGray { key, name, source },
            None => return Ok(seal(KIND, &Response::ok(Empty {}))),
        },
        None => Op::RemoveConfigFrom { key, source },
    };
    Ok(match node.propose(op).await {
        Ok(_) => seal(KIND, &Response::ok(Empty {})),
        Err(e) => own_failure(KIND, e),
    })
}

pub(crate) fn batch_listen(
    node: &Node,
    conn: &Conn,
    envelope: &Envelope,
) -> Result<Payload, Failure> {
    let request: ConfigBatchListenRequest = envelope.decode()?;
    let listen = request.listen.unwrap_or(true);
    let hub = node.state().config_hub();
    let mut changed = Vec::new();
    for context in request.config_listen_contexts.unwrap_or_default() {
        let tenant = context.tenant.clone().unwrap_or_default();
        let key = ConfigKey::parse(
            &tenant,
            context.group.as_deref().unwrap_or(""),
            context.data_id.as_deref().unwrap_or(""),
        )
        .map_err(DecodeError::from)?;
        if !listen {
            hub.unsubscribe(&conn.listener, &key);
            conn.forget_md5(&key);
            continue;
        }
        // Listen first, then compare: a change in between is either seen
        // here or pushed.
        let max = node.config().grpc.max_subscriptions_per_connection;
        hub.subscribe(&conn.listener, &key, &tenant, Vec::new(), max)
            .map_err(|full| {
                metrics::counter!("understudy_subscriptions_refused_total", "via" => "config")
                    .increment(1);
                Failure::over_limit(format!(
                    "this connection listens to {} configs, so {}@@{} cannot be added: over the limit of {} (max_subscriptions_per_connection)",
                    full.held, key.group, key.data_id, full.max
                ))
            })?;
        conn.listener.render_now(&key, &tenant, node.now(), |_| ());
        conn.listener.release(&key, &tenant);
        conn.subscribed();
        let held = context.md5.as_deref().unwrap_or("");
        conn.hold_md5(&key, held);
        let current = node
            .registry()
            .config_for(&key, conn.remote_ip(), conn.tag())
            .map(|(item, _)| item.md5.clone())
            .unwrap_or_default();
        if current != held {
            changed.push(ConfigContext {
                data_id: key.data_id.clone(),
                group: key.group.clone(),
                tenant,
            });
        }
    }
    Ok(seal(
        "ConfigChangeBatchListenResponse",
        &Response::ok(ConfigChangedBody {
            changed_configs: changed,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(json: &str) -> Option<String> {
        publish_refusal(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn publishes_are_refused_in_nacos_words_and_order() {
        assert_eq!(refusal(r#"{"dataId":"d","group":"g","content":"x"}"#), None);
        assert_eq!(
            refusal(r#"{"dataId":"d","group":"g","content":""}"#).as_deref(),
            Some("content is blank : ")
        );
        assert_eq!(
            refusal(r#"{"dataId":"d","group":"g"}"#).as_deref(),
            Some("content is blank : null")
        );
        assert_eq!(
            refusal(r#"{"dataId":"","group":"g","content":""}"#).as_deref(),
            Some("invalid dataId : "),
            "the dataId first"
        );
        assert_eq!(
            refusal(r#"{"dataId":"d","content":"x"}"#).as_deref(),
            Some("invalid group : null")
        );
        assert_eq!(
            refusal(r#"{"dataId":"a b","group":"","content":""}"#).as_deref(),
            Some("Param check invalid:Param 'dataId' is illegal, illegal characters should not appear in the param."),
            "the filter before the handler"
        );
    }
}
