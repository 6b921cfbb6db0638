//! Integration: the OperatingSystemConfig controller (the real operator binary, started with
//! `--controllers=operatingsystemconfig`) against a real kube-apiserver. gardenlet's part
//! (annotations, deletion) is played by the test. The node-agent Secret in a shoot, through
//! the real gardener-resource-manager and with gardenlet's ManagedResource, is checked in
//! `test/shoot_delivery.rs`; these tests run without GRM and, where a ManagedResource must
//! linger (as while GRM deletes shoot objects), hold GRM's finalizer by hand (stand-in).
//!
//! One operator (class `shoot`, default `--node-agent-secrets=auto`; without gardenlet's
//! ManagedResource ours are shipped) serves all tests; the test of
//! `--node-agent-secrets=never` runs a second operator restricted to class `seed`, so the two
//! never act on the same objects.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gardener_extension_node::api::{
    Cluster, LastOperationType, ManagedResource, OperatingSystemConfig,
};
use gardener_extension_node::controllers::operatingsystemconfig::{
    content::{ReferencedSecrets, encode_b64},
    extensions, os_update, reconcile, userdata,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::fixtures::{self, OSC_KEY};
use support::gardener::{
    add_grm_finalizer, annotate, check_ready, confirm_and_delete, remove_grm_finalizer, wait_gone,
    wait_migrated, wait_ready,
};
use support::operator::OperatorProcess;
use support::{TestEnv, wait_for};

const FILE_SECRET_VALUE: &str = "from a secret\n";
const WAIT: Duration = Duration::from_secs(60);

static OPERATOR: OnceLock<Mutex<OperatorProcess>> = OnceLock::new();
static SEED_CLASS_OPERATOR: OnceLock<Mutex<OperatorProcess>> = OnceLock::new();

/// A namespace with its Cluster, and the shared operator running.
async fn setup() -> TestEnv {
    setup_with_cluster(|_| {}).await
}

async fn setup_with_cluster(adjust: impl FnOnce(&mut Value)) -> TestEnv {
    let env = support::env().await;
    OPERATOR.get_or_init(|| {
        Mutex::new(OperatorProcess::start(
            &env.kubeconfig,
            &["--controllers=operatingsystemconfig"],
        ))
    });
    create_cluster(&env.client, &env.namespace, adjust).await;
    env
}

async fn create_cluster(client: &Client, namespace: &str, adjust: impl FnOnce(&mut Value)) {
    let api: Api<Cluster> = Api::all(client.clone());
    let mut cluster = fixtures::cluster_json(namespace);
    adjust(&mut cluster);
    let cluster = serde_json::from_value(cluster).unwrap();
    api.create(&PostParams::default(), &cluster).await.unwrap();
}

fn oscs(env: &TestEnv) -> Api<OperatingSystemConfig> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn mrs(env: &TestEnv) -> Api<ManagedResource> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn secrets(env: &TestEnv) -> Api<Secret> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn original() -> String {
    format!("{OSC_KEY}-original")
}

fn node_agent_mr() -> String {
    format!("extension-osc-{OSC_KEY}")
}

/// Writes `example-secret` (the fixture's `secretRef` source) with `value`.
async fn put_file_secret(env: &TestEnv, value: &str) {
    let secret: Secret =
        serde_json::from_value(fixtures::osc_file_secret_json(&env.namespace, value)).unwrap();
    secrets(env)
        .patch(
            "example-secret",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// Creates the fixture OSC with `adjust` applied and the reconcile annotation, as gardenlet
/// does.
async fn create_osc_with(
    env: &TestEnv,
    name: &str,
    purpose: &str,
    adjust: impl FnOnce(&mut Value),
) -> String {
    let mut osc = fixtures::operating_system_config_json(&env.namespace, name, purpose);
    osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    adjust(&mut osc);
    let osc: OperatingSystemConfig = serde_json::from_value(osc).unwrap();
    oscs(env)
        .create(&PostParams::default(), &osc)
        .await
        .unwrap();
    name.to_string()
}

async fn create_osc(env: &TestEnv, name: &str, purpose: &str) -> String {
    create_osc_with(env, name, purpose, |_| {}).await
}

/// The node-agent Secret inside the MR's manifest secret, and its `osc.yaml`.
async fn shipped_node_agent_secret(env: &TestEnv) -> (Secret, String) {
    let mr = mrs(env).get(&node_agent_mr()).await.unwrap();
    assert_eq!(mr.spec.secret_refs.len(), 1);
    let holder = secrets(env)
        .get(&mr.spec.secret_refs[0].name)
        .await
        .unwrap();
    let data = holder.data.unwrap();
    let manifest = &data[&format!("secret__kube-system__{OSC_KEY}.yaml")].0;
    let secret: Secret = serde_norway::from_slice(manifest).unwrap();
    let osc_yaml = String::from_utf8(secret.data.clone().unwrap()["osc.yaml"].0.clone()).unwrap();
    (secret, osc_yaml)
}

fn checksum_of(secret: &Secret) -> String {
    secret.annotations()["checksum/data-script"].clone()
}

/// Waits for a `lastError` on the OSC and returns the object.
async fn wait_error(env: &TestEnv, name: &str) -> OperatingSystemConfig {
    wait_for(&format!("lastError on {name}"), WAIT, || async {
        let osc = oscs(env).get(name).await.map_err(|e| e.to_string())?;
        match osc
            .status
            .as_ref()
            .and_then(|s| s.default.last_error.as_ref())
        {
            Some(_) => Ok(osc),
            None => Err(format!("{:?}", osc.status)),
        }
    })
    .await
}

fn codes(osc: &OperatingSystemConfig) -> Vec<String> {
    osc.status
        .as_ref()
        .and_then(|s| s.default.last_error.as_ref())
        .map(|e| e.codes.iter().map(|c| c.as_str().to_string()).collect())
        .unwrap_or_default()
}

async fn no_managed_resources(env: &TestEnv) -> bool {
    mrs(env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
}

#[tokio::test]
async fn provision_writes_the_user_data_secret_and_cloud_config() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, "pool-a-init", "provision").await;
    let osc = wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    assert!(
        osc.finalizers()
            .contains(&"extensions.gardener.cloud/operatingsystemconfigs".to_string())
    );

    let status = osc.status.clone().unwrap();
    let reference = status.cloud_config.clone().unwrap().secret_ref;
    assert_eq!(reference.name, "osc-result-pool-a-init");
    assert_eq!(reference.namespace.as_deref(), Some(env.namespace.as_str()));
    assert!(status.extension_units.is_empty() && status.extension_files.is_empty());

    let secret = secrets(&env).get("osc-result-pool-a-init").await.unwrap();
    let owner = &secret.owner_references()[0];
    assert_eq!(owner.kind, "OperatingSystemConfig");
    assert_eq!(Some(owner.uid.as_str()), osc.metadata.uid.as_deref());
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    let user_data = String::from_utf8(secret.data.unwrap()["cloud_config"].0.clone()).unwrap();
    assert!(user_data.starts_with("#!/bin/bash\n"), "{user_data}");
    assert!(user_data.contains(userdata::PROVISION_MARKER));
    assert!(
        user_data.contains("\n<<BOOTSTRAP_TOKEN>>\n"),
        "placeholder stays literal"
    );
    assert!(user_data.contains(&encode_b64(FILE_SECRET_VALUE.as_bytes())));

    // Exactly what the pure renderer makes of this OSC and Secret.
    let mut referenced = ReferencedSecrets::default();
    referenced.insert(
        "example-secret",
        [("value".to_string(), FILE_SECRET_VALUE.as_bytes().to_vec())].into(),
    );
    assert_eq!(
        user_data,
        reconcile::render_user_data(&osc, &referenced).unwrap()
    );
    assert!(no_managed_resources(&env).await, "provision ships nothing");
}

#[tokio::test]
async fn provision_reuses_the_secret_the_status_names() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, "pool-b-init", "provision").await;
    wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    oscs(&env)
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"cloudConfig": {"secretRef": {
                "name": "custom-user-data", "namespace": env.namespace
            }}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    annotate(&oscs(&env), &name, "reconcile").await;
    let osc = wait_ready(&oscs(&env), &name, LastOperationType::Reconcile).await;
    assert_eq!(
        osc.status.unwrap().cloud_config.unwrap().secret_ref.name,
        "custom-user-data"
    );
    let secret = secrets(&env).get("custom-user-data").await.unwrap();
    assert!(
        secret.data.unwrap()["cloud_config"]
            .0
            .starts_with(b"#!/bin/bash\n")
    );
}

#[tokio::test]
async fn reconcile_ships_the_node_agent_secret_through_a_managed_resource() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, &original(), "reconcile").await;
    let osc = wait_ready(&oscs(&env), &name, LastOperationType::Create).await;

    let status = osc.status.clone().unwrap();
    assert!(
        status.cloud_config.is_none(),
        "no user data for reconcile OSCs"
    );
    assert_eq!(
        status.extension_units,
        extensions::for_os_type("debian").units
    );
    assert!(status.extension_files.is_empty());
    assert!(
        secrets(&env)
            .get_opt(&format!("osc-result-{name}"))
            .await
            .unwrap()
            .is_none()
    );

    let mr = mrs(&env).get(&node_agent_mr()).await.unwrap();
    assert_eq!(mr.spec.class, None, "for the shoot's resource manager");
    assert_eq!(mr.spec.keep_objects, Some(false));
    assert_eq!(mr.labels()["origin"], "gardener-extension-node");

    let (secret, osc_yaml) = shipped_node_agent_secret(&env).await;
    assert_eq!(secret.metadata.name.as_deref(), Some(OSC_KEY));
    assert_eq!(secret.metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(
        secret.labels()["gardener.cloud/role"],
        "operating-system-config"
    );
    assert_eq!(secret.labels()["worker.gardener.cloud/pool"], "worker-a");
    // The Cluster's pool worker-a has no maxUnavailable: one rollout slot.
    assert_eq!(
        secret.annotations()["node.extensions.gardener.cloud/rollout-budget"],
        "1"
    );
    assert_eq!(
        checksum_of(&secret),
        hex::encode(Sha256::digest(osc_yaml.as_bytes()))
    );

    let shipped: Value = serde_norway::from_str(&osc_yaml).unwrap();
    let files = shipped["spec"]["files"].as_array().unwrap();
    let from_secret = files
        .iter()
        .find(|f| f["path"] == "/etc/example/from-secret")
        .unwrap();
    assert_eq!(
        from_secret["content"],
        json!({"inline": {"encoding": "b64", "data": encode_b64(FILE_SECRET_VALUE.as_bytes())}})
    );
    assert!(!osc_yaml.contains("secretRef"), "{osc_yaml}");
    assert_eq!(
        shipped["status"]["extensionUnits"],
        serde_json::to_value(&status.extension_units).unwrap()
    );
    assert_eq!(shipped["spec"]["criConfig"]["cgroupDriver"], "systemd");
}

#[tokio::test]
async fn the_checksum_moves_with_content_and_only_with_content() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, &original(), "reconcile").await;
    wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    let (first, _) = shipped_node_agent_secret(&env).await;
    let mr_before = mrs(&env).get(&node_agent_mr()).await.unwrap();

    // An unchanged re-reconcile renders the same bytes: nothing in the seed changes.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    annotate(&oscs(&env), &name, "reconcile").await;
    wait_ready(&oscs(&env), &name, LastOperationType::Reconcile).await;
    let (again, _) = shipped_node_agent_secret(&env).await;
    assert_eq!(checksum_of(&again), checksum_of(&first));
    let mr_after = mrs(&env).get(&node_agent_mr()).await.unwrap();
    assert_eq!(mr_after.resource_version(), mr_before.resource_version());

    // A changed file in the spec changes it.
    oscs(&env)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{
                    "op": "replace",
                    "path": "/spec/files/0/content/inline/data",
                    "value": "changed\n"
                }]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    annotate(&oscs(&env), &name, "reconcile").await;
    let changed = wait_for("a new checksum", WAIT, || async {
        let osc = oscs(&env).get(&name).await.map_err(|e| e.to_string())?;
        check_ready(&osc, LastOperationType::Reconcile)?;
        let (secret, osc_yaml) = shipped_node_agent_secret(&env).await;
        if checksum_of(&secret) != checksum_of(&first) {
            Ok((secret, osc_yaml))
        } else {
            Err("checksum unchanged".to_string())
        }
    })
    .await;
    assert!(changed.1.contains("changed"), "{}", changed.1);

    // So does changed data in a referenced Secret.
    put_file_secret(&env, "rotated\n").await;
    annotate(&oscs(&env), &name, "reconcile").await;
    wait_for("a checksum for the rotated secret", WAIT, || async {
        let osc = oscs(&env).get(&name).await.map_err(|e| e.to_string())?;
        check_ready(&osc, LastOperationType::Reconcile)?;
        let (secret, osc_yaml) = shipped_node_agent_secret(&env).await;
        if checksum_of(&secret) != checksum_of(&changed.0)
            && osc_yaml.contains(&encode_b64(b"rotated\n"))
        {
            Ok(())
        } else {
            Err("checksum unchanged".to_string())
        }
    })
    .await;
}

#[tokio::test]
async fn a_missing_referenced_secret_is_named_in_last_error_and_recovers() {
    let env = setup().await;
    let original = create_osc(&env, &original(), "reconcile").await;
    let init = create_osc(&env, "pool-a-init", "provision").await;
    for name in [&original, &init] {
        let osc = wait_error(&env, name).await;
        let error = osc.status.clone().unwrap().default.last_error.unwrap();
        assert!(
            error.description.contains("example-secret"),
            "{}",
            error.description
        );
        assert!(
            error.description.contains("/etc/example/from-secret"),
            "{}",
            error.description
        );
        // It may still appear: retryable, not a hard configuration problem.
        assert_eq!(codes(&osc), ["ERR_RETRYABLE_CONFIGURATION_PROBLEM"]);
    }
    assert!(no_managed_resources(&env).await);
    assert!(
        secrets(&env)
            .get_opt("osc-result-pool-a-init")
            .await
            .unwrap()
            .is_none()
    );

    put_file_secret(&env, FILE_SECRET_VALUE).await;
    for name in [&original, &init] {
        annotate(&oscs(&env), name, "reconcile").await;
        // The retry with backoff may win against the annotation (then the annotated run is a
        // Reconcile); either way the object becomes ready.
        wait_for(&format!("{name} ready"), WAIT, || async {
            let osc = oscs(&env).get(name).await.map_err(|e| e.to_string())?;
            check_ready(&osc, LastOperationType::Create)
                .or_else(|_| check_ready(&osc, LastOperationType::Reconcile))
        })
        .await;
    }
    assert!(mrs(&env).get_opt(&node_agent_mr()).await.unwrap().is_some());
}

/// GEP-31: a reconcile OSC of an in-place pool gets the OS update script as an extension file
/// and `status.inPlaceUpdates.osUpdate` naming it with the wanted version, in the status and
/// in the shipped `osc.yaml` (where the node agent reads it); a version the script would
/// refuse is a configuration problem and ships nothing.
#[tokio::test]
async fn an_in_place_osc_gets_the_os_update_command_and_script() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc_with(&env, &original(), "reconcile", |osc| {
        osc["spec"]["inPlaceUpdates"] =
            json!({"operatingSystemVersion": "12.7", "kubelet": "1.33.1"});
    })
    .await;
    let osc = wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    let status = osc.status.clone().unwrap();
    let update = status.in_place_updates.unwrap().os_update.unwrap();
    assert_eq!(update.command, os_update::SCRIPT_PATH);
    assert_eq!(update.args, ["12.7"]);
    let script = status
        .extension_files
        .iter()
        .find(|f| f.path == os_update::SCRIPT_PATH)
        .unwrap();
    assert_eq!(script.permissions, Some(0o755));

    let (_, osc_yaml) = shipped_node_agent_secret(&env).await;
    let shipped: Value = serde_norway::from_str(&osc_yaml).unwrap();
    assert_eq!(
        shipped["status"]["inPlaceUpdates"]["osUpdate"],
        json!({"command": os_update::SCRIPT_PATH, "args": ["12.7"]})
    );
    assert_eq!(
        shipped["spec"]["inPlaceUpdates"]["operatingSystemVersion"],
        "12.7"
    );
    let shipped_script = shipped["status"]["extensionFiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == os_update::SCRIPT_PATH)
        .unwrap();
    assert_eq!(
        shipped_script["content"]["inline"]["data"],
        os_update::SCRIPT
    );

    // A version the script would refuse: a configuration problem, nothing shipped for it.
    let checksum_before = checksum_of(&shipped_node_agent_secret(&env).await.0);
    oscs(&env)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}},
                "spec": {"inPlaceUpdates": {"operatingSystemVersion": "12.7; reboot"}},
            })),
        )
        .await
        .unwrap();
    let osc = wait_error(&env, &name).await;
    let description = osc
        .status
        .clone()
        .unwrap()
        .default
        .last_error
        .unwrap()
        .description;
    assert!(description.contains("12.7; reboot"), "{description}");
    assert_eq!(codes(&osc), ["ERR_CONFIGURATION_PROBLEM"]);
    assert_eq!(
        checksum_of(&shipped_node_agent_secret(&env).await.0),
        checksum_before
    );
}

#[tokio::test]
async fn an_image_ref_in_a_provision_osc_is_a_configuration_problem() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let mut osc = fixtures::operating_system_config_with_image_ref_json(&env.namespace, "img-init");
    osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let osc: OperatingSystemConfig = serde_json::from_value(osc).unwrap();
    oscs(&env)
        .create(&PostParams::default(), &osc)
        .await
        .unwrap();
    let osc = wait_error(&env, "img-init").await;
    let status = osc.status.clone().unwrap().default;
    let description = status.last_error.unwrap().description;
    assert!(description.contains("imageRef"), "{description}");
    assert!(
        description.contains("/opt/bin/gardener-node-agent"),
        "{description}"
    );
    assert_eq!(codes(&osc), ["ERR_CONFIGURATION_PROBLEM"]);
    assert_eq!(status.observed_generation, osc.metadata.generation);
    assert!(
        secrets(&env)
            .get_opt("osc-result-img-init")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn oversized_user_data_is_reported_in_the_description_and_an_event() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let big: Vec<u8> = (0..20_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let name = create_osc_with(&env, "big-init", "provision", |osc| {
        osc["spec"]["files"].as_array_mut().unwrap().push(json!({
            "path": "/opt/big.bin",
            "content": {"inline": {"encoding": "b64", "data": encode_b64(&big)}}
        }));
    })
    .await;
    let osc = wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    let description = osc
        .status
        .unwrap()
        .default
        .last_operation
        .unwrap()
        .description;
    assert!(
        description.starts_with("Successfully reconciled OperatingSystemConfig (warning:"),
        "{description}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &env.namespace);
    wait_for("UserDataTooLarge event", WAIT, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| e.reason.as_deref() == Some("UserDataTooLarge"))
            .map(|_| ())
            .ok_or_else(|| {
                format!(
                    "{:?}",
                    list.items.iter().map(|e| &e.reason).collect::<Vec<_>>()
                )
            })
    })
    .await;
}

#[tokio::test]
async fn deletion_waits_for_the_managed_resource() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, &original(), "reconcile").await;
    wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    add_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
    confirm_and_delete(&oscs(&env), &name).await;
    wait_for("delete waiting for the MR", WAIT, || async {
        let osc = oscs(&env).get(&name).await.map_err(|e| e.to_string())?;
        let last = osc
            .status
            .and_then(|s| s.default.last_operation)
            .ok_or("no op")?;
        if last.type_ == LastOperationType::Delete
            && last.description.contains("waiting until ManagedResource")
        {
            Ok(())
        } else {
            Err(last.description)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        oscs(&env).get_opt(&name).await.unwrap().is_some(),
        "deletion waits for the MR"
    );
    remove_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
    wait_gone(&oscs(&env), &name).await;
    assert!(no_managed_resources(&env).await);
    let left = secrets(&env).list(&ListParams::default()).await.unwrap();
    assert!(
        left.items
            .iter()
            .all(|s| !s.name_any().starts_with("managedresource-")),
        "MR secrets removed"
    );
}

#[tokio::test]
async fn force_deletion_does_not_wait_for_the_managed_resource() {
    let env = setup_with_cluster(|c| {
        c["spec"]["shoot"]["metadata"]["annotations"] =
            json!({"confirmation.gardener.cloud/force-deletion": "true"});
    })
    .await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, &original(), "reconcile").await;
    wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    add_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
    confirm_and_delete(&oscs(&env), &name).await;
    wait_gone(&oscs(&env), &name).await;
    let stuck = mrs(&env).get(&node_agent_mr()).await.unwrap();
    assert!(
        stuck.metadata.deletion_timestamp.is_some(),
        "deleted, not waited for"
    );
    remove_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
}

#[tokio::test]
async fn deleting_a_provision_osc_removes_its_user_data_secret() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let name = create_osc(&env, "pool-a-init", "provision").await;
    wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    confirm_and_delete(&oscs(&env), &name).await;
    wait_gone(&oscs(&env), &name).await;
    assert!(
        secrets(&env)
            .get_opt("osc-result-pool-a-init")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        secrets(&env)
            .get_opt("example-secret")
            .await
            .unwrap()
            .is_some(),
        "referenced Secrets are not ours"
    );
}

#[tokio::test]
async fn migrate_keeps_the_shoot_secret_and_leaves_the_seed_clean() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let original = create_osc(&env, &original(), "reconcile").await;
    let init = create_osc(&env, "pool-a-init", "provision").await;
    for name in [&original, &init] {
        wait_ready(&oscs(&env), name, LastOperationType::Create).await;
    }
    add_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
    for name in [&original, &init] {
        annotate(&oscs(&env), name, "migrate").await;
    }
    // While GRM "deletes", keepObjects must already be true, so the nodes keep their secret.
    wait_for("MR deleting with keepObjects", WAIT, || async {
        let mr = mrs(&env)
            .get(&node_agent_mr())
            .await
            .map_err(|e| e.to_string())?;
        if mr.metadata.deletion_timestamp.is_some() && mr.spec.keep_objects == Some(true) {
            Ok(())
        } else {
            Err(format!(
                "keepObjects {:?}, deleting {}",
                mr.spec.keep_objects,
                mr.metadata.deletion_timestamp.is_some()
            ))
        }
    })
    .await;
    remove_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
    for name in [&original, &init] {
        wait_migrated(&oscs(&env), name).await;
    }
    assert!(no_managed_resources(&env).await);
    // The user data stays with its OSC (garbage-collected with it); restore renders it anew.
    assert!(
        secrets(&env)
            .get_opt("osc-result-pool-a-init")
            .await
            .unwrap()
            .is_some()
    );
    // gardenlet's shallow delete of migrated objects: no actuator runs, nothing reappears.
    for name in [&original, &init] {
        confirm_and_delete(&oscs(&env), name).await;
        wait_gone(&oscs(&env), name).await;
    }
    assert!(no_managed_resources(&env).await);
}

#[tokio::test]
async fn restore_after_wait_for_state_recreates_user_data_and_managed_resource() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let mut names = Vec::new();
    for (name, purpose) in [
        (original(), "reconcile"),
        ("pool-a-init".to_string(), "provision"),
    ] {
        names.push(
            create_osc_with(&env, &name, purpose, |osc| {
                osc["metadata"]["annotations"] =
                    json!({"gardener.cloud/operation": "wait-for-state"});
            })
            .await,
        );
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in &names {
        let waiting = oscs(&env).get(name).await.unwrap();
        assert!(waiting.status.is_none(), "no status during wait-for-state");
        assert!(waiting.finalizers().is_empty());
    }
    assert!(no_managed_resources(&env).await);

    for name in &names {
        annotate(&oscs(&env), name, "restore").await;
    }
    for name in &names {
        wait_ready(&oscs(&env), name, LastOperationType::Restore).await;
    }
    assert_eq!(
        mrs(&env)
            .get(&node_agent_mr())
            .await
            .unwrap()
            .spec
            .keep_objects,
        Some(false)
    );
    assert!(
        secrets(&env)
            .get_opt("osc-result-pool-a-init")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn without_node_agent_secrets_only_the_status_is_written_and_an_old_mr_is_handed_over() {
    let env = setup().await;
    SEED_CLASS_OPERATOR.get_or_init(|| {
        Mutex::new(OperatorProcess::start(
            &env.kubeconfig,
            &[
                "--controllers=operatingsystemconfig",
                "--extension-classes=seed",
                "--node-agent-secrets=never",
            ],
        ))
    });
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    // A ManagedResource from a time the flag was on, with GRM's finalizer.
    let data: std::collections::BTreeMap<String, Vec<u8>> =
        [("secret__kube-system__x.yaml".to_string(), b"{}".to_vec())].into();
    gardener_extension_node::extension::managed_resource::apply_for_shoot(
        &env.client,
        None,
        &env.namespace,
        &node_agent_mr(),
        &data,
        false,
    )
    .await
    .unwrap();
    add_grm_finalizer(&mrs(&env), &node_agent_mr()).await;

    let name = create_osc_with(&env, &original(), "reconcile", |osc| {
        osc["spec"]["class"] = json!("seed");
    })
    .await;
    let osc = wait_ready(&oscs(&env), &name, LastOperationType::Create).await;
    assert_eq!(
        osc.status.unwrap().extension_units,
        extensions::for_os_type("debian").units
    );
    let mr = mrs(&env).get(&node_agent_mr()).await.unwrap();
    assert!(mr.metadata.deletion_timestamp.is_some(), "being removed");
    assert_eq!(
        mr.spec.keep_objects,
        Some(true),
        "the shoot keeps the secret for gardenlet's ManagedResource"
    );
    remove_grm_finalizer(&mrs(&env), &node_agent_mr()).await;
    wait_for("MR gone", WAIT, || async {
        match mrs(&env).get_opt(&node_agent_mr()).await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn only_the_configured_os_types_are_handled() {
    let env = setup().await;
    put_file_secret(&env, FILE_SECRET_VALUE).await;
    let flatcar = create_osc_with(&env, "flatcar-init", "provision", |osc| {
        osc["spec"]["type"] = json!("flatcar");
    })
    .await;
    let ubuntu = create_osc_with(&env, "ubuntu-init", "provision", |osc| {
        osc["spec"]["type"] = json!("ubuntu");
    })
    .await;
    wait_ready(&oscs(&env), &ubuntu, LastOperationType::Create).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ignored = oscs(&env).get(&flatcar).await.unwrap();
    assert!(ignored.status.is_none() && ignored.finalizers().is_empty());
    assert!(
        secrets(&env)
            .get_opt("osc-result-flatcar-init")
            .await
            .unwrap()
            .is_none()
    );
}
