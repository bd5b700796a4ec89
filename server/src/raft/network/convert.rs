//! The peer service's messages for a node's status and fault model, to and
//! from the server's own types.

use std::time::Duration;

use understudy_proto::peer;

use super::super::{ClusterStatus, MemberStatus, NodeStatus, Role};
use crate::faults::{DcLink, FaultState, Link, PushFault};
use crate::view::DelaySummary;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl From<&NodeStatus> for peer::NodeStatus {
    fn from(s: &NodeStatus) -> Self {
        let c = &s.cluster;
        Self {
            node_id: c.node_id,
            dc: c.dc.clone(),
            role: peer::Role::from(c.role).into(),
            term: c.term,
            leader: c.leader,
            last_applied: c.last_applied,
            last_log: c.last_log,
            revision: c.revision,
            members: c
                .members
                .iter()
                .map(|m| peer::MemberStatus {
                    id: m.id,
                    dc: m.dc.clone(),
                    raft_addr: m.raft_addr.clone(),
                    voter: m.voter,
                    matched: m.matched,
                })
                .collect(),
            view_lag_ms: s.view_lag_ms,
            register_to_visible: Some(peer::DelaySummary {
                count: s.register_to_visible.count,
                p50_ms: s.register_to_visible.p50_ms,
                p99_ms: s.register_to_visible.p99_ms,
                max_ms: s.register_to_visible.max_ms,
            }),
        }
    }
}

impl From<Role> for peer::Role {
    fn from(role: Role) -> Self {
        match role {
            Role::Leader => peer::Role::Leader,
            Role::Follower => peer::Role::Follower,
            Role::Candidate => peer::Role::Candidate,
            Role::Learner => peer::Role::Learner,
            Role::Shutdown => peer::Role::Shutdown,
        }
    }
}

/// A peer's answer that does not say what it should.
#[derive(Debug, thiserror::Error)]
#[error("a peer's status names no role it knows ({0})")]
pub struct UnknownRole(pub(super) i32);

impl TryFrom<peer::NodeStatus> for NodeStatus {
    type Error = UnknownRole;

    fn try_from(s: peer::NodeStatus) -> Result<Self, UnknownRole> {
        let delays = s.register_to_visible.unwrap_or_default();
        let role = match peer::Role::try_from(s.role) {
            Ok(peer::Role::Leader) => Role::Leader,
            Ok(peer::Role::Follower) => Role::Follower,
            Ok(peer::Role::Candidate) => Role::Candidate,
            Ok(peer::Role::Learner) => Role::Learner,
            Ok(peer::Role::Shutdown) => Role::Shutdown,
            Ok(peer::Role::Unspecified) | Err(_) => return Err(UnknownRole(s.role)),
        };
        Ok(Self {
            cluster: ClusterStatus {
                node_id: s.node_id,
                dc: s.dc,
                role,
                term: s.term,
                leader: s.leader,
                last_applied: s.last_applied,
                last_log: s.last_log,
                revision: s.revision,
                members: s
                    .members
                    .into_iter()
                    .map(|m| MemberStatus {
                        id: m.id,
                        dc: m.dc,
                        raft_addr: m.raft_addr,
                        voter: m.voter,
                        matched: m.matched,
                    })
                    .collect(),
            },
            view_lag_ms: s.view_lag_ms,
            register_to_visible: DelaySummary {
                count: delays.count,
                p50_ms: delays.p50_ms,
                p99_ms: delays.p99_ms,
                max_ms: delays.max_ms,
            },
        })
    }
}

impl From<&FaultState> for peer::FaultState {
    fn from(s: &FaultState) -> Self {
        Self {
            seed: s.seed,
            links: s
                .links
                .iter()
                .map(|l| peer::DcLink {
                    from: l.from.clone(),
                    to: l.to.clone(),
                    link: Some(peer::Link {
                        cut: l.link.cut,
                        latency_us: micros(l.link.delay),
                        jitter_us: micros(l.link.jitter),
                        loss: l.link.loss,
                    }),
                })
                .collect(),
            apply_delays_ms: s.apply_delays_ms.clone().into_iter().collect(),
            push_faults: s
                .push_faults
                .iter()
                .map(|(dc, f)| {
                    let fault = peer::PushFault {
                        delay_us: micros(f.delay),
                        drop: f.drop,
                    };
                    (dc.clone(), fault)
                })
                .collect(),
            config_read_lags_ms: s.config_read_lags_ms.clone().into_iter().collect(),
            paused: s.paused.clone(),
        }
    }
}

impl From<peer::FaultState> for FaultState {
    fn from(s: peer::FaultState) -> Self {
        Self {
            seed: s.seed,
            links: s
                .links
                .into_iter()
                .map(|l| {
                    let link = l.link.unwrap_or_default();
                    DcLink {
                        from: l.from,
                        to: l.to,
                        link: Link {
                            cut: link.cut,
                            delay: Duration::from_micros(link.latency_us),
                            jitter: Duration::from_micros(link.jitter_us),
                            loss: link.loss,
                        },
                    }
                })
                .collect(),
            apply_delays_ms: s.apply_delays_ms.into_iter().collect(),
            push_faults: s
                .push_faults
                .into_iter()
                .map(|(dc, f)| {
                    let fault = PushFault {
                        delay: Duration::from_micros(f.delay_us),
                        drop: f.drop,
                    };
                    (dc, fault)
                })
                .collect(),
            config_read_lags_ms: s.config_read_lags_ms.into_iter().collect(),
            paused: s.paused,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_fault_model_survives_the_trip() {
        let state = FaultState {
            seed: 9,
            links: vec![DcLink {
                from: "hz".into(),
                to: "sh".into(),
                link: Link {
                    cut: false,
                    delay: Duration::from_micros(40_250),
                    jitter: Duration::from_millis(5),
                    loss: 0.01,
                },
            }],
            apply_delays_ms: BTreeMap::from([("sh".to_owned(), 500)]),
            push_faults: BTreeMap::from([(
                "hz".to_owned(),
                PushFault {
                    delay: Duration::from_millis(20),
                    drop: 0.5,
                },
            )]),
            config_read_lags_ms: BTreeMap::from([("sh".to_owned(), 500), ("hz".to_owned(), 1)]),
            paused: vec![2, 3],
        };
        assert_eq!(FaultState::from(peer::FaultState::from(&state)), state);
    }
}
