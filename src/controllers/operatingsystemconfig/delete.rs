//! Delete: remove what reconcile created and (unless force-deleting) wait until it is gone.
//!
//! - `reconcile` OSCs: the node-agent ManagedResource with its secrets; the shoot's resource
//!   manager then deletes `kube-system/<key>` in the shoot. The Secret we ship asks the
//!   resource manager to keep it ([`super::handover`]), so first the ManagedResource is
//!   applied once more without that annotation and the deletion waits until the resource
//!   manager has applied that; without a resource manager handling it (no finalizer) there is
//!   nothing to wait for.
//! - `provision` OSCs: the user-data Secret, but only when this OSC controls it (a Secret the
//!   status points to that something else owns is left alone). Its owner reference would let
//!   the garbage collector remove it too; deleting it here makes the deletion observable
//!   before the OSC's finalizer goes.
//!
//! Force deletion (`wait = false`) deletes the same objects and never waits.

use k8s_openapi::api::core::v1::Secret;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use std::collections::BTreeMap;

use super::{
    Error, OscActuator, monitoring, node_agent_managed_resource, nodeagent, osc_key,
    result_secret_ref, rollout,
};
use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
use crate::api::{ManagedResource, OperatingSystemConfig};
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
            let ours = actuator.ships_node_agent_secret(osc).await?;
            if wait && ours && !release_keep_object(actuator, request.namespace(), &mr).await? {
                return Ok(Outcome::Pending {
                    reason: format!(
                        "waiting until gardener-resource-manager applied ManagedResource {mr} without keep-object"
                    ),
                    retry_after: managed_resource::DELETE_RETRY,
                });
            }
            if !managed_resource::delete_and_wait(
                &actuator.client,
                actuator.cache.as_ref(),
                request.namespace(),
                &mr,
                wait,
            )
            .await?
            {
                return Ok(managed_resource::pending_deletion(&format!(
                    "ManagedResource {mr}"
                )));
            }
            let rollout_mr = rollout::rules::managed_resource_name(osc_key(osc));
            if !managed_resource::delete_and_wait(
                &actuator.client,
                actuator.cache.as_ref(),
                request.namespace(),
                &rollout_mr,
                wait,
            )
            .await?
            {
                return Ok(managed_resource::pending_deletion(&format!(
                    "ManagedResource {rollout_mr}"
                )));
            }
            monitoring::step::keep_in_step(actuator, request.namespace(), osc_key(osc), false)
                .await?;
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

/// Removes the keep-object annotation from the shipped Secret through the resource manager;
/// `true` once that is applied (or there is nothing to do).
async fn release_keep_object(
    actuator: &OscActuator,
    namespace: &str,
    name: &str,
) -> Result<bool, Error> {
    let mrs: Api<ManagedResource> = Api::namespaced(actuator.client.clone(), namespace);
    let read_error = |source| {
        Error::ManagedResource(managed_resource::ManagedResourceError::Api {
            action: "reading",
            kind: "ManagedResource",
            namespace: namespace.to_string(),
            name: name.to_string(),
            source: Box::new(source),
        })
    };
    let Some(mr) = mrs.get_opt(name).await.map_err(read_error)? else {
        return Ok(true);
    };
    let handled = mr
        .finalizers()
        .iter()
        .any(|f| f == managed_resource::GRM_FINALIZER);
    if mr.metadata.deletion_timestamp.is_some() || !handled {
        return Ok(true);
    }
    let Some(secret_name) = mr.spec.secret_refs.first().map(|r| r.name.clone()) else {
        return Ok(true);
    };
    let secrets: Api<Secret> = Api::namespaced(actuator.client.clone(), namespace);
    let secret = secrets
        .get_opt(&secret_name)
        .await
        .map_err(|source| Error::Secret {
            action: "reading",
            namespace: namespace.to_string(),
            name: secret_name.clone(),
            source: Box::new(source),
        })?;
    let data: BTreeMap<String, Vec<u8>> = secret
        .and_then(|s| s.data)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    if nodeagent::keeps_object(&data) {
        let unstamped = nodeagent::without_keep_object(&data).map_err(Error::NodeAgent)?;
        managed_resource::apply_for_shoot(
            &actuator.client,
            actuator.cache.as_ref(),
            namespace,
            name,
            &unstamped,
            false,
        )
        .await?;
        return Ok(false);
    }
    Ok(managed_resource::is_applied(&mr))
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
    // Its metadata from the store when the store has it (ours carry the label), else a GET
    // (a Secret written before the label, or one the store has not shown yet).
    let stored = actuator
        .user_data_secrets
        .as_ref()
        .and_then(|s| s.get(namespace, name))
        .map(|s| s.metadata.clone());
    let metadata = match stored {
        Some(metadata) => metadata,
        None => match api.get_opt(name).await.map_err(error("reading"))? {
            Some(secret) => secret.metadata,
            None => return Ok(true),
        },
    };
    let ours = metadata.owner_references.iter().flatten().any(|owner| {
        owner.controller == Some(true) && Some(owner.uid.as_str()) == osc.metadata.uid.as_deref()
    });
    if !ours {
        tracing::info!(secret = %name, "user-data Secret is not controlled by this OSC; leaving it");
        return Ok(true);
    }
    // The answer says whether it is gone at once (Right) or still held by finalizers (Left).
    let gone = match api.delete(name, &DeleteParams::default()).await {
        Ok(answer) => answer.is_right(),
        Err(source) if crate::extension::managed_resource::not_found(&source) => true,
        Err(source) => return Err(error("deleting")(source)),
    };
    Ok(gone || !wait)
}
