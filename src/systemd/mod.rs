//! A small systemd client over D-Bus (zbus): start/stop/restart/reload units and wait for
//! the job's result, daemon-reload, enable/disable unit files, and read a unit's state.
//!
//! Used on the node by the gVisor installer ([`crate::gvisor_install`], restarting
//! containerd through the host's system bus from inside its pod) and by the node agent. It
//! replaces `chroot /host systemctl ...`: no shell or systemctl is needed on either side,
//! and a job's outcome comes back as a value instead of an exit code.
//!
//! Jobs are queued with mode `replace`. The client subscribes to the manager's signals on
//! connect and starts listening for `JobRemoved` *before* it queues a job, so a job that
//! finishes before the reply to `RestartUnit` arrives is not missed. A job counts as
//! successful only with result `done`; any other result, or no result within the job
//! timeout (default [`DEFAULT_JOB_TIMEOUT`]), is an error. (gardener-node-agent treats a
//! timeout as success; we report it, the caller decides.)
//!
//! One [`Systemd`] holds one connection; it is cheap to create per run. A connection does not
//! survive a restart of the bus daemon (`dbus.service`): [`Error::connection_lost`] tells such
//! a failure from systemd's own answers, and a long-lived user (the node agent's
//! [`crate::agent::ports::host::SystemHost`]) connects again. The pure helpers
//! ([`JobResult`], [`format_invocation_id`]) are unit-tested here; the D-Bus parts are tested
//! against a real systemd in `test/gvisor_install_e2e.rs`.

mod proxy;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use zbus::proxy::CacheProperties;

use proxy::{ManagerProxy, ServiceProxy, UnitProxy};

/// How long to wait for a job's result unless told otherwise.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(90);

/// Path of the system bus socket below a root file system.
pub const SYSTEM_BUS_SOCKET: &str = "run/dbus/system_bus_socket";

/// Job mode for every job we queue: replace conflicting queued jobs.
const JOB_MODE: &str = "replace";

/// Why a systemd call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bus could not be reached or the handshake failed.
    #[error("connecting to the system bus at {address}; is dbus running and the socket mounted?")]
    Connect {
        /// The D-Bus address used.
        address: String,
        /// Cause (boxed: zbus errors are large).
        #[source]
        source: Box<zbus::Error>,
    },
    /// A D-Bus method call failed (unknown unit, access denied, ...).
    #[error("systemd {method}({target}) failed")]
    Call {
        /// The D-Bus method.
        method: &'static str,
        /// Unit or file name the call was about (empty for global calls).
        target: String,
        /// Cause, including systemd's error name and message (boxed: zbus errors are large).
        #[source]
        source: Box<zbus::Error>,
    },
    /// A job finished with a result other than `done`.
    #[error("{operation} of {unit} finished with result `{result}`; see `journalctl -u {unit}`")]
    JobFailed {
        /// What was asked.
        operation: Operation,
        /// The unit.
        unit: String,
        /// systemd's job result.
        result: JobResult,
    },
    /// No `JobRemoved` for the job arrived in time.
    #[error("{operation} of {unit} did not finish within {timeout:?}")]
    JobTimeout {
        /// What was asked.
        operation: Operation,
        /// The unit.
        unit: String,
        /// How long we waited.
        timeout: Duration,
    },
    /// The signal stream ended (bus connection lost) before the job finished.
    #[error("lost the system bus while waiting for the {operation} job of {unit}")]
    Disconnected {
        /// What was asked.
        operation: Operation,
        /// The unit.
        unit: String,
    },
}

impl Error {
    /// True when the connection to the bus itself is gone (the bus daemon was restarted or
    /// stopped): every later call on this [`Systemd`] fails the same way, so the caller
    /// connects again. A call systemd answered with an error (unknown unit, access denied,
    /// a failed job) leaves the connection usable.
    pub fn connection_lost(&self) -> bool {
        match self {
            Error::Disconnected { .. } => true,
            Error::Call { source, .. } => is_lost(source),
            Error::Connect { .. } | Error::JobFailed { .. } | Error::JobTimeout { .. } => false,
        }
    }

    /// True when the call can be made again on a new connection without doing twice what
    /// systemd already did: a method call whose connection broke (a job it queued would be
    /// queued again with mode `replace`, which systemd merges with one still waiting; the
    /// other calls are idempotent). A job already queued and waited for when the bus went
    /// away ([`Error::Disconnected`]) is not.
    pub fn retry_on_new_connection(&self) -> bool {
        matches!(self, Error::Call { source, .. } if is_lost(source))
    }
}

/// Whether a zbus error means the connection is broken: an I/O error on its socket (`Broken
/// pipe`, `Connection reset`, end of stream) or the bus's own `Disconnected` error.
fn is_lost(error: &zbus::Error) -> bool {
    match error {
        zbus::Error::InputOutput(_) => true,
        zbus::Error::FDO(fdo) => matches!(**fdo, zbus::fdo::Error::Disconnected(_)),
        _ => false,
    }
}

/// A unit job we can queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `StartUnit`.
    Start,
    /// `StopUnit`.
    Stop,
    /// `RestartUnit` (starts a unit that is not running).
    Restart,
    /// `ReloadUnit`.
    Reload,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Start => "start",
            Operation::Stop => "stop",
            Operation::Restart => "restart",
            Operation::Reload => "reload",
        })
    }
}

/// The `result` of systemd's `JobRemoved` signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobResult {
    /// The job succeeded.
    Done,
    /// Canceled before it finished (e.g. replaced by another job).
    Canceled,
    /// The unit's start or stop timeout hit.
    Timeout,
    /// The job failed (the unit's process failed, or its condition).
    Failed,
    /// A required dependency failed.
    Dependency,
    /// Not applicable to the unit's state (e.g. reload of an inactive unit).
    Skipped,
    /// A result this code does not know.
    Other(String),
}

impl JobResult {
    /// Parses the signal's result string.
    pub fn parse(result: &str) -> Self {
        match result {
            "done" => Self::Done,
            "canceled" => Self::Canceled,
            "timeout" => Self::Timeout,
            "failed" => Self::Failed,
            "dependency" => Self::Dependency,
            "skipped" => Self::Skipped,
            other => Self::Other(other.to_string()),
        }
    }
}

impl fmt::Display for JobResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Done => "done",
            Self::Canceled => "canceled",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
            Self::Dependency => "dependency",
            Self::Skipped => "skipped",
            Self::Other(other) => other,
        })
    }
}

/// A unit's state as systemd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitStatus {
    /// `loaded`, `not-found`, `masked`, ...
    pub load_state: String,
    /// `active`, `inactive`, `failed`, `activating`, ...
    pub active_state: String,
    /// `running`, `dead`, `exited`, ...
    pub sub_state: String,
    /// The current run's InvocationID as 32 lowercase hex digits; empty if never run.
    /// A new value after a restart proves the unit really ran again.
    pub invocation_id: String,
    /// When it last became active, µs since the epoch (0 if never).
    pub active_enter_timestamp: u64,
    /// For services: PID of the main process (0 if none).
    pub main_pid: Option<u32>,
    /// For services: when the main process started, µs since the epoch.
    pub exec_main_start_timestamp: Option<u64>,
}

/// What a health check needs to know about a unit (GNA's systemd unit check reads the same).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnitHealth {
    /// `active`, `inactive`, `failed`, `activating`, ...
    pub active_state: String,
    /// `running`, `dead`, `exited`, `auto-restart`, ...
    pub sub_state: String,
    /// When the unit last changed state, µs since the epoch (0 if never).
    pub state_change_timestamp: u64,
    /// Services that are `inactive (dead)` only: their `Type`.
    pub service_type: Option<String>,
    /// Units that are `inactive (dead)` only: what triggers them (timers, paths, ...).
    pub triggered_by: Vec<String>,
}

/// One change `EnableUnitFiles`/`DisableUnitFiles` made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFileChange {
    /// `symlink` or `unlink`.
    pub kind: String,
    /// The symlink created or removed.
    pub file: String,
    /// What it points to (empty for `unlink`).
    pub target: String,
}

/// A connection to systemd's manager on one system bus.
#[derive(Debug, Clone)]
pub struct Systemd {
    connection: zbus::Connection,
    manager: ManagerProxy<'static>,
    job_timeout: Duration,
}

/// The D-Bus address of the system bus of the root file system at `root`
/// (`unix:path=<root>/run/dbus/system_bus_socket`). For `/` that is the usual system bus.
pub fn system_bus_address(root: &Path) -> String {
    format!("unix:path={}", root.join(SYSTEM_BUS_SOCKET).display())
}

impl Systemd {
    /// Connects to the bus at `address` (e.g. from [`system_bus_address`]) and subscribes to
    /// the manager's signals.
    pub async fn connect(address: &str) -> Result<Self, Error> {
        let connect_error = |source| Error::Connect {
            address: address.to_string(),
            source: Box::new(source),
        };
        let connection = zbus::connection::Builder::address(address)
            .map_err(connect_error)?
            .build()
            .await
            .map_err(connect_error)?;
        let manager = ManagerProxy::new(&connection)
            .await
            .map_err(connect_error)?;
        manager
            .subscribe()
            .await
            .map_err(call_error("Subscribe", ""))?;
        Ok(Self {
            connection,
            manager,
            job_timeout: DEFAULT_JOB_TIMEOUT,
        })
    }

    /// Sets how long job methods wait for the job's result.
    pub fn with_job_timeout(mut self, timeout: Duration) -> Self {
        self.job_timeout = timeout;
        self
    }

    /// Starts `unit` and waits until the job is done.
    pub async fn start_unit(&self, unit: &str) -> Result<(), Error> {
        self.run_job(Operation::Start, unit).await
    }

    /// Stops `unit` and waits until the job is done.
    pub async fn stop_unit(&self, unit: &str) -> Result<(), Error> {
        self.run_job(Operation::Stop, unit).await
    }

    /// Restarts `unit` (starting it if inactive) and waits until the job is done.
    pub async fn restart_unit(&self, unit: &str) -> Result<(), Error> {
        self.run_job(Operation::Restart, unit).await
    }

    /// Reloads `unit` and waits until the job is done.
    pub async fn reload_unit(&self, unit: &str) -> Result<(), Error> {
        self.run_job(Operation::Reload, unit).await
    }

    /// `systemctl daemon-reload`: re-reads unit files; returns when systemd is done.
    pub async fn daemon_reload(&self) -> Result<(), Error> {
        self.manager
            .reload()
            .await
            .map_err(call_error("Reload", ""))
    }

    /// `systemctl enable` (persistent, replacing conflicting symlinks). Idempotent: an
    /// enabled unit yields no changes.
    pub async fn enable_unit_files(&self, units: &[&str]) -> Result<Vec<UnitFileChange>, Error> {
        let (_, changes) = self
            .manager
            .enable_unit_files(units, false, true)
            .await
            .map_err(call_error("EnableUnitFiles", &units.join(",")))?;
        Ok(changes.into_iter().map(UnitFileChange::from).collect())
    }

    /// `systemctl disable`. Idempotent: a disabled unit yields no changes.
    pub async fn disable_unit_files(&self, units: &[&str]) -> Result<Vec<UnitFileChange>, Error> {
        let changes = self
            .manager
            .disable_unit_files(units, false)
            .await
            .map_err(call_error("DisableUnitFiles", &units.join(",")))?;
        Ok(changes.into_iter().map(UnitFileChange::from).collect())
    }

    /// The enablement state of a unit file: `enabled`, `disabled`, `static`, ...
    pub async fn unit_file_state(&self, unit: &str) -> Result<String, Error> {
        self.manager
            .get_unit_file_state(unit)
            .await
            .map_err(call_error("GetUnitFileState", unit))
    }

    /// The unit object of `unit` and its path, without a property cache: every read goes to
    /// systemd, so a fresh value is never stale.
    async fn fresh_unit_proxy(
        &self,
        unit: &str,
    ) -> Result<(UnitProxy<'_>, zbus::zvariant::OwnedObjectPath), Error> {
        let call = |method: &'static str| call_error(method, unit);
        let path = self
            .manager
            .load_unit(unit)
            .await
            .map_err(call("LoadUnit"))?;
        let proxy = UnitProxy::builder(&self.connection)
            .path(path.clone())
            .map_err(call("Get"))?
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(call("Get"))?;
        Ok((proxy, path))
    }

    /// The service object at `path` (of `unit`), without a property cache.
    async fn fresh_service_proxy(
        &self,
        unit: &str,
        path: zbus::zvariant::OwnedObjectPath,
    ) -> Result<ServiceProxy<'_>, Error> {
        let call = |method: &'static str| call_error(method, unit);
        ServiceProxy::builder(&self.connection)
            .path(path)
            .map_err(call("Get"))?
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(call("Get"))
    }

    /// The state of `unit`; a unit systemd does not know has `load_state == "not-found"`.
    pub async fn unit_status(&self, unit: &str) -> Result<UnitStatus, Error> {
        let call = |method: &'static str| call_error(method, unit);
        let (unit_proxy, path) = self.fresh_unit_proxy(unit).await?;
        let mut status = UnitStatus {
            load_state: unit_proxy.load_state().await.map_err(call("Get"))?,
            active_state: unit_proxy.active_state().await.map_err(call("Get"))?,
            sub_state: unit_proxy.sub_state().await.map_err(call("Get"))?,
            invocation_id: format_invocation_id(
                &unit_proxy.invocation_id().await.map_err(call("Get"))?,
            ),
            active_enter_timestamp: unit_proxy
                .active_enter_timestamp()
                .await
                .map_err(call("Get"))?,
            main_pid: None,
            exec_main_start_timestamp: None,
        };
        if unit.ends_with(".service") && status.load_state == "loaded" {
            let service = self.fresh_service_proxy(unit, path).await?;
            status.main_pid = Some(service.main_pid().await.map_err(call("Get"))?);
            status.exec_main_start_timestamp = Some(
                service
                    .exec_main_start_timestamp()
                    .await
                    .map_err(call("Get"))?,
            );
        }
        Ok(status)
    }

    /// The health of `unit`: states and state-change time, plus service type and triggers
    /// when it is `inactive (dead)` (only then are they needed, so only then read).
    pub async fn unit_health(&self, unit: &str) -> Result<UnitHealth, Error> {
        let call = |method: &'static str| call_error(method, unit);
        let (unit_proxy, path) = self.fresh_unit_proxy(unit).await?;
        let mut health = UnitHealth {
            active_state: unit_proxy.active_state().await.map_err(call("Get"))?,
            sub_state: unit_proxy.sub_state().await.map_err(call("Get"))?,
            state_change_timestamp: unit_proxy
                .state_change_timestamp()
                .await
                .map_err(call("Get"))?,
            service_type: None,
            triggered_by: Vec::new(),
        };
        if health.active_state == "inactive" && health.sub_state == "dead" {
            health.triggered_by = unit_proxy.triggered_by().await.map_err(call("Get"))?;
            if unit.ends_with(".service") {
                let service = self.fresh_service_proxy(unit, path).await?;
                health.service_type = Some(service.service_type().await.map_err(call("Get"))?);
            }
        }
        Ok(health)
    }

    /// Queues a job for `unit` and waits for its `JobRemoved` signal.
    async fn run_job(&self, operation: Operation, unit: &str) -> Result<(), Error> {
        let call_error = |method: &'static str| call_error(method, unit);
        // Listen first: the job may finish before the method reply reaches us.
        let mut removed = self
            .manager
            .receive_job_removed()
            .await
            .map_err(call_error("AddMatch(JobRemoved)"))?;
        let job = match operation {
            Operation::Start => self.manager.start_unit(unit, JOB_MODE).await,
            Operation::Stop => self.manager.stop_unit(unit, JOB_MODE).await,
            Operation::Restart => self.manager.restart_unit(unit, JOB_MODE).await,
            Operation::Reload => self.manager.reload_unit(unit, JOB_MODE).await,
        }
        .map_err(call_error(match operation {
            Operation::Start => "StartUnit",
            Operation::Stop => "StopUnit",
            Operation::Restart => "RestartUnit",
            Operation::Reload => "ReloadUnit",
        }))?;
        let wait_for_job = async {
            while let Some(signal) = removed.next().await {
                // A signal we cannot decode is not ours to judge; keep waiting for ours.
                let Ok(args) = signal.args() else { continue };
                if args.job().as_str() == job.as_str() {
                    return Some(JobResult::parse(args.result()));
                }
            }
            None
        };
        let result = tokio::time::timeout(self.job_timeout, wait_for_job)
            .await
            .map_err(|_| Error::JobTimeout {
                operation,
                unit: unit.to_string(),
                timeout: self.job_timeout,
            })?
            .ok_or_else(|| Error::Disconnected {
                operation,
                unit: unit.to_string(),
            })?;
        match result {
            JobResult::Done => Ok(()),
            result => Err(Error::JobFailed {
                operation,
                unit: unit.to_string(),
                result,
            }),
        }
    }
}

impl From<proxy::UnitFileChangeTuple> for UnitFileChange {
    fn from((kind, file, target): proxy::UnitFileChangeTuple) -> Self {
        Self { kind, file, target }
    }
}

/// Maps a zbus error of `method` about `target` to [`Error::Call`].
fn call_error(method: &'static str, target: &str) -> impl FnOnce(zbus::Error) -> Error {
    let target = target.to_string();
    move |source| Error::Call {
        method,
        target,
        source: Box::new(source),
    }
}

/// systemd's InvocationID bytes as 32 lowercase hex digits (as `systemctl show` prints it);
/// empty for an empty ID.
pub fn format_invocation_id(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_results_round_trip() {
        for text in [
            "done",
            "canceled",
            "timeout",
            "failed",
            "dependency",
            "skipped",
        ] {
            let result = JobResult::parse(text);
            assert_ne!(result, JobResult::Other(text.to_string()));
            assert_eq!(result.to_string(), text);
        }
        assert_eq!(
            JobResult::parse("invalid"),
            JobResult::Other("invalid".into())
        );
    }

    #[test]
    fn invocation_ids_print_like_systemctl() {
        let bytes = [
            0x71, 0x2c, 0xd0, 0x16, 0x54, 0x93, 0x45, 0x71, 0x8e, 0x40, 0x62, 0xab, 0x64, 0xf4,
            0xff, 0x18,
        ];
        assert_eq!(
            format_invocation_id(&bytes),
            "712cd016549345718e4062ab64f4ff18"
        );
        assert_eq!(format_invocation_id(&[]), "");
    }

    #[test]
    fn bus_address_under_a_root() {
        assert_eq!(
            system_bus_address(Path::new("/var/host")),
            "unix:path=/var/host/run/dbus/system_bus_socket"
        );
        assert_eq!(
            system_bus_address(Path::new("/")),
            "unix:path=/run/dbus/system_bus_socket"
        );
    }

    #[test]
    fn a_broken_socket_is_a_lost_connection_and_an_answer_is_not() {
        let call = |source: zbus::Error| Error::Call {
            method: "Reload",
            target: String::new(),
            source: Box::new(source),
        };
        let broken = || {
            zbus::Error::InputOutput(std::sync::Arc::new(std::io::Error::from(
                std::io::ErrorKind::BrokenPipe,
            )))
        };
        assert!(call(broken()).connection_lost());
        assert!(call(broken()).retry_on_new_connection());
        let disconnected = zbus::Error::FDO(Box::new(zbus::fdo::Error::Disconnected(
            "bus went away".into(),
        )));
        assert!(call(disconnected).connection_lost());
        let answered = zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied("no".into())));
        assert!(!call(answered).connection_lost());
        assert!(!call(zbus::Error::Failure("unknown unit".into())).connection_lost());
        let waiting = Error::Disconnected {
            operation: Operation::Restart,
            unit: "kubelet.service".into(),
        };
        assert!(waiting.connection_lost());
        assert!(!waiting.retry_on_new_connection());
        let failed = Error::JobFailed {
            operation: Operation::Restart,
            unit: "kubelet.service".into(),
            result: JobResult::Failed,
        };
        assert!(!failed.connection_lost());
    }

    #[test]
    fn job_errors_say_what_to_look_at() {
        let error = Error::JobFailed {
            operation: Operation::Restart,
            unit: "containerd.service".into(),
            result: JobResult::Failed,
        };
        assert_eq!(
            error.to_string(),
            "restart of containerd.service finished with result `failed`; see `journalctl -u containerd.service`"
        );
    }
}
