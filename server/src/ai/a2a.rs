//! The A2A agent registry of Nacos 3.1: agent cards in versions.
//!
//! An agent is two kinds of config item in its namespace: its version
//! list (`agent` / `{name}`, an `AgentCardVersionInfo`: the latest card's
//! fields, `registrationType`, `latestPublishedVersion` and
//! `versionDetails`) and each version's card (`agent-version` /
//! `{name}-{version}`, an `AgentCardDetailInfo`: the card as released and
//! its `registrationType`). An agent registered as `SERVICE` is reached at
//! its endpoints: the instances of naming service `{name}::{version}` in
//! group `agent-endpoints`, which a query puts into the card it answers.

use serde_json::{json, Map, Value};
use understudy_core::{InstanceSpec, Millis, Op, Registry, ServiceKey};
use understudy_proto::nacos_ai::{
    AgentEndpoint, AgentVersion, AGENT_ENDPOINT_GROUP, AGENT_ENDPOINT_PATH, AGENT_ENDPOINT_TLS,
    AGENT_ENDPOINT_TRANSPORT, AGENT_GROUP, AGENT_VERSION_GROUP, REGISTRATION_SERVICE,
    REGISTRATION_URL,
};

use super::{config_key, json_config, listed, release_date, AiError};

/// Tags of an agent's version list, as Nacos tags it.
const INFO_TAG: &str = "nacos.internal.config=agent";
/// Tags of an agent version's card.
const CARD_TAG: &str = "nacos.internal.config=agent-version";
/// The transport an endpoint serves when it names none.
const DEFAULT_TRANSPORT: &str = "JSONRPC";

/// A `registrationType`: `URL` or `SERVICE` (any case); `None` when blank.
pub(crate) fn registration(raw: Option<&str>) -> Result<Option<&'static str>, AiError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(r) if r.eq_ignore_ascii_case(REGISTRATION_URL) => Ok(Some(REGISTRATION_URL)),
        Some(r) if r.eq_ignore_ascii_case(REGISTRATION_SERVICE) => Ok(Some(REGISTRATION_SERVICE)),
        Some(other) => Err(AiError::invalid(
            "registrationType",
            format!("should be `{REGISTRATION_URL}` or `{REGISTRATION_SERVICE}` but was `{other}`"),
        )),
    }
}

/// A card as Nacos accepts one: `name`, `version`, `protocolVersion`,
/// `preferredTransport` and `url` given; `description`, `capabilities`,
/// the input and output modes and `skills` filled in when absent; a name
/// and version the registry's keys can hold.
fn checked_card(namespace: &str, card: Value) -> Result<Card, AiError> {
    let Value::Object(mut fields) = card else {
        return Err(AiError::invalid("agentCard", "must be a JSON object"));
    };
    let text = |fields: &Map<String, Value>, name: &'static str, field: &'static str| {
        fields
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| AiError::invalid(field, "is required"))
    };
    let name = text(&fields, "name", "agentCard.name")?;
    let version = text(&fields, "version", "agentCard.version")?;
    text(&fields, "protocolVersion", "agentCard.protocolVersion")?;
    text(
        &fields,
        "preferredTransport",
        "agentCard.preferredTransport",
    )?;
    text(&fields, "url", "agentCard.url")?;
    for (field, empty) in [
        ("description", json!("")),
        ("capabilities", json!({})),
        ("defaultInputModes", json!([])),
        ("defaultOutputModes", json!([])),
        ("skills", json!([])),
    ] {
        if fields.get(field).is_none_or(Value::is_null) {
            fields.insert(field.to_owned(), empty);
        }
    }
    config_key(namespace, AGENT_GROUP, &name, "agentCard.name")?;
    config_key(
        namespace,
        AGENT_VERSION_GROUP,
        &card_id(&name, &version),
        "agentCard.version",
    )?;
    Ok(Card {
        name,
        version,
        fields,
    })
}

struct Card {
    name: String,
    version: String,
    fields: Map<String, Value>,
}

fn card_id(name: &str, version: &str) -> String {
    format!("{name}-{version}")
}

/// An agent's stored version list, with the md5 it was read at.
struct Stored {
    info: Map<String, Value>,
    versions: Vec<AgentVersion>,
    md5: String,
}

impl Stored {
    fn latest(&self) -> Option<&str> {
        self.info
            .get("latestPublishedVersion")
            .and_then(Value::as_str)
    }

    fn registration(&self) -> Option<&str> {
        self.info.get("registrationType").and_then(Value::as_str)
    }

    fn with(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v.version == version)
    }

    /// The version list as stored, with `versions` in it.
    fn content(&self) -> String {
        let mut info = self.info.clone();
        info.insert(
            "versionDetails".to_owned(),
            serde_json::to_value(&self.versions).unwrap_or_default(),
        );
        Value::Object(info).to_string()
    }
}

fn find(registry: &Registry, namespace: &str, name: &str) -> Option<Stored> {
    let key = config_key(namespace, AGENT_GROUP, name, "agentName").ok()?;
    let item = registry.config(&key)?;
    let mut info: Map<String, Value> = serde_json::from_str(&item.content).ok()?;
    let versions = info
        .remove("versionDetails")
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    Some(Stored {
        info,
        versions,
        md5: item.md5.clone(),
    })
}

fn not_found(name: &str) -> AiError {
    AiError::NotFound(format!("Agent not found: {name}"))
}

/// What a release may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// gRPC's release: a new agent, or a new version of one; a version
    /// released before is left as it is. `latest` makes a new version of
    /// an agent its latest (an agent's first version always is).
    Release {
        /// Make this version the latest.
        latest: bool,
    },
    /// The admin API's register: a new agent only.
    Register,
    /// The admin API's update: a new version of an existing agent, or a
    /// new card for one of its versions; `latest` makes it the latest.
    Update {
        /// Make this version the latest.
        latest: bool,
    },
}

/// Plans releasing `card` as `mode` allows, as one write of the agent's
/// items; `registration` is the agent's `registrationType` (for a new
/// agent, `URL` when `None`; for an existing one, unchanged when `None`).
/// Writes nothing when a gRPC release finds the version released already.
pub(crate) fn plan_release(
    registry: &Registry,
    namespace: &str,
    card: Value,
    registration: Option<&str>,
    mode: Mode,
    now: Millis,
) -> Result<Vec<Op>, AiError> {
    let card = checked_card(namespace, card)?;
    let existing = find(registry, namespace, &card.name);
    let at = release_date(now);
    let mut stored = match (mode, existing) {
        (Mode::Register, Some(_)) => {
            return Err(AiError::Conflict(format!(
                "AgentCard name {} already exist",
                card.name
            )))
        }
        (Mode::Update { .. }, None) => return Err(not_found(&card.name)),
        (Mode::Release { .. }, Some(stored)) if stored.with(&card.version) => return Ok(Vec::new()),
        (_, Some(stored)) => stored,
        (_, None) => Stored {
            info: Map::new(),
            versions: Vec::new(),
            md5: String::new(),
        },
    };
    let new_agent = stored.versions.is_empty();
    let latest = new_agent
        || matches!(
            mode,
            Mode::Release { latest: true } | Mode::Update { latest: true }
        );
    let registration = registration
        .or(stored.registration())
        .unwrap_or(REGISTRATION_URL)
        .to_owned();
    if !stored.with(&card.version) {
        stored.versions.push(AgentVersion {
            version: card.version.clone(),
            created_at: at.clone(),
            updated_at: at.clone(),
            latest: false,
        });
    }
    // The version list shows the latest card; a new card for the version
    // it shows, or for an agent without a latest, shows too.
    let shown = stored.info.get("version").and_then(Value::as_str) == Some(card.version.as_str());
    if latest || shown || stored.latest().is_none() {
        let kept = |k: &str| {
            matches!(
                k,
                "latestPublishedVersion" | "registrationType" | "versionDetails"
            )
        };
        stored.info.retain(|k, _| kept(k));
        for (k, v) in &card.fields {
            if !kept(k) {
                stored.info.insert(k.clone(), v.clone());
            }
        }
    }
    if latest {
        stored
            .info
            .insert("latestPublishedVersion".to_owned(), json!(card.version));
        for v in &mut stored.versions {
            v.latest = v.version == card.version;
            if v.latest {
                v.updated_at = at.clone();
            }
        }
    }
    stored
        .info
        .insert("registrationType".to_owned(), json!(registration));

    let mut detail = card.fields;
    detail.insert("registrationType".to_owned(), json!(registration));
    detail.remove("latestVersion");
    let info_key = config_key(namespace, AGENT_GROUP, &card.name, "agentCard.name")?;
    let card_key = config_key(
        namespace,
        AGENT_VERSION_GROUP,
        &card_id(&card.name, &card.version),
        "agentCard.version",
    )?;
    Ok(vec![Op::WriteConfigs {
        // Two releases racing on one agent: one wins whole, the other
        // writes nothing and is told.
        expect: vec![(
            info_key.clone(),
            Some(stored.md5.clone()).filter(|m| !m.is_empty()),
        )],
        publish: vec![
            (info_key, json_config(INFO_TAG, stored.content())),
            (
                card_key,
                json_config(CARD_TAG, Value::Object(detail).to_string()),
            ),
        ],
        remove: Vec::new(),
    }])
}

/// An agent's `AgentCardDetailInfo` at `version` (its latest when
/// `None`): the card as released, `registrationType` and `latestVersion`.
/// Read as `SERVICE` (the `registration` asked for, or the card's own),
/// its URL is one of the version's live endpoints, preferring those of
/// its `preferredTransport`, and `additionalInterfaces` lists them all.
pub(crate) fn card(
    registry: &Registry,
    namespace: &str,
    name: &str,
    version: Option<&str>,
    registration: Option<&str>,
) -> Result<Value, AiError> {
    let stored = find(registry, namespace, name).ok_or_else(|| not_found(name))?;
    let version = match version.filter(|v| !v.is_empty()) {
        Some(v) => v.to_owned(),
        None => stored
            .versions
            .iter()
            .find(|v| v.latest)
            .map(|v| v.version.clone())
            .ok_or_else(|| {
                AiError::VersionNotFound(format!("Agent {name} latest version not found"))
            })?,
    };
    let missing = || AiError::VersionNotFound(format!("Agent {name} version {version} not found."));
    let key = config_key(
        namespace,
        AGENT_VERSION_GROUP,
        &card_id(name, &version),
        "version",
    )
    .map_err(|_| missing())?;
    let item = registry.config(&key).ok_or_else(missing)?;
    let mut detail: Map<String, Value> =
        serde_json::from_str(&item.content).map_err(|_| missing())?;
    let service = registration
        .or(detail.get("registrationType").and_then(Value::as_str))
        .is_some_and(|r| r.eq_ignore_ascii_case(REGISTRATION_SERVICE));
    if service {
        with_endpoints(registry, namespace, name, &version, &mut detail);
    }
    detail.insert(
        "latestVersion".to_owned(),
        json!(stored.latest() == Some(version.as_str())),
    );
    Ok(Value::Object(detail))
}

/// Puts the live endpoints of `name`'s `version` into its card, if it
/// has any.
fn with_endpoints(
    registry: &Registry,
    namespace: &str,
    name: &str,
    version: &str,
    card: &mut Map<String, Value>,
) {
    let Some(service) = endpoint_service(namespace, name, version)
        .ok()
        .and_then(|key| registry.service(&key))
    else {
        return;
    };
    let interfaces: Vec<(String, String)> = service
        .instances()
        .filter(|i| i.healthy && i.enabled)
        .map(|i| {
            let scheme = if i.metadata.get(AGENT_ENDPOINT_TLS) == Some("true") {
                "https"
            } else {
                "http"
            };
            let mut url = format!("{scheme}://{}:{}", i.ip, i.port);
            match i
                .metadata
                .get(AGENT_ENDPOINT_PATH)
                .filter(|p| !p.is_empty())
            {
                Some(path) if path.starts_with('/') => url.push_str(path),
                Some(path) => url = format!("{url}/{path}"),
                None => {}
            }
            let transport = i
                .metadata
                .get(AGENT_ENDPOINT_TRANSPORT)
                .unwrap_or(DEFAULT_TRANSPORT);
            (url, transport.to_owned())
        })
        .collect();
    if interfaces.is_empty() {
        return;
    }
    let preferred = card
        .get("preferredTransport")
        .and_then(Value::as_str)
        .unwrap_or("");
    let matching: Vec<&(String, String)> = interfaces
        .iter()
        .filter(|(_, t)| t.eq_ignore_ascii_case(preferred))
        .collect();
    let pool: Vec<&(String, String)> = if matching.is_empty() {
        interfaces.iter().collect()
    } else {
        matching
    };
    // Spread the agent's callers over its endpoints, as Nacos does.
    let (url, transport) = pool[rand::random_range(0..pool.len())].clone();
    card.insert(
        "additionalInterfaces".to_owned(),
        interfaces
            .iter()
            .map(|(url, transport)| json!({"url": url, "transport": transport}))
            .collect(),
    );
    card.insert("url".to_owned(), json!(url));
    card.insert("preferredTransport".to_owned(), json!(transport));
}

/// The naming service `name`'s endpoints of `version` are instances of.
pub(crate) fn endpoint_service(
    namespace: &str,
    name: &str,
    version: &str,
) -> Result<ServiceKey, AiError> {
    ServiceKey::parse(
        namespace,
        AGENT_ENDPOINT_GROUP,
        &format!("{name}::{version}"),
    )
    .map_err(|e| AiError::invalid("agentName", e.to_string()))
}

/// The service and instance an `AgentEndpointRequest`'s endpoint is:
/// its address, and its path, transport and TLS as metadata.
pub(crate) fn endpoint_instance(
    namespace: &str,
    name: &str,
    endpoint: Option<&AgentEndpoint>,
) -> Result<(ServiceKey, InstanceSpec), AiError> {
    let endpoint = endpoint.ok_or_else(|| AiError::invalid("endpoint", "is required"))?;
    let version = endpoint
        .version
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AiError::invalid("endpoint.version", "is required"))?;
    let address = endpoint
        .address
        .clone()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| AiError::invalid("endpoint.address", "is required"))?;
    understudy_core::check_ip(&address)
        .map_err(|e| AiError::invalid("endpoint.address", e.to_string()))?;
    let port = endpoint
        .port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| AiError::invalid("endpoint.port", "must be between 1 and 65535"))?;
    let mut spec = InstanceSpec::new(address, port);
    let transport = endpoint
        .transport
        .clone()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| DEFAULT_TRANSPORT.to_owned());
    spec.metadata.insert(
        AGENT_ENDPOINT_PATH.to_owned(),
        endpoint.path.clone().unwrap_or_default(),
    );
    spec.metadata
        .insert(AGENT_ENDPOINT_TRANSPORT.to_owned(), transport);
    spec.metadata.insert(
        AGENT_ENDPOINT_TLS.to_owned(),
        endpoint.support_tls.unwrap_or(false).to_string(),
    );
    Ok((endpoint_service(namespace, name, version)?, spec))
}

/// Plans deleting `version` of an agent (every version when `None`): its
/// cards, and its version list (rewritten without the version, or removed
/// with the last one). Deleting the latest leaves the agent without one
/// until another is set, as in Nacos; an unknown agent or version is
/// nothing to delete.
pub(crate) fn plan_delete(
    registry: &Registry,
    namespace: &str,
    name: &str,
    version: Option<&str>,
) -> Result<Vec<Op>, AiError> {
    let Some(mut stored) = find(registry, namespace, name) else {
        return Ok(Vec::new());
    };
    let info_key = config_key(namespace, AGENT_GROUP, name, "agentName")?;
    let card_key =
        |v: &str| config_key(namespace, AGENT_VERSION_GROUP, &card_id(name, v), "version");
    let doomed: Vec<String> = match version.filter(|v| !v.is_empty()) {
        Some(v) if stored.with(v) => vec![v.to_owned()],
        Some(_) => return Ok(Vec::new()),
        None => stored.versions.iter().map(|v| v.version.clone()).collect(),
    };
    let mut remove = Vec::new();
    for v in &doomed {
        let key = card_key(v)?;
        if registry.config(&key).is_some() {
            remove.push(key);
        }
    }
    stored.versions.retain(|v| !doomed.contains(&v.version));
    let mut publish = Vec::new();
    if stored.versions.is_empty() {
        remove.push(info_key.clone());
    } else {
        if stored
            .latest()
            .is_some_and(|l| doomed.iter().any(|v| v == l))
        {
            stored
                .info
                .insert("latestPublishedVersion".to_owned(), Value::Null);
            stored.info.insert("version".to_owned(), Value::Null);
        }
        publish.push((info_key.clone(), json_config(INFO_TAG, stored.content())));
    }
    Ok(vec![Op::WriteConfigs {
        expect: vec![(info_key, Some(stored.md5.clone()))],
        publish,
        remove,
    }])
}

/// An `AgentVersionDetail` as answered: Nacos' field names, and those
/// nacos-maintainer-sdk-python reads (`createAt`, `updateAt`,
/// `isLatest`).
fn version_detail(v: &AgentVersion) -> Value {
    json!({
        "version": v.version,
        "createdAt": v.created_at,
        "updatedAt": v.updated_at,
        "latest": v.latest,
        "createAt": v.created_at,
        "updateAt": v.updated_at,
        "isLatest": v.latest,
    })
}

/// An agent's versions, in the order released.
pub(crate) fn versions(
    registry: &Registry,
    namespace: &str,
    name: &str,
) -> Result<Vec<Value>, AiError> {
    let stored = find(registry, namespace, name).ok_or_else(|| not_found(name))?;
    Ok(stored.versions.iter().map(version_detail).collect())
}

/// The agents of `namespace` named `name` (`blur`: whose name contains
/// it; no name: all), by name, as `AgentCardVersionInfo`s.
pub(crate) fn list(
    registry: &Registry,
    namespace: &str,
    name: Option<&str>,
    blur: bool,
) -> Vec<Value> {
    let Ok(probe) = config_key(namespace, AGENT_GROUP, "probe", "namespaceId") else {
        return Vec::new();
    };
    let mut agents: Vec<(String, Value)> = registry
        .configs_in(&probe.namespace)
        .filter(|(key, _)| key.group == AGENT_GROUP && listed(&key.data_id, name, blur))
        .filter_map(|(key, _)| {
            let stored = find(registry, namespace, &key.data_id)?;
            let mut info = stored.info;
            info.insert(
                "versionDetails".to_owned(),
                stored.versions.iter().map(version_detail).collect(),
            );
            Some((key.data_id.clone(), Value::Object(info)))
        })
        .collect();
    agents.sort_by(|a, b| a.0.cmp(&b.0));
    agents.into_iter().map(|(_, info)| info).collect()
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

    fn agent_card(version: &str, description: &str) -> Value {
        json!({"name": "planner", "version": version, "protocolVersion": "0.3.0",
            "preferredTransport": "JSONRPC", "url": "http://planner.example/a2a",
            "description": description,
            "skills": [{"id": "plan", "name": "plan", "description": "plans", "tags": []}]})
    }

    fn release(
        registry: &mut Registry,
        version: &str,
        mode: Mode,
        registration: Option<&str>,
    ) -> Result<(), AiError> {
        let ops = plan_release(
            registry,
            "public",
            agent_card(version, &format!("v{version}")),
            registration,
            mode,
            1_700_000_000_000,
        )?;
        apply(registry, ops);
        Ok(())
    }

    fn versions_of(registry: &Registry) -> Vec<(String, bool)> {
        versions(registry, "public", "planner")
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["version"].as_str().unwrap().to_owned(),
                    v["isLatest"] == true,
                )
            })
            .collect()
    }

    #[test]
    fn releases_add_versions_and_only_a_latest_release_moves_the_latest() {
        let mut registry = Registry::new(RegistryOptions::default());
        release(
            &mut registry,
            "1.0.0",
            Mode::Release { latest: false },
            None,
        )
        .unwrap();
        release(
            &mut registry,
            "1.1.0",
            Mode::Release { latest: false },
            None,
        )
        .unwrap();
        assert_eq!(
            versions_of(&registry),
            vec![("1.0.0".to_owned(), true), ("1.1.0".to_owned(), false)],
            "an agent's first version is its latest; another released without setAsLatest is not"
        );
        release(&mut registry, "2.0.0", Mode::Release { latest: true }, None).unwrap();
        let latest = card(&registry, "public", "planner", None, None).unwrap();
        assert_eq!(latest["version"], "2.0.0");
        assert_eq!(latest["latestVersion"], true);
        assert_eq!(latest["registrationType"], "URL");
        let old = card(&registry, "public", "planner", Some("1.0.0"), None).unwrap();
        assert_eq!(old["description"], "v1.0.0");
        assert_eq!(old["latestVersion"], false);
        // A version released again over gRPC is left as it was.
        let again = plan_release(
            &registry,
            "public",
            agent_card("1.0.0", "changed"),
            None,
            Mode::Release { latest: true },
            2,
        )
        .unwrap();
        assert!(again.is_empty());
    }

    #[test]
    fn of_two_releases_planned_at_once_the_second_writes_nothing() {
        let mut registry = Registry::new(RegistryOptions::default());
        release(&mut registry, "1", Mode::Register, None).unwrap();
        let plan = |description: &str| {
            let mut card = agent_card("2", description);
            card["url"] = json!(format!("http://{description}.example"));
            plan_release(
                &registry,
                "public",
                card,
                None,
                Mode::Update { latest: true },
                2,
            )
            .unwrap()
        };
        let (first, second) = (plan("first"), plan("second"));
        apply(&mut registry, first);
        for op in second {
            let refused = registry.apply(&Command::new(3, op));
            assert!(
                matches!(refused, Err(understudy_core::Error::CasMismatch { .. })),
                "{refused:?}"
            );
        }
        let kept = card(&registry, "public", "planner", Some("2"), None).unwrap();
        assert_eq!(
            kept["url"], "http://first.example",
            "the refused release left the first one's card"
        );
    }

    #[test]
    fn register_refuses_an_existing_agent_and_update_an_unknown_one() {
        let mut registry = Registry::new(RegistryOptions::default());
        assert!(matches!(
            release(&mut registry, "1", Mode::Update { latest: true }, None),
            Err(AiError::NotFound(_))
        ));
        release(
            &mut registry,
            "1",
            Mode::Register,
            Some(REGISTRATION_SERVICE),
        )
        .unwrap();
        assert!(matches!(
            release(&mut registry, "2", Mode::Register, None),
            Err(AiError::Conflict(_))
        ));
        // An update keeps the registration type unless it names one.
        release(&mut registry, "2", Mode::Update { latest: true }, None).unwrap();
        let latest = card(&registry, "public", "planner", None, None).unwrap();
        assert_eq!(latest["registrationType"], "SERVICE");
        let listed = list(&registry, "public", Some("plan"), true);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["latestPublishedVersion"], "2");
        assert_eq!(listed[0]["description"], "v2");
        assert!(list(&registry, "public", Some("plan"), false).is_empty());
    }

    #[test]
    fn a_card_without_its_required_fields_is_refused_by_name() {
        let registry = Registry::new(RegistryOptions::default());
        for (missing, field) in [
            ("name", "agentCard.name"),
            ("version", "agentCard.version"),
            ("protocolVersion", "agentCard.protocolVersion"),
            ("preferredTransport", "agentCard.preferredTransport"),
            ("url", "agentCard.url"),
        ] {
            let mut card = agent_card("1", "d");
            card.as_object_mut().unwrap().remove(missing);
            let refused = plan_release(&registry, "public", card, None, Mode::Register, 1);
            assert!(
                matches!(&refused, Err(AiError::Invalid { field: f, .. }) if *f == field),
                "{missing}: {refused:?}"
            );
        }
        let mut spaced = agent_card("1", "d");
        spaced["name"] = json!("two words");
        assert!(matches!(
            plan_release(&registry, "public", spaced, None, Mode::Register, 1),
            Err(AiError::Invalid {
                field: "agentCard.name",
                ..
            })
        ));
    }

    #[test]
    fn a_service_agent_is_reached_at_its_endpoints_of_the_preferred_transport() {
        let mut registry = Registry::new(RegistryOptions::default());
        release(
            &mut registry,
            "1",
            Mode::Register,
            Some(REGISTRATION_SERVICE),
        )
        .unwrap();
        // No endpoint yet: the card's own URL.
        let bare = card(&registry, "public", "planner", None, None).unwrap();
        assert_eq!(bare["url"], "http://planner.example/a2a");
        for (port, transport, tls) in [(8001_u16, "GRPC", false), (8002, "JSONRPC", true)] {
            let endpoint = AgentEndpoint {
                transport: Some(transport.to_owned()),
                address: Some("10.0.0.7".to_owned()),
                port: Some(port.into()),
                path: Some("rpc".to_owned()),
                support_tls: Some(tls),
                version: Some("1".to_owned()),
            };
            let (service, spec) = endpoint_instance("public", "planner", Some(&endpoint)).unwrap();
            apply(
                &mut registry,
                vec![Op::Register {
                    service,
                    owner: understudy_core::Owner::Persistent {
                        ip: "10.0.0.7".into(),
                        port,
                    },
                    instances: vec![spec],
                }],
            );
        }
        let reached = card(&registry, "public", "planner", None, None).unwrap();
        assert_eq!(reached["url"], "https://10.0.0.7:8002/rpc");
        assert_eq!(reached["preferredTransport"], "JSONRPC");
        assert_eq!(reached["additionalInterfaces"].as_array().unwrap().len(), 2);
        // Asked for as URL, the card is as released.
        let as_url = card(&registry, "public", "planner", None, Some("URL")).unwrap();
        assert_eq!(as_url["url"], "http://planner.example/a2a");
    }

    #[test]
    fn deleting_a_version_rewrites_the_list_and_the_last_removes_the_agent() {
        let mut registry = Registry::new(RegistryOptions::default());
        release(&mut registry, "1", Mode::Register, None).unwrap();
        release(&mut registry, "2", Mode::Update { latest: true }, None).unwrap();
        let ops = plan_delete(&registry, "public", "planner", Some("2")).unwrap();
        apply(&mut registry, ops);
        assert_eq!(versions_of(&registry), vec![("1".to_owned(), false)]);
        assert!(matches!(
            card(&registry, "public", "planner", None, None),
            Err(AiError::VersionNotFound(_))
        ));
        assert!(matches!(
            card(&registry, "public", "planner", Some("2"), None),
            Err(AiError::VersionNotFound(_))
        ));
        let ops = plan_delete(&registry, "public", "planner", None).unwrap();
        apply(&mut registry, ops);
        assert!(matches!(
            card(&registry, "public", "planner", Some("1"), None),
            Err(AiError::NotFound(_))
        ));
        assert!(registry
            .configs_in(&understudy_core::NamespaceId::parse("public").unwrap())
            .next()
            .is_none());
    }
}
