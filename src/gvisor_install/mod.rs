//! `gardener-extension-node gvisor-install`: installs gVisor into a node's containerd. Runs in
//! the per-pool installation DaemonSet the ContainerRuntime controller renders (privileged,
//! host `/` mounted at `--host-root`), replacing upstream's bash script.
//!
//! # What a run does
//!
//! 1. **Check the input before touching the host**: every host path is resolved inside the
//!    host root ([`resolve`]; which links are followed is below), the places written pass
//!    the [`targets`] rules (no two overlap, none is a system folder such as `/etc`), the
//!    runsc flags parse and pass the operator's allow-list ([`flags`]), both binaries are in
//!    `--source-dir`, containerd's config.toml parses and has a known version (the plan,
//!    [`plan`], is computed in memory). Any failure exits non-zero with a message saying
//!    what to fix, and no host file has changed.
//! 2. **Binaries**: `runsc` and `containerd-shim-runsc-v1` are copied into the folder of
//!    their version, `--bin-dir`/`gvisor/<version>/` ([`versions`]: the version is a hash of
//!    both), when absent or different (byte comparison), atomically, mode 0755. An upgrade
//!    never replaces a binary a running sandbox uses.
//! 3. **config.toml**: a runtime handler per profile ([`flags::Profiles`]: `runsc` for the
//!    default one, `runsc-<name>`), its `runtime_path` the version's shim, registered under
//!    the CRI plugin key of the file's version
//!    (see [`crate::containerd`]), entries under another version's key removed, our handlers
//!    of profiles no longer asked for removed ([`plan::ours`]), everything else kept byte for
//!    byte; created from a default when missing or empty. A `platform=kvm` profile on a node
//!    without `--kvm-device` (`/dev/kvm`) is refused on that node: not registered (removed if
//!    it was), logged as `action=refused` with the reason; the other profiles install.
//! 4. **runsc config files**: per profile (`--runsc-config`, `runsc-<name>.toml` beside it)
//!    `binary_name` (the version's runsc) and `[runsc_config]` plus the flags, sorted;
//!    written only if different; those of removed handlers deleted.
//! 5. **Restart** containerd through systemd's D-Bus API on the host's system bus
//!    ([`crate::systemd`]) when step 3 or 4 changed a file, waiting for the job and checking
//!    the unit ends `active`.
//! 6. **Older versions** that no process on the host runs any more (read from the host's
//!    `/proc/<pid>/exe`, `--proc-dir`) are removed, with the binaries of installs from before
//!    versions (directly in `--bin-dir`); see [`versions`].
//! 7. Log every decision as a structured line (`action` = `installed`, `up-to-date`,
//!    `created`, `updated`, `repaired`, `restarted`, `removed`, `kept`, ...), then wait for
//!    SIGTERM so the pod stays Running, looking for versions to remove every
//!    `--cleanup-interval-seconds` — or exit with `--once`.
//!
//! A second run on an installed node changes no file and does not restart containerd.
//!
//! **Crash safety**: before changing config.toml or runsc.toml the run writes a marker
//! (`/var/lib/gardener-extension-node/gvisor-install.restart-pending` on the host) and
//! removes it only after a successful restart. A run that finds the marker restarts
//! containerd even if the files are already up to date, so a failed or interrupted restart
//! is retried by the pod's next start instead of being forgotten.
//!
//! # Hostile hosts and input
//!
//! The installer runs as root on a node whose files others may have prepared, and every
//! operation on a host file goes through [`crate::containerd::files`], that is
//! [`crate::safe_fs`]:
//!
//! - **Links**: only links among the folders of a path and the link at config.toml itself
//!   are followed, and only inside the host root (a distribution may keep config.toml
//!   elsewhere, such as `/usr/share/containerd`). A link at a binary's path, at runsc.toml or
//!   at the restart marker is never followed: the write replaces the link itself (uninstall
//!   removes it), so `runsc -> /etc/passwd` or `runsc.toml -> /etc/shadow` leaves the
//!   target as it is. Once resolved, the paths are opened folder by folder without
//!   following links, so a link swapped in during the run is refused, not followed.
//! - **Reads**: only regular files are opened, without blocking; a FIFO, a device (also
//!   through config.toml's link) or anything else at config.toml is refused with what it
//!   is, and files over [`crate::containerd::files::MAX_READ_BYTES`] (1 MiB) are refused
//!   after reading at most one byte more. The `--runsc-flags` file (a path in this
//!   container, e.g. a mounted ConfigMap, whose links are followed) gets the same checks.
//! - **Places**: see [`targets`]; a flag or a link that makes two places one, or points a
//!   place into `/etc`, `/usr/bin`, `/proc`, ..., is refused before anything is written.
//! - **Messages**: a flags error names the line and the reason, never the line's text (the
//!   flags file may be something else, such as a password file), and containerd config
//!   errors name no value of the file. Control characters in paths, link targets and flag
//!   values are escaped ([`crate::printable`]) in the error printed on stderr and in the
//!   termination message.
//!
//! # `--uninstall`
//!
//! Removes the `runsc` runtime and every profile's `runsc-<name>` (under every version's
//! key) from config.toml and deletes their runsc config files, then restarts containerd if
//! either changed (with the same restart-pending marker as install). Then every version no
//! running sandbox uses is removed; a version a pod still runs in stays until the pod ends
//! (its shim needs its `runsc` to stop it) and goes while the run waits. It is idempotent:
//! on a clean node it changes nothing and restarts nothing. Like install, it then waits for SIGTERM (`--once`: exits), and a
//! failure exits non-zero with the reason in the termination log.
//!
//! When it runs: **automatically** when gVisor is removed from a worker pool. The
//! ContainerRuntime's deletion first turns the pool's installation DaemonSet into the
//! uninstall DaemonSet (same name, updated in place, rolled node by node): an init container
//! runs `--uninstall --once`, so a pod is Ready only once its node is clean (a failure
//! restarts the init container and keeps the pod unready), and the main container runs
//! `--uninstall`, which finds nothing left to do and keeps the pod Running and Ready until
//! SIGTERM. The operator waits until the DaemonSet is rolled out and healthy on every node
//! (bounded by `--gvisor-uninstall-timeout-seconds`) and only then deletes it; see
//! [`crate::controllers::containerruntime::delete`]. Shoot deletion, hibernation, force
//! deletion and migration do not uninstall (the nodes go away, or keep running elsewhere).
//! By hand, the same image with the DaemonSet's mounts and privileges plus
//! `--uninstall --once` cleans one node (e.g. a one-off pod pinned to it).
//!
//! # Flags
//!
//! See [`GvisorInstallArgs`]; the DaemonSet runs
//! `gardener-extension-node gvisor-install --host-root=/var/host
//! --bin-dir=/var/bin/containerruntimes --source-dir=/var/content` with the flags in
//! `GVISOR_RUNSC_FLAGS` (canonical form: sorted `key=value` lines, see [`flags`]).

pub mod args;
pub mod flags;
mod install;
mod installed_versions;
pub mod plan;
pub mod refusal_events;
/// The host-root resolver, shared with the node agent's image copies ([`crate::root_path`]).
pub use crate::root_path as resolve;
pub mod targets;
mod uninstall;
pub mod versions;

use std::path::Path;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::info;

use crate::containerd::{self, files};
use crate::systemd::{self, Systemd};

pub use args::{GvisorInstallArgs, HostPath, Settings};
pub use flags::{FlagsError, FlagsSource, RunscFlags};

/// Where Kubernetes picks up a container's termination message.
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Why a run failed. Every message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host path flag is relative or has `.`/`..` components.
    #[error("--{flag} must be an absolute path without `.` or `..` components (got `{path}`)")]
    InvalidPath {
        /// The flag.
        flag: &'static str,
        /// Its value.
        path: String,
    },
    /// `--host-root` cannot be opened.
    #[error("cannot open the host root {path} (--host-root)")]
    HostRoot {
        /// The path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The places the run would write to overlap or include a system folder.
    #[error(transparent)]
    Targets(#[from] targets::TargetError),
    /// A host path cannot be resolved inside the host root (dangling link, loop, ...).
    #[error("cannot resolve {path} inside the host root; no host file was changed")]
    Resolve {
        /// The host path as given.
        path: String,
        /// Cause.
        #[source]
        source: resolve::ResolveError,
    },
    /// `--containerd-unit` is not a unit name.
    #[error("--containerd-unit must be a unit name such as containerd.service (got `{0}`)")]
    InvalidUnit(String),
    /// `--restart-timeout-seconds` is zero.
    #[error("--restart-timeout-seconds must be at least 1")]
    InvalidTimeout,
    /// `--cleanup-interval-seconds` is zero.
    #[error("--cleanup-interval-seconds must be at least 1")]
    InvalidCleanupInterval,
    /// The runsc flags do not parse.
    #[error("runsc flags (--runsc-flags / GVISOR_RUNSC_FLAGS) are invalid")]
    Flags(#[source] FlagsError),
    /// The runsc flags file cannot be read.
    #[error(
        "reading the runsc flags file {path} (a --runsc-flags value without `=` is a file path)"
    )]
    FlagsFile {
        /// The path.
        path: String,
        /// Cause (missing, not a regular file, too large, not UTF-8, ...).
        #[source]
        source: crate::safe_fs::SafeFsError,
    },
    /// A profile's runsc config file would be config.toml or the restart marker.
    #[error(
        "the runsc config of profile {profile} would be {path}, which the run writes for something else; choose another --runsc-config folder or profile name"
    )]
    ProfileTarget {
        /// The profile.
        profile: String,
        /// The path.
        path: String,
    },
    /// A binary is missing from the installation image.
    #[error(
        "the installation image has no {name} in {dir} (--source-dir); ship runsc and containerd-shim-runsc-v1 there"
    )]
    MissingBinary {
        /// The binary.
        name: &'static str,
        /// The source folder.
        dir: String,
    },
    /// containerd's config cannot be read, parsed or edited.
    #[error("cannot edit {path} on the host; the file was left unchanged")]
    Config {
        /// Host path of config.toml.
        path: String,
        /// Cause.
        #[source]
        source: containerd::Error,
    },
    /// Reading or writing another host file failed.
    #[error("changing files on the host")]
    Host(#[source] containerd::Error),
    /// The restart through systemd failed.
    #[error("restarting {unit} through systemd")]
    Restart {
        /// The unit.
        unit: String,
        /// Cause.
        #[source]
        source: systemd::Error,
    },
    /// containerd is not active after the restart job finished.
    #[error("{unit} is `{state}` after its restart; see `journalctl -u {unit}` on the node")]
    NotActive {
        /// The unit.
        unit: String,
        /// Its ActiveState.
        state: String,
    },
    /// Signal handlers could not be installed.
    #[error("installing the SIGTERM handler")]
    Signal(#[source] std::io::Error),
}

impl Error {
    /// True when a person must fix the input (flags, image, config.toml) rather than
    /// wait for a transient failure to pass.
    pub fn is_input_problem(&self) -> bool {
        match self {
            Error::InvalidPath { .. }
            | Error::InvalidUnit(_)
            | Error::InvalidTimeout
            | Error::InvalidCleanupInterval
            | Error::Flags(_)
            | Error::FlagsFile { .. }
            | Error::Targets(_)
            | Error::ProfileTarget { .. }
            | Error::MissingBinary { .. } => true,
            Error::Config { source, .. } => source.is_config_problem(),
            Error::Resolve { source, .. } => source.is_host_problem(),
            Error::HostRoot { .. }
            | Error::Host(_)
            | Error::Restart { .. }
            | Error::NotActive { .. }
            | Error::Signal(_) => false,
        }
    }
}

/// Runs `gvisor-install` with `args`: install (or with `--uninstall` uninstall), then wait
/// for SIGTERM unless `--once`. A failure returns at once (the process exits non-zero and
/// the pod restarts); the reason also goes to `/dev/termination-log` when that exists
/// (Kubernetes shows it in the pod status).
pub async fn run(args: GvisorInstallArgs) -> Result<(), Error> {
    let settings = Settings::from_args(args)?;
    // Listen before working, with `--once` too: a SIGTERM during the work (the pod deleted
    // while it edits config.toml or restarts containerd) ends the process once the work is
    // done instead of in the middle of it.
    let termination = Termination::listen()?;
    let result = if settings.uninstall {
        uninstall::run(&settings)
            .await
            .map(|resolved| (resolved, None))
    } else {
        install::run(&settings)
            .await
            .map(|installed| (installed.settings, Some(installed.version)))
    };
    let (resolved, current) = match result {
        Ok(done) => done,
        Err(error) => {
            write_termination_log(&error);
            return Err(error);
        }
    };
    if !settings.once {
        termination.wait(&resolved, current.as_deref()).await;
    }
    Ok(())
}

/// SIGTERM / SIGINT listeners.
struct Termination {
    terminate: Signal,
    interrupt: Signal,
}

impl Termination {
    fn listen() -> Result<Self, Error> {
        Ok(Self {
            terminate: signal(SignalKind::terminate()).map_err(Error::Signal)?,
            interrupt: signal(SignalKind::interrupt()).map_err(Error::Signal)?,
        })
    }

    /// Waits for SIGTERM or SIGINT, removing versions other than `current` as the
    /// sandboxes that use them end (every [`Settings::cleanup_interval`]).
    async fn wait(mut self, settings: &Settings, current: Option<&str>) {
        info!("done; waiting for SIGTERM");
        let mut looks = tokio::time::interval(settings.cleanup_interval);
        looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: the run has just looked.
        looks.tick().await;
        let mut last = None;
        let name = loop {
            tokio::select! {
                _ = self.terminate.recv() => break "SIGTERM",
                _ = self.interrupt.recv() => break "SIGINT",
                _ = looks.tick() => match installed_versions::remove_unused(settings, current) {
                    Ok(cleanup) => {
                        if last.as_ref() != Some(&cleanup) {
                            cleanup.log();
                        }
                        last = Some(cleanup);
                    }
                    Err(error) => tracing::warn!(error = %crate::error_chain::printable(&error), "removing gVisor versions no sandbox uses failed; the next look retries"),
                },
            }
        };
        info!(signal = name, "exiting");
    }
}

/// Reads config.toml (`None` if absent); a non-UTF-8 file is a config problem.
fn read_config(settings: &Settings) -> Result<Option<String>, Error> {
    files::read_optional_string(&settings.containerd_config.local).map_err(|source| Error::Config {
        path: settings.containerd_config.host_str(),
        source,
    })
}

/// The containerd restart a run owes: because it changes files containerd reads, or because
/// an earlier run changed them and died before its restart finished (the marker).
struct ContainerdRestart {
    /// The files this run changes (host paths), joined: the reason logged.
    reason: String,
    /// Whether an earlier run left the marker.
    pending: bool,
}

impl ContainerdRestart {
    /// Call before changing anything: reads the marker and, when this run will change
    /// `changed_files`, writes it, so a crash before the restart is finished next time.
    fn plan(settings: &Settings, changed_files: &[String]) -> Result<Self, Error> {
        let pending = restart_pending(settings)?;
        let reason = changed_files.join(", ");
        if !changed_files.is_empty() {
            mark_restart_pending(settings, &reason)?;
        }
        Ok(ContainerdRestart { reason, pending })
    }

    /// Call after the files are written: restarts containerd when owed, else logs the skip.
    async fn finish(self, settings: &Settings) -> Result<(), Error> {
        if !self.reason.is_empty() {
            restart_containerd(settings, &self.reason).await
        } else if self.pending {
            restart_containerd(settings, "an earlier run could not finish its restart").await
        } else {
            info!(
                action = "skipped",
                unit = %settings.containerd_unit,
                "containerd restart not needed"
            );
            Ok(())
        }
    }
}

/// Writes containerd's config (atomically; nothing when the bytes are already there).
fn write_containerd_config(settings: &Settings, text: &str) -> Result<(), Error> {
    files::write_if_changed(
        &settings.containerd_config.local,
        text.as_bytes(),
        files::DEFAULT_FILE_MODE,
    )
    .map(|_| ())
    .map_err(|source| Error::Config {
        path: settings.containerd_config.host_str(),
        source,
    })
}

/// Writes the restart-pending marker (see the module docs).
fn mark_restart_pending(settings: &Settings, reason: &str) -> Result<(), Error> {
    let content = format!("{} restart pending: {reason}\n", settings.containerd_unit);
    files::write_atomic(
        &settings.restart_marker.local,
        content.as_bytes(),
        files::DEFAULT_FILE_MODE,
    )
    .map_err(Error::Host)
}

/// True if an earlier run left the marker (anything at its path counts).
fn restart_pending(settings: &Settings) -> Result<bool, Error> {
    files::exists(&settings.restart_marker.local).map_err(Error::Host)
}

/// Restarts containerd, waits for the job, checks it is active, then removes the marker.
async fn restart_containerd(settings: &Settings, reason: &str) -> Result<(), Error> {
    let unit = settings.containerd_unit.as_str();
    let restart_error = |source| Error::Restart {
        unit: unit.to_string(),
        source,
    };
    let systemd = Systemd::connect(&settings.dbus_address)
        .await
        .map_err(restart_error)?
        .with_job_timeout(settings.restart_timeout);
    let before = systemd.unit_status(unit).await.map_err(restart_error)?;
    systemd.restart_unit(unit).await.map_err(restart_error)?;
    let after = systemd.unit_status(unit).await.map_err(restart_error)?;
    if after.active_state != "active" {
        return Err(Error::NotActive {
            unit: unit.to_string(),
            state: after.active_state,
        });
    }
    files::remove_if_exists(&settings.restart_marker.local).map_err(Error::Host)?;
    info!(
        action = "restarted",
        unit,
        reason,
        previous_invocation_id = %before.invocation_id,
        invocation_id = %after.invocation_id,
        main_pid = after.main_pid.unwrap_or_default(),
        "containerd restarted"
    );
    Ok(())
}

/// Best effort: Kubernetes reads the termination message from this file if it exists.
fn write_termination_log(error: &Error) {
    let path = Path::new(TERMINATION_LOG);
    if path.exists() {
        let _ = std::fs::write(path, termination_message(error));
    }
}

/// The error and its causes on one line, `a: b: c`, control characters escaped
/// ([`crate::printable::escape_controls`]): what `kubectl describe pod` shows.
fn termination_message(error: &Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    crate::printable::escape_controls(&message).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_termination_message_is_the_chain_with_controls_escaped() {
        let error = Error::FlagsFile {
            path: "/etc/gvisor/\u{1b}[2Jflags".to_string(),
            source: crate::safe_fs::SafeFsError::Io {
                action: "opening",
                path: "/etc/gvisor/\u{1b}[2Jflags".to_string(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone\r\nfaked line"),
            },
        };
        assert_eq!(
            termination_message(&error),
            "reading the runsc flags file /etc/gvisor/\\u{1b}[2Jflags (a --runsc-flags value without `=` is a file path): opening /etc/gvisor/\\u{1b}[2Jflags: gone\\r\\nfaked line"
        );
    }
}
