//! Nacos 3's fuzzy watch requests: `NamingFuzzyWatchRequest` and
//! `ConfigFuzzyWatchRequest` start (`WATCH`) or end (`CANCEL_WATCH`) a
//! connection's watch of a pattern; [`render`] turns what the watch has
//! due into the server requests the connection's pusher sends (syncs in
//! batches, the end of the first sync, change notices).

use std::sync::Arc;

use understudy_proto::grpc::Payload;
use understudy_proto::nacos3_rpc::{
    ConfigFuzzyWatchChange, ConfigFuzzyWatchFinish, ConfigSyncContext, FuzzyWatchRequest,
    FuzzyWatchSync, NamingFuzzyWatchChange, NamingSyncContext, CONFIG_CHANGED,
    FINISH_FUZZY_WATCH_INIT_NOTIFY, FUZZY_WATCH_DIFF_SYNC_NOTIFY, FUZZY_WATCH_INIT_NOTIFY,
    FUZZY_WATCH_PATTERN_MATCH_COUNT_OVER_LIMIT, FUZZY_WATCH_PATTERN_OVER_LIMIT,
    FUZZY_WATCH_RESOURCE_CHANGED,
};
use understudy_proto::nacos_rpc::{seal, Empty, Envelope, Response, ServerRequest};

use super::conn::Conn;
use super::kind::Failure;
use crate::fuzzy::{Hub, Member, Notice, Refused, Watches, MAX_MATCHES, MAX_PATTERNS};
use crate::node::Node;

/// Answers a `NamingFuzzyWatchRequest` (`naming`) or a
/// `ConfigFuzzyWatchRequest`.
pub(crate) fn watch(
    node: &Node,
    conn: &Arc<Conn>,
    envelope: &Envelope,
    naming: bool,
) -> Result<Payload, Failure> {
    let state = node.state();
    if naming {
        let watches = conn.fuzzy_services();
        answer(
            node,
            conn,
            envelope,
            "NamingFuzzyWatchResponse",
            state.fuzzy_services(),
            watches,
        )
    } else {
        let watches = conn.fuzzy_configs();
        answer(
            node,
            conn,
            envelope,
            "ConfigFuzzyWatchResponse",
            state.fuzzy_configs(),
            watches,
        )
    }
}

fn answer<K: Member>(
    node: &Node,
    conn: &Arc<Conn>,
    envelope: &Envelope,
    response: &str,
    hub: &Hub<K>,
    watches: &Arc<Watches<K>>,
) -> Result<Payload, Failure> {
    let request: FuzzyWatchRequest = envelope.decode()?;
    let pattern = request.pattern()?;
    if request.cancels()? {
        hub.cancel(watches, pattern.as_str());
        return Ok(seal(response, &Response::ok(Empty {})));
    }
    let received = request.received_group_keys.unwrap_or_default();
    let watched = hub.watch(
        watches,
        pattern.clone(),
        &received,
        request.initializing,
        || K::matching(&node.registry(), &pattern),
    );
    // Its pusher sends the sync.
    conn.subscribed();
    let body = match watched {
        Ok(watched) if watched.over_limit => Response::failed(
            FUZZY_WATCH_PATTERN_MATCH_COUNT_OVER_LIMIT,
            format!(
                "pattern '{pattern}' matches more than {MAX_MATCHES}: only {MAX_MATCHES} are told"
            ),
            Empty {},
        ),
        Ok(_) => Response::ok(Empty {}),
        Err(Refused::TooManyPatterns) => Response::failed(
            FUZZY_WATCH_PATTERN_OVER_LIMIT,
            format!("this connection watches {MAX_PATTERNS} patterns already, the most it may"),
            Empty {},
        ),
    };
    Ok(seal(response, &body))
}

/// The server requests for what `conn`'s fuzzy watches have due.
pub(crate) fn render(node: &Node, conn: &Conn) -> Vec<Payload> {
    let mut payloads = Vec::new();
    if let Some(watches) = conn.fuzzy_services_made().filter(|w| w.is_due()) {
        let due = watches.due(&node.registry());
        payloads.extend(
            due.into_iter()
                .map(|(pattern, notice)| naming_payload(conn, pattern, notice)),
        );
    }
    if let Some(watches) = conn.fuzzy_configs_made().filter(|w| w.is_due()) {
        let due = watches.due(&node.registry());
        payloads.extend(
            due.into_iter()
                .map(|(pattern, notice)| config_payload(conn, pattern, notice)),
        );
    }
    payloads
}

fn sync_type(initial: bool) -> &'static str {
    if initial {
        FUZZY_WATCH_INIT_NOTIFY
    } else {
        FUZZY_WATCH_DIFF_SYNC_NOTIFY
    }
}

fn naming_payload(conn: &Conn, pattern: String, notice: Notice) -> Payload {
    let changed = |added: bool| {
        if added {
            "ADD_SERVICE"
        } else {
            "DELETE_SERVICE"
        }
    };
    let request_id = conn.next_request_id();
    match notice {
        Notice::Changed(service_key, added) => seal(
            "NamingFuzzyWatchChangeNotifyRequest",
            &ServerRequest::new(
                request_id,
                "naming",
                NamingFuzzyWatchChange {
                    service_key,
                    changed_type: changed(added),
                    sync_type: FUZZY_WATCH_RESOURCE_CHANGED,
                },
            ),
        ),
        notice => {
            let sync = sync_body(pattern, notice, |service_key, added| NamingSyncContext {
                service_key,
                changed_type: changed(added),
            });
            seal(
                "NamingFuzzyWatchSyncRequest",
                &ServerRequest::new(request_id, "naming", sync),
            )
        }
    }
}

/// A config watch's server request. A change notice says `CONFIG_CHANGED`
/// of a config that now exists and `DELETE_CONFIG` of one removed (the
/// syncs say `ADD_CONFIG`), as Nacos 3's `ConfigFuzzyWatchChangeNotifier`.
fn config_payload(conn: &Conn, pattern: String, notice: Notice) -> Payload {
    let changed = |added: bool| if added { "ADD_CONFIG" } else { "DELETE_CONFIG" };
    let request_id = conn.next_request_id();
    match notice {
        Notice::Changed(group_key, added) => seal(
            "ConfigFuzzyWatchChangeNotifyRequest",
            &ServerRequest::new(
                request_id,
                "config",
                ConfigFuzzyWatchChange {
                    group_key,
                    change_type: if added {
                        CONFIG_CHANGED
                    } else {
                        changed(false)
                    },
                },
            ),
        ),
        Notice::Finished => seal(
            "ConfigFuzzyWatchSyncRequest",
            &ServerRequest::new(
                request_id,
                "config",
                ConfigFuzzyWatchFinish {
                    group_key_pattern: pattern,
                    sync_type: FINISH_FUZZY_WATCH_INIT_NOTIFY,
                    total_batch: 0,
                    current_batch: 0,
                },
            ),
        ),
        notice => {
            let sync = sync_body(pattern, notice, |group_key, added| ConfigSyncContext {
                group_key,
                changed_type: changed(added),
            });
            seal(
                "ConfigFuzzyWatchSyncRequest",
                &ServerRequest::new(request_id, "config", sync),
            )
        }
    }
}

/// A sync batch, or the end of the first sync (no contexts).
fn sync_body<C>(
    pattern: String,
    notice: Notice,
    context: impl Fn(String, bool) -> C,
) -> FuzzyWatchSync<C> {
    match notice {
        Notice::Sync {
            initial,
            keys,
            batch,
            batches,
        } => FuzzyWatchSync {
            group_key_pattern: pattern,
            contexts: keys
                .into_iter()
                .map(|(k, added)| context(k, added))
                .collect(),
            sync_type: sync_type(initial),
            total_batch: batches,
            current_batch: batch,
        },
        // Nacos' naming finish counts itself as batch 1 of 1.
        Notice::Finished | Notice::Changed(..) => FuzzyWatchSync {
            group_key_pattern: pattern,
            contexts: Vec::new(),
            sync_type: FINISH_FUZZY_WATCH_INIT_NOTIFY,
            total_batch: 1,
            current_batch: 1,
        },
    }
}
