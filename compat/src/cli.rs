//! `understudy compat`: record a server's answers to the corpus, or check
//! a server against recorded transcripts.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::diff::Allowlist;
use crate::run::Target;
use crate::transcript::Meta;

/// `understudy compat`.
#[derive(Debug, Args)]
pub struct CompatArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: CompatCommand,
}

/// The compat commands.
#[derive(Debug, Subcommand)]
pub enum CompatCommand {
    /// Send the corpus to a server (a real Nacos, say) and write its
    /// answers as transcripts.
    Record(RecordArgs),
    /// Replay transcripts against a server and compare, answer by answer.
    Check(CheckArgs),
    /// List the corpus' sequences.
    List(CorpusArgs),
}

/// Where the server is and which sequences to send.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The server's HTTP address; gRPC is at its port + 1000.
    #[arg(long, default_value = "127.0.0.1:8848")]
    pub server: SocketAddr,
    /// The gRPC port, when not HTTP + 1000.
    #[arg(long)]
    pub grpc_port: Option<u16>,
}

impl ServerArgs {
    fn target(&self) -> Target {
        let mut target = Target::at(self.server);
        if let Some(port) = self.grpc_port {
            target.grpc.set_port(port);
        }
        target
    }
}

/// Extra sequences.
#[derive(Debug, Args)]
pub struct CorpusArgs {
    /// A folder of `*.toml` sequence files, sent after the built-in ones.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
}

/// `compat record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub corpus: CorpusArgs,
    /// The folder the transcripts are written to.
    #[arg(long)]
    pub out: PathBuf,
    /// The commit the server was built from, kept in `meta.json`.
    #[arg(long, default_value = "")]
    pub commit: String,
    /// How the server ran, kept in `meta.json`.
    #[arg(long, default_value = "")]
    pub settings: String,
    /// Only these sequences (all when absent).
    #[arg(long)]
    pub only: Vec<String>,
}

/// `compat check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub corpus: CorpusArgs,
    /// The folder of recorded transcripts.
    #[arg(long)]
    pub golden: PathBuf,
    /// The allowlist of differences kept on purpose.
    #[arg(long)]
    pub allow: Option<PathBuf>,
}

/// Runs a compat command; `Ok(false)` when a check found differences.
pub async fn main(args: CompatArgs) -> anyhow::Result<bool> {
    match args.command {
        CompatCommand::List(corpus) => {
            for s in crate::corpus::load(corpus.corpus.as_deref())? {
                let on = if s.nacos.is_empty() {
                    "all".to_owned()
                } else {
                    format!("{:?}", s.nacos)
                };
                println!(
                    "{:<36} {:>3} steps  nacos {on:<5} {}",
                    s.name,
                    s.steps.len(),
                    s.about
                );
            }
            Ok(true)
        }
        CompatCommand::Record(args) => {
            let target = args.server.target();
            let version = crate::server_version(&target).await?;
            let mut sequences = crate::corpus::load(args.corpus.corpus.as_deref())?;
            if !args.only.is_empty() {
                sequences.retain(|s| args.only.contains(&s.name));
            }
            let transcripts = crate::record(&target, &sequences, crate::major(&version)).await?;
            let date = humantime::format_rfc3339(std::time::SystemTime::now()).to_string();
            let meta = Meta {
                version,
                commit: args.commit,
                recorded: date[..10].to_owned(),
                settings: args.settings,
                sequences: transcripts.iter().map(|t| t.name.clone()).collect(),
            };
            crate::transcript::write(&args.out, &meta, &transcripts)?;
            let answers: usize = transcripts.iter().map(|t| t.answers.len()).sum();
            println!(
                "recorded {} sequences, {answers} answers of version {} into {}",
                transcripts.len(),
                meta.version,
                args.out.display()
            );
            Ok(true)
        }
        CompatCommand::Check(args) => {
            let target = args.server.target();
            let sequences = crate::corpus::load(args.corpus.corpus.as_deref())?;
            let allowlist = match &args.allow {
                Some(path) => Allowlist::read(path)?,
                None => Allowlist::default(),
            };
            let report = crate::check(&target, &args.golden, &sequences, &allowlist).await?;
            print!("{}", report.describe());
            let clean = report.failures().next().is_none();
            Ok(clean)
        }
    }
}
