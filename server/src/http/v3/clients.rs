//! `/nacos/v3/admin/ns/client/**`, `/ns/service/subscribers`,
//! `/ns/ops/**` and the config listener views (`/cs/config/listener`,
//! `/cs/listener`): who is connected to this node, what each publishes,
//! subscribes to and listens to. Clients are Nacos gRPC connections
//! (`<ms>_<ip>_<port>`) and HTTP registrations (`ip:port#true` beat-driven,
//! `ip:port#false` persistent), as Nacos names them. Connections are this
//! node's own; what they publish is replicated, so any node lists every
//! publisher.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde::Serialize;
use serde_json::{json, Value};
use understudy_core::{NamespaceId, Owner, ServiceKey};
use understudy_proto::nacos::ErrorCode;
use understudy_proto::nacos3::Page;

use super::super::config::{self as config_api, Api as ConfigApi};
use super::super::error::ApiError;
use super::super::ops;
use super::super::params::{Api, Params};
use super::{page, reply, Route};
use crate::clients::ClientInfo;
use crate::node::Node;

type Input = Result<Params, ApiError>;

pub(super) fn routes() -> Vec<Route> {
    vec![
        ("/nacos/v3/admin/ns/client/list", get(client_list)),
        ("/nacos/v3/admin/ns/client", get(client_detail)),
        ("/nacos/v3/admin/ns/client/publish/list", get(published)),
        ("/nacos/v3/admin/ns/client/subscribe/list", get(subscribed)),
        (
            "/nacos/v3/admin/ns/client/service/publisher/list",
            get(service_publishers),
        ),
        (
            "/nacos/v3/admin/ns/client/service/subscriber/list",
            get(service_subscribers),
        ),
        (
            "/nacos/v3/admin/ns/service/subscribers",
            get(subscribers_page),
        ),
        ("/nacos/v3/admin/ns/ops/metrics", get(metrics)),
        (
            "/nacos/v3/admin/ns/ops/switches",
            get(ops::get_switches_v2).put(ops::put_switches_v2),
        ),
        ("/nacos/v3/admin/cs/config/listener", get(config_listeners)),
        ("/nacos/v3/admin/cs/listener", get(listening)),
    ]
}

/// Nacos' id of an owner of instances.
fn client_id(owner: &Owner) -> String {
    match owner {
        Owner::Connection { id, .. } => id.to_string(),
        Owner::Beat { ip, port } => format!("{ip}:{port}#true"),
        Owner::Persistent { ip, port } => format!("{ip}:{port}#false"),
    }
}

/// The owner a client id names: a connection of this node, or an HTTP
/// registration.
fn owner_of(node: &Node, id: &str) -> Option<Owner> {
    let http = |rest: &str, persistent: bool| {
        let (ip, port) = rest.rsplit_once(':')?;
        let port = port.parse().ok()?;
        let ip = ip.to_owned();
        Some(if persistent {
            Owner::Persistent {
                ip: ip.into(),
                port,
            }
        } else {
            Owner::Beat {
                ip: ip.into(),
                port,
            }
        })
    };
    if let Some(rest) = id.strip_suffix("#true") {
        return http(rest, false);
    }
    if let Some(rest) = id.strip_suffix("#false") {
        return http(rest, true);
    }
    Some(Owner::Connection {
        node: node.config().node_id,
        id: id.into(),
    })
}

fn connections(node: &Node) -> Vec<ClientInfo> {
    node.clients().map(|c| c.connections()).unwrap_or_default()
}

/// `GET /ns/client/list`: this node's connections and every HTTP
/// registration.
async fn client_list(State(node): State<Node>) -> Response {
    let mut ids: Vec<String> = connections(&node).into_iter().map(|c| c.id).collect();
    let registry = node.registry();
    ids.extend(
        registry
            .owners()
            .filter(|o| !matches!(o, Owner::Connection { .. }))
            .map(client_id),
    );
    reply(Ok(ids))
}

/// Nacos' `ClientSummaryInfo`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientSummary {
    client_id: String,
    ephemeral: bool,
    last_updated_time: u64,
    client_type: &'static str,
    connect_type: Option<&'static str>,
    app_name: Option<String>,
    version: Option<String>,
    client_ip: Option<String>,
    client_port: u16,
}

fn required_client(p: &Params) -> Result<&str, ApiError> {
    p.required("clientId")
}

fn not_a_client(id: &str) -> ApiError {
    ApiError::not_found(
        ErrorCode::ResourceNotFound,
        format!("clientId [ {id} ] not exist"),
    )
}

/// `GET /ns/client?clientId=`.
async fn client_detail(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let id = required_client(&p)?;
        if let Some(c) = connections(&node).into_iter().find(|c| c.id == id) {
            return Ok(ClientSummary {
                client_id: c.id,
                ephemeral: true,
                last_updated_time: c.last_active,
                client_type: "connection",
                connect_type: Some("GRPC"),
                app_name: Some(c.app_name),
                version: Some(c.version),
                client_ip: Some(c.ip),
                client_port: c.port,
            });
        }
        let owner = owner_of(&node, id)
            .filter(|o| !matches!(o, Owner::Connection { .. }))
            .filter(|o| node.registry().published_by(o).next().is_some())
            .ok_or_else(|| not_a_client(id))?;
        Ok(ClientSummary {
            client_id: id.to_owned(),
            ephemeral: matches!(owner, Owner::Beat { .. }),
            last_updated_time: node.now(),
            client_type: "ipPort",
            connect_type: None,
            app_name: None,
            version: None,
            client_ip: None,
            client_port: 0,
        })
    }))
}

/// What a client publishes or subscribes to, as Nacos' `ClientServiceInfo`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClientService {
    namespace_id: String,
    group_name: String,
    service_name: String,
    publisher_info: Option<Publisher>,
    subscriber_info: Option<Subscriber>,
}

/// Nacos' `ClientPublisherInfo`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Publisher {
    client_id: Option<String>,
    ip: String,
    port: u16,
    cluster_name: String,
}

/// Nacos' `ClientSubscriberInfo`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Subscriber {
    client_id: Option<String>,
    app_name: String,
    agent: String,
    address: String,
}

impl Subscriber {
    fn of(client: &ClientInfo, with_id: bool) -> Self {
        Self {
            client_id: with_id.then(|| client.id.clone()),
            app_name: client.app_name.clone(),
            agent: client.version.clone(),
            address: client.ip.clone(),
        }
    }
}

fn service_parts(key: &ServiceKey) -> (String, String, String) {
    (
        key.namespace.to_string(),
        key.group.to_string(),
        key.name.to_string(),
    )
}

/// `GET /ns/client/publish/list?clientId=`.
async fn published(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let id = required_client(&p)?;
        let owner = owner_of(&node, id).ok_or_else(|| not_a_client(id))?;
        let registry = node.registry();
        let known = registry.published_by(&owner).next().is_some()
            || connections(&node).iter().any(|c| c.id == id);
        if !known {
            return Err(not_a_client(id));
        }
        Ok(registry
            .published_by(&owner)
            .map(|(service, instance)| {
                let (namespace_id, group_name, service_name) = service_parts(service);
                ClientService {
                    namespace_id,
                    group_name,
                    service_name,
                    publisher_info: Some(Publisher {
                        client_id: None,
                        ip: instance.ip.to_string(),
                        port: instance.port,
                        cluster_name: instance.cluster.to_string(),
                    }),
                    subscriber_info: None,
                }
            })
            .collect::<Vec<_>>())
    }))
}

/// `GET /ns/client/subscribe/list?clientId=`.
async fn subscribed(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let id = required_client(&p)?;
        let clients = node.clients().ok_or_else(|| not_a_client(id))?;
        let services = clients.subscriptions(id).ok_or_else(|| not_a_client(id))?;
        let client = clients
            .connections()
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| not_a_client(id))?;
        Ok(services
            .iter()
            .map(|service| {
                let (namespace_id, group_name, service_name) = service_parts(service);
                ClientService {
                    namespace_id,
                    group_name,
                    service_name,
                    publisher_info: None,
                    subscriber_info: Some(Subscriber::of(&client, false)),
                }
            })
            .collect::<Vec<_>>())
    }))
}

/// `ip` and `port` filters of the per-service client lists.
fn address_filter(p: &Params) -> Result<(Option<String>, Option<u16>), ApiError> {
    let ip = p.get("ip").map(|ip| ip.trim().to_owned());
    let port = p
        .get("port")
        .map(super::super::params::parse_port)
        .transpose()?;
    Ok((ip, port))
}

/// `GET /ns/client/service/publisher/list?serviceName=`.
async fn service_publishers(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = p.service_key(Api::V2)?;
        let (ip, port) = address_filter(&p)?;
        let service = node.registry().service(&key);
        Ok(service
            .iter()
            .flat_map(|s| s.instances())
            .filter(|i| ip.as_ref().is_none_or(|ip| **ip == *i.ip))
            .filter(|i| port.is_none_or(|port| port == i.port))
            .map(|i| Publisher {
                client_id: Some(client_id(&i.owner)),
                ip: i.ip.to_string(),
                port: i.port,
                cluster_name: i.cluster.to_string(),
            })
            .collect::<Vec<_>>())
    }))
}

fn subscribers_of(node: &Node, key: &ServiceKey) -> Vec<ClientInfo> {
    node.clients()
        .map(|c| c.subscribers(key))
        .unwrap_or_default()
}

/// `GET /ns/client/service/subscriber/list?serviceName=`.
async fn service_subscribers(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = p.service_key(Api::V2)?;
        let (ip, port) = address_filter(&p)?;
        Ok(subscribers_of(&node, &key)
            .iter()
            .filter(|c| ip.as_ref().is_none_or(|ip| *ip == c.ip))
            .filter(|c| port.is_none_or(|port| port == c.port))
            .map(|c| Subscriber::of(c, true))
            .collect::<Vec<_>>())
    }))
}

/// Nacos' `SubscriberInfo`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SubscriberInfo {
    namespace_id: String,
    group_name: String,
    service_name: String,
    ip: String,
    port: u16,
    agent: String,
    app_name: String,
    address: String,
}

/// `GET /ns/service/subscribers?serviceName=`: a page of this node's
/// subscribers of the service.
async fn subscribers_page(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = p.service_key(Api::V2)?;
        let (page_no, page_size) = page(&p)?;
        let (namespace_id, group_name, service_name) = service_parts(&key);
        let items = subscribers_of(&node, &key)
            .into_iter()
            .map(|c| SubscriberInfo {
                namespace_id: namespace_id.clone(),
                group_name: group_name.clone(),
                service_name: service_name.clone(),
                address: format!("{}:{}", c.ip, c.port),
                ip: c.ip,
                port: c.port,
                agent: c.version,
                app_name: c.app_name,
            });
        Ok(Page::naming(items, page_no, page_size))
    }))
}

/// `GET /ns/ops/metrics?onlyStatus=` (default true): `{"status":"UP"}`,
/// or with the counts of services, instances, subscriptions and clients.
async fn metrics(State(node): State<Node>, params: Input) -> Response {
    let node = &node;
    reply(params.map(|p| {
        if p.flag("onlyStatus", true) {
            return json!({"status": "UP"});
        }
        let counts = node.registry().counts();
        let connections = connections(node);
        let registry = node.registry();
        let (mut beat, mut persistent) = (0, 0);
        for owner in registry.owners() {
            match owner {
                Owner::Beat { .. } => beat += 1,
                Owner::Persistent { .. } => persistent += 1,
                Owner::Connection { .. } => {}
            }
        }
        let subscriptions: usize = connections
            .iter()
            .filter_map(|c| node.clients().and_then(|cl| cl.subscriptions(&c.id)))
            .map(|s| s.len())
            .sum();
        let clients = connections.len() + beat + persistent;
        json!({
            "status": "UP",
            "serviceCount": counts.services,
            "instanceCount": counts.instances,
            "subscribeCount": subscriptions,
            "clientCount": clients,
            "connectionBasedClientCount": connections.len(),
            "ephemeralIpPortClientCount": beat,
            "persistentIpPortClientCount": persistent,
            "responsibleClientCount": clients,
        })
    }))
}

/// `GET /cs/config/listener?dataId=&groupName=`: which of this node's
/// clients listen to the config, with the md5 each holds.
async fn config_listeners(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = config_api::key(&p, ConfigApi::V3)?;
        let status: BTreeMap<String, String> = node
            .clients()
            .map(|c| c.listeners(&key))
            .unwrap_or_default()
            .into_iter()
            .map(|(client, md5)| (client.ip, md5))
            .collect();
        Ok(json!({"queryType": "config", "listenersStatus": status}))
    }))
}

/// `GET /cs/listener?ip=`: what the clients at `ip` listen to, as
/// `dataId+group+namespace` with the md5 each holds; `namespaceId` keeps
/// one namespace's, else `all=true` every namespace's, else the default
/// namespace's.
async fn listening(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let ip = p.required("ip")?.trim().to_owned();
        let namespace = p
            .get("namespaceId")
            .map(|raw| {
                NamespaceId::parse(raw).map_err(|e| ApiError::invalid("namespaceId", e.to_string()))
            })
            .transpose()?;
        let all = p.flag("all", false);
        let escape = |s: &str| s.replace('%', "%25").replace('+', "%2B");
        let status: BTreeMap<String, String> = node
            .clients()
            .map(|c| c.listening(&ip))
            .unwrap_or_default()
            .into_iter()
            .filter(|(key, _)| match &namespace {
                Some(ns) => key.namespace == *ns,
                None => all || key.namespace.is_public(),
            })
            .map(|(key, md5)| {
                let group_key = format!(
                    "{}+{}+{}",
                    escape(&key.data_id),
                    escape(&key.group),
                    escape(key.namespace.as_str())
                );
                (group_key, md5)
            })
            .collect();
        let status: Value = json!(status);
        Ok(json!({"queryType": "ip", "listenersStatus": status}))
    }))
}
