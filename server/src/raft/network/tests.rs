//! The transport's tests, on the node's own log store and state machine:
//! the service's admission (secret, addressee, link), decoding errors, and
//! over loopback forwarding, raft RPCs, and learners catching up by entries
//! and by a chunked snapshot.

use std::collections::BTreeMap;

use openraft::{Config, Vote};
use tokio::time::Instant;
use understudy_core::{Command, InstanceSpec, Op, Owner, ServiceKey};
use understudy_proto::raft::raft_server::Raft as RaftRpc;

use super::super::store::{LogStore, StateMachine, Waiters};
use super::super::Raft;
use super::*;
use crate::clock::Clock;
use crate::config::ValidConfig;
use crate::state::State;

#[test]
fn a_secret_must_be_visible_ascii_and_never_prints() {
    assert_eq!(ClusterSecret::new("").unwrap_err(), InvalidSecret);
    assert_eq!(ClusterSecret::new("a b").unwrap_err(), InvalidSecret);
    assert_eq!(ClusterSecret::new("pä").unwrap_err(), InvalidSecret);
    let secret = ClusterSecret::new("s3cret").unwrap();
    assert!(!format!("{secret:?}").contains("s3cret"));
}

const WAIT: Duration = Duration::from_secs(10);

/// A real raft for node `id` on the node's own log store and state
/// machine; with `member`, a one-node cluster that has elected itself.
/// Snapshots travel in 1 KiB chunks and leave no log behind, so a late
/// learner needs one.
async fn raft_with(id: NodeId, member: Option<Member>) -> (Raft, Arc<State>) {
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_max_chunk_size: 1024,
        max_in_snapshot_log_to_keep: 0,
        ..Config::default()
    }
    .validate()
    .unwrap();
    let network = Network::new(id, LinkFaults::new(0), NetworkOptions::default());
    let state = Arc::new(State::new(&ValidConfig::default()));
    let machine = StateMachine::new(id, state.clone(), Clock::system(), Waiters::default());
    let raft = openraft::Raft::new(id, Arc::new(config), network, LogStore::default(), machine)
        .await
        .unwrap();
    if let Some(member) = member {
        raft.initialize(BTreeMap::from([(id, member)]))
            .await
            .unwrap();
        raft.wait(Some(WAIT))
            .current_leader(id, "elects itself")
            .await
            .unwrap();
    }
    (raft, state)
}

async fn raft(id: NodeId, member: Option<Member>) -> Raft {
    raft_with(id, member).await.0
}

/// The service every test batch registers in.
fn key() -> ServiceKey {
    ServiceKey::parse("", "", "filler").unwrap()
}

/// A batch registering 40 instances with 64 bytes of metadata each: once
/// applied, a snapshot of the registry takes several 1 KiB chunks.
fn batch() -> Batch {
    let instances = (0..40)
        .map(|i| {
            let mut spec = InstanceSpec::new(format!("10.0.0.{i}"), 8080);
            spec.metadata.insert("filler".into(), "x".repeat(64));
            spec
        })
        .collect();
    let op = Op::Register {
        service: key(),
        owner: Owner::Persistent {
            ip: "10.0.0.1".into(),
            port: 8080,
        },
        instances,
    };
    Batch {
        origin: 2,
        seq: 1,
        commands: vec![Command::new(1, op)],
        stamp_ms: 0,
        joined: Vec::new(),
    }
}

fn vote_payload() -> Vec<u8> {
    codec::encode(&VoteRequest::<NodeId>::new(Vote::new(1, 2), None)).unwrap()
}

fn request(
    from: NodeId,
    to: NodeId,
    payload: Vec<u8>,
    secret: Option<&str>,
) -> tonic::Request<RaftRequest> {
    let mut request = tonic::Request::new(RaftRequest { from, to, payload });
    if let Some(secret) = secret {
        request
            .metadata_mut()
            .insert(SECRET_METADATA, secret.parse().unwrap());
    }
    request
}

#[tokio::test]
async fn the_service_refuses_a_missing_or_wrong_secret_a_cut_peer_and_a_stale_address() {
    let faults = LinkFaults::new(0);
    let secret = ClusterSecret::new("right").unwrap();
    let svc = RaftService {
        raft: raft(1, None).await,
        node_id: 1,
        faults: faults.clone(),
        secret: Some(secret),
        contacts: Contacts::default(),
    };
    for wrong in [None, Some("wrong"), Some("righ")] {
        let status = svc
            .vote(request(2, 1, vote_payload(), wrong))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{wrong:?}");
    }
    let answer = svc
        .vote(request(2, 1, vote_payload(), Some("right")))
        .await
        .unwrap();
    let decoded: Result<VoteResponse<NodeId>, RaftError<NodeId>> =
        codec::decode(&answer.into_inner().payload).unwrap();
    assert!(decoded.is_ok());

    let status = svc
        .vote(request(2, 3, vote_payload(), Some("right")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);

    faults.cut(1, 2);
    let status = svc
        .vote(request(2, 1, vote_payload(), Some("right")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(svc
        .vote(request(3, 1, vote_payload(), Some("right")))
        .await
        .is_ok());
}

#[tokio::test]
async fn a_garbage_payload_is_an_invalid_argument_naming_what_failed() {
    let svc = RaftService {
        raft: raft(1, None).await,
        node_id: 1,
        faults: LinkFaults::new(0),
        secret: None,
        contacts: Contacts::default(),
    };
    let garbage = || vec![codec::FORMAT, 0xff, 0xff, 0xff];
    let answers = [
        (
            "append-entries request",
            svc.append_entries(request(2, 1, garbage(), None)).await,
        ),
        (
            "vote request",
            svc.vote(request(2, 1, garbage(), None)).await,
        ),
        (
            "install-snapshot request",
            svc.install_snapshot(request(2, 1, garbage(), None)).await,
        ),
        (
            "vote request",
            svc.vote(request(2, 1, Vec::new(), None)).await,
        ),
        (
            "vote request",
            svc.vote(request(2, 1, vec![codec::FORMAT + 1], None)).await,
        ),
    ];
    for (what, answer) in answers {
        let status = answer.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().starts_with(what), "{}", status.message());
    }
}

/// Serves `raft` as node `id` on a fresh port until the test ends.
async fn serve(raft: Raft, id: NodeId, secret: Option<&str>) -> Member {
    serve_on(raft, &network(id, secret)).await
}

/// Serves `raft` behind `network`'s services on a fresh port until the
/// test ends.
async fn serve_on(raft: Raft, network: &Network) -> Member {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = service(raft, network);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    Member {
        raft_addr: addr.to_string(),
        dc: "test".into(),
    }
}

fn network(id: NodeId, secret: Option<&str>) -> Network {
    Network::new(
        id,
        LinkFaults::new(0),
        NetworkOptions {
            secret: secret.map(|s| ClusterSecret::new(s).unwrap()),
            connect_timeout: Duration::from_millis(500),
            forward_timeout: Duration::from_secs(5),
            ..NetworkOptions::default()
        },
    )
}

#[tokio::test]
async fn over_loopback_a_follower_forwards_to_the_leader_and_raft_rpcs_travel() {
    let placeholder = Member {
        raft_addr: "127.0.0.1:1".into(),
        dc: "test".into(),
    };
    let leader = serve(raft(1, Some(placeholder)).await, 1, Some("s")).await;
    let follower = network(2, Some("s"));

    let first = follower.forward(1, &leader, &batch()).await.unwrap();
    let second = follower.forward(1, &leader, &batch()).await.unwrap();
    assert!(second > first, "{first} then {second}");

    let mut peer = follower.clone().new_client(1, &leader).await;
    let vote = VoteRequest::<NodeId>::new(Vote::new(0, 2), None);
    let answer = peer.vote(vote, RPCOption::new(WAIT)).await.unwrap();
    assert!(!answer.vote_granted, "an older term gets no vote");

    let intruder = network(3, Some("guess"));
    assert!(matches!(
        intruder.forward(1, &leader, &batch()).await,
        Err(ForwardError::Rejected { leader: 1, .. })
    ));
    let mut peer = intruder.clone().new_client(1, &leader).await;
    let vote = VoteRequest::<NodeId>::new(Vote::new(0, 3), None);
    assert!(matches!(
        peer.vote(vote, RPCOption::new(WAIT)).await,
        Err(RPCError::Unreachable(_))
    ));

    follower.faults().cut(2, 1);
    let started = Instant::now();
    assert!(matches!(
        follower.forward(1, &leader, &batch()).await,
        Err(ForwardError::Unreachable { leader: 1, .. })
    ));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a cut fails at once"
    );
}

#[tokio::test]
async fn over_loopback_a_node_that_is_not_leader_or_not_listening_says_so() {
    let lone = serve(raft(5, None).await, 5, None).await;
    let follower = network(2, None);
    assert_eq!(
        follower.forward(5, &lone, &batch()).await,
        Err(ForwardError::NotLeader {
            asked: 5,
            leader: None
        })
    );

    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let nobody = Member {
        raft_addr: closed.to_string(),
        dc: "test".into(),
    };
    assert!(matches!(
        follower.forward(6, &nobody, &batch()).await,
        Err(ForwardError::Unreachable { leader: 6, .. })
    ));
    let mut peer = follower.clone().new_client(6, &nobody).await;
    let vote = VoteRequest::<NodeId>::new(Vote::new(1, 2), None);
    assert!(matches!(
        peer.vote(vote, RPCOption::new(WAIT)).await,
        Err(RPCError::Unreachable(_))
    ));
}

#[tokio::test]
async fn over_loopback_learners_catch_up_by_entries_and_by_a_chunked_snapshot() {
    let placeholder = Member {
        raft_addr: "127.0.0.1:1".into(),
        dc: "test".into(),
    };
    let (leader, _) = raft_with(1, Some(placeholder)).await;
    let leader_addr = serve(leader.clone(), 1, None).await;
    let (second, second_state) = raft_with(2, None).await;
    let second_addr = serve(second.clone(), 2, None).await;

    // Entries: append-entries over the wire.
    leader.add_learner(2, second_addr, true).await.unwrap();
    let index = network(2, None)
        .forward(1, &leader_addr, &batch())
        .await
        .unwrap();
    second
        .wait(Some(WAIT))
        .applied_index_at_least(Some(index), "learner 2 applies the batch")
        .await
        .unwrap();
    assert_eq!(instances(&second_state), 40);

    // A snapshot: the leader keeps no log behind it, so a new learner
    // can only catch up through install-snapshot chunks.
    leader.trigger().snapshot().await.unwrap();
    leader
        .wait(Some(WAIT))
        .metrics(
            |m| m.snapshot.map(|s| s.index) >= Some(index),
            "snapshot built",
        )
        .await
        .unwrap();
    leader.trigger().purge_log(index).await.unwrap();
    leader
        .wait(Some(WAIT))
        .metrics(|m| m.purged.map(|p| p.index) >= Some(index), "log purged")
        .await
        .unwrap();
    let (third, third_state) = raft_with(3, None).await;
    let third_addr = serve(third.clone(), 3, None).await;
    leader.add_learner(3, third_addr, true).await.unwrap();
    third
        .wait(Some(WAIT))
        .metrics(
            |m| m.snapshot.map(|s| s.index) >= Some(index),
            "snapshot installed",
        )
        .await
        .unwrap();
    // The registry came over whole, in several chunks.
    let size = codec::encode(&third_state.registry().snapshot())
        .unwrap()
        .len();
    assert!(
        size > 3 * 1024,
        "a snapshot of {size} bytes is not several chunks"
    );
    assert_eq!(instances(&third_state), 40);
}

/// How many instances of [`key`] a node's registry holds.
fn instances(state: &State) -> usize {
    state
        .registry()
        .service(&key())
        .map_or(0, |s| s.instances().count())
}

#[tokio::test]
async fn over_loopback_peer_calls_are_typed_and_only_pings_and_forwards_obey_the_links() {
    let placeholder = Member {
        raft_addr: "127.0.0.1:1".into(),
        dc: "test".into(),
    };
    let (leader, _) = raft_with(1, Some(placeholder)).await;
    let serving = network(1, None);
    serving.on_admin(Arc::new(|request| match request {
        AdminRequest::SetFaults(state) if state.paused == [7] => AdminReply::Refused("no".into()),
        AdminRequest::SetFaults(state) => AdminReply::Faults(state),
        AdminRequest::TakeOver => AdminReply::TakingOver,
        _ => AdminReply::Refused("not in this test".into()),
    }));
    let at = serve_on(leader, &serving).await;
    let caller = network(2, None);
    let state = |paused: Vec<NodeId>| crate::faults::FaultState {
        seed: 1,
        links: Vec::new(),
        apply_delays_ms: BTreeMap::new(),
        push_faults: BTreeMap::new(),
        config_read_lags_ms: BTreeMap::new(),
        paused,
    };
    // Each request comes back as its own typed answer.
    assert_eq!(
        caller
            .admin(1, &at, &AdminRequest::SetFaults(state(vec![3])), WAIT)
            .await
            .unwrap(),
        AdminReply::Faults(state(vec![3]))
    );
    assert_eq!(
        caller
            .admin(1, &at, &AdminRequest::SetFaults(state(vec![7])), WAIT)
            .await
            .unwrap(),
        AdminReply::Refused("no".into())
    );
    assert_eq!(
        caller
            .admin(1, &at, &AdminRequest::TakeOver, WAIT)
            .await
            .unwrap(),
        AdminReply::TakingOver
    );
    assert_eq!(caller.ping(1, &at, WAIT).await.unwrap(), AdminReply::Pong);
    assert!(caller.forward(1, &at, &batch()).await.is_ok());

    // Cut: the out-of-band calls still get through; a ping and a forward
    // do not, on either side's model.
    caller.faults().cut(1, 2);
    serving.faults().cut(1, 2);
    assert_eq!(
        caller
            .admin(1, &at, &AdminRequest::TakeOver, WAIT)
            .await
            .unwrap(),
        AdminReply::TakingOver
    );
    assert!(caller
        .ping(1, &at, Duration::from_millis(300))
        .await
        .is_err());
    assert!(matches!(
        caller.forward(1, &at, &batch()).await,
        Err(ForwardError::Unreachable { .. })
    ));
    caller.faults().heal(1, 2);
    let refused = caller.ping(1, &at, WAIT).await.unwrap_err().to_string();
    assert!(refused.contains("cut"), "{refused}");
}
