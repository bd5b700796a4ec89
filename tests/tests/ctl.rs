//! `understudy ctl` against in-process servers: listing, watching,
//! registering and deregistering, cluster status, chaos links, with
//! tables and `--output json`, with and without auth.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use understudy_server::auth::hash_password;
use understudy_server::config::{Settings, UserSetting};
use understudy_server::ctl::{self, CtlError};
use understudy_tests::{eventually, Server};

/// Runs `ctl WORDS` and returns what it printed.
async fn ctl(words: &[&str]) -> Result<String, CtlError> {
    let command = ctl::parse(words.iter().copied()).unwrap_or_else(|e| panic!("{words:?}: {e}"));
    let mut out = Vec::new();
    ctl::run(&command, &mut out).await?;
    Ok(String::from_utf8(out).expect("UTF-8"))
}

async fn json(words: &[&str]) -> Value {
    let text = ctl(words)
        .await
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{words:?} printed no JSON ({e}): {text}"))
}

#[tokio::test]
async fn ls_register_and_deregister_with_tables_and_json() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let address = server.http.to_string();
    let grpc = server.grpc.to_string();
    let at = ["--server", address.as_str()];

    let registered = ctl(&[
        "register",
        "orders",
        "-n",
        "dev",
        "--ip",
        "10.0.0.1",
        "--port",
        "8080",
        "--weight",
        "2",
        "-m",
        "zone=hz",
        "-m",
        "version=1.2",
        at[0],
        at[1],
    ])
    .await?;
    assert_eq!(
        registered.trim(),
        "registered 10.0.0.1:8080 in DEFAULT_GROUP@@orders (persistent)"
    );
    ctl(&[
        "register", "billing", "-n", "dev", "-g", "PAY", "--ip", "10.0.0.2", "--port", "9090",
        at[0], at[1],
    ])
    .await?;

    let namespaces = json(&["ls", "namespaces", "-o", "json", at[0], at[1]]).await;
    let ids: Vec<&str> = namespaces
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["public", "dev"]);

    let services = ctl(&["ls", "services", "-n", "dev", "--grpc", &grpc, at[0], at[1]]).await?;
    assert_eq!(
        services.lines().collect::<Vec<_>>(),
        [
            "group          service",
            "DEFAULT_GROUP  orders",
            "PAY            billing"
        ]
    );
    let pay = json(&[
        "ls", "services", "-n", "dev", "-g", "PAY", "-o", "json", "--grpc", &grpc, at[0], at[1],
    ])
    .await;
    assert_eq!(
        pay,
        serde_json::json!([{"group": "PAY", "service": "billing"}])
    );

    let instances = json(&[
        "ls",
        "instances",
        "orders",
        "-n",
        "dev",
        "-o",
        "json",
        at[0],
        at[1],
    ])
    .await;
    let instance = &instances[0];
    assert_eq!(instance["ip"], "10.0.0.1");
    assert_eq!(instance["port"], 8080);
    assert_eq!(instance["weight"], 2.0);
    assert_eq!(instance["ephemeral"], false);
    assert_eq!(instance["metadata"]["zone"], "hz");
    let table = ctl(&["ls", "instances", "orders", "-n", "dev", at[0], at[1]]).await?;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ip        port  cluster  weight  healthy"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("10.0.0.1  8080  DEFAULT  2.0     true"),
        "{table}"
    );
    assert!(lines[1].ends_with("version=1.2,zone=hz"), "{table}");

    let removed = ctl(&[
        "deregister",
        "orders",
        "-n",
        "dev",
        "--ip",
        "10.0.0.1",
        "--port",
        "8080",
        at[0],
        at[1],
    ])
    .await?;
    assert_eq!(
        removed.trim(),
        "deregistered 10.0.0.1:8080 from DEFAULT_GROUP@@orders"
    );
    let empty = json(&[
        "ls",
        "instances",
        "orders",
        "-n",
        "dev",
        "-o",
        "json",
        at[0],
        at[1],
    ])
    .await;
    assert_eq!(empty, serde_json::json!([]));

    // Bad input: the server's message, naming the field.
    let error = ctl(&[
        "register",
        "orders",
        "--ip",
        "10.0.0.1",
        "--port",
        "8080",
        "--weight=-3",
        at[0],
        at[1],
    ])
    .await
    .expect_err("a negative weight");
    let message = error.to_string();
    assert!(
        message.contains("answered 400") && message.contains("weight"),
        "{message}"
    );
    // A bad argument never reaches the server.
    let error = ctl::parse(["register", "x", "--ip", "1.2.3.4", "--port", "99999"]).unwrap_err();
    assert!(error.to_string().contains("99999"), "{error}");
    let error = ctl::parse([
        "register", "x", "--ip", "1.2.3.4", "--port", "1", "-m", "novalue",
    ])
    .unwrap_err();
    assert!(error.to_string().contains("KEY=VALUE"), "{error}");
    // An unreachable node says where it tried.
    server.stop().await?;
    let error = ctl(&["ls", "namespaces", at[0], at[1]]).await.unwrap_err();
    assert!(matches!(error, CtlError::Unreachable { .. }), "{error}");
    assert!(error.to_string().contains(&address), "{error}");
    Ok(())
}

/// Collects what `ctl watch` prints, line by line.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test]
async fn watch_prints_the_snapshot_then_each_change_with_its_revision() -> anyhow::Result<()> {
    let server = Server::start(Settings::default()).await?;
    let http = server.http.to_string();
    let grpc = server.grpc.to_string();
    ctl(&[
        "register", "stock", "--ip", "10.1.0.1", "--port", "80", "--server", &http,
    ])
    .await?;

    for output in ["table", "json"] {
        let words = [
            "watch", "stock", "--server", &http, "--grpc", &grpc, "--count", "3", "-o", output,
        ];
        let command = ctl::parse(words)?;
        let printed = Lines::default();
        let mut sink = printed.clone();
        let watching = tokio::spawn(async move { ctl::run(&command, &mut sink).await });
        assert!(
            eventually(Duration::from_secs(5), || async {
                !printed.lines().is_empty()
            })
            .await,
            "no snapshot"
        );
        ctl(&[
            "register", "stock", "--ip", "10.1.0.2", "--port", "80", "-m", "zone=sh", "--server",
            &http,
        ])
        .await?;
        ctl(&[
            "deregister",
            "stock",
            "--ip",
            "10.1.0.1",
            "--port",
            "80",
            "--server",
            &http,
        ])
        .await?;
        tokio::time::timeout(Duration::from_secs(5), watching).await???;
        let lines = printed.lines();
        if output == "table" {
            assert!(
                lines[0].starts_with("rev ") && lines[0].ends_with("snapshot: 1 instance"),
                "{lines:?}"
            );
            assert_eq!(lines[1], "  10.1.0.1:80 healthy weight=1.0 zone=DEFAULT");
            assert!(
                lines[2].ends_with("+ 10.1.0.2:80 healthy weight=1.0 zone=sh"),
                "{lines:?}"
            );
            assert!(
                lines[3].ends_with("- 10.1.0.1:80 (deregistered)"),
                "{lines:?}"
            );
            let revisions: Vec<u64> = [&lines[0], &lines[2], &lines[3]]
                .iter()
                .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
                .collect();
            assert!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");
        } else {
            let events: Vec<Value> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(events.len(), 3, "{lines:?}");
            assert_eq!(events[0]["event"], "snapshot");
            assert_eq!(events[0]["instances"].as_array().unwrap().len(), 1);
            assert_eq!(events[1]["event"], "upsert");
            assert_eq!(events[1]["instance"]["zone"], "sh");
            assert_eq!(events[2]["event"], "removed");
            assert_eq!(events[2]["cause"], "deregistered");
            assert!(events[2]["revision"].as_u64() > events[1]["revision"].as_u64());
        }
        // Put the first instance back for the next round.
        ctl(&[
            "register", "stock", "--ip", "10.1.0.1", "--port", "80", "--server", &http,
        ])
        .await?;
        ctl(&[
            "deregister",
            "stock",
            "--ip",
            "10.1.0.2",
            "--port",
            "80",
            "--server",
            &http,
        ])
        .await?;
    }
    server.stop().await?;
    Ok(())
}

#[tokio::test]
async fn cluster_and_chaos_links() -> anyhow::Result<()> {
    let servers = Server::start_cluster(
        3,
        Settings {
            dc: Some("hz".to_owned()),
            ..Settings::default()
        },
    )
    .await?;
    let http = servers[0].http.to_string();
    let nodes = json(&["cluster", "-o", "json", "--server", &http]).await;
    let nodes = nodes.as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let leaders = nodes.iter().filter(|n| n["role"] == "leader").count();
    assert_eq!(leaders, 1, "{nodes:?}");
    assert!(
        nodes
            .iter()
            .all(|n| n["dc"] == "hz" && n["error"].is_null()),
        "{nodes:?}"
    );
    let table = ctl(&["cluster", "--server", &http]).await?;
    assert!(table.starts_with("ID  DC  ROLE"), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");

    let none = ctl(&["chaos", "links", "get", "--server", &http]).await?;
    assert_eq!(none.trim(), "no link faults");
    let set = ctl(&[
        "chaos",
        "links",
        "set",
        "hz-sh=40ms~10ms,loss=1%",
        "--server",
        &http,
    ])
    .await?;
    let lines: Vec<&str> = set.lines().collect();
    assert_eq!(
        lines[0], "FROM  TO  LATENCY ms  JITTER ms  LOSS  CUT",
        "{set}"
    );
    assert!(
        lines.contains(&"hz    sh  40          10         1%    -"),
        "{set}"
    );
    assert!(
        lines.contains(&"sh    hz  40          10         1%    -"),
        "{set}"
    );
    let cut = json(&[
        "chaos",
        "partition",
        "hz",
        "sh",
        "-o",
        "json",
        "--server",
        &http,
    ])
    .await;
    let links = cut["faults"]["links"].as_array().unwrap();
    assert!(
        links
            .iter()
            .all(|l| l["cut"] == true && l["latencyMs"] == 40),
        "{cut}"
    );
    let healed = json(&["chaos", "heal", "-o", "json", "--server", &http]).await;
    let links = healed["faults"]["links"].as_array().unwrap();
    assert!(links.iter().all(|l| l["cut"] == false), "{healed}");
    let error = ctl(&["chaos", "links", "set", "hz-sh=fast", "--server", &http])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("answered 400"), "{error}");
    for server in servers {
        server.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn ctl_logs_in_when_auth_is_on() -> anyhow::Result<()> {
    let user = |name: &str, admin: bool| UserSetting {
        name: name.to_owned(),
        password_hash: hash_password("pw", 4).unwrap(),
        admin,
    };
    let server = Server::start(Settings {
        auth_enabled: Some(true),
        auth_token_secret: Some("a token secret of at least 32 bytes".to_owned()),
        users: Some(vec![user("ops", true), user("app", false)]),
        ..Settings::default()
    })
    .await?;
    let http = server.http.to_string();
    let grpc = server.grpc.to_string();
    let error = ctl(&["ls", "namespaces", "--server", &http])
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("403: user not found!"),
        "{error}"
    );
    let error = ctl(&[
        "ls",
        "namespaces",
        "--server",
        &http,
        "--username",
        "app",
        "--password",
        "no",
    ])
    .await
    .unwrap_err();
    assert!(error.to_string().contains("unknown user"), "{error}");
    let as_app = [
        "--server",
        http.as_str(),
        "--username",
        "app",
        "--password",
        "pw",
    ];
    let mut words = vec!["register", "svc", "--ip", "10.2.0.1", "--port", "1"];
    words.extend(as_app);
    ctl(&words).await?;
    let mut words = vec![
        "watch", "svc", "--grpc", &grpc, "--count", "1", "-o", "json",
    ];
    words.extend(as_app);
    let snapshot = json(&words).await;
    assert_eq!(snapshot["instances"][0]["ip"], "10.2.0.1");
    // Chaos is for admins.
    let mut words = vec!["chaos", "links", "get"];
    words.extend(as_app);
    let error = ctl(&words).await.unwrap_err();
    assert!(error.to_string().contains("not an admin"), "{error}");
    let none = ctl(&[
        "chaos",
        "links",
        "get",
        "--server",
        &http,
        "--username",
        "ops",
        "--password",
        "pw",
    ])
    .await?;
    assert_eq!(none.trim(), "no link faults");
    server.stop().await?;
    Ok(())
}
