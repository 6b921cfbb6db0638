//! Integration: the shoot monitoring of our node agents (`src/controllers/operatingsystemconfig/monitoring`)
//! shipped by the operator and applied by the real gardener-resource-manager of the seed
//! (class `seed`) into a seed that serves prometheus-operator's real CustomResourceDefinitions
//! (gardener v1.149.3's `example/seed-crds/`, as every Gardener seed has them): the objects pass their schemas,
//! the ScrapeConfig keeps exactly the nodes of the node-agent secrets we ship, and the
//! monitoring goes with the last of them.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gardener_extension_node::api::{
    Cluster, LastOperationType, ManagedResource, OperatingSystemConfig,
};
use gardener_extension_node::controllers::operatingsystemconfig::monitoring::rules;
use gardener_extension_node::devenv::{self, ResourceManager, ResourceManagerOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use serde_json::Value;
use support::fixtures::create_reconcile_osc_for;
use support::gardener::{confirm_and_delete, wait_gone, wait_ready};
use support::operator::OperatorProcess;
use support::{TestEnv, fixtures, wait_for};

const WAIT: Duration = Duration::from_secs(90);

/// One operator for the binary (two would both act on every namespace).
static OPERATOR: OnceLock<Mutex<OperatorProcess>> = OnceLock::new();

async fn seed_resource_manager(env: &TestEnv, dir: &std::path::Path) -> ResourceManager {
    let kubeconfig = dir.join("seed.kubeconfig");
    std::fs::write(&kubeconfig, &env.kubeconfig).unwrap();
    ResourceManager::start(ResourceManagerOptions {
        assets: devenv::resolve_assets(None, &support::repo_root()).expect("envtest binaries"),
        state_dir: dir.join("grm"),
        reuse_state: false,
        source_kubeconfig: kubeconfig.clone(),
        target_kubeconfig: kubeconfig,
        namespaces: vec![env.namespace.clone()],
        sync_period: Duration::from_secs(60),
        health_sync_period: Duration::from_secs(60),
        remove_state_on_exit: true,
        csr_approver_machine_namespace: None,
        node_agent_authorizer: None,
        network_policy: None,
        resource_class: Some("seed".into()),
    })
    .await
    .expect("the seed's gardener-resource-manager starts")
}

fn scrape_configs(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("monitoring.coreos.com", "v1alpha1", "ScrapeConfig");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

fn prometheus_rules(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PrometheusRule");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

/// Waits until the ScrapeConfig GRM applied keeps exactly the nodes of `keys`.
async fn wait_kept_keys(env: &TestEnv, keys: &[&str]) -> DynamicObject {
    let wanted = rules::one_of(&keys.iter().map(|k| k.to_string()).collect());
    let api = scrape_configs(&env.client, &env.namespace);
    wait_for("the ScrapeConfig to keep the shipped keys", WAIT, || {
        let api = api.clone();
        let wanted = wanted.clone();
        async move {
            let config = api
                .get_opt(rules::SHOOT_OBJECTS)
                .await
                .map_err(|e| e.to_string())?;
            let regex = config
                .as_ref()
                .map(|c| c.data["spec"]["relabelings"][0]["regex"].clone());
            match (config, regex) {
                (Some(config), Some(Value::String(regex))) if regex == wanted => Ok(config),
                (_, regex) => Err(format!("keep regex {regex:?}, want {wanted}")),
            }
        }
    })
    .await
}

async fn wait_applied(env: &TestEnv) -> ManagedResource {
    let mrs = Api::<ManagedResource>::namespaced(env.client.clone(), &env.namespace);
    wait_for(
        "the monitoring ManagedResource applied by the seed's GRM",
        WAIT,
        || {
            let mrs = mrs.clone();
            async move {
                let mr = mrs
                    .get_opt(rules::MANAGED_RESOURCE)
                    .await
                    .map_err(|e| e.to_string())?;
                let Some(mr) = mr else {
                    return Err("no ManagedResource".into());
                };
                let applied = serde_json::to_value(&mr.status).unwrap()["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "ResourcesApplied" && c["status"] == "True");
                if applied {
                    Ok(mr)
                } else {
                    Err(format!("{:?}", mr.status))
                }
            }
        },
    )
    .await
}

#[tokio::test]
async fn the_seed_resource_manager_applies_the_agents_monitoring_and_it_follows_the_node_agent_secrets()
 {
    let env = support::env().await;
    support::seed_crds::install(
        &env.client,
        &[
            "monitoring.coreos.com_scrapeconfigs",
            "monitoring.coreos.com_prometheusrules",
        ],
    )
    .await;
    OPERATOR.get_or_init(|| Mutex::new(OperatorProcess::start(&env.kubeconfig, &[])));
    let cluster: Cluster = serde_json::from_value(fixtures::cluster_json(&env.namespace)).unwrap();
    Api::<Cluster>::all(env.client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    // gardenlet's generic token kubeconfig: the shoot's address and CA (this API server's).
    let generic =
        devenv::apply::generic_token_kubeconfig(&env.namespace, &env.server_url, &env.ca_pem);
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(generic).unwrap(),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _grm = seed_resource_manager(&env, dir.path()).await;

    let oscs = Api::<OperatingSystemConfig>::namespaced(env.client.clone(), &env.namespace);
    let (key_a, key_b) = (
        "gardener-node-agent-worker-a-77ac3",
        "gardener-node-agent-worker-b-1b2c3",
    );
    let a = create_reconcile_osc_for(&env, key_a, "worker-a").await;
    wait_ready(&oscs, &a, LastOperationType::Create).await;
    let mr = wait_applied(&env).await;
    assert_eq!(mr.spec.class.as_deref(), Some("seed"));
    let config = wait_kept_keys(&env, &[key_a]).await;
    assert_eq!(
        config.metadata.labels.as_ref().unwrap()["prometheus"],
        "shoot"
    );
    // The objects passed prometheus-operator's schemas: GRM applied them all.
    let rule = prometheus_rules(&env.client, &env.namespace)
        .get(rules::SHOOT_OBJECTS)
        .await
        .unwrap();
    let alerts: Vec<String> = rule.data["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect();
    assert!(
        alerts.contains(&"NodeAgentRolloutStopped".to_string()),
        "{alerts:?}"
    );
    let dashboard = Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace)
        .get(rules::DASHBOARD)
        .await
        .unwrap();
    assert_eq!(
        dashboard.metadata.labels.unwrap()["dashboard.monitoring.gardener.cloud/shoot"],
        "true"
    );
    let ca = Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .get(rules::CA_SECRET)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(ca.data.unwrap()[rules::CA_KEY].0.clone()).unwrap(),
        env.ca_pem,
        "the scrape trusts the shoot API server's CA, nothing else"
    );

    // A second pool: both keys; the first OSC goes: only the second's.
    let b = create_reconcile_osc_for(&env, key_b, "worker-b").await;
    wait_ready(&oscs, &b, LastOperationType::Create).await;
    wait_kept_keys(&env, &[key_a, key_b]).await;
    confirm_and_delete(&oscs, &a).await;
    wait_gone(&oscs, &a).await;
    wait_kept_keys(&env, &[key_b]).await;

    // The last one goes: the ManagedResource and, through GRM, its objects.
    confirm_and_delete(&oscs, &b).await;
    wait_gone(&oscs, &b).await;
    let mrs = Api::<ManagedResource>::namespaced(env.client.clone(), &env.namespace);
    wait_gone(&mrs, rules::MANAGED_RESOURCE).await;
    wait_gone(
        &scrape_configs(&env.client, &env.namespace),
        rules::SHOOT_OBJECTS,
    )
    .await;
    wait_gone(
        &prometheus_rules(&env.client, &env.namespace),
        rules::SHOOT_OBJECTS,
    )
    .await;
}
