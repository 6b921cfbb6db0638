//! ManagedResources "for shoot" and their manifest secrets
//! (`docs/contract.md#managedresources-for-the-shoot`):
//! the way this extension ships objects into a shoot through gardener-resource-manager (GRM).
//!
//! - The manifests go into an **immutable** secret named by content,
//!   `managedresource-<mr>-<first 8 hex of the data checksum>`, labelled
//!   `resources.gardener.cloud/garbage-collectable-reference=true`. A change creates a new
//!   secret; once the MR references it, the superseded ones are deleted right away (the
//!   label stays, so a seed's garbage collector may also collect what a crash left behind).
//! - The MR has no class (the shoot's GRM applies it), label `origin=<our name>`, injected
//!   label `shoot.gardener.cloud/no-cleanup=true`, `keepObjects` as asked, and one reference
//!   annotation `reference.resources.gardener.cloud/secret-<8 hex of sha256(secret name)>`
//!   per secret so the garbage collector keeps it.
//! - Writes are server-side applies with our field manager, so fields of other managers
//!   (GRM's finalizer, status) stay untouched. With the operator's [`SeedCache`] nothing is
//!   sent at all when the stored MR already has the rendered spec, labels and annotations
//!   and its secret exists ([`matches()`]); reads (the MR, the secret names) come from the
//!   cache too. Every function takes the cache as an `Option`: without one it reads with
//!   GETs and lists, as callers outside the operator's controllers do.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::cache::SeedCache;
use super::finalizer::{ignore_not_found, is_not_found};
use crate::api::common::LocalObjectReference;
use crate::api::constants::{LABEL_GARBAGE_COLLECTABLE, ORIGIN};
use crate::api::managedresource::{
    CONDITION_RESOURCES_APPLIED, CONDITION_RESOURCES_HEALTHY, CONDITION_RESOURCES_PROGRESSING,
};
use crate::api::{ConditionStatus, ErrorCode, ManagedResource, ManagedResourceSpec};

/// Field manager of every server-side apply of the operator.
pub const FIELD_MANAGER: &str = "gardener-extension-node";
/// Prefix of the reference annotations on MRs.
pub const ANNOTATION_REFERENCE_PREFIX: &str = "reference.resources.gardener.cloud/";
/// Annotation that makes GRM skip an MR (except for its deletion).
pub const ANNOTATION_IGNORE: &str = "resources.gardener.cloud/ignore";
/// Label injected into every shoot object so gardenlet's shoot clean-up leaves it alone.
pub const LABEL_NO_CLEANUP: &str = "shoot.gardener.cloud/no-cleanup";
/// The finalizer gardener-resource-manager (default class) puts on the MRs it handles.
pub const GRM_FINALIZER: &str = "resources.gardener.cloud/gardener-resource-manager";
/// How long a deleting MR may take before the delay is reported as an error.
pub const DELETION_GRACE: Duration = Duration::from_secs(120);

/// Errors of the ManagedResource helpers.
#[derive(Debug, thiserror::Error)]
pub enum ManagedResourceError {
    /// An API call failed.
    #[error("{action} {kind} {namespace}/{name}")]
    Api {
        /// What we tried.
        action: &'static str,
        /// Secret or ManagedResource.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The MR is still there long after its deletion started.
    #[error(
        "ManagedResource {namespace}/{name} is still being deleted after {waited:?}: {message}"
    )]
    DeletionStuck {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// How long it has been deleting.
        waited: Duration,
        /// The `ResourcesApplied` condition message, if any.
        message: String,
        /// Codes derived from the message.
        codes: Vec<ErrorCode>,
    },
    /// An apply met the MR while its deletion (ours, e.g. a hand-over) was still waiting for
    /// gardener-resource-manager: it is applied again on the retry, once it is gone.
    #[error(
        "ManagedResource {namespace}/{name} is still being deleted; it is applied again once it is gone"
    )]
    StillDeleting {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

impl ManagedResourceError {
    /// Gardener codes: `ERR_CONFIGURATION_PROBLEM` when GRM reports an invalid object.
    pub fn codes(&self) -> Vec<ErrorCode> {
        match self {
            ManagedResourceError::DeletionStuck { codes, .. } => codes.clone(),
            ManagedResourceError::Api { .. } | ManagedResourceError::StillDeleting { .. } => {
                Vec::new()
            }
        }
    }
}

fn api_error(
    action: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> ManagedResourceError {
    let namespace = namespace.to_string();
    let name = name.to_string();
    move |source| ManagedResourceError::Api {
        action,
        kind,
        namespace,
        name,
        source: Box::new(source),
    }
}

/// Gardener's data checksum: sha256 over the concatenated hex sha256 of each value, keys in
/// ascending order.
pub fn data_checksum(data: &BTreeMap<String, Vec<u8>>) -> String {
    let concatenated: String = data
        .values()
        .map(|v| hex::encode(Sha256::digest(v)))
        .collect();
    hex::encode(Sha256::digest(concatenated.as_bytes()))
}

/// `managedresource-<mr>-<8 hex of the data checksum>`.
pub fn secret_name(managed_resource: &str, data: &BTreeMap<String, Vec<u8>>) -> String {
    let base = format!("managedresource-{managed_resource}");
    let separator = if base.ends_with('-') { "" } else { "-" };
    format!("{base}{separator}{}", &data_checksum(data)[..8])
}

/// `reference.resources.gardener.cloud/secret-<8 hex of sha256(name)>`.
pub fn reference_annotation(secret: &str) -> String {
    let digest = hex::encode(Sha256::digest(secret.as_bytes()));
    format!("{ANNOTATION_REFERENCE_PREFIX}secret-{}", &digest[..8])
}

/// Whether `secret` is a manifest secret of MR `managed_resource` other than `current`:
/// `managedresource-<mr>-<8 hex>` (pure). The exact shape matters: the secrets of MR
/// `x-installation-p1` also start with `managedresource-x-`.
pub fn is_superseded_secret(managed_resource: &str, secret: &str, current: Option<&str>) -> bool {
    let base = format!("managedresource-{managed_resource}");
    let prefix = if base.ends_with('-') {
        base
    } else {
        format!("{base}-")
    };
    let Some(suffix) = secret.strip_prefix(&prefix) else {
        return false;
    };
    suffix.len() == 8
        && suffix
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && Some(secret) != current
}

/// Of `names`, the manifest secrets of MR `managed_resource` that are not in `keep` (pure).
pub fn superseded_secrets(
    managed_resource: &str,
    names: Vec<String>,
    keep: &[&str],
) -> Vec<String> {
    names
        .into_iter()
        .filter(|secret| {
            is_superseded_secret(managed_resource, secret, None) && !keep.contains(&secret.as_str())
        })
        .collect()
}

/// Deletes the manifest secrets of MR `name` other than `keep` (the one the MR uses now, or
/// those the caller has just deleted: a run of the bench saw one deleted a second time, 404,
/// 3 ms after the first): the names come from the cache's secret store, or without a cache
/// from a metadata-only list of the garbage-collectable secrets of the namespace.
pub async fn delete_superseded_secrets(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
    keep: &[&str],
) -> Result<(), ManagedResourceError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let names = match cache {
        Some(cache) => cache.secret_names(namespace),
        None => {
            let params = kube::api::ListParams::default()
                .labels(&format!("{LABEL_GARBAGE_COLLECTABLE}=true"));
            secrets
                .list_metadata(&params)
                .await
                .map_err(api_error("listing", "Secret", namespace, name))?
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect()
        }
    };
    for secret in superseded_secrets(name, names, keep) {
        tracing::debug!(%namespace, %secret, managed_resource = %name, "deleting a superseded ManagedResource secret");
        ignore_not_found(secrets.delete(&secret, &DeleteParams::default()).await)
            .map_err(api_error("deleting", "Secret", namespace, &secret))?;
        if let Some(cache) = cache {
            cache.written.record_secret(namespace, &secret, false);
        }
    }
    Ok(())
}

/// Whether GRM has applied the MR's current spec: `status.observedGeneration` equals
/// `metadata.generation` and `ResourcesApplied` is True (pure).
pub fn is_applied(mr: &ManagedResource) -> bool {
    let status = mr.status.as_ref();
    status.and_then(|s| s.observed_generation) == mr.metadata.generation
        && mr.metadata.generation.is_some()
        && mr
            .condition(CONDITION_RESOURCES_APPLIED)
            .is_some_and(|c| c.status == ConditionStatus::True)
}

/// Whether GRM has applied the MR's current spec **and** its objects are healthy and fully
/// rolled out: [`is_applied`], `ResourcesHealthy` True and `ResourcesProgressing` False
/// (pure). `ResourcesHealthy` alone is not enough for a DaemonSet rollout: during one, GRM
/// tolerates `maxUnavailable` unavailable pods; only once `ResourcesProgressing` is False are
/// all pods updated, and then none may be unavailable. GRM resets both conditions to Unknown
/// when the MR's secret data change, so neither is left over from the previous content.
pub fn is_rolled_out(mr: &ManagedResource) -> bool {
    is_applied(mr) && mr.is_healthy_and_not_progressing()
}

/// Why [`is_rolled_out`] does not hold, for status descriptions and events (pure): the MR's
/// generation GRM has not processed yet, or the first condition not in its wanted state with
/// the first line of GRM's message (at most 300 characters). `None` when rolled out.
pub fn rollout_pending_reason(mr: &ManagedResource) -> Option<String> {
    if is_rolled_out(mr) {
        return None;
    }
    let name = mr.metadata.name.as_deref().unwrap_or_default();
    let observed = mr.status.as_ref().and_then(|s| s.observed_generation);
    if observed != mr.metadata.generation {
        return Some(format!(
            "ManagedResource {name}: generation {} not yet processed by gardener-resource-manager",
            mr.metadata.generation.unwrap_or_default()
        ));
    }
    let wanted = [
        (CONDITION_RESOURCES_APPLIED, ConditionStatus::True),
        (CONDITION_RESOURCES_HEALTHY, ConditionStatus::True),
        (CONDITION_RESOURCES_PROGRESSING, ConditionStatus::False),
    ];
    for (type_, status) in wanted {
        match mr.condition(type_) {
            None => return Some(format!("ManagedResource {name}: no {type_} condition yet")),
            Some(c) if c.status != status => {
                let message: String = c
                    .message
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect();
                // The variant names are the API's values (True, False, Unknown, Progressing).
                let status = format!("{:?}", c.status);
                return Some(format!(
                    "ManagedResource {name}: {type_} {status}: {message}"
                ));
            }
            Some(_) => {}
        }
    }
    Some(format!("ManagedResource {name}: not rolled out"))
}

/// Reads the MR `name` (`None`: absent): from the cache when it holds a current copy, else
/// with a GET (an MR missing from the store may just not have arrived yet).
pub async fn get(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
) -> Result<Option<ManagedResource>, ManagedResourceError> {
    if let Some(cache) = cache {
        if let Some(mr) = cache.managed_resource(namespace, name) {
            return Ok(Some(mr));
        }
        if cache.written.deleted(namespace, name) {
            return Ok(None);
        }
    }
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    mrs.get_opt(name)
        .await
        .map_err(api_error("reading", "ManagedResource", namespace, name))
}

/// The manifest secret (pure).
pub fn render_secret(namespace: &str, name: &str, data: &BTreeMap<String, Vec<u8>>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some([(LABEL_GARBAGE_COLLECTABLE.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        immutable: Some(true),
        type_: Some("Opaque".to_string()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Where gardener-resource-manager applies an MR's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Into the shoot (no class; the shoot's resource manager). Objects get the label
    /// `shoot.gardener.cloud/no-cleanup` so gardenlet's shoot cleanup leaves them alone.
    Shoot,
    /// Into the seed (class `seed`; the seed's resource manager), e.g. the monitoring objects
    /// of a shoot namespace.
    Seed,
}

/// The MR "for shoot" referencing `secret` (pure).
pub fn render_managed_resource(
    namespace: &str,
    name: &str,
    secret: &str,
    keep_objects: bool,
) -> ManagedResource {
    render_managed_resource_for(Target::Shoot, namespace, name, secret, keep_objects)
}

/// The MR for `target` referencing `secret` (pure).
pub fn render_managed_resource_for(
    target: Target,
    namespace: &str,
    name: &str,
    secret: &str,
    keep_objects: bool,
) -> ManagedResource {
    let (class, inject_labels) = match target {
        Target::Shoot => (
            None,
            [(LABEL_NO_CLEANUP.to_string(), "true".to_string())].into(),
        ),
        Target::Seed => (Some("seed".to_string()), BTreeMap::new()),
    };
    let mut mr = ManagedResource::new(
        name,
        ManagedResourceSpec {
            class,
            secret_refs: vec![LocalObjectReference {
                name: secret.to_string(),
            }],
            inject_labels,
            keep_objects: Some(keep_objects),
            ..Default::default()
        },
    );
    mr.metadata.namespace = Some(namespace.to_string());
    mr.metadata.labels = Some([("origin".to_string(), ORIGIN.to_string())].into());
    mr.metadata.annotations = Some([(reference_annotation(secret), secret.to_string())].into());
    mr
}

/// Whether the map `have` (labels, annotations) holds every entry of `want` (pure; a missing
/// map holds nothing, a missing `want` asks for nothing).
pub(crate) fn contains_all(
    have: &Option<BTreeMap<String, String>>,
    want: &Option<BTreeMap<String, String>>,
) -> bool {
    want.iter()
        .flatten()
        .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
}

/// Whether the stored MR `stored` already is `desired` as far as our apply goes (pure): same
/// spec, our labels and annotations present, no reference annotation of another secret, not
/// being deleted. Then an apply would change nothing.
pub fn matches(stored: &ManagedResource, desired: &ManagedResource) -> bool {
    let references = |m: &ManagedResource| -> Vec<String> {
        m.metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(ANNOTATION_REFERENCE_PREFIX))
            .map(|(k, _)| k.clone())
            .collect()
    };
    stored.metadata.deletion_timestamp.is_none()
        && serde_json::to_value(&stored.spec).ok() == serde_json::to_value(&desired.spec).ok()
        && contains_all(&stored.metadata.labels, &desired.metadata.labels)
        && contains_all(&stored.metadata.annotations, &desired.metadata.annotations)
        && references(stored) == references(desired)
}

/// Creates or updates the MR `name` "for shoot" with the manifests in `data` (keys are data
/// keys of the secret, e.g. `config.yaml`). Idempotent: unchanged content writes nothing,
/// and with a cache nothing is read either. Returns whether anything was written.
pub async fn apply_for_shoot(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
    keep_objects: bool,
) -> Result<bool, ManagedResourceError> {
    apply(
        client,
        cache,
        Target::Shoot,
        namespace,
        name,
        data,
        keep_objects,
    )
    .await
}

/// [`apply_for_shoot`] for an MR whose objects go into the seed (class `seed`).
pub async fn apply_for_seed(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<bool, ManagedResourceError> {
    apply(client, cache, Target::Seed, namespace, name, data, false).await
}

async fn apply(
    client: &Client,
    cache: Option<&SeedCache>,
    target: Target,
    namespace: &str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
    keep_objects: bool,
) -> Result<bool, ManagedResourceError> {
    let _turn = match cache {
        Some(cache) => Some(cache.lock(namespace, name).await),
        None => None,
    };
    let secret_name = secret_name(name, data);
    let desired = render_managed_resource_for(target, namespace, name, &secret_name, keep_objects);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // Same name means same content, so an existing (immutable) secret is already right.
    let exists = match cache {
        Some(cache) => cache.has_secret(namespace, &secret_name),
        None => secrets
            .get_opt(&secret_name)
            .await
            .map_err(api_error("reading", "Secret", namespace, &secret_name))?
            .is_some(),
    };
    // What we applied: the rest of the MR follows from namespace and name.
    let content = format!("{secret_name} keepObjects={keep_objects} target={target:?}");
    let stored = cache.and_then(|cache| cache.managed_resource(namespace, name));
    if is_deleting(client, cache, stored.as_ref(), namespace, name).await? {
        return Err(still_deleting(namespace, name));
    }
    let mr_current = cache.is_some_and(|cache| match &stored {
        // The store is at least as new as our last write: it tells.
        Some(stored) => matches(stored, &desired),
        // It is not (or has not seen the MR yet): our last write tells.
        None => cache.written.applied(namespace, name, &content),
    });
    if exists && mr_current {
        return Ok(false);
    }
    if !exists {
        // Also right when the secret exists but the store has not seen it yet: applying the
        // same content to an immutable secret changes nothing.
        let secret = render_secret(namespace, &secret_name, data);
        secrets
            .patch(&secret_name, &params, &Patch::Apply(&secret))
            .await
            .map_err(api_error("applying", "Secret", namespace, &secret_name))?;
        if let Some(cache) = cache {
            cache.written.record_secret(namespace, &secret_name, true);
        }
    }
    if !mr_current {
        let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
        let written = mrs
            .patch(name, &params, &Patch::Apply(&desired))
            .await
            .map_err(api_error("applying", "ManagedResource", namespace, name))?;
        if written.metadata.deletion_timestamp.is_some() {
            // GRM removes it soon whatever we applied; the retry creates it anew.
            return Err(still_deleting(namespace, name));
        }
        if let Some(cache) = cache {
            cache.written.record_applied(
                namespace,
                name,
                written.metadata.resource_version.as_deref(),
                &content,
            );
        }
    }
    if !exists {
        // The MR now references the new secret: GRM no longer reads the old ones.
        delete_superseded_secrets(client, cache, namespace, name, &[&secret_name]).await?;
    }
    Ok(true)
}

/// Whether the MR is being deleted, as far as an apply must know: the stored copy tells when
/// it is current; when it is not (or absent) and our last write started its deletion, a GET
/// does (the store may not have seen the deletion, or the MR at all). Without a cache: no.
async fn is_deleting(
    client: &Client,
    cache: Option<&SeedCache>,
    stored: Option<&ManagedResource>,
    namespace: &str,
    name: &str,
) -> Result<bool, ManagedResourceError> {
    if let Some(stored) = stored {
        return Ok(stored.metadata.deletion_timestamp.is_some());
    }
    if !cache.is_some_and(|cache| cache.written.deleting(namespace, name)) {
        return Ok(false);
    }
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let current = mrs.get_opt(name).await.map_err(api_error(
        "reading",
        "ManagedResource",
        namespace,
        name,
    ))?;
    Ok(current.is_some_and(|mr| mr.metadata.deletion_timestamp.is_some()))
}

fn still_deleting(namespace: &str, name: &str) -> ManagedResourceError {
    ManagedResourceError::StillDeleting {
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// Sets `spec.keepObjects` (merge patch); a missing MR is fine.
pub async fn set_keep_objects(
    client: &Client,
    namespace: &str,
    name: &str,
    keep_objects: bool,
) -> Result<(), ManagedResourceError> {
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let body = json!({"spec": {"keepObjects": keep_objects}});
    ignore_not_found(
        mrs.patch(name, &PatchParams::default(), &Patch::Merge(body))
            .await,
    )
    .map_err(api_error(
        "patching keepObjects of",
        "ManagedResource",
        namespace,
        name,
    ))?;
    Ok(())
}

/// Hands the MR's objects to whoever else applies them: one merge patch sets
/// `resources.gardener.cloud/ignore` (so GRM does not apply the MR once more in reaction to
/// the spec change) and `keepObjects: true`, then the MR and its secrets are deleted; GRM
/// removes its finalizer without touching the objects. A missing MR is fine.
pub async fn release_objects(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
) -> Result<(), ManagedResourceError> {
    let _turn = match cache {
        Some(cache) => Some(cache.lock(namespace, name).await),
        None => None,
    };
    if cache.is_some_and(|c| c.knows_absent(namespace, name)) {
        return Ok(());
    }
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let Some(existing) = mrs.get_opt(name).await.map_err(api_error(
        "reading",
        "ManagedResource",
        namespace,
        name,
    ))?
    else {
        return Ok(());
    };
    let body = json!({
        "metadata": {"annotations": {ANNOTATION_IGNORE: "true"}},
        "spec": {"keepObjects": true},
    });
    ignore_not_found(
        mrs.patch(name, &PatchParams::default(), &Patch::Merge(body))
            .await,
    )
    .map_err(api_error("releasing", "ManagedResource", namespace, name))?;
    // With the cache the deleted secrets are recorded: a shipping right after this one must
    // not take a store that still lists them for proof that they exist.
    delete_found(client, cache, namespace, name, Some(&existing)).await?;
    Ok(())
}

/// Deletes the MR and its secrets (the legacy `managedresource-<name>` and superseded
/// `managedresource-<name>-<hash>` ones too). Does not wait. Returns whether the MR is gone
/// (it had no finalizer left, or was absent).
pub async fn delete(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
) -> Result<bool, ManagedResourceError> {
    let _turn = match cache {
        Some(cache) => Some(cache.lock(namespace, name).await),
        None => None,
    };
    // Nothing to delete and nothing to read: the store lacks the MR and its legacy secret,
    // and we have not applied it since the store could have shown it.
    let legacy = format!("managedresource-{name}");
    if cache.is_some_and(|c| c.knows_absent(namespace, name) && !c.has_secret(namespace, &legacy)) {
        return Ok(true);
    }
    let existing = get(client, cache, namespace, name).await?;
    delete_found(client, cache, namespace, name, existing.as_ref()).await
}

/// [`delete`] with the MR as just read (`None`: absent). The namespace's secrets are looked
/// at for superseded ones only while the MR exists, so the polls of a deletion in progress
/// and the calls for an absent MR cost no list. With a cache, only secrets the store knows
/// (or the MR references) are deleted, so no request goes out for a secret that is not there.
async fn delete_found(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
    existing: Option<&ManagedResource>,
) -> Result<bool, ManagedResourceError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let legacy = format!("managedresource-{name}");
    let mut secret_names = Vec::new();
    if cache.is_none_or(|c| c.has_secret(namespace, &legacy)) {
        secret_names.push(legacy);
    }
    if let Some(mr) = existing {
        secret_names.extend(mr.spec.secret_refs.iter().map(|r| r.name.clone()));
    }
    for secret in &secret_names {
        ignore_not_found(secrets.delete(secret, &DeleteParams::default()).await)
            .map_err(api_error("deleting", "Secret", namespace, secret))?;
        if let Some(cache) = cache {
            cache.written.record_secret(namespace, secret, false);
        }
    }
    let Some(mr) = existing else {
        return Ok(true);
    };
    if mr.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let deleted: Vec<&str> = secret_names.iter().map(String::as_str).collect();
    delete_superseded_secrets(client, cache, namespace, name, &deleted).await?;
    let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
    let deleted = ignore_not_found(mrs.delete(name, &DeleteParams::default()).await)
        .map_err(api_error("deleting", "ManagedResource", namespace, name))?;
    // `Right`: deleted at once (no finalizer); `Left`: still there, deleting.
    let deleting = deleted.and_then(|d| d.left());
    if let Some(cache) = cache {
        match &deleting {
            None => cache.written.record_deleted(namespace, name),
            Some(mr) => cache.written.record_deleting(
                namespace,
                name,
                mr.metadata.resource_version.as_deref(),
            ),
        }
    }
    Ok(deleting.is_none())
}

/// Whether the MR is gone. While it is still deleting, `Ok(false)`; once it has been deleting
/// for longer than [`DELETION_GRACE`], an error carrying GRM's `ResourcesApplied` message.
/// With a cache the store is looked at, without a request.
pub async fn is_deleted(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
) -> Result<bool, ManagedResourceError> {
    let mr = match cache {
        Some(cache) if cache.written.deleted(namespace, name) => None,
        Some(cache) => cache.stored_managed_resource(namespace, name),
        None => {
            let mrs: Api<ManagedResource> = Api::namespaced(client.clone(), namespace);
            mrs.get_opt(name).await.map_err(api_error(
                "reading",
                "ManagedResource",
                namespace,
                name,
            ))?
        }
    };
    let Some(mr) = mr else {
        return Ok(true);
    };
    let deleting_since = mr
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| {
            v.as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        })
        .map(|t| t.with_timezone(&Utc));
    let waited = deleting_since
        .map(|since| (Utc::now() - since).to_std().unwrap_or_default())
        .unwrap_or_default();
    if waited < DELETION_GRACE {
        return Ok(false);
    }
    let message = mr
        .condition(CONDITION_RESOURCES_APPLIED)
        .filter(|c| c.status != ConditionStatus::True)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let invalid =
        message.contains("error during apply of object") && message.contains("is invalid:");
    Err(ManagedResourceError::DeletionStuck {
        namespace: namespace.to_string(),
        name: name.to_string(),
        waited,
        message,
        codes: if invalid {
            vec![ErrorCode::ConfigurationProblem]
        } else {
            Vec::new()
        },
    })
}

/// Polls [`is_deleted`] for up to `budget`; `Ok(false)` if still there. Every second with
/// GETs; five times a second in the cache (which costs no request).
pub async fn wait_deleted(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
    budget: Duration,
) -> Result<bool, ManagedResourceError> {
    let deadline = tokio::time::Instant::now() + budget;
    let interval = match cache {
        Some(_) => Duration::from_millis(200),
        None => Duration::from_secs(1),
    };
    loop {
        if is_deleted(client, cache, namespace, name).await? {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(interval).await;
    }
}

/// How long a delete, migrate or restore waits inline for a ManagedResource to disappear
/// before it hands the wait over to a requeue ([`pending_deletion`]).
pub const INLINE_DELETE_WAIT: Duration = Duration::from_secs(10);
/// Requeue delay while something is being deleted.
pub const DELETE_RETRY: Duration = Duration::from_secs(5);

/// Deletes the MR and its secrets, waits up to [`INLINE_DELETE_WAIT`] for it to go (unless
/// `wait` is false, as in a force-delete) and reports whether it is gone.
pub async fn delete_and_wait(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
    name: &str,
    wait: bool,
) -> Result<bool, ManagedResourceError> {
    if delete(client, cache, namespace, name).await? || !wait {
        return Ok(true);
    }
    wait_deleted(client, cache, namespace, name, INLINE_DELETE_WAIT).await
}

/// The outcome of an operation that waits for `what` (e.g. `ManagedResource x`) to be
/// deleted: Processing, looked at again after [`DELETE_RETRY`].
pub fn pending_deletion(what: &str) -> super::Outcome {
    super::Outcome::Pending {
        reason: format!("waiting until {what} is deleted"),
        retry_after: DELETE_RETRY,
    }
}

/// Whether the error is a NotFound from the API (re-exported for actuators).
pub fn not_found(error: &kube::Error) -> bool {
    is_not_found(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn checksum_follows_gardeners_definition() {
        // sha256(hex(sha256("a")) + hex(sha256("b"))) for keys k1 < k2.
        let a = hex::encode(Sha256::digest(b"a"));
        let b = hex::encode(Sha256::digest(b"b"));
        let expected = hex::encode(Sha256::digest(format!("{a}{b}").as_bytes()));
        assert_eq!(data_checksum(&data(&[("k2", "b"), ("k1", "a")])), expected);
    }

    #[test]
    fn secret_names_change_with_content_only() {
        let one = secret_name("extension-runtime-gvisor", &data(&[("config.yaml", "x")]));
        let same = secret_name("extension-runtime-gvisor", &data(&[("config.yaml", "x")]));
        let other = secret_name("extension-runtime-gvisor", &data(&[("config.yaml", "y")]));
        assert_eq!(one, same);
        assert_ne!(one, other);
        assert!(one.starts_with("managedresource-extension-runtime-gvisor-"));
        assert_eq!(
            one.len(),
            "managedresource-extension-runtime-gvisor-".len() + 8
        );
        assert!(
            secret_name("trailing-", &data(&[("a", "b")])).starts_with("managedresource-trailing-")
        );
        assert!(!secret_name("trailing-", &data(&[("a", "b")])).contains("--"));
    }

    #[test]
    fn superseded_secrets_leave_out_what_is_kept() {
        let names = [
            "managedresource-mr-0123abcd",
            "managedresource-mr-deadbeef",
            "managedresource-other-0123abcd",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            superseded_secrets("mr", names.clone(), &["managedresource-mr-0123abcd"]),
            vec!["managedresource-mr-deadbeef".to_string()]
        );
        assert_eq!(superseded_secrets("mr", names, &[]).len(), 2);
    }

    #[test]
    fn superseded_secrets_are_recognised_by_their_exact_shape() {
        let mr = "extension-runtime-gvisor";
        let current = "managedresource-extension-runtime-gvisor-0123abcd";
        assert!(is_superseded_secret(
            mr,
            "managedresource-extension-runtime-gvisor-deadbeef",
            Some(current)
        ));
        assert!(is_superseded_secret(mr, current, None));
        assert!(!is_superseded_secret(mr, current, Some(current)));
        // Another MR whose name starts with ours.
        assert!(!is_superseded_secret(
            mr,
            "managedresource-extension-runtime-gvisor-installation-p1-deadbeef",
            None
        ));
        // Not hex, wrong length, the legacy name, another MR.
        assert!(!is_superseded_secret(
            mr,
            "managedresource-extension-runtime-gvisor-DEADBEEF",
            None
        ));
        assert!(!is_superseded_secret(
            mr,
            "managedresource-extension-runtime-gvisor-deadbee",
            None
        ));
        assert!(!is_superseded_secret(
            mr,
            "managedresource-extension-runtime-gvisor",
            None
        ));
        assert!(!is_superseded_secret(
            mr,
            "managedresource-shoot-gardener-node-agent-deadbeef",
            None
        ));
        assert!(is_superseded_secret(
            "trailing-",
            "managedresource-trailing-deadbeef",
            None
        ));
    }

    fn mr_with(
        generation: i64,
        observed: i64,
        conditions: &[(&str, &str, &str)],
    ) -> ManagedResource {
        let conditions: Vec<serde_json::Value> = conditions
            .iter()
            .map(|(type_, status, message)| {
                json!({"type": type_, "status": status, "reason": "R", "message": message,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "lastUpdateTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "resources.gardener.cloud/v1alpha1",
            "kind": "ManagedResource",
            "metadata": {"name": "x", "namespace": "ns", "generation": generation},
            "spec": {"secretRefs": []},
            "status": {"observedGeneration": observed, "conditions": conditions},
        }))
        .unwrap()
    }

    /// Condition type, status, message.
    type Conditions = (&'static str, &'static str, &'static str);

    #[test]
    fn rolled_out_needs_the_current_generation_applied_healthy_and_not_progressing() {
        let done = [
            ("ResourcesApplied", "True", ""),
            ("ResourcesHealthy", "True", ""),
            ("ResourcesProgressing", "False", ""),
        ];
        assert!(is_rolled_out(&mr_with(2, 2, &done)));
        assert_eq!(rollout_pending_reason(&mr_with(2, 2, &done)), None);
        let stale = mr_with(3, 2, &done);
        assert!(!is_rolled_out(&stale));
        assert_eq!(
            rollout_pending_reason(&stale).unwrap(),
            "ManagedResource x: generation 3 not yet processed by gardener-resource-manager"
        );
        let rows: [(&[Conditions], &str); 4] = [
            (
                &[
                    ("ResourcesApplied", "True", ""),
                    (
                        "ResourcesHealthy",
                        "False",
                        "DaemonSet kube-system/d is unhealthy: too many unavailable pods found (1/3)\n\nmore",
                    ),
                    ("ResourcesProgressing", "False", ""),
                ],
                "ManagedResource x: ResourcesHealthy False: DaemonSet kube-system/d is unhealthy: too many unavailable pods found (1/3)",
            ),
            (
                &[
                    ("ResourcesApplied", "True", ""),
                    ("ResourcesHealthy", "True", ""),
                    (
                        "ResourcesProgressing",
                        "True",
                        "DaemonSet kube-system/d is progressing: 1 of 3 replica(s) have been updated",
                    ),
                ],
                "ManagedResource x: ResourcesProgressing True: DaemonSet kube-system/d is progressing: 1 of 3 replica(s) have been updated",
            ),
            (
                &[
                    ("ResourcesApplied", "True", ""),
                    (
                        "ResourcesHealthy",
                        "Unknown",
                        "The health checks have not yet been executed for the current set of resources.",
                    ),
                ],
                "ManagedResource x: ResourcesHealthy Unknown: The health checks have not yet been executed for the current set of resources.",
            ),
            (
                &[
                    ("ResourcesApplied", "True", ""),
                    ("ResourcesHealthy", "True", ""),
                ],
                "ManagedResource x: no ResourcesProgressing condition yet",
            ),
        ];
        for (conditions, reason) in rows {
            let mr = mr_with(2, 2, conditions);
            assert!(!is_rolled_out(&mr), "{reason}");
            assert_eq!(rollout_pending_reason(&mr).unwrap(), reason);
        }
    }

    #[test]
    fn rendered_objects_follow_the_for_shoot_conventions() {
        let secret = render_secret(
            "ns",
            "managedresource-x-12345678",
            &data(&[("config.yaml", "x")]),
        );
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(
            secret.metadata.labels.unwrap()[LABEL_GARBAGE_COLLECTABLE],
            "true"
        );
        let mr = render_managed_resource("ns", "x", "managedresource-x-12345678", false);
        assert_eq!(mr.spec.class, None);
        assert_eq!(mr.spec.keep_objects, Some(false));
        assert_eq!(mr.spec.inject_labels[LABEL_NO_CLEANUP], "true");
        assert_eq!(mr.metadata.labels.as_ref().unwrap()["origin"], ORIGIN);
        let annotations = mr.metadata.annotations.unwrap();
        assert_eq!(annotations.len(), 1);
        let (key, value) = annotations.iter().next().unwrap();
        assert!(key.starts_with("reference.resources.gardener.cloud/secret-"));
        assert_eq!(value, "managedresource-x-12345678");
        let json = serde_json::to_value(&mr.spec).unwrap();
        assert!(json.get("class").is_none(), "class must be unset: {json}");
    }
}
