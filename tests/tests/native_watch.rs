//! understudy's native watch: a snapshot, then every change in revision
//! order; resume within and beyond the change log; a slow watcher is
//! reset, never skipped.

use std::time::Duration;

use tokio_stream::StreamExt as _;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{
    change, watch_event, ResetReason, ResumeToken, WatchEvent, WatchRequest,
};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::Server;

async fn registry(server: &Server) -> anyhow::Result<RegistryClient<tonic::transport::Channel>> {
    Ok(RegistryClient::connect(format!("http://{}", server.grpc)).await?)
}

fn service_watch(service: &str, resume: Option<ResumeToken>) -> WatchRequest {
    WatchRequest {
        namespace: String::new(),
        group: String::new(),
        service: service.to_owned(),
        resume,
        progress_ms: 0,
    }
}

async fn next(stream: &mut tonic::Streaming<WatchEvent>) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event within 5 s")
        .expect("the stream is open")
        .expect("not an error")
}

fn revision(event: &WatchEvent) -> u64 {
    event.token.as_ref().map_or(0, |t| t.revision)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_watch_starts_with_a_snapshot_then_follows_every_change_in_order(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let mut client = registry(&server).await?;
    let mut stream = client
        .watch(service_watch("watched", None))
        .await?
        .into_inner();
    let first = next(&mut stream).await;
    match &first.event {
        Some(watch_event::Event::Reset(reset)) => {
            assert!(!reset.exists, "an unknown service is reported as such");
            assert!(reset.last);
            assert_eq!(reset.reason(), ResetReason::Initial);
        }
        other => panic!("expected a reset, got {other:?}"),
    }
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("watched", "10.0.0.1", 80).await?;
    provider.register("watched", "10.0.0.1", 81).await?;
    provider.deregister("watched").await?;
    let mut kinds = Vec::new();
    let mut last = revision(&first);
    while kinds.len() < 5 {
        let event = next(&mut stream).await;
        assert!(revision(&event) > last, "revisions strictly increase");
        last = revision(&event);
        match event.event {
            Some(watch_event::Event::Change(c)) => kinds.push(c.kind.expect("a kind")),
            other => panic!("expected a change, got {other:?}"),
        }
    }
    assert!(matches!(kinds[0], change::Kind::Created(true)));
    assert!(matches!(&kinds[1], change::Kind::Upsert(i) if i.port == 80));
    // Registering port 81 replaces the connection's entry: 81 in, then 80
    // out, so the service is never reported empty in between.
    assert!(
        matches!(&kinds[2], change::Kind::Upsert(i) if i.port == 81),
        "{:?}",
        kinds[2]
    );
    assert!(
        matches!(&kinds[3], change::Kind::Removed(r) if !r.emptied),
        "{:?}",
        kinds[3]
    );
    match &kinds[4] {
        change::Kind::Removed(removed) => {
            assert!(
                removed.emptied,
                "the last removal says it emptied the service"
            );
            assert_eq!(
                removed.cause(),
                understudy_proto::native::RemovalCause::Deregistered
            );
        }
        other => panic!("expected the deregistration, got {other:?}"),
    }
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_within_history_gets_exactly_the_missed_changes() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let mut client = registry(&server).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("resumed", "10.0.0.1", 80).await?;
    let mut stream = client
        .watch(service_watch("resumed", None))
        .await?
        .into_inner();
    let snapshot = next(&mut stream).await;
    let token = snapshot.token.clone();
    drop(stream);

    let other = RawClient::connect(server.grpc, None).await?;
    other.register("resumed", "10.0.0.2", 80).await?;
    provider.deregister("resumed").await?;
    let mut stream = client
        .watch(service_watch("resumed", token))
        .await?
        .into_inner();
    let added = next(&mut stream).await;
    assert!(
        matches!(&added.event, Some(watch_event::Event::Change(c)) if matches!(&c.kind, Some(change::Kind::Upsert(i)) if i.ip == "10.0.0.2")),
        "{added:?}"
    );
    let removed = next(&mut stream).await;
    assert!(
        matches!(&removed.event, Some(watch_event::Event::Change(c)) if matches!(&c.kind, Some(change::Kind::Removed(r)) if !r.emptied)),
        "{removed:?}"
    );
    assert!(revision(&removed) > revision(&added));
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_beyond_history_or_from_elsewhere_gets_a_fresh_snapshot() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        change_log_capacity: Some(2),
        ..Settings::default()
    })
    .await?;
    let mut client = registry(&server).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("old", "10.0.0.1", 80).await?;
    let mut stream = client.watch(service_watch("old", None)).await?.into_inner();
    let token = next(&mut stream).await.token;
    drop(stream);
    for port in 81..86 {
        provider.register("old", "10.0.0.1", port).await?;
    }
    let mut stream = client
        .watch(service_watch("old", token.clone()))
        .await?
        .into_inner();
    match next(&mut stream).await.event {
        Some(watch_event::Event::Reset(reset)) => {
            assert_eq!(reset.reason(), ResetReason::HistoryUnavailable);
            assert_eq!(reset.services[0].instances[0].port, 85);
        }
        other => panic!("expected a reset, got {other:?}"),
    }
    let foreign = ResumeToken {
        cluster_id: "another-cluster".into(),
        revision: token.map_or(0, |t| t.revision),
    };
    let mut stream = client
        .watch(service_watch("old", Some(foreign)))
        .await?
        .into_inner();
    assert!(
        matches!(next(&mut stream).await.event, Some(watch_event::Event::Reset(r)) if r.reason() == ResetReason::HistoryUnavailable)
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_behind_is_reset_and_writers_are_not_held_up() -> anyhow::Result<()> {
    let server = Server::start(Settings {
        watch_buffer: Some(2),
        ..Settings::default()
    })
    .await?;
    let mut client = registry(&server).await?;
    let view = WatchRequest {
        namespace: String::new(),
        group: String::new(),
        service: String::new(),
        resume: None,
        progress_ms: 0,
    };
    let mut stream = client.watch(view).await?.into_inner();
    next(&mut stream).await; // the initial (empty) snapshot
                             // Write far more than the watcher's buffers (and the connection's flow
                             // control window) hold, without reading: large metadata fills them fast.
    let provider = RawClient::connect(server.grpc, None).await?;
    let http = reqwest::Client::new();
    // About 40 KB per event, 12 MB in all: well past the connection's
    // flow-control windows (hyper's defaults are a few MB) and the buffers.
    let blob = "x".repeat(4000);
    let big = (0..10)
        .map(|k| format!("\"k{k}\":\"{blob}\""))
        .collect::<Vec<_>>()
        .join(",");
    let started = tokio::time::Instant::now();
    for i in 0..300u16 {
        http.post(server.url("/nacos/v1/ns/instance"))
            .form(&[
                ("serviceName", format!("s{}", i % 50)),
                ("ip", "10.0.0.2".to_owned()),
                ("port", (1000 + i).to_string()),
                ("metadata", format!("{{{big}}}")),
            ])
            .send()
            .await?
            .error_for_status()?;
    }
    let writing = started.elapsed();
    assert!(
        writing < Duration::from_secs(30),
        "writers were held up: {writing:?}"
    );
    // Reading now, the watcher gets a fell-behind reset somewhere, and its
    // final state matches the server's.
    let mut saw_reset = false;
    let expected = provider.query("s49").await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut s49: Vec<String> = Vec::new();
    loop {
        let Ok(Some(Ok(event))) = tokio::time::timeout_at(deadline, stream.next()).await else {
            break;
        };
        match event.event {
            Some(watch_event::Event::Reset(reset)) => {
                saw_reset |= reset.reason() == ResetReason::FellBehind;
                if let Some(state) = reset
                    .services
                    .iter()
                    .find(|s| s.service.as_ref().is_some_and(|r| r.name == "s49"))
                {
                    s49 = state
                        .instances
                        .iter()
                        .map(|i| format!("{}:{}", i.ip, i.port))
                        .collect();
                }
            }
            Some(watch_event::Event::Change(c))
                if c.service.as_ref().is_some_and(|r| r.name == "s49") =>
            {
                match c.kind {
                    Some(change::Kind::Upsert(i)) => {
                        let ep = format!("{}:{}", i.ip, i.port);
                        if !s49.contains(&ep) {
                            s49.push(ep);
                        }
                    }
                    Some(change::Kind::Removed(r)) => {
                        let i = r.instance.unwrap_or_default();
                        s49.retain(|e| *e != format!("{}:{}", i.ip, i.port));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        s49.sort();
        if saw_reset && s49 == expected {
            break;
        }
    }
    assert!(saw_reset, "the watcher was never reset");
    assert_eq!(s49, expected);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_view_of_10000_services_streams_in_bounded_pieces() -> anyhow::Result<()> {
    use understudy_proto::native::{
        session_request, Hello, InstanceSpec, Register, ServiceRef, SessionRequest,
    };
    let server = Server::start(Settings::default()).await?;
    let mut client = registry(&server).await?;
    // Register 10,000 services over one native session, pipelined.
    let (tx, outgoing) = tokio::sync::mpsc::channel(1024);
    let mut answers = client
        .session(tokio_stream::wrappers::ReceiverStream::new(outgoing))
        .await?
        .into_inner();
    tx.send(SessionRequest {
        request_id: 0,
        kind: Some(session_request::Kind::Hello(Hello::default())),
    })
    .await?;
    const SERVICES: u64 = 10_000;
    let sender = tokio::spawn(async move {
        for i in 1..=SERVICES {
            let register = Register {
                service: Some(ServiceRef {
                    namespace: "big".into(),
                    group: String::new(),
                    name: format!("svc-{i:05}"),
                }),
                instances: vec![InstanceSpec {
                    ip: "10.1.0.1".into(),
                    port: 8080,
                    ..InstanceSpec::default()
                }],
            };
            let request = SessionRequest {
                request_id: i,
                kind: Some(session_request::Kind::Register(register)),
            };
            if tx.send(request).await.is_err() {
                break;
            }
        }
        tx
    });
    let mut acked = 0;
    while acked < SERVICES {
        let answer = tokio::time::timeout(Duration::from_secs(60), answers.next())
            .await?
            .expect("open")?;
        if answer.request_id > 0 {
            assert!(
                matches!(
                    answer.kind,
                    Some(understudy_proto::native::session_response::Kind::Ack(_))
                ),
                "{answer:?}"
            );
            acked += 1;
        }
    }
    let _keep_session_open = sender.await?;

    let view = WatchRequest {
        namespace: "big".into(),
        group: String::new(),
        service: String::new(),
        resume: None,
        progress_ms: 0,
    };
    let mut stream = client.watch(view).await?.into_inner();
    let mut services = 0;
    let mut messages = 0;
    loop {
        let event = next(&mut stream).await;
        let Some(watch_event::Event::Reset(reset)) = event.event else {
            panic!("expected the snapshot");
        };
        messages += 1;
        assert!(
            prost_len(&reset) <= 1 << 20,
            "a snapshot piece is over 1 MiB"
        );
        services += reset.services.len();
        if reset.last {
            break;
        }
    }
    assert_eq!(services, SERVICES as usize);
    assert!(messages > 1, "10,000 services came in one message");
    server.stop().await?;
    Ok(())
}

fn prost_len(reset: &understudy_proto::native::Reset) -> usize {
    prost::Message::encoded_len(reset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_show_namespaces_groups_services_and_zones() -> anyhow::Result<()> {
    use understudy_proto::native::{
        GetServiceRequest, ListGroupsRequest, ListNamespacesRequest, ListServicesRequest,
        ServiceRef,
    };
    let server = Server::start(Settings::default()).await?;
    let mut client = registry(&server).await?;
    let http = reqwest::Client::new();
    for (service, group, ip, zone) in [
        ("a", "g1", "10.0.0.1", "hz"),
        ("a", "g1", "10.0.0.2", "sh"),
        ("b", "g2", "10.0.0.3", "hz"),
    ] {
        http.post(server.url("/nacos/v1/ns/instance"))
            .form(&[
                ("serviceName", service),
                ("groupName", group),
                ("ip", ip),
                ("port", "80"),
                ("namespaceId", "dev"),
                ("metadata", &format!("zone={zone}")),
            ])
            .send()
            .await?
            .error_for_status()?;
    }
    let namespaces = client
        .list_namespaces(ListNamespacesRequest {})
        .await?
        .into_inner()
        .namespaces;
    assert!(
        namespaces.iter().any(|n| n.id == "dev" && n.services == 2),
        "{namespaces:?}"
    );
    let groups = client
        .list_groups(ListGroupsRequest {
            namespace: "dev".into(),
        })
        .await?
        .into_inner()
        .groups;
    assert_eq!(groups, vec!["g1", "g2"]);
    let services = client
        .list_services(ListServicesRequest {
            namespace: "dev".into(),
            group: "g1".into(),
        })
        .await?
        .into_inner()
        .services;
    assert_eq!(
        services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        vec!["a"]
    );
    let service = client
        .get_service(GetServiceRequest {
            service: Some(ServiceRef {
                namespace: "dev".into(),
                group: "g1".into(),
                name: "a".into(),
            }),
        })
        .await?
        .into_inner();
    assert!(service.exists);
    let zones: Vec<(String, usize)> = service
        .zones
        .iter()
        .map(|z| (z.name.clone(), z.instances.len()))
        .collect();
    assert_eq!(zones, vec![("hz".to_owned(), 1), ("sh".to_owned(), 1)]);
    let missing = client
        .get_service(GetServiceRequest {
            service: Some(ServiceRef {
                namespace: "dev".into(),
                group: "g1".into(),
                name: "zzz".into(),
            }),
        })
        .await?
        .into_inner();
    assert!(!missing.exists);
    let bad = client
        .list_groups(ListGroupsRequest {
            namespace: "bad ns!".into(),
        })
        .await;
    assert!(
        matches!(bad, Err(status) if status.code() == tonic::Code::InvalidArgument && status.message().contains("namespaceId"))
    );
    server.stop().await?;
    Ok(())
}
