//! Delete: remove what reconcile created and (unless force-deleting) wait until it is gone.
//!
//! - `reconcile` OSCs: the node-agent ManagedResource with its secrets; the shoot's resource
//!   manager then deletes `kube-system/<key>` in the shoot.
//! - `provision` OSCs: the user-data Secret, but only when this OSC controls it (a Secret the
//!   status points to that something else owns is left alone). Its owner reference would let
//!   the garbage collector remove it too; deleting it here makes the deletion observable
//!   before the OSC's finalizer goes.
//!
//! Force deletion (`wait = false`) deletes the same objects and never waits.

use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use super::{Error, OscActuator, node_agent_managed_resource, result_secret_ref};
use crate::api::OperatingSystemConfig;
use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
use crate::extension::managed_resource;
use crate::extension::{Outcome, Request};

/// Deletes the OSC's ManagedResource or user-data Secret; `wait = false` is force deletion.
pub async fn delete(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
    wait: bool,
) -> Result<Outcome, Error> {
    let osc = request.object;
    match osc.spec.purpose {
        OperatingSystemConfigPurpose::Reconcile => {
            let mr = node_agent_managed_resource(osc);
            if !managed_resource::delete_and_wait(&actuator.client, request.namespace(), &mr, wait)
                .await?
            {
                return Ok(managed_resource::pending_deletion(&format!(
                    "ManagedResource {mr}"
                )));
            }
        }
        OperatingSystemConfigPurpose::Provision => {
            let (name, namespace) = result_secret_ref(osc);
            if !delete_result_secret(actuator, osc, &name, &namespace, wait).await? {
                return Ok(managed_resource::pending_deletion(&format!(
                    "Secret {namespace}/{name}"
                )));
            }
        }
    }
    Ok(Outcome::done())
}

/// Deletes the Secret when `osc` controls it; reports whether it is gone (or not ours).
async fn delete_result_secret(
    actuator: &OscActuator,
    osc: &OperatingSystemConfig,
    name: &str,
    namespace: &str,
    wait: bool,
) -> Result<bool, Error> {
    let api: Api<Secret> = Api::namespaced(actuator.client.clone(), namespace);
    let error = |action: &'static str| {
        move |source| Error::Secret {
            action,
            namespace: namespace.to_string(),
            name: name.to_string(),
            source: Box::new(source),
        }
    };
    let Some(secret) = api.get_opt(name).await.map_err(error("reading"))? else {
        return Ok(true);
    };
    let ours = secret.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && Some(owner.uid.as_str()) == osc.metadata.uid.as_deref()
    });
    if !ours {
        tracing::info!(secret = %name, "user-data Secret is not controlled by this OSC; leaving it");
        return Ok(true);
    }
    if secret.metadata.deletion_timestamp.is_none() {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(source) if crate::extension::managed_resource::not_found(&source) => {
                return Ok(true);
            }
            Err(source) => return Err(error("deleting")(source)),
        }
    }
    if !wait {
        return Ok(true);
    }
    Ok(api.get_opt(name).await.map_err(error("reading"))?.is_none())
}
