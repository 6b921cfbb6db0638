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
