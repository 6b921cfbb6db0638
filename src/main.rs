//! Entry point: parse the command line, set up logging, run the chosen subcommand on the
//! runtime it asks for.

use clap::Parser;
use gardener_extension_node::cli::{Cli, RuntimeFlavor};
use gardener_extension_node::malloc_tuning;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
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
