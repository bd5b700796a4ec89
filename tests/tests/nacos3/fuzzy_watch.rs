//! Nacos 3's fuzzy watch at the wire, with raw gRPC built from the request
//! shapes in Nacos' source (no reachable client speaks it): the setup ack
//! announces it; a watch of `ns>>grp>>svc-*` is told of matching services
//! (and configs) that appear and go, and of nothing else; a re-sync tells
//! the difference from what the client holds; the limits answer Nacos'
//! codes; and a watch started while services are created misses none.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use understudy_server::config::Settings;
use understudy_tests::nacos_grpc::RawClient;
use understudy_tests::{eventually, Server};

const WITHIN: Duration = Duration::from_secs(5);

fn watch(pattern: &str, received: &[&str], initializing: bool) -> Value {
    json!({"headers":{},"namespace":"public","groupKeyPattern":pattern,
        "receivedGroupKeys":received,"watchType":"WATCH","initializing":initializing})
}

fn keys(names: &[&str]) -> BTreeSet<String> {
    names
        .iter()
        .map(|n| format!("public@@DEFAULT_GROUP@@{n}"))
        .collect()
}

async fn sees(client: &RawClient, pattern: &str, want: &BTreeSet<String>) -> bool {
    eventually(WITHIN, || async {
        let (set, finished) = client.fuzzy_set(pattern);
        finished && set == *want
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setup_ack_announces_every_nacos3_feature_served() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let client = RawClient::connect(server.grpc, None).await?;
    let abilities = client.abilities();
    for served in [
        "fuzzyWatch",
        "supportPersistentInstanceByGrpc",
        "mcp",
        "agent",
        "lock",
    ] {
        assert_eq!(abilities[served], true, "{served}: {abilities}");
    }
    assert_eq!(
        abilities.as_object().map(|a| a.len()),
        Some(5),
        "nothing more is announced: {abilities}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_naming_fuzzy_watch_sees_matching_services_appear_and_go() -> anyhow::Result<()> {
    let settings = Settings {
        empty_service_ttl_ms: Some(300),
        ..Settings::default()
    };
    let server = Server::start(settings).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("svc-a", "10.0.0.1", 80).await?;
    provider.register("other", "10.0.0.1", 81).await?;

    let watcher = RawClient::connect(server.grpc, None).await?;
    let pattern = "public>>DEFAULT_GROUP>>svc-*";
    let (kind, answer) = watcher
        .call("NamingFuzzyWatchRequest", watch(pattern, &[], true))
        .await?;
    assert_eq!(kind, "NamingFuzzyWatchResponse");
    assert_eq!(answer["success"], true, "{answer}");
    assert!(
        sees(&watcher, pattern, &keys(&["svc-a"])).await,
        "the first sync lists svc-a and finishes: {:?}",
        watcher.fuzzy_requests()
    );

    let second = RawClient::connect(server.grpc, None).await?;
    second.register("svc-b", "10.0.0.2", 80).await?;
    second.register("nope-b", "10.0.0.2", 81).await?;
    assert!(
        sees(&watcher, pattern, &keys(&["svc-a", "svc-b"])).await,
        "svc-b appeared: {:?}",
        watcher.fuzzy_requests()
    );

    // Its last instance gone, the empty service is removed after its
    // time-to-live: then it is gone for the watcher too.
    second.deregister("svc-b").await?;
    assert!(
        sees(&watcher, pattern, &keys(&["svc-a"])).await,
        "svc-b went: {:?}",
        watcher.fuzzy_requests()
    );
    let told: Vec<Value> = watcher
        .fuzzy_requests()
        .into_iter()
        .map(|(_, body)| body)
        .collect();
    assert!(
        !format!("{told:?}").contains("other") && !format!("{told:?}").contains("nope-b"),
        "nothing that does not match is told: {told:?}"
    );
    let adds_of_b = told
        .iter()
        .filter(|b| {
            b["serviceKey"] == "public@@DEFAULT_GROUP@@svc-b" && b["changedType"] == "ADD_SERVICE"
        })
        .count();
    assert_eq!(adds_of_b, 1, "told once: {told:?}");

    // Cancelled, nothing more is told.
    let (_, cancelled) = watcher
        .call(
            "NamingFuzzyWatchRequest",
            json!({"groupKeyPattern":pattern,"watchType":"CANCEL_WATCH"}),
        )
        .await?;
    assert_eq!(cancelled["success"], true, "{cancelled}");
    let before = watcher.fuzzy_requests().len();
    second.register("svc-c", "10.0.0.2", 80).await?;
    // A plain subscription of the same connection is pushed after the
    // registration: once it arrives, a fuzzy notice would have too.
    watcher.subscribe("svc-c").await?;
    assert!(
        eventually(WITHIN, || async {
            watcher.view("svc-c").is_some_and(|v| !v.is_empty())
        })
        .await
    );
    assert_eq!(
        watcher.fuzzy_requests().len(),
        before,
        "{:?}",
        watcher.fuzzy_requests()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_tells_the_difference_from_what_the_client_holds() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let provider = RawClient::connect(server.grpc, None).await?;
    provider.register("svc-a", "10.0.0.1", 80).await?;
    provider.register("svc-b", "10.0.0.1", 80).await?;
    let watcher = RawClient::connect(server.grpc, None).await?;
    let pattern = "public>>DEFAULT_GROUP>>svc-*";
    let held = [
        "public@@DEFAULT_GROUP@@svc-a",
        "public@@DEFAULT_GROUP@@svc-gone",
    ];
    let (_, answer) = watcher
        .call("NamingFuzzyWatchRequest", watch(pattern, &held, false))
        .await?;
    assert_eq!(answer["success"], true, "{answer}");
    assert!(
        eventually(WITHIN, || async { !watcher.fuzzy_requests().is_empty() }).await,
        "a diff sync is sent"
    );
    let (kind, sync) = watcher.fuzzy_requests().remove(0);
    assert_eq!(kind, "NamingFuzzyWatchSyncRequest");
    assert_eq!(sync["syncType"], "FUZZY_WATCH_DIFF_SYNC_NOTIFY", "{sync}");
    let mut contexts: Vec<(String, String)> = sync["contexts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["serviceKey"].as_str().unwrap_or_default().to_owned(),
                c["changedType"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    contexts.sort();
    assert_eq!(
        contexts,
        vec![
            (
                "public@@DEFAULT_GROUP@@svc-b".to_owned(),
                "ADD_SERVICE".to_owned()
            ),
            (
                "public@@DEFAULT_GROUP@@svc-gone".to_owned(),
                "DELETE_SERVICE".to_owned()
            ),
        ]
    );
    assert_eq!(
        (sync["currentBatch"].clone(), sync["totalBatch"].clone()),
        (json!(1), json!(1))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_fuzzy_watch_sees_matching_configs_appear_and_go() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let publisher = RawClient::connect(server.grpc, None).await?;
    let publish = |data_id: &str| json!({"dataId":data_id,"group":"DEFAULT_GROUP","tenant":"","content":"x=1"});
    publisher
        .call("ConfigPublishRequest", publish("app-a"))
        .await?;
    let watcher = RawClient::connect(server.grpc, None).await?;
    let pattern = "public>>DEFAULT_GROUP>>app-*";
    let (kind, answer) = watcher
        .call("ConfigFuzzyWatchRequest", watch(pattern, &[], true))
        .await?;
    assert_eq!(
        (kind.as_str(), &answer["success"]),
        ("ConfigFuzzyWatchResponse", &json!(true))
    );
    let group_keys = |ids: &[&str]| -> BTreeSet<String> {
        ids.iter()
            .map(|id| format!("{id}+DEFAULT_GROUP+public"))
            .collect()
    };
    assert!(
        sees(&watcher, pattern, &group_keys(&["app-a"])).await,
        "{:?}",
        watcher.fuzzy_requests()
    );
    publisher
        .call("ConfigPublishRequest", publish("app-b"))
        .await?;
    publisher
        .call("ConfigPublishRequest", publish("web-b"))
        .await?;
    // A new content for a config already held is no membership change.
    publisher
        .call(
            "ConfigPublishRequest",
            json!({"dataId":"app-a","group":"DEFAULT_GROUP","tenant":"","content":"x=2"}),
        )
        .await?;
    assert!(
        sees(&watcher, pattern, &group_keys(&["app-a", "app-b"])).await,
        "{:?}",
        watcher.fuzzy_requests()
    );
    let (_, removed) = publisher
        .call(
            "ConfigRemoveRequest",
            json!({"dataId":"app-a","group":"DEFAULT_GROUP","tenant":""}),
        )
        .await?;
    assert_eq!(removed["success"], true, "{removed}");
    assert!(
        sees(&watcher, pattern, &group_keys(&["app-b"])).await,
        "{:?}",
        watcher.fuzzy_requests()
    );
    let notices: Vec<(String, Value)> = watcher.fuzzy_requests();
    let changes: Vec<String> = notices
        .iter()
        .filter(|(kind, _)| kind == "ConfigFuzzyWatchChangeNotifyRequest")
        .map(|(_, b)| {
            format!(
                "{} {}",
                b["changeType"].as_str().unwrap_or(""),
                b["groupKey"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            "CONFIG_CHANGED app-b+DEFAULT_GROUP+public",
            "DELETE_CONFIG app-a+DEFAULT_GROUP+public"
        ],
        "one notice per membership change, none for web-b or a new content"
    );
    // As Nacos 3: no `syncType` on a notice, no empty `contexts` at the
    // end of the first sync.
    for (kind, body) in &notices {
        match kind.as_str() {
            "ConfigFuzzyWatchChangeNotifyRequest" => {
                assert!(body.get("syncType").is_none(), "{body}");
            }
            "ConfigFuzzyWatchSyncRequest"
                if body["syncType"] == "FINISH_FUZZY_WATCH_INIT_NOTIFY" =>
            {
                assert!(body.get("contexts").is_none(), "{body}");
            }
            _ => {}
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_bad_patterns_answer_as_nacos_does() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let watcher = RawClient::connect(server.grpc, None).await?;
    for i in 0..20 {
        let (_, answer) = watcher
            .call(
                "NamingFuzzyWatchRequest",
                watch(&format!("public>>g>>p{i}-*"), &[], true),
            )
            .await?;
        assert_eq!(answer["success"], true, "{i}: {answer}");
    }
    let (kind, answer) = watcher
        .call(
            "NamingFuzzyWatchRequest",
            watch("public>>g>>one-more-*", &[], true),
        )
        .await?;
    assert_eq!(kind, "NamingFuzzyWatchResponse");
    assert_eq!(answer["errorCode"], 50310, "{answer}");
    // The same pattern again is a re-sync, not a new one.
    let (_, again) = watcher
        .call(
            "NamingFuzzyWatchRequest",
            watch("public>>g>>p0-*", &[], false),
        )
        .await?;
    assert_eq!(again["success"], true, "{again}");

    let (_, bad) = watcher
        .call(
            "NamingFuzzyWatchRequest",
            watch("public>>g>>a*b", &[], true),
        )
        .await?;
    assert_eq!(bad["errorCode"], 400, "{bad}");
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or("")
            .contains("groupKeyPattern"),
        "{bad}"
    );

    // More than 500 matches: the first 500 are told, the answer says so.
    let provider = RawClient::connect(server.grpc, None).await?;
    for i in 0..501 {
        provider
            .register(&format!("many-{i:03}"), "10.0.0.1", 80)
            .await?;
    }
    let other = RawClient::connect(server.grpc, None).await?;
    let pattern = "public>>DEFAULT_GROUP>>many-*";
    let (_, over) = other
        .call("NamingFuzzyWatchRequest", watch(pattern, &[], true))
        .await?;
    assert_eq!(over["errorCode"], 50311, "{over}");
    assert!(
        eventually(WITHIN, || async {
            let (set, finished) = other.fuzzy_set(pattern);
            finished && set.len() == 500
        })
        .await
    );
    Ok(())
}

/// Watchers start their watches at random moments while creators add
/// matching services concurrently; once the creators stop, every watcher
/// holds exactly the matching set. Were the pattern installed after its
/// first set is read, a service created between the two would be missed
/// (seen failing that way: with the read taken one millisecond before the
/// install, this fails at the first seed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_started_while_services_are_created_misses_none() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    for seed in 0..6u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let prefix = format!("race{seed}-");
        let pattern = format!("public>>DEFAULT_GROUP>>{prefix}*");
        let mut creators = Vec::new();
        for _ in 0..CREATORS {
            creators.push(RawClient::connect(server.grpc, None).await?);
        }
        let mut watchers = Vec::new();
        for _ in 0..8 {
            watchers.push(RawClient::connect(server.grpc, None).await?);
        }
        const CREATORS: usize = 4;
        const EACH: usize = 30;
        let delays: Vec<u64> = (0..watchers.len())
            .map(|_| rng.random_range(0..EACH as u64))
            .collect();
        let create = creators.iter().enumerate().map(|(c, client)| {
            let prefix = prefix.clone();
            async move {
                for i in 0..EACH {
                    client
                        .register(&format!("{prefix}{c}-{i}"), "10.0.0.1", 80)
                        .await?;
                }
                anyhow::Ok(())
            }
        });
        let start = watchers.iter().zip(&delays).map(|(watcher, delay)| {
            let pattern = pattern.clone();
            async move {
                // Start after about `delay` creations.
                tokio::time::sleep(Duration::from_micros(delay * 300)).await;
                let (_, answer) = watcher
                    .call("NamingFuzzyWatchRequest", watch(&pattern, &[], true))
                    .await?;
                anyhow::ensure!(answer["success"] == true, "{answer}");
                anyhow::Ok(())
            }
        });
        let (created, started) = tokio::join!(
            futures::future::try_join_all(create),
            futures::future::try_join_all(start)
        );
        created?;
        started?;
        let want: BTreeSet<String> = (0..CREATORS)
            .flat_map(|c| (0..EACH).map(move |i| (c, i)))
            .map(|(c, i)| format!("public@@DEFAULT_GROUP@@{prefix}{c}-{i}"))
            .collect();
        for (w, watcher) in watchers.iter().enumerate() {
            let seen = eventually(WITHIN, || async {
                let (set, finished) = watcher.fuzzy_set(&pattern);
                finished && set == want
            })
            .await;
            let (set, _) = watcher.fuzzy_set(&pattern);
            assert!(
                seen,
                "seed {seed}, watcher {w} (started after ~{} creations): missing {:?}",
                delays[w],
                want.difference(&set).collect::<Vec<_>>()
            );
        }
    }
    Ok(())
}
