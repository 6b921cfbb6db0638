//! The bound on what `osc.yaml` decodes to (`agent::pipeline::osc::decode`, `agent::pipeline::osc::decoded_size`),
//! YAML aliases included.
//!
//! Input: YAML text. Properties:
//! - the size walk agrees with an independent measure: the same document built in full as a
//!   `serde_norway::Value` (aliases replayed) is within a small limit exactly when the walk
//!   says so (documents with tags, whose shape differs in a `Value`, are skipped);
//! - the agent's decoder refuses a document as too large exactly when the walk finds it over
//!   `MAX_DECODED_BYTES`, and what it accepts holds no more than that many bytes of text.

#![no_main]

use gardener_extension_node::agent::pipeline::osc::{self, InvalidOsc, MAX_DECODED_BYTES, decoded_size};
use libfuzzer_sys::fuzz_target;
use serde_norway::Value;

/// The limit the walk and the built value are compared at.
const SMALL: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    walk_agrees_with_the_built_value(data);
    decode_stays_within_the_bound(data);
});

fn walk_agrees_with_the_built_value(data: &[u8]) {
    // Build the value only when it is known to be small enough to build cheaply.
    if decoded_size::within(data, 1 << 20).is_err() {
        return;
    }
    let Ok(value) = serde_norway::from_slice::<Value>(data) else {
        return;
    };
    let Some(size) = units(&value) else {
        return;
    };
    let walked = decoded_size::within(data, SMALL).is_ok();
    assert_eq!(
        walked,
        size <= SMALL,
        "the walk says {walked} for a value of {size} units"
    );
}

/// What the walk counts for `value`: scalar bytes plus one per node; `None` with tags.
fn units(value: &Value) -> Option<u64> {
    Some(match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 1,
        Value::String(text) => text.len() as u64 + 1,
        Value::Sequence(items) => {
            let mut total = 1;
            for item in items {
                total += units(item)?;
            }
            total
        }
        Value::Mapping(map) => {
            let mut total = 1;
            for (key, item) in map {
                total += units(key)? + units(item)?;
            }
            total
        }
        Value::Tagged(_) => return None,
    })
}

fn decode_stays_within_the_bound(data: &[u8]) {
    let over = matches!(
        decoded_size::within(data, MAX_DECODED_BYTES),
        Err(decoded_size::SizeError::Exceeded(_))
    );
    match osc::decode(data) {
        Err(InvalidOsc::TooLarge { limit }) => {
            assert_eq!(limit, MAX_DECODED_BYTES);
            assert!(over, "refused as too large, but the walk finds it within the bound");
        }
        Ok(decoded) => {
            assert!(!over, "accepted, but the walk finds it over the bound");
            let json = serde_json::to_value(&decoded).expect("a decoded OSC serialises");
            let text = text_bytes(&json);
            assert!(
                text <= MAX_DECODED_BYTES,
                "accepted an OSC holding {text} bytes of text"
            );
        }
        Err(_) => assert!(!over, "a document over the bound must be refused as too large"),
    }
}

/// The bytes of every string (keys included) in `value`.
fn text_bytes(value: &serde_json::Value) -> u64 {
    match value {
        serde_json::Value::String(text) => text.len() as u64,
        serde_json::Value::Array(items) => items.iter().map(text_bytes).sum(),
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(key, item)| key.len() as u64 + text_bytes(item))
            .sum(),
        _ => 0,
    }
}
