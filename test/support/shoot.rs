//! The shoot side of a test: a second real control plane (etcd, kube-apiserver,
//! kube-controller-manager) playing the shoot cluster, and the real gardener-resource-manager
//! that applies the ManagedResources of one seed namespace (the test's) into it — the way a
//! shoot's GRM does in a landscape.
//!
//! Each test gets its own shoot: cluster-scoped objects such as the RuntimeClass `gvisor`
//! would otherwise be shared between tests running at the same time. Everything is killed
//! when the [`Shoot`] is dropped, and by watchdogs when the test binary dies.
//!
//! [`Shoot::start_for_node_agents`] adds what a Gardener shoot has for node-agent client
//! certificates: bootstrap-token authentication, kube-controller-manager's
//! `kubernetes.io/kube-apiserver-client` signer, GRM's CSR approver checking the Machines of
//! the test's seed namespace, and GRM's node-agent authorizer webhook deciding every request
//! of a node agent by those Machines (kube-apiserver: `Node`, `RBAC`, webhook, as gardenlet
//! configures it; helpers for the objects: `node_agent_identity`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gardener_extension_node::devenv::{
    self, ControlPlane, ControlPlaneOptions, NodeAgentAuthorizer, ResourceManager,
    ResourceManagerOptions,
};
use kube::Client;

use super::TestEnv;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// GRM's re-apply period in tests: the shortest it accepts, so two ManagedResources owning
/// one object would fight (and the tests would see it) within seconds, not minutes.
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);

/// A shoot control plane with a GRM for one seed namespace.
pub struct Shoot {
    /// Dropped first: GRM must not outlive the shoot it writes to.
    pub resource_manager: ResourceManager,
    /// The shoot's etcd, kube-apiserver and kube-controller-manager.
    pub plane: ControlPlane,
    dir: PathBuf,
    /// Started for node agents (their refusals are listed on drop).
    node_agents: bool,
}

impl Shoot {
    /// Starts a shoot and a GRM for `env.namespace`.
    pub async fn start(env: &TestEnv) -> Shoot {
        Self::start_for(env, &[env.namespace.as_str()]).await
    }

    /// Starts a shoot that can have nodes (kube-scheduler too) and a GRM for `env.namespace`.
    pub async fn start_with_scheduler(env: &TestEnv) -> Shoot {
        Self::start_with(env, &[env.namespace.as_str()], true).await
    }

    /// Starts a shoot and a GRM for the given seed namespaces.
    pub async fn start_for(env: &TestEnv, namespaces: &[&str]) -> Shoot {
        Self::start_with(env, namespaces, false).await
    }

    /// Starts a shoot that issues node-agent client certificates as a Gardener shoot does:
    /// kube-apiserver authenticates bootstrap tokens, kube-controller-manager signs approved
    /// `kubernetes.io/kube-apiserver-client` CSRs with the shoot's CA for at most `signing`,
    /// and the GRM for `env.namespace` runs its CSR approver and its node-agent authorizer
    /// against the Machines in `env.namespace` of the seed. kube-apiserver writes its audit
    /// log ([`Shoot::audit_log_path`]).
    pub async fn start_for_node_agents(env: &TestEnv, signing: Duration) -> Shoot {
        Self::start_node_agents(env, signing).await
    }

    /// Node-agent shoots always keep the audit log: their drop lists every request of a node
    /// agent that was refused (403), with the authorizer's reason.
    async fn start_node_agents(env: &TestEnv, signing: Duration) -> Shoot {
        let namespace = env.namespace.as_str();
        let machines = Some(env.namespace.clone());
        Self::start_with_options(env, &[namespace], false, Some(signing), machines, true).await
    }

    /// Every request of a node agent the shoot refused so far (403), from the audit log.
    pub fn node_agent_refusals(&self) -> Vec<super::audit::Refusal> {
        super::audit::refusals(
            &self.audit_log_path(),
            super::node_agent_identity::NODE_AGENT_USER_PREFIX,
        )
    }

    /// kube-apiserver's audit log (written by a shoot from
    /// [`Shoot::start_for_node_agents`]).
    pub fn audit_log_path(&self) -> PathBuf {
        self.dir.join("plane").join("audit.log")
    }

    async fn start_with(env: &TestEnv, namespaces: &[&str], scheduler: bool) -> Shoot {
        Self::start_with_options(env, namespaces, scheduler, None, None, false).await
    }

    async fn start_with_options(
        env: &TestEnv,
        namespaces: &[&str],
        scheduler: bool,
        csr_signing: Option<Duration>,
        csr_approver_machine_namespace: Option<String>,
        audit_log: bool,
    ) -> Shoot {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "gardener-extension-node-shoot-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("shoot folder");
        let assets = devenv::resolve_assets(None, &super::repo_root()).expect("envtest binaries");
        // A shoot for node agents authorizes them as gardenlet's do: GRM's node-agent
        // authorizer, deciding by the Machines of the same seed namespace as the CSR approver.
        let node_agent_authorizer_on = csr_approver_machine_namespace.is_some();
        let node_agent_authorizer = csr_approver_machine_namespace.as_ref().map(|namespace| {
            NodeAgentAuthorizer::new(Some(namespace.clone()))
                .expect("authorizer port and certificate")
        });
        let plane = ControlPlane::start(ControlPlaneOptions {
            assets: assets.clone(),
            state_dir: dir.join("plane"),
            remove_state_on_exit: true,
            reuse_state: false,
            controller_manager: true,
            scheduler,
            audit_log,
            csr_signing,
            node_agent_authorizer: node_agent_authorizer.clone(),
        })
        .await
        .expect("shoot control plane starts");
        let seed_kubeconfig = dir.join("seed.kubeconfig");
        std::fs::write(&seed_kubeconfig, &env.kubeconfig).expect("seed kubeconfig written");
        let resource_manager = ResourceManager::start(ResourceManagerOptions {
            assets,
            state_dir: dir.join("grm"),
            source_kubeconfig: seed_kubeconfig,
            target_kubeconfig: plane.kubeconfig_path(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            sync_period: SYNC_PERIOD,
            health_sync_period: SYNC_PERIOD,
            remove_state_on_exit: false,
            reuse_state: false,
            csr_approver_machine_namespace,
            node_agent_authorizer,
            network_policy: None,
            resource_class: None,
        })
        .await
        .expect("gardener-resource-manager starts");
        Shoot {
            resource_manager,
            plane,
            dir,
            node_agents: node_agent_authorizer_on,
        }
    }

    /// An admin client of the shoot, bound to the calling test's runtime.
    pub async fn client(&self) -> Client {
        Client::try_from(self.plane.admin_config().await.expect("shoot kubeconfig"))
            .expect("shoot client")
    }

    /// The shoot's API server URL.
    pub fn server_url(&self) -> String {
        self.plane.server_url()
    }

    /// The shoot's CA (PEM): it signed the API server's serving certificate, and it is the CA
    /// of client certificates (also those kube-controller-manager issues for CSRs).
    pub fn ca_pem(&self) -> String {
        self.plane.ca_pem().to_string()
    }

    /// kube-controller-manager's log so far (for assertion messages).
    pub fn controller_manager_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("plane/kube-controller-manager.log"))
            .unwrap_or_default()
    }

    /// GRM's log so far (for assertion messages).
    pub fn resource_manager_log(&self) -> String {
        std::fs::read_to_string(self.resource_manager.log_path()).unwrap_or_default()
    }
}

impl Drop for Shoot {
    fn drop(&mut self) {
        if self.node_agents {
            let answered = super::audit::answered_for(
                &self.audit_log_path(),
                super::node_agent_identity::NODE_AGENT_USER_PREFIX,
            );
            eprintln!(
                "shoot audit: {answered} requests of node agents, refused (403): {}",
                super::audit::describe_refusals(&self.node_agent_refusals())
            );
        }
        self.resource_manager.stop();
        self.plane.stop();
        // A failed test keeps GRM's log for the person reading the failure.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
