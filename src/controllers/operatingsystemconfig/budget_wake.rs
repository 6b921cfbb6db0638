//! Wakes the OSCs of a namespace when the rollout budgets of its Cluster change — what lets
//! the OSC controller read the Cluster from the operator's cache
//! ([`crate::extension::ExtensionKind::CACHED_CLUSTER`]) instead of with a GET per run.
//!
//! The only part of the Cluster a `reconcile` OSC renders is each pool's rollout budget
//! ([`nodeagent::rollout_budget`], from the Shoot's `maxUnavailable` and `minimum`). gardenlet
//! writes the Cluster and later annotates the OSCs, and the two watches deliver in no common
//! order: a run may still see the Cluster from before. So whenever the cache takes a Cluster
//! whose budgets differ from the ones seen before, the namespace's OSCs run again and ship
//! the new budget (a run with nothing else changed writes only the changed secret).
//!
//! [`changes`] is pure; [`wake_on_budget_changes`] feeds it from
//! [`SeedCache::cluster_changes`].

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use tokio::sync::broadcast::error::RecvError;

use super::nodeagent;
use crate::api::ShootView;
use crate::extension::cache::SeedCache;
use crate::extension::controller::WakeNamespaces;

/// Rollout budget per pool.
pub type Budgets = BTreeMap<String, u32>;

/// The rollout budget of each pool of `shoot`.
pub fn budgets(shoot: &ShootView) -> Budgets {
    shoot
        .spec
        .provider
        .workers
        .iter()
        .map(|w| (w.name.clone(), nodeagent::rollout_budget(w)))
        .collect()
}

/// Records `now` (`None`: the Cluster is gone or unreadable) for `namespace` in `known` and
/// says whether its OSCs must run again: only when budgets were known before and differ (a
/// new Cluster's OSCs run on their own events).
pub fn changes(
    known: &mut HashMap<String, Budgets>,
    namespace: &str,
    now: Option<Budgets>,
) -> bool {
    match now {
        None => {
            known.remove(namespace);
            false
        }
        Some(now) => match known.insert(namespace.to_string(), now.clone()) {
            Some(before) => before != now,
            None => false,
        },
    }
}

/// The budgets of the stored Cluster `name`.
fn stored_budgets(cache: &SeedCache, name: &str) -> Option<Budgets> {
    let cluster = cache.cluster(name)?;
    cluster.shoot().ok().map(|shoot| budgets(&shoot))
}

/// The namespaces whose OSCs must run again, for [`crate::extension::start::Setup::start`].
/// Starts from the Clusters in the (synced) cache.
pub fn wake_on_budget_changes(cache: SeedCache) -> WakeNamespaces {
    let mut receiver = cache.cluster_changes();
    let mut known: HashMap<String, Budgets> = HashMap::new();
    for name in stored_names(&cache) {
        changes(&mut known, &name, stored_budgets(&cache, &name));
    }
    let (sender, woken) = futures::channel::mpsc::unbounded();
    tokio::spawn(async move {
        loop {
            let names = match receiver.recv().await {
                Ok(name) => vec![name],
                // Changes were missed: compare every stored Cluster (and forget the gone).
                Err(RecvError::Lagged(_)) => {
                    let mut names = stored_names(&cache);
                    names.extend(known.keys().cloned());
                    names.sort();
                    names.dedup();
                    names
                }
                Err(RecvError::Closed) => return,
            };
            for name in names {
                let now = stored_budgets(&cache, &name);
                if changes(&mut known, &name, now) {
                    tracing::info!(namespace = %name, "rollout budgets of the Cluster changed; waking its OSCs");
                    if sender.unbounded_send(name).is_err() {
                        return;
                    }
                }
            }
        }
    });
    woken.boxed()
}

fn stored_names(cache: &SeedCache) -> Vec<String> {
    cache
        .clusters
        .in_namespace("")
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shoot(workers: serde_json::Value) -> ShootView {
        serde_json::from_value(json!({"spec": {"provider": {"workers": workers}}})).unwrap()
    }

    #[test]
    fn budgets_follow_max_unavailable_and_minimum_per_pool() {
        let shoot = shoot(json!([
            {"name": "a", "minimum": 10, "maxUnavailable": "30%"},
            {"name": "b", "minimum": 2, "maxUnavailable": 2},
            {"name": "c", "minimum": 1},
        ]));
        assert_eq!(
            budgets(&shoot),
            Budgets::from([("a".into(), 3), ("b".into(), 2), ("c".into(), 1)])
        );
    }

    #[test]
    fn only_a_change_of_known_budgets_wakes() {
        let mut known = HashMap::new();
        let one = Budgets::from([("a".to_string(), 1)]);
        let two = Budgets::from([("a".to_string(), 2)]);
        assert!(!changes(&mut known, "ns", Some(one.clone())), "first sight");
        assert!(
            !changes(&mut known, "ns", Some(one.clone())),
            "same budgets"
        );
        assert!(changes(&mut known, "ns", Some(two.clone())), "changed");
        assert!(!changes(&mut known, "ns", None), "gone");
        assert!(known.is_empty(), "a gone Cluster is forgotten");
        assert!(!changes(&mut known, "ns", Some(two)), "new again");
    }

    #[test]
    fn a_new_pool_is_a_change() {
        let mut known = HashMap::new();
        changes(
            &mut known,
            "ns",
            Some(Budgets::from([("a".to_string(), 1)])),
        );
        let both = Budgets::from([("a".to_string(), 1), ("b".to_string(), 1)]);
        assert!(changes(&mut known, "ns", Some(both)));
    }
}
