//! Entry point: parse the command line, set up logging, run the chosen subcommand on the
//! runtime it asks for, and report a failure as the error and its causes (no backtrace
//! unless asked for, see [`cli::wants_backtrace`]).

use std::process::ExitCode;

use clap::Parser;
use gardener_extension_node::cli::{self, Cli, RuntimeFlavor};
use gardener_extension_node::malloc_tuning;

fn main() -> ExitCode {
    let cli = Cli::parse_from(cli::as_invoked(std::env::args_os().collect()));
    let backtrace =
        cli::wants_backtrace(cli.debug, std::env::var_os("RUST_LIB_BACKTRACE").as_deref());
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", cli::error_report(&error, backtrace));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // Before logging and threads start: on success this does not return.
    let reexec = malloc_tuning::reexec_with_tunables(cli.command.malloc_tunables());
    gardener_extension_node::telemetry::init(cli.log_format)?;
    if let Err(error) = reexec {
        tracing::warn!(%error, "could not execute again with GLIBC_TUNABLES; going on with glibc's malloc defaults");
    }
    let mut builder = match cli.command.runtime() {
        RuntimeFlavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        RuntimeFlavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = builder.enable_all().build()?;
    runtime.block_on(cli.command.run())
}
