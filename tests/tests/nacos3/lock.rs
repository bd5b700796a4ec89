//! Nacos 3's distributed locks at the wire (`LockOperationRequest`, built
//! from the request shape in Nacos' source: no reachable client speaks
//! it): one holder at a time, on one node and across two nodes of a
//! cluster, until released or expired.

use std::time::Duration;

use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

fn lock(operation: &str, key: &str, ttl_ms: i64) -> Value {
    json!({"headers":{},"module":"lock","lockOperationEnum":operation,
        "lockInstance":{"key":key,"expiredTime":ttl_ms,"lockType":"NACOS_LOCK","params":{}}})
}

/// `result` of a lock request, or the error it answered.
async fn ask(client: &RawClient, operation: &str, key: &str, ttl_ms: i64) -> anyhow::Result<bool> {
    let (kind, answer) = client
        .call("LockOperationRequest", lock(operation, key, ttl_ms))
        .await?;
    anyhow::ensure!(
        kind == "LockOperationResponse" && answer["success"] == true,
        "{kind}: {answer}"
    );
    answer["result"]
        .as_bool()
        .ok_or_else(|| anyhow::anyhow!("no result: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_has_one_holder_until_released_or_expired() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let a = RawClient::connect(server.grpc, None).await?;
    let b = RawClient::connect(server.grpc, None).await?;
    assert_eq!(a.abilities()["lock"], true, "{}", a.abilities());

    assert!(ask(&a, "ACQUIRE", "job", 60_000).await?, "a takes it");
    assert!(
        !ask(&b, "ACQUIRE", "job", 60_000).await?,
        "b is refused while a holds it"
    );
    assert!(
        !ask(&a, "ACQUIRE", "job", 60_000).await?,
        "not reentrant, as in Nacos"
    );
    assert!(ask(&a, "RELEASE", "job", 0).await?, "a releases it");
    assert!(
        !ask(&a, "RELEASE", "job", 0).await?,
        "nothing left to release"
    );
    assert!(ask(&b, "ACQUIRE", "job", 60_000).await?, "then b takes it");

    // A short one expires by itself.
    assert!(ask(&a, "ACQUIRE", "short", 300).await?);
    assert!(!ask(&b, "ACQUIRE", "short", 300).await?);
    assert!(
        eventually(Duration::from_secs(5), || async {
            ask(&b, "ACQUIRE", "short", 60_000).await.unwrap_or(false)
        })
        .await,
        "b takes it once it expired"
    );

    // Nacos does not handle EXPIRE; a lock type other than NACOS_LOCK is
    // not served: both are refused naming the field.
    let (_, expire) = a
        .call("LockOperationRequest", lock("EXPIRE", "job", 0))
        .await?;
    assert!(
        expire["message"]
            .as_str()
            .unwrap_or("")
            .contains("lockOperationEnum"),
        "{expire}"
    );
    let (_, other) = a
        .call(
            "LockOperationRequest",
            json!({"lockOperationEnum":"ACQUIRE","lockInstance":{"key":"k","lockType":"REDIS"}}),
        )
        .await?;
    assert!(
        other["message"].as_str().unwrap_or("").contains("lockType"),
        "{other}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_through_one_node_is_refused_through_another() -> anyhow::Result<()> {
    let servers = Server::start_cluster(3, Settings::default()).await?;
    let first = RawClient::connect(servers[0].grpc, None).await?;
    let second = RawClient::connect(servers[1].grpc, None).await?;
    assert!(ask(&first, "ACQUIRE", "cron", 60_000).await?);
    assert!(
        !ask(&second, "ACQUIRE", "cron", 60_000).await?,
        "held, whichever node asks"
    );
    assert!(ask(&first, "RELEASE", "cron", 0).await?);
    assert!(ask(&second, "ACQUIRE", "cron", 60_000).await?);
    assert!(!ask(&first, "ACQUIRE", "cron", 60_000).await?);
    Ok(())
}
