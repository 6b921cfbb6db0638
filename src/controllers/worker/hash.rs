//! The worker-pool hash (pure): the suffix of MachineClass names, and so the trigger of
//! rolling updates.
//!
//! Same construction as Gardener's `WorkerPoolHashV2` (`extensions/pkg/controller/worker/
//! machines.go`): the inputs are the pool's `nodeAgentSecretName` followed by the provider's
//! extra data; each input is hashed with SHA-256 to lowercase hex, the hex strings are
//! concatenated, that text is hashed again, and the first [`HASH_LENGTH`] hex characters are
//! the result. gardenlet derives `nodeAgentSecretName` from everything that needs new
//! machines (Kubernetes minor version, machine type, image, volume, CRI, credential
//! rotations, some kubelet settings), so labels, annotations, taints, sizes and zones never
//! change the hash: they are applied to the running machines instead.
//!
//! In-place pools add their in-place hash after the secret name ([`class_hash_in_place`]).
//!
//! Our provider extra data is the pool's `providerConfig` as validated by
//! [`super::config`]: `image=<value>` when an image override is set. A changed override
//! therefore rolls the pool; an absent `providerConfig` adds nothing.

use sha2::{Digest, Sha256};

use super::config::PoolConfig;

/// Number of hex characters of the hash.
pub const HASH_LENGTH: usize = 5;

/// The provider extra data of a pool, in hashing order.
pub fn provider_data(config: Option<&PoolConfig>) -> Vec<String> {
    config
        .and_then(|c| c.image.as_ref())
        .map(|image| vec![format!("image={image}")])
        .unwrap_or_default()
}

/// The hash of `node_agent_secret_name` and `extra` (see the module docs).
pub fn class_hash(node_agent_secret_name: &str, extra: &[String]) -> String {
    hash_of_hashes(
        std::iter::once(node_agent_secret_name).chain(extra.iter().map(String::as_str)),
        HASH_LENGTH,
    )
}

/// The class hash of an in-place pool (`WorkerPoolHashInPlace`): gardenlet keeps the
/// node-agent secret name of such a pool constant, so the pool's in-place hash
/// ([`super::in_place::update_hash`]) comes right after it, then `extra`. A new Kubernetes
/// minor, image version, rotation or node-relevant kubelet setting thus gives new classes,
/// which is what makes machine-controller-manager start an in-place update.
pub fn class_hash_in_place(
    node_agent_secret_name: &str,
    in_place_hash: &str,
    extra: &[String],
) -> String {
    hash_of_hashes(
        [node_agent_secret_name, in_place_hash]
            .into_iter()
            .chain(extra.iter().map(String::as_str)),
        HASH_LENGTH,
    )
}

/// Upstream's pool hash recipe: the SHA-256 hex of each input, concatenated, hashed again,
/// cut to `length` hex characters. Also the in-place pool hash ([`super::in_place`]).
pub fn hash_of_hashes<'a>(inputs: impl IntoIterator<Item = &'a str>, length: usize) -> String {
    let mut joined = String::new();
    for input in inputs {
        joined.push_str(&hex::encode(Sha256::digest(input.as_bytes())));
    }
    let mut digest = hex::encode(Sha256::digest(joined.as_bytes()));
    digest.truncate(length);
    digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_input_same_hash() {
        let a = class_hash("gardener-node-agent-worker-a-77ac3", &[]);
        let b = class_hash("gardener-node-agent-worker-a-77ac3", &[]);
        assert_eq!(a, b);
        assert_eq!(a.len(), HASH_LENGTH);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }

    #[test]
    fn the_construction_is_sha256_of_concatenated_sha256_hex() {
        // Computed independently: sha256(hex(sha256("abc"))) starts with these characters.
        let inner = hex::encode(Sha256::digest(b"abc"));
        let expected = hex::encode(Sha256::digest(inner.as_bytes()));
        assert_eq!(class_hash("abc", &[]), expected[..HASH_LENGTH]);
        // Two inputs: the hex digests are concatenated before the outer hash.
        let both = format!(
            "{}{}",
            hex::encode(Sha256::digest(b"abc")),
            hex::encode(Sha256::digest(b"image=x"))
        );
        let expected = hex::encode(Sha256::digest(both.as_bytes()));
        assert_eq!(
            class_hash("abc", &["image=x".to_string()]),
            expected[..HASH_LENGTH]
        );
    }

    #[test]
    fn secret_name_and_provider_data_change_the_hash() {
        let base = class_hash("gna-1", &[]);
        assert_ne!(base, class_hash("gna-2", &[]));
        assert_ne!(base, class_hash("gna-1", &["image=a".to_string()]));
        assert_ne!(
            class_hash("gna-1", &["image=a".to_string()]),
            class_hash("gna-1", &["image=b".to_string()])
        );
    }

    #[test]
    fn in_place_pools_hash_their_in_place_hash_after_the_secret_name() {
        let inner: String = ["gardener-node-agent-a", "0123456789abcdef"]
            .iter()
            .map(|s| hex::encode(Sha256::digest(s.as_bytes())))
            .collect();
        let expected = hex::encode(Sha256::digest(inner.as_bytes()));
        assert_eq!(
            class_hash_in_place("gardener-node-agent-a", "0123456789abcdef", &[]),
            expected[..HASH_LENGTH]
        );
        assert_ne!(
            class_hash_in_place("gardener-node-agent-a", "0123456789abcdef", &[]),
            class_hash_in_place("gardener-node-agent-a", "fedcba9876543210", &[])
        );
    }

    #[test]
    fn provider_data_comes_only_from_the_image_override() {
        assert!(provider_data(None).is_empty());
        assert!(provider_data(Some(&PoolConfig { image: None })).is_empty());
        assert_eq!(
            provider_data(Some(&PoolConfig {
                image: Some("registry/machine:v2".into())
            })),
            ["image=registry/machine:v2"]
        );
    }
}
