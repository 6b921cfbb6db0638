//! Test support: one real control plane (etcd + kube-apiserver) per test binary, shared by its
//! tests, and a fresh namespace per test.
//!
//! The control plane is started on first use from the binaries `hack/envtest.sh` builds
//! (or `$ENVTEST_ASSETS`). It is never stopped explicitly: its watchdog kills it when the test
//! binary exits, also after a panic, so no kube-apiserver outlives `cargo test`.
//!
//! kube clients are bound to the tokio runtime that built them, and every `#[tokio::test]`
//! has its own runtime, so the shared state is the kubeconfig, not a client.

#![allow(dead_code)]

pub mod agent;
pub mod audit;
pub mod benchmarks;
pub mod fixtures;
pub mod gardener;
pub mod gardenlet_osc;
pub mod helm;
pub mod in_process_agent;
pub mod load;
pub mod machine_controllers;
pub mod mcm;
pub mod node;
pub mod node_agent_identity;
pub mod node_cloud;
pub mod nspawn;
pub mod oci;
pub mod operator;
pub mod process;
pub mod progress;
pub mod registry;
pub mod seed_crds;
pub mod shoot;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use gardener_extension_node::devenv::{self, ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Which CRDs the shared control plane has installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crds {
    /// Ours, from `crds/` (generated from `src/api`).
    Ours,
    /// Gardener's, from `../shared/gardener-crds/` (compatibility tests).
    Upstream,
    /// None: a bare API server, as a dev kubeconfig may point at.
    Nothing,
}

struct Shared {
    crds: Crds,
    kubeconfig: String,
    server_url: String,
    ca_pem: String,
    // Kept alive for the whole test binary; the watchdog stops it at exit. Behind a lock so
    // fault-injection tests can restart its processes (`restart_apiserver`, `restart_etcd`).
    plane: tokio::sync::Mutex<ControlPlane>,
}

static SHARED: OnceLock<Shared> = OnceLock::new();
static NAMESPACE_COUNTER: AtomicUsize = AtomicUsize::new(0);
static AUDIT_LOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the shared control plane write kube-apiserver's audit log ([`audit_log_path`]);
/// call before the first [`env`] (benchmarks count requests there).
pub fn enable_audit_log() {
    AUDIT_LOG.store(true, Ordering::SeqCst);
}

/// The audit log of the shared control plane (see [`enable_audit_log`]).
pub fn audit_log_path() -> PathBuf {
    state_dir().join("audit.log")
}

fn state_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "gardener-extension-node-test-{}",
        std::process::id()
    ))
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The upstream CRD folder, if present next to the repository.
pub fn upstream_crd_dir() -> Option<PathBuf> {
    let dir = repo_root().join("../shared/gardener-crds");
    dir.is_dir().then_some(dir)
}

fn shared(crds: Crds) -> &'static Shared {
    let shared = SHARED.get_or_init(|| {
        // Start in a runtime of our own on a plain thread: the caller is inside a test's
        // runtime, which cannot block on another one.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("test runtime builds");
            runtime.block_on(start(crds))
        })
        .join()
        .expect("control plane start-up thread panicked")
    });
    assert_eq!(
        shared.crds, crds,
        "one test binary uses one CRD flavour; split the tests into another [[test]]"
    );
    shared
}

async fn start(crds: Crds) -> Shared {
    let assets = devenv::resolve_assets(None, &repo_root()).expect("envtest binaries");
    let state_dir = state_dir();
    let plane = ControlPlane::start(ControlPlaneOptions {
        assets,
        state_dir,
        remove_state_on_exit: true,
        reuse_state: false,
        controller_manager: false,
        scheduler: false,
        audit_log: AUDIT_LOG.load(Ordering::SeqCst),
        csr_signing: None,
        node_agent_authorizer: None,
    })
    .await
    .expect("control plane starts");
    let client =
        Client::try_from(plane.admin_config().await.expect("admin config")).expect("client");
    let crd_dir = match crds {
        Crds::Ours => Some(repo_root().join("crds")),
        Crds::Upstream => Some(upstream_crd_dir().expect("upstream CRDs present")),
        Crds::Nothing => None,
    };
    if let Some(dir) = crd_dir {
        devenv::apply::install_crds(&client, &dir)
            .await
            .expect("CRDs install");
    }
    Shared {
        crds,
        kubeconfig: plane.kubeconfig().to_string(),
        server_url: plane.server_url(),
        ca_pem: plane.ca_pem().to_string(),
        plane: tokio::sync::Mutex::new(plane),
    }
}

/// A test's view of the control plane: an admin client and a namespace of its own.
pub struct TestEnv {
    /// Admin client (group `system:masters`), bound to the calling test's runtime.
    pub client: Client,
    /// A namespace created for this test.
    pub namespace: String,
    /// The API server URL.
    pub server_url: String,
    /// The CA that signed the serving certificate (PEM).
    pub ca_pem: String,
    /// The admin kubeconfig.
    pub kubeconfig: String,
}

/// Starts (once) the control plane with our CRDs and returns a fresh namespace.
pub async fn env() -> TestEnv {
    env_with(Crds::Ours).await
}

/// Like [`env`] with the chosen CRD flavour.
pub async fn env_with(crds: Crds) -> TestEnv {
    let shared = shared(crds);
    let config = gardener_extension_node::kubeconfig::config_from_yaml(&shared.kubeconfig)
        .await
        .expect("admin kubeconfig loads");
    let client = Client::try_from(config).expect("client builds");
    let namespace = format!(
        "test-{}-{}",
        NAMESPACE_COUNTER.fetch_add(1, Ordering::SeqCst),
        std::process::id()
    );
    create_namespace(&client, &namespace).await;
    TestEnv {
        client,
        namespace,
        server_url: shared.server_url.clone(),
        ca_pem: shared.ca_pem.clone(),
        kubeconfig: shared.kubeconfig.clone(),
    }
}

/// Kills this binary's kube-apiserver and starts it again on the same port against the same
/// etcd; returns once it is ready (fault injection). The control plane must have been started
/// (by [`env`]) first.
pub async fn restart_apiserver() {
    let shared = SHARED.get().expect("control plane started by env() first");
    let mut plane = shared.plane.lock().await;
    plane
        .restart_apiserver()
        .await
        .expect("kube-apiserver restarts");
}

/// Kills this binary's etcd and starts it again on the same ports and data; returns once the
/// API server is ready again (fault injection). The control plane must have been started (by
/// [`env`]) first.
pub async fn restart_etcd() {
    let shared = SHARED.get().expect("control plane started by env() first");
    let mut plane = shared.plane.lock().await;
    plane.restart_etcd().await.expect("etcd restarts");
}

/// The process id of this binary's kube-apiserver (for its CPU time and memory,
/// [`process`]): the `kube-apiserver` whose certificates are in this binary's state folder.
/// Looked up in `/proc` on each call, so it follows [`restart_apiserver`].
pub fn apiserver_pid() -> Option<u32> {
    let cert_dir = format!("--cert-dir={}", state_dir().join("certs").display());
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        let program = args.next()?;
        let ours = program.ends_with(b"/kube-apiserver") && args.any(|a| a == cert_dir.as_bytes());
        ours.then_some(pid)
    })
}

/// Creates a namespace labelled as a shoot namespace (`gardener.cloud/role=shoot`).
pub async fn create_namespace(client: &Client, name: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([("gardener.cloud/role".to_string(), "shoot".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
}

/// Reads the objects of a folder of YAML files (sorted, not recursive).
pub fn read_objects(dir: &Path) -> Vec<kube::api::DynamicObject> {
    devenv::apply::read_dir(dir).expect("objects parse")
}

/// Merge-patches `status` of any object through its `/status` subresource.
pub async fn patch_status_dynamic(
    client: &Client,
    object: &kube::api::DynamicObject,
    status: serde_json::Value,
) -> Result<kube::api::DynamicObject, kube::Error> {
    use kube::ResourceExt;
    let types = object.types.clone().expect("object has apiVersion/kind");
    let gvk = kube::core::GroupVersionKind::try_from(&types).expect("valid apiVersion");
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<kube::api::DynamicObject> = match capabilities.scope {
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
        kube::discovery::Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.namespace().as_deref().unwrap_or("default"),
            &resource,
        ),
    };
    api.patch_status(
        &object.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
}

/// Polls `check` every 200 ms until it returns `Some` or `timeout` passes; panics with
/// `what` and the last observation otherwise.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

/// A shell script in `dir` that leaves the file `ran` next to it when it runs (and prints
/// `{}`): put where a kubeconfig names a program, it shows whether the program ran. Returns
/// the script's path and the marker's.
pub fn marker_program(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let marker = dir.join("ran");
    let program = dir.join("credential-helper");
    std::fs::write(
        &program,
        format!("#!/bin/sh\ntouch {}\necho '{{}}'\n", marker.display()),
    )
    .expect("program written");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
        .expect("program made executable");
    (program, marker)
}

/// A shell that SIGKILLs process `pid` once this test process is gone (a panic, a SIGKILL), and
/// ends by itself when `pid` ends first. Kill it (and wait) when the child is stopped on
/// purpose.
pub fn spawn_child_watchdog(pid: u32) -> std::process::Child {
    let script = format!(
        "while kill -0 {owner} 2>/dev/null && kill -0 {pid} 2>/dev/null; do sleep 0.2; done; kill -KILL {pid} 2>/dev/null; exit 0",
        owner = std::process::id(),
    );
    std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("watchdog starts")
}
