//! A seeded randomized test of native watches: writers register and
//! deregister while watchers start, disconnect and resume at random.
//! Every watcher must see revisions in order, exactly the changes a
//! never-disconnected reference watcher saw after its starting point, and
//! end with the server's state. Set `UNDERSTUDY_SEED` to replay a run; the
//! seed is printed on every run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio_stream::StreamExt as _;
use understudy_proto::native::registry_client::RegistryClient;
use understudy_proto::native::{change, watch_event, ResumeToken, WatchRequest};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

const SERVICE: &str = "prop";

/// What a watcher received, simplified for comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A snapshot at a revision with its endpoints (after the last chunk).
    Reset(u64, BTreeSet<String>),
    /// A change at a revision.
    Change(u64, String),
}

/// A watcher's log and its running connection, if connected.
type Watcher = (Arc<Mutex<Log>>, Option<tokio::task::JoinHandle<()>>);

#[derive(Default)]
struct Log {
    /// One entry per connection of the watcher (segments).
    segments: Vec<Vec<Seen>>,
    token: Option<ResumeToken>,
}

fn describe(kind: &change::Kind) -> String {
    match kind {
        change::Kind::Upsert(i) => format!("up {}:{}", i.ip, i.port),
        change::Kind::Removed(r) => {
            let i = r.instance.clone().unwrap_or_default();
            format!("rm {}:{}", i.ip, i.port)
        }
        change::Kind::Created(_) => "created".to_owned(),
        change::Kind::DoesNotExist(_) => "gone".to_owned(),
    }
}

/// Runs one watch connection, appending to a new segment of `log`.
async fn watch(mut client: RegistryClient<tonic::transport::Channel>, log: Arc<Mutex<Log>>) {
    let resume = {
        let mut log = log.lock().unwrap();
        log.segments.push(Vec::new());
        log.token.clone()
    };
    let request = WatchRequest {
        namespace: String::new(),
        group: String::new(),
        service: SERVICE.to_owned(),
        resume,
        progress_ms: 0,
    };
    let Ok(response) = client.watch(request).await else {
        return;
    };
    let mut stream = response.into_inner();
    let mut pending: BTreeSet<String> = BTreeSet::new();
    while let Some(Ok(event)) = stream.next().await {
        let revision = event.token.as_ref().map_or(0, |t| t.revision);
        let seen = match event.event {
            Some(watch_event::Event::Reset(reset)) => {
                for state in &reset.services {
                    pending.extend(
                        state
                            .instances
                            .iter()
                            .map(|i| format!("{}:{}", i.ip, i.port)),
                    );
                }
                if !reset.last {
                    continue;
                }
                Seen::Reset(revision, std::mem::take(&mut pending))
            }
            Some(watch_event::Event::Change(c)) => match &c.kind {
                Some(kind) => Seen::Change(revision, describe(kind)),
                None => continue,
            },
            Some(watch_event::Event::Progress(_)) | None => continue,
        };
        let mut log = log.lock().unwrap();
        log.token = event.token.clone();
        log.segments.last_mut().expect("a segment").push(seen);
    }
}

/// Replays a watcher's log into its current endpoints.
fn state_of(log: &Log) -> BTreeSet<String> {
    let mut state = BTreeSet::new();
    for seen in log.segments.iter().flatten() {
        match seen {
            Seen::Reset(_, endpoints) => state = endpoints.clone(),
            Seen::Change(_, what) => {
                if let Some(ep) = what.strip_prefix("up ") {
                    state.insert(ep.to_owned());
                } else if let Some(ep) = what.strip_prefix("rm ") {
                    state.remove(ep);
                } else if what == "gone" {
                    state.clear();
                }
            }
        }
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_that_start_disconnect_and_resume_at_random_miss_nothing() -> anyhow::Result<()> {
    let seed: u64 = std::env::var("UNDERSTUDY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    println!("UNDERSTUDY_SEED={seed}");
    eprintln!("UNDERSTUDY_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let server = Server::start(Settings::default()).await?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))?
        .connect()
        .await?;
    let client = RegistryClient::new(channel);
    let mut writers = Vec::new();
    for _ in 0..3 {
        writers.push(RawClient::connect(server.grpc, None).await?);
    }

    let reference = Arc::new(Mutex::new(Log::default()));
    let reference_task = tokio::spawn(watch(client.clone(), reference.clone()));
    // Wait for the reference's snapshot before writing.
    assert!(
        eventually(Duration::from_secs(5), || async {
            reference
                .lock()
                .unwrap()
                .segments
                .first()
                .is_some_and(|s| !s.is_empty())
        })
        .await
    );

    let mut watchers: Vec<Watcher> = Vec::new();
    for _ in 0..150 {
        match rng.random_range(0..10u32) {
            0..=4 => {
                let w = rng.random_range(0..writers.len());
                let port = rng.random_range(1..6u16);
                writers[w]
                    .register(SERVICE, &format!("10.0.0.{w}"), port)
                    .await?;
            }
            5..=6 => {
                let w = rng.random_range(0..writers.len());
                writers[w].deregister(SERVICE).await?;
            }
            7 => {
                let log = Arc::new(Mutex::new(Log::default()));
                let task = tokio::spawn(watch(client.clone(), log.clone()));
                watchers.push((log, Some(task)));
            }
            8 => {
                let connected: Vec<usize> = (0..watchers.len())
                    .filter(|i| watchers[*i].1.is_some())
                    .collect();
                if !connected.is_empty() {
                    let i = connected[rng.random_range(0..connected.len())];
                    if let Some(task) = watchers[i].1.take() {
                        task.abort();
                        let _ = task.await;
                    }
                }
            }
            _ => {
                let idle: Vec<usize> = (0..watchers.len())
                    .filter(|i| watchers[*i].1.is_none())
                    .collect();
                if !idle.is_empty() {
                    let i = idle[rng.random_range(0..idle.len())];
                    let log = watchers[i].0.clone();
                    watchers[i].1 = Some(tokio::spawn(watch(client.clone(), log)));
                }
            }
        }
        if rng.random_range(0..4u32) == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Reconnect every watcher once more so each ends connected.
    for (log, task) in &mut watchers {
        if task.is_none() {
            *task = Some(tokio::spawn(watch(client.clone(), log.clone())));
        }
    }

    let truth: BTreeSet<String> = writers[0].query(SERVICE).await?.into_iter().collect();
    assert!(
        eventually(Duration::from_secs(10), || async {
            state_of(&reference.lock().unwrap()) == truth
                && watchers
                    .iter()
                    .all(|(log, _)| state_of(&log.lock().unwrap()) == truth)
        })
        .await,
        "seed {seed}: a watcher's state differs from the server's {truth:?}"
    );

    // Every change the reference saw, by revision.
    let by_revision: BTreeMap<u64, String> = reference
        .lock()
        .unwrap()
        .segments
        .iter()
        .flatten()
        .filter_map(|s| match s {
            Seen::Change(r, what) => Some((*r, what.clone())),
            Seen::Reset(..) => None,
        })
        .collect();
    for (w, (log, _)) in watchers.iter().enumerate() {
        let log = log.lock().unwrap();
        let mut position: Option<u64> = None;
        for segment in &log.segments {
            for seen in segment {
                match seen {
                    Seen::Reset(r, _) => position = Some(*r),
                    Seen::Change(r, what) => {
                        let from = position.unwrap_or_else(|| {
                            panic!("seed {seed}: watcher {w} got a change before any snapshot")
                        });
                        assert!(
                            *r > from,
                            "seed {seed}: watcher {w}: revision {r} after {from}"
                        );
                        // No gap: every reference change between the two is this one.
                        let expected: Vec<(&u64, &String)> =
                            by_revision.range(from + 1..=*r).collect();
                        assert_eq!(
                            expected,
                            vec![(r, what)],
                            "seed {seed}: watcher {w} skipped or changed something between {from} and {r}"
                        );
                        position = Some(*r);
                    }
                }
            }
        }
    }
    reference_task.abort();
    for (_, task) in watchers {
        if let Some(task) = task {
            task.abort();
        }
    }
    server.stop().await?;
    Ok(())
}
