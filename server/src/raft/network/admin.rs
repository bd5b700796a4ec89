//! The admin calls a node makes of its peers (status, fault settings,
//! take-over, pings), each a call of the peer service with its own typed
//! messages.

use std::time::Duration;

use understudy_proto::peer;

use super::{AdminReply, AdminRequest, CallError, Member, Network, NodeId};

impl Network {
    /// Sends `request` to `target` (at `member`): out of band, except a
    /// ping.
    pub async fn admin(
        &self,
        target: NodeId,
        member: &Member,
        request: &AdminRequest,
        timeout: Duration,
    ) -> Result<AdminReply, CallError> {
        let route = Some(peer::Route {
            from: self.shared.node_id,
            to: target,
        });
        match request {
            AdminRequest::Status => {
                let request = self.request(peer::StatusRequest { route }, timeout);
                let reply = self
                    .carry(target, member, timeout, false, |mut peer| async move {
                        peer.status(request).await
                    })
                    .await?;
                let status = reply.status.ok_or(CallError::Incomplete("a status"))?;
                let status = status
                    .try_into()
                    .map_err(|e: super::convert::UnknownRole| CallError::Unknown {
                        what: "role",
                        value: e.0,
                    })?;
                Ok(AdminReply::Status(Box::new(status)))
            }
            AdminRequest::SetFaults(state) => {
                let faults = Some(peer::FaultState::from(state));
                let request = self.request(peer::SetFaultsRequest { route, faults }, timeout);
                let reply = self
                    .carry(target, member, timeout, false, |mut peer| async move {
                        peer.set_faults(request).await
                    })
                    .await?;
                match reply.outcome {
                    Some(peer::set_faults_reply::Outcome::Faults(faults)) => {
                        Ok(AdminReply::Faults(faults.into()))
                    }
                    Some(peer::set_faults_reply::Outcome::Refused(why)) => {
                        Ok(AdminReply::Refused(why))
                    }
                    None => Err(CallError::Incomplete("an outcome")),
                }
            }
            AdminRequest::TakeOver => {
                let request = self.request(peer::TakeOverRequest { route }, timeout);
                let reply = self
                    .carry(target, member, timeout, false, |mut peer| async move {
                        peer.take_over(request).await
                    })
                    .await?;
                Ok(if reply.refused.is_empty() {
                    AdminReply::TakingOver
                } else {
                    AdminReply::Refused(reply.refused)
                })
            }
            AdminRequest::Clients(query) => {
                let request = self.request(
                    peer::ClientsRequest {
                        route,
                        namespace: query.namespace.clone(),
                        group: query.group.clone(),
                        name: query.name.clone(),
                        config: query.config,
                    },
                    timeout,
                );
                let reply = self
                    .carry(target, member, timeout, false, |mut peer| async move {
                        peer.clients(request).await
                    })
                    .await?;
                Ok(AdminReply::Clients(
                    reply.clients.into_iter().map(Into::into).collect(),
                ))
            }
            AdminRequest::Ping => {
                let request = self.request(peer::PingRequest { route }, timeout);
                self.carry(target, member, timeout, true, |mut peer| async move {
                    peer.ping(request).await
                })
                .await?;
                Ok(AdminReply::Pong)
            }
        }
    }

    /// Pings `target` through the link faults; an answer counts as
    /// contact.
    pub async fn ping(
        &self,
        target: NodeId,
        member: &Member,
        timeout: Duration,
    ) -> Result<AdminReply, CallError> {
        self.admin(target, member, &AdminRequest::Ping, timeout)
            .await
    }
}
