//! `render osc --impact` for a provision OperatingSystemConfig (pure). Its user data is what a
//! machine boots with: machines created from now on get the new one, running nodes never read
//! it again (they follow the pool's reconcile OSC, [`super::osc`]). Both user data are
//! rendered as the OSC controller renders them
//! ([`crate::controllers::operatingsystemconfig::reconcile::render_user_data`]) and compared;
//! the files and units that differ between the two OSCs' specs say where.

use anyhow::Context;
use serde::Serialize;

use super::pairs::{Files, Pair};
use crate::api::OperatingSystemConfig;
use crate::controllers::operatingsystemconfig::content::ReferencedSecrets;
use crate::controllers::operatingsystemconfig::reconcile::render_user_data;
use crate::render::input::describe;

/// Entries that differ between the previous and the new OSC.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Entries {
    /// New or different.
    pub changed: Vec<String>,
    /// Only in the previous OSC.
    pub removed: Vec<String>,
}

/// What a change of a provision OSC does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionImpact {
    /// Always `provision`.
    pub purpose: &'static str,
    /// Namespace of the OSC.
    pub namespace: String,
    /// Name of the OSC.
    pub name: String,
    /// New machines boot with other user data.
    pub user_data_changed: bool,
    /// Files (by path).
    pub files: Entries,
    /// Units (by name).
    pub units: Entries,
}

/// The impact of `pair`, two provision OSCs.
pub fn impact(
    pair: &Pair<OperatingSystemConfig>,
    secrets: &ReferencedSecrets,
    files: Files<'_>,
) -> anyhow::Result<ProvisionImpact> {
    let user_data = |osc: &OperatingSystemConfig, file: &str| {
        render_user_data(osc, secrets)
            .map_err(|e| anyhow::anyhow!(crate::error_chain::chain(&e)))
            .with_context(|| format!("{file}: {}", describe(osc)))
    };
    let before = user_data(&pair.previous, &format!("--previous {}", files.previous))?;
    let after = user_data(&pair.new, files.new)?;
    let (old, new) = (&pair.previous.spec, &pair.new.spec);
    Ok(ProvisionImpact {
        purpose: "provision",
        namespace: pair.new.metadata.namespace.clone().unwrap_or_default(),
        name: pair.new.metadata.name.clone().unwrap_or_default(),
        user_data_changed: before != after,
        files: entries(&old.files, &new.files, |f| f.path.as_str()),
        units: entries(&old.units, &new.units, |u| u.name.as_str()),
    })
}

/// The keys of `new` entries that are new or differ, and of `old` ones that are gone.
fn entries<T: PartialEq>(old: &[T], new: &[T], key: impl Fn(&T) -> &str) -> Entries {
    let find = |list: &[T], name: &str| list.iter().position(|e| key(e) == name);
    Entries {
        changed: new
            .iter()
            .filter(|e| find(old, key(e)).map(|i| &old[i]) != Some(*e))
            .map(|e| key(e).to_string())
            .collect(),
        removed: old
            .iter()
            .filter(|e| find(new, key(e)).is_none())
            .map(|e| key(e).to_string())
            .collect(),
    }
}

impl ProvisionImpact {
    /// The text output.
    pub fn text(&self) -> String {
        if !self.user_data_changed {
            return "provision: the user data is the same: new machines boot as before\n"
                .to_string();
        }
        let list = |items: &[String]| {
            if items.is_empty() {
                "-".to_string()
            } else {
                items.join(", ")
            }
        };
        [
            "provision: the user data changes: machines created from now on boot with it; running nodes never read it again (they follow the pool's reconcile OSC: preview that with `render osc --impact`)".to_string(),
            format!("files changed: {}", list(&self.files.changed)),
            format!("files removed: {}", list(&self.files.removed)),
            format!("units changed: {}", list(&self.units.changed)),
            format!("units removed: {}", list(&self.units.removed)),
        ]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn osc(files: serde_json::Value) -> OperatingSystemConfig {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "OperatingSystemConfig",
            "metadata": {"name": "gna-a-init", "namespace": "shoot--p--s",
                         "labels": {"worker.gardener.cloud/pool": "a"}},
            "spec": {"type": "debian", "purpose": "provision",
                     "units": [{"name": "init.service", "command": "start", "content": "[Service]\n"}],
                     "files": files},
        }))
        .unwrap()
    }

    fn file(path: &str, data: &str) -> serde_json::Value {
        json!({"path": path, "content": {"inline": {"encoding": "", "data": data}}})
    }

    const FILES: Files<'static> = Files {
        new: "new.yaml",
        previous: "old.yaml",
    };

    #[test]
    fn the_user_data_of_new_machines_is_compared() {
        let pair = Pair {
            previous: osc(json!([file("/a", "1"), file("/gone", "1")])),
            new: osc(json!([file("/a", "2"), file("/new", "1")])),
        };
        let found = impact(&pair, &ReferencedSecrets::default(), FILES).unwrap();
        assert!(found.user_data_changed);
        assert_eq!(found.files.changed, ["/a", "/new"]);
        assert_eq!(found.files.removed, ["/gone"]);
        assert_eq!(found.units, Entries::default());
        assert!(found.text().starts_with(
            "provision: the user data changes: machines created from now on boot with it;"
        ));
        assert!(found.text().ends_with(
            "files changed: /a, /new\nfiles removed: /gone\nunits changed: -\nunits removed: -\n"
        ));

        let same = Pair {
            previous: osc(json!([file("/a", "1")])),
            new: osc(json!([file("/a", "1")])),
        };
        let found = impact(&same, &ReferencedSecrets::default(), FILES).unwrap();
        assert_eq!(
            found.text(),
            "provision: the user data is the same: new machines boot as before\n"
        );
    }
}
