//! The disruptive rollout's slot Leases (`src/agent/rollout/slots.rs`, `docs/agent.md#slots`) against
//! a real kube-apiserver, each agent with RBAC-limited credentials as on a node: three agents
//! share two slots, a release lets the waiting one in, and an agent that may not read slot 1
//! (Gardener's node-agent authorizer as it is) falls back to slot 0 instead of failing; a
//! waiting agent's watch of the serial lock wakes it on the release.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use gardener_extension_node::agent::rollout::slots::{Acquired, SerialLock, slot_name};
use gardener_extension_node::kubeconfig::render_token_kubeconfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use support::agent::{client_for, limited_token_with_slots_in, put_osc};

/// A client for agent `host` allowed `slots` slots of `secret`.
async fn agent(env: &support::TestEnv, host: &str, secret: &str, slots: u32) -> Client {
    let token =
        limited_token_with_slots_in(&env.client, &env.namespace, host, &[secret], slots).await;
    client_for(&render_token_kubeconfig(
        &env.server_url,
        &env.ca_pem,
        &token,
    ))
    .await
}

async fn holder(env: &support::TestEnv, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(env.client.clone(), "kube-system")
        .get_opt(lease)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn agents_share_the_budget_wait_for_a_release_and_fall_back_when_a_slot_is_forbidden() {
    let env = support::env().await;
    let secret_name = format!("gardener-node-agent-{}", env.namespace);
    put_osc(&env.client, &secret_name, "spec: {}\n").await;
    let secret: Secret = Api::namespaced(env.client.clone(), "kube-system")
        .get(&secret_name)
        .await
        .unwrap();
    let names = [slot_name(&secret_name, 0), slot_name(&secret_name, 1)];
    let host = |n: &str| format!("{}-{n}", env.namespace);

    let mut a = SerialLock::new(&agent(&env, &host("a"), &secret_name, 2).await, &host("a"));
    let mut b = SerialLock::new(&agent(&env, &host("b"), &secret_name, 2).await, &host("b"));
    let mut c = SerialLock::new(&agent(&env, &host("c"), &secret_name, 2).await, &host("c"));
    // Allowed slot 0 only, as the node-agent authorizer allows today.
    let mut d = SerialLock::new(&agent(&env, &host("d"), &secret_name, 1).await, &host("d"));

    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(b.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(holder(&env, &names[0]).await, Some(host("a")));
    assert_eq!(holder(&env, &names[1]).await, Some(host("b")));
    // Taking again renews the own slot, never a second one.
    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(a.held_name(), Some(names[0].clone()));
    assert!(a.renewed_within(std::time::Duration::from_secs(60)));

    match c.acquire_slot(&secret, 2).await.unwrap() {
        Acquired::Busy { holder, retry_in } => {
            assert_eq!(holder, format!("{},{}", host("a"), host("b")));
            assert!(retry_in <= serial_poll());
        }
        other => panic!("c took a slot: {other:?}"),
    }
    // d may not read slot 1: it waits for slot 0 instead of failing.
    assert!(matches!(
        d.acquire_slot(&secret, 2).await.unwrap(),
        Acquired::Busy { .. }
    ));

    b.release_slot(&secret_name, 2).await.unwrap();
    assert_eq!(holder(&env, &names[1]).await, None);
    assert_eq!(c.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(c.held_name(), Some(names[1].clone()));

    a.release_slot(&secret_name, 2).await.unwrap();
    assert_eq!(d.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(holder(&env, &names[0]).await, Some(host("d")));

    // A restarted agent (nothing known) finds and releases its own slot.
    let mut c_again = SerialLock::new(&agent(&env, &host("c2"), &secret_name, 2).await, &host("c"));
    c_again.release_slot(&secret_name, 2).await.unwrap();
    assert_eq!(holder(&env, &names[1]).await, None);
    assert_eq!(holder(&env, &names[0]).await, Some(host("d")));
}

fn serial_poll() -> std::time::Duration {
    gardener_extension_node::agent::rollout::slots::POLL_INTERVAL
}

/// The serial lock's watch (`src/agent/rollout/lock_watch.rs`) with a node's RBAC-limited
/// credentials: quiet while another node holds the lock, woken once that node releases it.
#[tokio::test]
async fn a_waiting_agent_is_woken_when_the_serial_lock_is_released() {
    use gardener_extension_node::agent::metrics::Metrics;
    use gardener_extension_node::agent::rollout::lock_watch::LockWatch;
    use std::time::Duration;

    let env = support::env().await;
    let secret_name = format!("gardener-node-agent-{}-w", env.namespace);
    put_osc(&env.client, &secret_name, "spec: {}\n").await;
    let secret: Secret = Api::namespaced(env.client.clone(), "kube-system")
        .get(&secret_name)
        .await
        .unwrap();
    let host = |n: &str| format!("{}-w{n}", env.namespace);
    let mut a = SerialLock::new(&agent(&env, &host("a"), &secret_name, 1).await, &host("a"));
    assert_eq!(a.acquire(&secret).await.unwrap(), Acquired::Held);

    let b = agent(&env, &host("b"), &secret_name, 1).await;
    let mut registry = gardener_extension_node::metrics::new_registry();
    let metrics = Metrics::register(&mut registry);
    let watch = LockWatch::start(&b, &secret_name, &host("b"), &metrics);
    let freed = watch.signal();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), freed.notified())
            .await
            .is_err(),
        "woken while the lock is held"
    );
    a.release(&secret_name).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), freed.notified())
        .await
        .expect("not woken after the release");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(!text.contains("serial-lock-watch"), "{text}");
}
