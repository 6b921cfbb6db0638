//! The `osc.yaml` decoders: the agent's (`agent::pipeline::osc::decode` + `validate`) and the operator's
//! (serde of `api::OperatingSystemConfig`), and the hand-over between the two.
//!
//! Input: YAML text. Properties:
//! - neither decoder panics, whatever the bytes;
//! - an OSC the agent accepts survives its own encoding (`last-applied-osc.yaml`) unchanged,
//!   and every file it would write has an absolute, normalised path;
//! - hand-over: for an OSC the operator decodes, if the operator renders a node-agent Secret
//!   from it, the agent decodes and accepts that `osc.yaml`. The operator must never ship a
//!   configuration that every node then refuses; it reports a `lastError` instead.

#![no_main]

use gardener_extension_node::agent::pipeline::osc;
use gardener_extension_node::api::OperatingSystemConfig;
use gardener_extension_node::controllers::operatingsystemconfig::content::{
    ReferencedSecrets, referenced_secret_names,
};
use gardener_extension_node::controllers::operatingsystemconfig::reconcile::render_node_agent_secret;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 * 1024 {
        return;
    }
    agent_side(data);
    operator_side(data);
});

fn agent_side(data: &[u8]) {
    let Ok(decoded) = osc::decode(data) else {
        return;
    };
    if osc::validate(&decoded).is_err() {
        return;
    }
    let text = osc::encode(&decoded).expect("an accepted OSC encodes");
    let again = osc::decode(text.as_bytes()).expect("the agent reads what it wrote");
    let mut expected = decoded.clone();
    expected.api_version = again.api_version.clone();
    expected.kind = again.kind.clone();
    assert_eq!(again, expected, "last-applied-osc.yaml round trip");
    let effective = osc::effective(&decoded, "node-0");
    for file in &effective.files {
        assert!(
            osc::check_path(&file.path).is_ok(),
            "accepted path {:?}",
            file.path
        );
    }
}

fn operator_side(data: &[u8]) {
    let Ok(mut object) = serde_norway::from_slice::<OperatingSystemConfig>(data) else {
        return;
    };
    // gardenlet always names the OSC and labels its pool.
    object.metadata.name = Some("gardener-node-agent-pool-0123456789abcdef-original".into());
    object.metadata.labels =
        Some([("worker.gardener.cloud/pool".to_string(), "pool".to_string())].into());
    let mut secrets = ReferencedSecrets::default();
    for name in referenced_secret_names(&object.spec.files) {
        let keys = object
            .spec
            .files
            .iter()
            .filter_map(|f| f.content.secret_ref.as_ref())
            .filter(|r| r.name == name)
            .map(|r| (r.data_key.clone(), b"secret data\n".to_vec()))
            .collect();
        secrets.insert(name, keys);
    }
    // The controller's own pure entry: validation, rendering, size check.
    let Ok((secret, _)) = render_node_agent_secret(&object, &secrets) else {
        return;
    };
    let shipped = osc::decode(secret.osc_yaml.as_bytes()).unwrap_or_else(|e| {
        panic!(
            "the agent cannot decode the operator's osc.yaml: {e}\n{}",
            secret.osc_yaml
        )
    });
    if let Err(e) = osc::validate(&shipped) {
        panic!(
            "the agent refuses the operator's osc.yaml: {e}\n{}",
            secret.osc_yaml
        );
    }
}
