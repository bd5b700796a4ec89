//! The server's command line: `serve` (the default), `ctl` and `sim`, and
//! `serve`'s arguments (a config file and the settings). The settings
//! themselves, and their validation, are in `config/`; the `understudy`
//! binary adds `chaos` on top. [`with_stated_defaults`] writes each
//! setting's default into its help.

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Parses `args` (the program name first), with the settings' defaults
    /// in the help.
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = with_stated_defaults(Self::command()).try_get_matches_from(args)?;
        Self::from_arg_matches(&matches)
    }

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

/// `command` with each setting's default at the end of its help, as
/// `[default: VALUE]`: in its own arguments and in its `serve`
/// subcommand's. The values are the settings tree's defaults
/// ([`crate::config::stated_defaults`]), so they are written nowhere else.
pub fn with_stated_defaults(command: clap::Command) -> clap::Command {
    let stated = crate::config::stated_defaults();
    let state = |command: clap::Command| {
        command.mut_args(|arg| match stated.get(arg.get_id().as_str()) {
            Some(value) => {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [default: {value}]"))
            }
            None => arg,
        })
    };
    state(command).mut_subcommands(|sub| {
        if sub.get_name() == "serve" {
            state(sub)
        } else {
            sub
        }
    })
}
