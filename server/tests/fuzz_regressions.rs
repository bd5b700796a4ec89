//! The fuzz targets' inputs, replayed in the normal test run: every file
//! under `fuzz/seeds/<target>/` (the starting corpus) and
//! `fuzz/regressions/<target>/` (inputs that once crashed a target) goes
//! through the entry point its target calls, and none may panic. A crash
//! found by `cargo fuzz run` is fixed in the code and its input copied to
//! `fuzz/regressions/<target>/`, so it stays fixed.
//!
//! The seeds are written by `write_the_fuzz_seeds` below (ignored; run it
//! when a wire format changes).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use understudy_server::fuzzing;

/// A fuzz target's entry point.
type EntryPoint = fn(&[u8]);

/// Each target and the entry point it calls.
const TARGETS: &[(&str, EntryPoint)] = &[
    ("http_params", fuzzing::http_params),
    ("grpc_payload", fuzzing::nacos_grpc),
    ("native_messages", fuzzing::native_message),
    ("raft_codec", fuzzing::raft_payload),
    ("config_file", fuzzing::config_file),
    ("token", fuzzing::token),
    ("config_zip", fuzzing::config_zip),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_committed_fuzz_input_goes_through_its_decoder_without_a_panic() {
    let mut replayed = 0;
    let mut panicked = Vec::new();
    for (target, entry) in TARGETS {
        let seeds = inputs("seeds", target);
        assert!(!seeds.is_empty(), "fuzz/seeds/{target} holds no seeds");
        for file in seeds.iter().chain(&inputs("regressions", target)) {
            let bytes = std::fs::read(file).expect("a readable fuzz input");
            if catch_unwind(AssertUnwindSafe(|| entry(&bytes))).is_err() {
                panicked.push(file.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(
        panicked.is_empty(),
        "these fuzz inputs panic: {panicked:#?}"
    );
    assert!(replayed >= TARGETS.len());
}

// ---- seeds -----------------------------------------------------------------

#[tokio::test]
#[ignore = "writes fuzz/seeds; run it when a wire format changes"]
async fn write_the_fuzz_seeds() {
    let mut seeds: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for (name, text) in http_seeds() {
        seeds.push(("http_params", name.to_owned(), text.as_bytes().to_vec()));
    }
    for (name, payload) in nacos_seeds() {
        seeds.push(("grpc_payload", name.to_owned(), payload));
    }
    for (name, bytes) in native_seeds() {
        seeds.push(("native_messages", name.to_owned(), bytes));
    }
    for (name, bytes) in raft_seeds().await {
        seeds.push(("raft_codec", name.to_owned(), bytes));
    }
    let example = std::fs::read(fuzz_dir().join("../understudy.example.toml")).unwrap();
    seeds.push(("config_file", "example".to_owned(), example));
    seeds.push((
        "config_file",
        "cluster".to_owned(),
        CLUSTER_CONFIG.as_bytes().to_vec(),
    ));
    for (name, bytes) in fuzzing::token_seeds() {
        seeds.push(("token", name.to_owned(), bytes));
    }
    for (name, bytes) in fuzzing::config_zip_seeds() {
        seeds.push(("config_zip", name.to_owned(), bytes));
    }
    for (target, name, bytes) in seeds {
        let dir = fuzz_dir().join("seeds").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

const CLUSTER_CONFIG: &str = r#"node_id = 2
dc = "hz"
bind = "0.0.0.0"
http_port = 8848
raft_port = 7848
raft_advertise = "10.0.0.2:7848"
peers = ["1@10.0.0.1:7848", "3@10.0.0.3:7848/sh"]
cluster_secret = "a-long-shared-secret-between-nodes"
link = ["hz-sh=40ms~10ms,loss=1%"]
apply_delay = ["sh=500ms"]
log = "info,understudy_server::raft=debug"
health_check = "http:/health"
auth_enabled = true
auth_token_secret = "0123456789abcdef0123456789abcdef"
tls_cert = "cert.pem"
tls_key = "key.pem"
tls_ca = "ca.pem"

[[users]]
username = "nacos"
password_hash = "$2b$04$abcdefghijklmnopqrstuu5Yt3Cq3kD2t3vQqyfyQ8U3xB3ZpQ6wW"
admin = true
"#;

/// Query string, a newline, then the form body, as real clients send them.
fn http_seeds() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "register",
            "serviceName=svc&groupName=DEFAULT_GROUP&namespaceId=public&ip=10.0.0.1&port=8080\
             &weight=1.0&enabled=true&healthy=true&ephemeral=true&clusterName=DEFAULT\
             &metadata=%7B%22zone%22%3A%22a%22%2C%22v%22%3A1%7D\n",
        ),
        (
            "register_form",
            "\nserviceName=DEFAULT_GROUP%40%40svc&ip=10.0.0.2&port=80&metadata=k%3Dv%2Ck2%3Dv2\
             &enable=false&cluster=c1",
        ),
        (
            "list",
            "serviceName=DEFAULT_GROUP%40%40svc&clusters=a%2Cb&healthyOnly=true&udpPort=5353\n",
        ),
        (
            "beat",
            "serviceName=DEFAULT_GROUP%40%40svc&beat=%7B%22ip%22%3A%2210.0.0.1%22%2C%22port%22\
             %3A8080%2C%22cluster%22%3A%22DEFAULT%22%2C%22weight%22%3A1.0%2C%22metadata%22%3A\
             %7B%22a%22%3A%22b%22%7D%2C%22serviceName%22%3A%22svc%22%7D\n",
        ),
        (
            "service",
            "\nserviceName=svc&protectThreshold=0.5&selector=%7B%22type%22%3A%22label%22%2C\
             %22expression%22%3A%22CONSUMER.label.a%3DPROVIDER.label.a%22%7D&metadata=k%3Dv",
        ),
        ("service_list", "pageNo=1&pageSize=20&groupName=g&namespaceId=dev\n"),
        ("health", "\nserviceName=svc&ip=10.0.0.1&port=8080&healthy=false"),
        (
            "config",
            "dataId=app.yaml&group=DEFAULT_GROUP&tenant=dev\ncontent=a%3A+1&type=yaml&appName=x",
        ),
        (
            "listener",
            "\nListening-Configs=app.yaml%02DEFAULT_GROUP%02d41d8cd98f00b204e9800998ecf8427e%01\
             b.json%02g%02%02dev%01",
        ),
        (
            "namespace",
            "customNamespaceId=dev&namespaceName=Dev&namespaceDesc=x\nnamespace=dev&namespaceShowName=D",
        ),
        ("member", "id=4&raftAddr=10.0.0.4%3A7848&role=learner\n"),
    ]
}

fn payload(kind: &str, body: &str) -> Vec<u8> {
    use prost::Message;
    use understudy_proto::grpc::{Metadata, Payload};
    Payload {
        metadata: Some(Metadata {
            r#type: kind.to_owned(),
            client_ip: "10.0.0.9".to_owned(),
            headers: [("accessToken".to_owned(), "t".to_owned())].into(),
        }),
        body: Some(prost_types::Any {
            type_url: String::new(),
            value: body.as_bytes().to_vec(),
        }),
    }
    .encode_to_vec()
}

/// Request bodies as the Nacos SDKs send them.
fn nacos_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let instance = r#"{"instanceId":null,"ip":"10.0.0.1","port":8080,"weight":1.0,"healthy":true,
        "enabled":true,"ephemeral":true,"clusterName":"DEFAULT","serviceName":"svc",
        "metadata":{"zone":"a","n":1},"instanceHeartBeatInterval":5000}"#;
    vec![
        (
            "server_check",
            payload("ServerCheckRequest", r#"{"headers":{}}"#),
        ),
        (
            "setup",
            payload(
                "ConnectionSetupRequest",
                r#"{"clientVersion":"Nacos-Java-Client:v2.3.0","tenant":"","labels":{"source":"sdk"},"abilityTable":{}}"#,
            ),
        ),
        (
            "ack",
            payload(
                "NotifySubscriberResponse",
                r#"{"requestId":"s3","resultCode":200,"errorCode":0}"#,
            ),
        ),
        ("health", payload("HealthCheckRequest", r#"{"headers":{}}"#)),
        (
            "register",
            payload(
                "InstanceRequest",
                &format!(
                    r#"{{"headers":{{}},"namespace":"public","serviceName":"svc","groupName":"DEFAULT_GROUP","module":"naming","type":"registerInstance","instance":{instance}}}"#
                ),
            ),
        ),
        (
            "persistent",
            payload(
                "PersistentInstanceRequest",
                &format!(
                    r#"{{"serviceName":"svc","groupName":"g","type":"deregisterInstance","instance":{instance}}}"#
                ),
            ),
        ),
        (
            "batch",
            payload(
                "BatchInstanceRequest",
                &format!(
                    r#"{{"serviceName":"svc","type":"batchRegisterInstance","instances":[{instance},{instance}]}}"#
                ),
            ),
        ),
        (
            "query",
            payload(
                "ServiceQueryRequest",
                r#"{"namespace":"","serviceName":"svc","groupName":"DEFAULT_GROUP","cluster":"a,b","healthyOnly":false,"udpPort":0}"#,
            ),
        ),
        (
            "subscribe",
            payload(
                "SubscribeServiceRequest",
                r#"{"namespace":"public","serviceName":"svc","groupName":"DEFAULT_GROUP","subscribe":true,"clusters":""}"#,
            ),
        ),
        (
            "service_list",
            payload(
                "ServiceListRequest",
                r#"{"namespace":"public","groupName":"DEFAULT_GROUP","pageNo":1,"pageSize":2147483647,"selector":""}"#,
            ),
        ),
        (
            "config_query",
            payload(
                "ConfigQueryRequest",
                r#"{"dataId":"app.yaml","group":"DEFAULT_GROUP","tenant":"","tag":""}"#,
            ),
        ),
        (
            "config_publish",
            payload(
                "ConfigPublishRequest",
                r#"{"dataId":"app.yaml","group":"DEFAULT_GROUP","tenant":"dev","content":"a: 1","casMd5":"","additionMap":{"type":"yaml","appName":null}}"#,
            ),
        ),
        (
            "config_remove",
            payload(
                "ConfigRemoveRequest",
                r#"{"dataId":"app.yaml","group":"DEFAULT_GROUP","tenant":""}"#,
            ),
        ),
        (
            "config_listen",
            payload(
                "ConfigBatchListenRequest",
                r#"{"listen":true,"configListenContexts":[{"dataId":"app.yaml","group":"DEFAULT_GROUP","tenant":"","md5":"d41d8cd98f00b204e9800998ecf8427e"}]}"#,
            ),
        ),
        (
            "naming_fuzzy_watch",
            payload(
                "NamingFuzzyWatchRequest",
                r#"{"namespace":"public","groupKeyPattern":"public>>DEFAULT_GROUP>>svc-*","receivedGroupKeys":["public@@DEFAULT_GROUP@@svc-a"],"watchType":"WATCH","initializing":true}"#,
            ),
        ),
        (
            "config_fuzzy_watch",
            payload(
                "ConfigFuzzyWatchRequest",
                r#"{"groupKeyPattern":"public>>*>>app-*","receivedGroupKeys":[],"watchType":"CANCEL_WATCH","isInitializing":false}"#,
            ),
        ),
        (
            "mcp_release",
            payload(
                "ReleaseMcpServerRequest",
                r#"{"namespaceId":"public","serverSpecification":{"name":"weather","protocol":"mcp-sse","versionDetail":{"version":"1.0.0"}},"toolSpecification":{"tools":[{"name":"today"}]},"endpointSpecification":{"type":"REF","data":{"serviceName":"weather"}}}"#,
            ),
        ),
        (
            "mcp_endpoint",
            payload(
                "McpServerEndpointRequest",
                r#"{"mcpName":"weather","address":"10.0.0.9","port":8931,"version":"1.0.0","type":"registerEndpoint"}"#,
            ),
        ),
        (
            "agent_release",
            payload(
                "ReleaseAgentCardRequest",
                r#"{"namespaceId":"public","agentName":"planner","agentCard":{"name":"planner","version":"1.0.0","protocolVersion":"0.3.0","preferredTransport":"JSONRPC","url":"http://planner/a2a","skills":[]},"registrationType":"SERVICE","setAsLatest":true}"#,
            ),
        ),
        (
            "agent_endpoint",
            payload(
                "AgentEndpointRequest",
                r#"{"agentName":"planner","type":"registerEndpoint","endpoint":{"transport":"JSONRPC","address":"10.0.0.8","port":9100,"path":"/a2a","supportTls":false,"version":"1.0.0"}}"#,
            ),
        ),
        (
            "lock",
            payload(
                "LockOperationRequest",
                r#"{"lockOperationEnum":"ACQUIRE","lockInstance":{"key":"job","expiredTime":30000,"lockType":"NACOS_LOCK"}}"#,
            ),
        ),
    ]
}

fn native_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use prost::Message;
    use understudy_proto::native::{self, session_request::Kind};
    let typed = |which: u8, bytes: Vec<u8>| [vec![which], bytes].concat();
    let service = native::ServiceRef {
        namespace: String::new(),
        group: "DEFAULT_GROUP".to_owned(),
        name: "svc".to_owned(),
    };
    let spec = |port| native::InstanceSpec {
        ip: "10.0.0.1".to_owned(),
        port,
        weight: 2.0,
        disabled: false,
        cluster: "DEFAULT".to_owned(),
        metadata: [("zone".to_owned(), "a".to_owned())].into(),
    };
    let session: Vec<u8> = [
        Kind::Hello(native::Hello {
            client_name: "fuzz".to_owned(),
            keepalive_ms: 1000,
        }),
        Kind::Register(native::Register {
            service: Some(service.clone()),
            instances: vec![spec(8080), spec(8081)],
        }),
        Kind::Keepalive(native::Keepalive {}),
        Kind::Deregister(native::Deregister {
            service: Some(service.clone()),
        }),
    ]
    .into_iter()
    .enumerate()
    .flat_map(|(i, kind)| {
        native::SessionRequest {
            request_id: i as u64 + 1,
            kind: Some(kind),
        }
        .encode_length_delimited_to_vec()
    })
    .collect();
    vec![
        (
            "watch",
            typed(
                0,
                native::WatchRequest {
                    namespace: String::new(),
                    group: "DEFAULT_GROUP".to_owned(),
                    service: "svc".to_owned(),
                    resume: Some(native::ResumeToken {
                        cluster_id: "1-1-1".to_owned(),
                        revision: 7,
                    }),
                    progress_ms: 0,
                }
                .encode_to_vec(),
            ),
        ),
        ("session", typed(1, session)),
        (
            "list_services",
            typed(
                2,
                native::ListServicesRequest {
                    namespace: "dev".to_owned(),
                    group: "g".to_owned(),
                }
                .encode_to_vec(),
            ),
        ),
        (
            "list_groups",
            typed(
                3,
                native::ListGroupsRequest {
                    namespace: "dev".to_owned(),
                }
                .encode_to_vec(),
            ),
        ),
        (
            "get_service",
            typed(
                4,
                native::GetServiceRequest {
                    service: Some(service),
                }
                .encode_to_vec(),
            ),
        ),
    ]
}

async fn raft_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use openraft::raft::{
        AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest,
    };
    use openraft::storage::RaftStateMachine;
    use openraft::{
        CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftSnapshotBuilder, Vote,
    };
    use prost::Message as _;
    use understudy_core::{
        Command, ConfigKey, ConfigSpec, InstanceKey, InstanceSpec, LiveKey, NamespaceId, Op, Owner,
        ServiceKey,
    };
    use understudy_server::node::State;
    use understudy_server::raft::codec;
    use understudy_server::raft::disk::PersistedSnapshot;
    use understudy_server::raft::store::{StateMachine, Waiters};
    use understudy_server::raft::{Batch, TypeConfig};

    let typed = |which: u8, bytes: Vec<u8>| [vec![which], bytes].concat();
    let service = ServiceKey::parse("", "", "svc").unwrap();
    let owner = Owner::Connection {
        node: 1,
        id: "1700000000000_10.0.0.9_5000".into(),
    };
    let commands = vec![
        Command::new(
            1,
            Op::Register {
                service: service.clone(),
                owner: owner.clone(),
                instances: vec![InstanceSpec::new("10.0.0.1", 8080)],
            },
        ),
        Command::new(
            2,
            Op::PublishConfig {
                key: ConfigKey::parse("", "DEFAULT_GROUP", "app.yaml").unwrap(),
                spec: ConfigSpec {
                    content: "a: 1".to_owned(),
                    kind: "yaml".to_owned(),
                    ..ConfigSpec::default()
                },
                cas_md5: None,
            },
        ),
        Command::new(
            3,
            Op::CreateNamespace {
                namespace: NamespaceId::parse("dev").unwrap(),
                name: "Dev".to_owned(),
                description: String::new(),
            },
        ),
    ];
    let batch = Batch {
        origin: 1,
        seq: 1,
        commands,
        stamp_ms: 1_700_000_000_000,
        joined: Vec::new(),
    };
    let log_id = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
    let membership = Entry::<TypeConfig> {
        log_id: log_id(1),
        payload: EntryPayload::Membership(Membership::new(
            vec![std::collections::BTreeSet::from([1])],
            None,
        )),
    };
    let normal = Entry::<TypeConfig> {
        log_id: log_id(2),
        payload: EntryPayload::Normal(Arc::new(batch.clone())),
    };

    let state = Arc::new(State::new(&Default::default()));
    let mut machine = StateMachine::new(
        1,
        state,
        understudy_server::Clock::starting_at(0),
        Waiters::default(),
    );
    machine
        .apply(vec![membership.clone(), normal.clone()])
        .await
        .unwrap();
    machine
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    // In memory the bytes are made when a follower asks: what it is sent.
    let snapshot = machine.get_current_snapshot().await.unwrap().unwrap();
    let snapshot_bytes = snapshot.snapshot.into_inner();
    let vote = Vote::new_committed(1, 1);
    vec![
        ("entry_normal", typed(0, codec::encode(&normal).unwrap())),
        (
            "entry_membership",
            typed(0, codec::encode(&membership).unwrap()),
        ),
        ("snapshot", typed(1, snapshot_bytes.clone())),
        (
            "persisted_snapshot",
            typed(
                2,
                codec::encode(&PersistedSnapshot {
                    meta: snapshot.meta.clone(),
                    bytes: snapshot_bytes.clone(),
                })
                .unwrap(),
            ),
        ),
        (
            "append_entries",
            typed(
                3,
                codec::encode(&AppendEntriesRequest::<TypeConfig> {
                    vote,
                    prev_log_id: None,
                    entries: vec![membership, normal],
                    leader_commit: Some(log_id(2)),
                })
                .unwrap(),
            ),
        ),
        (
            "vote_request",
            typed(
                4,
                codec::encode(&VoteRequest::new(vote, Some(log_id(2)))).unwrap(),
            ),
        ),
        (
            "install_snapshot",
            typed(
                5,
                codec::encode(&InstallSnapshotRequest::<TypeConfig> {
                    vote,
                    meta: snapshot.meta,
                    offset: 0,
                    data: snapshot_bytes,
                    done: true,
                })
                .unwrap(),
            ),
        ),
        (
            "beat",
            typed(
                6,
                understudy_proto::peer::BeatRequest::of(
                    2,
                    1,
                    &LiveKey {
                        service,
                        instance: InstanceKey {
                            ip: "10.0.0.1".to_owned(),
                            port: 8080,
                            cluster: understudy_core::ClusterName::parse("").unwrap(),
                        },
                    },
                )
                .encode_to_vec(),
            ),
        ),
        ("forward", typed(7, codec::encode(&batch).unwrap())),
        ("vote", typed(8, codec::encode(&vote).unwrap())),
        (
            "committed",
            typed(9, codec::encode(&Some(log_id(2))).unwrap()),
        ),
        (
            "append_answer",
            typed(
                10,
                codec::encode(&Ok::<_, openraft::error::RaftError<u64>>(
                    AppendEntriesResponse::<u64>::Success,
                ))
                .unwrap(),
            ),
        ),
        (
            "admin",
            typed(
                16,
                understudy_proto::peer::SetFaultsRequest {
                    route: Some(understudy_proto::peer::Route { from: 2, to: 1 }),
                    faults: Some(understudy_proto::peer::FaultState {
                        seed: 1,
                        paused: vec![2],
                        ..Default::default()
                    }),
                }
                .encode_to_vec(),
            ),
        ),
    ]
}
