//! Running `understudy` binaries as a cluster: distinct free ports per
//! node, HTTP and gRPC on a Nacos pair (P, P + 1000) as every Nacos SDK
//! expects, the raft port on its own; a process is SIGKILLed when its
//! handle is dropped. The ports come from below the OS's ephemeral range,
//! where no port-0 bind of another test can take them before the node
//! binds them.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

// Not every test binary runs a Nacos client.
#[allow(dead_code)]
pub(crate) mod naming;

/// One `understudy` process.
pub(crate) struct Proc {
    /// Its node id.
    pub(crate) id: u64,
    /// Its HTTP port (gRPC is on HTTP + 1000).
    pub(crate) http: u16,
    /// The process, until it is killed.
    pub(crate) child: Option<Child>,
    /// Its command line, to start it again.
    args: Vec<String>,
}

impl Proc {
    /// SIGKILLs the process and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL a node");
            let _ = child.wait();
        }
    }
}

impl Proc {
    /// Starts the process again after a kill, with the same command line.
    #[allow(dead_code)] // not every test binary restarts a node
    pub(crate) fn restart(&mut self) {
        assert!(self.child.is_none(), "node {} is still running", self.id);
        self.child = Some(spawn(&self.args));
    }

    /// The process id, while it runs.
    #[allow(dead_code)] // not every test binary reads a node's memory
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERMs the process and waits (up to `within`) for it to exit;
    /// returns its exit status.
    #[allow(dead_code)] // not every test binary stops a node gracefully
    pub(crate) async fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running node");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("the kill command runs");
        assert!(sent.success(), "kill -TERM failed: {sent}");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("the node can be waited for") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("node {} did not exit within {within:?} of SIGTERM", self.id);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Ports handed out in this test process: two nodes never get the same.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Where the ports handed out come from: below the range the OS picks
/// port-0 binds from (Linux's `ip_local_port_range`), so no other test
/// binding port 0 can take one between the check here and the node's own
/// bind.
fn port_range() -> std::ops::Range<u16> {
    let floor = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    20_000..floor.max(24_000)
}

/// Whether `port` can be bound now.
fn bindable(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Distinct free ports from [`port_range`], the first `width` apart from
/// the second when a pair is wanted.
struct Picker {
    next: u16,
}

impl Picker {
    fn new() -> Self {
        // Start somewhere else in each process, so two test processes
        // running at once do not walk the same ports.
        let range = port_range();
        let span = u32::from(range.end - range.start);
        let seed = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
        Self {
            next: range.start + (seed % span) as u16,
        }
    }

    fn candidate(&mut self) -> u16 {
        let range = port_range();
        let port = self.next;
        self.next = if port + 1 >= range.end {
            range.start
        } else {
            port + 1
        };
        port
    }

    fn take(&mut self, ports: &[u16]) -> bool {
        let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
        if ports.iter().any(|p| taken.contains(p) || !bindable(*p)) {
            return false;
        }
        taken.extend(ports);
        true
    }

    fn one(&mut self) -> u16 {
        for _ in 0..20_000 {
            let port = self.candidate();
            if self.take(&[port]) {
                return port;
            }
        }
        panic!("no free port in {:?}", port_range())
    }

    fn nacos_pair(&mut self) -> (u16, u16) {
        let range = port_range();
        for _ in 0..20_000 {
            let http = self.candidate();
            let grpc = http + 1000;
            if grpc < range.end && self.take(&[http, grpc]) {
                return (http, grpc);
            }
        }
        panic!("no free port pair (P, P + 1000) in {range:?}")
    }
}

/// Runs the `understudy` binary with `args`, without any `UNDERSTUDY_*`
/// settings of the test's own environment.
fn spawn(args: &[String]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_understudy"));
    for (key, _) in std::env::vars() {
        if key.starts_with("UNDERSTUDY_") {
            command.env_remove(key);
        }
    }
    command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the understudy binary starts")
}

/// Starts one node per entry of `dcs` (ids 1, 2, ...) as one cluster,
/// each labelled with its DC and knowing its peers' DCs, with short raft
/// timings and `extra` arguments for every node (`{id}` in one becomes
/// the node's id).
pub(crate) fn start(dcs: &[&str], extra: &[&str]) -> Vec<Proc> {
    let n = dcs.len() as u64;
    let mut picker = Picker::new();
    let layout: Vec<(u16, u16, u16)> = (0..n)
        .map(|_| {
            let (http, grpc) = picker.nacos_pair();
            (http, grpc, picker.one())
        })
        .collect();
    (1..=n)
        .map(|id| {
            let (http, grpc, raft) = layout[(id - 1) as usize];
            let mut args: Vec<String> = [
                "--dc",
                dcs[(id - 1) as usize],
                "--node-id",
                &id.to_string(),
                "--http-port",
                &http.to_string(),
                "--grpc-port",
                &grpc.to_string(),
                "--raft-port",
                &raft.to_string(),
                "--raft-heartbeat-ms",
                "50",
                "--raft-election-timeout-ms",
                "300",
                "--write-timeout-ms",
                "2000",
                "--log",
                // Peers refusing connections after a kill are expected.
                "error,openraft=off",
            ]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
            args.extend(extra.iter().map(|a| a.replace("{id}", &id.to_string())));
            // One member list for every node, this one included.
            for peer in 1..=n {
                args.push("--peer".to_owned());
                args.push(format!(
                    "{peer}=127.0.0.1:{}@{}",
                    layout[(peer - 1) as usize].2,
                    dcs[(peer - 1) as usize]
                ));
            }
            Proc {
                id,
                http,
                child: Some(spawn(&args)),
                args,
            }
        })
        .collect()
}

/// A node's `/understudy/v1/cluster` answer, if it gives one.
pub(crate) async fn status(client: &reqwest::Client, http: u16) -> Option<Value> {
    let reply = client
        .get(format!("http://127.0.0.1:{http}/understudy/v1/cluster"))
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .ok()?;
    reply.json().await.ok()
}

/// Waits until every node in `nodes` names the same leader, one of them.
pub(crate) async fn agreed_leader(
    client: &reqwest::Client,
    nodes: &mut [&mut Proc],
    within: Duration,
) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let mut leaders = BTreeSet::new();
        for p in nodes.iter() {
            let leader = status(client, p.http)
                .await
                .and_then(|s| s["leader"].as_u64());
            leaders.insert(leader);
        }
        if leaders.len() == 1 {
            if let Some(Some(leader)) = leaders.iter().next().copied() {
                if nodes.iter().any(|p| p.id == leader) {
                    return leader;
                }
            }
        }
        for p in nodes.iter_mut() {
            if let Some(Ok(Some(exit))) = p.child.as_mut().map(Child::try_wait) {
                panic!("node {} exited early: {exit}", p.id);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader among the nodes: {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
