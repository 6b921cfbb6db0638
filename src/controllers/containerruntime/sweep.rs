//! Sweep (part of every reconcile): delete the installation ManagedResources of pools that no
//! ContainerRuntime asks for any more.
//!
//! A pool's ManagedResource `extension-runtime-gvisor-installation-<pool>` is normally removed
//! by the delete flow of its ContainerRuntime. Two cases bypass that flow and would leave the
//! pool's DaemonSet in the shoot for ever: a ContainerRuntime whose `spec.workerPool.name`
//! changes (the reconcile applies the new pool's ManagedResource, nobody deletes the old
//! one), and a ContainerRuntime removed while the operator was not running (its finalizer
//! taken off by hand). So each reconcile compares the namespace's installation
//! ManagedResources of ours with the pools of its gvisor ContainerRuntimes and deletes the
//! rest (`keepObjects` stays false: the shoot's DaemonSet goes with it).

use std::collections::BTreeSet;

use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::{Error, GVisorActuator, INSTALLATION_MANAGED_RESOURCE_PREFIX};
use crate::api::ManagedResource;
use crate::api::constants::ORIGIN;
use crate::extension::managed_resource;

/// Of `ours` (names of our ManagedResources in a namespace), the installation
/// ManagedResources whose pool is not in `pools` (pure).
pub fn orphaned<'a>(ours: &'a [String], pools: &BTreeSet<String>) -> Vec<&'a str> {
    ours.iter()
        .filter_map(|name| {
            let pool = name.strip_prefix(INSTALLATION_MANAGED_RESOURCE_PREFIX)?;
            (!pools.contains(pool)).then_some(name.as_str())
        })
        .collect()
}

/// Deletes the orphaned installation ManagedResources of `namespace` (without waiting);
/// returns whether there were any. Reads the actuator's caches when it has them.
pub async fn sweep(actuator: &GVisorActuator, namespace: &str) -> Result<bool, Error> {
    let pools: BTreeSet<String> = actuator
        .runtimes(namespace)
        .await?
        .into_iter()
        .map(|runtime| runtime.pool)
        .collect();
    let ours: Vec<String> = match actuator.seed_cache() {
        Some(cache) => cache.managed_resource_names(namespace),
        None => {
            let mrs: Api<ManagedResource> = Api::namespaced(actuator.client.clone(), namespace);
            mrs.list_metadata(&ListParams::default().labels(&format!("origin={ORIGIN}")))
                .await
                .map_err(|source| Error::List {
                    namespace: namespace.to_string(),
                    source: Box::new(source),
                })?
                .items
                .into_iter()
                .filter(|mr| mr.metadata.deletion_timestamp.is_none())
                .map(|mr| mr.name_any())
                .collect()
        }
    };
    let orphans = orphaned(&ours, &pools);
    for name in &orphans {
        tracing::info!(%namespace, managed_resource = %name, "deleting the installation ManagedResource of a pool without ContainerRuntime");
        managed_resource::delete(&actuator.client, actuator.seed_cache(), namespace, name).await?;
    }
    Ok(!orphans.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_installation_resources_of_unknown_pools_are_orphaned() {
        let ours: Vec<String> = [
            "extension-runtime-gvisor",
            "extension-runtime-gvisor-installation-p1",
            "extension-runtime-gvisor-installation-p2",
            "extension-osc-gardener-node-agent-p3-0123",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let pools: BTreeSet<String> = ["p1".to_string()].into();
        assert_eq!(
            orphaned(&ours, &pools),
            vec!["extension-runtime-gvisor-installation-p2"]
        );
        assert!(orphaned(&ours, &["p1".into(), "p2".into()].into()).is_empty());
    }
}
