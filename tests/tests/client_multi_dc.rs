//! The bundled client against a real multi-DC cluster (in-process sim: DC
//! hz with nodes 1 and 2, DC sh with node 3), as a rig's consumers and
//! providers use it:
//! - the client's local registry node killed: its watch and its session
//!   move to the other DC, and come back once the node answers again, with
//!   no gap in the watch;
//! - the client's DC partitioned: its view freezes, calls keep going to
//!   the last good list, no empty list is published;
//! - lag on the client's DC link: its directory lags by about the link's
//!   latency, and says so;
//! - a provider's registry node killed: its session moves, consumers never
//!   see its instance removed;
//! - that node back but unable to write (cut off from the leader): the
//!   session going home keeps the session it leaves until it is
//!   registered at home, so consumers still never see the instance go.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;
use understudy_client::cluster::{CallFailure, Cluster, Invocation};
use understudy_client::{Client, Directory, Instance, InstanceSpec};
use understudy_core::ServiceKey;
use understudy_server::config::Settings;
use understudy_server::faults::LinkSpec;
use understudy_server::raft::NodeId;
use understudy_server::sim::{heartbeat_for, raft_timings, Sim, SimSpec};

const PROBE_MIN: Duration = Duration::from_millis(100);
const PROBE_MAX: Duration = Duration::from_millis(500);

fn spec(links: &[&str]) -> SimSpec {
    let links: Vec<LinkSpec> = links.iter().map(|l| l.parse().expect("a link")).collect();
    let heartbeat = heartbeat_for(links.iter().map(|l| l.link));
    SimSpec {
        dcs: vec![("hz".into(), 2), ("sh".into(), 1)],
        links,
        apply_delays: BTreeMap::new(),
        seed: 11,
        bind: "127.0.0.1".parse().expect("an address"),
        base_port: 0,
        settings: Settings {
            log: None,
            ..raft_timings(heartbeat)
        },
    }
}

/// A client of the sim's nodes, its own DC's first.
fn client(sim: &Sim, dc: &str) -> anyhow::Result<Client> {
    let mut builder = Client::builder()
        .local_dc(dc)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .keepalive(Duration::from_millis(300))
        .home_probe(PROBE_MIN, PROBE_MAX);
    for node in sim.nodes().values() {
        builder = builder.endpoint(node.grpc.to_string(), Some(&node.dc));
    }
    Ok(builder.build()?)
}

fn service() -> ServiceKey {
    ServiceKey::parse("", "", "com.example.UserService").expect("a valid key")
}

fn spec_at(ip: &str) -> InstanceSpec {
    InstanceSpec::new(ip, 20880)
}

fn ips(directory: &Directory) -> Vec<String> {
    directory.instances().iter().map(|i| i.ip.clone()).collect()
}

async fn wait_until(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    while !check() {
        if start.elapsed() > within {
            bail!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(start.elapsed())
}

fn served_dc(directory: &Directory) -> Option<String> {
    directory.served_by().map(|s| s.dc)
}

/// Records every list a directory publishes, to check it never lost an
/// instance it had, or went empty.
fn record(directory: &Directory) -> Arc<Mutex<Vec<Vec<String>>>> {
    let lists = Arc::new(Mutex::new(Vec::new()));
    let mut changes = directory.changes();
    let seen = lists.clone();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let list: Vec<String> = changes
                .borrow_and_update()
                .iter()
                .map(|i| i.ip.clone())
                .collect();
            seen.lock().unwrap().push(list);
        }
    });
    lists
}

/// The nodes holding a session or connection that owns an instance, as
/// node `at` has applied it.
fn owner_nodes(sim: &Sim, at: NodeId) -> BTreeSet<NodeId> {
    sim.node(at)
        .map(|n| n.registry().owner_nodes())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_whose_local_node_dies_moves_away_and_comes_back_without_a_gap(
) -> anyhow::Result<()> {
    // Durable, so that node 3 can come back with its log.
    let data = tempfile::tempdir()?;
    let mut spec = spec(&["hz-sh=20ms"]);
    spec.settings.data_dir = Some(data.path().to_owned());
    let mut sim = Sim::start(&spec, Duration::from_secs(20)).await?;
    let leader = sim
        .leader(Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(leader != 3, "hz leads: node 3 is the one that dies");
    let hz_provider = client(&sim, "hz")?;
    hz_provider
        .register(service(), vec![spec_at("10.0.1.1")])
        .await?;
    // The sh client: a consumer's directory and a provider's session.
    let sh = client(&sim, "sh")?;
    let directory = sh.directory(service());
    sh.register(service(), vec![spec_at("10.0.2.1")]).await?;
    wait_until("sh sees both", Duration::from_secs(5), || {
        ips(&directory) == ["10.0.1.1", "10.0.2.1"]
    })
    .await?;
    wait_until("the watch is on sh", Duration::from_secs(5), || {
        served_dc(&directory).as_deref() == Some("sh")
    })
    .await?;
    let lists = record(&directory);

    // sh's only node dies: the watch and the session go to hz.
    sim.kill(3);
    wait_until("the watch moved to hz", Duration::from_secs(5), || {
        directory
            .served_by()
            .is_some_and(|s| s.dc == "hz" && !s.home)
    })
    .await?;
    // While away, a change is seen, and the session's instance stayed.
    hz_provider
        .register(service(), vec![spec_at("10.0.1.1"), spec_at("10.0.1.2")])
        .await?;
    wait_until(
        "the change made while away is seen",
        Duration::from_secs(5),
        || ips(&directory) == ["10.0.1.1", "10.0.1.2", "10.0.2.1"],
    )
    .await?;

    // Node 3 comes back; once it has caught up, the client returns.
    sim.restart(3).await?;
    let target = sim
        .node(leader)
        .context("the leader")?
        .cluster_status()
        .last_applied;
    wait_until("node 3 caught up", Duration::from_secs(10), || {
        sim.node(3)
            .is_some_and(|n| n.cluster_status().last_applied >= target)
    })
    .await?;
    let back_after = wait_until(
        "the watch is back on sh",
        4 * PROBE_MAX + Duration::from_secs(2),
        || {
            directory
                .served_by()
                .is_some_and(|s| s.dc == "sh" && s.home)
        },
    )
    .await?;
    println!("the watch returned {back_after:?} after node 3 caught up");
    assert!(
        back_after <= 2 * PROBE_MAX + Duration::from_millis(500),
        "returned after {back_after:?}; two probe intervals are {:?}",
        2 * PROBE_MAX
    );
    // The session is back on node 3 too: it owns its instance there.
    wait_until("the session is on node 3", Duration::from_secs(5), || {
        owner_nodes(&sim, leader).contains(&3)
    })
    .await?;
    // No gap: a change after the return is seen; the lists never lost an
    // instance that was registered.
    hz_provider
        .register(service(), vec![spec_at("10.0.1.1"), spec_at("10.0.1.3")])
        .await?;
    wait_until(
        "the change after the return is seen",
        Duration::from_secs(5),
        || ips(&directory) == ["10.0.1.1", "10.0.1.3", "10.0.2.1"],
    )
    .await?;
    for list in lists.lock().unwrap().iter() {
        assert!(
            list.contains(&"10.0.1.1".to_owned()) && list.contains(&"10.0.2.1".to_owned()),
            "a published list lost a registered instance: {list:?}"
        );
    }
    sh.shutdown().await;
    hz_provider.shutdown().await;
    sim.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_dc_keeps_its_last_list_and_its_calls_going() -> anyhow::Result<()> {
    let sim = Sim::start(&spec(&[]), Duration::from_secs(20)).await?;
    let leader = sim
        .leader(Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(leader != 3, "hz leads, so sh is the minority");
    let provider = client(&sim, "hz")?;
    provider
        .register(service(), vec![spec_at("10.0.1.1"), spec_at("10.0.1.2")])
        .await?;
    let sh = client(&sim, "sh")?;
    let directory = sh.directory(service());
    wait_until("sh sees the providers", Duration::from_secs(5), || {
        ips(&directory).len() == 2
    })
    .await?;
    let lists = record(&directory);
    let cluster = Cluster::builder().local_zone("sh").build(&directory)?;
    let call = |i: Arc<Instance>| async move { Ok::<_, CallFailure>(i.ip.clone()) };

    sim.faults().partition("hz", "sh");
    // hz changes its providers; sh cannot know.
    provider
        .register(service(), vec![spec_at("10.0.1.3")])
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ips(&directory), ["10.0.1.1", "10.0.1.2"], "sh's view froze");
    for _ in 0..50 {
        let outcome = cluster.invoke(Invocation::new("get"), call).await?;
        let ip = outcome.value().context("an answer")?;
        assert!(ip == "10.0.1.1" || ip == "10.0.1.2", "{ip}");
    }
    // sh's node says how far behind it is (progress comes every second).
    wait_until(
        "sh's node reports its growing lag",
        Duration::from_secs(3),
        || {
            directory
                .served_by()
                .and_then(|s| s.view_lag)
                .is_some_and(|lag| lag >= Duration::from_millis(700))
        },
    )
    .await?;

    sim.faults().heal_all();
    wait_until(
        "sh catches up after the heal",
        Duration::from_secs(10),
        || ips(&directory) == ["10.0.1.3"],
    )
    .await?;
    for list in lists.lock().unwrap().iter() {
        assert!(!list.is_empty(), "an empty list was published");
    }
    sh.shutdown().await;
    provider.shutdown().await;
    sim.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_dc_link_delays_that_dcs_directory_by_about_its_latency() -> anyhow::Result<()> {
    const LATENCY: Duration = Duration::from_millis(300);
    let sim = Sim::start(&spec(&["hz-sh=300ms"]), Duration::from_secs(30)).await?;
    let leader = sim
        .leader(Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    let (near, far) = if leader == 3 {
        ("sh", "hz")
    } else {
        ("hz", "sh")
    };
    let provider = client(&sim, near)?;
    let near_client = client(&sim, near)?;
    let far_client = client(&sim, far)?;
    let near_dir = near_client.directory(service());
    let far_dir = far_client.directory(service());
    near_dir.wait_until_ready().await?;
    far_dir.wait_until_ready().await?;
    let mut delays = Vec::new();
    for round in 1..=3 {
        let ip = format!("10.0.3.{round}");
        provider.register(service(), vec![spec_at(&ip)]).await?;
        let near_at = wait_until("the near DC sees it", Duration::from_secs(5), || {
            ips(&near_dir).contains(&ip)
        })
        .await?;
        let far_more = wait_until("the far DC sees it", Duration::from_secs(5), || {
            ips(&far_dir).contains(&ip)
        })
        .await?;
        println!("round {round}: near {near_at:?}, far {far_more:?} later");
        delays.push(far_more);
    }
    delays.sort();
    let median = delays[1];
    assert!(
        median >= LATENCY.mul_f64(0.7) && median <= LATENCY * 3,
        "the far DC's directory lagged {median:?} behind; the link is {LATENCY:?}"
    );
    let lag = far_dir.served_by().and_then(|s| s.view_lag);
    println!("the far node reports a view lag of {lag:?}");
    provider.shutdown().await;
    near_client.shutdown().await;
    far_client.shutdown().await;
    sim.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_providers_registry_node_dies_and_consumers_never_see_it_removed() -> anyhow::Result<()> {
    let mut sim = Sim::start(&spec(&[]), Duration::from_secs(20)).await?;
    let leader = sim
        .leader(Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(leader != 3, "hz leads: node 3 is the one that dies");
    // The provider is in sh: its session is on node 3.
    let provider = client(&sim, "sh")?;
    provider
        .register(service(), vec![spec_at("10.0.2.7")])
        .await?;
    let consumer = client(&sim, "hz")?;
    let directory = consumer.directory(service());
    wait_until(
        "the consumer sees the provider",
        Duration::from_secs(5),
        || ips(&directory) == ["10.0.2.7"],
    )
    .await?;
    let lists = record(&directory);
    sim.kill(3);
    // The session moves to hz; the instance stays through a generous
    // wait, longer than the session's keepalive misses.
    wait_until("the session moved to hz", Duration::from_secs(5), || {
        let owners = owner_nodes(&sim, leader);
        !owners.is_empty() && !owners.contains(&3)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ips(&directory), ["10.0.2.7"]);
    for list in lists.lock().unwrap().iter() {
        assert_eq!(list, &["10.0.2.7"], "the consumer saw the provider change");
    }
    provider.shutdown().await;
    consumer.shutdown().await;
    sim.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_going_home_to_a_node_that_cannot_write_keeps_its_instances() -> anyhow::Result<()>
{
    let data = tempfile::tempdir()?;
    let mut spec = spec(&[]);
    spec.settings.data_dir = Some(data.path().to_owned());
    let mut sim = Sim::start(&spec, Duration::from_secs(20)).await?;
    let leader = sim
        .leader(Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(leader != 3, "hz leads: node 3 is the one that dies");
    let provider = client(&sim, "sh")?;
    provider
        .register(service(), vec![spec_at("10.0.2.8")])
        .await?;
    // A provider in hz too, so that no empty-list protection hides a
    // removal from the consumer.
    let consumer = client(&sim, "hz")?;
    consumer
        .register(service(), vec![spec_at("10.0.1.9")])
        .await?;
    let directory = consumer.directory(service());
    let both = ["10.0.1.9", "10.0.2.8"];
    wait_until(
        "the consumer sees the providers",
        Duration::from_secs(5),
        || ips(&directory) == both,
    )
    .await?;
    let lists = record(&directory);
    sim.kill(3);
    wait_until("the session moved to hz", Duration::from_secs(5), || {
        !owner_nodes(&sim, leader).contains(&3)
    })
    .await?;
    // Node 3 comes back cut off from hz: it answers the session's home
    // probe but knows no leader, so it refuses the session's registration.
    // The session must keep its hz session meanwhile.
    sim.faults().partition("hz", "sh");
    sim.restart(3).await?;
    // Several home probes (at most PROBE_MAX apart) and refusals.
    tokio::time::sleep(6 * PROBE_MAX).await;
    assert_eq!(ips(&directory), both, "the instance went away");
    sim.faults().heal_all();
    wait_until(
        "the session is home on node 3",
        Duration::from_secs(15),
        || owner_nodes(&sim, leader).contains(&3),
    )
    .await?;
    assert_eq!(ips(&directory), both);
    for list in lists.lock().unwrap().iter() {
        assert_eq!(list, &both, "the consumer saw a provider change");
    }
    provider.shutdown().await;
    consumer.shutdown().await;
    sim.stop().await;
    Ok(())
}
