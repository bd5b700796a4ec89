//! Nacos naming HTTP API, v1 and v2: instances, beats and services. Each
//! route is a thin wrapper that picks the API version's rendering around
//! one shared handler; handlers parse, propose or query, and render.
//! Rules (ownership, selection, expiry) live in the core.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use understudy_core::{
    HealthSource, InstanceKey, InstancePatch, InstanceSpec, LiveKey, Op, Owner, ServiceKind,
    ServiceMeta, ServiceMetaPatch, UpdateMode,
};
use understudy_proto::nacos::{
    BeatInfo, BeatReply, ErrorCode, InstanceDetailV1, InstanceDetailV2, NacosResult, NameStyle,
    SelectorJson, ServiceDetailV1, ServiceDetailV2, ServiceInfo, ServiceListV1, ServiceListV2,
    View, BEAT_OK, BEAT_RESOURCE_NOT_FOUND,
};

use super::error::{plain, ApiError};
use super::params::{parse_port, Api, Params};
use crate::node::Node;
use crate::node::ProposeError;

type Input = Result<Params, ApiError>;

// ---- rendering -----------------------------------------------------------

fn v1_ok(result: Result<(), ApiError>) -> Response {
    result.map_or_else(ApiError::v1, |()| plain("ok"))
}

fn v1_json<T: Serialize>(result: Result<T, ApiError>) -> Response {
    result.map_or_else(ApiError::v1, |body| Json(body).into_response())
}

fn v2_ok(result: Result<(), ApiError>) -> Response {
    v2_json(result.map(|()| "ok"))
}

fn v2_json<T: Serialize>(result: Result<T, ApiError>) -> Response {
    result.map_or_else(ApiError::v2, |data| {
        Json(NacosResult::success(data)).into_response()
    })
}

/// Declares the v1 and v2 routes of one handler.
macro_rules! versions {
    ($v1:ident, $v2:ident, $handler:ident, $render1:ident, $render2:ident) => {
        pub(crate) async fn $v1(State(node): State<Node>, params: Input) -> Response {
            $render1(async { $handler(&node, &params?, Api::V1).await }.await)
        }
        pub(crate) async fn $v2(State(node): State<Node>, params: Input) -> Response {
            $render2(async { $handler(&node, &params?, Api::V2).await }.await)
        }
    };
}

versions!(register_v1, register_v2, register, v1_ok, v2_ok);
versions!(deregister_v1, deregister_v2, deregister, v1_ok, v2_ok);
versions!(update_v1, update_v2, update, v1_ok, v2_ok);

pub(crate) async fn list_v1(
    State(node): State<Node>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    params: Input,
) -> Response {
    let peer = peer.map(|axum::Extension(axum::extract::ConnectInfo(addr))| addr);
    v1_json(params.and_then(|p| list(&node, &p, Api::V1, peer)))
}

pub(crate) async fn list_v2(State(node): State<Node>, params: Input) -> Response {
    v2_json(
        params.and_then(|p| list(&node, &p, Api::V2, None).map(ServiceInfo::without_instance_ids)),
    )
}
versions!(
    create_service_v1,
    create_service_v2,
    create_service,
    v1_ok,
    v2_ok
);
versions!(
    delete_service_v1,
    delete_service_v2,
    delete_service,
    v1_ok,
    v2_ok
);
versions!(
    update_service_v1,
    update_service_v2,
    update_service,
    v1_ok,
    v2_ok
);
versions!(health_v1, health_v2, set_health, v1_ok, v2_ok);

pub(crate) async fn patch_v1(State(node): State<Node>, params: Input) -> Response {
    v1_ok(async { update_instance(&node, &params?, Api::V1, UpdateMode::Existing).await }.await)
}

pub(crate) async fn detail_v1(State(node): State<Node>, params: Input) -> Response {
    v1_json(params.and_then(|p| detail(&node, &p, Api::V1)))
}

pub(crate) async fn detail_v2(State(node): State<Node>, params: Input) -> Response {
    v2_json(params.and_then(|p| detail(&node, &p, Api::V2).map(InstanceDetailV2::from)))
}

/// v1 and v2 beats both answer with the bare beat JSON.
pub(crate) async fn beat_v1(State(node): State<Node>, params: Input) -> Response {
    v1_json(async { beat(&node, &params?).await }.await)
}

/// v2 beats name the service grouped (`group@@name`), like v1, so they
/// take v1's service-name rule.
pub(crate) async fn beat_v2(State(node): State<Node>, params: Input) -> Response {
    async { beat(&node, &params?).await }
        .await
        .map_or_else(ApiError::v2, |reply| Json(reply).into_response())
}

pub(crate) async fn service_detail_v1(State(node): State<Node>, params: Input) -> Response {
    v1_json(
        params
            .and_then(|p| existing_service(&node, &p, Api::V1))
            .map(|s| ServiceDetailV1::new(&s)),
    )
}

pub(crate) async fn service_detail_v2(State(node): State<Node>, params: Input) -> Response {
    v2_json(
        params
            .and_then(|p| existing_service(&node, &p, Api::V2))
            .map(|s| ServiceDetailV2::new(&s)),
    )
}

pub(crate) fn existing_service(
    node: &Node,
    p: &Params,
    api: Api,
) -> Result<std::sync::Arc<understudy_core::Service>, ApiError> {
    let key = p.service_key(api)?;
    let service = node.registry().service(&key);
    service.ok_or_else(|| service_not_found(&key))
}

pub(crate) async fn service_list_v1(State(node): State<Node>, params: Input) -> Response {
    v1_json(params.and_then(|p| {
        let page_no = p
            .required("pageNo")
            .and_then(|_| page_number(&p, "pageNo"))?;
        let page_size = p
            .required("pageSize")
            .and_then(|_| page_number(&p, "pageSize"))?;
        let (count, names) = service_page(&node, &p, page_no, page_size)?;
        Ok(ServiceListV1 { count, doms: names })
    }))
}

pub(crate) async fn service_list_v2(State(node): State<Node>, params: Input) -> Response {
    v2_json(params.and_then(|p| {
        let page_no = if p.get("pageNo").is_some() {
            page_number(&p, "pageNo")?
        } else {
            1
        };
        let page_size = if p.get("pageSize").is_some() {
            page_number(&p, "pageSize")?
        } else {
            20
        };
        let (count, names) = service_page(&node, &p, page_no, page_size.min(500))?;
        Ok(ServiceListV2 {
            count,
            services: names,
        })
    }))
}

// ---- instances -----------------------------------------------------------

fn owner_of(spec_ip: &str, port: u16, ephemeral: bool) -> Owner {
    let ip = spec_ip.to_owned();
    if ephemeral {
        Owner::Beat {
            ip: ip.into(),
            port,
        }
    } else {
        Owner::Persistent {
            ip: ip.into(),
            port,
        }
    }
}

pub(crate) async fn register(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    let spec = p.instance_spec()?;
    let ephemeral = p.flag("ephemeral", true);
    register_spec(node, service, spec, ephemeral).await
}

pub(crate) async fn register_spec(
    node: &Node,
    service: understudy_core::ServiceKey,
    spec: InstanceSpec,
    ephemeral: bool,
) -> Result<(), ApiError> {
    let owner = owner_of(&spec.ip, spec.port, ephemeral);
    let live = LiveKey {
        service: service.clone(),
        instance: spec.key(),
    };
    node.propose(Op::Register {
        service,
        owner,
        instances: vec![spec],
    })
    .await?;
    // A registration counts as a beat, also when it changed nothing.
    if ephemeral {
        node.beat(&live).await;
    }
    Ok(())
}

pub(crate) async fn deregister(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    let ip = p.required("ip")?;
    let port = p.port()?;
    let owner = owner_of(ip.trim(), port, p.flag("ephemeral", true));
    node.propose(Op::Deregister { service, owner }).await?;
    Ok(())
}

pub(crate) fn patch_from(p: &Params) -> Result<InstancePatch, ApiError> {
    let enabled = p.get_any(&["enabled", "enable"]).map(|_| {
        if p.get("enabled").is_some() {
            p.flag("enabled", true)
        } else {
            p.flag("enable", true)
        }
    });
    Ok(InstancePatch {
        weight: p.number::<f64>("weight")?,
        enabled,
        metadata: p.metadata()?,
    })
}

pub(crate) fn instance_key(p: &Params) -> Result<InstanceKey, ApiError> {
    Ok(InstanceKey {
        ip: p.required("ip")?.trim().to_owned(),
        port: p.port()?,
        cluster: p.cluster()?,
    })
}

pub(crate) async fn update(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    update_instance(node, p, api, UpdateMode::Overlay).await
}

pub(crate) async fn update_instance(
    node: &Node,
    p: &Params,
    api: Api,
    mode: UpdateMode,
) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    let key = instance_key(p)?;
    let patch = patch_from(p)?;
    node.propose(Op::UpdateInstance {
        service,
        key,
        patch,
        mode,
    })
    .await?;
    Ok(())
}

pub(crate) fn detail(node: &Node, p: &Params, api: Api) -> Result<InstanceDetailV1, ApiError> {
    let service_key = p.service_key(api)?;
    let key = instance_key(p)?;
    let registry = node.registry();
    let service = registry.service(&service_key);
    let instances = || service.iter().flat_map(|s| s.instances());
    // As Nacos: a cluster holding no instance (or no service at all) is
    // "no ips found", one holding others "no matched ip found!".
    if !instances().any(|i| i.cluster == key.cluster) {
        return Err(no_ips_found(&key.cluster, &service_key));
    }
    let instance = instances()
        .find(|i| i.key() == key)
        .ok_or_else(|| ApiError::not_found(ErrorCode::InstanceNotFound, "no matched ip found!"))?;
    Ok(InstanceDetailV1::new(&service_key, instance))
}

/// Nacos' answer for a cluster of a service that holds no instance.
pub(crate) fn no_ips_found(
    cluster: &understudy_core::ClusterName,
    service: &understudy_core::ServiceKey,
) -> ApiError {
    ApiError::not_found(
        ErrorCode::ResourceNotFound,
        format!(
            "no ips found for cluster {cluster} in service {}",
            service.grouped_name()
        ),
    )
}

/// Lists a service. A v1 caller that gives a `udpPort` becomes a UDP
/// subscriber at its own address (`peer`) and that port.
pub(crate) fn list(
    node: &Node,
    p: &Params,
    api: Api,
    peer: Option<std::net::SocketAddr>,
) -> Result<ServiceInfo, ApiError> {
    let key = p.service_key(api)?;
    let filter_param = match api {
        Api::V1 => "clusters",
        Api::V2 => "clusterName",
    };
    let (clusters_raw, clusters) = p.cluster_filter(filter_param)?;
    // Nacos reads healthyOnly as a plain case-insensitive "true".
    let healthy_only = p
        .get("healthyOnly")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let view = View {
        clusters_raw: &clusters_raw,
        clusters: &clusters,
        healthy_only,
    };
    let udp_port = match p.get("udpPort") {
        Some(raw) => parse_port(raw)
            .map_err(|_| ApiError::invalid("udpPort", "must be between 0 and 65535"))?,
        None => 0,
    };
    if let (Some(udp), Some(peer)) = (node.udp(), peer) {
        if udp_port > 0 && !healthy_only {
            let addr = std::net::SocketAddr::new(peer.ip(), udp_port);
            return Ok(udp.clone().listen(node, addr, &key, view));
        }
    }
    let service = node.registry().service(&key);
    Ok(ServiceInfo::render(
        &key,
        service.as_deref(),
        NameStyle::Grouped,
        view,
        node.now(),
    ))
}

async fn beat(node: &Node, p: &Params) -> Result<BeatReply, ApiError> {
    let service = p.service_key(Api::V1)?;
    let info = p.get("beat").map(BeatInfo::parse).transpose()?;
    let ip = info
        .as_ref()
        .and_then(|b| b.ip.clone())
        .filter(|ip| !ip.trim().is_empty())
        .or_else(|| p.get("ip").map(str::to_owned))
        .ok_or_else(|| ApiError::missing("ip"))?;
    let port = match info.as_ref().and_then(|b| b.port) {
        Some(port) => parse_port(&port.to_string())?,
        None => p.port()?,
    };
    // The cluster may travel only inside the beat JSON (old Python clients).
    let cluster = match info
        .as_ref()
        .and_then(|b| b.cluster.as_deref())
        .filter(|c| !c.trim().is_empty())
    {
        Some(cluster) => understudy_core::ClusterName::parse(cluster)?,
        None => p.cluster()?,
    };
    let live = LiveKey {
        service: service.clone(),
        instance: InstanceKey {
            ip: ip.trim().to_owned(),
            port,
            cluster: cluster.clone(),
        },
    };
    let default_interval = node.config().registry.health.beat_interval;
    let reply = |code, interval: Option<u64>| BeatReply {
        client_beat_interval: interval.unwrap_or(default_interval),
        code,
        light_beat_enabled: true,
    };
    if renew(node, &live).await? {
        return Ok(reply(BEAT_OK, node.beat_interval(&live)));
    }
    match info {
        // A full beat re-registers the instance it describes.
        Some(info) => {
            let mut spec = InstanceSpec::new(live.instance.ip.clone(), port);
            spec.cluster = cluster;
            if let Some(weight) = info.weight {
                spec.weight = weight;
            }
            spec.metadata = info.metadata();
            register_spec(node, service, spec, true).await?;
            Ok(reply(BEAT_OK, node.beat_interval(&live)))
        }
        None => Ok(reply(BEAT_RESOURCE_NOT_FOUND, None)),
    }
}

/// Renews a beat-driven instance's lease; answers whether this node
/// tracks it (if not, its client must register it again). One that had
/// been marked unhealthy is proposed healthy again.
pub(crate) async fn renew(node: &Node, live: &LiveKey) -> Result<bool, ApiError> {
    match node.beat(live).await {
        understudy_core::BeatOutcome::Alive => Ok(true),
        understudy_core::BeatOutcome::Revived => {
            let owner = Owner::Beat {
                ip: live.instance.ip.as_str().into(),
                port: live.instance.port,
            };
            node.propose(Op::SetHealth {
                service: live.service.clone(),
                key: live.instance.clone(),
                healthy: true,
                source: HealthSource::Liveness { owner },
            })
            .await?;
            Ok(true)
        }
        understudy_core::BeatOutcome::Unknown => Ok(false),
    }
}

pub(crate) async fn set_health(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    let key = instance_key(p)?;
    let healthy = match p.get("healthy") {
        Some(_) => p.flag("healthy", true),
        None => {
            p.get("valid").ok_or_else(|| ApiError::missing("healthy"))?;
            p.flag("valid", true)
        }
    };
    // Nacos refuses the operator while a health check runs on the
    // instance; here, while a probe does.
    let probed = node
        .registry()
        .service(&service)
        .and_then(|s| s.instance(&key).cloned())
        .filter(|i| !i.kind.is_ephemeral())
        .is_some_and(|i| {
            crate::probe::check_of(&i.metadata, &node.config().probes.default)
                != crate::config::Check::None
        });
    if probed {
        return Err(ApiError::bad_request(
            ErrorCode::ParameterValidateError,
            format!(
                "health check is still working, service: {}, cluster: {}",
                service.grouped_name(),
                key.cluster
            ),
        ));
    }
    node.propose(Op::SetHealth {
        service,
        key,
        healthy,
        source: HealthSource::Operator,
    })
    .await?;
    Ok(())
}

// ---- services ------------------------------------------------------------

pub(crate) fn service_not_found(key: &understudy_core::ServiceKey) -> ApiError {
    ApiError::from(understudy_core::Error::ServiceNotFound {
        namespace: key.namespace.to_string(),
        service: key.grouped_name(),
    })
}

pub(crate) fn protect_threshold(p: &Params) -> Result<Option<f32>, ApiError> {
    let threshold = p.number::<f32>("protectThreshold")?;
    if let Some(t) = threshold {
        understudy_core::check_protect_threshold(t)?;
    }
    Ok(threshold)
}

pub(crate) fn selector(p: &Params) -> Result<Option<understudy_core::Selector>, ApiError> {
    p.raw("selector")
        .map(|raw| SelectorJson::parse(raw).map_err(ApiError::from))
        .transpose()
}

pub(crate) async fn create_service(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    // Nacos 2.x makes services created through this API persistent (v1),
    // or as the v2 `ephemeral` parameter says, defaulting to persistent.
    let kind = if api == Api::V2 && p.flag("ephemeral", false) {
        ServiceKind::Ephemeral
    } else {
        ServiceKind::Persistent
    };
    let meta = ServiceMeta {
        protect_threshold: protect_threshold(p)?.unwrap_or(0.0),
        metadata: p.metadata()?.unwrap_or_default(),
        selector: selector(p)?.unwrap_or_default(),
    };
    node.propose(Op::CreateService {
        service,
        kind,
        meta,
    })
    .await?;
    Ok(())
}

pub(crate) async fn delete_service(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    let grouped = service.grouped_name();
    match node.propose(Op::DeleteService { service }).await {
        Ok(_) => Ok(()),
        // Nacos words a missing service here its own way.
        Err(ProposeError::Rejected(understudy_core::Error::ServiceNotFound { .. })) => {
            Err(ApiError::bad_request(
                ErrorCode::ServiceNotExist,
                format!("service {grouped} not found!"),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn update_service(node: &Node, p: &Params, api: Api) -> Result<(), ApiError> {
    let service = p.service_key(api)?;
    if api == Api::V1 {
        p.required("protectThreshold")?;
    }
    // As Nacos: the update sets the metadata it is given, none clearing it.
    let patch = ServiceMetaPatch {
        protect_threshold: protect_threshold(p)?,
        metadata: Some(p.metadata()?.unwrap_or_default()),
        selector: selector(p)?,
    };
    node.propose(Op::UpdateService { service, patch }).await?;
    Ok(())
}

pub(crate) fn page_number(p: &Params, name: &'static str) -> Result<u64, ApiError> {
    p.number::<u64>(name)?
        .ok_or_else(|| ApiError::missing(name))
}

pub(crate) fn service_page(
    node: &Node,
    p: &Params,
    page_no: u64,
    page_size: u64,
) -> Result<(usize, Vec<String>), ApiError> {
    let namespace = understudy_core::NamespaceId::parse(p.get("namespaceId").unwrap_or(""))?;
    let group = understudy_core::GroupName::parse(p.get("groupName").unwrap_or(""))?;
    let page = node
        .registry()
        .list_services(&namespace, Some(&group), page_no, page_size);
    Ok((
        page.count,
        page.items.into_iter().map(|k| k.name.to_string()).collect(),
    ))
}
