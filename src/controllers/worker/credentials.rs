//! machine-controller-manager's hold on the Worker's credentials secret (pure).
//!
//! MCM puts its finalizer on every secret a MachineClass references (`secretRef` and
//! `credentialsSecretRef`) and removes it once no class references the secret any more
//! (machine-controller-manager `pkg/util/provider/machinecontroller/secret.go`,
//! `reconcileClusterSecret`). Gardener's delete waits for both edges on the Worker's
//! `spec.secretRef` (`actuator_delete.go: waitUntilCredentialsSecretAcquiredOrReleased`):
//! after re-deploying the classes it waits until MCM holds the secret (so MCM works with the
//! refreshed credentials while it deletes the machines), and at the end until MCM has let go
//! of it (so the secret can be deleted after the Worker).

use k8s_openapi::api::core::v1::Secret;

use super::leftovers::MCM_FINALIZER;
use crate::api::machine::MachineClass;

/// The finalizer out-of-tree machine controllers (the provider side of MCM) put on secrets.
pub const MCM_PROVIDER_FINALIZER: &str = "machine.sapcloud.io/machine-controller";

/// Whether machine-controller-manager holds `secret` (either of its finalizers is on it).
pub fn held(secret: &Secret) -> bool {
    secret
        .metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|f| f == MCM_FINALIZER || f == MCM_PROVIDER_FINALIZER)
}

/// Whether any of `classes` references the secret `name` as its credentials or user data
/// secret (only then does MCM take hold of it).
pub fn referenced_by(classes: &[MachineClass], name: &str) -> bool {
    classes.iter().any(|c| {
        c.spec.secret_ref.as_ref().is_some_and(|r| r.name == name)
            || c.spec
                .credentials_secret_ref
                .as_ref()
                .is_some_and(|r| r.name == name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(finalizers: &[&str]) -> Secret {
        serde_json::from_value(
            json!({"metadata": {"name": "cloudprovider", "finalizers": finalizers}}),
        )
        .unwrap()
    }

    #[test]
    fn either_finalizer_means_held() {
        assert!(!held(&secret(&[])));
        assert!(!held(&secret(&["other"])));
        assert!(held(&secret(&[MCM_FINALIZER])));
        assert!(held(&secret(&["other", MCM_PROVIDER_FINALIZER])));
    }

    #[test]
    fn references_count_through_either_secret_reference() {
        let class = |secret: &str, credentials: Option<&str>| -> MachineClass {
            let mut value = json!({
                "metadata": {"name": "c"}, "providerSpec": {},
                "secretRef": {"name": secret},
            });
            if let Some(credentials) = credentials {
                value["credentialsSecretRef"] = json!({"name": credentials});
            }
            serde_json::from_value(value).unwrap()
        };
        assert!(!referenced_by(&[], "cloudprovider"));
        assert!(referenced_by(
            &[class("c", Some("cloudprovider"))],
            "cloudprovider"
        ));
        assert!(referenced_by(
            &[class("cloudprovider", None)],
            "cloudprovider"
        ));
        assert!(!referenced_by(
            &[class("c", Some("other"))],
            "cloudprovider"
        ));
    }
}
