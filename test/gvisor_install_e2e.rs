//! e2e: `gvisor-install` in a real systemd (systemd-nspawn, see `support/nspawn.rs`) with
//! Debian's containerd and runsc, and our systemd D-Bus client against that systemd.
//!
//! The installer runs inside the machine the way the DaemonSet runs it: in a mount namespace
//! of its own where the machine's `/` is bind-mounted at `/var/host`, so host paths and the
//! system bus socket are reached through `--host-root`, and containerd is restarted through
//! D-Bus. The "image" folder holds Debian's `runsc` and, because Debian does not package
//! gVisor's containerd shim, a stand-in `containerd-shim-runsc-v1` script: these tests check
//! that the runtime is registered and containerd restarted, not that a sandbox starts
//! (containerd only runs the shim when a pod uses the runtime).
//!
//! How "restarted once" is proven: containerd's `InvocationID` changes exactly when it is
//! restarted, and its journal has one "containerd successfully booted" line per start. That
//! the running containerd took the runtime is read from what that very invocation logged
//! ("Start cri plugin with config {... Runtimes:map[... runsc:{Type:io.containerd.runsc.v1
//! ...") and from `ctr plugins ls` (CRI plugin `ok`).
//!
//! Which gVisor version is in use is read the way the DaemonSet reads it: from the machine's
//! real `/proc` under the host root; a sandbox started with the installed runsc (`runsc do`)
//! keeps its version through an uninstall, which removes it once the sandbox has ended.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gardener_extension_node::containerd::ContainerdConfig;
use gardener_extension_node::gvisor_install::versions;
use gardener_extension_node::systemd::{self, JobResult, Systemd};
use support::nspawn::{Machine, MachineOptions};

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
const BIN_IN_MACHINE: &str = "/opt/gardener-extension-node/gardener-extension-node";
const CONTENT: &str = "/opt/gvisor-content";
const CONTAINERD: &str = "containerd.service";
const CONFIG: &str = "/etc/containerd/config.toml";
const RUNSC_TOML: &str = "/etc/containerd/runsc.toml";
const BIN_DIR: &str = "/var/bin/containerruntimes";
const MARKER: &str = "/var/lib/gardener-extension-node/gvisor-install.restart-pending";
const PID_FILE: &str = "/run/gvisor-install.pid";
const UNIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Stand-in for gVisor's shim, which Debian does not package (see the module docs).
const SHIM_STAND_IN: &[u8] =
    b"#!/bin/sh\necho 'stand-in for containerd-shim-runsc-v1 (not packaged by Debian)' >&2\nexit 1\n";

fn boot() -> Machine {
    assert!(
        Path::new("/usr/bin/containerd").exists() && Path::new("/usr/bin/runsc").exists(),
        "Debian's containerd and runsc must be installed: run hack/install-deps.sh"
    );
    Machine::boot(MachineOptions {
        bind_ro: vec![(PathBuf::from(BIN), PathBuf::from(BIN_IN_MACHINE))],
        ..MachineOptions::default()
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("test/fixtures/containerd")
            .join(name),
    )
    .unwrap()
}

/// The version folder the installer gives the image's binaries (Debian's runsc and the
/// stand-in shim): `BIN_DIR/gvisor/<version>`.
fn version_dir() -> String {
    let runsc = std::fs::read("/usr/bin/runsc").unwrap();
    format!(
        "{BIN_DIR}/gvisor/{}",
        versions::version_of(&[&runsc, SHIM_STAND_IN])
    )
}

/// Puts the image's binaries into the machine and starts containerd.
fn prepare(machine: &Machine) {
    machine
        .sh(&format!(
            "mkdir -p {CONTENT} && cp /usr/bin/runsc {CONTENT}/runsc"
        ))
        .expect_success("copy runsc");
    machine
        .write_file(
            format!("{CONTENT}/containerd-shim-runsc-v1"),
            SHIM_STAND_IN,
            0o755,
        )
        .unwrap();
    machine
        .run(&["systemctl", "start", CONTAINERD])
        .expect_success("start containerd");
    machine
        .wait_for_unit_state(CONTAINERD, "active", UNIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The installer as the DaemonSet runs it, in its own mount namespace with the machine's
/// `/` at `/var/host`. Writes its PID (inside the machine) to [`PID_FILE`].
fn installer(machine: &Machine, extra: &[&str]) -> Command {
    let script = format!(
        "echo $$ > {PID_FILE}; mkdir -p /var/host && mount --rbind / /var/host && \
         exec {BIN_IN_MACHINE} --log-format json gvisor-install --host-root=/var/host \
         --bin-dir={BIN_DIR} --source-dir={CONTENT} \"$@\""
    );
    let mut command = machine.command("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "gvisor-install",
        ])
        .args(extra);
    command
}

/// Runs the installer to completion; returns (success, `action` fields in order, stderr).
fn run_installer(machine: &Machine, flags: &str, extra: &[&str]) -> (bool, Vec<String>, String) {
    let output = installer(machine, extra)
        .env("GVISOR_RUNSC_FLAGS", flags)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), actions_in(stderr.lines()), stderr)
}

fn actions_in<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    lines
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|entry| entry["fields"]["action"].as_str().map(str::to_string))
        .collect()
}

fn count(actions: &[String], action: &str) -> usize {
    actions.iter().filter(|a| *a == action).count()
}

fn invocation(machine: &Machine) -> String {
    let id = machine.unit_property(CONTAINERD, "InvocationID");
    assert_eq!(id.len(), 32, "containerd has an InvocationID: {id:?}");
    id
}

/// How often containerd has started in this machine.
fn containerd_starts(machine: &Machine) -> usize {
    machine
        .journal(CONTAINERD)
        .matches("containerd successfully booted")
        .count()
}

/// The CRI config the containerd of `invocation_id` logged when its CRI plugin started.
fn cri_config_logged(machine: &Machine, invocation_id: &str) -> String {
    let journal = machine.journal_of_invocation(invocation_id);
    journal
        .lines()
        .find(|line| line.contains("Start cri plugin with config"))
        .unwrap_or_else(|| panic!("no CRI start line for {invocation_id}:\n{journal}"))
        .to_string()
}

fn assert_cri_plugin_ok(machine: &Machine) {
    let plugins = machine
        .run(&["ctr", "plugins", "ls"])
        .expect_success("ctr plugins ls");
    let cri = plugins
        .stdout
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some("cri"))
        .unwrap_or_else(|| panic!("no cri plugin:\n{}", plugins.stdout));
    assert_eq!(cri.split_whitespace().last(), Some("ok"), "{cri}");
}

/// `containerd config dump` in the machine, parsed.
fn config_dump(machine: &Machine) -> ContainerdConfig {
    let dump = machine
        .run(&["containerd", "config", "dump"])
        .expect_success("containerd config dump");
    ContainerdConfig::parse(&dump.stdout).unwrap()
}

fn runsc_type_in_dump(machine: &Machine) -> Option<String> {
    config_dump(machine)
        .get_str(&[
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
            "runsc",
            "runtime_type",
        ])
        .map(str::to_string)
}

#[test]
fn installs_runsc_restarts_containerd_once_and_a_second_run_changes_nothing() {
    let machine = boot();
    machine
        .write_file(CONFIG, &fixture("v2-debian.toml"), 0o644)
        .unwrap();
    prepare(&machine);
    let first = invocation(&machine);
    assert_eq!(containerd_starts(&machine), 1);
    assert!(!cri_config_logged(&machine, &first).contains("runsc"));

    // First run: installs, registers, restarts once.
    let (ok, actions, stderr) =
        run_installer(&machine, "panic-signal=15\nnet-raw=true\n", &["--once"]);
    assert!(ok, "first run failed:\n{stderr}");
    assert_eq!(
        actions,
        ["installed", "installed", "updated", "updated", "restarted"],
        "{stderr}"
    );
    machine
        .wait_for_unit_state(CONTAINERD, "active", UNIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
    let second = invocation(&machine);
    assert_ne!(second, first, "containerd was restarted");
    assert_eq!(containerd_starts(&machine), 2, "exactly one restart");
    let cri = cri_config_logged(&machine, &second);
    assert!(
        cri.contains("runsc:{Type:io.containerd.runsc.v1"),
        "running containerd lacks runsc: {cri}"
    );
    assert!(cri.contains("runc:{Type:io.containerd.runc.v2"), "{cri}");
    assert_cri_plugin_ok(&machine);
    assert_eq!(
        runsc_type_in_dump(&machine).as_deref(),
        Some("io.containerd.runsc.v1")
    );

    // What is on disk.
    let config = machine.read_file(CONFIG).unwrap();
    let folder = version_dir();
    assert_eq!(
        String::from_utf8(config.clone()).unwrap(),
        String::from_utf8(fixture("v2-debian.installed.toml"))
            .unwrap()
            .replace(&format!("{BIN_DIR}/gvisor/0123456789abcdef"), &folder)
    );
    let runsc_toml = machine.read_file(RUNSC_TOML).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&runsc_toml),
        format!(
            "binary_name = \"{folder}/runsc\"\n\n[runsc_config]\nnet-raw = \"true\"\npanic-signal = \"15\"\n"
        )
    );
    let runsc = machine.read_file(format!("{folder}/runsc")).unwrap();
    assert_eq!(runsc, std::fs::read("/usr/bin/runsc").unwrap());
    assert_eq!(
        machine
            .read_file(format!("{folder}/containerd-shim-runsc-v1"))
            .unwrap(),
        SHIM_STAND_IN
    );
    let modes = machine
        .run(&[
            "stat",
            "-c",
            "%a",
            &format!("{folder}/runsc"),
            &format!("{folder}/containerd-shim-runsc-v1"),
        ])
        .expect_success("stat");
    assert_eq!(modes.stdout, "755\n755\n");
    assert!(!machine.exists(MARKER));

    // Second run, as the DaemonSet pod: flags in another order and TOML form; no --once.
    let mut child = installer(&machine, &[])
        .env(
            "GVISOR_RUNSC_FLAGS",
            "net-raw = \"true\"\npanic-signal = \"15\"",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("installer exited before waiting:\n{}", seen.join("\n")))
            .unwrap();
        let waiting = line.contains("done; waiting for SIGTERM");
        seen.push(line);
        if waiting {
            break;
        }
    }
    let second_actions = actions_in(seen.iter().map(String::as_str));
    assert_eq!(
        second_actions,
        [
            "up-to-date",
            "up-to-date",
            "up-to-date",
            "up-to-date",
            "skipped"
        ],
        "{seen:?}"
    );
    let pid = String::from_utf8(machine.read_file(PID_FILE).unwrap()).unwrap();
    machine
        .run(&["kill", "-TERM", pid.trim()])
        .expect_success("SIGTERM to the installer");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < UNIT_TIMEOUT,
            "installer ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit after SIGTERM: {status}");
    assert_eq!(
        invocation(&machine),
        second,
        "second run restarted containerd"
    );
    assert_eq!(containerd_starts(&machine), 2);
    assert_eq!(
        machine.read_file(CONFIG).unwrap(),
        config,
        "config.toml rewritten"
    );
    assert_eq!(machine.read_file(RUNSC_TOML).unwrap(), runsc_toml);

    // Uninstall while a sandbox runs the installed runsc (read from the machine's real
    // /proc through the host root): runtime and runsc.toml go, containerd restarts, the
    // version stays while the sandbox runs.
    let sandbox = machine
        .sh(&format!(
            "{folder}/runsc --network=none --ignore-cgroups --root=/run/e2e-runsc-in-use do sleep 600 >/dev/null 2>&1 & echo $!"
        ))
        .expect_success("start a sandbox with the installed runsc");
    let sandbox = sandbox.stdout.trim().to_string();
    let (ok, actions, stderr) = run_installer(&machine, "", &["--uninstall", "--once"]);
    assert!(ok, "uninstall failed:\n{stderr}");
    assert_eq!(
        actions,
        ["removed", "removed", "restarted", "kept"],
        "{stderr}"
    );
    assert!(machine.exists(format!("{folder}/runsc")));
    machine
        .wait_for_unit_state(CONTAINERD, "active", UNIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}"));
    let third = invocation(&machine);
    assert_ne!(third, second);
    assert!(!cri_config_logged(&machine, &third).contains("runsc"));
    assert_cri_plugin_ok(&machine);
    assert_eq!(runsc_type_in_dump(&machine), None);
    assert!(!machine.exists(RUNSC_TOML));

    // The sandbox ends: a second uninstall removes the version and restarts nothing.
    machine
        .run(&["kill", "-KILL", &sandbox])
        .expect_success("end the sandbox");
    let started = Instant::now();
    while machine.run(&["kill", "-0", &sandbox]).status.success() {
        assert!(started.elapsed() < UNIT_TIMEOUT, "the sandbox did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, actions, stderr) = run_installer(&machine, "", &["--uninstall", "--once"]);
    assert!(ok, "{stderr}");
    assert_eq!(count(&actions, "restarted"), 0, "{stderr}");
    assert_eq!(count(&actions, "removed"), 1, "the version: {stderr}");
    assert!(!machine.exists(format!("{BIN_DIR}/gvisor")), "{stderr}");
    assert_eq!(invocation(&machine), third);
}

#[test]
fn creates_a_missing_config_and_retries_a_failed_restart() {
    let machine = boot();
    assert!(
        !machine.exists(CONFIG),
        "the machine starts without config.toml"
    );
    prepare(&machine);
    let first = invocation(&machine);

    // The restart fails (wrong unit): files are written, the marker stays, exit non-zero.
    let (ok, _, stderr) = run_installer(
        &machine,
        "",
        &["--once", "--containerd-unit=gvisor-e2e-missing.service"],
    );
    assert!(!ok, "expected a failed restart:\n{stderr}");
    assert!(
        stderr.contains("restarting gvisor-e2e-missing.service through systemd"),
        "{stderr}"
    );
    assert!(stderr.contains("not found"), "{stderr}");
    assert!(machine.exists(MARKER));
    let created = String::from_utf8(machine.read_file(CONFIG).unwrap()).unwrap();
    assert_eq!(
        created,
        String::from_utf8(fixture("empty.installed.toml"))
            .unwrap()
            .replace(
                &format!("{BIN_DIR}/gvisor/0123456789abcdef"),
                &version_dir()
            )
    );
    assert_eq!(invocation(&machine), first, "containerd untouched so far");

    // The next run has no file to change but owes the restart.
    let (ok, actions, stderr) = run_installer(&machine, "", &["--once"]);
    assert!(ok, "{stderr}");
    assert_eq!(
        actions,
        [
            "up-to-date",
            "up-to-date",
            "up-to-date",
            "up-to-date",
            "restarted"
        ],
        "{stderr}"
    );
    assert!(
        stderr.contains("an earlier run could not finish its restart"),
        "{stderr}"
    );
    assert!(!machine.exists(MARKER));
    assert_eq!(machine.read_file(CONFIG).unwrap(), created.as_bytes());
    let second = invocation(&machine);
    assert_ne!(second, first);
    // The created default keeps `runc`, so the real CRI plugin starts with both runtimes.
    let cri = cri_config_logged(&machine, &second);
    assert!(cri.contains("runsc:{Type:io.containerd.runsc.v1"), "{cri}");
    assert!(cri.contains("runc:{Type:io.containerd.runc.v2"), "{cri}");
    assert_cri_plugin_ok(&machine);
}

#[tokio::test]
async fn systemd_client_drives_units_over_dbus() {
    let machine = boot();
    machine
        .write_file(
            "/etc/systemd/system/gen-e2e-sleep.service",
            b"[Unit]\nDescription=e2e sleeper\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n",
            0o644,
        )
        .unwrap();
    machine
        .write_file(
            "/etc/systemd/system/gen-e2e-fail.service",
            b"[Service]\nType=oneshot\nExecStart=/bin/false\n",
            0o644,
        )
        .unwrap();
    let systemd = Systemd::connect(&machine.system_bus_address())
        .await
        .unwrap()
        .with_job_timeout(UNIT_TIMEOUT);
    systemd.daemon_reload().await.unwrap();

    let unit = "gen-e2e-sleep.service";
    let status = systemd.unit_status(unit).await.unwrap();
    assert_eq!(
        (status.load_state.as_str(), status.active_state.as_str()),
        ("loaded", "inactive")
    );
    assert_eq!(status.invocation_id, "");

    systemd.start_unit(unit).await.unwrap();
    let started = systemd.unit_status(unit).await.unwrap();
    assert_eq!(started.active_state, "active");
    assert_eq!(started.sub_state, "running");
    assert_eq!(
        started.invocation_id,
        machine.unit_property(unit, "InvocationID")
    );
    let main_pid = started.main_pid.unwrap();
    assert!(main_pid > 0);
    assert!(started.exec_main_start_timestamp.unwrap() > 0);

    systemd.restart_unit(unit).await.unwrap();
    let restarted = systemd.unit_status(unit).await.unwrap();
    assert_eq!(restarted.active_state, "active");
    assert_ne!(restarted.invocation_id, started.invocation_id);
    assert_ne!(restarted.main_pid, Some(main_pid));

    let changes = systemd.enable_unit_files(&[unit]).await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].kind, "symlink");
    let link = "/etc/systemd/system/multi-user.target.wants/gen-e2e-sleep.service";
    assert_eq!(
        machine.read_link(link).unwrap(),
        PathBuf::from("/etc/systemd/system/gen-e2e-sleep.service")
    );
    assert_eq!(systemd.unit_file_state(unit).await.unwrap(), "enabled");
    assert!(systemd.enable_unit_files(&[unit]).await.unwrap().is_empty());
    let changes = systemd.disable_unit_files(&[unit]).await.unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].kind, "unlink");
    assert_eq!(systemd.unit_file_state(unit).await.unwrap(), "disabled");
    assert!(!machine.exists(link));

    systemd.stop_unit(unit).await.unwrap();
    assert_eq!(
        systemd.unit_status(unit).await.unwrap().active_state,
        "inactive"
    );

    match systemd.start_unit("gen-e2e-fail.service").await {
        Err(systemd::Error::JobFailed { result, .. }) => assert_eq!(result, JobResult::Failed),
        other => panic!("expected a failed job, got {other:?}"),
    }
    match systemd.restart_unit("gen-e2e-missing.service").await {
        Err(error @ systemd::Error::Call { .. }) => {
            let chain = format!("{error}: {}", std::error::Error::source(&error).unwrap());
            assert!(chain.contains("not found"), "{chain}");
        }
        other => panic!("expected a failed call, got {other:?}"),
    }
    assert_eq!(
        systemd
            .unit_status("gen-e2e-missing.service")
            .await
            .unwrap()
            .load_state,
        "not-found"
    );
}
