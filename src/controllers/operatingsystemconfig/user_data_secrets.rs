//! The user-data Secrets of `provision` OSCs as the operator remembers them: metadata only,
//! from one label-selected watch, so a run writes the Secret only when its content, labels or
//! owner differ instead of applying it on every run (gardenlet annotates every OSC on every
//! shoot reconcile). The content is compared through a checksum annotation that we write
//! with the data; the data itself (up to 16 KiB and more per OSC) is never held.
//!
//! [`is_current`] is pure; [`start`] runs the watch; [`super::reconcile`] reads the store. A
//! Secret someone else changed keeps our checksum only if they left the annotation alone;
//! the next change of the OSC (or an operator restart, whose first run applies again when
//! the store lacks the Secret) rewrites it.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::watcher::Config;
use kube::{Client, ResourceExt};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::extension::cache::SyncedStore;

/// Label on our user-data Secrets (what the watch selects).
pub const LABEL_USER_DATA: &str = "node.extensions.gardener.cloud/user-data";
/// Annotation with the SHA-256 of the user data (hex).
pub const ANNOTATION_CHECKSUM: &str = "node.extensions.gardener.cloud/user-data-checksum";

/// The store of our user-data Secrets' metadata.
pub type UserDataSecrets = SyncedStore<PartialObjectMeta<Secret>>;

/// Starts the watch (until `shutdown`).
pub fn start(client: &Client, shutdown: &CancellationToken) -> UserDataSecrets {
    let config = Config::default().labels(&format!("{LABEL_USER_DATA}=true"));
    SyncedStore::start(Api::all(client.clone()), config, shutdown)
}

/// The checksum annotation's value for `user_data`.
pub fn checksum(user_data: &[u8]) -> String {
    hex::encode(Sha256::digest(user_data))
}

/// Whether the stored Secret already is `wanted`: same checksum, every wanted label and
/// annotation present, same owner references, not being deleted (pure).
pub fn is_current(stored: &PartialObjectMeta<Secret>, wanted: &Secret) -> bool {
    let contains = |have: &std::collections::BTreeMap<String, String>,
                    want: &std::collections::BTreeMap<String, String>| {
        want.iter().all(|(k, v)| have.get(k) == Some(v))
    };
    stored.metadata.deletion_timestamp.is_none()
        && contains(stored.labels(), wanted.labels())
        && contains(stored.annotations(), wanted.annotations())
        && stored.owner_references() == wanted.owner_references()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wanted(sum: &str) -> Secret {
        serde_json::from_value(json!({
            "metadata": {
                "name": "osc-result-a", "namespace": "ns",
                "labels": {LABEL_USER_DATA: "true"},
                "annotations": {ANNOTATION_CHECKSUM: sum},
                "ownerReferences": [{"apiVersion": "extensions.gardener.cloud/v1alpha1",
                    "kind": "OperatingSystemConfig", "name": "a", "uid": "u1", "controller": true}]
            }
        }))
        .unwrap()
    }

    fn stored(secret: &Secret) -> PartialObjectMeta<Secret> {
        PartialObjectMeta {
            metadata: secret.metadata.clone(),
            ..Default::default()
        }
    }

    #[test]
    fn the_same_checksum_labels_and_owner_are_current() {
        let mut have = stored(&wanted("abc"));
        have.metadata
            .annotations
            .get_or_insert_default()
            .insert("other".into(), "kept".into());
        assert!(is_current(&have, &wanted("abc")));
    }

    #[test]
    fn another_checksum_owner_or_a_deletion_is_not_current() {
        assert!(!is_current(&stored(&wanted("abc")), &wanted("def")));
        let mut other_owner = stored(&wanted("abc"));
        other_owner.metadata.owner_references = None;
        assert!(!is_current(&other_owner, &wanted("abc")));
        let mut deleting = stored(&wanted("abc"));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!is_current(&deleting, &wanted("abc")));
    }

    #[test]
    fn the_checksum_is_sha256_hex() {
        assert_eq!(
            checksum(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
