//! The `understudy` binary's handling of bad configuration: exit code 64
//! and a message naming the setting; and `understudy sim`, which prints
//! its nodes, serves them and kills one when the chaos API asks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn understudy() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_understudy"));
    // Nothing from the caller's environment may leak into these cases.
    for (key, _) in std::env::vars() {
        if key.starts_with("UNDERSTUDY_") {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn invalid_settings_exit_64_naming_the_setting() {
    let dir = std::env::temp_dir().join(format!("understudy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_file = dir.join("bad.toml");
    std::fs::File::create(&bad_file)
        .unwrap()
        .write_all(b"http_prot = 1\n")
        .unwrap();
    let bad_value_file = dir.join("bad-value.toml");
    std::fs::File::create(&bad_value_file)
        .unwrap()
        .write_all(b"delete_timeout_ms = 1000\n")
        .unwrap();

    /// Arguments, environment, and what stderr must name.
    type Case = (Vec<String>, Vec<(&'static str, &'static str)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            vec!["--http-port".into(), "70000".into()],
            vec![],
            "http-port",
        ),
        (
            vec!["--unhealthy-timeout-ms".into(), "1".into()],
            vec![],
            "unhealthy_timeout_ms",
        ),
        (vec!["--bind".into(), "not-an-ip".into()], vec![], "bind"),
        (
            vec![],
            vec![("UNDERSTUDY_DELETE_TIMEOUT_MS", "abc")],
            "delete-timeout-ms",
        ),
        (vec![], vec![("UNDERSTUDY_DC", "a b")], "dc"),
        (
            vec!["--config".into(), bad_file.display().to_string()],
            vec![],
            "http_prot",
        ),
        (
            vec!["--config".into(), bad_value_file.display().to_string()],
            vec![],
            "delete_timeout_ms",
        ),
        (
            vec![
                "--config".into(),
                dir.join("missing.toml").display().to_string(),
            ],
            vec![],
            "missing.toml",
        ),
        (vec!["--no-such-flag".into()], vec![], "--no-such-flag"),
    ];
    for (args, env, mentions) in cases {
        let output = understudy().args(&args).envs(env.clone()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(mentions),
            "{args:?} {env:?}: stderr does not name {mentions}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_exits_zero() {
    let output = understudy().arg("--help").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("--http-port"));
}

#[test]
fn a_data_dir_it_cannot_use_stops_the_server_naming_the_file_and_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("understudy.redb");
    std::fs::write(&file, b"not a raft store").unwrap();
    let output = understudy()
        .args(["--http-port", "0", "--grpc-port", "0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("understudy.redb"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a raft store");
}

/// A child process killed (and reaped) when dropped, so a failing test
/// leaves nothing running.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `from` line by line on a thread; the lines arrive on the
/// receiver, which disconnects at the end of the stream.
fn lines(from: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// One row of the sim's node table.
#[derive(Debug)]
struct Row {
    id: u64,
    dc: String,
    http: SocketAddr,
    grpc: SocketAddr,
    raft: SocketAddr,
}

fn row(line: &str) -> Row {
    let columns: Vec<&str> = line.split_whitespace().collect();
    let [id, dc, http, grpc, raft] = columns[..] else {
        panic!("not a node row (node, dc, http, grpc, raft): {line:?}");
    };
    let addr = |text: &str| -> SocketAddr {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} in {line:?} is not an address: {e}"))
    };
    Row {
        id: id
            .parse()
            .unwrap_or_else(|e| panic!("{id:?} in {line:?} is not a node id: {e}")),
        dc: dc.to_owned(),
        http: addr(http),
        grpc: addr(grpc),
        raft: addr(raft),
    }
}

#[test]
fn sim_prints_every_node_serves_them_and_kills_one_on_request() {
    let mut sim = Killed(
        understudy()
            .args([
                "sim",
                "--dc",
                "hz=2",
                "--dc",
                "sh=1",
                "--link",
                "hz-sh=20ms",
                "--base-port",
                "0",
                "--log",
                "error",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = lines(sim.0.stdout.take().unwrap());
    let stderr = lines(sim.0.stderr.take().unwrap());
    let errors = || stderr.try_iter().collect::<Vec<_>>().join("\n");

    // Everything up to the leader line, within a deadline.
    let within = Duration::from_secs(60);
    let deadline = Instant::now() + within;
    let mut printed = Vec::new();
    let leader = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match stdout.recv_timeout(left) {
            Ok(line) => {
                if let Some(id) = line.strip_prefix("leader: node ") {
                    break id
                        .trim()
                        .parse::<u64>()
                        .unwrap_or_else(|e| panic!("leader line {line:?}: {e}"));
                }
                printed.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "no leader line within {within:?}; stdout so far: {printed:#?}; stderr: {}",
                errors()
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                "the sim exited ({:?}) before printing a leader; stdout: {printed:#?}; stderr: {}",
                sim.0.try_wait(),
                errors()
            ),
        }
    };
    println!(
        "understudy sim printed:\n{}\nleader: node {leader}",
        printed.join("\n")
    );

    let header = printed
        .iter()
        .position(|l| {
            l.split_whitespace().collect::<Vec<_>>() == ["node", "dc", "http", "grpc", "raft"]
        })
        .unwrap_or_else(|| panic!("no node table header in {printed:#?}"));
    let rows: Vec<Row> = printed[header + 1..]
        .iter()
        .take_while(|l| !l.starts_with("link "))
        .map(|l| row(l))
        .collect();
    let shape: Vec<(u64, &str)> = rows.iter().map(|r| (r.id, r.dc.as_str())).collect();
    assert_eq!(shape, [(1, "hz"), (2, "hz"), (3, "sh")], "{rows:#?}");
    for r in &rows {
        assert_eq!(
            r.grpc.port(),
            r.http.port() + 1000,
            "node {}: gRPC port is not the HTTP port + 1000: {r:?}",
            r.id
        );
        assert!(r.http.port() != 0 && r.raft.port() != 0, "{r:?}");
    }
    let links: Vec<&str> = printed[header + 1 + rows.len()..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        links,
        ["link hz->sh=20ms", "link sh->hz=20ms"],
        "{printed:#?}"
    );
    assert!((1..=3).contains(&leader), "leader node {leader}");

    // Node 3 serves the admin API and knows every member and its DC.
    let url = format!("http://{}/understudy/v1/cluster/nodes", rows[2].http);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (status, body) = runtime.block_on(async {
        let reply = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = reply.status();
        (status, reply.text().await.unwrap())
    });
    assert!(status.is_success(), "GET {url}: {status} {body}");
    let json: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {body}"));
    assert_eq!(json["nodeId"], 3, "{body}");
    let members: Vec<(u64, &str)> = json["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no nodes in {body}"))
        .iter()
        .map(|n| {
            (
                n["id"].as_u64().unwrap_or_default(),
                n["dc"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(members, [(1, "hz"), (2, "hz"), (3, "sh")], "{body}");
    assert!(
        sim.0.try_wait().unwrap().is_none(),
        "the sim exited: {}",
        errors()
    );

    // A kill asked of node 1 crashes node 3: its port refuses, the sim
    // says so, and a second kill of it is refused naming the node.
    let post = |url: String| {
        runtime.block_on(async {
            let reply = reqwest::Client::new()
                .post(&url)
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .unwrap_or_else(|e| panic!("POST {url}: {e}"));
            (reply.status().as_u16(), reply.text().await.unwrap())
        })
    };
    let kill = format!("http://{}/understudy/v1/chaos/kill?node=3", rows[0].http);
    assert_eq!(post(kill.clone()), (200, r#"{"killed":3}"#.to_owned()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(rows[2].http).is_ok() {
        assert!(
            Instant::now() < deadline,
            "node 3's HTTP port still accepts 10 s after the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = stdout
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the sim printed nothing after the kill: {e}"));
    assert_eq!(said, "killed: node 3");
    let (status, body) = post(kill);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no running node 3"), "{body}");
    drop(sim);

    // A DC without a node count is refused, naming the argument.
    let mut bad = Killed(
        understudy()
            .args(["sim", "--dc", "hz", "--base-port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let within = Duration::from_secs(30);
    // Its stderr closes when it exits: read it to the end, within a deadline.
    let mut pipe = bad.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let stderr = rx
        .recv_timeout(within)
        .unwrap_or_else(|_| panic!("`sim --dc hz` did not exit within {within:?}"));
    let status = bad.0.wait().unwrap();
    assert_eq!(status.code(), Some(64), "`sim --dc hz`: {stderr}");
    assert!(
        stderr.contains("invalid dc"),
        "`sim --dc hz`: stderr does not name dc: {stderr}"
    );
}

#[test]
fn the_banner_says_where_it_listens_how_to_point_a_client_and_what_is_not_default() {
    let secret = "banner-secret-7f3a";
    let mut node = Killed(
        understudy()
            .args(["--http-port", "0", "--grpc-port", "0", "--log", "warn"])
            .args(["--cluster-secret", secret])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = lines(node.0.stdout.take().unwrap());
    let stderr = lines(node.0.stderr.take().unwrap());
    let within = Duration::from_secs(30);
    let deadline = Instant::now() + within;
    let mut banner = Vec::new();
    while !banner
        .last()
        .is_some_and(|l: &String| l.trim_start().starts_with("settings"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match stdout.recv_timeout(left) {
            Ok(line) => banner.push(line),
            Err(e) => panic!(
                "no settings line within {within:?} ({e}); stdout: {banner:#?}; stderr: {:?}",
                stderr.try_iter().collect::<Vec<_>>()
            ),
        }
    }
    let text = banner.join("\n");
    println!("{text}");
    let after = |prefix: &str| -> String {
        banner
            .iter()
            .find_map(|l| l.trim_start().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let http: SocketAddr = after("Nacos HTTP")
        .trim_start_matches("http://")
        .trim_end_matches("/nacos")
        .parse()
        .expect("the HTTP line names an address");
    let grpc: SocketAddr = after("Nacos gRPC")
        .parse()
        .expect("the gRPC line names an address");
    // Both listen where the banner says.
    let mut conn = std::net::TcpStream::connect(http).expect("the HTTP address listens");
    conn.write_all(
        b"GET /nacos/v1/ns/instance/list?serviceName=x HTTP/1.0\r\nHost: localhost\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    std::net::TcpStream::connect(grpc).expect("the gRPC address listens");
    // How to point a Nacos client at it.
    assert!(
        text.contains(&format!("serverAddr=127.0.0.1:{}", http.port())),
        "{text}"
    );
    // Ports 0 put gRPC elsewhere than HTTP + 1000: the banner says so.
    assert!(text.contains("gRPC port offset"), "{text}");
    // The settings that differ from the defaults (the gRPC port follows
    // the HTTP port, a derived default), the secret unprinted.
    let settings = banner.last().unwrap();
    for shown in ["cluster_secret=(set)", "http_port=0", "log=warn"] {
        assert!(settings.contains(shown), "{shown} missing: {settings}");
    }
    assert!(!text.contains(secret), "the secret was printed: {text}");
    let errors: Vec<String> = stderr.try_iter().collect();
    assert!(
        !errors.iter().any(|l| l.contains(secret)),
        "the secret was logged: {errors:?}"
    );
}
