//! `/nacos/v3/client/ns` and `/nacos/v3/admin/ns`: instances, services,
//! clusters and health. Parameters are the v2 ones (`serviceName` plain,
//! the group in `groupName`), parsed and proposed by the shared naming
//! handlers; what Nacos 3 answers differently from v2 (which cluster a
//! list shows, which code a missing instance gets, the renewal of an
//! unknown instance) is decided here.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Serialize;
use understudy_core::{
    ClusterName, InstanceKey, InstancePatch, LiveKey, Metadata, Op, ServiceKey, ServiceKind,
    UpdateMode,
};
use understudy_proto::nacos::{
    ErrorCode, InstanceJson, NameStyle, ServiceDetailV2, ServiceInfo, View,
};
use understudy_proto::nacos3::{Page, ServiceDetailV3};

use super::super::error::ApiError;
use super::super::naming as shared;
use super::super::params::{Api, Params};
use super::{ok, page, reply, Route};
use crate::node::Node;

type Input = Result<Params, ApiError>;

pub(super) fn routes() -> Vec<Route> {
    vec![
        (
            "/nacos/v3/client/ns/instance",
            post(client_register).delete(deregister),
        ),
        ("/nacos/v3/client/ns/instance/list", get(client_list)),
        (
            "/nacos/v3/admin/ns/instance",
            post(register)
                .put(update)
                .delete(deregister)
                .get(instance_detail),
        ),
        ("/nacos/v3/admin/ns/instance/list", get(admin_list)),
        ("/nacos/v3/admin/ns/instance/partial", put(partial)),
        (
            "/nacos/v3/admin/ns/instance/metadata/batch",
            put(metadata_update).delete(metadata_delete),
        ),
        (
            "/nacos/v3/admin/ns/service",
            post(service_create)
                .put(service_update)
                .delete(service_delete)
                .get(service_detail),
        ),
        ("/nacos/v3/admin/ns/service/list", get(service_list)),
        (
            "/nacos/v3/admin/ns/service/selector/types",
            get(selector_types),
        ),
        ("/nacos/v3/admin/ns/health/instance", put(health)),
        ("/nacos/v3/admin/ns/health/checkers", get(checkers)),
    ]
}

// ---- instances -----------------------------------------------------------

/// `POST /v3/client/ns/instance`: registers, or with `heartBeat=true`
/// renews the lease of an ephemeral instance registered before. The
/// renewal of one this node does not track answers HTTP 200 with code
/// 21003, as Nacos does, and its client registers again.
async fn client_register(State(node): State<Node>, params: Input) -> Response {
    ok(async {
        let p = params?;
        if !p.flag("heartBeat", false) {
            return shared::register(&node, &p, Api::V2).await;
        }
        let live = LiveKey {
            service: p.service_key(Api::V2)?,
            instance: shared::instance_key(&p)?,
        };
        if shared::renew(&node, &live).await? {
            return Ok(());
        }
        Err(ApiError::not_found(
            ErrorCode::InstanceNotFound,
            format!(
                "instance {}:{} of {} is not registered here: register it again",
                live.instance.ip,
                live.instance.port,
                live.service.grouped_name()
            ),
        )
        .without_data()
        .with_status(StatusCode::OK))
    }
    .await)
}

async fn register(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::register(&node, &params?, Api::V2).await }.await)
}

async fn deregister(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::deregister(&node, &params?, Api::V2).await }.await)
}

async fn update(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::update(&node, &params?, Api::V2).await }.await)
}

/// The instance a request names (`clusterName` default `DEFAULT`), found
/// as Nacos 3 finds it: 404 (20004) when its cluster holds no instance or
/// none matches.
fn named_instance(node: &Node, p: &Params) -> Result<InstanceJson, ApiError> {
    let service_key = p.service_key(Api::V2)?;
    let key = shared::instance_key(p)?;
    let service = node.registry().service(&service_key);
    let instances = || service.iter().flat_map(|s| s.instances());
    let in_cluster = instances().any(|i| i.cluster == key.cluster);
    if !in_cluster {
        return Err(shared::no_ips_found(&key.cluster, &service_key));
    }
    let found = instances()
        .find(|i| i.key() == key)
        .map(|i| InstanceJson::new(&service_key, i).without_id());
    found.ok_or_else(|| {
        ApiError::not_found(
            ErrorCode::ResourceNotFound,
            format!(
                "no matched ip found: {}:{} in cluster {}",
                key.ip, key.port, key.cluster
            ),
        )
    })
}

/// `PUT /instance/partial`: changes what the request gives of an instance
/// that exists.
async fn partial(State(node): State<Node>, params: Input) -> Response {
    ok(async {
        let p = params?;
        named_instance(&node, &p)?;
        shared::update_instance(&node, &p, Api::V2, UpdateMode::Existing).await
    }
    .await)
}

/// `GET /v3/admin/ns/instance`: one instance, as Nacos' `Instance`.
async fn instance_detail(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| named_instance(&node, &p)))
}

/// `GET /v3/client/ns/instance/list`: what a subscriber of the cluster
/// `clusterName` (default `DEFAULT`) gets, selected as Nacos 3 does:
/// enabled instances only, the protect threshold applied; `healthyOnly`
/// is not read there.
async fn client_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = p.service_key(Api::V2)?;
        let (mut clusters_raw, mut clusters) = p.cluster_filter("clusterName")?;
        if clusters.is_empty() {
            clusters_raw = understudy_core::DEFAULT_CLUSTER.to_owned();
            clusters = vec![ClusterName::default_cluster()];
        }
        let view = View {
            clusters_raw: &clusters_raw,
            clusters: &clusters,
            healthy_only: false,
        };
        let service = node.registry().service(&key);
        let info = ServiceInfo::render(
            &key,
            service.as_deref(),
            NameStyle::Grouped,
            view,
            node.now(),
        );
        Ok(info.without_instance_ids().hosts)
    }))
}

/// `GET /v3/admin/ns/instance/list`: every instance of the cluster
/// `clusterName` (default `DEFAULT`), disabled ones too, no threshold;
/// `healthyOnly=true` keeps the healthy ones. A missing service or
/// cluster is 404 (code 30000, as Nacos).
async fn admin_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let key = p.service_key(Api::V2)?;
        let cluster = p.cluster()?;
        let healthy_only = p.flag("healthyOnly", false);
        let service = node.registry().service(&key).ok_or_else(|| {
            ApiError::not_found(
                ErrorCode::ServerError,
                format!("service {} is not found!", key.grouped_name()),
            )
        })?;
        let in_cluster: Vec<_> = service
            .instances()
            .filter(|i| i.cluster == cluster)
            .collect();
        if in_cluster.is_empty() {
            return Err(ApiError::not_found(
                ErrorCode::ServerError,
                format!("cluster {cluster} is not found!"),
            ));
        }
        Ok(in_cluster
            .into_iter()
            .filter(|i| !healthy_only || i.healthy)
            .map(|i| InstanceJson::new(&key, i).without_id())
            .collect::<Vec<_>>())
    }))
}

/// An instance a metadata batch names.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    ip: String,
    port: u16,
    #[serde(default)]
    cluster_name: Option<String>,
}

/// The instances a metadata batch changes: those of `instances` (a JSON
/// list of `{ip, port, clusterName}`) the service holds, or all of them
/// when it is absent; none for a service that does not exist. Unlike
/// Nacos, an `instances` that is not such a list is refused, not read as
/// "all".
fn batch_targets(node: &Node, p: &Params) -> Result<(ServiceKey, Vec<InstanceKey>), ApiError> {
    let key = p.service_key(Api::V2)?;
    let Some(service) = node.registry().service(&key) else {
        return Ok((key, Vec::new()));
    };
    let all: Vec<InstanceKey> = service.instances().map(|i| i.key()).collect();
    let Some(raw) = p.get("instances") else {
        return Ok((key, all));
    };
    let targets: Vec<Target> = serde_json::from_str(raw).map_err(|e| {
        ApiError::invalid(
            "instances",
            format!("not a JSON list of {{ip, port, clusterName}}: {e}"),
        )
    })?;
    let mut keys = Vec::with_capacity(targets.len());
    for target in targets {
        let cluster = ClusterName::parse(target.cluster_name.as_deref().unwrap_or(""))
            .map_err(|e| ApiError::invalid("instances", e.to_string()))?;
        let wanted = InstanceKey {
            ip: target.ip.trim().to_owned(),
            port: target.port,
            cluster,
        };
        if all.contains(&wanted) {
            keys.push(wanted);
        }
    }
    Ok((key, keys))
}

/// What a metadata batch changed, as Nacos writes it:
/// `{"updated":["ip:port:unknown:CLUSTER:ephemeral|persist", …]}`.
#[derive(Debug, Serialize)]
struct BatchResult {
    updated: Vec<String>,
}

/// Sets the `metadata` pairs on each target (or removes its keys); a
/// target that left meanwhile is not counted as updated.
async fn metadata_batch(node: &Node, p: &Params, remove: bool) -> Result<BatchResult, ApiError> {
    let metadata: Metadata = p.metadata()?.ok_or_else(|| ApiError::missing("metadata"))?;
    let (service, keys) = batch_targets(node, p)?;
    let ops = keys
        .iter()
        .map(|key| {
            let (service, key) = (service.clone(), key.clone());
            if remove {
                let keys = metadata.keys().map(str::to_owned).collect();
                Op::RemoveInstanceMetadata { service, key, keys }
            } else {
                let patch = InstancePatch {
                    metadata: Some(metadata.clone()),
                    ..InstancePatch::default()
                };
                let mode = UpdateMode::Existing;
                Op::UpdateInstance {
                    service,
                    key,
                    patch,
                    mode,
                }
            }
        })
        .collect();
    let results = node.propose_all(ops).await?;
    let kind = match node.registry().service(&service).map(|s| s.kind()) {
        Some(ServiceKind::Persistent) => "persist",
        _ => "ephemeral",
    };
    let updated = keys
        .into_iter()
        .zip(results)
        .filter(|(_, result)| result.is_ok())
        .map(|(k, _)| format!("{}:{}:unknown:{}:{kind}", k.ip, k.port, k.cluster))
        .collect();
    Ok(BatchResult { updated })
}

async fn metadata_update(State(node): State<Node>, params: Input) -> Response {
    reply(async { metadata_batch(&node, &params?, false).await }.await)
}

async fn metadata_delete(State(node): State<Node>, params: Input) -> Response {
    reply(async { metadata_batch(&node, &params?, true).await }.await)
}

// ---- services ------------------------------------------------------------

async fn service_create(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::create_service(&node, &params?, Api::V2).await }.await)
}

async fn service_update(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::update_service(&node, &params?, Api::V2).await }.await)
}

async fn service_delete(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::delete_service(&node, &params?, Api::V2).await }.await)
}

async fn service_detail(State(node): State<Node>, params: Input) -> Response {
    reply(
        params
            .and_then(|p| shared::existing_service(&node, &p, Api::V2))
            .map(|s| ServiceDetailV3::from(ServiceDetailV2::new(&s))),
    )
}

/// A service in `GET /service/list`, as Nacos' `ServiceView`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ServiceView {
    name: String,
    group_name: String,
    cluster_count: usize,
    ip_count: usize,
    healthy_instance_count: usize,
    /// `"true"` when the healthy share is at or below the protect
    /// threshold (a string, as Nacos writes it).
    trigger_flag: &'static str,
}

impl ServiceView {
    fn new(service: &understudy_core::Service) -> Self {
        let ip_count = service.instances().len();
        let healthy = service.instances().filter(|i| i.healthy).count();
        let threshold = service.meta().map_or(0.0, |m| m.protect_threshold);
        let triggered = ip_count > 0 && (healthy as f64 / ip_count as f64) <= f64::from(threshold);
        Self {
            name: service.key().name.to_string(),
            group_name: service.key().group.to_string(),
            cluster_count: service.clusters().len(),
            ip_count,
            healthy_instance_count: healthy,
            trigger_flag: if triggered { "true" } else { "false" },
        }
    }
}

/// `GET /service/list`: `serviceNameParam` and `groupNameParam` keep the
/// services whose name and group contain them; `ignoreEmptyService`
/// drops those without instances; `withInstances=true` answers details.
async fn service_list(State(node): State<Node>, params: Input) -> Response {
    reply(params.and_then(|p| {
        let (page_no, page_size) = page(&p)?;
        let namespace = understudy_core::NamespaceId::parse(p.get("namespaceId").unwrap_or(""))?;
        let name_part = p.get("serviceNameParam").unwrap_or("");
        let group_part = p.get("groupNameParam").unwrap_or("");
        let ignore_empty = p.flag("ignoreEmptyService", false);
        let registry = node.registry();
        let services = registry
            .services(&namespace, None)
            .filter(|s| s.key().name.as_str().contains(name_part))
            .filter(|s| s.key().group.as_str().contains(group_part))
            .filter(|s| !ignore_empty || s.instances().len() > 0);
        let page = if p.flag("withInstances", false) {
            let details = services.map(|s| ServiceDetailV3::from(ServiceDetailV2::new(s)));
            serde_json::to_value(Page::naming(details, page_no, page_size))
        } else {
            let views = services.map(|s| ServiceView::new(s));
            serde_json::to_value(Page::naming(views, page_no, page_size))
        };
        Ok(page.expect("a page always serializes"))
    }))
}

async fn selector_types() -> Response {
    // In Nacos' order (its set's).
    reply(Ok(["label", "none"]))
}

// ---- clusters and health -------------------------------------------------

async fn health(State(node): State<Node>, params: Input) -> Response {
    ok(async { shared::set_health(&node, &params?, Api::V2).await }.await)
}

/// `GET /ns/health/checkers`: the checker types, as Nacos lists them.
async fn checkers() -> Response {
    reply(Ok(serde_json::json!({
        "HTTP": {"path": "", "headers": "", "expectedResponseCode": 200},
        "MYSQL": {"user": null, "pwd": null, "cmd": null},
        "NONE": {},
        "TCP": {},
    })))
}
