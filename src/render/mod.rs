//! `gardener-extension-node render ...`: print what the operator would create for an object,
//! without a cluster. Uses the same validate/render functions as the controllers.
//!
//! Each command reads one or more objects of its kind ([`input`]: several YAML documents or
//! a `List`, as `kubectl get -o yaml` prints them) and renders each in turn. `render worker`
//! and `render osc` with `--impact --previous OLD` print instead what the change from OLD
//! does to machines and nodes ([`impact`]).

pub mod impact;
pub mod input;
pub mod worker;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

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
    Worker(worker::RenderWorkerArgs),
}

/// Flags of `render osc`.
#[derive(Debug, Args)]
pub struct OscArgs {
    /// The OperatingSystemConfig(s) (YAML or JSON file, several documents or a `List`; `-`
    /// for stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Folder of Secret manifests (YAML or JSON, as `kubectl get secret -o yaml` prints
    /// them) that the OSC's `secretRef` files refer to.
    #[arg(long)]
    pub secrets: Option<PathBuf>,
    /// `--impact --previous OLD [-o text|json]`.
    #[command(flatten)]
    pub impact: impact::ImpactArgs,
}

/// Flags of `render containerruntime`.
#[derive(Debug, Args)]
pub struct ContainerRuntimeArgs {
    /// The ContainerRuntime(s) (YAML or JSON file, several documents or a `List`; `-` for
    /// stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// The shoot's Cluster (optional; accepted for symmetry with the other kinds, gVisor
    /// rendering does not depend on it).
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Repository of a test installation image (see the operator flag of the same name).
    #[arg(long, env = "GVISOR_INSTALLATION_TEST_REPOSITORY")]
    pub gvisor_installation_test_repository: Option<String>,
}

impl RenderCommand {
    /// Renders and prints to stdout.
    pub fn run(self) -> anyhow::Result<()> {
        let text = match self {
            RenderCommand::Containerruntime(args) => render_container_runtimes(&args)?,
            RenderCommand::Osc(args) => render_oscs(&args)?,
            RenderCommand::Worker(args) => args.run()?,
        };
        crate::stdout::print(&text).context("writing to stdout")
    }
}

/// The text `render containerruntime` prints for every object in the file.
pub fn render_container_runtimes(args: &ContainerRuntimeArgs) -> anyhow::Result<String> {
    let objects: Vec<ContainerRuntime> = input::read_objects(&args.file)?;
    if let Some(cluster) = &args.cluster {
        let _: crate::api::Cluster = input::read_one(cluster)?;
    }
    let templates = containerruntime::render::Templates::new().context("parsing templates")?;
    let images = ImageVector::load().context("loading the image vector")?;
    let mut parts = Vec::new();
    for object in &objects {
        let text = render_container_runtime(
            &templates,
            &images,
            args.gvisor_installation_test_repository.as_deref(),
            object,
        )
        .with_context(|| input::describe(object))?;
        parts.push((input::describe(object), text));
    }
    Ok(input::join_rendered(parts))
}

/// The text `render osc` prints for every object in the file (with `--impact`: what the
/// change from `--previous` does, [`impact`]).
pub fn render_oscs(args: &OscArgs) -> anyhow::Result<String> {
    if let Some(previous) = args.impact.previous() {
        return impact_oscs(args, previous);
    }
    let objects: Vec<crate::api::OperatingSystemConfig> = input::read_objects(&args.file)?;
    let mut parts = Vec::new();
    for object in &objects {
        let text =
            render_osc(object, args.secrets.as_deref()).with_context(|| input::describe(object))?;
        parts.push((input::describe(object), text));
    }
    Ok(input::join_rendered(parts))
}

/// The text `render containerruntime` prints for one object.
fn render_container_runtime(
    templates: &containerruntime::render::Templates,
    images: &ImageVector,
    test_repository: Option<&str>,
    object: &ContainerRuntime,
) -> anyhow::Result<String> {
    let chain = |e: containerruntime::Error| anyhow::anyhow!(crate::error_chain::chain(&e));
    let rendered =
        containerruntime::reconcile::render_parts(templates, images, test_repository, object)
            .map_err(chain)?;
    let shared = containerruntime::reconcile::render_shared_alone(templates, &rendered.profiles)
        .map_err(chain)?;
    Ok(format!(
        "# ManagedResource {shared_mr}\n{shared}---\n# ManagedResource {pool_mr}\n{installation}",
        shared_mr = containerruntime::SHARED_MANAGED_RESOURCE,
        pool_mr = containerruntime::installation_managed_resource(&rendered.pool),
        shared = shared,
        installation = rendered.installation,
    ))
}

/// The text `render osc` prints for one object: the user data (provision) or the node-agent
/// Secret manifest (reconcile), exactly as the controller renders them.
fn render_osc(
    object: &crate::api::OperatingSystemConfig,
    secrets_dir: Option<&Path>,
) -> anyhow::Result<String> {
    use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
    use crate::controllers::operatingsystemconfig as osc;

    let secrets = referenced_secrets(secrets_dir)?;
    let chain = |e: osc::Error| anyhow::anyhow!(crate::error_chain::chain(&e));
    match object.spec.purpose {
        OperatingSystemConfigPurpose::Provision => {
            osc::reconcile::render_user_data(object, &secrets).map_err(chain)
        }
        OperatingSystemConfigPurpose::Reconcile => {
            let (secret, _) =
                osc::reconcile::render_node_agent_secret(object, &secrets).map_err(chain)?;
            let manifest = secret
                .manifest()
                .map_err(|e| chain(osc::Error::NodeAgent(e)))?;
            // The manifest carries osc.yaml base64-encoded, as the API wants it; the preview
            // adds it as text, which is what the agent reads.
            Ok(format!(
                "# ManagedResource {}\n{manifest}---\n# data[\"{}\"] of the Secret above, decoded:\n{}",
                osc::node_agent_managed_resource(object),
                crate::api::constants::DATA_KEY_OPERATING_SYSTEM_CONFIG,
                secret.osc_yaml,
            ))
        }
    }
}

/// `render osc --impact`: every OSC of `--file` against the one of the same namespace and
/// name in `previous`, with the Secrets of `--secrets` for both.
fn impact_oscs(args: &OscArgs, previous: &Path) -> anyhow::Result<String> {
    use crate::api::OperatingSystemConfig;

    let new: Vec<OperatingSystemConfig> = input::read_objects(&args.file)?;
    let old: Vec<OperatingSystemConfig> = input::read_previous(previous, &args.file)?;
    let secrets = referenced_secrets(args.secrets.as_deref())?;
    let files = impact::pairs::Files::new(&args.file, previous);
    let pairs = impact::pairs::pair(files, new, old, |new, previous| {
        Some(impact::osc::mismatch_hint(new, previous))
    })?;
    let mut items = Vec::new();
    for pair in &pairs {
        let found = impact::osc::impact(pair, &secrets, files)?;
        items.push((input::describe(&pair.new), found));
    }
    impact::print(&items, args.impact.format())
}

/// The data of the Secrets in `dir` by name, as `secretRef` files resolve them.
fn referenced_secrets(
    dir: Option<&Path>,
) -> anyhow::Result<crate::controllers::operatingsystemconfig::content::ReferencedSecrets> {
    use crate::controllers::operatingsystemconfig::{content::ReferencedSecrets, fetch};

    let mut secrets = ReferencedSecrets::default();
    if let Some(dir) = dir {
        for secret in read_secrets(dir)? {
            let name = secret.metadata.name.clone().unwrap_or_default();
            secrets.insert(name, fetch::secret_data(&secret));
        }
    }
    Ok(secrets)
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
