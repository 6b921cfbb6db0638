//! Entry point: parse the command line, set up logging, run the chosen subcommand.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = gardener_extension_node::cli::Cli::parse();
    gardener_extension_node::telemetry::init(cli.log_format)?;
    cli.command.run().await
}
