//! How far a pool's nodes are with the node-agent configuration, for the seed (pure): the
//! OSC condition [`CONDITION_TYPE`] that the rollout watch ([`super::watch`]) keeps
//! on `reconcile` OSCs whose node-agent secret we ship, and the shoot access it reads the
//! Nodes with (`docs/agent.md#disruptive-rollout`, "Seen from the seed").
//!
//! - [`summarize`]: from the pool's Nodes and the shipped checksum — how many report it
//!   (annotation `checksum/cloud-config-data`, as gardenlet counts updated nodes), and which
//!   stopped the disruptive rollout (Node condition `DisruptiveRolloutHealthy=False`, written
//!   by our agent);
//! - [`condition`]: the OSC condition: `True`/`RolloutComplete` when every node reports the
//!   checksum, `Progressing`/`RolloutProgressing` while some do not, `False`/`RolloutStopped`
//!   naming the stopped nodes (an error an operator has to act on: fix the OSC, or resume the
//!   node). gardenlet ignores condition types it does not know, so the condition informs
//!   without changing how gardenlet treats the OSC;
//! - [`unobservable`]: `Unknown` while the nodes cannot be looked at, with the reason
//!   ([`Unobservable`]): the shoot's generic token kubeconfig Secret is missing or refused
//!   ([`REASON_KUBECONFIG_UNUSABLE`]), the token in our access Secret is no usable bearer
//!   token ([`REASON_TOKEN_UNUSABLE`], see [`check_token`]), or the shoot's API server did
//!   not answer within the watch's time limits ([`REASON_SHOOT_UNREACHABLE`]);
//! - [`access_secret`] and [`rbac_manifests`]: a shoot access Secret per OSC key for
//!   gardener-resource-manager's token requestor (the way extensions get a shoot token), and
//!   the ClusterRole/ClusterRoleBinding that let its ServiceAccount list Nodes, shipped in
//!   the key's node-agent ManagedResource.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use serde_json::json;

use crate::api::common::{Condition, ConditionStatus};
use crate::api::constants::LABEL_WORKER_POOL;

/// The OSC condition type.
pub const CONDITION_TYPE: &str = "NodeAgentRollout";
/// The condition's reason while the rollout is paused from the seed.
pub const REASON_PAUSED: &str = "RolloutPaused";
/// The condition's reason while the generic token kubeconfig cannot be used.
pub const REASON_KUBECONFIG_UNUSABLE: &str = "GenericKubeconfigUnusable";
/// The condition's reason while the token in our access Secret cannot be sent.
pub const REASON_TOKEN_UNUSABLE: &str = "ShootTokenUnusable";
/// The condition's reason while the shoot's API server does not answer in time.
pub const REASON_SHOOT_UNREACHABLE: &str = "ShootUnreachable";
pub use crate::api::constants::NODE_CONDITION_DISRUPTIVE_ROLLOUT as NODE_CONDITION_ROLLOUT;
use crate::api::constants::{
    ANNOTATION_NODE_CHECKSUM, ANNOTATION_ROLLOUT_PAUSED, LABEL_NODE_AGENT_SECRET_NAME,
    NODE_CONDITION_DRIFT,
};
/// Annotation on the access Secret: the checksum of the node-agent secret we shipped.
pub const ANNOTATION_SHIPPED_CHECKSUM: &str = "node.extensions.gardener.cloud/node-agent-checksum";
/// Annotation on the access Secret: the pool of the OSC.
pub const ANNOTATION_POOL: &str = "node.extensions.gardener.cloud/pool";
/// Label on our access Secrets (the rollout watch's cache selects them by it).
pub const LABEL_ACCESS: &str = "node.extensions.gardener.cloud/rollout-access";
/// Prefix of the access Secret's name (gardener's `shoot-access-` convention).
const ACCESS_SECRET_PREFIX: &str = "shoot-access-";
/// Namespace of the ServiceAccount in the shoot.
const SERVICE_ACCOUNT_NAMESPACE: &str = "kube-system";

/// One node that stopped the rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedNode {
    /// Node name.
    pub name: String,
    /// The condition's reason (`ApplyFailed`, `NotHealthy`).
    pub reason: String,
    /// The condition's message.
    pub message: String,
}

/// Where a pool's nodes are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// Nodes of the pool (and key).
    pub total: usize,
    /// Of them, the nodes reporting the shipped checksum.
    pub current: usize,
    /// Nodes whose rollout stopped.
    pub stopped: Vec<StoppedNode>,
    /// Nodes whose agent reports drift that stays on the node (Node condition
    /// [`crate::api::constants::NODE_CONDITION_DRIFT`] `True`: reported only, or its repair
    /// waits for a rollout slot), by name.
    pub drifted: Vec<String>,
    /// The pause the OSC asks for ([`crate::api::constants::ANNOTATION_ROLLOUT_PAUSED`]), with
    /// its value; set by the caller (the Nodes do not say it).
    pub paused: Option<String>,
}

/// Counts the nodes of `pool` reading `key` (see the module docs).
pub fn summarize(nodes: &[Node], pool: &str, key: &str, checksum: &str) -> Summary {
    let mut summary = Summary::default();
    for node in nodes {
        let labels = node.metadata.labels.as_ref();
        let label = |name: &str| labels.and_then(|l| l.get(name)).map(String::as_str);
        if label(LABEL_WORKER_POOL) != Some(pool)
            || label(LABEL_NODE_AGENT_SECRET_NAME).is_some_and(|secret| secret != key)
        {
            continue;
        }
        summary.total += 1;
        let reported = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_NODE_CHECKSUM));
        if reported.is_some_and(|value| value == checksum) {
            summary.current += 1;
        }
        let stopped = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == NODE_CONDITION_ROLLOUT))
            .filter(|c| c.status == "False");
        let drifted = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == NODE_CONDITION_DRIFT))
            .is_some_and(|c| c.status == "True");
        if drifted {
            summary
                .drifted
                .push(node.metadata.name.clone().unwrap_or_default());
        }
        if let Some(condition) = stopped {
            summary.stopped.push(StoppedNode {
                name: node.metadata.name.clone().unwrap_or_default(),
                reason: condition.reason.clone().unwrap_or_default(),
                message: condition.message.clone().unwrap_or_default(),
            });
        }
    }
    summary.stopped.sort_by(|a, b| a.name.cmp(&b.name));
    summary.drifted.sort();
    summary
}

/// The checksum as the condition message names it: its first 12 characters.
fn short(checksum: &str) -> &str {
    checksum.get(..12).unwrap_or(checksum)
}

/// Whether the condition `previous` already says that every node runs `checksum` (as
/// [`condition`] writes it: `True`, the message naming the checksum).
pub fn is_complete(previous: Option<&Condition>, checksum: &str) -> bool {
    let named = format!("configuration {}", short(checksum));
    previous.is_some_and(|c| c.status == ConditionStatus::True && c.message.contains(&named))
}

/// The OSC condition for `summary`; keeps `previous`'s transition time while the status
/// stays and its update time while reason and message stay, as Gardener's condition helpers do.
pub fn condition(
    summary: &Summary,
    checksum: &str,
    previous: Option<&Condition>,
    now: DateTime<Utc>,
) -> Condition {
    let mut counts = format!(
        "{}/{} nodes run the node-agent configuration {}",
        summary.current,
        summary.total,
        short(checksum)
    );
    if !summary.drifted.is_empty() {
        counts.push_str(&format!(
            "; {} node(s) drifted from it ({NODE_CONDITION_DRIFT}): {}",
            summary.drifted.len(),
            summary.drifted.join(", ")
        ));
    }
    let (status, reason, message) = if let Some(first) = summary.stopped.first() {
        let names: Vec<&str> = summary.stopped.iter().map(|n| n.name.as_str()).collect();
        (
            ConditionStatus::False,
            "RolloutStopped",
            format!(
                "the disruptive rollout stopped on node {} ({}: {}); {counts}. Fix the \
                 configuration, or resume the node with the annotation \
                 node.extensions.gardener.cloud/rollout-resume",
                names.join(", "),
                first.reason,
                first.message
            ),
        )
    } else if summary.current == summary.total {
        (ConditionStatus::True, "RolloutComplete", counts)
    } else if let Some(why) = &summary.paused {
        (
            ConditionStatus::Progressing,
            REASON_PAUSED,
            format!(
                "paused by the annotation {ANNOTATION_ROLLOUT_PAUSED}={why:?} on this \
                 OperatingSystemConfig: {counts}, {} waiting (nodes in the middle of an apply \
                 finish it; no node starts a new one). Remove the annotation to resume",
                summary.total - summary.current
            ),
        )
    } else {
        (ConditionStatus::Progressing, "RolloutProgressing", counts)
    };
    with_times(status, reason, message, previous, now)
}

/// Why the nodes of a pool cannot be looked at (each a reason of the `Unknown` condition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unobservable {
    /// The generic token kubeconfig Secret is missing or refused.
    Kubeconfig,
    /// The token in our access Secret is no usable bearer token.
    Token,
    /// The shoot's API server did not answer in time.
    Unreachable,
}

impl Unobservable {
    /// The condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Unobservable::Kubeconfig => REASON_KUBECONFIG_UNUSABLE,
            Unobservable::Token => REASON_TOKEN_UNUSABLE,
            Unobservable::Unreachable => REASON_SHOOT_UNREACHABLE,
        }
    }
}

/// The OSC condition while the nodes cannot be looked at for `why`; `message` names the
/// object or the server and the cause.
pub fn unobservable(
    why: Unobservable,
    message: &str,
    previous: Option<&Condition>,
    now: DateTime<Utc>,
) -> Condition {
    with_times(
        ConditionStatus::Unknown,
        why.reason(),
        message.to_string(),
        previous,
        now,
    )
}

/// The OSC condition while the shoot's generic token kubeconfig is unusable
/// ([`unobservable`] with [`Unobservable::Kubeconfig`]).
pub fn unusable_kubeconfig(
    message: &str,
    previous: Option<&Condition>,
    now: DateTime<Utc>,
) -> Condition {
    unobservable(Unobservable::Kubeconfig, message, previous, now)
}

pub use crate::kubeconfig::rules::TokenRefused;

/// The token of an access Secret (`None`: not written yet, or empty): usable only if it is
/// what [`crate::kubeconfig::rules::check_bearer_token`] admits (what a ServiceAccount token
/// consists of, and a valid HTTP header value); anything else is refused, never sent or passed
/// to a client builder that would reject it by panicking.
pub fn check_token(data: Option<&[u8]>) -> Option<Result<&str, TokenRefused>> {
    let data = data.filter(|d| !d.is_empty())?;
    let token = std::str::from_utf8(data).map_err(|error| TokenRefused::Character {
        what: "a non-ASCII character",
        at: error.valid_up_to(),
        length: data.len(),
    });
    Some(
        token.and_then(|token| crate::kubeconfig::rules::check_bearer_token(token).map(|()| token)),
    )
}

/// Our condition with `status`, `reason` and `message`; keeps `previous`'s transition time
/// while the status stays and its update time while reason and message stay, as Gardener's
/// condition helpers do.
fn with_times(
    status: ConditionStatus,
    reason: &str,
    message: String,
    previous: Option<&Condition>,
    now: DateTime<Utc>,
) -> Condition {
    let same_status = previous.is_some_and(|p| p.status == status);
    let same_text =
        previous.is_some_and(|p| same_status && p.reason == reason && p.message == message);
    Condition {
        type_: CONDITION_TYPE.into(),
        status,
        last_transition_time: previous
            .filter(|_| same_status)
            .map_or(now, |p| p.last_transition_time),
        last_update_time: previous
            .filter(|_| same_text)
            .map_or(now, |p| p.last_update_time),
        reason: reason.into(),
        message,
        codes: Vec::new(),
    }
}

/// The ManagedResource in the seed namespace that ships [`rbac_manifests`] of OSC key `key`
/// (in every `--node-agent-secrets` mode; the node-agent Secret's own ManagedResource may be
/// gardenlet's).
pub fn managed_resource_name(key: &str) -> String {
    format!("extension-node-rollout-{key}")
}

/// Name of the shoot ServiceAccount (and, with the prefix `shoot-access-`, of the access
/// Secret) for OSC key `key`.
pub fn service_account_name(key: &str) -> String {
    format!("gardener-extension-node-rollout-{key}")
}

/// The access Secret of an OSC (namespace `namespace`, controlled by the OSC so that the
/// seed's garbage collector removes it with the OSC): gardener-resource-manager's token
/// requestor (label `resources.gardener.cloud/purpose=token-requestor`, class `shoot`) creates
/// the ServiceAccount in the shoot and writes its token under `token`. Its annotations carry
/// what the rollout watch needs besides: the pool and the checksum we shipped.
pub fn access_secret(
    namespace: &str,
    key: &str,
    pool: &str,
    checksum: &str,
    owner: OwnerReference,
) -> Secret {
    let account = service_account_name(key);
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("{ACCESS_SECRET_PREFIX}{account}")),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (
                    "resources.gardener.cloud/purpose".into(),
                    "token-requestor".into(),
                ),
                ("resources.gardener.cloud/class".into(), "shoot".into()),
                (LABEL_ACCESS.into(), "true".into()),
            ])),
            annotations: Some(BTreeMap::from([
                (
                    "serviceaccount.resources.gardener.cloud/name".into(),
                    account,
                ),
                (
                    "serviceaccount.resources.gardener.cloud/namespace".into(),
                    SERVICE_ACCOUNT_NAMESPACE.into(),
                ),
                (ANNOTATION_POOL.into(), pool.into()),
                (ANNOTATION_SHIPPED_CHECKSUM.into(), checksum.into()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    }
}

/// The RBAC of the key's ServiceAccount (ManagedResource data keys and manifests, shipped in
/// the key's rollout ManagedResource [`managed_resource_name`] whoever ships the node-agent
/// Secret): a ClusterRole and ClusterRoleBinding to get and list Nodes, and a Role and
/// RoleBinding in `kube-system` to get and patch the pool's Lease (and create Leases) —
/// nothing else.
pub fn rbac_manifests(key: &str) -> BTreeMap<String, Vec<u8>> {
    let name = format!("gardener-extension-node:rollout-status:{key}");
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{
            "kind": "ServiceAccount",
            "name": service_account_name(key),
            "namespace": SERVICE_ACCOUNT_NAMESPACE,
        }],
    });
    // The pool's Lease (named as the node-agent Secret): read and annotated with the
    // steering settings (`super::steering`), created when no agent has yet. RBAC cannot name
    // an object that a `create` makes, so `create` stands alone; the token is our operator's,
    // which ships whatever it wants into the shoot through ManagedResources anyway.
    let lease_rules = json!([
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [key], "verbs": ["get", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]);
    let lease_role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": SERVICE_ACCOUNT_NAMESPACE},
        "rules": lease_rules,
    });
    let lease_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": SERVICE_ACCOUNT_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{
            "kind": "ServiceAccount",
            "name": service_account_name(key),
            "namespace": SERVICE_ACCOUNT_NAMESPACE,
        }],
    });
    let file = |kind: &str| format!("{kind}____{}.yaml", name.replace(':', "_"));
    BTreeMap::from([
        (file("clusterrole"), role.to_string().into_bytes()),
        (file("clusterrolebinding"), binding.to_string().into_bytes()),
        (file("role"), lease_role.to_string().into_bytes()),
        (file("rolebinding"), lease_binding.to_string().into_bytes()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, pool: &str, checksum: Option<&str>, rollout: Option<(&str, &str)>) -> Node {
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {LABEL_WORKER_POOL: pool},
                "annotations": checksum.map(|c| json!({ANNOTATION_NODE_CHECKSUM: c})).unwrap_or(json!({})),
            },
            "status": {"conditions": rollout.map(|(status, reason)| json!([{
                "type": NODE_CONDITION_ROLLOUT, "status": status, "reason": reason,
                "message": "kubelet did not answer",
            }])).unwrap_or(json!([]))},
        }))
        .unwrap()
    }

    const NOW: &str = "2026-12-01T10:00:00Z";

    fn now() -> DateTime<Utc> {
        NOW.parse().unwrap()
    }

    #[test]
    fn counts_the_pools_nodes_reporting_the_checksum() {
        let nodes = [
            node("a", "pool", Some("new"), None),
            node("b", "pool", Some("old"), None),
            node("c", "pool", None, Some(("True", "Healthy"))),
            node("d", "other", Some("new"), None),
        ];
        let summary = summarize(&nodes, "pool", "key", "new");
        assert_eq!((summary.total, summary.current), (3, 1));
        assert!(summary.stopped.is_empty());
        let condition = condition(&summary, "new", None, now());
        assert_eq!(condition.status, ConditionStatus::Progressing);
        assert_eq!(condition.reason, "RolloutProgressing");
        assert!(
            condition.message.starts_with("1/3 nodes"),
            "{}",
            condition.message
        );
    }

    #[test]
    fn nodes_of_another_key_of_the_pool_are_not_counted() {
        let mut other = node("x", "pool", Some("old"), None);
        other
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_NODE_AGENT_SECRET_NAME.into(), "old-key".into());
        let summary = summarize(
            &[other, node("a", "pool", Some("new"), None)],
            "pool",
            "key",
            "new",
        );
        assert_eq!((summary.total, summary.current), (1, 1));
        let condition = condition(&summary, "new", None, now());
        assert_eq!(
            (condition.status, condition.reason.as_str()),
            (ConditionStatus::True, "RolloutComplete")
        );
        assert!(is_complete(Some(&condition), "new"));
        assert!(!is_complete(Some(&condition), "newer"));
        assert!(!is_complete(None, "new"));
    }

    #[test]
    fn a_stopped_node_is_named_in_a_false_condition() {
        let nodes = [
            node("b", "pool", Some("new"), Some(("False", "NotHealthy"))),
            node("a", "pool", Some("old"), None),
        ];
        let summary = summarize(&nodes, "pool", "key", "new");
        let condition = condition(&summary, "new", None, now());
        assert_eq!(condition.status, ConditionStatus::False);
        assert_eq!(condition.reason, "RolloutStopped");
        assert!(
            condition
                .message
                .contains("stopped on node b (NotHealthy: kubelet did not answer)"),
            "{}",
            condition.message
        );
        assert!(condition.message.contains("rollout-resume"));
    }

    #[test]
    fn times_move_only_with_the_status_and_the_text() {
        let nodes = [node("a", "pool", Some("old"), None)];
        let earlier: DateTime<Utc> = "2026-12-01T09:00:00Z".parse().unwrap();
        let first = condition(&summarize(&nodes, "pool", "k", "new"), "new", None, earlier);
        let same = condition(
            &summarize(&nodes, "pool", "k", "new"),
            "new",
            Some(&first),
            now(),
        );
        assert_eq!(same, first, "nothing changed: same object, no write");
        let done = [node("a", "pool", Some("new"), None)];
        let later = condition(
            &summarize(&done, "pool", "k", "new"),
            "new",
            Some(&first),
            now(),
        );
        assert_eq!(later.last_transition_time, now());
        assert_eq!(later.last_update_time, now());
    }

    #[test]
    fn an_unusable_kubeconfig_makes_the_condition_unknown_until_it_is_fixed() {
        let nodes = [node("a", "pool", Some("new"), None)];
        let earlier: DateTime<Utc> = "2026-12-01T09:00:00Z".parse().unwrap();
        let complete = condition(&summarize(&nodes, "pool", "k", "new"), "new", None, earlier);
        let message = "kubeconfig Secret ns/generic-token-kubeconfig is refused: …";
        let unknown = unusable_kubeconfig(message, Some(&complete), now());
        assert_eq!(unknown.status, ConditionStatus::Unknown);
        assert_eq!(unknown.reason, REASON_KUBECONFIG_UNUSABLE);
        assert_eq!(unknown.message, message);
        assert_eq!(unknown.last_transition_time, now());
        assert!(
            !is_complete(Some(&unknown), "new"),
            "the watch keeps looking"
        );
        let again = unusable_kubeconfig(
            message,
            Some(&unknown),
            now() + chrono::Duration::seconds(10),
        );
        assert_eq!(again, unknown, "the same text: no write");
    }

    #[test]
    fn a_token_with_a_line_break_or_control_characters_is_refused_not_sent() {
        assert_eq!(check_token(None), None);
        assert_eq!(check_token(Some(b"")), None, "not written yet");
        assert_eq!(
            check_token(Some(b"eyJhbGciOi.eyJpc3Mi.c2lnbmF0dXJl")),
            Some(Ok("eyJhbGciOi.eyJpc3Mi.c2lnbmF0dXJl"))
        );
        for (token, what, position) in [
            (&b"abc\ndef"[..], "a line break", 3),
            (b"abc\r\n", "a carriage return", 3),
            (b"abc\n", "a line break", 3),
            (b" abc", "a space", 0),
            (b"ab\tc", "a tab", 2),
            (b"ab\x00c", "a control character", 2),
            (b"ab\x7fc", "a control character", 2),
            (b"ab\xc3\xa9", "a non-ASCII character", 2),
            (b"ab\xff", "a non-ASCII character", 2),
        ] {
            let refused = check_token(Some(token)).unwrap().unwrap_err();
            let TokenRefused::Character {
                what: found, at, ..
            } = refused.clone()
            else {
                panic!("{token:?}: {refused:?}");
            };
            assert_eq!((found, at), (what, position), "{token:?}");
            assert!(refused.to_string().contains(what), "{refused}");
        }
    }

    #[test]
    fn each_unobservable_cause_has_its_reason() {
        for (why, reason) in [
            (Unobservable::Kubeconfig, REASON_KUBECONFIG_UNUSABLE),
            (Unobservable::Token, REASON_TOKEN_UNUSABLE),
            (Unobservable::Unreachable, REASON_SHOOT_UNREACHABLE),
        ] {
            let condition = unobservable(why, "m", None, now());
            assert_eq!(
                (condition.status, condition.reason.as_str()),
                (ConditionStatus::Unknown, reason)
            );
        }
    }

    #[test]
    fn the_access_secret_asks_grm_for_a_token_and_the_roles_read_nodes_and_steer_the_pool_lease() {
        let owner = OwnerReference {
            api_version: "extensions.gardener.cloud/v1alpha1".into(),
            kind: "OperatingSystemConfig".into(),
            name: "osc".into(),
            uid: "1".into(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let secret = access_secret(
            "shoot--p--s",
            "gardener-node-agent-pool-1a2b",
            "pool",
            "abc",
            owner,
        );
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("shoot-access-gardener-extension-node-rollout-gardener-node-agent-pool-1a2b")
        );
        let labels = secret.metadata.labels.unwrap();
        assert_eq!(
            labels["resources.gardener.cloud/purpose"],
            "token-requestor"
        );
        assert_eq!(labels["resources.gardener.cloud/class"], "shoot");
        let annotations = secret.metadata.annotations.unwrap();
        assert_eq!(
            annotations["serviceaccount.resources.gardener.cloud/namespace"],
            "kube-system"
        );
        assert_eq!(annotations[ANNOTATION_SHIPPED_CHECKSUM], "abc");
        let rbac = rbac_manifests("gardener-node-agent-pool-1a2b");
        assert_eq!(rbac.len(), 4);
        let manifest = |prefix: &str| -> serde_json::Value {
            let (_, bytes) = rbac.iter().find(|(k, _)| k.starts_with(prefix)).unwrap();
            serde_json::from_slice(bytes).unwrap()
        };
        assert_eq!(
            manifest("clusterrole__")["rules"],
            json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}])
        );
        let role = manifest("role__");
        assert_eq!(role["metadata"]["namespace"], "kube-system");
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["gardener-node-agent-pool-1a2b"], "verbs": ["get", "patch"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            ])
        );
        assert_eq!(
            manifest("rolebinding__")["subjects"][0]["name"],
            "gardener-extension-node-rollout-gardener-node-agent-pool-1a2b"
        );
    }

    #[test]
    fn drifted_nodes_are_named_in_any_state() {
        let mut drifted = node("b", "pool", Some("new"), None);
        drifted.status = Some(
            serde_json::from_value(json!({"conditions": [{
                "type": NODE_CONDITION_DRIFT, "status": "True", "reason": "DriftReported",
            }]}))
            .unwrap(),
        );
        let mut repaired = node("c", "pool", Some("new"), None);
        repaired.status = Some(
            serde_json::from_value(json!({"conditions": [{
                "type": NODE_CONDITION_DRIFT, "status": "False", "reason": "NoDrift",
            }]}))
            .unwrap(),
        );
        let nodes = [node("a", "pool", Some("new"), None), drifted, repaired];
        let summary = summarize(&nodes, "pool", "k", "new");
        assert_eq!(summary.drifted, ["b"]);
        let complete = condition(&summary, "new", None, now());
        assert_eq!(complete.status, ConditionStatus::True);
        assert!(
            complete
                .message
                .ends_with("; 1 node(s) drifted from it (NodeAgentDrift): b"),
            "{}",
            complete.message
        );
    }

    #[test]
    fn a_pause_shows_done_and_waiting_nodes_unless_stopped_or_complete() {
        let nodes = [
            node("a", "pool", Some("new"), None),
            node("b", "pool", Some("old"), None),
            node("c", "pool", None, None),
        ];
        let mut summary = summarize(&nodes, "pool", "k", "new");
        summary.paused = Some("fixing".into());
        let paused = condition(&summary, "new", None, now());
        assert_eq!(
            (paused.status, paused.reason.as_str()),
            (ConditionStatus::Progressing, REASON_PAUSED)
        );
        assert!(
            paused.message.contains("1/3 nodes run") && paused.message.contains("2 waiting"),
            "{}",
            paused.message
        );
        assert!(paused.message.contains("\"fixing\""), "{}", paused.message);
        summary.stopped.push(StoppedNode {
            name: "b".into(),
            reason: "NotHealthy".into(),
            message: "m".into(),
        });
        assert_eq!(
            condition(&summary, "new", None, now()).reason,
            "RolloutStopped"
        );
        summary.stopped.clear();
        summary.current = summary.total;
        assert_eq!(
            condition(&summary, "new", None, now()).reason,
            "RolloutComplete"
        );
    }
}
