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
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
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

    /// Every file under the host root with its content.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
                let relative = path.strip_prefix(base).unwrap().to_path_buf();
                if kind.is_symlink() {
                    // A link is recorded as its target text, never followed.
                    let target = std::fs::read_link(&path).unwrap();
                    out.insert(relative, format!("-> {}", target.display()).into_bytes());
                } else if kind.is_dir() {
                    walk(&path, base, out);
                } else {
                    out.insert(relative, std::fs::read(&path).unwrap());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(&self.root(), &self.root(), &mut files);
        files
    }
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
    let output = host.run(extra);
    let message = stderr(&output);
    assert!(!output.status.success(), "expected failure:\n{message}");
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
        &["--once", "--runsc-flags=platform=kvm"],
        &["flag `platform` is not accepted: unknown flag"],
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
            fixture("v2-debian.installed"),
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
        "[runsc_config]\nnet-raw = \"true\"\n"
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
        let path = host.root().join("var/bin/containerruntimes").join(binary);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(host.content().join(binary)).unwrap()
        );
        use std::os::unix::fs::PermissionsExt;
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
    let mut child = host
        .command(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
        ["up-to-date", "up-to-date", "kept", "skipped"],
        "config, runsc.toml, binaries kept, no restart"
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
