//! The containerd TOML editor (`containerd::ContainerdConfig`), as the gVisor installer and
//! the agent use it. It must never turn a file containerd could parse into one it cannot.
//!
//! Input: text of a `config.toml`. For every input the editor parses (valid TOML with a
//! supported `version`), registering `runsc` and removing it again must:
//! - give a document that parses again (with `toml_edit`, with the `toml` crate, and with
//!   the editor itself, at the same version);
//! - hold the `runsc` entry with its runtime type and options under the key of the file's
//!   version (after set), and no `runsc` under any plugin key (after remove);
//! - keep every other setting: the file's values, minus `runsc` entries (which set moves to
//!   the right key) and the `runc` default set may add, are the same before and after;
//! - be idempotent: a second set changes nothing and renders byte-identical text;
//! - leave the document untouched when an edit fails (e.g. a key on the way is not a table).

#![no_main]

use gardener_extension_node::containerd::{ContainerdConfig, RuntimeEntry};
use libfuzzer_sys::fuzz_target;

const RUNTIME: &str = "runsc";

fn entry() -> RuntimeEntry {
    RuntimeEntry {
        runtime_type: "io.containerd.runsc.v1".into(),
        options: vec![("TypeUrl".into(), "io.containerd.runsc.v1.options".into())],
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(original) = ContainerdConfig::parse(text) else {
        return;
    };
    let before = original.render();

    let mut config = original.clone();
    let edit = match config.set_runtime(RUNTIME, &entry()) {
        Ok(edit) => edit,
        Err(_) => {
            assert_eq!(config.render(), before, "a failed set changed the document");
            return;
        }
    };
    let after = config.render();
    let reparsed = reparse(&after, &original);
    let path = reparsed.runtime_path(RUNTIME);
    let runtime_type = reparsed.get_str(&[path.as_slice(), &["runtime_type"]].concat());
    assert_eq!(runtime_type, Some("io.containerd.runsc.v1"), "{after}");
    let option = reparsed.get_str(&[path.as_slice(), &["options", "TypeUrl"]].concat());
    assert_eq!(option, Some("io.containerd.runsc.v1.options"), "{after}");
    // `runc` is added (when it is) under the CRI key of the file's version only.
    let runc_plugin = edit
        .added_default_runtime
        .as_ref()
        .map(|_| original.version().cri_runtime_plugin());
    assert_eq!(
        settings_without_runtimes(text, None),
        settings_without_runtimes(&after, runc_plugin),
        "set changed other settings:\n--- before\n{text}\n--- after\n{after}"
    );

    let mut twice = config.clone();
    let second = twice
        .set_runtime(RUNTIME, &entry())
        .expect("a second set works");
    assert!(
        !second.changed(),
        "second set reported a change: {second:?}"
    );
    assert_eq!(twice.render(), after, "second set changed the text");

    let mut removed = config.clone();
    match removed.remove_runtime(RUNTIME) {
        Ok(_) => {
            let text_removed = removed.render();
            let reparsed = reparse(&text_removed, &original);
            for plugin in CRI_PLUGINS {
                let gone = reparsed
                    .get(&["plugins", plugin, "containerd", "runtimes", RUNTIME])
                    .is_none();
                assert!(gone, "runsc left under {plugin}:\n{text_removed}");
            }
        }
        Err(_) => assert_eq!(
            removed.render(),
            after,
            "a failed remove changed the document"
        ),
    }
});

/// Parses `text` with `toml_edit` and the editor (the editor must see the same version as in
/// `original`), and with the `toml` crate when that crate read the input too (it refuses
/// some valid files, e.g. dotted keys into a table an earlier header created).
fn reparse(text: &str, original: &ContainerdConfig) -> ContainerdConfig {
    text.parse::<toml_edit::DocumentMut>()
        .unwrap_or_else(|e| panic!("output is not TOML (toml_edit): {e}\n{text}"));
    if toml::from_str::<toml::Table>(&original.render()).is_ok() {
        toml::from_str::<toml::Table>(text)
            .unwrap_or_else(|e| panic!("output is not TOML (toml): {e}\n{text}"));
    }
    let config = ContainerdConfig::parse(text)
        .unwrap_or_else(|e| panic!("the editor cannot read its output: {e}\n{text}"));
    assert_eq!(config.version(), original.version(), "{text}");
    config
}

/// The CRI plugin keys of all config versions (where `runsc` may sit and is moved from).
const CRI_PLUGINS: [&str; 3] = [
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

/// The file's settings as a `toml` table, without `runsc` under any CRI plugin key (and
/// without `runc` under `runc_plugin`), and without tables that end up empty. `None` when the
/// `toml` crate does not read the input (then there is nothing to compare). Compared as
/// rendered text, where `nan` equals `nan`.
fn settings_without_runtimes(text: &str, runc_plugin: Option<&str>) -> Option<String> {
    let mut table: toml::Table = toml::from_str(text).ok()?;
    if let Some(plugins) = table.get_mut("plugins").and_then(toml::Value::as_table_mut) {
        for (key, plugin) in plugins.iter_mut() {
            let runtimes = plugin
                .as_table_mut()
                .and_then(|p| p.get_mut("containerd"))
                .and_then(toml::Value::as_table_mut)
                .and_then(|c| c.get_mut("runtimes"))
                .and_then(toml::Value::as_table_mut);
            if let Some(runtimes) = runtimes {
                if CRI_PLUGINS.contains(&key.as_str()) {
                    runtimes.remove(RUNTIME);
                }
                if runc_plugin == Some(key.as_str()) {
                    runtimes.remove("runc");
                }
            }
        }
    }
    prune(&mut table);
    toml::to_string(&table).ok()
}

fn prune(table: &mut toml::Table) {
    for (_, value) in table.iter_mut() {
        if let Some(inner) = value.as_table_mut() {
            prune(inner);
        }
    }
    table.retain(|_, v| v.as_table().is_none_or(|t| !t.is_empty()));
}
