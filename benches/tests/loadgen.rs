//! The load generator, run short against an in-process server so that CI
//! keeps it working. Figures come from `cargo run --release -p
//! understudy-benches --bin understudy-loadgen`, never from this test.

use std::time::Duration;

use understudy_benches::loadgen;
use understudy_server::config::Settings;
use understudy_tests::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_drives_register_query_and_push() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let register = loadgen::register(server.grpc, 4, Duration::from_millis(200)).await?;
    assert!(register.ops > 0, "{register}");
    let query = loadgen::query(server.grpc, 4, Duration::from_millis(200)).await?;
    assert!(query.ops > 0, "{query}");
    let push = loadgen::push(server.grpc, 20, 3).await?;
    assert_eq!(push.ops, 60, "every subscriber gets every change: {push}");
    let fanout = loadgen::watch_fanout(server.grpc, 10, 3).await?;
    assert_eq!(fanout.ops, 30, "every watcher gets every change: {fanout}");
    server.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_registers_through_every_node_of_a_cluster() -> anyhow::Result<()> {
    let nodes = Server::start_cluster(3, Settings::default()).await?;
    let grpcs: Vec<_> = nodes.iter().map(|s| s.grpc).collect();
    let register = loadgen::register_spread(&grpcs, 6, Duration::from_millis(300)).await?;
    assert!(register.ops > 0, "{register}");
    for node in nodes {
        node.stop().await?;
    }
    Ok(())
}
