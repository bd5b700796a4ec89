//! A node's cluster operations: log compaction, membership changes, the
//! status and report of the cluster, fault settings across nodes, the
//! admin requests peers send, and the hand-over of leadership at shutdown.

use super::Node;

/// Why a compaction did not finish.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// Raft has stopped.
    #[error("raft stopped: {0}")]
    Stopped(#[from] openraft::error::Fatal<crate::raft::NodeId>),
    /// The snapshot or the purge did not happen in time.
    #[error(transparent)]
    Wait(#[from] openraft::metrics::WaitError),
}

impl Node {
    /// Compacts this node's raft log now: a snapshot of everything
    /// applied, then the log purged up to it (raft also does this by
    /// itself every 1,000 entries). Answers the index compacted to.
    pub async fn compact(&self) -> Result<Option<u64>, CompactError> {
        const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
        let raft = self.raft();
        let Some(applied) = raft.metrics().borrow().last_applied else {
            return Ok(None);
        };
        // A trigger while a snapshot is being built is dropped: trigger
        // again until one covers everything applied.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            raft.trigger().snapshot().await?;
            let built = raft
                .wait(Some(std::time::Duration::from_secs(1)))
                .metrics(
                    |m| m.snapshot.is_some_and(|s| s.index >= applied.index),
                    "the snapshot is built",
                )
                .await;
            match built {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e.into()),
                Err(_) => {}
            }
        }
        raft.trigger().purge_log(applied.index).await?;
        raft.wait(Some(WAIT))
            .metrics(
                |m| m.purged.is_some_and(|p| p.index >= applied.index),
                "the log is purged",
            )
            .await?;
        Ok(Some(applied.index))
    }

    /// The raft handle (a single node is a one-member cluster).
    pub fn raft(&self) -> &crate::raft::Raft {
        &self.inner.parts.raft
    }

    /// Adds a member: as a learner first (it catches up, by snapshot if the
    /// log was compacted), then, for a voter, promoted. Must run on the
    /// leader; elsewhere the error names the leader.
    pub async fn add_member(
        &self,
        id: crate::raft::NodeId,
        member: crate::raft::Member,
        voter: crate::raft::Voting,
    ) -> Result<(), crate::raft::MembershipError> {
        use crate::raft::MembershipError;
        let raft = &self.inner.parts.raft;
        MembershipError::unless_leading(raft)?;
        raft.add_learner(id, member, true)
            .await
            .map_err(MembershipError::from_raft)?;
        if voter == crate::raft::Voting::Voter {
            raft.change_membership(
                openraft::ChangeMembers::AddVoterIds(std::collections::BTreeSet::from([id])),
                false,
            )
            .await
            .map_err(MembershipError::from_raft)?;
        }
        Ok(())
    }

    /// Removes a member (voter or learner).
    pub async fn remove_member(
        &self,
        id: crate::raft::NodeId,
    ) -> Result<(), crate::raft::MembershipError> {
        use crate::raft::MembershipError;
        let raft = &self.inner.parts.raft;
        MembershipError::unless_leading(raft)?;
        let ids = std::collections::BTreeSet::from([id]);
        let is_voter = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id);
        if is_voter {
            raft.change_membership(openraft::ChangeMembers::RemoveVoters(ids.clone()), false)
                .await
                .map_err(MembershipError::from_raft)?;
        }
        raft.change_membership(openraft::ChangeMembers::RemoveNodes(ids), false)
            .await
            .map_err(MembershipError::from_raft)?;
        Ok(())
    }

    /// This node's view of the cluster.
    pub fn cluster_status(&self) -> crate::raft::ClusterStatus {
        let revision = self.registry().revision();
        crate::raft::ClusterStatus::of(
            &self.inner.parts.raft,
            &self.inner.parts.config.dc,
            revision,
        )
    }

    /// This node's own state.
    pub fn node_status(&self) -> crate::raft::NodeStatus {
        crate::raft::NodeStatus {
            cluster: self.cluster_status(),
            view_lag_ms: self.view_lag().map(|l| l.as_millis() as u64),
            register_to_visible: self.inner.parts.view.register_to_visible(),
        }
    }

    /// Every member (voters and learners) as this node knows them.
    pub fn members(&self) -> Vec<(crate::raft::NodeId, crate::raft::Member)> {
        self.raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, m)| (*id, m.clone()))
            .collect()
    }

    /// Every member's status: this node's own, the others' asked out of
    /// band (so a partitioned member still answers), each within
    /// `timeout`.
    pub async fn cluster_report(
        &self,
        timeout: std::time::Duration,
    ) -> Vec<crate::raft::NodeReport> {
        use crate::raft::network::{AdminReply, AdminRequest};
        let members = self.members();
        let asks = members.into_iter().map(|(id, member)| async move {
            let (status, error) = if id == self.inner.parts.config.node_id {
                (Some(self.node_status()), None)
            } else {
                match self
                    .inner
                    .parts
                    .network
                    .admin(id, &member, &AdminRequest::Status, timeout)
                    .await
                {
                    Ok(AdminReply::Status(status)) => (Some(*status), None),
                    Ok(other) => (None, Some(format!("unexpected answer {other:?}"))),
                    Err(e) => (None, Some(e.to_string())),
                }
            };
            crate::raft::NodeReport {
                id,
                dc: member.dc,
                status,
                error,
            }
        });
        futures_util::future::join_all(asks).await
    }

    /// This node's Nacos gRPC connections that subscribe to the service,
    /// or listen to the config, `query` names.
    pub(crate) fn clients_here(
        &self,
        query: &crate::raft::network::ClientsQuery,
    ) -> Result<Vec<crate::raft::network::ConnectedClient>, String> {
        use crate::raft::network::ConnectedClient;
        let connected = |c: &crate::clients::ClientInfo, md5: String| ConnectedClient {
            id: c.id.clone(),
            ip: c.ip.clone(),
            port: c.port,
            version: c.version.clone(),
            app_name: c.app_name.clone(),
            last_active_ms: c.last_active,
            md5,
        };
        let Some(clients) = self.clients() else {
            return Ok(Vec::new());
        };
        if query.config {
            let namespace = understudy_core::NamespaceId::parse(&query.namespace)
                .map_err(|e| format!("namespace: {e}"))?;
            let group = match query.group.trim() {
                "" => understudy_core::DEFAULT_GROUP.to_owned(),
                group => group.to_owned(),
            };
            let key = understudy_core::ConfigKey {
                namespace,
                group,
                data_id: query.name.clone(),
            };
            Ok(clients
                .listeners(&key)
                .into_iter()
                .map(|(c, md5)| connected(&c, md5))
                .collect())
        } else {
            let key =
                understudy_core::ServiceKey::parse(&query.namespace, &query.group, &query.name)
                    .map_err(|e| format!("service: {e}"))?;
            Ok(clients
                .subscribers(&key)
                .iter()
                .map(|c| connected(c, String::new()))
                .collect())
        }
    }

    /// Every member's Nacos gRPC connections that subscribe to the service,
    /// or listen to the config, `query` names: by member, with its DC, and
    /// why a member could not say (within `timeout`).
    pub async fn clients_everywhere(
        &self,
        query: &crate::raft::network::ClientsQuery,
        timeout: std::time::Duration,
    ) -> Vec<(
        crate::raft::NodeId,
        String,
        Result<Vec<crate::raft::network::ConnectedClient>, String>,
    )> {
        use crate::raft::network::{AdminReply, AdminRequest};
        let me = self.inner.parts.config.node_id;
        let request = AdminRequest::Clients(query.clone());
        let asks = self.members().into_iter().map(|(id, member)| {
            let request = &request;
            async move {
                let answer = if id == me {
                    self.clients_here(query)
                } else {
                    match self
                        .inner
                        .parts
                        .network
                        .admin(id, &member, request, timeout)
                        .await
                    {
                        Ok(AdminReply::Clients(clients)) => Ok(clients),
                        Ok(AdminReply::Refused(why)) => Err(why),
                        Ok(other) => Err(format!("unexpected answer {other:?}")),
                        Err(e) => Err(e.to_string()),
                    }
                };
                (id, member.dc, answer)
            }
        });
        futures_util::future::join_all(asks).await
    }

    /// Changes the fault model here and hands it to every other member out
    /// of band; answers the members that could not be told.
    pub async fn set_faults(
        &self,
        state: &crate::faults::FaultState,
    ) -> Result<Vec<(crate::raft::NodeId, String)>, crate::faults::InvalidLink> {
        use crate::raft::network::{AdminReply, AdminRequest};
        self.faults().set_state(state)?;
        let me = self.inner.parts.config.node_id;
        let mut members = self.members();
        members.retain(|(id, _)| *id != me);
        let request = AdminRequest::SetFaults(state.clone());
        let tells = members.into_iter().map(|(id, member)| {
            let request = &request;
            async move {
                let answer = self
                    .inner
                    .parts
                    .network
                    .admin(id, &member, request, std::time::Duration::from_secs(2))
                    .await;
                match answer {
                    Ok(AdminReply::Faults(_)) => None,
                    Ok(AdminReply::Refused(why)) => Some((id, why)),
                    Ok(other) => Some((id, format!("unexpected answer {other:?}"))),
                    Err(e) => Some((id, e.to_string())),
                }
            }
        });
        Ok(futures_util::future::join_all(tells)
            .await
            .into_iter()
            .flatten()
            .collect())
    }

    pub(crate) fn answer_admin(
        &self,
        request: crate::raft::network::AdminRequest,
    ) -> crate::raft::network::AdminReply {
        use crate::raft::network::{AdminReply, AdminRequest};
        match request {
            AdminRequest::Status => AdminReply::Status(Box::new(self.node_status())),
            // Answered by the transport itself.
            AdminRequest::Ping => AdminReply::Pong,
            AdminRequest::SetFaults(state) => match self.faults().set_state(&state) {
                Ok(()) => AdminReply::Faults(self.faults().state()),
                Err(e) => AdminReply::Refused(e.to_string()),
            },
            AdminRequest::Clients(query) => match self.clients_here(&query) {
                Ok(clients) => AdminReply::Clients(clients),
                Err(why) => AdminReply::Refused(why),
            },
            AdminRequest::TakeOver => {
                self.inner.parts.tasks.spawn(take_over(
                    self.inner.parts.raft.clone(),
                    self.inner.parts.config.node_id,
                    self.inner.parts.config.cluster.election_timeout,
                ));
                AdminReply::TakingOver
            }
        }
    }

    /// Before this node stops: if it leads a cluster with other voters,
    /// asks the most up-to-date of them to take over (after waiting up to
    /// an election timeout for one to hold the whole log), stops its own
    /// raft so its heartbeats end, and waits within `within` until that
    /// voter leads. openraft 0.9 has no leadership transfer; the voters'
    /// leader leases let the election succeed once the old leader's last
    /// heartbeat is an election timeout (at most twice it) old. Returns
    /// the new leader, if it was seen leading.
    pub async fn hand_over(&self, within: std::time::Duration) -> Option<crate::raft::NodeId> {
        use crate::raft::network::{AdminReply, AdminRequest};
        let me = self.inner.parts.config.node_id;
        if !self.leads() {
            return None;
        }
        let started = tokio::time::Instant::now();
        let cluster = &self.inner.parts.config.cluster;
        let heartbeat = cluster.heartbeat;
        let catch_up = started + cluster.election_timeout;
        let target = loop {
            let status = self.cluster_status();
            let best = status
                .members
                .iter()
                .filter(|m| m.voter && m.id != me)
                .max_by_key(|m| m.matched.unwrap_or(0));
            let best = best?;
            if best.matched >= Some(status.last_log) || tokio::time::Instant::now() >= catch_up {
                break best.id;
            }
            tokio::time::sleep(heartbeat).await;
        };
        let member = self.members().into_iter().find(|(id, _)| *id == target)?.1;
        let asked = self
            .inner
            .parts
            .network
            .admin(target, &member, &AdminRequest::TakeOver, heartbeat * 10)
            .await;
        if let Err(e) = self.inner.parts.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not stop cleanly");
        }
        match asked {
            Ok(AdminReply::TakingOver) => {
                tracing::info!(node = target, "stepped down; node {target} is taking over")
            }
            other => {
                tracing::warn!(node = target, answer = ?other, "stepped down; node {target} did not take over, the others will elect a leader");
                return None;
            }
        }
        let deadline = started + within;
        while tokio::time::Instant::now() < deadline {
            let asked = self
                .inner
                .parts
                .network
                .admin(target, &member, &AdminRequest::Status, heartbeat * 5)
                .await;
            if let Ok(AdminReply::Status(status)) = asked {
                if status.cluster.role == crate::raft::Role::Leader {
                    tracing::info!(
                        node = target,
                        after_ms = started.elapsed().as_millis() as u64,
                        "node {target} leads now"
                    );
                    return Some(target);
                }
            }
            tokio::time::sleep(heartbeat).await;
        }
        tracing::warn!(
            node = target,
            ?within,
            "node {target} did not lead within the grace period"
        );
        None
    }

    /// Whether this node leads its cluster (a single node, once formed).
    pub fn leads(&self) -> bool {
        crate::raft::leads(&self.inner.parts.raft, self.inner.parts.config.node_id)
    }

    /// How long this node has been cut off from a working majority: a
    /// leader that no quorum acknowledged within an election timeout, a
    /// follower or learner that heard nothing from a leader for as long.
    /// `None` while it is part of one (always, for a single member).
    pub fn quorum_lost_for(&self) -> Option<std::time::Duration> {
        let (raft, network) = (&self.inner.parts.raft, &self.inner.parts.network);
        let me = self.inner.parts.config.node_id;
        let timeout = self.inner.parts.config.cluster.election_timeout;
        let now = tokio::time::Instant::now();
        let healthy = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            let mut voters = metrics.membership_config.membership().voter_ids();
            if voters.next() == Some(me) && voters.next().is_none() {
                true
            } else if metrics.current_leader == Some(me) {
                metrics
                    .millis_since_quorum_ack
                    .is_some_and(|ms| std::time::Duration::from_millis(ms) < timeout)
            } else {
                metrics
                    .current_leader
                    .and_then(|leader| network.contacts().last(leader))
                    .is_some_and(|heard| now.saturating_duration_since(heard) < timeout)
            }
        };
        let mut seen = self
            .inner
            .quorum_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if healthy {
            *seen = now;
            return None;
        }
        let lost = now.saturating_duration_since(*seen);
        (lost >= timeout).then_some(lost)
    }

    /// When each raft peer was last heard from.
    pub(crate) fn contacts(&self) -> &crate::raft::network::Contacts {
        self.inner.parts.network.contacts()
    }
}

/// Runs for leader until this node leads, a little longer than the
/// voters' leader leases (twice the election timeout) allow it to take.
async fn take_over(
    raft: crate::raft::Raft,
    me: crate::raft::NodeId,
    election_timeout: std::time::Duration,
) {
    let round = election_timeout / 2;
    let deadline = tokio::time::Instant::now() + round * 10;
    while tokio::time::Instant::now() < deadline {
        if crate::raft::leads(&raft, me) {
            return;
        }
        if let Err(e) = raft.trigger().elect().await {
            tracing::warn!(error = %e, "cannot run for leader");
            return;
        }
        tokio::time::sleep(round).await;
    }
    tracing::warn!("did not become leader after the old leader stepped down");
}
