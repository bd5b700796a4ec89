//! Entry points for the fuzz targets in `fuzz/` and for the regression
//! tests that replay what they found (`tests/fuzz_regressions.rs`). Each
//! takes untrusted bytes through one of the server's real decode paths,
//! as far as a handler goes before it proposes or reads the registry;
//! native sessions and raft payloads go on to apply what they decode to a
//! fresh state, which needs no running node. A panic, in the code under
//! test or in a property checked here (an HTTP refusal is a 4xx naming its
//! field; a snapshot rebuilt from an installed one is byte for byte the
//! same), is a bug to fix.
//!
//! Not an API: the decoders stay `pub(crate)`, and this module is the one
//! door the fuzz crate uses. The Nacos gRPC target routes by the same
//! [`RequestKind`] the dispatch does; the dispatch itself needs a live
//! connection, so the decode steps of each handler are spelled out here.

use std::io::Cursor;
use std::sync::{Arc, LazyLock};

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::RaftStateMachine;
use openraft::{Entry, LogId, RaftSnapshotBuilder, SnapshotMeta, Vote};
use prost::Message;
use understudy_core::{
    BeatOutcome, Command, ConfigKey, GroupName, InstanceSpec, NamespaceId, Owner,
};
use understudy_proto::grpc::Payload;
use understudy_proto::nacos::BeatInfo;
use understudy_proto::nacos_rpc::{
    error_response, parse_clusters, BatchInstanceRequest, ClientAck, ConfigBatchListenRequest,
    ConfigPublishRequest, ConfigQueryRequest, ConnectionSetup, Envelope, InstanceRequest,
    ServiceListRequest, ServiceQueryRequest, SubscribeServiceRequest, INVALID_PARAM,
};
use understudy_proto::{native, DecodeError};

use crate::clock::Clock;
use crate::config::{Settings, ValidConfig};
use crate::faults::{FaultState, LinkFaults};
use crate::http::error::ApiError;
use crate::http::params::{parse_port, Api, Params};
use crate::node::State;
use crate::raft::disk::PersistedSnapshot;
use crate::raft::store::{StateMachine, Waiters};
use crate::raft::{codec, Batch, Member, NodeId, TypeConfig};

/// The Nacos gRPC request types the server answers.
pub use crate::grpc::kind::RequestKind;

/// The default configuration, validated once.
static CONFIG: LazyLock<ValidConfig> = LazyLock::new(ValidConfig::default);

// ---- Nacos HTTP parameters -------------------------------------------------

/// One Nacos HTTP request's parameters: the bytes before the first `\n`
/// are the query string, the rest the `application/x-www-form-urlencoded`
/// body. Runs every parser the naming, config and namespace handlers apply
/// to parameters, and checks that each refusal is a 400 naming its field.
pub fn http_params(input: &[u8]) {
    let (query, form) = match input.iter().position(|b| *b == b'\n') {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &b""[..]),
    };
    let p = match Params::decode(query, form) {
        Ok(p) => p,
        Err(e) => return refused(e),
    };
    use crate::http::{config, naming, ops};
    for api in [Api::V1, Api::V2] {
        check(p.service_key(api));
    }
    check(p.instance_spec());
    check(naming::instance_key(&p));
    check(naming::patch_from(&p));
    check(naming::protect_threshold(&p));
    check(naming::selector(&p));
    check(naming::page_number(&p, "pageNo"));
    check(naming::page_number(&p, "pageSize"));
    check(p.cluster_filter("clusters"));
    check(p.cluster_filter("clusterName"));
    if let Some(raw) = p.get("udpPort") {
        check(parse_port(raw));
    }
    if let Some(raw) = p.get("beat") {
        if let Some(beat) = check(BeatInfo::parse(raw).map_err(ApiError::from)) {
            let _ = beat.metadata();
            if let Some(port) = beat.port {
                check(parse_port(&port.to_string()));
            }
            if let Some(cluster) = beat.cluster.as_deref() {
                check(understudy_core::ClusterName::parse(cluster).map_err(ApiError::from));
            }
        }
    }
    check(p.number::<u64>("id"));
    for api in [config::Api::V1, config::Api::V2] {
        check(config::key(&p, api));
    }
    if let Some(raw) = p.get("Listening-Configs") {
        check(config::parse_listening(raw));
    }
    for field in ["namespaceId", "customNamespaceId", "namespace"] {
        check(ops::namespace_id(&p, field));
    }
}

fn check<T>(result: Result<T, ApiError>) -> Option<T> {
    result.map_err(refused).ok()
}

fn refused(e: ApiError) {
    assert!(
        e.status().is_client_error(),
        "bad input answered with {}: {e:?}",
        e.status()
    );
    assert!(e.field().is_some(), "a refusal names no field: {e:?}");
    // Both renderings, as v1 and v2 routes answer.
    let _ = e.clone().v1();
    let _ = e.v2();
}

// ---- Nacos gRPC ------------------------------------------------------------

/// One Nacos gRPC `Payload` as protobuf bytes: opened, and its JSON body
/// decoded and validated the way the handler for its type does.
pub fn nacos_grpc(bytes: &[u8]) {
    let Ok(payload) = Payload::decode(bytes) else {
        return;
    };
    let envelope = Envelope::open(payload);
    let _ = envelope.header("accessToken");
    if let Err(e) = nacos_request(&envelope) {
        let _ = error_response(INVALID_PARAM, e.to_string());
    }
}

fn nacos_request(envelope: &Envelope) -> Result<(), DecodeError> {
    if envelope.kind.ends_with("Response") {
        envelope.decode::<ClientAck>()?.succeeded();
        return Ok(());
    }
    // Every kind the dispatch answers, matched exhaustively: a new one does
    // not compile until it is fuzzed too.
    let Some(kind) = RequestKind::parse(&envelope.kind) else {
        return Ok(()); // answered "no handler" without reading the body
    };
    match kind {
        RequestKind::ServerCheck | RequestKind::HealthCheck => {} // no body read
        RequestKind::ConnectionSetup => {
            envelope.decode::<ConnectionSetup>()?;
        }
        RequestKind::Instance | RequestKind::PersistentInstance => {
            let request: InstanceRequest = envelope.decode()?;
            request.common.service_key()?;
            let wire = request
                .instance
                .ok_or_else(|| DecodeError::new("instance", "is required"))?;
            InstanceSpec::try_from(wire)?;
        }
        RequestKind::BatchInstance => {
            let request: BatchInstanceRequest = envelope.decode()?;
            request.common.service_key()?;
            for wire in request.instances.unwrap_or_default() {
                InstanceSpec::try_from(wire)?;
            }
        }
        RequestKind::ServiceQuery => {
            let request: ServiceQueryRequest = envelope.decode()?;
            request.common.service_key()?;
            parse_clusters(&request.cluster.unwrap_or_default())?;
        }
        RequestKind::Subscribe => {
            let request: SubscribeServiceRequest = envelope.decode()?;
            request.common.service_key()?;
            parse_clusters(&request.clusters.unwrap_or_default())?;
        }
        RequestKind::ServiceList => {
            let request: ServiceListRequest = envelope.decode()?;
            NamespaceId::parse(request.common.namespace.as_deref().unwrap_or(""))?;
            GroupName::parse(request.common.group_name.as_deref().unwrap_or(""))?;
        }
        RequestKind::ConfigQuery | RequestKind::ConfigRemove => {
            envelope.decode::<ConfigQueryRequest>()?.key()?;
        }
        RequestKind::ConfigPublish => {
            let request: ConfigPublishRequest = envelope.decode()?;
            request.common.key()?;
            for key in ["betaIps", "tag", "type", "appName", "desc", "config_tags"] {
                request.addition(key);
            }
        }
        RequestKind::NamingFuzzyWatch | RequestKind::ConfigFuzzyWatch => {
            let request: understudy_proto::nacos3_rpc::FuzzyWatchRequest = envelope.decode()?;
            request.pattern()?;
            request.cancels()?;
        }
        RequestKind::QueryMcpServer
        | RequestKind::ReleaseMcpServer
        | RequestKind::McpServerEndpoint => {
            envelope.decode::<understudy_proto::nacos_ai::McpRequest>()?;
        }
        RequestKind::QueryAgentCard
        | RequestKind::ReleaseAgentCard
        | RequestKind::AgentEndpoint => {
            envelope.decode::<understudy_proto::nacos_ai::AgentRequest>()?;
        }
        RequestKind::LockOperation => {
            envelope
                .decode::<understudy_proto::nacos3_rpc::LockOperationRequest>()?
                .operation()?;
        }
        RequestKind::ConfigBatchListen => {
            let request: ConfigBatchListenRequest = envelope.decode()?;
            for context in request.config_listen_contexts.unwrap_or_default() {
                ConfigKey::parse(
                    context.tenant.as_deref().unwrap_or(""),
                    context.group.as_deref().unwrap_or(""),
                    context.data_id.as_deref().unwrap_or(""),
                )?;
            }
        }
    }
    Ok(())
}

// ---- native API ------------------------------------------------------------

/// One native API message: the first byte picks the request type, the rest
/// is its protobuf encoding. A session is a run of length-delimited
/// `SessionRequest`s whose commands are applied, in order, to a fresh
/// state, as a session's proposals would be.
pub fn native_message(input: &[u8]) {
    let Some((&which, mut body)) = input.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            if let Ok(request) = native::WatchRequest::decode(body) {
                let _ = crate::grpc::native::Scope::parse(&request);
            }
        }
        1 => {
            let state = State::new(&CONFIG);
            let owner = Owner::Connection {
                node: CONFIG.node_id,
                id: "native-1-0-1".into(),
            };
            let mut at = 0;
            while !body.is_empty() {
                let Ok(request) = native::SessionRequest::decode_length_delimited(&mut body) else {
                    return;
                };
                at += 1;
                if let Ok(Some(op)) = crate::grpc::native::session_op(&owner, request) {
                    state.apply(&[Command::new(at, op)], at);
                }
            }
        }
        2 => {
            if let Ok(request) = native::ListServicesRequest::decode(body) {
                let _ = NamespaceId::parse(&request.namespace);
                match request.group.trim() {
                    "" => {}
                    raw => {
                        let _ = GroupName::parse(raw);
                    }
                }
            }
        }
        3 => {
            if let Ok(request) = native::ListGroupsRequest::decode(body) {
                let _ = NamespaceId::parse(&request.namespace);
            }
        }
        _ => {
            if let Ok(native::GetServiceRequest {
                service: Some(service),
            }) = native::GetServiceRequest::decode(body)
            {
                let _ = understudy_core::ServiceKey::try_from(&service);
            }
        }
    }
}

// ---- raft ------------------------------------------------------------------

/// One payload between nodes: the first byte picks what it is read as, the
/// rest goes to [`codec::decode`] (raft's messages, log entries, batches)
/// or to the peer service's protobuf decoder (beats and their answers,
/// forward answers, a node's status, a fault model). Log entries,
/// forwarded batches and
/// append-entries requests are applied to a fresh state machine;
/// snapshots are installed on one, and a snapshot it then builds must
/// install elsewhere to the same registry.
pub fn raft_payload(input: &[u8]) {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    match which % 16 {
        0 => {
            if let Ok(entry) = codec::decode::<Entry<TypeConfig>>(bytes) {
                block_on(apply(vec![entry]));
            }
        }
        1 => block_on(install(bytes.to_vec(), snapshot_meta())),
        2 => {
            if let Ok(persisted) = codec::decode::<PersistedSnapshot>(bytes) {
                block_on(install(persisted.bytes, persisted.meta));
            }
        }
        3 => {
            if let Ok(request) = codec::decode::<AppendEntriesRequest<TypeConfig>>(bytes) {
                block_on(apply(request.entries));
            }
        }
        4 => {
            let _ = codec::decode::<VoteRequest<NodeId>>(bytes);
        }
        5 => {
            if let Ok(request) = codec::decode::<InstallSnapshotRequest<TypeConfig>>(bytes) {
                if request.offset == 0 && request.done {
                    block_on(install(request.data, request.meta));
                }
            }
        }
        6 => {
            if let Ok(beat) = understudy_proto::peer::BeatRequest::decode(bytes) {
                let _ = beat.key();
            }
        }
        7 => {
            if let Ok(batch) = codec::decode::<Batch>(bytes) {
                State::new(&CONFIG).apply(&batch.commands, batch.stamp_ms);
            }
        }
        8 => {
            let _ = codec::decode::<Vote<NodeId>>(bytes);
        }
        9 => {
            let _ = codec::decode::<Option<LogId<NodeId>>>(bytes);
        }
        10 => {
            let _ =
                codec::decode::<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>(bytes);
        }
        11 => {
            let _ = codec::decode::<Result<VoteResponse<NodeId>, RaftError<NodeId>>>(bytes);
        }
        12 => {
            let _ = codec::decode::<
                Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
            >(bytes);
        }
        13 => {
            if let Ok(reply) = understudy_proto::peer::BeatReply::decode(bytes) {
                let _ = understudy_proto::peer::BeatOutcome::try_from(reply.outcome)
                    .map(BeatOutcome::try_from);
            }
        }
        14 => {
            let _ = understudy_proto::peer::ForwardReply::decode(bytes);
        }
        15 => {
            if let Ok(reply) = understudy_proto::peer::StatusReply::decode(bytes) {
                let _ = reply.status.map(crate::raft::NodeStatus::try_from);
            }
        }
        _ => {
            // A fault model as a peer sets it.
            if let Ok(request) = understudy_proto::peer::SetFaultsRequest::decode(bytes) {
                if let Some(state) = request.faults {
                    let _ = LinkFaults::new(1).set_state(&FaultState::from(state));
                }
            }
        }
    }
}

fn fresh_machine() -> (StateMachine, Arc<State>) {
    let state = Arc::new(State::new(&CONFIG));
    let machine = StateMachine::new(
        CONFIG.node_id,
        state.clone(),
        Clock::starting_at(0),
        Waiters::default(),
    );
    (machine, state)
}

fn snapshot_meta() -> SnapshotMeta<NodeId, Member> {
    SnapshotMeta {
        last_log_id: None,
        last_membership: Default::default(),
        snapshot_id: "fuzz".to_owned(),
    }
}

async fn apply(entries: Vec<Entry<TypeConfig>>) {
    let (mut machine, _) = fresh_machine();
    machine
        .apply(entries)
        .await
        .expect("applying entries in memory does not fail");
}

async fn install(bytes: Vec<u8>, meta: SnapshotMeta<NodeId, Member>) {
    let (mut machine, _) = fresh_machine();
    if machine
        .install_snapshot(&meta, Box::new(Cursor::new(bytes)))
        .await
        .is_err()
    {
        return;
    }
    let built = build(&mut machine).await;
    let (mut other, _) = fresh_machine();
    other
        .install_snapshot(&built.meta, Box::new(Cursor::new(built.bytes.clone())))
        .await
        .expect("a snapshot this build wrote installs");
    // Bytes, not values: a corrupt snapshot may carry a NaN weight, which
    // is not equal to itself.
    assert!(
        build(&mut other).await.bytes == built.bytes,
        "a snapshot built from an installed one rebuilds the same bytes"
    );
}

struct Built {
    meta: SnapshotMeta<NodeId, Member>,
    bytes: Vec<u8>,
}

async fn build(machine: &mut StateMachine) -> Built {
    machine
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("a state machine snapshots what it holds");
    // In memory the bytes are made when a follower asks: what it is sent.
    let snapshot = machine
        .get_current_snapshot()
        .await
        .expect("the snapshot just built encodes")
        .expect("the snapshot just built is current");
    Built {
        meta: snapshot.meta,
        bytes: snapshot.snapshot.into_inner(),
    }
}

/// Runs a state machine call: in memory, nothing in it waits on I/O.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime builds");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

// ---- config file -----------------------------------------------------------

/// A config file's text: parsed and validated as `serve --config` does.
/// TLS file names are pointed at a path that does not exist, so fuzzed
/// input never reads a file the process can reach.
pub fn config_file(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let Ok(mut settings) = Settings::from_toml(text) else {
        return;
    };
    let nowhere = |path: &mut Option<std::path::PathBuf>| {
        if path.is_some() {
            *path = Some("/nonexistent/understudy-fuzz/tls.pem".into());
        }
    };
    nowhere(&mut settings.tls_cert);
    nowhere(&mut settings.tls_key);
    nowhere(&mut settings.tls_ca);
    let _ = ValidConfig::from_settings(settings);
}

// ---- tokens ----------------------------------------------------------------

/// The fuzzing token target's clock, ms.
const TOKEN_NOW_MS: u64 = 1_000_000_000;

/// Auth on, one user `app`, a fixed secret.
static TOKENS: LazyLock<crate::auth::Auth> = LazyLock::new(|| {
    crate::auth::Auth::new(crate::config::AuthConfig {
        enabled: true,
        token_secret: b"the fuzzing target's token secret".to_vec(),
        token_ttl: std::time::Duration::from_secs(60),
        users: vec![crate::config::UserSetting {
            name: "app".to_owned(),
            // Never checked: tokens only look the user up.
            password_hash: "$2b$04$abcdefghijklmnopqrstuu5Yt3Cq3kD2t3vQqyfyQ8U3xB3ZpQ6wW"
                .to_owned(),
            admin: false,
        }],
    })
});

/// A token (the bytes read as text) checked as every API checks one. A
/// token it accepts must be for the one user and carry the HS256
/// signature of exactly what it says under the secret: anything else
/// accepted is a forgery.
pub fn token(input: &[u8]) {
    use base64::Engine as _;
    let text = String::from_utf8_lossy(input);
    let Ok(identity) = TOKENS.verify(Some(&text), TOKEN_NOW_MS) else {
        return;
    };
    assert_eq!(identity.user, "app");
    let (signed, signature) = text
        .trim()
        .rsplit_once('.')
        .expect("an accepted token has a signature");
    let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(signature)
        .expect("an accepted signature is base64url");
    assert_eq!(
        signature,
        TOKENS.signature(signed),
        "a forged token was accepted"
    );
}

/// Seeds for the token target: a token as this node issues them, one with a bare
/// `{"alg":"HS256"}` header, an expired one and an unsigned one.
pub fn token_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    let sign = |header: &str, claims: &str| {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let signature = URL_SAFE_NO_PAD.encode(TOKENS.signature(&signed));
        format!("{signed}.{signature}")
    };
    let live = format!(r#"{{"sub":"app","exp":{}}}"#, TOKEN_NOW_MS / 1000 + 60);
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
        URL_SAFE_NO_PAD.encode(&live)
    );
    vec![
        // The header and claims as a login writes them.
        (
            "issued",
            sign(r#"{"alg":"HS256","typ":"JWT"}"#, &live).into_bytes(),
        ),
        (
            "bare_header",
            sign(r#"{"alg":"HS256"}"#, &live).into_bytes(),
        ),
        (
            "expired",
            sign(r#"{"alg":"HS256","typ":"JWT"}"#, r#"{"sub":"app","exp":1}"#).into_bytes(),
        ),
        ("unsigned", unsigned.into_bytes()),
    ]
}

// ---- config archives -------------------------------------------------------

/// The largest config the archive target accepts, and all together.
const ARCHIVE_ENTRY: usize = 4096;
const ARCHIVE_TOTAL: usize = 1 << 16;

/// An uploaded config archive (Nacos 3's import ZIP), read as the import
/// reads it: whatever it holds, nothing read may exceed its limits.
pub fn config_zip(input: &[u8]) {
    let Ok(archive) = understudy_proto::config_zip::read(input, ARCHIVE_ENTRY, ARCHIVE_TOTAL)
    else {
        return;
    };
    let total: usize = archive.configs.iter().map(|c| c.content.len()).sum();
    assert!(total <= ARCHIVE_TOTAL, "{total} bytes read, over the limit");
    assert!(archive
        .configs
        .iter()
        .all(|c| c.content.len() <= ARCHIVE_ENTRY));
}

/// Seeds for the archive target: an export of two configs.
pub fn config_zip_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use understudy_proto::config_zip::{write, ArchivedConfig};
    let config = |group: &str, data_id: &str, content: &str, kind: &str| ArchivedConfig {
        group: group.to_owned(),
        data_id: data_id.to_owned(),
        content: content.to_owned(),
        kind: kind.to_owned(),
        app_name: "shop".to_owned(),
        desc: "a seed".to_owned(),
    };
    vec![(
        "export",
        write(&[
            config("DEFAULT_GROUP", "app.yaml", "port: 80\n", "yaml"),
            config("web", "flags", "a=1", "text"),
        ]),
    )]
}
