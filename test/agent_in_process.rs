//! The whole agent ([`Agent`]: its main loop, watches, gates and features) in-process, on an
//! in-memory node ([`FakeHost`]: files in a map, systemd calls recorded, probes and programs
//! answering what the test says) against the test kube-apiserver, with credentials limited by
//! RBAC to what Gardener's node-agent authorizer admits for one node
//! (`support::agent::limited_kubeconfig`). gardener-node-agent tests its reconciler the same
//! way (a fake D-Bus and an in-memory file system beside a real API server). Each test runs in
//! seconds (the disruptive rollout's in about its minimum hold of 10 s); the nspawn e2e tests
//! (`test/agent_e2e.rs`, `test/in_place_e2e.rs`, `test/rollout_e2e.rs`) keep what only a real
//! systemd, kubelet or containerd shows.
//!
//! - an OSC is applied: files and unit files written, the units enabled and started, the
//!   checksum reported on the Node;
//! - an invalid OSC is refused with an `OSCInvalid` Warning event and nothing touched;
//! - serial reconciliation: another node holds the lock; the agent waits, and applies once the
//!   lock is released (its watch of the Lease wakes it);
//! - the disruptive rollout: a disruptive change takes the slot, is held, and is released once
//!   the node is healthy; with kubelet unhealthy it stops, keeps the slot and says so;
//! - an in-place OS update: waits for machine-controller-manager's `ReadyForUpdate`, runs the
//!   OS update command, and labels the Node `update-result=successful`; a failing command
//!   labels it `failed` with the command's reason and reports no checksum.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gardener_extension_node::agent::access::credentials::{Source, client_config};
use gardener_extension_node::agent::access::switching_client::Credentials;
use gardener_extension_node::agent::client_certificate::lifecycle;
use gardener_extension_node::agent::client_certificate::rules::client_certificate;
use gardener_extension_node::agent::ports::fake_host::{FakeHost, Op};
use gardener_extension_node::agent::ports::host::ProgramOutput;
use gardener_extension_node::agent::rollout::{rules as rollout_rules, slots};
use gardener_extension_node::api::operatingsystemconfig::UnitCommand;
use gardener_extension_node::kubeconfig::x509::{CertificateFacts, first_certificate_facts};
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::{Value, json};
use support::agent::{node_checksum, osc_yaml, plain_file, put_osc, put_osc_annotated, service};
use support::in_process_agent::{
    AT_ONCE, RunningAgent, condition, node_name, put_rollout_osc, secret_name, set_condition,
    settings, slot_holder, start_in_rollout,
};
use support::node_agent_identity::{
    allow_bootstrappers, create_bootstrap_token, create_machine, create_pool_node,
};
use support::shoot::Shoot;

/// The Node's labels and annotations.
async fn node_metadata(
    client: &Client,
    node: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    (
        node.metadata.labels.unwrap_or_default(),
        node.metadata.annotations.unwrap_or_default(),
    )
}

#[tokio::test]
async fn an_osc_is_applied_with_its_files_and_units_and_reported() {
    let env = support::env().await;
    let agent = RunningAgent::start(&env, FakeHost::default()).await;
    let osc = osc_yaml(
        &[service("app.service", "first")],
        &[plain_file("/etc/app/config", "a=1\n", Some(0o640))],
        None,
    );
    let checksum = put_osc(&env.client, &agent.secret, &osc).await;
    let took = agent.wait_reported(&env.client, &checksum).await;
    println!("in-process agent: OSC applied and reported after {took:.1?}");

    let host = &agent.host;
    assert_eq!(host.content("/etc/app/config").as_deref(), Some("a=1\n"));
    assert_eq!(host.file_mode("/etc/app/config"), Some(0o640));
    let unit = host.content("/etc/systemd/system/app.service").unwrap();
    assert!(unit.contains("Description=first"), "{unit}");
    let ops = host.take_ops();
    assert!(ops.contains(&Op::Reload), "{ops:?}");
    assert!(ops.contains(&Op::Enable("app.service".into())), "{ops:?}");
    assert!(
        FakeHost::jobs(&ops).contains(&("app.service".into(), UnitCommand::Restart))
            || FakeHost::jobs(&ops).contains(&("app.service".into(), UnitCommand::Start)),
        "{ops:?}"
    );
    let last_applied = agent.state.path().join("last-applied-osc.yaml");
    assert!(
        host.content(&last_applied.display().to_string()).is_some(),
        "the last applied OSC is kept"
    );

    // The same OSC again (a new secret version, same data): nothing is done on the node.
    let again =
        put_osc_annotated(&env.client, &agent.secret, &osc, &[("test/touched", "yes")]).await;
    assert_eq!(again, checksum);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(host.take_ops(), []);
    agent.stop().await;
}

#[tokio::test]
async fn an_invalid_osc_is_refused_with_an_event_and_nothing_is_touched() {
    let env = support::env().await;
    let agent = RunningAgent::start(&env, FakeHost::default()).await;
    put_osc(
        &env.client,
        &agent.secret,
        &osc_yaml(
            &[service("app.service", "first")],
            &[plain_file("etc/relative", "x", None)],
            None,
        ),
    )
    .await;
    let note = agent.wait_event(&env.client, "OSCInvalid", AT_ONCE).await;
    println!(
        "in-process agent: invalid OSC refused after {:.1?}: {note}",
        agent.started.elapsed()
    );
    assert!(note.contains("etc/relative"), "{note}");
    assert!(note.contains("nothing changed on the node"), "{note}");
    assert_eq!(agent.host.take_ops(), []);
    assert_eq!(agent.host.take_writes(), Vec::<PathBuf>::new());
    assert_eq!(node_checksum(&env.client, &agent.node).await, None);
    agent.stop().await;
}

/// The serial lock (GNA's: a Lease named like the OSC secret) held by `holder` for 10 min.
fn lock_held_by(name: &str, holder: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 600,
            "acquireTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
            "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn with_the_serial_lock_held_by_another_node_the_agent_waits_then_applies() {
    let env = support::env().await;
    let agent = RunningAgent::start(&env, FakeHost::default()).await;
    let leases = Api::<Lease>::namespaced(env.client.clone(), "kube-system");
    leases
        .create(
            &PostParams::default(),
            &lock_held_by(&agent.secret, "another-node"),
        )
        .await
        .unwrap();
    let checksum = put_osc_annotated(
        &env.client,
        &agent.secret,
        &osc_yaml(&[service("app.service", "serial")], &[], None),
        &[(slots::ANNOTATION_SERIAL, "true")],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node_checksum(&env.client, &agent.node).await, None);
    assert_eq!(
        agent.host.take_ops(),
        [],
        "nothing is applied while another node holds the lock"
    );

    // The other node releases the lock as client-go's leader election does.
    let released = Instant::now();
    let mut lease = leases.get(&agent.secret).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some(String::new());
    spec.lease_duration_seconds = Some(1);
    leases
        .replace(&agent.secret, &PostParams::default(), &lease)
        .await
        .unwrap();
    agent.wait_reported(&env.client, &checksum).await;
    println!(
        "in-process agent: serial lock released, OSC applied {:.1?} later",
        released.elapsed()
    );
    // As GNA: the lock is released once the node reports the new checksum.
    assert_eq!(slot_holder(&env.client, &agent.secret).await, None);
    assert!(
        agent
            .host
            .content("/etc/systemd/system/app.service")
            .is_some()
    );
    agent.stop().await;
}

#[tokio::test]
async fn a_disruptive_change_holds_the_slot_until_the_node_is_healthy() {
    let env = support::env().await;
    let (agent, _) = start_in_rollout(&env).await;
    agent.host.take_ops();

    let applied = Instant::now();
    let second = put_rollout_osc(&env.client, &agent.secret, "--v=2").await;
    let node = agent.node.clone();
    support::wait_for("the slot taken", AT_ONCE, || {
        let (client, secret, node) = (env.client.clone(), agent.secret.clone(), node.clone());
        async move {
            let holder = slot_holder(&client, &secret).await;
            (holder.as_deref() == Some(node.as_str()))
                .then_some(())
                .ok_or(format!("{holder:?}"))
        }
    })
    .await;
    let note = agent
        .wait_event(
            &env.client,
            rollout_rules::EVENT_RELEASED,
            Duration::from_secs(40),
        )
        .await;
    let held = applied.elapsed();
    println!("in-process agent: disruptive change held {held:.1?}, released: {note}");
    assert!(held >= rollout_rules::MIN_HOLD, "{held:?}");
    agent.wait_reported(&env.client, &second).await;
    assert_eq!(slot_holder(&env.client, &agent.secret).await, None);
    assert_eq!(
        condition(&env.client, &agent.node, rollout_rules::CONDITION_TYPE).await,
        Some(("True".into(), rollout_rules::REASON_HEALTHY.into()))
    );
    let ops = agent.host.take_ops();
    assert!(
        FakeHost::jobs(&ops).contains(&("kubelet.service".into(), UnitCommand::Restart)),
        "{ops:?}"
    );
    agent.stop().await;
}

#[tokio::test]
async fn a_disruptive_change_that_leaves_kubelet_unhealthy_stops_and_keeps_the_slot() {
    let env = support::env().await;
    let (agent, first) = start_in_rollout(&env).await;

    agent
        .host
        .set_kubelet_health(Err("connection refused".into()));
    let applied = Instant::now();
    let broken = put_rollout_osc(&env.client, &agent.secret, "--broken").await;
    let note = agent
        .wait_event(
            &env.client,
            rollout_rules::EVENT_STOPPED,
            Duration::from_secs(40),
        )
        .await;
    println!(
        "in-process agent: broken disruptive change stopped after {:.1?}: {note}",
        applied.elapsed()
    );
    assert!(note.contains("kubelet does not answer"), "{note}");
    assert_eq!(
        condition(&env.client, &agent.node, rollout_rules::CONDITION_TYPE).await,
        Some(("False".into(), rollout_rules::REASON_NOT_HEALTHY.into()))
    );
    assert_eq!(
        slot_holder(&env.client, &agent.secret).await.as_deref(),
        Some(agent.node.as_str()),
        "a stopped node keeps its slot"
    );
    // The node runs the broken OSC (it was applied) and reports it, as in `make e2e-rollout`.
    assert_ne!(broken, first);
    assert_eq!(node_checksum(&env.client, &agent.node).await, Some(broken));
    agent.stop().await;
}

/// An in-place pool's OSC on Debian `version`, updated by `/opt/bin/update-os <version>`.
/// Writes the seed's steering annotations on the pool's Lease (as the operator's rollout watch
/// does: a merge patch of those keys only; created when absent). `None` removes a key.
async fn steer(client: &Client, lease: &str, annotations: &[(&str, Option<&str>)]) {
    let leases = Api::<Lease>::namespaced(client.clone(), "kube-system");
    let values: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, |v| json!(v))))
        .collect();
    if leases.get_opt(lease).await.unwrap().is_none() {
        let created: Lease = serde_json::from_value(json!({
            "metadata": {"name": lease, "namespace": "kube-system"},
        }))
        .unwrap();
        leases
            .create(&PostParams::default(), &created)
            .await
            .unwrap();
    }
    leases
        .patch(
            lease,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": values}})),
        )
        .await
        .unwrap();
}

/// Issue 45 item 2: a pause the seed carries on the pool's Lease keeps a node that runs a
/// configuration from starting a new one (nothing written, no unit job, the old checksum
/// stays on the Node, `rollout_paused` is 1); lifting it applies the new one at once (the
/// agent watches the Lease).
#[tokio::test]
async fn a_pause_on_the_pool_lease_holds_a_new_configuration_back_until_it_is_lifted() {
    use gardener_extension_node::api::constants::ANNOTATION_ROLLOUT_PAUSED;
    let env = support::env().await;
    let agent = RunningAgent::start(&env, FakeHost::default()).await;
    let first = put_osc(
        &env.client,
        &agent.secret,
        &osc_yaml(&[service("app.service", "first")], &[], None),
    )
    .await;
    agent.wait_reported(&env.client, &first).await;
    steer(
        &env.client,
        &agent.secret,
        &[(ANNOTATION_ROLLOUT_PAUSED, Some("checking the image"))],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    agent.host.take_ops();
    let second = put_osc(
        &env.client,
        &agent.secret,
        &osc_yaml(&[service("app.service", "second")], &[], None),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        node_checksum(&env.client, &agent.node).await.as_deref(),
        Some(first.as_str()),
        "paused: the node keeps its configuration"
    );
    assert_eq!(agent.host.take_ops(), [], "paused: nothing touched");
    assert_eq!(agent.metrics.rollout_paused.get(), 1);

    let lifted = Instant::now();
    steer(
        &env.client,
        &agent.secret,
        &[(ANNOTATION_ROLLOUT_PAUSED, None)],
    )
    .await;
    agent.wait_reported(&env.client, &second).await;
    println!(
        "in-process agent: pause lifted, new configuration applied {:.1?} later",
        lifted.elapsed()
    );
    assert!(
        lifted.elapsed() < Duration::from_secs(10),
        "{:?}",
        lifted.elapsed()
    );
    assert_eq!(agent.metrics.rollout_paused.get(), 0);
    agent.stop().await;
}

/// Issue 45 item 3: the budget the seed carries on the pool's Lease turns the disruptive
/// rollout on for a Secret without any rollout annotation (gardenlet's): a kubelet change
/// takes the slot, is held until the node is healthy and released.
#[tokio::test]
async fn the_budget_on_the_pool_lease_turns_the_rollout_on_for_a_secret_without_annotations() {
    let env = support::env().await;
    let agent = RunningAgent::start(&env, FakeHost::default()).await;
    support::in_process_agent::set_ready(&env.client, &agent.node, true).await;
    let first = put_osc(
        &env.client,
        &agent.secret,
        &support::in_process_agent::osc_with_kubelet("--v=1"),
    )
    .await;
    agent.wait_reported(&env.client, &first).await;
    steer(
        &env.client,
        &agent.secret,
        &[
            (rollout_rules::ANNOTATION_BUDGET, Some("1")),
            (rollout_rules::ANNOTATION_HEALTH_TIMEOUT, Some("5")),
        ],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = put_osc(
        &env.client,
        &agent.secret,
        &support::in_process_agent::osc_with_kubelet("--v=2"),
    )
    .await;
    let note = agent
        .wait_event(
            &env.client,
            rollout_rules::EVENT_RELEASED,
            Duration::from_secs(40),
        )
        .await;
    println!("in-process agent: rollout on by the Lease's budget, slot released: {note}");
    agent.wait_reported(&env.client, &second).await;
    assert_eq!(
        condition(&env.client, &agent.node, rollout_rules::CONDITION_TYPE).await,
        Some(("True".into(), rollout_rules::REASON_HEALTHY.into()))
    );
    // The Lease the seed created is now the Secret's (it goes with it).
    let lease = Api::<Lease>::namespaced(env.client.clone(), "kube-system")
        .get(&agent.secret)
        .await
        .unwrap();
    let owners = lease.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].kind, "Secret");
    agent.stop().await;
}

/// Issue 45 item 4: a fleet-wide drift — the same file of kubelet's rewritten on four nodes
/// of a pool at once — is repaired in turn: each repair that restarts kubelet takes the pool's
/// one rollout slot (budget 1, carried on the pool's Lease) and holds it until its node is
/// healthy, so no two nodes restart kubelet within one hold of each other; all four are
/// repaired. A kubelet restart counts as "restarting" for the rollout's minimum hold after
/// it (without the slots all four restart within one drift interval and overlap).
#[tokio::test]
async fn a_fleet_wide_drift_restarts_kubelet_on_one_node_at_a_time() {
    use gardener_extension_node::kubeconfig::config_from_yaml;
    use support::agent::{create_node, limited_kubeconfig, node_events};
    const DRIFTED: &str = "/etc/kubernetes/kubelet-drift.conf";
    let env = support::env().await;
    let secret = format!("gardener-node-agent-fleet-{}", env.namespace);
    let mut agents = Vec::new();
    for index in 0..4 {
        let node = format!("fleet-{index}-{}", env.namespace);
        create_node(&env.client, &node).await;
        let kubeconfig = limited_kubeconfig(&env, &node, &[&secret]).await;
        let credentials =
            gardener_extension_node::agent::access::switching_client::Credentials::new(
                config_from_yaml(&kubeconfig).await.unwrap(),
            );
        let state = tempfile::tempdir().unwrap();
        let mut settings = settings(&node, &secret, state.path().to_path_buf());
        settings.drift_check_interval = Duration::from_secs(2);
        agents.push(RunningAgent::run(
            settings,
            credentials,
            false,
            FakeHost::default(),
            state,
        ));
    }
    for agent in &agents {
        support::in_process_agent::set_ready(&env.client, &agent.node, true).await;
    }
    steer(
        &env.client,
        &secret,
        &[(rollout_rules::ANNOTATION_BUDGET, Some("1"))],
    )
    .await;
    let mut kubelet = service("kubelet.service", "kubelet");
    kubelet["filePaths"] = json!([DRIFTED]);
    let osc = osc_yaml(
        &[kubelet],
        &[plain_file(DRIFTED, "maxPods: 110\n", Some(0o644))],
        None,
    );
    let checksum = put_osc(&env.client, &secret, &osc).await;
    for agent in &agents {
        agent.wait_reported(&env.client, &checksum).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for agent in &agents {
        agent.host.take_ops();
    }

    // The same careless rewrite on every node at once.
    let tampered = Instant::now();
    for agent in &agents {
        agent.host.put(DRIFTED, "maxPods: 500\n", 0o644);
    }
    let mut restarts: Vec<(String, Duration)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        for agent in &agents {
            let ops = std::mem::take(&mut *agent.host.ops.lock().unwrap());
            for op in ops {
                if op == Op::Job("kubelet.service".into(), UnitCommand::Restart) {
                    restarts.push((agent.node.clone(), tampered.elapsed()));
                }
            }
        }
        let repaired = agents
            .iter()
            .all(|a| a.host.content(DRIFTED).as_deref() == Some("maxPods: 110\n"));
        let free = slot_holder(&env.client, &secret).await.is_none();
        if repaired && free && restarts.len() >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not all repaired in time: restarts {restarts:?}, repaired {repaired}, slot free {free}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let window = rollout_rules::MIN_HOLD - Duration::from_millis(500);
    let most_at_once = restarts
        .iter()
        .map(|(_, at)| {
            restarts
                .iter()
                .filter(|(_, other)| *other >= *at && *other < *at + window)
                .count()
        })
        .max()
        .unwrap_or_default();
    println!(
        "fleet drift: kubelet restarts {:?}; most restarting at once: {most_at_once}",
        restarts
            .iter()
            .map(|(node, at)| format!("{}@{:.1}s", &node[..7], at.as_secs_f64()))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        restarts.len(),
        4,
        "one kubelet restart per node: {restarts:?}"
    );
    assert!(most_at_once <= 1, "budget 1: {restarts:?}");
    for agent in &agents {
        assert!(
            node_events(&env.client, &agent.node, "DriftRepaired")
                .await
                .len()
                == 1,
            "{} reports its repair",
            agent.node
        );
    }
    for agent in agents {
        agent.stop().await;
    }
}

/// Issue 45 item 4: `--drift-mode=report` leaves a drifted node as it is and says so — a
/// `DriftDetected` Warning event (once), the Node condition `NodeAgentDrift=True`
/// (`DriftReported`, what the seed counts) and `drift_pending` 1; the default mode repairs.
#[tokio::test]
async fn report_mode_reports_drift_and_leaves_the_node_as_it_is() {
    use gardener_extension_node::agent::pipeline::drift::rules::{self as drift_rules, DriftMode};
    use support::agent::{create_node, limited_kubeconfig, node_events};
    const DRIFTED: &str = "/etc/app/drift.conf";
    let env = support::env().await;
    let node = node_name(&env);
    let secret = secret_name(&node);
    create_node(&env.client, &node).await;
    let kubeconfig = limited_kubeconfig(&env, &node, &[&secret]).await;
    let credentials = gardener_extension_node::agent::access::switching_client::Credentials::new(
        gardener_extension_node::kubeconfig::config_from_yaml(&kubeconfig)
            .await
            .unwrap(),
    );
    let state = tempfile::tempdir().unwrap();
    let mut settings = settings(&node, &secret, state.path().to_path_buf());
    settings.drift_check_interval = Duration::from_secs(1);
    settings.drift_mode = DriftMode::Report;
    let agent = RunningAgent::run(settings, credentials, false, FakeHost::default(), state);
    let mut app = service("app.service", "app");
    app["filePaths"] = json!([DRIFTED]);
    let osc = osc_yaml(&[app], &[plain_file(DRIFTED, "a=1\n", Some(0o644))], None);
    let checksum = put_osc(&env.client, &agent.secret, &osc).await;
    agent.wait_reported(&env.client, &checksum).await;
    agent.host.take_ops();

    agent.host.put(DRIFTED, "a=2\n", 0o644);
    let note = agent
        .wait_event(
            &env.client,
            drift_rules::EVENT_DETECTED,
            Duration::from_secs(20),
        )
        .await;
    println!("report mode: {note}");
    support::wait_for("NodeAgentDrift=True", Duration::from_secs(20), || async {
        let found = condition(&env.client, &agent.node, drift_rules::CONDITION_TYPE).await;
        (found == Some(("True".into(), drift_rules::REASON_REPORTED.into())))
            .then_some(())
            .ok_or(format!("{found:?}"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        agent.host.content(DRIFTED).as_deref(),
        Some("a=2\n"),
        "left as it is"
    );
    assert_eq!(agent.host.take_ops(), [], "nothing restarted");
    assert_eq!(agent.metrics.drift_pending.get(), 1);
    assert_eq!(
        node_events(&env.client, &agent.node, drift_rules::EVENT_DETECTED)
            .await
            .len(),
        1,
        "reported once"
    );
    // Put back by hand: the condition clears.
    agent.host.put(DRIFTED, "a=1\n", 0o644);
    support::wait_for("NodeAgentDrift=False", Duration::from_secs(20), || async {
        let found = condition(&env.client, &agent.node, drift_rules::CONDITION_TYPE).await;
        (found == Some(("False".into(), drift_rules::REASON_NONE.into())))
            .then_some(())
            .ok_or(format!("{found:?}"))
    })
    .await;
    assert_eq!(agent.metrics.drift_pending.get(), 0);
    agent.stop().await;
}

fn in_place_osc(version: &str) -> String {
    let mut osc: Value =
        serde_norway::from_str(&osc_yaml(&[service("app.service", "app")], &[], None)).unwrap();
    osc["spec"]["inPlaceUpdates"] = json!({
        "operatingSystemVersion": version,
        "kubelet": support::agent::KUBERNETES_VERSION,
    });
    osc["status"]["inPlaceUpdates"]["osUpdate"] =
        json!({"command": "/opt/bin/update-os", "args": [version]});
    serde_norway::to_string(&osc).unwrap()
}

/// A Debian node on `version`.
fn debian(version: &str) -> FakeHost {
    let host = FakeHost::default();
    host.put("/etc/os-release", "ID=debian\nVERSION_ID=\"12\"\n", 0o644);
    host.put("/etc/debian_version", &format!("{version}\n"), 0o644);
    host
}

/// Plays machine-controller-manager: the Node is drained and ready for the update.
async fn ready_for_update(client: &Client, node: &str) {
    set_condition(
        client,
        node,
        json!({"type": "InPlaceUpdate", "status": "True", "reason": "ReadyForUpdate"}),
    )
    .await;
}

/// Applies 12.6, then asks for 12.7 and waits until the agent waits for the node's turn.
async fn start_in_place(env: &support::TestEnv, host: FakeHost) -> (RunningAgent, String) {
    let agent = RunningAgent::start(env, host).await;
    let first = put_osc(&env.client, &agent.secret, &in_place_osc("12.6")).await;
    agent.wait_reported(&env.client, &first).await;
    assert_eq!(
        agent.host.programs_run(),
        [],
        "a first apply updates nothing in place"
    );
    let second = put_osc(&env.client, &agent.secret, &in_place_osc("12.7")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        agent.host.programs_run(),
        [],
        "no update before the node is ready for it"
    );
    assert_eq!(node_checksum(&env.client, &agent.node).await, Some(first));
    (agent, second)
}

#[tokio::test]
async fn an_in_place_os_update_waits_for_its_turn_runs_and_reports_success() {
    let env = support::env().await;
    let host = debian("12.6");
    host.program_writes
        .lock()
        .unwrap()
        .push(("/etc/debian_version".into(), b"12.7\n".to_vec()));
    let (agent, second) = start_in_place(&env, host).await;
    let ready = Instant::now();
    ready_for_update(&env.client, &agent.node).await;
    agent.wait_reported(&env.client, &second).await;
    println!(
        "in-process agent: in-place OS update done {:.1?} after ReadyForUpdate",
        ready.elapsed()
    );
    assert_eq!(
        agent.host.programs_run(),
        [("/opt/bin/update-os".to_string(), vec!["12.7".to_string()])]
    );
    let (labels, annotations) = node_metadata(&env.client, &agent.node).await;
    assert_eq!(
        labels
            .get("node.machine.sapcloud.io/update-result")
            .map(String::as_str),
        Some("successful")
    );
    assert!(!annotations.contains_key("node.machine.sapcloud.io/update-failed-reason"));
    agent.stop().await;
}

#[tokio::test]
async fn a_failing_os_update_labels_the_node_failed_with_the_commands_reason() {
    let env = support::env().await;
    let host = debian("12.6");
    host.program_results
        .lock()
        .unwrap()
        .push_back(Err(ProgramOutput {
            stdout: "Reading package lists...".into(),
            stderr: "system failure: no space left on /usr".into(),
            ending: "exit status: 1".into(),
        }));
    let (agent, second) = start_in_place(&env, host).await;
    ready_for_update(&env.client, &agent.node).await;
    let node = agent.node.clone();
    let reason = support::wait_for("update-result=failed", AT_ONCE, || {
        let (client, node) = (env.client.clone(), node.clone());
        async move {
            let (labels, annotations) = node_metadata(&client, &node).await;
            match labels
                .get("node.machine.sapcloud.io/update-result")
                .map(String::as_str)
            {
                Some("failed") => Ok(annotations
                    .get("node.machine.sapcloud.io/update-failed-reason")
                    .cloned()
                    .unwrap_or_default()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    println!("in-process agent: failed in-place update reported: {reason}");
    assert!(
        reason.starts_with("system failure: no space left on /usr"),
        "{reason}"
    );
    assert_ne!(node_checksum(&env.client, &agent.node).await, Some(second));
    agent.stop().await;
}

/// kube-controller-manager's `--cluster-signing-duration` in the renewal test's shoot: the
/// agent renews at 80–88 % of it.
const SIGNING: Duration = Duration::from_secs(30);

/// The serial and validity of the client certificate in the kubeconfig at `path`.
fn certificate_in(path: &std::path::Path) -> CertificateFacts {
    let text = std::fs::read_to_string(path).unwrap();
    let kubeconfig = Kubeconfig::from_yaml(&text).unwrap();
    first_certificate_facts(&client_certificate(&kubeconfig).unwrap()).unwrap()
}

/// With real components (kube-controller-manager's signer, gardener-resource-manager's CSR
/// approver and node-agent authorizer): the agent's certificate comes from its bootstrap token;
/// at 80–88 % of its validity the agent renews it, writes the new one and switches every client
/// to it without a restart, so once the first certificate expired the main loop still applies a new
/// OSC and the heartbeat thread still renews the node Lease.
#[tokio::test]
async fn a_renewed_certificate_switches_the_loop_and_the_heartbeat_without_a_restart() {
    let env = support::env().await;
    let shoot = Shoot::start_for_node_agents(&env, SIGNING).await;
    let admin = shoot.client().await;
    allow_bootstrappers(&admin).await;
    let node = node_name(&env);
    let secret = secret_name(&node);
    let machine = format!("machine-{node}");
    create_machine(&env.client, &env.namespace, &machine, &node, &secret).await;

    let state = tempfile::tempdir().unwrap();
    let mut settings = settings(&node, &secret, state.path().to_path_buf());
    settings.config.api_server.server = shoot.server_url();
    settings.config.api_server.ca_bundle = Some(ByteString(shoot.ca_pem().into_bytes()));
    let paths = settings.paths.clone();
    let token = create_bootstrap_token(&admin, Duration::from_secs(600)).await;
    std::fs::create_dir_all(paths.kubeconfig().parent().unwrap()).unwrap();
    std::fs::write(paths.bootstrap_token(), &token).unwrap();
    std::fs::write(paths.machine_name(), &machine).unwrap();
    tokio::time::timeout(
        Duration::from_secs(60),
        lifecycle::bootstrap(&settings.config, &paths, &paths.bootstrap_token()),
    )
    .await
    .expect("a certificate within 60 s");
    let first = certificate_in(&paths.kubeconfig());

    create_pool_node(&admin, &node, &secret).await;
    let checksum = put_osc(
        &admin,
        &secret,
        &osc_yaml(&[service("app.service", "one")], &[], None),
    )
    .await;
    let source = Source::Kubeconfig(paths.kubeconfig());
    let client_config = client_config(&source, &settings.config, &paths)
        .await
        .unwrap();
    let agent = RunningAgent::run(
        settings,
        Credentials::new(client_config),
        true,
        FakeHost::default(),
        state,
    );
    agent.wait_reported(&admin, &checksum).await;

    let kubeconfig = paths.kubeconfig();
    let renewed = support::wait_for("a renewed certificate", SIGNING, || {
        let kubeconfig = kubeconfig.clone();
        let first = first.serial.clone();
        async move {
            let now = certificate_in(&kubeconfig);
            (now.serial != first)
                .then_some(now)
                .ok_or("not yet".to_string())
        }
    })
    .await;
    // kube-controller-manager backdates notBefore by 5 minutes, so 80 % of a 30 s
    // certificate's validity has passed when it is issued: the agent renews at once (and
    // again every 10 s, its shortest spacing), as gardener-node-agent would.
    let now = chrono::Utc::now().timestamp();
    println!(
        "in-process agent: certificate renewed {} s before the first expired",
        first.not_after - now,
    );
    assert!(
        renewed.not_after >= first.not_after,
        "{renewed:?} after {first:?}"
    );

    // Past the first certificate's end: only the switched clients still get through.
    let past = (first.not_after - chrono::Utc::now().timestamp() + 2).max(0) as u64;
    tokio::time::sleep(Duration::from_secs(past)).await;
    let second = put_osc(
        &admin,
        &secret,
        &osc_yaml(&[service("app.service", "two")], &[], None),
    )
    .await;
    agent.wait_reported(&admin, &second).await;
    let lease = format!("gardener-node-agent-{node}");
    support::wait_for(
        "the node Lease renewed after the first certificate ended",
        Duration::from_secs(30),
        || {
            let (admin, lease) = (admin.clone(), lease.clone());
            async move {
                let renewed = Api::<Lease>::namespaced(admin, "kube-system")
                    .get(&lease)
                    .await
                    .ok()
                    .and_then(|l| l.spec?.renew_time)
                    .map(|t| t.0.as_second());
                renewed.filter(|at| *at > first.not_after).ok_or(format!(
                    "last renewed at {renewed:?}, first certificate ended at {}",
                    first.not_after
                ))
            }
        },
    )
    .await;
    agent.stop().await;
}
