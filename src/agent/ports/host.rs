//! Everything the agent does to the node, behind one trait ([`Host`]): files, systemd jobs
//! and unit files, containerd's default config and image extraction. The apply and drift
//! logic only talks to this trait, so it runs in unit tests against an in-memory host, and on
//! a node against [`SystemHost`] (the real file system, systemd over D-Bus with
//! [`crate::systemd`], containerd through its `ctr` client).
//!
//! systemd is reached over one connection to the system bus, made on first use. When that
//! connection breaks (the bus daemon restarted: `dbus.service` named in the restart
//! annotation, or restarted by anyone), the failed call logs it, connects again and is made
//! once more on the new connection; a job whose result was being waited for is not queued
//! again (its failure fails the apply, which is retried on the new connection). Without that
//! the agent would keep the dead connection and fail every apply (issue #41 item 1).
//!
//! File access goes through [`crate::safe_fs`]: no link is followed (a link among the folders
//! is refused, a link, FIFO or device in a file's place is never opened, modes are set on the
//! open descriptor) and reads are bounded. Writes are crash-safe: a temporary file in the
//! target's folder is written, fsynced, given its exact mode and renamed over the target, then
//! the folder is fsynced. Missing parent folders are created with mode 0755; existing folders
//! are left as they are. An `imageRef` file is copied out of a read-only mount of its image
//! with every link resolved inside the image ([`crate::root_path`]), never against the node's
//! `/`.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::process::Command;

use crate::api::operatingsystemconfig::UnitCommand;
use crate::containerd;
use crate::systemd::{self, Systemd};

pub use crate::agent::ports::program::ProgramOutput;
use crate::root_path::{self, ResolveError};
use crate::safe_fs::{self, SafeFsError};

/// Why a host operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A file operation failed.
    #[error(transparent)]
    File(#[from] containerd::Error),
    /// A file operation was refused (a link, FIFO or device where a file or folder belongs)
    /// or failed.
    #[error(transparent)]
    Fs(#[from] SafeFsError),
    /// A folder could not be created or removed.
    #[error("{action} {path}")]
    Dir {
        /// What was being done.
        action: &'static str,
        /// The folder.
        path: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// An `imageRef` file cannot be copied out of its image: missing there, not a regular
    /// file, or its path leads nowhere inside the image.
    #[error("imageRef filePathInImage {path}: {problem}")]
    ImageFile {
        /// `filePathInImage`.
        path: String,
        /// What is wrong, in the image's terms.
        problem: String,
    },
    /// A systemd call failed.
    #[error(transparent)]
    Systemd(#[from] systemd::Error),
    /// A helper program failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status or spawn error.
        status: String,
        /// The end of its error output.
        stderr: String,
    },
}

/// The node, as the apply and drift logic see it.
pub trait Host: Send + Sync {
    /// A regular file's content; `None` if it does not exist. Anything else in its place
    /// (a link, FIFO, device) is an error, and so is a file too large to be one of ours.
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, HostError>;
    /// True when `path` is a regular file holding exactly `content` (reads no more than
    /// that); a missing file or anything that is not a regular file does not hold it.
    fn holds(&self, path: &Path, content: &[u8]) -> Result<bool, HostError> {
        Ok(self.read(path)?.as_deref() == Some(content))
    }
    /// Atomically replaces or creates a file with exactly `mode`; creates parents (0755).
    /// Whatever was in its place (a link included) is replaced, never written through.
    fn write(&self, path: &Path, content: &[u8], mode: u32) -> Result<(), HostError>;
    /// A regular file's permission bits, from its metadata; `None` if there is no regular
    /// file (missing, or a link, FIFO, ... which is never followed).
    fn mode(&self, path: &Path) -> Result<Option<u32>, HostError>;
    /// Sets a regular file's permission bits (through its descriptor; links are refused).
    fn set_mode(&self, path: &Path, mode: u32) -> Result<(), HostError>;
    /// Removes a file; returns whether it existed.
    fn remove_file(&self, path: &Path) -> Result<bool, HostError>;
    /// Removes a folder if it is empty; returns whether it did.
    fn remove_dir_if_empty(&self, path: &Path) -> Result<bool, HostError>;
    /// Removes a folder with everything in it; returns whether it existed.
    fn remove_dir_all(&self, path: &Path) -> Result<bool, HostError>;
    /// Creates a folder and its parents (0755) unless it exists.
    fn create_dir_all(&self, path: &Path) -> Result<(), HostError>;

    /// `systemctl daemon-reload`.
    fn daemon_reload(&self) -> impl Future<Output = Result<(), HostError>> + Send;
    /// Enables a unit file (persistent, replacing conflicting links).
    fn enable_unit(&self, unit: &str) -> impl Future<Output = Result<(), HostError>> + Send;
    /// Disables a unit file.
    fn disable_unit(&self, unit: &str) -> impl Future<Output = Result<(), HostError>> + Send;
    /// Runs a job for the unit and waits for its result.
    fn unit_job(
        &self,
        unit: &str,
        command: UnitCommand,
    ) -> impl Future<Output = Result<(), HostError>> + Send;
    /// True when systemd has the unit loaded (it exists somewhere in its search path).
    fn unit_known(&self, unit: &str) -> impl Future<Output = Result<bool, HostError>> + Send;
    /// The unit's state as the systemd unit check needs it.
    fn unit_health(
        &self,
        unit: &str,
    ) -> impl Future<Output = Result<systemd::UnitHealth, HostError>> + Send;

    /// A small root-owned system file (`/etc/os-release`, `/etc/debian_version`), at most
    /// [`MAX_SYSTEM_FILE_BYTES`]; `None` when it is missing. Such files are usually links
    /// (`/etc/os-release` → `../usr/lib/os-release`), so unlike [`Host::read`] links are
    /// followed; anything but a regular file (a FIFO) is still refused without blocking
    /// ([`crate::safe_fs::read_following_links`]).
    fn read_system_file(&self, path: &Path) -> Result<Option<Vec<u8>>, HostError>;
    /// The kernel's host name, as read (`/proc/sys/kernel/hostname`).
    fn kernel_hostname(&self) -> io::Result<String>;
    /// Whether `ip` is an address of this machine.
    fn is_local_address(&self, ip: IpAddr) -> bool;
    /// Runs `program` with `args` (no shell, no stdin) for at most `timeout`; on failure what it
    /// printed (the end of each stream) and how it ended.
    fn run_program(
        &self,
        program: &str,
        args: &[String],
        timeout: Duration,
    ) -> impl Future<Output = Result<(), ProgramOutput>> + Send;

    /// Whether kubelet answers `200` on its health endpoint ([`KUBELET_HEALTHZ`]) within
    /// `timeout`; else why not.
    fn kubelet_health(&self, timeout: Duration) -> impl Future<Output = Result<(), String>> + Send;
    /// Whether containerd answers (`ctr version`) within `timeout`; else why not.
    fn containerd_health(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// `containerd config default`.
    fn containerd_default_config(&self) -> impl Future<Output = Result<String, HostError>> + Send;
    /// containerd's `(major, minor)` version, if it can be told.
    fn containerd_version(&self) -> impl Future<Output = Option<(u64, u64)>> + Send;
    /// Copies `path_in_image` out of `image` (pulled if not present) to `target` with `mode`.
    /// Links in the image are followed inside the image only.
    fn extract_image_file(
        &self,
        image: &str,
        path_in_image: &str,
        target: &Path,
        mode: u32,
    ) -> impl Future<Output = Result<(), HostError>> + Send;
}

/// kubelet's health endpoint on the node (its `healthzBindAddress:healthzPort` defaults).
pub const KUBELET_HEALTHZ: &str = "127.0.0.1:10248";
/// kubelet's unit.
pub const KUBELET_UNIT: &str = "kubelet.service";
/// containerd's unit.
pub const CONTAINERD_UNIT: &str = "containerd.service";
/// The most bytes of a system file read ([`Host::read_system_file`]).
pub const MAX_SYSTEM_FILE_BYTES: u64 = 64 * 1024;
/// Where the kernel tells its host name.
const KERNEL_HOSTNAME: &str = "/proc/sys/kernel/hostname";

/// One `GET /healthz` to `address` over plain HTTP/1.1: `Ok` on status 200, else why not
/// (connection, status or timeout). A small request by hand rather than an HTTP client: it
/// is the agent's only plain-HTTP call.
pub async fn http_healthz(address: &str, timeout: Duration) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| e.to_string())?;
        let request =
            format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        // "HTTP/1.1 200"
        let mut head = [0u8; 12];
        stream
            .read_exact(&mut head)
            .await
            .map_err(|e| e.to_string())?;
        if head.ends_with(b" 200") {
            Ok(())
        } else {
            let line = String::from_utf8_lossy(&head);
            let status = line.split_whitespace().nth(1).unwrap_or_default();
            Err(format!("status {status}"))
        }
    };
    tokio::time::timeout(timeout, probe)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

/// The real node: local file system, systemd on a system bus, containerd via `ctr`.
#[derive(Debug)]
pub struct SystemHost {
    bus_address: String,
    job_timeout: Duration,
    bus: tokio::sync::Mutex<Bus>,
    containerd_address: String,
    containerd_namespace: String,
    temp_dir: PathBuf,
}

impl SystemHost {
    /// A host whose systemd is on `bus_address`; jobs wait up to `job_timeout`. Image files
    /// are mounted below `temp_dir`.
    pub fn new(
        bus_address: String,
        job_timeout: Duration,
        containerd_address: String,
        containerd_namespace: String,
        temp_dir: PathBuf,
    ) -> Self {
        SystemHost {
            bus_address,
            job_timeout,
            bus: tokio::sync::Mutex::new(Bus::default()),
            containerd_address,
            containerd_namespace,
            temp_dir,
        }
    }

    /// The current connection with its number, connecting when there is none (the first
    /// call, or the first after the connection was lost). The lock makes concurrent jobs
    /// share one new connection.
    async fn systemd(&self) -> Result<(u64, Systemd), HostError> {
        let mut bus = self.bus.lock().await;
        if let Some(systemd) = &bus.current {
            return Ok((bus.generation, systemd.clone()));
        }
        let systemd = Systemd::connect(&self.bus_address)
            .await?
            .with_job_timeout(self.job_timeout);
        bus.generation += 1;
        if bus.generation > 1 {
            tracing::info!(address = %self.bus_address, "connected to the system bus again");
        }
        bus.current = Some(systemd.clone());
        Ok((bus.generation, systemd))
    }

    /// Drops connection number `generation` after `error` showed it is gone (once, however
    /// many calls on it fail), so the next call connects again.
    async fn forget(&self, generation: u64, error: &systemd::Error) {
        let mut bus = self.bus.lock().await;
        if bus.generation == generation && bus.current.take().is_some() {
            tracing::warn!(error = %crate::error_chain::printable(error), "lost the connection to the system bus (was dbus restarted?); connecting again");
        }
    }

    /// Makes `call` on the current connection. When the connection turns out to be lost, it
    /// is dropped, and a call that is safe to repeat
    /// ([`systemd::Error::retry_on_new_connection`]) is made once more on a new one.
    async fn with_systemd<'a, T>(
        &self,
        call: impl Fn(Systemd) -> BoxFuture<'a, Result<T, systemd::Error>>,
    ) -> Result<T, HostError> {
        let (generation, systemd) = self.systemd().await?;
        let error = match call(systemd).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if !error.connection_lost() {
            return Err(error.into());
        }
        self.forget(generation, &error).await;
        if !error.retry_on_new_connection() {
            return Err(error.into());
        }
        let (generation, systemd) = self.systemd().await?;
        let result = call(systemd).await;
        if let Err(error) = &result
            && error.connection_lost()
        {
            self.forget(generation, error).await;
        }
        Ok(result?)
    }

    async fn ctr(&self, args: &[&str]) -> Result<String, HostError> {
        let mut full = vec![
            "--address",
            self.containerd_address.as_str(),
            "--namespace",
            self.containerd_namespace.as_str(),
        ];
        full.extend_from_slice(args);
        run_command("ctr", &full).await
    }
}

/// Runs `program` with `args` (no stdin) and returns its standard output; a failure names the
/// command, its exit status and the end of its standard error.
pub async fn run_command(program: &str, args: &[&str]) -> Result<String, HostError> {
    let command_line = format!("{program} {}", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|error| HostError::Command {
            command: command_line.clone(),
            status: error.to_string(),
            stderr: String::new(),
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr
            .trim()
            .chars()
            .rev()
            .take(500)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(HostError::Command {
            command: command_line,
            status: output.status.to_string(),
            stderr: crate::printable::escape_controls(&tail).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The agent's connection to systemd: none until first used or after it was lost; each new
/// one gets the next number.
#[derive(Debug, Default)]
struct Bus {
    current: Option<Systemd>,
    generation: u64,
}

fn dir_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> HostError + use<> {
    let path = path.display().to_string();
    move |source| HostError::Dir {
        action,
        path,
        source,
    }
}

/// Copies the file `path_in_image` of the image mounted at `mount` to `target`. Every link on
/// the way, in a folder or at the file itself, is resolved inside the image
/// ([`root_path::resolve`]): an absolute link such as `/opt -> /` names the image's `/`, and
/// `..` never climbs above it, so no path in an image reaches a file of the node. The mount is
/// a read-only view of the image, so the resolved path cannot change before it is opened; it
/// is opened without following a link anyway, must be a regular file, and the target is
/// written like every other file ([`safe_fs::write_with`]).
fn copy_image_file(
    mount: &Path,
    path_in_image: &str,
    target: &Path,
    mode: u32,
) -> Result<(), HostError> {
    use std::os::unix::fs::OpenOptionsExt;
    let image_error = |problem: String| HostError::ImageFile {
        path: path_in_image.to_string(),
        problem,
    };
    let asked = Path::new("/").join(path_in_image);
    let resolved = root_path::resolve(&root_path::RootLookup { root: mount }, &asked)
        .map_err(|error| image_error(image_path_problem(&error)))?;
    if !resolved.exists {
        return Err(image_error(format!(
            "{} does not exist in the image",
            resolved.path.display()
        )));
    }
    let source = resolved.below(mount);
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let mut input = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(&source)
        .map_err(|error| image_error(format!("opening {}: {error}", resolved.path.display())))?;
    let is_file = input
        .metadata()
        .map_err(|error| image_error(format!("inspecting {}: {error}", resolved.path.display())))?
        .is_file();
    if !is_file {
        return Err(image_error(format!(
            "{} is not a regular file",
            resolved.path.display()
        )));
    }
    Ok(safe_fs::write_with(target, mode, |file| {
        io::copy(&mut input, file).map(|_| ())
    })?)
}

/// Why a path could not be resolved inside an image, in the image's terms (the resolver's own
/// messages speak of the installer's host).
fn image_path_problem(error: &ResolveError) -> String {
    match error {
        ResolveError::NotAbsolute { .. } => "not an absolute path without `..`".to_string(),
        ResolveError::TooManyLinks { .. } => format!(
            "more than {} symbolic links on the way (a link loop?)",
            root_path::MAX_LINK_HOPS
        ),
        ResolveError::Dangling { link, target, .. } => {
            format!("the link {link} points at {target}, which the image does not have")
        }
        ResolveError::NotADirectory { at, .. } => format!("{at} is not a folder"),
        ResolveError::Io { at, source, .. } => format!("inspecting {at}: {source}"),
    }
}

impl Host for SystemHost {
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, HostError> {
        Ok(safe_fs::read(path)?)
    }

    fn holds(&self, path: &Path, content: &[u8]) -> Result<bool, HostError> {
        Ok(safe_fs::holds(path, content)?)
    }

    fn write(&self, path: &Path, content: &[u8], mode: u32) -> Result<(), HostError> {
        Ok(safe_fs::write(path, content, mode)?)
    }

    fn mode(&self, path: &Path) -> Result<Option<u32>, HostError> {
        Ok(match safe_fs::entry(path)? {
            safe_fs::Entry::Regular { mode } => Some(mode),
            safe_fs::Entry::Missing | safe_fs::Entry::Other { .. } => None,
        })
    }

    fn set_mode(&self, path: &Path, mode: u32) -> Result<(), HostError> {
        Ok(safe_fs::set_mode(path, mode)?)
    }

    fn remove_file(&self, path: &Path) -> Result<bool, HostError> {
        Ok(safe_fs::remove_file(path)?)
    }

    fn remove_dir_if_empty(&self, path: &Path) -> Result<bool, HostError> {
        Ok(safe_fs::remove_dir_if_empty(path)?)
    }

    fn remove_dir_all(&self, path: &Path) -> Result<bool, HostError> {
        // std's remove_dir_all does not follow links inside the tree; the folders above it
        // are checked here.
        safe_fs::check_folders(path)?;
        match std::fs::remove_dir_all(path) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(dir_error("removing the folder", path)(error)),
        }
    }

    fn create_dir_all(&self, path: &Path) -> Result<(), HostError> {
        Ok(safe_fs::create_dir_all(path)?)
    }

    async fn daemon_reload(&self) -> Result<(), HostError> {
        self.with_systemd(|systemd| async move { systemd.daemon_reload().await }.boxed())
            .await
    }

    async fn enable_unit(&self, unit: &str) -> Result<(), HostError> {
        self.with_systemd(|systemd| {
            async move { systemd.enable_unit_files(&[unit]).await.map(drop) }.boxed()
        })
        .await
    }

    async fn disable_unit(&self, unit: &str) -> Result<(), HostError> {
        self.with_systemd(|systemd| {
            async move { systemd.disable_unit_files(&[unit]).await.map(drop) }.boxed()
        })
        .await
    }

    async fn unit_job(&self, unit: &str, command: UnitCommand) -> Result<(), HostError> {
        let result = self
            .with_systemd(|systemd| {
                async move {
                    match command {
                        UnitCommand::Start => systemd.start_unit(unit).await,
                        UnitCommand::Restart => systemd.restart_unit(unit).await,
                        UnitCommand::Stop => systemd.stop_unit(unit).await,
                    }
                }
                .boxed()
            })
            .await;
        match result {
            // Like gardener-node-agent: a job still running after the timeout is not retried
            // (a retry would restart a slow unit again and again); it is logged.
            Err(HostError::Systemd(systemd::Error::JobTimeout {
                operation,
                unit,
                timeout,
            })) => {
                tracing::warn!(%unit, %operation, ?timeout, "unit job still running after the timeout; not waiting longer");
                Ok(())
            }
            other => other,
        }
    }

    async fn unit_known(&self, unit: &str) -> Result<bool, HostError> {
        let status = self
            .with_systemd(|systemd| async move { systemd.unit_status(unit).await }.boxed())
            .await?;
        Ok(status.load_state == "loaded")
    }

    async fn unit_health(&self, unit: &str) -> Result<systemd::UnitHealth, HostError> {
        self.with_systemd(|systemd| async move { systemd.unit_health(unit).await }.boxed())
            .await
    }

    fn read_system_file(&self, path: &Path) -> Result<Option<Vec<u8>>, HostError> {
        Ok(safe_fs::read_following_links_if_present(
            path,
            MAX_SYSTEM_FILE_BYTES,
        )?)
    }

    fn kernel_hostname(&self) -> io::Result<String> {
        std::fs::read_to_string(KERNEL_HOSTNAME)
    }

    /// A socket can be bound to it (GNA compares it with the interfaces' addresses; binding
    /// asks the kernel the same question).
    fn is_local_address(&self, ip: IpAddr) -> bool {
        std::net::UdpSocket::bind((ip, 0)).is_ok()
    }

    async fn run_program(
        &self,
        program: &str,
        args: &[String],
        timeout: Duration,
    ) -> Result<(), ProgramOutput> {
        crate::agent::ports::program::run(program, args, timeout).await
    }

    async fn kubelet_health(&self, timeout: Duration) -> Result<(), String> {
        http_healthz(KUBELET_HEALTHZ, timeout).await
    }

    async fn containerd_health(&self, timeout: Duration) -> Result<(), String> {
        let args = ["--address", self.containerd_address.as_str(), "version"];
        match tokio::time::timeout(timeout, run_command("ctr", &args)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(crate::error_chain::printable(&error)),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }

    async fn containerd_default_config(&self) -> Result<String, HostError> {
        run_command("containerd", &["config", "default"]).await
    }

    async fn containerd_version(&self) -> Option<(u64, u64)> {
        let output = run_command("containerd", &["--version"]).await.ok()?;
        containerd::cri::parse_containerd_version(&output)
    }

    async fn extract_image_file(
        &self,
        image: &str,
        path_in_image: &str,
        target: &Path,
        mode: u32,
    ) -> Result<(), HostError> {
        // Pull only what is missing: an image an operator (or a previous run) put there is
        // used as it is, so nodes without registry access work with pre-loaded images.
        let present = self
            .ctr(&["images", "ls", "--quiet", &format!("name=={image}")])
            .await?;
        if !present.lines().any(|line| line.trim() == image) {
            self.ctr(&[
                "images",
                "pull",
                "--hosts-dir",
                containerd::cri::CERTS_DIR,
                image,
            ])
            .await?;
        }
        static MOUNTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mount = self.temp_dir.join(format!(
            "mount-image-{}-{}",
            std::process::id(),
            MOUNTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        self.create_dir_all(&mount)?;
        let mount_path = mount.display().to_string();
        let mounted = self.ctr(&["images", "mount", image, &mount_path]).await;
        if let Err(error) = mounted {
            let _ = self.remove_dir_if_empty(&mount);
            return Err(error);
        }
        let copied = copy_image_file(&mount, path_in_image, target, mode);
        let unmounted = self.ctr(&["images", "unmount", "--rm", &mount_path]).await;
        let _ = self.remove_dir_if_empty(&mount);
        copied?;
        unmounted?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::PathBuf;

    use super::*;

    #[tokio::test]
    async fn the_health_probe_tells_200_from_anything_else() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut answers = [
                &b"HTTP/1.1 200 OK\r\n\r\nok"[..],
                b"HTTP/1.1 500 Oops\r\n\r\n",
            ]
            .into_iter();
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = [0u8; 256];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(answers.next().unwrap_or_default()).await;
            }
        });
        let timeout = Duration::from_secs(5);
        assert_eq!(http_healthz(&address, timeout).await, Ok(()));
        assert_eq!(
            http_healthz(&address, timeout).await,
            Err("status 500".into())
        );
        // Nothing listens.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        assert!(http_healthz(&closed, timeout).await.is_err());
    }

    /// An "image" folder and a folder of the "node" beside it, both free of links (like the
    /// agent's own mount folder).
    fn image_and_node() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (image, node) = (base.join("image"), base.join("node"));
        std::fs::create_dir_all(image.join("etc")).unwrap();
        std::fs::create_dir_all(node.join("etc")).unwrap();
        std::fs::write(image.join("etc/shadow"), "image's shadow").unwrap();
        std::fs::write(node.join("etc/shadow"), "node's shadow").unwrap();
        (dir, image, node)
    }

    fn copy(image: &Path, path_in_image: &str, target: &Path) -> Result<String, String> {
        copy_image_file(image, path_in_image, target, 0o640)
            .map(|()| std::fs::read_to_string(target).unwrap())
            .map_err(|error| crate::error_chain::printable(&error))
    }

    /// Issue #26 item 9: `/opt -> <a folder of the node>` in the image, `filePathInImage:
    /// /opt/etc/shadow`. `O_NOFOLLOW` on the last component alone let the folder link resolve
    /// against the node's `/` and copied the node's file.
    #[test]
    fn an_absolute_folder_link_in_the_image_stays_in_the_image() {
        let (_dir, image, node) = image_and_node();
        symlink(&node, image.join("opt")).unwrap();
        // The same absolute path inside the image: what the link means there.
        let inside = image.join(node.strip_prefix("/").unwrap());
        std::fs::create_dir_all(inside.join("etc")).unwrap();
        std::fs::write(inside.join("etc/shadow"), "image's file at that path").unwrap();
        let target = image.with_file_name("target");
        assert_eq!(
            copy(&image, "/opt/etc/shadow", &target).unwrap(),
            "image's file at that path"
        );
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777,
            0o640
        );
    }

    #[test]
    fn relative_and_final_links_resolve_inside_the_image() {
        let (_dir, image, _node) = image_and_node();
        // `..` never climbs above the image's root.
        symlink("../../../../../../etc", image.join("up")).unwrap();
        let target = image.with_file_name("target");
        assert_eq!(
            copy(&image, "/up/shadow", &target).unwrap(),
            "image's shadow"
        );
        // A link at the file itself (busybox-style images) is followed inside the image too.
        symlink("/etc/shadow", image.join("tool")).unwrap();
        assert_eq!(copy(&image, "/tool", &target).unwrap(), "image's shadow");
    }

    #[test]
    fn what_the_image_does_not_have_fails_and_leaves_the_target_alone() {
        let (_dir, image, node) = image_and_node();
        let target = image.with_file_name("target");
        std::fs::write(&target, "before").unwrap();
        symlink(node.join("etc"), image.join("gone")).unwrap();
        std::fs::create_dir(image.join("dir")).unwrap();
        symlink("a", image.join("b")).unwrap();
        symlink("b", image.join("a")).unwrap();
        for (path, expected) in [
            ("/gone/shadow", "which the image does not have"),
            ("/missing", "/missing does not exist in the image"),
            ("/dir", "/dir is not a regular file"),
            ("/etc/shadow/x", "/etc/shadow is not a folder"),
            ("/a", "a link loop?"),
        ] {
            let error = copy(&image, path, &target).unwrap_err();
            assert!(
                error.starts_with(&format!("imageRef filePathInImage {path}: "))
                    && error.contains(expected),
                "{path}: {error}"
            );
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "before");
        }
        assert_eq!(
            std::fs::read_to_string(node.join("etc/shadow")).unwrap(),
            "node's shadow"
        );
    }
}
