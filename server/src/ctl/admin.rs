//! `ctl cluster` and `ctl chaos`: the cluster's members and the injected
//! link faults, over the admin API.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::registry::cell;
use super::{table, CtlError, Listing, Node, Output};

/// `ctl chaos`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ChaosArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ChaosCommand,
}

/// The chaos commands.
#[derive(Debug, Clone, Subcommand)]
pub enum ChaosCommand {
    /// Show or set the links between DCs.
    Links {
        /// Show or set.
        #[command(subcommand)]
        command: LinksCommand,
    },
    /// Cut two DCs apart, both ways.
    Partition {
        /// One DC.
        a: String,
        /// The other.
        b: String,
        /// The node and how to print.
        #[command(flatten)]
        listing: Listing,
    },
    /// Heal the cut between two DCs, or every cut and pause.
    Heal {
        /// One DC (with the other; neither heals everything).
        #[arg(requires = "b")]
        a: Option<String>,
        /// The other.
        b: Option<String>,
        /// The node and how to print.
        #[command(flatten)]
        listing: Listing,
    },
}

/// `ctl chaos links`.
#[derive(Debug, Clone, Subcommand)]
pub enum LinksCommand {
    /// Show each link's latency, jitter, loss and cut.
    Get(Listing),
    /// Set links, e.g. `hz-sh=40ms~10ms,loss=1%` (both ways) or
    /// `hz->sh=cut` (one way); repeat for more.
    Set {
        /// The links.
        #[arg(required = true, value_name = "SPEC")]
        specs: Vec<String>,
        /// The node and how to print.
        #[command(flatten)]
        listing: Listing,
    },
}

/// Every member's DC, role, term, applied index and view lag.
pub(super) async fn cluster(args: &Listing) -> Result<String, CtlError> {
    let node = Node::connect(&args.target).await?;
    let answer = node.get_json("/understudy/v1/cluster/nodes", &[]).await?;
    let rows: Vec<Value> = answer["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|n| {
            let s = &n["status"];
            // A member answers with its own DC; the membership's may be blank.
            let dc = match &s["dc"] {
                Value::String(dc) if !dc.is_empty() => &s["dc"],
                _ => &n["dc"],
            };
            json!({
                "id": n["id"],
                "dc": dc,
                "role": s["role"],
                "term": s["term"],
                "leader": s["leader"],
                "applied": s["lastApplied"],
                "revision": s["revision"],
                "viewLagMs": s["viewLagMs"],
                "registerToVisibleP99Ms": s["registerToVisible"]["p99Ms"],
                "error": n["error"],
            })
        })
        .collect();
    Ok(match args.output {
        Output::Json => Value::Array(rows).to_string(),
        Output::Table => {
            let columns = [
                "id",
                "dc",
                "role",
                "term",
                "leader",
                "applied",
                "revision",
                "viewLagMs",
                "registerToVisibleP99Ms",
                "error",
            ];
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|row| columns.iter().map(|c| cell(&row[*c])).collect())
                .collect();
            let headers = [
                "ID",
                "DC",
                "ROLE",
                "TERM",
                "LEADER",
                "APPLIED",
                "REVISION",
                "VIEW LAG ms",
                "R2V p99 ms",
                "ERROR",
            ];
            table(&headers, &cells)
        }
    })
}

/// Runs a chaos command; prints the links as they are afterwards.
pub(super) async fn chaos(args: &ChaosArgs) -> Result<String, CtlError> {
    let (listing, action, query): (&Listing, Option<&str>, Vec<(&str, String)>) =
        match &args.command {
            ChaosCommand::Links {
                command: LinksCommand::Get(listing),
            } => (listing, None, Vec::new()),
            ChaosCommand::Links {
                command: LinksCommand::Set { specs, listing },
            } => (listing, Some("links"), vec![("link", specs.join(";"))]),
            ChaosCommand::Partition { a, b, listing } => (
                listing,
                Some("partition"),
                vec![("a", a.clone()), ("b", b.clone())],
            ),
            ChaosCommand::Heal { a, b, listing } => {
                let query = match (a, b) {
                    (Some(a), Some(b)) => vec![("a", a.clone()), ("b", b.clone())],
                    _ => Vec::new(),
                };
                (listing, Some("heal"), query)
            }
        };
    let node = Node::connect(&listing.target).await?;
    let answer = match action {
        None => node.get_json("/understudy/v1/chaos", &[]).await?,
        Some(action) => {
            let path = format!("/understudy/v1/chaos/{action}");
            let text = node.form(reqwest::Method::POST, &path, &query).await?;
            serde_json::from_str(&text).map_err(|e| CtlError::Unexpected {
                url: node.url(&path),
                reason: e.to_string(),
            })?
        }
    };
    Ok(links(listing.output, &answer))
}

/// The fault model of a chaos answer: JSON as the server gave it, or a
/// table of links followed by any pauses, warnings and unreached nodes.
fn links(output: Output, answer: &Value) -> String {
    if output == Output::Json {
        return answer.to_string();
    }
    let faults = &answer["faults"];
    let rows: Vec<Vec<String>> = faults["links"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|l| {
            let loss = l["loss"].as_f64().unwrap_or(0.0) * 100.0;
            vec![
                cell(&l["from"]),
                cell(&l["to"]),
                cell(&l["latencyMs"]),
                cell(&l["jitterMs"]),
                format!("{loss}%"),
                if l["cut"] == true { "cut" } else { "-" }.to_owned(),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        "no link faults\n".to_owned()
    } else {
        table(
            &["FROM", "TO", "LATENCY ms", "JITTER ms", "LOSS", "CUT"],
            &rows,
        )
    };
    let paused = faults["paused"].as_array().cloned().unwrap_or_default();
    if !paused.is_empty() {
        let ids: Vec<String> = paused.iter().map(cell).collect();
        out.push_str(&format!("paused nodes: {}\n", ids.join(", ")));
    }
    for key in ["warnings", "unreached"] {
        for item in answer[key].as_array().cloned().unwrap_or_default() {
            out.push_str(&format!("{}: {}\n", key.trim_end_matches('s'), cell(&item)));
        }
    }
    out
}
