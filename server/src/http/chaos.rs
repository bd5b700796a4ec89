//! The chaos admin API: read and change the fault model at run time.
//! Every change is made on the node asked and handed to every other member
//! out of band (so a partition can always be healed through any node);
//! the answer is the model now in force, the members that could not be
//! told, and warnings about settings raft cannot live with.
//!
//! - `GET /understudy/v1/chaos`: the model.
//! - `PUT /understudy/v1/chaos`: replace it with a JSON body of the same
//!   shape.
//! - `POST /understudy/v1/chaos/links?link=hz-sh=40ms~10ms,loss=1%`: set
//!   DC links (several separated by `;`; `perfect` clears one).
//! - `POST /understudy/v1/chaos/partition?a=hz&b=sh`, and
//!   `POST /understudy/v1/chaos/heal[?a=hz&b=sh]`: cut and heal DCs (a heal
//!   without DCs removes every cut and resumes paused nodes).
//! - `POST /understudy/v1/chaos/apply-delay?dc=sh&delay=500ms`.
//! - `POST /understudy/v1/chaos/push?dc=sh&delay=100ms&drop=10%`.
//! - `POST /understudy/v1/chaos/config-read-lag?dc=sh&lag=500ms` (`lag=0`
//!   removes it): for that long after a config write, the DC's nodes
//!   answer formal reads of it as before the write, as Nacos does.
//! - `POST /understudy/v1/chaos/pause?node=3`, `.../resume?node=3`.
//! - `POST /understudy/v1/chaos/kill?node=3`: crash node 3, which only
//!   `understudy sim` can do (its nodes share its process); a node
//!   served alone refuses.
//! - `hold`, `unhold`, `trace`, and `GET` of `holds`, `events` and
//!   `acks`: client races, this node's own (`races.rs`).
//! - `GET /understudy/v1/cluster/nodes`: every member's DC, role, applied
//!   index and revision, view lag and register-to-visible delays.
//!
//! With a cluster secret, every call needs it in `x-understudy-secret`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::params::Params;
use crate::faults::{parse_duration, parse_faults, DcLink, FaultState, LinkSpec, PushFault};
use crate::Node;

type Input = Result<Params, ApiError>;

/// `GET /understudy/v1/chaos`.
pub(crate) async fn show(State(node): State<Node>) -> Response {
    Json(answer(&node, Vec::new())).into_response()
}

/// `PUT /understudy/v1/chaos` with a JSON body.
pub(crate) async fn replace(State(node): State<Node>, body: axum::body::Bytes) -> Response {
    let state = serde_json::from_slice::<FaultState>(&body)
        .map_err(|e| ApiError::invalid("body", e.to_string()));
    match state {
        Ok(state) => apply(&node, state).await,
        Err(e) => e.v2(),
    }
}

/// `POST /understudy/v1/chaos/{action}`: one change to the fault model.
pub(crate) async fn act(
    State(node): State<Node>,
    Path(action): Path<String>,
    params: Input,
) -> Response {
    if action == "kill" {
        return kill(&node, params).await;
    }
    if super::races::ACTIONS.contains(&action.as_str()) {
        return super::races::act(&node, &action, params);
    }
    let edit: fn(&Params, &mut FaultState) -> Result<(), ApiError> = match action.as_str() {
        "links" => links,
        "partition" => partition,
        "heal" => heal,
        "apply-delay" => apply_delay,
        "push" => push,
        "config-read-lag" => config_read_lag,
        "pause" => pause,
        "resume" => resume,
        other => {
            return ApiError::not_found(
                understudy_proto::nacos::ErrorCode::ResourceNotFound,
                format!(
                    "no chaos action '{other}': links, partition, heal, apply-delay, push, config-read-lag, pause, resume, kill, hold, unhold or trace"
                ),
            )
            .v2()
        }
    };
    let state = params.and_then(|p| {
        let mut state = node.faults().state();
        edit(&p, &mut state)?;
        Ok(state)
    });
    match state {
        Ok(state) => apply(&node, state).await,
        Err(e) => e.v2(),
    }
}

/// `links?link=SPEC[;SPEC...]`.
fn links(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let text = p.required("link")?;
    for spec in text.split(';').filter(|s| !s.trim().is_empty()) {
        let spec: LinkSpec = spec
            .parse()
            .map_err(|e: crate::faults::InvalidLink| ApiError::invalid("link", e.to_string()))?;
        set_link(state, &spec.from, &spec.to, spec.link);
        if spec.both {
            set_link(state, &spec.to, &spec.from, spec.link);
        }
    }
    Ok(())
}

/// `partition?a=&b=`.
fn partition(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let (a, b) = (p.required("a")?.to_owned(), p.required("b")?.to_owned());
    if a == b {
        return Err(ApiError::invalid("b", "must name another DC than a"));
    }
    set_cut(state, &a, &b, true);
    Ok(())
}

/// `heal[?a=&b=]`.
fn heal(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    match (p.get("a"), p.get("b")) {
        (Some(a), Some(b)) => set_cut(state, a, b, false),
        (None, None) => {
            for link in &mut state.links {
                link.link.cut = false;
            }
            state.paused.clear();
        }
        (Some(_), None) => return Err(ApiError::missing("b")),
        (None, Some(_)) => return Err(ApiError::missing("a")),
    }
    Ok(())
}

/// `apply-delay?dc=&delay=`.
fn apply_delay(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let dc = p.required("dc")?.to_owned();
    let delay = parse_duration(p.required("delay")?)
        .map_err(|why| ApiError::invalid("delay", why.to_string()))?;
    state.apply_delays_ms.insert(dc, delay.as_millis() as u64);
    Ok(())
}

/// `push?dc=&delay=&drop=`.
fn push(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let dc = p.required("dc")?.to_owned();
    let mut fault = PushFault::default();
    if let Some(delay) = p.get("delay") {
        fault.delay =
            parse_duration(delay).map_err(|why| ApiError::invalid("delay", why.to_string()))?;
    }
    if let Some(drop) = p.get("drop") {
        // The loss syntax, so `10%` and `0.1` both work.
        fault.drop = parse_faults(&format!("loss={drop}"))
            .map_err(|why| ApiError::invalid("drop", why.to_string()))?
            .loss;
    }
    state.push_faults.insert(dc, fault);
    Ok(())
}

/// `config-read-lag?dc=&lag=`.
fn config_read_lag(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let dc = p.required("dc")?.to_owned();
    let lag = match p.required("lag")?.trim() {
        // Zero needs no unit: `lag=0` removes the lag.
        "0" => std::time::Duration::ZERO,
        text => parse_duration(text).map_err(|why| ApiError::invalid("lag", why.to_string()))?,
    };
    state.config_read_lags_ms.insert(dc, lag.as_millis() as u64);
    Ok(())
}

/// `pause?node=`.
fn pause(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let id: u64 = p.number("node")?.ok_or_else(|| ApiError::missing("node"))?;
    if !state.paused.contains(&id) {
        state.paused.push(id);
    }
    Ok(())
}

/// `resume?node=`.
fn resume(p: &Params, state: &mut FaultState) -> Result<(), ApiError> {
    let id: u64 = p.number("node")?.ok_or_else(|| ApiError::missing("node"))?;
    state.paused.retain(|n| *n != id);
    Ok(())
}

/// `kill?node=`: crash a node of the process that runs this one
/// (`understudy sim`); the answer comes once it is killed.
async fn kill(node: &Node, params: Input) -> Response {
    let id = params.and_then(|p| {
        p.number::<u64>("node")?
            .ok_or_else(|| ApiError::missing("node"))
    });
    let id = match id {
        Ok(id) => id,
        Err(e) => return e.v2(),
    };
    match node.faults().kill(id).await {
        Ok(()) => Json(json!({"killed": id})).into_response(),
        Err(why) => ApiError::invalid("node", why.to_string()).v2(),
    }
}

/// `GET /understudy/v1/cluster/nodes`.
pub(crate) async fn nodes(State(node): State<Node>) -> Response {
    let report = node.cluster_report(std::time::Duration::from_secs(1)).await;
    Json(json!({"nodeId": node.config().node_id, "nodes": report})).into_response()
}

fn current(state: &FaultState, from: &str, to: &str) -> crate::faults::Link {
    state
        .links
        .iter()
        .find(|l| l.from == from && l.to == to)
        .map(|l| l.link)
        .unwrap_or_default()
}

/// Cuts (or heals) DCs `a` and `b` in both directions, keeping their
/// latency and loss.
fn set_cut(state: &mut FaultState, a: &str, b: &str, cut: bool) {
    for (from, to) in [(a, b), (b, a)] {
        let mut link = current(state, from, to);
        link.cut = cut;
        set_link(state, from, to, link);
    }
}

fn set_link(state: &mut FaultState, from: &str, to: &str, link: crate::faults::Link) {
    state.links.retain(|l| !(l.from == from && l.to == to));
    state.links.push(DcLink {
        from: from.to_owned(),
        to: to.to_owned(),
        link,
    });
}

async fn apply(node: &Node, state: FaultState) -> Response {
    match node.set_faults(&state).await {
        Ok(unreached) => {
            let unreached: Vec<_> = unreached
                .into_iter()
                .map(|(id, why)| json!({"node": id, "error": why}))
                .collect();
            Json(answer(node, unreached)).into_response()
        }
        Err(e) => ApiError::invalid("link", e.to_string()).v2(),
    }
}

fn answer(node: &Node, unreached: Vec<serde_json::Value>) -> serde_json::Value {
    let state = node.faults().state();
    let heartbeat = crate::clock::millis(node.config().cluster.heartbeat);
    let warnings: Vec<String> = state
        .links
        .iter()
        .filter_map(|l| {
            let back = current(&state, &l.to, &l.from);
            let rtt = (l.link.delay + l.link.jitter + back.delay + back.jitter).as_millis() as u64;
            (rtt >= heartbeat).then(|| {
                format!(
                    "{}->{}: a round trip of up to {rtt} ms is not shorter than raft_heartbeat_ms {heartbeat}; \
                     openraft gives up on each append after one heartbeat period, so followers across \
                     this link get only relayed entries and the leader never counts them",
                    l.from, l.to
                )
            })
        })
        .collect();
    json!({"faults": state, "unreached": unreached, "warnings": warnings})
}
