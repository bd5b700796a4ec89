//! The multi-DC model end to end, on the in-process simulator: each
//! node's read-view lag follows its DC's link latency, a DC cut off from
//! the majority stalls and refuses writes and catches up once healed, and
//! a DC's apply delay holds its view back while raft runs at full speed,
//! a DC's push faults delay or drop its subscribers' pushes (dropped ones
//! are retried), and a paused node falls behind and catches up on resume.
//!
//! Every wait has a deadline; lags are sampled on a fixed period over a
//! measurement window and the numbers are printed (`--nocapture`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;
use understudy_server::config::Settings;
use understudy_server::faults::{LinkSpec, PushFault};
use understudy_server::raft::Role;
use understudy_server::sim::{heartbeat_for, raft_timings, Sim, SimSpec};
use understudy_tests::nacos_grpc::RawClient;

/// The leader's tick interval (the server's default `tick_ms`).
const TICK: Duration = Duration::from_millis(100);
/// How long a sim may take to elect its first leader.
const START: Duration = Duration::from_secs(20);
const MS: Duration = Duration::from_millis(1);

/// A sim of DC hz with nodes 1 and 2 and DC sh with node 3.
fn spec(links: &[&str], apply_delays: &[(&str, Duration)]) -> SimSpec {
    let links: Vec<LinkSpec> = links
        .iter()
        .map(|l| l.parse().unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let heartbeat = heartbeat_for(links.iter().map(|l| l.link));
    SimSpec {
        dcs: vec![("hz".into(), 2), ("sh".into(), 1)],
        links,
        apply_delays: apply_delays
            .iter()
            .map(|(dc, d)| ((*dc).to_owned(), *d))
            .collect::<BTreeMap<_, _>>(),
        seed: 7,
        bind: "127.0.0.1".parse().expect("an address"),
        base_port: 0,
        settings: Settings {
            log: None,
            ..raft_timings(heartbeat)
        },
    }
}

fn lag_of(sim: &Sim, id: u64) -> Option<Duration> {
    sim.node(id).and_then(|n| n.view().lag())
}

/// Polls `check` every 10 ms until it gives a value, or fails naming
/// `what` and the last state `check` reported.
async fn wait_for<T>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(state) if Instant::now() >= deadline => {
                bail!("{what}: not within {within:?}; last seen: {state}")
            }
            Err(_) => tokio::time::sleep(10 * MS).await,
        }
    }
}

/// Waits until every node has applied a stamped entry.
async fn every_node_has_a_lag(sim: &Sim) -> anyhow::Result<()> {
    wait_for("every node has a view lag", Duration::from_secs(10), || {
        let lags: BTreeMap<u64, Option<Duration>> = sim
            .nodes()
            .keys()
            .map(|id| (*id, lag_of(sim, *id)))
            .collect();
        if lags.values().all(Option::is_some) {
            Ok(())
        } else {
            Err(format!("{lags:?}"))
        }
    })
    .await
}

/// The leader nodes `among` agree on, if it is one of them and leads.
fn agreed_leader(sim: &Sim, among: &[u64]) -> Result<u64, String> {
    let seen: Vec<(u64, Option<u64>, Role)> = among
        .iter()
        .filter_map(|id| sim.node(*id).map(|n| (*id, n.cluster_status())))
        .map(|(id, s)| (id, s.leader, s.role))
        .collect();
    let state = format!("(node, leader, role): {seen:?}");
    let Some((_, Some(leader), _)) = seen.first() else {
        return Err(state);
    };
    let agreed = seen.len() == among.len()
        && seen.iter().all(|(_, l, _)| *l == Some(*leader))
        && seen
            .iter()
            .any(|(id, _, role)| id == leader && *role == Role::Leader);
    if agreed {
        Ok(*leader)
    } else {
        Err(state)
    }
}

/// Makes sure the leader is in hz: the view lags below measure the DCs
/// against a leader there. Node 1 forms the cluster, so it normally leads
/// from the start; should sh's node 3 lead instead, it is paused (all its
/// links cut) until hz elects one of its own, then resumed, and rejoins
/// as a follower of the higher term.
async fn lead_from_hz(sim: &Sim) -> anyhow::Result<u64> {
    let first = sim.leader(START).await.map_err(anyhow::Error::msg)?;
    if first != 3 {
        return Ok(first);
    }
    println!("node 3 (sh) won the first election; pausing it until hz elects a leader");
    sim.faults().pause(3);
    let hz = wait_for("a leader in hz", Duration::from_secs(15), || {
        agreed_leader(sim, &[1, 2])
    })
    .await;
    sim.faults().resume(3);
    let hz = hz?;
    let leader = sim
        .leader(Duration::from_secs(15))
        .await
        .map_err(anyhow::Error::msg)?;
    anyhow::ensure!(leader == hz, "node {leader} leads after the move, not {hz}");
    Ok(leader)
}

/// Samples every node's view lag every `period` for `window`.
async fn sample_lags(
    sim: &Sim,
    period: Duration,
    window: Duration,
) -> BTreeMap<u64, Vec<Duration>> {
    let mut samples: BTreeMap<u64, Vec<Duration>> = BTreeMap::new();
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let end = Instant::now() + window;
    while Instant::now() < end {
        ticker.tick().await;
        for id in sim.nodes().keys() {
            if let Some(lag) = lag_of(sim, *id) {
                samples.entry(*id).or_default().push(lag);
            }
        }
    }
    samples
}

#[derive(Debug, Clone, Copy)]
struct Summary {
    n: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

fn summary(samples: &[Duration]) -> Summary {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        // No sample: the assertions on it fail, naming the node.
        let never = Duration::MAX;
        return Summary {
            n: 0,
            p50: never,
            p99: never,
            max: never,
        };
    }
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    Summary {
        n: sorted.len(),
        p50: at(0.5),
        p99: at(0.99),
        max: *sorted.last().expect("samples"),
    }
}

/// Prints and returns each node's lag summary.
fn report(sim: &Sim, samples: &BTreeMap<u64, Vec<Duration>>) -> BTreeMap<u64, Summary> {
    let mut out = BTreeMap::new();
    for (id, node) in sim.nodes() {
        let s = summary(samples.get(id).map_or(&[][..], Vec::as_slice));
        println!(
            "node {id} ({}): view lag p50 {} ms, p99 {} ms, max {} ms over {} samples",
            node.dc,
            s.p50.as_millis(),
            s.p99.as_millis(),
            s.max.as_millis(),
            s.n
        );
        out.insert(*id, s);
    }
    out
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
}

/// Registers a persistent instance through `at`'s Open API; the status
/// and body of the answer.
/// Registers `ip:8080` through the node at `at` (node 1) and requires `ok`.
async fn register_ok(
    http: &reqwest::Client,
    at: SocketAddr,
    service: &str,
    ip: &str,
) -> anyhow::Result<()> {
    let (status, body) = register(http, at, service, ip, 8080).await?;
    println!("write through node 1: {status} {body:?}");
    anyhow::ensure!(
        status.is_success() && body == "ok",
        "write through node 1 answered {status} {body:?}"
    );
    Ok(())
}

async fn register(
    http: &reqwest::Client,
    at: SocketAddr,
    service: &str,
    ip: &str,
    port: u16,
) -> anyhow::Result<(reqwest::StatusCode, String)> {
    let answer = http
        .post(format!("http://{at}/nacos/v1/ns/instance"))
        .query(&[
            ("serviceName", service),
            ("ip", ip),
            ("port", &port.to_string()),
            ("ephemeral", "false"),
        ])
        .send()
        .await
        .with_context(|| format!("POST instance to {at}"))?;
    let status = answer.status();
    Ok((status, answer.text().await?))
}

/// The instance IPs `at` lists for `service`.
async fn listed_ips(
    http: &reqwest::Client,
    at: SocketAddr,
    service: &str,
) -> anyhow::Result<Vec<String>> {
    let answer = http
        .get(format!("http://{at}/nacos/v1/ns/instance/list"))
        .query(&[("serviceName", service)])
        .send()
        .await
        .with_context(|| format!("GET instance list from {at}"))?;
    let status = answer.status();
    let body = answer.text().await?;
    anyhow::ensure!(status.is_success(), "list on {at}: {status} {body}");
    let json: serde_json::Value = serde_json::from_str(&body)?;
    Ok(json["hosts"]
        .as_array()
        .with_context(|| format!("no hosts in {body}"))?
        .iter()
        .filter_map(|h| h["ip"].as_str().map(str::to_owned))
        .collect())
}

/// Each running node's (id, role, term, leader, last applied).
fn statuses(sim: &Sim) -> Vec<(u64, Role, u64, Option<u64>, u64)> {
    sim.nodes()
        .keys()
        .filter_map(|id| sim.node(*id).map(|n| n.cluster_status()))
        .map(|s| (s.node_id, s.role, s.term, s.leader, s.last_applied))
        .collect()
}

/// Waits (10 s at most) until node 3 (sh) lists `ip` for the test service
/// and its view lag is below a tick, the link latency and a tick again;
/// how long after `healed` that was.
async fn converge(
    sim: &Sim,
    http: &reqwest::Client,
    ip: &str,
    latency: Duration,
    healed: Instant,
) -> anyhow::Result<Duration> {
    let node3 = sim.nodes()[&3].http;
    let fresh = TICK + latency + TICK;
    let deadline = healed + Duration::from_secs(10);
    loop {
        let ips = listed_ips(http, node3, "multi-dc").await?;
        let lag = lag_of(sim, 3);
        if ips.iter().any(|i| i == ip) && lag.is_some_and(|l| l < fresh) {
            return Ok(healed.elapsed());
        }
        if Instant::now() >= deadline {
            bail!(
                "node 3 did not converge within 10 s of the heal: hosts {ips:?}, lag {lag:?}; \
                 (node, role, term, leader, applied): {:?}",
                statuses(sim)
            );
        }
        tokio::time::sleep(10 * MS).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn view_lag_follows_the_link_latency() -> anyhow::Result<()> {
    let latency = Duration::from_millis(200);
    let sim = Sim::start(&spec(&["hz-sh=200ms"], &[]), START).await?;
    let measured = async {
        let leader = lead_from_hz(&sim).await?;
        println!("leader: node {leader}; hz-sh one-way latency {latency:?}");
        every_node_has_a_lag(&sim).await?;
        let samples = sample_lags(&sim, 10 * MS, Duration::from_secs(4)).await;
        anyhow::Ok(report(&sim, &samples))
    }
    .await;
    sim.stop().await;
    let lags = measured?;

    assert_sh_behind_by(&lags, latency, (latency / 4).max(TICK));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_minority_dc_stalls_refuses_writes_and_converges_after_heal(
) -> anyhow::Result<()> {
    let latency = Duration::from_millis(200);
    let sim = Sim::start(&spec(&["hz-sh=200ms"], &[]), START).await?;
    let http = http_client();
    let result = async {
        let before = sim.leader(START).await.map_err(anyhow::Error::msg)?;
        every_node_has_a_lag(&sim).await?;
        println!("leader before the partition: node {before}");
        sim.faults().partition("hz", "sh");
        let cut_at = Instant::now();

        // The majority DC leads.
        let leader = wait_for("a leader in hz", Duration::from_secs(15), || {
            agreed_leader(&sim, &[1, 2])
        })
        .await?;
        println!(
            "leader after the partition: node {leader}, agreed {} ms after the cut",
            cut_at.elapsed().as_millis()
        );

        // sh's view stops advancing: its lag grows with the clock.
        let first = lag_of(&sim, 3).context("node 3 has a lag")?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let second = lag_of(&sim, 3).context("node 3 has a lag")?;
        println!(
            "node 3 lag while cut off: {} ms, then {} ms 1.5 s later",
            first.as_millis(),
            second.as_millis()
        );
        anyhow::ensure!(
            second >= first + Duration::from_millis(1200),
            "node 3's view still advances while cut off: lag {first:?} then {second:?}"
        );

        // A write through the cut-off DC is refused, clearly.
        let node3 = sim.nodes()[&3].http;
        let (status, body) = register(&http, node3, "multi-dc", "10.0.3.1", 8080).await?;
        println!("write through node 3: {status} {body:?}");
        anyhow::ensure!(
            status == reqwest::StatusCode::SERVICE_UNAVAILABLE,
            "write through node 3 answered {status} {body:?}"
        );
        // Whichever way node 3 learns it is cut off (its forward to the
        // leader fails, it knows no leader, or it leads without a quorum),
        // the answer says the cluster cannot take the write and why.
        anyhow::ensure!(
            body.contains("the cluster cannot take this write now")
                && ["unreachable", "no quorum", "cannot reach a quorum"]
                    .iter()
                    .any(|why| body.contains(why)),
            "write through node 3 answered {status} {body:?}"
        );

        // The majority takes writes.
        let node1 = sim.nodes()[&1].http;
        register_ok(&http, node1, "multi-dc", "10.0.1.1").await?;
        anyhow::ensure!(
            !listed_ips(&http, node3, "multi-dc")
                .await?
                .contains(&"10.0.1.1".to_owned()),
            "node 3 saw the hz write through the partition"
        );

        // Heal: sh catches up with the write and the live view.
        sim.faults().heal_dcs("hz", "sh");
        let healed = Instant::now();
        let converged = converge(&sim, &http, "10.0.1.1", latency, healed).await?;
        println!(
            "node 3 converged {} ms after the heal (lag {:?}); (node, role, term, leader, applied): {:?}",
            converged.as_millis(),
            lag_of(&sim, 3),
            statuses(&sim)
        );
        let bound = Duration::from_secs(2) + latency;
        anyhow::ensure!(
            converged < bound,
            "node 3 took {converged:?} to converge after the heal, not under {bound:?}"
        );
        Ok(())
    }
    .await;
    sim.stop().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dc_apply_delay_holds_that_dcs_view_back() -> anyhow::Result<()> {
    let delay = Duration::from_millis(500);
    let sim = Sim::start(&spec(&[], &[("sh", delay)]), START).await?;
    let measured = async {
        let leader = sim.leader(START).await.map_err(anyhow::Error::msg)?;
        println!("leader: node {leader}; sh apply delay {delay:?}");
        every_node_has_a_lag(&sim).await?;
        let samples = sample_lags(&sim, 10 * MS, Duration::from_secs(2)).await;
        anyhow::Ok(report(&sim, &samples))
    }
    .await;
    sim.stop().await;
    let lags = measured?;

    assert_sh_behind_by(&lags, delay, TICK);
    Ok(())
}

/// Test 2's partition heals before sh's election timer fires. A real one
/// outlasts it: without a pre-vote, node 3 would campaign in vain, raise
/// its term, and on the heal that term would depose hz's leader (the
/// majority never lost quorum). The election gate keeps a node that
/// cannot reach a majority from campaigning: node 3 stays a follower at
/// the old term, hz keeps its leader, and sh converges as quickly as in
/// test 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minority_dc_cut_off_past_its_election_timeout_rejoins_without_deposing_the_majority(
) -> anyhow::Result<()> {
    let latency = Duration::from_millis(200);
    let sim = Sim::start(&spec(&["hz-sh=200ms"], &[]), START).await?;
    let http = http_client();
    let result = async {
        let leader = lead_from_hz(&sim).await?;
        every_node_has_a_lag(&sim).await?;
        let term = sim
            .node(leader)
            .context("the leader runs")?
            .cluster_status()
            .term;
        println!("leader before the partition: node {leader}, term {term}");
        sim.faults().partition("hz", "sh");
        let cut_at = Instant::now();

        let node1 = sim.nodes()[&1].http;
        register_ok(&http, node1, "multi-dc", "10.0.1.2").await?;

        // Hold the partition past sh's longest election timeout.
        let election_max = sim
            .node(3)
            .context("node 3 runs")?
            .config()
            .cluster
            .election_timeout
            * 2;
        let held = wait_for(
            "sh's view lag passes its longest election timeout",
            Duration::from_secs(20),
            || match lag_of(&sim, 3) {
                Some(lag) if lag > election_max + Duration::from_secs(1) => Ok(lag),
                other => Err(format!("{other:?}")),
            },
        )
        .await?;
        let s = sim.node(3).context("node 3 runs")?.cluster_status();
        println!(
            "partition held {} ms (lag {held:?}, election timeout up to {election_max:?}): \
             node 3 is {} in term {}",
            cut_at.elapsed().as_millis(),
            s.role,
            s.term
        );
        anyhow::ensure!(
            s.term == term && s.role == Role::Follower,
            "node 3 campaigned while cut off: {} in term {} (was term {term})",
            s.role,
            s.term
        );
        let node3 = sim.nodes()[&3].http;
        let (status, body) = register(&http, node3, "multi-dc", "10.0.3.2", 8080).await?;
        println!("write through node 3: {status} {body:?}");
        anyhow::ensure!(
            status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && body.contains("the cluster cannot take this write now"),
            "write through node 3 answered {status} {body:?}"
        );

        sim.faults().heal_dcs("hz", "sh");
        let healed = Instant::now();
        let fresh = TICK + latency + TICK;
        let deadline = healed + Duration::from_secs(12);
        let mut shown = Vec::new();
        let mut leaderless = Duration::ZERO;
        let mut last = Instant::now();
        let converged = loop {
            let now = statuses(&sim);
            // Print each change of role, term or leader.
            let shape: Vec<_> = now.iter().map(|s| (s.1, s.2, s.3)).collect();
            if shape != shown {
                println!("+{:>5} ms: {now:?}", healed.elapsed().as_millis());
                shown = shape;
            }
            let step = last.elapsed();
            last = Instant::now();
            if agreed_leader(&sim, &[1, 2]).is_err() {
                leaderless += step;
            }
            let ips = listed_ips(&http, node3, "multi-dc").await?;
            if ips.iter().any(|ip| ip == "10.0.1.2") && lag_of(&sim, 3).is_some_and(|l| l < fresh) {
                break Some(healed.elapsed());
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(10 * MS).await;
        };
        let after = agreed_leader(&sim, &[1, 2]).ok();
        let after_term = after
            .and_then(|l| sim.node(l))
            .map(|n| n.cluster_status().term);
        println!(
            "node 3 converged after the heal: {}; hz was without an agreed leader for {} ms; \
             hz leader now {after:?} in term {after_term:?} (was node {leader} in term {term})",
            converged.map_or("not within 12 s".into(), |c| format!(
                "{} ms",
                c.as_millis()
            )),
            leaderless.as_millis()
        );
        let bound = Duration::from_secs(2) + latency;
        let mut failures = Vec::new();
        if after != Some(leader) || after_term != Some(term) || !leaderless.is_zero() {
            failures.push(format!(
                "the heal deposed hz's leader: node {leader} in term {term} became {after:?} \
                 in term {after_term:?}, hz without a leader for {leaderless:?}"
            ));
        }
        if converged.is_none_or(|c| c >= bound) {
            failures.push(format!(
                "node 3 converged after {converged:?}, not under {bound:?}"
            ));
        }
        anyhow::ensure!(failures.is_empty(), "{}", failures.join("; "));
        Ok(())
    }
    .await;
    sim.stop().await;
    result
}

/// A sim of the DCs `dcs` (name, node count) without link faults, every
/// node with `settings` (`raft_timings` for the raft keys underneath).
fn spec_of(dcs: &[(&str, u64)], settings: Settings) -> SimSpec {
    SimSpec {
        dcs: dcs.iter().map(|(dc, n)| ((*dc).to_owned(), *n)).collect(),
        links: Vec::new(),
        apply_delays: BTreeMap::new(),
        seed: 7,
        bind: "127.0.0.1".parse().expect("an address"),
        base_port: 0,
        settings,
    }
}

/// Waits (polling every 5 ms) until `client`'s view of `service` lists
/// `endpoint`; how long after `since` that was, or `None` past `within`.
async fn seen_after(
    client: &RawClient,
    service: &str,
    endpoint: &str,
    since: Instant,
    within: Duration,
) -> Option<Duration> {
    let deadline = since + within;
    loop {
        if client
            .view(service)
            .is_some_and(|v| v.iter().any(|e| e == endpoint))
        {
            return Some(since.elapsed());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(5 * MS).await;
    }
}

/// A push fault on sh acts on sh's subscribers only: a delayed push
/// arrives no earlier than its delay, a dropped one never arrives while
/// the fault holds and arrives once it is lifted (the unanswered push
/// times out and is retried), and hz's subscriber sees every change at
/// once throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_faults_delay_and_drop_a_dcs_pushes_and_dropped_ones_are_retried() -> anyhow::Result<()>
{
    let push_timeout = Duration::from_millis(1000);
    let push_retry = Duration::from_millis(200);
    let settings = Settings {
        log: None,
        push_timeout_ms: Some(push_timeout.as_millis() as u64),
        push_retry_ms: Some(push_retry.as_millis() as u64),
        ..raft_timings(heartbeat_for([]))
    };
    let sim = Sim::start(&spec_of(&[("hz", 1), ("sh", 1)], settings), START).await?;
    let result = async {
        let leader = sim.leader(START).await.map_err(anyhow::Error::msg)?;
        println!("leader: node {leader}");
        let (hz, sh) = (sim.nodes()[&1].grpc, sim.nodes()[&2].grpc);
        let service = "push-faults";
        let hz_watcher = RawClient::connect(hz, None).await?;
        let sh_watcher = RawClient::connect(sh, None).await?;
        for watcher in [&hz_watcher, &sh_watcher] {
            watcher.subscribe(service).await?;
            anyhow::ensure!(
                watcher.view(service) == Some(vec![]),
                "the service is not empty before any registration: {:?}",
                watcher.view(service)
            );
        }
        let quick = Duration::from_millis(300);

        // A delay: sh's push waits it out, hz's does not.
        let delay = Duration::from_millis(500);
        sim.faults()
            .set_push_fault("sh", PushFault { delay, drop: 0.0 })?;
        let first = RawClient::connect(hz, None).await?;
        first.register(service, "10.0.0.1", 8080).await?;
        let acked = Instant::now();
        let endpoint = "10.0.0.1:8080";
        let (on_hz, on_sh) = tokio::join!(
            seen_after(
                &hz_watcher,
                service,
                endpoint,
                acked,
                Duration::from_secs(5)
            ),
            seen_after(
                &sh_watcher,
                service,
                endpoint,
                acked,
                Duration::from_secs(5)
            ),
        );
        println!(
            "push delay {delay:?} on sh: hz's subscriber saw the instance after {on_hz:?}, \
             sh's after {on_sh:?} (from the registration's acknowledgement)"
        );
        anyhow::ensure!(
            on_hz.is_some_and(|d| d < quick),
            "hz's subscriber saw the instance after {on_hz:?}, not within {quick:?}"
        );
        let (low, high) = (delay - 50 * MS, delay + Duration::from_millis(1000));
        anyhow::ensure!(
            on_sh.is_some_and(|d| d >= low && d < high),
            "sh's subscriber saw the instance after {on_sh:?}, not within [{low:?}, {high:?}) \
             with a push delay of {delay:?}"
        );

        // Every push dropped: sh's subscriber does not see the change.
        sim.faults().set_push_fault(
            "sh",
            PushFault {
                delay: Duration::ZERO,
                drop: 1.0,
            },
        )?;
        let second = RawClient::connect(hz, None).await?;
        second.register(service, "10.0.0.2", 8080).await?;
        let acked = Instant::now();
        let endpoint = "10.0.0.2:8080";
        let absent_for = Duration::from_millis(1500);
        let (on_hz, on_sh) = tokio::join!(
            seen_after(
                &hz_watcher,
                service,
                endpoint,
                acked,
                Duration::from_secs(5)
            ),
            seen_after(&sh_watcher, service, endpoint, acked, absent_for),
        );
        println!(
            "every push dropped on sh: hz's subscriber saw the instance after {on_hz:?}; \
             sh's saw it after {on_sh:?} (None: not within {absent_for:?})"
        );
        anyhow::ensure!(
            on_hz.is_some_and(|d| d < quick),
            "hz's subscriber saw the second instance after {on_hz:?}, not within {quick:?}"
        );
        anyhow::ensure!(
            on_sh.is_none(),
            "sh's subscriber saw the second instance after {on_sh:?} although every push to \
             it is dropped"
        );
        anyhow::ensure!(
            sh_watcher.view(service) == Some(vec!["10.0.0.1:8080".to_owned()]),
            "sh's subscriber's view changed while its pushes are dropped: {:?}",
            sh_watcher.view(service)
        );

        // Lifted: the unanswered push times out and is retried.
        sim.faults().set_push_fault("sh", PushFault::default())?;
        let lifted = Instant::now();
        let bound = push_timeout + push_retry + Duration::from_millis(500);
        let on_sh = seen_after(&sh_watcher, service, endpoint, lifted, bound).await;
        println!(
            "push fault lifted: sh's subscriber saw the second instance {on_sh:?} later \
             ({} ms after its registration was acknowledged)",
            acked.elapsed().as_millis()
        );
        anyhow::ensure!(
            on_sh.is_some(),
            "sh's subscriber did not see the second instance within {bound:?} of the push \
             fault being lifted (push timeout {push_timeout:?}, retry {push_retry:?}): view {:?}",
            sh_watcher.view(service)
        );
        let both = Some(vec!["10.0.0.1:8080".to_owned(), "10.0.0.2:8080".to_owned()]);
        anyhow::ensure!(
            sh_watcher.view(service) == both && hz_watcher.view(service) == both,
            "views differ at the end: sh {:?}, hz {:?}",
            sh_watcher.view(service),
            hz_watcher.view(service)
        );
        drop((first, second));
        Ok(())
    }
    .await;
    sim.stop().await;
    result
}

/// What the pause test samples on every check while node 3 is paused.
#[derive(Debug, Default)]
struct PauseWatch {
    /// The largest view lag of hz's nodes 1 and 2.
    hz_max: Duration,
    /// Node 3's terms, each change once.
    terms3: Vec<Option<u64>>,
}

impl PauseWatch {
    fn sample(&mut self, sim: &Sim) -> Result<(), String> {
        for id in [1, 2] {
            let lag = lag_of(sim, id).ok_or(format!("node {id} has no view lag"))?;
            self.hz_max = self.hz_max.max(lag);
        }
        let term = sim.node(3).map(|n| n.cluster_status().term);
        if self.terms3.last() != Some(&term) {
            self.terms3.push(term);
        }
        Ok(())
    }
}

/// A paused node (every raft link cut) falls behind while the majority
/// carries on, does not campaign (the election gate), and catches up on
/// resume without disturbing the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_node_falls_behind_and_catches_up_on_resume() -> anyhow::Result<()> {
    let sim = Sim::start(&spec(&[], &[]), START).await?;
    let http = http_client();
    let result = async {
        let leader = lead_from_hz(&sim).await?;
        every_node_has_a_lag(&sim).await?;
        let term = sim
            .node(leader)
            .context("the leader runs")?
            .cluster_status()
            .term;
        let term3 = sim.node(3).context("node 3 runs")?.cluster_status().term;
        println!("leader: node {leader} in term {term}; node 3 in term {term3}");

        sim.faults().pause(3);
        let paused_at = Instant::now();
        // Sample hz's lags and node 3's term on every check while paused.
        let hz_fresh = Duration::from_millis(200);
        let mut watch = PauseWatch::default();
        let behind = Duration::from_millis(1500);
        let lag3 = wait_for("node 3's lag passes 1.5 s", Duration::from_secs(10), || {
            watch.sample(&sim)?;
            match lag_of(&sim, 3) {
                Some(lag) if lag > behind => Ok(lag),
                other => Err(format!("{other:?}")),
            }
        })
        .await?;
        let hz_leader = agreed_leader(&sim, &[1, 2]).map_err(anyhow::Error::msg)?;
        println!(
            "{} ms after the pause: node 3's lag {} ms; hz's largest lag {} ms; hz leader \
             node {hz_leader}",
            paused_at.elapsed().as_millis(),
            lag3.as_millis(),
            watch.hz_max.as_millis()
        );
        anyhow::ensure!(
            hz_leader == leader,
            "hz's leader changed from node {leader} to node {hz_leader} while node 3 was paused"
        );

        // The majority takes a write node 3 does not get while paused.
        let node1 = sim.nodes()[&1].http;
        let node3 = sim.nodes()[&3].http;
        register_ok(&http, node1, "paused", "10.0.1.3").await?;
        anyhow::ensure!(
            !listed_ips(&http, node3, "paused")
                .await?
                .contains(&"10.0.1.3".to_owned()),
            "node 3 got the write while paused"
        );

        // Hold the pause past node 3's longest election timeout, so that a
        // campaign, had it been allowed, would have happened.
        let election_max = sim
            .node(3)
            .context("node 3 runs")?
            .config()
            .cluster
            .election_timeout
            * 2;
        let held = wait_for(
            "node 3's lag passes its longest election timeout",
            Duration::from_secs(20),
            || {
                watch.sample(&sim)?;
                match lag_of(&sim, 3) {
                    Some(lag) if lag > election_max + Duration::from_secs(1) => Ok(lag),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await?;
        let s3 = sim.node(3).context("node 3 runs")?.cluster_status();
        println!(
            "paused {} ms (lag {} ms, election timeout up to {election_max:?}): node 3 is {} \
             in term {}; its terms while paused: {:?}; hz's largest lag {} ms",
            paused_at.elapsed().as_millis(),
            held.as_millis(),
            s3.role,
            s3.term,
            watch.terms3,
            watch.hz_max.as_millis()
        );
        anyhow::ensure!(
            watch.hz_max < hz_fresh,
            "hz's view lag reached {:?} while node 3 was paused, not under {hz_fresh:?}",
            watch.hz_max
        );
        anyhow::ensure!(
            watch.terms3 == [Some(term3)] && s3.term == term3,
            "node 3 raised its term while paused: terms {:?} (was {term3})",
            watch.terms3
        );

        sim.faults().resume(3);
        let resumed = Instant::now();
        let fresh = Duration::from_millis(300);
        let deadline = resumed + Duration::from_secs(10);
        let caught_up = loop {
            let ips = listed_ips(&http, node3, "paused").await?;
            let lag = lag_of(&sim, 3);
            if ips.iter().any(|ip| ip == "10.0.1.3") && lag.is_some_and(|l| l < fresh) {
                break resumed.elapsed();
            }
            if Instant::now() >= deadline {
                bail!(
                    "node 3 did not catch up within 10 s of the resume: hosts {ips:?}, lag \
                     {lag:?}; (node, role, term, leader, applied): {:?}",
                    statuses(&sim)
                );
            }
            tokio::time::sleep(10 * MS).await;
        };
        let after = agreed_leader(&sim, &[1, 2, 3]).map_err(anyhow::Error::msg)?;
        let after_term = sim
            .node(after)
            .context("the leader runs")?
            .cluster_status()
            .term;
        println!(
            "node 3 caught up {} ms after the resume (lag {:?}); leader node {after} in term \
             {after_term}; (node, role, term, leader, applied): {:?}",
            caught_up.as_millis(),
            lag_of(&sim, 3),
            statuses(&sim)
        );
        anyhow::ensure!(
            after == leader && after_term == term,
            "the resume changed the leader: node {leader} in term {term} became node {after} \
             in term {after_term}"
        );
        Ok(())
    }
    .await;
    sim.stop().await;
    result
}

/// Asserts node 3 (sh) has a p50 view lag within `expected ± slack` and
/// nodes 1 and 2 (hz) one below a tick.
fn assert_sh_behind_by(lags: &BTreeMap<u64, Summary>, expected: Duration, slack: Duration) {
    let sh = lags[&3].p50;
    assert!(
        sh >= expected - slack && sh <= expected + slack,
        "sh's p50 view lag {sh:?} is not within {expected:?} ± {slack:?}"
    );
    for id in [1, 2] {
        let hz = lags[&id].p50;
        assert!(
            hz < TICK,
            "hz node {id}'s p50 view lag {hz:?} is not below {TICK:?}"
        );
    }
}
