//! The load generator's modes against an in-process understudy and the
//! in-process ceilings, briefly: every mode runs, checks what it gets and
//! reports figures. The same modes against r-nacos (`rnacos` on the
//! PATH) keep the comparison working: that test is ignored by a plain
//! `cargo test`, which says why, and `.ci/run` installs r-nacos and runs
//! it with `--ignored`. The figures themselves are for
//! `load compare` on a release build, never asserted here.

use std::time::Duration;

use anyhow::Context as _;
use understudy_benches::load::{self, procfs::Watched, Target};

const BRIEF: Duration = Duration::from_millis(300);

/// Every mode against `target`, asserting that each ran and counted.
async fn every_mode(target: &Target) -> anyhow::Result<()> {
    let register = load::register(target, 4, 8, BRIEF).await?;
    assert!(register.ops > 0, "{register}");
    let cpu = register.server_cpu_seconds.expect("a watched target");
    assert!(cpu > 0.0, "{register}");
    let query = load::query(target, 4, BRIEF).await?;
    assert!(query.ops > 0 && query.p99_ms.is_some(), "{query}");
    let beat = load::beat(target, 4, BRIEF).await?;
    assert!(beat.ops > 0, "{beat}");
    let push = load::push(target, 20, 3).await?;
    assert_eq!(push.missed, Some(0), "{push}");
    assert_eq!(push.ops, 60, "{push}");
    let idle = load::idle(target, 20).await?;
    assert!(idle.rss_bytes_per_connection.is_some(), "{idle}");
    let memory = load::memory(target, 50, 4).await?;
    assert_eq!(memory.ops, 200, "{memory}");
    assert!(memory.rss_bytes_per_instance.is_some(), "{memory}");
    // Every run is one JSON line naming its mode.
    for run in [register, query, beat, push, idle, memory] {
        let json: serde_json::Value = serde_json::from_str(&run.json())?;
        assert_eq!(json["mode"], run.mode.as_str());
        assert!(!run.json().contains('\n'));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_runs_against_understudy() -> anyhow::Result<()> {
    let server =
        understudy_tests::Server::start(understudy_server::config::Settings::default()).await?;
    let target = Target {
        name: "understudy".into(),
        grpc: vec![server.grpc],
        http: vec![server.http],
        watched: Watched::new(vec![std::process::id()]),
        echo: false,
        compact: Some("/understudy/v1/raft/compact".into()),
        jvm: None,
    };
    every_mode(&target).await?;
    server.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ceilings_answer_every_shape() -> anyhow::Result<()> {
    let (grpc, http) = load::ceiling::bind(0, 0).await?;
    let target = Target {
        name: "ceiling".into(),
        grpc: vec![grpc.local_addr()?],
        http: vec![http.local_addr()?],
        watched: Watched::new(vec![std::process::id()]),
        echo: true,
        compact: None,
        jvm: None,
    };
    let serving = tokio::spawn(load::ceiling::serve(grpc, http, false));
    for run in [
        load::register(&target, 4, 8, BRIEF).await?,
        load::query(&target, 4, BRIEF).await?,
        load::beat(&target, 4, BRIEF).await?,
    ] {
        assert!(run.ops > 0, "{run}");
    }
    // The bare fan-out reaches every subscriber with every change.
    let push = load::push(&target, 20, 3).await?;
    assert_eq!(push.missed, Some(0), "{push}");
    assert_eq!(push.ops, 60, "{push}");
    serving.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs r-nacos (`rnacos` on the PATH; installed by .ci/run)"]
async fn every_mode_runs_against_r_nacos() -> anyhow::Result<()> {
    let rnacos = load::compare::find_rnacos()
        .context("r-nacos is not installed: `cargo install rnacos --locked`, or see .ci/run")?;
    let server = load::compare::start_rnacos(&rnacos).await?;
    assert!(server.startup() > Duration::ZERO);
    every_mode(server.target()).await
}
