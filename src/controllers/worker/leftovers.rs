//! Two checks of Gardener's generic Worker actuator that look at what machine-controller-manager
//! (MCM) left behind (pure; evaluated on one snapshot of MachineDeployments and MachineSets):
//!
//! - [`stuck_controller`] — `isMachineControllerStuck` (`genericactuator/actuator.go`): after
//!   a rollout wait ran out, MCM counts as stuck when a MachineDeployment it has taken over
//!   (its finalizer is on) and that is older than [`STUCK_THRESHOLD`] still has no MachineSet
//!   with the wanted class. The reconcile then deletes MCM's pods so its Deployment starts a
//!   fresh one, as upstream does.
//! - [`unwanted_deployments`] — `waitUntilUnwantedMachineDeploymentsDeleted`
//!   (`genericactuator/actuator_reconcile.go`): after the cleanup deleted the deployments
//!   that are no longer wanted, the Worker is not reported Succeeded until they are gone
//!   (MCM drains and deletes their machines first). A failed machine of such a deployment
//!   fails the operation with the machine's own error instead of waiting for the bound.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::availability::failed_machines;
use super::machine_sets::{belongs_to, set_class};
use crate::api::machine::{MachineDeployment, MachineSet};

/// MCM's finalizer on the objects it manages.
pub const MCM_FINALIZER: &str = "machine.sapcloud.io/machine-controller-manager";

/// Deployments younger than this are never taken as a sign of a stuck MCM.
pub const STUCK_THRESHOLD: Duration = Duration::from_secs(120);

/// The label of MCM's pods (upstream deletes the pods with this label).
pub const MCM_POD_SELECTOR: &str = "role=machine-controller-manager";

/// Why MCM looks stuck, or `None`. `wanted_class` maps a deployment name to the class it
/// must run (deployments not listed are not checked).
pub fn stuck_controller<'a>(
    deployments: &[MachineDeployment],
    sets: &[MachineSet],
    wanted_class: impl Fn(&str) -> Option<&'a str>,
    now: DateTime<Utc>,
) -> Option<String> {
    for deployment in deployments {
        let Some(name) = deployment.metadata.name.as_deref() else {
            continue;
        };
        let taken_over = deployment
            .metadata
            .finalizers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|f| f == MCM_FINALIZER);
        if !taken_over {
            continue;
        }
        let old_enough = deployment
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|created| DateTime::<Utc>::from_timestamp(created.0.as_second(), 0))
            .is_some_and(|created| {
                now.signed_duration_since(created)
                    .to_std()
                    .is_ok_and(|age| age >= STUCK_THRESHOLD)
            });
        if !old_enough {
            continue;
        }
        let Some(class) = wanted_class(name) else {
            continue;
        };
        let has_set = sets
            .iter()
            .any(|set| belongs_to(set, name) && set_class(set) == Some(class));
        if !has_set {
            let namespace = deployment.metadata.namespace.as_deref().unwrap_or_default();
            return Some(format!(
                "no machine set with class {class} for machine deployment {namespace}/{name}"
            ));
        }
    }
    None
}

/// What the deletion of unwanted deployments waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unwanted {
    /// None left.
    Gone,
    /// Still there (names).
    Remaining(Vec<String>),
    /// A machine of one of them failed; the text has the machines' errors.
    Failed(String),
}

/// The state of the deployments not in `wanted`.
pub fn unwanted_deployments(
    deployments: &[MachineDeployment],
    wanted: &BTreeSet<&str>,
) -> Unwanted {
    let mut remaining = Vec::new();
    for deployment in deployments {
        let Some(name) = deployment.metadata.name.as_deref() else {
            continue;
        };
        if wanted.contains(name) {
            continue;
        }
        if let Some(status) = &deployment.status
            && let Some(failed) = failed_machines(name, status)
        {
            return Unwanted::Failed(failed);
        }
        remaining.push(name.to_string());
    }
    if remaining.is_empty() {
        Unwanted::Gone
    } else {
        Unwanted::Remaining(remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(
        name: &str,
        age_seconds: i64,
        finalizer: bool,
        now: DateTime<Utc>,
    ) -> MachineDeployment {
        let created = now - chrono::Duration::seconds(age_seconds);
        let mut value = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": "shoot--a--b",
                         "creationTimestamp": created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
            "spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": "c-new"}}}},
        });
        if finalizer {
            value["metadata"]["finalizers"] = json!([MCM_FINALIZER]);
        }
        serde_json::from_value(value).expect("deployment")
    }

    fn set(owner: &str, class: &str) -> MachineSet {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineSet",
            "metadata": {"name": format!("{owner}-x"), "namespace": "shoot--a--b",
                         "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1",
                             "kind": "MachineDeployment", "name": owner, "uid": "u"}]},
            "spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": class}}}},
        }))
        .expect("set")
    }

    #[test]
    fn mcm_is_stuck_only_for_an_old_taken_over_deployment_without_a_set_of_the_wanted_class() {
        let now = Utc::now();
        let wanted = |_: &str| Some("c-new");
        // Old, finalizer on, only a set of the old class.
        let stuck = stuck_controller(
            &[deployment("d1", 300, true, now)],
            &[set("d1", "c-old")],
            wanted,
            now,
        );
        assert_eq!(
            stuck.as_deref(),
            Some("no machine set with class c-new for machine deployment shoot--a--b/d1")
        );
        // The same with a set of the wanted class: fine.
        assert_eq!(
            stuck_controller(
                &[deployment("d1", 300, true, now)],
                &[set("d1", "c-new")],
                wanted,
                now
            ),
            None
        );
        // Too young, or MCM has not taken it over (no finalizer): not a sign.
        assert_eq!(
            stuck_controller(&[deployment("d1", 60, true, now)], &[], wanted, now),
            None
        );
        assert_eq!(
            stuck_controller(&[deployment("d1", 300, false, now)], &[], wanted, now),
            None
        );
        // Not a wanted deployment: not checked.
        assert_eq!(
            stuck_controller(&[deployment("d1", 300, true, now)], &[], |_| None, now),
            None
        );
    }

    #[test]
    fn unwanted_deployments_are_waited_for_and_their_failed_machines_fail_the_wait() {
        let now = Utc::now();
        let wanted: BTreeSet<&str> = ["keep"].into_iter().collect();
        assert_eq!(
            unwanted_deployments(&[deployment("keep", 10, true, now)], &wanted),
            Unwanted::Gone
        );
        assert_eq!(
            unwanted_deployments(
                &[
                    deployment("keep", 10, true, now),
                    deployment("old", 10, true, now)
                ],
                &wanted
            ),
            Unwanted::Remaining(vec!["old".to_string()])
        );
        let mut failing = deployment("old", 10, true, now);
        failing.status = Some(
            serde_json::from_value(json!({"failedMachines": [
                {"name": "old-m1", "lastOperation": {"description": "cloud quota exceeded"}}
            ]}))
            .expect("status"),
        );
        match unwanted_deployments(&[failing], &wanted) {
            Unwanted::Failed(text) => {
                assert!(
                    text.contains("old-m1") && text.contains("cloud quota exceeded"),
                    "{text}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
