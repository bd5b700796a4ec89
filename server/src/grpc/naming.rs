//! The unary Nacos gRPC requests: the handshake ones and the naming ones.
//! Each decodes its body, calls the node, and answers with the exact
//! response type Nacos uses; bad input gets an `ErrorResponse` naming the
//! field, and the connection stays usable.

use std::sync::Arc;

use understudy_core::access::Action;
use understudy_core::{InstanceSpec, Op, Owner, ServiceKey};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos::{Hosts, NameStyle, ServiceInfoRef, View};
use understudy_proto::nacos_rpc::{
    error_response, error_response_as, instance_param_check, parse_clusters, seal,
    BatchInstanceRequest, Empty, Envelope, InstanceAck, InstanceRequest, NamingCommon, Response,
    ServerCheck, ServiceInfoBody, ServiceList, ServiceListRequest, ServiceQueryRequest,
    SubscribeServiceRequest, NO_HANDLER, NO_RIGHT, OVER_THRESHOLD, SERVER_ERROR, UN_REGISTER,
};
use understudy_proto::DecodeError;

use super::ai;
use super::config;
use super::conn::Conn;
use super::fuzzy;
use super::hold;
use super::kind::{Failure, RequestKind};
use super::lock;
use crate::node::Node;
use crate::push::PushTarget;

/// Answers one unary request.
pub(crate) async fn dispatch(node: &Node, conn: &Arc<Conn>, envelope: Envelope) -> Payload {
    conn.touch(node.now());
    let kind = RequestKind::parse(&envelope.kind);
    let label = RequestKind::label(kind);
    if kind == Some(RequestKind::ServerCheck) {
        let reset_after = node.config().cluster.quorum_loss_reset;
        if let Some(lost) = node.quorum_lost_for().filter(|lost| *lost >= reset_after) {
            // Clients try their next server on a failed check.
            return error_response(
                SERVER_ERROR,
                format!(
                    "node {} has been cut off from the cluster majority for {} ms; use another server",
                    node.config().node_id,
                    lost.as_millis()
                ),
            );
        }
        let body = ServerCheck {
            connection_id: conn.id.clone(),
            support_ability_negotiation: true,
        };
        return seal("ServerCheckResponse", &Response::ok(body));
    }
    if !conn.is_registered() {
        return error_response(UN_REGISTER, "Connection is unregistered.");
    }
    if kind != Some(RequestKind::HealthCheck) {
        match authorized(node, kind, &envelope).await {
            // A user limited by its roles: its pushes are checked again
            // before each is sent.
            Ok(Some(identity)) if !identity.bootstrap => conn.limit_to(&identity.user),
            Ok(_) => {}
            Err(denied) => {
                metrics::counter!("understudy_grpc_requests_total", "type" => label, "outcome" => "denied")
                    .increment(1);
                let response = kind.map_or("ErrorResponse", RequestKind::response);
                return error_response_as(response, NO_RIGHT, denied.to_string());
            }
        }
    }
    if kind != Some(RequestKind::HealthCheck) {
        let races = node.races();
        let request = || hold::describe(&envelope);
        if let Some(held) = races.take_armed(&conn.id, request, node.now()) {
            hold::hold(node, conn, held).await;
        }
    }
    let _slot = if takes_a_slot(kind, &envelope) {
        match node.admission().enter("grpc").await {
            Ok(slot) => Some(slot),
            Err(busy) => {
                metrics::counter!("understudy_grpc_requests_total", "type" => label, "outcome" => "busy")
                    .increment(1);
                return error_response(OVER_THRESHOLD, busy.to_string());
            }
        }
    } else {
        None
    };
    let started = std::time::Instant::now();
    let result = match kind {
        Some(RequestKind::HealthCheck) => Ok(seal("HealthCheckResponse", &Response::ok(Empty {}))),
        Some(RequestKind::Instance) => {
            instance(node, conn, &envelope, Persistence::Connection).await
        }
        Some(RequestKind::PersistentInstance) => {
            instance(node, conn, &envelope, Persistence::Persistent).await
        }
        Some(RequestKind::BatchInstance) => batch(node, conn, &envelope).await,
        Some(RequestKind::ServiceQuery) => query(node, conn, &envelope),
        Some(RequestKind::Subscribe) => subscribe(node, conn, &envelope),
        Some(RequestKind::ServiceList) => service_list(node, &envelope),
        Some(RequestKind::ConfigQuery) => config::query(node, conn, &envelope),
        Some(RequestKind::ConfigPublish) => config::publish(node, conn, &envelope).await,
        Some(RequestKind::ConfigRemove) => config::remove(node, conn, &envelope).await,
        Some(RequestKind::ConfigBatchListen) => config::batch_listen(node, conn, &envelope),
        Some(RequestKind::NamingFuzzyWatch) => fuzzy::watch(node, conn, &envelope, true),
        Some(RequestKind::ConfigFuzzyWatch) => fuzzy::watch(node, conn, &envelope, false),
        Some(RequestKind::QueryMcpServer) => ai::query(node, &envelope),
        Some(RequestKind::ReleaseMcpServer) => ai::release(node, &envelope).await,
        Some(RequestKind::McpServerEndpoint) => ai::endpoint(node, conn, &envelope).await,
        Some(RequestKind::QueryAgentCard) => ai::query_agent(node, &envelope),
        Some(RequestKind::ReleaseAgentCard) => ai::release_agent(node, &envelope).await,
        Some(RequestKind::AgentEndpoint) => ai::agent_endpoint(node, conn, &envelope).await,
        Some(RequestKind::LockOperation) => lock::operate(node, &envelope).await,
        // Nacos' words; the request type is in the envelope.
        Some(RequestKind::ServerCheck | RequestKind::ConnectionSetup) | None => {
            Err(Failure::coded(NO_HANDLER, "RequestHandler Not Found"))
        }
    };
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("understudy_grpc_requests_total", "type" => label, "outcome" => outcome)
        .increment(1);
    metrics::histogram!("understudy_grpc_request_seconds", "type" => label)
        .record(started.elapsed().as_secs_f64());
    result.unwrap_or_else(Failure::into_payload)
}

/// Whether a request takes a slot (see [`crate::admission`]): all do but
/// the connection's health check and deregistrations, which keep the
/// registry true under load.
fn takes_a_slot(kind: Option<RequestKind>, envelope: &Envelope) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    match kind {
        Some(RequestKind::HealthCheck) => false,
        Some(RequestKind::Instance) => !envelope
            .decode::<Kind>()
            .is_ok_and(|body| body.kind.as_deref() == Some("deregisterInstance")),
        _ => true,
    }
}

/// Checks the `accessToken` header (in the payload's metadata, or in the
/// body's `headers` as some clients send it; without one, `username` and
/// `password` headers, as Nacos accepts) when auth is on, and, for a
/// user created through the API, that its roles allow the request on the
/// namespace, group and service or config it names.
async fn authorized(
    node: &Node,
    kind: Option<RequestKind>,
    envelope: &Envelope,
) -> Result<Option<crate::auth::Identity>, crate::auth::Denied> {
    let auth = node.auth();
    if !auth.enabled() {
        return Ok(None);
    }
    #[derive(serde::Deserialize, Default)]
    struct Headers {
        #[serde(default)]
        headers: std::collections::BTreeMap<String, String>,
    }
    let in_body = std::sync::OnceLock::new();
    let header = |name: &str| {
        envelope.headers.get(name).cloned().or_else(|| {
            in_body
                .get_or_init(|| envelope.decode::<Headers>().unwrap_or_default().headers)
                .get(name)
                .cloned()
        })
    };
    let now = node.now();
    let identity = match (
        header("accessToken"),
        header("username"),
        header("password"),
    ) {
        (None, Some(user), Some(password)) => auth.sign_in(user, password, now).await?,
        (token, _, _) => auth.verify(token.as_deref(), now)?,
    };
    if !identity.bootstrap && !identity.admin {
        for (resource, action) in resources(kind, envelope) {
            auth.permit(&identity, resource, action)?;
        }
    }
    Ok(Some(identity))
}

/// The resources a naming or config request touches, as Nacos' auth
/// plugin names them, and what it does to them.
fn resources(kind: Option<RequestKind>, envelope: &Envelope) -> Vec<(String, Action)> {
    use understudy_core::access::resource;
    let body: serde_json::Value = envelope.decode().unwrap_or_default();
    let field = |v: &serde_json::Value, name: &str| v[name].as_str().unwrap_or("").to_owned();
    let naming = |action| {
        let resource = understudy_core::access::naming_resource(
            &field(&body, "namespace"),
            &field(&body, "groupName"),
            &field(&body, "serviceName"),
        );
        vec![(resource, action)]
    };
    let config = |v: &serde_json::Value| {
        resource(
            &field(v, "tenant"),
            &field(v, "group"),
            "config",
            &field(v, "dataId"),
        )
    };
    match kind {
        Some(
            RequestKind::Instance | RequestKind::PersistentInstance | RequestKind::BatchInstance,
        ) => naming(Action::Write),
        Some(RequestKind::ServiceQuery | RequestKind::Subscribe | RequestKind::ServiceList) => {
            naming(Action::Read)
        }
        Some(RequestKind::ConfigPublish | RequestKind::ConfigRemove) => {
            vec![(config(&body), Action::Write)]
        }
        Some(RequestKind::ConfigQuery) => vec![(config(&body), Action::Read)],
        Some(RequestKind::NamingFuzzyWatch | RequestKind::ConfigFuzzyWatch) => {
            // The pattern itself is the resource: a permission must cover
            // all it may match (`ns:*:*`), not one name it matches.
            let pattern = field(&body, "groupKeyPattern");
            let parts: Vec<&str> = pattern.split(understudy_core::PATTERN_SEPARATOR).collect();
            let part = |i: usize| parts.get(i).copied().unwrap_or("");
            let kind = if kind == Some(RequestKind::NamingFuzzyWatch) {
                "naming"
            } else {
                "config"
            };
            vec![(resource(part(0), part(1), kind, part(2)), Action::Read)]
        }
        Some(
            kind @ (RequestKind::QueryMcpServer
            | RequestKind::ReleaseMcpServer
            | RequestKind::McpServerEndpoint
            | RequestKind::QueryAgentCard
            | RequestKind::ReleaseAgentCard
            | RequestKind::AgentEndpoint),
        ) => {
            // An MCP server or an agent is a resource of its namespace, by
            // name.
            let name = ["mcpName", "agentName"]
                .iter()
                .find_map(|f| body[f].as_str())
                .or_else(|| body["serverSpecification"]["name"].as_str())
                .or_else(|| body["agentCard"]["name"].as_str())
                .unwrap_or("");
            let action = if matches!(
                kind,
                RequestKind::QueryMcpServer | RequestKind::QueryAgentCard
            ) {
                Action::Read
            } else {
                Action::Write
            };
            vec![(
                resource(&field(&body, "namespaceId"), "", "ai", name),
                action,
            )]
        }
        Some(RequestKind::ConfigBatchListen) => body["configListenContexts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (config(c), Action::Read))
            .collect(),
        _ => Vec::new(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Persistence {
    /// Ephemeral: owned by the connection.
    Connection,
    /// Persistent: owned by `ip:port`, survives the connection.
    Persistent,
}

async fn instance(
    node: &Node,
    conn: &Conn,
    envelope: &Envelope,
    persistence: Persistence,
) -> Result<Payload, Failure> {
    let request: InstanceRequest = envelope.decode()?;
    let response = "InstanceResponse";
    if let Some(refusal) = request.instance.as_ref().and_then(instance_param_check) {
        return Err(Failure::param_check(response, refusal));
    }
    let service = named_service(&request.common)?;
    let kind = request.kind.unwrap_or_default();
    let wire = request
        .instance
        .ok_or_else(|| DecodeError::new("instance", "is required"))?;
    let op = match (kind.as_str(), persistence) {
        ("registerInstance", Persistence::Connection) => Op::Register {
            service,
            owner: conn.owner(node),
            instances: vec![InstanceSpec::try_from(wire)?],
        },
        ("deregisterInstance", Persistence::Connection) => Op::Deregister {
            service,
            owner: conn.owner(node),
        },
        ("registerInstance", Persistence::Persistent) => {
            let spec = InstanceSpec::try_from(wire)?;
            Op::Register {
                service,
                owner: Owner::Persistent {
                    ip: spec.ip.as_str().into(),
                    port: spec.port,
                },
                instances: vec![spec],
            }
        }
        ("deregisterInstance", Persistence::Persistent) => {
            let spec = InstanceSpec::try_from(wire)?;
            Op::Deregister {
                service,
                owner: Owner::Persistent {
                    ip: spec.ip.into(),
                    port: spec.port,
                },
            }
        }
        _ => return Err(Failure::invalid(format!("Unsupported request type {kind}"))),
    };
    node.propose(op).await?;
    Ok(seal(response, &Response::ok(InstanceAck { kind })))
}

/// The service an instance request names. Nacos' handler fails on a blank
/// name with a server error in its own words; so does this.
fn named_service(common: &NamingCommon) -> Result<ServiceKey, Failure> {
    if common
        .service_name
        .as_deref()
        .is_none_or(|name| name.trim().is_empty())
    {
        return Err(Failure::coded(
            SERVER_ERROR,
            "Param 'serviceName' is illegal, serviceName is blank",
        ));
    }
    Ok(common.service_key()?)
}

async fn batch(node: &Node, conn: &Conn, envelope: &Envelope) -> Result<Payload, Failure> {
    let request: BatchInstanceRequest = envelope.decode()?;
    let refused = request
        .instances
        .iter()
        .flatten()
        .find_map(instance_param_check);
    if let Some(refusal) = refused {
        return Err(Failure::param_check("BatchInstanceResponse", refusal));
    }
    let service = named_service(&request.common)?;
    let kind = request.kind.unwrap_or_default();
    if kind != "batchRegisterInstance" {
        return Err(Failure::invalid(format!("Unsupported request type {kind}")));
    }
    let instances = request
        .instances
        .unwrap_or_default()
        .into_iter()
        .map(InstanceSpec::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    node.propose(Op::Register {
        service,
        owner: conn.owner(node),
        instances,
    })
    .await?;
    Ok(seal(
        "BatchInstanceResponse",
        &Response::ok(InstanceAck { kind }),
    ))
}

/// The hosts a push (or a subscribe's answer) carries, and the registry
/// revision they show.
pub(crate) fn push_hosts(node: &Node, target: &PushTarget<'_, ServiceKey>) -> (Arc<Hosts>, u64) {
    let view = View {
        clusters_raw: target.clusters_raw,
        clusters: target.clusters,
        healthy_only: false,
    };
    node.state().hosts_at(target.key, view)
}

fn query(node: &Node, conn: &Conn, envelope: &Envelope) -> Result<Payload, Failure> {
    let request: ServiceQueryRequest = envelope.decode()?;
    let key = request.common.service_key()?;
    // Nacos' names only: a misspelled field narrows nothing, as in Nacos.
    let clusters_raw = request.cluster.unwrap_or_default();
    let clusters = parse_clusters(&clusters_raw)?;
    let healthy_only = request.healthy_only.unwrap_or(false);
    let view = View {
        clusters_raw: &clusters_raw,
        clusters: &clusters,
        healthy_only,
    };
    let (hosts, revision) = node.state().hosts_at(&key, view);
    let now = node.now();
    node.races()
        .record(&conn.id, &key, "queried", Some(revision), None, now);
    let info = ServiceInfoRef::new(&key, NameStyle::Plain, &clusters_raw, &hosts, now);
    Ok(seal(
        "QueryServiceResponse",
        &Response::ok(ServiceInfoBody { service_info: info }),
    ))
}

fn subscribe(node: &Node, conn: &Conn, envelope: &Envelope) -> Result<Payload, Failure> {
    let request: SubscribeServiceRequest = envelope.decode()?;
    let key = request.common.service_key()?;
    let clusters_raw = request.clusters.unwrap_or_default();
    let clusters = parse_clusters(&clusters_raw)?;
    let hub = node.state().hub();
    let subscriber = &conn.subscriber;
    let (hosts, ref_time) = if request.subscribe.unwrap_or(false) {
        // Subscribe first, then render: a change racing with this request
        // is either in the answer or marks the subscription for a push.
        let max = node.config().grpc.max_subscriptions_per_connection;
        hub.subscribe(subscriber, &key, &clusters_raw, clusters.clone(), max)
            .map_err(|full| {
                metrics::counter!("understudy_subscriptions_refused_total", "via" => "grpc")
                    .increment(1);
                Failure::over_limit(format!(
                    "this connection holds {} subscriptions, so {} cannot be added: over the limit of {} (max_subscriptions_per_connection)",
                    full.held,
                    key.grouped_name(),
                    full.max
                ))
            })?;
        let now = node.now();
        let (hosts, revision, ref_time) = subscriber
            .render_now(&key, &clusters_raw, now, |target| {
                let (hosts, revision) = push_hosts(node, &target);
                (hosts, revision, target.ref_time)
            })
            .expect("the subscription was just installed");
        subscriber.release(&key, &clusters_raw);
        conn.subscribed();
        node.races().subscribed(&conn.id, &key, revision, now);
        (hosts, ref_time)
    } else {
        hub.unsubscribe(subscriber, &key);
        node.races()
            .record(&conn.id, &key, "unsubscribed", None, None, node.now());
        let view = View {
            clusters_raw: &clusters_raw,
            clusters: &clusters,
            healthy_only: false,
        };
        (node.state().hosts(&key, view), node.now())
    };
    let info = ServiceInfoRef::new(&key, NameStyle::Plain, &clusters_raw, &hosts, ref_time);
    let mut response = Response::ok(ServiceInfoBody { service_info: info });
    response.message = Some("success".to_owned());
    Ok(seal("SubscribeServiceResponse", &response))
}

fn service_list(node: &Node, envelope: &Envelope) -> Result<Payload, Failure> {
    let request: ServiceListRequest = envelope.decode()?;
    let namespace =
        understudy_core::NamespaceId::parse(request.common.namespace.as_deref().unwrap_or(""))
            .map_err(DecodeError::from)?;
    let group =
        understudy_core::GroupName::parse(request.common.group_name.as_deref().unwrap_or(""))
            .map_err(DecodeError::from)?;
    // Negative numbers count as the start; Dubbo asks for pageSize 2^31-1.
    let page_no = u64::try_from(request.page_no.unwrap_or(1).max(1)).unwrap_or(1);
    let page_size = u64::try_from(request.page_size.unwrap_or(10).max(0)).unwrap_or(0);
    let page = node
        .registry()
        .list_services(&namespace, Some(&group), page_no, page_size);
    let response = Response::ok(ServiceList {
        count: page.count,
        service_names: page.items.into_iter().map(|k| k.name.to_string()).collect(),
    });
    Ok(seal("ServiceListResponse", &response))
}
