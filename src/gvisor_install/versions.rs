//! Version-stamped installation (pure): every gVisor build the installer installs gets a
//! folder of its own, `<bin-dir>/gvisor/<version>/` with `runsc` and
//! `containerd-shim-runsc-v1`, so an upgrade never replaces a binary a running sandbox uses:
//! containerd starts new sandboxes with the current version's shim (the handler's
//! `runtime_path`), the shim calls the `runsc` of its own version (`binary_name` in the
//! profile's runsc config), and a sandbox started before the upgrade keeps its shim and runsc
//! until it ends.
//!
//! - **The version** is the first 16 hex digits of the SHA-256 of both binaries (each
//!   length-prefixed, in [`super::plan::BINARIES`] order): two builds that differ in any byte
//!   are two versions, the same build installed twice is one, and nothing has to run a binary
//!   of the image to know it.
//! - **In use**: a version is in use while a process on the node runs one of its binaries,
//!   seen as the `/proc/<pid>/exe` link of the host's processes pointing into its folder (the
//!   shim of every gVisor pod runs on the host as long as the pod's sandbox does).
//! - **Removal**: an older version is removed once nothing uses it: at each run (after
//!   containerd restarted with the current version, so no new sandbox starts an old one) and
//!   while the installer waits, every `--cleanup-interval-seconds`, so the old files go soon
//!   after the last old pod. Uninstall removes every version the same way.
//! - **Before versions** the binaries lay in `<bin-dir>` itself and containerd found them on
//!   its `PATH`; those files go by the same rule ([`legacy_in_use`]).
//!
//! A container created after an upgrade in a pod whose sandbox an older version started (a
//! restarted container of that pod) is created by the old shim with the current runsc: the
//! shim reads the runsc config (and its `binary_name`) at every container's creation. Exec
//! and deletion of the containers already there use the runsc they were created with.
//!
//! The I/O half (hashing the image's binaries, reading the host's process table, removing
//! folders) is `installed_versions` (private to the installer).

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

/// The folder under `--bin-dir` that holds one folder per version.
pub const VERSIONS_DIR: &str = "gvisor";
/// Hex digits of a version.
pub const VERSION_LENGTH: usize = 16;

/// The version of a build: see the module docs. `binaries` in [`super::plan::BINARIES`]
/// order.
pub fn version_of(binaries: &[&[u8]]) -> String {
    let mut hash = VersionHash::default();
    for bytes in binaries {
        hash.binary(bytes.len() as u64);
        hash.update(bytes);
    }
    hash.finish()
}

/// [`version_of`] fed piece by piece (binaries too large to hold): for each binary, its
/// length ([`VersionHash::binary`]) and then all its bytes.
#[derive(Default)]
pub struct VersionHash(Sha256);

impl VersionHash {
    /// Starts the next binary, `length` bytes long.
    pub fn binary(&mut self, length: u64) {
        self.0.update(length.to_be_bytes());
    }

    /// More bytes of the current binary.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The version.
    pub fn finish(self) -> String {
        let mut version = hex::encode(self.0.finalize());
        version.truncate(VERSION_LENGTH);
        version
    }
}

/// Bytes of the current binary, for `std::io::copy` from a file.
impl std::io::Write for VersionHash {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where `binary` of `version` lies: `<bin_dir>/gvisor/<version>/<binary>` (host paths).
pub fn binary_path(bin_dir: &str, version: &str, binary: &str) -> String {
    format!(
        "{}/{VERSIONS_DIR}/{version}/{binary}",
        bin_dir.trim_end_matches('/')
    )
}

/// Whether `name` (a folder under [`VERSIONS_DIR`]) is a version of ours; anything else
/// there is left alone.
pub fn is_version(name: &str) -> bool {
    name.len() == VERSION_LENGTH
        && name
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// The versions in use: of `exe_links` (the targets of `/proc/<pid>/exe`, perhaps ending in
/// ` (deleted)`), those under `<versions_dir>/<version>/`, `versions_dir` being the host
/// path of `<bin-dir>/gvisor`.
pub fn in_use<'a>(
    exe_links: impl IntoIterator<Item = &'a str>,
    versions_dir: &str,
) -> BTreeSet<String> {
    let prefix = format!("{}/", versions_dir.trim_end_matches('/'));
    exe_links
        .into_iter()
        .filter_map(|link| {
            let rest = link.strip_prefix(&prefix)?;
            let (version, _) = rest.split_once('/')?;
            is_version(version).then(|| version.to_string())
        })
        .collect()
}

/// Whether a process runs one of the binaries installed before versions, directly in
/// `bin_dir` (host path): such a shim finds `runsc` on its `PATH`, so both stay while it runs.
pub fn legacy_in_use<'a>(exe_links: impl IntoIterator<Item = &'a str>, bin_dir: &str) -> bool {
    let bin_dir = bin_dir.trim_end_matches('/');
    exe_links.into_iter().any(|link| {
        let link = link.strip_suffix(" (deleted)").unwrap_or(link);
        link.strip_prefix(bin_dir)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|name| super::plan::BINARIES.contains(&name))
    })
}

/// Of the version folders `present`, those to remove: ours, not `current` (`None`:
/// uninstalling, no version is current), not in use.
pub fn removable(
    present: &[String],
    current: Option<&str>,
    in_use: &BTreeSet<String>,
) -> Vec<String> {
    present
        .iter()
        .filter(|v| is_version(v) && Some(v.as_str()) != current && !in_use.contains(v.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_names_the_bytes_of_both_binaries() {
        let a = version_of(&[b"runsc 1", b"shim 1"]);
        assert!(is_version(&a), "{a}");
        assert_eq!(
            a,
            version_of(&[b"runsc 1", b"shim 1"]),
            "same build, same version"
        );
        assert_ne!(a, version_of(&[b"runsc 2", b"shim 1"]));
        assert_ne!(a, version_of(&[b"runsc 1", b"shim 2"]));
        assert_ne!(
            version_of(&[b"ab", b"c"]),
            version_of(&[b"a", b"bc"]),
            "lengths are part of the hash"
        );
    }

    #[test]
    fn only_hex_folders_of_sixteen_digits_are_versions() {
        assert!(is_version("0123456789abcdef"));
        for name in [
            "0123456789ABCDEF",
            "0123456789abcde",
            "0123456789abcdef0",
            "..",
            "current",
            "0123456789abcdeg",
        ] {
            assert!(!is_version(name), "{name}");
        }
    }

    #[test]
    fn versions_in_use_are_those_a_process_runs_a_binary_of() {
        let dir = "/var/bin/containerruntimes/gvisor";
        let links = [
            "/var/bin/containerruntimes/gvisor/0123456789abcdef/containerd-shim-runsc-v1",
            "/var/bin/containerruntimes/gvisor/fedcba9876543210/runsc (deleted)",
            "/var/bin/containerruntimes/gvisor/not-a-version/runsc",
            "/var/bin/containerruntimes/runsc",
            "/usr/bin/containerd",
            "/var/bin/containerruntimes/gvisor/0123456789abcdef",
        ];
        let used = in_use(links, &format!("{dir}/"));
        assert_eq!(
            used.into_iter().collect::<Vec<_>>(),
            ["0123456789abcdef", "fedcba9876543210"]
        );
    }

    #[test]
    fn old_unused_versions_are_removable_the_current_and_foreign_folders_never() {
        let present: Vec<String> = [
            "0000000000000001",
            "0000000000000002",
            "0000000000000003",
            "keep-me",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let used = BTreeSet::from(["0000000000000002".to_string()]);
        assert_eq!(
            removable(&present, Some("0000000000000003"), &used),
            ["0000000000000001"]
        );
        assert_eq!(
            removable(&present, None, &used),
            ["0000000000000001", "0000000000000003"],
            "uninstalling: every unused version"
        );
        assert!(
            removable(
                &present,
                Some("0000000000000001"),
                &present.iter().cloned().collect()
            )
            .is_empty()
        );
    }

    #[test]
    fn the_streamed_hash_is_the_version() {
        let mut hash = VersionHash::default();
        hash.binary(7);
        hash.update(b"runsc");
        hash.update(b" 1");
        hash.binary(6);
        hash.update(b"shim 1");
        assert_eq!(hash.finish(), version_of(&[b"runsc 1", b"shim 1"]));
        assert_eq!(
            binary_path("/var/bin/containerruntimes/", "0123456789abcdef", "runsc"),
            "/var/bin/containerruntimes/gvisor/0123456789abcdef/runsc"
        );
    }

    #[test]
    fn binaries_from_before_versions_stay_while_a_process_runs_one() {
        let bin = "/var/bin/containerruntimes";
        assert!(legacy_in_use(
            ["/var/bin/containerruntimes/containerd-shim-runsc-v1 (deleted)"],
            bin
        ));
        assert!(legacy_in_use(["/var/bin/containerruntimes/runsc"], bin));
        assert!(!legacy_in_use(
            [
                "/var/bin/containerruntimes/gvisor/0123456789abcdef/runsc",
                "/var/bin/containerruntimes/other",
                "/var/bin/containerruntimes-x/runsc",
                "/usr/bin/containerd",
            ],
            bin
        ));
    }
}
