//! What this OS extension adds to a `reconcile` OperatingSystemConfig (pure):
//! `status.extensionUnits` and `status.extensionFiles`, per OS type (`spec.type`, the
//! machine image name).
//!
//! The node agent merges these with the spec (units by name: drop-ins are appended; files are
//! concatenated), so they reach every node of the pool through `osc.yaml`. Keep this list
//! short: each entry is something the OS image gets wrong for Kubernetes nodes.
//!
//! | OS types | unit | why |
//! |---|---|---|
//! | `debian`, `ubuntu` | `containerd.service` drop-in [`CONTAINERD_LIMITS_DROP_IN`]: `LimitNOFILE=1048576`, `LimitMEMLOCK=67108864` | Containers inherit containerd's resource limits. The distributions' packaged units differ: Debian's sets `LimitNOFILE=infinity` (about 2^30 file descriptors with current systemd, which makes software that sizes tables by the limit slow or memory hungry), containerd 2.x units set none (systemd's default soft limit of 1024 is too low for many workloads), and systemd's default locked-memory limit is 8 MiB. The same values as Garden Linux nodes (`os-gardenlinux`'s containerd override) give pods the same limits whichever image a pool runs. |
//!
//! No extension files are needed, except for in-place pools: an OSC with
//! `spec.inPlaceUpdates` also gets the OS update script and `status.inPlaceUpdates`
//! ([`for_osc`], [`os_update`]). Other OS types enabled with `--os-types` get nothing (the
//! node agent alone suffices, `docs/contract.md#what-gardenlet-does-with-the-results`).

use super::os_update::{self, InvalidOsVersion};
use crate::api::operatingsystemconfig::{DropIn, File, InPlaceUpdates, InPlaceUpdatesStatus, Unit};

/// Name of the containerd drop-in for debian/ubuntu nodes.
pub const CONTAINERD_LIMITS_DROP_IN: &str = "50-gardener-extension-node-limits.conf";

/// Content of [`CONTAINERD_LIMITS_DROP_IN`].
pub const CONTAINERD_LIMITS: &str = "[Service]\nLimitMEMLOCK=67108864\nLimitNOFILE=1048576\n";

/// The extension units and files of one OS type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extensions {
    /// For `status.extensionUnits`.
    pub units: Vec<Unit>,
    /// For `status.extensionFiles`.
    pub files: Vec<File>,
    /// For `status.inPlaceUpdates` (in-place pools of OS types with an update).
    pub in_place: Option<InPlaceUpdatesStatus>,
}

/// What a `reconcile` OSC of `os_type` with `in_place` (its `spec.inPlaceUpdates`) gets: the
/// units and files of [`for_os_type`], plus the OS update of [`os_update`].
pub fn for_osc(
    os_type: &str,
    in_place: Option<&InPlaceUpdates>,
) -> Result<Extensions, InvalidOsVersion> {
    let mut extensions = for_os_type(os_type);
    if let Some((file, status)) = os_update::for_os_type(os_type, in_place)? {
        extensions.files.push(file);
        extensions.in_place = Some(status);
    }
    Ok(extensions)
}

/// What a `reconcile` OSC of `os_type` gets (see the module table).
pub fn for_os_type(os_type: &str) -> Extensions {
    match os_type {
        "debian" | "ubuntu" => Extensions {
            units: vec![Unit {
                name: "containerd.service".into(),
                command: None,
                enable: None,
                content: None,
                drop_ins: vec![DropIn {
                    name: CONTAINERD_LIMITS_DROP_IN.into(),
                    content: CONTAINERD_LIMITS.into(),
                }],
                file_paths: Vec::new(),
            }],
            files: Vec::new(),
            in_place: None,
        },
        _ => Extensions::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_and_ubuntu_get_the_containerd_limits_drop_in_only() {
        for os in ["debian", "ubuntu"] {
            let extensions = for_os_type(os);
            assert!(extensions.files.is_empty());
            assert_eq!(extensions.units.len(), 1);
            let unit = &extensions.units[0];
            assert_eq!(unit.name, "containerd.service");
            // No content, command or enable: the node agent merges the drop-in into the
            // spec's containerd unit (or the OS's own) without changing anything else.
            assert!(unit.content.is_none() && unit.command.is_none() && unit.enable.is_none());
            assert_eq!(unit.drop_ins[0].content, CONTAINERD_LIMITS);
        }
    }

    #[test]
    fn other_types_get_nothing() {
        assert_eq!(for_os_type("flatcar"), Extensions::default());
    }
}
