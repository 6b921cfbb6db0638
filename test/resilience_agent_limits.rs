//! Limits of the node agent against inputs and states that once stopped it (issue #26 items 2
//! and 3, `docs/reliability.md#agent-limits`), in a real systemd (systemd-nspawn, see
//! `support/nspawn.rs`) against the real kube-apiserver. Throughout every scenario the test
//! reads the node's Lease every half second and asserts that its `renewTime` is never more
//! than 20 s old, and each ends with a valid OSC applied without any manual step:
//!
//! - a rollout budget of `4294967295` (it made every agent of the pool abort): a Warning event,
//!   the rollout goes on with one slot, the agent never restarts;
//! - a 528 KiB `osc.yaml` of YAML aliases that decodes to 200 MB: refused at once (Warning
//!   event), the agent's peak memory stays small;
//! - SIGTERM in the middle of an apply (a unit job that lasts 20 s): the agent stops within
//!   seconds; a journal larger than the agent reads (what the alias OSC used to leave) and a
//!   leftover temporary file are found at the next start: the file is removed and the changes
//!   computed again;
//! - and, without a machine: the Lease is renewed from the heartbeat thread while the thread
//!   that started it is blocked.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gardener_extension_node::agent::metrics::Metrics;
use gardener_extension_node::kubeconfig::render_token_kubeconfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use serde_json::{Value, json};
use support::agent::*;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
const APPLY_TIMEOUT: Duration = Duration::from_secs(90);
/// The node Lease's `renewTime` is never older than this (it is renewed every 10 s).
const MAX_LEASE_AGE: Duration = Duration::from_secs(20);
/// The Lease is watched at least this long, so that several renewals fall into every scenario.
const MIN_WATCH: Duration = Duration::from_secs(25);
const DIR: &str = "/var/lib/limits";
const FILES: usize = 8;
const SLOW_UNIT: &str = "limits-slow.service";

fn path(i: usize) -> String {
    format!("{DIR}/f{i}.conf")
}

/// OSC `version`: a few files, a unit restarted when the first changes, and (`slow`) a
/// oneshot unit whose restart job lasts 20 s.
fn osc(version: usize, slow: bool) -> String {
    let files: Vec<Value> = (0..FILES)
        .map(|i| {
            plain_file(
                &path(i),
                &format!("version {version} file {i}\n"),
                Some(0o644),
            )
        })
        .collect();
    let mut reader = service("limits.service", "reads f0");
    reader["filePaths"] = json!([path(0)]);
    let mut units = vec![reader];
    if slow {
        units.push(json!({
            "name": SLOW_UNIT,
            "enable": true,
            "command": "restart",
            "content": format!("[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sleep 20\nEnvironment=VERSION={version}\n[Install]\nWantedBy=multi-user.target\n"),
        }));
    }
    osc_yaml(&units, &files, None)
}

/// The issue's `osc.yaml`: 400 files whose content aliases one 500 KiB string (528 KiB of
/// text, 200 MB decoded).
fn alias_bomb() -> String {
    let big = "x".repeat(500 * 1024);
    let mut text = format!(
        "spec:\n  files:\n  - path: {DIR}/bomb0\n    content:\n      inline:\n        encoding: \"\"\n        data: &big {big}\n"
    );
    for i in 1..400 {
        text.push_str(&format!(
            "  - path: {DIR}/bomb{i}\n    content:\n      inline:\n        encoding: \"\"\n        data: *big\n"
        ));
    }
    text
}

/// Starts the agent in a fresh machine with OSC version 0 applied.
async fn agent(env: &support::TestEnv, tag: &str) -> (AgentMachine, String) {
    let machine = boot(BIN);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    let secret = format!("gardener-node-agent-{tag}-{}", std::process::id());
    let checksum = put_osc(&env.client, &secret, &osc(0, false)).await;
    let token = limited_token(env, &node, &[&secret]).await;
    let agent = AgentMachine::start(
        machine,
        &AgentSetup {
            secret_name: secret.clone(),
            kubeconfig: render_token_kubeconfig(&env.server_url, &env.ca_pem, &token),
            server_url: env.server_url.clone(),
            ca_pem: env.ca_pem.clone(),
            drift_interval: "10m".to_string(),
            token_sync: Vec::new(),
            binary_in_machine: BIN_IN_MACHINE.to_string(),
        },
    );
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    (agent, secret)
}

/// Writes `osc_yaml` (with `annotations` on the secret) and waits until the node reports it.
async fn apply(
    env: &support::TestEnv,
    agent: &AgentMachine,
    secret: &str,
    osc_yaml: &str,
    annotations: &[(&str, &str)],
) {
    let checksum = put_osc_annotated(&env.client, secret, osc_yaml, annotations).await;
    wait_for_checksum(&env.client, agent, &checksum, APPLY_TIMEOUT).await;
}

/// Reads the node Lease every 500 ms and keeps the oldest `renewTime` seen (as an age).
struct LeaseWatch {
    started: Instant,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Duration, usize)>,
}

impl LeaseWatch {
    fn start(client: &Client, node: &str) -> Self {
        let api = Api::<Lease>::namespaced(client.clone(), "kube-system");
        let name = format!("gardener-node-agent-{node}");
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = Arc::clone(&stop);
            async move {
                let (mut oldest, mut samples) = (Duration::ZERO, 0);
                while !stop.load(Ordering::SeqCst) {
                    if let Some(age) = lease_age(&api, &name).await {
                        oldest = oldest.max(age);
                        samples += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                (oldest, samples)
            }
        });
        LeaseWatch {
            started: Instant::now(),
            stop,
            task,
        }
    }

    /// Stops reading (after [`MIN_WATCH`] at the earliest); asserts the Lease never got older
    /// than [`MAX_LEASE_AGE`].
    async fn finish(self, what: &str) -> Duration {
        tokio::time::sleep(MIN_WATCH.saturating_sub(self.started.elapsed())).await;
        self.stop.store(true, Ordering::SeqCst);
        let (oldest, samples) = self.task.await.unwrap();
        println!("{what}: node Lease read {samples} times, oldest renewTime {oldest:.1?} old");
        assert!(
            samples > 10,
            "{what}: the Lease was read ({samples} samples)"
        );
        assert!(
            oldest <= MAX_LEASE_AGE,
            "{what}: the node Lease was not renewed for {oldest:?}"
        );
        oldest
    }
}

/// How old the Lease's `renewTime` is now (`None`: no Lease, or the read failed).
async fn lease_age(api: &Api<Lease>, name: &str) -> Option<Duration> {
    let renewed = api.get_opt(name).await.ok()??.spec?.renew_time?.0;
    let age = Timestamp::now().duration_since(renewed);
    Some(Duration::try_from(age).unwrap_or(Duration::ZERO))
}

/// Waits for a Warning event `reason` on the node whose note contains `needle`.
async fn wait_for_warning(client: &Client, node: &str, reason: &str, needle: &str) -> String {
    support::wait_for(
        &format!("a Warning {reason} naming {needle:?}"),
        Duration::from_secs(60),
        || async {
            let events = node_events(client, node, reason).await;
            events
                .iter()
                .filter(|e| e.type_.as_deref() == Some("Warning"))
                .filter_map(|e| e.note.clone())
                .find(|note| note.contains(needle))
                .ok_or_else(|| format!("{:?}", events.iter().map(|e| &e.note).collect::<Vec<_>>()))
        },
    )
    .await
}

/// The agent's unit restarts and process id.
fn restarts_and_pid(agent: &AgentMachine) -> (String, String) {
    let m = &agent.machine;
    (
        m.unit_property(AGENT_UNIT, "NRestarts"),
        m.unit_property(AGENT_UNIT, "MainPID"),
    )
}

/// The rollout annotations with `budget`; restarting limits.service (its file changes) is
/// disruptive, so every change needs a slot.
fn rollout_annotations(budget: &str) -> [(&'static str, &str); 3] {
    [
        ("node.extensions.gardener.cloud/rollout-budget", budget),
        (
            "node.extensions.gardener.cloud/disruptive-units",
            "limits.service",
        ),
        (
            "node.extensions.gardener.cloud/rollout-health-timeout",
            "30",
        ),
    ]
}

/// Issue #26 item 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_range_rollout_budget_is_reported_and_the_pool_goes_on_with_one_slot() {
    let env = support::env().await;
    let (agent, secret) = agent(&env, "budget").await;
    let watch = LeaseWatch::start(&env.client, &agent.node);
    let before = restarts_and_pid(&agent);
    apply(
        &env,
        &agent,
        &secret,
        &osc(1, false),
        &rollout_annotations("4294967295"),
    )
    .await;
    let note = wait_for_warning(
        &env.client,
        &agent.node,
        "DisruptiveRolloutBudgetInvalid",
        "\"4294967295\", not an integer from 1 to 32",
    )
    .await;
    let leases = Api::<Lease>::namespaced(env.client.clone(), "kube-system");
    let holder = leases
        .get(&secret)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some(agent.node.as_str()), "slot 0 taken");
    assert!(
        leases
            .get_opt(&format!("{secret}-1"))
            .await
            .unwrap()
            .is_none(),
        "one slot only"
    );
    assert_eq!(
        restarts_and_pid(&agent),
        before,
        "the agent never restarted"
    );

    // A valid OSC afterwards (a budget in range): applied.
    apply(
        &env,
        &agent,
        &secret,
        &osc(2, false),
        &rollout_annotations("2"),
    )
    .await;
    assert_eq!(
        agent.machine.read_file(path(0)).unwrap(),
        b"version 2 file 0\n"
    );
    assert_eq!(
        restarts_and_pid(&agent),
        before,
        "the agent never restarted"
    );
    let oldest = watch.finish("rollout budget 4294967295").await;
    println!(
        "RESULT budget=4294967295 event={note:?} slots_taken=1 agent_restarts=0 lease_oldest_s={:.1}",
        oldest.as_secs_f64()
    );
}

/// The agent's peak resident memory (`VmHWM`) in KiB.
fn peak_rss_kib(agent: &AgentMachine) -> u64 {
    let pid = agent.machine.unit_property(AGENT_UNIT, "MainPID");
    let status = agent
        .machine
        .sh(&format!("grep VmHWM /proc/{pid}/status"))
        .expect_success("VmHWM")
        .stdout;
    status
        .split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("VmHWM in {status:?}"))
}

/// Issue #26 item 3: the alias OSC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osc_of_yaml_aliases_is_refused_at_once_and_the_lease_keeps_being_renewed() {
    let env = support::env().await;
    let (agent, secret) = agent(&env, "aliases").await;
    let watch = LeaseWatch::start(&env.client, &agent.node);
    let before = restarts_and_pid(&agent);
    let bomb = alias_bomb();
    assert!(bomb.len() < 560 * 1024, "{}", bomb.len());
    let started = Instant::now();
    let checksum = put_osc(&env.client, &secret, &bomb).await;
    let note = wait_for_warning(&env.client, &agent.node, "OSCInvalid", &checksum).await;
    let refused_after = started.elapsed();
    assert!(
        note.contains("decodes to more than 2097152 bytes"),
        "{note}"
    );
    let peak = peak_rss_kib(&agent);
    assert!(peak < 100 * 1024, "peak RSS {peak} KiB");
    assert!(
        !agent.machine.exists(format!("{DIR}/bomb0")),
        "nothing of it was written"
    );

    apply(&env, &agent, &secret, &osc(1, false), &[]).await;
    assert_eq!(
        agent.machine.read_file(path(0)).unwrap(),
        b"version 1 file 0\n"
    );
    assert_eq!(
        restarts_and_pid(&agent),
        before,
        "the agent never restarted"
    );
    let oldest = watch.finish("alias OSC").await;
    println!(
        "RESULT osc_yaml_bytes={} refused_after_s={:.1} peak_rss_kib={peak} agent_restarts=0 lease_oldest_s={:.1}",
        bomb.len(),
        refused_after.as_secs_f64(),
        oldest.as_secs_f64()
    );
}

/// Issue #26 item 3: SIGTERM in an apply, an unreadable journal, a leftover temporary file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_an_apply_at_once_and_an_unreadable_journal_is_computed_again() {
    let env = support::env().await;
    let (agent, secret) = agent(&env, "stop").await;
    let m = &agent.machine;
    let watch = LeaseWatch::start(&env.client, &agent.node);

    // An apply that waits 20 s for a unit job; SIGTERM while it waits.
    let slow = put_osc(&env.client, &secret, &osc(1, true)).await;
    m.wait_for_unit_state(SLOW_UNIT, "activating", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let stopping = Instant::now();
    m.run(&["systemctl", "stop", AGENT_UNIT])
        .expect_success("systemctl stop");
    let stopped_after = stopping.elapsed();
    assert!(
        stopped_after < Duration::from_secs(5),
        "the agent took {stopped_after:?} to stop after SIGTERM"
    );
    assert_ne!(
        node_checksum(&env.client, &agent.node).await.as_deref(),
        Some(slow.as_str()),
        "stopped before the apply finished"
    );

    // What a killed writer and the old unbounded journal left: a temporary file and a
    // journal larger than the agent reads (16 MiB).
    let journal = format!("{CONFIG_DIR}/last-computed-osc-changes.yaml");
    let leftover = format!("{CONFIG_DIR}/.last-computed-osc-changes.yaml.tmp.1.0");
    m.write_file(&leftover, &vec![b'#'; 1024 * 1024], 0o600)
        .unwrap();
    let mut huge = format!("operatingSystemConfigChecksum: {slow}\n").into_bytes();
    huge.resize(17 * 1024 * 1024, b'\n');
    m.write_file(&journal, &huge, 0o600).unwrap();
    m.run(&["systemctl", "start", AGENT_UNIT])
        .expect_success("systemctl start");

    wait_for_checksum(&env.client, &agent, &slow, APPLY_TIMEOUT).await;
    assert!(
        !m.exists(&leftover),
        "the leftover temporary file is removed"
    );
    let size = m.read_file(&journal).unwrap().len();
    assert!(size < 64 * 1024, "the journal was replaced ({size} bytes)");
    let log = agent.log();
    assert!(log.contains("the journal cannot be read"), "{log}");

    apply(&env, &agent, &secret, &osc(2, false), &[]).await;
    assert_eq!(m.read_file(path(0)).unwrap(), b"version 2 file 0\n");
    let oldest = watch.finish("SIGTERM and unreadable journal").await;
    println!(
        "RESULT stop_after_sigterm_s={:.2} unreadable_journal_bytes={} recovered=true lease_oldest_s={:.1}",
        stopped_after.as_secs_f64(),
        huge.len(),
        oldest.as_secs_f64()
    );
}

/// The heartbeat thread renews the node Lease while the thread that started it is blocked
/// (as the agent's only runtime thread is during blocking file I/O).
#[tokio::test]
async fn the_lease_is_renewed_while_the_starting_thread_is_blocked() {
    let env = support::env().await;
    let node_name = format!("{}-heartbeat", env.namespace);
    let node = create_node(&env.client, &node_name).await;
    let meta = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .get_metadata(&node_name)
        .await
        .unwrap();
    assert_eq!(meta.metadata.uid, node.metadata.uid);
    let config = gardener_extension_node::kubeconfig::config_from_yaml(&env.kubeconfig)
        .await
        .unwrap();
    let (_node_tx, node_rx) = tokio::sync::watch::channel(Some(meta));
    let credentials =
        gardener_extension_node::agent::access::switching_client::Credentials::new(config);
    gardener_extension_node::agent::liveness::heartbeat::spawn(
        credentials,
        node_rx,
        Metrics::default(),
    )
    .unwrap();

    // A reader on a thread of its own (this one is about to block).
    let stop = Arc::new(AtomicBool::new(false));
    let reader = std::thread::spawn({
        let (stop, kubeconfig, name) = (
            Arc::clone(&stop),
            env.kubeconfig.clone(),
            format!("gardener-node-agent-{node_name}"),
        );
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let api = Api::<Lease>::namespaced(client_for(&kubeconfig).await, "kube-system");
                let (mut renewals, mut last, mut oldest) = (0, None, Duration::ZERO);
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(Some(lease)) = api.get_opt(&name).await {
                        let renewed = lease.spec.and_then(|s| s.renew_time).map(|t| t.0);
                        if renewed.is_some() && renewed != last {
                            renewals += 1;
                            last = renewed;
                        }
                        if let Some(age) = lease_age(&api, &name).await {
                            oldest = oldest.max(age);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                (renewals, oldest)
            })
        }
    });
    // Blocks this test's only runtime thread for 25 s.
    std::thread::sleep(Duration::from_secs(25));
    stop.store(true, Ordering::SeqCst);
    let (renewals, oldest) = reader.join().unwrap();
    println!("RESULT blocked_s=25 lease_renewals={renewals} oldest_renew_s={oldest:.1?}");
    assert!(renewals >= 3, "{renewals} renewals in 25 s");
    assert!(oldest <= Duration::from_secs(12), "{oldest:?}");
}
