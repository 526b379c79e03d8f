//! The command line (clap derive): `serve`, `migrate`, `config check`,
//! `items list|show|submit|retry|merge|retry-merge|cancel|audit`, `token
//! new`, `audit verify`, `completions`, and `demo` in a build with the
//! `demo` feature (the default).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use wq_core::{ItemId, Phase};

use crate::logging::LogFormat;

/// Where the `items` commands find the API when neither `--url` nor
/// `WORKQUEUE_URL` says.
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:8080";

#[derive(Debug, Parser)]
#[command(
    name = "workqueue",
    version,
    about = "Owns merge requests from submission to merge."
)]
pub struct Cli {
    /// Log line format (logs go to stderr; filter with RUST_LOG).
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: migrations, the processing engine and the HTTP API.
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(ConfigArg),
    /// Work with the configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Inspect and retry work items through the API.
    Items(ItemsArgs),
    /// Make API tokens for the config file.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Check the audit trail in the configured database.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Ask a running service whether it is alive: exits with 0 when URL
    /// answers 2xx within 5 s, else 1 (the container's health check).
    Health {
        #[arg(long, default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
    /// Print a completion script for SHELL on stdout (e.g. `workqueue
    /// completions bash > /etc/bash_completion.d/workqueue`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run the whole service with no setup: SQLite, a simulated GitLab and
    /// GitHub in the same process, a few submitted changes followed to their
    /// end.
    #[cfg(feature = "demo")]
    Demo(DemoArgs),
}

#[cfg(feature = "demo")]
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Port of the service (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Stop once every change has reached its end state instead of serving
    /// until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// The YAML configuration file; without one, the defaults (SQLite in
    /// ./workqueue.db, listening on 127.0.0.1:8080). Either way the
    /// environment's `WORKQUEUE__SECTION__KEY` variables override settings.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Process no item type here: serve the API and webhooks only, for a
    /// replica beside others that process (the same as writing
    /// `engine.handled_types: []`). Without it, the types the file names,
    /// or every registered type when it names none.
    #[arg(long)]
    pub api_only: bool,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk every item's hash chain: prints how many records held, or names
    /// the first broken link and exits with 1.
    Verify(ConfigArg),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Parse and validate FILE (or no file) with the `WORKQUEUE__SECTION__KEY`
    /// environment overrides: prints the effective configuration (defaults
    /// filled in, secrets redacted) and "ok" on stderr, or the errors and
    /// exits with 1.
    Check { file: Option<PathBuf> },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a new random static token, once, and the `auth.static_tokens`
    /// entry (its SHA-256) to paste into the config file.
    New {
        /// Name of the token, shown in logs and recorded with what its
        /// holder does.
        #[arg(long)]
        name: String,
    },
}

/// `items merge --method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MergeMethodArg {
    Merge,
    Squash,
    Rebase,
}

impl MergeMethodArg {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merge => "merge",
            Self::Squash => "squash",
            Self::Rebase => "rebase",
        }
    }
}

#[derive(Debug, Args)]
pub struct ItemsArgs {
    /// Base URL of the workqueue API.
    #[arg(long, env = "WORKQUEUE_URL", default_value = DEFAULT_API_URL, global = true)]
    pub url: String,

    /// API token, sent as `Authorization: Bearer`.
    #[arg(long, env = "WORKQUEUE_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,

    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: ItemsCommand,
}

#[derive(Debug, Subcommand)]
pub enum ItemsCommand {
    /// List work items, newest first.
    List {
        /// Only items in this phase (active, completed, failed, cancelled).
        #[arg(long)]
        phase: Option<Phase>,
        /// Only items of this type.
        #[arg(long)]
        item_type: Option<String>,
        /// Page size (1 to 500; the API's default is 50).
        #[arg(long)]
        limit: Option<u32>,
        /// Items older than this id (the previous page's `next` cursor).
        #[arg(long)]
        before: Option<ItemId>,
    },
    /// Show one item: its fields, its merge request, the gates, the merge
    /// queue entry, the merge journal and its dimensions.
    Show { id: ItemId },
    /// Submit a change: FILE (or `-` for stdin) holds the body of `POST
    /// /api/v1/work-items`, as JSON or YAML.
    Submit {
        file: String,
        /// Then follow the item until it ends (progress on a terminal);
        /// exits with 1 unless it completed.
        #[arg(long)]
        wait: bool,
    },
    /// Make a failed or cancelled item active again.
    Retry { id: ItemId },
    /// Merge the item's merge request now (needs `merge`), bypassing
    /// workqueue's gates but not the forge's.
    Merge {
        id: ItemId,
        /// How to merge; the configured or the project's method without it.
        #[arg(long, value_enum)]
        method: Option<MergeMethodArg>,
        /// The forge merges only this head (a full commit SHA).
        #[arg(long)]
        expected_head: Option<String>,
    },
    /// Allow one more automatic merge evaluation after a failed attempt.
    RetryMerge { id: ItemId },
    /// Stop managing the item and close its merge request with a note
    /// (`admin`, or the item's submitter).
    Cancel {
        id: ItemId,
        /// Shown in the note and the item's error.
        #[arg(long)]
        reason: Option<String>,
        /// Then wait until the item is cancelled (progress on a terminal).
        #[arg(long)]
        wait: bool,
    },
    /// The item's audit trail: who asked for what, what was written to the
    /// forge and what it answered.
    Audit { id: ItemId },
}
