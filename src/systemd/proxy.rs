//! zbus proxies for the parts of systemd's D-Bus API ([`super::Systemd`]) uses:
//! `org.freedesktop.systemd1.Manager`, `.Unit` and `.Service` (see `man org.freedesktop.systemd1`).
//! Declarations only; no logic.

use zbus::zvariant::{ObjectPath, OwnedObjectPath};

/// A unit file change reported by `EnableUnitFiles`/`DisableUnitFiles`: (type, file, target).
pub type UnitFileChangeTuple = (String, String, String);

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_blocking = false
)]
pub trait Manager {
    /// Ask for job and unit signals on this connection (needed for `JobRemoved`).
    fn subscribe(&self) -> zbus::Result<()>;

    /// Queue a start job; returns the job's object path.
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queue a stop job.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queue a restart job (starts the unit if it is not running).
    fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Queue a reload job.
    fn reload_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Load a unit (if needed) and return its object path; works for unknown names, whose
    /// `LoadState` is then `not-found`.
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    /// `systemctl daemon-reload`; returns when the reload is done.
    fn reload(&self) -> zbus::Result<()>;

    /// `systemctl enable`: (carries install info, changes).
    fn enable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
        force: bool,
    ) -> zbus::Result<(bool, Vec<UnitFileChangeTuple>)>;

    /// `systemctl disable`: changes.
    fn disable_unit_files(
        &self,
        files: &[&str],
        runtime: bool,
    ) -> zbus::Result<Vec<UnitFileChangeTuple>>;

    /// The enablement state of a unit file (`enabled`, `disabled`, `static`, ...).
    fn get_unit_file_state(&self, file: &str) -> zbus::Result<String>;

    /// Emitted when a job finishes; `result` is `done`, `canceled`, `timeout`, `failed`,
    /// `dependency` or `skipped`.
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1",
    gen_blocking = false
)]
pub trait Unit {
    /// `loaded`, `not-found`, `masked`, ...
    #[zbus(property)]
    fn load_state(&self) -> zbus::Result<String>;

    /// `active`, `inactive`, `failed`, `activating`, ...
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;

    /// Type-specific state, e.g. `running`, `dead`, `exited`.
    #[zbus(property)]
    fn sub_state(&self) -> zbus::Result<String>;

    /// 128-bit ID of the current (or last) run of the unit; empty before the first run.
    #[zbus(property, name = "InvocationID")]
    fn invocation_id(&self) -> zbus::Result<Vec<u8>>;

    /// When the unit last entered `active`, µs since the epoch (0 if never).
    #[zbus(property)]
    fn active_enter_timestamp(&self) -> zbus::Result<u64>;

    /// When the unit last changed its state, µs since the epoch (0 if never).
    #[zbus(property)]
    fn state_change_timestamp(&self) -> zbus::Result<u64>;

    /// Units (timers, paths, sockets) that activate this one.
    #[zbus(property)]
    fn triggered_by(&self) -> zbus::Result<Vec<String>>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1",
    gen_blocking = false
)]
pub trait Service {
    /// PID of the main process, 0 if none.
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> zbus::Result<u32>;

    /// When the main process was started, µs since the epoch.
    #[zbus(property)]
    fn exec_main_start_timestamp(&self) -> zbus::Result<u64>;

    /// `simple`, `oneshot`, `notify`, ...
    #[zbus(property, name = "Type")]
    fn service_type(&self) -> zbus::Result<String>;
}
