//! e2e: the provision user data really provisions a machine. The OSC is rendered with the
//! real binary (`gardener-extension-node render osc -f osc.yaml --secrets <dir>`, the same
//! code the controller runs) and the script runs in a real systemd booted with
//! `systemd-nspawn` (see `support/nspawn.rs`), as cloud-init would run it: as root, once per
//! boot.
//!
//! The OSC carries what the script must get right: plain, b64 and secretRef files,
//! `transmitUnencoded` files with the `<<BOOTSTRAP_TOKEN>>`/`<<MACHINE_NAME>>` placeholders and
//! with shell syntax (`$HOME`, backticks, a line equal to the default heredoc delimiter),
//! binary bytes, a quote in a path, default and explicit modes; a unit whose drop-in sets its
//! environment and that is enabled, a unit whose name starts with `-` (systemctl must not read
//! it as options), and a unit with `enable: false`. Checked: every file byte
//! for byte and its mode, the units' enablement and state, the drop-in's effect, and that a
//! second run changes nothing (the run-once guard).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use support::nspawn::{Machine, MachineOptions};

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
const USER_DATA: &str = "/root/user-data";
const UNIT_TIMEOUT: Duration = Duration::from_secs(30);

const PLAIN: &str = "hello $HOME `uname`\n'single' \"double\" \\backslash\n";
const BINARY: &[u8] = b"\x00\x01binary\xff\xfe\n\x00";
const FROM_SECRET: &str = "secret value with $PATH and `id`\n";
const LITERAL: &str = "#!/bin/sh\necho \"$HOME\" `date` $(id -u)\nOSC_EOF\n";
const GREETING: &str = "hello-from-drop-in";

/// One expected file: path, exact content, mode.
struct Expected {
    path: &'static str,
    content: Vec<u8>,
    mode: u32,
}

fn expected_files() -> Vec<Expected> {
    vec![
        Expected {
            path: "/etc/osc-e2e/plain.txt",
            content: PLAIN.as_bytes().to_vec(),
            mode: 0o644,
        },
        Expected {
            path: "/etc/osc-e2e/binary.bin",
            content: BINARY.to_vec(),
            mode: 0o600,
        },
        Expected {
            path: "/etc/osc-e2e/it's from a secret",
            content: FROM_SECRET.as_bytes().to_vec(),
            mode: 0o600,
        },
        Expected {
            path: "/var/lib/osc-e2e/credentials/bootstrap-token",
            content: b"<<BOOTSTRAP_TOKEN>>".to_vec(),
            mode: 0o640,
        },
        Expected {
            path: "/var/lib/osc-e2e/machine-name",
            content: b"<<MACHINE_NAME>>".to_vec(),
            mode: 0o600,
        },
        Expected {
            path: "/opt/osc-e2e/literal.sh",
            content: LITERAL.as_bytes().to_vec(),
            mode: 0o755,
        },
    ]
}

fn osc_yaml() -> String {
    let osc = json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {"name": "e2e-init", "namespace": "shoot--e2e--local",
                     "labels": {"worker.gardener.cloud/pool": "worker-a"}},
        "spec": {
            "type": "debian",
            "purpose": "provision",
            "criConfig": {"name": "containerd"},
            "files": [
                {"path": "/etc/osc-e2e/plain.txt", "permissions": 0o644,
                 "content": {"inline": {"encoding": "", "data": PLAIN}}},
                {"path": "/etc/osc-e2e/binary.bin", "permissions": 0o600,
                 "content": {"inline": {"encoding": "b64", "data": STANDARD.encode(BINARY)}}},
                {"path": "/etc/osc-e2e/it's from a secret",
                 "content": {"secretRef": {"name": "e2e-secret", "dataKey": "value"}}},
                {"path": "/var/lib/osc-e2e/credentials/bootstrap-token", "permissions": 0o640,
                 "content": {"transmitUnencoded": true,
                             "inline": {"encoding": "", "data": "<<BOOTSTRAP_TOKEN>>"}}},
                {"path": "/var/lib/osc-e2e/machine-name",
                 "content": {"transmitUnencoded": true,
                             "inline": {"encoding": "", "data": "<<MACHINE_NAME>>"}}},
                {"path": "/opt/osc-e2e/literal.sh", "permissions": 0o755,
                 "content": {"transmitUnencoded": true,
                             "inline": {"encoding": "b64", "data": STANDARD.encode(LITERAL)}}}
            ],
            "units": [
                {
                    "name": "osc-e2e.service",
                    "command": "start",
                    "enable": true,
                    "content": "[Unit]\nDescription=OSC e2e service\n[Service]\nExecStart=/bin/sh -c 'echo \"$GREETING\" > /run/osc-e2e-greeting && exec sleep infinity'\n[Install]\nWantedBy=multi-user.target\n",
                    "dropIns": [{"name": "10-greeting.conf",
                                 "content": format!("[Service]\nEnvironment=GREETING={GREETING}\n")}]
                },
                {
                    "name": "-osc-e2e-dash.service",
                    "command": "start",
                    "enable": true,
                    "content": "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"
                },
                {
                    "name": "osc-e2e-disabled.service",
                    "enable": false,
                    "content": "[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n"
                }
            ]
        }
    });
    serde_norway::to_string(&osc).unwrap()
}

fn secret_yaml() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: e2e-secret\n  namespace: shoot--e2e--local\ndata:\n  value: {}\n",
        STANDARD.encode(FROM_SECRET)
    )
}

/// Renders the user data with the binary's `render osc`.
fn render_user_data(dir: &Path) -> String {
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("e2e-secret.yaml"), secret_yaml()).unwrap();
    let osc = dir.join("osc.yaml");
    std::fs::write(&osc, osc_yaml()).unwrap();
    let output = Command::new(BIN)
        .args(["render", "osc", "-f"])
        .arg(&osc)
        .arg("--secrets")
        .arg(&secrets)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "render osc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn mode_of(machine: &Machine, path: &str) -> u32 {
    std::fs::metadata(machine.host_path(path))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn wait_for_file(machine: &Machine, path: &str) -> Vec<u8> {
    let started = Instant::now();
    loop {
        if let Ok(content) = machine.read_file(path) {
            if !content.is_empty() {
                return content;
            }
        }
        assert!(
            started.elapsed() < UNIT_TIMEOUT,
            "{path} not written; journal:\n{}",
            machine.journal("osc-e2e.service")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn provision_user_data_runs_once_in_a_real_systemd() {
    let work = tempfile::tempdir().unwrap();
    let user_data = render_user_data(work.path());
    assert!(user_data.contains("\n<<BOOTSTRAP_TOKEN>>\n"), "{user_data}");

    let machine = Machine::boot(MachineOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    machine
        .write_file(USER_DATA, user_data.as_bytes(), 0o700)
        .unwrap();
    let first = machine
        .run(&[USER_DATA])
        .expect_success("first run of the user data");

    for file in expected_files() {
        let content = machine.read_file(file.path).unwrap();
        assert_eq!(
            content,
            file.content,
            "{}: {:?} != {:?}",
            file.path,
            String::from_utf8_lossy(&content),
            String::from_utf8_lossy(&file.content)
        );
        assert_eq!(
            mode_of(&machine, file.path),
            file.mode,
            "mode of {}",
            file.path
        );
    }
    // Folders the script created are 0755, whatever umask the caller had.
    assert_eq!(mode_of(&machine, "/var/lib/osc-e2e/credentials"), 0o755);
    assert_eq!(
        mode_of(&machine, "/etc/systemd/system/osc-e2e.service"),
        0o600
    );

    machine
        .wait_for_unit_state("osc-e2e.service", "active", UNIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\nscript output:\n{}{}", first.stdout, first.stderr));
    assert_eq!(
        machine
            .run(&["systemctl", "is-enabled", "osc-e2e.service"])
            .stdout
            .trim(),
        "enabled"
    );
    assert_eq!(
        wait_for_file(&machine, "/run/osc-e2e-greeting"),
        format!("{GREETING}\n").into_bytes(),
        "the drop-in's environment reached the service"
    );
    assert!(
        machine
            .unit_property("osc-e2e.service", "DropInPaths")
            .contains("/etc/systemd/system/osc-e2e.service.d/10-greeting.conf")
    );
    // A unit name starting with `-` reaches systemctl as a name, not as options.
    machine
        .wait_for_unit_state("-osc-e2e-dash.service", "active", UNIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\nscript output:\n{}{}", first.stdout, first.stderr));
    assert_eq!(
        machine
            .run(&["systemctl", "is-enabled", "--", "-osc-e2e-dash.service"])
            .stdout
            .trim(),
        "enabled"
    );
    assert_eq!(
        machine
            .run(&["systemctl", "is-enabled", "osc-e2e-disabled.service"])
            .stdout
            .trim(),
        "disabled"
    );
    assert_eq!(
        machine.unit_property("osc-e2e-disabled.service", "ActiveState"),
        "inactive"
    );
    assert!(machine.exists("/var/lib/osc/provision-osc-applied"));

    // A second run (some IaaS run user data on every boot) changes nothing.
    machine
        .write_file("/etc/osc-e2e/plain.txt", b"changed on the node\n", 0o644)
        .unwrap();
    let invocation = machine.unit_property("osc-e2e.service", "InvocationID");
    let second = machine.run(&[USER_DATA]).expect_success("second run");
    assert!(
        second.stdout.contains("Provision OSC already applied"),
        "{}",
        second.stdout
    );
    assert_eq!(
        machine.read_file("/etc/osc-e2e/plain.txt").unwrap(),
        b"changed on the node\n",
        "the guard kept the file untouched"
    );
    assert_eq!(
        machine.unit_property("osc-e2e.service", "InvocationID"),
        invocation,
        "the service was not restarted"
    );
    machine.stop();
}
