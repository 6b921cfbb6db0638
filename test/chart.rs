//! The Helm chart gardenlet installs (`charts/gardener-extension-node`):
//!
//! - `helm lint` and `helm template` are clean for the defaults and for a values file that sets
//!   everything, and every rendered object is accepted by the real kube-apiserver
//!   (server-side dry run);
//! - the ClusterRole has no wildcard;
//! - the operator, running with **only** the chart's RBAC and admission policy (as the chart's
//!   ServiceAccount, with a token from the TokenRequest API), goes through the gVisor, OSC and
//!   Worker lifecycles in a `shoot--*` namespace without a single 403;
//! - a table of requests as the chart's ServiceAccount (impersonated) shows what RBAC and the
//!   admission policy allow and deny, for the combined and the gVisor-only installation;
//! - the generated registrations (`example/controller-registration*.yaml`) embed exactly this
//!   chart, split the chart's default types by component, render only their controllers and
//!   never share a cluster-scoped object (nor one in `garden`); the chart refuses to render
//!   with no controller or an unknown `nodeAgentSecrets` mode;
//! - the seed monitoring (a PrometheusRule labelled `prometheus: seed`, a dashboard ConfigMap in
//!   `garden`) carries the release's job and can be turned off; promtool runs the alerts in
//!   test/monitoring_rules.rs.
//!
//! helm itself is built from its Go module by `hack/helm.sh`.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use gardener_extension_node::api::{
    Cluster, ContainerRuntime, LastOperationType, OperatingSystemConfig, Worker,
};
use gardener_extension_node::devenv::apply;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::gardener::{
    GvisorRolloutStandIn, annotate, check_ready, confirm_and_delete, wait_gone, wait_ready,
};
use support::helm::CHART;
use support::mcm::Mcm;
use support::operator::OperatorProcess;
use support::{TestEnv, fixtures, wait_for};

fn values_all() -> String {
    support::repo_root()
        .join("test/fixtures/chart/values-all.yaml")
        .display()
        .to_string()
}

fn render(namespace: &str, values: Option<&str>) -> Vec<DynamicObject> {
    render_release("gardener-extension-node", namespace, values.as_slice(), &[])
}

fn template_args<'a>(
    release: &'a str,
    namespace: &'a str,
    values: &[&'a str],
    set: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["template", release, CHART, "--namespace", namespace];
    for v in values {
        args.extend(["--values", v]);
    }
    for s in set {
        args.extend(["--set", s]);
    }
    args
}

/// `helm template` of the chart as release `release` in `namespace`.
fn render_release(
    release: &str,
    namespace: &str,
    values: &[&str],
    set: &[&str],
) -> Vec<DynamicObject> {
    let (manifests, _) = support::helm::run(&template_args(release, namespace, values, set));
    apply::parse_documents(&manifests, "helm template").unwrap()
}

/// The stderr of a `helm template` that must fail.
fn render_error(set: &[&str]) -> String {
    let args = template_args("gardener-extension-node", "extension-test", &[], set);
    let output = Command::new(support::helm::binary())
        .args(&args)
        .current_dir(support::repo_root())
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "helm {args:?} rendered:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr).unwrap()
}

fn kind(object: &DynamicObject) -> &str {
    object
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// What a seed has and the test control plane lacks: the priority class, the `garden`
/// namespace and the VerticalPodAutoscaler and PrometheusRule CRDs (gardener's own,
/// [`support::seed_crds`]), so the rendered objects are admitted by their real schemas.
async fn seed_prerequisites(client: &Client) {
    support::seed_crds::install(
        client,
        &[
            "autoscaling.k8s.io_verticalpodautoscalers",
            "monitoring.coreos.com_prometheusrules",
        ],
    )
    .await;
    let objects = apply::parse_documents(
        r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: gardener-system-900
value: 999998900
---
apiVersion: v1
kind: Namespace
metadata:
  name: garden
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
        let (out, _) = support::helm::run(&lint);
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
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "PrometheusRule",
            "ConfigMap",
        ] {
            assert!(kinds.contains(&expected), "{expected} missing in {kinds:?}");
        }
        let config_maps = kinds.iter().filter(|k| **k == "ConfigMap").count();
        assert_eq!(
            config_maps,
            if values.is_some() { 2 } else { 1 },
            "the dashboard, and with imageVectorOverwrite its ConfigMap"
        );
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
        let priority_class = if values.is_some() {
            "gardener-system-800"
        } else {
            "gardener-system-900"
        };
        assert_eq!(pod["spec"]["priorityClassName"], priority_class);
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
        let timeout = if values.is_some() { 300 } else { 600 };
        assert!(
            args.contains(&format!("--gvisor-uninstall-timeout-seconds={timeout}").as_str()),
            "{args:?}"
        );
        if values.is_some() {
            assert!(args.contains(&"--gardener-version=v1.150.0"));
            assert!(args.contains(&"--os-types=debian,ubuntu,gardenlinux"));
            assert!(args.contains(&"--worker-types=local,openstack"));
            assert!(args.contains(&"--node-agent-secrets=never"));
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

/// The annotations gardener's seed monitoring reads (as runtime-gvisor and os-gardenlinux have
/// them): the pods name their scrape job, and the Service asks gardener-resource-manager's
/// NetworkPolicy controller to open the metrics port to the seed's scrape targets in `garden`
/// (issue #44 item 1).
#[test]
fn the_metrics_port_is_announced_for_the_seed_prometheus() {
    let objects = render("extensions-node", None);
    let service = objects.iter().find(|o| kind(o) == "Service").unwrap();
    let annotations = service.metadata.annotations.clone().unwrap_or_default();
    let port = service.data["spec"]["ports"][0]["port"].as_u64().unwrap();
    assert_eq!(
        annotations["networking.resources.gardener.cloud/from-all-seed-scrape-targets-allowed-ports"],
        format!(r#"[{{"port":{port},"protocol":"TCP"}}]"#)
    );
    assert_eq!(
        annotations["networking.resources.gardener.cloud/namespace-selectors"],
        r#"[{"matchLabels":{"kubernetes.io/metadata.name":"garden"}}]"#
    );
    assert_eq!(
        annotations["networking.resources.gardener.cloud/pod-label-selector-namespace-alias"],
        "extensions"
    );
    let deployment = objects.iter().find(|o| kind(o) == "Deployment").unwrap();
    let pod = &deployment.data["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(pod["prometheus.io/scrape"], "true");
    assert_eq!(pod["prometheus.io/port"], port.to_string());
    assert!(
        pod["prometheus.io/name"]
            .as_str()
            .is_some_and(|n| !n.is_empty()),
        "{pod}"
    );
}

/// Issue #44 item 2: the alerts go to the seed Prometheus (a PrometheusRule labelled
/// `prometheus: seed` beside the pods) and the dashboard to the seed's Plutono (a ConfigMap in
/// `garden`), both for the release's own `job`; `monitoring.enabled=false` renders neither
/// (a cluster without the prometheus-operator CRDs).
#[test]
fn seed_monitoring_ships_alerts_and_a_dashboard_for_its_job() {
    let release = "gardener-extension-node-os";
    let objects = render_release(release, "extension-node-os-x1", &[], &[]);
    let deployment = objects.iter().find(|o| kind(o) == "Deployment").unwrap();
    let job = &deployment.data["spec"]["template"]["metadata"]["annotations"]["prometheus.io/name"];
    assert_eq!(job, release);

    let rule = objects
        .iter()
        .find(|o| kind(o) == "PrometheusRule")
        .unwrap();
    assert_eq!(rule.name_any(), release);
    assert_eq!(
        rule.metadata.namespace.as_deref(),
        Some("extension-node-os-x1")
    );
    assert_eq!(rule.metadata.labels.as_ref().unwrap()["prometheus"], "seed");
    let text = serde_json::to_string(&rule.data["spec"]).unwrap();
    assert!(!text.contains("__"), "a placeholder is left: {text}");
    let rules: Vec<&Value> = rule.data["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(rules.len(), 5);
    for rule in rules {
        let expr = rule["expr"].as_str().unwrap();
        assert!(
            expr.contains(&format!(r#"job="{release}""#)),
            "{expr}: not this release's job"
        );
        assert_eq!(rule["labels"]["service"], release);
        assert_eq!(rule["labels"]["type"], "seed");
        assert_eq!(rule["labels"]["visibility"], "operator");
    }
    assert!(text.contains("namespace extension-node-os-x1"), "{text}");

    let dashboard = objects
        .iter()
        .find(|o| kind(o) == "ConfigMap" && o.metadata.namespace.as_deref() == Some("garden"))
        .unwrap();
    assert_eq!(dashboard.name_any(), format!("{release}-dashboard"));
    assert_eq!(
        dashboard.metadata.labels.as_ref().unwrap()["dashboard.monitoring.gardener.cloud/seed"],
        "true"
    );
    let json = dashboard.data["data"][format!("{release}.json")]
        .as_str()
        .unwrap();
    let board: Value = serde_json::from_str(json).unwrap();
    assert_eq!(board["title"], format!("Extension {release}"));
    assert_eq!(board["templating"]["list"][0]["current"]["value"], release);
    let uid = board["uid"].as_str().unwrap();
    assert!(uid.len() <= 40 && uid.starts_with("gen-"), "{uid}");
    assert!(!json.contains("__"), "a placeholder is left");

    let off = render_release(
        release,
        "extension-node-os-x1",
        &[],
        &["monitoring.enabled=false"],
    );
    assert!(
        !off.iter()
            .any(|o| kind(o) == "PrometheusRule" || kind(o) == "ConfigMap"),
        "{:?}",
        off.iter().map(kind).collect::<Vec<_>>()
    );
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

/// The generated registrations: file, name of both objects, and the `--controllers` the
/// ControllerDeployment's values yield.
const REGISTRATIONS: [(&str, &str, &str); 4] = [
    (
        "example/controller-registration.yaml",
        "gardener-extension-node",
        "containerruntime,operatingsystemconfig,worker",
    ),
    (
        "example/controller-registration-gvisor.yaml",
        "gardener-extension-node-gvisor",
        "containerruntime",
    ),
    (
        "example/controller-registration-os.yaml",
        "gardener-extension-node-os",
        "operatingsystemconfig",
    ),
    (
        "example/controller-registration-worker.yaml",
        "gardener-extension-node-worker",
        "worker",
    ),
];

/// The extension kind a `--controllers` entry reconciles.
fn controller_kind(controller: &str) -> &'static str {
    match controller {
        "containerruntime" => "ContainerRuntime",
        "operatingsystemconfig" => "OperatingSystemConfig",
        "worker" => "Worker",
        other => panic!("unknown controller {other}"),
    }
}

/// The ControllerDeployment and ControllerRegistration of a generated file.
fn registration_objects(file: &str) -> (DynamicObject, DynamicObject) {
    let text = std::fs::read_to_string(support::repo_root().join(file)).unwrap();
    let objects = apply::parse_documents(&text, file).unwrap();
    assert_eq!(objects.len(), 2, "{file}: one deployment, one registration");
    let find = |k: &str| {
        objects
            .iter()
            .find(|o| kind(o) == k)
            .unwrap_or_else(|| panic!("{file}: no {k}"))
            .clone()
    };
    (find("ControllerDeployment"), find("ControllerRegistration"))
}

/// The (kind, type) pairs a ControllerRegistration registers.
fn registered(registration: &DynamicObject) -> Vec<(String, String)> {
    registration.data["spec"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(
                r.get("primary").is_none_or(|p| p == true),
                "registered as primary: {r}"
            );
            (
                r["kind"].as_str().unwrap().to_string(),
                r["type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn registrations_embed_this_chart_and_split_the_default_types_by_component() {
    let source = support::repo_root().join(CHART);
    let values: Value =
        serde_norway::from_str(&std::fs::read_to_string(source.join("values.yaml")).unwrap())
            .unwrap();
    let mut defaults = vec![("ContainerRuntime".to_string(), "gvisor".to_string())];
    for t in values["controllers"]["operatingSystemConfig"]["osTypes"]
        .as_array()
        .unwrap()
    {
        defaults.push(("OperatingSystemConfig".into(), t.as_str().unwrap().into()));
    }
    for t in values["controllers"]["worker"]["workerTypes"]
        .as_array()
        .unwrap()
    {
        defaults.push(("Worker".into(), t.as_str().unwrap().into()));
    }

    let mut raw_charts = Vec::new();
    let mut by_components = Vec::new();
    for (file, name, controllers) in REGISTRATIONS {
        let (deployment, registration) = registration_objects(file);
        assert_eq!(deployment.name_any(), name, "{file}");
        assert_eq!(registration.name_any(), name, "{file}");
        assert_eq!(
            registration.data["spec"]["deployment"]["deploymentRefs"],
            json!([{ "name": name }]),
            "{file}: the registration deploys its own ControllerDeployment"
        );
        assert!(
            registration
                .metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key("security.gardener.cloud/pod-security-enforce"),
            "{file}"
        );
        // Exactly the default types of the kinds its controllers reconcile, in order.
        let kinds: Vec<&str> = controllers.split(',').map(controller_kind).collect();
        let expected: Vec<(String, String)> = defaults
            .iter()
            .filter(|(k, _)| kinds.contains(&k.as_str()))
            .cloned()
            .collect();
        assert_eq!(registered(&registration), expected, "{file}");
        if name != "gardener-extension-node" {
            by_components.extend(expected);
        }
        raw_charts.push(
            deployment.data["helm"]["rawChart"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    // The components together register what the combined registration does, each type once.
    by_components.sort();
    let mut all = defaults.clone();
    all.sort();
    assert_eq!(by_components, all);
    assert!(
        raw_charts.iter().all(|c| c == &raw_charts[0]),
        "every registration embeds the same chart"
    );

    let archive = base64::engine::general_purpose::STANDARD
        .decode(&raw_charts[0])
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
    let tag = values["image"]["tag"].as_str().unwrap();
    assert!(
        tag.starts_with('v') && !tag.contains("-dev"),
        "the default image tag must be a release tag: {tag}"
    );
}

/// The `--<flag>=` argument of the operator container of a rendered chart.
fn operator_arg(objects: &[DynamicObject], flag: &str) -> String {
    let deployment = objects.iter().find(|o| kind(o) == "Deployment").unwrap();
    let prefix = format!("--{flag}=");
    deployment.data["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix(&prefix))
        .map(str::to_string)
        .next()
        .unwrap_or_else(|| panic!("no {prefix}"))
}

/// The rules of the rendered ClusterRole as (apiGroup, resource) pairs.
fn granted_resources(objects: &[DynamicObject]) -> Vec<(String, String)> {
    let role = objects.iter().find(|o| kind(o) == "ClusterRole").unwrap();
    let role: ClusterRole = serde_json::from_value(serde_json::to_value(role).unwrap()).unwrap();
    let mut granted = Vec::new();
    for rule in role.rules.unwrap() {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                granted.push((group.clone(), resource.clone()));
            }
        }
    }
    granted
}

#[test]
fn each_registration_renders_only_its_controllers_under_names_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster_scoped: Vec<String> = Vec::new();
    // Plutono's sidecar writes every dashboard key into one folder.
    let mut dashboard_keys: Vec<String> = Vec::new();
    for (file, name, controllers) in REGISTRATIONS {
        let (deployment, _) = registration_objects(file);
        // gardenlet renders the chart with the registration's name as release name into
        // `extension-<installation>`; the values are the ControllerDeployment's.
        let values = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &values,
            serde_json::to_string(&deployment.data["helm"]["values"]).unwrap(),
        )
        .unwrap();
        let objects = render_release(
            name,
            &format!("extension-{name}"),
            &[values.to_str().unwrap()],
            &[],
        );
        assert_eq!(operator_arg(&objects, "controllers"), controllers, "{file}");
        for object in &objects {
            let cluster_wide = object.metadata.namespace.is_none()
                && matches!(
                    kind(object),
                    "ClusterRole"
                        | "ClusterRoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                );
            // The dashboard goes to `garden`, which every installation shares.
            let in_garden = object.metadata.namespace.as_deref() == Some("garden");
            if cluster_wide || in_garden {
                cluster_scoped.push(format!("{}/{}", kind(object), object.name_any()));
            }
            if in_garden {
                let keys = object.data["data"].as_object().unwrap();
                dashboard_keys.extend(keys.keys().cloned());
            }
        }
        // RBAC follows the enabled controllers: nobody but the Worker controller may touch
        // Deployments or machines, and the Worker controller needs no ManagedResource.
        let granted = granted_resources(&objects);
        let has = |group: &str, resource: &str| {
            granted
                .iter()
                .any(|(g, r)| g == group && r.starts_with(resource))
        };
        let worker = controllers.contains("worker");
        assert_eq!(has("apps", "deployments"), worker, "{file}: {granted:?}");
        assert_eq!(
            has("machine.sapcloud.io", "machine"),
            worker,
            "{file}: {granted:?}"
        );
        assert_eq!(
            has("resources.gardener.cloud", "managedresources"),
            controllers != "worker",
            "{file}: {granted:?}"
        );
        for controller in ["containerruntime", "operatingsystemconfig", "worker"] {
            let plural = format!("{controller}s");
            assert_eq!(
                has("extensions.gardener.cloud", &plural),
                controllers.contains(controller),
                "{file}: {granted:?}"
            );
        }
    }
    // Two installations on one seed never own the same cluster-scoped object or object in
    // `garden`, nor write the same dashboard file.
    let count = cluster_scoped.len();
    cluster_scoped.sort();
    cluster_scoped.dedup();
    assert_eq!(cluster_scoped.len(), count, "{cluster_scoped:?}");
    assert_eq!(count, 4 * 5, "{cluster_scoped:?}");
    let keys = dashboard_keys.len();
    dashboard_keys.sort();
    dashboard_keys.dedup();
    assert_eq!((dashboard_keys.len(), keys), (4, 4), "{dashboard_keys:?}");
}

/// The namespaces the rendered admission policy lets the operator write in, besides
/// `shoot--*`; `None` when no policy is rendered.
fn policy_namespaces(objects: &[DynamicObject]) -> Option<String> {
    let kinds: Vec<&str> = objects.iter().map(kind).collect();
    let policy = objects
        .iter()
        .find(|o| kind(o) == "ValidatingAdmissionPolicy")?;
    assert!(kinds.contains(&"ValidatingAdmissionPolicyBinding"));
    let variables = policy.data["spec"]["variables"].as_array().unwrap();
    assert_eq!(variables[0]["name"], "allowedNamespaces");
    Some(variables[0]["expression"].as_str().unwrap().to_string())
}

#[test]
fn admission_policy_is_on_by_default_optional_and_takes_extra_namespaces() {
    let release = |set: &[&str]| render_release("gardener-extension-node", "extension-a", &[], set);
    assert_eq!(
        policy_namespaces(&release(&[])).as_deref(),
        Some("['extension-a']")
    );
    assert_eq!(
        policy_namespaces(&release(&[
            "admissionPolicy.extraNamespaces={kube-system,garden}"
        ]))
        .as_deref(),
        Some("['extension-a', 'kube-system', 'garden']")
    );
    assert_eq!(
        policy_namespaces(&release(&["admissionPolicy.enabled=false"])),
        None
    );
}

/// The chart's comments carry no measured figures (they live in docs/benchmarks.md, which
/// the benchmarks rewrite), and an empty `priorityClassName` leaves the field out.
#[test]
fn values_quote_no_figures_and_the_priority_class_is_optional() {
    let values =
        std::fs::read_to_string(support::repo_root().join(CHART).join("values.yaml")).unwrap();
    for line in values.lines().filter(|l| l.trim_start().starts_with('#')) {
        for unit in ["MiB", "KiB", "GiB", " ms", "ms)"] {
            assert!(
                !line.contains(unit),
                "a measured figure in values.yaml: {line}"
            );
        }
    }
    let objects = render_release(
        "gardener-extension-node",
        "extension-a",
        &[],
        &["priorityClassName="],
    );
    let deployment = objects.iter().find(|o| kind(o) == "Deployment").unwrap();
    assert!(
        deployment.data["spec"]["template"]["spec"]
            .get("priorityClassName")
            .is_none()
    );
}

#[test]
fn chart_refuses_no_controller_and_an_unknown_node_agent_secrets_mode() {
    let none = [
        "controllers.containerRuntime.enabled=false",
        "controllers.operatingSystemConfig.enabled=false",
        "controllers.worker.enabled=false",
    ];
    let stderr = render_error(&none);
    assert!(
        stderr.contains("no controller enabled: set at least one of"),
        "{stderr}"
    );

    for mode in ["auto", "always", "never"] {
        let set = format!("controllers.operatingSystemConfig.nodeAgentSecrets={mode}");
        let objects = render_release("gardener-extension-node", "extension-test", &[], &[&set]);
        assert_eq!(operator_arg(&objects, "node-agent-secrets"), mode);
    }
    // `true`/`false` were the values before the modes existed; they must not pass silently.
    for mode in ["true", "false", "sometimes"] {
        let set = format!("controllers.operatingSystemConfig.nodeAgentSecrets={mode}");
        let stderr = render_error(&[&set]);
        assert!(
            stderr.contains(&format!(
                "nodeAgentSecrets must be one of auto, always, never (got \"{mode}\")"
            )),
            "{stderr}"
        );
    }
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
    // Install the chart's ServiceAccount, RBAC and admission policy for real (under a release
    // name of this test's own: cluster-scoped objects are named after the release, and the
    // access table installs the chart too).
    install_access_objects(&env.client, "lifecycle", &release, &[]).await;
    let kubeconfig = service_account_kubeconfig(&env, &release).await;
    let leader = format!("--leader-election-namespace={release}");
    let heartbeat = format!("--heartbeat-namespace={release}");
    let operator = OperatorProcess::start(
        &kubeconfig,
        &["--leader-election=true", &leader, &heartbeat],
    );

    // A shoot namespace with its Cluster.
    let shoot = shoot_env().await;
    wait_policy_in_force(&impersonating(&shoot, &release).await).await;
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
    // The deletion uninstalls first; GRM's rollout report is played by the stand-in.
    let grm = GvisorRolloutStandIn::start(client.clone(), ns);
    confirm_and_delete(&crs, "gvisor-worker-a").await;
    wait_gone(&crs, "gvisor-worker-a").await;
    drop(grm);

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

/// The user name the API server gives the chart's ServiceAccount in `release_namespace`.
fn service_account_user(release_namespace: &str) -> String {
    format!("system:serviceaccount:{release_namespace}:gardener-extension-node")
}

/// The chart's ServiceAccount, RBAC and admission policy, rendered as release `release` in
/// `namespace` with `values`, installed for real.
async fn install_access_objects(client: &Client, release: &str, namespace: &str, values: &[&str]) {
    let objects: Vec<DynamicObject> = render_release(release, namespace, values, &[])
        .into_iter()
        .filter(|o| {
            matches!(
                kind(o),
                "ServiceAccount"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "Role"
                    | "RoleBinding"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
            )
        })
        .collect();
    assert_eq!(
        objects.len(),
        7,
        "{:?}",
        objects.iter().map(kind).collect::<Vec<_>>()
    );
    apply::apply_all(client, &objects, namespace).await.unwrap();
}

/// A client that impersonates the chart's ServiceAccount in `release_namespace` (with the
/// groups the API server gives every ServiceAccount).
async fn impersonating(env: &TestEnv, release_namespace: &str) -> Client {
    let mut config = gardener_extension_node::kubeconfig::config_from_yaml(&env.kubeconfig)
        .await
        .unwrap();
    config.auth_info.impersonate = Some(service_account_user(release_namespace));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{release_namespace}"),
        "system:authenticated".into(),
    ]);
    Client::try_from(config).unwrap()
}

/// Waits until the API server enforces the admission policy for `client`'s user (it loads
/// new policies asynchronously): a dry-run create of a Secret in `kube-system` is denied by it.
async fn wait_policy_in_force(client: &Client) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let probe = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let secret: Secret =
        serde_json::from_value(Object::Secret.body("probe", "kube-system")).unwrap();
    wait_for(
        "the admission policy in force",
        Duration::from_secs(30),
        || async {
            match secrets.create(&probe, &secret).await {
                Err(kube::Error::Api(status))
                    if status.message.contains("ValidatingAdmissionPolicy") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// A fresh namespace named like a Gardener shoot namespace (`shoot--<project>--<name>`): the
/// admission policy lets the operator write Secrets and ManagedResources only there.
async fn shoot_env() -> TestEnv {
    let env = support::env().await;
    let namespace = format!("shoot--chart--{}", env.namespace);
    support::create_namespace(&env.client, &namespace).await;
    TestEnv { namespace, ..env }
}

/// Who sends a request of the access table.
#[derive(Debug, Clone, Copy)]
enum Who {
    /// The chart's ServiceAccount, all controllers enabled (the combined registration).
    Operator,
    /// The chart's ServiceAccount as the gVisor-only registration installs it.
    GvisorOnly,
    /// The admin (group `system:masters`): the policy does not apply to anyone else.
    Admin,
}

/// The kind of object a row of the access table reads or writes.
#[derive(Debug, Clone, Copy)]
enum Object {
    Secret,
    ManagedResource,
    Deployment,
    ConfigMap,
    Lease,
    Worker,
    MachineDeployment,
    MachineClass,
    Event,
    Pod,
}

impl Object {
    fn api_resource(self) -> kube::discovery::ApiResource {
        let (group, version, kind, plural) = match self {
            Object::Secret => ("", "v1", "Secret", "secrets"),
            Object::ManagedResource => (
                "resources.gardener.cloud",
                "v1alpha1",
                "ManagedResource",
                "managedresources",
            ),
            Object::Deployment => ("apps", "v1", "Deployment", "deployments"),
            Object::ConfigMap => ("", "v1", "ConfigMap", "configmaps"),
            Object::Lease => ("coordination.k8s.io", "v1", "Lease", "leases"),
            Object::Worker => ("extensions.gardener.cloud", "v1alpha1", "Worker", "workers"),
            Object::MachineDeployment => (
                "machine.sapcloud.io",
                "v1alpha1",
                "MachineDeployment",
                "machinedeployments",
            ),
            Object::MachineClass => (
                "machine.sapcloud.io",
                "v1alpha1",
                "MachineClass",
                "machineclasses",
            ),
            Object::Event => ("events.k8s.io", "v1", "Event", "events"),
            Object::Pod => ("", "v1", "Pod", "pods"),
        };
        kube::discovery::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    /// A minimal valid object of this resource in `namespace` (for create).
    fn body(self, name: &str, namespace: &str) -> Value {
        let resource = self.api_resource();
        let mut object = json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": name, "namespace": namespace},
        });
        match self {
            Object::Secret | Object::ConfigMap => object["data"] = json!({}),
            Object::ManagedResource => object["spec"] = json!({"secretRefs": []}),
            Object::Lease => object["spec"] = json!({"holderIdentity": "test"}),
            Object::Deployment => {
                object["spec"] = json!({
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}
                    }
                })
            }
            Object::MachineDeployment => object["spec"] = json!({"template": {}}),
            Object::MachineClass => object["providerSpec"] = json!({}),
            Object::Pod => {
                object["metadata"]["labels"] = json!({"role": "machine-controller-manager"});
                object["spec"] = json!({
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "c", "image": "example.invalid/c"}]
                })
            }
            // As the operator reports on a Worker.
            Object::Event => {
                for (field, value) in [
                    ("eventTime", "2026-12-01T10:00:00.000000Z"),
                    ("reportingController", "gardener-extension-node"),
                    ("reportingInstance", "test"),
                    ("action", "Reconcile"),
                    ("reason", "Reconciled"),
                    ("type", "Normal"),
                ] {
                    object[field] = json!(value);
                }
                object["regarding"] = json!({
                    "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Worker",
                    "name": "worker", "namespace": namespace,
                });
            }
            // Never created by a row (the test creates one Worker itself, as the admin).
            Object::Worker => unreachable!("the access table creates no Worker"),
        }
        object
    }
}

/// The request a row sends.
#[derive(Debug, Clone, Copy)]
enum Verb {
    Get,
    List,
    Create,
    /// A merge patch: `spec.replicas` for Deployments (what scaling sends), a label otherwise.
    Patch,
    /// A merge patch of the `status` subresource (what a reconcile's status update sends).
    PatchStatus,
    Delete,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy)]
enum Where {
    /// A `shoot--*` namespace.
    Shoot,
    /// The release namespace of the full chart.
    Release,
    /// A namespace that is neither (like the seed's `garden`).
    Other,
    /// `kube-system`, which the API server creates itself.
    KubeSystem,
}

/// How the API server answers a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Past authorization and admission (the request succeeded).
    Allowed,
    /// 403 from the authorizer (RBAC).
    DeniedByRbac,
    /// Denied by the chart's ValidatingAdmissionPolicy, with its message.
    DeniedByPolicy,
}

/// One request of the access table and the answer it must get.
struct Row {
    who: Who,
    verb: Verb,
    object: Object,
    at: Where,
    name: &'static str,
    expect: Outcome,
}

const fn row(
    who: Who,
    verb: Verb,
    object: Object,
    at: Where,
    name: &'static str,
    expect: Outcome,
) -> Row {
    Row {
        who,
        verb,
        object,
        at,
        name,
        expect,
    }
}

/// The one Deployment the operator touches (the Worker controller scales it), also the
/// name of MCM core's leader Lease.
const MCM: &str = "machine-controller-manager";

/// A pod of machine-controller-manager (the Worker controller deletes a stuck one).
const MCM_POD: &str = "machine-controller-manager-0";

/// What each request of the chart's ServiceAccount may do; rows run in order (creates before
/// the gets, patches and deletes of the same object).
const ACCESS: &[Row] = {
    use Object::{
        ConfigMap, Deployment, Event, Lease, MachineClass, MachineDeployment, ManagedResource, Pod,
        Secret, Worker,
    };
    use Outcome::{Allowed, DeniedByPolicy, DeniedByRbac};
    use Verb::{Create, Delete, Get, List, Patch, PatchStatus};
    use Where::{KubeSystem, Other, Release, Shoot};
    use Who::{Admin, GvisorOnly, Operator};
    const HEARTBEAT: &str = "gardener-extension-heartbeat";
    &[
        // Deployments: machine-controller-manager only, read and scaled, never listed or deleted.
        row(Operator, Get, Deployment, Shoot, MCM, Allowed),
        row(Operator, Patch, Deployment, Shoot, MCM, Allowed),
        row(Operator, Get, Deployment, Shoot, "other", DeniedByRbac),
        row(Operator, Patch, Deployment, Shoot, "other", DeniedByRbac),
        row(Operator, List, Deployment, Shoot, "", DeniedByRbac),
        row(Operator, Create, Deployment, Shoot, "new", DeniedByRbac),
        row(Operator, Delete, Deployment, Shoot, MCM, DeniedByRbac),
        row(GvisorOnly, Patch, Deployment, Shoot, MCM, DeniedByRbac),
        // ... and only in shoot namespaces (issue #26 item 10: RBAC alone allowed these).
        row(Operator, Patch, Deployment, KubeSystem, MCM, DeniedByPolicy),
        row(Operator, Patch, Deployment, Other, MCM, DeniedByPolicy),
        // Machine objects: in shoot namespaces only.
        row(
            Operator,
            Create,
            MachineDeployment,
            Shoot,
            "written",
            Allowed,
        ),
        row(
            Operator,
            Create,
            MachineDeployment,
            KubeSystem,
            "written",
            DeniedByPolicy,
        ),
        row(Operator, Create, MachineClass, Shoot, "written", Allowed),
        row(
            Operator,
            Create,
            MachineClass,
            Other,
            "written",
            DeniedByPolicy,
        ),
        row(
            GvisorOnly,
            Create,
            MachineDeployment,
            Shoot,
            "gvisor",
            DeniedByRbac,
        ),
        // Events: on the extension objects in shoot namespaces, nowhere else.
        row(Operator, Create, Event, Shoot, "written", Allowed),
        row(
            Operator,
            Create,
            Event,
            KubeSystem,
            "written",
            DeniedByPolicy,
        ),
        // Extension objects and their status: not outside shoot namespaces either.
        row(Operator, Patch, Worker, Other, "worker", DeniedByPolicy),
        row(
            Operator,
            PatchStatus,
            Worker,
            Other,
            "worker",
            DeniedByPolicy,
        ),
        // Secrets: written in shoot namespaces (and the release namespace) only.
        row(Operator, Create, Secret, Shoot, "written", Allowed),
        row(Operator, Get, Secret, Shoot, "written", Allowed),
        row(Operator, List, Secret, Shoot, "", Allowed),
        row(Operator, Patch, Secret, Shoot, "written", Allowed),
        row(Operator, Delete, Secret, Shoot, "written", Allowed),
        row(Operator, Create, Secret, Release, "own", Allowed),
        row(
            Operator,
            Create,
            Secret,
            KubeSystem,
            "written",
            DeniedByPolicy,
        ),
        row(Operator, Create, Secret, Other, "written", DeniedByPolicy),
        row(Operator, Patch, Secret, Other, "existing", DeniedByPolicy),
        row(Operator, Delete, Secret, Other, "existing", DeniedByPolicy),
        row(
            GvisorOnly,
            Create,
            Secret,
            KubeSystem,
            "written",
            DeniedByPolicy,
        ),
        // Reads are not narrowed by namespace: RBAC cannot, and the policy only sees writes.
        row(Operator, Get, Secret, Other, "existing", Allowed),
        // ManagedResources: the same namespaces as Secrets.
        row(Operator, Create, ManagedResource, Shoot, "written", Allowed),
        row(Operator, Patch, ManagedResource, Shoot, "written", Allowed),
        row(Operator, List, ManagedResource, Shoot, "", Allowed),
        row(Operator, Delete, ManagedResource, Shoot, "written", Allowed),
        row(
            GvisorOnly,
            Create,
            ManagedResource,
            Shoot,
            "gvisor",
            Allowed,
        ),
        row(
            Operator,
            Create,
            ManagedResource,
            Other,
            "written",
            DeniedByPolicy,
        ),
        row(
            Operator,
            Create,
            ManagedResource,
            KubeSystem,
            "written",
            DeniedByPolicy,
        ),
        row(
            Operator,
            Delete,
            ManagedResource,
            Other,
            "existing",
            DeniedByPolicy,
        ),
        // Kinds of disabled controllers and kinds the code never writes.
        row(Operator, List, Worker, Shoot, "", Allowed),
        row(GvisorOnly, List, Worker, Shoot, "", DeniedByRbac),
        row(Operator, Create, ConfigMap, Shoot, "written", DeniedByRbac),
        // Leases: the two names in the release namespace, nothing elsewhere.
        row(Operator, Create, Lease, Release, HEARTBEAT, Allowed),
        row(Operator, Patch, Lease, Release, HEARTBEAT, Allowed),
        row(Operator, Get, Lease, Release, "other", DeniedByRbac),
        row(Operator, Create, Lease, Shoot, "lease", DeniedByRbac),
        // machine-controller-manager's leader Leases: read by name in shoot namespaces, no more.
        row(Operator, Get, Lease, Shoot, MCM, Allowed),
        row(Operator, Get, Lease, Shoot, "other", DeniedByRbac),
        row(Operator, Patch, Lease, Shoot, MCM, DeniedByRbac),
        row(GvisorOnly, Get, Lease, Shoot, MCM, DeniedByRbac),
        // machine-controller-manager's pods: listed and deleted (a stuck MCM), in shoot
        // namespaces only.
        row(Operator, List, Pod, Shoot, "", Allowed),
        row(Operator, Get, Pod, Shoot, MCM_POD, DeniedByRbac),
        row(Operator, Delete, Pod, Shoot, MCM_POD, Allowed),
        row(Operator, Delete, Pod, Other, MCM_POD, DeniedByPolicy),
        row(GvisorOnly, List, Pod, Shoot, "", DeniedByRbac),
        // The policy binds the operator only.
        row(Admin, Create, Secret, KubeSystem, "by-admin", Allowed),
        row(Admin, Delete, Secret, KubeSystem, "by-admin", Allowed),
    ]
};

/// Sends the request of `row`; `Ok` when the API server accepted it.
async fn send(client: &Client, namespace: &str, row: &Row) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &row.object.api_resource());
    match row.verb {
        Verb::Get => api.get(row.name).await.map(drop),
        Verb::List => api.list(&ListParams::default()).await.map(drop),
        Verb::Create => api
            .create(
                &PostParams::default(),
                &serde_json::from_value(row.object.body(row.name, namespace)).unwrap(),
            )
            .await
            .map(drop),
        Verb::Patch => {
            let patch = match row.object {
                Object::Deployment => json!({"spec": {"replicas": 0}}),
                _ => json!({"metadata": {"labels": {"patched": "true"}}}),
            };
            api.patch(row.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(drop)
        }
        Verb::PatchStatus => api
            .patch_status(
                row.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"observedGeneration": 1}})),
            )
            .await
            .map(drop),
        Verb::Delete => api
            .delete(row.name, &DeleteParams::default())
            .await
            .map(drop),
    }
}

#[tokio::test]
async fn rbac_and_admission_policy_allow_and_deny_row_by_row() {
    let release_env = support::env().await;
    let release = release_env.namespace.clone();
    let gvisor_release = support::env().await.namespace;
    let other = support::env().await.namespace;
    let shoot = shoot_env().await;
    let admin = &shoot.client;
    install_access_objects(admin, "gardener-extension-node", &release, &[]).await;
    let gvisor_values = tempfile::NamedTempFile::new().unwrap();
    let (gvisor_deployment, _) =
        registration_objects("example/controller-registration-gvisor.yaml");
    std::fs::write(
        gvisor_values.path(),
        serde_json::to_string(&gvisor_deployment.data["helm"]["values"]).unwrap(),
    )
    .unwrap();
    install_access_objects(
        admin,
        "gardener-extension-node-gvisor",
        &gvisor_release,
        &[gvisor_values.path().to_str().unwrap()],
    )
    .await;

    // What the rows read, patch or delete without creating it first.
    create::<Deployment>(
        admin,
        &shoot.namespace,
        fixtures::mcm_deployment_json(&shoot.namespace, 1),
    )
    .await;
    let other_deployment = Object::Deployment.body("other", &shoot.namespace);
    create::<Deployment>(admin, &shoot.namespace, other_deployment).await;
    // machine-controller-manager outside shoot namespaces, and a Worker of a type no operator
    // serves: the policy must stop writes to both.
    for namespace in ["kube-system", other.as_str()] {
        create::<Deployment>(
            admin,
            namespace,
            fixtures::mcm_deployment_json(namespace, 1),
        )
        .await;
    }
    for namespace in [shoot.namespace.as_str(), other.as_str()] {
        // The ServiceAccount admission wants the pod's account (no controller makes it here).
        let account = json!({"metadata": {"name": "default", "namespace": namespace}});
        create::<ServiceAccount>(admin, namespace, account).await;
        create::<Pod>(admin, namespace, Object::Pod.body(MCM_POD, namespace)).await;
    }
    create::<Lease>(
        admin,
        &shoot.namespace,
        Object::Lease.body(MCM, &shoot.namespace),
    )
    .await;
    let mut worker = fixtures::worker_json(&other);
    worker["spec"]["type"] = json!("unserved");
    create::<Worker>(admin, &other, worker).await;
    create::<Secret>(admin, &other, Object::Secret.body("existing", &other)).await;
    let managed_resources: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        &other,
        &Object::ManagedResource.api_resource(),
    );
    managed_resources
        .create(
            &PostParams::default(),
            &serde_json::from_value(Object::ManagedResource.body("existing", &other)).unwrap(),
        )
        .await
        .unwrap();

    let operator = impersonating(&shoot, &release).await;
    let gvisor_only = impersonating(&shoot, &gvisor_release).await;
    for client in [&operator, &gvisor_only] {
        wait_policy_in_force(client).await;
    }

    let mut mismatches = Vec::new();
    for row in ACCESS {
        let (client, release_namespace) = match row.who {
            Who::Operator => (&operator, release.as_str()),
            Who::GvisorOnly => (&gvisor_only, gvisor_release.as_str()),
            Who::Admin => (admin, release.as_str()),
        };
        let namespace = match row.at {
            Where::Shoot => shoot.namespace.as_str(),
            Where::Release => release.as_str(),
            Where::Other => other.as_str(),
            Where::KubeSystem => "kube-system",
        };
        let policy = match row.who {
            Who::GvisorOnly => "gardener-extension-node-gvisor.extensions.gardener.cloud",
            _ => "gardener-extension-node.extensions.gardener.cloud",
        };
        let outcome = match send(client, namespace, row).await {
            Ok(()) => Outcome::Allowed,
            Err(kube::Error::Api(status))
                if status.code == 403
                    && status.message.contains(&format!(
                        "User \"{}\" cannot",
                        service_account_user(release_namespace)
                    )) =>
            {
                Outcome::DeniedByRbac
            }
            Err(kube::Error::Api(status))
                if status.code == 403
                    && status
                        .message
                        .contains(&format!("ValidatingAdmissionPolicy '{policy}'"))
                    && status.message.contains(&format!(
                        "{} may write {} only in shoot namespaces (shoot--*) and {release_namespace}, not in namespace {namespace}",
                        service_account_user(release_namespace),
                        row.object.api_resource().plural
                    )) =>
            {
                Outcome::DeniedByPolicy
            }
            Err(error) => {
                mismatches.push(format!(
                    "{:?} {:?} {:?} {namespace}/{}: unexpected error {error}",
                    row.who, row.verb, row.object, row.name
                ));
                continue;
            }
        };
        if outcome != row.expect {
            mismatches.push(format!(
                "{:?} {:?} {:?} {namespace}/{}: expected {:?}, got {outcome:?}",
                row.who, row.verb, row.object, row.name, row.expect
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
