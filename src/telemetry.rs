//! Logging set-up shared by every subcommand.
//!
//! The filter comes from `RUST_LOG` (default `info`, without kube's per-request error lines); `--log-format json` switches to one JSON
//! object per line, which is what log collectors in a seed expect. Text lines are coloured
//! only when stderr is a terminal and `NO_COLOR` is unset or empty (<https://no-color.org>),
//! so a log file or a pipe gets plain text.

use std::ffi::OsStr;
use std::io::IsTerminal;

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
        LogFormat::Text => {
            let ansi = use_colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            );
            registry
                .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
                .try_init()?
        }
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init()?,
    }
    Ok(())
}

/// Whether text log lines carry ANSI colour codes: only on a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string.
pub fn use_colour(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }
}
