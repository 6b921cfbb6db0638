//! Drift repair (our addition; gardener-node-agent only reports drift once at start): every
//! `--drift-check-interval` the files, unit files and drop-ins of the last applied OSC are
//! compared with the disk; whatever differs is rewritten from the OSC, the units it affects
//! are restarted, and the repairs are counted and logged.
//!
//! What counts as drift:
//! - an inline or `secretRef` file whose bytes differ or that is missing (rewritten; units
//!   listing it in `filePaths` restarted); a `secretRef` is read again for the comparison;
//! - an `imageRef` file that is missing (extracted again); its bytes are not compared,
//!   which would mean pulling and mounting the image every interval, nor read: presence and
//!   mode come from its metadata;
//! - anything other than a regular file in an OSC file's place (a link, a FIFO): replaced by
//!   the file, never followed, so a link cannot make a repair read or chmod its target;
//! - any OSC file whose mode differs (mode set; nothing restarted);
//! - a unit file or drop-in whose bytes differ or that is missing (rewritten, then
//!   daemon-reload and a restart of that unit).
//!
//! Units the OSC wants stopped (`enable: false` or `command: stop`) are never restarted by a
//! repair. Enablement is not checked.

use std::collections::BTreeSet;
use std::path::Path;

use crate::api::operatingsystemconfig::UnitCommand;

use crate::agent::pipeline::apply::{self, ApplyError, UNIT_FILE_MODE};
use crate::agent::pipeline::changes::command_for;
use crate::agent::pipeline::osc::Effective;
use crate::agent::ports::cluster::Secrets;
use crate::agent::ports::host::Host;
use crate::agent::ports::paths::Paths;

/// What one check found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Files rewritten (content differed or missing).
    pub files: Vec<String>,
    /// Files whose mode was set back.
    pub modes: Vec<String>,
    /// Unit files and drop-ins rewritten (paths).
    pub unit_files: Vec<String>,
    /// Units restarted because of the repairs.
    pub restarted: Vec<String>,
}

impl Report {
    /// Number of repairs (files, modes, unit files).
    pub fn repairs(&self) -> usize {
        self.files.len() + self.modes.len() + self.unit_files.len()
    }
}

/// The units a repair must restart: those whose unit file or drop-ins were rewritten and
/// those listing a rewritten file, except units meant to be stopped. Sorted, unique.
pub fn units_to_restart(
    effective: &Effective<'_>,
    rewritten_files: &[String],
    rewritten_units: &BTreeSet<String>,
) -> Vec<String> {
    effective
        .units
        .iter()
        .filter(|unit| {
            rewritten_units.contains(&unit.name)
                || unit
                    .file_paths
                    .iter()
                    .any(|path| rewritten_files.contains(path))
        })
        .filter(|unit| command_for(unit) == UnitCommand::Restart)
        .map(|unit| unit.name.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Checks the node against `effective` (the last applied OSC) and repairs what drifted.
/// `own_unit` is never restarted (a repaired agent unit takes effect on its next restart).
pub async fn check_and_repair<H: Host, S: Secrets>(
    host: &H,
    secrets: &S,
    effective: &Effective<'_>,
    paths: &Paths,
    own_unit: &str,
) -> Result<Report, ApplyError> {
    let mut report = Report::default();
    let host_error = |step: String| move |source| ApplyError::Host { step, source };
    for file in &effective.files {
        let path = Path::new(&file.path);
        let mode = apply::file_mode(file);
        let rewrite = match apply::file_content(secrets, file).await? {
            Some(desired) => !host
                .holds(path, &desired)
                .map_err(host_error(format!("reading {}", file.path)))?,
            // imageRef: metadata only (a regular file is there or not).
            None => host
                .mode(path)
                .map_err(host_error(format!("inspecting {}", file.path)))?
                .is_none(),
        };
        if rewrite {
            apply::write_file(host, secrets, file).await?;
            report.files.push(file.path.clone());
        } else if host
            .mode(path)
            .map_err(host_error(format!("inspecting {}", file.path)))?
            != Some(mode)
        {
            host.set_mode(path, mode)
                .map_err(host_error(format!("changing the mode of {}", file.path)))?;
            report.modes.push(file.path.clone());
        }
    }
    let mut rewritten_units = BTreeSet::new();
    for unit in &effective.units {
        let mut targets = Vec::new();
        if let Some(content) = &unit.content {
            targets.push((paths.unit_file(&unit.name), content.as_str()));
        }
        for drop_in in &unit.drop_ins {
            targets.push((
                paths.drop_in(&unit.name, &drop_in.name),
                drop_in.content.as_str(),
            ));
        }
        for (path, content) in targets {
            let holds = host
                .holds(&path, content.as_bytes())
                .map_err(host_error(format!("reading {}", path.display())))?;
            if !holds {
                apply::write_if_different(host, &path, content.as_bytes(), UNIT_FILE_MODE)?;
                report.unit_files.push(path.display().to_string());
                rewritten_units.insert(unit.name.clone());
            }
        }
    }
    if !rewritten_units.is_empty() {
        host.daemon_reload()
            .await
            .map_err(host_error("daemon-reload".to_string()))?;
    }
    let restart: Vec<String> = units_to_restart(effective, &report.files, &rewritten_units)
        .into_iter()
        .filter(|unit| unit != own_unit)
        .collect();
    let jobs = restart.iter().map(|unit| async move {
        (
            unit.clone(),
            host.unit_job(unit, UnitCommand::Restart).await,
        )
    });
    let mut failures = Vec::new();
    for (unit, result) in futures::future::join_all(jobs).await {
        match result {
            Ok(()) => report.restarted.push(unit),
            Err(error) => failures.push(apply::FailedJob {
                unit,
                command: UnitCommand::Restart,
                error: crate::error_chain::printable(&error),
            }),
        }
    }
    if !failures.is_empty() {
        return Err(ApplyError::Commands(failures));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::agent::pipeline::osc::{NodeOsc, effective};
    use crate::agent::testing::{
        FakeHost, MapSecrets, Op, drop_in, image_file, inline_file, secret_file, unit,
    };

    fn osc() -> NodeOsc {
        let mut osc = NodeOsc::default();
        let mut conf = inline_file("/etc/app.conf", "v1");
        conf.permissions = Some(0o644);
        osc.spec.files.push(conf);
        osc.spec.files.push(secret_file("/etc/token", "s", "k"));
        let mut app = unit("app.service");
        app.content = Some("[Service]\n".into());
        app.drop_ins.push(drop_in("10.conf", "[Service]\nA=1\n"));
        app.file_paths.push("/etc/app.conf".into());
        let mut stopped = unit("stopped.service");
        stopped.enable = Some(false);
        stopped.file_paths.push("/etc/app.conf".into());
        let mut token_user = unit("token.service");
        token_user.file_paths.push("/etc/token".into());
        osc.spec.units.extend([app, stopped, token_user]);
        osc
    }

    fn secrets() -> MapSecrets {
        MapSecrets([(("s".to_string(), "k".to_string()), b"tok".to_vec())].into())
    }

    fn in_sync(host: &FakeHost) {
        host.put("/etc/app.conf", "v1", 0o644);
        host.put("/etc/token", "tok", 0o600);
        host.put("/etc/systemd/system/app.service", "[Service]\n", 0o600);
        host.put(
            "/etc/systemd/system/app.service.d/10.conf",
            "[Service]\nA=1\n",
            0o600,
        );
    }

    async fn check(host: &FakeHost) -> Report {
        let osc = osc();
        let effective = effective(&osc, "node");
        check_and_repair(
            host,
            &secrets(),
            &effective,
            &Paths::new("/var/lib/gardener-node-agent"),
            "gardener-node-agent.service",
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn nothing_to_do_when_in_sync() {
        let host = FakeHost::default();
        in_sync(&host);
        assert_eq!(check(&host).await, Report::default());
        assert!(host.take_ops().is_empty());
    }

    #[tokio::test]
    async fn edited_file_is_restored_and_its_running_units_restarted() {
        let host = FakeHost::default();
        in_sync(&host);
        host.put("/etc/app.conf", "edited by hand", 0o644);
        let report = check(&host).await;
        assert_eq!(report.files, ["/etc/app.conf"]);
        assert_eq!(
            report.restarted,
            ["app.service"],
            "stopped.service stays stopped"
        );
        assert_eq!(host.content("/etc/app.conf").as_deref(), Some("v1"));
        assert_eq!(
            host.take_ops(),
            [Op::Job("app.service".into(), UnitCommand::Restart)],
            "no reload for plain files"
        );
    }

    #[tokio::test]
    async fn missing_secret_file_and_mode_drift() {
        let host = FakeHost::default();
        in_sync(&host);
        host.files.lock().unwrap().remove(Path::new("/etc/token"));
        host.put("/etc/app.conf", "v1", 0o666);
        let report = check(&host).await;
        assert_eq!(report.files, ["/etc/token"]);
        assert_eq!(report.modes, ["/etc/app.conf"]);
        assert_eq!(report.restarted, ["token.service"]);
        assert_eq!(host.file_mode("/etc/app.conf"), Some(0o644));
        assert_eq!(report.repairs(), 2);
    }

    /// The mode drift compares with is the narrowed one (`apply::file_mode`): a file with
    /// `permissions: 4095` written as 0755 is in sync, one set to 07777 by hand is repaired.
    #[tokio::test]
    async fn a_narrowed_mode_is_in_sync_and_special_bits_are_repaired() {
        let host = FakeHost::default();
        let mut osc = NodeOsc::default();
        let mut file = inline_file("/etc/all-bits", "x");
        file.permissions = Some(0o7777);
        osc.spec.files.push(file);
        let effective = effective(&osc, "node");
        let paths = Paths::new("/var/lib/gardener-node-agent");
        let secrets = secrets();
        let check = || check_and_repair(&host, &secrets, &effective, &paths, "own.service");
        host.put("/etc/all-bits", "x", 0o755);
        assert_eq!(check().await.unwrap(), Report::default());
        host.put("/etc/all-bits", "x", 0o7777);
        assert_eq!(check().await.unwrap().modes, ["/etc/all-bits"]);
        assert_eq!(host.file_mode("/etc/all-bits"), Some(0o755));
    }

    #[tokio::test]
    async fn drifted_drop_in_reloads_and_restarts_its_unit() {
        let host = FakeHost::default();
        in_sync(&host);
        host.put(
            "/etc/systemd/system/app.service.d/10.conf",
            "[Service]\nA=2\n",
            0o600,
        );
        let report = check(&host).await;
        assert_eq!(
            report.unit_files,
            ["/etc/systemd/system/app.service.d/10.conf"]
        );
        assert_eq!(
            host.take_ops(),
            [
                Op::Reload,
                Op::Job("app.service".into(), UnitCommand::Restart)
            ]
        );
    }

    #[tokio::test]
    async fn image_files_are_checked_by_metadata_without_reading_them() {
        let host = FakeHost::default();
        in_sync(&host);
        host.put("/opt/bin/big-binary", "200 MiB in real life", 0o755);
        let mut osc = osc();
        osc.spec.files.push(image_file(
            "/opt/bin/big-binary",
            "registry/image:v1",
            "/bin/x",
        ));
        let effective = effective(&osc, "node");
        let paths = Paths::new("/var/lib/gardener-node-agent");
        let report = check_and_repair(&host, &secrets(), &effective, &paths, "agent.service")
            .await
            .unwrap();
        assert_eq!(report, Report::default());
        let reads = host.reads.lock().unwrap().clone();
        assert!(
            !reads.contains(&PathBuf::from("/opt/bin/big-binary")),
            "read: {reads:?}"
        );
    }

    /// The real file system: what a writer of an OSC file's folder can put there.
    mod hostile {
        use std::os::unix::fs::{PermissionsExt, symlink};
        use std::path::{Path, PathBuf};
        use std::time::{Duration, Instant};

        use super::super::*;
        use crate::agent::pipeline::osc::{NodeOsc, effective};
        use crate::agent::ports::host::SystemHost;
        use crate::agent::testing::{MapSecrets, image_file, inline_file};

        fn system_host(base: &Path) -> SystemHost {
            SystemHost::new(
                format!("unix:path={}", base.join("no-bus").display()),
                Duration::from_secs(1),
                format!("{}", base.join("no-containerd.sock").display()),
                "k8s.io".into(),
                base.join("tmp"),
            )
        }

        fn mode(path: &Path) -> u32 {
            std::fs::symlink_metadata(path)
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        }

        async fn check(
            base: &Path,
            files: Vec<crate::api::operatingsystemconfig::File>,
        ) -> Result<Report, ApplyError> {
            let mut osc = NodeOsc::default();
            osc.spec.files = files;
            let effective = effective(&osc, "node");
            check_and_repair(
                &system_host(base),
                &MapSecrets(Default::default()),
                &effective,
                &Paths::with_systemd_dir(base.join("state"), base.join("systemd")),
                "agent.service",
            )
            .await
        }

        fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
            let dir = tempfile::tempdir().unwrap();
            let base = dir.path().canonicalize().unwrap();
            std::fs::create_dir_all(base.join("opt/bin")).unwrap();
            // A file the writer wants chmodded or read: 0640, outside the OSC's paths.
            let victim = base.join("victim");
            std::fs::write(&victim, "private").unwrap();
            std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
            (dir, base, victim)
        }

        fn inline(path: &Path, data: &str) -> crate::api::operatingsystemconfig::File {
            let mut file = inline_file(&path.display().to_string(), data);
            file.permissions = Some(0o755);
            file
        }

        #[tokio::test]
        async fn a_link_in_an_inline_files_place_is_replaced_not_chmodded() {
            let (_dir, base, victim) = setup();
            let path = base.join("opt/bin/tool");
            symlink(&victim, &path).unwrap();
            let report = check(&base, vec![inline(&path, "tool")]).await.unwrap();
            assert_eq!(report.files, [path.display().to_string()]);
            assert_eq!(mode(&victim), 0o640);
            assert_eq!(std::fs::read(&victim).unwrap(), b"private");
            assert_eq!(std::fs::read(&path).unwrap(), b"tool");
            assert_eq!(mode(&path), 0o755);
        }

        #[tokio::test]
        async fn a_link_in_an_image_files_place_is_not_chmodded() {
            let (_dir, base, victim) = setup();
            let path = base.join("opt/bin/runtime");
            symlink(&victim, &path).unwrap();
            let file = image_file(&path.display().to_string(), "registry/image:v1", "/bin/x");
            // No containerd here: the extraction fails, but nothing was followed.
            assert!(check(&base, vec![file]).await.is_err());
            assert_eq!(mode(&victim), 0o640, "the link's target kept its mode");
            assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        }

        #[tokio::test]
        async fn a_fifo_or_a_link_to_dev_zero_does_not_stall_or_fill_memory() {
            let (_dir, base, _victim) = setup();
            let fifo = base.join("opt/bin/fifo");
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &fifo,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap();
            let zero = base.join("opt/bin/zero");
            symlink("/dev/zero", &zero).unwrap();
            let started = Instant::now();
            let report = check(&base, vec![inline(&fifo, "a"), inline(&zero, "b")])
                .await
                .unwrap();
            assert!(started.elapsed() < Duration::from_secs(10));
            assert_eq!(report.files.len(), 2);
            assert_eq!(std::fs::read(&fifo).unwrap(), b"a");
            assert_eq!(std::fs::read(&zero).unwrap(), b"b");
        }

        #[tokio::test]
        async fn a_linked_parent_folder_is_refused() {
            let (_dir, base, _victim) = setup();
            let elsewhere = base.join("elsewhere");
            std::fs::create_dir(&elsewhere).unwrap();
            std::fs::remove_dir(base.join("opt/bin")).unwrap();
            symlink(&elsewhere, base.join("opt/bin")).unwrap();
            let path = base.join("opt/bin/tool");
            let error = check(&base, vec![inline(&path, "tool")]).await.unwrap_err();
            let chain = crate::error_chain::printable(&error);
            assert!(
                chain.contains("is a symbolic link or not a folder"),
                "{chain}"
            );
            assert!(
                !elsewhere.join("tool").exists(),
                "nothing written through the link"
            );
        }
    }
}
