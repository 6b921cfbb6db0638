//! The shared ManagedResource `extension-runtime-gvisor`: the shoot's RuntimeClasses from the
//! profiles of all of its gvisor ContainerRuntimes ([`super::profiles`]) and the
//! ServiceAccount. Applied by every reconcile (with the reconciled object's own, fresh
//! profiles) and by the deletion of a pool while others remain (without the leaving pool's
//! profiles, so their RuntimeClasses go). The other pools' profiles come from the
//! controller's store. While one of them has an invalid `providerConfig` (its own reconcile
//! reports the error) the MR stays as it is: leaving that pool out would change the
//! RuntimeClasses of the profiles it shares with the others, and bad input must not change
//! what runs.

use super::profiles::{self, PoolProfiles};
use super::{Error, GVisorActuator, Runtime, SHARED_MANAGED_RESOURCE, config, data, render};
use crate::extension::managed_resource;

/// Applies the shared MR of `namespace` from the profiles of its gvisor ContainerRuntimes:
/// those of the store other than `name`'s and not being deleted, plus `this` (the
/// reconciled pool; `None` when `name` is being deleted). Returns whether it wrote.
///
/// A [`profiles::Conflict`] that names `this` pool fails with it; one that does not (another
/// pool's business, or a deletion) leaves the MR as it is and is logged.
pub async fn apply(
    actuator: &GVisorActuator,
    namespace: &str,
    name: &str,
    this: Option<&PoolProfiles>,
) -> Result<bool, Error> {
    let runtimes = actuator.runtimes(namespace).await?;
    let pools = match pools(&runtimes, name, this) {
        Ok(pools) => pools,
        Err(invalid) => {
            tracing::warn!(%namespace, pools = ?invalid, "the shared ManagedResource {SHARED_MANAGED_RESOURCE} stays as it is while these pools' providerConfig is invalid");
            return Ok(false);
        }
    };
    let classes = match profiles::runtime_classes(&pools) {
        Ok(classes) => classes,
        Err(conflict) if this.is_some_and(|p| conflict.involves(&p.pool)) => {
            return Err(Error::Profiles(conflict));
        }
        Err(conflict) => {
            tracing::warn!(%namespace, %conflict, "the shared ManagedResource {SHARED_MANAGED_RESOURCE} stays as it is until the pools' profiles agree");
            return Ok(false);
        }
    };
    let manifests =
        render::render_runtime_classes(&actuator.templates, &classes, refusal_events(&pools))
            .map_err(Error::Render)?;
    Ok(managed_resource::apply_for_shoot(
        &actuator.client,
        actuator.seed_cache(),
        namespace,
        SHARED_MANAGED_RESOURCE,
        &data(&manifests),
        false,
    )
    .await?)
}

/// The profiles of every pool (pure): `this`, and of `runtimes` those not named `name`, not
/// being deleted and not of `this` pool; the pools with an invalid `providerConfig` as the
/// error.
fn pools(
    runtimes: &[Runtime],
    name: &str,
    this: Option<&PoolProfiles>,
) -> Result<Vec<PoolProfiles>, Vec<String>> {
    let this_pool = this.map(|p| p.pool.as_str());
    let mut pools = Vec::new();
    let mut invalid = Vec::new();
    for runtime in runtimes
        .iter()
        .filter(|r| r.name != name && !r.deleting && Some(r.pool.as_str()) != this_pool)
    {
        match config::validate(runtime.provider_config.as_ref()) {
            Ok(settings) => pools.push(PoolProfiles {
                pool: runtime.pool.clone(),
                selector: runtime.selector.clone(),
                settings,
            }),
            Err(_) => invalid.push(runtime.pool.clone()),
        }
    }
    if !invalid.is_empty() {
        return Err(invalid);
    }
    pools.extend(this.cloned());
    pools.sort_by(|a, b| a.pool.cmp(&b.pool));
    pools.dedup_by(|a, b| a.pool == b.pool);
    Ok(pools)
}

/// Whether the installers of `pools` may report refused profiles as events: some pool has a
/// `kvm` profile, the only kind a node can refuse (the shared MR then carries their Role).
pub fn refusal_events(pools: &[PoolProfiles]) -> bool {
    pools.iter().any(|pool| pool.settings.wants_kvm())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn runtime(name: &str, pool: &str, profiles: &[&str], deleting: bool) -> Runtime {
        let profiles: Vec<_> = profiles.iter().map(|p| json!({"name": p})).collect();
        Runtime {
            name: name.into(),
            pool: pool.into(),
            selector: BTreeMap::new(),
            provider_config: Some(config::provider_config(json!({"profiles": profiles}))),
            deleting,
        }
    }

    fn names(pools: &[PoolProfiles]) -> Vec<(&str, Vec<String>)> {
        pools
            .iter()
            .map(|p| {
                let profiles = p
                    .settings
                    .profiles
                    .iter()
                    .map(|x| x.runtime_class())
                    .collect();
                (p.pool.as_str(), profiles)
            })
            .collect()
    }

    #[test]
    fn the_reconciled_pool_counts_with_its_fresh_profiles_the_others_from_the_store() {
        let mut invalid = runtime("gvisor-c", "c", &[], false);
        invalid.provider_config = Some(json!({"kind": "Other"}));
        let mut runtimes = vec![
            runtime("gvisor-a", "a", &["old"], false),
            runtime("gvisor-b", "b", &["x"], false),
            runtime("gvisor-d", "d", &["y"], true),
        ];
        let this = PoolProfiles {
            pool: "a".into(),
            selector: BTreeMap::new(),
            settings: config::validate(runtime("", "", &["new"], false).provider_config.as_ref())
                .unwrap(),
        };
        assert_eq!(
            names(&pools(&runtimes, "gvisor-a", Some(&this)).unwrap()),
            [
                ("a", vec!["gvisor-new".to_string()]),
                ("b", vec!["gvisor-x".to_string()])
            ],
            "the store's old a and the deleted d are left out"
        );
        assert_eq!(
            names(&pools(&runtimes, "gvisor-b", None).unwrap()),
            [("a", vec!["gvisor-old".to_string()])],
            "b leaves"
        );
        runtimes.push(invalid);
        assert_eq!(
            pools(&runtimes, "gvisor-a", Some(&this)).unwrap_err(),
            ["c"],
            "an invalid pool holds the shared MR as it is"
        );
    }
}
