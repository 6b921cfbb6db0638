//! `gardener-extension-node local-env` (what `make start` runs), as a user runs it: the real
//! binary on a state folder of its own, with seed, shoot, kube-controller-manager,
//! gardener-resource-manager and the operator.
//!
//! - A second `local-env` on the same state folder, or anything else on its HTTP port, fails
//!   at once with a message naming the running one, and the running one keeps working.
//! - A restart continues on the state of the previous start (same kubeconfig, so same ports
//!   and certificates; objects and edits kept, in the seed and in the shoot); `--clean`
//!   starts afresh.
//!
//! The tests run one after the other: each local-env runs two control planes, and the
//! machine running the tests may have two cores.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gardener_extension_node::api::{OperatingSystemConfig, Worker};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::operator::OperatorProcess;

const BINARY: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
/// Seed and shoot control planes, CRDs, GRM and the operator's first sync on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(300);
/// How fast a refused second start must fail.
const AT_ONCE: Duration = Duration::from_secs(10);
/// How long a SIGTERMed local-env may take to stop its operator (at most about 4 s) and its
/// seven control-plane processes.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
}

fn command(state: &Path, http: SocketAddr, extra: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command
        .current_dir(support::repo_root())
        .arg("local-env")
        .arg("--state-dir")
        .arg(state)
        .arg("--http-bind-address")
        .arg(http.to_string())
        .args(extra)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null());
    command
}

/// A running `local-env`, stopped (SIGTERM, then SIGKILL) when dropped; a watchdog kills it
/// if the test process dies first.
struct LocalEnv {
    child: Child,
    watchdog: Child,
    log: PathBuf,
    http: SocketAddr,
}

impl LocalEnv {
    /// Starts `local-env` and waits until its operator answers `/healthz`.
    async fn start(state: &Path, http: SocketAddr, extra: &[&str], log: PathBuf) -> Self {
        Self::spawn(command(state, http, extra), http, log).await
    }

    /// Runs `command` (local-env itself, or what starts it) in a process group of its own and
    /// waits until the operator answers `/healthz` at `http`.
    async fn spawn(mut command: Command, http: SocketAddr, log: PathBuf) -> Self {
        let out = std::fs::File::create(&log).unwrap();
        let child = command
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap();
        let watchdog = support::spawn_child_watchdog(child.id());
        let mut env = LocalEnv {
            child,
            watchdog,
            log,
            http,
        };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = env.child.try_wait() {
                panic!(
                    "local-env exited ({status}) while starting:\n{}",
                    env.log_text()
                );
            }
            if env.healthz().await == Some(200) {
                return env;
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "local-env not healthy after {START_TIMEOUT:?}:\n{}",
                env.log_text()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn healthz(&self) -> Option<u16> {
        OperatorProcess::http_get_at(&self.http.to_string(), "/healthz")
            .await
            .map(|(status, _)| status)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as Ctrl-C would; waits up to [`STOP_TIMEOUT`] for the process to stop
    /// everything and exit by itself: how long that took, or `None` (then it is killed).
    fn stop(&mut self) -> Option<Duration> {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let started = Instant::now();
        let mut exited = None;
        while started.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = self.child.try_wait() {
                exited = Some(started.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        exited
    }

    /// [`Self::stop`], asserting that the process exited by itself in time.
    fn stop_by_itself(&mut self) {
        let took = self.stop();
        let took = took.unwrap_or_else(|| {
            panic!(
                "local-env still running {STOP_TIMEOUT:?} after SIGTERM:\n{}",
                self.log_text()
            )
        });
        eprintln!("local-env exited {took:?} after SIGTERM");
    }
}

impl Drop for LocalEnv {
    fn drop(&mut self) {
        self.stop();
        // Whatever the child left behind in its group (a test that failed): gone too.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
    }
}

async fn client(kubeconfig: &Path) -> Client {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let config = gardener_extension_node::kubeconfig::config_from_yaml(&text)
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The acceptance test of the lock: the second start on the same folder fails at once,
/// saying what runs there and how to stop it; something else on the HTTP port does too; the
/// first keeps serving and its API server keeps answering.
#[tokio::test]
async fn a_second_local_env_fails_at_once_and_the_first_keeps_working() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let http = free_address();
    let first = LocalEnv::start(&state, http, &[], dir.path().join("first.log")).await;
    let kubeconfig_before = std::fs::read_to_string(state.join("kubeconfig")).unwrap();

    // Same state folder (another HTTP port).
    let started = Instant::now();
    let output = command(&state, free_address(), &[]).output().unwrap();
    let took = started.elapsed();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(took < AT_ONCE, "took {took:?}: {text}");
    assert!(
        text.contains(&format!(
            "{} is in use by another local-env (process {}, HTTP {http}, started ",
            state.display(),
            first.pid()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("Ctrl-C in its terminal, or kill {}", first.pid())),
        "{text}"
    );

    // Same HTTP port (another state folder): refused before that folder gets any state.
    let other = dir.path().join("other");
    let started = Instant::now();
    let output = command(&other, http, &[]).output().unwrap();
    let took = started.elapsed();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(took < AT_ONCE, "took {took:?}: {text}");
    assert!(
        text.contains(&format!(
            "{http} is already in use by process {} (",
            first.pid()
        )),
        "{text}"
    );
    let created: Vec<String> = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(created, ["local-env.lock"]);

    // The first one is untouched and keeps working.
    assert_eq!(first.healthz().await, Some(200), "{}", first.log_text());
    assert_eq!(
        std::fs::read_to_string(state.join("kubeconfig")).unwrap(),
        kubeconfig_before
    );
    let seed = client(&state.join("kubeconfig")).await;
    let namespaces = Api::<Namespace>::all(seed)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        namespaces
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("shoot--local--local")),
        "the example namespace is there"
    );
    let log = first.log_text();
    assert!(!log.contains("Address already in use"), "{log}");
}

async fn create_config_map(client: &Client, name: &str) {
    let object: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"kept": "yes"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

async fn config_map_exists(client: &Client, name: &str) -> bool {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

/// A restart keeps what the previous start had: same kubeconfigs (ports, certificates),
/// objects created in seed and shoot, and an edit of an example object. `--clean` starts
/// afresh.
#[tokio::test]
async fn a_restart_keeps_the_state_and_clean_resets_it() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let http = free_address();
    let mut first = LocalEnv::start(&state, http, &[], dir.path().join("first.log")).await;
    let seed_kubeconfig = std::fs::read_to_string(state.join("kubeconfig")).unwrap();
    let shoot_kubeconfig = std::fs::read_to_string(state.join("shoot.kubeconfig")).unwrap();
    let seed = client(&state.join("kubeconfig")).await;
    let shoot = client(&state.join("shoot.kubeconfig")).await;
    create_config_map(&seed, "created-in-the-seed").await;
    create_config_map(&shoot, "created-in-the-shoot").await;
    // The shoot access works as in a landscape: the example's reconcile OSC gets its rollout
    // condition through a token from GRM's token requestor (no nodes here: 0/0).
    let oscs: Api<OperatingSystemConfig> = Api::namespaced(seed.clone(), "shoot--local--local");
    support::wait_for(
        "the example OSC's NodeAgentRollout condition",
        Duration::from_secs(120),
        || async {
            let osc = oscs
                .get("gardener-node-agent-worker-a-3b1a0c2f9d8e7a65-original")
                .await
                .map_err(|e| e.to_string())?;
            let conditions = osc.status.map(|s| s.default.conditions).unwrap_or_default();
            match conditions.iter().find(|c| c.type_ == "NodeAgentRollout") {
                Some(c) if c.reason == "RolloutComplete" && c.message.starts_with("0/0 nodes") => {
                    Ok(())
                }
                other => Err(format!("{other:?}\n{}", first.log_text())),
            }
        },
    )
    .await;
    let workers: Api<Worker> = Api::namespaced(seed.clone(), "shoot--local--local");
    workers
        .patch(
            "local",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"edited": "by-hand"}}})),
        )
        .await
        .unwrap();
    first.stop_by_itself();

    let mut second = LocalEnv::start(&state, http, &[], dir.path().join("second.log")).await;
    assert_eq!(
        std::fs::read_to_string(state.join("kubeconfig")).unwrap(),
        seed_kubeconfig,
        "same API server URL and certificates"
    );
    assert_eq!(
        std::fs::read_to_string(state.join("shoot.kubeconfig")).unwrap(),
        shoot_kubeconfig
    );
    // The kubeconfigs from before the restart still work.
    assert!(config_map_exists(&seed, "created-in-the-seed").await);
    assert!(config_map_exists(&shoot, "created-in-the-shoot").await);
    let worker = workers.get("local").await.unwrap();
    assert_eq!(
        worker
            .metadata
            .labels
            .unwrap_or_default()
            .get("edited")
            .map(String::as_str),
        Some("by-hand"),
        "the examples are not applied over the edit"
    );
    second.stop_by_itself();

    let _third = LocalEnv::start(&state, http, &["--clean"], dir.path().join("third.log")).await;
    assert_ne!(
        std::fs::read_to_string(state.join("kubeconfig")).unwrap(),
        seed_kubeconfig,
        "--clean makes new certificates"
    );
    let seed = client(&state.join("kubeconfig")).await;
    assert!(!config_map_exists(&seed, "created-in-the-seed").await);
    let workers: Api<Worker> = Api::namespaced(seed, "shoot--local--local");
    assert!(
        workers.get_opt("local").await.unwrap().is_some(),
        "the examples are applied again"
    );
}

/// `make start` (its local-control-plane branch) as a user starts it, with the binary this test
/// was built with: a `cargo` of the test's own (below) that execs it, as `cargo run` does on
/// Unix, so the test does not build again under the test runner's cargo lock.
fn make_start(state: &Path, http: SocketAddr, dir: &Path) -> Command {
    let cargo = dir.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n\
         # `cargo run -- ARGS` as cargo does it on Unix: exec the built binary.\n\
         [ \"$1\" = run ] && [ \"$2\" = -- ] || { echo \"test cargo: unexpected $*\" >&2; exit 2; }\n\
         shift 2\n\
         exec \"$LOCAL_ENV_TEST_BINARY\" \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut command = Command::new("make");
    command
        .current_dir(support::repo_root())
        .args(["--no-print-directory", "start"])
        .arg(format!("CARGO={}", cargo.display()))
        .arg(format!(
            "KUBECONFIG_DEV={}",
            dir.join("no-dev-kubeconfig").display()
        ))
        .arg(format!("START_STATE_DIR={}", state.display()))
        .arg(format!("START_ADDRESS={http}"))
        .env("LOCAL_ENV_TEST_BINARY", BINARY)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null());
    command
}

/// The processes whose command line names `needle` (the test's own state folder).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                cmdline.trim()
            ));
        }
    }
    found
}

/// `kill -TERM <make's pid>` stops what `make start` started, as Ctrl-C does: make passes
/// the signal to its recipe, whose shell has handed over (`exec`) to the process that stops
/// the control plane, gardener-resource-manager and the operator.
#[tokio::test]
async fn a_sigterm_to_make_start_stops_the_local_control_plane() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let http = free_address();
    let log = dir.path().join("make-start.log");
    let mut make = LocalEnv::spawn(make_start(&state, http, dir.path()), http, log).await;
    let needle = state.display().to_string();
    assert!(
        !processes_naming(&needle).is_empty(),
        "local-env runs with its state folder on its command line"
    );
    make.stop_by_itself();
    // make has exited; what it started must follow within the stop time.
    let started = Instant::now();
    let mut left = processes_naming(&needle);
    while !left.is_empty() && started.elapsed() < STOP_TIMEOUT {
        std::thread::sleep(Duration::from_millis(200));
        left = processes_naming(&needle);
    }
    let serving = make.healthz().await;
    // Clean up before asserting, so a failure leaves nothing running.
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &needle])
        .status();
    assert!(
        left.is_empty(),
        "still running {STOP_TIMEOUT:?} after make exited on SIGTERM:\n{}\n{}",
        left.join("\n"),
        make.log_text()
    );
    assert_eq!(serving, None, "nothing answers on {http} any more");
}
