//! Reconcile, per purpose. Everything is rendered before anything is written, so an OSC with a
//! configuration error changes neither the user data nor what is in the shoot.
//!
//! - `provision`: read referenced Secrets → render the user data → server-side apply the
//!   result Secret (controller reference to the OSC when in its namespace) → status
//!   `cloudConfig.secretRef`. Extension status fields are cleared: provision OSCs get none.
//! - `reconcile`: extension units/files for the OS type → (while we ship the node-agent
//!   secrets, see [`super::handover`]) read referenced Secrets, render the node-agent secret and
//!   apply its ManagedResource; (otherwise) hand the shoot's secret over to gardenlet by
//!   removing our ManagedResource with `keepObjects=true` → status `extensionUnits`/`extensionFiles` (null when empty) and
//!   `inPlaceUpdates` (the OS update of [`super::os_update`] for in-place pools, else null).
//!
//! The status fields are returned in [`Outcome::Done`], so the generic reconciler writes them
//! in the same patch as the Succeeded state: gardenlet never sees a ready OSC with stale
//! extension fields.

use std::collections::BTreeMap;

use chrono::Utc;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};

use super::content::ReferencedSecrets;
use super::extensions::{self, Extensions};
use super::rollout::rules as rollout_rules;
use super::user_data_secrets;
use super::{
    Error, OscActuator, USER_DATA_KEY, fetch, monitoring, node_agent_managed_resource, nodeagent,
    osc_key, result_secret_ref, userdata, validate,
};
use crate::api::OperatingSystemConfig;
use crate::api::cluster::ShootView;
use crate::api::operatingsystemconfig::OperatingSystemConfigPurpose;
use crate::extension::managed_resource::{self, FIELD_MANAGER};
use crate::extension::{ExtensionKind, Outcome, Request, status};

/// Event reason when the user data exceeds [`userdata::USER_DATA_SIZE_WARNING`].
pub const REASON_USER_DATA_TOO_LARGE: &str = "UserDataTooLarge";

/// Renders the user data of a provision OSC (pure; also used by `render osc`).
pub fn render_user_data(
    osc: &OperatingSystemConfig,
    secrets: &ReferencedSecrets,
) -> Result<String, Error> {
    validate::validate(&osc.spec.units, &osc.spec.files, &[]).map_err(Error::Spec)?;
    let user_data =
        userdata::render(&osc.spec.units, &osc.spec.files, secrets).map_err(Error::UserData)?;
    check_size(osc, "user data", user_data.len())?;
    Ok(user_data)
}

/// Fails when `bytes` exceed what a Secret holds, naming the OSC's largest inline file.
fn check_size(osc: &OperatingSystemConfig, what: &'static str, bytes: usize) -> Result<(), Error> {
    if bytes <= validate::MAX_SECRET_DATA_BYTES {
        return Ok(());
    }
    let largest = osc
        .spec
        .files
        .iter()
        .filter_map(|f| {
            f.content
                .inline
                .as_ref()
                .map(|i| (f.path.as_str(), i.data.len()))
        })
        .max_by_key(|(_, len)| *len)
        .map(|(path, len)| format!("; the largest file is {path} ({len} bytes of inline data)"))
        .unwrap_or_default();
    Err(Error::TooLarge {
        what,
        bytes,
        largest,
    })
}

/// The extension units, files and in-place status of a reconcile OSC (pure).
fn extensions_of(osc: &OperatingSystemConfig) -> Result<Extensions, Error> {
    extensions::for_osc(&osc.spec.default.type_, osc.spec.in_place_updates.as_ref())
        .map_err(Error::OsVersion)
}

/// Renders the node-agent secret of a reconcile OSC with its OS type's extensions (pure; also
/// used by `render osc`).
pub fn render_node_agent_secret(
    osc: &OperatingSystemConfig,
    secrets: &ReferencedSecrets,
) -> Result<(nodeagent::NodeAgentSecret, Extensions), Error> {
    let extensions = extensions_of(osc)?;
    validate::validate(&osc.spec.units, &osc.spec.files, &extensions.files).map_err(Error::Spec)?;
    let containerd = osc
        .spec
        .cri_config
        .as_ref()
        .and_then(|c| c.containerd.as_ref());
    validate::validate_containerd(containerd).map_err(Error::Spec)?;
    let secret = nodeagent::render(osc, &extensions, secrets).map_err(Error::NodeAgent)?;
    let manifest = secret.manifest().map_err(Error::NodeAgent)?;
    check_size(osc, "node-agent Secret", manifest.len())?;
    Ok((secret, extensions))
}

/// Runs the purpose's reconcile (see the module docs).
pub async fn reconcile(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
) -> Result<Outcome, Error> {
    match request.object.spec.purpose {
        OperatingSystemConfigPurpose::Provision => provision(actuator, request).await,
        OperatingSystemConfigPurpose::Reconcile => original(actuator, request).await,
    }
}

async fn provision(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
) -> Result<Outcome, Error> {
    let osc = request.object;
    let secrets =
        fetch::referenced_secrets(&actuator.client, request.namespace(), &osc.spec.files).await?;
    let user_data = render_user_data(osc, &secrets)?;
    let (name, namespace) = result_secret_ref(osc);
    let written =
        apply_result_secret(actuator, osc, &name, &namespace, user_data.as_bytes()).await?;
    if written {
        tracing::info!(secret = %name, bytes = user_data.len(), "user data written");
    }

    let mut status = Map::new();
    status.insert(
        "cloudConfig".into(),
        json!({"secretRef": {"name": name, "namespace": namespace}}),
    );
    for field in ["extensionUnits", "extensionFiles", "inPlaceUpdates"] {
        status.insert(field.into(), Value::Null);
    }
    if user_data.len() > userdata::USER_DATA_SIZE_WARNING {
        warn_size(actuator, request, user_data.len(), &mut status).await;
    } else if !written && status_holds(osc, &status) {
        return Ok(Outcome::Unchanged);
    }
    Ok(Outcome::Done { status })
}

/// The result Secret (pure): key `cloud_config`, controller reference to the OSC when both
/// live in one namespace (owner references cannot cross namespaces).
pub fn result_secret(
    osc: &OperatingSystemConfig,
    name: &str,
    namespace: &str,
    user_data: &[u8],
) -> Secret {
    let owner = osc
        .controller_owner_ref(&())
        .filter(|_| osc.metadata.namespace.as_deref() == Some(namespace))
        .map(|mut owner| {
            owner.block_owner_deletion = Some(true);
            owner
        });
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                user_data_secrets::LABEL_USER_DATA.to_string(),
                "true".to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                user_data_secrets::ANNOTATION_CHECKSUM.to_string(),
                user_data_secrets::checksum(user_data),
            )])),
            owner_references: owner.map(|owner| vec![owner]),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(BTreeMap::from([(
            USER_DATA_KEY.to_string(),
            ByteString(user_data.to_vec()),
        )])),
        ..Default::default()
    }
}

async fn apply_result_secret(
    actuator: &OscActuator,
    osc: &OperatingSystemConfig,
    name: &str,
    namespace: &str,
    user_data: &[u8],
) -> Result<bool, Error> {
    let secret = result_secret(osc, name, namespace, user_data);
    let stored = actuator
        .user_data_secrets
        .as_ref()
        .and_then(|s| s.get(namespace, name));
    if stored.is_some_and(|stored| user_data_secrets::is_current(&stored, &secret)) {
        return Ok(false);
    }
    let api: Api<Secret> = Api::namespaced(actuator.client.clone(), namespace);
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await
    .map_err(|source| Error::Secret {
        action: "applying",
        namespace: namespace.to_string(),
        name: name.to_string(),
        source: Box::new(source),
    })?;
    Ok(true)
}

/// Warns about oversized user data: a Warning event, and a note in the Succeeded
/// description. The generic reconciler writes its own `lastOperation` with a fixed
/// description; a `lastOperation` among the extra status fields replaces it, so this builds
/// the same one through [`status::success`] and only extends the description.
async fn warn_size(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
    size: usize,
    status_fields: &mut Map<String, Value>,
) {
    let note = format!(
        "the user data has {size} bytes, more than the {} most infrastructures accept",
        userdata::USER_DATA_SIZE_WARNING
    );
    tracing::warn!(size, "user data exceeds the usual IaaS limit");
    let object = request.object;
    actuator
        .events
        .warning(
            &object.object_ref(&()),
            REASON_USER_DATA_TOO_LARGE,
            &format!("{:?}", request.operation),
            note.clone(),
        )
        .await;
    let at = status::last_update_time(Utc::now(), object.annotations());
    let success = status::success(
        request.operation,
        OperatingSystemConfig::KIND,
        object.metadata.generation,
        at,
        Map::new(),
    );
    if let Some(Value::Object(mut last_operation)) = success.get("lastOperation").cloned() {
        let description = last_operation
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        last_operation.insert(
            "description".into(),
            Value::String(format!("{description} (warning: {note})")),
        );
        status_fields.insert("lastOperation".into(), Value::Object(last_operation));
    }
}

async fn original(
    actuator: &OscActuator,
    request: &Request<'_, OperatingSystemConfig>,
) -> Result<Outcome, Error> {
    let osc = request.object;
    let namespace = request.namespace();
    let (extensions, written, rendered) = if actuator.ships_node_agent_secret(osc).await? {
        let (extensions, written, secret) =
            ship_node_agent_secret(actuator, osc, request.cluster.map(|c| &c.shoot)).await?;
        (extensions, written, Some(secret))
    } else {
        // Another ManagedResource (gardenlet's) delivers this node-agent secret: leave the
        // shoot's copy in place for it to adopt, and drop ours (if an earlier run created one).
        // The same release as the hand-over's (`super::handover::release`), called directly:
        // the hand-over ships through this module, so this one does not import it back.
        let mr = node_agent_managed_resource(osc);
        managed_resource::release_objects(
            &actuator.client,
            actuator.cache.as_ref(),
            namespace,
            &mr,
        )
        .await?;
        monitoring::step::keep_in_step(actuator, namespace, osc_key(osc), false).await?;
        (
            extensions_of(osc)?,
            false,
            rendered_as_gardenlet(actuator, osc).await,
        )
    };
    let access_written = match &rendered {
        Some(rendered) => keep_rollout_access(actuator, osc, namespace, rendered).await?,
        None => false,
    };
    let written = written || access_written;
    let mut status = Map::new();
    status.insert("extensionUnits".into(), list_or_null(&extensions.units)?);
    status.insert("extensionFiles".into(), list_or_null(&extensions.files)?);
    let in_place = match &extensions.in_place {
        Some(in_place) => serde_json::to_value(in_place).map_err(Error::Status)?,
        None => Value::Null,
    };
    status.insert("inPlaceUpdates".into(), in_place);
    if !written && status_holds(osc, &status) {
        return Ok(Outcome::Unchanged);
    }
    Ok(Outcome::Done { status })
}

/// Whether the OSC's status already has every field of `fields` (a `null` field: absent or
/// `null`), so a run that wrote nothing may leave them out of its status patch (pure).
pub fn status_holds(osc: &OperatingSystemConfig, fields: &Map<String, Value>) -> bool {
    let Ok(Value::Object(current)) = serde_json::to_value(&osc.status) else {
        return false;
    };
    fields
        .iter()
        .all(|(key, wanted)| current.get(key).unwrap_or(&Value::Null) == wanted)
}

/// Renders the node-agent secret of a `reconcile` OSC and applies its ManagedResource;
/// returns the extension units/files that went into it and whether anything was written. Also the take-over step of
/// [`super::handover`]. With the `shoot` known, the secret carries the pool's rollout budget
/// ([`nodeagent::rollout_budget`]).
pub async fn ship_node_agent_secret(
    actuator: &OscActuator,
    osc: &OperatingSystemConfig,
    shoot: Option<&ShootView>,
) -> Result<(Extensions, bool, nodeagent::NodeAgentSecret), Error> {
    let namespace = osc.metadata.namespace.as_deref().unwrap_or_default();
    let mr = node_agent_managed_resource(osc);
    let files = osc.spec.files.iter();
    let secrets = fetch::referenced_secrets(&actuator.client, namespace, files).await?;
    let (mut secret, extensions) = render_node_agent_secret(osc, &secrets)?;
    secret.rollout_budget = shoot
        .and_then(|shoot| shoot.worker(&secret.pool))
        .map(nodeagent::rollout_budget);
    let data = secret.managed_resource_data().map_err(Error::NodeAgent)?;
    let applied = managed_resource::apply_for_shoot(
        &actuator.client,
        actuator.cache.as_ref(),
        namespace,
        &mr,
        &data,
        false,
    )
    .await?;
    monitoring::step::keep_in_step(actuator, namespace, osc_key(osc), true).await?;
    if applied {
        tracing::info!(
            managed_resource = %mr,
            secret = %secret.name,
            checksum = %secret.checksum(),
            "node-agent secret applied"
        );
    }
    Ok((extensions, applied, secret))
}

/// The node-agent Secret gardenlet ships for `osc`, as we render it (the same bytes,
/// docs/contract.md#operatingsystemconfig): the rollout's access needs its name, pool and
/// checksum. `None`, with a warning, when it does not render here (gardenlet's rendering is
/// then gardenlet's business; only the rollout's view and steering of the pool wait).
async fn rendered_as_gardenlet(
    actuator: &OscActuator,
    osc: &OperatingSystemConfig,
) -> Option<nodeagent::NodeAgentSecret> {
    let namespace = osc.metadata.namespace.as_deref().unwrap_or_default();
    let files = osc.spec.files.iter();
    let rendered = match fetch::referenced_secrets(&actuator.client, namespace, files).await {
        Ok(secrets) => render_node_agent_secret(osc, &secrets).map(|(secret, _)| secret),
        Err(error) => Err(error),
    };
    match rendered {
        Ok(secret) => Some(secret),
        Err(error) => {
            tracing::warn!(%namespace, osc = %osc.name_any(), error = %crate::error_chain::chain(&error), "the node-agent secret gardenlet ships does not render here; the pool's rollout is neither seen nor steered from the seed until it does");
            None
        }
    }
}

/// What the rollout watch needs to see and steer the pool whoever ships its node-agent
/// Secret (`docs/agent.md#seen-from-the-seed`): the key's rollout ManagedResource with the
/// shoot RBAC ([`rollout_rules::rbac_manifests`]) and the shoot access Secret. Returns
/// whether anything was written.
async fn keep_rollout_access(
    actuator: &OscActuator,
    osc: &OperatingSystemConfig,
    namespace: &str,
    shipped: &nodeagent::NodeAgentSecret,
) -> Result<bool, Error> {
    let mr = rollout_rules::managed_resource_name(&shipped.name);
    let applied = managed_resource::apply_for_shoot(
        &actuator.client,
        actuator.cache.as_ref(),
        namespace,
        &mr,
        &rollout_rules::rbac_manifests(&shipped.name),
        false,
    )
    .await?;
    let access_written = apply_access_secret(actuator, osc, namespace, shipped).await?;
    if applied || access_written {
        tracing::info!(managed_resource = %mr, checksum = %shipped.checksum(), "rollout access of the pool applied");
    }
    Ok(applied || access_written)
}

/// The shoot access Secret through which the rollout watch sees the pool's Nodes
/// ([`rollout_rules::access_secret`]); written only when it is missing or differs (the
/// token gardener-resource-manager writes into it is left alone).
async fn apply_access_secret(
    actuator: &OscActuator,
    osc: &OperatingSystemConfig,
    namespace: &str,
    shipped: &nodeagent::NodeAgentSecret,
) -> Result<bool, Error> {
    let Some(owner) = osc.controller_owner_ref(&()) else {
        return Ok(false);
    };
    let wanted = rollout_rules::access_secret(
        namespace,
        &shipped.name,
        &shipped.pool,
        &shipped.checksum(),
        owner,
    );
    let name = wanted.metadata.name.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(actuator.client.clone(), namespace);
    let error = |action: &'static str| {
        let name = name.clone();
        move |source| Error::Secret {
            action,
            namespace: namespace.to_string(),
            name,
            source: Box::new(source),
        }
    };
    let current = match actuator.access_secrets.as_ref().filter(|s| s.synced()) {
        // A Secret the store lacks is written (an apply of what exists changes nothing).
        Some(store) => store.get(namespace, &name).map(|s| (*s).clone()),
        None => api.get_opt(&name).await.map_err(error("reading"))?,
    };
    let up_to_date = current.is_some_and(|current| {
        managed_resource::contains_all(&current.metadata.labels, &wanted.metadata.labels)
            && managed_resource::contains_all(
                &current.metadata.annotations,
                &wanted.metadata.annotations,
            )
            && current.metadata.owner_references == wanted.metadata.owner_references
    });
    if !up_to_date {
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&wanted),
        )
        .await
        .map_err(error("applying"))?;
    }
    Ok(!up_to_date)
}

/// The list as JSON, or `null` (clears the field) when empty.
fn list_or_null<T: serde::Serialize>(items: &[T]) -> Result<Value, Error> {
    if items.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::to_value(items).map_err(Error::Status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn osc(namespace: &str) -> OperatingSystemConfig {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "OperatingSystemConfig",
            "metadata": {"name": "pool-a-init", "namespace": namespace, "uid": "1234"},
            "spec": {"type": "debian", "purpose": "provision"}
        }))
        .unwrap()
    }

    #[test]
    fn result_secret_is_controlled_by_the_osc() {
        let secret = result_secret(&osc("ns"), "osc-result-pool-a-init", "ns", b"#!/bin/bash\n");
        let owner = &secret.metadata.owner_references.unwrap()[0];
        assert_eq!(owner.uid, "1234");
        assert_eq!(owner.kind, "OperatingSystemConfig");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(secret.data.unwrap()["cloud_config"].0, b"#!/bin/bash\n");
    }

    #[test]
    fn result_secret_in_another_namespace_has_no_owner() {
        let secret = result_secret(&osc("ns"), "custom", "other", b"x");
        assert!(secret.metadata.owner_references.is_none());
    }

    #[test]
    fn empty_lists_clear_the_status_field() {
        assert_eq!(list_or_null::<u8>(&[]).unwrap(), Value::Null);
        assert_eq!(list_or_null(&[1]).unwrap(), json!([1]));
    }
}
