//! The gVisor providerConfig decoder (`controllers::containerruntime::config::validate`).
//!
//! Input: JSON or YAML text (the API server hands the operator JSON; users write YAML).
//! Properties, for every input that decodes to a value:
//! - `validate` never panics and is deterministic;
//! - an error message stays short (it becomes `lastError` and an event), whatever the size
//!   of the input;
//! - accepted flags are sorted, unique and from the allow-list (plus the `debug-log` path
//!   that `debug` implies), and their values hold no line breaks;
//! - what the operator passes to the installer (`flags_text`) parses with the installer's own
//!   parser (`gvisor_install::flags::RunscFlags`) to the same flags, and the `runsc.toml` the
//!   installer writes from them is valid TOML holding exactly these flags.

#![no_main]

use gardener_extension_node::controllers::containerruntime::config::{ACCEPTED_FLAGS, validate};
use gardener_extension_node::gvisor_install::flags::RunscFlags;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Longest error message we accept for any input.
const MAX_ERROR_LEN: usize = 512;

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        check(&value);
    }
    if let Ok(value) = serde_norway::from_slice::<Value>(data) {
        check(&value);
    }
});

fn check(value: &Value) {
    let first = validate(Some(value));
    assert_eq!(first, validate(Some(value)), "validate is deterministic");
    let settings = match first {
        Ok(settings) => settings,
        Err(error) => {
            let message = error.to_string();
            assert!(
                message.len() <= MAX_ERROR_LEN,
                "error message of {} bytes: {message}",
                message.len()
            );
            return;
        }
    };
    let flags = &settings.runsc_flags;
    assert!(
        flags.windows(2).all(|pair| pair[0].0 < pair[1].0),
        "flags sorted and unique: {flags:?}"
    );
    for (key, value) in flags {
        assert!(
            ACCEPTED_FLAGS.contains(&key.as_str()) || key == "debug-log",
            "flag {key} is not allowed"
        );
        assert!(
            !value.contains('\n') && !value.contains('\r'),
            "{key}={value:?}"
        );
    }
    let text = settings.flags_text();
    let parsed = RunscFlags::parse(&text)
        .unwrap_or_else(|e| panic!("the installer rejects the operator's flags {text:?}: {e}"));
    let round_trip: Vec<(String, String)> = parsed
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(&round_trip, flags, "installer reads other flags than sent");
    assert_eq!(parsed.to_canonical(), text);
    let runsc_toml = parsed.render_runsc_toml();
    let table: toml::Table = toml::from_str(&runsc_toml)
        .unwrap_or_else(|e| panic!("runsc.toml does not parse: {e}\n{runsc_toml}"));
    let section = table
        .get("runsc_config")
        .and_then(toml::Value::as_table)
        .map(|t| t.len())
        .unwrap_or_default();
    assert_eq!(section, flags.len(), "{runsc_toml}");
}
