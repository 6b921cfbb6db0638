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
    /// The user data of a provision OperatingSystemConfig, or the node-agent Secret of a
    /// reconcile one.
    Osc(OscArgs),
    /// The machine classes, class secrets and machine deployments of a Worker.
    Worker(crate::controllers::worker::print::RenderWorkerArgs),
}

/// Flags of `render osc`.
#[derive(Debug, Args)]
pub struct OscArgs {
    /// The OperatingSystemConfig (YAML or JSON file; `-` for stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Folder of Secret manifests (YAML or JSON, as `kubectl get secret -o yaml` prints
    /// them) that the OSC's `secretRef` files refer to.
    #[arg(long)]
    pub secrets: Option<PathBuf>,
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
            RenderCommand::Osc(args) => {
                print!("{}", render_osc(&args)?);
                Ok(())
            }
            RenderCommand::Worker(args) => {
                print!("{}", args.run()?);
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

/// The text `render osc` prints: the user data (provision) or the node-agent Secret manifest
/// (reconcile), exactly as the controller renders them.
pub fn render_osc(args: &OscArgs) -> anyhow::Result<String> {
    use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
    use crate::controllers::operatingsystemconfig::{self as osc, content::ReferencedSecrets};

    let object: crate::api::OperatingSystemConfig = read_object(&args.file)?;
    let mut secrets = ReferencedSecrets::default();
    if let Some(dir) = &args.secrets {
        for secret in read_secrets(dir)? {
            let name = secret.metadata.name.clone().unwrap_or_default();
            secrets.insert(name, osc::fetch::secret_data(&secret));
        }
    }
    let chain = |e: osc::Error| anyhow::anyhow!(crate::extension::error::chain(&e));
    match object.spec.purpose {
        OperatingSystemConfigPurpose::Provision => {
            osc::reconcile::render_user_data(&object, &secrets).map_err(chain)
        }
        OperatingSystemConfigPurpose::Reconcile => {
            let (secret, _) =
                osc::reconcile::render_node_agent_secret(&object, &secrets).map_err(chain)?;
            let manifest = secret
                .manifest()
                .map_err(|e| chain(osc::Error::NodeAgent(e)))?;
            Ok(format!(
                "# ManagedResource {}\n{manifest}",
                osc::node_agent_managed_resource(&object)
            ))
        }
    }
}

/// Every Secret in the YAML/JSON files of `dir` (sorted by file name; several documents per
/// file allowed).
fn read_secrets(dir: &Path) -> anyhow::Result<Vec<k8s_openapi::api::core::v1::Secret>> {
    use serde::Deserialize;

    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    paths.sort();
    let mut secrets = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for document in serde_norway::Deserializer::from_str(&text) {
            let secret =
                k8s_openapi::api::core::v1::Secret::deserialize(document).with_context(|| {
                    format!("{} holds something other than a Secret", path.display())
                })?;
            secrets.push(secret);
        }
    }
    Ok(secrets)
}
