//! `render worker --impact` (pure): what a change from the previous to the new Worker does to
//! each pool, decided by the Worker controller's own functions on both Workers — its
//! validation ([`crate::controllers::worker::validate`]), its machine-class hash
//! ([`crate::controllers::worker::in_place::class_hash`], the suffix of the class names every
//! MachineDeployment points to) and its rendering.
//!
//! The verdict of a pool in both Workers:
//!
//! - `unchanged`: the class hash is the same, so the deployments keep their classes and
//!   machine-controller-manager replaces nothing (labels, taints and annotations reach the
//!   running machines through the deployment's node template);
//! - `in-place`: the class hash moved and the pool updates in place (`AutoInPlaceUpdate`,
//!   `ManualInPlaceUpdate`: its deployments have the `InPlaceUpdate` strategy, and for such a
//!   pool the class hash moves exactly when its in-place hash
//!   ([`crate::controllers::worker::in_place::update_hash`]) or gardenlet's node-agent secret
//!   name does);
//! - `roll`: the class hash moved in a rolling pool: new machines replace the old ones.
//!
//! A pool only in the new Worker is `new`, one only in the previous Worker `removed`.
//! The reasons are the changed fields ([`super::pool_fields`]); the notes say what else
//! follows: deployments created or deleted ([`super::deployments`]), changes Gardener would
//! refuse for an in-place pool, and a rolling pool whose `nodeAgentSecretName` stayed although
//! gardenlet derives a new one from what changed (a hand-edited Worker: the one gardenlet
//! writes rolls the pool).

use serde::Serialize;

use super::deployments;
use super::pool_fields::{self, Group, Reason};
use crate::api::cluster::ShootCredentialsView;
use crate::controllers::worker::in_place::{self, is_in_place};
use crate::controllers::worker::render::RenderedDeployment;
use crate::controllers::worker::validate::{PoolInputs, WorkerInputs};

/// What happens to a pool's machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// New machines replace the old ones.
    Roll,
    /// machine-controller-manager updates the machines where they are.
    InPlace,
    /// No machine is replaced or updated.
    Unchanged,
    /// The pool is added.
    New,
    /// The pool is removed.
    Removed,
}

impl Verdict {
    /// The word printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Roll => "roll",
            Verdict::InPlace => "in-place",
            Verdict::Unchanged => "unchanged",
            Verdict::New => "new",
            Verdict::Removed => "removed",
        }
    }
}

/// A hash before and after the change (`None` where the pool or the hash does not exist).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Hashes {
    /// In the previous Worker.
    pub previous: Option<String>,
    /// In the new Worker.
    pub new: Option<String>,
}

/// The impact on one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolImpact {
    /// Pool name.
    pub name: String,
    /// The verdict.
    pub impact: Verdict,
    /// The changed fields (for `new`/`removed`: the deployments created or deleted).
    pub reasons: Vec<Reason>,
    /// What else follows from the change.
    pub notes: Vec<String>,
    /// The machine-class hash, as the Worker controller computes it.
    pub class_hash: Hashes,
    /// The in-place hash of an in-place pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_place_hash: Option<Hashes>,
}

/// The impact on one Worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerImpact {
    /// Namespace of the Worker.
    pub namespace: String,
    /// Name of the Worker.
    pub name: String,
    /// Every pool: those of the new Worker in its order, then the removed ones.
    pub pools: Vec<PoolImpact>,
}

/// One side of the comparison: the validated Worker and what the controller renders for it.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// [`crate::controllers::worker::validate::validate`]'s result.
    pub inputs: &'a WorkerInputs,
    /// [`crate::controllers::worker::render::render`]'s result for it.
    pub rendered: &'a [RenderedDeployment],
}

impl Side<'_> {
    fn pool(&self, name: &str) -> Option<&PoolInputs> {
        self.inputs.pools.iter().find(|p| p.pool.name == name)
    }

    fn deployments(&self, pool: &str) -> Vec<&RenderedDeployment> {
        self.rendered.iter().filter(|d| d.pool == pool).collect()
    }
}

/// The impact of going from `previous` to `new`; `credentials` are the shoot's (the
/// Cluster's), as the controller hashes in-place pools with them.
pub fn impact(
    previous: Side<'_>,
    new: Side<'_>,
    credentials: Option<&ShootCredentialsView>,
) -> WorkerImpact {
    let mut pools = Vec::new();
    for pool in &new.inputs.pools {
        let name = &pool.pool.name;
        pools.push(match previous.pool(name) {
            Some(before) => changed_pool(before, pool, (previous, new), credentials),
            None => lone_pool(pool, &new.deployments(name), credentials, Verdict::New),
        });
    }
    for pool in &previous.inputs.pools {
        let name = &pool.pool.name;
        if new.pool(name).is_none() {
            pools.push(lone_pool(
                pool,
                &previous.deployments(name),
                credentials,
                Verdict::Removed,
            ));
        }
    }
    WorkerImpact {
        namespace: new.inputs.namespace.clone(),
        name: new.inputs.worker_name.clone(),
        pools,
    }
}

/// The verdict for a pool in both Workers (see the module docs).
pub fn verdict(previous: &PoolInputs, new: &PoolInputs) -> Verdict {
    if previous.hash == new.hash {
        Verdict::Unchanged
    } else if is_in_place(new.pool.update_strategy) {
        Verdict::InPlace
    } else {
        Verdict::Roll
    }
}

fn changed_pool(
    previous: &PoolInputs,
    new: &PoolInputs,
    (before, after): (Side<'_>, Side<'_>),
    credentials: Option<&ShootCredentialsView>,
) -> PoolImpact {
    let verdict = verdict(previous, new);
    let reasons = pool_fields::reasons(previous, new);
    let mut reasons = pool_fields::without_derived(reasons);
    if verdict != Verdict::Unchanged && !reasons.iter().any(|r| r.group == Group::Machine) {
        // The hash moved for something the pool does not show (e.g. a rotation in the Cluster).
        reasons.push(Reason::new("machine class hash", Group::Machine));
    }
    let in_place_hash = Hashes {
        previous: in_place_hash(previous, credentials),
        new: in_place_hash(new, credentials),
    };
    let name = &new.pool.name;
    let mut notes = notes(previous, new, &reasons, &in_place_hash);
    notes.extend(deployments::notes(
        &before.deployments(name),
        &after.deployments(name),
    ));
    PoolImpact {
        name: name.clone(),
        impact: verdict,
        reasons,
        notes,
        class_hash: Hashes {
            previous: Some(previous.hash.clone()),
            new: Some(new.hash.clone()),
        },
        in_place_hash: is_in_place(new.pool.update_strategy).then_some(in_place_hash),
    }
}

/// What the reasons alone do not say (see the module docs).
fn notes(
    previous: &PoolInputs,
    new: &PoolInputs,
    reasons: &[Reason],
    in_place_hash: &Hashes,
) -> Vec<String> {
    let mut notes = Vec::new();
    if is_in_place(new.pool.update_strategy) || is_in_place(previous.pool.update_strategy) {
        let refused = pool_fields::refused_for_in_place(previous, new, reasons);
        if !refused.is_empty() {
            notes.push(format!(
                "Gardener refuses this change of an in-place pool: {} cannot change (its machines cannot get it in place)",
                refused.join(", ")
            ));
        }
    } else if previous.pool.node_agent_secret_name == new.pool.node_agent_secret_name {
        let derived = pool_fields::derived_into_secret_name(
            reasons,
            in_place_hash.previous != in_place_hash.new,
        );
        if !derived.is_empty() {
            notes.push(format!(
                "nodeAgentSecretName is the same although {} changed: gardenlet derives that name from it, so the Worker gardenlet writes for this change has a new one and rolls the pool",
                derived.join(", ")
            ));
        }
    }
    if reasons.iter().any(|r| r.group == Group::Nodes)
        && verdict(previous, new) == Verdict::Unchanged
    {
        notes.push(
            "Kubernetes and kubelet changes reach the running nodes through their node-agent secret: preview them with `render osc --impact`"
                .to_string(),
        );
    }
    notes
}

/// The in-place hash of a pool as the controller computes it; `None` when the pool has none
/// (no valid `kubernetesVersion`, or a kubelet setting that is not a quantity: only rolling
/// pools get here with such a pool, validation refuses in-place ones).
fn in_place_hash(pool: &PoolInputs, credentials: Option<&ShootCredentialsView>) -> Option<String> {
    in_place::update_hash(&pool.pool, credentials).ok()
}

/// A pool in only one of the Workers: `Verdict::New` (in the new one; its deployments are
/// created) or `Verdict::Removed` (in the previous one; deleted with their machines).
fn lone_pool(
    pool: &PoolInputs,
    rendered: &[&RenderedDeployment],
    credentials: Option<&ShootCredentialsView>,
    impact: Verdict,
) -> PoolImpact {
    let added = impact == Verdict::New;
    let describe = if added {
        deployments::created
    } else {
        deployments::deleted
    };
    let side = |value: Option<String>| {
        if added {
            Hashes {
                previous: None,
                new: value,
            }
        } else {
            Hashes {
                previous: value,
                new: None,
            }
        }
    };
    PoolImpact {
        name: pool.pool.name.clone(),
        impact,
        reasons: only_deployments(rendered.iter().map(|d| describe(d))),
        notes: Vec::new(),
        class_hash: side(Some(pool.hash.clone())),
        in_place_hash: is_in_place(pool.pool.update_strategy)
            .then(|| side(in_place_hash(pool, credentials))),
    }
}

fn only_deployments(lines: impl Iterator<Item = String>) -> Vec<Reason> {
    lines
        .map(|line| Reason::new(line, Group::Machine))
        .collect()
}

impl PoolImpact {
    /// `<pool>: <verdict> — <reasons>`, then one line per note.
    pub fn text(&self) -> String {
        let mut text = format!("{}: {}", self.name, self.impact.as_str());
        let reasons = self.reason_text();
        if !reasons.is_empty() {
            text.push_str(" — ");
            text.push_str(&reasons);
        }
        text.push('\n');
        for note in &self.notes {
            text.push_str(&format!("  note: {note}\n"));
        }
        text
    }

    /// The reasons, comma-separated; where the machines stay, the labels, taints and
    /// annotations are followed by the remark that they reach the running machines.
    fn reason_text(&self) -> String {
        let remark = matches!(self.impact, Verdict::Unchanged | Verdict::InPlace);
        let last_running = self.reasons.iter().rposition(|r| r.group == Group::Running);
        let parts: Vec<String> = self
            .reasons
            .iter()
            .enumerate()
            .map(|(index, reason)| {
                if remark && Some(index) == last_running {
                    format!("{} (applied to the running machines)", reason.field)
                } else {
                    reason.field.clone()
                }
            })
            .collect();
        parts.join(", ")
    }
}

impl super::Impact for WorkerImpact {
    fn text(&self) -> String {
        self.pools.iter().map(PoolImpact::text).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Worker;
    use crate::controllers::worker::{render, validate};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn worker(pools: Vec<serde_json::Value>) -> Worker {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Worker",
            "metadata": {"name": "w", "namespace": "shoot--p--s"},
            "spec": {"type": "local", "region": "r", "secretRef": {"name": "cloudprovider"},
                     "pools": pools},
        }))
        .unwrap()
    }

    fn pool(name: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut pool = json!({
            "name": name, "machineType": "m", "minimum": 1, "maximum": 2,
            "maxSurge": 1, "maxUnavailable": 0, "zones": ["z1"],
            "machineImage": {"name": "debian", "version": "13.1"},
            "providerConfig": {"apiVersion": "node.extensions.config.gardener.cloud/v1alpha1",
                               "kind": "WorkerConfig", "image": "registry/machine:1"},
            "userDataSecretRef": {"name": "u", "key": "k"},
            "nodeAgentSecretName": format!("gna-{name}-1"), "kubernetesVersion": "1.36.1",
        });
        if let (Some(pool), Some(extra)) = (pool.as_object_mut(), extra.as_object()) {
            pool.extend(extra.clone());
        }
        pool
    }

    fn impact_of(previous: &Worker, new: &Worker) -> WorkerImpact {
        let inputs = |w: &Worker| validate::validate(w, "shoot--p--s", None, None).unwrap();
        let (before, after) = (inputs(previous), inputs(new));
        let rendered = |i: &WorkerInputs| render::render(i, &BTreeMap::new());
        let (before_rendered, after_rendered) = (rendered(&before), rendered(&after));
        impact(
            Side {
                inputs: &before,
                rendered: &before_rendered,
            },
            Side {
                inputs: &after,
                rendered: &after_rendered,
            },
            None,
        )
    }

    fn one(previous: serde_json::Value, new: serde_json::Value) -> PoolImpact {
        let found = impact_of(&worker(vec![previous]), &worker(vec![new]));
        assert_eq!(found.pools.len(), 1);
        found.pools[0].clone()
    }

    #[test]
    fn a_new_image_version_with_gardenlets_new_secret_name_rolls() {
        let found = one(
            pool("a", json!({})),
            pool(
                "a",
                json!({"machineImage": {"name": "debian", "version": "13.2"}, "nodeAgentSecretName": "gna-a-2"}),
            ),
        );
        assert_eq!(found.impact, Verdict::Roll);
        assert_eq!(
            found.text(),
            "a: roll — machine image version, node-agent secret name\n"
        );
        assert_ne!(found.class_hash.previous, found.class_hash.new);
        assert_eq!(found.in_place_hash, None, "a rolling pool");
    }

    #[test]
    fn labels_and_taints_alone_leave_the_machines() {
        let found = one(
            pool("a", json!({})),
            pool(
                "a",
                json!({"labels": {"team": "x"}, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}),
            ),
        );
        assert_eq!(found.impact, Verdict::Unchanged);
        assert_eq!(
            found.text(),
            "a: unchanged — labels, taints (applied to the running machines)\n"
        );
        assert_eq!(found.class_hash.previous, found.class_hash.new);
    }

    #[test]
    fn an_in_place_pool_with_a_new_image_version_is_updated_in_place() {
        let in_place = |version: &str| {
            pool(
                "a",
                json!({"updateStrategy": "AutoInPlaceUpdate",
                       "machineImage": {"name": "debian", "version": version}}),
            )
        };
        let found = one(in_place("13.1"), in_place("13.2"));
        assert_eq!(found.impact, Verdict::InPlace);
        assert_eq!(found.text(), "a: in-place — machine image version\n");
        let hashes = found.in_place_hash.unwrap();
        assert_ne!(hashes.previous, hashes.new);
        assert!(hashes.previous.is_some());
    }

    #[test]
    fn an_in_place_pool_with_a_forbidden_change_says_gardener_refuses_it() {
        let in_place = |machine_type: &str| {
            pool(
                "a",
                json!({"updateStrategy": "ManualInPlaceUpdate", "machineType": machine_type}),
            )
        };
        let found = one(in_place("m"), in_place("m2"));
        assert_eq!(found.impact, Verdict::Unchanged, "the class hash stays");
        assert_eq!(
            found.notes,
            [
                "Gardener refuses this change of an in-place pool: machine type cannot change (its machines cannot get it in place)"
            ]
        );
    }

    #[test]
    fn a_kept_secret_name_on_a_machine_change_is_pointed_out() {
        let found = one(
            pool("a", json!({})),
            pool(
                "a",
                json!({"machineImage": {"name": "debian", "version": "13.2"}}),
            ),
        );
        assert_eq!(found.impact, Verdict::Unchanged);
        assert_eq!(
            found.text(),
            "a: unchanged — machine image version\n  note: nodeAgentSecretName is the same although machine image version changed: gardenlet derives that name from it, so the Worker gardenlet writes for this change has a new one and rolls the pool\n"
        );
        // A Kubernetes patch version is not derived into the name: the nodes get it.
        let found = one(
            pool("a", json!({})),
            pool("a", json!({"kubernetesVersion": "1.36.2"})),
        );
        assert_eq!(
            found.text(),
            "a: unchanged — Kubernetes version\n  note: Kubernetes and kubelet changes reach the running nodes through their node-agent secret: preview them with `render osc --impact`\n"
        );
    }

    #[test]
    fn an_image_override_rolls_the_pool() {
        let mut changed = pool("a", json!({}));
        changed["providerConfig"]["image"] = json!("registry/machine:2");
        let found = one(pool("a", json!({})), changed);
        assert_eq!(found.impact, Verdict::Roll);
        assert_eq!(found.text(), "a: roll — providerConfig image override\n");
    }

    #[test]
    fn pools_only_on_one_side_are_new_or_removed() {
        let found = impact_of(
            &worker(vec![pool("a", json!({})), pool("gone", json!({}))]),
            &worker(vec![
                pool("a", json!({})),
                pool("b", json!({"zones": ["z1", "z2"]})),
            ]),
        );
        let text: String = found.pools.iter().map(PoolImpact::text).collect();
        assert_eq!(
            text,
            "a: unchanged\n\
             b: new — machine deployment shoot--p--s-b-z1 (zone z1) is created, machine deployment shoot--p--s-b-z2 (zone z2) is created\n\
             gone: removed — machine deployment shoot--p--s-gone-z1 (zone z1) is deleted with its machines\n"
        );
        assert_eq!(found.pools[1].class_hash.previous, None);
        assert_eq!(found.pools[2].class_hash.new, None);
    }

    #[test]
    fn a_zone_added_creates_a_deployment_and_keeps_the_machines() {
        let found = one(
            pool("a", json!({})),
            pool("a", json!({"zones": ["z1", "z2"]})),
        );
        assert_eq!(
            found.text(),
            "a: unchanged — zones\n  note: machine deployment shoot--p--s-a-z2 (zone z2) is created\n"
        );
    }

    #[test]
    fn the_json_names_the_verdict_reasons_notes_and_hashes() {
        let found = impact_of(
            &worker(vec![pool("a", json!({}))]),
            &worker(vec![pool("a", json!({"labels": {"team": "x"}}))]),
        );
        let value = serde_json::to_value(&found).unwrap();
        let hash = found.pools[0].class_hash.new.clone().unwrap();
        assert_eq!(
            value,
            json!({"namespace": "shoot--p--s", "name": "w", "pools": [{
                "name": "a", "impact": "unchanged", "reasons": ["labels"], "notes": [],
                "classHash": {"previous": hash, "new": hash},
            }]})
        );
        let in_place = |version: &str| {
            pool(
                "a",
                json!({"updateStrategy": "AutoInPlaceUpdate",
                       "machineImage": {"name": "debian", "version": version}}),
            )
        };
        let found = impact_of(
            &worker(vec![in_place("13.1")]),
            &worker(vec![in_place("13.2")]),
        );
        let value = serde_json::to_value(&found).unwrap();
        assert_eq!(value["pools"][0]["impact"], "in-place");
        assert!(value["pools"][0]["inPlaceHash"]["new"].is_string());
    }
}
