//! e2e: the node agent as a systemd service in a real systemd (systemd-nspawn, see
//! `support/nspawn.rs`) against the real kube-apiserver on host loopback, with credentials a
//! Role/ClusterRole limits to its OSC secret (and the secrets it references), its Node, its
//! Lease and events (`support::agent::limited_kubeconfig`). The tests play kubelet (they
//! create the Node) and gardenlet (they write the OSC secret).
//!
//! One test per behaviour of the agent (`item1_…` to `item7_…`); each boots its own machine.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::agent::*;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
const APPLY_TIMEOUT: Duration = Duration::from_secs(60);
static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Names unique to one test.
struct Names {
    secret: String,
    creds: String,
    token: String,
}

fn names() -> Names {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let pid = std::process::id();
    Names {
        secret: format!("gardener-node-agent-e2e-{pid}-{n}"),
        creds: format!("e2e-creds-{pid}-{n}"),
        token: format!("e2e-token-{pid}-{n}"),
    }
}

const PLAIN: &str = "/etc/e2e/app.conf";
const B64: &str = "/etc/e2e/other.bin";
const SECRET_FILE: &str = "/etc/e2e/credentials";
const TOKEN_FILE: &str = "/var/lib/e2e/auth-token";
/// Content that a shell would expand, and bytes that are not UTF-8.
const PLAIN_CONTENT: &str = "listen = $HOME `id` \"quoted\"\n";
const B64_CONTENT: &[u8] = &[0, 159, 146, 150, 255, b'\n'];

/// The OSC of `item1_…`: files of each kind, units with a drop-in and `filePaths`, an enabled
/// and a stopped unit, containerd configuration with a plugin.
fn base_units() -> Vec<Value> {
    let mut app = service("app.service", "reads app.conf");
    app["dropIns"] = json!([{"name": "10-env.conf", "content": "[Service]\nEnvironment=E2E=1\n"}]);
    app["filePaths"] = json!([PLAIN]);
    let mut other = service("other.service", "reads other.bin");
    other["filePaths"] = json!([B64]);
    let mut stopped = service("stopped.service", "must stay stopped");
    stopped["enable"] = json!(false);
    stopped["command"] = json!("stop");
    vec![app, other, stopped]
}

fn base_files(names: &Names) -> Vec<Value> {
    vec![
        plain_file(PLAIN, PLAIN_CONTENT, Some(0o644)),
        b64_file(B64, B64_CONTENT, Some(0o640)),
        secret_ref_file(SECRET_FILE, &names.creds, "password"),
        plain_file("/etc/e2e/deep/nested/dir/file", "nested\n", None),
    ]
}

fn cri_config() -> Value {
    json!({
        "name": "containerd",
        "cgroupDriver": "systemd",
        "containerd": {
            "sandboxImage": "registry.k8s.io/pause:3.10",
            "plugins": [{
                "path": ["io.containerd.grpc.v1.cri", "containerd", "runtimes", "runsc"],
                "values": {"runtime_type": "io.containerd.runsc.v1"}
            }]
        }
    })
}

/// A machine with the agent running against `osc`, its Node and secrets in place; returns
/// the machine and the checksum of `osc` once the Node reports it.
async fn start_agent(
    env: &support::TestEnv,
    names: &Names,
    osc: &str,
    drift: &str,
) -> (AgentMachine, String) {
    let machine = boot(BIN);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    put_secret(&env.client, &names.creds, &[("password", b"s3cr3t\n")]).await;
    put_secret(&env.client, &names.token, &[("token", b"token-1")]).await;
    let checksum = put_osc(&env.client, &names.secret, osc).await;
    let kubeconfig =
        limited_kubeconfig(env, &node, &[&names.secret, &names.creds, &names.token]).await;
    let agent = AgentMachine::start(
        machine,
        &AgentSetup {
            secret_name: names.secret.clone(),
            kubeconfig,
            server_url: env.server_url.clone(),
            ca_pem: env.ca_pem.clone(),
            drift_interval: drift.to_string(),
            token_sync: vec![(names.token.clone(), TOKEN_FILE.to_string())],
            binary_in_machine: BIN_IN_MACHINE.to_string(),
        },
    );
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    (agent, checksum)
}

/// The value of one metric series (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).map(str::trim))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

fn read(agent: &AgentMachine, path: &str) -> Vec<u8> {
    agent
        .machine
        .read_file(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item1_first_apply_files_units_containerd_and_node_report() {
    let env = support::env().await;
    let names = names();
    let osc = osc_yaml(&base_units(), &base_files(&names), Some(cri_config()));
    let (agent, checksum) = start_agent(&env, &names, &osc, "10m").await;
    let m = &agent.machine;

    // The agent executed itself once more with its malloc tunables (same pid as systemd's).
    // glibc splits the variable in place while parsing it, so only its start is compared.
    let pid = m.unit_property(AGENT_UNIT, "MainPID");
    let environ = m.run(&["cat", &format!("/proc/{pid}/environ")]).stdout;
    let first_tunable = gardener_extension_node::malloc_tuning::AGENT_TUNABLES
        .split(':')
        .next()
        .unwrap();
    assert!(
        environ.starts_with(&format!("GLIBC_TUNABLES={first_tunable}"))
            || environ.contains(&format!("\0GLIBC_TUNABLES={first_tunable}")),
        "{environ:?}"
    );

    // Files: byte-identical, modes as given (0600 when unset), parents created 0755.
    assert_eq!(read(&agent, PLAIN), PLAIN_CONTENT.as_bytes());
    assert_eq!(agent.mode(PLAIN), "644");
    assert_eq!(read(&agent, B64), B64_CONTENT);
    assert_eq!(agent.mode(B64), "640");
    assert_eq!(read(&agent, SECRET_FILE), b"s3cr3t\n");
    assert_eq!(agent.mode(SECRET_FILE), "600");
    assert_eq!(read(&agent, "/etc/e2e/deep/nested/dir/file"), b"nested\n");
    assert_eq!(agent.mode("/etc/e2e/deep/nested/dir"), "755");

    // Units: files, drop-in, states, enablement.
    assert_eq!(
        String::from_utf8(read(
            &agent,
            "/etc/systemd/system/app.service.d/10-env.conf"
        ))
        .unwrap(),
        "[Service]\nEnvironment=E2E=1\n"
    );
    assert_eq!(agent.mode("/etc/systemd/system/app.service"), "600");
    for unit in ["app.service", "other.service"] {
        m.wait_for_unit_state(unit, "active", Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(agent.enablement(unit), "enabled", "{unit}");
    }
    assert_eq!(
        m.unit_property("app.service", "Environment"),
        "E2E=1",
        "drop-in loaded"
    );
    assert_eq!(
        m.unit_property("stopped.service", "ActiveState"),
        "inactive"
    );
    assert_eq!(agent.enablement("stopped.service"), "disabled");

    // containerd: config written from `containerd config default`, settings and plugin in,
    // PATH drop-in, containerd running with it.
    let config = String::from_utf8(read(&agent, "/etc/containerd/config.toml")).unwrap();
    for expected in [
        "sandbox_image = \"registry.k8s.io/pause:3.10\"",
        "SystemdCgroup = true",
        "config_path = \"/etc/containerd/certs.d\"",
        "\"/etc/containerd/conf.d/*.toml\"",
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]",
    ] {
        assert!(config.contains(expected), "missing {expected} in\n{config}");
    }
    m.wait_for_unit_state("containerd.service", "active", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        m.unit_property("containerd.service", "Environment")
            .contains("PATH=/var/bin/containerruntimes:")
    );
    let dump = m
        .run(&["containerd", "config", "dump"])
        .expect_success("config dump")
        .stdout;
    assert!(
        dump.contains("runsc"),
        "running containerd has the plugin:\n{dump}"
    );

    // Node: checksum verbatim, version and role labels, OSCApplied event.
    let node = Api::<Node>::all(env.client.clone())
        .get(&agent.node)
        .await
        .unwrap();
    let labels = node.metadata.labels.unwrap();
    assert_eq!(
        labels["worker.gardener.cloud/kubernetes-version"],
        KUBERNETES_VERSION
    );
    assert_eq!(labels["node-role.kubernetes.io/worker"], "");
    assert_eq!(node.metadata.annotations.unwrap()[NODE_CHECKSUM], checksum);
    assert!(
        !node_events(&env.client, &agent.node, "OSCApplied")
            .await
            .is_empty()
    );

    // On-node state in upstream's layout.
    let last = String::from_utf8(read(
        &agent,
        "/var/lib/gardener-node-agent/last-applied-osc.yaml",
    ))
    .unwrap();
    assert!(
        last.contains("app.service") && last.contains("30-env_config.conf"),
        "{last}"
    );
    assert_eq!(
        agent.mode("/var/lib/gardener-node-agent/last-applied-osc.yaml"),
        "600"
    );
    let journal = String::from_utf8(read(
        &agent,
        "/var/lib/gardener-node-agent/last-computed-osc-changes.yaml",
    ))
    .unwrap();
    assert!(
        journal.contains(&format!("operatingSystemConfigChecksum: {checksum}")),
        "{journal}"
    );

    // Lease and token sync.
    let lease_api = Api::<Lease>::namespaced(env.client.clone(), "kube-system");
    let lease_name = format!("gardener-node-agent-{}", agent.node);
    let lease = support::wait_for("lease", Duration::from_secs(30), || async {
        lease_api
            .get_opt(&lease_name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "none".to_string())
    })
    .await;
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(lease_name.as_str()));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = lease.metadata.owner_references.clone().unwrap()[0].clone();
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Node", agent.node.as_str(), Some(true), Some(true)),
        "as GNA writes it"
    );
    // Renewals go on after someone else wrote the Lease: the agent's kept copy is stale, its
    // PUT conflicts, it reads the Lease once and writes again (keeping the foreign label).
    let renewed_at = spec.renew_time.clone().unwrap().0;
    lease_api
        .patch(
            &lease_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e": "touched"}}})),
        )
        .await
        .unwrap();
    support::wait_for(
        "renewal after a foreign write",
        Duration::from_secs(30),
        || async {
            let lease = lease_api
                .get(&lease_name)
                .await
                .map_err(|e| e.to_string())?;
            let touched = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("e2e"))
                .is_some();
            let at = lease.spec.and_then(|s| s.renew_time).map(|t| t.0);
            match at {
                Some(at)
                    if touched
                        && at > renewed_at + k8s_openapi::jiff::SignedDuration::from_secs(15) =>
                {
                    Ok(())
                }
                other => Err(format!("touched {touched}, renewTime {other:?}")),
            }
        },
    )
    .await;
    support::wait_for("token file", Duration::from_secs(30), || async {
        match agent.machine.read_file(TOKEN_FILE) {
            Ok(bytes) if bytes == b"token-1" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(agent.mode(TOKEN_FILE), "640");

    // The credentials really are narrow: no unscoped secret list, no other node.
    let limited = client_for(
        &std::fs::read_to_string(
            agent
                .machine
                .host_path("/var/lib/gardener-node-agent/credentials/kubeconfig"),
        )
        .unwrap(),
    )
    .await;
    let secrets = Api::<Secret>::namespaced(limited.clone(), "kube-system");
    assert!(
        secrets.list(&ListParams::default()).await.is_err(),
        "unscoped secret list must be forbidden"
    );
    assert!(
        Api::<Node>::all(limited)
            .patch(
                "some-other-node",
                &PatchParams::default(),
                &Patch::Merge(json!({}))
            )
            .await
            .is_err()
    );

    // Metrics on the localhost port.
    let metrics = agent.metrics();
    assert!(
        metric(
            &metrics,
            "gardener_extension_node_agent_applies_total{result=\"applied\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "gardener_extension_node_agent_unit_jobs_total{command=\"stop\",reason=\"apply\"}"
        ),
        1.0,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item2_a_changed_file_restarts_exactly_the_units_that_list_it() {
    let env = support::env().await;
    let names = names();
    let units = base_units();
    let mut files = base_files(&names);
    let (agent, first) = start_agent(&env, &names, &osc_yaml(&units, &files, None), "10m").await;
    let m = &agent.machine;
    for unit in ["app.service", "other.service"] {
        m.wait_for_unit_state(unit, "active", Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let before: Vec<String> = ["app.service", "other.service", "stopped.service"]
        .iter()
        .map(|u| agent.invocation(u))
        .collect();
    assert_eq!(before[0].len(), 32);

    // The Node asks for a reconciliation delay: the change must not land before it.
    let delay = Duration::from_millis(1500);
    Api::<Node>::all(env.client.clone())
        .patch(&agent.node, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"node-agent.gardener.cloud/reconciliation-delay": "1.5s"}}})))
        .await
        .unwrap();
    // Let the agent see the annotation before the secret changes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    files[1] = b64_file(B64, b"changed\n", Some(0o640));
    let changed_at = std::time::Instant::now();
    let second = put_osc(&env.client, &names.secret, &osc_yaml(&units, &files, None)).await;
    assert_ne!(first, second);
    wait_for_checksum(&env.client, &agent, &second, APPLY_TIMEOUT).await;
    let took = changed_at.elapsed();
    assert!(
        took >= delay,
        "applied after {took:?}, before the {delay:?} delay"
    );

    assert_eq!(read(&agent, B64), b"changed\n");
    let after: Vec<String> = ["app.service", "other.service", "stopped.service"]
        .iter()
        .map(|u| agent.invocation(u))
        .collect();
    assert_eq!(
        after[0], before[0],
        "app.service does not list the file: not restarted"
    );
    assert_ne!(
        after[1], before[1],
        "other.service lists the file: restarted"
    );
    assert_eq!(after[2], before[2], "stopped.service untouched");
    assert_eq!(
        m.unit_property("stopped.service", "ActiveState"),
        "inactive"
    );
    m.wait_for_unit_state("other.service", "active", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item3_removing_a_unit_stops_disables_deletes_it_and_removing_a_file_deletes_it() {
    let env = support::env().await;
    let names = names();
    let mut units = base_units();
    let mut files = base_files(&names);
    let (agent, _) = start_agent(&env, &names, &osc_yaml(&units, &files, None), "10m").await;
    let m = &agent.machine;
    m.wait_for_unit_state("other.service", "active", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(agent.enablement("other.service"), "enabled");
    let app = agent.invocation("app.service");

    units.retain(|u| u["name"] != "other.service");
    files.retain(|f| f["path"] != B64 && f["path"] != SECRET_FILE);
    let checksum = put_osc(&env.client, &names.secret, &osc_yaml(&units, &files, None)).await;
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;

    assert!(
        !m.exists("/etc/systemd/system/other.service"),
        "unit file deleted"
    );
    assert_eq!(
        m.unit_property("other.service", "ActiveState"),
        "inactive",
        "stopped"
    );
    assert_eq!(
        m.unit_property("other.service", "LoadState"),
        "not-found",
        "gone after daemon-reload"
    );
    assert!(
        !m.exists("/etc/systemd/system/multi-user.target.wants/other.service"),
        "disabled"
    );
    assert!(!m.exists(B64) && !m.exists(SECRET_FILE), "files deleted");
    assert!(m.exists(PLAIN));
    assert_eq!(
        agent.invocation("app.service"),
        app,
        "unrelated unit untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item4_sigkill_in_the_middle_of_an_apply_then_restart_converges() {
    let env = support::env().await;
    let names = names();
    let units = base_units();
    let files = base_files(&names);
    let (agent, _) = start_agent(&env, &names, &osc_yaml(&units, &files, None), "10m").await;
    let m = &agent.machine;

    // Second OSC: 100 more files of 4 KiB (etcd caps the secret at 1.5 MiB) and a unit whose
    // restart job takes 4 s, so the agent is certainly in the middle of the apply when it is
    // killed.
    let mut big_files = files.clone();
    let blob = |i: usize| -> Vec<u8> { (0..4096).map(|j| ((i * 31 + j) % 251) as u8).collect() };
    for i in 0..100 {
        big_files.push(b64_file(
            &format!("/var/lib/e2e/blobs/{i:03}.bin"),
            &blob(i),
            Some(0o644),
        ));
    }
    let mut slow_units = units.clone();
    slow_units.push(json!({
        "name": "slow.service",
        "enable": true,
        "content": "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sleep 4\n[Install]\nWantedBy=multi-user.target\n",
        "filePaths": ["/var/lib/e2e/blobs/000.bin"],
    }));
    let agent_pid = m.unit_property(AGENT_UNIT, "MainPID");
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&slow_units, &big_files, None),
    )
    .await;

    // Kill once the journal for the new checksum shows the slow job pending.
    let journal_path = "/var/lib/gardener-node-agent/last-computed-osc-changes.yaml";
    support::wait_for(
        "the slow job to be running",
        Duration::from_secs(60),
        || async {
            let journal = String::from_utf8(m.read_file(journal_path).unwrap_or_default())
                .unwrap_or_default();
            let started = m.unit_property("slow.service", "ActiveState") == "activating";
            if journal.contains(&checksum) && journal.contains("slow.service") && started {
                Ok(())
            } else {
                Err(journal.chars().take(300).collect::<String>())
            }
        },
    )
    .await;
    m.run(&["kill", "-KILL", &agent_pid])
        .expect_success("SIGKILL the agent");

    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    assert_ne!(
        m.unit_property(AGENT_UNIT, "MainPID"),
        agent_pid,
        "a new agent process finished the apply"
    );
    for i in 0..100 {
        assert_eq!(
            read(&agent, &format!("/var/lib/e2e/blobs/{i:03}.bin")),
            blob(i),
            "file {i} complete"
        );
    }
    m.wait_for_unit_state("slow.service", "active", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let log = agent.log();
    assert!(
        log.contains("\"resumed\":true"),
        "the new process resumed the journal:\n{log}"
    );
    let journal = String::from_utf8(read(&agent, journal_path)).unwrap();
    assert!(!journal.contains("slow.service"), "nothing left: {journal}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item5_an_invalid_osc_changes_nothing_and_warns_on_the_node() {
    let env = support::env().await;
    let names = names();
    let units = base_units();
    let files = base_files(&names);
    let (agent, applied) = start_agent(&env, &names, &osc_yaml(&units, &files, None), "10m").await;
    let m = &agent.machine;
    let snapshot = |agent: &AgentMachine| {
        let files: Vec<Vec<u8>> = [
            PLAIN,
            B64,
            SECRET_FILE,
            "/var/lib/gardener-node-agent/last-applied-osc.yaml",
            "/etc/systemd/system/app.service",
        ]
        .iter()
        .map(|path| read(agent, path))
        .collect();
        let units: Vec<String> = ["app.service", "other.service"]
            .iter()
            .map(|u| agent.invocation(u))
            .collect();
        (files, units)
    };
    m.wait_for_unit_state("other.service", "active", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = snapshot(&agent);

    let mut bad_cases: Vec<(&str, String)> = Vec::new();
    let mut relative = files.clone();
    relative[0] = plain_file("etc/relative", "x", None);
    bad_cases.push(("relative path", osc_yaml(&units, &relative, None)));
    let mut dotdot = files.clone();
    dotdot[0] = plain_file("/etc/e2e/../passwd", "x", None);
    bad_cases.push(("path with ..", osc_yaml(&units, &dotdot, None)));
    let mut encoding = files.clone();
    encoding[0] = json!({"path": PLAIN, "content": {"inline": {"encoding": "gzip", "data": "x"}}});
    bad_cases.push(("unknown encoding", osc_yaml(&units, &encoding, None)));
    let mut command = units.clone();
    command[0]["command"] = json!("reboot");
    bad_cases.push(("unknown unit command", osc_yaml(&command, &files, None)));
    bad_cases.push(("undecodable", "spec: [this is not, an osc]\n".to_string()));

    for (case, yaml) in bad_cases {
        let checksum = put_osc(&env.client, &names.secret, &yaml).await;
        let event = support::wait_for(
            &format!("OSCInvalid event for {case}"),
            Duration::from_secs(30),
            || async {
                node_events(&env.client, &agent.node, "OSCInvalid")
                    .await
                    .into_iter()
                    .find(|e| e.note.as_deref().is_some_and(|n| n.contains(&checksum)))
                    .ok_or_else(|| "none yet".to_string())
            },
        )
        .await;
        assert_eq!(event.type_.as_deref(), Some("Warning"), "{case}");
        assert_eq!(
            node_checksum(&env.client, &agent.node).await.as_deref(),
            Some(applied.as_str()),
            "{case}: checksum kept"
        );
        assert_eq!(snapshot(&agent), before, "{case}: disk and units unchanged");
        let log = agent.log();
        assert!(
            log.contains("OSC rejected; nothing on the node was changed")
                && log.contains(&checksum),
            "{case}: clear log line\n{log}"
        );
    }

    // A valid OSC afterwards is applied normally.
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&units, &files[..3], None),
    )
    .await;
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    assert!(!m.exists("/etc/e2e/deep/nested/dir/file"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item6_a_file_edited_by_hand_is_restored_within_the_drift_interval() {
    let env = support::env().await;
    let names = names();
    let (agent, _) = start_agent(
        &env,
        &names,
        &osc_yaml(&base_units(), &base_files(&names), None),
        "2s",
    )
    .await;
    let m = &agent.machine;
    m.wait_for_unit_state("app.service", "active", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    let app = agent.invocation("app.service");
    let other = agent.invocation("other.service");

    m.write_file(PLAIN, b"edited by hand\n", 0o666).unwrap();
    m.write_file(
        "/etc/systemd/system/other.service.d/99-rogue.conf",
        b"[Service]\nEnvironment=ROGUE=1\n",
        0o644,
    )
    .unwrap();
    let edited = std::time::Instant::now();
    support::wait_for("the file restored", Duration::from_secs(20), || async {
        match m.read_file(PLAIN) {
            Ok(bytes) if bytes == PLAIN_CONTENT.as_bytes() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        edited.elapsed() < Duration::from_secs(10),
        "restored within a few drift intervals: {:?}",
        edited.elapsed()
    );
    assert_eq!(agent.mode(PLAIN), "644", "mode restored");
    support::wait_for("app.service restarted", Duration::from_secs(20), || async {
        let now = agent.invocation("app.service");
        if now != app && now.len() == 32 {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    assert_eq!(
        agent.invocation("other.service"),
        other,
        "unaffected unit not restarted"
    );
    let metrics = agent.metrics();
    assert!(
        metric(
            &metrics,
            "gardener_extension_node_agent_drift_repairs_total{kind=\"file\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert!(agent.log().contains("drift repaired"));
    assert!(
        !node_events(&env.client, &agent.node, "DriftRepaired")
            .await
            .is_empty()
    );
}

/// A writer of an OSC file's folder puts a link in the file's place, pointing at a private
/// file with the same bytes: drift repair replaces the link with the file and never chmods
/// the link's target (0600 stays 0600).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item8_a_link_in_a_files_place_is_replaced_and_its_target_keeps_its_mode() {
    let env = support::env().await;
    let names = names();
    let (agent, _) = start_agent(
        &env,
        &names,
        &osc_yaml(&base_units(), &base_files(&names), None),
        "2s",
    )
    .await;
    let m = &agent.machine;
    m.wait_for_unit_state("app.service", "active", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    m.write_file("/root/private", PLAIN_CONTENT.as_bytes(), 0o600)
        .unwrap();
    m.run(&["ln", "-sfn", "/root/private", PLAIN])
        .expect_success("ln");
    support::wait_for("the link replaced", Duration::from_secs(20), || async {
        let kind = m.run(&["stat", "-c", "%F", PLAIN]).stdout;
        if kind.trim() == "regular file" {
            Ok(())
        } else {
            Err(kind)
        }
    })
    .await;
    assert_eq!(read(&agent, PLAIN), PLAIN_CONTENT.as_bytes());
    assert_eq!(agent.mode(PLAIN), "644");
    assert_eq!(
        agent.mode("/root/private"),
        "600",
        "the link's target was not chmodded"
    );
}

/// Writes an OCI image archive (`support::oci`) with `/bin/tool` = `payload` and imports it
/// into the machine's containerd as `image` (namespace `default`), so no registry is needed.
fn import_image(m: &support::nspawn::Machine, image: &str, payload: &str) {
    import_image_files(
        m,
        image,
        vec![support::oci::ImageFile {
            path: "/bin/tool".into(),
            content: support::oci::Content::Bytes(payload.as_bytes().to_vec()),
            mode: 0o755,
        }],
    );
}

/// [`import_image`] with these files.
fn import_image_files(
    m: &support::nspawn::Machine,
    image: &str,
    files: Vec<support::oci::ImageFile>,
) {
    use support::oci::{Image, write_archive};
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("image.tar");
    write_archive(
        &Image {
            reference: image.into(),
            entrypoint: vec!["/bin/tool".into()],
            files,
        },
        &archive,
    )
    .unwrap();
    m.copy_in(&archive, "/root/image.tar", 0o644).unwrap();
    m.run(&[
        "ctr",
        "--namespace",
        "default",
        "images",
        "import",
        "/root/image.tar",
    ])
    .expect_success("import the test image");
}

/// A machine with containerd running and the agent started against `osc` (no secrets
/// referenced), after `prepare` ran on the booted machine; waits for the apply.
async fn start_agent_with_containerd(
    env: &support::TestEnv,
    names: &Names,
    osc: &str,
    prepare: impl FnOnce(&support::nspawn::Machine),
) -> (AgentMachine, String) {
    let machine = boot(BIN);
    machine
        .run(&["systemctl", "start", "containerd.service"])
        .expect_success("start containerd");
    machine
        .wait_for_unit_state("containerd.service", "active", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    prepare(&machine);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    let checksum = put_osc(&env.client, &names.secret, osc).await;
    let kubeconfig = limited_kubeconfig(env, &node, &[&names.secret]).await;
    let agent = AgentMachine::start(
        machine,
        &AgentSetup {
            secret_name: names.secret.clone(),
            kubeconfig,
            server_url: env.server_url.clone(),
            ca_pem: env.ca_pem.clone(),
            drift_interval: "10m".into(),
            token_sync: vec![],
            binary_in_machine: BIN_IN_MACHINE.to_string(),
        },
    );
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    (agent, checksum)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_ref_files_are_extracted_through_containerd() {
    let env = support::env().await;
    let names = names();
    let image = "registry.example.test/e2e/tools:v1";
    let mut tool_user = service("tool.service", "uses the extracted tool");
    tool_user["filePaths"] = json!(["/opt/bin/tool"]);
    let files = vec![json!({
        "path": "/opt/bin/tool",
        "permissions": 0o755,
        "content": {"imageRef": {"image": image, "filePathInImage": "/bin/tool"}}
    })];
    let osc = osc_yaml(&[tool_user], &files, None);
    let (agent, _) = start_agent_with_containerd(&env, &names, &osc, |m| {
        import_image(m, image, "tool-binary-v1")
    })
    .await;
    assert_eq!(read(&agent, "/opt/bin/tool"), b"tool-binary-v1");
    assert_eq!(agent.mode("/opt/bin/tool"), "755");
    let leftovers = agent
        .machine
        .sh("ls -A /var/lib/gardener-node-agent/tmp; mount | grep -c mount-image || true")
        .stdout;
    assert_eq!(
        leftovers.trim(),
        "0",
        "mount point removed and unmounted: {leftovers}"
    );
}

/// Issue #26 items 6 and 9 on a real node. An image whose `/opt` is a link to `/`:
/// `filePathInImage: /opt/etc/shadow` is the image's `/etc/shadow`, never the node's (only the
/// last component was opened without following links). `permissions: 4095` (07777) is 0755,
/// as gardener-node-agent writes it, for inline and image files alike; `0666` is 0644.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_links_resolve_inside_the_image_and_modes_keep_only_permission_bits() {
    use support::oci::{Content, ImageFile};
    let env = support::env().await;
    let names = names();
    let image = "registry.example.test/e2e/linked:v1";
    let files = vec![
        json!({
            "path": "/etc/e2e/from-image",
            "permissions": 4095,
            "content": {"imageRef": {"image": image, "filePathInImage": "/opt/etc/shadow"}}
        }),
        plain_file("/etc/e2e/all-bits", "inline\n", Some(4095)),
        plain_file("/etc/e2e/world-writable", "inline\n", Some(0o666)),
    ];
    let osc = osc_yaml(&[], &files, None);
    let (agent, _) = start_agent_with_containerd(&env, &names, &osc, |m| {
        import_image_files(
            m,
            image,
            vec![
                ImageFile::link("/opt", "/"),
                ImageFile {
                    path: "/etc/shadow".into(),
                    content: Content::Bytes(b"the image's shadow\n".to_vec()),
                    mode: 0o644,
                },
            ],
        );
    })
    .await;
    let node_shadow = agent.machine.read_file("/etc/shadow").ok();
    assert_eq!(read(&agent, "/etc/e2e/from-image"), b"the image's shadow\n");
    assert_ne!(node_shadow.as_deref(), Some(&b"the image's shadow\n"[..]));
    for (path, mode) in [
        ("/etc/e2e/from-image", "755"),
        ("/etc/e2e/all-bits", "755"),
        ("/etc/e2e/world-writable", "644"),
    ] {
        assert_eq!(agent.mode(path), mode, "{path}");
    }
    assert!(
        agent.log().contains("file mode narrowed"),
        "the narrowing is logged"
    );

    // A link the image cannot resolve fails the apply with the image's terms, nothing written.
    let broken = vec![json!({
        "path": "/etc/e2e/dangling",
        "content": {"imageRef": {"image": image, "filePathInImage": "/opt/no/such/file"}}
    })];
    let checksum = put_osc(&env.client, &names.secret, &osc_yaml(&[], &broken, None)).await;
    let note = event_note(&env.client, &agent, "OSCApplyFailed", "/opt/no/such/file").await;
    assert!(
        note.contains(
            "imageRef filePathInImage /opt/no/such/file: /no/such/file does not exist in the image"
        ),
        "{note}"
    );
    assert!(!agent.machine.exists("/etc/e2e/dangling"));
    assert_ne!(
        node_checksum(&env.client, &agent.node).await.as_deref(),
        Some(checksum.as_str())
    );
    assert_eq!(agent.machine.read_file("/etc/shadow").ok(), node_shadow);
}

/// Issue #26 item 7: a path with an escape sequence and a line break is refused (as before),
/// and the `OSCInvalid` note that `kubectl describe node` prints shows them as escapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_of_a_refused_osc_reach_the_node_event_escaped() {
    let env = support::env().await;
    let names = names();
    let units = base_units();
    let files = base_files(&names);
    let (agent, _) = start_agent(&env, &names, &osc_yaml(&units, &files, None), "10m").await;
    let mut hostile = files.clone();
    hostile[0] = plain_file("/etc/e2e/\u{1b}[2J\u{1b}]0;owned\u{7}\nline two", "x", None);
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&units, &hostile, None),
    )
    .await;
    let note = event_note(&env.client, &agent, "OSCInvalid", &checksum).await;
    assert!(
        !note.chars().any(char::is_control),
        "control characters in the note: {note:?}"
    );
    assert!(
        note.contains("file `/etc/e2e/\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\nline two`: path must not contain control characters"),
        "{note}"
    );
}

/// The agent's unit as a provision OSC (and, like gardenlet's, the reconcile OSC) carries it.
fn agent_unit_in_osc(metrics_port: u16) -> String {
    format!(
        "[Unit]\nDescription=gardener-extension-node agent\nAfter=network-online.target\n[Service]\nEnvironment=RUST_LOG=info,gardener_extension_node=debug\nExecStart={BIN_IN_MACHINE} --log-format json agent --config-dir={CONFIG_DIR} --metrics-bind-address=127.0.0.1:{metrics_port}\nRestart=always\nRestartSec=1\n[Install]\nWantedBy=multi-user.target\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item7_full_chain_user_data_boots_the_agent_and_the_operators_secret_is_applied() {
    use gardener_extension_node::api::{Cluster, ManagedResource};
    use kube::api::PostParams;

    let env = support::env().await;
    let ns = env.namespace.clone();
    let key = format!("gardener-node-agent-chain-{}", std::process::id());
    let machine = boot(BIN);
    let node = machine.name().to_string();
    let metrics_port = free_port();
    let token = limited_token(&env, &node, &[&key]).await;
    let mut operator = support::operator::OperatorProcess::start(
        &env.kubeconfig,
        &["--controllers=operatingsystemconfig"],
    );
    let cluster: Cluster = serde_json::from_value(support::fixtures::cluster_json(&ns)).unwrap();
    Api::<Cluster>::all(env.client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();

    // gardenlet's part: the two OSCs of a pool (PoolOscs).
    let pool = PoolOscs {
        namespace: ns.clone(),
        key: key.clone(),
        pool: "worker-a".into(),
        server_url: env.server_url.clone(),
        ca_pem: env.ca_pem.clone(),
        agent_unit_content: agent_unit_in_osc(metrics_port),
    };
    let mut app = service("chain-app.service", "a workload of the reconcile OSC");
    app["filePaths"] = json!(["/etc/chain/app.conf"]);
    let reconcile = pool.reconcile(
        json!({"name": "containerd", "cgroupDriver": "systemd", "containerd": {"sandboxImage": "registry.k8s.io/pause:3.10"}}),
        &[plain_file("/etc/chain/app.conf", "from the reconcile OSC\n", Some(0o644))],
        &[app],
    );
    pool.create(&env.client, &reconcile).await;

    // The operator's outputs: user data and the ManagedResource with the node-agent secret.
    let seed_secrets = Api::<Secret>::namespaced(env.client.clone(), &ns);
    let user_data = pool.user_data(&env.client, APPLY_TIMEOUT).await;
    let managed = Api::<ManagedResource>::namespaced(env.client.clone(), &ns);
    let shipped: Secret =
        support::wait_for("node-agent ManagedResource", APPLY_TIMEOUT, || async {
            let mr = managed
                .get_opt(&format!("extension-osc-{key}"))
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no MR yet")?;
            let holder = mr.spec.secret_refs.first().ok_or("no secret ref")?;
            let data = seed_secrets
                .get(&holder.name)
                .await
                .map_err(|e| e.to_string())?
                .data
                .unwrap_or_default();
            data.values()
                .filter_map(|manifest| serde_norway::from_slice::<Secret>(&manifest.0).ok())
                .find(|secret| secret.metadata.name.as_deref() == Some(key.as_str()))
                .ok_or_else(|| "no node-agent secret in the MR".to_string())
        })
        .await;
    let checksum = shipped.metadata.annotations.as_ref().unwrap()["checksum/data-script"].clone();

    // MCM's part: fill in the placeholders; cloud-init's part: run the user data as root.
    let user_data = user_data
        .replace("<<BOOTSTRAP_TOKEN>>", &token)
        .replace("<<MACHINE_NAME>>", &node);
    machine
        .write_file("/root/user-data", user_data.as_bytes(), 0o700)
        .unwrap();
    machine
        .run(&["bash", "/root/user-data"])
        .expect_success("run the user data");
    let agent = AgentMachine {
        machine,
        node: node.clone(),
        metrics_port,
    };
    agent
        .machine
        .wait_for_unit_state(AGENT_UNIT, "active", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));

    // kubelet's part: the Node; gardener-resource-manager's part: the secret in the shoot.
    create_node(&env.client, &node).await;
    let mut in_shoot = shipped.clone();
    in_shoot.metadata.resource_version = None;
    Api::<Secret>::namespaced(env.client.clone(), "kube-system")
        .create(&PostParams::default(), &in_shoot)
        .await
        .unwrap();

    wait_for_checksum(&env.client, &agent, &checksum, Duration::from_secs(120)).await;
    let m = &agent.machine;
    assert_eq!(
        read(&agent, "/etc/chain/app.conf"),
        b"from the reconcile OSC\n"
    );
    m.wait_for_unit_state("chain-app.service", "active", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    // The OS extension's status unit (containerd limits) and the agent's PATH drop-in.
    m.wait_for_unit_state("containerd.service", "active", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m.unit_property("containerd.service", "LimitNOFILE"),
        "1048576"
    );
    assert!(
        m.unit_property("containerd.service", "Environment")
            .contains("PATH=/var/bin/containerruntimes:")
    );
    assert!(
        String::from_utf8(read(&agent, "/etc/containerd/config.toml"))
            .unwrap()
            .contains("registry.k8s.io/pause:3.10")
    );
    // The agent replaced its own unit and restarted itself to run it, then finished.
    let log = agent.log();
    assert!(log.contains("own unit changed; exiting"), "{log}");
    assert!(log.contains("\"resumed\":true"), "{log}");
    assert!(
        m.read_file("/var/lib/osc/provision-osc-applied").is_ok(),
        "the user data's run-once guard"
    );
    operator.kill();
}

/// The Node's `SystemdUnitsReady` condition: (status, reason, message).
async fn units_condition(client: &kube::Client, node: &str) -> Option<(String, String, String)> {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "SystemdUnitsReady")
        .map(|c| {
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        })
}

/// Waits until `SystemdUnitsReady` has `reason` and a message containing `message`. The
/// agent checks the units right after an apply and then every minute, hence the timeout.
async fn wait_for_units_condition(
    client: &kube::Client,
    agent: &AgentMachine,
    reason: &str,
    message: &str,
) -> (String, String, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(100);
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        last = units_condition(client, &agent.node).await;
        if let Some(found) = &last
            && found.1 == reason
            && found.2.contains(message)
        {
            return found.clone();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "SystemdUnitsReady did not become {reason} ({message}); last {last:?}; agent log:\n{}",
        agent.log()
    );
}

/// Waits for an event on the Node with `reason` whose note contains `text`.
async fn wait_for_event(
    client: &kube::Client,
    agent: &AgentMachine,
    reason: &str,
    text: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let deadline = tokio::time::Instant::now() + APPLY_TIMEOUT;
    loop {
        let events = node_events(client, &agent.node, reason).await;
        if events
            .iter()
            .any(|e| e.note.as_deref().unwrap_or_default().contains(text))
        {
            return events;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "no {reason} event with {text:?} (have {:?}); agent log:\n{}",
                events.iter().map(|e| &e.note).collect::<Vec<_>>(),
                agent.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The note of the first `reason` event whose note contains `text` ([`wait_for_event`]).
async fn event_note(
    client: &kube::Client,
    agent: &AgentMachine,
    reason: &str,
    text: &str,
) -> String {
    wait_for_event(client, agent, reason, text)
        .await
        .into_iter()
        .filter_map(|event| event.note)
        .find(|note| note.contains(text))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item9_systemd_units_ready_and_aggregated_unit_events() {
    let env = support::env().await;
    let names = names();
    let units = base_units();
    let files = base_files(&names);
    let (agent, _) = start_agent(&env, &names, &osc_yaml(&units, &files, None), "10m").await;

    // After the first apply: all units as they should be (stopped.service is disabled and
    // stopped, which is what it should be).
    let (status, _, message) = wait_for_units_condition(
        &env.client,
        &agent,
        "AllUnitsHealthy",
        "All systemd units from the operating system config are running as expected.",
    )
    .await;
    assert_eq!(status, "True");

    // One event per command for the whole apply, GNA's reasons and wording.
    let restarts = wait_for_event(
        &env.client,
        &agent,
        "SystemDUnitRestart",
        "processed restart of units app.service, other.service",
    )
    .await;
    assert_eq!(restarts.len(), 1, "one aggregated event: {restarts:?}");
    assert_eq!(restarts[0].type_.as_deref(), Some("Normal"));
    let stops = wait_for_event(
        &env.client,
        &agent,
        "SystemDUnitStop",
        "processed stop of unit stopped.service",
    )
    .await;
    assert_eq!(stops.len(), 1, "{stops:?}");

    // A unit whose job fails: a Warning event with GNA's wording and the error.
    let mut broken_units = units.clone();
    broken_units.push(json!({
        "name": "broken.service",
        "enable": true,
        "command": "start",
        "content": "[Unit]\nDescription=fails\n[Service]\nType=oneshot\nExecStart=/bin/false\n[Install]\nWantedBy=multi-user.target\n",
    }));
    put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&broken_units, &files, None),
    )
    .await;
    let warnings = wait_for_event(
        &env.client,
        &agent,
        "SystemDUnitRestart",
        "processed restart of unit broken.service failed with error",
    )
    .await;
    assert!(
        warnings
            .iter()
            .any(|e| e.type_.as_deref() == Some("Warning")),
        "{warnings:?}"
    );
    // The same unit, now failing a moment after it started: the apply succeeds, and the next
    // unit check (at most a minute later) turns the condition False/UnhealthyUnits.
    let mut failing_units = units.clone();
    failing_units.push(json!({
        "name": "broken.service",
        "enable": true,
        "command": "start",
        "content": "[Unit]\nDescription=fails later\n[Service]\nExecStart=/bin/sh -c 'sleep 2; exit 1'\n[Install]\nWantedBy=multi-user.target\n",
    }));
    let failing = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&failing_units, &files, None),
    )
    .await;
    wait_for_checksum(&env.client, &agent, &failing, APPLY_TIMEOUT).await;
    let (status, _, message_bad) = wait_for_units_condition(
        &env.client,
        &agent,
        "UnhealthyUnits",
        "broken.service: failed",
    )
    .await;
    assert_eq!(status, "False");
    assert_ne!(message, message_bad);

    // Removing it: the condition is back to healthy.
    let fixed = put_osc(&env.client, &names.secret, &osc_yaml(&units, &files, None)).await;
    wait_for_checksum(&env.client, &agent, &fixed, APPLY_TIMEOUT).await;
    wait_for_units_condition(&env.client, &agent, "AllUnitsHealthy", "").await;
}

/// A oneshot unit that appends `<host> start <time>` and `<host> end <time>` to a log around
/// a sleep, so an apply takes a while and its window can be read back.
fn slow_unit(round: u32) -> Value {
    json!({
        "name": "slow.service",
        "enable": true,
        "command": "start",
        "content": format!("[Unit]\nDescription=slow apply, round {round}\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh -c 'echo start $(date +%%s.%%N) >> /var/lib/e2e-slow.log; sleep 3; echo end $(date +%%s.%%N) >> /var/lib/e2e-slow.log'\n[Install]\nWantedBy=multi-user.target\n"),
    })
}

/// The (start, end) windows of `slow.service` runs in one machine, in order.
fn slow_windows(agent: &AgentMachine) -> Vec<(f64, f64)> {
    let log = String::from_utf8(read(agent, "/var/lib/e2e-slow.log")).unwrap();
    let mut windows = Vec::new();
    let mut start = None;
    for line in log.lines() {
        let (kind, at) = line.split_once(' ').unwrap();
        let at: f64 = at.parse().unwrap();
        match kind {
            "start" => start = Some(at),
            _ => windows.push((start.take().unwrap(), at)),
        }
    }
    windows
}

/// Creates or replaces the OSC secret with the serial annotation (in one write, so no agent
/// ever sees the new data without it); returns its checksum.
async fn put_serial_osc(secrets: &Api<Secret>, name: &str, osc: &str) -> String {
    let mut secret = osc_secret(name, osc);
    secret.metadata.annotations.get_or_insert_default().insert(
        "reconciliation.osc.node-agent.gardener.cloud/serial".into(),
        "true".into(),
    );
    match secrets.get_opt(name).await.unwrap() {
        Some(existing) => {
            secret.metadata.resource_version = existing.metadata.resource_version;
            secrets
                .replace(name, &Default::default(), &secret)
                .await
                .unwrap();
        }
        None => {
            secrets.create(&Default::default(), &secret).await.unwrap();
        }
    }
    sha256_hex(osc.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item10_serial_reconciliation_applies_one_node_at_a_time() {
    let env = support::env().await;
    let names = names();
    let secrets = Api::<Secret>::namespaced(env.client.clone(), "kube-system");
    let leases = Api::<Lease>::namespaced(env.client.clone(), "kube-system");
    let first = put_serial_osc(
        &secrets,
        &names.secret,
        &osc_yaml(&[slow_unit(1)], &[], None),
    )
    .await;

    let mut agents = Vec::new();
    for _ in 0..2 {
        let machine = boot(BIN);
        let node = machine.name().to_string();
        create_node(&env.client, &node).await;
        let kubeconfig = limited_kubeconfig(&env, &node, &[&names.secret]).await;
        agents.push((machine, kubeconfig));
    }
    let agents: Vec<AgentMachine> = agents
        .into_iter()
        .map(|(machine, kubeconfig)| {
            AgentMachine::start(
                machine,
                &AgentSetup {
                    secret_name: names.secret.clone(),
                    kubeconfig,
                    server_url: env.server_url.clone(),
                    ca_pem: env.ca_pem.clone(),
                    drift_interval: "10m".into(),
                    token_sync: Vec::new(),
                    binary_in_machine: BIN_IN_MACHINE.to_string(),
                },
            )
        })
        .collect();
    let hosts: Vec<String> = agents.iter().map(|a| a.node.clone()).collect();

    // Watch the lock's holder while both apply.
    let holders = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watcher = {
        let (leases, name, holders) = (leases.clone(), names.secret.clone(), holders.clone());
        tokio::spawn(async move {
            loop {
                if let Some(lease) = leases.get_opt(&name).await.unwrap() {
                    let holder = lease
                        .spec
                        .and_then(|s| s.holder_identity)
                        .unwrap_or_default();
                    let mut seen = holders.lock().unwrap();
                    if seen.last() != Some(&holder) {
                        seen.push(holder);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let check_round = |round: usize| {
        let windows: Vec<(f64, f64)> = agents
            .iter()
            .map(|a| {
                let all = slow_windows(a);
                assert_eq!(all.len(), round, "{}: {all:?}", a.node);
                all[round - 1]
            })
            .collect();
        let (a, b) = (windows[0], windows[1]);
        assert!(
            a.1 <= b.0 || b.1 <= a.0,
            "round {round}: applies overlap: {a:?} {b:?}"
        );
    };

    for agent in &agents {
        wait_for_checksum(&env.client, agent, &first, APPLY_TIMEOUT).await;
    }
    check_round(1);

    // A change: both agents see it at once (no reconciliation delay in serial mode), and
    // still apply one after the other.
    let second = put_serial_osc(
        &secrets,
        &names.secret,
        &osc_yaml(&[slow_unit(2)], &[], None),
    )
    .await;
    for agent in &agents {
        wait_for_checksum(&env.client, agent, &second, APPLY_TIMEOUT).await;
    }
    check_round(2);
    // Give the last holder's release a moment to be observed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    watcher.abort();

    // The lock went from one node to the other and was released after each apply.
    let seen = holders.lock().unwrap().clone();
    for host in &hosts {
        assert!(seen.contains(host), "{host} never held the lock: {seen:?}");
    }
    assert_eq!(
        seen.last().map(String::as_str),
        Some(""),
        "released: {seen:?}"
    );
    let lease = leases.get(&names.secret).await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(
        (
            spec.holder_identity,
            spec.lease_duration_seconds,
            spec.renew_time
        ),
        (None, None, None)
    );
    let owner = &lease.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Secret", names.secret.as_str(), Some(true), Some(true))
    );
    // Nobody waited out the 600 s: each took it when the other released it.
    for agent in &agents {
        assert!(
            agent
                .log()
                .contains("serial reconciliation: holding the lock"),
            "{}",
            agent.log()
        );
    }
    // The one that waited was woken by its watch of the lock, not by its poll.
    assert!(
        agents
            .iter()
            .any(|a| a.log().contains("serial reconciliation: the lock is free")),
        "no agent saw the lock freed: {}",
        agents
            .iter()
            .map(AgentMachine::log)
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}

/// The setup of an agent without token syncs, drift checks every 10 minutes.
fn plain_setup(env: &support::TestEnv, secret: &str, kubeconfig: String) -> AgentSetup {
    AgentSetup {
        secret_name: secret.to_string(),
        kubeconfig,
        server_url: env.server_url.clone(),
        ca_pem: env.ca_pem.clone(),
        drift_interval: "10m".into(),
        token_sync: Vec::new(),
        binary_in_machine: BIN_IN_MACHINE.to_string(),
    }
}

/// A started agent in a new machine whose OSC runs one `app.service` (`description`), with the
/// OSC's checksum.
async fn one_unit_agent(env: &support::TestEnv, description: &str) -> (AgentMachine, String) {
    let names = names();
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&[service("app.service", description)], &[], None),
    )
    .await;
    let machine = boot(BIN);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    let kubeconfig = limited_kubeconfig(env, &node, &[&names.secret]).await;
    let agent = AgentMachine::start(machine, &plain_setup(env, &names.secret, kubeconfig));
    (agent, checksum)
}

/// gardener-node-agent's unit as gardener v1.149.3 renders it (`nodeagent.UnitContent()`),
/// written out here to check ours against.
const GARDENER_NODE_AGENT_UNIT: &str = "[Unit]\nDescription=Gardener Node Agent\nAfter=network-online.target\n\n[Service]\nLimitMEMLOCK=infinity\nExecStart=/opt/bin/gardener-node-agent --config-dir=/var/lib/gardener-node-agent\nRestart=always\nRestartSec=5\nStandardOutput=journal+console\nStandardError=journal\n\n[Install]\nWantedBy=multi-user.target";

/// The node-init path (`docs/agent.md#bootstrap`): the binary, copied to
/// `/opt/bin/gardener-node-agent` as gardenlet's node-init does, runs `bootstrap
/// --config-dir=...` under that name; it installs gardener's unit, enables and starts it and
/// disables `gardener-node-init`. A rejected bootstrap token is a warning (the agent retries on
/// its own), and a second bootstrap changes nothing. The started agent applies the OSC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_installs_the_agent_as_gardener_node_init_runs_it() {
    let env = support::env().await;
    let names = names();
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&[service("app.service", "after bootstrap")], &[], None),
    )
    .await;
    let machine = boot(BIN);
    let node = machine.name().to_string();
    // The Node comes after the bootstraps: once the OSC is applied and the Node exists, the
    // started agent removes the bootstrap token (as GNA), which would race the checks below.
    let token = limited_token(&env, &node, &[&names.secret]).await;
    let setup = plain_setup(
        &env,
        &names.secret,
        gardener_extension_node::kubeconfig::render_token_kubeconfig(
            &env.server_url,
            &env.ca_pem,
            &token,
        ),
    );
    // What gardenlet's user data leaves on the node before gardener-node-init runs (the
    // kubeconfig until the agent can get a certificate itself), and its init unit.
    let mut config: Value = serde_norway::from_str(&config_yaml(&setup)).unwrap();
    config["server"] = json!({"metrics": {"port": free_port()}});
    let init_unit = "[Unit]\nDescription=first boot\n[Service]\nType=oneshot\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";
    for (path, content, mode) in [
        (
            format!("{CONFIG_DIR}/config-v1.149.3.yaml"),
            serde_norway::to_string(&config).unwrap(),
            0o600,
        ),
        (
            format!("{CONFIG_DIR}/cluster-ca.crt"),
            setup.ca_pem.clone(),
            0o644,
        ),
        (
            format!("{CONFIG_DIR}/credentials/kubeconfig"),
            setup.kubeconfig.clone(),
            0o600,
        ),
        (
            format!("{CONFIG_DIR}/credentials/bootstrap-token"),
            "not-a-token".to_string(),
            0o600,
        ),
        (
            "/etc/systemd/system/gardener-node-init.service".to_string(),
            init_unit.to_string(),
            0o644,
        ),
    ] {
        machine.write_file(path, content.as_bytes(), mode).unwrap();
    }
    machine
        .sh("systemctl daemon-reload && systemctl enable gardener-node-init.service && install -D -m 0755 /opt/gardener-extension-node/gardener-extension-node /opt/bin/gardener-node-agent")
        .expect_success("node-init's part");
    let bootstrap = || {
        machine
            .run(&[
                "/opt/bin/gardener-node-agent",
                "bootstrap",
                "--config-dir=/var/lib/gardener-node-agent",
            ])
            .expect_success("bootstrap")
    };

    let rejected = bootstrap();
    let log = format!("{}{}", rejected.stdout, rejected.stderr);
    assert!(log.contains("API server connectivity test failed"), "{log}");
    assert_eq!(
        String::from_utf8(
            machine
                .read_file("/etc/systemd/system/gardener-node-agent.service")
                .unwrap()
        )
        .unwrap(),
        GARDENER_NODE_AGENT_UNIT
    );
    for (unit, state) in [
        ("gardener-node-agent.service", "enabled"),
        ("gardener-node-init.service", "disabled"),
    ] {
        assert_eq!(
            machine.unit_property(unit, "UnitFileState"),
            state,
            "{unit}"
        );
    }
    machine
        .wait_for_unit_state(AGENT_UNIT, "active", Duration::from_secs(30))
        .unwrap();

    machine
        .write_file(
            format!("{CONFIG_DIR}/credentials/bootstrap-token"),
            token.as_bytes(),
            0o600,
        )
        .unwrap();
    let accepted = bootstrap();
    let log = format!("{}{}", accepted.stdout, accepted.stderr);
    assert!(log.contains("the API server is reachable"), "{log}");
    create_node(&env.client, &node).await;

    let agent = AgentMachine {
        machine,
        node,
        metrics_port: 0,
    };
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    // Started by bootstrap under gardener's unit, the agent runs as gardener-node-agent.
    assert!(
        agent.log().contains("starting the node agent"),
        "{}",
        agent.log()
    );
    assert_eq!(
        agent.machine.unit_property("app.service", "ActiveState"),
        "active"
    );
    // Bootstrapped: the token has done its work and is gone.
    assert!(
        !agent
            .machine
            .exists(format!("{CONFIG_DIR}/credentials/bootstrap-token"))
    );
}

/// `worker.gardener.cloud/restart-systemd-services` (`docs/agent.md#restart-annotation`): the
/// named units restart with GNA's event, a name that is no unit is refused with a Warning, the
/// annotation is removed, and the agent's own unit restarts last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restart_annotation_restarts_the_units_it_names_and_the_agent_last() {
    let env = support::env().await;
    let (agent, checksum) = one_unit_agent(&env, "restarted on request").await;
    let node = agent.node.clone();
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    let invocation = |unit: &str| agent.machine.unit_property(unit, "InvocationID");
    let (app_before, agent_before) = (invocation("app.service"), invocation(AGENT_UNIT));

    let nodes = Api::<Node>::all(env.client.clone());
    let annotation = "worker.gardener.cloud/restart-systemd-services";
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {annotation: "app, ../x, gardener-node-agent"}}})),
        )
        .await
        .unwrap();
    let refused = wait_for_event(
        &env.client,
        &agent,
        "RestartRequestRefused",
        "not restarted, not a unit name: ../x",
    )
    .await;
    assert_eq!(refused[0].type_.as_deref(), Some("Warning"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let annotations = nodes.get(&node).await.unwrap().metadata.annotations;
        let gone = !annotations.is_some_and(|a| a.contains_key(annotation));
        if gone && invocation(AGENT_UNIT) != agent_before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "annotation removed: {gone}; agent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let app_after = invocation("app.service");
    assert_ne!(app_after, app_before);
    // Restarted once: the new agent finds no annotation and leaves app.service alone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(invocation("app.service"), app_after);
    // GNA's event for it, Normal: the first apply's and this one (a repeated event is one
    // object with a series count).
    let occurrences: i32 = node_events(&env.client, &node, "SystemDUnitRestart")
        .await
        .iter()
        .filter(|e| e.note.as_deref() == Some("processed restart of unit app.service"))
        .inspect(|e| assert_eq!(e.type_.as_deref(), Some("Normal")))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    assert_eq!(occurrences, 2);
}

/// Sets the restart annotation on `node` to `value`.
async fn request_restart(client: &kube::Client, node: &str, value: &str) {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "worker.gardener.cloud/restart-systemd-services": value
            }}})),
        )
        .await
        .unwrap();
}

/// Whether `node` still carries the restart annotation.
async fn restart_requested(client: &kube::Client, node: &str) -> bool {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.metadata
        .annotations
        .is_some_and(|a| a.contains_key("worker.gardener.cloud/restart-systemd-services"))
}

/// Installs `units` (name, unit file) in the machine, outside the OSC.
fn install_units(agent: &AgentMachine, units: &[(String, String)]) {
    for (name, content) in units {
        agent
            .machine
            .write_file(
                format!("/etc/systemd/system/{name}"),
                content.as_bytes(),
                0o644,
            )
            .unwrap();
    }
    agent
        .machine
        .run(&["systemctl", "daemon-reload"])
        .expect_success("daemon-reload");
}

/// Issue #41 item 1: a restart of the bus daemon left the agent with a dead connection; every
/// later apply failed with `daemon-reload: … Broken pipe`, forever. Now the agent connects again
/// (and says so) and the next change, which needs a daemon-reload and a restart, is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_dbus_does_not_wedge_the_agent() {
    let env = support::env().await;
    let names = names();
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(
            &[service("app.service", "before dbus restarted")],
            &[],
            None,
        ),
    )
    .await;
    let machine = boot(BIN);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    let kubeconfig = limited_kubeconfig(&env, &node, &[&names.secret]).await;
    let agent = AgentMachine::start(machine, &plain_setup(&env, &names.secret, kubeconfig));
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    let agent_before = agent.invocation(AGENT_UNIT);

    agent
        .machine
        .run(&["systemctl", "restart", "dbus.service"])
        .expect_success("restart dbus");
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&[service("app.service", "after dbus restarted")], &[], None),
    )
    .await;
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    assert_eq!(
        agent.machine.unit_property("app.service", "Description"),
        "after dbus restarted"
    );
    let log = agent.log();
    assert!(
        log.contains("lost the connection to the system bus"),
        "{log}"
    );
    // The same process: it reconnected rather than being restarted.
    assert_eq!(agent.invocation(AGENT_UNIT), agent_before, "{log}");
}

/// Issue #41 item 4: GNA restarts (starts) any unit named: `systemd-poweroff` powered the
/// machine off, `modprobe@…` and `user@0` were started. Now units that change the machine's
/// state and template instances are refused with a Warning naming them; the harmless unit next
/// to them restarts and the machine stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restart_annotation_refuses_units_that_would_stop_the_machine() {
    let env = support::env().await;
    let (agent, checksum) = one_unit_agent(&env, "restarted beside refused units").await;
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    let app_before = agent.invocation("app.service");

    request_restart(
        &env.client,
        &agent.node,
        "systemd-poweroff, app, systemd-reboot.service, user@0, modprobe@dummy",
    )
    .await;
    let refused = wait_for_event(
        &env.client,
        &agent,
        "RestartRequestRefused",
        "not restarted, would power off, reboot, halt, suspend or rescue the machine: systemd-poweroff.service, systemd-reboot.service",
    )
    .await;
    assert!(
        refused
            .iter()
            .all(|e| e.type_.as_deref() == Some("Warning"))
    );
    wait_for_event(
        &env.client,
        &agent,
        "RestartRequestRefused",
        "template unit (made of any name on demand): user@0.service, modprobe@dummy.service",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while agent.invocation("app.service") == app_before {
        assert!(std::time::Instant::now() < deadline, "{}", agent.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!restart_requested(&env.client, &agent.node).await);
    // The machine is up, and nothing refused was started.
    let state = agent
        .machine
        .run(&["systemctl", "is-system-running"])
        .stdout;
    assert!(
        matches!(state.trim(), "running" | "degraded"),
        "{state}; {}",
        agent.log()
    );
    for unit in [
        "systemd-poweroff.service",
        "systemd-reboot.service",
        "user@0.service",
        "modprobe@dummy.service",
    ] {
        assert_eq!(
            agent.machine.unit_property(unit, "ActiveState"),
            "inactive",
            "{unit}"
        );
    }
}

/// Issue #41 item 4: GNA removes the annotation only after the restarts, so a restart that
/// takes the agent (or the node) down finds the annotation again afterwards and repeats, again
/// and again (`systemd-reboot` would reboot the node in a loop). Now the annotation is removed
/// first: a unit whose start kills the agent is started once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_request_is_acted_on_at_most_once() {
    let env = support::env().await;
    let (agent, checksum) = one_unit_agent(&env, "unrelated").await;
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    let starts = "/var/lib/agent-killer-starts";
    install_units(
        &agent,
        &[(
            "agent-killer.service".to_string(),
            format!(
                "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo started >> {starts}; systemctl kill --signal=SIGKILL {AGENT_UNIT}'\n"
            ),
        )],
    );
    request_restart(&env.client, &agent.node, "agent-killer").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !agent.machine.exists(starts) {
        assert!(std::time::Instant::now() < deadline, "{}", agent.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The agent comes back within seconds (RestartSec=1); give it time to find a leftover
    // annotation several times over.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let lines = String::from_utf8(read(&agent, starts)).unwrap();
    assert_eq!(
        lines.lines().count(),
        1,
        "{lines}; agent log:\n{}",
        agent.log()
    );
    assert!(!restart_requested(&env.client, &agent.node).await);
    agent
        .machine
        .wait_for_unit_state(AGENT_UNIT, "active", Duration::from_secs(30))
        .unwrap();
}

/// Issue #41 item 7: the restarts ran one after the other inside the main loop (a job timeout
/// each), so slow units held back an OSC change for minutes, and every name was tried and
/// logged in one line. Now the restarts run beside the loop, at most 50 units per request
/// (the rest reported), and log lines list at most ten names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_requests_do_not_hold_the_loop_and_are_capped() {
    let env = support::env().await;
    let names = names();
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&[service("app.service", "before")], &[], None),
    )
    .await;
    let machine = boot(BIN);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    let kubeconfig = limited_kubeconfig(&env, &node, &[&names.secret]).await;
    let agent = AgentMachine::start(machine, &plain_setup(&env, &names.secret, kubeconfig));
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    // Each takes 40 s to start: one after the other, they would hold the loop for 2 minutes.
    let slow: Vec<(String, String)> = (0..3)
        .map(|n| {
            (
                format!("slow-{n}.service"),
                "[Service]\nExecStartPre=/bin/sleep 40\nExecStart=/bin/sleep infinity\n".into(),
            )
        })
        .collect();
    install_units(&agent, &slow);
    // 3 slow units and 60 long names of units that do not exist: 13 beyond the cap.
    let mut value: Vec<String> = slow.iter().map(|(name, _)| name.clone()).collect();
    value.extend((0..60).map(|n| format!("absent-{n}-{}", "x".repeat(100))));
    request_restart(&env.client, &agent.node, &value.join(",")).await;
    agent
        .machine
        .wait_for_unit_state("slow-0.service", "activating", Duration::from_secs(30))
        .unwrap();

    let started = std::time::Instant::now();
    let checksum = put_osc(
        &env.client,
        &names.secret,
        &osc_yaml(&[service("app.service", "after")], &[], None),
    )
    .await;
    wait_for_checksum(&env.client, &agent, &checksum, Duration::from_secs(15)).await;
    let took = started.elapsed();
    assert_eq!(
        agent.machine.unit_property("app.service", "Description"),
        "after"
    );
    let note = event_note(
        &env.client,
        &agent,
        "RestartRequestRefused",
        "13 more than the 50 units one request may name",
    )
    .await;
    assert!(note.ends_with(" more)"), "{note}");
    let log = agent.log();
    let longest = log.lines().map(str::len).max().unwrap_or_default();
    assert!(longest < 3000, "a log line of {longest} bytes:\n{log}");
    eprintln!("OSC change applied {took:?} after it was written, while the restarts ran");
}

/// GNA's host name check (`docs/agent.md#host-name-check`): when the kernel's host name changes,
/// the agent exits and systemd starts it again, and the new process looks its Node up by the
/// new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_host_name_restarts_the_agent_with_the_new_name() {
    let env = support::env().await;
    let (agent, _) = one_unit_agent(&env, "before the rename").await;
    let node = agent.node.clone();
    agent
        .machine
        .wait_for_unit_state(AGENT_UNIT, "active", Duration::from_secs(30))
        .unwrap();
    // `active` comes with the fork; a rename before the process has read the host name would
    // be its start name, not a change (seen on a loaded machine): wait for its start line.
    let original = format!("\"hostname\":\"{}\"", node.to_lowercase());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !agent.log().contains(&original) {
        assert!(std::time::Instant::now() < deadline, "{}", agent.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = agent.machine.unit_property(AGENT_UNIT, "InvocationID");
    let renamed = format!("{node}-Renamed");
    agent
        .machine
        .run(&["hostname", &renamed])
        .expect_success("rename the host");
    // GNA's interval is 30 s: the check runs within that, plus the restart (bounded at three
    // intervals: a loaded machine delays the agent's loop, once by more than one interval).
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while agent.machine.unit_property(AGENT_UNIT, "InvocationID") == before {
        assert!(std::time::Instant::now() < deadline, "{}", agent.log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = agent.log();
    assert!(log.contains("host name changed"), "{log}");
    let lowered = renamed.to_lowercase();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !agent.log().contains(&format!("\"hostname\":\"{lowered}\"")) {
        assert!(std::time::Instant::now() < deadline, "{}", agent.log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
