//! Entry point: parse the command line, set up logging, run the chosen subcommand on the
//! runtime it asks for.

use clap::Parser;
use gardener_extension_node::cli::{Cli, RuntimeFlavor};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    gardener_extension_node::telemetry::init(cli.log_format)?;
    let mut builder = match cli.command.runtime() {
        RuntimeFlavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        RuntimeFlavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = builder.enable_all().build()?;
    runtime.block_on(cli.command.run())
}
