//! What gardenlet does to extension objects, for tests: annotate with an operation and a
//! timestamp, confirm and delete, and the readiness check it waits on
//! (`docs/contract.md#readiness`), and the machine state of a control-plane migration as
//! gardener's own code records it (the `machine-state` program of
//! `hack/envtest/components`); and gardener-resource-manager's part on ManagedResources:
//! its finalizer, and its status for a rolled-out generation (by hand, or for the gVisor
//! uninstall by a background stand-in).

use chrono::{DateTime, SecondsFormat, Utc};
use gardener_extension_node::api::{
    ExtensionObject, LastOperationState, LastOperationType, ManagedResource,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// The finalizer gardener-resource-manager puts on the ManagedResources it handles.
pub const GRM_FINALIZER: &str = "resources.gardener.cloud/gardener-resource-manager";

/// Puts gardener-resource-manager's finalizer on ManagedResource `name`, as GRM does while it
/// owns the shoot objects (a deletion then waits until it is removed).
pub async fn add_grm_finalizer(managed_resources: &Api<ManagedResource>, name: &str) {
    set_finalizers(managed_resources, name, json!([GRM_FINALIZER])).await;
}

/// Removes the finalizers of ManagedResource `name`, as GRM does once the shoot objects are
/// handled.
pub async fn remove_grm_finalizer(managed_resources: &Api<ManagedResource>, name: &str) {
    set_finalizers(managed_resources, name, serde_json::Value::Null).await;
}

async fn set_finalizers(
    managed_resources: &Api<ManagedResource>,
    name: &str,
    finalizers: serde_json::Value,
) {
    managed_resources
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .expect("patch the ManagedResource's finalizers");
}

/// The status gardener-resource-manager writes once `generation` is applied, healthy and
/// fully rolled out: `ResourcesApplied` True, `ResourcesHealthy` True, `ResourcesProgressing`
/// False.
pub fn rolled_out_status(generation: Option<i64>) -> serde_json::Value {
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": reason,
            "lastTransitionTime": now, "lastUpdateTime": now})
    };
    json!({
        "observedGeneration": generation,
        "conditions": [
            condition("ResourcesApplied", "True", "ApplySucceeded"),
            condition("ResourcesHealthy", "True", "ResourcesHealthy"),
            condition("ResourcesProgressing", "False", "ResourcesRolledOut"),
        ],
    })
}

/// Reports ManagedResource `name` rolled out ([`rolled_out_status`]) for its current
/// generation, or for `observed_generation` when given (a report for an older generation).
pub async fn report_rolled_out(
    managed_resources: &Api<ManagedResource>,
    name: &str,
    observed_generation: Option<i64>,
) -> ManagedResource {
    let mr = managed_resources
        .get(name)
        .await
        .expect("read the ManagedResource");
    let status = rolled_out_status(observed_generation.or(mr.metadata.generation));
    managed_resources
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .expect("patch the ManagedResource status")
}

/// Prefix of the gVisor pools' installation ManagedResources.
pub const GVISOR_INSTALLATION_MR_PREFIX: &str = "extension-runtime-gvisor-installation-";

/// gardener-resource-manager's part in gVisor deletions, for tests without it: while this
/// lives, every gVisor installation ManagedResource of the namespace (not being deleted)
/// whose current generation has no report yet is reported rolled out within about 200 ms,
/// as GRM does for an uninstall DaemonSet whose nodes all finish at once. Stops when
/// dropped.
pub struct GvisorRolloutStandIn {
    task: tokio::task::JoinHandle<()>,
}

impl GvisorRolloutStandIn {
    /// Starts the stand-in for `namespace` on the calling test's runtime.
    pub fn start(client: kube::Client, namespace: &str) -> Self {
        let managed_resources: Api<ManagedResource> = Api::namespaced(client, namespace);
        let task = tokio::spawn(async move {
            loop {
                let list = managed_resources
                    .list(&kube::api::ListParams::default())
                    .await;
                for mr in list.map(|l| l.items).unwrap_or_default() {
                    let reported = mr.status.as_ref().and_then(|s| s.observed_generation)
                        == mr.metadata.generation;
                    if mr.name_any().starts_with(GVISOR_INSTALLATION_MR_PREFIX)
                        && mr.metadata.deletion_timestamp.is_none()
                        && !reported
                    {
                        // Failures (the MR deleted meanwhile) are retried by the next pass.
                        let status = rolled_out_status(mr.metadata.generation);
                        let _ = managed_resources
                            .patch_status(
                                &mr.name_any(),
                                &PatchParams::default(),
                                &Patch::Merge(json!({ "status": status })),
                            )
                            .await;
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        });
        GvisorRolloutStandIn { task }
    }
}

impl Drop for GvisorRolloutStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sets `gardener.cloud/operation=<operation>` and a fresh `gardener.cloud/timestamp`.
pub async fn annotate<K>(api: &Api<K>, name: &str, operation: &str) -> DateTime<Utc>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let now = Utc::now();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "gardener.cloud/operation": operation,
            "gardener.cloud/timestamp": now.to_rfc3339_opts(SecondsFormat::Nanos, true),
        }}})),
    )
    .await
    .expect("annotate");
    now
}

/// gardenlet's first step of a restore in the destination seed: creates the extension object
/// `object` with the `wait-for-state` operation, then writes the recorded `state` into its
/// status (the caller annotates `restore` next).
pub async fn create_waiting_for_state<K>(
    api: &Api<K>,
    mut object: serde_json::Value,
    state: serde_json::Value,
) where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    object["metadata"]["annotations"] = json!({"gardener.cloud/operation": "wait-for-state"});
    let name = object["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    let object: K = serde_json::from_value(object).expect("the object decodes");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": state}})),
    )
    .await
    .expect("state written");
}

/// Confirms the deletion and deletes, as gardenlet does.
pub async fn confirm_and_delete<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "confirmation.gardener.cloud/deletion": "true",
            "gardener.cloud/timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, true),
        }}})),
    )
    .await
    .expect("confirm deletion");
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
}

/// gardenlet's readiness check (`CheckExtensionObject`), in its order; `Err` says which rule
/// fails.
pub fn check_ready<K>(object: &K, operation: LastOperationType) -> Result<(), String>
where
    K: Resource + ExtensionObject,
{
    let status = object.default_status().ok_or("no status")?;
    if let Some(error) = &status.last_error {
        return Err(format!("lastError: {}", error.description));
    }
    if status.observed_generation != object.meta().generation {
        return Err(format!(
            "observedGeneration {:?} != generation {:?}",
            status.observed_generation,
            object.meta().generation
        ));
    }
    if let Some(op) = object.annotations().get("gardener.cloud/operation") {
        return Err(format!("operation annotation {op} still present"));
    }
    let last = status.last_operation.as_ref().ok_or("no lastOperation")?;
    if last.state != LastOperationState::Succeeded {
        return Err(format!(
            "lastOperation {:?} {:?}: {}",
            last.type_, last.state, last.description
        ));
    }
    if let Some(timestamp) = object.annotations().get("gardener.cloud/timestamp") {
        let requested = DateTime::parse_from_rfc3339(timestamp)
            .map_err(|e| format!("bad timestamp: {e}"))?
            .with_timezone(&Utc);
        let requested = requested
            - chrono::Duration::nanoseconds(i64::from(requested.timestamp_subsec_nanos()));
        if last.last_update_time < requested {
            return Err(format!(
                "lastUpdateTime {} < timestamp {requested}",
                last.last_update_time
            ));
        }
    }
    if last.type_ != operation {
        return Err(format!(
            "lastOperation type {:?}, want {operation:?}",
            last.type_
        ));
    }
    Ok(())
}

/// Waits until `check_ready` holds for `operation`.
pub async fn wait_ready<K>(api: &Api<K>, name: &str, operation: LastOperationType) -> K
where
    K: Resource + ExtensionObject + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    super::wait_for(
        &format!("{name} ready after {operation:?}"),
        std::time::Duration::from_secs(60),
        || async {
            let object = api.get(name).await.map_err(|e| e.to_string())?;
            check_ready(&object, operation).map(|()| object)
        },
    )
    .await
}

/// Waits until the object is ready after a Migrate (`check_ready`) and carries no finalizer
/// any more (ContainerRuntime and OSC migrations remove them all).
pub async fn wait_migrated<K>(api: &Api<K>, name: &str) -> K
where
    K: Resource + ExtensionObject + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    super::wait_for(
        &format!("{name} migrated"),
        std::time::Duration::from_secs(60),
        || async {
            let object = api.get(name).await.map_err(|e| e.to_string())?;
            check_ready(&object, LastOperationType::Migrate)?;
            if !object.finalizers().is_empty() {
                return Err(format!("finalizers left: {:?}", object.finalizers()));
            }
            Ok(object)
        },
    )
    .await
}

/// Waits until the object is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    super::wait_for(
        &format!("{name} deleted"),
        std::time::Duration::from_secs(60),
        || async {
            match api.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(o)) => Err(format!("still there, finalizers {:?}", o.finalizers())),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// What gardener v1.149.3's own code records for a control-plane migration, from the
/// `machine-state record` program (`hack/envtest/components/machine-state`, built by
/// `hack/envtest.sh`): gardenlet's `shootstate.Deploy` over the source namespace and its
/// `RestoreExtensionObjectState` into a Worker of the destination namespace.
#[derive(Debug, Clone)]
pub struct GardenletMachineState {
    /// The ShootState gardenlet persists in the garden.
    pub shoot_state: serde_json::Value,
    /// Its `machine-state` entry's data (`{"state": <base64 gzip>}`), `Null` when nothing is
    /// recorded.
    pub machine_state: serde_json::Value,
    /// The destination Worker's `status.state` as gardenlet writes it before it asks for
    /// `restore` (the machine state with the namespaces rewritten), `Null` when empty.
    pub worker_state: serde_json::Value,
}

/// The shared control plane's admin kubeconfig as a file, for the Go programs: written once
/// per test binary (tests run in parallel; a file rewritten under a reader could be read
/// half-written).
fn kubeconfig_file() -> std::path::PathBuf {
    static WRITTEN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    WRITTEN
        .get_or_init(|| {
            let shared = super::SHARED
                .get()
                .expect("control plane started by env() first");
            let path = super::state_dir().join("admin.kubeconfig");
            std::fs::create_dir_all(super::state_dir()).expect("state folder");
            std::fs::write(&path, &shared.kubeconfig).expect("kubeconfig written");
            path
        })
        .clone()
}

/// Runs `machine-state ARGS` against the shared control plane and returns its JSON output.
pub async fn run_machine_state(args: &[&str]) -> serde_json::Value {
    let assets = gardener_extension_node::devenv::resolve_assets(None, &super::repo_root())
        .expect("envtest binaries");
    let output = tokio::process::Command::new(assets.join("machine-state"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig_file())
        .output()
        .await
        .expect("machine-state runs (hack/envtest.sh builds it)");
    assert!(
        output.status.success(),
        "machine-state {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("machine-state prints JSON")
}

/// The machine state gardener's code records from `source` (its MachineDeployments,
/// MachineSets and Machines and the extension objects there) for a Worker restored in
/// `destination`.
pub async fn gardenlet_machine_state(source: &str, destination: &str) -> GardenletMachineState {
    let mut out = run_machine_state(&[
        "record",
        "--namespace",
        source,
        "--worker-namespace",
        destination,
    ])
    .await;
    GardenletMachineState {
        shoot_state: out["shootState"].take(),
        machine_state: out["machineState"].take(),
        worker_state: out["workerState"].take(),
    }
}

/// The `status.state` gardenlet writes into a Worker restored in `namespace` from the machine
/// objects there ([`gardenlet_machine_state`] with source and destination alike). `Value::Null`
/// when there is nothing to record. The namespace is read through the shared control plane's
/// kubeconfig; `_client` (a client of that same control plane) is not needed for it.
pub async fn machine_state(_client: &kube::Client, namespace: &str) -> serde_json::Value {
    gardenlet_machine_state(namespace, namespace)
        .await
        .worker_state
}
