//! What a poll of a running rollout may skip (pure).
//!
//! Gardener's generic actuator deploys the classes and deployments and writes the Worker
//! status once per reconcile, and then polls the rollout by listing only
//! (`waitUntilWantedMachineDeploymentsAvailable`). Our runs requeue instead of blocking, so a
//! poll is a run of its own; it knows that it is one when the [`fingerprint`] of what it
//! would deploy equals the one the actuator remembered for the running series
//! ([`super::wait::WaitTracker::deployed`]). A poll then:
//!
//! - applies no class secret and no class;
//! - writes a deployment only when its decided `spec.replicas` differ from the listed ones
//!   ([`needs_write`]), so a value the cluster-autoscaler set is not written back;
//! - writes `status.machineDeployments` (and its timestamp) only when the entries changed
//!   ([`status_changed`]).
//!
//! Everything gardenlet may change to ask for a new reconcile is in the fingerprint: the
//! rendered objects (pool spec, user data, Cluster), hibernation, `metadata.generation` and
//! the `gardener.cloud/timestamp` annotation (gardenlet waits for a fresh
//! `machineDeploymentsLastUpdateTime` after each request it annotates).

use sha2::{Digest, Sha256};

use super::render::RenderedDeployment;
use crate::api::machine::MachineDeployment;
use crate::api::worker::WorkerMachineDeployment;

/// What a run of the Worker deploys, as one value: equal fingerprints deploy equal objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

/// The request's part of the [`Fingerprint`]: hibernation, generation and gardenlet's
/// `gardener.cloud/timestamp` annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestKey<'a> {
    /// `spec.hibernation.enabled` of the shoot.
    pub hibernated: bool,
    /// `metadata.generation` of the Worker.
    pub generation: Option<i64>,
    /// The `gardener.cloud/timestamp` annotation.
    pub timestamp: Option<&'a str>,
}

/// The fingerprint of `rendered` for `key`.
pub fn fingerprint(rendered: &[RenderedDeployment], key: RequestKey<'_>) -> Fingerprint {
    let mut digest = Sha256::new();
    let mut feed = |part: &str| {
        digest.update(part.len().to_le_bytes());
        digest.update(part.as_bytes());
    };
    feed(&format!(
        "{}/{:?}/{}",
        key.hibernated,
        key.generation,
        key.timestamp.unwrap_or_default()
    ));
    for deployment in rendered {
        for part in [
            serde_json::to_string(&deployment.class_secret),
            serde_json::to_string(&deployment.class),
            serde_json::to_string(&deployment.deployment),
        ] {
            // Serialising these types cannot fail (string keys only); an error would only
            // make the fingerprint differ, i.e. deploy again.
            feed(&part.unwrap_or_else(|e| e.to_string()));
        }
    }
    Fingerprint(hex::encode(digest.finalize()))
}

/// Whether a poll must write the deployment: it is missing, or its listed `spec.replicas`
/// differ from the decided value. No `spec.replicas` is 0: machine-controller-manager's Go
/// types omit a zero when it updates the deployment (`omitempty`), as it does to add its
/// finalizer, and read a missing one as 0.
pub fn needs_write(listed: Option<&MachineDeployment>, decided: i32) -> bool {
    listed.is_none_or(|d| d.spec.replicas.unwrap_or(0) != decided)
}

/// Whether `status.machineDeployments` must be written: the entries differ from the current
/// ones, or the timestamp was never written.
pub fn status_changed(
    current: &[WorkerMachineDeployment],
    current_time_set: bool,
    wanted: &[WorkerMachineDeployment],
) -> bool {
    !current_time_set || current != wanted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(class: &str) -> RenderedDeployment {
        let deployment: MachineDeployment = serde_json::from_value(json!({
            "metadata": {"name": "md"},
            "spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": class}}}},
        }))
        .unwrap();
        RenderedDeployment {
            name: "md".into(),
            pool: "p".into(),
            zone: "z".into(),
            class_name: class.into(),
            minimum: 1,
            maximum: 2,
            priority: None,
            auto_preserve_failed_machine_max: None,
            class_secret: Default::default(),
            class: serde_json::from_value(json!({"metadata": {"name": class}, "providerSpec": {}}))
                .unwrap(),
            deployment,
        }
    }

    const KEY: RequestKey<'static> = RequestKey {
        hibernated: false,
        generation: Some(1),
        timestamp: Some("2026-01-01T00:00:00Z"),
    };

    #[test]
    fn the_fingerprint_changes_with_objects_and_requests_only() {
        let base = fingerprint(&[rendered("a")], KEY);
        assert_eq!(base, fingerprint(&[rendered("a")], KEY));
        assert_ne!(base, fingerprint(&[rendered("b")], KEY));
        let other_requests = [
            RequestKey {
                hibernated: true,
                ..KEY
            },
            RequestKey {
                generation: Some(2),
                ..KEY
            },
            RequestKey {
                timestamp: Some("2026-01-01T00:00:05Z"),
                ..KEY
            },
        ];
        for request in other_requests {
            assert_ne!(base, fingerprint(&[rendered("a")], request), "{request:?}");
        }
        assert_ne!(base, fingerprint(&[rendered("a"), rendered("a")], KEY));
    }

    #[test]
    fn a_deployment_is_written_only_when_missing_or_its_replicas_change() {
        let mut listed = rendered("a").deployment;
        assert!(needs_write(None, 1));
        listed.spec.replicas = Some(3);
        assert!(!needs_write(Some(&listed), 3));
        assert!(needs_write(Some(&listed), 2));
        // MCM's Go types drop a zero: no replicas is 0, not a reason to write again.
        listed.spec.replicas = None;
        assert!(!needs_write(Some(&listed), 0));
        assert!(needs_write(Some(&listed), 1));
    }

    #[test]
    fn the_status_is_written_when_the_entries_change_or_no_time_was_written() {
        let entries = super::super::render::status_entries(&[rendered("a")]);
        assert!(!status_changed(&entries, true, &entries));
        assert!(status_changed(&entries, false, &entries));
        assert!(status_changed(&[], true, &entries));
        let mut other = entries.clone();
        other[0].maximum = 5;
        assert!(status_changed(&other, true, &entries));
    }
}
