//! Command line of `gvisor-install` and its validation into [`Settings`]. Pure, except
//! [`Settings::resolve_links`], which looks at the host (and writes nothing).
//!
//! Paths on the host (`--bin-dir`, `--containerd-config`, `--runsc-config`) are given as the
//! host sees them and resolved below `--host-root`, where the DaemonSet mounts the host's
//! `/`. They must be absolute and free of `.`/`..`, so nothing can point outside the host
//! root, and they must pass the [`super::targets`] rules (no overlap, no system folder).
//! `--source-dir` is a path in this container (the installation image).
//!
//! Which links on the host are followed ([`Settings::resolve_links`]): links among the
//! folders of every path, and the link at `--containerd-config` itself, each inside the host
//! root ([`super::resolve`]). A link at `--runsc-config`, at a binary's path or at the
//! restart marker is not followed: it is the entry the run replaces (or, uninstalling,
//! removes).

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::Error;
use super::flags::FlagsSource;
use super::resolve::{self, Entry, Lookup, ResolveError, Resolved, RootLookup};
use super::targets::{self, Kind, RESTART_MARKER, Stage, Target};

/// Flags of `gvisor-install`. Every flag has a `GVISOR_*` environment fallback.
#[derive(Debug, Clone, Args)]
pub struct GvisorInstallArgs {
    /// Where the host's root file system is mounted in this container (hostPath `/`).
    #[arg(long, env = "GVISOR_HOST_ROOT", default_value = "/var/host")]
    pub host_root: PathBuf,

    /// Host folder under which each gVisor build gets its own folder
    /// (`gvisor/<version>/runsc` and `containerd-shim-runsc-v1`, see
    /// [`super::versions`]); containerd gets the shim's full path. ContainerRuntime
    /// `binaryPath`.
    #[arg(
        long,
        env = "GVISOR_BIN_DIR",
        default_value = "/var/bin/containerruntimes"
    )]
    pub bin_dir: PathBuf,

    /// Folder in this container holding `runsc` and `containerd-shim-runsc-v1` to install.
    #[arg(long, env = "GVISOR_SOURCE_DIR", default_value = "/var/content")]
    pub source_dir: PathBuf,

    /// runsc flags: `key=value` lines (canonical, sorted) or `key = "value"` lines; a value
    /// without `=` is read as the path of a file with such lines; empty means none.
    #[arg(long, env = "GVISOR_RUNSC_FLAGS", default_value = "")]
    pub runsc_flags: String,

    /// containerd's config file on the host.
    #[arg(
        long,
        env = "GVISOR_CONTAINERD_CONFIG",
        default_value = "/etc/containerd/config.toml"
    )]
    pub containerd_config: PathBuf,

    /// runsc's config file on the host; also the `ConfigPath` written into containerd's
    /// config.
    #[arg(
        long,
        env = "GVISOR_RUNSC_CONFIG",
        default_value = "/etc/containerd/runsc.toml"
    )]
    pub runsc_config: PathBuf,

    /// systemd unit of containerd on the host.
    #[arg(
        long,
        env = "GVISOR_CONTAINERD_UNIT",
        default_value = "containerd.service"
    )]
    pub containerd_unit: String,

    /// D-Bus address of the host's system bus; when unset,
    /// `unix:path=<host-root>/run/dbus/system_bus_socket`.
    #[arg(long, env = "GVISOR_DBUS_ADDRESS")]
    pub dbus_address: Option<String>,

    /// How long to wait for containerd's restart job, in seconds.
    #[arg(long, env = "GVISOR_RESTART_TIMEOUT_SECONDS", default_value_t = 120)]
    pub restart_timeout_seconds: u64,

    /// Exit when done instead of waiting for SIGTERM (install and uninstall).
    #[arg(long, env = "GVISOR_ONCE")]
    pub once: bool,

    /// The KVM device in this container (privileged: the host's devices). A profile with
    /// `platform=kvm` is refused on a node where this is not a character device.
    #[arg(long, env = "GVISOR_KVM_DEVICE", default_value = "/dev/kvm")]
    pub kvm_device: PathBuf,

    /// The Node this runs on (the DaemonSet passes `spec.nodeName`): a refused profile is
    /// also published as a Warning event on it (with the pod's service account); unset, only
    /// logged.
    #[arg(long, env = "GVISOR_NODE_NAME")]
    pub node_name: Option<String>,

    /// The host's process table in this container, read to tell which gVisor versions
    /// running sandboxes use (`/proc/<pid>/exe`); when unset, `<host-root>/proc`.
    #[arg(long, env = "GVISOR_PROC_DIR")]
    pub proc_dir: Option<PathBuf>,

    /// While waiting for SIGTERM, look this often (seconds) for gVisor versions no running
    /// sandbox uses any more and remove them.
    #[arg(long, env = "GVISOR_CLEANUP_INTERVAL_SECONDS", default_value_t = 30)]
    pub cleanup_interval_seconds: u64,

    /// Remove the runsc runtime from containerd's config and runsc.toml and restart
    /// containerd (if that changed anything), then wait for SIGTERM like install (exit with
    /// `--once`). Binaries go once no running sandbox uses them (checked again while
    /// waiting).
    #[arg(long, env = "GVISOR_UNINSTALL")]
    pub uninstall: bool,
}

/// A file or folder on the host: the path the host uses and where we reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPath {
    /// As the host sees it (`/etc/containerd/config.toml`); for logs and file contents.
    pub host: PathBuf,
    /// Below the host root in this container (`/var/host/etc/containerd/config.toml`).
    pub local: PathBuf,
}

impl HostPath {
    /// Resolves `host` below `root`; `flag` names the flag in the error. Rejects relative
    /// paths, `/` itself and `..`; `//` and inner `.` are normalised away.
    pub fn resolve(root: &Path, host: &Path, flag: &'static str) -> Result<Self, Error> {
        let invalid = || Error::InvalidPath {
            flag,
            path: host.display().to_string(),
        };
        let mut components = host.components();
        if components.next() != Some(Component::RootDir) {
            return Err(invalid());
        }
        let mut local = root.to_path_buf();
        let mut depth = 0;
        for component in components {
            match component {
                Component::Normal(part) => {
                    local.push(part);
                    depth += 1;
                }
                _ => return Err(invalid()),
            }
        }
        if depth == 0 {
            return Err(invalid());
        }
        Ok(Self {
            host: host.to_path_buf(),
            local,
        })
    }

    /// The same path with every link on the host resolved inside `root` (see
    /// [`super::resolve`]): `local` becomes the link's target below the root, `host` stays
    /// as given (containerd resolves links itself, so `ConfigPath` keeps the given path).
    /// Fails, changing nothing, for dangling links, loops and files in place of folders.
    pub fn resolve_links(&self, root: &Path) -> Result<Self, Error> {
        let resolved = self.resolve_in(root, &self.host)?;
        Ok(self.at(root, resolved.below(root)))
    }

    /// The same path with the links among its folders resolved inside `root`, the last
    /// component taken as it is: a link there is not followed (it is the entry a write
    /// replaces). Fails, changing nothing, for dangling links, loops and a parent that is
    /// not a folder.
    pub fn resolve_folder_links(&self, root: &Path) -> Result<Self, Error> {
        let (Some(parent), Some(name)) = (self.host.parent(), self.host.file_name()) else {
            return Err(self.resolve_error(ResolveError::NotAbsolute {
                path: self.host_str(),
            }));
        };
        let folder = self.resolve_folder(root, parent)?;
        Ok(self.at(root, folder.below(root).join(name)))
    }

    /// [`Self::resolve_links`] for a folder: what it resolves to must be a folder (or
    /// missing, to be created).
    pub fn resolve_folder_itself(&self, root: &Path) -> Result<Self, Error> {
        let folder = self.resolve_folder(root, &self.host)?;
        Ok(self.at(root, folder.below(root)))
    }

    /// Resolves `folder` (this path or one of its parents) and checks a folder is there.
    fn resolve_folder(&self, root: &Path, folder: &Path) -> Result<Resolved, Error> {
        let resolved = self.resolve_in(root, folder)?;
        let relative = resolved.path.strip_prefix("/").unwrap_or(&resolved.path);
        let entry = RootLookup { root }.entry(relative).map_err(|source| {
            self.resolve_error(ResolveError::Io {
                path: self.host_str(),
                at: resolved.path.display().to_string(),
                source,
            })
        })?;
        match entry {
            Entry::Dir | Entry::Missing => Ok(resolved),
            Entry::File | Entry::Link(_) => Err(self.resolve_error(ResolveError::NotADirectory {
                path: self.host_str(),
                at: resolved.path.display().to_string(),
            })),
        }
    }

    fn resolve_in(&self, root: &Path, path: &Path) -> Result<Resolved, Error> {
        resolve::resolve(&RootLookup { root }, path).map_err(|source| self.resolve_error(source))
    }

    fn resolve_error(&self, source: ResolveError) -> Error {
        Error::Resolve {
            path: self.host_str(),
            source,
        }
    }

    /// This host path reached at `local` below `root`; logs when links led elsewhere.
    fn at(&self, root: &Path, local: PathBuf) -> Self {
        let moved = Self {
            host: self.host.clone(),
            local,
        };
        let target = moved.on_host(root);
        if target != self.host {
            tracing::info!(
                action = "resolved",
                path = %self.host.display(),
                target = %target.display(),
                "host path goes through a symbolic link; using its target on the host"
            );
        }
        moved
    }

    /// The host path that `local` stands for below `root`: `host` with the links
    /// resolved, once a `resolve_*` method ran.
    pub fn on_host(&self, root: &Path) -> PathBuf {
        Path::new("/").join(self.local.strip_prefix(root).unwrap_or(&self.local))
    }

    /// The host path as a string (for `ConfigPath` and logs).
    pub fn host_str(&self) -> String {
        self.host.display().to_string()
    }
}

/// Validated settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the host's `/` is.
    pub host_root: PathBuf,
    /// Target folder of the binaries.
    pub bin_dir: HostPath,
    /// Folder with the binaries to install (in this container).
    pub source_dir: PathBuf,
    /// Where the runsc flags come from.
    pub flags: FlagsSource,
    /// containerd's config.toml.
    pub containerd_config: HostPath,
    /// runsc.toml (the default profile's; a named profile's is beside it,
    /// [`Settings::profile_config`]).
    pub runsc_config: HostPath,
    /// The KVM device (in this container).
    pub kvm_device: PathBuf,
    /// The restart-pending marker.
    pub restart_marker: HostPath,
    /// containerd's unit.
    pub containerd_unit: String,
    /// The host's system bus.
    pub dbus_address: String,
    /// Restart job timeout.
    pub restart_timeout: Duration,
    /// The host's process table (in this container).
    pub proc_dir: PathBuf,
    /// The Node, for the refusal events.
    pub node_name: Option<String>,
    /// How often a waiting run removes versions no longer in use.
    pub cleanup_interval: Duration,
    /// Exit after the work instead of waiting for SIGTERM (install and uninstall).
    pub once: bool,
    /// Uninstall instead of install.
    pub uninstall: bool,
}

impl Settings {
    /// The runsc config of a profile: `--runsc-config` for the default one (`None`), the file
    /// `runsc-<name>.toml` beside it for a named one (`name` a valid profile name, so the
    /// file stays in that folder).
    pub fn profile_config(&self, profile: Option<&str>) -> HostPath {
        match profile {
            None => self.runsc_config.clone(),
            Some(name) => {
                let file = super::plan::profile_config_file(name);
                HostPath {
                    host: self.runsc_config.host.with_file_name(&file),
                    local: self.runsc_config.local.with_file_name(&file),
                }
            }
        }
    }

    /// The settings with the host paths resolved inside the host root (see the module docs
    /// for which links are followed), checked again against the [`super::targets`] rules.
    /// The host root itself is this container's path and is taken with its links resolved
    /// (`canonicalize`), so the resolved paths have no link left for [`crate::safe_fs`] to
    /// refuse. Reads the host, writes nothing.
    pub fn resolve_links(&self) -> Result<Self, Error> {
        let root = std::fs::canonicalize(&self.host_root).map_err(|source| Error::HostRoot {
            path: self.host_root.display().to_string(),
            source,
        })?;
        let resolved = Self {
            bin_dir: self.bin_dir.resolve_folder_itself(&root)?,
            containerd_config: self.containerd_config.resolve_links(&root)?,
            runsc_config: self.runsc_config.resolve_folder_links(&root)?,
            restart_marker: self.restart_marker.resolve_folder_links(&root)?,
            host_root: root,
            ..self.clone()
        };
        targets::check(&resolved.targets(Stage::Resolved), Stage::Resolved)?;
        Ok(resolved)
    }

    /// The places a run writes to (see [`super::targets`]): as given, or as resolved.
    pub fn targets(&self, stage: Stage) -> Vec<Target> {
        let target = |name, host_path: &HostPath, kind| Target {
            name,
            given: host_path.host.clone(),
            path: match stage {
                Stage::Given => host_path.host.clone(),
                Stage::Resolved => host_path.on_host(&self.host_root),
            },
            kind,
        };
        // runsc.toml before config.toml: of two equal places the first is named as the one
        // that is wrong ("--runsc-config is the same path as --containerd-config").
        vec![
            target("--bin-dir", &self.bin_dir, Kind::Folder),
            target("--runsc-config", &self.runsc_config, Kind::File),
            target("--containerd-config", &self.containerd_config, Kind::File),
            target("the restart marker", &self.restart_marker, Kind::File),
        ]
    }

    /// Validates the flags. Fails on relative or `..` host paths, paths that break the
    /// [`super::targets`] rules, an empty unit name or a zero timeout.
    pub fn from_args(args: GvisorInstallArgs) -> Result<Self, Error> {
        let GvisorInstallArgs {
            host_root,
            bin_dir,
            source_dir,
            runsc_flags,
            containerd_config,
            runsc_config,
            containerd_unit,
            dbus_address,
            restart_timeout_seconds,
            once,
            kvm_device,
            node_name,
            proc_dir,
            cleanup_interval_seconds,
            uninstall,
        } = args;
        if !host_root.is_absolute() {
            return Err(Error::InvalidPath {
                flag: "host-root",
                path: host_root.display().to_string(),
            });
        }
        if containerd_unit.trim().is_empty() || containerd_unit.contains('/') {
            return Err(Error::InvalidUnit(containerd_unit));
        }
        if restart_timeout_seconds == 0 {
            return Err(Error::InvalidTimeout);
        }
        if cleanup_interval_seconds == 0 {
            return Err(Error::InvalidCleanupInterval);
        }
        let dbus_address =
            dbus_address.unwrap_or_else(|| crate::systemd::system_bus_address(&host_root));
        let settings = Self {
            bin_dir: HostPath::resolve(&host_root, &bin_dir, "bin-dir")?,
            containerd_config: HostPath::resolve(
                &host_root,
                &containerd_config,
                "containerd-config",
            )?,
            runsc_config: HostPath::resolve(&host_root, &runsc_config, "runsc-config")?,
            restart_marker: HostPath::resolve(&host_root, Path::new(RESTART_MARKER), "-")?,
            flags: FlagsSource::from_arg(&runsc_flags),
            kvm_device,
            source_dir,
            containerd_unit,
            dbus_address,
            restart_timeout: Duration::from_secs(restart_timeout_seconds),
            proc_dir: proc_dir.unwrap_or_else(|| host_root.join("proc")),
            node_name: node_name.filter(|name| !name.is_empty()),
            cleanup_interval: Duration::from_secs(cleanup_interval_seconds),
            once,
            uninstall,
            host_root,
        };
        targets::check(&settings.targets(Stage::Given), Stage::Given)?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: GvisorInstallArgs,
    }

    fn parse(args: &[&str]) -> GvisorInstallArgs {
        Cli::try_parse_from(std::iter::once("gvisor-install").chain(args.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn defaults_match_the_daemonset_contract() {
        let settings = Settings::from_args(parse(&[])).unwrap();
        assert_eq!(settings.host_root, PathBuf::from("/var/host"));
        assert_eq!(
            settings.bin_dir.local,
            PathBuf::from("/var/host/var/bin/containerruntimes")
        );
        assert_eq!(settings.source_dir, PathBuf::from("/var/content"));
        assert_eq!(
            settings.containerd_config.local,
            PathBuf::from("/var/host/etc/containerd/config.toml")
        );
        assert_eq!(
            settings.runsc_config.host_str(),
            "/etc/containerd/runsc.toml"
        );
        assert_eq!(
            settings.dbus_address,
            "unix:path=/var/host/run/dbus/system_bus_socket"
        );
        assert_eq!(settings.containerd_unit, "containerd.service");
        assert_eq!(settings.flags, FlagsSource::None);
        assert!(!settings.once && !settings.uninstall);
    }

    #[test]
    fn daemonset_command_line_parses() {
        let settings = Settings::from_args(parse(&[
            "--host-root=/var/host",
            "--bin-dir=/var/bin/containerruntimes",
            "--source-dir=/var/content",
            "--runsc-flags=net-raw=true\nnvproxy=true\n",
            "--once",
        ]))
        .unwrap();
        assert_eq!(
            settings.flags,
            FlagsSource::Inline("net-raw=true\nnvproxy=true\n".into())
        );
        assert!(settings.once);
    }

    #[test]
    fn host_paths_must_stay_below_the_host_root() {
        let root = Path::new("/var/host");
        for bad in ["etc/containerd", "/etc/../../x", "/", "./etc", ""] {
            let error = HostPath::resolve(root, Path::new(bad), "bin-dir").unwrap_err();
            assert!(
                error
                    .to_string()
                    .starts_with("--bin-dir must be an absolute path"),
                "{bad}: {error}"
            );
        }
        // Redundant separators and `.` in the middle are normalised away, not rejected.
        let ok = HostPath::resolve(root, Path::new("/etc//./containerd/"), "bin-dir").unwrap();
        assert_eq!(ok.local, PathBuf::from("/var/host/etc/containerd"));
    }

    #[test]
    fn bad_unit_timeout_and_root_are_rejected() {
        assert!(matches!(
            Settings::from_args(parse(&["--containerd-unit="])),
            Err(Error::InvalidUnit(_))
        ));
        assert!(matches!(
            Settings::from_args(parse(&["--restart-timeout-seconds=0"])),
            Err(Error::InvalidTimeout)
        ));
        assert!(matches!(
            Settings::from_args(parse(&["--host-root=host"])),
            Err(Error::InvalidPath {
                flag: "host-root",
                ..
            })
        ));
    }

    #[test]
    fn uninstall_waits_for_sigterm_unless_once() {
        let settings = Settings::from_args(parse(&["--uninstall"])).unwrap();
        assert!(settings.uninstall && !settings.once);
        let settings = Settings::from_args(parse(&["--uninstall", "--once"])).unwrap();
        assert!(settings.uninstall && settings.once);
    }

    #[test]
    fn explicit_dbus_address_wins() {
        let settings = Settings::from_args(parse(&["--dbus-address=unix:path=/run/bus"])).unwrap();
        assert_eq!(settings.dbus_address, "unix:path=/run/bus");
    }
}
