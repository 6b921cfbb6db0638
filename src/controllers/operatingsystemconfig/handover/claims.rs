//! Which node-agent Secrets another ManagedResource manages ([`super`] decides per Secret
//! from this): what one ManagedResource claims (pure, [`claim_of`]) and the operator's view
//! of all of them ([`SecretClaims`], fed by [`super::watch`]).
//!
//! gardener-resource-manager lists every object a ManagedResource applied in its
//! `status.resources`; a shoot Secret `kube-system/<name>` listed there by a ManagedResource
//! that is not ours belongs to that ManagedResource, whatever it is called. Only the
//! ManagedResources the shoot's resource manager applies (no `spec.class`) count: a classed
//! one targets another cluster. A deleting one claims nothing, so ours adopts its Secrets
//! while gardener-resource-manager is still deleting it.
//!
//! gardenlet's own ManagedResource `shoot-gardener-node-agent` (label `origin=gardener`) is
//! the fast path: until gardener-resource-manager has reported anything for it, it claims
//! every node-agent Secret of its namespace, so a newly created one is never raced.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use kube::ResourceExt;

use super::super::nodeagent::NAMESPACE as SHOOT_NAMESPACE;
use super::Error;
use crate::api::ManagedResource;

/// Name of gardenlet's ManagedResource for the node-agent secrets.
pub const GARDENLET_MANAGED_RESOURCE: &str = "shoot-gardener-node-agent";
/// Value of the `origin` label on gardenlet's ManagedResources.
pub const GARDENLET_ORIGIN: &str = "gardener";

/// How long a reconcile waits for the first list of the other ManagedResources before it
/// fails (and is retried with backoff) instead of guessing.
pub const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What one ManagedResource claims among the shoot's `kube-system` Secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Every node-agent Secret of the namespace (gardenlet's, not yet reported on).
    All,
    /// These Secret names, from `status.resources`.
    Secrets(BTreeSet<String>),
}

impl Claim {
    fn covers(&self, secret: &str) -> bool {
        match self {
            Claim::All => true,
            Claim::Secrets(names) => names.contains(secret),
        }
    }
}

/// What `managed_resource` claims, or `None` when it claims no Secret of ours (pure).
pub fn claim_of(managed_resource: &ManagedResource) -> Option<Claim> {
    let classed = managed_resource
        .spec
        .class
        .as_deref()
        .is_some_and(|class| !class.is_empty());
    if classed || managed_resource.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = managed_resource.status.as_ref();
    let reported =
        status.is_some_and(|s| s.observed_generation.is_some() || !s.resources.is_empty());
    if is_gardenlets(managed_resource) && !reported {
        return Some(Claim::All);
    }
    let names: BTreeSet<String> = status
        .into_iter()
        .flat_map(|status| &status.resources)
        .filter(|object| {
            object.kind.as_deref() == Some("Secret")
                && object.api_version.as_deref() == Some("v1")
                && object.namespace.as_deref() == Some(SHOOT_NAMESPACE)
        })
        .filter_map(|object| object.name.clone())
        .collect();
    (!names.is_empty()).then_some(Claim::Secrets(names))
}

/// gardenlet's node-agent ManagedResource, by name and label (pure).
fn is_gardenlets(managed_resource: &ManagedResource) -> bool {
    managed_resource.name_any() == GARDENLET_MANAGED_RESOURCE
        && managed_resource.labels().get("origin").map(String::as_str) == Some(GARDENLET_ORIGIN)
}

/// Claims by namespace, then by ManagedResource name.
pub type ClaimsByNamespace = HashMap<String, HashMap<String, Claim>>;

/// The claims of every other ManagedResource, as last seen by the watch.
#[derive(Debug)]
pub struct SecretClaims {
    claims: Mutex<ClaimsByNamespace>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl Default for SecretClaims {
    fn default() -> Self {
        SecretClaims {
            claims: Mutex::default(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl SecretClaims {
    /// The ManagedResource that manages the shoot Secret `kube-system/<secret>` of
    /// `namespace`, if any; waits (up to [`SYNC_WAIT`]) for the watch's first list so a
    /// reconcile right after start-up never decides on an empty view.
    pub async fn owner(&self, namespace: &str, secret: &str) -> Result<Option<String>, Error> {
        let mut synced = self.synced.subscribe();
        let waited = tokio::time::timeout(SYNC_WAIT, synced.wait_for(|synced| *synced)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return Err(Error::DeliveryUnknown);
        }
        let claims = self.lock();
        let mut owners = claims.get(namespace).into_iter().flatten();
        Ok(owners
            .find(|(_, claim)| claim.covers(secret))
            .map(|(name, _)| name.clone()))
    }

    /// Records what one ManagedResource claims now; returns whether that changed.
    pub fn set(&self, namespace: &str, name: &str, claim: Option<Claim>) -> bool {
        let mut claims = self.lock();
        let by_name = claims.entry(namespace.to_string()).or_default();
        let changed = match claim {
            Some(claim) => by_name.insert(name.to_string(), claim.clone()) != Some(claim),
            None => by_name.remove(name).is_some(),
        };
        if by_name.is_empty() {
            claims.remove(namespace);
        }
        changed
    }

    /// Replaces the whole view (after a (re)list); returns the namespaces whose claims
    /// changed.
    pub fn replace(&self, now: ClaimsByNamespace) -> Vec<String> {
        let mut claims = self.lock();
        let mut changed: BTreeSet<String> = BTreeSet::new();
        for (namespace, by_name) in claims.iter() {
            if now.get(namespace) != Some(by_name) {
                changed.insert(namespace.clone());
            }
        }
        for namespace in now.keys() {
            if !claims.contains_key(namespace) {
                changed.insert(namespace.clone());
            }
        }
        *claims = now;
        changed.into_iter().collect()
    }

    /// Resolves once the view is listed (for readiness).
    pub async fn wait_synced(&self) {
        let _ = self.synced.subscribe().wait_for(|synced| *synced).await;
    }

    /// Marks the view as listed: reconciles waiting in [`Self::owner`] go on.
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClaimsByNamespace> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn mr(name: &str, origin: &str, status: Value) -> ManagedResource {
        serde_json::from_value(json!({
            "apiVersion": "resources.gardener.cloud/v1alpha1",
            "kind": "ManagedResource",
            "metadata": {"name": name, "namespace": "shoot--a--b", "labels": {"origin": origin}},
            "spec": {"secretRefs": []},
            "status": status
        }))
        .unwrap()
    }

    fn listing(names: &[&str]) -> Value {
        let resources: Vec<Value> = names
            .iter()
            .map(|name| json!({"apiVersion": "v1", "kind": "Secret", "namespace": "kube-system", "name": name}))
            .collect();
        json!({"observedGeneration": 1, "resources": resources})
    }

    fn secrets(names: &[&str]) -> Option<Claim> {
        Some(Claim::Secrets(
            names.iter().map(|n| n.to_string()).collect(),
        ))
    }

    #[test]
    fn any_managed_resource_claims_what_it_lists() {
        let listed = listing(&["pool-a", "pool-b"]);
        for (name, origin) in [
            ("shoot-gardener-node-agent-v2", "gardener"),
            (GARDENLET_MANAGED_RESOURCE, "gardener-v2"),
            ("anything", "someone"),
            (GARDENLET_MANAGED_RESOURCE, GARDENLET_ORIGIN),
        ] {
            assert_eq!(
                claim_of(&mr(name, origin, listed.clone())),
                secrets(&["pool-a", "pool-b"]),
                "{name} {origin}"
            );
        }
    }

    #[test]
    fn only_shoot_kube_system_secrets_count() {
        let status = json!({"observedGeneration": 1, "resources": [
            {"apiVersion": "v1", "kind": "Secret", "namespace": "default", "name": "a"},
            {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": "b"},
            {"apiVersion": "example.com/v1", "kind": "Secret", "namespace": "kube-system", "name": "c"},
            {"apiVersion": "v1", "kind": "Secret", "namespace": "kube-system", "name": "d"}
        ]});
        assert_eq!(claim_of(&mr("x", "y", status.clone())), secrets(&["d"]));
        let mut classed = mr("x", "y", status);
        classed.spec.class = Some("seed".into());
        assert_eq!(claim_of(&classed), None, "a seed-class MR targets the seed");
    }

    #[test]
    fn gardenlets_claims_everything_until_reported_and_nothing_while_deleting() {
        let fresh = mr(GARDENLET_MANAGED_RESOURCE, GARDENLET_ORIGIN, json!({}));
        assert_eq!(claim_of(&fresh), Some(Claim::All));
        let reported_empty = mr(
            GARDENLET_MANAGED_RESOURCE,
            GARDENLET_ORIGIN,
            json!({"observedGeneration": 2}),
        );
        assert_eq!(claim_of(&reported_empty), None);
        assert_eq!(claim_of(&mr("other", GARDENLET_ORIGIN, json!({}))), None);
        let mut deleting = serde_json::to_value(mr(
            GARDENLET_MANAGED_RESOURCE,
            GARDENLET_ORIGIN,
            listing(&["a"]),
        ))
        .unwrap();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let deleting: ManagedResource = serde_json::from_value(deleting).unwrap();
        assert_eq!(claim_of(&deleting), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsynced_view_is_an_error_not_a_guess() {
        let claims = SecretClaims::default();
        assert!(matches!(
            claims.owner("a", "s").await,
            Err(Error::DeliveryUnknown)
        ));
    }

    #[tokio::test]
    async fn the_view_reports_changes_only_and_answers_per_secret() {
        let claims = SecretClaims::default();
        assert!(claims.set("ns", "theirs", secrets(&["a"])));
        assert!(!claims.set("ns", "theirs", secrets(&["a"])));
        assert!(claims.set("ns", "theirs", secrets(&["a", "b"])));
        assert!(claims.set("ns", "theirs", None));
        assert!(!claims.set("ns", "theirs", None));
        claims.set("ns", "theirs", secrets(&["a"]));
        claims.set("gone", "x", Some(Claim::All));
        let now = ClaimsByNamespace::from([
            (
                "ns".to_string(),
                HashMap::from([(
                    "theirs".to_string(),
                    Claim::Secrets(["a".to_string()].into()),
                )]),
            ),
            (
                "new".to_string(),
                HashMap::from([("y".to_string(), Claim::All)]),
            ),
        ]);
        assert_eq!(
            claims.replace(now),
            vec!["gone".to_string(), "new".to_string()]
        );
        claims.mark_synced();
        assert_eq!(
            claims.owner("ns", "a").await.unwrap().as_deref(),
            Some("theirs")
        );
        assert_eq!(claims.owner("ns", "b").await.unwrap(), None);
        assert_eq!(
            claims.owner("new", "anything").await.unwrap().as_deref(),
            Some("y")
        );
        assert_eq!(claims.owner("gone", "a").await.unwrap(), None);
    }
}
