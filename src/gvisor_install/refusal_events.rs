//! Tells the shoot's users why a profile is missing on a node: a Warning Event
//! `GVisorProfileRefused` on the Node (shown by `kubectl describe node` beside kubelet's),
//! one per refused profile and installer start, published with the pod's service account
//! (`--node-name` from the downward API; the DaemonSet mounts a token only for pools with a
//! `kvm` profile, the only reason a profile is refused, and the shoot's Role allows creating
//! and patching events in `default`, where Node events live). A failure to publish is logged
//! and never fails the run: the refusal is also in the installer's log (`action=refused`).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The reason of the event.
pub const REASON: &str = "GVisorProfileRefused";
/// The reporting controller.
const REPORTER: &str = "gardener-extension-node-gvisor-install";

/// A refused profile (`None`: the default one) and why.
pub(super) type Refused = (Option<String>, String);

/// The note of the event about `profile`.
pub fn note(profile: Option<&str>, reason: &str) -> String {
    let profile = profile.unwrap_or("default");
    format!(
        "gVisor profile {profile} is not installed on this node: {reason}; pods of its RuntimeClass cannot start here"
    )
}

/// Publishes one Warning event per refused profile on Node `node`; logs what failed.
pub(super) async fn publish(node: &str, refused: &[Refused]) {
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            tracing::warn!(error = %crate::error_chain::printable(&error), "no API access to publish the refusal as an event (the log above has it)");
            return;
        }
    };
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: REPORTER.to_string(),
            instance: Some(node.to_string()),
        },
    );
    // kubelet refers to its Node with the name as UID, so `kubectl describe node` lists
    // these events with kubelet's (a GET of the Node would need a grant the pod lacks).
    let reference = ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Node".to_string()),
        name: Some(node.to_string()),
        uid: Some(node.to_string()),
        ..ObjectReference::default()
    };
    for (profile, reason) in refused {
        let event = Event {
            type_: EventType::Warning,
            reason: REASON.to_string(),
            note: Some(note(profile.as_deref(), reason)),
            action: "Install".to_string(),
            secondary: None,
        };
        match recorder.publish(&event, &reference).await {
            Ok(()) => tracing::info!(
                action = "reported",
                profile = profile.as_deref().unwrap_or("default"),
                node,
                reason = REASON,
                "refusal published as an event on the Node"
            ),
            Err(error) => {
                tracing::warn!(error = %crate::error_chain::printable(&error), "publishing the refusal as an event failed (the log above has it)")
            }
        }
    }
}
