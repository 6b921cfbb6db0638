//! `gardener-extension-node gvisor-install` as a process, against a host root in a temporary
//! folder: bad input exits non-zero with a message saying what to fix and leaves every host
//! file as it was; a failed restart leaves the restart-pending marker, which makes the next
//! run retry; an up-to-date host needs no systemd at all and the process then waits for
//! SIGTERM.
//!
//! No systemd here: the D-Bus address points at a socket that does not exist, so any restart
//! attempt fails loudly. The successful restart path runs against a real systemd in
//! `gvisor_install_e2e.rs`.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gardener_extension_node::gvisor_install::versions;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
/// The version the `*.installed.toml` fixtures name in `runtime_path`.
const FIXTURE_VERSION: &str = "0123456789abcdef";
const MARKER: &str = "var/lib/gardener-extension-node/gvisor-install.restart-pending";

/// A fake node: `root/` is the host's `/`, `content/` the installation image's folder.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new(config: Option<&str>) -> Self {
        let host = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(host.root().join("etc/containerd")).unwrap();
        std::fs::create_dir_all(host.content()).unwrap();
        if let Some(name) = config {
            std::fs::write(host.config_path(), fixture(name)).unwrap();
        }
        for binary in ["runsc", "containerd-shim-runsc-v1"] {
            std::fs::write(
                host.content().join(binary),
                format!("#!/bin/sh\n# {binary} stand-in: only copied, never run\nexit 1\n"),
            )
            .unwrap();
        }
        host
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn content(&self) -> PathBuf {
        self.dir.path().join("content")
    }

    fn config_path(&self) -> PathBuf {
        self.root().join("etc/containerd/config.toml")
    }

    /// The version of the binaries in the image (the installer's rule, [`versions`]).
    fn version(&self) -> String {
        let runsc = std::fs::read(self.content().join("runsc")).unwrap();
        let shim = std::fs::read(self.content().join("containerd-shim-runsc-v1")).unwrap();
        versions::version_of(&[&runsc, &shim])
    }

    /// Where the installer puts `binary` of `version` on the host (below the root).
    fn installed(&self, version: &str, binary: &str) -> PathBuf {
        self.root()
            .join("var/bin/containerruntimes/gvisor")
            .join(version)
            .join(binary)
    }

    /// The runsc config the installer writes for the current image, with `flags` lines.
    fn runsc_toml(&self, flags: &str) -> String {
        format!(
            "binary_name = \"/var/bin/containerruntimes/gvisor/{}/runsc\"\n\n[runsc_config]\n{flags}",
            self.version()
        )
    }

    /// `name` with the version of the test fixtures replaced by the image's.
    fn installed_fixture(&self, name: &str) -> String {
        fixture(name).replace(FIXTURE_VERSION, &self.version())
    }

    /// A new build in the image: another runsc.
    fn upgrade_image(&self, build: &str) {
        std::fs::write(
            self.content().join("runsc"),
            format!("#!/bin/sh\n# runsc stand-in, build {build}\nexit 1\n"),
        )
        .unwrap();
    }

    /// The host's process table for `--proc-dir`: one process per `exe` (the target text of
    /// its `/proc/<pid>/exe`), replacing what was there; returns the flag.
    fn processes(&self, exes: &[&str]) -> String {
        let proc_dir = self.dir.path().join("proc");
        let _ = std::fs::remove_dir_all(&proc_dir);
        for (pid, exe) in exes.iter().enumerate() {
            let dir = proc_dir.join((pid + 1).to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        }
        std::fs::create_dir_all(&proc_dir).unwrap();
        format!("--proc-dir={}", proc_dir.display())
    }

    /// The command with the DaemonSet's flags (`--bin-dir` left at its default, the same
    /// /var/bin/containerruntimes, so tests can pass their own) and a bus that does not exist.
    fn command(&self, extra: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .args(["--log-format", "json", "gvisor-install"])
            .arg(format!("--host-root={}", self.root().display()))
            .arg(format!("--source-dir={}", self.content().display()))
            .arg(format!(
                "--dbus-address=unix:path={}",
                self.dir.path().join("no-such-bus").display()
            ))
            .args(extra);
        command
    }

    fn run(&self, extra: &[&str]) -> Output {
        self.command(extra).output().unwrap()
    }

    /// The command started with its log (stderr) piped.
    fn spawn(&self, extra: &[&str]) -> std::process::Child {
        self.command(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Every entry under the host root: a file's mode and content, a link's target text
    /// (never followed), a FIFO's or device node's kind, mode and device number (never
    /// opened).
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let kind = meta.file_type();
                let relative = path.strip_prefix(base).unwrap().to_path_buf();
                let mode = meta.mode() & 0o7777;
                if kind.is_symlink() {
                    let target = std::fs::read_link(&path).unwrap();
                    out.insert(relative, format!("-> {}", target.display()).into_bytes());
                } else if kind.is_dir() {
                    walk(&path, base, out);
                } else if kind.is_file() {
                    let mut record = format!("{mode:o} ").into_bytes();
                    record.extend(std::fs::read(&path).unwrap());
                    out.insert(relative, record);
                } else {
                    let record = format!("{kind:?} {mode:o} {}", meta.rdev());
                    out.insert(relative, record.into_bytes());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(&self.root(), &self.root(), &mut files);
        files
    }

    /// Runs with `extra`, killing the process if it has not exited after 10 s (a run that
    /// waits on a FIFO fails the test instead of hanging it); returns success and stderr.
    fn run_bounded(&self, extra: &[&str]) -> (bool, String) {
        let mut child = self.spawn(extra);
        let status = wait_bounded(&mut child, "the installer blocked for 10 s");
        let mut message = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut message).unwrap();
        (status.success(), message)
    }

    /// A host file at `relative` with `content` and `mode` (folders created).
    fn put(&self, relative: &str, content: &[u8], mode: u32) -> PathBuf {
        let path = self.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    /// A symbolic link at `relative` (folders created) with the target text `target`.
    fn link(&self, relative: &str, target: &str) {
        let path = self.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    /// A character device 1:5 (what the host's `/dev/zero` is) at `relative`. Needs root, as
    /// the nspawn tests do.
    fn zero_device(&self, relative: &str) {
        let path = self.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 5),
        )
        .unwrap_or_else(|e| panic!("mknod {path:?} (these tests run as root): {e}"));
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// Mode bits and whether `path` (not followed) is a regular file.
fn regular_with_mode(path: &Path) -> (bool, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.file_type().is_file(), meta.mode() & 0o7777)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("test/fixtures/containerd")
            .join(format!("{name}.toml")),
    )
    .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs with `extra`, expects failure, a message containing every `hints` item, and no
/// change to any host file.
fn assert_rejected(host: &Host, extra: &[&str], hints: &[&str]) {
    let before = host.snapshot();
    let (ok, message) = host.run_bounded(extra);
    assert!(!ok, "expected failure:\n{message}");
    for hint in hints {
        assert!(message.contains(hint), "missing {hint:?} in:\n{message}");
    }
    assert_eq!(host.snapshot(), before, "host files changed:\n{message}");
}

#[test]
fn unparseable_config_is_left_byte_identical() {
    for name in ["bad-syntax", "bad-duplicate-table"] {
        let host = Host::new(Some(name));
        assert_rejected(
            &host,
            &["--once"],
            &[
                "cannot edit /etc/containerd/config.toml on the host; the file was left unchanged",
                "not valid TOML at line ",
                "fix the syntax error",
            ],
        );
        assert_eq!(
            std::fs::read_to_string(host.config_path()).unwrap(),
            fixture(name)
        );
    }
}

#[test]
fn unknown_config_version_is_rejected() {
    let host = Host::new(Some("bad-version"));
    assert_rejected(
        &host,
        &["--once"],
        &[
            "version = 7, which is not supported",
            "set a supported version",
        ],
    );
}

#[test]
fn non_table_on_the_runtime_path_is_rejected() {
    let host = Host::new(Some("bad-not-a-table"));
    assert_rejected(
        &host,
        &["--once"],
        &["`plugins.\"io.containerd.grpc.v1.cri\".containerd` must be a table"],
    );
}

#[test]
fn missing_binary_in_the_image_is_rejected() {
    let host = Host::new(Some("v2-debian"));
    std::fs::remove_file(host.content().join("containerd-shim-runsc-v1")).unwrap();
    assert_rejected(
        &host,
        &["--once"],
        &[
            "the installation image has no containerd-shim-runsc-v1 in",
            "ship runsc and containerd-shim-runsc-v1 there",
        ],
    );
    assert!(!host.root().join("var/bin/containerruntimes/runsc").exists());
}

#[test]
fn malformed_flags_are_rejected() {
    let host = Host::new(Some("v2-debian"));
    let before = host.snapshot();
    let output = host
        .command(&["--once"])
        .env("GVISOR_RUNSC_FLAGS", "net-raw=true\nnvproxy\n")
        .output()
        .unwrap();
    let message = stderr(&output);
    assert!(!output.status.success());
    assert!(message.contains("runsc flags (--runsc-flags / GVISOR_RUNSC_FLAGS) are invalid"));
    assert!(
        message.contains("line 2: expected `key=value`"),
        "{message}"
    );
    assert_eq!(host.snapshot(), before);

    assert_rejected(
        &host,
        &["--once", "--runsc-flags=/no/such/flags-file"],
        &["reading the runsc flags file /no/such/flags-file"],
    );
    assert_rejected(
        &host,
        &["--once", "--bin-dir=var/bin"],
        &["--bin-dir must be an absolute path"],
    );
}

#[test]
fn flags_outside_the_allow_list_are_rejected_before_any_change() {
    let host = Host::new(Some("v2-debian"));
    assert_rejected(
        &host,
        &["--once", "--runsc-flags=net-raw=true,debug=true"],
        &[
            "runsc flags (--runsc-flags / GVISOR_RUNSC_FLAGS) are invalid",
            "flag `net-raw` is not accepted",
        ],
    );
    assert_rejected(
        &host,
        &["--once", "--runsc-flags=platform=ptrace"],
        &["flag `platform` is not accepted: expected \"systrap\" or \"kvm\""],
    );
    assert_rejected(
        &host,
        &["--once", "--runsc-flags=network=host"],
        &["flag `network` is not accepted: unknown flag"],
    );
}

/// The host's config.toml is a link to a file elsewhere on the host: the real file is
/// edited in place and the link stays.
#[test]
fn linked_config_is_edited_at_its_target_on_the_host() {
    for target in [
        "/usr/share/containerd/config.toml",
        "../../usr/share/containerd/config.toml",
    ] {
        let host = Host::new(None);
        let real = host.root().join("usr/share/containerd/config.toml");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        let original = fixture("v2-debian");
        std::fs::write(&real, &original).unwrap();
        std::os::unix::fs::symlink(target, host.config_path()).unwrap();

        // The files are written before the restart, which fails here (no bus).
        let output = host.run(&["--once"]);
        let message = stderr(&output);
        assert!(
            message.contains("restarting containerd.service through systemd"),
            "{target}: {message}"
        );
        assert_eq!(
            std::fs::read_link(host.config_path()).unwrap(),
            PathBuf::from(target),
            "the link is kept"
        );
        assert_eq!(
            std::fs::read_to_string(&real).unwrap(),
            host.installed_fixture("v2-debian.installed"),
            "{target}: the real file is edited, everything else in it kept"
        );
    }
}

/// A link to nothing is not "no config": the run fails and writes no default over it.
#[test]
fn dangling_config_link_fails_without_changes() {
    let host = Host::new(None);
    std::os::unix::fs::symlink("/usr/share/containerd/config.toml", host.config_path()).unwrap();
    assert_rejected(
        &host,
        &["--once"],
        &[
            "cannot resolve /etc/containerd/config.toml inside the host root; no host file was changed",
            "points at /usr/share/containerd/config.toml, which does not exist on the host",
        ],
    );
    // A loop fails the same way.
    std::fs::remove_file(host.config_path()).unwrap();
    std::os::unix::fs::symlink("config.toml", host.config_path()).unwrap();
    assert_rejected(&host, &["--once"], &["more than 40 symbolic links"]);
}

#[test]
fn failed_restart_keeps_the_marker_and_the_next_run_retries() {
    let host = Host::new(Some("v2-debian"));
    let output = host.run(&["--once", "--runsc-flags=net-raw=true"]);
    let message = stderr(&output);
    assert!(!output.status.success());
    assert!(
        message.contains("restarting containerd.service through systemd"),
        "{message}"
    );
    assert!(
        message.contains("connecting to the system bus"),
        "{message}"
    );
    // Files were written before the restart; the marker says the restart is still owed.
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(config.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]"));
    assert_eq!(
        std::fs::read_to_string(host.root().join("etc/containerd/runsc.toml")).unwrap(),
        host.runsc_toml("net-raw = \"true\"\n")
    );
    let marker = std::fs::read_to_string(host.root().join(MARKER)).unwrap();
    assert!(marker.contains("/etc/containerd/config.toml"), "{marker}");

    // Nothing left to write, but the owed restart is attempted again.
    let before = host.snapshot();
    let output = host.run(&["--once", "--runsc-flags=net-raw=true"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("restarting containerd.service through systemd"));
    assert_eq!(host.snapshot(), before);
}

#[test]
fn up_to_date_host_needs_no_systemd_and_waits_for_sigterm() {
    let host = Host::new(Some("v2-node"));
    // First run writes everything; its restart fails (no bus).
    assert!(!host.run(&["--once"]).status.success());
    // Pretend the restart happened.
    std::fs::remove_file(host.root().join(MARKER)).unwrap();
    let installed = host.snapshot();
    for binary in ["runsc", "containerd-shim-runsc-v1"] {
        let path = host.installed(&host.version(), binary);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(host.content().join(binary)).unwrap()
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    // Without --once: does its (no) work, then waits for SIGTERM.
    let actions = run_until_sigterm(&host, &[]);
    assert_eq!(
        actions,
        [
            "up-to-date",
            "up-to-date",
            "up-to-date",
            "up-to-date",
            "skipped"
        ],
        "two binaries, config, runsc.toml, no restart"
    );
    assert_eq!(host.snapshot(), installed, "second run changed files");
}

/// Starts the command with `extra`, reads its log until "done; waiting for SIGTERM" (panics
/// if it exits first), sends SIGTERM, checks it exits 0 within 10 s and logs the signal, and
/// returns the `action`s it logged.
fn run_until_sigterm(host: &Host, extra: &[&str]) -> Vec<String> {
    let mut child = host.spawn(extra);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut actions = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("exited before waiting; actions: {actions:?}"))
            .unwrap();
        let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
        let fields = &entry["fields"];
        if let Some(action) = fields["action"].as_str() {
            actions.push(action.to_string());
        }
        if fields["message"] == "done; waiting for SIGTERM" {
            break;
        }
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait_bounded(&mut child, "no exit after SIGTERM");
    assert!(status.success(), "{status}");
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect();
    assert!(
        rest.iter()
            .any(|line| line.contains("\"signal\":\"SIGTERM\"")),
        "{rest:?}"
    );
    actions
}

/// Waits up to 10 s for `child` to exit; kills it and panics with `what` otherwise.
fn wait_bounded(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("{what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn uninstall_of_a_clean_host_changes_nothing_and_needs_no_systemd() {
    let host = Host::new(Some("v2-debian"));
    let before = host.snapshot();
    let output = host.run(&["--uninstall", "--once"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(host.snapshot(), before);
    assert!(stderr(&output).contains("containerd restart not needed"));
}

/// The uninstall DaemonSet's main container: `--uninstall` without `--once` keeps the pod
/// Running once the node is clean, like install.
#[test]
fn uninstall_waits_for_sigterm_like_install() {
    let host = Host::new(Some("v2-debian"));
    let before = host.snapshot();
    let actions = run_until_sigterm(&host, &["--uninstall"]);
    assert_eq!(
        actions,
        ["up-to-date", "up-to-date", "skipped"],
        "config, runsc.toml, no restart (and no version to remove)"
    );
    assert_eq!(host.snapshot(), before);
}

/// A failed uninstall exits non-zero at once, also without `--once` (the pod restarts and
/// stays unready): here the restart fails (no bus), after the files were cleaned, and the
/// marker makes the next run retry the restart.
#[test]
fn a_failed_uninstall_exits_non_zero_instead_of_waiting() {
    let host = Host::new(Some("v2-debian"));
    // Install; its restart fails (no bus). Pretend the restart happened.
    assert!(
        !host
            .run(&["--once", "--runsc-flags=net-raw=true"])
            .status
            .success()
    );
    std::fs::remove_file(host.root().join(MARKER)).unwrap();

    let mut child = host
        .command(&["--uninstall"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, "a failed uninstall waited instead of exiting");
    let mut message = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut message).unwrap();
    assert!(!status.success(), "{message}");
    assert!(
        message.contains("restarting containerd.service through systemd"),
        "{message}"
    );
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(!config.contains("runsc"), "{config}");
    assert!(!host.root().join("etc/containerd/runsc.toml").exists());
    assert!(
        host.root().join(MARKER).exists(),
        "the owed restart is remembered"
    );
}

// Hostile hosts and input (issue #26 items 4, 5, 7 and 11; see the module docs of
// `gvisor_install` and docs/reliability.md).

/// A run that wrote its files and failed only at the restart (there is no bus here).
fn assert_only_the_restart_failed(ok: bool, message: &str) {
    assert!(
        !ok && message.contains("restarting containerd.service through systemd"),
        "{message}"
    );
}

const PASSWD: &[u8] = b"root:x:0:0:root:/root:/bin/bash\n";
const SHADOW: &[u8] = b"root:$6$saltsalt$Qq0Jf1dPd5X3hashhash:19000:0:99999:7:::\n";

/// Item 4: a link at a binary's path, at runsc.toml or at the restart marker is replaced by
/// the file the run writes; its target (a file or a device node) keeps its content, mode and
/// kind.
#[test]
fn links_at_the_files_written_are_replaced_not_followed() {
    let host = Host::new(Some("v2-debian"));
    let passwd = host.put("etc/passwd", PASSWD, 0o644);
    let shadow = host.put("etc/shadow", SHADOW, 0o640);
    let hostname = host.put("etc/hostname", b"node-1\n", 0o644);
    host.zero_device("dev/zero");
    let folder = format!("var/bin/containerruntimes/gvisor/{}", host.version());
    host.link(&format!("{folder}/runsc"), "/etc/passwd");
    host.link(&format!("{folder}/containerd-shim-runsc-v1"), "/dev/zero");
    host.link("etc/containerd/runsc.toml", "/etc/shadow");
    host.link(MARKER, "/etc/hostname");
    let before = host.snapshot();

    // The files are written; the restart fails (no bus).
    let (ok, message) = host.run_bounded(&["--once", "--runsc-flags=net-raw=true"]);
    assert_only_the_restart_failed(ok, &message);

    let after = host.snapshot();
    for victim in ["etc/passwd", "etc/shadow", "etc/hostname", "dev/zero"] {
        let key = PathBuf::from(victim);
        assert_eq!(
            after.get(&key),
            before.get(&key),
            "{victim} changed:\n{message}"
        );
    }
    assert_eq!(std::fs::read(&passwd).unwrap(), PASSWD);
    assert_eq!(std::fs::read(&shadow).unwrap(), SHADOW);
    assert_eq!(std::fs::read(&hostname).unwrap(), b"node-1\n");
    for binary in ["runsc", "containerd-shim-runsc-v1"] {
        let path = host.installed(&host.version(), binary);
        assert_eq!(regular_with_mode(&path), (true, 0o755), "{binary}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(host.content().join(binary)).unwrap()
        );
    }
    let runsc_toml = host.root().join("etc/containerd/runsc.toml");
    assert_eq!(regular_with_mode(&runsc_toml), (true, 0o644));
    assert_eq!(
        std::fs::read_to_string(&runsc_toml).unwrap(),
        host.runsc_toml("net-raw = \"true\"\n")
    );
    let marker = host.root().join(MARKER);
    assert!(regular_with_mode(&marker).0);
    assert!(
        std::fs::read_to_string(&marker)
            .unwrap()
            .contains("restart pending")
    );
}

/// Item 4, uninstall: a link at runsc.toml is removed itself; its target stays.
#[test]
fn uninstall_removes_a_link_at_runsc_toml_not_its_target() {
    let host = Host::new(Some("v2-debian"));
    let shadow = host.put("etc/shadow", SHADOW, 0o640);
    host.link("etc/containerd/runsc.toml", "/etc/shadow");
    let (ok, message) = host.run_bounded(&["--uninstall", "--once"]);
    // runsc.toml was "present", so a restart is owed and fails here (no bus).
    assert_only_the_restart_failed(ok, &message);
    assert_eq!(std::fs::read(&shadow).unwrap(), SHADOW);
    assert_eq!(regular_with_mode(&shadow), (true, 0o640));
    assert!(
        std::fs::symlink_metadata(host.root().join("etc/containerd/runsc.toml")).is_err(),
        "the link itself is removed"
    );
}

/// Item 11 ("linked to"): runsc.toml is a link to config.toml. The link is replaced; config.toml
/// gets its own edit, not runsc.toml's text.
#[test]
fn a_runsc_toml_link_to_config_toml_is_replaced_not_written_through() {
    let host = Host::new(Some("v2-debian"));
    host.link("etc/containerd/runsc.toml", "config.toml");
    let (ok, message) = host.run_bounded(&["--once", "--runsc-flags=net-raw=true"]);
    assert_only_the_restart_failed(ok, &message);
    assert_eq!(
        std::fs::read_to_string(host.config_path()).unwrap(),
        host.installed_fixture("v2-debian.installed")
    );
    let runsc_toml = host.root().join("etc/containerd/runsc.toml");
    assert!(regular_with_mode(&runsc_toml).0);
    assert_eq!(
        std::fs::read_to_string(runsc_toml).unwrap(),
        host.runsc_toml("net-raw = \"true\"\n")
    );
}

/// Item 5: a FIFO at config.toml (also through its link) or as the flags file fails the run
/// at once, naming what is there; nothing changes.
#[test]
fn a_fifo_at_config_toml_or_as_the_flags_file_fails_at_once() {
    let host = Host::new(None);
    mkfifo(&host.config_path());
    let before = host.snapshot();
    let (ok, message) = host.run_bounded(&["--once"]);
    assert!(!ok, "{message}");
    assert!(
        message.contains("cannot edit /etc/containerd/config.toml on the host"),
        "{message}"
    );
    assert!(
        message.contains("is a FIFO, not a regular file"),
        "{message}"
    );
    assert_eq!(host.snapshot(), before);

    let host = Host::new(Some("v2-debian"));
    let fifo = host.dir.path().join("flags");
    mkfifo(&fifo);
    let before = host.snapshot();
    let flag = format!("--runsc-flags={}", fifo.display());
    let (ok, message) = host.run_bounded(&["--once", &flag]);
    assert!(!ok, "{message}");
    assert!(
        message.contains("reading the runsc flags file"),
        "{message}"
    );
    assert!(
        message.contains("is a FIFO, not a regular file"),
        "{message}"
    );
    assert_eq!(host.snapshot(), before);
}

/// Item 5: config.toml linked to the host's `/dev/zero`, or a device node itself, is refused
/// without reading from the device (it used to be read until memory ran out).
#[test]
fn a_device_at_config_toml_is_refused_unread() {
    let host = Host::new(None);
    host.zero_device("dev/zero");
    host.link("etc/containerd/config.toml", "/dev/zero");
    assert_rejected(
        &host,
        &["--once"],
        &[
            "--containerd-config (/etc/containerd/config.toml -> /dev/zero) writes into the system folder /dev (after following links on the host)",
        ],
    );
    let host = Host::new(None);
    host.zero_device("etc/containerd/config.toml");
    assert_rejected(
        &host,
        &["--once"],
        &[
            "/etc/containerd/config.toml is a character device, not a regular file; it is not opened",
        ],
    );
}

/// Item 5: a config.toml or flags file over 1 MiB is refused (reading at most 1 MiB + 1
/// byte); one just under the limit still installs.
#[test]
fn oversized_config_and_flags_files_are_refused() {
    let limit = 1024 * 1024;
    let padded = |text: &str, size: usize| {
        let mut padded = text.to_string();
        while padded.len() + 80 < size {
            padded.push_str(&format!("# {}\n", "x".repeat(76)));
        }
        padded.push_str(&"#".repeat(size - padded.len() - 1));
        padded.push('\n');
        assert_eq!(padded.len(), size);
        padded
    };
    let host = Host::new(None);
    std::fs::write(host.config_path(), padded(&fixture("v2-debian"), limit + 1)).unwrap();
    assert_rejected(
        &host,
        &["--once"],
        &["/etc/containerd/config.toml is larger than 1048576 bytes; it is not read"],
    );

    let host = Host::new(Some("v2-debian"));
    let flags = host.dir.path().join("flags");
    std::fs::write(&flags, padded("net-raw=true\n", limit + 1)).unwrap();
    let flag = format!("--runsc-flags={}", flags.display());
    assert_rejected(&host, &["--once", &flag], &["is larger than 1048576 bytes"]);

    // Near the limit: read and edited (the restart fails here: no bus).
    let host = Host::new(None);
    std::fs::write(
        host.config_path(),
        padded(&fixture("v2-debian"), limit - 1024),
    )
    .unwrap();
    let (ok, message) = host.run_bounded(&["--once"]);
    assert_only_the_restart_failed(ok, &message);
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(
        config.contains("containerd.runtimes.runsc]"),
        "not installed"
    );
}

/// Item 7: a flags file that is something else (a shadow file) is refused by line number and
/// reason without its text; control characters in flags, paths and link targets reach
/// stderr escaped.
#[test]
fn errors_echo_no_file_content_and_no_control_characters() {
    let host = Host::new(Some("v2-debian"));
    let flags = host.dir.path().join("shadow");
    std::fs::write(&flags, SHADOW).unwrap();
    let flag = format!("--runsc-flags={}", flags.display());
    let before = host.snapshot();
    let (ok, message) = host.run_bounded(&["--once", &flag]);
    assert!(!ok);
    assert!(
        message.contains("line 1: expected `key=value`"),
        "{message}"
    );
    assert!(
        !message.contains("saltsalt"),
        "file content echoed:\n{message}"
    );
    assert_eq!(host.snapshot(), before);

    let no_controls = |message: &str| {
        assert!(
            !message.contains(|c: char| c.is_control() && c != '\n'),
            "raw control character in:\n{message:?}"
        );
    };
    for (extra, shown) in [
        ("--bin-dir=var/\u{1b}[2Jbin", "var/\\u{1b}[2Jbin"),
        (
            "--runsc-flags=/no/such/\u{1b}]0;title\u{7}flags",
            "/no/such/\\u{1b}]0;title\\u{7}flags",
        ),
        (
            "--runsc-flags=net-raw=true\nde\u{1b}[31mbug=true",
            "line 2: ",
        ),
    ] {
        let (ok, message) = host.run_bounded(&["--once", extra]);
        assert!(!ok, "{extra:?}");
        no_controls(&message);
        assert!(message.contains(shown), "{shown} not in {message:?}");
        assert_eq!(host.snapshot(), before);
    }
    // A dangling config.toml link whose target text carries an escape sequence.
    std::fs::remove_file(host.config_path()).unwrap();
    host.link(
        "etc/containerd/config.toml",
        "/nowhere/\u{1b}[2J\rconfig.toml",
    );
    let (ok, message) = host.run_bounded(&["--once"]);
    assert!(!ok);
    assert!(
        message.contains("which does not exist on the host"),
        "{message}"
    );
    no_controls(&message);
    assert!(
        message.contains("/nowhere/\\u{1b}[2J\\rconfig.toml"),
        "{message:?}"
    );
}

/// Item 11: places that are one another, lie inside one another or sit in a system folder are
/// refused before anything is written, whether flags or links on the host make them so.
#[test]
fn overlapping_places_and_system_folders_are_refused() {
    let host = Host::new(Some("v2-debian"));
    for (extra, hint) in [
        (
            "--runsc-config=/etc/containerd/config.toml",
            "--runsc-config (/etc/containerd/config.toml) is the same path as --containerd-config (/etc/containerd/config.toml); give each its own path",
        ),
        (
            "--containerd-config=/var/bin/containerruntimes/runsc",
            "--containerd-config (/var/bin/containerruntimes/runsc) lies inside --bin-dir",
        ),
        (
            "--bin-dir=/etc",
            "--bin-dir (/etc) writes into the system folder /etc; use a path of its own, such as the default /var/bin/containerruntimes",
        ),
        (
            "--bin-dir=/usr/bin",
            "writes into the system folder /usr/bin",
        ),
        (
            "--runsc-config=/etc/shadow",
            "--runsc-config (/etc/shadow) writes into the system folder /etc",
        ),
        (
            "--runsc-config=/proc/sys/kernel/core_pattern",
            "writes into the system folder /proc",
        ),
    ] {
        assert_rejected(&host, &["--once", extra], &[hint]);
    }

    // The same through links on the host.
    let after_links = "(after following links on the host)";
    host.link("etc/gvisor", "/etc/containerd");
    assert_rejected(
        &host,
        &["--once", "--runsc-config=/etc/gvisor/config.toml"],
        &[
            "--runsc-config (/etc/gvisor/config.toml -> /etc/containerd/config.toml) is the same path as --containerd-config",
            after_links,
        ],
    );
    host.link("var/bin/containerruntimes", "/etc");
    assert_rejected(
        &host,
        &["--once"],
        &[
            "--bin-dir (/var/bin/containerruntimes -> /etc) writes into the system folder /etc",
            after_links,
        ],
    );

    let host = Host::new(None);
    host.put(
        "etc/containerd/runsc.toml",
        fixture("v2-debian").as_bytes(),
        0o644,
    );
    host.link("etc/containerd/config.toml", "runsc.toml");
    assert_rejected(
        &host,
        &["--once"],
        &[
            "--runsc-config (/etc/containerd/runsc.toml) is the same path as --containerd-config (/etc/containerd/config.toml -> /etc/containerd/runsc.toml)",
            after_links,
        ],
    );
    let host = Host::new(Some("v2-debian"));
    host.link("var/lib/gardener-extension-node", "/etc");
    assert_rejected(
        &host,
        &["--once", "--uninstall"],
        &[
            "the restart marker (/var/lib/gardener-extension-node/gvisor-install.restart-pending -> /etc/gvisor-install.restart-pending) writes into the system folder /etc",
            after_links,
        ],
    );
}

/// Profiles: each a runtime handler with its runsc config file beside runsc.toml; a `kvm`
/// profile on a host without the KVM device is refused with the reason and the others
/// install; a profile no longer asked for loses its handler and file; uninstall removes all.
#[test]
fn profiles_get_a_handler_and_a_file_each_and_go_when_no_longer_asked_for() {
    let host = Host::new(Some("v2-debian"));
    let no_kvm = host.dir.path().join("no-kvm");
    let kvm_flag = format!("--kvm-device={}", no_kvm.display());
    let flags = "--runsc-flags=net-raw=true\n[debug]\ndebug=true\ndebug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log\n[fast]\nplatform=kvm\n";
    let (ok, message) = host.run_bounded(&["--once", flags, &kvm_flag]);
    assert_only_the_restart_failed(ok, &message);
    assert!(
        message.contains("\"action\":\"refused\"")
            && message.contains("\"profile\":\"fast\"")
            && message.contains("platform kvm needs")
            && message.contains("which this node does not have"),
        "{message}"
    );
    let etc = host.root().join("etc/containerd");
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    let runtimes = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes";
    assert!(config.contains(&format!("{runtimes}.runsc]")), "{config}");
    assert!(
        config.contains(&format!("{runtimes}.runsc-debug]")),
        "{config}"
    );
    assert!(
        config.contains("ConfigPath = \"/etc/containerd/runsc-debug.toml\""),
        "{config}"
    );
    assert!(!config.contains("runsc-fast"), "refused: {config}");
    assert_eq!(
        std::fs::read_to_string(etc.join("runsc-debug.toml")).unwrap(),
        host.runsc_toml(
            "debug = \"true\"\ndebug-log = \"/var/log/runsc/%ID%/gvisor-%COMMAND%.log\"\n"
        )
    );
    assert!(!etc.join("runsc-fast.toml").exists());

    // With a KVM device (any character device will do for the check) the kvm profile installs.
    host.zero_device("dev-kvm");
    let kvm_flag = format!("--kvm-device={}", host.root().join("dev-kvm").display());
    let (ok, message) = host.run_bounded(&["--once", flags, &kvm_flag]);
    assert_only_the_restart_failed(ok, &message);
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(
        config.contains(&format!("{runtimes}.runsc-fast]")),
        "{config}"
    );
    assert_eq!(
        std::fs::read_to_string(etc.join("runsc-fast.toml")).unwrap(),
        host.runsc_toml("platform = \"kvm\"\n")
    );

    // The debug and fast profiles are no longer asked for: handlers and files go.
    let (ok, message) = host.run_bounded(&["--once", "--runsc-flags=net-raw=true"]);
    assert_only_the_restart_failed(ok, &message);
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(
        !config.contains("runsc-debug") && !config.contains("runsc-fast"),
        "{config}"
    );
    assert!(!etc.join("runsc-debug.toml").exists() && !etc.join("runsc-fast.toml").exists());
    assert!(etc.join("runsc.toml").exists());

    // Uninstall removes every profile's handler and file.
    let (ok, message) = host.run_bounded(&["--once", flags, &kvm_flag]);
    assert_only_the_restart_failed(ok, &message);
    let (ok, message) = host.run_bounded(&["--once", "--uninstall"]);
    assert_only_the_restart_failed(ok, &message);
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(!config.contains("runsc"), "{config}");
    for file in ["runsc.toml", "runsc-debug.toml", "runsc-fast.toml"] {
        assert!(!etc.join(file).exists(), "{file}");
    }
}

/// A profile header the operator would never write is refused before any host file changes,
/// without echoing it.
#[test]
fn bad_profile_headers_are_refused_before_any_change() {
    let host = Host::new(Some("v2-debian"));
    let before = host.snapshot();
    for flags in [
        "--runsc-flags=[../../etc/shadow]\nnet-raw=true",
        "--runsc-flags=[a]\n[a]",
        "--runsc-flags=[a]\nplatform=ptrace",
    ] {
        let (ok, message) = host.run_bounded(&["--once", flags]);
        assert!(!ok, "{flags}");
        assert!(
            message.contains("runsc flags (--runsc-flags / GVISOR_RUNSC_FLAGS) are invalid"),
            "{message}"
        );
        assert!(!message.contains("shadow"), "{message}");
        assert_eq!(host.snapshot(), before, "{flags}");
    }
}

/// An installer run waiting for SIGTERM, its log lines read on a thread of their own.
struct WaitingRun {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
}

impl WaitingRun {
    fn start(host: &Host, extra: &[&str]) -> Self {
        let mut child = host.spawn(extra);
        let stderr = child.stderr.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line)
                    && send.send(entry["fields"].clone()).is_err()
                {
                    return;
                }
            }
        });
        WaitingRun { child, lines }
    }

    /// The first logged line (its fields) that `matches`, within 10 s.
    fn until(&self, what: &str, matches: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(fields) if matches(&fields) => return fields,
                Ok(_) => {}
                Err(_) => panic!("not logged within 10 s: {what}"),
            }
        }
    }

    fn stop(mut self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = wait_bounded(&mut self.child, "no exit after SIGTERM");
        assert!(status.success(), "{status}");
    }
}

/// A run whose files are written and whose containerd restart then happens: here the first
/// run fails at the restart (no bus), so the test plays the restart (removes the marker) and
/// runs again, which changes no file and goes on to remove what is no longer used. Returns
/// the second run's log.
fn install_and_restart(host: &Host, extra: &[&str]) -> String {
    let (ok, message) = host.run_bounded(&[&["--once"], extra].concat());
    if !ok {
        assert_only_the_restart_failed(ok, &message);
        std::fs::remove_file(host.root().join(MARKER)).unwrap();
    }
    let (ok, message) = host.run_bounded(&[&["--once"], extra].concat());
    assert!(ok, "{message}");
    message
}

/// Version-stamped installs: an upgrade installs the new build beside the old one and points
/// containerd and the runsc config at it; the old version stays while a process (a pod's
/// shim) runs it and goes once none does, also while the installer waits; binaries from
/// before versions go the same way; uninstall removes every version no process runs.
#[test]
fn an_upgrade_keeps_the_version_a_sandbox_runs_until_it_ends() {
    let host = Host::new(Some("v2-debian"));
    let containerd = "/usr/bin/containerd";
    // An install from before versions, whose shim still serves a pod.
    host.put("var/bin/containerruntimes/runsc", b"old runsc", 0o755);
    host.put(
        "var/bin/containerruntimes/containerd-shim-runsc-v1",
        b"old shim",
        0o755,
    );
    let legacy_shim = "/var/bin/containerruntimes/containerd-shim-runsc-v1";
    let processes = host.processes(&[containerd, legacy_shim]);
    let first = host.version();
    let message = install_and_restart(&host, &[&processes]);
    assert!(
        message.contains("\"binaries_from_before_versions\":true"),
        "{message}"
    );
    assert!(host.root().join(&legacy_shim[1..]).exists());
    let shim = |version: &str| {
        format!("/var/bin/containerruntimes/gvisor/{version}/containerd-shim-runsc-v1")
    };
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(
        config.contains(&format!("runtime_path = \"{}\"", shim(&first))),
        "{config}"
    );

    // That pod ended; one runs in the first version. An upgrade brings another runsc build.
    let processes = host.processes(&[containerd, &shim(&first)]);
    host.upgrade_image("2");
    let second = host.version();
    assert_ne!(first, second);
    let message = install_and_restart(&host, &[&processes]);
    assert!(!host.root().join(&legacy_shim[1..]).exists(), "{message}");
    assert!(!host.root().join("var/bin/containerruntimes/runsc").exists());
    let config = std::fs::read_to_string(host.config_path()).unwrap();
    assert!(
        config.contains(&format!("runtime_path = \"{}\"", shim(&second))),
        "{config}"
    );
    assert_eq!(
        std::fs::read_to_string(host.root().join("etc/containerd/runsc.toml")).unwrap(),
        host.runsc_toml("")
    );
    assert!(
        host.installed(&first, "runsc").exists()
            && host.installed(&first, "containerd-shim-runsc-v1").exists(),
        "the version a pod runs stays: {message}"
    );
    assert!(
        message.contains("\"action\":\"kept\"") && message.contains("running sandboxes use them"),
        "{message}"
    );

    // The installer waits; the pod ends (its shim exits, " (deleted)" or not) and the
    // first version goes at the next look.
    let run = WaitingRun::start(&host, &[&processes, "--cleanup-interval-seconds=1"]);
    run.until("waiting for SIGTERM", |f| {
        f["message"] == "done; waiting for SIGTERM"
    });
    host.processes(&[containerd]);
    let removed = run.until("the first version removed", |f| {
        f["action"] == "removed" && f["version"] == first.as_str()
    });
    run.stop();
    assert!(!host.installed(&first, "runsc").exists(), "{removed}");
    assert!(
        !host
            .root()
            .join("var/bin/containerruntimes/gvisor")
            .join(&first)
            .exists()
    );
    assert!(host.installed(&second, "runsc").exists());

    // Uninstall while a pod runs in the second version: the handlers go at once, the
    // version when the pod has ended.
    let running = format!("{} (deleted)", shim(&second));
    let processes = host.processes(&[containerd, &running]);
    let (ok, message) = host.run_bounded(&["--once", "--uninstall", &processes]);
    assert_only_the_restart_failed(ok, &message);
    std::fs::remove_file(host.root().join(MARKER)).unwrap();
    let (ok, message) = host.run_bounded(&["--once", "--uninstall", &processes]);
    assert!(ok, "{message}");
    assert!(host.installed(&second, "runsc").exists(), "{message}");
    let processes = host.processes(&[containerd]);
    let (ok, message) = host.run_bounded(&["--once", "--uninstall", &processes]);
    assert!(ok, "{message}");
    assert!(
        !host
            .root()
            .join("var/bin/containerruntimes/gvisor")
            .exists(),
        "{message}"
    );
}

/// Whoever cannot read the host's process table cannot tell a version unused: nothing is
/// removed, and the log says why. A version folder holding files we did not install keeps
/// them (and itself); links in it are removed, never followed.
#[test]
fn versions_stay_without_a_process_table_and_foreign_files_stay() {
    let host = Host::new(Some("v2-debian"));
    let first = host.version();
    install_and_restart(&host, &[]);
    host.upgrade_image("2");
    // No --proc-dir: `<host-root>/proc` does not exist here. Then an empty folder.
    let message = install_and_restart(&host, &[]);
    assert!(host.installed(&first, "runsc").exists(), "{message}");
    assert!(
        message.contains("cannot read the host's process table"),
        "{message}"
    );
    let empty = host.processes(&[]);
    let message = install_and_restart(&host, &[&empty]);
    assert!(host.installed(&first, "runsc").exists(), "{message}");

    // A process table at last; the old folder also holds a stranger's file and our runsc is
    // a link to /etc/passwd.
    let passwd = host.put("etc/passwd", PASSWD, 0o644);
    let folder = host
        .root()
        .join("var/bin/containerruntimes/gvisor")
        .join(&first);
    std::fs::write(folder.join("notes.txt"), b"not ours").unwrap();
    std::fs::remove_file(folder.join("runsc")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", folder.join("runsc")).unwrap();
    let processes = host.processes(&["/usr/bin/containerd"]);
    let message = install_and_restart(&host, &[&processes]);
    assert_eq!(std::fs::read(&passwd).unwrap(), PASSWD);
    assert!(
        std::fs::symlink_metadata(folder.join("runsc")).is_err(),
        "{message}"
    );
    assert!(!folder.join("containerd-shim-runsc-v1").exists());
    assert!(folder.join("notes.txt").exists());
    assert!(
        message.contains("its folder holds files we did not install"),
        "{message}"
    );
}
