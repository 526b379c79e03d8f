//! Tracing subscriber set-up: JSON lines or human-readable text on stderr,
//! filtered by `RUST_LOG` (default `info`).

use std::io::IsTerminal as _;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Readable text for a terminal.
    #[default]
    Human,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The filter used when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info";

/// Installs the global subscriber; logs go to stderr so command output on
/// stdout stays clean. Colours only on a terminal.
pub fn init(format: LogFormat) {
    init_with_default(format, DEFAULT_FILTER);
}

/// Like [`init`] with another filter when `RUST_LOG` is not set.
pub fn init_with_default(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}
