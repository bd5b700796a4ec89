//! `ctl ls`, `ctl watch`, `ctl register`, `ctl deregister`: the registry
//! as an operator sees it. Listings and writes go through the Nacos HTTP
//! API; `watch` follows the native gRPC watch stream.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use understudy_proto::native::{
    change, watch_event, ListServicesRequest, RemovalCause, WatchRequest,
};

use super::{table, CtlError, Node, Output, Target};

/// `ctl ls`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct LsArgs {
    /// What to list.
    #[command(subcommand)]
    pub what: LsCommand,
}

/// What `ls` lists.
#[derive(Debug, Clone, Subcommand)]
pub enum LsCommand {
    /// Every namespace, with its services and configs.
    Namespaces {
        /// The node and how to print.
        #[command(flatten)]
        listing: super::Listing,
    },
    /// The services of a namespace (one group, or all).
    Services {
        /// The node and how to print.
        #[command(flatten)]
        listing: super::Listing,
        /// The namespace (the default one when absent).
        #[arg(long, short = 'n', default_value = "")]
        namespace: String,
        /// One group only.
        #[arg(long, short = 'g')]
        group: Option<String>,
    },
    /// A service's instances.
    Instances {
        /// The service.
        #[command(flatten)]
        service: ServiceArgs,
        /// The node and how to print.
        #[command(flatten)]
        listing: super::Listing,
    },
}

/// Which service.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// The service's name.
    #[arg(value_name = "SERVICE")]
    pub service: String,
    /// Its namespace (the default one when absent).
    #[arg(long, short = 'n', default_value = "")]
    pub namespace: String,
    /// Its group.
    #[arg(long, short = 'g', default_value = "DEFAULT_GROUP")]
    pub group: String,
}

impl ServiceArgs {
    fn query(&self) -> Vec<(&'static str, String)> {
        vec![
            ("namespaceId", self.namespace.clone()),
            ("groupName", self.group.clone()),
            ("serviceName", self.service.clone()),
        ]
    }
}

/// `ctl watch`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// The service.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// The node and how to print.
    #[command(flatten)]
    pub listing: super::Listing,
    /// Stop after this many events (the first snapshot counts as one).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

/// An instance's address.
#[derive(Debug, Clone, Args)]
pub struct InstanceArgs {
    /// The service.
    #[command(flatten)]
    pub service: ServiceArgs,
    /// The node.
    #[command(flatten)]
    pub target: Target,
    /// The instance's IP.
    #[arg(long)]
    pub ip: String,
    /// The instance's port.
    #[arg(long)]
    pub port: u16,
    /// Its cluster.
    #[arg(long, default_value = "DEFAULT")]
    pub cluster: String,
    /// An ephemeral instance (it must then beat, or it expires); a
    /// persistent one stays until deregistered.
    #[arg(long)]
    pub ephemeral: bool,
}

impl InstanceArgs {
    fn form(&self) -> Vec<(&'static str, String)> {
        let mut form = self.service.query();
        form.extend([
            ("ip", self.ip.clone()),
            ("port", self.port.to_string()),
            ("clusterName", self.cluster.clone()),
            ("ephemeral", self.ephemeral.to_string()),
        ]);
        form
    }
}

/// `ctl register`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct RegisterArgs {
    /// The instance.
    #[command(flatten)]
    pub instance: InstanceArgs,
    /// Its weight.
    #[arg(long, default_value_t = 1.0)]
    pub weight: f64,
    /// A metadata entry `KEY=VALUE` (repeat for more), e.g. `zone=hz`.
    #[arg(long = "metadata", short = 'm', value_name = "KEY=VALUE", value_parser = key_value)]
    pub metadata: Vec<(String, String)>,
    /// Registered but not sent to consumers.
    #[arg(long)]
    pub disabled: bool,
}

/// `ctl deregister`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct DeregisterArgs {
    /// The instance.
    #[command(flatten)]
    pub instance: InstanceArgs,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("'{text}' is not KEY=VALUE")),
    }
}

/// Lists what `args` asks for; a table or JSON.
pub(super) async fn ls(args: &LsArgs) -> Result<String, CtlError> {
    match &args.what {
        LsCommand::Namespaces { listing } => {
            let node = Node::connect(&listing.target).await?;
            let answer = node.get_json("/nacos/v1/console/namespaces", &[]).await?;
            let rows: Vec<Value> = answer["data"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|n| {
                    let id = n["namespace"].as_str().filter(|id| !id.is_empty());
                    json!({
                        "id": id.unwrap_or("public"),
                        "name": n["namespaceShowName"],
                        "description": n["namespaceDesc"],
                        "configs": n["configCount"],
                    })
                })
                .collect();
            Ok(render(
                listing.output,
                &rows,
                &["id", "name", "configs", "description"],
            ))
        }
        LsCommand::Services {
            listing,
            namespace,
            group,
        } => {
            let node = Node::connect(&listing.target).await?;
            let (mut registry, url) = node.registry().await?;
            let request = node.call(ListServicesRequest {
                namespace: namespace.clone(),
                group: group.clone().unwrap_or_default(),
            })?;
            let services = registry
                .list_services(request)
                .await
                .map_err(|status| super::refused(&url, status))?
                .into_inner()
                .services;
            let rows: Vec<Value> = services
                .into_iter()
                .map(|s| json!({"group": s.group, "service": s.name}))
                .collect();
            Ok(render(listing.output, &rows, &["group", "service"]))
        }
        LsCommand::Instances { service, listing } => {
            let node = Node::connect(&listing.target).await?;
            let query = service.query();
            let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let answer = node.get_json("/nacos/v2/ns/instance/list", &query).await?;
            let rows: Vec<Value> = answer["data"]["hosts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|h| {
                    json!({
                        "ip": h["ip"],
                        "port": h["port"],
                        "cluster": h["clusterName"],
                        "weight": h["weight"],
                        "healthy": h["healthy"],
                        "enabled": h["enabled"],
                        "ephemeral": h["ephemeral"],
                        "metadata": h["metadata"],
                    })
                })
                .collect();
            let columns = [
                "ip",
                "port",
                "cluster",
                "weight",
                "healthy",
                "enabled",
                "ephemeral",
                "metadata",
            ];
            Ok(render(listing.output, &rows, &columns))
        }
    }
}

/// A table of `columns` of each row, or the rows as a JSON array.
fn render(output: Output, rows: &[Value], columns: &[&str]) -> String {
    match output {
        Output::Json => Value::Array(rows.to_vec()).to_string(),
        Output::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|row| columns.iter().map(|c| cell(&row[*c])).collect())
                .collect();
            table(columns, &cells)
        }
    }
}

/// A JSON value as a table cell: strings bare, maps as `k=v,k=v`.
pub(crate) fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Object(map) if map.is_empty() => "-".to_owned(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                )
            })
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    }
}

/// Registers the instance; returns a line saying so.
pub(super) async fn register(args: &RegisterArgs) -> Result<String, CtlError> {
    let instance = &args.instance;
    let node = Node::connect(&instance.target).await?;
    let mut form = instance.form();
    form.push(("weight", args.weight.to_string()));
    form.push(("enabled", (!args.disabled).to_string()));
    if !args.metadata.is_empty() {
        let metadata: serde_json::Map<String, Value> = args
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        form.push(("metadata", Value::Object(metadata).to_string()));
    }
    node.form(reqwest::Method::POST, "/nacos/v2/ns/instance", &form)
        .await?;
    Ok(format!(
        "registered {}:{} in {}@@{} ({})",
        instance.ip,
        instance.port,
        instance.service.group,
        instance.service.service,
        if instance.ephemeral {
            "ephemeral"
        } else {
            "persistent"
        }
    ))
}

/// Deregisters the instance; returns a line saying so.
pub(super) async fn deregister(args: &DeregisterArgs) -> Result<String, CtlError> {
    let instance = &args.instance;
    let node = Node::connect(&instance.target).await?;
    node.form(
        reqwest::Method::DELETE,
        "/nacos/v2/ns/instance",
        &instance.form(),
    )
    .await?;
    Ok(format!(
        "deregistered {}:{} from {}@@{}",
        instance.ip, instance.port, instance.service.group, instance.service.service
    ))
}

/// Follows the service over the native watch stream, writing one line
/// per event to `out` (a block for a snapshot), until the stream ends or
/// `--count` events were written.
pub(super) async fn watch(args: &WatchArgs, out: &mut (dyn Write + Send)) -> Result<(), CtlError> {
    let node = Node::connect(&args.listing.target).await?;
    let (mut registry, url) = node.registry().await?;
    let request = node.call(WatchRequest {
        namespace: args.service.namespace.clone(),
        group: args.service.group.clone(),
        service: args.service.service.clone(),
        resume: None,
        progress_ms: 0,
    })?;
    let refused = |status| super::refused(&url, status);
    let mut stream = registry.watch(request).await.map_err(refused)?.into_inner();
    let mut written = 0;
    let mut pending = Vec::new();
    while args.count.is_none_or(|count| written < count) {
        let Some(event) = stream.message().await.map_err(refused)? else {
            return Ok(());
        };
        let revision = event.token.as_ref().map_or(0, |t| t.revision);
        let line = match event.event {
            Some(watch_event::Event::Reset(reset)) => {
                pending.extend(reset.services.into_iter().flat_map(|s| s.instances));
                if !reset.last {
                    continue;
                }
                let instances: Vec<Value> = pending.drain(..).map(|i| instance_json(&i)).collect();
                match args.listing.output {
                    Output::Json => json!({"revision": revision, "event": "snapshot",
                        "exists": reset.exists, "instances": instances})
                    .to_string(),
                    Output::Table => {
                        let mut text = format!(
                            "rev {revision}  snapshot: {} instance{}{}",
                            instances.len(),
                            if instances.len() == 1 { "" } else { "s" },
                            if reset.exists {
                                ""
                            } else {
                                " (no such service yet)"
                            },
                        );
                        for i in &instances {
                            text.push_str("\n  ");
                            text.push_str(&instance_line(i));
                        }
                        text
                    }
                }
            }
            Some(watch_event::Event::Change(change)) => {
                let (kind, detail) = match change.kind {
                    Some(change::Kind::Upsert(i)) => {
                        ("upsert", json!({"instance": instance_json(&i)}))
                    }
                    Some(change::Kind::Removed(r)) => {
                        let cause = RemovalCause::try_from(r.cause)
                            .map_or("unspecified", |c| c.as_str_name());
                        let instance = r.instance.as_ref().map(instance_json);
                        (
                            "removed",
                            json!({"instance": instance, "cause": cause.to_ascii_lowercase()}),
                        )
                    }
                    Some(change::Kind::Created(_)) => ("created", json!({})),
                    Some(change::Kind::DoesNotExist(_)) => ("deleted", json!({})),
                    None => continue,
                };
                match args.listing.output {
                    Output::Json => {
                        let mut line = json!({"revision": revision, "event": kind});
                        if let (Value::Object(line), Value::Object(detail)) = (&mut line, detail) {
                            line.extend(detail);
                        }
                        line.to_string()
                    }
                    Output::Table => match kind {
                        "upsert" => {
                            format!("rev {revision}  + {}", instance_line(&detail["instance"]))
                        }
                        "removed" => format!(
                            "rev {revision}  - {} ({})",
                            address(&detail["instance"]),
                            cell(&detail["cause"])
                        ),
                        "created" => format!("rev {revision}  service created"),
                        _ => format!("rev {revision}  service deleted"),
                    },
                }
            }
            // ctl asks for no progress events.
            Some(watch_event::Event::Progress(_)) | None => continue,
        };
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(CtlError::Output)?;
        written += 1;
    }
    Ok(())
}

fn instance_json(i: &understudy_proto::native::Instance) -> Value {
    json!({
        "ip": i.ip,
        "port": i.port,
        "cluster": i.cluster,
        "zone": i.zone,
        "weight": i.weight,
        "healthy": i.healthy,
        "enabled": i.enabled,
        "ephemeral": i.ephemeral,
        "metadata": i.metadata,
    })
}

fn address(i: &Value) -> String {
    format!("{}:{}", cell(&i["ip"]), cell(&i["port"]))
}

fn instance_line(i: &Value) -> String {
    format!(
        "{} {} weight={} zone={}{}",
        address(i),
        if i["healthy"] == true {
            "healthy"
        } else {
            "unhealthy"
        },
        cell(&i["weight"]),
        cell(&i["zone"]),
        if i["enabled"] == false {
            " disabled"
        } else {
            ""
        },
    )
}
