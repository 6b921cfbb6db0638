//! Logging set-up shared by every subcommand.
//!
//! The filter comes from `RUST_LOG` (default `info`, without kube's per-request error lines); `--log-format json` switches to one JSON
//! object per line, which is what log collectors in a seed expect.

use clap::ValueEnum;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber. Fails if `RUST_LOG` does not parse or a subscriber
/// is already installed.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.is_empty() => EnvFilter::try_new(value)?,
        // kube's client logs every failed request at error level; we log errors where
        // they are handled instead, with context.
        _ => EnvFilter::new("info,kube_client::client::builder=off"),
    };
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init()?,
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init()?,
    }
    Ok(())
}
