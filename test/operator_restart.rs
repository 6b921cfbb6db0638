//! Integration: the operator survives being killed. SIGKILL at random points while it works
//! through many ContainerRuntimes, restart, and everything converges; and leader election
//! hands over to a second replica when the leader dies.
//!
//! Its own test binary, so it has its own control plane and controls its operators alone.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::time::Duration;

use gardener_extension_node::api::{ContainerRuntime, LastOperationType, ManagedResource};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::gardener::check_ready;
use support::operator::OperatorProcess;
use support::{fixtures, wait_for};

/// The operators of these tests watch all namespaces, so the tests take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn create_pools(env: &support::TestEnv, count: usize) {
    let clusters: Api<gardener_extension_node::api::Cluster> = Api::all(env.client.clone());
    clusters
        .create(&PostParams::default(), &fixtures::cluster(&env.namespace))
        .await
        .unwrap();
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    for i in 0..count {
        let mut cr = fixtures::container_runtime_json(&env.namespace, &format!("pool-{i}"));
        cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
        api.create(&PostParams::default(), &serde_json::from_value(cr).unwrap())
            .await
            .unwrap();
    }
}

async fn all_ready(env: &support::TestEnv, count: usize) -> Result<(), String> {
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let not_ready: Vec<String> = list
        .items
        .iter()
        .filter(|cr| check_ready(*cr, LastOperationType::Create).is_err())
        .map(|cr| cr.name_any())
        .collect();
    if !not_ready.is_empty() {
        return Err(format!("not ready: {not_ready:?}"));
    }
    let mrs: Api<ManagedResource> = Api::namespaced(env.client.clone(), &env.namespace);
    let count_mrs = mrs
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .len();
    if count_mrs != count + 1 {
        return Err(format!("{count_mrs} ManagedResources, want {}", count + 1));
    }
    Ok(())
}

#[tokio::test]
async fn sigkill_mid_way_and_restart_converges() {
    let _turn = SERIAL.lock().await;
    let env = support::env().await;
    let count = 30;
    create_pools(&env, count).await;
    let mut operator = OperatorProcess::start(&env.kubeconfig, &["--max-concurrent-reconciles=2"]);
    // Kill it several times at different points of its work; a seed makes the points
    // reproducible (printed for replay).
    let seed = std::env::var("RESTART_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) ^ 0x5eed);
    println!("RESTART_SEED={seed}");
    let mut state = seed;
    for round in 0..5 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = 300 + (state >> 33) % 1200;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        println!("round {round}: SIGKILL after {delay} ms");
        operator.kill();
        operator.restart();
    }
    wait_for(
        "all ContainerRuntimes ready after restarts",
        Duration::from_secs(120),
        || all_ready(&env, count),
    )
    .await;
    // Nothing was duplicated: exactly one secret per MR (contents are identical across runs).
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client.clone(), &env.namespace);
    let mr_secrets = secrets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| s.name_any().starts_with("managedresource-"))
        .count();
    assert_eq!(mr_secrets, count + 1, "{}", operator.log_text());
}

#[tokio::test]
async fn a_standby_replica_takes_over_when_the_leader_dies() {
    let _turn = SERIAL.lock().await;
    let env = support::env().await;
    let lease_namespace = env.namespace.clone();
    let args = [
        "--leader-election=true".to_string(),
        format!("--leader-election-namespace={lease_namespace}"),
        format!("--heartbeat-namespace={lease_namespace}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = OperatorProcess::start(&env.kubeconfig, &args);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &lease_namespace);
    let holder = |lease: &Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default()
    };
    let first_holder = wait_for("a leader", Duration::from_secs(30), || async {
        let lease = leases
            .get("gardener-extension-node-leader-election")
            .await
            .map_err(|e| e.to_string())?;
        let h = holder(&lease);
        if h.is_empty() {
            Err("no holder".into())
        } else {
            Ok(h)
        }
    })
    .await;
    let mut second = OperatorProcess::start(&env.kubeconfig, &args);
    // The standby is ready (it would take over) but does not lead.
    wait_for("standby ready", Duration::from_secs(30), || async {
        match second.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    create_pools(&env, 2).await;
    wait_for("leader reconciles", Duration::from_secs(60), || {
        all_ready(&env, 2)
    })
    .await;
    let lease = leases
        .get("gardener-extension-node-leader-election")
        .await
        .unwrap();
    assert_eq!(
        holder(&lease),
        first_holder,
        "the standby never took the lease"
    );
    let heartbeat = leases.get("gardener-extension-heartbeat").await.unwrap();
    assert!(heartbeat.spec.unwrap().renew_time.is_some());
    // The leader says so on /metrics and has renewed the heartbeat; the standby has neither.
    let leader = "gardener_extension_node_leader";
    let renewed = "gardener_extension_node_heartbeat_last_renew_timestamp_seconds";
    assert_eq!(first.metric(leader).await, Some(1.0));
    assert!(first.metric(renewed).await.unwrap() > 0.0);
    assert_eq!(second.metric(leader).await, Some(0.0));
    assert_eq!(second.metric(renewed).await, Some(0.0));

    first.kill();
    let second_holder = wait_for(
        "the standby takes over",
        Duration::from_secs(40),
        || async {
            let lease = leases
                .get("gardener-extension-node-leader-election")
                .await
                .map_err(|e| e.to_string())?;
            let h = holder(&lease);
            if !h.is_empty() && h != first_holder {
                Ok(h)
            } else {
                Err(h)
            }
        },
    )
    .await;
    assert_ne!(second_holder, first_holder);
    wait_for(
        "the new leader's gauge",
        Duration::from_secs(10),
        || async {
            match second.metric(leader).await {
                Some(1.0) => Ok(()),
                other => Err(format!("{leader} = {other:?}")),
            }
        },
    )
    .await;
    // The new leader reconciles a new request.
    let api: Api<ContainerRuntime> = Api::namespaced(env.client.clone(), &env.namespace);
    support::gardener::annotate(&api, "gvisor-pool-0", "reconcile").await;
    support::gardener::wait_ready(&api, "gvisor-pool-0", LastOperationType::Reconcile).await;
    second.kill();
}
