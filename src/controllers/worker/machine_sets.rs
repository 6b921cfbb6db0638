//! Which MachineDeployment a MachineSet belongs to and which class its machines run (pure):
//! the two facts about a set that the availability check ([`super::availability`]), the
//! manual in-place counts ([`super::in_place`]) and the leftover check ([`super::leftovers`])
//! all need.

use super::LABEL_NAME;
use crate::api::machine::MachineSet;

/// Whether `set` belongs to the deployment `deployment`.
pub fn belongs_to(set: &MachineSet, deployment: &str) -> bool {
    let owners = set.metadata.owner_references.as_deref().unwrap_or_default();
    if !owners.is_empty() {
        return owners
            .iter()
            .any(|o| o.kind == "MachineDeployment" && o.name == deployment);
    }
    set.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_NAME))
        .is_some_and(|name| name == deployment)
}

/// The class a MachineSet's machines run.
pub fn set_class(set: &MachineSet) -> Option<&str> {
    set.spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.class.as_ref())
        .map(|c| c.name.as_str())
        .or_else(|| set.spec.machine_class.as_ref().map(|c| c.name.as_str()))
}
