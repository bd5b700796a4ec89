//! The MCP server registry of Nacos 3.
//!
//! A server is three kinds of config item in its namespace: its version
//! list (`mcp-server-versions` / `{id}-mcp-versions.json`), each version's
//! specification (`mcp-server` / `{id}-{version}-mcp-server.json`) and
//! each version's tools (`mcp-tools` / `{id}-{version}-mcp-tools.json`).
//! Its endpoints are the instances of a naming service: one the release
//! names (`REF`), or one made in group `mcp-endpoints` for an address
//! (`DIRECT`) or for the endpoints registered later.

use serde_json::{json, Map, Value};
use understudy_core::{
    ConfigKey, InstanceSpec, Millis, Op, Owner, Registry, ServiceKey, DEFAULT_GROUP,
};

use understudy_proto::nacos_ai::{
    EndpointInfo, EndpointSpec, McpVersions, VersionDetail, ENDPOINT_DIRECT, ENDPOINT_GROUP,
    ENDPOINT_REF, PROTOCOL_STDIO, SERVER_GROUP, TOOLS_GROUP, VERSIONS_GROUP,
};

use super::{config_key, json_config, listed, release_date, AiError};

/// Tags of the config items an MCP server is stored as, as Nacos tags them.
const CONFIG_TAG: &str = "nacos.internal.config=mcp";

fn key(namespace: &str, group: &str, data_id: &str) -> Result<ConfigKey, AiError> {
    config_key(namespace, group, data_id, "namespaceId")
}

/// A server's stored version list, with the md5 it was read at.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) versions: McpVersions,
    md5: String,
}

/// The server named `name` (or with id `id`) in `namespace`, if any.
pub(crate) fn find(
    registry: &Registry,
    namespace: &str,
    name: Option<&str>,
    id: Option<&str>,
) -> Option<Stored> {
    let probe = ConfigKey::parse(namespace, VERSIONS_GROUP, "probe").ok()?;
    registry
        .configs_in(&probe.namespace)
        .filter(|(key, _)| key.group == VERSIONS_GROUP)
        .filter_map(|(_, item)| {
            let versions: McpVersions = serde_json::from_str(&item.content).ok()?;
            Some(Stored {
                versions,
                md5: item.md5.clone(),
            })
        })
        .find(|stored| {
            name.is_some_and(|n| stored.versions.name == n)
                || id.is_some_and(|i| stored.versions.id == i)
        })
}

/// What releasing a server or a new version of it writes.
#[derive(Debug)]
pub(crate) struct Release {
    /// The server's id.
    pub(crate) id: String,
    /// The writes, to be proposed in turn: the server's config items as
    /// one, then its direct endpoint.
    pub(crate) ops: Vec<Op>,
}

/// What a publish may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    /// gRPC's release: a new server, or a new version of one (a version
    /// released before is refused); a new version is latest when its
    /// `versionDetail.is_latest` says so.
    Release,
    /// The admin API's create: a new server only.
    Create,
    /// The admin API's update: a new version of an existing server, or a
    /// new specification for one of its versions; `latest` makes it the
    /// latest.
    Update {
        /// Make this version the latest.
        latest: bool,
    },
}

/// Plans publishing `spec` (a `McpServerBasicInfo`) with its tools and
/// endpoint, as `mode` allows.
pub(crate) fn plan_publish(
    registry: &Registry,
    namespace: &str,
    mut spec: Value,
    tools: Option<Value>,
    endpoint: Option<&EndpointSpec>,
    mode: Publish,
    now: Millis,
) -> Result<Release, AiError> {
    let text = |v: &Value, name: &str| {
        v[name]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let name = text(&spec, "name")
        .ok_or_else(|| AiError::invalid("serverSpecification.name", "is required"))?;
    let version = text(&spec["versionDetail"], "version")
        .or_else(|| text(&spec, "version"))
        .ok_or_else(|| {
            AiError::invalid("serverSpecification.versionDetail.version", "is required")
        })?;
    let id_given = text(&spec, "id");
    let existing = find(registry, namespace, Some(&name), id_given.as_deref());
    let known = existing.as_ref().is_some_and(|s| {
        s.versions
            .version_details
            .iter()
            .any(|v| v.version == version)
    });
    match (mode, &existing) {
        (Publish::Release, Some(_)) if known => {
            return Err(AiError::Conflict(format!(
                "Mcp Server {name} and target version {version} already exist, do not do release"
            )))
        }
        (Publish::Create, Some(_)) => {
            return Err(AiError::Conflict(format!(
                "mcp server `{name}` has existed, please update it rather than create."
            )))
        }
        (Publish::Update { .. }, None) => {
            return Err(AiError::NotFound(format!(
                "MCP server `{name}` not found in namespaceId: `{namespace}`"
            )))
        }
        _ => {}
    }
    let id = match (&existing, id_given) {
        (Some(stored), _) => stored.versions.id.clone(),
        (None, Some(custom)) if is_uuid(&custom) => custom,
        (None, Some(_)) => {
            return Err(AiError::invalid(
                "serverSpecification.id",
                "must be a UUID (8-4-4-4-12 hex digits)",
            ))
        }
        (None, None) => name_uuid(namespace, &name),
    };
    let latest = match mode {
        _ if existing.is_none() => true,
        Publish::Update { latest } => latest,
        _ => spec["versionDetail"]["is_latest"] == true,
    };
    let detail = VersionDetail {
        version: version.clone(),
        release_date: Some(release_date(now)),
        is_latest: latest,
    };
    let protocol = text(&spec, "protocol").unwrap_or_default();
    let mut ops = Vec::new();
    let service_ref = if protocol.eq_ignore_ascii_case(PROTOCOL_STDIO) {
        None
    } else {
        Some(service_ref(namespace, &name, &version, endpoint, &mut ops)?)
    };

    let object = spec
        .as_object_mut()
        .ok_or_else(|| AiError::invalid("serverSpecification", "must be an object"))?;
    object.insert("id".to_owned(), json!(id));
    object.insert("version".to_owned(), json!(version));
    object.insert(
        "versionDetail".to_owned(),
        serde_json::to_value(&detail).unwrap_or_default(),
    );
    if let Some(service_ref) = service_ref {
        let remote = object
            .entry("remoteServerConfig")
            .or_insert_with(|| json!({}));
        if !remote.is_object() {
            *remote = json!({});
        }
        remote["serviceRef"] = service_ref;
    }
    let tools_id = format!("{id}-{version}-mcp-tools.json");
    let capabilities = if tools.is_some() {
        object.insert("toolsDescriptionRef".to_owned(), json!(tools_id));
        json!(["TOOL"])
    } else {
        json!([])
    };
    object.insert("capabilities".to_owned(), capabilities);

    let mut versions = match existing.as_ref() {
        Some(stored) => stored.versions.clone(),
        None => McpVersions {
            id: id.clone(),
            name: name.clone(),
            ..McpVersions::default()
        },
    };
    if latest {
        versions.name = name.clone();
        versions.description = text(&spec, "description");
        versions.protocol = text(&spec, "protocol");
        versions.front_protocol = text(&spec, "frontProtocol");
        versions.capabilities = spec.get("capabilities").cloned();
        versions.latest_published_version = version.clone();
    }
    match versions
        .version_details
        .iter_mut()
        .find(|v| v.version == version)
    {
        Some(held) if latest => held.release_date = detail.release_date.clone(),
        Some(_) => {}
        None => versions.version_details.push(VersionDetail {
            is_latest: false,
            ..detail
        }),
    }
    let versions_key = key(
        namespace,
        VERSIONS_GROUP,
        &format!("{id}-mcp-versions.json"),
    )?;
    let mut publish = vec![
        (
            versions_key.clone(),
            json_config(
                CONFIG_TAG,
                serde_json::to_string(&versions).unwrap_or_default(),
            ),
        ),
        (
            key(
                namespace,
                SERVER_GROUP,
                &format!("{id}-{version}-mcp-server.json"),
            )?,
            json_config(CONFIG_TAG, spec.to_string()),
        ),
    ];
    if let Some(tools) = tools {
        publish.push((
            key(namespace, TOOLS_GROUP, &tools_id)?,
            json_config(CONFIG_TAG, tools.to_string()),
        ));
    }
    let mut writes = vec![Op::WriteConfigs {
        // Two releases racing on one server: one wins whole, the other
        // writes nothing and is told.
        expect: vec![(versions_key, existing.map(|stored| stored.md5))],
        publish,
        remove: Vec::new(),
    }];
    writes.extend(ops);
    Ok(Release { id, ops: writes })
}

/// The `serviceRef` of a release's endpoint: the service a `REF` names,
/// or a service of group `mcp-endpoints` made for the version (with the
/// address of a `DIRECT` one registered as a persistent instance).
fn service_ref(
    namespace: &str,
    name: &str,
    version: &str,
    endpoint: Option<&EndpointSpec>,
    ops: &mut Vec<Op>,
) -> Result<Value, AiError> {
    let kind = endpoint.and_then(|e| e.kind.as_deref()).unwrap_or("");
    let (ns, group, service) = match (endpoint, kind) {
        (Some(spec), ENDPOINT_REF) => (
            spec.field("namespaceId")
                .unwrap_or_else(|| namespace.to_owned()),
            spec.field("groupName")
                .unwrap_or_else(|| DEFAULT_GROUP.to_owned()),
            spec.field("serviceName").ok_or_else(|| {
                AiError::invalid(
                    "endpointSpecification.data.serviceName",
                    "is required for REF",
                )
            })?,
        ),
        (Some(spec), ENDPOINT_DIRECT) => {
            let address = spec.field("address").ok_or_else(|| {
                AiError::invalid(
                    "endpointSpecification.data.address",
                    "is required for DIRECT",
                )
            })?;
            let port: u16 = spec
                .field("port")
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| {
                    AiError::invalid("endpointSpecification.data.port", "must be a port number")
                })?;
            let service = format!("{name}::{version}");
            let key = ServiceKey::parse(namespace, ENDPOINT_GROUP, &service)
                .map_err(|e| AiError::invalid("serverSpecification.name", e.to_string()))?;
            ops.push(Op::Register {
                service: key,
                owner: Owner::Persistent {
                    ip: address.as_str().into(),
                    port,
                },
                instances: vec![InstanceSpec::new(address, port)],
            });
            (namespace.to_owned(), ENDPOINT_GROUP.to_owned(), service)
        }
        (Some(_), other) if !other.is_empty() => {
            return Err(AiError::invalid(
                "endpointSpecification.type",
                format!("'{other}' is neither {ENDPOINT_REF} nor {ENDPOINT_DIRECT}"),
            ))
        }
        _ => (
            namespace.to_owned(),
            ENDPOINT_GROUP.to_owned(),
            format!("{name}::{version}"),
        ),
    };
    ServiceKey::parse(&ns, &group, &service)
        .map_err(|e| AiError::invalid("endpointSpecification.data", e.to_string()))?;
    let mut service_ref = json!({"namespaceId": ns, "groupName": group, "serviceName": service});
    if let Some(protocol) = endpoint.and_then(|e| e.field("transportProtocol")) {
        service_ref["transportProtocol"] = json!(protocol);
    }
    Ok(service_ref)
}

/// A server's `McpServerDetailInfo` at `version` (the last released when
/// `None`): its specification, every version, its tools, and the live
/// endpoints of its service.
pub(crate) fn detail(
    registry: &Registry,
    namespace: &str,
    name: Option<&str>,
    id: Option<&str>,
    version: Option<&str>,
) -> Result<Value, AiError> {
    let stored = find(registry, namespace, name, id).ok_or_else(|| {
        AiError::NotFound(format!(
            "MCP server `{}` not found in namespaceId: `{namespace}`",
            name.or(id).unwrap_or("")
        ))
    })?;
    let versions = stored.versions;
    let version = match version.filter(|v| !v.is_empty()) {
        Some(v) => v.to_owned(),
        None => versions
            .version_details
            .last()
            .map(|v| v.version.clone())
            .unwrap_or_default(),
    };
    let id = &versions.id;
    let spec_key = key(
        namespace,
        SERVER_GROUP,
        &format!("{id}-{version}-mcp-server.json"),
    )?;
    let item = registry.config(&spec_key).ok_or_else(|| {
        AiError::VersionNotFound(format!(
            "mcp server `{id}` for version `{version}` not found"
        ))
    })?;
    let mut detail: Map<String, Value> = serde_json::from_str(&item.content).unwrap_or_default();
    let latest = &versions.latest_published_version;
    let all: Vec<Value> = versions
        .version_details
        .iter()
        .map(|v| {
            serde_json::to_value(VersionDetail {
                is_latest: v.version == *latest,
                ..v.clone()
            })
            .unwrap_or_default()
        })
        .collect();
    if let Some(current) = detail.get_mut("versionDetail") {
        current["is_latest"] = json!(version == *latest);
    }
    let tools = detail
        .remove("toolsDescriptionRef")
        .and_then(|r| r.as_str().map(str::to_owned))
        .and_then(|data_id| key(namespace, TOOLS_GROUP, &data_id).ok())
        .and_then(|k| registry.config(&k))
        .and_then(|item| serde_json::from_str::<Value>(&item.content).ok());
    detail.insert("namespaceId".to_owned(), json!(namespace));
    detail.insert("id".to_owned(), json!(id));
    detail.insert("version".to_owned(), json!(version));
    detail.insert("allVersions".to_owned(), Value::Array(all));
    if let Some(tools) = tools {
        detail.insert("toolSpec".to_owned(), tools);
    }
    let stdio = detail
        .get("protocol")
        .and_then(Value::as_str)
        .is_some_and(|p| p.eq_ignore_ascii_case(PROTOCOL_STDIO));
    if !stdio {
        let remote = detail
            .get("remoteServerConfig")
            .cloned()
            .unwrap_or_default();
        let endpoints = endpoints(registry, &remote);
        detail.insert(
            "backendEndpoints".to_owned(),
            serde_json::to_value(&endpoints).unwrap_or_default(),
        );
        detail.insert("frontendEndpoints".to_owned(), json!([]));
    }
    Ok(Value::Object(detail))
}

/// Plans deleting `version` of a server (every version when `None`): its
/// specifications and tools, the services made for its direct endpoints,
/// and its version list (rewritten without the version, or removed with
/// the last one).
pub(crate) fn plan_delete(
    registry: &Registry,
    namespace: &str,
    name: Option<&str>,
    id: Option<&str>,
    version: Option<&str>,
) -> Result<Vec<Op>, AiError> {
    let stored = find(registry, namespace, name, id).ok_or_else(|| {
        AiError::NotFound(format!(
            "MCP server `{}` not found in namespaceId: `{namespace}`",
            name.or(id).unwrap_or("")
        ))
    })?;
    let mut versions = stored.versions;
    let doomed: Vec<String> = match version.filter(|v| !v.is_empty()) {
        Some(v) if versions.version_details.iter().any(|d| d.version == v) => vec![v.to_owned()],
        Some(v) => {
            return Err(AiError::VersionNotFound(format!(
                "mcp server `{}` for version `{v}` not found",
                versions.id
            )))
        }
        None => versions
            .version_details
            .iter()
            .map(|d| d.version.clone())
            .collect(),
    };
    let id = versions.id.clone();
    let mut remove = Vec::new();
    let mut deregister = Vec::new();
    for v in &doomed {
        for (group, data_id) in [
            (SERVER_GROUP, format!("{id}-{v}-mcp-server.json")),
            (TOOLS_GROUP, format!("{id}-{v}-mcp-tools.json")),
        ] {
            let key = key(namespace, group, &data_id)?;
            if registry.config(&key).is_some() {
                remove.push(key);
            }
        }
        let direct = ServiceKey::parse(
            namespace,
            ENDPOINT_GROUP,
            &format!("{}::{v}", versions.name),
        );
        if let Some(service) = direct.ok().and_then(|k| registry.service(&k)) {
            let owners: std::collections::BTreeSet<Owner> = service
                .instances()
                .filter(|i| matches!(i.owner, Owner::Persistent { .. }))
                .map(|i| i.owner.clone())
                .collect();
            for owner in owners {
                deregister.push(Op::Deregister {
                    service: service.key().clone(),
                    owner,
                });
            }
        }
    }
    versions
        .version_details
        .retain(|d| !doomed.contains(&d.version));
    let versions_key = key(
        namespace,
        VERSIONS_GROUP,
        &format!("{id}-mcp-versions.json"),
    )?;
    let mut publish = Vec::new();
    match versions.version_details.last() {
        None => remove.push(versions_key.clone()),
        Some(last) => {
            if doomed.contains(&versions.latest_published_version) {
                versions.latest_published_version = last.version.clone();
            }
            publish.push((
                versions_key.clone(),
                json_config(
                    CONFIG_TAG,
                    serde_json::to_string(&versions).unwrap_or_default(),
                ),
            ));
        }
    }
    let mut ops = vec![Op::WriteConfigs {
        expect: vec![(versions_key, Some(stored.md5))],
        publish,
        remove,
    }];
    ops.extend(deregister);
    Ok(ops)
}

/// The servers of `namespace` named `name` (`blur`: whose name contains
/// it; no name: all), by name, as the admin API lists them: each server's
/// version list with its latest version marked.
pub(crate) fn list(
    registry: &Registry,
    namespace: &str,
    name: Option<&str>,
    blur: bool,
) -> Vec<Value> {
    let Ok(probe) = ConfigKey::parse(namespace, VERSIONS_GROUP, "probe") else {
        return Vec::new();
    };
    let mut servers: Vec<McpVersions> = registry
        .configs_in(&probe.namespace)
        .filter(|(key, _)| key.group == VERSIONS_GROUP)
        .filter_map(|(_, item)| serde_json::from_str::<McpVersions>(&item.content).ok())
        .filter(|v| listed(&v.name, name, blur))
        .collect();
    servers.sort_by(|a, b| a.name.cmp(&b.name));
    servers
        .into_iter()
        .map(|mut v| {
            let latest = v.latest_published_version.clone();
            for detail in &mut v.version_details {
                detail.is_latest = detail.version == latest;
            }
            let current = v.version_details.iter().find(|d| d.is_latest).cloned();
            let mut basic = serde_json::to_value(&v).unwrap_or_default();
            basic["namespaceId"] = json!(namespace);
            basic["version"] = json!(latest);
            basic["versionDetail"] = serde_json::to_value(current).unwrap_or_default();
            basic
        })
        .collect()
}

/// The service a server's endpoints are instances of, as stored.
pub(crate) fn endpoint_service(detail: &Value) -> Result<ServiceKey, AiError> {
    let service_ref = &detail["remoteServerConfig"]["serviceRef"];
    let field = |name: &str| service_ref[name].as_str().unwrap_or("");
    if service_ref.is_null() {
        return Err(AiError::NotFound(
            "The Mcp Server Ref endpoint service not found.".to_owned(),
        ));
    }
    ServiceKey::parse(
        field("namespaceId"),
        field("groupName"),
        field("serviceName"),
    )
    .map_err(|e| AiError::NotFound(format!("the server's endpoint service: {e}")))
}

/// The healthy, enabled instances of the service `remote.serviceRef`
/// names, as endpoints.
fn endpoints(registry: &Registry, remote: &Value) -> Vec<EndpointInfo> {
    let Ok(key) = endpoint_service(&json!({ "remoteServerConfig": remote })) else {
        return Vec::new();
    };
    let protocol = remote["serviceRef"]["transportProtocol"]
        .as_str()
        .map(str::to_owned);
    let path = remote["exportPath"].as_str().map(str::to_owned);
    let Some(service) = registry.service(&key) else {
        return Vec::new();
    };
    service
        .instances()
        .filter(|i| i.healthy && i.enabled)
        .map(|i| EndpointInfo {
            protocol: protocol.clone(),
            address: i.ip.to_string(),
            port: i.port,
            path: path.clone(),
        })
        .collect()
}

/// Whether `raw` is a UUID written as Nacos checks one: 8-4-4-4-12 hex
/// digits.
fn is_uuid(raw: &str) -> bool {
    raw.len() == 36 && uuid::Uuid::try_parse(raw).is_ok()
}

/// A name-based UUID (version 3) of the namespace and name, so two nodes
/// releasing the same new server at once write the same items.
fn name_uuid(namespace: &str, name: &str) -> String {
    let name = format!("understudy:mcp/{namespace}/{name}");
    uuid::Uuid::new_v3(&uuid::Uuid::NAMESPACE_URL, name.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use understudy_core::{Command, RegistryOptions};

    fn apply(registry: &mut Registry, ops: Vec<Op>) {
        for op in ops {
            registry.apply(&Command::new(1, op)).unwrap();
        }
    }

    fn release(registry: &mut Registry, version: &str, latest: bool) -> Result<String, AiError> {
        let spec = json!({"name":"weather","protocol":"mcp-sse","description":"forecasts",
            "versionDetail":{"version":version,"is_latest":latest},
            "remoteServerConfig":{"exportPath":"/sse"}});
        let tools = json!({"tools":[{"name":"today","description":"d","inputSchema":{}}]});
        let endpoint = EndpointSpec {
            kind: Some("REF".to_owned()),
            data: [("serviceName".to_owned(), json!("weather-svc"))].into(),
        };
        let planned = plan_publish(
            registry,
            "public",
            spec,
            Some(tools),
            Some(&endpoint),
            Publish::Release,
            1_700_000_000_000,
        )?;
        apply(registry, planned.ops);
        Ok(planned.id)
    }

    #[test]
    fn a_server_released_twice_has_two_versions_and_refuses_a_third_of_the_same() {
        let mut registry = Registry::new(RegistryOptions::default());
        let id = release(&mut registry, "1.0.0", false).unwrap();
        assert!(is_uuid(&id), "{id}");
        assert_eq!(release(&mut registry, "1.1.0", true).unwrap(), id);
        let again = release(&mut registry, "1.1.0", true).unwrap_err();
        assert_eq!(again.code(), 409, "{again}");

        let latest = detail(&registry, "public", Some("weather"), None, None).unwrap();
        assert_eq!(latest["version"], "1.1.0");
        assert_eq!(latest["versionDetail"]["is_latest"], true);
        assert_eq!(latest["allVersions"].as_array().map(Vec::len), Some(2));
        assert_eq!(latest["toolSpec"]["tools"][0]["name"], "today");
        assert_eq!(
            latest["remoteServerConfig"]["serviceRef"]["serviceName"],
            "weather-svc"
        );
        assert_eq!(latest["remoteServerConfig"]["exportPath"], "/sse");
        assert!(latest.get("toolsDescriptionRef").is_none());
        let first = detail(&registry, "public", None, Some(&id), Some("1.0.0")).unwrap();
        assert_eq!(first["versionDetail"]["is_latest"], false);
        let missing = detail(&registry, "public", Some("nope"), None, None).unwrap_err();
        assert_eq!(missing.code(), 404);
    }

    #[test]
    fn a_release_without_a_name_or_version_names_the_field() {
        let registry = Registry::new(RegistryOptions::default());
        let error = plan_publish(
            &registry,
            "public",
            json!({"versionDetail":{"version":"1"}}),
            None,
            None,
            Publish::Release,
            0,
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("serverSpecification.name"),
            "{error}"
        );
        let error = plan_publish(
            &registry,
            "public",
            json!({"name":"x"}),
            None,
            None,
            Publish::Release,
            0,
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("versionDetail.version"),
            "{error}"
        );
    }

    #[test]
    fn name_uuids_are_uuids_and_stable() {
        let id = name_uuid("public", "weather");
        assert!(is_uuid(&id), "{id}");
        assert_eq!(id, name_uuid("public", "weather"));
        assert_ne!(id, name_uuid("dev", "weather"));
        assert_eq!(&id[14..15], "3");
    }
}
