//! The web console: three static files built into the binary (no front-end
//! build at run time), the JSON views it reads, and a server-sent event
//! stream that tells it when to read again.
//!
//! - `GET /`, `/nacos`, `/nacos/`: the page; `/console/app.js`,
//!   `/console/style.css`: its script and style;
//! - `GET /understudy/v1/registry?namespace=`: a namespace's groups and
//!   services with instance and health counts;
//! - `GET /understudy/v1/registry/service?namespace=&group=&service=`: one
//!   service's instances grouped by zone;
//! - `GET /understudy/v1/registry/subscribers?namespace=&group=&service=`
//!   and `GET /understudy/v1/registry/listeners?namespace=&group=&dataId=`:
//!   the Nacos gRPC connections that subscribe to a service or listen to a
//!   config, on every member, by the node that holds them;
//! - `GET /understudy/v1/events`: `change` events (the revision and the
//!   services that changed) as the registry changes, and a `tick` every
//!   second with this node's role and view lag.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use understudy_core::{GroupName, Instance, NamespaceId, ServiceKey};

use super::error::ApiError;
use super::params::Params;
use crate::raft::network::ClientsQuery;
use crate::Node;

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/app.js");
const STYLE: &str = include_str!("../../console/style.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response()
}

pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

type Input = Result<Params, ApiError>;

fn namespace(p: &Params) -> Result<NamespaceId, ApiError> {
    let raw = p.get("namespace").unwrap_or_default();
    NamespaceId::parse(raw).map_err(|e| ApiError::invalid("namespace", e.to_string()))
}

/// `GET /understudy/v1/registry?namespace=`.
pub(crate) async fn registry(State(node): State<Node>, params: Input) -> Response {
    let answer = params.and_then(|p| {
        let namespace = namespace(&p)?;
        let registry = node.registry();
        let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
        for service in registry.services(&namespace, None) {
            let key = service.key();
            let instances = service.instances();
            let count = instances.len();
            let healthy = service.instances().filter(|i| i.healthy).count();
            let zones: Vec<&str> = service.zones().into_keys().collect();
            let entry = json!({
                "name": key.name.as_str(),
                "instances": count,
                "healthy": healthy,
                "zones": zones,
            });
            match groups.last_mut() {
                Some((group, services)) if group == key.group.as_str() => services.push(entry),
                _ => groups.push((key.group.to_string(), vec![entry])),
            }
        }
        let groups: Vec<Value> = groups
            .into_iter()
            .map(|(name, services)| json!({"name": name, "services": services}))
            .collect();
        Ok(json!({
            "revision": registry.revision(),
            "namespace": namespace.as_str(),
            "groups": groups,
        }))
    });
    match answer {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.v2(),
    }
}

fn instance_json(i: &Instance) -> Value {
    json!({
        "ip": i.ip,
        "port": i.port,
        "weight": i.weight,
        "healthy": i.healthy,
        "enabled": i.enabled,
        "ephemeral": i.kind == understudy_core::ServiceKind::Ephemeral,
        "cluster": i.cluster.as_str(),
        "metadata": i.metadata.iter().collect::<std::collections::BTreeMap<_, _>>(),
    })
}

/// The service `namespace`, `group` and `service` name.
fn service_key(p: &Params) -> Result<ServiceKey, ApiError> {
    let namespace = namespace(p)?;
    let group = GroupName::parse(p.get("group").unwrap_or_default())
        .map_err(|e| ApiError::invalid("group", e.to_string()))?;
    let name = p.required("service")?;
    ServiceKey::parse(namespace.as_str(), group.as_str(), name)
        .map_err(|e| ApiError::invalid("service", e.to_string()))
}

/// `GET /understudy/v1/registry/service?namespace=&group=&service=`.
pub(crate) async fn service(State(node): State<Node>, params: Input) -> Response {
    let answer = params.and_then(|p| {
        let key = service_key(&p)?;
        let registry = node.registry();
        let zones: Vec<Value> = registry
            .service(&key)
            .map(|service| {
                service
                    .zones()
                    .into_iter()
                    .map(|(zone, instances)| {
                        let instances: Vec<Value> =
                            instances.into_iter().map(instance_json).collect();
                        json!({"name": zone, "instances": instances})
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(json!({
            "revision": registry.revision(),
            "exists": registry.service(&key).is_some(),
            "namespace": key.namespace.as_str(),
            "group": key.group.as_str(),
            "service": key.name.as_str(),
            "zones": zones,
        }))
    });
    match answer {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.v2(),
    }
}

/// Every member's connections that `query` asks for, by node: a Nacos
/// gRPC connection lives on the node it connected to.
async fn clients_everywhere(node: &Node, query: ClientsQuery) -> Value {
    let answers = node
        .clients_everywhere(&query, Duration::from_secs(2))
        .await;
    let nodes: Vec<Value> = answers
        .into_iter()
        .map(|(id, dc, answer)| {
            let mut entry = json!({"node": id, "dc": dc, "clients": []});
            match answer {
                Ok(clients) => {
                    entry["clients"] = clients
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "ip": c.ip,
                                "port": c.port,
                                "version": c.version,
                                "appName": c.app_name,
                                "lastActive": c.last_active_ms,
                                "md5": c.md5,
                            })
                        })
                        .collect();
                }
                Err(why) => entry["error"] = json!(why),
            }
            entry
        })
        .collect();
    json!({"nodes": nodes})
}

/// `GET /understudy/v1/registry/subscribers?namespace=&group=&service=`.
pub(crate) async fn subscribers(State(node): State<Node>, params: Input) -> Response {
    let query = params.and_then(|p| {
        let key = service_key(&p)?;
        Ok(ClientsQuery {
            namespace: key.namespace.to_string(),
            group: key.group.to_string(),
            name: key.name.to_string(),
            config: false,
        })
    });
    match query {
        Ok(query) => Json(clients_everywhere(&node, query).await).into_response(),
        Err(e) => e.v2(),
    }
}

/// `GET /understudy/v1/registry/listeners?namespace=&group=&dataId=`.
pub(crate) async fn listeners(State(node): State<Node>, params: Input) -> Response {
    let query = params.and_then(|p| {
        let namespace = namespace(&p)?;
        let data_id = p.required("dataId")?.to_owned();
        Ok(ClientsQuery {
            namespace: namespace.to_string(),
            group: p.get("group").unwrap_or_default().trim().to_owned(),
            name: data_id,
            config: true,
        })
    });
    match query {
        Ok(query) => Json(clients_everywhere(&node, query).await).into_response(),
        Err(e) => e.v2(),
    }
}

/// `GET /understudy/v1/events`: server-sent events for the console.
pub(crate) async fn events(
    State(node): State<Node>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let changes = node.state().watch_changes();
    let ticks = tokio::time::interval(Duration::from_secs(1));
    let stream = futures_util::stream::unfold(
        (node, changes, ticks),
        |(node, mut changes, mut ticks)| async move {
            let event = tokio::select! {
                received = changes.recv() => match received {
                    Ok(batch) => {
                        let mut services: Vec<String> = batch
                            .iter()
                            .filter_map(|c| c.event.service())
                            .map(|k| format!("{}/{}/{}", k.namespace, k.group, k.name))
                            .collect();
                        services.dedup();
                        let revision = node.registry().revision();
                        change(revision, &services)
                    }
                    // Too far behind, or the registry replaced: read everything.
                    Err(RecvError::Lagged(_)) => change(node.registry().revision(), &[]),
                    Err(RecvError::Closed) => return None,
                },
                _ = ticks.tick() => {
                    let status = node.cluster_status();
                    let lag = node.view_lag().map(|l| l.as_millis() as u64);
                    let data = json!({
                        "revision": node.registry().revision(),
                        "node": status.node_id,
                        "dc": status.dc,
                        "role": status.role,
                        "leader": status.leader,
                        "viewLagMs": lag,
                    });
                    Event::default().event("tick").data(data.to_string())
                }
            };
            Some((Ok(event), (node, changes, ticks)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

fn change(revision: u64, services: &[String]) -> Event {
    let data = json!({"revision": revision, "services": services});
    Event::default().event("change").data(data.to_string())
}
