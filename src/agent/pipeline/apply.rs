//! Applying one OperatingSystemConfig to the node through [`Host`], resumable after a crash
//! at any point: the order is gardener-node-agent's (`docs/agent.md#apply-order`, from the
//! containerd settings to `last-applied-osc.yaml`), one step each in `apply/steps.rs`.
//!
//! Invariants: the [`Journal`] is written before the first change and rewritten after every
//! completed item; `daemon-reload` always runs before the unit jobs; a changed own unit
//! returns [`Outcome::RestartSelf`] before any job runs (the next process resumes from the
//! journal); `last-applied-osc.yaml` is written last.

use std::path::{Path, PathBuf};

use crate::api::operatingsystemconfig::{DropIn, File, UnitCommand};
use crate::containerd::cri::{self, CriSettings};
use crate::containerd::{ContainerdConfig, DEFAULT_CONFIG};

use crate::agent::pipeline::changes::{self, Side};
use crate::agent::pipeline::journal::{self, CommandEntry, Journal, PersistError};
use crate::agent::pipeline::osc::{self, Effective, NodeOsc};
use crate::agent::ports::cluster::Secrets;
use crate::agent::ports::host::{Host, HostError};
use crate::agent::ports::paths::{Paths, STATE_FILE_MODE};

mod steps;

/// Mode of files without `permissions`.
pub const DEFAULT_FILE_MODE: u32 = 0o600;
/// Mode of unit files and drop-ins.
pub const UNIT_FILE_MODE: u32 = 0o600;
/// Mode of containerd's config and registry files.
pub const CONTAINERD_FILE_MODE: u32 = 0o644;
/// The containerd unit.
pub const CONTAINERD_UNIT: &str = "containerd.service";
/// The drop-in that puts container runtime binaries on containerd's `PATH`.
pub const CONTAINERD_PATH_DROP_IN: &str = "30-env_config.conf";

/// Why an apply stopped. The journal keeps what is left; the next attempt resumes there.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A host operation failed.
    #[error("{step}")]
    Host {
        /// The step.
        step: String,
        /// Cause.
        #[source]
        source: HostError,
    },
    /// A `secretRef` could not be read.
    #[error("file {path}: reading secret {secret} key {key}: {message}")]
    Secret {
        /// The file.
        path: String,
        /// The secret name.
        secret: String,
        /// The data key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// The journal or the last-applied OSC could not be serialised.
    #[error("serialising {what}: {message}")]
    Encode {
        /// What.
        what: &'static str,
        /// The serde message.
        message: String,
    },
    /// containerd's config could not be edited (invalid TOML, unknown version, ...).
    #[error("containerd config {path}: {source}")]
    Containerd {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: crate::containerd::Error,
    },
    /// Unit jobs failed; they stay in the journal.
    #[error("unit jobs failed: {}", .0.iter().map(|job| format!("{}: {}", job.unit, job.error)).collect::<Vec<_>>().join("; "))]
    Commands(Vec<FailedJob>),
}

/// A unit job that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedJob {
    /// The unit.
    pub unit: String,
    /// What was asked of it.
    pub command: UnitCommand,
    /// Why it failed (error chain).
    pub error: String,
}

impl ApplyError {
    /// Short label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            ApplyError::Host { .. } => "host",
            ApplyError::Secret { .. } => "secret",
            ApplyError::Encode { .. } => "encode",
            ApplyError::Containerd { .. } => "containerd-config",
            ApplyError::Commands(_) => "unit-job",
        }
    }
}

/// What an apply did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The journal on disk was for this checksum and was continued.
    pub resumed: bool,
    /// Files written.
    pub files_written: Vec<String>,
    /// Files deleted.
    pub files_deleted: Vec<String>,
    /// Units whose file, drop-ins or enablement were written.
    pub units_written: Vec<String>,
    /// Units removed.
    pub units_deleted: Vec<String>,
    /// Jobs that ran, in completion order.
    pub commands: Vec<CommandEntry>,
    /// containerd's config.toml was rewritten.
    pub containerd_config_written: bool,
}

/// The result of [`apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Everything is applied and `last-applied-osc.yaml` written.
    Applied(Summary),
    /// The agent's own unit changed: daemon-reload is done, the process must exit now so
    /// systemd starts the new one, which resumes from the journal.
    RestartSelf(Summary),
}

/// What to apply.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The secret's `checksum/data-script`.
    pub checksum: &'a str,
    /// The OSC (with the agent's injected drop-ins), validated.
    pub osc: &'a NodeOsc,
    /// Its merged view.
    pub effective: &'a Effective<'a>,
    /// The last applied OSC and its merged view, if any.
    pub last_applied: Option<(&'a NodeOsc, &'a Effective<'a>)>,
    /// The agent's own unit (changing it means exiting after daemon-reload).
    pub own_unit: &'a str,
    /// Where state and units go.
    pub paths: &'a Paths,
}

/// Adds the agent's `containerd.service` drop-in to an OSC with containerd configuration:
/// `PATH` starts with `/var/bin/containerruntimes`, where runtime binaries (e.g. runsc's
/// shim) are installed. A fixed rest of the `PATH` keeps the drop-in identical on every
/// node and run.
pub fn inject_containerd_drop_in(osc: &mut NodeOsc) {
    if changes::containerd_config(osc).is_none() {
        return;
    }
    let content = format!(
        "[Service]\nEnvironment=\"PATH={}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"\n",
        crate::api::constants::CONTAINER_RUNTIME_BINARY_PATH
    );
    osc::inject_drop_in(
        osc,
        CONTAINERD_UNIT,
        DropIn {
            name: CONTAINERD_PATH_DROP_IN.to_string(),
            content,
        },
    );
}

/// The work an apply of `input` does: the journal on disk when it is for this checksum
/// (`true`: resumed), else the change set computed against the last applied OSC. Reads only;
/// the disruptive rollout classifies this before [`apply_planned`] starts.
pub fn plan<H: Host>(host: &H, input: Input<'_>) -> Result<(Journal, bool), ApplyError> {
    if let Some(journal) = journal::load(host, input.paths, input.checksum)
        .map_err(host_error("reading the journal"))?
    {
        return Ok((journal, true));
    }
    let old = input
        .last_applied
        .map(|(osc, effective)| Side { osc, effective });
    let journal = changes::compute(
        old,
        Side {
            osc: input.osc,
            effective: input.effective,
        },
        input.checksum,
    );
    Ok((journal, false))
}

/// Applies `input` (see the module docs). Idempotent: an OSC that is already applied
/// resumes an empty journal and changes nothing.
pub async fn apply<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    input: Input<'_>,
) -> Result<Outcome, ApplyError> {
    let planned = plan(host, input)?;
    apply_planned(host, secrets, input, planned).await
}

/// [`apply`] with the work [`plan`] already returned for this `input` (the disruptive
/// rollout classifies it first and so does not read the journal twice). One step of the
/// module docs' order after the other (`apply/steps.rs`), each completing its journal items.
pub async fn apply_planned<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    input: Input<'_>,
    (journal, resumed): (Journal, bool),
) -> Result<Outcome, ApplyError> {
    let mut summary = Summary {
        resumed,
        ..Summary::default()
    };
    // 1. Journal.
    if !resumed {
        persist(host, input.paths, &journal)?;
    }
    let progress = steps::Progress::new(host, input.paths, journal);
    steps::check_secrets(&progress, secrets).await?;
    steps::containerd_config(&progress, input, &mut summary).await?; // 2.
    steps::defer_own_unit(&progress, input)?; // 3.
    steps::write_files(&progress, secrets, &mut summary).await?; // 4.
    steps::write_registries(&progress)?; // 5.
    steps::write_units(&progress, input, &mut summary).await?; // 6.
    steps::delete_units(&progress, &mut summary).await?; // 7.
    // 8. Reload.
    host.daemon_reload()
        .await
        .map_err(host_error("daemon-reload"))?;
    // 9. Our own unit changed: exit, the next process continues.
    if progress.snapshot().must_restart_node_agent {
        progress.update(|j| j.must_restart_node_agent = false)?;
        return Ok(Outcome::RestartSelf(summary));
    }
    steps::run_unit_jobs(&progress, &mut summary).await?; // 10.
    steps::restart_containerd(&progress, &mut summary).await?;
    steps::remove_deleted(&progress, &mut summary)?; // 11.
    steps::record_last_applied(host, input)?; // 12.
    Ok(Outcome::Applied(summary))
}

/// The bytes a file should have; `None` for `imageRef` files (extracted, not computed).
pub async fn file_content<S: Secrets>(
    secrets: &S,
    file: &File,
) -> Result<Option<Vec<u8>>, ApplyError> {
    if let Some(inline) = &file.content.inline {
        // Validated before apply; a decode error here would be a bug, reported as such.
        return osc::decode_inline(inline)
            .map(Some)
            .map_err(|message| ApplyError::Encode {
                what: "inline content",
                message,
            });
    }
    if let Some(reference) = &file.content.secret_ref {
        return secrets
            .secret_data(&reference.name, &reference.data_key)
            .await
            .map(Some)
            .map_err(|message| ApplyError::Secret {
                path: file.path.clone(),
                secret: reference.name.clone(),
                key: reference.data_key.clone(),
                message,
            });
    }
    Ok(None)
}

/// The mode bits an OSC file can get: read, write and execute for the owner, read and
/// execute for group and others. gardener-node-agent writes a file with Go's numeric
/// `permissions`, of which only the permission bits (0777) count, under its unit's umask 022,
/// so `permissions: 4095` (07777) is 0755 there too. The agent never makes a setuid, setgid,
/// sticky or group- or world-writable file out of an OSC.
pub const FILE_MODE_MASK: u32 = 0o755;

/// The mode a file gets: `permissions` (else 0600) within [`FILE_MODE_MASK`].
pub fn file_mode(file: &File) -> u32 {
    file.permissions.unwrap_or(DEFAULT_FILE_MODE) & FILE_MODE_MASK
}

/// Writes one OSC file from its source.
pub async fn write_file<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    file: &File,
) -> Result<(), ApplyError> {
    let path = PathBuf::from(&file.path);
    let mode = file_mode(file);
    let asked = file.permissions.unwrap_or(DEFAULT_FILE_MODE);
    if asked != mode {
        tracing::warn!(path = %file.path, permissions = format!("{asked:o}"), mode = format!("{mode:o}"), "file mode narrowed as gardener-node-agent narrows it: no setuid, setgid or sticky bit, no write for group and others");
    }
    match file_content(secrets, file).await? {
        Some(content) => host
            .write(&path, &content, mode)
            .map_err(host_error(format!("writing {}", file.path))),
        None => match &file.content.image_ref {
            Some(image) => host
                .extract_image_file(&image.image, &image.file_path_in_image, &path, mode)
                .await
                .map_err(host_error(format!(
                    "extracting {} from {}",
                    image.file_path_in_image, image.image
                ))),
            None => Ok(()),
        },
    }
}

/// Writes a unit file or drop-in unless it has those bytes; sets the mode either way.
pub fn write_if_different<H: Host>(
    host: &H,
    path: &Path,
    content: &[u8],
    mode: u32,
) -> Result<bool, ApplyError> {
    let what = || format!("writing {}", path.display());
    if host.holds(path, content).map_err(host_error(what()))? {
        if host.mode(path).map_err(host_error(what()))? != Some(mode) {
            host.set_mode(path, mode).map_err(host_error(what()))?;
        }
        return Ok(false);
    }
    host.write(path, content, mode)
        .map_err(host_error(what()))?;
    Ok(true)
}

/// Brings `config.toml` in line with `criConfig`; returns whether it was rewritten.
pub async fn ensure_containerd_config<H: Host>(
    host: &H,
    osc: &NodeOsc,
) -> Result<bool, ApplyError> {
    let Some(containerd) = changes::containerd_config(osc) else {
        return Ok(false);
    };
    for dir in [
        crate::api::constants::CONTAINER_RUNTIME_BINARY_PATH,
        "/etc/containerd",
        cri::CONF_D_DIR,
        cri::CERTS_DIR,
    ] {
        host.create_dir_all(Path::new(dir))
            .map_err(host_error(format!("creating {dir}")))?;
    }
    let config_path = Path::new(cri::CONFIG_FILE);
    let current = host
        .read(config_path)
        .map_err(host_error("reading containerd's config"))?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    let base = match current.as_deref() {
        Some(text) if !text.trim().is_empty() => text.to_string(),
        _ => match host.containerd_default_config().await {
            Ok(text) if !text.trim().is_empty() => text,
            Ok(_) => DEFAULT_CONFIG.to_string(),
            Err(error) => {
                tracing::warn!(%error, "`containerd config default` failed; starting from a minimal config");
                DEFAULT_CONFIG.to_string()
            }
        },
    };
    let containerd_error = |source| ApplyError::Containerd {
        path: cri::CONFIG_FILE.to_string(),
        source,
    };
    let mut config = ContainerdConfig::parse(&base).map_err(containerd_error)?;
    let cni_bin_dirs = host
        .containerd_version()
        .await
        .is_some_and(|version| version >= (2, 2));
    let systemd_cgroup = osc
        .spec
        .cri_config
        .as_ref()
        .and_then(|c| c.cgroup_driver)
        .map(|driver| driver == crate::api::operatingsystemconfig::CgroupDriver::Systemd);
    let edits = config
        .apply_cri(&CriSettings {
            sandbox_image: &containerd.sandbox_image,
            systemd_cgroup,
            plugins: &containerd.plugins,
            cni_bin_dirs,
        })
        .map_err(containerd_error)?;
    let rendered = config.render();
    if current.as_deref() == Some(rendered.as_str()) {
        return Ok(false);
    }
    host.write(config_path, rendered.as_bytes(), CONTAINERD_FILE_MODE)
        .map_err(host_error("writing containerd's config"))?;
    tracing::info!(
        path = cri::CONFIG_FILE,
        ?edits,
        created = current.is_none(),
        "containerd config written"
    );
    Ok(true)
}

fn persist<H: Host>(host: &H, paths: &Paths, journal: &Journal) -> Result<(), ApplyError> {
    journal::persist(host, paths, journal).map_err(|error| match error {
        PersistError::Encode(error) => ApplyError::Encode {
            what: "the journal",
            message: error.to_string(),
        },
        PersistError::Write(source) => host_error("writing the journal")(source),
    })
}

fn host_error(step: impl Into<String>) -> impl FnOnce(HostError) -> ApplyError {
    let step = step.into();
    move |source| ApplyError::Host { step, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pipeline::journal::ChangedUnit;
    use crate::agent::pipeline::osc::effective;
    use crate::agent::testing::{
        FakeHost, MapSecrets, Op, drop_in, inline_file, secret_file, unit,
    };
    use crate::api::operatingsystemconfig::{
        CgroupDriver, ContainerdConfig as OscContainerd, CriConfig, CriName,
    };

    const OWN: &str = "gardener-node-agent.service";

    fn paths() -> Paths {
        Paths::new("/var/lib/gardener-node-agent")
    }

    fn secrets() -> MapSecrets {
        MapSecrets(
            [(
                ("creds".to_string(), "token".to_string()),
                b"s3cret".to_vec(),
            )]
            .into(),
        )
    }

    /// An OSC with a file per content kind, a unit with a drop-in reading one file, and a
    /// stopped unit.
    fn base_osc() -> NodeOsc {
        let mut osc = NodeOsc::default();
        let mut plain = inline_file("/etc/app/plain.conf", "plain $HOME");
        plain.permissions = Some(0o644);
        osc.spec.files.push(plain);
        let mut b64 = inline_file("/etc/app/b64.bin", "aGVsbG8=");
        if let Some(inline) = b64.content.inline.as_mut() {
            inline.encoding = "b64".into();
        }
        osc.spec.files.push(b64);
        osc.spec
            .files
            .push(secret_file("/etc/app/token", "creds", "token"));
        let mut app = unit("app.service");
        app.content = Some("[Service]\nExecStart=/bin/app\n".into());
        app.drop_ins
            .push(drop_in("10-env.conf", "[Service]\nEnvironment=A=1\n"));
        app.file_paths.push("/etc/app/plain.conf".into());
        osc.spec.units.push(app);
        let mut other = unit("other.service");
        other.content = Some("[Service]\nExecStart=/bin/other\n".into());
        other.file_paths.push("/etc/app/b64.bin".into());
        osc.spec.units.push(other);
        let mut stopped = unit("stopped.service");
        stopped.content = Some("[Service]\nExecStart=/bin/stopped\n".into());
        stopped.enable = Some(false);
        osc.spec.units.push(stopped);
        osc
    }

    async fn run(
        host: &FakeHost,
        osc: &NodeOsc,
        checksum: &str,
        last: Option<&NodeOsc>,
    ) -> Result<Outcome, ApplyError> {
        let effective_new = effective(osc, "node");
        let last_effective = last.map(|osc| effective(osc, "node"));
        let paths = paths();
        apply(
            host,
            &secrets(),
            Input {
                checksum,
                osc,
                effective: &effective_new,
                last_applied: last.zip(last_effective.as_ref()),
                own_unit: OWN,
                paths: &paths,
            },
        )
        .await
    }

    fn journal_on(host: &FakeHost) -> Journal {
        Journal::parse(
            &host
                .content("/var/lib/gardener-node-agent/last-computed-osc-changes.yaml")
                .unwrap(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn first_apply_writes_everything_and_records_it() {
        let host = FakeHost::default();
        let osc = base_osc();
        let Outcome::Applied(summary) = run(&host, &osc, "c1", None).await.unwrap() else {
            panic!("no self-restart expected");
        };
        assert!(!summary.resumed);
        assert_eq!(
            host.content("/etc/app/plain.conf").as_deref(),
            Some("plain $HOME")
        );
        assert_eq!(host.file_mode("/etc/app/plain.conf"), Some(0o644));
        assert_eq!(host.content("/etc/app/b64.bin").as_deref(), Some("hello"));
        assert_eq!(
            host.file_mode("/etc/app/b64.bin"),
            Some(0o600),
            "default mode"
        );
        assert_eq!(host.content("/etc/app/token").as_deref(), Some("s3cret"));
        assert_eq!(
            host.content("/etc/systemd/system/app.service").as_deref(),
            Some("[Service]\nExecStart=/bin/app\n")
        );
        assert_eq!(
            host.file_mode("/etc/systemd/system/app.service"),
            Some(0o600)
        );
        assert!(
            host.content("/etc/systemd/system/app.service.d/10-env.conf")
                .is_some()
        );
        let ops = host.take_ops();
        assert!(ops.contains(&Op::Enable("app.service".into())));
        assert!(ops.contains(&Op::Disable("stopped.service".into())));
        let reload = ops.iter().position(|op| *op == Op::Reload).unwrap();
        let first_job = ops.iter().position(|op| matches!(op, Op::Job(..))).unwrap();
        assert!(reload < first_job, "jobs run after daemon-reload: {ops:?}");
        assert_eq!(
            FakeHost::jobs(&ops),
            [
                ("app.service".to_string(), UnitCommand::Restart),
                ("other.service".to_string(), UnitCommand::Restart),
                ("stopped.service".to_string(), UnitCommand::Stop)
            ]
        );
        assert!(journal_on(&host).is_empty());
        assert_eq!(journal_on(&host).operating_system_config_checksum, "c1");
        let recorded = osc::decode(
            host.content("/var/lib/gardener-node-agent/last-applied-osc.yaml")
                .unwrap()
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(recorded.spec, osc.spec);

        // The same checksum again: nothing is written or restarted.
        host.take_writes();
        let Outcome::Applied(again) = run(&host, &osc, "c1", Some(&osc)).await.unwrap() else {
            panic!()
        };
        assert!(again.resumed && again.commands.is_empty() && again.files_written.is_empty());
        assert_eq!(FakeHost::jobs(&host.take_ops()), []);
        assert_eq!(
            host.take_writes(),
            [PathBuf::from(
                "/var/lib/gardener-node-agent/last-applied-osc.yaml"
            )]
        );
    }

    /// Issue #26 item 6: `permissions: 4095` was written as `-rwsrwsrwt`. Every file kind
    /// gets gardener-node-agent's mode: the permission bits without group/other write.
    #[tokio::test]
    async fn file_modes_keep_only_the_permission_bits_gardener_node_agent_keeps() {
        let host = FakeHost::default();
        let mut osc = NodeOsc::default();
        for (path, permissions) in [
            ("/etc/all-bits", 0o7777),
            ("/etc/setuid", 0o4755),
            ("/etc/world-writable", 0o666),
            ("/etc/group-writable", 0o770),
            ("/etc/plain", 0o640),
        ] {
            let mut file = inline_file(path, "x");
            file.permissions = Some(permissions);
            osc.spec.files.push(file);
        }
        let mut image = crate::agent::testing::image_file("/opt/bin/tool", "img", "/tool");
        image.permissions = Some(0o7777);
        osc.spec.files.push(image);
        let mut secret = secret_file("/etc/token", "creds", "token");
        secret.permissions = Some(0o2777);
        osc.spec.files.push(secret);
        run(&host, &osc, "c1", None).await.unwrap();
        for (path, mode) in [
            ("/etc/all-bits", 0o755),
            ("/etc/setuid", 0o755),
            ("/etc/world-writable", 0o644),
            ("/etc/group-writable", 0o750),
            ("/etc/plain", 0o640),
            ("/opt/bin/tool", 0o755),
            ("/etc/token", 0o755),
        ] {
            assert_eq!(host.file_mode(path), Some(mode), "{path}");
        }
    }

    #[tokio::test]
    async fn a_changed_file_restarts_only_its_units() {
        let host = FakeHost::default();
        let old = base_osc();
        run(&host, &old, "c1", None).await.unwrap();
        host.take_ops();
        let mut new = old.clone();
        new.spec.files[0] = inline_file("/etc/app/plain.conf", "changed");
        let Outcome::Applied(summary) = run(&host, &new, "c2", Some(&old)).await.unwrap() else {
            panic!()
        };
        assert_eq!(summary.files_written, ["/etc/app/plain.conf"]);
        assert_eq!(
            FakeHost::jobs(&host.take_ops()),
            [("app.service".to_string(), UnitCommand::Restart)]
        );
        assert_eq!(
            host.file_mode("/etc/app/plain.conf"),
            Some(0o600),
            "permissions dropped → default"
        );
    }

    #[tokio::test]
    async fn removed_units_and_files() {
        let host = FakeHost::default();
        let mut old = base_osc();
        let mut drop_in_only = unit("os.service");
        drop_in_only
            .drop_ins
            .push(drop_in("50-x.conf", "[Service]\n"));
        old.spec.units.push(drop_in_only);
        run(&host, &old, "c1", None).await.unwrap();
        host.take_ops();
        host.known_units.lock().unwrap().insert("os.service".into());

        let mut new = old.clone();
        new.spec
            .units
            .retain(|u| u.name != "other.service" && u.name != "os.service");
        new.spec.files.retain(|f| f.path != "/etc/app/token");
        let Outcome::Applied(summary) = run(&host, &new, "c2", Some(&old)).await.unwrap() else {
            panic!()
        };
        assert_eq!(summary.units_deleted, ["other.service", "os.service"]);
        assert_eq!(summary.files_deleted, ["/etc/app/token"]);
        assert!(host.content("/etc/app/token").is_none());
        assert!(host.content("/etc/systemd/system/other.service").is_none());
        assert!(
            host.content("/etc/systemd/system/os.service.d/50-x.conf")
                .is_none()
        );
        let ops = host.take_ops();
        let disable = ops
            .iter()
            .position(|op| *op == Op::Disable("other.service".into()))
            .unwrap();
        let stop = ops
            .iter()
            .position(|op| *op == Op::Job("other.service".into(), UnitCommand::Stop))
            .unwrap();
        assert!(disable < stop);
        assert_eq!(
            FakeHost::jobs(&ops),
            [
                ("os.service".to_string(), UnitCommand::Restart),
                ("other.service".to_string(), UnitCommand::Stop)
            ],
            "the drop-in-only unit is restarted without its drop-in: {ops:?}"
        );
    }

    #[tokio::test]
    async fn resumes_only_what_the_journal_has_left() {
        let host = FakeHost::default();
        let osc = base_osc();
        // A previous process wrote every file and unit, then died during the jobs: only
        // other.service is left.
        let left = Journal {
            operating_system_config_checksum: "c1".into(),
            units: crate::agent::pipeline::journal::UnitChanges {
                commands: vec![CommandEntry {
                    name: "other.service".into(),
                    command: UnitCommand::Restart,
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        host.put(
            "/var/lib/gardener-node-agent/last-computed-osc-changes.yaml",
            &left.render().unwrap(),
            0o600,
        );
        let Outcome::Applied(summary) = run(&host, &osc, "c1", None).await.unwrap() else {
            panic!()
        };
        assert!(summary.resumed);
        assert!(summary.files_written.is_empty(), "no file rewritten");
        assert!(host.content("/etc/app/plain.conf").is_none());
        assert_eq!(
            FakeHost::jobs(&host.take_ops()),
            [("other.service".to_string(), UnitCommand::Restart)]
        );
        assert!(journal_on(&host).is_empty());
    }

    /// A journal gardener-node-agent left behind (its own unit replaced by ours): the rest of
    /// its work is done from the journal alone.
    #[tokio::test]
    async fn finishes_what_gardener_node_agent_started() {
        let host = FakeHost::default();
        let go_journal = "containerd:\n  configFileChanged: false\n  registries: {}\nfiles:\n  changed:\n  - content:\n      inline:\n        data: bGVmdA==\n        encoding: b64\n    path: /etc/app/b64.bin\ninPlaceUpdates:\n  operatingSystem: false\nmustRestartNodeAgent: false\noperatingSystemConfigChecksum: c1\nunits:\n  commands:\n  - command: restart\n    name: other.service\n";
        host.put(
            "/var/lib/gardener-node-agent/last-computed-osc-changes.yaml",
            go_journal,
            0o600,
        );
        let Outcome::Applied(summary) = run(&host, &base_osc(), "c1", None).await.unwrap() else {
            panic!()
        };
        assert!(summary.resumed);
        assert_eq!(summary.files_written, ["/etc/app/b64.bin"]);
        assert_eq!(host.content("/etc/app/b64.bin").as_deref(), Some("left"));
        assert_eq!(
            FakeHost::jobs(&host.take_ops()),
            [("other.service".to_string(), UnitCommand::Restart)]
        );
        assert!(journal_on(&host).is_empty());
    }

    #[tokio::test]
    async fn a_journal_for_another_checksum_is_replaced() {
        let host = FakeHost::default();
        let stale = Journal {
            operating_system_config_checksum: "old".into(),
            units: crate::agent::pipeline::journal::UnitChanges {
                changed: vec![ChangedUnit {
                    unit: unit("ghost.service"),
                    drop_ins_changes: Default::default(),
                }],
                ..Default::default()
            },
            ..Default::default()
        };
        host.put(
            "/var/lib/gardener-node-agent/last-computed-osc-changes.yaml",
            &stale.render().unwrap(),
            0o600,
        );
        let Outcome::Applied(summary) = run(&host, &base_osc(), "c1", None).await.unwrap() else {
            panic!()
        };
        assert!(!summary.resumed);
        assert_eq!(summary.files_written.len(), 3);
        assert!(
            !host
                .take_ops()
                .contains(&Op::Enable("ghost.service".into()))
        );
    }

    #[tokio::test]
    async fn a_failed_job_stays_in_the_journal_and_is_retried_alone() {
        let host = FakeHost::default();
        host.failing_jobs
            .lock()
            .unwrap()
            .insert("other.service".into());
        let osc = base_osc();
        let error = run(&host, &osc, "c1", None).await.unwrap_err();
        assert!(
            matches!(&error, ApplyError::Commands(failed) if failed.len() == 1 && failed[0].unit == "other.service"),
            "{error}"
        );
        assert_eq!(error.category(), "unit-job");
        let journal = journal_on(&host);
        assert_eq!(journal.remaining(), 1, "{journal:?}");
        assert!(
            host.content("/var/lib/gardener-node-agent/last-applied-osc.yaml")
                .is_none(),
            "not recorded as applied"
        );
        host.take_ops();
        host.failing_jobs.lock().unwrap().clear();
        run(&host, &osc, "c1", None).await.unwrap();
        let ops = host.take_ops();
        assert_eq!(ops[0], Op::Reload, "retry reloads first: {ops:?}");
        assert_eq!(
            FakeHost::jobs(&ops),
            [("other.service".to_string(), UnitCommand::Restart)]
        );
    }

    #[tokio::test]
    async fn own_unit_change_exits_after_reload_and_the_next_run_finishes() {
        let host = FakeHost::default();
        let mut osc = base_osc();
        let mut own = unit(OWN);
        own.content = Some("[Service]\nExecStart=/opt/bin/agent\n".into());
        osc.spec.units.push(own);
        let Outcome::RestartSelf(_) = run(&host, &osc, "c1", None).await.unwrap() else {
            panic!("expected a self-restart");
        };
        let ops = host.take_ops();
        assert_eq!(ops.last(), Some(&Op::Reload));
        assert!(FakeHost::jobs(&ops).is_empty(), "no job before the restart");
        let journal = journal_on(&host);
        assert!(!journal.must_restart_node_agent);
        assert!(!journal.units.commands.iter().any(|c| c.name == OWN));
        assert_eq!(journal.units.commands.len(), 3);

        // The new process resumes: the remaining jobs run, the own unit is not restarted.
        let Outcome::Applied(summary) = run(&host, &osc, "c1", None).await.unwrap() else {
            panic!()
        };
        assert!(summary.resumed);
        let jobs = FakeHost::jobs(&host.take_ops());
        assert_eq!(jobs.len(), 3);
        assert!(!jobs.iter().any(|(name, _)| name == OWN));
    }

    #[tokio::test]
    async fn containerd_config_is_created_and_containerd_restarted_once() {
        let host = FakeHost {
            default_containerd_config: "version = 2\n".into(),
            ..FakeHost::default()
        };
        let mut osc = base_osc();
        osc.spec.cri_config = Some(CriConfig {
            name: CriName::Containerd,
            cgroup_driver: Some(CgroupDriver::Systemd),
            containerd: Some(OscContainerd {
                registries: vec![],
                sandbox_image: "pause:3.10".into(),
                plugins: vec![],
            }),
        });
        inject_containerd_drop_in(&mut osc);
        run(&host, &osc, "c1", None).await.unwrap();
        let config = host.content("/etc/containerd/config.toml").unwrap();
        assert!(
            config.contains("sandbox_image = \"pause:3.10\""),
            "{config}"
        );
        assert!(config.contains("SystemdCgroup = true"), "{config}");
        assert!(
            host.content("/etc/systemd/system/containerd.service.d/30-env_config.conf")
                .unwrap()
                .contains("/var/bin/containerruntimes")
        );
        let jobs = FakeHost::jobs(&host.take_ops());
        assert_eq!(
            jobs.iter()
                .filter(|(name, _)| name == CONTAINERD_UNIT)
                .count(),
            1,
            "{jobs:?}"
        );

        // Unchanged: no rewrite, no restart. Changed sandbox image: rewrite and restart.
        run(&host, &osc, "c1", Some(&osc)).await.unwrap();
        assert!(FakeHost::jobs(&host.take_ops()).is_empty());
        let mut new = osc.clone();
        if let Some(c) = new
            .spec
            .cri_config
            .as_mut()
            .and_then(|c| c.containerd.as_mut())
        {
            c.sandbox_image = "pause:3.11".into();
        }
        run(&host, &new, "c2", Some(&osc)).await.unwrap();
        assert!(
            host.content("/etc/containerd/config.toml")
                .unwrap()
                .contains("pause:3.11")
        );
        assert_eq!(
            FakeHost::jobs(&host.take_ops()),
            [(CONTAINERD_UNIT.to_string(), UnitCommand::Restart)]
        );
    }

    /// Regression (found by `test/resilience_agent.rs`, bad-input row "secretRef to a missing
    /// Secret"): the files before the secretRef file were written, then the apply failed,
    /// leaving the node half on the new OSC.
    #[tokio::test]
    async fn a_missing_secret_fails_before_any_file_is_written() {
        let host = FakeHost::default();
        let mut osc = base_osc();
        osc.spec
            .files
            .push(secret_file("/etc/missing", "nope", "k"));
        assert!(run(&host, &osc, "c1", None).await.is_err());
        let written: Vec<PathBuf> = host
            .take_writes()
            .into_iter()
            .filter(|p| !p.starts_with("/var/lib/gardener-node-agent"))
            .collect();
        assert!(
            written.is_empty(),
            "written before the failure: {written:?}"
        );
        assert!(host.content("/etc/app/plain.conf").is_none());
        assert!(FakeHost::jobs(&host.take_ops()).is_empty());
    }

    #[tokio::test]
    async fn missing_secret_fails_before_recording() {
        let host = FakeHost::default();
        let mut osc = base_osc();
        osc.spec
            .files
            .push(secret_file("/etc/missing", "nope", "k"));
        let error = run(&host, &osc, "c1", None).await.unwrap_err();
        assert!(
            error.to_string().contains("reading secret nope key k"),
            "{error}"
        );
        assert!(
            journal_on(&host)
                .files
                .changed
                .iter()
                .any(|f| f.path == "/etc/missing")
        );
    }
}
