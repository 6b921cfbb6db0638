//! Is the rollout done? (pure) — the check of Gardener's
//! `waitUntilWantedMachineDeploymentsAvailable`, evaluated on one snapshot of the
//! MachineDeployments and MachineSets so the operator can poll it with requeues instead of
//! blocking a worker thread.
//!
//! For every wanted deployment:
//!
//! - failed machines in its status fail the operation at once, with the machines' names and
//!   the errors machine-controller-manager reported for them;
//! - when hibernated, only the sum of `status.replicas` matters: done when it is 0;
//! - otherwise a MachineSet of the deployment (owner reference, or label `name` for sets
//!   restored without owner) must reference the wanted class (machine-controller-manager has
//!   started the rollout), the deployment must be healthy (`observedGeneration` current,
//!   `Available=True`, `Progressing` not false, `ReplicaFailure`/`Frozen` not true), and over
//!   all deployments no replica may be unavailable and every machine must be updated.
//!   Failed machines that machine-controller-manager preserves (`autoPreserveFailedMachineMax`,
//!   `status.preservedFailedReplicas`) stay unavailable on purpose, so up to that many
//!   unavailable replicas are tolerated, as the generic actuator does.
//! - a `ManualInPlaceUpdate` deployment ([`in_place::manual_rollout`]) counts the machines of
//!   its old machine sets as done until the user selects them; machines selected for or in
//!   an update (MCM's `InPlaceUpdate` condition beyond `CandidateForUpdate`) are waited for.

use super::in_place;
use super::machine_sets::{belongs_to, set_class};
use crate::api::machine::{Machine, MachineDeployment, MachineDeploymentStatus, MachineSet};

/// A wanted deployment and the class it must run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// Deployment name.
    pub name: &'a str,
    /// MachineClass name.
    pub class_name: &'a str,
}

/// Result of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Everything is rolled out (or hibernated).
    Complete,
    /// Not yet; the text says what is missing.
    Waiting(String),
    /// Machines failed; the text lists them with their errors.
    Failed(String),
}

/// The failed machines of a deployment, grouped by their error, or `None`.
pub fn failed_machines(name: &str, status: &MachineDeploymentStatus) -> Option<String> {
    if status.failed_machines.is_empty() {
        return None;
    }
    let mut by_error: Vec<(String, Vec<String>)> = Vec::new();
    for machine in &status.failed_machines {
        let error = machine
            .last_operation
            .as_ref()
            .and_then(|o| o.description.clone())
            .unwrap_or_else(|| "no description".to_string());
        let machine_name = format!("{:?}", machine.name.as_deref().unwrap_or("?"));
        match by_error.iter_mut().find(|(e, _)| *e == error) {
            Some((_, names)) => names.push(machine_name),
            None => by_error.push((error, vec![machine_name])),
        }
    }
    let parts: Vec<String> = by_error
        .into_iter()
        .map(|(error, names)| format!("{}: {error}", names.join(", ")))
        .collect();
    Some(format!("machine(s) of {name} failed: {}", parts.join("; ")))
}

/// Why a deployment is not healthy, or `Ok`.
pub fn check_health(deployment: &MachineDeployment) -> Result<(), String> {
    let status = deployment.status.clone().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or_default();
    let observed = status.observed_generation.unwrap_or_default();
    if observed < generation {
        return Err(format!(
            "observed generation outdated ({observed}/{generation})"
        ));
    }
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    match condition("Available") {
        None => return Err("condition Available is missing".to_string()),
        Some(c) if c.status != "True" => {
            return Err(format!(
                "condition Available is {}: {}",
                c.status,
                c.message.as_deref().unwrap_or_default()
            ));
        }
        Some(_) => {}
    }
    if let Some(c) = condition("Progressing").filter(|c| c.status != "True") {
        return Err(format!(
            "condition Progressing is {}: {}",
            c.status,
            c.message.as_deref().unwrap_or_default()
        ));
    }
    for bad in ["ReplicaFailure", "Frozen"] {
        if let Some(c) = condition(bad).filter(|c| c.status == "True") {
            return Err(format!(
                "condition {bad} is True: {}",
                c.message.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// Evaluates the rollout of `wanted` on a snapshot of the namespace's deployments, sets and
/// machines (the machines matter only for `ManualInPlaceUpdate` deployments).
pub fn evaluate(
    wanted: &[Wanted<'_>],
    deployments: &[MachineDeployment],
    sets: &[MachineSet],
    machines: &[Machine],
    hibernated: bool,
) -> Rollout {
    let (mut healthy, mut desired, mut updated, mut available, mut unavailable, mut awake) =
        (0usize, 0, 0, 0, 0, 0);
    let mut preserved = 0;
    let mut manual = in_place::ManualCounts::default();
    let mut first_problem: Option<String> = None;
    for want in wanted {
        let Some(deployment) = deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(want.name))
        else {
            return Rollout::Waiting(format!("MachineDeployment {} not found yet", want.name));
        };
        let status = deployment.status.clone().unwrap_or_default();
        if let Some(failed) = failed_machines(want.name, &status) {
            return Rollout::Failed(failed);
        }
        awake += status.replicas.unwrap_or_default();
        if hibernated {
            continue;
        }
        let has_new_set = sets
            .iter()
            .any(|s| belongs_to(s, want.name) && set_class(s) == Some(want.class_name));
        if !has_new_set {
            return Rollout::Waiting(format!(
                "waiting for machine-controller-manager to create the machine set with class {} for {}",
                want.class_name, want.name
            ));
        }
        match check_health(deployment) {
            Ok(()) => healthy += 1,
            Err(problem) => {
                first_problem.get_or_insert_with(|| format!("{}: {problem}", want.name));
            }
        }
        if in_place::is_manual_in_place(deployment) {
            let counts = in_place::manual_rollout(want.name, want.class_name, sets, machines);
            manual.need_update += counts.need_update;
            manual.in_progress += counts.in_progress;
        }
        desired += deployment.spec.replicas.unwrap_or_default();
        updated += status.updated_replicas.unwrap_or_default();
        available += status.available_replicas.unwrap_or_default();
        unavailable += status.unavailable_replicas.unwrap_or_default();
        preserved += status.preserved_failed_replicas.unwrap_or_default();
    }
    if hibernated {
        return if awake == 0 {
            Rollout::Complete
        } else {
            Rollout::Waiting(format!(
                "waiting until all machines are hibernated ({awake} still awake)"
            ))
        };
    }
    // Machines of a manual in-place pool that no user selected yet count as updated.
    let updated = updated + manual.need_update;
    if unavailable <= preserved
        && updated == awake
        && healthy == wanted.len()
        && manual.in_progress == 0
    {
        return Rollout::Complete;
    }
    if manual.in_progress > 0 {
        return Rollout::Waiting(format!(
            "waiting until {} machine(s) selected for a manual in-place update are updated",
            manual.in_progress
        ));
    }
    let mut message = format!(
        "waiting until machines are available ({available}/{desired} desired machine(s) available, {updated}/{awake} machine(s) updated, {} machine(s) pending, {healthy}/{} machine deployments healthy)",
        unavailable - unavailable.min(preserved),
        wanted.len()
    );
    if let Some(problem) = first_problem {
        message.push_str("; ");
        message.push_str(&problem);
    }
    Rollout::Waiting(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn deployment(name: &str, class: &str, status: Value) -> MachineDeployment {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineDeployment",
            "metadata": {"name": name, "generation": 2},
            "spec": {"replicas": 2, "template": {"spec": {"class": {"kind": "MachineClass", "name": class}}}},
            "status": status,
        }))
        .unwrap()
    }

    fn healthy_status() -> Value {
        json!({
            "observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "readyReplicas": 2, "unavailableReplicas": 0,
            "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "True"}
            ]
        })
    }

    fn set(name: &str, owner: Option<&str>, label: Option<&str>, class: &str) -> MachineSet {
        let mut metadata = json!({"name": name});
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([{
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
                "name": owner, "uid": "u"
            }]);
        }
        if let Some(label) = label {
            metadata["labels"] = json!({"name": label});
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
            "metadata": metadata,
            "spec": {"template": {"spec": {"class": {"kind": "MachineClass", "name": class}}}},
        }))
        .unwrap()
    }

    const WANTED: [Wanted<'static>; 1] = [Wanted {
        name: "md",
        class_name: "md-new",
    }];

    #[test]
    fn complete_when_healthy_and_updated_with_the_new_class() {
        let mds = [deployment("md", "md-new", healthy_status())];
        let sets = [set("md-1", Some("md"), None, "md-new")];
        assert_eq!(
            evaluate(&WANTED, &mds, &sets, &[], false),
            Rollout::Complete
        );
    }

    #[test]
    fn restored_sets_count_through_their_name_label() {
        let mds = [deployment("md", "md-new", healthy_status())];
        let sets = [set("md-1", None, Some("md"), "md-new")];
        assert_eq!(
            evaluate(&WANTED, &mds, &sets, &[], false),
            Rollout::Complete
        );
    }

    #[test]
    fn waits_for_the_machine_set_of_the_new_class() {
        let mds = [deployment("md", "md-new", healthy_status())];
        let sets = [set("md-0", Some("md"), None, "md-old")];
        match evaluate(&WANTED, &mds, &sets, &[], false) {
            Rollout::Waiting(text) => assert!(text.contains("class md-new"), "{text}"),
            other => panic!("{other:?}"),
        }
        // A set of another deployment does not count.
        let sets = [set("x-1", Some("other"), None, "md-new")];
        assert!(matches!(
            evaluate(&WANTED, &mds, &sets, &[], false),
            Rollout::Waiting(_)
        ));
    }

    #[test]
    fn waits_while_old_machines_remain_or_replicas_are_unavailable() {
        let sets = [set("md-1", Some("md"), None, "md-new")];
        let mut status = healthy_status();
        status["replicas"] = json!(3);
        let mds = [deployment("md", "md-new", status)];
        match evaluate(&WANTED, &mds, &sets, &[], false) {
            Rollout::Waiting(text) => assert!(text.contains("2/3 machine(s) updated"), "{text}"),
            other => panic!("{other:?}"),
        }
        let mut status = healthy_status();
        status["unavailableReplicas"] = json!(1);
        let mds = [deployment("md", "md-new", status)];
        assert!(matches!(
            evaluate(&WANTED, &mds, &sets, &[], false),
            Rollout::Waiting(_)
        ));
    }

    #[test]
    fn unhealthy_deployments_are_named() {
        let sets = [set("md-1", Some("md"), None, "md-new")];
        let mut status = healthy_status();
        status["observedGeneration"] = json!(1);
        let mds = [deployment("md", "md-new", status)];
        match evaluate(&WANTED, &mds, &sets, &[], false) {
            Rollout::Waiting(text) => {
                assert!(
                    text.contains("md: observed generation outdated (1/2)"),
                    "{text}"
                )
            }
            other => panic!("{other:?}"),
        }
        let mut status = healthy_status();
        status["conditions"][0]["status"] = json!("False");
        assert!(check_health(&deployment("md", "c", status)).is_err());
        let mut status = healthy_status();
        status["conditions"] = json!([
            {"type": "Available", "status": "True"},
            {"type": "Frozen", "status": "True", "message": "frozen"}
        ]);
        assert_eq!(
            check_health(&deployment("md", "c", status)),
            Err("condition Frozen is True: frozen".to_string())
        );
    }

    #[test]
    fn failed_machines_fail_with_their_errors() {
        let mut status = healthy_status();
        status["failedMachines"] = json!([
            {"name": "m1", "lastOperation": {"description": "quota exceeded"}},
            {"name": "m2", "lastOperation": {"description": "quota exceeded"}},
            {"name": "m3", "lastOperation": {"description": "bad image"}}
        ]);
        let mds = [deployment("md", "md-new", status)];
        assert_eq!(
            evaluate(&WANTED, &mds, &[], &[], false),
            Rollout::Failed(
                "machine(s) of md failed: \"m1\", \"m2\": quota exceeded; \"m3\": bad image".into()
            )
        );
    }

    #[test]
    fn hibernation_waits_for_zero_replicas_only() {
        let mut status = healthy_status();
        status["replicas"] = json!(1);
        let mds = [deployment("md", "md-new", status)];
        assert_eq!(
            evaluate(&WANTED, &mds, &[], &[], true),
            Rollout::Waiting("waiting until all machines are hibernated (1 still awake)".into())
        );
        let mds = [deployment("md", "md-new", json!({"replicas": 0}))];
        assert_eq!(evaluate(&WANTED, &mds, &[], &[], true), Rollout::Complete);
    }

    #[test]
    fn preserved_failed_machines_are_tolerated_as_unavailable() {
        let sets = [set("md-1", Some("md"), None, "md-new")];
        let mut status = healthy_status();
        status["unavailableReplicas"] = json!(1);
        status["preservedFailedReplicas"] = json!(1);
        let mds = [deployment("md", "md-new", status.clone())];
        assert_eq!(
            evaluate(&WANTED, &mds, &sets, &[], false),
            Rollout::Complete
        );
        status["unavailableReplicas"] = json!(2);
        let mds = [deployment("md", "md-new", status)];
        match evaluate(&WANTED, &mds, &sets, &[], false) {
            Rollout::Waiting(text) => assert!(text.contains("1 machine(s) pending"), "{text}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn manual_in_place_waits_only_for_selected_machines() {
        let mut status = healthy_status();
        status["replicas"] = json!(2);
        status["updatedReplicas"] = json!(0);
        let mut md = deployment("md", "md-new", status);
        md.spec.strategy = serde_json::from_value(json!({
            "type": "InPlaceUpdate", "inPlaceUpdate": {"orchestrationType": "Manual"}
        }))
        .unwrap();
        let mut old = set("md-0", Some("md"), None, "md-old");
        old.status = serde_json::from_value(json!({"replicas": 2})).unwrap();
        let sets = [set("md-1", Some("md"), None, "md-new"), old];
        let machine = |name: &str, reason: Option<&str>| -> Machine {
            let mut value = json!({
                "metadata": {"name": name, "ownerReferences": [{
                    "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                    "name": "md-0", "uid": "u"
                }]},
                "spec": {},
            });
            if let Some(reason) = reason {
                value["status"] = json!({"conditions": [
                    {"type": "InPlaceUpdate", "status": "True", "reason": reason}
                ]});
            }
            serde_json::from_value(value).unwrap()
        };
        let mds = [md];
        // Not selected (no condition, or only a candidate): nothing to wait for.
        let machines = [machine("a", None), machine("b", Some("CandidateForUpdate"))];
        assert_eq!(
            evaluate(&WANTED, &mds, &sets, &machines, false),
            Rollout::Complete
        );
        // Selected by the user: waited for.
        let machines = [machine("a", Some("SelectedForUpdate")), machine("b", None)];
        assert_eq!(
            evaluate(&WANTED, &mds, &sets, &machines, false),
            Rollout::Waiting(
                "waiting until 1 machine(s) selected for a manual in-place update are updated"
                    .into()
            )
        );
    }

    #[test]
    fn a_missing_deployment_is_waited_for() {
        assert!(matches!(
            evaluate(&WANTED, &[], &[], &[], false),
            Rollout::Waiting(_)
        ));
    }
}
