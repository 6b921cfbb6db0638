//! In-place OS updates (GEP-31) for the `debian` and `ubuntu` OS types (pure): what a
//! `reconcile` OSC with `spec.inPlaceUpdates` adds — the update script as an extension file
//! and `status.inPlaceUpdates.osUpdate` naming it — for [`super::extensions`].
//!
//! An OS update here is a package update within the node's release, then a reboot
//! ([`SCRIPT`], `assets/os-update.sh`): `apt-get update`, `apt-get full-upgrade` keeping changed
//! configuration files, a check that the node now runs at least the wanted version, and
//! `systemctl reboot`. The node agent runs it with the wanted machine image version as its
//! only argument (`status.inPlaceUpdates.osUpdate.args`), once machine-controller-manager has
//! made the node ready for the update. Limits (docs/usage.md, "In-place pools"):
//!
//! - no release change: Debian `12.x` stays on 12, Ubuntu `24.04.x` on 24.04 (a new release is
//!   a new machine image and needs new nodes); such a version fails as invalid arguments;
//! - the archive decides the point release: apt installs what the configured mirror offers,
//!   which must be at least the wanted version (older fails);
//! - gardener-node-agent reads the node's version from `PRETTY_NAME`, which on Debian carries
//!   the major version only: with GNA on the nodes, Debian pools need image versions without
//!   a point part.
//!
//! Same scheme as upstream's Garden Linux extension (`os-gardenlinux`: an update script shipped
//! as an extension file, `osUpdate` = that script with the version), with apt in place of
//! `gardenlinux-update`.

use crate::api::operatingsystemconfig::{
    File, FileContent, FileContentInline, InPlaceUpdates, InPlaceUpdatesStatus, OsUpdate,
};

/// Where the update script lands on the node.
pub const SCRIPT_PATH: &str = "/opt/gardener-extension-node/bin/os-update";

/// The update script (see the module docs).
pub const SCRIPT: &str = include_str!("assets/os-update.sh");

/// The OS types whose nodes the script can update.
pub const OS_TYPES: [&str; 2] = ["debian", "ubuntu"];

/// A wanted OS version the script would refuse: it must be dotted digits (`12.7`, `24.04.2`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "spec.inPlaceUpdates.operatingSystemVersion {0:?} is not a version of dotted digits (like 12.7 or 24.04.2)"
)]
pub struct InvalidOsVersion(pub String);

/// The extension file and status of an in-place OSC of `os_type`; `None` when the OSC has no
/// `spec.inPlaceUpdates` or the OS type has no update.
pub fn for_os_type(
    os_type: &str,
    in_place: Option<&InPlaceUpdates>,
) -> Result<Option<(File, InPlaceUpdatesStatus)>, InvalidOsVersion> {
    let Some(in_place) = in_place else {
        return Ok(None);
    };
    if !OS_TYPES.contains(&os_type) {
        return Ok(None);
    }
    let version = &in_place.operating_system_version;
    if !is_dotted_digits(version) {
        return Err(InvalidOsVersion(version.clone()));
    }
    let file = File {
        path: SCRIPT_PATH.into(),
        permissions: Some(0o755),
        host_name: None,
        content: FileContent {
            inline: Some(FileContentInline {
                encoding: String::new(),
                data: SCRIPT.into(),
            }),
            ..FileContent::default()
        },
    };
    let status = InPlaceUpdatesStatus {
        os_update: Some(OsUpdate {
            command: SCRIPT_PATH.into(),
            args: vec![version.clone()],
        }),
    };
    Ok(Some((file, status)))
}

/// `12`, `12.7`, `24.04.2`: digits separated by single dots, at most 4 parts.
fn is_dotted_digits(version: &str) -> bool {
    let parts: Vec<&str> = version.split('.').collect();
    parts.len() <= 4
        && parts.iter().all(|part| {
            !part.is_empty() && part.len() <= 9 && part.bytes().all(|b| b.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_place(version: &str) -> InPlaceUpdates {
        InPlaceUpdates {
            operating_system_version: version.into(),
            kubelet: "1.33.1".into(),
            credentials_rotation: None,
        }
    }

    #[test]
    fn debian_and_ubuntu_in_place_oscs_get_the_script_and_the_command() {
        for (os, version) in [("debian", "12.7"), ("ubuntu", "24.04.2")] {
            let (file, status) = for_os_type(os, Some(&in_place(version))).unwrap().unwrap();
            assert_eq!(file.path, SCRIPT_PATH);
            assert_eq!(file.permissions, Some(0o755));
            assert!(file.content.inline.unwrap().data.starts_with("#!/bin/sh\n"));
            let update = status.os_update.unwrap();
            assert_eq!(update.command, SCRIPT_PATH);
            assert_eq!(update.args, [version]);
        }
    }

    #[test]
    fn no_in_place_spec_or_another_os_type_gets_nothing() {
        assert_eq!(for_os_type("debian", None), Ok(None));
        assert_eq!(for_os_type("flatcar", Some(&in_place("4152.2"))), Ok(None));
    }

    #[test]
    fn versions_other_than_dotted_digits_are_refused() {
        for bad in [
            "",
            "12.",
            ".7",
            "12..7",
            "12.7-1",
            "12.7; reboot",
            "$(id)",
            "1.2.3.4.5",
            "1234567890",
        ] {
            assert_eq!(
                for_os_type("debian", Some(&in_place(bad))),
                Err(InvalidOsVersion(bad.into())),
                "{bad}"
            );
        }
        for good in ["12", "12.7", "24.04.2", "1592.4.0"] {
            assert!(
                for_os_type("ubuntu", Some(&in_place(good)))
                    .unwrap()
                    .is_some(),
                "{good}"
            );
        }
    }
}
