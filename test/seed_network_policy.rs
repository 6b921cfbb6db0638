//! Integration (issue #44 item 1): the real gardener-resource-manager's NetworkPolicy
//! controller, run as a seed's GRM runs it, opens the operator's metrics port to the seed
//! Prometheus in `garden`, and only to it, from the Service of the chart gardenlet installs.
//!
//! The seed is this test binary's kube-apiserver, set up as gardenlet sets up a seed:
//!
//! - `garden` with the seed Prometheus' pod, labelled as gardener has prometheus-operator label
//!   it (among them `networking.resources.gardener.cloud/to-extensions-all-seed-scrape-targets`),
//!   the cache Prometheus' pod (a scrape target peer too, but not of extensions) and another
//!   pod;
//! - the extension namespace gardenlet creates for a ControllerInstallation
//!   (`extension-<installation>`, `gardener.cloud/role: extension`), with the chart rendered by
//!   the real helm as gardenlet renders it (release: the ControllerRegistration's name) and its
//!   Service applied;
//! - a shoot namespace (`gardener.cloud/role: shoot`) with a pod labelled exactly like the
//!   seed Prometheus;
//! - gardenlet's `deny-all` NetworkPolicy in all three namespaces.
//!
//! GRM (built by `hack/envtest.sh`) runs with its NetworkPolicy controller and a seed's namespace
//! selectors ([`NetworkPolicyController::seed`]). Whether a connection is let through is decided
//! by [`admits`], the NetworkPolicy rules over namespace labels, pod labels and ports, against
//! every policy in the cluster, so the assertions hold for any policy shape that means the same.
//! Removing any one of the Service's three annotations closes the port again: GRM deletes the
//! policies and makes no other (before the chart fix, the Service had only the first).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use gardener_extension_node::devenv::{
    self, NetworkPolicyController, ResourceManager, ResourceManagerOptions, apply,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

/// The ControllerRegistration's name: gardenlet's release name for the chart.
const REGISTRATION: &str = "gardener-extension-node";
/// A ControllerInstallation of it (gardener names them `<registration>-<random>`).
const INSTALLATION: &str = "gardener-extension-node-7xk2p";
const GARDEN: &str = "garden";

const ALLOWED_PORTS: &str =
    "networking.resources.gardener.cloud/from-all-seed-scrape-targets-allowed-ports";
const NAMESPACE_SELECTORS: &str = "networking.resources.gardener.cloud/namespace-selectors";
const ALIAS: &str = "networking.resources.gardener.cloud/pod-label-selector-namespace-alias";
/// The labels GRM puts on the policies it makes for a Service.
const SERVICE_NAME_LABEL: &str = "networking.resources.gardener.cloud/service-name";
const SERVICE_NAMESPACE_LABEL: &str = "networking.resources.gardener.cloud/service-namespace";

const TIMEOUT: Duration = Duration::from_secs(60);

fn extension_namespace() -> String {
    format!("extension-{INSTALLATION}")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The labels of a Prometheus pod in `garden`: prometheus-operator's for the StatefulSet of
/// Prometheus `name`, gardener's pod metadata for it, and `additional` (gardenlet's
/// `AdditionalPodLabels` of that Prometheus).
fn prometheus_pod_labels(name: &str, additional: &[&str]) -> BTreeMap<String, String> {
    let app = format!("prometheus-{name}");
    let mut labels = labels(&[
        ("app.kubernetes.io/name", "prometheus"),
        ("app.kubernetes.io/instance", name),
        ("app.kubernetes.io/managed-by", "prometheus-operator"),
        ("prometheus", name),
        ("operator.prometheus.io/name", name),
        ("operator.prometheus.io/shard", "0"),
        ("networking.gardener.cloud/to-dns", "allowed"),
        ("networking.gardener.cloud/to-runtime-apiserver", "allowed"),
        ("observability.gardener.cloud/app", app.as_str()),
    ]);
    for key in additional {
        labels.insert(
            format!("networking.resources.gardener.cloud/{key}"),
            "allowed".into(),
        );
    }
    labels
}

/// The seed Prometheus (gardenlet: `to-all-seed-scrape-targets`,
/// `to-extensions-all-seed-scrape-targets` and the shoots' VPA recommenders).
fn seed_prometheus_labels() -> BTreeMap<String, String> {
    prometheus_pod_labels(
        "seed",
        &[
            "to-all-seed-scrape-targets",
            "to-extensions-all-seed-scrape-targets",
            "to-all-shoots-vpa-recommender-tcp-8942",
        ],
    )
}

/// The cache Prometheus: a scrape target peer of `garden` only, not of the extensions.
fn cache_prometheus_labels() -> BTreeMap<String, String> {
    prometheus_pod_labels("cache", &["to-all-seed-scrape-targets"])
}

/// A pod as NetworkPolicies see it.
#[derive(Debug, Clone)]
struct Endpoint {
    /// For assertion messages.
    what: &'static str,
    namespace: String,
    namespace_labels: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    /// Named container ports: a policy port may name one of the destination's.
    ports: BTreeMap<String, i32>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Direction {
    Ingress,
    Egress,
}

/// Whether `selector` selects an object with `labels` (`matchLabels` and `matchExpressions`;
/// the empty selector selects everything).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("unknown label selector operator {other}"),
        }
    });
    by_labels && by_expressions
}

/// Whether a policy of `namespace` names `peer` in one of a rule's peers (no peers: everyone).
fn peers_match(peers: Option<&Vec<NetworkPolicyPeer>>, namespace: &str, peer: &Endpoint) -> bool {
    let Some(peers) = peers.filter(|p| !p.is_empty()) else {
        return true;
    };
    peers.iter().any(|p| {
        // Pods are told apart by labels here, not by addresses.
        assert!(
            p.ip_block.is_none(),
            "ipBlock peers are not modelled: {p:?}"
        );
        assert!(
            p.namespace_selector.is_some() || p.pod_selector.is_some(),
            "empty peer: {p:?}"
        );
        let namespace_ok = match &p.namespace_selector {
            None => peer.namespace == namespace,
            Some(selector) => selects(selector, &peer.namespace_labels),
        };
        let pod_ok = p
            .pod_selector
            .as_ref()
            .is_none_or(|selector| selects(selector, &peer.labels));
        namespace_ok && pod_ok
    })
}

/// Whether one of a rule's ports is `port`/`protocol` at `destination` (no ports: all).
fn ports_match(
    ports: Option<&Vec<NetworkPolicyPort>>,
    destination: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return true;
    };
    ports.iter().any(|p| {
        let protocol_ok = p.protocol.as_deref().unwrap_or("TCP") == protocol;
        let port_ok = match &p.port {
            None => true,
            Some(IntOrString::Int(first)) => match p.end_port {
                Some(last) => (*first..=last).contains(&port),
                None => *first == port,
            },
            Some(IntOrString::String(name)) => destination.ports.get(name) == Some(&port),
        };
        protocol_ok && port_ok
    })
}

/// A rule's peers and ports (ingress: `from`, egress: `to`).
type Rule<'a> = (
    Option<&'a Vec<NetworkPolicyPeer>>,
    Option<&'a Vec<NetworkPolicyPort>>,
);

/// Whether `policy` restricts `direction` of the pods it selects (`policyTypes`; when unset,
/// ingress always and egress when it has egress rules).
fn restricts(policy: &NetworkPolicy, direction: Direction) -> bool {
    let spec = policy.spec.as_ref().unwrap();
    match &spec.policy_types {
        Some(types) => types.iter().any(|t| {
            t == match direction {
                Direction::Ingress => "Ingress",
                Direction::Egress => "Egress",
            }
        }),
        None => direction == Direction::Ingress || spec.egress.is_some(),
    }
}

/// Whether `policies` let the side of `direction` through: egress of `from`, or ingress of
/// `to`. A pod no policy restricts in that direction is open; one that some restrict is open
/// only to what a rule of one of them names.
fn direction_allows(
    policies: &[NetworkPolicy],
    direction: Direction,
    from: &Endpoint,
    to: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    let (subject, peer) = match direction {
        Direction::Ingress => (to, from),
        Direction::Egress => (from, to),
    };
    let mut restricted = false;
    for policy in policies {
        let namespace = policy.namespace().unwrap();
        let spec = policy.spec.as_ref().unwrap();
        let pod_selector = spec.pod_selector.clone().unwrap_or_default();
        if namespace != subject.namespace
            || !selects(&pod_selector, &subject.labels)
            || !restricts(policy, direction)
        {
            continue;
        }
        restricted = true;
        let rules: Vec<Rule> = match direction {
            Direction::Ingress => spec
                .ingress
                .iter()
                .flatten()
                .map(|r| (r.from.as_ref(), r.ports.as_ref()))
                .collect(),
            Direction::Egress => spec
                .egress
                .iter()
                .flatten()
                .map(|r| (r.to.as_ref(), r.ports.as_ref()))
                .collect(),
        };
        if rules.iter().any(|(peers, ports)| {
            peers_match(*peers, &namespace, peer) && ports_match(*ports, to, port, protocol)
        }) {
            return true;
        }
    }
    !restricted
}

/// Whether `policies` let `from` open a connection to `to` on `port`/`protocol`: the egress
/// side in `from`'s namespace and the ingress side in `to`'s must both allow it.
fn admits(
    policies: &[NetworkPolicy],
    from: &Endpoint,
    to: &Endpoint,
    port: i32,
    protocol: &str,
) -> bool {
    direction_allows(policies, Direction::Egress, from, to, port, protocol)
        && direction_allows(policies, Direction::Ingress, from, to, port, protocol)
}

/// gardenlet's `deny-all` NetworkPolicy (its NetworkPolicy controller puts it into `garden`,
/// shoot, istio, exposure class and extension namespaces).
fn deny_all(namespace: &str) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {
            "name": "deny-all",
            "namespace": namespace,
            "annotations": {
                "gardener.cloud/description":
                    "Disables all ingress and egress traffic into/from this namespace.",
            },
        },
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }))
    .unwrap()
}

async fn create_namespace(client: &Client, name: &str, labels: BTreeMap<String, String>) {
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

/// A pod (never scheduled: GRM only reads its labels) and, first, the namespace's default
/// ServiceAccount, which no controller-manager makes here.
async fn create_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
) {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &sa)
        .await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

/// An endpoint in `namespace` with the namespace's labels as the API server has them (with the
/// `kubernetes.io/metadata.name` label it sets itself).
async fn endpoint(
    client: &Client,
    what: &'static str,
    namespace: &str,
    labels: BTreeMap<String, String>,
    ports: BTreeMap<String, i32>,
) -> Endpoint {
    let ns = Api::<Namespace>::all(client.clone())
        .get(namespace)
        .await
        .unwrap();
    Endpoint {
        what,
        namespace: namespace.to_string(),
        namespace_labels: ns.labels().clone(),
        labels,
        ports,
    }
}

async fn all_policies(client: &Client) -> Vec<NetworkPolicy> {
    Api::<NetworkPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// The policies GRM made for the chart's Service.
async fn service_policies(client: &Client, service: &str) -> Vec<NetworkPolicy> {
    let selector = format!(
        "{SERVICE_NAME_LABEL}={service},{SERVICE_NAMESPACE_LABEL}={}",
        extension_namespace()
    );
    Api::<NetworkPolicy>::all(client.clone())
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

/// `namespace/name: spec` in one line each (assertion messages and the test's output).
fn short(policies: &[NetworkPolicy]) -> String {
    policies
        .iter()
        .map(|p| {
            format!(
                "{}/{}: {}",
                p.namespace().unwrap_or_default(),
                p.name_any(),
                serde_json::to_string(&p.spec).unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `check` every 200 ms until it returns `Ok`; panics after [`TIMEOUT`] with `what`,
/// the last observation and the tail of GRM's log.
async fn eventually<T, F, Fut>(what: &str, grm: &ResourceManager, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                let log = std::fs::read_to_string(grm.log_path()).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                panic!(
                    "timed out after {TIMEOUT:?} waiting for {what}; last:\n{last}\nGRM log tail:\n{}",
                    lines[lines.len().saturating_sub(30)..].join("\n")
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// All policies once they let `from` reach `to` on `port`/TCP; else the Service's policies.
async fn open(
    client: &Client,
    service: &str,
    from: &Endpoint,
    to: &Endpoint,
    port: i32,
) -> Result<Vec<NetworkPolicy>, String> {
    let policies = all_policies(client).await;
    if admits(&policies, from, to, port, "TCP") {
        Ok(policies)
    } else {
        Err(short(&service_policies(client, service).await))
    }
}

/// `Ok` once GRM keeps no policy for the Service and `from` does not reach `to` on `port`/TCP.
async fn closed(
    client: &Client,
    service: &str,
    from: &Endpoint,
    to: &Endpoint,
    port: i32,
) -> Result<(), String> {
    let left = service_policies(client, service).await;
    if left.is_empty() && !admits(&all_policies(client).await, from, to, port, "TCP") {
        Ok(())
    } else {
        Err(short(&left))
    }
}

/// `object` with `annotation` gone from its metadata.
fn without_annotation(object: &DynamicObject, annotation: &str) -> DynamicObject {
    let mut object = object.clone();
    let removed = object
        .metadata
        .annotations
        .as_mut()
        .and_then(|a| a.remove(annotation));
    assert!(removed.is_some(), "the rendered Service has {annotation}");
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_prometheus_and_only_it_reaches_the_metrics_port_through_grm_policies() {
    let started = Instant::now();
    let env = support::env().await;
    let client = env.client.clone();
    let extension = extension_namespace();
    // support::env's namespace is labelled as a shoot namespace.
    let shoot = env.namespace.clone();

    // The seed as gardenlet sets it up.
    create_namespace(&client, GARDEN, BTreeMap::new()).await;
    create_namespace(
        &client,
        &extension,
        labels(&[
            ("gardener.cloud/role", "extension"),
            (
                "controllerregistration.core.gardener.cloud/name",
                REGISTRATION,
            ),
            (
                "high-availability-config.resources.gardener.cloud/consider",
                "true",
            ),
        ]),
    )
    .await;
    for namespace in [GARDEN, extension.as_str(), shoot.as_str()] {
        Api::<NetworkPolicy>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &deny_all(namespace))
            .await
            .unwrap();
    }
    create_pod(
        &client,
        GARDEN,
        "prometheus-seed-0",
        &seed_prometheus_labels(),
    )
    .await;
    create_pod(
        &client,
        GARDEN,
        "prometheus-cache-0",
        &cache_prometheus_labels(),
    )
    .await;
    let other_garden_labels = labels(&[("app", "other")]);
    create_pod(&client, GARDEN, "other", &other_garden_labels).await;
    create_pod(
        &client,
        &shoot,
        "prometheus-seed-0",
        &seed_prometheus_labels(),
    )
    .await;

    // The chart as gardenlet renders it for the ControllerInstallation; its Service is GRM's
    // input.
    let objects = support::helm::template(REGISTRATION, &extension);
    let kind = |o: &&DynamicObject| o.types.as_ref().map(|t| t.kind.clone());
    let service = objects
        .iter()
        .find(|o| kind(o).as_deref() == Some("Service"))
        .unwrap()
        .clone();
    let deployment = objects
        .iter()
        .find(|o| kind(o).as_deref() == Some("Deployment"))
        .unwrap();
    assert_eq!(service.data["spec"]["ports"][0]["targetPort"], "metrics");
    apply::apply_object(&client, &service, &extension, false)
        .await
        .unwrap();

    // The operator's pod as the Deployment makes it.
    let template = &deployment.data["spec"]["template"];
    let operator_labels: BTreeMap<String, String> =
        serde_json::from_value(template["metadata"]["labels"].clone()).unwrap();
    let operator_ports: BTreeMap<String, i32> = template["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                i32::try_from(p["containerPort"].as_i64().unwrap()).unwrap(),
            )
        })
        .collect();
    let metrics = operator_ports["metrics"];
    let operator = endpoint(
        &client,
        "the operator",
        &extension,
        operator_labels,
        operator_ports,
    )
    .await;
    let other_in_extension = endpoint(
        &client,
        "another pod of the extension namespace",
        &extension,
        labels(&[("app.kubernetes.io/name", "something-else")]),
        BTreeMap::new(),
    )
    .await;
    let seed_prometheus = endpoint(
        &client,
        "the seed Prometheus",
        GARDEN,
        seed_prometheus_labels(),
        BTreeMap::new(),
    )
    .await;
    let cache_prometheus = endpoint(
        &client,
        "the cache Prometheus",
        GARDEN,
        cache_prometheus_labels(),
        BTreeMap::new(),
    )
    .await;
    let other_garden = endpoint(
        &client,
        "another pod of garden",
        GARDEN,
        other_garden_labels,
        BTreeMap::new(),
    )
    .await;
    let shoot_lookalike = endpoint(
        &client,
        "a pod of a shoot namespace labelled as the seed Prometheus",
        &shoot,
        seed_prometheus_labels(),
        BTreeMap::new(),
    )
    .await;

    // gardenlet's deny-all alone keeps the port closed.
    assert!(
        !admits(
            &all_policies(&client).await,
            &seed_prometheus,
            &operator,
            metrics,
            "TCP"
        ),
        "deny-all lets the seed Prometheus through"
    );

    // The seed's GRM: source and target are the seed.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("seed.kubeconfig");
    std::fs::write(&kubeconfig, &env.kubeconfig).unwrap();
    let grm = ResourceManager::start(ResourceManagerOptions {
        assets: devenv::resolve_assets(None, &support::repo_root()).expect("envtest binaries"),
        state_dir: dir.path().join("grm"),
        reuse_state: false,
        source_kubeconfig: kubeconfig.clone(),
        target_kubeconfig: kubeconfig,
        namespaces: vec![GARDEN.to_string()],
        sync_period: Duration::from_secs(60),
        health_sync_period: Duration::from_secs(60),
        remove_state_on_exit: true,
        csr_approver_machine_namespace: None,
        node_agent_authorizer: None,
        network_policy: Some(NetworkPolicyController::seed()),
        resource_class: None,
    })
    .await
    .expect("gardener-resource-manager starts");
    let grm_started = Instant::now();

    let service_name = service.name_any();
    let opened = || open(&client, &service_name, &seed_prometheus, &operator, metrics);
    let policies = eventually(
        "GRM's policies to admit the seed Prometheus to the metrics port",
        &grm,
        opened,
    )
    .await;
    let opened_after = grm_started.elapsed();

    // Exactly two policies for the Service: ingress in the extension namespace, egress in garden.
    let generated = service_policies(&client, &service_name).await;
    eprintln!(
        "GRM's policies for the Service (after {opened_after:?}):\n{}",
        short(&generated)
    );
    let mut shapes: Vec<(String, Vec<String>)> = generated
        .iter()
        .map(|p| {
            (
                p.namespace().unwrap(),
                p.spec
                    .as_ref()
                    .unwrap()
                    .policy_types
                    .clone()
                    .unwrap_or_default(),
            )
        })
        .collect();
    shapes.sort();
    assert_eq!(
        shapes,
        vec![
            (extension.clone(), vec!["Ingress".to_string()]),
            (GARDEN.to_string(), vec!["Egress".to_string()]),
        ],
        "{}",
        short(&generated)
    );

    // Nobody else, and nothing else.
    for from in [&cache_prometheus, &other_garden, &shoot_lookalike] {
        assert!(
            !admits(&policies, from, &operator, metrics, "TCP"),
            "{} reaches the metrics port:\n{}",
            from.what,
            short(&generated)
        );
    }
    for (port, protocol) in [
        (metrics + 1, "TCP"),
        (443, "TCP"),
        (metrics, "UDP"),
        (metrics, "SCTP"),
    ] {
        assert!(
            !admits(&policies, &seed_prometheus, &operator, port, protocol),
            "the seed Prometheus reaches the operator on {port}/{protocol}:\n{}",
            short(&generated)
        );
    }
    assert!(
        !admits(
            &policies,
            &seed_prometheus,
            &other_in_extension,
            metrics,
            "TCP"
        ),
        "the seed Prometheus reaches {}:\n{}",
        other_in_extension.what,
        short(&generated)
    );

    // Each annotation is needed: without it, GRM keeps no policy for the Service (it deletes
    // what it made and makes nothing else) and the port is closed; with it back, open again.
    for annotation in [ALIAS, NAMESPACE_SELECTORS, ALLOWED_PORTS] {
        apply::apply_object(
            &client,
            &without_annotation(&service, annotation),
            &extension,
            false,
        )
        .await
        .unwrap();
        let gone = || closed(&client, &service_name, &seed_prometheus, &operator, metrics);
        eventually(&format!("no policy without {annotation}"), &grm, gone).await;
        // And none comes back while the annotation stays away.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let left = service_policies(&client, &service_name).await;
        assert!(left.is_empty(), "without {annotation}:\n{}", short(&left));

        apply::apply_object(&client, &service, &extension, false)
            .await
            .unwrap();
        eventually(
            &format!("the port open again with {annotation} back"),
            &grm,
            opened,
        )
        .await;
    }
    eprintln!(
        "seed_network_policy: policies after {opened_after:?} of GRM, {:?} in all",
        started.elapsed()
    );
}

/// The evaluator itself, on hand-made policies (no cluster).
#[test]
fn admits_follows_the_network_policy_rules() {
    let pod = |namespace: &str, pairs: &[(&str, &str)]| Endpoint {
        what: "pod",
        namespace: namespace.to_string(),
        namespace_labels: labels(&[("kubernetes.io/metadata.name", namespace)]),
        labels: labels(pairs),
        ports: BTreeMap::new(),
    };
    let a = pod("a", &[("app", "client")]);
    let mut b = pod("b", &[("app", "server")]);
    b.ports.insert("web".into(), 8080);
    let policy = |namespace: &str, spec: serde_json::Value| -> NetworkPolicy {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": namespace}, "spec": spec}),
        )
        .unwrap()
    };

    // No policy: open.
    assert!(admits(&[], &a, &b, 8080, "TCP"));
    // deny-all on either side closes.
    assert!(!admits(&[deny_all("a")], &a, &b, 8080, "TCP"));
    assert!(!admits(&[deny_all("b")], &a, &b, 8080, "TCP"));
    // An ingress rule by namespace and pod, on a named port of the destination.
    let ingress = policy(
        "b",
        json!({
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "a"}},
                    "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["client"]}]},
                }],
                "ports": [{"port": "web"}],
            }],
        }),
    );
    let policies = [deny_all("b"), ingress];
    assert!(admits(&policies, &a, &b, 8080, "TCP"));
    assert!(!admits(&policies, &a, &b, 8081, "TCP"));
    assert!(!admits(&policies, &a, &b, 8080, "UDP"));
    assert!(!admits(
        &policies,
        &pod("a", &[("app", "other")]),
        &b,
        8080,
        "TCP"
    ));
    assert!(!admits(
        &policies,
        &pod("c", &[("app", "client")]),
        &b,
        8080,
        "TCP"
    ));
    // A peer with a pod selector only is of the policy's own namespace.
    let same_namespace = policy(
        "b",
        json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
    );
    assert!(!admits(
        std::slice::from_ref(&same_namespace),
        &a,
        &b,
        8080,
        "TCP"
    ));
    assert!(admits(&[same_namespace], &pod("b", &[]), &b, 1, "TCP"));
    // Egress: a range of ports, NotIn matching a missing label.
    let egress = policy(
        "a",
        json!({
            "podSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"port": 8000, "endPort": 8100, "protocol": "TCP"}]}],
        }),
    );
    let policies = [deny_all("a"), egress];
    assert!(admits(&policies, &a, &b, 8080, "TCP"));
    assert!(!admits(&policies, &a, &b, 8200, "TCP"));
    assert!(!admits(
        &policies,
        &pod("a", &[("tier", "x")]),
        &b,
        8080,
        "TCP"
    ));
}
