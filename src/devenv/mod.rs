//! Local development environment: a real control plane, the CRDs and the example objects.
//!
//! `make start` without `dev/kubeconfig` runs `gardener-extension-node local-env`, which
//! starts a seed (etcd + kube-apiserver + kube-controller-manager, [`controlplane`]) and a
//! shoot (the same three) with the real gardener-resource-manager between them
//! ([`resource_manager`]), installs `crds/`, applies `example/seed/` ([`apply`]) and runs the
//! operator in the foreground against the seed. The ManagedResources it writes reach the
//! shoot as they would in a landscape (`dev/local-env/shoot.kubeconfig`). Ctrl-C stops
//! everything. The test support code under `test/` uses the same pieces.
//!
//! Before anything starts, `local-env` locks its state folder ([`lock`]) and binds the
//! operator's HTTP port: a second `local-env` on the same folder, or anything on the port,
//! stops it at once with a message naming what runs there, and the running one is left
//! alone. The state folder is kept across restarts (ports, certificates, etcd data of seed
//! and shoot, GRM's configuration), so objects and kubeconfigs survive; the example objects
//! are applied only into a fresh seed, so edits of them survive too. `--clean`
//! (`make start-clean`) starts from an empty folder.

pub mod apply;
pub mod controlplane;
pub mod lock;
pub mod node_agent_authorizer;
pub mod pki;
pub mod resource_manager;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

pub use controlplane::{ControlPlane, ControlPlaneOptions};
pub use node_agent_authorizer::NodeAgentAuthorizer;
pub use resource_manager::{NetworkPolicyController, ResourceManager, ResourceManagerOptions};

/// Flags of `local-env`.
#[derive(Debug, Clone, Args)]
pub struct LocalEnvArgs {
    /// Folder with the `kube-apiserver`, `etcd`, `kube-controller-manager` and
    /// `gardener-resource-manager` binaries; `hack/envtest.sh` builds them and prints it (run
    /// from the repository root when unset).
    #[arg(long, env = "ENVTEST_ASSETS")]
    pub envtest_assets: Option<PathBuf>,

    /// Folder for the control plane's state (certificates, etcd data, logs, kubeconfig).
    #[arg(long, default_value = "dev/local-env")]
    pub state_dir: PathBuf,

    /// Folder of CRDs to install.
    #[arg(long, default_value = "crds")]
    pub crd_dir: PathBuf,

    /// Folder of seed-side example objects to apply.
    #[arg(long, default_value = "example/seed")]
    pub example_dir: PathBuf,

    /// Address of the operator's HTTP server.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub http_bind_address: SocketAddr,

    /// Empty the state folder first: new certificates and ports, empty etcd for seed and
    /// shoot, the example objects applied again. Without it a start continues where the
    /// previous one stopped.
    #[arg(long)]
    pub clean: bool,
}

/// Finds the control-plane binaries: `explicit`, else `$ENVTEST_ASSETS`, else the folder that
/// `<repo>/hack/envtest.sh` prints (building them on first use).
pub fn resolve_assets(explicit: Option<&Path>, repo: &Path) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("ENVTEST_ASSETS").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let script = repo.join("hack/envtest.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({})",
        script.display(),
        output.status
    );
    let folder = String::from_utf8(output.stdout).context("envtest.sh printed non-UTF-8")?;
    let folder = folder.lines().last().unwrap_or_default().trim();
    anyhow::ensure!(!folder.is_empty(), "{} printed no folder", script.display());
    Ok(PathBuf::from(folder))
}

/// Runs `local-env` until Ctrl-C/SIGTERM.
pub async fn run_local_env(args: LocalEnvArgs) -> anyhow::Result<()> {
    let LocalEnvArgs {
        envtest_assets,
        state_dir,
        crd_dir,
        example_dir,
        http_bind_address,
        clean,
    } = args;
    let state_dir = std::path::absolute(&state_dir).context("resolving --state-dir")?;
    // Nothing else before these two: a second local-env must not disturb the first.
    let state_lock = lock::StateLock::acquire(&state_dir, http_bind_address)?;
    let listener = crate::http::bind(http_bind_address)?;
    if clean {
        clean_state(&state_dir, state_lock.path())?;
    }
    let assets = resolve_assets(envtest_assets.as_deref(), Path::new("."))?;
    tracing::info!(assets = %assets.display(), state = %state_dir.display(), "starting the seed control plane");
    let plane = ControlPlane::start(ControlPlaneOptions {
        assets: assets.clone(),
        state_dir: state_dir.clone(),
        remove_state_on_exit: false,
        reuse_state: true,
        controller_manager: true,
        scheduler: false,
        audit_log: false,
        csr_signing: None,
        node_agent_authorizer: None,
    })
    .await
    .context("starting the local control plane")?;
    if plane.reused_state() {
        tracing::info!(
            "seed: continuing with the state of the previous start (--clean starts afresh)"
        );
    }
    let kubeconfig = plane.kubeconfig_path();
    tracing::info!("starting the shoot control plane and gardener-resource-manager");
    let shoot = ControlPlane::start(ControlPlaneOptions {
        assets: assets.clone(),
        state_dir: state_dir.join("shoot"),
        remove_state_on_exit: false,
        reuse_state: true,
        controller_manager: true,
        scheduler: false,
        audit_log: false,
        csr_signing: None,
        node_agent_authorizer: None,
    })
    .await
    .context("starting the local shoot control plane")?;
    let shoot_kubeconfig = state_dir.join("shoot.kubeconfig");
    std::fs::write(&shoot_kubeconfig, shoot.kubeconfig())
        .with_context(|| format!("writing {}", shoot_kubeconfig.display()))?;
    let client = crate::kubeconfig::build(plane.admin_config().await?, "local-env")?;

    apply::install_crds(&client, &crd_dir)
        .await
        .with_context(|| format!("installing {}", crd_dir.display()))?;
    if plane.reused_state() {
        tracing::info!(examples = %example_dir.display(), "keeping the objects of the previous start; not applying the examples again");
    } else {
        let examples = apply::read_dir(&example_dir)?;
        apply::apply_all(&client, &examples, "default")
            .await
            .with_context(|| format!("applying {}", example_dir.display()))?;
    }
    // gardenlet's part for the shoot access of the examples' namespaces.
    apply::apply_generic_token_kubeconfigs(&client, &shoot.server_url(), shoot.ca_pem())
        .await
        .context("writing the generic token kubeconfig Secrets")?;

    // After the CRDs: GRM's caches need the ManagedResource kind to exist.
    let resource_manager = ResourceManager::start(ResourceManagerOptions {
        assets,
        state_dir: state_dir.join("gardener-resource-manager"),
        source_kubeconfig: kubeconfig.clone(),
        target_kubeconfig: shoot_kubeconfig.clone(),
        namespaces: Vec::new(),
        sync_period: std::time::Duration::from_secs(60),
        health_sync_period: std::time::Duration::from_secs(30),
        remove_state_on_exit: false,
        reuse_state: true,
        csr_approver_machine_namespace: None,
        node_agent_authorizer: None,
        network_policy: None,
        resource_class: None,
    })
    .await
    .context("starting gardener-resource-manager")?;

    let banner = format!(
        "Local control plane is up ({server}).\n\
         Kubeconfig: {kubeconfig}\n\
         Try: kubectl --kubeconfig {kubeconfig} get containerruntimes,operatingsystemconfigs,workers -A\n\
         Shoot ({shoot_server}): kubectl --kubeconfig {shoot_kubeconfig} get runtimeclass,ds,secrets -A\n\
         After an edit, ask for a run as gardenlet would (an edit alone waits for it):\n\
         \x20 kubectl --kubeconfig {kubeconfig} -n shoot--local--local annotate worker local gardener.cloud/operation=reconcile --overwrite\n\
         Health: curl http://{http_bind_address}/healthz   (Ctrl-C stops everything; the state in {state} is kept, --clean starts afresh)\n",
        server = plane.server_url(),
        kubeconfig = kubeconfig.display(),
        shoot_server = shoot.server_url(),
        shoot_kubeconfig = shoot_kubeconfig.display(),
        state = state_dir.display(),
    );
    crate::stdout::print(&banner).context("writing to stdout")?;

    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::operator::forward_signals(shutdown.clone()));
    let result = crate::operator::run_serving(
        crate::operator::OperatorArgs::local(kubeconfig, http_bind_address),
        listener,
        shutdown,
    )
    .await;
    drop(resource_manager);
    drop(shoot);
    drop(plane);
    drop(state_lock);
    result
}

/// Empties `state` except the lock file (which this process holds).
fn clean_state(state: &Path, lock_file: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(state).with_context(|| format!("reading {}", state.display()))? {
        let path = entry?.path();
        if path == lock_file {
            continue;
        }
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("removing {}", path.display()))?;
    }
    tracing::info!(state = %state.display(), "state folder emptied (--clean)");
    Ok(())
}
