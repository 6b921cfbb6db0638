//! What happens to a pool's machine deployments and classes (pure), from the objects the
//! Worker controller renders ([`crate::controllers::worker::render`]) before and after the
//! change: deployments that are created or deleted (a pool added or removed, a zone added or
//! removed), a deployment that stands for another zone, and a machine class whose content
//! changes under the same name. machine-controller-manager replaces machines only when a
//! deployment names another class, so the last two leave the running machines as they are.
//! Used by [`super::worker`] for its notes.

use crate::controllers::worker::render::RenderedDeployment;

/// The notes for one pool: `previous` and `new` are the pool's rendered deployments before
/// and after (empty for a pool that is added or removed).
pub fn notes(previous: &[&RenderedDeployment], new: &[&RenderedDeployment]) -> Vec<String> {
    let mut notes = Vec::new();
    for deployment in new.iter().filter(|d| find(previous, &d.name).is_none()) {
        notes.push(created(deployment));
    }
    for deployment in previous.iter().filter(|d| find(new, &d.name).is_none()) {
        notes.push(deleted(deployment));
    }
    for after in new {
        if let Some(before) = find(previous, &after.name) {
            notes.extend(changed(before, after));
        }
    }
    notes
}

/// The deployment called `name` in `list`.
fn find<'a>(list: &[&'a RenderedDeployment], name: &str) -> Option<&'a RenderedDeployment> {
    list.iter().find(|d| d.name == name).copied()
}

/// A deployment only in the new Worker.
pub fn created(deployment: &RenderedDeployment) -> String {
    format!(
        "machine deployment {} (zone {}) is created",
        deployment.name, deployment.zone
    )
}

/// A deployment only in the previous Worker.
pub fn deleted(deployment: &RenderedDeployment) -> String {
    format!(
        "machine deployment {} (zone {}) is deleted with its machines",
        deployment.name, deployment.zone
    )
}

/// A deployment in both: another zone or class content under the same class name.
fn changed(before: &RenderedDeployment, after: &RenderedDeployment) -> Vec<String> {
    if before.class_name != after.class_name {
        return Vec::new();
    }
    let mut notes = Vec::new();
    if before.zone != after.zone {
        notes.push(format!(
            "machine deployment {} stands for zone {} now (was {}) under the same machine class name: its running machines are not replaced",
            after.name, after.zone, before.zone
        ));
    }
    if before.class != after.class {
        notes.push(format!(
            "machine class {} changes under the same name: running machines keep what they were created with, machines created from now on get the change",
            after.class_name
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::machine::{MachineClass, MachineClassFields, MachineDeployment};
    use k8s_openapi::api::core::v1::Secret;
    use serde_json::json;

    fn deployment(name: &str, zone: &str, class: &str, image: &str) -> RenderedDeployment {
        RenderedDeployment {
            name: name.into(),
            pool: "a".into(),
            zone: zone.into(),
            class_name: class.into(),
            minimum: 1,
            maximum: 1,
            priority: None,
            auto_preserve_failed_machine_max: None,
            class_secret: Secret::default(),
            class: MachineClass::new(
                class,
                MachineClassFields {
                    provider_spec: json!({"image": image}),
                    secret_ref: None,
                    credentials_secret_ref: None,
                    provider: None,
                    node_template: None,
                },
            ),
            deployment: serde_json::from_value::<MachineDeployment>(
                json!({"metadata": {"name": name}, "spec": {"template": {}}}),
            )
            .unwrap(),
        }
    }

    #[test]
    fn created_and_deleted_deployments() {
        let z1 = deployment("t-a-z1", "z1", "t-a-z1-h", "i");
        let z2 = deployment("t-a-z2", "z2", "t-a-z2-h", "i");
        assert_eq!(
            notes(&[&z1], &[&z1, &z2]),
            ["machine deployment t-a-z2 (zone z2) is created"]
        );
        assert_eq!(
            notes(&[&z1, &z2], &[&z1]),
            ["machine deployment t-a-z2 (zone z2) is deleted with its machines"]
        );
        assert!(notes(&[&z1], &[&z1]).is_empty());
    }

    #[test]
    fn a_deployment_under_the_same_class_name_keeps_its_machines() {
        let before = deployment("t-a-z1", "z1", "t-a-z1-h", "i1");
        let after = deployment("t-a-z1", "z2", "t-a-z1-h", "i2");
        assert_eq!(
            notes(&[&before], &[&after]),
            [
                "machine deployment t-a-z1 stands for zone z2 now (was z1) under the same machine class name: its running machines are not replaced",
                "machine class t-a-z1-h changes under the same name: running machines keep what they were created with, machines created from now on get the change",
            ]
        );
        // A new class name is the roll itself: nothing to add.
        let rolled = deployment("t-a-z1", "z1", "t-a-z1-k", "i2");
        assert!(notes(&[&before], &[&rolled]).is_empty());
    }
}
