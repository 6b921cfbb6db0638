//! `gardener-extension-node render worker -f worker.yaml [--cluster cluster.yaml]
//! [--user-data FILE]`: the machine objects the controller would apply, as YAML, without a
//! cluster. Uses the Worker controller's [`validate`], [`render`] and [`replicas`] exactly as
//! reconcile does, for deployments that do not exist yet (so replicas are the minimum, or 0
//! when the Cluster says the shoot is hibernated).
//!
//! The user data lives in a seed Secret the command cannot read: with `--user-data` its
//! content is used for every pool, without it the class secrets are printed without data and
//! a comment says where the data comes from.
//!
//! With `--impact --previous OLD` it prints instead what the change from OLD to the Worker of
//! `--file` does to each pool ([`super::impact::worker`]), both validated and rendered here as
//! the controller would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use super::impact::{self, ImpactArgs, pairs};
use super::input;
use crate::api::{Cluster, Worker};
use crate::controllers::worker::replicas::{self, ReplicaInputs};
use crate::controllers::worker::validate::WorkerInputs;
use crate::controllers::worker::{render, validate};

/// Flags of `render worker`.
#[derive(Debug, Args)]
pub struct RenderWorkerArgs {
    /// The Worker(s) (YAML or JSON file, several documents or a `List`; `-` for stdin).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// The shoot's Cluster (optional: technical ID, hibernation, CloudProfile zones,
    /// container runtimes). Without it the Worker's namespace stands for the technical ID,
    /// the shoot counts as awake and zones are not checked against a CloudProfile.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// File whose content is used as every pool's user data.
    #[arg(long, conflicts_with = "impact")]
    pub user_data: Option<PathBuf>,
    /// `--impact --previous OLD [-o text|json]`.
    #[command(flatten)]
    pub impact: ImpactArgs,
}

impl RenderWorkerArgs {
    /// Reads the files and renders every Worker in `--file` (or, with `--impact`, what the
    /// change from `--previous` does to each pool).
    pub fn run(&self) -> anyhow::Result<String> {
        if let Some(previous) = self.impact.previous() {
            return self.run_impact(previous);
        }
        let workers: Vec<Worker> = input::read_objects(&self.file)?;
        let cluster: Option<Cluster> = self.cluster.as_deref().map(input::read_one).transpose()?;
        let user_data = self
            .user_data
            .as_ref()
            .map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display())))
            .transpose()?;
        let mut parts = Vec::new();
        for worker in &workers {
            let text = manifests(worker, cluster.as_ref(), user_data.as_deref())
                .with_context(|| input::describe(worker))?;
            parts.push((input::describe(worker), text));
        }
        Ok(input::join_rendered(parts))
    }
}

impl RenderWorkerArgs {
    /// `--impact`: every Worker of `--file` against the one of the same namespace and name in
    /// `previous`.
    fn run_impact(&self, previous: &Path) -> anyhow::Result<String> {
        let new: Vec<Worker> = input::read_objects(&self.file)?;
        let old: Vec<Worker> = input::read_previous(previous, &self.file)?;
        let cluster: Option<Cluster> = self.cluster.as_deref().map(input::read_one).transpose()?;
        let files = pairs::Files::new(&self.file, previous);
        let mut items = Vec::new();
        for pair in pairs::pair(files, new, old, |_, _| None)? {
            let found = worker_impact(&pair, cluster.as_ref(), files)?;
            items.push((input::describe(&pair.new), found));
        }
        impact::print(&items, self.impact.format())
    }
}

/// Validates and renders both Workers of `pair` as the controller would, then compares them.
fn worker_impact(
    pair: &pairs::Pair<Worker>,
    cluster: Option<&Cluster>,
    files: pairs::Files<'_>,
) -> anyhow::Result<impact::worker::WorkerImpact> {
    let side = |worker: &Worker, file: &str| {
        inputs(worker, cluster).with_context(|| format!("{file}: {}", input::describe(worker)))
    };
    let before = side(&pair.previous, &format!("--previous {}", files.previous))?;
    let after = side(&pair.new, files.new)?;
    let none = BTreeMap::new();
    let (before_rendered, after_rendered) = (
        render::render(&before, &none),
        render::render(&after, &none),
    );
    let shoot = cluster
        .map(Cluster::shoot)
        .transpose()
        .context("the Cluster's shoot does not decode")?;
    Ok(impact::worker::impact(
        impact::worker::Side {
            inputs: &before,
            rendered: &before_rendered,
        },
        impact::worker::Side {
            inputs: &after,
            rendered: &after_rendered,
        },
        shoot.as_ref().and_then(|s| s.status.credentials.as_ref()),
    ))
}

fn document(
    out: &mut String,
    comment: Option<String>,
    object: &impl Serialize,
) -> anyhow::Result<()> {
    out.push_str("---\n");
    if let Some(comment) = comment {
        out.push_str(&format!("# {comment}\n"));
    }
    out.push_str(&serde_norway::to_string(object).context("serialising")?);
    Ok(())
}

/// `worker` validated against `cluster` as the controller validates it (pure): without a
/// Cluster the Worker's namespace stands for the technical ID and no CloudProfile is known.
pub fn inputs(worker: &Worker, cluster: Option<&Cluster>) -> anyhow::Result<WorkerInputs> {
    let shoot = cluster
        .map(Cluster::shoot)
        .transpose()
        .context("the Cluster's shoot does not decode")?;
    let namespace = worker
        .metadata
        .namespace
        .clone()
        .or_else(|| cluster.and_then(|c| c.metadata.name.clone()))
        .unwrap_or_default();
    let inputs = validate::validate(
        worker,
        &namespace,
        shoot.as_ref(),
        cluster.map(|c| &c.spec.cloud_profile),
    )
    .map_err(|e| {
        let hint = match (&e, cluster) {
            (validate::ValidationError::MachineImage { .. }, None) => {
                " (without --cluster there is no CloudProfile to look the image up in)"
            }
            _ => "",
        };
        anyhow::anyhow!("{}{hint}", crate::error_chain::chain(&e))
    })?;
    Ok(inputs)
}

/// The YAML documents for `worker` (pure).
pub fn manifests(
    worker: &Worker,
    cluster: Option<&Cluster>,
    user_data: Option<&[u8]>,
) -> anyhow::Result<String> {
    let inputs = inputs(worker, cluster)?;
    let namespace = &inputs.namespace;
    let data: BTreeMap<String, Vec<u8>> = user_data
        .map(|d| {
            inputs
                .pools
                .iter()
                .map(|p| (p.pool.name.clone(), d.to_vec()))
                .collect()
        })
        .unwrap_or_default();
    let mut out = String::new();
    for rendered in &render::render(&inputs, &data) {
        let Some(pool) = inputs
            .pools
            .iter()
            .map(|p| &p.pool)
            .find(|p| p.name == rendered.pool)
        else {
            continue;
        };
        let comment = user_data.is_none().then(|| {
            format!(
                "userData comes from Secret {}/{} key {:?} at run time",
                namespace, pool.user_data_secret_ref.name, pool.user_data_secret_ref.key
            )
        });
        document(&mut out, comment, &rendered.class_secret)?;
        document(&mut out, None, &rendered.class)?;
        let (replicas, _) = replicas::decide(ReplicaInputs {
            hibernation_enabled: inputs.hibernation_enabled,
            autoscaler_used: inputs.autoscaler_used,
            existing: None,
            restored: None,
            all_existing_at_zero: true,
            minimum: rendered.minimum,
            maximum: rendered.maximum,
        });
        document(&mut out, None, &rendered.deployment_with_replicas(replicas))?;
    }
    Ok(out)
}
