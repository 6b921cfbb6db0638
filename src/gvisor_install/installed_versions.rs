//! The version folders on the host: the I/O half of [`super::versions`]. Hashes the
//! installation image's binaries into their version, reads the host's process table for the
//! versions running sandboxes use, and removes the folders (and the binaries from before
//! versions) that nothing uses.
//!
//! Removal only ever unlinks the names we install (and the temporary files a killed copy of
//! ours left), never following a link; a version folder that holds anything else stays,
//! with a warning naming what is there.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::Path;

use tracing::{info, warn};

use crate::containerd::files;
use crate::safe_fs;

use super::plan::BINARIES;
use super::versions::{self, VERSIONS_DIR, VersionHash};
use super::{Error, HostPath, Settings};

/// The version of the binaries in `source_dir` (both present: checked before), streamed.
pub(super) fn version_of_source(source_dir: &Path) -> Result<String, Error> {
    let mut hash = VersionHash::default();
    for name in BINARIES {
        let path = source_dir.join(name);
        let read_error = |source| {
            Error::Host(crate::containerd::Error::Io {
                action: "reading",
                path: path.display().to_string(),
                source,
            })
        };
        let mut file = File::open(&path).map_err(read_error)?;
        let length = file.metadata().map_err(read_error)?.len();
        hash.binary(length);
        if std::io::copy(&mut file, &mut hash).map_err(read_error)? != length {
            return Err(read_error(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok(hash.finish())
}

/// The folder of `version` under `--bin-dir`.
pub(super) fn version_dir(settings: &Settings, version: &str) -> HostPath {
    HostPath {
        host: settings.bin_dir.host.join(VERSIONS_DIR).join(version),
        local: settings.bin_dir.local.join(VERSIONS_DIR).join(version),
    }
}

/// The targets of `/proc/<pid>/exe` of every process of the host that we may read (a process
/// that ends meanwhile, or a kernel thread, has none). `None` when the folder cannot be read
/// or shows no process with a readable link (an empty folder where the host's `/proc` was
/// not mounted, say): then nobody can tell what is in use, and nothing is removed.
fn exe_links(proc_dir: &Path) -> Option<Vec<String>> {
    let entries = std::fs::read_dir(proc_dir).ok()?;
    let links: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|entry| std::fs::read_link(entry.path().join("exe")).ok())
        .filter_map(|target| target.to_str().map(str::to_string))
        .collect();
    (!links.is_empty()).then_some(links)
}

/// What a cleanup found that stays (removals are logged as they happen); the waiting run
/// logs it again only when it changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Cleanup {
    /// Versions other than the current one kept because a process runs them.
    pub in_use: BTreeSet<String>,
    /// The binaries from before versions were kept because a process runs one.
    pub legacy_in_use: bool,
    /// Versions whose binaries went but whose folders stay, with the names of what else is
    /// in them.
    pub left: Vec<(String, Vec<String>)>,
    /// The host's process table could not be read: nothing was removed.
    pub no_process_table: bool,
}

impl Cleanup {
    /// Logs what is worth an operator's look: versions kept in use, folders left. Removals
    /// are logged as they happen.
    pub fn log(&self) {
        if self.no_process_table {
            warn!(
                "cannot read the host's process table (--proc-dir): no gVisor version is removed, as none can be told unused"
            );
        }
        if !self.in_use.is_empty() || self.legacy_in_use {
            info!(action = "kept", versions = ?self.in_use, binaries_from_before_versions = self.legacy_in_use, "gVisor versions kept: running sandboxes use them");
        }
        for (version, others) in &self.left {
            warn!(version, others = ?others, "gVisor version's binaries removed; its folder holds files we did not install and stays");
        }
    }
}

/// Removes every version but `current` (`None`: all) that no process runs, and the binaries
/// from before versions when no process runs one. Logs each removal. The process table is
/// read once: versions a sandbox uses now stay.
pub(super) fn remove_unused(settings: &Settings, current: Option<&str>) -> Result<Cleanup, Error> {
    let versions_dir = settings.bin_dir.local.join(VERSIONS_DIR);
    let present = files::list_dir(&versions_dir)
        .map_err(Error::Host)?
        .unwrap_or_default();
    let bin_dir_on_host = settings.bin_dir.on_host(&settings.host_root);
    let bin_dir_on_host = bin_dir_on_host.to_string_lossy();
    let mut has_legacy = false;
    for name in BINARIES {
        has_legacy |= files::exists(&settings.bin_dir.local.join(name)).map_err(Error::Host)?;
    }
    let stale = present
        .iter()
        .any(|v| versions::is_version(v) && Some(v.as_str()) != current);
    if !stale && !has_legacy {
        // Nothing to look for: the process table is not read.
        if current.is_none() {
            files::remove_dir_if_empty(&versions_dir).map_err(Error::Host)?;
        }
        return Ok(Cleanup::default());
    }
    let Some(links) = exe_links(&settings.proc_dir) else {
        return Ok(Cleanup {
            no_process_table: true,
            ..Cleanup::default()
        });
    };
    let versions_on_host = format!("{bin_dir_on_host}/{VERSIONS_DIR}");
    let used = versions::in_use(links.iter().map(String::as_str), &versions_on_host);
    let mut cleanup = Cleanup {
        in_use: used
            .iter()
            .filter(|v| Some(v.as_str()) != current && present.contains(v))
            .cloned()
            .collect(),
        ..Cleanup::default()
    };
    for version in versions::removable(&present, current, &used) {
        if let Some(others) = remove_version(settings, &version)? {
            cleanup.left.push((version, others));
        }
    }
    if has_legacy {
        if versions::legacy_in_use(links.iter().map(String::as_str), &bin_dir_on_host) {
            cleanup.legacy_in_use = true;
        } else {
            for name in BINARIES {
                let path = settings.bin_dir.local.join(name);
                if files::remove_if_exists(&path).map_err(Error::Host)? {
                    info!(action = "removed", path = %settings.bin_dir.host.join(name).display(), "binary from before versioned installs removed: no process runs it");
                }
            }
        }
    }
    if current.is_none() {
        files::remove_dir_if_empty(&versions_dir).map_err(Error::Host)?;
    }
    Ok(cleanup)
}

/// Removes the binaries of `version` (and leftovers of a copy of them), then its folder if
/// nothing else is in it; returns the other names when the folder stays.
fn remove_version(settings: &Settings, version: &str) -> Result<Option<Vec<String>>, Error> {
    let dir = version_dir(settings, version);
    let entries = files::list_dir(&dir.local)
        .map_err(Error::Host)?
        .unwrap_or_default();
    let ours = |entry: &str| {
        BINARIES
            .iter()
            .any(|name| entry == *name || safe_fs::is_leftover_temp_of(entry, name))
    };
    for entry in entries.iter().filter(|e| ours(e)) {
        files::remove_if_exists(&dir.local.join(entry)).map_err(Error::Host)?;
    }
    if files::remove_dir_if_empty(&dir.local).map_err(Error::Host)? {
        info!(action = "removed", version, path = %dir.host_str(), "gVisor version removed: no running sandbox uses it");
        return Ok(None);
    }
    let others = files::list_dir(&dir.local)
        .map_err(Error::Host)?
        .unwrap_or_default();
    Ok(Some(others))
}
