//! `workqueue`: the service binary. `serve` runs the engine and the HTTP API
//! over one database; `migrate`, `config check`, `token new` and `items` are
//! tools around it. Errors are `anyhow` here; each command prints one message and exits
//! with 1 on failure.

use std::process::ExitCode;

use clap::Parser;

use workqueue::cli::{AuditCommand, Cli, Command, ConfigCommand, TokenCommand};
use workqueue::config::{Config, overrides};
#[cfg(feature = "demo")]
use workqueue::demo;
use workqueue::{app, items, logging, serve, token, types};

/// mimalloc: the engine and the stores allocate many short-lived values
/// (rows, JSON, audit records) across threads, where glibc's allocator
/// spent a large share of the process's time (BENCHMARKS.md, 2026-12-06).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config(ConfigCommand::Check { file }) => {
            let (config, overrides) = Config::load_with_env(file.as_deref())?;
            let source = match &file {
                Some(file) => format!("config file {}", file.display()),
                None => "configuration (no file)".to_owned(),
            };
            config.check_against(types::TYPE_NAMES).map_err(|error| {
                let message = overrides::attribute(&format!("{error:#}"), &overrides);
                anyhow::anyhow!("invalid {source}: {message}")
            })?;
            print!("{}", config.effective_yaml()?);
            let names: Vec<&str> = overrides.iter().map(|o| o.variable.as_str()).collect();
            if names.is_empty() {
                eprintln!("ok: {source} is valid (printed with defaults, secrets redacted)");
            } else {
                eprintln!(
                    "ok: {source} with {} is valid (printed with defaults, secrets redacted)",
                    names.join(", ")
                );
            }
            Ok(())
        }
        Command::Serve(args) => {
            logging::init(cli.log_format);
            let (mut config, overrides) = Config::load_with_env(args.config.config.as_deref())?;
            log_overrides(&overrides);
            if args.api_only {
                config.engine.handled_types = Some(Vec::new());
            }
            runtime()?.block_on(serve::serve(&config))
        }
        Command::Audit(AuditCommand::Verify(args)) => {
            logging::init_with_default(cli.log_format, "warn");
            let (config, overrides) = Config::load_with_env(args.config.as_deref())?;
            log_overrides(&overrides);
            runtime()?.block_on(async {
                let store = app::open_store(&config).await?;
                let progress =
                    workqueue::progress::Progress::spinner("walking the audit hash chains");
                let verified = store.audit_verify().await;
                progress.finish();
                match verified? {
                    (checked, None) => {
                        println!("ok: {checked} audit records, every chain intact");
                        Ok(())
                    }
                    (checked, Some(broken)) => {
                        println!("broken: {broken} ({checked} records before it held)");
                        std::process::exit(1);
                    }
                }
            })
        }
        Command::Migrate(args) => {
            logging::init(cli.log_format);
            let (config, overrides) = Config::load_with_env(args.config.as_deref())?;
            log_overrides(&overrides);
            runtime()?.block_on(serve::migrate(&config))
        }
        #[cfg(feature = "demo")]
        Command::Demo(args) => {
            // The demo prints its own progress; logs only for trouble.
            logging::init_with_default(cli.log_format, "warn");
            runtime()?.block_on(demo::run(args))
        }
        Command::Health { url } => runtime()?.block_on(async {
            let client = reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(5))
                .redirect(reqwest::redirect::Policy::none())
                .build()?;
            let response = client
                .get(&url)
                .send()
                .await
                .map_err(|error| anyhow::anyhow!("{url}: {error}"))?;
            let status = response.status();
            if !status.is_success() {
                anyhow::bail!("{url} answered {status}");
            }
            println!("ok: {url} answered {status}");
            Ok(())
        }),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "workqueue", &mut std::io::stdout());
            Ok(())
        }
        Command::Token(TokenCommand::New { name }) => {
            print!("{}", token::new_token_text(&name)?);
            Ok(())
        }
        Command::Items(args) => {
            let output = runtime()?.block_on(items::run(args))?;
            print!("{output}");
            Ok(())
        }
    }
}

/// Names (never the values of) the environment variables that changed the
/// file's settings.
fn log_overrides(overrides: &[workqueue::config::EnvOverride]) {
    if !overrides.is_empty() {
        let variables: Vec<&str> = overrides.iter().map(|o| o.variable.as_str()).collect();
        tracing::info!(?variables, "settings overridden by the environment");
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
