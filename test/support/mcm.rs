//! A stand-in for machine-controller-manager (MCM), for tests of the Worker controller.
//!
//! There is no MCM (and no garbage collector) in the test control plane. [`Mcm`] plays its
//! part through the same API and in the way MCM does it:
//!
//! - for each MachineDeployment it keeps one MachineSet `<deployment>-<class hash>` with the
//!   deployment's template, owned by the deployment — adopting an unowned set of that name
//!   (label `name=<deployment>`), as MCM does after a restore;
//! - it scales that set's Machines to the deployment's `spec.replicas`, adopting unowned
//!   machines with the deployment's `name` label and class, creating `<set>-<i>` (joined at
//!   once: label `node=node-<machine>`, a provider ID) or deleting surplus ones;
//! - sets of other classes of the deployment are deleted with their machines (a rolling
//!   update that has finished);
//! - it reports the status MCM reports: on the set `replicas`/`readyReplicas`/…, on the
//!   deployment `observedGeneration`, `replicas`, `updatedReplicas`, `availableReplicas`,
//!   `unavailableReplicas: 0` and the conditions `Available=True`, `Progressing=True`;
//! - once a deployment is gone it deletes its sets and machines (MCM's job through its
//!   finalizers), remembering the labels each machine had.
//!
//! Why it remains, beside the real MCM of `test/machines_e2e.rs` and `test/machine_drivers.rs`:
//! `test/worker.rs` checks the Worker's own contract rules (status timestamps, replicas the
//! autoscaler owns, hibernation, migrate/restore from gardenlet's machine state, failed and
//! preserved machines, request counts of the rollout poll) on a control plane without nodes,
//! in seconds per case and with machine states the real MCM would need booted or broken
//! nodes for. It is not a model of MCM's timing: where the real MCM differs (rollouts take
//! until nodes are Ready, a Machine in its driver's creation flow cannot be deleted, a driver
//! error holds a Machine, in-place candidates are nodes of old MachineSets) the e2e runs with
//! the real one are the reference, and no test of `test/worker.rs` asserts the stand-in's
//! shortcut as MCM's behaviour.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use gardener_extension_node::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};

use super::{TestEnv, fixtures};

pub struct Mcm {
    client: Client,
    namespace: String,
    /// Labels of every machine deleted because its deployment was gone.
    pub deleted_machine_labels: Mutex<Vec<BTreeMap<String, String>>>,
    /// Per deployment: unavailable machines and, of them, preserved failed ones.
    unavailable: Mutex<BTreeMap<String, (i32, i32)>>,
}

pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn owned_by<K: Resource>(object: &K, kind: &str, name: &str) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind && o.name == name)
}

pub fn unowned_with_name<K: Resource>(object: &K, deployment: &str) -> bool {
    object
        .meta()
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .is_empty()
        && object
            .meta()
            .labels
            .as_ref()
            .and_then(|l| l.get("name"))
            .is_some_and(|n| n == deployment)
}

pub fn owner(kind: &str, name: &str, uid: &str) -> Value {
    json!([{
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": kind, "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true
    }])
}

impl Mcm {
    pub fn new(env: &TestEnv) -> Self {
        Mcm {
            client: env.client.clone(),
            namespace: env.namespace.clone(),
            deleted_machine_labels: Mutex::default(),
            unavailable: Mutex::default(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// One pass over every deployment, as MCM's controllers would do it.
    pub async fn sync(&self) -> Result<(), String> {
        let deployments: Api<MachineDeployment> = self.api();
        for deployment in deployments
            .list(&ListParams::default())
            .await
            .map_err(err)?
        {
            if deployment.metadata.deletion_timestamp.is_none() {
                self.sync_deployment(&deployment).await?;
            }
        }
        self.sync_deleted().await?;
        self.sync_credentials().await
    }

    /// MCM's secret controller (machine-controller-manager
    /// `pkg/util/provider/machinecontroller/secret.go`, `reconcileClusterSecret`): a secret a
    /// MachineClass references gets the finalizer `machine.sapcloud.io/machine-controller`,
    /// which is removed once no class references it. MCM does this for both references of a
    /// class; the stand-in does it for `credentialsSecretRef` only (the Worker's
    /// `spec.secretRef`, which the delete waits for), so class secrets stay deletable at once
    /// in the other tests.
    pub async fn sync_credentials(&self) -> Result<(), String> {
        const FINALIZER: &str = "machine.sapcloud.io/machine-controller";
        let classes: Api<MachineClass> = self.api();
        let referenced: BTreeSet<String> = classes
            .list(&ListParams::default())
            .await
            .map_err(err)?
            .items
            .iter()
            .filter_map(|c| {
                c.spec
                    .credentials_secret_ref
                    .as_ref()
                    .map(|r| r.name.clone())
            })
            .collect();
        let secrets: Api<Secret> = self.api();
        for secret in secrets.list(&ListParams::default()).await.map_err(err)? {
            let mut finalizers = secret.finalizers().to_vec();
            let has = finalizers.iter().any(|f| f == FINALIZER);
            let wanted = referenced.contains(&secret.name_any());
            if has == wanted {
                continue;
            }
            if wanted {
                finalizers.push(FINALIZER.to_string());
            } else {
                finalizers.retain(|f| f != FINALIZER);
            }
            let body = json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": secret.resource_version(),
            }});
            secrets
                .patch(
                    &secret.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(body),
                )
                .await
                .map_err(err)?;
        }
        Ok(())
    }

    async fn sync_deployment(&self, deployment: &MachineDeployment) -> Result<(), String> {
        let name = deployment.name_any();
        let uid = deployment.uid().unwrap_or_default();
        let class = class_of(deployment);
        let replicas = deployment.spec.replicas.unwrap_or_default();
        let hash = class.rsplit('-').next().unwrap_or_default();
        let set_name = format!("{name}-{hash}");
        let sets: Api<MachineSet> = self.api();
        let machines: Api<Machine> = self.api();

        // Sets of older classes: a finished rolling update removes them with their machines.
        for set in sets.list(&ListParams::default()).await.map_err(err)? {
            let mine = owned_by(&set, "MachineDeployment", &name) || unowned_with_name(&set, &name);
            if mine && set.name_any() != set_name {
                for machine in machines.list(&ListParams::default()).await.map_err(err)? {
                    if owned_by(&machine, "MachineSet", &set.name_any()) {
                        delete(&machines, &machine.name_any()).await?;
                    }
                }
                delete(&sets, &set.name_any()).await?;
            }
        }

        // The set of the current class: create or adopt, then scale.
        let deployment_json = serde_json::to_value(deployment).map_err(err)?;
        let set = match sets.get_opt(&set_name).await.map_err(err)? {
            None => {
                let value = fixtures::mcm_machine_set_json(
                    &self.namespace,
                    &deployment_json,
                    &uid,
                    &set_name,
                    replicas,
                );
                sets.create(
                    &PostParams::default(),
                    &serde_json::from_value(value).map_err(err)?,
                )
                .await
                .map_err(err)?
            }
            Some(_) => {
                let body = json!({
                    "metadata": {"ownerReferences": owner("MachineDeployment", &name, &uid)},
                    "spec": {"replicas": replicas}
                });
                sets.patch(&set_name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                    .map_err(err)?
            }
        };
        let set_uid = set.uid().unwrap_or_default();
        let set_json = serde_json::to_value(&set).map_err(err)?;

        let mut current: Vec<String> = Vec::new();
        for machine in machines.list(&ListParams::default()).await.map_err(err)? {
            let machine_class = machine
                .spec
                .class
                .as_ref()
                .map(|c| c.name.clone())
                .unwrap_or_default();
            if owned_by(&machine, "MachineSet", &set_name) {
                current.push(machine.name_any());
            } else if unowned_with_name(&machine, &name) && machine_class == class {
                let body = json!({"metadata": {"ownerReferences": owner("MachineSet", &set_name, &set_uid)}});
                machines
                    .patch(
                        &machine.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(body),
                    )
                    .await
                    .map_err(err)?;
                current.push(machine.name_any());
            }
        }
        current.sort();
        let wanted = usize::try_from(replicas).unwrap_or_default();
        let mut index = 0;
        while current.len() < wanted {
            let machine_name = format!("{set_name}-{index}");
            index += 1;
            if current.contains(&machine_name) {
                continue;
            }
            let value =
                fixtures::mcm_machine_json(&self.namespace, &set_json, &set_uid, &machine_name);
            machines
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(value).map_err(err)?,
                )
                .await
                .map_err(err)?;
            current.push(machine_name);
        }
        while current.len() > wanted {
            let surplus = current.pop().unwrap_or_default();
            delete(&machines, &surplus).await?;
        }

        let generation = set.metadata.generation.unwrap_or_default();
        sets.patch_status(
            &set_name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": fixtures::mcm_machine_set_status_json(generation, replicas)}),
            ),
        )
        .await
        .map_err(err)?;
        let deployments: Api<MachineDeployment> = self.api();
        let mut status = fixtures::mcm_deployment_status_json(
            deployment.metadata.generation.unwrap_or_default(),
            replicas,
        );
        if let Some((unavailable, preserved)) = self.unavailable.lock().unwrap().get(&name) {
            status["unavailableReplicas"] = json!(unavailable);
            status["availableReplicas"] = json!((replicas - unavailable).max(0));
            status["preservedFailedReplicas"] = json!(preserved);
        }
        deployments
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map_err(err)?;
        Ok(())
    }

    /// Deletes sets and machines whose deployment is gone.
    pub async fn sync_deleted(&self) -> Result<(), String> {
        let deployments: Api<MachineDeployment> = self.api();
        let live: BTreeSet<String> = names(&deployments, &ListParams::default()).await;
        let sets: Api<MachineSet> = self.api();
        let machines: Api<Machine> = self.api();
        let all_machines = machines
            .list(&ListParams::default())
            .await
            .map_err(err)?
            .items;
        for set in sets.list(&ListParams::default()).await.map_err(err)? {
            let deployment = set.labels().get("name").cloned().unwrap_or_default();
            if live.contains(&deployment) {
                continue;
            }
            for machine in all_machines
                .iter()
                .filter(|m| owned_by(*m, "MachineSet", &set.name_any()))
            {
                self.deleted_machine_labels
                    .lock()
                    .unwrap()
                    .push(machine.labels().clone());
                delete(&machines, &machine.name_any()).await?;
            }
            delete(&sets, &set.name_any()).await?;
        }
        Ok(())
    }

    /// From now on reports `unavailable` of the deployment's machines as unavailable, of them
    /// `preserved` failed machines it preserves (`status.preservedFailedReplicas`), as MCM
    /// does for a deployment with `autoPreserveFailedMachineMax`.
    pub fn set_unavailable(&self, deployment: &str, unavailable: i32, preserved: i32) {
        self.unavailable
            .lock()
            .unwrap()
            .insert(deployment.to_string(), (unavailable, preserved));
    }

    /// Reports failed machines on a deployment, as MCM does when it cannot create them.
    pub async fn fail(&self, deployment: &str, machine: &str, description: &str) {
        let body = json!({"status": {"failedMachines": [{
            "name": machine,
            "providerID": format!("local:///{machine}"),
            "ownerRef": format!("{deployment}-set"),
            "lastOperation": {
                "description": description, "state": "Failed", "type": "Create",
                "lastUpdateTime": "2026-11-30T08:00:00Z"
            }
        }]}});
        self.api::<MachineDeployment>()
            .patch_status(deployment, &PatchParams::default(), &Patch::Merge(body))
            .await
            .unwrap();
    }
}

pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), String>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

pub async fn names<K>(api: &Api<K>, params: &ListParams) -> BTreeSet<String>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(params)
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect()
}

pub fn class_of(deployment: &MachineDeployment) -> String {
    deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.class.as_ref())
        .map(|c| c.name.clone())
        .unwrap_or_default()
}
