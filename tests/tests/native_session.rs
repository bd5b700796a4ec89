//! Native sessions: instances live while their session lives and answers.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{
    session_request, session_response, Deregister, Hello, InstanceSpec, Keepalive, Register,
    ServiceRef, SessionRequest, SessionResponse,
};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

struct Session {
    tx: mpsc::Sender<SessionRequest>,
    rx: tonic::Streaming<SessionResponse>,
    next_id: u64,
}

impl Session {
    async fn open(server: &Server, keepalive_ms: u32) -> anyhow::Result<(Self, String)> {
        let mut client = RegistryClient::connect(format!("http://{}", server.grpc)).await?;
        let (tx, outgoing) = mpsc::channel(16);
        let rx = client
            .session(tokio_stream::wrappers::ReceiverStream::new(outgoing))
            .await?
            .into_inner();
        let mut session = Self { tx, rx, next_id: 1 };
        let welcome = session
            .call(session_request::Kind::Hello(Hello {
                client_name: "test".into(),
                keepalive_ms,
            }))
            .await?;
        let Some(session_response::Kind::Welcome(welcome)) = welcome.kind else {
            anyhow::bail!("expected a welcome, got {welcome:?}");
        };
        Ok((session, welcome.session_id))
    }

    /// Sends a request and returns its answer (skipping keepalives).
    async fn call(&mut self, kind: session_request::Kind) -> anyhow::Result<SessionResponse> {
        let request_id = self.next_id;
        self.next_id += 1;
        self.tx
            .send(SessionRequest {
                request_id,
                kind: Some(kind),
            })
            .await?;
        loop {
            let answer = tokio::time::timeout(Duration::from_secs(5), self.rx.next())
                .await?
                .ok_or_else(|| anyhow::anyhow!("session closed"))??;
            if answer.request_id == request_id {
                return Ok(answer);
            }
        }
    }
}

fn register(name: &str, port: u32) -> session_request::Kind {
    session_request::Kind::Register(Register {
        service: Some(ServiceRef {
            namespace: String::new(),
            group: String::new(),
            name: name.to_owned(),
        }),
        instances: vec![InstanceSpec {
            ip: "10.0.0.1".into(),
            port,
            ..InstanceSpec::default()
        }],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_instances_live_while_it_lives() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let observer = RawClient::connect(server.grpc, None).await?;
    let (mut session, id) = Session::open(&server, 0).await?;
    assert!(id.starts_with("native-"));
    let ack = session.call(register("sess", 80)).await?;
    assert!(matches!(ack.kind, Some(session_response::Kind::Ack(a)) if a.revision > 0));
    assert_eq!(observer.query("sess").await?, vec!["10.0.0.1:80"]);

    let refused = session.call(register("sess", 70_000)).await?;
    match refused.kind {
        Some(session_response::Kind::Error(e)) => assert_eq!(e.field, "port", "{e:?}"),
        other => panic!("expected an error, got {other:?}"),
    }
    let deregistered = session
        .call(session_request::Kind::Deregister(Deregister {
            service: Some(ServiceRef {
                namespace: String::new(),
                group: String::new(),
                name: "sess".into(),
            }),
        }))
        .await?;
    assert!(matches!(
        deregistered.kind,
        Some(session_response::Kind::Ack(_))
    ));
    assert!(observer.query("sess").await?.is_empty());

    session.call(register("sess", 81)).await?;
    drop(session);
    assert!(
        eventually(Duration::from_secs(3), || async {
            observer
                .query("sess")
                .await
                .map(|v| v.is_empty())
                .unwrap_or(false)
        })
        .await,
        "the ended session's instance is still there"
    );
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_silent_for_three_keepalive_periods_ends_then_not_a_period_later(
) -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let observer = RawClient::connect(server.grpc, None).await?;
    let (mut session, _) = Session::open(&server, 1000).await?;
    // The last word the server hears from it, half a period after the
    // hello started the server's keepalive ticks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let silent_since = tokio::time::Instant::now();
    session.call(register("paused", 3)).await?;
    assert!(
        eventually(Duration::from_secs(8), || async {
            observer
                .query("paused")
                .await
                .map(|v| v.is_empty())
                .unwrap_or(false)
        })
        .await,
        "the silent session was not ended"
    );
    let ended_after = silent_since.elapsed();
    println!("ended {ended_after:?} after its last word");
    assert!(
        ended_after >= Duration::from_millis(2950) && ended_after < Duration::from_millis(3300),
        "ended {ended_after:?} after its last word; three periods are 3000 ms"
    );
    drop(session);
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_session_is_ended_and_one_that_keeps_alive_is_not() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let observer = RawClient::connect(server.grpc, None).await?;
    let (mut silent, _) = Session::open(&server, 100).await?;
    silent.call(register("quiet", 1)).await?;
    let (mut alive, _) = Session::open(&server, 100).await?;
    alive.call(register("loud", 2)).await?;
    let keeper = {
        let tx = alive.tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let beat = SessionRequest {
                    request_id: 0,
                    kind: Some(session_request::Kind::Keepalive(Keepalive {})),
                };
                if tx.send(beat).await.is_err() {
                    break;
                }
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            observer
                .query("quiet")
                .await
                .map(|v| v.is_empty())
                .unwrap_or(false)
        })
        .await,
        "the silent session was not ended"
    );
    assert_eq!(
        observer.query("loud").await?,
        vec!["10.0.0.1:2"],
        "the live session was ended"
    );
    keeper.abort();
    drop(silent);
    server.stop().await?;
    Ok(())
}
