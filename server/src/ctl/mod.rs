//! `understudy ctl`: commands against a running node, over its HTTP port
//! (and its gRPC port for `watch`):
//! - `ls namespaces | services | instances`, `watch SERVICE`,
//!   `register`, `deregister` (`registry`);
//! - `cluster`, `chaos links get | set`, `chaos partition`, `chaos heal`
//!   (`admin`);
//! - `export` saves the node's registry and configs as the JSON document
//!   of `GET /understudy/v1/export`; `import` sends such a document to
//!   `POST /understudy/v1/import` and prints what it created or changed;
//! - `health` asks `GET /ready` and exits 0 only on a 2xx answer (a
//!   container health check: the runtime image has no shell and no curl);
//! - `hash-password` prints the bcrypt hash of a password for the config
//!   file's `[[users]]`.
//!
//! Listings print a table, or JSON with `--output json`. With
//! `--username`/`--password` a command logs in first and sends the token;
//! with `--secret` it sends the cluster secret. It owns the command line
//! and the calls; it has no rules of its own (the server validates) and
//! creates its own runtime only in [`main`], so the calls can be made
//! from a test's.

mod admin;
mod registry;

pub use admin::{ChaosArgs, ChaosCommand, LinksCommand};
pub use registry::{
    DeregisterArgs, InstanceArgs, LsArgs, LsCommand, RegisterArgs, ServiceArgs, WatchArgs,
};

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;
use thiserror::Error;
use tonic::transport::Channel;
use understudy_proto::native::registry_client::RegistryClient;

/// The header an admin call carries the cluster secret in.
const SECRET_HEADER: &str = crate::raft::network::SECRET_METADATA;

/// `understudy ctl`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct CtlArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The admin commands.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlCommand {
    /// Save the node's namespaces, services with their persistent
    /// instances, and configs as a JSON document.
    Export(ExportArgs),
    /// Merge a document made by `export` into the node: items in it are
    /// created or updated, items not in it are left alone.
    Import(ImportArgs),
    /// Exit 0 when the node answers `GET /ready` with a 2xx, else print
    /// why and exit 1: a health check for containers without a shell.
    Health(Target),
    /// List namespaces, services or instances.
    Ls(LsArgs),
    /// Follow a service: its instances, then each change with its
    /// revision, until interrupted (or `--count` events).
    Watch(WatchArgs),
    /// Register an instance (persistent unless `--ephemeral`).
    Register(RegisterArgs),
    /// Deregister an instance.
    Deregister(DeregisterArgs),
    /// Each node's DC, role, term, applied index and view lag.
    Cluster(Listing),
    /// The injected link faults: show, set, partition, heal.
    Chaos(ChaosArgs),
    /// Print the bcrypt hash of a password (read from standard input) for
    /// a `[[users]]` entry of the config file.
    HashPassword(HashPasswordArgs),
}

/// How a command prints what it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    #[default]
    Table,
    /// JSON for scripts (one object per line for `watch`).
    Json,
}

/// A node and how to print.
#[derive(Debug, Clone, Args)]
pub struct Listing {
    /// The node.
    #[command(flatten)]
    pub target: Target,
    /// How to print.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `ctl hash-password`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct HashPasswordArgs {
    /// bcrypt's cost: each login costs 2^COST rounds.
    #[arg(long, default_value_t = crate::auth::DEFAULT_COST, value_parser = clap::value_parser!(u32).range(4..=31))]
    pub cost: u32,
}

/// Which node, and the secret it wants.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The node's HTTP address (`http://` is assumed when no scheme is given).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8848")]
    pub server: String,
    /// The node's cluster secret, if it has one.
    #[arg(
        long,
        env = "UNDERSTUDY_CLUSTER_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub secret: Option<String>,
    /// Log in as this user first (when the node has auth on).
    #[arg(long, env = "UNDERSTUDY_USERNAME", value_name = "USER")]
    pub username: Option<String>,
    /// The node's gRPC address, for `watch` and `ls services` [default: its HTTP port + 1000].
    #[arg(long, value_name = "URL")]
    pub grpc: Option<String>,
    /// PEM certificate of the CA that signed the node's certificate, for a
    /// node serving TLS (give `--server https://...`).
    #[arg(long, env = "UNDERSTUDY_TLS_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The user's password.
    #[arg(
        long,
        env = "UNDERSTUDY_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        requires = "username"
    )]
    pub password: Option<String>,
}

/// `ctl export`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// The node.
    #[command(flatten)]
    pub target: Target,
    /// Write the document to FILE rather than to standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `ctl import`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// The document, as `export` wrote it.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The node.
    #[command(flatten)]
    pub target: Target,
}

/// How long `health` waits for the whole answer.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a ctl command failed.
#[derive(Debug, Error)]
pub enum CtlError {
    /// The node could not be reached or did not answer.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// What was called.
        url: String,
        /// Why, with the causes reqwest wraps (a refused connection, ...).
        reason: String,
    },
    /// The node refused the call; `message` is its own.
    #[error("{url} answered {status}: {message}")]
    Refused {
        /// What was called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The node refused a gRPC call; `message` is its own.
    #[error("{url} answered {code:?}: {message}")]
    RefusedCall {
        /// What was called.
        url: String,
        /// The gRPC status code.
        code: tonic::Code,
        /// The server's message.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Standard output could not be written.
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    /// The node answered something this command cannot read.
    #[error("{url} answered something unexpected: {reason}")]
    Unexpected {
        /// What was called.
        url: String,
        /// What was wrong with it.
        reason: String,
    },
    /// An argument is unusable; the message says which and why.
    #[error("{0}")]
    Usage(String),
}

/// Runs a ctl command on its own single-threaded runtime; prints the
/// outcome and returns the exit code (1 on any failure).
pub fn main(args: CtlArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("understudy ctl: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    let outcome = runtime.block_on(run(&args.command, &mut stdout));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("understudy ctl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses a ctl command line (the words after `understudy ctl`).
pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<CtlCommand, clap::Error> {
    use clap::Parser;
    /// `understudy ctl` alone, as the binary parses it.
    #[derive(Parser)]
    #[command(name = "understudy ctl")]
    struct Line {
        #[command(flatten)]
        args: CtlArgs,
    }
    Line::try_parse_from(std::iter::once("understudy ctl").chain(words)).map(|l| l.args.command)
}

/// Runs one command, writing what it prints to `out` (`export` writes
/// its document to its `--output` file or standard output, and its
/// summary to standard error).
pub async fn run(command: &CtlCommand, out: &mut (dyn Write + Send)) -> Result<(), CtlError> {
    let text = match command {
        CtlCommand::Export(args) => {
            eprintln!("{}", export(args).await?);
            return Ok(());
        }
        CtlCommand::Import(args) => import(args).await?,
        CtlCommand::Health(target) => health(target).await?,
        CtlCommand::Ls(args) => registry::ls(args).await?,
        CtlCommand::Watch(args) => return registry::watch(args, out).await,
        CtlCommand::Register(args) => registry::register(args).await?,
        CtlCommand::Deregister(args) => registry::deregister(args).await?,
        CtlCommand::Cluster(args) => admin::cluster(args).await?,
        CtlCommand::Chaos(args) => admin::chaos(args).await?,
        CtlCommand::HashPassword(args) => hash_password(args)?,
    };
    writeln!(out, "{}", text.trim_end())
        .and_then(|()| out.flush())
        .map_err(CtlError::Output)
}

/// Reads a password from standard input (its first line) and hashes it.
fn hash_password(args: &HashPasswordArgs) -> Result<String, CtlError> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(CtlError::Output)?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(CtlError::Usage(
            "give the password on standard input, e.g. `echo -n PASSWORD | understudy ctl hash-password`".into(),
        ));
    }
    crate::auth::hash_password(password, args.cost)
        .map_err(|e| CtlError::Usage(format!("cannot hash the password: {e}")))
}

/// A node to call: its address, and the token or secret calls carry.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    http: reqwest::Client,
    ca: Option<Vec<u8>>,
    server: String,
    grpc: Option<String>,
    secret: Option<String>,
    token: Option<String>,
}

impl Node {
    /// Connects to `target`'s node, logging in first when it names a user.
    pub(crate) async fn connect(target: &Target) -> Result<Self, CtlError> {
        let url = endpoint(&target.server, "/nacos/v1/auth/login");
        let ca = match &target.ca {
            Some(path) => Some(std::fs::read(path).map_err(|source| CtlError::File {
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        let http = client(ca.as_deref()).map_err(|source| unreachable(&url, source))?;
        let mut node = Node {
            http,
            ca,
            server: target.server.clone(),
            grpc: target.grpc.clone(),
            secret: target.secret.clone().filter(|s| !s.is_empty()),
            token: None,
        };
        if let Some(username) = &target.username {
            let form = [
                ("username", username.as_str()),
                ("password", target.password.as_deref().unwrap_or_default()),
            ];
            let body = node.send(node.http.post(&url).form(&form), &url).await?;
            let answer: Value =
                serde_json::from_slice(&body).map_err(|e| CtlError::Unexpected {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
            let token = answer["accessToken"]
                .as_str()
                .ok_or_else(|| CtlError::Unexpected {
                    url: url.clone(),
                    reason: format!("no accessToken in {answer}"),
                })?;
            node.token = Some(token.to_owned());
        }
        Ok(node)
    }

    /// The full URL of `path` on this node.
    pub(crate) fn url(&self, path: &str) -> String {
        endpoint(&self.server, path)
    }

    /// The node's gRPC address: `--grpc` if given, else its HTTP port +
    /// 1000 on the same host, as Nacos clients assume.
    fn grpc_url(&self) -> Result<String, CtlError> {
        if let Some(grpc) = &self.grpc {
            return Ok(endpoint(grpc, ""));
        }
        let base = endpoint(&self.server, "");
        let parsed = reqwest::Url::parse(&base)
            .map_err(|e| CtlError::Usage(format!("--server {}: {e}", self.server)))?;
        let host = parsed.host_str().unwrap_or("127.0.0.1");
        let port = parsed.port_or_known_default().unwrap_or(8848);
        let grpc_port = port.checked_add(1000).ok_or_else(|| {
            CtlError::Usage(format!(
                "HTTP port {port} has no gRPC port 1000 above it; give --grpc"
            ))
        })?;
        Ok(format!("{}://{host}:{grpc_port}", parsed.scheme()))
    }

    /// A native API client on the node's gRPC port, and that port's URL.
    pub(crate) async fn registry(&self) -> Result<(RegistryClient<Channel>, String), CtlError> {
        let url = self.grpc_url()?;
        let unreachable = |reason: String| CtlError::Unreachable {
            url: url.clone(),
            reason,
        };
        let mut endpoint = tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|e| unreachable(e.to_string()))?
            .connect_timeout(Duration::from_secs(5));
        if url.starts_with("https://") {
            let mut tls = tonic::transport::ClientTlsConfig::new();
            if let Some(ca) = &self.ca {
                tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(ca));
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| unreachable(chain(&e)))?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| unreachable(chain(&e)))?;
        Ok((RegistryClient::new(channel), url))
    }

    /// A native call carrying the token, if this command logged in.
    pub(crate) fn call<T>(&self, message: T) -> Result<tonic::Request<T>, CtlError> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.token {
            let bearer = format!("Bearer {token}")
                .parse()
                .map_err(|_| CtlError::Usage("the token is no header value".into()))?;
            request.metadata_mut().insert("authorization", bearer);
        }
        Ok(request)
    }

    /// GETs `path` with `query` and reads the JSON answer.
    pub(crate) async fn get_json(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Value, CtlError> {
        let url = self.url(path);
        let body = self.send(self.http.get(&url).query(query), &url).await?;
        serde_json::from_slice(&body).map_err(|e| CtlError::Unexpected {
            url,
            reason: e.to_string(),
        })
    }

    /// Sends a form with `method` to `path`; returns the answer's text.
    pub(crate) async fn form(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(&str, String)],
    ) -> Result<String, CtlError> {
        let url = self.url(path);
        let request = self.http.request(method, &url).form(form);
        let body = self.send(request, &url).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Sends with the token and the secret, and turns anything but a 2xx
    /// into the server's message.
    async fn send(&self, request: reqwest::RequestBuilder, url: &str) -> Result<Vec<u8>, CtlError> {
        let request = match &self.secret {
            Some(secret) => request.header(SECRET_HEADER, secret),
            None => request,
        };
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.map_err(|e| unreachable(url, e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| unreachable(url, e))?;
        if status.is_success() {
            return Ok(body.to_vec());
        }
        Err(CtlError::Refused {
            url: url.to_owned(),
            status: status.as_u16(),
            message: server_message(&body),
        })
    }
}

/// Renders rows as aligned columns under `headers`.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            text.push_str(cell);
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A refused native call as a ctl error.
pub(crate) fn refused(url: &str, status: tonic::Status) -> CtlError {
    CtlError::RefusedCall {
        url: url.to_owned(),
        code: status.code(),
        message: status.message().to_owned(),
    }
}

/// Fetches the export and writes it, byte for byte, to the output file or
/// standard output; returns a one-line summary.
pub async fn export(args: &ExportArgs) -> Result<String, CtlError> {
    let node = Node::connect(&args.target).await?;
    let url = node.url("/understudy/v1/export");
    let body = node.send(node.http.get(&url), &url).await?;
    match &args.output {
        Some(path) => std::fs::write(path, &body).map_err(|source| CtlError::File {
            path: path.clone(),
            source,
        })?,
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(&body)
                .and_then(|()| stdout.write_all(b"\n"))
                .and_then(|()| stdout.flush())
                .map_err(CtlError::Output)?;
        }
    }
    Ok(summary(&body))
}

/// Sends the document in `args.file`; returns the server's counts (what
/// the import created or changed), as JSON.
pub async fn import(args: &ImportArgs) -> Result<String, CtlError> {
    let document = std::fs::read(&args.file).map_err(|source| CtlError::File {
        path: args.file.clone(),
        source,
    })?;
    let node = Node::connect(&args.target).await?;
    let url = node.url("/understudy/v1/import");
    let request = node
        .http
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(document);
    let body = node.send(request, &url).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Asks the node whether it is ready (`GET /ready`); returns its answer.
/// Anything but a 2xx within `HEALTH_TIMEOUT` (5 s) is an error.
pub async fn health(target: &Target) -> Result<String, CtlError> {
    let node = Node::connect(target).await?;
    let url = node.url("/ready");
    let body = node
        .send(node.http.get(&url).timeout(HEALTH_TIMEOUT), &url)
        .await?;
    Ok(String::from_utf8_lossy(&body).trim().to_owned())
}

fn client(ca: Option<&[u8]>) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
    if let Some(ca) = ca {
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(ca)?);
    }
    builder.build()
}

fn unreachable(url: &str, error: reqwest::Error) -> CtlError {
    CtlError::Unreachable {
        url: url.to_owned(),
        reason: chain(&error),
    }
}

/// An error with its causes (a refused connection under a transport
/// error, ...), joined by `: `.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut reason = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    reason
}

/// The detail of a Nacos v2 error body (`data`), else the body itself.
fn server_message(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => match object.get("data") {
            Some(Value::String(detail)) if !detail.is_empty() => detail.clone(),
            _ => Value::Object(object).to_string(),
        },
        _ => String::from_utf8_lossy(body).trim().to_owned(),
    }
}

/// `SERVER` with `http://` when it has no scheme, without a trailing `/`,
/// followed by `path`.
fn endpoint(server: &str, path: &str) -> String {
    let server = server.trim().trim_end_matches('/');
    if server.contains("://") {
        format!("{server}{path}")
    } else {
        format!("http://{server}{path}")
    }
}

fn summary(body: &[u8]) -> String {
    let document: Value = serde_json::from_slice(body).unwrap_or_default();
    let len = |key: &str| document[key].as_array().map_or(0, Vec::len);
    let instances: usize = document["services"].as_array().map_or(0, |services| {
        services
            .iter()
            .map(|s| s["instances"].as_array().map_or(0, Vec::len))
            .sum()
    });
    format!(
        "exported {} namespaces, {} services with {instances} persistent instances, {} configs ({} ephemeral instances are not exported: their clients register them again)",
        len("namespaces"),
        len("services"),
        len("configs"),
        document["ephemeralInstances"].as_u64().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn ctl(args: &[&str]) -> CtlCommand {
        let cli = Cli::try_parse_from(std::iter::once("understudy").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match cli.command {
            Some(Command::Ctl(CtlArgs { command })) => command,
            other => panic!("{args:?}: not a ctl command: {other:?}"),
        }
    }

    #[test]
    fn export_defaults_to_the_local_node_and_standard_output() {
        match ctl(&["ctl", "export"]) {
            CtlCommand::Export(args) => {
                assert_eq!(args.target.server, "http://127.0.0.1:8848");
                assert_eq!(args.output, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn export_and_import_take_a_server_a_secret_and_files() {
        match ctl(&[
            "ctl",
            "export",
            "--server",
            "10.0.0.1:8848",
            "--secret",
            "s3",
            "-o",
            "out.json",
        ]) {
            CtlCommand::Export(args) => {
                assert_eq!(args.target.server, "10.0.0.1:8848");
                assert_eq!(args.target.secret.as_deref(), Some("s3"));
                assert_eq!(args.output, Some(PathBuf::from("out.json")));
            }
            other => panic!("{other:?}"),
        }
        match ctl(&["ctl", "import", "in.json", "--server", "http://h:1/"]) {
            CtlCommand::Import(args) => {
                assert_eq!(args.file, PathBuf::from("in.json"));
                assert_eq!(args.target.server, "http://h:1/");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn health_takes_the_target() {
        match ctl(&["ctl", "health"]) {
            CtlCommand::Health(target) => {
                assert_eq!(target.server, "http://127.0.0.1:8848");
            }
            other => panic!("{other:?}"),
        }
        match ctl(&["ctl", "health", "--server", "node2:8848"]) {
            CtlCommand::Health(target) => assert_eq!(target.server, "node2:8848"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            endpoint("http://127.0.0.1:8848/", "/ready"),
            "http://127.0.0.1:8848/ready"
        );
    }

    #[test]
    fn import_needs_a_file() {
        let err = Cli::try_parse_from(["understudy", "ctl", "import"]).unwrap_err();
        assert!(err.to_string().contains("<FILE>"), "{err}");
    }

    #[test]
    fn server_addresses_get_a_scheme_and_lose_a_trailing_slash() {
        assert_eq!(
            endpoint("127.0.0.1:8848", "/understudy/v1/export"),
            "http://127.0.0.1:8848/understudy/v1/export"
        );
        assert_eq!(
            endpoint("http://h:1/", "/understudy/v1/import"),
            "http://h:1/understudy/v1/import"
        );
    }

    #[test]
    fn the_server_message_is_the_detail_of_its_error_body() {
        let body = br#"{"code":20002,"message":"parameter validate error","data":"invalid version: this server reads version 1, got 2"}"#;
        assert_eq!(
            server_message(body),
            "invalid version: this server reads version 1, got 2"
        );
        assert_eq!(server_message(b"no such endpoint\n"), "no such endpoint");
    }
}
