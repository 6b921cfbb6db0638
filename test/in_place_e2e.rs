//! e2e: in-place node updates (GEP-31) on the node agent. The agent runs as a systemd service
//! in a real systemd (systemd-nspawn) against the real kube-apiserver with its limited
//! credentials (`support::agent`); the test plays gardenlet (writes the OSC secret) and, through
//! `support/mcm_in_place.rs`, machine-controller-manager's node-side protocol.
//!
//! The OS update command is a small test script shipped in the OSC itself (as the real update
//! script is): it records its arguments, fails with "invalid arguments" for a major version,
//! and otherwise "updates" by writing the wanted version into `/etc/debian_version`, which is
//! where the agent reads a Debian node's version. The real script is tested in
//! `test/os_update_script.rs`. kubelet's health endpoint is played by the test on
//! 127.0.0.1:10248 for the whole test process (the kubelet and CA rotation tests skip themselves
//! when that port is taken). kubelet.service is a stand-in unit the CA rotation test installs.

#![allow(clippy::unwrap_used, clippy::panic)]

#[path = "support/mcm_in_place.rs"]
mod mcm_in_place;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use mcm_in_place::Outcome;
use serde_json::json;
use support::agent::*;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
const APPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the tests watch an agent that must not act.
const QUIET: Duration = Duration::from_secs(4);
static COUNTER: AtomicUsize = AtomicUsize::new(0);

const UPDATE_COMMAND: &str = "/opt/e2e/os-update";
const ARGS_LOG: &str = "/var/lib/e2e/os-update-args";
const CONFIG_FILE: &str = "/etc/e2e/pool.conf";
const KUBELET_CONFIG: &str = "/var/lib/kubelet/config/kubelet";
const CPU_MANAGER_STATE: &str = "/var/lib/kubelet/cpu_manager_state";
const UPDATING_OS: &str = "node-agent.gardener.cloud/updating-operating-system-version";

/// The test's OS update: records its arguments; a major version (`13.x`) is refused as
/// invalid arguments (like the real script), after 6 KiB of apt-like progress with terminal
/// escapes on standard output; `12.9` is "staged for the reboot" (the version
/// changes only when the test plays the reboot); any other `12.x` becomes the node's version
/// at once.
const UPDATE_SCRIPT: &str = "#!/bin/sh\nmkdir -p /var/lib/e2e\nprintf '%s\\n' \"$@\" >> /var/lib/e2e/os-update-args\ncase $1 in\n  12.9) echo \"staged $1; rebooting\" ;;\n  12.*) printf '%s\\n' \"$1\" > /etc/debian_version; echo \"updated to $1\" ;;\n  *) i=0; while [ $i -lt 100 ]; do printf 'Get:%s http://deb.debian.org/debian trixie/main pkg%s [12 kB]\\033[K\\n' $i $i; i=$((i+1)); done\n     echo \"invalid arguments: $1 is not a point release of Debian 12\" >&2; exit 2 ;;\nesac\n";

fn secret_name() -> String {
    format!(
        "gardener-node-agent-inplace-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// An in-place pool's `osc.yaml`: a config file and the update script in `spec.files`,
/// `spec.inPlaceUpdates` with `os_version`, `status.inPlaceUpdates.osUpdate` naming the script.
fn in_place_osc(os_version: &str, config: &str) -> String {
    let osc = json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {"creationTimestamp": null},
        "spec": {
            "type": "debian",
            "purpose": "reconcile",
            "files": [
                plain_file(CONFIG_FILE, config, Some(0o644)),
                plain_file(UPDATE_COMMAND, UPDATE_SCRIPT, Some(0o755)),
            ],
            "inPlaceUpdates": {"operatingSystemVersion": os_version, "kubelet": KUBERNETES_VERSION},
        },
        "status": {
            "inPlaceUpdates": {"osUpdate": {"command": UPDATE_COMMAND, "args": [os_version]}},
        },
    });
    serde_norway::to_string(&osc).unwrap()
}

/// [`in_place_osc`] with kubelet's config file (`evictionHard` memory threshold, CPU manager
/// policy) and the kubelet version.
fn in_place_osc_with_kubelet(kubelet: &str, memory_available: &str, cpu_policy: &str) -> String {
    let mut osc: serde_json::Value =
        serde_norway::from_str(&in_place_osc("12.7", "generation = 1\n")).unwrap();
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: {memory_available}\ncpuManagerPolicy: {cpu_policy}\n"
    );
    osc["spec"]["files"]
        .as_array_mut()
        .unwrap()
        .push(plain_file(KUBELET_CONFIG, &config, Some(0o644)));
    osc["spec"]["inPlaceUpdates"]["kubelet"] = json!(kubelet);
    serde_norway::to_string(&osc).unwrap()
}

/// Boots a Debian 12.7 "node" running the agent on `secret` (already written), with its Node.
/// Puts the first OSC into `secret`, boots a node for it and waits until it applied it;
/// returns the node and the OSC's checksum.
async fn node_with_first_osc(
    env: &support::TestEnv,
    secret: &str,
    osc: &str,
) -> (AgentMachine, String) {
    let checksum = put_osc(&env.client, secret, osc).await;
    let agent = start_node(env, secret).await;
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    (agent, checksum)
}

async fn start_node(env: &support::TestEnv, secret: &str) -> AgentMachine {
    let machine = boot(BIN);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    // The machine's /etc starts empty: give it Debian's release files, os-release as a link
    // as Debian ships it.
    machine
        .sh("mkdir -p /run/e2e && printf 'PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\\nID=debian\\nVERSION_ID=\"12\"\\n' > /run/e2e/os-release && ln -sfn /run/e2e/os-release /etc/os-release && rm -f /etc/debian_version && echo 12.7 > /etc/debian_version")
        .expect_success("os-release");
    let kubeconfig = limited_kubeconfig(env, &node, &[secret]).await;
    AgentMachine::start(
        machine,
        &AgentSetup {
            secret_name: secret.to_string(),
            kubeconfig,
            server_url: env.server_url.clone(),
            ca_pem: env.ca_pem.clone(),
            drift_interval: "1h".to_string(),
            token_sync: vec![],
            binary_in_machine: BIN_IN_MACHINE.to_string(),
        },
    )
}

fn text(agent: &AgentMachine, path: &str) -> Option<String> {
    agent
        .machine
        .read_file(path)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

async fn node(env: &support::TestEnv, name: &str) -> Node {
    Api::<Node>::all(env.client.clone())
        .get(name)
        .await
        .unwrap()
}

fn label(node: &Node, key: &str) -> Option<String> {
    node.metadata.labels.as_ref()?.get(key).cloned()
}

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref()?.get(key).cloned()
}

/// Nothing of the update happened on `agent` yet: old checksum, no result, script not run.
async fn assert_untouched(env: &support::TestEnv, agent: &AgentMachine, checksum: &str) {
    let current = node(env, &agent.node).await;
    assert_eq!(
        annotation(&current, NODE_CHECKSUM).as_deref(),
        Some(checksum),
        "{}",
        agent.log()
    );
    assert_eq!(label(&current, mcm_in_place::LABEL_RESULT), None);
    assert_eq!(text(agent, ARGS_LOG), None, "the update ran early");
}

/// A pod bound to the node (no kubelet here: deleting it leaves it terminating).
async fn pod_on(env: &support::TestEnv, node: &str) -> String {
    let name = format!("ds-{node}");
    // No controller-manager here: the namespace's default ServiceAccount must be made.
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
    let _ = Api::<ServiceAccount>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &sa)
        .await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": env.namespace},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_update_waits_for_ready_for_update_then_updates_and_reports_success() {
    let env = support::env().await;
    let secret = secret_name();
    let (agent, v1) =
        node_with_first_osc(&env, &secret, &in_place_osc("12.7", "generation = 1\n")).await;
    let pod = pod_on(&env, &agent.node).await;

    // gardenlet: a new image version and a config change for the in-place pool.
    let v2 = put_osc(
        &env.client,
        &secret,
        &in_place_osc("12.8", "generation = 2\n"),
    )
    .await;
    tokio::time::sleep(QUIET).await;
    assert_untouched(&env, &agent, &v1).await;
    assert_eq!(
        text(&agent, CONFIG_FILE).as_deref(),
        Some("generation = 1\n")
    );

    // MCM: candidate, then selected (cordoned): still not ready.
    mcm_in_place::mark_candidate(&env.client, &agent.node).await;
    mcm_in_place::select(&env.client, &agent.node).await;
    tokio::time::sleep(QUIET).await;
    assert_untouched(&env, &agent, &v1).await;
    assert!(
        agent
            .log()
            .contains("waiting for machine-controller-manager")
    );

    // Drained: ready for the update. The agent applies, updates the OS, reports success.
    mcm_in_place::ready_for_update(&env.client, &agent.node).await;
    let outcome = mcm_in_place::await_result(&env.client, &agent.node, APPLY_TIMEOUT).await;
    assert_eq!(outcome, Outcome::Successful, "{}", agent.log());
    wait_for_checksum(&env.client, &agent, &v2, APPLY_TIMEOUT).await;

    assert_eq!(text(&agent, ARGS_LOG).as_deref(), Some("12.8\n"));
    assert_eq!(
        text(&agent, "/etc/debian_version").as_deref(),
        Some("12.8\n")
    );
    assert_eq!(
        text(&agent, CONFIG_FILE).as_deref(),
        Some("generation = 2\n")
    );
    let updated = node(&env, &agent.node).await;
    assert_eq!(annotation(&updated, UPDATING_OS), None);
    assert_eq!(
        annotation(&updated, mcm_in_place::ANNOTATION_FAILED_REASON),
        None
    );
    // The stand-in's clean-up after success.
    assert_eq!(label(&updated, mcm_in_place::LABEL_CANDIDATE), None);
    assert_eq!(label(&updated, mcm_in_place::LABEL_SELECTED), None);
    assert_eq!(label(&updated, mcm_in_place::LABEL_RESULT), None);
    assert_ne!(updated.spec.and_then(|s| s.unschedulable), Some(true));
    assert_eq!(
        mcm_in_place::condition_reason(&env.client, &agent.node)
            .await
            .as_deref(),
        Some("UpdateSuccessful")
    );
    // The pods on the node were deleted (GNA: DaemonSet pods come back fresh).
    let pod = Api::<Pod>::namespaced(env.client.clone(), &env.namespace)
        .get(&pod)
        .await
        .unwrap();
    assert!(pod.metadata.deletion_timestamp.is_some());

    // Nothing more happens: the script ran once.
    tokio::time::sleep(QUIET).await;
    assert_eq!(text(&agent, ARGS_LOG).as_deref(), Some("12.8\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_update_is_reported_and_the_rollout_touches_no_further_node() {
    let env = support::env().await;
    let secret = secret_name();
    let v1 = put_osc(
        &env.client,
        &secret,
        &in_place_osc("12.7", "generation = 1\n"),
    )
    .await;
    let first = start_node(&env, &secret).await;
    let second = start_node(&env, &secret).await;
    wait_for_checksum(&env.client, &first, &v1, APPLY_TIMEOUT).await;
    wait_for_checksum(&env.client, &second, &v1, APPLY_TIMEOUT).await;

    // A new major version: the update script refuses it.
    put_osc(
        &env.client,
        &secret,
        &in_place_osc("13.1", "generation = 2\n"),
    )
    .await;
    let nodes = vec![first.node.clone(), second.node.clone()];
    let outcomes = mcm_in_place::roll(&env.client, &nodes, APPLY_TIMEOUT).await;
    assert_eq!(outcomes.len(), 1, "the rollout went on: {outcomes:?}");
    let (failed_node, outcome) = &outcomes[0];
    assert_eq!(failed_node, &first.node);
    let Outcome::Failed(reason) = outcome else {
        panic!("expected a failure, got {outcome:?}; log:\n{}", first.log());
    };
    // Issue #26 item 8: the script's own message first, not the progress lines before it.
    assert!(
        reason.starts_with("invalid arguments: 13.1 is not a point release of Debian 12 ("),
        "{reason}"
    );
    assert!(
        reason.contains("pkg99 [12 kB]"),
        "the end of the output: {reason}"
    );
    assert!(!reason.chars().any(char::is_control), "{reason:?}");

    let failed = node(&env, &first.node).await;
    assert_eq!(
        label(&failed, mcm_in_place::LABEL_RESULT).as_deref(),
        Some("failed")
    );
    assert_eq!(annotation(&failed, UPDATING_OS).as_deref(), Some("13.1"));
    assert_eq!(
        annotation(&failed, NODE_CHECKSUM).as_deref(),
        Some(v1.as_str())
    );
    assert_eq!(text(&first, ARGS_LOG).as_deref(), Some("13.1\n"));
    assert_eq!(
        text(&first, "/etc/debian_version").as_deref(),
        Some("12.7\n")
    );

    // The second node: a candidate, never selected, its agent still waiting.
    tokio::time::sleep(QUIET).await;
    let untouched = node(&env, &second.node).await;
    assert_eq!(
        label(&untouched, mcm_in_place::LABEL_CANDIDATE).as_deref(),
        Some("true")
    );
    assert_eq!(label(&untouched, mcm_in_place::LABEL_SELECTED), None);
    assert_eq!(
        mcm_in_place::condition_reason(&env.client, &second.node)
            .await
            .as_deref(),
        Some("CandidateForUpdate")
    );
    assert_untouched(&env, &second, &v1).await;

    // The failed node's agent, restarted (as after a reboot into the old version), does not
    // run the update again for the same version: the failure stands.
    first
        .machine
        .run(&["systemctl", "restart", AGENT_UNIT])
        .expect_success("restart the agent");
    tokio::time::sleep(QUIET).await;
    assert_eq!(text(&first, ARGS_LOG).as_deref(), Some("13.1\n"));
    let failed = node(&env, &first.node).await;
    assert_eq!(
        label(&failed, mcm_in_place::LABEL_RESULT).as_deref(),
        Some("failed")
    );
    assert_eq!(
        annotation(&failed, mcm_in_place::ANNOTATION_FAILED_REASON).as_deref(),
        Some(reason.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_reboot_into_the_wanted_version_the_update_is_finished_without_running_again() {
    let env = support::env().await;
    let secret = secret_name();
    let (agent, v1) =
        node_with_first_osc(&env, &secret, &in_place_osc("12.7", "generation = 1\n")).await;

    let v2 = put_osc(
        &env.client,
        &secret,
        &in_place_osc("12.9", "generation = 2\n"),
    )
    .await;
    mcm_in_place::mark_candidate(&env.client, &agent.node).await;
    mcm_in_place::select(&env.client, &agent.node).await;
    mcm_in_place::ready_for_update(&env.client, &agent.node).await;

    // The command succeeded, the node still runs 12.7: the agent waits for the reboot.
    let deadline = std::time::Instant::now() + APPLY_TIMEOUT;
    while !agent
        .log()
        .contains("waiting for the node to reboot into 12.9")
    {
        assert!(std::time::Instant::now() < deadline, "{}", agent.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let waiting = node(&env, &agent.node).await;
    assert_eq!(annotation(&waiting, UPDATING_OS).as_deref(), Some("12.9"));
    assert_eq!(label(&waiting, mcm_in_place::LABEL_RESULT), None);
    assert_eq!(
        annotation(&waiting, NODE_CHECKSUM).as_deref(),
        Some(v1.as_str())
    );

    // The reboot: the node comes back on 12.9 and the agent starts again.
    agent
        .machine
        .sh("echo 12.9 > /etc/debian_version")
        .expect_success("new version");
    agent
        .machine
        .run(&["systemctl", "restart", AGENT_UNIT])
        .expect_success("restart the agent");
    let outcome = mcm_in_place::await_result(&env.client, &agent.node, APPLY_TIMEOUT).await;
    assert_eq!(outcome, Outcome::Successful, "{}", agent.log());
    wait_for_checksum(&env.client, &agent, &v2, APPLY_TIMEOUT).await;
    assert_eq!(text(&agent, ARGS_LOG).as_deref(), Some("12.9\n"));
    assert_eq!(
        annotation(&node(&env, &agent.node).await, UPDATING_OS),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_minor_version_and_config_changes_wait_for_the_gate_and_for_kubelet_health() {
    if !fake_kubelet_healthz() {
        eprintln!("127.0.0.1:10248 is taken (a kubelet on this host?); skipping");
        return;
    }
    let env = support::env().await;
    let secret = secret_name();
    let (agent, v1) = node_with_first_osc(
        &env,
        &secret,
        &in_place_osc_with_kubelet("1.35.2", "100Mi", "none"),
    )
    .await;
    agent
        .machine
        .write_file(CPU_MANAGER_STATE, b"{\"policyName\":\"none\"}", 0o600)
        .unwrap();

    // A kubelet minor version, an eviction threshold and the CPU manager policy change: all
    // in-place changes (the OS version stays).
    let v2 = put_osc(
        &env.client,
        &secret,
        &in_place_osc_with_kubelet("1.36.3", "200Mi", "static"),
    )
    .await;
    tokio::time::sleep(QUIET).await;
    assert_untouched(&env, &agent, &v1).await;
    assert!(agent.machine.exists(CPU_MANAGER_STATE));

    let outcomes = mcm_in_place::roll(
        &env.client,
        std::slice::from_ref(&agent.node),
        APPLY_TIMEOUT,
    )
    .await;
    assert_eq!(outcomes[0].1, Outcome::Successful, "{}", agent.log());
    wait_for_checksum(&env.client, &agent, &v2, APPLY_TIMEOUT).await;
    assert!(
        !agent.machine.exists(CPU_MANAGER_STATE),
        "the old policy's state stayed"
    );
    assert!(
        text(&agent, KUBELET_CONFIG)
            .unwrap()
            .contains("cpuManagerPolicy: static")
    );
    // No OS update was run.
    assert_eq!(text(&agent, ARGS_LOG), None);
    let journal = text(
        &agent,
        &format!("{CONFIG_DIR}/last-computed-osc-changes.yaml"),
    )
    .unwrap();
    assert!(journal.contains("minorVersion: false"), "{journal}");
}

const KUBELET_REAL: &str = "/var/lib/kubelet/kubeconfig-real";
const KUBELET_CLIENT_CURRENT: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";
/// What the test's kubelet stand-in saw when it (re)started.
const KUBELET_STARTS: &str = "/var/lib/e2e/kubelet-starts";
const KUBELET_SAW_BOOTSTRAP: &str = "/var/lib/e2e/kubelet-saw-bootstrap";
const KUBELET_SAW_DIR: &str = "/var/lib/e2e/kubelet-saw-dir";
/// A kubelet stand-in (no kubelet in the machine): on each start it records what kubelet
/// would read — its bootstrap kubeconfig and what is in its folder — each file renamed into
/// place whole, and counts the start last, so a test that has seen the start reads both
/// complete (systemd reports the restart done before this shell has run).
const KUBELET_STAND_IN: &str = "[Unit]\nDescription=kubelet stand-in\n[Service]\nExecStart=/bin/sh -c 'mkdir -p /var/lib/e2e; cat /var/lib/kubelet/kubeconfig-bootstrap > /var/lib/e2e/.saw-bootstrap; ls -A /var/lib/kubelet > /var/lib/e2e/.saw-dir; mv /var/lib/e2e/.saw-bootstrap /var/lib/e2e/kubelet-saw-bootstrap; mv /var/lib/e2e/.saw-dir /var/lib/e2e/kubelet-saw-dir; echo start >> /var/lib/e2e/kubelet-starts; exec sleep infinity'\n";
/// kubelet's `kubeconfig-real` as kubelet writes it after its certificate bootstrap.
const KUBELET_REAL_CONTENT: &str = "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /var/lib/kubelet/old-ca.crt\n    server: https://old.example\n  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    user: default-auth\n  name: default-context\ncurrent-context: default-context\nusers:\n- name: default-auth\n  user:\n    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n";
const KUBELET_PEM: &str = "-----BEGIN CERTIFICATE-----\nb2xkIGt1YmVsZXQgY2VydA==\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nb2xkIGtleQ==\n-----END EC PRIVATE KEY-----\n";

/// A CA rotation in place (issue 28 item 5), GNA's `performCredentialsRotationInPlace`: after
/// the apply, the node agent's credentials (here a token: nothing to re-issue) and kubelet,
/// bootstrapped again from its `kubeconfig-real` with its current certificate embedded, its old
/// credentials removed and kubelet restarted; the update is reported successful.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_rotation_in_place_bootstraps_kubelet_again_and_reports_success() {
    if !fake_kubelet_healthz() {
        eprintln!("127.0.0.1:10248 is taken (a kubelet on this host?); skipping");
        return;
    }
    let env = support::env().await;
    let secret = secret_name();
    let (agent, _v1) =
        node_with_first_osc(&env, &secret, &in_place_osc("12.7", "generation = 1\n")).await;
    // kubelet's credentials as kubelet left them, and the kubelet stand-in (not started).
    let machine = &agent.machine;
    machine
        .write_file(KUBELET_REAL, KUBELET_REAL_CONTENT.as_bytes(), 0o600)
        .unwrap();
    machine
        .write_file(KUBELET_CLIENT_CURRENT, KUBELET_PEM.as_bytes(), 0o600)
        .unwrap();
    machine
        .write_file(
            "/etc/systemd/system/kubelet.service",
            KUBELET_STAND_IN.as_bytes(),
            0o644,
        )
        .unwrap();
    machine
        .run(&["systemctl", "daemon-reload"])
        .expect_success("daemon-reload");

    let mut osc: serde_json::Value =
        serde_norway::from_str(&in_place_osc("12.7", "generation = 2\n")).unwrap();
    osc["spec"]["inPlaceUpdates"]["credentialsRotation"] =
        json!({"certificateAuthorities": {"lastInitiationTime": "2026-01-01T00:00:00Z"}});
    let v2 = put_osc(
        &env.client,
        &secret,
        &serde_norway::to_string(&osc).unwrap(),
    )
    .await;
    // Nothing before machine-controller-manager made the node ready.
    tokio::time::sleep(QUIET).await;
    assert!(machine.exists(KUBELET_REAL));
    assert_eq!(text(&agent, KUBELET_STARTS), None);

    // As a real kubelet, the stand-in is healthy only once it has read its bootstrap
    // credentials: the agent removes kubelet's bootstrap kubeconfig after the health check, so
    // an always-healthy stand-in could find it gone (registered only now: the other tests of
    // this process share the endpoint and wait at most this update's few seconds longer).
    let _healthy_after_start = KubeletHealthyOnceThere::new(machine.host_path(KUBELET_STARTS));
    let outcomes = mcm_in_place::roll(
        &env.client,
        std::slice::from_ref(&agent.node),
        APPLY_TIMEOUT,
    )
    .await;
    assert_eq!(outcomes[0].1, Outcome::Successful, "{}", agent.log());
    wait_for_checksum(&env.client, &agent, &v2, APPLY_TIMEOUT).await;
    assert_eq!(
        text(&agent, CONFIG_FILE).as_deref(),
        Some("generation = 2\n")
    );

    // kubelet was restarted once, and found its bootstrap kubeconfig, GNA's: the agent's
    // server and CA file, kubelet's current certificate embedded as certificate and key,
    // kubelet's context kept; kubeconfig-real and pki/ were gone.
    let starts = support::wait_for("the kubelet stand-in's start", APPLY_TIMEOUT, || async {
        text(&agent, KUBELET_STARTS).ok_or_else(|| agent.log())
    })
    .await;
    assert_eq!(starts, "start\n", "{}", agent.log());
    assert_eq!(
        machine.unit_property("kubelet.service", "ActiveState"),
        "active"
    );
    let seen = text(&agent, KUBELET_SAW_BOOTSTRAP).unwrap();
    let bootstrap = kube::config::Kubeconfig::from_yaml(&seen).unwrap();
    assert_eq!(bootstrap.clusters.len(), 1, "{seen}");
    assert_eq!(bootstrap.clusters[0].name, "default-cluster");
    let cluster = bootstrap.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some(env.server_url.as_str()));
    assert_eq!(
        cluster.certificate_authority.as_deref(),
        Some(format!("{CONFIG_DIR}/cluster-ca.crt").as_str())
    );
    assert_eq!(bootstrap.auth_infos.len(), 1, "{seen}");
    assert_eq!(bootstrap.auth_infos[0].name, "default-auth");
    let embedded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, KUBELET_PEM);
    let user = bootstrap.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(
        user.client_certificate_data.as_deref(),
        Some(embedded.as_str())
    );
    assert!(
        seen.contains(&format!("client-key-data: {embedded}")),
        "{seen}"
    );
    assert_eq!(
        bootstrap.current_context.as_deref(),
        Some("default-context")
    );
    let saw_dir = text(&agent, KUBELET_SAW_DIR).unwrap();
    assert!(
        saw_dir.lines().any(|l| l == "kubeconfig-bootstrap"),
        "{saw_dir}"
    );
    assert!(
        !saw_dir
            .lines()
            .any(|l| l == "kubeconfig-real" || l == "pki"),
        "{saw_dir}"
    );
    assert!(!machine.exists(KUBELET_REAL));
    assert!(!machine.exists("/var/lib/kubelet/pki"));
    // The agent's token: nothing to re-issue. Both flags are done in the journal.
    assert!(
        agent.log().contains("nothing to re-issue"),
        "{}",
        agent.log()
    );
    let journal = text(
        &agent,
        &format!("{CONFIG_DIR}/last-computed-osc-changes.yaml"),
    )
    .unwrap();
    let journal: serde_json::Value = serde_norway::from_str(&journal).unwrap();
    assert_eq!(
        journal["inPlaceUpdates"]["certificateAuthoritiesRotation"],
        json!({"kubelet": false, "nodeAgent": false}),
        "{journal}"
    );
    // Nothing more happens: kubelet is not restarted again.
    tokio::time::sleep(QUIET).await;
    assert_eq!(text(&agent, KUBELET_STARTS).as_deref(), Some("start\n"));
}
