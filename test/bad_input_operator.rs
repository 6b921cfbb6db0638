//! Bad input to the operator, a table row each: the gVisor providerConfig, OperatingSystemConfig
//! specs, Worker specs and the Cluster. Every row starts from objects that are ready (so the
//! shoot has ManagedResources, user data, machines), then gardenlet brings the bad input and
//! asks for a reconcile. Each row must end in a clear `lastError` (naming what is wrong, with
//! the right error code) and a Warning event, and leave what the shoot already has exactly as
//! it was (same resourceVersions).
//!
//! The control plane has Gardener's **upstream** CRDs when `../shared/gardener-crds` is there
//! (as in a real seed, where gardenlet installs them): they admit more than ours (e.g. any
//! unit `command`), so the operator itself must cope. With our CRDs such a row is refused by
//! the API server, which the row then checks instead.
//!
//! Also here, because this binary runs the most error paths: no Secret value ever reaches the
//! operator's log (every Secret these tests create carries a unique marker).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use base64::Engine;
use gardener_extension_node::api::machine::{Machine, MachineClass, MachineDeployment, MachineSet};
use gardener_extension_node::api::{
    Cluster, ContainerRuntime, ExtensionObject, LastOperationType, ManagedResource,
    OperatingSystemConfig, Worker,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::fixtures::{self, OSC_KEY};
use support::gardener::{annotate, confirm_and_delete, wait_gone};
use support::load::{self, CREATED, USER_DATA_SECRET, WORKER};
use support::mcm::Mcm;
use support::operator::OperatorProcess;
use support::{Crds, TestEnv, wait_for};

const WAIT: Duration = Duration::from_secs(120);

static OPERATOR: OnceLock<Mutex<OperatorProcess>> = OnceLock::new();

/// A value no Secret of any other test has; it must never appear in the operator's log.
fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!("s3cr3t-{}-{nanos:x}-do-not-log", std::process::id())
    })
}

fn crds() -> Crds {
    if support::upstream_crd_dir().is_some() {
        Crds::Upstream
    } else {
        Crds::Ours
    }
}

fn api<K>(env: &TestEnv) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// A shoot namespace with its Cluster, `example-secret` (the marker as value) and the
/// user data Secret the fixture Worker needs, and the shared operator running.
async fn setup() -> TestEnv {
    let env = support::env_with(crds()).await;
    OPERATOR.get_or_init(|| Mutex::new(OperatorProcess::start(&env.kubeconfig, &[])));
    Api::<Cluster>::all(env.client.clone())
        .create(&PostParams::default(), &fixtures::cluster(&env.namespace))
        .await
        .unwrap();
    let secret: Secret =
        serde_json::from_value(fixtures::osc_file_secret_json(&env.namespace, marker())).unwrap();
    api::<Secret>(&env)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env
}

fn log_text() -> String {
    OPERATOR.get().unwrap().lock().unwrap().log_text()
}

/// The marker, its base64 and the stable inner part of its base64 at every alignment (it
/// may be embedded in base64 of a larger document) are absent from the log.
fn assert_no_secret_in_log() {
    let log = log_text();
    let mut needles = vec![marker().to_string()];
    for shift in 0..3 {
        let shifted = format!("{}{}", "x".repeat(shift), marker());
        let encoded = base64::engine::general_purpose::STANDARD.encode(shifted);
        // Skip the characters that depend on the prefix; keep a long inner run.
        needles.push(encoded[4..encoded.len() - 4].to_string());
    }
    for needle in needles {
        assert!(
            !log.contains(&needle),
            "a Secret value reached the operator's log ({needle})"
        );
    }
}

async fn create<K>(env: &TestEnv, mut object: Value)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    object["metadata"]["annotations"] = json!({
        "gardener.cloud/operation": "reconcile",
        "gardener.cloud/timestamp": chrono::Utc::now().to_rfc3339(),
    });
    api::<K>(env)
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
}

async fn wait_ready<K>(env: &TestEnv, name: &str, operations: &[LastOperationType], mcm: &Mcm)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + ExtensionObject
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    wait_for(&format!("{name} ready"), WAIT, || async {
        mcm.sync().await?;
        let object = api::<K>(env).get(name).await.map_err(|e| e.to_string())?;
        load::ready_for(&object, operations)
    })
    .await;
}

/// resourceVersion (and for Secrets the data) of every object the shoot already has from
/// us, by `kind/name`.
async fn shoot_state(env: &TestEnv) -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    let rv = |o: &dyn Fn() -> Option<String>| o().unwrap_or_default();
    for o in load::list::<ManagedResource>(env).await.unwrap() {
        state.insert(
            format!("ManagedResource/{}", o.name_any()),
            rv(&|| o.resource_version()),
        );
    }
    for o in load::list::<Secret>(env).await.unwrap() {
        let data = serde_json::to_string(&o.data).unwrap();
        state.insert(
            format!("Secret/{}", o.name_any()),
            format!("{} {data}", rv(&|| o.resource_version())),
        );
    }
    for o in load::list::<MachineClass>(env).await.unwrap() {
        state.insert(
            format!("MachineClass/{}", o.name_any()),
            rv(&|| o.resource_version()),
        );
    }
    for o in load::list::<MachineDeployment>(env).await.unwrap() {
        // MCM writes the status; the spec is what we own.
        state.insert(
            format!("MachineDeployment/{}", o.name_any()),
            serde_json::to_string(&o.spec).unwrap(),
        );
    }
    for o in load::list::<MachineSet>(env).await.unwrap() {
        state.insert(format!("MachineSet/{}", o.name_any()), String::new());
    }
    for o in load::list::<Machine>(env).await.unwrap() {
        state.insert(format!("Machine/{}", o.name_any()), String::new());
    }
    state
}

/// Waits for a `lastError` containing `needle` on `kind/name`; returns its description and
/// codes. Untyped, like [`bring_bad_spec`].
async fn wait_last_error<K>(env: &TestEnv, name: &str, needle: &str) -> (String, Vec<String>)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    wait_for(
        &format!("{name}: lastError with {needle:?}"),
        WAIT,
        || async {
            let object = api.get(name).await.map_err(|e| e.to_string())?;
            let error = &object.data["status"]["lastError"];
            let description = error["description"]
                .as_str()
                .ok_or_else(|| format!("no lastError: {}", object.data["status"]))?;
            if description.contains(needle) {
                let codes = error["codes"]
                    .as_array()
                    .map(|c| {
                        c.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok((description.to_string(), codes))
            } else {
                Err(description.to_string())
            }
        },
    )
    .await
}

/// Waits for a Warning event about `name` whose note contains `needle`.
async fn wait_warning(env: &TestEnv, name: &str, needle: &str) {
    wait_for(&format!("Warning event on {name}"), WAIT, || async {
        let events = api::<Event>(env)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let found = events.items.iter().any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.note.as_deref().is_some_and(|n| n.contains(needle))
        });
        if found {
            Ok(())
        } else {
            Err(format!(
                "{:?}",
                events
                    .items
                    .iter()
                    .map(|e| (&e.reason, &e.note))
                    .collect::<Vec<_>>()
            ))
        }
    })
    .await
}

/// The stored OSC's spec as JSON, to change into a bad one.
async fn osc_spec_json(env: &TestEnv, name: &str) -> Value {
    let osc = api::<OperatingSystemConfig>(env).get(name).await.unwrap();
    serde_json::to_value(osc.spec).unwrap()
}

/// Merge-patches `spec` (lists are replaced whole) and asks for a reconcile, as gardenlet
/// does. Untyped: with upstream CRDs the API server may store what our types cannot read
/// (e.g. an unknown unit command). `Err` carries the API server's refusal.
async fn bring_bad_spec<K>(env: &TestEnv, name: &str, spec: Value) -> Result<(), String>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await
    .map_err(|e| e.to_string())?;
    let annotations = json!({"metadata": {"annotations": {
        "gardener.cloud/operation": "reconcile",
        "gardener.cloud/timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
    }}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(annotations))
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// What a row expects.
struct Expect {
    /// Text the `lastError` and the event must contain.
    needle: &'static str,
    /// The single error code; `None` for retryable errors without a code.
    code: Option<&'static str>,
    /// Text of the API server's refusal when our (stricter) CRDs reject the input.
    refused_by_our_crds: Option<&'static str>,
}

/// The common end of every row: a clear error, a Warning event, nothing of the shoot
/// touched, no marker in the log.
async fn expect_error<K>(
    env: &TestEnv,
    kind_name: (&str, &str),
    applied: Result<(), String>,
    expect: &Expect,
    before: &BTreeMap<String, String>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + ExtensionObject
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let (row, name) = kind_name;
    match applied {
        Err(refusal) => {
            let wanted = expect
                .refused_by_our_crds
                .unwrap_or_else(|| panic!("{row}: the API server refused it: {refusal}"));
            assert_eq!(crds(), Crds::Ours, "{row}: refused by upstream CRDs");
            assert!(refusal.contains(wanted), "{row}: {refusal}");
        }
        Ok(()) => {
            let (description, codes) = wait_last_error::<K>(env, name, expect.needle).await;
            let wanted: Vec<String> = expect.code.iter().map(|c| c.to_string()).collect();
            assert_eq!(codes, wanted, "{row}: {description}");
            assert!(
                description.len() < 2048,
                "{row}: lastError of {} bytes",
                description.len()
            );
            wait_warning(env, name, expect.needle).await;
            assert_no_debug_output::<K>(env, row, name).await;
        }
    }
    let after = shoot_state(env).await;
    assert_eq!(&after, before, "{row}: the shoot's objects changed");
    assert_no_secret_in_log();
}

/// Pieces of Rust debug output (`{:?}` of a kube Status, an Option, a struct) that must never
/// reach a user-facing text.
const DEBUG_OUTPUT: &[&str] = &[
    "Some(",
    "None,",
    "None }",
    "Status {",
    "ListMeta",
    "ErrorResponse",
    "ApiError",
    "{ ",
    " }",
];

/// Whether `text` holds Rust debug output.
fn debug_output_in(text: &str) -> Option<&'static str> {
    DEBUG_OUTPUT
        .iter()
        .copied()
        .find(|piece| text.contains(piece))
}

/// Every user-facing text about `name` (lastError, lastOperation description, the notes of
/// its events) reads as a sentence, without Rust debug output.
async fn assert_no_debug_output<K>(env: &TestEnv, row: &str, name: &str)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    let resource = ApiResource::erase::<K>(&());
    let objects: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    let object = objects.get(name).await.unwrap();
    let status = &object.data["status"];
    let mut texts: Vec<String> = [
        &status["lastError"]["description"],
        &status["lastOperation"]["description"],
    ]
    .iter()
    .filter_map(|v| v.as_str().map(String::from))
    .collect();
    let events = api::<Event>(env)
        .list(&ListParams::default())
        .await
        .unwrap();
    texts.extend(
        events
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter_map(|e| e.note),
    );
    assert!(texts.len() >= 2, "{row}: {texts:?}");
    for text in texts {
        if let Some(piece) = debug_output_in(&text) {
            panic!("{row}: {piece:?} (debug output) in {text:?}");
        }
    }
}

#[test]
fn the_debug_output_check_finds_what_kube_used_to_print() {
    let old = "Error reconciling Worker: reading Cluster shoot--local--local: ApiError: clusters.extensions.gardener.cloud \"shoot--local--local\" not found: NotFound (Status { status: Some(Failure), code: 404, metadata: Some(ListMeta { continue_: None }) })";
    assert_eq!(debug_output_in(old), Some("Some("));
    assert_eq!(
        debug_output_in("Error reconciling Worker: Cluster shoot--local--local not found"),
        None
    );
}

/// Warning events: the same note again counts up the series of its event; a different note
/// is an event of its own, so the newest failure is always visible as it is.
#[tokio::test]
async fn a_different_note_is_a_new_event_and_the_same_note_a_series() {
    use gardener_extension_node::extension::events::EventPublisher;
    use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};

    let env = support::env_with(crds()).await;
    let object: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "failing", "namespace": env.namespace}
    }))
    .unwrap();
    let object = api::<ConfigMap>(&env)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let regarding: ObjectReference = object.object_ref(&());
    let publisher = EventPublisher::new(env.client.clone());
    for note in [
        "user data Secret missing",
        "user data Secret missing",
        "timed out",
    ] {
        publisher
            .warning(&regarding, "ReconcileFailed", "Reconcile", note.to_string())
            .await;
    }
    let mut seen: Vec<(String, i32)> = api::<Event>(&env)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("failing"))
        .map(|e| {
            (
                e.note.unwrap_or_default(),
                e.series.map(|s| s.count).unwrap_or(1),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("timed out".to_string(), 1),
            ("user data Secret missing".to_string(), 2)
        ]
    );
}

fn gvisor_config(flags: Value) -> Value {
    json!({
        "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
        "kind": "GVisorConfiguration",
        "configFlags": flags,
    })
}

const CONFIGURATION: Option<&str> = Some("ERR_CONFIGURATION_PROBLEM");

#[tokio::test]
async fn bad_provider_configs_are_reported_and_change_nothing() {
    let huge_value = "x".repeat(512 * 1024);
    let huge_key = "k".repeat(64 * 1024);
    let many: serde_json::Map<String, Value> = (0..2000)
        .map(|i| (format!("flag-{i:04}"), json!("true")))
        .collect();
    let rows: Vec<(&str, Value, Expect)> = vec![
        (
            "unknown flag",
            gvisor_config(json!({"platform": "kvm"})),
            Expect {
                needle: "configFlags has unknown flag \"platform\"; accepted flags: debug, net-raw, nvproxy, panic-signal",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "wrong type",
            gvisor_config(json!({"net-raw": true})),
            Expect {
                needle: "configFlags.net-raw must be a string",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "wrong kind",
            json!({"apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1", "kind": "GVisorConfig"}),
            Expect {
                needle: "kind \"GVisorConfig\"; expected",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "YAML text where a mapping belongs",
            gvisor_config(json!("net-raw: [true")),
            Expect {
                needle: "providerConfig.configFlags must be a map",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "huge value",
            gvisor_config(json!({"net-raw": huge_value})),
            Expect {
                needle: "configFlags.net-raw has invalid value \"xxxxxxxx",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "huge key",
            gvisor_config(json!({ huge_key: "true" })),
            Expect {
                needle: "configFlags has unknown flag \"kkkkkkkk",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "2000 unknown flags",
            gvisor_config(Value::Object(many)),
            Expect {
                needle: "configFlags has unknown flag \"flag-0000\"",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
    ];
    let runs = rows.iter().map(|(row, config, expect)| async move {
        let env = setup().await;
        let name = "gvisor-worker-a";
        create::<ContainerRuntime>(
            &env,
            fixtures::container_runtime_json(&env.namespace, "worker-a"),
        )
        .await;
        wait_ready::<ContainerRuntime>(&env, name, CREATED, &Mcm::new(&env)).await;
        let before = shoot_state(&env).await;
        assert_eq!(
            before
                .keys()
                .filter(|k| k.starts_with("ManagedResource/"))
                .count(),
            2,
            "{row}: {before:?}"
        );
        let applied =
            bring_bad_spec::<ContainerRuntime>(&env, name, json!({"providerConfig": config})).await;
        expect_error::<ContainerRuntime>(&env, (row, name), applied, expect, &before).await;
    });
    futures::future::join_all(runs).await;
}

/// `render containerruntime` reads YAML from a file: broken YAML is a clear error naming the
/// file and the position, and nothing is printed.
#[test]
fn invalid_yaml_is_a_clear_error_of_the_render_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cr.yaml");
    std::fs::write(
        &file,
        "apiVersion: extensions.gardener.cloud/v1alpha1\nkind: ContainerRuntime\nspec:\n  providerConfig:\n    configFlags: [net-raw: true\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"))
        .args(["render", "containerruntime", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cr.yaml does not decode") && stderr.contains("line"),
        "{stderr}"
    );
}

/// A spec change of an OSC row, applied to the fixture's spec.
type SpecChange = fn(&mut Value);

fn push_file(spec: &mut Value, file: Value) {
    spec["files"].as_array_mut().unwrap().push(file);
}

#[tokio::test]
async fn bad_operating_system_configs_are_reported_and_change_nothing() {
    let rows: Vec<(&str, SpecChange, Expect)> = vec![
        (
            "unknown encoding",
            |s| s["files"][0]["content"]["inline"]["encoding"] = json!("rot13"),
            Expect {
                needle: "file /etc/example/plain: unknown inline encoding \"rot13\"",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "relative path",
            |s| s["files"][1]["path"] = json!("etc/example/relative"),
            Expect {
                needle: "etc/example/relative",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "path with ..",
            |s| s["files"][1]["path"] = json!("/etc/../root/.ssh/authorized_keys"),
            Expect {
                needle: "/etc/../root/.ssh/authorized_keys",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "duplicate paths",
            |s| s["files"][1]["path"] = json!("/etc/example/plain"),
            Expect {
                needle: "/etc/example/plain",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "unit with unknown command",
            |s| s["units"][0]["command"] = json!("explode"),
            Expect {
                needle: "explode",
                code: CONFIGURATION,
                refused_by_our_crds: Some("Unsupported value: \"explode\""),
            },
        ),
        (
            "filePaths naming an absent file",
            |s| s["units"][0]["filePaths"] = json!(["/etc/example/absent"]),
            Expect {
                needle: "/etc/example/absent",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "secretRef to a missing Secret",
            |s| s["files"][2]["content"]["secretRef"]["name"] = json!("absent-secret"),
            Expect {
                needle: "file /etc/example/from-secret: the referenced Secret absent-secret does not exist",
                code: Some("ERR_RETRYABLE_CONFIGURATION_PROBLEM"),
                refused_by_our_crds: None,
            },
        ),
        (
            "secretRef to a missing key",
            |s| s["files"][2]["content"]["secretRef"]["dataKey"] = json!("absent-key"),
            Expect {
                needle: "file /etc/example/from-secret: Secret example-secret has no data key \"absent-key\"",
                code: Some("ERR_RETRYABLE_CONFIGURATION_PROBLEM"),
                refused_by_our_crds: None,
            },
        ),
        (
            "1 MiB content",
            |s| {
                let data = base64::engine::general_purpose::STANDARD.encode(vec![0x5au8; 1 << 20]);
                push_file(
                    s,
                    json!({"path": "/opt/huge.bin", "content": {"inline": {"encoding": "b64", "data": data}}}),
                );
            },
            Expect {
                needle: "/opt/huge.bin",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
    ];
    let runs = rows
        .iter()
        .flat_map(|row| [(row, "reconcile"), (row, "provision")])
        .map(|((row, change, expect), purpose)| async move {
            let row = format!("{row} ({purpose})");
            let env = setup().await;
            let name = if purpose == "reconcile" {
                format!("{OSC_KEY}-original")
            } else {
                "pool-a-init".to_string()
            };
            create::<OperatingSystemConfig>(
                &env,
                fixtures::operating_system_config_json(&env.namespace, &name, purpose),
            )
            .await;
            wait_ready::<OperatingSystemConfig>(&env, &name, CREATED, &Mcm::new(&env)).await;
            let before = shoot_state(&env).await;
            let what = if purpose == "reconcile" {
                "ManagedResource/"
            } else {
                "Secret/osc-result-"
            };
            assert!(
                before.keys().any(|k| k.starts_with(what)),
                "{row}: {before:?}"
            );
            let mut spec = osc_spec_json(&env, &name).await;
            change(&mut spec);
            let applied = bring_bad_spec::<OperatingSystemConfig>(&env, &name, spec).await;
            expect_error::<OperatingSystemConfig>(&env, (&row, &name), applied, expect, &before)
                .await;
        });
    futures::future::join_all(runs).await;
}

#[tokio::test]
async fn bad_workers_are_reported_and_keep_the_machines() {
    type Change = fn(&mut Value);
    let rows: Vec<(&str, Change, Change, Expect)> = vec![
        (
            "minimum > maximum",
            |_| {},
            |p| {
                p["minimum"] = json!(4);
                p["maximum"] = json!(2);
            },
            Expect {
                needle: "pool worker-a: minimum 4 is greater than maximum 2",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "unknown zone",
            |c| {
                c["spec"]["cloudProfile"]["spec"]["regions"] =
                    json!([{"name": "local", "zones": [{"name": "0"}, {"name": "1"}]}])
            },
            |p| p["zones"] = json!(["0", "9"]),
            Expect {
                needle: "zone \"9\" is not a zone of region \"local\"",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "missing user data",
            |_| {},
            |p| p["userDataSecretRef"]["name"] = json!("osc-result-absent"),
            Expect {
                needle: "pool worker-a: user data Secret",
                code: None,
                refused_by_our_crds: None,
            },
        ),
        (
            "empty providerConfig",
            |_| {},
            |p| p["providerConfig"] = json!({}),
            Expect {
                needle: "pool worker-a: invalid providerConfig: providerConfig has no apiVersion and no kind; expected apiVersion \"node.extensions.config.gardener.cloud/v1alpha1\" and kind \"WorkerConfig\"",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
        (
            "bad providerConfig",
            |_| {},
            |p| {
                p["providerConfig"] = json!({
                    "apiVersion": "node.extensions.config.gardener.cloud/v1alpha1",
                    "kind": "WorkerConfig",
                    "imageName": "x"
                })
            },
            Expect {
                needle: "pool worker-a: invalid providerConfig: providerConfig has unknown field \"imageName\"",
                code: CONFIGURATION,
                refused_by_our_crds: None,
            },
        ),
    ];
    let runs = rows.iter().map(|(row, cluster, pool, expect)| async move {
        let env = setup().await;
        let mut value = fixtures::cluster_json(&env.namespace);
        cluster(&mut value);
        Api::<Cluster>::all(env.client.clone())
            .patch(
                &env.namespace,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": value["spec"]})),
            )
            .await
            .unwrap();
        create_user_data(&env).await;
        create::<Worker>(&env, fixtures::worker_json(&env.namespace)).await;
        let mcm = Mcm::new(&env);
        wait_ready::<Worker>(&env, WORKER, CREATED, &mcm).await;
        let before = shoot_state(&env).await;
        assert_eq!(
            before.keys().filter(|k| k.starts_with("Machine/")).count(),
            1,
            "{row}: {before:?}"
        );
        let mut spec =
            serde_json::to_value(api::<Worker>(&env).get(WORKER).await.unwrap().spec).unwrap();
        pool(&mut spec["pools"][0]);
        let applied = bring_bad_spec::<Worker>(&env, WORKER, spec).await;
        expect_error::<Worker>(&env, (row, WORKER), applied, expect, &before).await;
    });
    futures::future::join_all(runs).await;
}

async fn create_user_data(env: &TestEnv) {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": USER_DATA_SECRET, "namespace": env.namespace},
        "stringData": {"cloud_config": "#!/bin/bash\necho provisioned\n"}
    }))
    .unwrap();
    api::<Secret>(env)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A missing Cluster and one whose shoot does not decode: every kind reports it, nothing of
/// the shoot changes.
#[tokio::test]
async fn a_missing_or_undecodable_cluster_is_reported_by_every_kind() {
    type Break = fn(&TestEnv) -> futures::future::BoxFuture<'_, ()>;
    let rows: Vec<(&str, Break, &str)> = vec![
        (
            "Cluster missing",
            |env| {
                Box::pin(async move {
                    Api::<Cluster>::all(env.client.clone())
                        .delete(&env.namespace, &DeleteParams::default())
                        .await
                        .unwrap();
                })
            },
            "not found",
        ),
        (
            "shoot does not decode",
            |env| {
                Box::pin(async move {
                    Api::<Cluster>::all(env.client.clone())
                        .patch(
                            &env.namespace,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"shoot": {"spec": {"provider": {"workers": "not a list"}}}}})),
                        )
                        .await
                        .unwrap();
                })
            },
            "has a shoot that does not decode",
        ),
    ];
    let runs = rows.iter().map(|(row, break_cluster, needle)| async move {
        let env = setup().await;
        create_user_data(&env).await;
        let mcm = Mcm::new(&env);
        create::<ContainerRuntime>(
            &env,
            fixtures::container_runtime_json(&env.namespace, "worker-a"),
        )
        .await;
        let osc = format!("{OSC_KEY}-original");
        create::<OperatingSystemConfig>(
            &env,
            fixtures::operating_system_config_json(&env.namespace, &osc, "reconcile"),
        )
        .await;
        create::<Worker>(&env, fixtures::worker_json(&env.namespace)).await;
        wait_ready::<ContainerRuntime>(&env, "gvisor-worker-a", CREATED, &mcm).await;
        wait_ready::<OperatingSystemConfig>(&env, &osc, CREATED, &mcm).await;
        wait_ready::<Worker>(&env, WORKER, CREATED, &mcm).await;
        let before = shoot_state(&env).await;
        break_cluster(&env).await;
        // The runs read the Cluster from the operator's watch cache. Give that watch time to
        // deliver the change before asking for runs: a run that still reads the old Cluster
        // succeeds, and nothing asks again until the next annotation (as under gardenlet).
        // With every worker running at once, a run can start within milliseconds.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        annotate(
            &api::<ContainerRuntime>(&env),
            "gvisor-worker-a",
            "reconcile",
        )
        .await;
        annotate(&api::<OperatingSystemConfig>(&env), &osc, "reconcile").await;
        annotate(&api::<Worker>(&env), WORKER, "reconcile").await;
        let expect = Expect {
            needle,
            code: None,
            refused_by_our_crds: None,
        };
        expect_error::<ContainerRuntime>(&env, (row, "gvisor-worker-a"), Ok(()), &expect, &before)
            .await;
        expect_error::<OperatingSystemConfig>(&env, (row, &osc), Ok(()), &expect, &before).await;
        expect_error::<Worker>(&env, (row, WORKER), Ok(()), &expect, &before).await;
        if *row == "Cluster missing" {
            let sentence = format!("Cluster {} not found", env.namespace);
            let (description, _) = wait_last_error::<Worker>(&env, WORKER, &sentence).await;
            assert!(description.ends_with(&sentence), "{description}");
        }
    });
    futures::future::join_all(runs).await;
}

/// Security: a full lifecycle (create, reconcile, migrate, restore, delete) of OSCs whose
/// `secretRef` file reads the marker, with the operator logging at debug level; the marker
/// appears in no log line, in no form.
#[tokio::test]
async fn secret_values_never_reach_the_log() {
    let env = setup().await;
    let mcm = Mcm::new(&env);
    let names = [format!("{OSC_KEY}-original"), "pool-a-init".to_string()];
    for (name, purpose) in names.iter().zip(["reconcile", "provision"]) {
        create::<OperatingSystemConfig>(
            &env,
            fixtures::operating_system_config_json(&env.namespace, name, purpose),
        )
        .await;
    }
    let oscs = api::<OperatingSystemConfig>(&env);
    for name in &names {
        wait_ready::<OperatingSystemConfig>(&env, name, CREATED, &mcm).await;
        annotate(&oscs, name, "reconcile").await;
        wait_ready::<OperatingSystemConfig>(&env, name, &[LastOperationType::Reconcile], &mcm)
            .await;
    }
    // The marker really went out: it is in the shipped node-agent Secret and the user data.
    let user_data = api::<Secret>(&env).get(USER_DATA_SECRET).await.unwrap();
    let cloud_config =
        String::from_utf8(user_data.data.unwrap()["cloud_config"].0.clone()).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(marker());
    assert!(
        cloud_config.contains(&encoded) || cloud_config.contains(marker()),
        "the marker is in the user data"
    );
    for name in &names {
        annotate(&oscs, name, "migrate").await;
    }
    for name in &names {
        wait_ready::<OperatingSystemConfig>(&env, name, &[LastOperationType::Migrate], &mcm).await;
        confirm_and_delete(&oscs, name).await;
        wait_gone(&oscs, name).await;
    }
    // Restore elsewhere, then delete.
    let destination = setup().await;
    let oscs = api::<OperatingSystemConfig>(&destination);
    for (name, purpose) in names.iter().zip(["reconcile", "provision"]) {
        let mut osc = fixtures::operating_system_config_json(&destination.namespace, name, purpose);
        osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "wait-for-state"});
        oscs.create(
            &PostParams::default(),
            &serde_json::from_value(osc).unwrap(),
        )
        .await
        .unwrap();
        annotate(&oscs, name, "restore").await;
    }
    for name in &names {
        wait_ready::<OperatingSystemConfig>(
            &destination,
            name,
            &[LastOperationType::Restore],
            &mcm,
        )
        .await;
        confirm_and_delete(&oscs, name).await;
        wait_gone(&oscs, name).await;
    }
    assert!(
        log_text().contains("succeeded"),
        "the operator logged its work (debug level)"
    );
    assert_no_secret_in_log();
}

/// Regression: an OperatingSystemConfig that Gardener's CRDs admit but our types cannot
/// decode (unit `command: explode`) used to be dropped silently by the typed watch, and after
/// an operator restart the typed list failed as a whole, so no OSC of the seed was reconciled
/// any more. Now it gets a `lastError`, and the controller keeps working — also after a
/// restart.
#[tokio::test]
async fn an_undecodable_object_is_reported_and_stops_nothing_else() {
    let env = setup().await;
    let name = format!("{OSC_KEY}-original");
    create::<OperatingSystemConfig>(
        &env,
        fixtures::operating_system_config_json(&env.namespace, &name, "reconcile"),
    )
    .await;
    let mcm = Mcm::new(&env);
    wait_ready::<OperatingSystemConfig>(&env, &name, CREATED, &mcm).await;
    let mut spec = osc_spec_json(&env, &name).await;
    spec["units"][0]["command"] = json!("explode");
    if let Err(refusal) = bring_bad_spec::<OperatingSystemConfig>(&env, &name, spec).await {
        assert_eq!(crds(), Crds::Ours, "{refusal}");
        return;
    }
    let (description, codes) =
        wait_last_error::<OperatingSystemConfig>(&env, &name, "unknown variant `explode`").await;
    assert_eq!(codes, ["ERR_CONFIGURATION_PROBLEM"], "{description}");
    wait_warning(&env, &name, "does not decode").await;

    // The controller still serves every other object, also after a restart (a fresh list).
    OPERATOR.get().unwrap().lock().unwrap().restart();
    let other = setup().await;
    create::<OperatingSystemConfig>(
        &other,
        fixtures::operating_system_config_json(&other.namespace, &name, "reconcile"),
    )
    .await;
    wait_ready::<OperatingSystemConfig>(&other, &name, CREATED, &Mcm::new(&other)).await;
    assert_no_secret_in_log();
}
