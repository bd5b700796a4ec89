//! Holding a request (see [`crate::races`]): the hold's action is applied
//! through the write path like any instance update, then the request
//! waits until its connection has acknowledged a push of the service at
//! least as new as that change, and goes on.

use understudy_core::{Op, UpdateMode};
use understudy_proto::nacos_rpc::Envelope;

use super::conn::Conn;
use crate::node::Node;
use crate::races::Held;

/// What a held request was, for the trace: its type and the service it
/// names, if any.
pub(super) fn describe(envelope: &Envelope) -> String {
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Named {
        group_name: Option<String>,
        service_name: Option<String>,
    }
    let named = envelope.decode::<Named>().unwrap_or_default();
    match (named.group_name, named.service_name) {
        (Some(group), Some(service)) => format!("{} {group}@@{service}", envelope.kind),
        (None, Some(service)) => format!("{} {service}", envelope.kind),
        _ => envelope.kind.clone(),
    }
}

/// Holds the request `held` stopped until its action's push (or, without
/// an action, the service's next change's push) is acknowledged by
/// `conn`, or the hold times out or is cleared.
pub(super) async fn hold(node: &Node, conn: &Conn, held: Held) {
    let races = node.races();
    let key = &held.spec.service;
    let before = node.registry().service(key).map_or(0, |s| s.revision());
    let target = match &held.spec.action {
        None => before + 1,
        Some(action) => {
            races.record(
                &conn.id,
                key,
                "actionProposed",
                None,
                Some(action.to_string()),
                node.now(),
            );
            let applied = node
                .propose(Op::UpdateInstance {
                    service: key.clone(),
                    key: action.key.clone(),
                    patch: action.patch.clone(),
                    mode: UpdateMode::Overlay,
                })
                .await;
            let revision = match applied {
                Ok(applied) => applied.changes.iter().map(|c| c.revision).max(),
                Err(e) => {
                    let reason = format!("the action failed: {e}");
                    races.record(
                        &conn.id,
                        key,
                        "actionFailed",
                        None,
                        Some(reason.clone()),
                        node.now(),
                    );
                    races.release(held.id, &conn.id, reason, node.now());
                    return;
                }
            };
            races.record(&conn.id, key, "actionApplied", revision, None, node.now());
            let Some(revision) = revision else {
                races.release(
                    held.id,
                    &conn.id,
                    "the action changed nothing".into(),
                    node.now(),
                );
                return;
            };
            revision
        }
    };
    let acknowledged = || {
        conn.subscriber
            .acked_revision(key)
            .is_some_and(|acked| acked >= target)
    };
    races
        .wait_for(held.spec.timeout, || {
            acknowledged() || races.cleared(held.id)
        })
        .await;
    let outcome = if acknowledged() {
        format!("revision {target} acknowledged")
    } else if races.cleared(held.id) {
        "cleared".to_owned()
    } else {
        format!(
            "timed out after {} ms: revision {target} not acknowledged",
            held.spec.timeout.as_millis()
        )
    };
    races.release(held.id, &conn.id, outcome, node.now());
}
