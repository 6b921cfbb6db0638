//! The RuntimeClasses of a shoot from the gVisor profiles of its pools (pure).
//!
//! Every gVisor pool has the default profile (RuntimeClass `gvisor`, handler `runsc`) and may
//! name more in its `providerConfig` ([`super::config`]). A RuntimeClass is cluster-wide and
//! selects nodes with one set of labels, so the shoot's RuntimeClasses are computed from all of
//! its gvisor ContainerRuntimes together and shipped in the shared ManagedResource:
//!
//! - `gvisor`: every gVisor node (`containerruntime.worker.gardener.cloud/gvisor: "true"`, the
//!   label gardenlet puts on the pools with gVisor), as before profiles came;
//! - `gvisor-<name>`: handler `runsc-<name>`; on every gVisor node when every gVisor pool has
//!   the profile, else on the one pool that has it (its `workerPool.selector` labels). A
//!   profile on several pools but not on all cannot be selected with one label set (node
//!   selectors have no "or") and is a [`Conflict`], as is a RuntimeClass whose pools ask for
//!   different overheads.
//!
//! The conflict is the user's to fix (the Shoot): the ContainerRuntimes of the pools named in
//! it fail with the message, the shared ManagedResource stays as it was until it is fixed.

use std::collections::BTreeMap;

use super::config::{GVisorSettings, Overhead, Profile, runtime_class_name};
use crate::api::constants::LABEL_WORKER_POOL;

/// The RuntimeClass `overhead.podFixed` of a profile that asks for none: what a gVisor pod's
/// cgroup holds beyond the same pod under runc (the sandbox: Sentry and gofer), measured on a
/// real node by `make bench-gvisor` (docs/benchmarks.md, section "gVisor against runc": 21.7
/// MiB working set and 1.9 millicores idle per busybox pod, 2026-12-07), rounded up to the
/// next 8 MiB and 10 millicores. `overhead: {}` asks for none.
pub const DEFAULT_OVERHEAD_CPU: &str = "10m";
/// See [`DEFAULT_OVERHEAD_CPU`].
pub const DEFAULT_OVERHEAD_MEMORY: &str = "24Mi";

/// The node label gardenlet sets on the nodes of pools with gVisor.
pub const LABEL_GVISOR: &str = "containerruntime.worker.gardener.cloud/gvisor";

/// The validated settings of one pool's ContainerRuntime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolProfiles {
    /// The pool (`spec.workerPool.name`).
    pub pool: String,
    /// `spec.workerPool.selector.matchLabels`.
    pub selector: BTreeMap<String, String>,
    /// Its settings.
    pub settings: GVisorSettings,
}

impl PoolProfiles {
    /// The labels that select this pool's nodes: its selector, or `worker.gardener.cloud/pool`.
    fn pool_labels(&self) -> BTreeMap<String, String> {
        if self.selector.is_empty() {
            BTreeMap::from([(LABEL_WORKER_POOL.to_string(), self.pool.clone())])
        } else {
            self.selector.clone()
        }
    }
}

/// One RuntimeClass to ship.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeClass {
    /// `gvisor` or `gvisor-<profile>`.
    pub name: String,
    /// `runsc` or `runsc-<profile>`.
    pub handler: String,
    /// `scheduling.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `overhead.podFixed` `cpu`, when set.
    pub overhead_cpu: Option<String>,
    /// `overhead.podFixed` `memory`, when set.
    pub overhead_memory: Option<String>,
}

/// Why the pools' profiles cannot be shipped as RuntimeClasses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// A profile on some pools but not on all, and on more than one.
    #[error(
        "gVisor profile {profile:?} is on the pools {} but not on {}: a RuntimeClass selects its nodes with one set of labels, so name a profile on every gVisor pool or on one",
        with.join(", "),
        without.join(", ")
    )]
    SomePools {
        /// The profile.
        profile: String,
        /// Pools that have it.
        with: Vec<String>,
        /// Pools that do not.
        without: Vec<String>,
    },
    /// Pools ask for different overheads for one RuntimeClass (the platform may differ: it
    /// is the node's runsc config, not the RuntimeClass's).
    #[error(
        "RuntimeClass {runtime_class:?} gets a different {what} from the pools {}: a RuntimeClass has one; give the profile the same {what} on every pool",
        pools.join(", ")
    )]
    Differs {
        /// The RuntimeClass.
        runtime_class: String,
        /// What differs (`overhead`).
        what: &'static str,
        /// The pools that disagree.
        pools: Vec<String>,
    },
}

impl Conflict {
    /// Whether `pool` is named in the conflict (its ContainerRuntime fails with it).
    pub fn involves(&self, pool: &str) -> bool {
        let named = |pools: &[String]| pools.iter().any(|p| p == pool);
        match self {
            Conflict::SomePools { with, .. } => named(with),
            Conflict::Differs { pools, .. } => named(pools),
        }
    }
}

/// The RuntimeClasses of `pools` (any order), sorted by name; `gvisor` first. Without pools,
/// only `gvisor`.
pub fn runtime_classes(pools: &[PoolProfiles]) -> Result<Vec<RuntimeClass>, Conflict> {
    let mut pools: Vec<&PoolProfiles> = pools.iter().collect();
    pools.sort_by(|a, b| a.pool.cmp(&b.pool));
    let mut by_name: BTreeMap<Option<&str>, Vec<&PoolProfiles>> = BTreeMap::new();
    for pool in &pools {
        for profile in pool.settings.all_profiles() {
            by_name
                .entry(profile.name.as_deref())
                .or_default()
                .push(pool);
        }
    }
    let mut classes = vec![class(
        None,
        by_name.remove(&None).unwrap_or_default(),
        &pools,
    )?];
    for (name, with) in by_name {
        classes.push(class(name, with, &pools)?);
    }
    Ok(classes)
}

fn class(
    name: Option<&str>,
    with: Vec<&PoolProfiles>,
    all: &[&PoolProfiles],
) -> Result<RuntimeClass, Conflict> {
    let gvisor = BTreeMap::from([(LABEL_GVISOR.to_string(), "true".to_string())]);
    let node_selector = match (name, with.as_slice()) {
        (None, _) => gvisor,
        (Some(_), _) if with.len() == all.len() => gvisor,
        (Some(_), [only]) => {
            let mut selector = gvisor;
            selector.extend(only.pool_labels());
            selector
        }
        (Some(profile), _) => {
            return Err(Conflict::SomePools {
                profile: profile.to_string(),
                with: with.iter().map(|p| p.pool.clone()).collect(),
                without: all
                    .iter()
                    .filter(|p| !with.iter().any(|w| w.pool == p.pool))
                    .map(|p| p.pool.clone())
                    .collect(),
            });
        }
    };
    let profiles: Vec<_> = with
        .iter()
        .filter_map(|pool| {
            pool.settings
                .all_profiles()
                .find(|p| p.name.as_deref() == name)
                .map(|profile| (pool.pool.clone(), profile))
        })
        .collect();
    let runtime_class = runtime_class_name(name);
    let overhead: Option<Overhead> = agreed(&profiles, &runtime_class, "overhead", |p| {
        p.overhead.clone()
    })?
    .flatten();
    let overhead = overhead.unwrap_or_else(|| Overhead {
        cpu: Some(DEFAULT_OVERHEAD_CPU.to_string()),
        memory: Some(DEFAULT_OVERHEAD_MEMORY.to_string()),
    });
    Ok(RuntimeClass {
        handler: crate::gvisor_install::plan::handler_name(name),
        name: runtime_class,
        node_selector,
        overhead_cpu: overhead.cpu,
        overhead_memory: overhead.memory,
    })
}

/// The one value of `field` among `profiles`, or a [`Conflict::Differs`] naming the pools.
fn agreed<T: PartialEq + Clone>(
    profiles: &[(String, &Profile)],
    runtime_class: &str,
    what: &'static str,
    field: impl Fn(&Profile) -> T,
) -> Result<Option<T>, Conflict> {
    let Some((_, first)) = profiles.first() else {
        return Ok(None);
    };
    let value = field(first);
    if profiles.iter().all(|(_, p)| field(p) == value) {
        Ok(Some(value))
    } else {
        Err(Conflict::Differs {
            runtime_class: runtime_class.to_string(),
            what,
            pools: profiles.iter().map(|(pool, _)| pool.clone()).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::containerruntime::config::{provider_config, validate};
    use serde_json::{Value, json};

    fn pool(name: &str, fields: Value) -> PoolProfiles {
        let config = provider_config(fields);
        PoolProfiles {
            pool: name.to_string(),
            selector: BTreeMap::from([(LABEL_WORKER_POOL.to_string(), name.to_string())]),
            settings: validate(Some(&config)).unwrap(),
        }
    }

    fn names(classes: &[RuntimeClass]) -> Vec<(&str, &str)> {
        classes
            .iter()
            .map(|c| (c.name.as_str(), c.handler.as_str()))
            .collect()
    }

    #[test]
    fn without_profiles_there_is_the_one_gvisor_class_on_every_gvisor_node() {
        for pools in [vec![], vec![pool("a", json!({})), pool("b", json!({}))]] {
            let classes = runtime_classes(&pools).unwrap();
            assert_eq!(names(&classes), [("gvisor", "runsc")]);
            assert_eq!(
                classes[0].node_selector,
                BTreeMap::from([(LABEL_GVISOR.to_string(), "true".to_string())])
            );
            assert_eq!(
                (
                    classes[0].overhead_cpu.as_deref(),
                    classes[0].overhead_memory.as_deref()
                ),
                (Some(DEFAULT_OVERHEAD_CPU), Some(DEFAULT_OVERHEAD_MEMORY)),
                "the measured default"
            );
        }
        let none = runtime_classes(&[pool("a", json!({"overhead": {}}))]).unwrap();
        assert_eq!(
            (
                none[0].overhead_cpu.clone(),
                none[0].overhead_memory.clone()
            ),
            (None, None),
            "overhead: {{}} asks for none"
        );
    }

    #[test]
    fn a_profile_on_every_pool_selects_every_gvisor_node_and_one_on_one_pool_that_pool() {
        let debug = json!({"name": "debug", "configFlags": {"debug": "true"}});
        let pools = [
            pool(
                "b",
                json!({"profiles": [debug, {"name": "fast", "platform": "kvm"}]}),
            ),
            pool("a", json!({"profiles": [debug]})),
        ];
        let classes = runtime_classes(&pools).unwrap();
        assert_eq!(
            names(&classes),
            [
                ("gvisor", "runsc"),
                ("gvisor-debug", "runsc-debug"),
                ("gvisor-fast", "runsc-fast")
            ]
        );
        assert_eq!(classes[1].node_selector.len(), 1, "{:?}", classes[1]);
        assert_eq!(
            classes[2].node_selector,
            BTreeMap::from([
                (LABEL_GVISOR.to_string(), "true".to_string()),
                (LABEL_WORKER_POOL.to_string(), "b".to_string())
            ])
        );
    }

    #[test]
    fn overheads_of_every_pool_must_agree() {
        let pools = [
            pool(
                "a",
                json!({"overhead": {"memory": "64Mi"}, "profiles": [{"name": "p", "overhead": {"cpu": "100m"}}]}),
            ),
            pool(
                "b",
                json!({"overhead": {"memory": "64Mi"}, "profiles": [{"name": "p", "overhead": {"cpu": "0.1"}}]}),
            ),
        ];
        let classes = runtime_classes(&pools).unwrap();
        assert_eq!(classes[0].overhead_memory.as_deref(), Some("64Mi"));
        assert_eq!(classes[1].overhead_cpu.as_deref(), Some("100m"));

        let pools = [
            pool("a", json!({"overhead": {"memory": "64Mi"}})),
            pool("b", json!({})),
        ];
        let conflict = runtime_classes(&pools).unwrap_err();
        assert_eq!(
            conflict.to_string(),
            "RuntimeClass \"gvisor\" gets a different overhead from the pools a, b: a RuntimeClass has one; give the profile the same overhead on every pool"
        );
        assert!(conflict.involves("a") && conflict.involves("b"));
    }

    #[test]
    fn a_profile_on_some_pools_but_not_all_is_a_conflict_of_those_pools() {
        let p = json!({"profiles": [{"name": "p"}]});
        let pools = [pool("a", p.clone()), pool("b", p), pool("c", json!({}))];
        let conflict = runtime_classes(&pools).unwrap_err();
        assert_eq!(
            conflict.to_string(),
            "gVisor profile \"p\" is on the pools a, b but not on c: a RuntimeClass selects its nodes with one set of labels, so name a profile on every gVisor pool or on one"
        );
        assert!(conflict.involves("a") && !conflict.involves("c"));
    }

    #[test]
    fn a_pool_without_selector_is_selected_by_its_pool_label() {
        let mut lone = pool("a", json!({"profiles": [{"name": "p"}]}));
        lone.selector.clear();
        let classes = runtime_classes(&[lone, pool("b", json!({}))]).unwrap();
        assert_eq!(
            classes[1]
                .node_selector
                .get(LABEL_WORKER_POOL)
                .map(String::as_str),
            Some("a")
        );
    }
}
