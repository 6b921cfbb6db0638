//! The Helm chart gardenlet installs (`charts/gardener-extension-node`):
//!
//! - `helm lint` and `helm template` are clean for the defaults and for a values file that sets
//!   everything, and every rendered object is accepted by the real kube-apiserver
//!   (server-side dry run);
//! - the ClusterRole has no wildcard;
//! - the operator, running with **only** the chart's RBAC (as the chart's ServiceAccount, with
//!   a token from the TokenRequest API), goes through the gVisor, OSC and Worker lifecycles
//!   without a single 403;
//! - `example/controller-registration.yaml` embeds exactly this chart and registers the
//!   chart's default types.
//!
//! helm itself is built from its Go module by `hack/helm.sh`.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use gardener_extension_node::api::{
    Cluster, ContainerRuntime, LastOperationType, OperatingSystemConfig, Worker,
};
use gardener_extension_node::devenv::apply;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::gardener::{annotate, check_ready, confirm_and_delete, wait_gone, wait_ready};
use support::mcm::Mcm;
use support::operator::OperatorProcess;
use support::{TestEnv, fixtures, wait_for};

const CHART: &str = "charts/gardener-extension-node";

fn helm() -> PathBuf {
    let output = Command::new("bash")
        .arg(support::repo_root().join("hack/helm.sh"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

fn helm_run(args: &[&str]) -> (String, String) {
    let output = Command::new(helm())
        .args(args)
        .current_dir(support::repo_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

fn values_all() -> String {
    support::repo_root()
        .join("test/fixtures/chart/values-all.yaml")
        .display()
        .to_string()
}

fn render(namespace: &str, values: Option<&str>) -> Vec<DynamicObject> {
    let mut args = vec![
        "template",
        "gardener-extension-node",
        CHART,
        "--namespace",
        namespace,
    ];
    if let Some(values) = values {
        args.extend(["--values", values]);
    }
    let (manifests, _) = helm_run(&args);
    apply::parse_documents(&manifests, "helm template").unwrap()
}

fn kind(object: &DynamicObject) -> &str {
    object
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// What a seed has and the test control plane lacks: the priority class and a (minimal,
/// schema-less) VerticalPodAutoscaler CRD, so the rendered objects can be admitted.
async fn seed_prerequisites(client: &Client) {
    let objects = apply::parse_documents(
        r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: gardener-system-900
value: 999998900
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: verticalpodautoscalers.autoscaling.k8s.io
  annotations:
    api-approved.kubernetes.io: "unapproved, test stand-in for the VPA CRD"
spec:
  group: autoscaling.k8s.io
  scope: Namespaced
  names: {kind: VerticalPodAutoscaler, plural: verticalpodautoscalers, singular: verticalpodautoscaler}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#,
        "seed prerequisites",
    )
    .unwrap();
    apply::apply_all(client, &objects, "default").await.unwrap();
}

#[tokio::test]
async fn chart_lints_renders_and_is_accepted_by_the_api_server() {
    let env = support::env().await;
    seed_prerequisites(&env.client).await;
    for values in [None, Some(values_all())] {
        let mut lint = vec!["lint", CHART, "--strict"];
        if let Some(v) = &values {
            lint.extend(["--values", v.as_str()]);
        }
        let (out, _) = helm_run(&lint);
        assert!(out.contains("0 chart(s) failed"), "{out}");

        let objects = render(&env.namespace, values.as_deref());
        let kinds: Vec<&str> = objects.iter().map(kind).collect();
        for expected in [
            "Deployment",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "PodDisruptionBudget",
            "VerticalPodAutoscaler",
        ] {
            assert!(kinds.contains(&expected), "{expected} missing in {kinds:?}");
        }
        if values.is_some() {
            assert!(
                kinds.contains(&"ConfigMap"),
                "imageVectorOverwrite renders its ConfigMap"
            );
        }
        for object in &objects {
            apply::apply_object(&env.client, object, &env.namespace, true)
                .await
                .unwrap_or_else(|e| {
                    panic!("{} {} rejected: {e:#?}", kind(object), object.name_any())
                });
        }

        let deployment = objects.iter().find(|o| kind(o) == "Deployment").unwrap();
        let pod = &deployment.data["spec"]["template"];
        let container = &pod["spec"]["containers"][0];
        assert_eq!(pod["spec"]["priorityClassName"], "gardener-system-900");
        assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(
            container["securityContext"]["allowPrivilegeEscalation"],
            false
        );
        assert_eq!(
            container["securityContext"]["capabilities"]["drop"][0],
            "ALL"
        );
        for label in [
            "networking.gardener.cloud/to-runtime-apiserver",
            "networking.gardener.cloud/to-dns",
        ] {
            assert_eq!(pod["metadata"]["labels"][label], "allowed");
        }
        assert_eq!(
            deployment.metadata.labels.as_ref().unwrap()["high-availability-config.resources.gardener.cloud/type"],
            "controller"
        );
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(
            args.contains(&format!("--heartbeat-namespace={}", env.namespace).as_str()),
            "{args:?}"
        );
        let env_names: Vec<&str> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(env_names.contains(&"LEADER_ELECTION_NAMESPACE"));
        if values.is_some() {
            assert!(args.contains(&"--gardener-version=v1.150.0"));
            assert!(args.contains(&"--os-types=debian,ubuntu,gardenlinux"));
            assert!(args.contains(&"--worker-types=local,openstack"));
            assert!(args.contains(&"--node-agent-secrets=false"));
            assert!(args.contains(&"--ignore-operation-annotation=true"));
            assert!(env_names.contains(&"IMAGEVECTOR_OVERWRITE"));
            assert!(
                pod["metadata"]["annotations"]["checksum/configmap-imagevector-overwrite"]
                    .is_string()
            );
            // The operator accepts every flag the chart passes.
            let mut parse = vec!["gardener-extension-node".to_string()];
            parse.extend(args.iter().map(|a| a.to_string()));
            parse.push("--help".into());
            let status = Command::new(env!("CARGO_BIN_EXE_gardener-extension-node"))
                .args(&parse[1..])
                .output()
                .unwrap();
            assert!(
                status.status.success(),
                "{}",
                String::from_utf8_lossy(&status.stderr)
            );
        }
    }
}

#[test]
fn cluster_role_has_no_wildcards() {
    let objects = render("extension-test", None);
    let role = objects.iter().find(|o| kind(o) == "ClusterRole").unwrap();
    let role: ClusterRole = serde_json::from_value(serde_json::to_value(role).unwrap()).unwrap();
    for rule in role.rules.unwrap() {
        let all: Vec<&String> = rule
            .api_groups
            .iter()
            .flatten()
            .chain(rule.resources.iter().flatten())
            .chain(rule.verbs.iter())
            .collect();
        assert!(all.iter().all(|v| !v.contains('*')), "wildcard in {rule:?}");
    }
}

#[test]
fn registration_embeds_this_chart_and_registers_its_default_types() {
    let text =
        std::fs::read_to_string(support::repo_root().join("example/controller-registration.yaml"))
            .unwrap();
    let objects = apply::parse_documents(&text, "controller-registration.yaml").unwrap();
    let deployment = objects
        .iter()
        .find(|o| kind(o) == "ControllerDeployment")
        .unwrap();
    let raw = deployment.data["helm"]["rawChart"].as_str().unwrap();
    let archive = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tgz = dir.path().join("chart.tgz");
    std::fs::write(&tgz, archive).unwrap();
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let embedded = dir.path().join("gardener-extension-node");
    let source = support::repo_root().join(CHART);
    // helm re-serialises Chart.yaml when packaging: compare it by content, the rest by bytes.
    let chart_yaml = |dir: &Path| -> Value {
        serde_norway::from_str(&std::fs::read_to_string(dir.join("Chart.yaml")).unwrap()).unwrap()
    };
    assert_eq!(
        chart_yaml(&embedded),
        chart_yaml(&source),
        "run `make generate`: Chart.yaml differs"
    );
    let mut embedded_files = read_tree(&embedded);
    let mut source_files = read_tree(&source);
    embedded_files.remove("Chart.yaml");
    source_files.remove("Chart.yaml");
    assert_eq!(
        embedded_files, source_files,
        "run `make generate`: the embedded chart differs from {CHART}"
    );

    let registration = objects
        .iter()
        .find(|o| kind(o) == "ControllerRegistration")
        .unwrap();
    let registered: Vec<(String, String)> = registration.data["spec"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_string(),
                r["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let values: Value =
        serde_norway::from_str(&std::fs::read_to_string(source.join("values.yaml")).unwrap())
            .unwrap();
    let mut expected = vec![("ContainerRuntime".to_string(), "gvisor".to_string())];
    for t in values["controllers"]["operatingSystemConfig"]["osTypes"]
        .as_array()
        .unwrap()
    {
        expected.push(("OperatingSystemConfig".into(), t.as_str().unwrap().into()));
    }
    for t in values["controllers"]["worker"]["workerTypes"]
        .as_array()
        .unwrap()
    {
        expected.push(("Worker".into(), t.as_str().unwrap().into()));
    }
    assert_eq!(registered, expected);
    assert!(
        registration
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("security.gardener.cloud/pod-security-enforce")
    );
    let tag = values["image"]["tag"].as_str().unwrap();
    assert!(
        tag.starts_with('v') && !tag.contains("-dev"),
        "the default image tag must be a release tag: {tag}"
    );
}

/// File name → sha256 of its content, for every file below `root`.
fn read_tree(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                let digest = <sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&path).unwrap());
                files.insert(name, hex::encode(digest));
            }
        }
    }
    files
}

/// A token for the chart's ServiceAccount, so the operator runs with exactly its RBAC.
async fn service_account_kubeconfig(env: &TestEnv, namespace: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request("gardener-extension-node", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    gardener_extension_node::kubeconfig::render_token_kubeconfig(
        &env.server_url,
        &env.ca_pem,
        &token,
    )
}

async fn create<K>(client: &Client, namespace: &str, value: Value)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(value).unwrap(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn operator_with_only_the_charts_rbac_runs_every_lifecycle_without_a_403() {
    let env = support::env().await;
    let release = env.namespace.clone();
    // Install the chart's ServiceAccount and RBAC for real.
    let rbac: Vec<DynamicObject> = render(&release, None)
        .into_iter()
        .filter(|o| {
            matches!(
                kind(o),
                "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
            )
        })
        .collect();
    apply::apply_all(&env.client, &rbac, &release)
        .await
        .unwrap();
    let kubeconfig = service_account_kubeconfig(&env, &release).await;
    let leader = format!("--leader-election-namespace={release}");
    let heartbeat = format!("--heartbeat-namespace={release}");
    let operator = OperatorProcess::start(
        &kubeconfig,
        &["--leader-election=true", &leader, &heartbeat],
    );

    // A shoot namespace with its Cluster.
    let shoot = support::env().await;
    let ns = shoot.namespace.as_str();
    let client = &shoot.client;
    Api::<Cluster>::all(client.clone())
        .create(&PostParams::default(), &fixtures::cluster(ns))
        .await
        .unwrap();

    // gVisor: create, migrate, restore, delete.
    let crs: Api<ContainerRuntime> = Api::namespaced(client.clone(), ns);
    let mut cr = fixtures::container_runtime_json(ns, "worker-a");
    cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    create::<ContainerRuntime>(client, ns, cr).await;
    wait_ready(&crs, "gvisor-worker-a", LastOperationType::Create).await;
    annotate(&crs, "gvisor-worker-a", "migrate").await;
    wait_for("gVisor migrated", Duration::from_secs(60), || async {
        let cr = crs
            .get("gvisor-worker-a")
            .await
            .map_err(|e| e.to_string())?;
        check_ready(&cr, LastOperationType::Migrate)
    })
    .await;
    annotate(&crs, "gvisor-worker-a", "restore").await;
    wait_ready(&crs, "gvisor-worker-a", LastOperationType::Restore).await;
    confirm_and_delete(&crs, "gvisor-worker-a").await;
    wait_gone(&crs, "gvisor-worker-a").await;

    // OSC: provision (with a secretRef file) and reconcile, then delete.
    create::<Secret>(
        client,
        ns,
        fixtures::osc_file_secret_json(ns, "from a secret\n"),
    )
    .await;
    let oscs: Api<OperatingSystemConfig> = Api::namespaced(client.clone(), ns);
    for (name, purpose) in [
        ("pool-a-init", "provision"),
        (&*format!("{}-original", fixtures::OSC_KEY), "reconcile"),
    ] {
        let mut osc = fixtures::operating_system_config_json(ns, name, purpose);
        osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
        create::<OperatingSystemConfig>(client, ns, osc).await;
        wait_ready(&oscs, name, LastOperationType::Create).await;
        confirm_and_delete(&oscs, name).await;
        wait_gone(&oscs, name).await;
    }

    // Worker: create, hibernate (scales machine-controller-manager), migrate, restore, delete,
    // with the MCM stand-in doing MCM's part.
    create::<Deployment>(client, ns, fixtures::mcm_deployment_json(ns, 1)).await;
    create::<Secret>(client, ns, json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "osc-result-pool-a-init", "namespace": ns},
        "data": {"cloud_config": base64::engine::general_purpose::STANDARD.encode(b"#!/bin/bash\n")}
    }))
    .await;
    let workers: Api<Worker> = Api::namespaced(client.clone(), ns);
    let mut worker = fixtures::worker_json(ns);
    worker["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    create::<Worker>(client, ns, worker).await;
    let mcm = Mcm::new(&shoot);
    let until = |operation: LastOperationType| {
        let mcm = &mcm;
        let workers = &workers;
        async move {
            wait_for(
                &format!("Worker {operation:?}"),
                Duration::from_secs(90),
                || async {
                    mcm.sync().await?;
                    let w = workers.get("worker").await.map_err(|e| e.to_string())?;
                    check_ready(&w, operation)
                },
            )
            .await
        }
    };
    until(LastOperationType::Create).await;
    Api::<Cluster>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shoot": {"spec": {"hibernation": {"enabled": true}}}}})),
        )
        .await
        .unwrap();
    annotate(&workers, "worker", "reconcile").await;
    until(LastOperationType::Reconcile).await;
    Api::<Cluster>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"shoot": {"spec": {"hibernation": {"enabled": false}}}}}),
            ),
        )
        .await
        .unwrap();
    annotate(&workers, "worker", "reconcile").await;
    until(LastOperationType::Reconcile).await;
    annotate(&workers, "worker", "migrate").await;
    until(LastOperationType::Migrate).await;
    // gardenlet's shallow delete of the machine objects, then restore from status.state.
    shallow_delete_machines(client, ns).await;
    annotate(&workers, "worker", "restore").await;
    until(LastOperationType::Restore).await;
    confirm_and_delete(&workers, "worker").await;
    wait_for("Worker deleted", Duration::from_secs(90), || async {
        mcm.sync().await?;
        match workers.get_opt("worker").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(w) => Err(format!(
                "{:?}",
                w.status.and_then(|s| s.default.last_operation)
            )),
        }
    })
    .await;

    let log = operator.log_text();
    let denied: Vec<&str> = log
        .lines()
        // kube reports a denial as `... is forbidden: User ... cannot ...` with `code: 403`.
        .filter(|l| l.to_lowercase().contains("forbidden") || l.contains("code: 403"))
        .collect();
    assert!(
        denied.is_empty(),
        "the chart's RBAC denied calls:\n{}",
        denied.join("\n")
    );
    assert!(
        log.contains("became leader"),
        "leader election ran with the chart's Role"
    );
}

async fn shallow_delete_machines(client: &Client, namespace: &str) {
    for (group_kind, plural) in [
        ("MachineDeployment", "machinedeployments"),
        ("MachineSet", "machinesets"),
        ("Machine", "machines"),
        ("MachineClass", "machineclasses"),
    ] {
        let resource = kube::discovery::ApiResource {
            group: "machine.sapcloud.io".into(),
            version: "v1alpha1".into(),
            api_version: "machine.sapcloud.io/v1alpha1".into(),
            kind: group_kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        for object in api.list(&ListParams::default()).await.unwrap() {
            let name = object.name_any();
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
    }
}
