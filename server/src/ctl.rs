//! `understudy ctl`: admin commands against a running node over its HTTP
//! port. `export` saves the node's registry and configs as the JSON
//! document of `GET /understudy/v1/export`; `import` sends such a document
//! to `POST /understudy/v1/import` and prints what it created or changed;
//! `health` asks `GET /ready` and exits 0 only on a 2xx answer (a container
//! health check: the runtime image has no shell and no curl).
//! It owns the command line of those commands and their HTTP calls; it
//! has no rules of its own (the server validates) and creates its own
//! runtime only in [`main`], so the calls can be made from a test's.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;
use thiserror::Error;

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
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Standard output could not be written.
    #[error("cannot write the document: {0}")]
    Output(std::io::Error),
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
    let outcome = runtime.block_on(async {
        match args.command {
            CtlCommand::Export(args) => export(&args).await.map(|summary| {
                eprintln!("{summary}");
            }),
            CtlCommand::Import(args) => import(&args).await.map(|counts| {
                println!("{counts}");
            }),
            CtlCommand::Health(target) => health(&target).await.map(|answer| {
                println!("{answer}");
            }),
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("understudy ctl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fetches the export and writes it, byte for byte, to the output file or
/// standard output; returns a one-line summary.
pub async fn export(args: &ExportArgs) -> Result<String, CtlError> {
    let url = endpoint(&args.target.server, "/understudy/v1/export");
    let request = client()
        .map_err(|source| unreachable(&url, source))?
        .get(&url);
    let body = send(request, &args.target, &url).await?;
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
    let url = endpoint(&args.target.server, "/understudy/v1/import");
    let request = client()
        .map_err(|source| unreachable(&url, source))?
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(document);
    let body = send(request, &args.target, &url).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Asks the node whether it is ready (`GET /ready`); returns its answer.
/// Anything but a 2xx within [`HEALTH_TIMEOUT`] is an error.
pub async fn health(target: &Target) -> Result<String, CtlError> {
    let url = endpoint(&target.server, "/ready");
    let request = client()
        .map_err(|source| unreachable(&url, source))?
        .get(&url)
        .timeout(HEALTH_TIMEOUT);
    let body = send(request, target, &url).await?;
    Ok(String::from_utf8_lossy(&body).trim().to_owned())
}

fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
}

fn unreachable(url: &str, error: reqwest::Error) -> CtlError {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    CtlError::Unreachable {
        url: url.to_owned(),
        reason,
    }
}

/// Sends with the secret, and turns anything but a 2xx into the server's
/// message.
async fn send(
    request: reqwest::RequestBuilder,
    target: &Target,
    url: &str,
) -> Result<Vec<u8>, CtlError> {
    let request = match target.secret.as_deref().filter(|s| !s.is_empty()) {
        Some(secret) => request.header(SECRET_HEADER, secret),
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
    use crate::config::{Cli, Command};

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
