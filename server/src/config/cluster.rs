//! The cluster's settings group: the raft port and address, the peers,
//! the shared secret, raft's timings, and the owner and quorum-loss
//! periods.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::member::Member;

use super::groups::{ms, positive_ms};
use super::{invalid, ConfigError, Settings};

/// Replication settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The raft port.
    pub raft_port: u16,
    /// Where the other members reach this node's raft port; derived from
    /// the bind address and the raft port unless set.
    pub advertise: String,
    /// The other members, by id (empty: a single node). The member list
    /// given may name this node too; it is not kept here.
    pub peers: BTreeMap<u64, Member>,
    /// The shared secret, if any.
    pub secret: Option<String>,
    /// Heartbeat period.
    pub heartbeat: Duration,
    /// Shortest election timeout (the longest is twice it).
    pub election_timeout: Duration,
    /// How long the leader waits for a silent member before removing what
    /// its connections own.
    pub owner_grace: Duration,
    /// How long a node cut off from the majority keeps its gRPC clients
    /// before sending them elsewhere.
    pub quorum_loss_reset: Duration,
    /// The openraft work-arounds; not a setting (always on), so that only
    /// a test can turn one off.
    pub workarounds: Workarounds,
}

impl ClusterConfig {
    /// The defaults for a node bound to `bind`.
    pub(super) fn default_at(bind: std::net::IpAddr) -> Self {
        let raft_port = 7848;
        Self {
            raft_port,
            advertise: std::net::SocketAddr::new(bind, raft_port).to_string(),
            peers: BTreeMap::new(),
            secret: None,
            // A follower that heard from its leader starts an election
            // only after the leader's lease (the longest election
            // timeout, twice the shortest) and its own timeout have run
            // out, and wins it at once: a dead leader is replaced after
            // three to four times this. `load failover` measured 1.06 s
            // with 300 ms, 0.70 s with 200 ms (max 0.76 s over 5 kills).
            heartbeat: Duration::from_millis(50),
            election_timeout: Duration::from_millis(200),
            owner_grace: Duration::from_secs(20),
            quorum_loss_reset: Duration::from_secs(10),
            workarounds: Workarounds::default(),
        }
    }

    /// Reads the group. The member list may name this node too (one list
    /// for every node, as etcd's `--initial-cluster` or Nacos'
    /// `cluster.conf`): its entry must agree with this node's raft
    /// address, which it gives when `raft_advertise` is unset, and with
    /// its DC, which it gives when `dc` is unset (the second value
    /// returned).
    pub(super) fn read(
        s: &Settings,
        bind: std::net::IpAddr,
        node_id: u64,
    ) -> Result<(Self, Option<String>), ConfigError> {
        let d = Self::default_at(bind);
        let mut peers = BTreeMap::new();
        let mut listed_self: Option<(&str, Member)> = None;
        for text in s.peers.iter().flatten().filter(|p| !p.trim().is_empty()) {
            let (id, member) = parse_peer(text)?;
            let repeated = if id == node_id {
                listed_self.replace((text, member)).is_some()
            } else {
                peers.insert(id, member).is_some()
            };
            if repeated {
                return Err(invalid("peer", format!("node id {id} is given twice")));
            }
        }
        let secret = s.cluster_secret.clone().filter(|secret| !secret.is_empty());
        if let Some(secret) = &secret {
            if !secret.chars().all(|c| c.is_ascii_graphic()) {
                return Err(invalid(
                    "cluster_secret",
                    "must be visible ASCII characters without spaces",
                ));
            }
        }
        let heartbeat = positive_ms("raft_heartbeat_ms", s.raft_heartbeat_ms, d.heartbeat)?;
        let election_timeout = positive_ms(
            "raft_election_timeout_ms",
            s.raft_election_timeout_ms,
            d.election_timeout,
        )?;
        if election_timeout <= heartbeat {
            return Err(invalid(
                "raft_election_timeout_ms",
                "must be longer than raft_heartbeat_ms",
            ));
        }
        let owner_grace = positive_ms("owner_grace_ms", s.owner_grace_ms, d.owner_grace)?;
        let quorum_loss_reset = positive_ms(
            "quorum_loss_reset_ms",
            s.quorum_loss_reset_ms,
            d.quorum_loss_reset,
        )?;
        if quorum_loss_reset >= owner_grace {
            return Err(invalid(
                "quorum_loss_reset_ms",
                "must be shorter than owner_grace_ms, so clients move before their owner is lost",
            ));
        }
        if owner_grace <= election_timeout {
            return Err(invalid(
                "owner_grace_ms",
                "must be longer than raft_election_timeout_ms",
            ));
        }
        let raft_port = s.raft_port.unwrap_or(d.raft_port);
        if let Some((text, member)) = &listed_self {
            check_listed_self(text, member, s, bind, node_id, raft_port)?;
        }
        let advertise = match &s.raft_advertise {
            None if listed_self.is_some() => listed_self.as_ref().unwrap().1.raft_addr.clone(),
            Some(address) => {
                let fine = address
                    .rsplit_once(':')
                    .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
                if !fine {
                    return Err(invalid(
                        "raft_advertise",
                        format!("'{address}' is not HOST:PORT"),
                    ));
                }
                address.clone()
            }
            None if bind.is_unspecified() && !peers.is_empty() => {
                return Err(invalid(
                    "raft_advertise",
                    format!("bind {bind} is no address peers can reach; set raft_advertise"),
                ))
            }
            None => std::net::SocketAddr::new(bind, raft_port).to_string(),
        };
        let listed_dc = listed_self
            .map(|(_, member)| member.dc)
            .filter(|dc| !dc.is_empty());
        let config = Self {
            raft_port,
            advertise,
            peers,
            secret,
            heartbeat,
            election_timeout,
            owner_grace,
            quorum_loss_reset,
            workarounds: d.workarounds,
        };
        Ok((config, listed_dc))
    }

    pub(super) fn lower(&self, s: &mut Settings) {
        s.raft_port = Some(self.raft_port);
        s.raft_advertise = Some(self.advertise.clone());
        s.peers = Some(
            self.peers
                .iter()
                .map(|(id, member)| match member.dc.as_str() {
                    "" => format!("{id}={}", member.raft_addr),
                    dc => format!("{id}={}@{dc}", member.raft_addr),
                })
                .collect(),
        );
        s.cluster_secret = self.secret.clone();
        s.raft_heartbeat_ms = Some(ms(self.heartbeat));
        s.raft_election_timeout_ms = Some(ms(self.election_timeout));
        s.owner_grace_ms = Some(ms(self.owner_grace));
        s.quorum_loss_reset_ms = Some(ms(self.quorum_loss_reset));
    }
}

/// Checks this node's own entry in the member list against what it is
/// told elsewhere: the entry must not contradict `raft_advertise`, the raft
/// port, an IP address it binds, or `dc`.
fn check_listed_self(
    text: &str,
    member: &Member,
    s: &Settings,
    bind: std::net::IpAddr,
    node_id: u64,
    raft_port: u16,
) -> Result<(), ConfigError> {
    let bad = |why: String| {
        Err(invalid(
            "peer",
            format!("'{text}' is this node (id {node_id}), {why}"),
        ))
    };
    if let Some(advertise) = &s.raft_advertise {
        if *advertise != member.raft_addr {
            return bad(format!("but raft_advertise is '{advertise}'"));
        }
    } else {
        let (host, port) = member
            .raft_addr
            .rsplit_once(':')
            .expect("a parsed member address has a port");
        if port.parse::<u16>().ok() != Some(raft_port) {
            return bad(format!("but it listens on raft_port {raft_port}"));
        }
        let listed_ip = host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>();
        if let Ok(ip) = listed_ip {
            if !bind.is_unspecified() && ip != bind {
                return bad(format!(
                    "but it binds {bind}; set raft_advertise if the others reach it through another address"
                ));
            }
        }
    }
    match &s.dc {
        Some(dc) if !member.dc.is_empty() && *dc != member.dc => {
            bad(format!("but its dc is '{dc}'"))
        }
        _ => Ok(()),
    }
}

/// Parses `ID=HOST:PORT` or `ID=HOST:PORT@DC`.
fn parse_peer(text: &str) -> Result<(u64, Member), ConfigError> {
    let bad = |why: String| invalid("peer", format!("'{text}' {why}"));
    let (id, rest) = text
        .split_once('=')
        .ok_or_else(|| bad("is not ID=HOST:RAFT_PORT".into()))?;
    let id: u64 = id
        .trim()
        .parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| bad("needs a positive node id before '='".into()))?;
    let (address, dc) = match rest.rsplit_once('@') {
        Some((address, dc)) if !dc.is_empty() => (address.trim(), dc.trim()),
        _ => (rest.trim(), ""),
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("needs HOST:RAFT_PORT after '='".into()))?;
    if host.is_empty() || port.parse::<u16>().ok().filter(|p| *p > 0).is_none() {
        return Err(bad("needs a host and a port 1..=65535".into()));
    }
    Ok((
        id,
        Member {
            raft_addr: address.to_owned(),
            dc: dc.to_owned(),
        },
    ))
}

/// The work-arounds for what openraft 0.9 lacks, each on unless a test
/// turns it off to see what it buys:
/// - `election_gate` (`raft/gate.rs`): raft's pre-vote. A node that cannot
///   reach a majority of the voters does not campaign, so it does not
///   raise its term while cut off and depose a working leader when the
///   partition heals.
/// - `commit_relay` (`raft/relay.rs`): pipelined delivery of committed entries.
///   openraft keeps one append in flight per follower and tells it what is
///   committed only in the next one, so over a slow link a follower's view
///   would trail by two to three one-way latencies instead of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workarounds {
    /// Whether the election gate runs.
    pub election_gate: bool,
    /// Whether the commit relay runs.
    pub commit_relay: bool,
}

impl Default for Workarounds {
    fn default() -> Self {
        Self {
            election_gate: true,
            commit_relay: true,
        }
    }
}
