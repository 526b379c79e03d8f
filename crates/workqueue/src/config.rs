//! The service's configuration: ONE YAML file, parsed with serde-saphyr and
//! validated with garde into the typed [`Config`]. Unknown keys are refused;
//! every field is optional and its default is a named constant below. Errors
//! name the field (`engine.workers: ...`) and, where the parser knows it, the
//! line and column.
//!
//! ```yaml
//! database:
//!   url: "sqlite:./workqueue.db"   # or postgres://user@host/db
//!   max_connections: 10
//!   connect_timeout_seconds: 30    # waiting for PostgreSQL at start
//! server:
//!   bind: "127.0.0.1:8080"
//!   body_limit_bytes: 8388608
//!   request_timeout_seconds: 30
//!   header_read_timeout_seconds: 10  # a client slower with its headers is cut off
//!   max_connections: 1024          # more wait in the listen backlog
//!   shutdown_grace_seconds: 30     # then open connections are dropped
//! events:
//!   sqs:                           # forge deliveries through SQS (absent: webhooks only)
//!     queue_url: https://sqs.eu-west-1.amazonaws.com/123456789012/forge-events
//!     region: eu-west-1
//!     trust: signature             # or queue_policy
//! audit:
//!   archive:
//!     url: ./audit-archive         # or s3://bucket/prefix
//!   retention_days: 90
//! engine:
//!   workers: 10                    # executor calls at once (what reaches a forge)
//!   max_runs: 2048                 # item runs at once, claimed in batches
//!   sweep_interval_seconds: 30
//!   lease_seconds: 60
//!   deadline_seconds: 60
//!   max_attempts: 5
//!   outage_budget_seconds: 21600   # a forge down or rate limited: retried this long
//!   # handled_types: [mr]          # absent: every registered type; []: API only
//! auth:
//!   static_tokens:                 # from `workqueue token new --name nightly`
//!     - name: nightly
//!       sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
//!       groups: [bots]
//!   rules:
//!     - name: bots
//!       groups: [bots]
//!       permissions: [read, submit]
//!       projects: ["team/*"]
//! ```
//!
//! ## `auth:`
//!
//! Every `/api/v1` request needs `Authorization: Bearer <token>` (a static
//! token, a JWT from a rule's issuer, or an OpenShift token) and a rule in
//! `auth.rules` granting what it does; the keys are described in
//! [`wq_auth::config`]. Without rules the service still starts, but every
//! API call is refused (401 or 403) and `serve` logs a warning saying so;
//! `/healthz`, `/readyz`, `/metrics` and `/webhooks/*` answer regardless.
//! Problems in the section are reported with the rule or token they are in
//! (`auth.rules[0] (name "bots"): permissions[1]: ...`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use garde::Validate;

pub mod effective;
pub mod overrides;

pub use overrides::{ENV_PREFIX, EnvOverride};
use serde::{Deserialize, Serialize};

/// Where the data lives: a SQLite file next to the binary by default.
pub const DEFAULT_DATABASE_URL: &str = "sqlite:./workqueue.db";
/// Connections in the database pool.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Seconds to wait for a PostgreSQL connection.
pub const DEFAULT_DATABASE_CONNECT_TIMEOUT_SECONDS: u64 = 30;
/// Address of the HTTP server: loopback unless the file says otherwise.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// Largest accepted request body (8 MiB).
pub const DEFAULT_BODY_LIMIT_BYTES: usize = wq_api::DEFAULT_BODY_LIMIT_BYTES;
/// How long one HTTP request may take.
pub const DEFAULT_REQUEST_TIMEOUT_SECONDS: u64 = wq_api::DEFAULT_REQUEST_TIMEOUT.as_secs();
/// Executor and event-handler calls at once (what reaches a forge).
pub const DEFAULT_WORKERS: usize = wq_engine::DEFAULT_WORKERS;
/// Item runs in progress at once.
pub const DEFAULT_MAX_RUNS: usize = wq_engine::DEFAULT_MAX_RUNS;
/// Pause between two sweeps for forgotten work.
pub const DEFAULT_SWEEP_INTERVAL_SECONDS: u64 = 30;
/// Lease of one item's loop run; the heartbeat renews it.
pub const DEFAULT_LEASE_SECONDS: u64 = 60;
/// Wall-clock budget of one loop run before the sweep takes over.
pub const DEFAULT_DEADLINE_SECONDS: u64 = 60;
/// Consecutive executor failures that fail an item.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
/// Default `engine.outage_budget_seconds` (six hours).
pub const DEFAULT_OUTAGE_BUDGET_SECONDS: u64 = 6 * 3600;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    #[garde(dive)]
    pub database: DatabaseConfig,
    #[garde(dive)]
    pub server: ServerConfig,
    #[garde(dive)]
    pub engine: EngineSection,
    /// Forge instances by name (`forges.gitlab: {kind, url, token_env, ...}`).
    #[garde(skip)]
    pub forges: wq_forge::ForgesConfig,
    /// The `mr` item type (submission rules, intervals, labels).
    #[garde(skip)]
    pub mr: wq_mr::MrConfig,
    /// The CI retry herder's matchers (`ci_retry.matchers`); the default
    /// set when absent. Compiled by [`Config::herder`].
    #[garde(skip)]
    pub ci_retry: wq_herder::HerderConfig,
    /// Who may call the API (static tokens, JWT issuers, OpenShift, rules);
    /// validated by [`wq_auth::AuthConfig::validate`].
    #[garde(skip)]
    pub auth: wq_auth::AuthConfig,
    /// Forge deliveries through a queue (`events.sqs`), beside the webhook
    /// receivers.
    #[garde(dive)]
    pub events: EventsSection,
    /// The audit trail's archive and retention ([`wq_archive::config`]).
    #[garde(dive)]
    pub audit: wq_archive::config::AuditSection,
}

/// `events:`
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct EventsSection {
    /// An SQS queue this replica long-polls for forge deliveries (an SNS
    /// topic's subscription, or a relay's queue); none by default
    /// ([`wq_intake::config`] describes the keys).
    #[garde(dive)]
    pub sqs: Option<wq_intake::SqsConfig>,
}

/// `database:`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite:PATH`, `sqlite::memory:` or `postgres://...`
    /// (default [`DEFAULT_DATABASE_URL`]).
    #[garde(custom(database_url))]
    pub url: String,
    /// Pool size, 1 to 1000 (default [`DEFAULT_MAX_CONNECTIONS`]).
    #[garde(custom(between(1, 1000)))]
    pub max_connections: u32,
    /// How long to wait for a PostgreSQL connection (at start, and for a
    /// pooled one later), 1 to 3600 seconds (default
    /// [`DEFAULT_DATABASE_CONNECT_TIMEOUT_SECONDS`]).
    #[garde(custom(between(1, 3600)))]
    pub connect_timeout_seconds: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: DEFAULT_DATABASE_URL.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout_seconds: DEFAULT_DATABASE_CONNECT_TIMEOUT_SECONDS,
        }
    }
}

impl DatabaseConfig {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_seconds)
    }
}

/// `server:`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// `HOST:PORT` to listen on (default [`DEFAULT_BIND`]).
    #[garde(custom(socket_address))]
    pub bind: String,
    /// Largest request body in bytes, 1 KiB to 1 GiB
    /// (default [`DEFAULT_BODY_LIMIT_BYTES`]).
    #[garde(custom(between(1024, 1024 * 1024 * 1024)))]
    pub body_limit_bytes: usize,
    /// Longest request in seconds, 1 to 3600
    /// (default [`DEFAULT_REQUEST_TIMEOUT_SECONDS`]).
    #[garde(custom(between(1, 3600)))]
    pub request_timeout_seconds: u64,
    /// Seconds a connection may take to send a request's headers before it
    /// is closed, 1 to 3600 (default [`DEFAULT_HEADER_READ_TIMEOUT_SECONDS`]).
    #[garde(custom(between(1, 3600)))]
    pub header_read_timeout_seconds: u64,
    /// Connections served at once, 1 to 1000000; further ones wait in the
    /// listen backlog (default [`DEFAULT_SERVER_MAX_CONNECTIONS`]).
    #[garde(custom(between(1, 1_000_000)))]
    pub max_connections: usize,
    /// Seconds open requests may run on after SIGTERM/SIGINT before every
    /// connection is dropped, 0 to 3600
    /// (default [`DEFAULT_SHUTDOWN_GRACE_SECONDS`]).
    #[garde(custom(between(0, 3600)))]
    pub shutdown_grace_seconds: u64,
}

/// Default `server.header_read_timeout_seconds`.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECONDS: u64 = 10;
/// Default `server.max_connections`.
pub const DEFAULT_SERVER_MAX_CONNECTIONS: usize = 1024;
/// Default `server.shutdown_grace_seconds`.
pub const DEFAULT_SHUTDOWN_GRACE_SECONDS: u64 = 30;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: DEFAULT_BIND.to_owned(),
            body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
            request_timeout_seconds: DEFAULT_REQUEST_TIMEOUT_SECONDS,
            header_read_timeout_seconds: DEFAULT_HEADER_READ_TIMEOUT_SECONDS,
            max_connections: DEFAULT_SERVER_MAX_CONNECTIONS,
            shutdown_grace_seconds: DEFAULT_SHUTDOWN_GRACE_SECONDS,
        }
    }
}

impl ServerConfig {
    /// The validated `bind` address.
    pub fn bind_address(&self) -> anyhow::Result<SocketAddr> {
        self.bind
            .parse()
            .with_context(|| format!("server.bind: {:?} is not HOST:PORT", self.bind))
    }

    pub fn api_config(&self) -> wq_api::ApiConfig {
        wq_api::ApiConfig {
            body_limit_bytes: self.body_limit_bytes,
            request_timeout: Duration::from_secs(self.request_timeout_seconds),
        }
    }

    pub fn serve_config(&self) -> wq_api::ServeConfig {
        wq_api::ServeConfig {
            header_read_timeout: Duration::from_secs(self.header_read_timeout_seconds),
            max_connections: self.max_connections,
            shutdown_grace: Duration::from_secs(self.shutdown_grace_seconds),
        }
    }
}

/// `engine:` (mapped to [`wq_engine::EngineConfig`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSection {
    /// Executor and event-handler calls at once (what reaches a forge),
    /// 1 to 1000 (default [`DEFAULT_WORKERS`]).
    #[garde(custom(between(1, 1000)))]
    pub workers: usize,
    /// Item runs in progress at once, 1 to 100000 (default
    /// [`DEFAULT_MAX_RUNS`]): claimed in batches, each holding its lease
    /// from its claim to its park, and a worker only while it executes.
    #[garde(custom(between(1, 100_000)))]
    pub max_runs: usize,
    /// Seconds between sweeps, 1 to 86400
    /// (default [`DEFAULT_SWEEP_INTERVAL_SECONDS`]).
    #[garde(custom(between(1, 86_400)))]
    pub sweep_interval_seconds: u64,
    /// Lease of a loop run in seconds, 1 to 3600
    /// (default [`DEFAULT_LEASE_SECONDS`]).
    #[garde(custom(between(1, 3600)))]
    pub lease_seconds: u64,
    /// Budget of one loop run in seconds, 1 to 3600
    /// (default [`DEFAULT_DEADLINE_SECONDS`]).
    #[garde(custom(between(1, 3600)))]
    pub deadline_seconds: u64,
    /// Consecutive failures that fail an item, 1 to 100
    /// (default [`DEFAULT_MAX_ATTEMPTS`]).
    #[garde(custom(between(1, 100)))]
    pub max_attempts: i32,
    /// How long, in seconds, an item is retried while a forge is down or
    /// rate limits it (such failures do not count against
    /// `max_attempts`), 60 to 604800 (default
    /// [`DEFAULT_OUTAGE_BUDGET_SECONDS`]).
    #[garde(custom(between(60, 604_800)))]
    pub outage_budget_seconds: u64,
    /// Item types this instance processes; each must be registered in
    /// `types::build`. Absent (the default): every registered type, so a
    /// single instance works alone. Written out empty (`[]`, or `serve
    /// --api-only`): none, an API-only replica (DDR-25).
    #[garde(inner(inner(length(min = 1, max = 100))))]
    pub handled_types: Option<Vec<String>>,
}

impl Default for EngineSection {
    fn default() -> Self {
        Self {
            workers: DEFAULT_WORKERS,
            max_runs: DEFAULT_MAX_RUNS,
            sweep_interval_seconds: DEFAULT_SWEEP_INTERVAL_SECONDS,
            lease_seconds: DEFAULT_LEASE_SECONDS,
            deadline_seconds: DEFAULT_DEADLINE_SECONDS,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            outage_budget_seconds: DEFAULT_OUTAGE_BUDGET_SECONDS,
            handled_types: None,
        }
    }
}

impl EngineSection {
    /// The item types this instance processes out of the `registered` ones:
    /// those the file names, or every registered type when it names none.
    pub fn handled_types<'a>(&self, registered: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        match &self.handled_types {
            Some(named) => named.clone(),
            None => registered.into_iter().map(str::to_owned).collect(),
        }
    }

    /// An API-only replica: `handled_types` written out empty.
    pub fn api_only(&self) -> bool {
        self.handled_types.as_ref().is_some_and(Vec::is_empty)
    }

    /// The engine's settings over the `registered` item types (see
    /// [`EngineSection::handled_types`]); those the file does not expose
    /// keep the engine's defaults.
    pub fn engine_config<'a>(
        &self,
        registered: impl IntoIterator<Item = &'a str>,
    ) -> wq_engine::EngineConfig {
        wq_engine::EngineConfig {
            workers: self.workers,
            max_runs: self.max_runs,
            sweep_interval: Duration::from_secs(self.sweep_interval_seconds),
            lease: Duration::from_secs(self.lease_seconds),
            deadline: Duration::from_secs(self.deadline_seconds),
            max_attempts: self.max_attempts,
            outage_budget: Duration::from_secs(self.outage_budget_seconds),
            handled_types: self.handled_types(registered),
            ..wq_engine::EngineConfig::default()
        }
    }
}

impl Config {
    /// Parses and validates YAML text. An empty document is all defaults.
    pub fn parse(text: &str) -> Result<Config, ConfigErrors> {
        if is_blank_yaml(text) {
            return Ok(Config::default());
        }
        let config = serde_saphyr::from_str_valid::<Config>(text)
            .map_err(|error| ConfigErrors(describe(&error, text)))?;
        config
            .auth_settings()
            .map_err(|errors| ConfigErrors(errors.0))?;
        config.herder().map_err(ConfigErrors)?;
        Ok(config)
    }

    /// The compiled `ci_retry:` matchers, or every problem, each naming the
    /// matcher and field (`ci_retry.matchers[1] (name "oom").messages[0]: ...`).
    pub fn herder(&self) -> Result<wq_herder::Herder, Vec<String>> {
        self.ci_retry
            .compile()
            .map_err(|errors| errors.iter().map(ToString::to_string).collect())
    }

    /// The validated `auth:` section, or every problem in it, each naming
    /// its field.
    pub fn auth_settings(&self) -> Result<wq_auth::AuthSettings, wq_auth::AuthConfigErrors> {
        self.auth.validate()
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        Config::parse(&text).map_err(|errors| {
            anyhow::anyhow!(
                "invalid config file {}:{}",
                path.display(),
                errors.indented()
            )
        })
    }

    /// The file at `path`, or the defaults without one (no environment
    /// overrides: [`Config::load_with_env`] applies them).
    pub fn load_or_default(path: Option<&Path>) -> anyhow::Result<Config> {
        match path {
            Some(path) => Config::load(path),
            None => Ok(Config::default()),
        }
    }

    /// The file at `path` (or the defaults without one), then the
    /// `WORKQUEUE__SECTION__KEY` variables of this process over it
    /// ([`overrides`]); the whole validated. Answers the config and the
    /// overrides applied.
    pub fn load_with_env(path: Option<&Path>) -> anyhow::Result<(Config, Vec<EnvOverride>)> {
        Config::load_with_vars(path, std::env::vars_os())
    }

    /// [`Config::load_with_env`] with the variables `vars`.
    pub fn load_with_vars(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> anyhow::Result<(Config, Vec<EnvOverride>)> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?,
            None => String::new(),
        };
        let what = || match path {
            Some(path) => format!("config file {}", path.display()),
            None => "configuration (no file)".to_owned(),
        };
        let env_errors = |errors: Vec<String>| {
            anyhow::anyhow!(
                "invalid environment overrides of the {}:{}",
                what(),
                ConfigErrors(errors).indented()
            )
        };
        let config = Config::parse(&text)
            .map_err(|errors| anyhow::anyhow!("invalid {}:{}", what(), errors.indented()))?;
        let overrides = overrides::from_vars(vars).map_err(env_errors)?;
        if overrides.is_empty() {
            return Ok((config, overrides));
        }
        // The overrides go over the file as it was read (typed, defaults
        // filled in): a text value stays text (`managed_label: 1.10`), and
        // any setting can be named, written in the file or not.
        let mut tree =
            serde_json::to_value(&config).context("writing the file's settings as a tree")?;
        overrides::apply(&mut tree, &overrides).map_err(env_errors)?;
        let merged = serde_saphyr::to_string(&tree).context("writing the merged configuration")?;
        let config = Config::parse(&merged).map_err(|errors| {
            env_errors(
                errors
                    .0
                    .iter()
                    .map(|line| overrides::attribute(line, &overrides))
                    .collect(),
            )
        })?;
        Ok((config, overrides))
    }

    /// The configuration as YAML with every default filled in and secrets
    /// redacted ([`effective`]).
    pub fn effective_yaml(&self) -> anyhow::Result<String> {
        effective::render(self)
    }

    /// Checks what the file alone cannot: every handled type is registered
    /// (and, for configs not read by [`Config::parse`], the rest).
    pub fn check_against(&self, type_names: &[&str]) -> anyhow::Result<()> {
        if let Err(errors) = self.auth_settings() {
            anyhow::bail!("{errors}");
        }
        let named = self.engine.handled_types.as_deref().unwrap_or_default();
        for (index, name) in named.iter().enumerate() {
            if !type_names.contains(&name.as_str()) {
                let known: Vec<&str> = type_names.to_vec();
                let known = if known.is_empty() {
                    "none are registered yet".to_owned()
                } else {
                    format!("registered: {}", known.join(", "))
                };
                anyhow::bail!(
                    "engine.handled_types[{index}]: {name:?} is not a registered item type ({known})"
                );
            }
        }
        self.mr.compile()?;
        if let Err(errors) = self.herder() {
            anyhow::bail!("{}", errors.join("\n"));
        }
        for (name, forge) in &self.forges.instances {
            if forge.token_env.is_none() && forge.token.is_none() {
                anyhow::bail!(
                    "forges.{name}.token_env: required (the environment variable holding the API token)"
                );
            }
        }
        Ok(())
    }
}

/// The problems found in a file, one `field: message (line L, column C)`
/// per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// `" one problem"`, or each problem on its own indented line.
    fn indented(&self) -> String {
        match self.0.as_slice() {
            [single] => format!(" {single}"),
            several => several.iter().map(|line| format!("\n  {line}")).collect(),
        }
    }
}

/// Turns a parser error into `field: message (line L, column C)` lines, in
/// file order.
fn describe(error: &serde_saphyr::Error, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    describe_into(error, text, &mut found);
    found.sort_by_key(|(location, _)| *location);
    found.into_iter().map(|(_, line)| line).collect()
}

/// `(line, column)` for ordering; unknown locations sort last.
type Position = (u64, u64);

fn describe_into(error: &serde_saphyr::Error, text: &str, found: &mut Vec<(Position, String)>) {
    use serde_saphyr::Error;
    match error.without_snippet() {
        Error::ValidationError {
            issues, locations, ..
        } => {
            for issue in issues {
                let message = issue.message.clone().unwrap_or_else(|| issue.code.clone());
                let path = without_option_segments(&issue.path);
                let location = locations
                    .locations_for(&path)
                    .map(|found| found.reference_location);
                let line = format!("{}: {message}{}", dotted(&path), at_location(location));
                found.push((position(location), line));
            }
        }
        Error::ValidationErrors { errors, .. } => {
            for inner in errors {
                describe_into(inner, text, found);
            }
        }
        other => {
            let location = other.location().filter(|location| location.line() > 0);
            let rendered = other.to_string();
            let mut message = rendered.lines().next().unwrap_or_default();
            // The parser puts the location in its text; it is printed once, at the end.
            if let Some(location) = location {
                let prefix = format!("line {} column {}: ", location.line(), location.column());
                let suffix = format!(" at line {}, column {}", location.line(), location.column());
                message = message.strip_prefix(prefix.as_str()).unwrap_or(message);
                message = message.strip_suffix(suffix.as_str()).unwrap_or(message);
            }
            let line = match location.and_then(|location| key_path_at(text, location.line())) {
                Some(field) => format!("{field}: {message}{}", at_location(location)),
                None => format!("{message}{}", at_location(location)),
            };
            found.push((position(location), line));
        }
    }
}

fn position(location: Option<serde_saphyr::Location>) -> Position {
    location
        .filter(|location| location.line() > 0)
        .map_or((u64::MAX, u64::MAX), |location| {
            (location.line(), location.column())
        })
}

fn at_location(location: Option<serde_saphyr::Location>) -> String {
    match location {
        Some(location) if location.line() > 0 => {
            format!(" (line {}, column {})", location.line(), location.column())
        }
        _ => String::new(),
    }
}

/// A validation path without the empty keys an `Option`'s inner rules add
/// (`engine.handled_types.""[0]` is `engine.handled_types[0]` in the file).
fn without_option_segments(
    path: &serde_saphyr::path_map::PathKey,
) -> serde_saphyr::path_map::PathKey {
    use serde_saphyr::path_map::{PathKey, PathKind};
    path.segments()
        .fold(PathKey::new(), |cleaned, (kind, name)| match kind {
            PathKind::Key if name.is_empty() => cleaned,
            PathKind::Key => cleaned.join_key(name),
            PathKind::Index => match name.parse() {
                Ok(index) => cleaned.join_index(index),
                Err(_) => cleaned.join_key(name),
            },
        })
}

/// `engine.handled_types[0]` from a validation path.
fn dotted(path: &serde_saphyr::path_map::PathKey) -> String {
    use serde_saphyr::path_map::PathKind;
    let mut dotted = String::new();
    for (kind, name) in path.segments() {
        match kind {
            PathKind::Key if dotted.is_empty() => dotted.push_str(name),
            PathKind::Key => {
                dotted.push('.');
                dotted.push_str(name);
            }
            PathKind::Index => dotted.push_str(&format!("[{name}]")),
        }
    }
    if dotted.is_empty() {
        dotted.push_str("(file)");
    }
    dotted
}

/// The dotted key path of the `key:` on 1-based `line` of a block-style YAML
/// file (parents are the nearest less-indented keys above it). `None` when
/// the line holds no plain key.
fn key_path_at(text: &str, line: u64) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let index = usize::try_from(line).ok()?.checked_sub(1)?;
    let (mut indent, key) = plain_key(lines.get(index)?)?;
    let mut path = vec![key];
    for above in lines[..index].iter().rev() {
        if let Some((above_indent, above_key)) = plain_key(above)
            && above_indent < indent
        {
            path.push(above_key);
            indent = above_indent;
            if indent == 0 {
                break;
            }
        }
    }
    path.reverse();
    Some(path.join("."))
}

/// `(indentation, key)` of a `key: ...` line.
fn plain_key(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    let (key, _) = trimmed.split_once(':')?;
    let valid = !key.is_empty()
        && key.chars().all(|character| {
            character.is_ascii_alphanumeric() || character == '_' || character == '-'
        });
    valid.then_some((indent, key))
}

/// Only whitespace and comments.
fn is_blank_yaml(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---"
    })
}

/// A garde rule: `min <= value <= max`, said as "must be between MIN and MAX".
fn between<T>(min: T, max: T) -> impl FnOnce(&T, &()) -> garde::Result
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    move |value, _context| {
        if *value < min || *value > max {
            return Err(garde::Error::new(format!(
                "must be between {min} and {max}, got {value}"
            )));
        }
        Ok(())
    }
}

fn database_url(url: &str, _context: &()) -> garde::Result {
    let known = ["sqlite:", "postgres://", "postgresql://"];
    if known.iter().any(|prefix| url.starts_with(prefix)) {
        return Ok(());
    }
    Err(garde::Error::new(
        "must start with sqlite: (e.g. sqlite:./workqueue.db) or postgres://",
    ))
}

fn socket_address(bind: &str, _context: &()) -> garde::Result {
    match bind.parse::<SocketAddr>() {
        Ok(_) => Ok(()),
        Err(_) => Err(garde::Error::new(format!(
            "must be an IP address and port such as 127.0.0.1:8080, got {bind:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn an_empty_file_is_all_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(Config::parse("# nothing\n").unwrap(), Config::default());
        assert_eq!(Config::parse("{}").unwrap(), Config::default());
        let config = Config::default();
        assert_eq!(config.database.url, "sqlite:./workqueue.db");
        assert_eq!(config.database.max_connections, 10);
        assert_eq!(config.server.bind, "127.0.0.1:8080");
        assert_eq!(config.server.body_limit_bytes, 8 * 1024 * 1024);
        assert_eq!(config.engine.handled_types, None);
    }

    /// Without a file, or with one that leaves `engine.handled_types` out,
    /// the instance processes every registered type; an empty list written
    /// out is an API-only replica.
    #[test]
    fn absent_handled_types_are_every_registered_type_and_empty_is_api_only() {
        let registered = ["mr", "cve"];
        let config = Config::default();
        assert_eq!(config.engine.handled_types(registered), ["mr", "cve"]);
        assert_eq!(
            config.engine.engine_config(registered).handled_types,
            ["mr", "cve"]
        );
        assert!(!config.engine.api_only());
        let config = Config::parse("engine:\n  workers: 2\n").unwrap();
        assert_eq!(config.engine.handled_types(registered), ["mr", "cve"]);
        let config = Config::parse("engine:\n  handled_types: []\n").unwrap();
        assert!(config.engine.handled_types(registered).is_empty());
        assert!(config.engine.api_only());
        let config = Config::parse("engine:\n  handled_types: [cve]\n").unwrap();
        assert_eq!(config.engine.handled_types(registered), ["cve"]);
        assert!(!config.engine.api_only());
    }

    #[test]
    fn engine_defaults_match_the_engine() {
        let mapped = EngineSection {
            handled_types: Some(Vec::new()),
            ..EngineSection::default()
        }
        .engine_config([]);
        let engine = wq_engine::EngineConfig::default();
        assert_eq!(mapped.workers, engine.workers);
        assert_eq!(mapped.max_runs, engine.max_runs);
        assert_eq!(mapped.sweep_interval, engine.sweep_interval);
        assert_eq!(mapped.lease, engine.lease);
        assert_eq!(mapped.deadline, engine.deadline);
        assert_eq!(mapped.max_attempts, engine.max_attempts);
        assert_eq!(mapped.outage_budget, engine.outage_budget);
        assert_eq!(mapped.handled_types, engine.handled_types);
    }

    #[test]
    fn a_full_file_parses_and_maps() {
        let config = Config::parse(
            "database:\n  url: postgres://postgres@127.0.0.1/wq\n  max_connections: 20\n  connect_timeout_seconds: 3\n\
             server:\n  bind: 0.0.0.0:9000\n  body_limit_bytes: 4096\n  request_timeout_seconds: 5\n\
             engine:\n  workers: 3\n  max_runs: 40\n  sweep_interval_seconds: 7\n  lease_seconds: 11\n  deadline_seconds: 13\n  max_attempts: 2\n  handled_types: [mr]\n",
        )
        .unwrap();
        assert_eq!(config.database.url, "postgres://postgres@127.0.0.1/wq");
        assert_eq!(config.database.max_connections, 20);
        assert_eq!(config.database.connect_timeout(), Duration::from_secs(3));
        assert_eq!(
            config.server.bind_address().unwrap(),
            "0.0.0.0:9000".parse().unwrap()
        );
        assert_eq!(config.server.api_config().body_limit_bytes, 4096);
        assert_eq!(
            config.server.api_config().request_timeout,
            Duration::from_secs(5)
        );
        let engine = config.engine.engine_config(["mr", "cve"]);
        assert_eq!(engine.workers, 3);
        assert_eq!(engine.max_runs, 40);
        assert_eq!(engine.sweep_interval, Duration::from_secs(7));
        assert_eq!(engine.lease, Duration::from_secs(11));
        assert_eq!(engine.deadline, Duration::from_secs(13));
        assert_eq!(engine.max_attempts, 2);
        assert_eq!(engine.handled_types, vec!["mr".to_owned()]);
    }

    #[test]
    fn a_partial_section_keeps_the_other_defaults() {
        let config = Config::parse("engine:\n  workers: 4\n").unwrap();
        assert_eq!(config.engine.workers, 4);
        assert_eq!(config.engine.lease_seconds, DEFAULT_LEASE_SECONDS);
        assert_eq!(config.database, DatabaseConfig::default());
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            error_of("engine:\n  workers: 0\n"),
            "engine.workers: must be between 1 and 1000, got 0 (line 2, column 12)"
        );
        assert_eq!(
            error_of("server:\n  bind: localhost\n"),
            "server.bind: must be an IP address and port such as 127.0.0.1:8080, \
             got \"localhost\" (line 2, column 9)"
        );
        assert_eq!(
            error_of("database:\n  url: mysql://x\n  max_connections: 0\n"),
            "database.url: must start with sqlite: (e.g. sqlite:./workqueue.db) or postgres:// \
             (line 2, column 8)\n\
             database.max_connections: must be between 1 and 1000, got 0 (line 3, column 20)"
        );
        assert_eq!(
            error_of("database:\n  connect_timeout_seconds: 0\n"),
            "database.connect_timeout_seconds: must be between 1 and 3600, got 0 (line 2, column 28)"
        );
        assert_eq!(
            error_of("engine:\n  handled_types: [\"\"]\n"),
            "engine.handled_types[0]: length is lower than 1 (line 2, column 19)"
        );
    }

    #[test]
    fn unknown_fields_and_bad_types_are_refused_with_a_location() {
        let message = error_of("engine:\n  wrokers: 4\n");
        assert!(
            message
                .starts_with("engine.wrokers: unknown field `wrokers`, expected one of workers,"),
            "{message}"
        );
        assert!(message.ends_with("(line 2, column 3)"), "{message}");

        let message = error_of("server:\n  bind: \"127.0.0.1:1\"\nengine:\n  workers: many\n");
        assert_eq!(message, "engine.workers: invalid u64 (line 4, column 12)");

        let message = error_of("engine:\n  workers: 1\n  workers: 2\n");
        assert!(message.starts_with("engine.workers: "), "{message}");
        assert!(message.contains("duplicate"), "{message}");
        assert!(message.ends_with("(line 3, column 3)"), "{message}");

        let message = error_of("engine: [\n");
        assert!(message.contains("(line "), "{message}");

        let message = error_of("databse:\n  url: x\n");
        assert!(
            message.starts_with("databse: unknown field `databse`"),
            "{message}"
        );
    }

    #[test]
    fn the_auth_section_is_parsed_and_its_errors_name_the_rule() {
        let config = Config::parse(
            "auth:\n  oauth_proxy:\n    enabled: true\n  rules:\n    - name: readers\n      groups: [staff]\n      permissions: [read]\n",
        )
        .unwrap();
        assert!(config.auth.oauth_proxy.enabled);
        let settings = config.auth_settings().unwrap();
        let names: Vec<&str> = settings.rules().map(|rule| rule.name()).collect();
        assert_eq!(names, ["readers"]);
        assert!(Config::default().auth.rules.is_empty());

        assert_eq!(
            error_of(
                "auth:\n  rules:\n    - name: x\n      groups: [staff]\n      permissions: [read, deploy]\n    - name: y\n      permissions: [read]\n"
            ),
            "auth.rules[0] (name \"x\"): permissions[1]: \"deploy\" is not a permission \
             (expected one of read, submit, retry, merge, admin)\n\
             auth.rules[1] (name \"y\"): needs either groups or issuer + claims to say whom it matches"
        );
        let message = error_of("auth:\n  rulez: []\n");
        assert!(
            message.starts_with("auth.rulez: unknown field `rulez`"),
            "{message}"
        );

        let mut config = Config::default();
        config.auth.rules.push(wq_auth::config::RuleConfig {
            name: "empty".into(),
            groups: Some(Vec::new()),
            issuer: None,
            claims: None,
            allow_any_subject: false,
            claims_case_insensitive: false,
            permissions: vec!["read".into()],
            item_types: None,
            forges: None,
            projects: None,
        });
        assert_eq!(
            config.check_against(&[]).unwrap_err().to_string(),
            "auth.rules[0] (name \"empty\"): groups: must name at least one group"
        );
    }

    #[test]
    fn the_queue_section_is_read_and_checked() {
        let config = Config::parse(
            "events:\n  sqs:\n    queue_url: http://127.0.0.1:5000/123456789012/events\n    \
             region: us-east-1\n    trust: queue_policy\n",
        )
        .unwrap();
        let sqs = config.events.sqs.expect("sqs");
        assert_eq!(sqs.trust, wq_intake::QueueTrust::QueuePolicy);
        assert_eq!(sqs.wait_seconds, 20);
        assert_eq!(sqs.max_messages, 10);
        let errors = Config::parse(
            "events:\n  sqs:\n    queue_url: sqs-queue\n    wait_seconds: 21\n    max_messages: 0\n",
        )
        .unwrap_err()
        .to_string();
        for field in [
            "events.sqs.queue_url",
            "events.sqs.wait_seconds",
            "events.sqs.max_messages",
        ] {
            assert!(errors.contains(field), "{field} in {errors}");
        }
        let unknown = Config::parse(
            "events:\n  sqs:\n    queue_url: https://sqs.example/q\n    trust: anyone\n",
        )
        .unwrap_err()
        .to_string();
        assert!(unknown.contains("trust"), "{unknown}");
        assert!(Config::default().events.sqs.is_none());
    }

    #[test]
    fn the_audit_section_is_read_and_checked() {
        let config = Config::parse(
            "audit:\n  archive:\n    url: s3://audit-bucket/prod\n    interval_seconds: 30\n  \
             retention_days: 30\n",
        )
        .unwrap();
        assert_eq!(config.audit.archive.url, "s3://audit-bucket/prod");
        assert_eq!(config.audit.archive().retention_days, Some(30));
        assert_eq!(Config::default().audit.archive.url, "./audit-archive");
        let errors = Config::parse("audit:\n  retention_days: 0\n  archive:\n    batch_size: 0\n")
            .unwrap_err()
            .to_string();
        for field in ["audit.retention_days", "audit.archive.batch_size"] {
            assert!(errors.contains(field), "{field} in {errors}");
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).into(), (*value).into()))
            .collect()
    }

    /// File < environment: a variable replaces the file's value, adds one
    /// the file leaves out, and reaches into maps (a forge by its name).
    #[test]
    fn environment_variables_override_the_file() {
        let dir = std::env::temp_dir().join(format!("wq-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("workqueue.yaml");
        std::fs::write(
            &path,
            "engine:\n  workers: 2\nforges:\n  gitlab:\n    kind: gitlab\n    \
             url: https://gitlab.example.com\n    token_env: GITLAB_TOKEN\n\
             audit:\n  archive:\n    url: 1.10\n",
        )
        .unwrap();
        let (config, overrides) = Config::load_with_vars(
            Some(&path),
            env(&[
                ("WORKQUEUE__ENGINE__WORKERS", "7"),
                ("WORKQUEUE__ENGINE__HANDLED_TYPES", "[]"),
                ("WORKQUEUE__DATABASE__URL", "postgres://wq:pw@db/wq"),
                ("WORKQUEUE__FORGES__GITLAB__URL", "https://gitlab.internal"),
                ("WORKQUEUE__MR__MANAGED_LABEL", "42"),
                (
                    "WORKQUEUE__MR__REVIEW_OVERRIDES",
                    "[{forge: gitlab, require_review: false}]",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(overrides.len(), 6);
        assert_eq!(config.engine.workers, 7);
        assert!(config.engine.api_only());
        assert_eq!(config.database.url, "postgres://wq:pw@db/wq");
        let gitlab = &config.forges.instances["gitlab"];
        assert_eq!(gitlab.url, "https://gitlab.internal");
        assert_eq!(
            gitlab.token_env.as_deref(),
            Some("GITLAB_TOKEN"),
            "kept from the file"
        );
        assert_eq!(
            config.mr.managed_label, "42",
            "a number is text for a text setting"
        );
        assert_eq!(config.mr.review_overrides.len(), 1);
        assert!(!config.mr.review_overrides[0].require_review);
        assert_eq!(config.engine.lease_seconds, DEFAULT_LEASE_SECONDS);
        assert_eq!(
            config.audit.archive.url, "1.10",
            "the file's text stays text"
        );

        // Without a file, and without variables.
        let (config, _) =
            Config::load_with_vars(None, env(&[("WORKQUEUE__SERVER__BIND", "0.0.0.0:9000")]))
                .unwrap();
        assert_eq!(config.server.bind, "0.0.0.0:9000");
        let (config, overrides) = Config::load_with_vars(Some(&path), env(&[])).unwrap();
        assert!(overrides.is_empty());
        assert_eq!(config, Config::load(&path).unwrap());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// An invalid value, an unknown key or a path through a scalar names
    /// the variable.
    #[test]
    fn an_invalid_override_names_the_variable() {
        let message = |pairs: &[(&str, &str)]| {
            format!(
                "{:#}",
                Config::load_with_vars(None, env(pairs)).unwrap_err()
            )
        };
        assert_eq!(
            message(&[("WORKQUEUE__ENGINE__WORKERS", "0")]),
            "invalid environment overrides of the configuration (no file): \
             WORKQUEUE__ENGINE__WORKERS: engine.workers: must be between 1 and 1000, got 0"
        );
        let unknown = message(&[("WORKQUEUE__ENGINE__WROKERS", "2")]);
        assert!(
            unknown.contains("WORKQUEUE__ENGINE__WROKERS: engine.wrokers: unknown field"),
            "{unknown}"
        );
        let typed = message(&[("WORKQUEUE__SERVER__BODY_LIMIT_BYTES", "lots")]);
        assert!(
            typed.contains("WORKQUEUE__SERVER__BODY_LIMIT_BYTES: server.body_limit_bytes: "),
            "{typed}"
        );
        let crossing = message(&[
            ("WORKQUEUE__ENGINE__WORKERS", "2"),
            ("WORKQUEUE__ENGINE__WORKERS__MAX", "2"),
        ]);
        assert!(
            crossing.contains("WORKQUEUE__ENGINE__WORKERS__MAX: engine.workers is not a map"),
            "{crossing}"
        );
    }

    #[test]
    fn handled_types_must_be_registered() {
        let config = Config::parse("engine:\n  handled_types: [mr]\n").unwrap();
        let message = config.check_against(&[]).unwrap_err().to_string();
        assert_eq!(
            message,
            "engine.handled_types[0]: \"mr\" is not a registered item type (none are registered yet)"
        );
        assert!(Config::default().check_against(&[]).is_ok());
    }
}
