//! The server's command line: `serve` (the default), `ctl` and `sim`, and
//! `serve`'s arguments (a config file and the settings). The settings
//! themselves, and their validation, are in `config.rs`; the `understudy`
//! binary adds `chaos` on top.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{ConfigError, Settings, ValidConfig};

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "understudy",
    version,
    about = "A service registry that stands in for Nacos"
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; `serve` when absent.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Settings for the default `serve`.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
// Built once per process from the command line; boxing `Serve` to keep it
// as small as `Ctl` would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Serve one registry node (the default).
    Serve(ServeArgs),
    /// Commands against a running node: list, watch, register and
    /// deregister; cluster status and chaos links; export and import;
    /// health; hash a password for the users list.
    Ctl(crate::ctl::CtlArgs),
    /// Run a whole multi-DC cluster in this process, each node on its own
    /// ports, e.g. `sim --dc hz=2 --dc sh=1 --link hz-sh=40ms~10ms,loss=1%`.
    Sim(crate::sim::SimArgs),
}

impl Cli {
    /// The serve arguments, whichever way they were given. (`ctl` serves
    /// nothing; `main` runs it before it asks for these.)
    pub fn into_serve_args(self) -> ServeArgs {
        match self.command {
            Some(Command::Serve(args)) => args,
            Some(Command::Ctl(_) | Command::Sim(_)) | None => self.serve,
        }
    }
}

/// `serve`'s arguments: a config file and the settings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// A TOML file with any of the settings below (keys in snake_case).
    #[arg(long, env = "UNDERSTUDY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The settings.
    #[command(flatten)]
    pub settings: Settings,
}

impl ServeArgs {
    /// Layers flags and env over the config file and validates.
    pub fn resolve(self) -> Result<ValidConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        ValidConfig::from_settings(self.settings.over(file))
    }
}
