//! Test support: a stand-in for machine-controller-manager's node-side in-place update
//! protocol (GEP-31), played on real Node objects so the node agent can be driven through an
//! in-place update without MCM, Machines or MachineSets. It is a stand-in, not MCM: it does
//! only what the Node shows of MCM's work, in MCM's order and with MCM's keys.
//!
//! What it follows (gardener/machine-controller-manager):
//! - keys: `pkg/apis/machine/v1alpha1/machine_types.go` (Node condition type `InPlaceUpdate`,
//!   reasons `CandidateForUpdate`, `SelectedForUpdate`, `ReadyForUpdate`, `UpdateSuccessful`,
//!   `UpdateFailed`) and the labels file (`node.machine.sapcloud.io/candidate-for-update`,
//!   `selected-for-update`, `update-result`, annotation `update-failed-reason`);
//! - `pkg/controller/deployment_inplace.go`: every node of the old machine set is labelled
//!   candidate; nodes are selected one at a time within `maxUnavailable` (here 1) and only
//!   while no selected node is still updating or failed; after success the node's
//!   candidate/selected/update-result labels and the failure annotation are removed and the
//!   node is uncordoned (`syncMachineSets`);
//! - the machine controller's in-place steps: a selected node is cordoned and drained, then
//!   gets `ReadyForUpdate`; the agent's `update-result` label turns the condition into
//!   `UpdateSuccessful` or `UpdateFailed`. A failed node keeps its labels and stays cordoned.
//!
//! Not played: machine sets and ownership transfer, the drain itself (there are no workloads
//! to evict), the `PreferNoSchedule` and critical-components taints.
//!
//! Why it remains: `test/in_place_e2e.rs` drives the agent through cases the real MCM only
//! reaches with a working OS update on a real image (an OS update needing a reboot, a refused
//! update, a CA rotation); the real MCM's in-place flow with our agent runs in
//! `test/machines_e2e.rs` (`make e2e-machines-lifecycle`).

#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

/// Node condition type.
pub const CONDITION: &str = "InPlaceUpdate";
/// Candidate label.
pub const LABEL_CANDIDATE: &str = "node.machine.sapcloud.io/candidate-for-update";
/// Selected label.
pub const LABEL_SELECTED: &str = "node.machine.sapcloud.io/selected-for-update";
/// Result label (written by the node agent).
pub const LABEL_RESULT: &str = "node.machine.sapcloud.io/update-result";
/// Failure reason annotation (written by the node agent).
pub const ANNOTATION_FAILED_REASON: &str = "node.machine.sapcloud.io/update-failed-reason";

/// What became of one node's update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `update-result=successful`; the node was cleaned up and uncordoned.
    Successful,
    /// `update-result=failed` with the agent's reason.
    Failed(String),
}

async fn set_condition(client: &Client, node: &str, reason: &str, message: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = if reason == "UpdateFailed" {
        "False"
    } else {
        "True"
    };
    let patch = json!({"status": {"conditions": [{
        "type": CONDITION, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": now, "lastHeartbeatTime": now,
    }]}});
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap_or_else(|e| panic!("condition {reason} on {node}: {e}"));
}

async fn patch(client: &Client, node: &str, patch: serde_json::Value) {
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching {node}: {e}"));
}

/// The `InPlaceUpdate` condition's reason on `node`.
pub async fn condition_reason(client: &Client, node: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(node).await.ok()?;
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == CONDITION)?
        .reason
}

/// Labels `node` candidate for update (MCM: every node of an old machine set).
pub async fn mark_candidate(client: &Client, node: &str) {
    patch(
        client,
        node,
        json!({"metadata": {"labels": {LABEL_CANDIDATE: "true"}}}),
    )
    .await;
    set_condition(
        client,
        node,
        "CandidateForUpdate",
        "node is a candidate for an in-place update",
    )
    .await;
}

/// Selects `node` and cordons it.
pub async fn select(client: &Client, node: &str) {
    patch(
        client,
        node,
        json!({"metadata": {"labels": {LABEL_SELECTED: "true"}}, "spec": {"unschedulable": true}}),
    )
    .await;
    set_condition(
        client,
        node,
        "SelectedForUpdate",
        "node is selected for an in-place update",
    )
    .await;
}

/// The drain is done: the node agent may update.
pub async fn ready_for_update(client: &Client, node: &str) {
    set_condition(
        client,
        node,
        "ReadyForUpdate",
        "node drained; ready for the in-place update",
    )
    .await;
}

/// Waits for the agent's `update-result` on `node`, then plays MCM's answer: on success
/// `UpdateSuccessful`, the in-place labels and the failure annotation removed, uncordoned;
/// on failure `UpdateFailed` (labels kept, still cordoned).
pub async fn await_result(client: &Client, node: &str, timeout: Duration) -> Outcome {
    let api = Api::<Node>::all(client.clone());
    let started = std::time::Instant::now();
    let (result, reason) = loop {
        let current = api.get(node).await.unwrap();
        let labels = current.metadata.labels.unwrap_or_default();
        if let Some(result) = labels.get(LABEL_RESULT) {
            let reason = current
                .metadata
                .annotations
                .unwrap_or_default()
                .get(ANNOTATION_FAILED_REASON)
                .cloned()
                .unwrap_or_default();
            break (result.clone(), reason);
        }
        assert!(
            started.elapsed() < timeout,
            "no update-result on {node} within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    match result.as_str() {
        "successful" => {
            set_condition(
                client,
                node,
                "UpdateSuccessful",
                "node updated in place successfully",
            )
            .await;
            patch(
                client,
                node,
                json!({
                    "metadata": {
                        "labels": {LABEL_CANDIDATE: null, LABEL_SELECTED: null, LABEL_RESULT: null},
                        "annotations": {ANNOTATION_FAILED_REASON: null},
                    },
                    "spec": {"unschedulable": null},
                }),
            )
            .await;
            Outcome::Successful
        }
        "failed" => {
            set_condition(client, node, "UpdateFailed", &reason).await;
            Outcome::Failed(reason)
        }
        other => panic!("unexpected update-result {other:?} on {node}"),
    }
}

/// Rolls `nodes` one at a time (maxUnavailable 1): all become candidates, then each is
/// selected, made ready and awaited. A failed node stops the rollout: no further node is
/// selected. Returns the outcome per node updated (in order).
pub async fn roll(client: &Client, nodes: &[String], timeout: Duration) -> Vec<(String, Outcome)> {
    for node in nodes {
        mark_candidate(client, node).await;
    }
    let mut outcomes = Vec::new();
    for node in nodes {
        select(client, node).await;
        ready_for_update(client, node).await;
        let outcome = await_result(client, node, timeout).await;
        let failed = matches!(outcome, Outcome::Failed(_));
        outcomes.push((node.clone(), outcome));
        if failed {
            break;
        }
    }
    outcomes
}
