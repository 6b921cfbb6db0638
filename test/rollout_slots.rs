//! The disruptive rollout's slots (`src/agent/rollout/slots.rs`, `docs/agent.md#slots`) against
//! a real kube-apiserver, each agent with RBAC-limited credentials that admit exactly what
//! Gardener's node-agent authorizer admits (its own Lease and the one named like the OSC
//! secret; no `<secret>-<i>` Lease): with budget 2 two agents hold a slot of the one Lease at
//! once, a third waits, its watch of the Lease wakes it on a release and it takes the freed
//! slot; agents racing for the slots are sorted out by conflicts and never more than the
//! budget hold one; an expired slot is taken over; gardener-node-agent's writes of the
//! serial lock (slot 0, a plain update of the Lease) keep the other slots.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gardener_extension_node::agent::metrics::Metrics;
use gardener_extension_node::agent::rollout::lock_watch::{Awaited, LockWatch};
use gardener_extension_node::agent::rollout::slots::{
    self, Acquired, POLL_INTERVAL, SerialLock, SlotRecord,
};
use gardener_extension_node::kubeconfig::render_token_kubeconfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use support::agent::{client_for, limited_token_in, put_osc};

/// A client for agent `host` with what the node-agent authorizer admits for the pool of
/// `secret` (every slot is in the one Lease named like it).
async fn agent(env: &support::TestEnv, host: &str, secret: &str) -> Client {
    let token = limited_token_in(&env.client, &env.namespace, host, &[secret]).await;
    client_for(&render_token_kubeconfig(
        &env.server_url,
        &env.ca_pem,
        &token,
    ))
    .await
}

/// The OSC secret `kube-system/<name>` (created) and its name.
async fn osc_secret(env: &support::TestEnv, suffix: &str) -> (Secret, String) {
    let name = format!("gardener-node-agent-{}-{suffix}", env.namespace);
    put_osc(&env.client, &name, "spec: {}\n").await;
    let secret = Api::namespaced(env.client.clone(), "kube-system")
        .get(&name)
        .await
        .unwrap();
    (secret, name)
}

/// The slots of `secret`'s Lease as agent `host` sees them.
async fn lock(env: &support::TestEnv, host: &str, secret: &str) -> SerialLock {
    SerialLock::new(&agent(env, host, secret).await, host)
}

fn leases(client: &Client) -> Api<Lease> {
    Api::namespaced(client.clone(), "kube-system")
}

/// The holders of the slot Lease `name` as `(slot, holder)`, read by the admin.
async fn holders(env: &support::TestEnv, name: &str) -> Vec<(u32, String)> {
    leases(&env.client)
        .get_opt(name)
        .await
        .unwrap()
        .map(|lease| slots::holders(&lease))
        .unwrap_or_default()
}

fn pair(slot: u32, host: &str) -> (u32, String) {
    (slot, host.to_string())
}

fn metrics() -> Metrics {
    let mut registry = gardener_extension_node::metrics::new_registry();
    Metrics::register(&mut registry)
}

#[tokio::test]
async fn two_agents_hold_slots_of_the_one_lease_and_a_third_is_woken_by_a_release() {
    let env = support::env().await;
    let (secret, name) = osc_secret(&env, "two").await;
    let host = |n: &str| format!("{}-{n}", env.namespace);

    let mut a = lock(&env, &host("a"), &name).await;
    let mut b = lock(&env, &host("b"), &name).await;
    let c_client = agent(&env, &host("c"), &name).await;
    let mut c = SerialLock::new(&c_client, &host("c"));

    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(b.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(
        holders(&env, &name).await,
        [pair(0, &host("a")), pair(1, &host("b"))]
    );
    assert_eq!((a.held_slot(), b.held_slot()), (Some(0), Some(1)));
    // No Lease of the old scheme was made.
    assert_eq!(
        leases(&env.client)
            .get_opt(&format!("{name}-1"))
            .await
            .unwrap(),
        None
    );
    // Taking again renews the own slot, never a second one.
    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(a.held_slot(), Some(0));
    assert!(a.renewed_within(Duration::from_secs(60)));
    assert_eq!(holders(&env, &name).await.len(), 2);

    match c.acquire_slot(&secret, 2).await.unwrap() {
        Acquired::Busy { holder, retry_in } => {
            assert_eq!(holder, format!("{},{}", host("a"), host("b")));
            assert!(retry_in <= POLL_INTERVAL);
        }
        other => panic!("c took a slot: {other:?}"),
    }
    // c waits, watching the Lease: nothing while both slots are held, not even on a's
    // renewal, and woken when b releases slot 1.
    let watch = LockWatch::start(&c_client, &name, &host("c"), Awaited::Slots(2), &metrics());
    let freed = watch.signal();
    let quiet = tokio::time::timeout(Duration::from_secs(2), freed.notified());
    assert!(quiet.await.is_err(), "woken while every slot is held");
    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    let quiet = tokio::time::timeout(Duration::from_secs(1), freed.notified());
    assert!(quiet.await.is_err(), "woken by a renewal");
    b.release(&name).await.unwrap();
    assert_eq!(holders(&env, &name).await, [pair(0, &host("a"))]);
    tokio::time::timeout(Duration::from_secs(30), freed.notified())
        .await
        .expect("not woken after the release of slot 1");
    drop(watch);
    assert_eq!(c.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(c.held_slot(), Some(1));

    // A restarted agent (nothing known) finds its own slot first and releases it.
    let mut c_again = SerialLock::new(&c_client, &host("c"));
    assert_eq!(
        c_again.acquire_slot(&secret, 2).await.unwrap(),
        Acquired::Held
    );
    assert_eq!(c_again.held_slot(), Some(1));
    let mut c_restarted = SerialLock::new(&c_client, &host("c"));
    c_restarted.release(&name).await.unwrap();
    assert_eq!(holders(&env, &name).await, [pair(0, &host("a"))]);
    a.release(&name).await.unwrap();
    assert_eq!(holders(&env, &name).await, []);
}

/// Every version of the Lease `name` the API server had while the race `start` starts ran, as
/// holder counts: the race starts only once the watch is open, so no write is missed.
async fn versions_during<F: std::future::Future>(
    env: &support::TestEnv,
    name: &str,
    start: impl FnOnce() -> F,
) -> (F::Output, Vec<usize>) {
    let api = leases(&env.client);
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let version = api
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|l| l.metadata.resource_version)
        .unwrap_or_else(|| "0".to_string());
    let mut stream = api.watch(&params, &version).await.unwrap().boxed();
    let counts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = {
        let counts = counts.clone();
        tokio::spawn(async move {
            while let Ok(Some(event)) = stream.try_next().await {
                match event {
                    WatchEvent::Added(lease) | WatchEvent::Modified(lease) => {
                        counts.lock().unwrap().push(slots::holders(&lease).len());
                    }
                    WatchEvent::Error(error) => panic!("{error:?}"),
                    _ => {}
                }
            }
        })
    };
    let out = start().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    seen.abort();
    let counts = counts.lock().unwrap().clone();
    (out, counts)
}

#[tokio::test]
async fn racing_agents_are_sorted_out_by_conflicts_and_never_exceed_the_budget() {
    let env = support::env().await;
    let (secret, name) = osc_secret(&env, "race").await;
    let mut locks = Vec::new();
    for n in 0..6 {
        let host = format!("{}-r{n}", env.namespace);
        locks.push(lock(&env, &host, &name).await);
    }
    for round in 0..3 {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(locks.len()));
        let racers = std::mem::take(&mut locks);
        let race = || {
            futures::future::join_all(racers.into_iter().map(|mut lock| {
                let (barrier, secret) = (barrier.clone(), secret.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let acquired = lock.acquire_slot(&secret, 2).await.unwrap();
                    (lock, acquired)
                })
            }))
        };
        let (results, counts) = versions_during(&env, &name, race).await;
        let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        let winners: Vec<u32> = results
            .iter()
            .filter(|(_, acquired)| *acquired == Acquired::Held)
            .filter_map(|(lock, _)| lock.held_slot())
            .collect();
        let mut sorted = winners.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1], "round {round}: slots taken {winners:?}");
        assert!(!counts.is_empty(), "round {round}: no version seen");
        assert!(
            counts.iter().all(|&n| n <= 2),
            "round {round}: more holders than the budget in a version: {counts:?}"
        );
        assert_eq!(holders(&env, &name).await.len(), 2);
        // The winners release; everybody races again.
        for (mut lock, acquired) in results {
            if acquired == Acquired::Held {
                lock.release(&name).await.unwrap();
            }
            locks.push(lock);
        }
        assert_eq!(holders(&env, &name).await, [], "round {round}");
    }
}

#[tokio::test]
async fn an_expired_slot_is_taken_over() {
    let env = support::env().await;
    let (secret, name) = osc_secret(&env, "exp").await;
    let host = |n: &str| format!("{}-e{n}", env.namespace);
    let mut a = lock(&env, &host("a"), &name).await;
    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    // The other agents' credentials first: from the slot records on, little time passes.
    let mut b = lock(&env, &host("b"), &name).await;
    let mut c = lock(&env, &host("c"), &name).await;
    // Slot 1 of a node that went away 601 s ago, and one that did not renew for 595 s.
    let api = leases(&env.client);
    let record = |holder: &str, age: i64| {
        let renewed = MicroTime(Timestamp::now() - SignedDuration::from_secs(age));
        serde_json::to_string(&SlotRecord {
            holder_identity: holder.to_string(),
            lease_duration_seconds: 600,
            acquire_time: renewed.clone(),
            renew_time: renewed,
        })
        .unwrap()
    };
    let mut lease = api.get(&name).await.unwrap();
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(slots::slot_annotation(1), record(&host("gone"), 601));
    annotations.insert(slots::slot_annotation(2), record(&host("slow"), 595));
    let expires = std::time::Instant::now() + Duration::from_secs(5);
    api.replace(&name, &PostParams::default(), &lease)
        .await
        .unwrap();

    assert_eq!(b.acquire_slot(&secret, 3).await.unwrap(), Acquired::Held);
    assert_eq!(b.held_slot(), Some(1));
    assert_eq!(
        holders(&env, &name).await,
        [
            pair(0, &host("a")),
            pair(1, &host("b")),
            pair(2, &host("slow"))
        ]
    );
    match c.acquire_slot(&secret, 3).await.unwrap() {
        // Slot 2 expires within 5 s: look again then at the latest.
        Acquired::Busy { retry_in, .. } => assert!(retry_in <= Duration::from_secs(5)),
        other => panic!("c took a slot: {other:?}"),
    }
    tokio::time::sleep_until((expires + Duration::from_secs(1)).into()).await;
    assert_eq!(c.acquire_slot(&secret, 3).await.unwrap(), Acquired::Held);
    assert_eq!(c.held_slot(), Some(2));
}

/// What gardener-node-agent does to its serial lock (`serial.go`): read the Lease, set or
/// clear the `spec` fields, PUT the object as read.
async fn gna_write(api: &Api<Lease>, lease: Lease, holder: Option<&str>) -> kube::Result<Lease> {
    let mut lease = lease;
    let spec = lease.spec.get_or_insert_with(Default::default);
    let now = MicroTime(Timestamp::now());
    spec.holder_identity = holder.map(str::to_string);
    spec.lease_duration_seconds = holder.map(|_| 600);
    spec.acquire_time = holder.map(|_| now.clone());
    spec.renew_time = holder.map(|_| now);
    let name = lease.metadata.name.clone().unwrap();
    api.replace(&name, &PostParams::default(), &lease).await
}

#[tokio::test]
async fn gardener_node_agents_writes_of_slot_zero_keep_the_other_slots() {
    let env = support::env().await;
    let (secret, name) = osc_secret(&env, "gna").await;
    let host = |n: &str| format!("{}-g{n}", env.namespace);
    let mut a = lock(&env, &host("a"), &name).await;
    let mut b = lock(&env, &host("b"), &name).await;
    let mut c = lock(&env, &host("c"), &name).await;
    assert_eq!(a.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(b.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    a.release(&name).await.unwrap();
    assert_eq!(holders(&env, &name).await, [pair(1, &host("b"))]);

    // GNA (with a node agent's permissions) takes the free lock.
    let gna = leases(&agent(&env, &host("gna"), &name).await);
    let read = gna.get(&name).await.unwrap();
    gna_write(&gna, read, Some(&host("gna"))).await.unwrap();
    assert_eq!(
        holders(&env, &name).await,
        [pair(0, &host("gna")), pair(1, &host("b"))]
    );
    match c.acquire_slot(&secret, 2).await.unwrap() {
        Acquired::Busy { holder, .. } => {
            assert_eq!(holder, format!("{},{}", host("gna"), host("b")))
        }
        other => panic!("c took a slot: {other:?}"),
    }
    // A GNA write of a copy read before b renewed fails (409) instead of dropping b's slot.
    let stale = gna.get(&name).await.unwrap();
    assert_eq!(b.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    let refused = gna_write(&gna, stale, Some(&host("gna"))).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(status)) if status.code == 409),
        "{refused:?}"
    );
    // GNA reads again and releases, as it does after its apply: b keeps slot 1.
    let read = gna.get(&name).await.unwrap();
    gna_write(&gna, read, None).await.unwrap();
    assert_eq!(holders(&env, &name).await, [pair(1, &host("b"))]);
    // c gets the lock GNA released; b's release leaves c's slot 0 alone.
    assert_eq!(c.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(c.held_slot(), Some(0));
    b.release(&name).await.unwrap();
    assert_eq!(holders(&env, &name).await, [pair(0, &host("c"))]);
    // In serial mode (one slot) GNA and the agent exclude each other on slot 0.
    c.release(&name).await.unwrap();
    let read = gna.get(&name).await.unwrap();
    gna_write(&gna, read, Some(&host("gna"))).await.unwrap();
    let mut d = lock(&env, &host("d"), &name).await;
    match d.acquire(&secret).await.unwrap() {
        Acquired::Busy { holder, .. } => assert_eq!(holder, host("gna")),
        other => panic!("d took the lock GNA holds: {other:?}"),
    }
    let read = gna.get(&name).await.unwrap();
    gna_write(&gna, read, None).await.unwrap();
    assert_eq!(d.acquire(&secret).await.unwrap(), Acquired::Held);
    assert_eq!(d.held_slot(), Some(0));
    // A rollout slot held from before does not stand for the serial lock, and stays b's
    // until b releases it.
    assert_eq!(b.acquire_slot(&secret, 2).await.unwrap(), Acquired::Held);
    assert_eq!(b.held_slot(), Some(1));
    match b.acquire(&secret).await.unwrap() {
        Acquired::Busy { holder, .. } => assert_eq!(holder, host("d")),
        other => panic!("b's rollout slot stood for the serial lock: {other:?}"),
    }
    assert_eq!(
        holders(&env, &name).await,
        [pair(0, &host("d")), pair(1, &host("b"))]
    );
    b.release(&name).await.unwrap();
    assert_eq!(holders(&env, &name).await, [pair(0, &host("d"))]);
}

/// The serial lock's watch (`src/agent/rollout/lock_watch.rs`) with a node's RBAC-limited
/// credentials: quiet while another node holds the lock, woken once that node releases it.
#[tokio::test]
async fn a_waiting_agent_is_woken_when_the_serial_lock_is_released() {
    let env = support::env().await;
    let (secret, name) = osc_secret(&env, "w").await;
    let host = |n: &str| format!("{}-w{n}", env.namespace);
    let mut a = lock(&env, &host("a"), &name).await;
    assert_eq!(a.acquire(&secret).await.unwrap(), Acquired::Held);

    let b = agent(&env, &host("b"), &name).await;
    let mut registry = gardener_extension_node::metrics::new_registry();
    let metrics = Metrics::register(&mut registry);
    let watch = LockWatch::start(&b, &name, &host("b"), Awaited::SerialLock, &metrics);
    let freed = watch.signal();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), freed.notified())
            .await
            .is_err(),
        "woken while the lock is held"
    );
    a.release(&name).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), freed.notified())
        .await
        .expect("not woken after the release");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(!text.contains("serial-lock-watch"), "{text}");
}
