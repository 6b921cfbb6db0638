//! The in-place OS update script of debian/ubuntu pools (`assets/os-update.sh`, shipped by the
//! OSC controller; `src/controllers/operatingsystemconfig/os_update.rs`), run for real with
//! `sh` in a private mount namespace: `/etc/os-release` and `/etc/debian_version` are bind
//! mounts of per-test files, and `apt-get` and `systemctl` are stand-ins on `PATH` that log
//! their arguments and play the package archive (a real apt run needs a mirror and would
//! change this machine). What is checked is the script's own logic: the version checks, the
//! order of the apt calls, the messages the node agent classifies (printable, one line), the
//! reboot, and the failure reason the agent's runner (`agent::in_place::steps::run_os_update`)
//! makes of a failed run.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use gardener_extension_node::controllers::operatingsystemconfig::os_update;

struct Run {
    code: i32,
    stderr: String,
    log: String,
    version_after: String,
}

const DEBIAN_12: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\n";
const UBUNTU_2404: &str = "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\nVERSION_ID=\"24.04\"\nVERSION=\"24.04.1 LTS (Noble Numbat)\"\n";

/// A prepared node for the script: a folder with the node's os-release and Debian version,
/// the script, the stand-ins and their log.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    /// A node whose os-release is `os_release` and whose Debian point release is
    /// `debian_version`. `apt` says what the stand-in apt-get does: `offline` (update fails),
    /// `broken` (full-upgrade prints pages of progress, then fails), or the version
    /// full-upgrade installs (written into debian_version, or into os-release's VERSION for
    /// Ubuntu).
    fn new(os_release: &str, debian_version: &str, apt: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let bin = d.join("bin");
        fs::create_dir(&bin).unwrap();
        fs::write(d.join("os-release"), os_release).unwrap();
        fs::write(d.join("debian_version"), format!("{debian_version}\n")).unwrap();
        fs::write(d.join("os-update"), os_update::SCRIPT).unwrap();
        let log = d.join("log");
        let apt_get = format!(
            r#"#!/bin/sh
echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}
mode='{apt}'
case "$*" in
  *' update') [ "$mode" = offline ] && {{ echo 'Temporary failure resolving deb.debian.org' >&2; exit 100; }}; exit 0 ;;
  *full-upgrade) [ "$mode" = broken ] && {{
      i=0; while [ $i -lt 400 ]; do echo "Get:$i http://deb.debian.org/debian bookworm/main amd64 pkg$i 1.0 [12 kB]"; i=$((i+1)); done
      echo 'dpkg: error processing package' >&2; exit 100; }}
    if grep -q '^ID=ubuntu' /etc/os-release; then
      new=$(sed "s/^VERSION=.*/VERSION=\"$mode LTS (Noble Numbat)\"/" /etc/os-release)
      printf '%s\n' "$new" > /etc/os-release
    else
      echo "$mode" > /etc/debian_version
    fi
    exit 0 ;;
esac
exit 1
"#,
            log = log.display()
        );
        let systemctl = format!("#!/bin/sh\necho \"systemctl $*\" >> {}\n", log.display());
        for (name, content) in [("apt-get", apt_get), ("systemctl", systemctl)] {
            let path = bin.join(name);
            fs::write(&path, content).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Node { dir }
    }

    /// The command line that runs the script with `args` on this node: `sh` in a private
    /// mount namespace with the node's files bind-mounted and the stand-ins first on `PATH`.
    fn command(&self, args: &[&str]) -> Vec<String> {
        let d = self.dir.path();
        let inner = format!(
            "mount --bind {d}/os-release /etc/os-release && mount --bind {d}/debian_version /etc/debian_version && \
             PATH={d}/bin:$PATH exec sh {d}/os-update \"$@\"",
            d = d.display(),
        );
        let mut command: Vec<String> = ["unshare", "--mount", "--propagation", "private"]
            .into_iter()
            .chain(["sh", "-c", &inner, "os-update"])
            .map(String::from)
            .collect();
        command.extend(args.iter().map(|arg| arg.to_string()));
        command
    }

    fn run(&self, args: &[&str]) -> Run {
        let command = self.command(args);
        let output = Command::new(&command[0])
            .args(&command[1..])
            .output()
            .unwrap();
        let d = self.dir.path();
        Run {
            code: output.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            log: fs::read_to_string(d.join("log")).unwrap_or_default(),
            version_after: fs::read_to_string(d.join("debian_version")).unwrap(),
        }
    }
}

/// Runs the script with `args` on a fresh [`Node`].
fn run_script(os_release: &str, debian_version: &str, apt: &str, args: &[&str]) -> Run {
    Node::new(os_release, debian_version, apt).run(args)
}

fn can_run() -> bool {
    // Bind mounts in a private mount namespace need root (CI runs the tests as root).
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .and_then(|line| line.split_whitespace().nth(2))
        == Some("0");
    if !root || !Path::new("/etc/debian_version").exists() {
        eprintln!("skipped: needs root and a Debian-like /etc (as CI has)");
    }
    root && Path::new("/etc/debian_version").exists()
}

#[test]
fn a_debian_point_release_is_installed_and_the_node_reboots() {
    if !can_run() {
        return;
    }
    let run = run_script(DEBIAN_12, "12.6", "12.7", &["12.7"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.version_after.trim(), "12.7");
    let lines: Vec<&str> = run.log.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.log);
    assert!(lines[0].starts_with("apt-get -q update"), "{}", run.log);
    assert!(
        lines[1].contains("full-upgrade")
            && lines[1].contains("--force-confold")
            && lines[1].contains("DEBIAN_FRONTEND=noninteractive"),
        "{}",
        run.log
    );
    assert_eq!(lines[2], "systemctl reboot --no-block");
}

#[test]
fn a_newer_point_release_in_the_archive_is_accepted() {
    if !can_run() {
        return;
    }
    let run = run_script(DEBIAN_12, "12.6", "12.9", &["12.7"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.log.ends_with("systemctl reboot --no-block\n"),
        "{}",
        run.log
    );
}

#[test]
fn an_ubuntu_point_release_is_read_from_os_release() {
    if !can_run() {
        return;
    }
    let run = run_script(UBUNTU_2404, "trixie/sid", "24.04.2", &["24.04.2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.log.ends_with("systemctl reboot --no-block\n"),
        "{}",
        run.log
    );
    // The wanted version older than the archive's: still fine; a release change is not.
    let run = run_release_change();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("invalid arguments"), "{}", run.stderr);
    assert!(run.log.is_empty(), "nothing ran: {}", run.log);
}

fn run_release_change() -> Run {
    run_script(UBUNTU_2404, "trixie/sid", "26.04", &["26.04"])
}

#[test]
fn bad_arguments_and_release_changes_are_fatal_and_touch_nothing() {
    if !can_run() {
        return;
    }
    for args in [
        &[][..],
        &["12.7; reboot"],
        &["$(id)"],
        &["12..7"],
        &["12.7", "13"],
        &["13.1"],
    ] {
        let run = run_script(DEBIAN_12, "12.6", "12.7", args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("invalid arguments:"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.log.is_empty(), "{args:?}: {}", run.log);
    }
    let other = DEBIAN_12.replace("ID=debian", "ID=fedora");
    let run = run_script(&other, "12.6", "12.7", &["12.7"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("'fedora'"), "{}", run.stderr);
}

#[test]
fn an_unreachable_archive_is_a_network_problem_and_a_failed_upgrade_a_system_failure() {
    if !can_run() {
        return;
    }
    let run = run_script(DEBIAN_12, "12.6", "offline", &["12.7"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("network problems:"), "{}", run.stderr);
    assert!(
        !run.log.contains("full-upgrade") && !run.log.contains("reboot"),
        "{}",
        run.log
    );

    let run = run_script(DEBIAN_12, "12.6", "broken", &["12.7"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("system failure:"), "{}", run.stderr);
    assert!(!run.log.contains("reboot"), "{}", run.log);

    // The archive is behind the wanted version: no reboot into an old system.
    let run = run_script(DEBIAN_12, "12.5", "12.6", &["12.7"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("older than the wanted 12.7"),
        "{}",
        run.stderr
    );
    assert!(!run.log.contains("reboot"), "{}", run.log);
}

#[test]
fn messages_repeat_the_argument_verbatim() {
    if !can_run() {
        return;
    }
    // dash's echo would turn `\c` into "stop printing here".
    let run = run_script(DEBIAN_12, "12.6", "12.7", &["12\\c.7"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("version '12\\c.7' is not of the form"),
        "{}",
        run.stderr
    );
}

/// Issue #26 item 7: the refused argument was echoed as it was, escape sequences and line
/// breaks included, into the message the agent puts on the Node and in its log.
#[test]
fn control_characters_from_outside_never_reach_the_message() {
    if !can_run() {
        return;
    }
    let run = run_script(
        DEBIAN_12,
        "12.6",
        "12.7",
        &["12.7\u{1b}[2J\nsystem failure: forged second line"],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "invalid arguments: version '12.7?[2J?system failure: forged second line' is not of the form 12.7 or 24.04.2\n"
    );
    // os-release is the node's, but quoted the same way, and long values are cut.
    let other = DEBIAN_12.replace(
        "ID=debian",
        &format!("ID='x\u{1b}]0;title\u{7}{}'", "y".repeat(100)),
    );
    let run = run_script(&other, "12.6", "12.7", &["12.7"]);
    assert_eq!(run.code, 2);
    let quoted = format!("'x?]0;title?{}'", "y".repeat(53));
    assert!(run.stderr.contains(&quoted), "{}", run.stderr);
    assert!(
        !run.stderr.trim_end().contains(['\n', '\u{1b}', '\u{7}']),
        "{:?}",
        run.stderr
    );
}

/// Issue #26 item 8, with the real script and the agent's runner: after a failed
/// `apt-get full-upgrade` (pages of progress on standard output) the failure reason the agent
/// puts on the Node starts with the script's own `system failure: ...` line.
#[tokio::test]
async fn after_a_failed_full_upgrade_the_reason_starts_with_the_scripts_message() {
    use gardener_extension_node::agent::in_place::rules::MAX_REASON_CHARS;
    use gardener_extension_node::agent::in_place::steps::{RetryPolicy, run_os_update};
    use gardener_extension_node::api::operatingsystemconfig::OsUpdate;
    if !can_run() {
        return;
    }
    let node = Node::new(DEBIAN_12, "12.6", "broken");
    let mut command = node.command(&["12.7"]);
    let update = OsUpdate {
        command: command.remove(0),
        args: command,
    };
    let no_retry = RetryPolicy {
        interval: std::time::Duration::from_millis(10),
        timeout: std::time::Duration::ZERO,
    };
    // The real node's program runner; no systemd is called.
    let host = gardener_extension_node::agent::ports::host::SystemHost::new(
        "unix:path=/nonexistent".into(),
        std::time::Duration::from_secs(1),
        String::new(),
        String::new(),
        std::env::temp_dir(),
    );
    let reason = run_os_update(&host, &update, no_retry).await.unwrap_err();
    assert!(
        reason.starts_with(
            "system failure: apt-get full-upgrade failed (see above) (unshare: exit status: 1); output before it: …"
        ),
        "{reason}"
    );
    assert!(
        reason.ends_with("pkg399 1.0 [12 kB] dpkg: error processing package"),
        "{reason}"
    );
    assert!(reason.chars().count() <= MAX_REASON_CHARS);
}
