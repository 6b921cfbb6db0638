//! `gardener-extension-node render ...`: print what the operator would create for an object,
//! without a cluster. Uses the same validate/render functions as the controllers.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;

use crate::api::ContainerRuntime;
use crate::controllers::containerruntime;
use crate::imagevector::ImageVector;

/// What to render.
#[derive(Debug, Subcommand)]
pub enum RenderCommand {
    /// The shoot manifests of a gVisor ContainerRuntime (both ManagedResources).
    Containerruntime(ContainerRuntimeArgs),
}

/// Flags of `render containerruntime`.
#[derive(Debug, Args)]
pub struct ContainerRuntimeArgs {
    /// The ContainerRuntime (YAML or JSON file; `-` for stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// The shoot's Cluster (accepted for symmetry with the other kinds; gVisor rendering does
    /// not depend on it).
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Repository of a test installation image (see the operator flag of the same name).
    #[arg(long, env = "GVISOR_INSTALLATION_TEST_REPOSITORY")]
    pub gvisor_installation_test_repository: Option<String>,
}

impl RenderCommand {
    /// Renders and prints to stdout.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            RenderCommand::Containerruntime(args) => {
                print!("{}", render_container_runtime(&args)?);
                Ok(())
            }
        }
    }
}

fn read_object<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    serde_norway::from_str(&text).with_context(|| format!("{} does not decode", path.display()))
}

/// The text `render containerruntime` prints.
pub fn render_container_runtime(args: &ContainerRuntimeArgs) -> anyhow::Result<String> {
    let object: ContainerRuntime = read_object(&args.file)?;
    if let Some(cluster) = &args.cluster {
        let _: crate::api::Cluster = read_object(cluster)?;
    }
    let templates = containerruntime::render::Templates::new().context("parsing templates")?;
    let images = ImageVector::load().context("loading the image vector")?;
    let rendered = containerruntime::reconcile::render_parts(
        &templates,
        &images,
        args.gvisor_installation_test_repository.as_deref(),
        &object,
    )
    .map_err(|e| anyhow::anyhow!(crate::extension::error::chain(&e)))?;
    Ok(format!(
        "# ManagedResource {shared_mr}\n{shared}---\n# ManagedResource {pool_mr}\n{installation}",
        shared_mr = containerruntime::SHARED_MANAGED_RESOURCE,
        pool_mr = containerruntime::installation_managed_resource(&rendered.pool),
        shared = rendered.shared,
        installation = rendered.installation,
    ))
}
