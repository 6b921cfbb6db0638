//! Resilience scenarios of the node agent, in a real systemd (systemd-nspawn, see
//! `support/nspawn.rs`) against the real kube-apiserver on host loopback:
//!
//! 5. the agent is SIGKILLed at a random point of an apply, round after round (each round a
//!    new OSC that changes every file): right after each kill every file on disk holds either
//!    its old or its new content — never a part — and after systemd restarts the agent the
//!    node holds exactly the new OSC. Each round has a seed, printed as
//!    `RESILIENCE_SEED=<n>`; setting it replays that round. 3 rounds under `make test`, 10 with
//!    `RESILIENCE_FULL=1`. The first apply also checks that a symlink planted at a file's path
//!    is replaced, not written through.
//! 6. the agent's API server becomes unreachable (the agent talks to it through a TCP proxy on
//!    loopback that the test stops; established connections are cut): while it is, the OSC
//!    changes, and the node keeps exactly what it has, the agent keeps running and logs the
//!    failures; once the API server is reachable again, it applies the new OSC.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gardener_extension_node::kubeconfig::render_token_kubeconfig;
use serde_json::{Value, json};
use support::agent::*;
use support::load::{Rng, pick, seed};
use tokio::net::{TcpListener, TcpStream};

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
const APPLY_TIMEOUT: Duration = Duration::from_secs(90);
const DIR: &str = "/var/lib/resilience";
const FILES: usize = 40;
const LINKED: &str = "/etc/resilience/linked.conf";
const CANARY: &str = "/etc/resilience-canary";

fn path(i: usize) -> String {
    format!("{DIR}/f{i:02}.bin")
}

/// Content of file `i` in OSC version `version`: a header naming both, then 0.5–32 KiB of
/// bytes that differ per version, so any mix or truncation is recognisable.
fn content(version: usize, i: usize) -> Vec<u8> {
    let size = 512 + (i * 7919 + version * 104_729) % 32_768;
    let mut bytes = format!("version {version} file {i}\n").into_bytes();
    bytes.extend((0..size).map(|j| ((version * 131 + i * 17 + j) % 251) as u8));
    bytes
}

/// OSC version `version`: every file changed, a unit restarted by the first file, and a slow
/// oneshot restarted by the second (the apply lasts a few seconds, so kills land inside it).
fn osc(version: usize) -> String {
    let mut files: Vec<Value> = (0..FILES)
        .map(|i| b64_file(&path(i), &content(version, i), Some(0o644)))
        .collect();
    files.push(plain_file(LINKED, "written by the agent\n", Some(0o644)));
    let mut reader = service("resilience.service", "reads f00");
    reader["filePaths"] = json!([path(0)]);
    let slow = json!({
        "name": "resilience-slow.service",
        "enable": true,
        "content": "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sleep 2\n[Install]\nWantedBy=multi-user.target\n",
        "filePaths": [path(1)],
    });
    osc_yaml(&[reader, slow], &files, None)
}

/// Starts the agent in a fresh machine against `server_url` (the API server or a proxy of it)
/// with OSC version 0 applied. `prepare` runs in the machine before the agent starts.
async fn agent_with(
    env: &support::TestEnv,
    tag: &str,
    server_url: &str,
    prepare: impl FnOnce(&support::nspawn::Machine),
) -> (AgentMachine, String, String) {
    let machine = boot(BIN);
    prepare(&machine);
    let node = machine.name().to_string();
    create_node(&env.client, &node).await;
    let secret = format!("gardener-node-agent-{tag}-{}", std::process::id());
    let checksum = put_osc(&env.client, &secret, &osc(0)).await;
    let token = limited_token(env, &node, &[&secret]).await;
    let kubeconfig = render_token_kubeconfig(server_url, &env.ca_pem, &token);
    let agent = AgentMachine::start(
        machine,
        &AgentSetup {
            secret_name: secret.clone(),
            kubeconfig,
            server_url: server_url.to_string(),
            ca_pem: env.ca_pem.clone(),
            drift_interval: "10m".to_string(),
            token_sync: Vec::new(),
            binary_in_machine: BIN_IN_MACHINE.to_string(),
        },
    );
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    (agent, secret, checksum)
}

fn read(agent: &AgentMachine, path: &str) -> Option<Vec<u8>> {
    agent.machine.read_file(path).ok()
}

/// Files of `version` on disk: how many hold it; panics on any other content.
fn count_version(agent: &AgentMachine, old: usize, new: usize) -> usize {
    let mut new_count = 0;
    for i in 0..FILES {
        let on_disk = read(agent, &path(i));
        if on_disk.as_deref() == Some(content(new, i).as_slice()) {
            new_count += 1;
        } else {
            assert_eq!(
                on_disk.as_deref(),
                Some(content(old, i).as_slice()),
                "{} is neither version {old} nor {new} (length {:?})",
                path(i),
                on_disk.as_ref().map(Vec::len)
            );
        }
    }
    new_count
}

/// Leftover temporary files (`.<name>.tmp.<pid>.<n>`) in the files' folder.
fn temp_files(agent: &AgentMachine) -> Vec<String> {
    agent
        .machine
        .sh(&format!("ls -A {DIR} | grep '\\.tmp\\.' || true"))
        .stdout
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_of_an_apply_leaves_old_or_new_files_only() {
    let env = support::env().await;
    let replay = std::env::var("RESILIENCE_SEED").is_ok();
    let rounds = if replay { 1 } else { pick(3, 10) };
    let (agent, secret, _) = agent_with(&env, "kill", &env.server_url, |m| {
        // Security: a symlink planted where the OSC puts a file must be replaced by the
        // file, not written through.
        m.write_file(CANARY, b"canary\n", 0o644).unwrap();
        m.run(&["mkdir", "-p", "/etc/resilience"])
            .expect_success("mkdir");
        m.run(&["ln", "-s", CANARY, LINKED]).expect_success("ln -s");
    })
    .await;
    let m = &agent.machine;
    assert_eq!(read(&agent, CANARY).as_deref(), Some(&b"canary\n"[..]));
    assert!(
        m.read_link(LINKED).is_err(),
        "{LINKED} is a regular file now, not the planted symlink"
    );
    assert_eq!(
        read(&agent, LINKED).as_deref(),
        Some(&b"written by the agent\n"[..])
    );
    assert_eq!(count_version(&agent, 0, 0), FILES);

    let first = seed();
    let mut report = Vec::new();
    for round in 0..rounds {
        let round_seed = first.wrapping_add(round);
        println!("round {round}: RESILIENCE_SEED={round_seed}");
        let mut rng = Rng::new(round_seed);
        let (old, new) = (round as usize, round as usize + 1);
        let pid = m.unit_property(AGENT_UNIT, "MainPID");
        let checksum = put_osc(&env.client, &secret, &osc(new)).await;
        let delay = rng.range(0, 2000);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        m.run(&["kill", "-KILL", &pid])
            .expect_success("SIGKILL the agent");
        // Right after the kill (and while systemd restarts it): old or new, nothing else.
        let at_kill = count_version(&agent, old, new);
        println!("  SIGKILL after {delay} ms: {at_kill}/{FILES} files already new");
        wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
        assert_eq!(count_version(&agent, old, new), FILES, "all files new");
        assert_ne!(m.unit_property(AGENT_UNIT, "MainPID"), pid);
        m.wait_for_unit_state("resilience.service", "active", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        m.wait_for_unit_state("resilience-slow.service", "active", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(agent.mode(&path(0)), "644");
        report.push((delay, at_kill, temp_files(&agent).len()));
    }
    assert_eq!(read(&agent, CANARY).as_deref(), Some(&b"canary\n"[..]));
    let mid = report
        .iter()
        .filter(|(_, n, _)| *n > 0 && *n < FILES)
        .count();
    let leftovers: usize = report.iter().map(|(_, _, t)| t).sum();
    println!(
        "RESULT rounds={rounds} kills={rounds} files_per_osc={FILES} kills_mid_file_writes={mid} partial_files=0 converged={rounds} temp_files_left={leftovers} {report:?}"
    );
}

/// A loopback TCP proxy to the API server that the test can cut.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let up = Arc::clone(&up);
            let connections = Arc::clone(&connections);
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        drop(inbound); // unreachable: the connection is closed at once
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut outbound) =
                            TcpStream::connect(("127.0.0.1", upstream_port)).await
                        {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    connections.lock().unwrap().push(task);
                }
            }
        });
        Proxy {
            port,
            up,
            connections,
            accept,
        }
    }

    /// Refuses new connections and cuts the established ones.
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_leaves_the_node_as_it_is_and_the_agent_catches_up() {
    let env = support::env().await;
    let apiserver_port: u16 = env
        .server_url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    let proxy = Proxy::start(apiserver_port).await;
    let proxy_url = format!("https://127.0.0.1:{}", proxy.port);
    let (agent, secret, applied) = agent_with(&env, "outage", &proxy_url, |_| {}).await;
    let m = &agent.machine;
    let pid = m.unit_property(AGENT_UNIT, "MainPID");
    let log_before = agent.log().lines().count();

    let outage = Duration::from_secs(pick(15, 60));
    proxy.cut();
    let checksum = put_osc(&env.client, &secret, &osc(1)).await;
    tokio::time::sleep(outage).await;
    assert_eq!(
        count_version(&agent, 0, 1),
        0,
        "nothing changed while the API server was unreachable"
    );
    assert_eq!(
        node_checksum(&env.client, &agent.node).await.as_deref(),
        Some(applied.as_str())
    );
    assert_eq!(
        m.unit_property(AGENT_UNIT, "MainPID"),
        pid,
        "the agent kept running"
    );
    let during: Vec<String> = agent
        .log()
        .lines()
        .skip(log_before)
        .map(String::from)
        .collect();
    let failures = during
        .iter()
        .filter(|l| l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
        .count();
    assert!(
        failures > 0,
        "the agent logs that it cannot reach the API server:\n{}",
        during.join("\n")
    );

    proxy.restore();
    let reconnect = tokio::time::Instant::now();
    wait_for_checksum(&env.client, &agent, &checksum, APPLY_TIMEOUT).await;
    let caught_up = reconnect.elapsed();
    assert_eq!(count_version(&agent, 0, 1), FILES);
    assert_eq!(
        m.unit_property(AGENT_UNIT, "MainPID"),
        pid,
        "no restart needed"
    );
    println!(
        "RESULT outage={}s warnings_logged={failures} caught_up_after={:.1}s agent_restarts=0 files_changed_during_outage=0",
        outage.as_secs(),
        caught_up.as_secs_f64()
    );
}

/// The agent's rows of the OSC bad-input table that its own e2e test (`agent_e2e::item5_…`:
/// relative and `..` paths, unknown encoding, unknown unit command, undecodable YAML) does
/// not cover: duplicate paths, `filePaths` naming an absent file, a `secretRef` to a missing
/// Secret. Each ends in a Warning event on the Node, and the node keeps its files, its units
/// and its reported checksum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_oscs_leave_the_node_as_it_is() {
    let env = support::env().await;
    let (agent, secret, applied) = agent_with(&env, "bad", &env.server_url, |_| {}).await;
    let snapshot = |agent: &AgentMachine| {
        let files: Vec<Option<Vec<u8>>> = (0..FILES).map(|i| read(agent, &path(i))).collect();
        (files, agent.invocation("resilience.service"))
    };
    let before = snapshot(&agent);
    let base: Value = serde_norway::from_str(&osc(1)).unwrap();
    type Change = Box<dyn Fn(&mut Value)>;
    let rows: Vec<(&str, Change)> = vec![
        (
            "duplicate paths",
            Box::new(|o| {
                let files = o["spec"]["files"].as_array_mut().unwrap();
                let mut again = files[1].clone();
                again["content"] = json!({"inline": {"encoding": "", "data": "other\n"}});
                files.push(again);
            }),
        ),
        (
            "filePaths naming an absent file",
            Box::new(|o| o["spec"]["units"][0]["filePaths"] = json!(["/etc/absent"])),
        ),
        (
            "secretRef to a missing Secret",
            Box::new(|o| {
                o["spec"]["files"]
                    .as_array_mut()
                    .unwrap()
                    .push(secret_ref_file(
                        "/etc/resilience/from-secret",
                        "absent-secret",
                        "key",
                    ))
            }),
        ),
    ];
    for (row, change) in rows {
        let mut bad = base.clone();
        change(&mut bad);
        let checksum = put_osc(
            &env.client,
            &secret,
            &serde_norway::to_string(&bad).unwrap(),
        )
        .await;
        // Invalid OSCs are refused before the apply starts (OSCInvalid, naming the checksum);
        // a missing Secret fails the apply before anything is written (OSCApplyFailed,
        // naming the Secret).
        let needle = if row.starts_with("secretRef") {
            "absent-secret".to_string()
        } else {
            checksum.clone()
        };
        support::wait_for(
            &format!("{row}: a Warning event naming {needle}"),
            Duration::from_secs(60),
            || async {
                let mut events = node_events(&env.client, &agent.node, "OSCInvalid").await;
                events.extend(node_events(&env.client, &agent.node, "OSCApplyFailed").await);
                events
                    .iter()
                    .find(|e| {
                        e.type_.as_deref() == Some("Warning")
                            && e.note.as_deref().is_some_and(|n| n.contains(&needle))
                    })
                    .map(|_| ())
                    .ok_or_else(|| {
                        format!("{:?}", events.iter().map(|e| &e.note).collect::<Vec<_>>())
                    })
            },
        )
        .await;
        assert_eq!(snapshot(&agent), before, "{row}: the node changed");
        assert_eq!(
            node_checksum(&env.client, &agent.node).await.as_deref(),
            Some(applied.as_str()),
            "{row}"
        );
    }
}
