//! The container recipe, checked without a Docker engine (there is none
//! on the CI machine): every service of `docker-compose.yml` runs a
//! command line that the server's own parser accepts and validates; the
//! ports it publishes are the ports it serves, as a Nacos pair (gRPC =
//! HTTP + 1000) on the host too; every node is given one member list, and
//! its peers are the other services, by id, raft port and DC; every node runs the same link model; its health check
//! is `understudy ctl health` on the binary the `Dockerfile` installs as
//! its entrypoint. And `ctl health` itself, run as the health check runs
//! it, exits 0 against a running node and non-zero where nothing listens.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use clap::Parser;
use serde_norway::Value;
use understudy_server::cli::{Cli, Command as CliCommand};
use understudy_server::ctl::{CtlArgs, CtlCommand};
use understudy_server::ValidConfig;

/// A file at the top of the repository.
fn top_level(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compose's interpolation with no variable set, which is how the recipe
/// must work out of the box: `${VAR:-default}` and `${VAR-default}` become
/// the default, `$$` a `$`. A variable without a default is an error
/// here, since compose would make it empty.
fn interpolate(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
            continue;
        }
        let inner = rest
            .strip_prefix('{')
            .and_then(|r| r.find('}').map(|end| (&r[..end], &r[end + 1..])));
        let Some((inner, after)) = inner else {
            panic!("'{text}': use ${{VAR:-default}}, not a bare variable");
        };
        let default = inner
            .split_once(":-")
            .or_else(|| inner.split_once('-'))
            .map(|(_, default)| default)
            .unwrap_or_else(|| panic!("'{text}': ${{{inner}}} has no default"));
        out.push_str(default);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A list of strings, interpolated.
fn strings(value: &Value, what: &str) -> Vec<String> {
    value
        .as_sequence()
        .unwrap_or_else(|| panic!("{what} is not a list (use the exec form): {value:?}"))
        .iter()
        .map(|item| match item {
            Value::String(text) => interpolate(text),
            other => panic!("{what}: {other:?} is not a string (quote it)"),
        })
        .collect()
}

/// The values given to `flag` (`--flag V` or `--flag=V`).
fn flag_values(command: &[String], flag: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut args = command.iter();
    while let Some(arg) = args.next() {
        if arg == flag {
            values.push(args.next().cloned().unwrap_or_default());
        } else if let Some(value) = arg.strip_prefix(&format!("{flag}=")) {
            values.push(value.to_owned());
        }
    }
    values
}

/// One compose service, with its command line resolved by the server.
struct Service {
    name: String,
    command: Vec<String>,
    config: ValidConfig,
    /// Published ports, (host, container).
    ports: Vec<(u16, u16)>,
    /// The health check's `test`.
    health: Vec<String>,
    build: Value,
    image: Value,
}

/// `HOST:CONTAINER`, `IP:HOST:CONTAINER`, each maybe with `/tcp`, or the
/// long form with `published` and `target`.
fn port_pair(value: &Value, service: &str) -> (u16, u16) {
    let number = |text: &str| -> u16 {
        let text = text.split('/').next().unwrap_or_default();
        text.parse()
            .unwrap_or_else(|e| panic!("{service}: port '{text}': {e}"))
    };
    match value {
        Value::String(text) => {
            let parts: Vec<&str> = text.rsplitn(3, ':').collect();
            assert!(
                parts.len() >= 2,
                "{service}: '{text}' publishes no fixed host port"
            );
            (number(parts[1]), number(parts[0]))
        }
        Value::Mapping(long) => {
            let field = |key: &str| match &long[key] {
                Value::String(text) => number(text),
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .unwrap_or_else(|| panic!("{service}: {key} {n} is no port")),
                other => panic!("{service}: {key} is {other:?}"),
            };
            (field("published"), field("target"))
        }
        other => panic!("{service}: port {other:?}"),
    }
}

fn services() -> Vec<Service> {
    let compose: Value = serde_norway::from_str(&top_level("docker-compose.yml"))
        .expect("docker-compose.yml is YAML");
    let services = compose["services"]
        .as_mapping()
        .expect("docker-compose.yml has services");
    assert!(!services.is_empty(), "no services");
    services
        .iter()
        .map(|(name, service)| {
            let name = name.as_str().expect("a service name").to_owned();
            let command = strings(&service["command"], &format!("{name}: command"));
            let cli = Cli::try_parse_from(
                std::iter::once("understudy".to_owned()).chain(command.clone()),
            )
            .unwrap_or_else(|e| panic!("{name}: the command does not parse: {e}"));
            assert!(
                !matches!(cli.command, Some(CliCommand::Ctl(_))),
                "{name}: the command must serve"
            );
            let config = cli
                .into_serve_args()
                .resolve()
                .unwrap_or_else(|e| panic!("{name}: the command is refused: {e}"));
            let ports = service["ports"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{name}: no ports published"))
                .iter()
                .map(|port| port_pair(port, &name))
                .collect();
            let health = strings(
                &service["healthcheck"]["test"],
                &format!("{name}: healthcheck test"),
            );
            Service {
                command,
                config,
                ports,
                health,
                build: service["build"].clone(),
                image: service["image"].clone(),
                name,
            }
        })
        .collect()
}

#[test]
fn every_service_runs_a_command_line_the_server_accepts_as_a_distinct_reachable_node() {
    let services = services();
    let ids: BTreeSet<u64> = services.iter().map(|s| s.config.node_id).collect();
    assert_eq!(ids.len(), services.len(), "node ids repeat");
    let secrets: BTreeSet<Option<&str>> = services
        .iter()
        .map(|s| s.config.cluster.secret.as_deref())
        .collect();
    assert_eq!(secrets.len(), 1, "the nodes disagree on the cluster secret");
    assert!(
        secrets.iter().all(Option::is_some),
        "the cluster runs without a secret"
    );
    for s in &services {
        assert!(
            s.config.bind.is_unspecified(),
            "{}: binds {}, which the published ports cannot reach",
            s.name,
            s.config.bind
        );
        assert_eq!(
            s.config.cluster.advertise,
            format!("{}:{}", s.name, s.config.cluster.raft_port),
            "{}: the others reach its raft port at its service name",
            s.name
        );
        assert_eq!(s.build, Value::from("."), "{}: build", s.name);
        assert_eq!(s.image, services[0].image, "{}: one shared image", s.name);
    }
}

#[test]
fn each_node_publishes_its_own_nacos_port_pair() {
    let services = services();
    let mut host_ports = BTreeSet::new();
    for s in &services {
        let container: BTreeSet<u16> = s.ports.iter().map(|(_, c)| *c).collect();
        assert_eq!(
            container,
            BTreeSet::from([s.config.http_port, s.config.grpc_port]),
            "{}: publishes other ports than it serves",
            s.name
        );
        let host = |port: u16| {
            s.ports
                .iter()
                .find(|(_, c)| *c == port)
                .map(|(h, _)| *h)
                .unwrap()
        };
        let (http, grpc) = (host(s.config.http_port), host(s.config.grpc_port));
        assert_eq!(
            Some(grpc),
            http.checked_add(1000),
            "{}: host gRPC port {grpc} is not host HTTP port {http} + 1000, as Nacos clients assume",
            s.name
        );
        for port in [http, grpc] {
            assert!(host_ports.insert(port), "host port {port} is taken twice");
        }
    }
}

#[test]
fn every_peer_is_another_service_by_its_id_raft_port_and_dc() {
    let services = services();
    let lists: BTreeSet<Vec<String>> = services
        .iter()
        .map(|s| flag_values(&s.command, "--peer"))
        .collect();
    assert_eq!(
        lists.len(),
        1,
        "the nodes are given different member lists: {lists:?}"
    );
    let by_name: BTreeMap<&str, &Service> = services.iter().map(|s| (s.name.as_str(), s)).collect();
    for s in &services {
        let others: BTreeSet<u64> = services
            .iter()
            .filter(|o| o.name != s.name)
            .map(|o| o.config.node_id)
            .collect();
        let peers: BTreeSet<u64> = s.config.cluster.peers.keys().copied().collect();
        assert_eq!(
            peers, others,
            "{}: its peers are not the other nodes",
            s.name
        );
        for (id, member) in &s.config.cluster.peers {
            let (host, port) = member
                .raft_addr
                .rsplit_once(':')
                .expect("a validated peer has a port");
            let peer = by_name.get(host).unwrap_or_else(|| {
                panic!("{}: peer {id} is at '{host}', which is no service", s.name)
            });
            assert_eq!(
                peer.config.node_id, *id,
                "{}: '{host}' is node {}, not {id}",
                s.name, peer.config.node_id
            );
            assert_eq!(
                port,
                peer.config.cluster.raft_port.to_string(),
                "{}: peer {host}'s raft port",
                s.name
            );
            assert_eq!(
                member.dc, peer.config.dc,
                "{}: peer {host}'s DC is {}, not '{}'",
                s.name, peer.config.dc, member.dc
            );
        }
    }
    let dcs: BTreeSet<&str> = services.iter().map(|s| s.config.dc.as_str()).collect();
    assert!(dcs.len() >= 2, "the recipe spans two DCs: {dcs:?}");
}

#[test]
fn every_node_runs_the_same_link_model_between_its_dcs() {
    let services = services();
    let dcs: BTreeSet<&str> = services.iter().map(|s| s.config.dc.as_str()).collect();
    let first = &services[0];
    let chaos = &first.config.chaos;
    assert!(!chaos.links.is_empty(), "{}: no --link", first.name);
    assert_eq!(
        flag_values(&first.command, "--chaos-seed").len(),
        1,
        "{}: the seed is pinned, so runs replay",
        first.name
    );
    for link in &chaos.links {
        assert!(
            link.from != link.to
                && dcs.contains(link.from.as_str())
                && dcs.contains(link.to.as_str()),
            "--link {link} is not between two DCs of {dcs:?}"
        );
    }
    for s in &services {
        assert_eq!(&s.config.chaos, chaos, "{}: another link model", s.name);
    }
}

/// The Dockerfile's stages: each `FROM` line and the instructions after
/// it, continuation lines joined, comments dropped.
fn dockerfile_stages() -> Vec<(String, Vec<String>)> {
    let text = top_level("Dockerfile");
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for instruction in instructions {
        let keyword = instruction
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        if keyword == "FROM" {
            stages.push((instruction, Vec::new()));
        } else {
            let (_, body) = stages.last_mut().expect("an instruction before FROM");
            body.push(instruction);
        }
    }
    stages
}

/// The instructions of `stage` with `keyword`, without the keyword.
fn instructions<'a>(stage: &'a [String], keyword: &'a str) -> impl Iterator<Item = &'a str> {
    stage.iter().filter_map(move |i| {
        let (first, rest) = i.split_once(char::is_whitespace)?;
        first.eq_ignore_ascii_case(keyword).then_some(rest.trim())
    })
}

#[test]
fn the_health_check_is_ctl_health_on_the_binary_the_dockerfile_installs() {
    let services = services();
    let stages = dockerfile_stages();
    assert!(stages.len() >= 2, "a multi-stage Dockerfile");
    let (_, build) = &stages[0];
    let (runtime_from, runtime) = stages.last().unwrap();
    assert!(
        instructions(build, "RUN").any(|run| run.contains("cargo build")
            && run.contains("-p understudy ")
            && run.contains("--bin understudy")),
        "the build stage builds the understudy binary"
    );
    let entrypoint: Vec<String> = instructions(runtime, "ENTRYPOINT")
        .last()
        .map(|json| serde_json::from_str(json).expect("ENTRYPOINT in exec form"))
        .unwrap_or_else(|| panic!("no ENTRYPOINT in the runtime stage ({runtime_from})"));
    assert_eq!(entrypoint.len(), 1, "the ENTRYPOINT is the binary alone");
    let binary = &entrypoint[0];
    assert!(
        instructions(runtime, "COPY")
            .any(|copy| copy.starts_with("--from=") && copy.ends_with(&format!(" {binary}"))),
        "the runtime stage copies the binary to {binary}"
    );
    let exposed: BTreeSet<u16> = instructions(runtime, "EXPOSE")
        .flat_map(str::split_whitespace)
        .map(|port| port.split('/').next().unwrap().parse().expect("a port"))
        .collect();
    let ignored = top_level(".dockerignore");
    assert!(
        ignored
            .lines()
            .any(|l| l.trim().trim_end_matches('/') == "target"),
        ".dockerignore keeps target/ out of the build context"
    );

    for s in &services {
        for port in [
            s.config.http_port,
            s.config.grpc_port,
            s.config.cluster.raft_port,
        ] {
            assert!(
                exposed.contains(&port),
                "{}: port {port} is not EXPOSEd",
                s.name
            );
        }
        let [cmd, health_binary, args @ ..] = s.health.as_slice() else {
            panic!("{}: healthcheck test {:?}", s.name, s.health);
        };
        assert_eq!(cmd, "CMD", "{}: exec form (the image has no shell)", s.name);
        assert_eq!(
            health_binary, binary,
            "{}: the health check's binary",
            s.name
        );
        let cli = Cli::try_parse_from(
            std::iter::once("understudy").chain(args.iter().map(String::as_str)),
        )
        .unwrap_or_else(|e| panic!("{}: the health check does not parse: {e}", s.name));
        let Some(CliCommand::Ctl(CtlArgs {
            command: CtlCommand::Health(target),
        })) = cli.command
        else {
            panic!("{}: the health check is not `ctl health`: {args:?}", s.name);
        };
        let url = target.server.trim_end_matches('/');
        let (host, port) = url
            .trim_start_matches("http://")
            .rsplit_once(':')
            .unwrap_or_else(|| panic!("{}: --server {url} names no port", s.name));
        assert!(
            host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()),
            "{}: the health check asks {host}, not the container itself",
            s.name
        );
        assert_eq!(
            port,
            s.config.http_port.to_string(),
            "{}: the health check asks another port than the node's HTTP port",
            s.name
        );
    }
}

/// The binary with no `UNDERSTUDY_*` variable from the caller.
fn understudy() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_understudy"));
    for (key, _) in std::env::vars() {
        if key.starts_with("UNDERSTUDY_") {
            command.env_remove(key);
        }
    }
    command
}

/// A port the OS just had free.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A server process, SIGKILLed when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ctl_health_exits_zero_against_a_running_node_and_nonzero_where_nothing_listens() {
    // The compose file's own health check, pointed at a local node.
    let check = &services()[0].health;
    let health = |port: u16| -> Output {
        let mut args: Vec<String> = check[2..].to_vec();
        let server = args
            .iter()
            .position(|a| a == "--server")
            .expect("the health check names its server");
        args[server + 1] = format!("http://127.0.0.1:{port}");
        understudy().args(&args).output().expect("ctl health runs")
    };

    // On port 0: the node's log says which port it bound.
    let mut node = Node(
        understudy()
            .args(["--http-port", "0", "--grpc-port", "0"])
            .args(["--log", "info"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the understudy binary starts"),
    );
    // The node logs that it serves, and where, once it leads its
    // one-member cluster.
    let log = BufReader::new(node.0.stderr.take().expect("a stderr pipe"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in log.lines().map_while(Result::ok) {
            if line.contains("serving the Nacos HTTP and gRPC APIs") {
                let port = line
                    .split_whitespace()
                    .find_map(|field| field.strip_prefix("http="))
                    .and_then(|addr| addr.rsplit_once(':'))
                    .and_then(|(_, port)| port.parse::<u16>().ok());
                let _ = tx.send(port);
            }
        }
    });
    let within = Duration::from_secs(30);
    let http = rx
        .recv_timeout(within)
        .unwrap_or_else(|_| panic!("the node did not serve within {within:?}"))
        .expect("the serving line names the HTTP address");
    let answer = health(http);
    assert!(
        answer.status.success(),
        "ctl health failed against a serving node: {}",
        String::from_utf8_lossy(&answer.stderr)
    );
    let stdout = String::from_utf8_lossy(&answer.stdout);
    assert!(stdout.contains("\"UP\""), "{stdout}");
    drop(node);

    let output = health(free_port());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach"), "{stderr}");
    assert!(stderr.contains("/ready"), "{stderr}");
}
