//! Fixture tests of the containerd config edit the gVisor installer makes (pure; no
//! containerd needed): every config version, an installed file, entries under the wrong key,
//! comments and unrelated plugins, bad input.
//!
//! Inputs are `test/fixtures/containerd/<name>.toml`; the expected result of installing
//! runsc is `<name>.installed.toml` next to it (reviewed by hand; regenerate with
//! `UPDATE_FIXTURES=1 cargo test --test containerd_config` and review the diff).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;

use gardener_extension_node::containerd::{ConfigVersion, ContainerdConfig, Error};
use gardener_extension_node::gvisor_install::RunscFlags;
use gardener_extension_node::gvisor_install::plan::{self, ConfigPlan};

const RUNSC_CONFIG: &str = "/etc/containerd/runsc.toml";
const SHIM: &str = "/var/bin/containerruntimes/gvisor/0123456789abcdef/containerd-shim-runsc-v1";

/// The default profile's handler, as the installer registers it.
fn runsc_handler() -> Vec<plan::Handler> {
    vec![plan::Handler {
        name: plan::RUNTIME_NAME.to_string(),
        runsc_config: RUNSC_CONFIG.to_string(),
        shim: SHIM.to_string(),
    }]
}

/// Fixtures that install cleanly: (name, detected version, CRI plugin key of the result).
const GOOD: [(&str, ConfigVersion, &str); 11] = [
    ("empty", ConfigVersion::V2, "io.containerd.grpc.v1.cri"),
    ("v1", ConfigVersion::V1, "cri"),
    ("v1-explicit", ConfigVersion::V1, "cri"),
    ("v2-debian", ConfigVersion::V2, "io.containerd.grpc.v1.cri"),
    ("v2-node", ConfigVersion::V2, "io.containerd.grpc.v1.cri"),
    (
        "v2-installed",
        ConfigVersion::V2,
        "io.containerd.grpc.v1.cri",
    ),
    (
        "v2-wrong-key",
        ConfigVersion::V2,
        "io.containerd.grpc.v1.cri",
    ),
    (
        "v2-comments",
        ConfigVersion::V2,
        "io.containerd.grpc.v1.cri",
    ),
    ("v3", ConfigVersion::V3, "io.containerd.cri.v1.runtime"),
    ("v4", ConfigVersion::V4, "io.containerd.cri.v1.runtime"),
    (
        "v4-wrong-key",
        ConfigVersion::V4,
        "io.containerd.cri.v1.runtime",
    ),
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("test/fixtures/containerd")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixture_dir().join(format!("{name}.toml")))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn install(text: Option<&str>) -> ConfigPlan {
    plan::config_install(text, &runsc_handler()).unwrap()
}

/// The file after installing: the new text, or the input when nothing changed.
fn installed(name: &str) -> String {
    let input = fixture(name);
    install(Some(&input)).new_text.unwrap_or(input)
}

fn assert_runsc_under(text: &str, plugin: &str) {
    let config = ContainerdConfig::parse(text).unwrap();
    let runtimes = ["plugins", plugin, "containerd", "runtimes"];
    let get = |rest: &[&str]| config.get_str(&[runtimes.as_slice(), rest].concat());
    assert_eq!(
        get(&["runsc", "runtime_type"]),
        Some("io.containerd.runsc.v1")
    );
    assert_eq!(
        get(&["runsc", "options", "TypeUrl"]),
        Some("io.containerd.runsc.v1.options")
    );
    assert_eq!(get(&["runsc", "options", "ConfigPath"]), Some(RUNSC_CONFIG));
    assert_eq!(
        get(&["runc", "runtime_type"]),
        Some("io.containerd.runc.v2"),
        "the default runtime must stay defined"
    );
}

/// True when `needle`'s lines appear in `haystack` in the same order (others may be between).
fn lines_kept_in_order(needle: &str, haystack: &str) -> Result<(), String> {
    let mut remaining = haystack.lines();
    for line in needle.lines() {
        if !remaining.any(|candidate| candidate == line) {
            return Err(format!("line missing or out of order: {line:?}"));
        }
    }
    Ok(())
}

#[test]
fn each_fixture_installs_to_its_expected_file() {
    let update = std::env::var_os("UPDATE_FIXTURES").is_some();
    for (name, version, plugin) in GOOD {
        let plan = install(Some(&fixture(name)));
        assert_eq!(plan.version, version, "{name}");
        let result = installed(name);
        assert_runsc_under(&result, plugin);
        let expected_path = fixture_dir().join(format!("{name}.installed.toml"));
        if update {
            std::fs::write(&expected_path, &result).unwrap();
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        assert_eq!(
            result, expected,
            "{name}: result differs from {name}.installed.toml"
        );
    }
}

#[test]
fn running_twice_changes_nothing_the_second_time() {
    for (name, _, _) in GOOD {
        let first = installed(name);
        let second = install(Some(&first));
        assert_eq!(second.new_text, None, "{name}: second run rewrote the file");
        assert!(!second.edit.changed(), "{name}: {:?}", second.edit);
    }
}

#[test]
fn already_installed_file_is_left_byte_identical() {
    let plan = install(Some(&fixture("v2-installed")));
    assert_eq!(plan.new_text, None);
    assert!(!plan.edit.changed());
}

#[test]
fn missing_file_starts_from_the_default() {
    let missing = install(None);
    let empty = install(Some(&fixture("empty")));
    assert!(missing.from_default && empty.from_default);
    assert_eq!(missing.new_text, empty.new_text);
    let text = missing.new_text.unwrap();
    assert!(text.starts_with(gardener_extension_node::containerd::DEFAULT_CONFIG));
    assert_runsc_under(&text, "io.containerd.grpc.v1.cri");
}

#[test]
fn comments_unrelated_plugins_and_order_are_kept() {
    for name in [
        "v1",
        "v1-explicit",
        "v2-debian",
        "v2-node",
        "v2-comments",
        "v3",
        "v4",
    ] {
        let input = fixture(name);
        let output = installed(name);
        lines_kept_in_order(&input, &output).unwrap_or_else(|e| panic!("{name}: {e}"));
        let edit = install(Some(&input)).edit;
        assert!(
            edit.updated && edit.removed_misplaced.is_empty(),
            "{name}: {edit:?}"
        );
    }
    // The dotted runc keys of v2-comments were used, not duplicated as a [table].
    let output = installed("v2-comments");
    assert!(!output.contains("runtimes.runc]"), "{output}");
    assert!(output.contains("headers = { \"X-Meta\" = [\"node\"] } # inline table"));
}

#[test]
fn entries_under_the_wrong_key_are_repaired() {
    let edit = install(Some(&fixture("v2-wrong-key"))).edit;
    assert_eq!(
        edit.removed_misplaced,
        ["plugins.cri.containerd.runtimes.runsc"]
    );
    let output = installed("v2-wrong-key");
    assert!(!output.contains("[plugins.cri."), "{output}");

    let edit = install(Some(&fixture("v4-wrong-key"))).edit;
    assert_eq!(
        edit.removed_misplaced,
        [
            "plugins.cri.containerd.runtimes.runsc",
            "plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc"
        ]
    );
    let output = installed("v4-wrong-key");
    assert!(!output.contains("[plugins.cri."), "{output}");
    assert!(!output.contains("io.containerd.grpc.v1.cri"), "{output}");
    // Everything that was not a misplaced runsc entry is still there.
    lines_kept_in_order(
        "version = 4\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'io.containerd.runc.v2'",
        &output,
    )
    .unwrap();
}

#[test]
fn bad_files_are_rejected_with_what_to_fix() {
    for (name, check) in [
        (
            "bad-syntax",
            (|e: &Error| matches!(e, Error::Parse { .. })) as fn(&Error) -> bool,
        ),
        ("bad-duplicate-table", |e| matches!(e, Error::Parse { .. })),
        ("bad-version", |e| matches!(e, Error::UnsupportedVersion(7))),
        ("bad-not-a-table", |e| matches!(e, Error::NotATable { .. })),
    ] {
        let error = plan::config_install(Some(&fixture(name)), &runsc_handler()).unwrap_err();
        assert!(check(&error), "{name}: {error:?}");
        assert!(error.is_config_problem());
        let message = error.to_string();
        assert!(
            ["fix", "set a supported version"]
                .iter()
                .any(|hint| message.contains(hint)),
            "{name}: message does not say what to fix: {message}"
        );
        assert!(
            plan::config_uninstall(Some(&fixture(name))).is_err(),
            "{name}"
        );
    }
}

#[test]
fn uninstall_removes_every_runsc_entry_and_keeps_the_rest() {
    for (name, _, _) in GOOD {
        let installed_text = installed(name);
        let removed = plan::config_uninstall(Some(&installed_text)).unwrap();
        let text = removed.new_text.clone().unwrap_or(installed_text.clone());
        assert!(!text.contains("runsc"), "{name}: {text}");
        // Everything but the runsc entries survives install + uninstall. Comments and blank
        // lines above a runsc table belong to it (its prefix) and go with it.
        let source = fixture(name);
        let has_runsc = source.contains("runsc");
        let kept: String = source
            .lines()
            .filter(|line| {
                let runsc_line = ["runsc", "TypeUrl", "ConfigPath"]
                    .iter()
                    .any(|word| line.contains(word));
                let decor = line.trim().is_empty() || line.trim_start().starts_with('#');
                let removed_with_runsc = runsc_line || (has_runsc && decor);
                !removed_with_runsc
            })
            .map(|line| format!("{line}\n"))
            .collect();
        lines_kept_in_order(&kept, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = plan::config_uninstall(Some(&text)).unwrap();
        assert_eq!(
            again.new_text, None,
            "{name}: second uninstall changed the file"
        );
    }
}

#[test]
fn runsc_toml_does_not_depend_on_flag_order() {
    let lines = [
        "net-raw=true",
        "debug=true",
        "debug-log=/var/log/runsc/%ID%/gvisor-%COMMAND%.log",
        "panic-signal=15",
    ];
    let expected = "[runsc_config]\ndebug = \"true\"\ndebug-log = \"/var/log/runsc/%ID%/gvisor-%COMMAND%.log\"\nnet-raw = \"true\"\npanic-signal = \"15\"\n";
    // Every rotation and its reverse.
    for start in 0..lines.len() {
        let mut order: Vec<&str> = lines[start..]
            .iter()
            .chain(&lines[..start])
            .copied()
            .collect();
        for _ in 0..2 {
            let flags = RunscFlags::parse(&order.join("\n")).unwrap();
            // Same bytes whatever the order, so an up-to-date runsc.toml is not rewritten
            // (the installer compares bytes; see
            // `gvisor_install::up_to_date_host_needs_no_systemd_and_waits_for_sigterm`).
            assert_eq!(flags.render_runsc_toml(), expected, "{order:?}");
            order.reverse();
        }
    }
}
