//! The command line as a user meets it: error reports without backtraces, a closed stdout,
//! plain logs into a pipe, a taken HTTP port, a kubeconfig that names a program, and `render`
//! on files of the wrong kind, with several documents or with a `List`, and `render ... --impact`
//! on the fixtures of `test/fixtures/impact/` (each verdict, the node agent's diff, every
//! refusal). Runs the real binary; no cluster.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gardener_extension_node::controllers::containerruntime::installation_managed_resource;
use serde_json::{Value, json};
use support::fixtures;

const BINARY: &str = env!("CARGO_BIN_EXE_gardener-extension-node");

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BINARY);
    command
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

/// The operator with `kubeconfig`, on a free HTTP port.
fn run_operator(kubeconfig: &std::path::Path) -> Output {
    let kubeconfig = kubeconfig.to_str().unwrap();
    let args = [
        "operator",
        "--kubeconfig",
        kubeconfig,
        "--http-bind-address",
        "127.0.0.1:0",
    ];
    run(&args, &[])
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write_yaml(dir: &std::path::Path, name: &str, documents: &[Value]) -> String {
    let text: String = documents
        .iter()
        .map(|d| format!("---\n{}", serde_norway::to_string(d).unwrap()))
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// `RUST_BACKTRACE=1` is for panics: a user error prints the error and its causes only. A
/// backtrace comes with `--debug` or `RUST_LIB_BACKTRACE=1`.
#[test]
fn a_user_error_prints_its_causes_and_no_backtrace() {
    let args = ["render", "worker", "-f", "/nonexistent/worker.yaml"];
    let output = run(&args, &[("RUST_BACKTRACE", "1")]);
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert_eq!(
        text.trim_end(),
        "Error: reading /nonexistent/worker.yaml: No such file or directory (os error 2)"
    );

    for (extra, env) in [
        (Some("--debug"), [("RUST_BACKTRACE", "1")]),
        (None, [("RUST_LIB_BACKTRACE", "1")]),
    ] {
        let mut args = args.to_vec();
        args.extend(extra);
        let output = run(&args, &env);
        assert_eq!(output.status.code(), Some(1));
        let text = stderr(&output);
        assert!(
            text.contains("Stack backtrace:"),
            "{extra:?} {env:?}: {text}"
        );
    }
}

/// `crds | head -1`: the reader goes away; the command stops quietly with exit 0.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let mut child = Command::new(BINARY)
        .arg("crds")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The CRDs are far more than a pipe buffer, so writing fails however fast the child is.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}

/// Log lines into a pipe (or a file) carry no ANSI colour codes.
#[test]
fn logs_into_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    let output = run_operator(&kubeconfig);
    let text = stderr(&output);
    assert!(text.contains("INFO"), "a log line was expected: {text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

/// A taken HTTP port stops the operator before it does anything else, naming the holder.
#[test]
fn a_taken_http_port_stops_the_operator_at_once() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = holder.local_addr().unwrap().to_string();
    let started = Instant::now();
    let output = run(
        &[
            "operator",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--http-bind-address",
            &address,
        ],
        &[],
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(output.status.code(), Some(1));
    let text = stderr(&output);
    assert!(
        text.contains(&format!(
            "Error: {address} is already in use by process {} (",
            std::process::id()
        )),
        "{text}"
    );
    assert!(text.contains("--http-bind-address"), "{text}");
    // Nothing else started: not even the kubeconfig was read (an error would name it; the
    // holder's command line, which the message quotes, may contain "kubeconfig" itself).
    assert!(!text.contains("/nonexistent/kubeconfig"), "{text}");
}

/// Issue #26 item 1, for the operator's own kubeconfig: one whose user names a program
/// (`exec`, or a gcp `auth-provider` with `cmd-path`) stops the operator with an error naming
/// the file, the user and the field, and the program never runs (kube-rs would run it while
/// building the client).
#[test]
fn a_kubeconfig_that_names_a_program_stops_the_operator_before_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (program, marker) = support::marker_program(dir.path());
    let program = program.display();
    for (user, field) in [
        (
            format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {program}\n      interactiveMode: Never\n"
            ),
            "exec",
        ),
        (
            format!(
                "    auth-provider:\n      name: gcp\n      config:\n        cmd-path: {program}\n"
            ),
            "auth-provider",
        ),
    ] {
        let kubeconfig = dir.path().join(format!("{field}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    \
                 server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    \
                 user: seed\nusers:\n- name: seed\n  user:\n{user}"
            ),
        )
        .unwrap();
        let output = run_operator(&kubeconfig);
        assert_eq!(output.status.code(), Some(1), "{field}");
        let text = stderr(&output);
        assert!(
            text.contains(&format!(
                "kubeconfig {} is refused: user \"seed\" sets {field}: only client-certificate-data, \
                 client-key-data, token, tokenFile, username, password are accepted",
                kubeconfig.display()
            )),
            "{text}"
        );
        assert!(!marker.exists(), "{field}: the program ran");
    }
}

#[test]
fn render_checks_the_kind_before_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let worker = write_yaml(
        dir.path(),
        "worker.yaml",
        &[fixtures::worker_json("shoot--a--b")],
    );
    let output = run(&["render", "containerruntime", "-f", &worker], &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(
        stderr(&output).trim_end(),
        format!(
            "Error: {worker}, document 1 is a Worker (extensions.gardener.cloud/v1alpha1), not a \
             ContainerRuntime (extensions.gardener.cloud/v1alpha1) (use `render worker` for it)"
        )
    );

    let nothing = write_yaml(dir.path(), "empty.yaml", &[json!({"spec": {}})]);
    let output = run(&["render", "osc", "-f", &nothing], &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(
            "document 1 has no apiVersion and no kind; expected an OperatingSystemConfig"
        ),
        "{}",
        stderr(&output)
    );
}

/// What `kubectl get -o yaml` prints — a `List`, or several documents — renders every item.
#[test]
fn render_takes_lists_and_several_documents() {
    let dir = tempfile::tempdir().unwrap();
    let second = fixtures::container_runtime_json("shoot--a--b", "worker-b");
    let first = fixtures::container_runtime_json("shoot--a--b", "worker-a");
    let documents = write_yaml(dir.path(), "crs.yaml", &[first.clone(), second.clone()]);
    let list = write_yaml(
        dir.path(),
        "list.yaml",
        &[json!({"apiVersion": "v1", "kind": "List", "items": [first, second]})],
    );
    let mut outputs = Vec::new();
    for file in [&documents, &list] {
        let output = run(&["render", "containerruntime", "-f", file], &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = String::from_utf8(output.stdout).unwrap();
        for pool in ["worker-a", "worker-b"] {
            let managed_resource = installation_managed_resource(pool);
            assert!(
                text.contains(&format!("# ManagedResource {managed_resource}\n")),
                "{pool}: {text}"
            );
            assert!(
                text.contains(&format!("# ContainerRuntime shoot--a--b/gvisor-{pool}\n")),
                "{text}"
            );
        }
        outputs.push(text);
    }
    assert_eq!(outputs[0], outputs[1]);

    let mut other = fixtures::worker_json("shoot--a--b");
    other["metadata"]["name"] = json!("worker-2");
    let workers = write_yaml(
        dir.path(),
        "workers.yaml",
        &[
            json!({"apiVersion": "v1", "kind": "List", "items": [fixtures::worker_json("shoot--a--b"), other]}),
        ],
    );
    // Without the Cluster there is no CloudProfile to look the machine image up in.
    let output = run(&["render", "worker", "-f", &workers], &[]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("without --cluster there is no CloudProfile"),
        "{}",
        stderr(&output)
    );
    let cluster = write_yaml(
        dir.path(),
        "cluster.yaml",
        &[fixtures::cluster_json("shoot--a--b")],
    );
    let output = run(
        &["render", "worker", "-f", &workers, "--cluster", &cluster],
        &[],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    let deployments = serde_norway::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|d| d["kind"] == "MachineDeployment")
        .count();
    assert_eq!(deployments, 2, "{text}");
}

#[test]
fn render_worker_says_the_cluster_is_optional() {
    let output = run(&["render", "worker", "--help"], &[]);
    let text = String::from_utf8(output.stdout).unwrap();
    let cluster = text
        .lines()
        .skip_while(|l| !l.contains("--cluster"))
        .nth(1)
        .unwrap_or_default();
    assert!(cluster.contains("optional"), "{text}");
}

/// The last stderr line (the `Error: …` line; the operator logs before it).
fn error_line(output: &Output) -> String {
    let text = stderr(output);
    text.lines()
        .rev()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or_else(|| panic!("no Error line:\n{text}"))
        .to_string()
}

/// A missing kubeconfig is named as the path it is (not `'"/nonexistent"'`), and a run with
/// no configuration at all says so once (not the same cause twice).
#[test]
fn a_missing_kubeconfig_is_named_plainly_and_once() {
    let output = run_operator(std::path::Path::new("/nonexistent/kubeconfig"));
    assert_eq!(output.status.code(), Some(1));
    let line = error_line(&output);
    assert_eq!(
        line,
        "Error: connecting to the seed API server: reading kubeconfig: inspecting \
         /nonexistent/kubeconfig: No such file or directory (os error 2)"
    );

    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap();
    let args = ["operator", "--http-bind-address", "127.0.0.1:0"];
    let mut command = Command::new(BINARY);
    command
        .args(args)
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("RUST_BACKTRACE");
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let line = error_line(&output);
    assert!(
        line.starts_with(
            "Error: connecting to the seed API server: no client configuration: no \
             --kubeconfig, $KUBECONFIG unset, no ~/.kube/config, and not running in a pod: "
        ),
        "{line}"
    );
    assert_eq!(line.matches("incluster").count(), 1, "{line}");
    assert_eq!(line.matches(".kube/config").count(), 1, "{line}");
    assert!(!line.contains("'\""), "{line}");
}

/// A kubeconfig that is a FIFO is refused without opening it (no hang).
#[test]
fn a_kubeconfig_that_is_a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kubeconfig");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let output = run_operator(&fifo);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        error_line(&output).ends_with("is a FIFO, not a regular file; it is not opened"),
        "{}",
        stderr(&output)
    );
}

/// A file of `test/fixtures/impact/`.
fn impact_fixture(name: &str) -> String {
    format!("{}/test/fixtures/impact/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `render worker|osc -f NEW --previous OLD --impact [more]`: exit code, stdout, stderr.
fn impact(kind: &str, new: &str, previous: &str, more: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "render",
        kind,
        "-f",
        new,
        "--previous",
        previous,
        "--impact",
    ];
    args.extend(more);
    let output = run(&args, &[]);
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    (output.status.code(), stdout, stderr(&output))
}

/// Every verdict at once: worker-a rolls (a new image version and gardenlet's new secret
/// name), worker-b updates in place, worker-c only gets labels and taints, worker-d is new,
/// worker-e is removed.
#[test]
fn render_worker_impact_gives_each_pool_its_verdict() {
    let cluster = impact_fixture("cluster.yaml");
    let (code, stdout, stderr) = impact(
        "worker",
        &impact_fixture("worker-new.yaml"),
        &impact_fixture("worker-previous.yaml"),
        &["--cluster", &cluster],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "worker-a: roll — machine image version, node-agent secret name\n\
         worker-b: in-place — machine image version\n\
         worker-c: unchanged — labels, taints (applied to the running machines)\n\
         worker-d: new — machine deployment shoot--local--local-worker-d-z1 (zone 0) is created\n\
         worker-e: removed — machine deployment shoot--local--local-worker-e-z1 (zone 0) is deleted with its machines\n"
    );

    let (code, stdout, stderr) = impact(
        "worker",
        &impact_fixture("worker-new.yaml"),
        &impact_fixture("worker-previous.yaml"),
        &["--cluster", &cluster, "-o", "json"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let value: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["name"], "local");
    let pools = value["pools"].as_array().unwrap();
    let summary: Vec<(&str, &str, Vec<&str>)> = pools
        .iter()
        .map(|p| {
            let reasons = p["reasons"].as_array().unwrap();
            (
                p["name"].as_str().unwrap(),
                p["impact"].as_str().unwrap(),
                reasons.iter().map(|r| r.as_str().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "worker-a",
                "roll",
                vec!["machine image version", "node-agent secret name"]
            ),
            ("worker-b", "in-place", vec!["machine image version"]),
            ("worker-c", "unchanged", vec!["labels", "taints"]),
            (
                "worker-d",
                "new",
                vec!["machine deployment shoot--local--local-worker-d-z1 (zone 0) is created"]
            ),
            (
                "worker-e",
                "removed",
                vec![
                    "machine deployment shoot--local--local-worker-e-z1 (zone 0) is deleted with its machines"
                ]
            ),
        ]
    );
    // The verdicts come from the controller's class hash; the in-place pool shows its in-place hash.
    assert_ne!(
        pools[0]["classHash"]["previous"],
        pools[0]["classHash"]["new"]
    );
    assert_eq!(
        pools[2]["classHash"]["previous"],
        pools[2]["classHash"]["new"]
    );
    assert_ne!(
        pools[1]["inPlaceHash"]["previous"],
        pools[1]["inPlaceHash"]["new"]
    );
    assert!(pools[0].get("inPlaceHash").is_none());
    assert_eq!(pools[3]["classHash"]["previous"], Value::Null);
}

/// The same Worker on both sides: every pool is unchanged.
#[test]
fn render_worker_impact_of_no_change_is_unchanged() {
    let previous = impact_fixture("worker-previous.yaml");
    let cluster = impact_fixture("cluster.yaml");
    let (code, stdout, stderr) = impact("worker", &previous, &previous, &["--cluster", &cluster]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "worker-a: unchanged\nworker-b: unchanged\nworker-c: unchanged\nworker-e: unchanged\n"
    );
}

/// Files with several Workers are compared object by object, matched by namespace and name.
#[test]
fn render_worker_impact_matches_several_workers_by_namespace_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let read = |name: &str| -> Value {
        serde_norway::from_str(&std::fs::read_to_string(impact_fixture(name)).unwrap()).unwrap()
    };
    let in_namespace = |mut worker: Value, namespace: &str| {
        worker["metadata"]["namespace"] = json!(namespace);
        worker
    };
    let (new, previous) = (read("worker-new.yaml"), read("worker-previous.yaml"));
    let new_file = write_yaml(
        dir.path(),
        "new.yaml",
        &[
            in_namespace(new.clone(), "shoot--local--a"),
            in_namespace(previous.clone(), "shoot--local--b"),
        ],
    );
    // The other order, as a List.
    let previous_file = write_yaml(
        dir.path(),
        "previous.yaml",
        &[json!({"apiVersion": "v1", "kind": "List", "items": [
            in_namespace(previous.clone(), "shoot--local--b"),
            in_namespace(previous.clone(), "shoot--local--a"),
        ]})],
    );
    let cluster = impact_fixture("cluster.yaml");
    let (code, stdout, stderr) = impact(
        "worker",
        &new_file,
        &previous_file,
        &["--cluster", &cluster],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("---\n# Worker shoot--local--a/local\nworker-a: roll — "),
        "{stdout}"
    );
    assert!(
        stdout.contains("---\n# Worker shoot--local--b/local\nworker-a: unchanged\n"),
        "{stdout}"
    );
    let (_, json_out, _) = impact(
        "worker",
        &new_file,
        &previous_file,
        &["--cluster", &cluster, "-o", "json"],
    );
    let value: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(value.as_array().map(Vec::len), Some(2), "{json_out}");

    // A Worker without a counterpart is refused, naming it and both files.
    let lone = write_yaml(
        dir.path(),
        "lone.yaml",
        &[in_namespace(previous.clone(), "shoot--local--a")],
    );
    let (code, _, stderr) = impact("worker", &new_file, &lone, &["--cluster", &cluster]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim_end(),
        format!(
            "Error: objects are compared by namespace and name: Worker shoot--local--b/local of {new_file} not in --previous {lone}"
        )
    );
    // So is a Worker twice in one file.
    let twice = write_yaml(
        dir.path(),
        "twice.yaml",
        &[
            in_namespace(previous.clone(), "shoot--local--a"),
            in_namespace(previous, "shoot--local--a"),
        ],
    );
    let (code, _, stderr) = impact("worker", &new_file, &twice, &["--cluster", &cluster]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim_end(),
        format!("Error: --previous {twice} holds Worker shoot--local--a/local twice")
    );
}

/// What `--previous` must be: the same kind, the same object; `--impact` and `--previous`
/// only together; one Cluster.
#[test]
fn render_worker_impact_refuses_what_cannot_be_compared() {
    let new = impact_fixture("worker-new.yaml");
    for (file, kind) in [
        ("containerruntime.yaml", "a ContainerRuntime"),
        ("osc-previous.yaml", "an OperatingSystemConfig"),
    ] {
        let previous = impact_fixture(file);
        let (code, stdout, stderr) = impact("worker", &new, &previous, &[]);
        assert_eq!(code, Some(1));
        assert!(stdout.is_empty());
        assert_eq!(
            stderr.trim_end(),
            format!(
                "Error: --previous {previous} must hold the Worker {new} holds, before the change: \
                 {previous}, document 1 is {kind} (extensions.gardener.cloud/v1alpha1), not a Worker \
                 (extensions.gardener.cloud/v1alpha1)"
            )
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let previous: Value = serde_norway::from_str(
        &std::fs::read_to_string(impact_fixture("worker-previous.yaml")).unwrap(),
    )
    .unwrap();
    for (field, value, other) in [
        ("name", "other", "shoot--local--local/other"),
        ("namespace", "shoot--other--x", "shoot--other--x/local"),
    ] {
        let mut renamed = previous.clone();
        renamed["metadata"][field] = json!(value);
        let file = write_yaml(dir.path(), &format!("{field}.yaml"), &[renamed]);
        let (code, _, stderr) = impact("worker", &new, &file, &[]);
        assert_eq!(code, Some(1));
        assert_eq!(
            stderr.trim_end(),
            format!(
                "Error: {new} holds Worker shoot--local--local/local, but --previous {file} holds \
                 Worker {other}: --previous must hold the same object before the change"
            )
        );
    }

    let clusters = write_yaml(
        dir.path(),
        "clusters.yaml",
        &[
            fixtures::cluster_json("shoot--local--local"),
            fixtures::cluster_json("shoot--local--other"),
        ],
    );
    let (code, _, stderr) = impact(
        "worker",
        &new,
        &impact_fixture("worker-previous.yaml"),
        &["--cluster", &clusters],
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim_end(),
        format!("Error: {clusters} holds 2 objects; expected one Cluster")
    );

    // The flags only together, refused by the command line parser (exit code 2).
    let previous_file = impact_fixture("worker-previous.yaml");
    for args in [
        vec!["render", "worker", "-f", &new, "--impact"],
        vec!["render", "worker", "-f", &new, "--previous", &previous_file],
        vec!["render", "worker", "-f", &new, "-o", "json"],
        vec!["render", "osc", "-f", &new, "--impact"],
    ] {
        let output = run(&args, &[]);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let text = String::from_utf8_lossy(&output.stderr);
        assert!(
            text.contains("the following required arguments were not provided"),
            "{args:?}: {text}"
        );
    }
}

/// The node agent's own diff of both node-agent secrets: a kubelet drop-in restarts kubelet
/// (disruptive), a file of another unit restarts that unit (quiet), the same OSC does nothing.
#[test]
fn render_osc_impact_runs_the_agents_diff() {
    let previous = impact_fixture("osc-previous.yaml");
    let (code, stdout, stderr) = impact(
        "osc",
        &impact_fixture("osc-kubelet-drop-in.yaml"),
        &previous,
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "node-agent secret gardener-node-agent-worker-a-3b1a0c2f9d8e7a65 (pool worker-a): every node of the pool applies the change\n\
         files written: -\n\
         files deleted: -\n\
         units written (daemon-reload): kubelet.service (drop-ins written: 20-max-pods.conf)\n\
         units restarted: kubelet.service\n\
         units stopped: -\n\
         units removed: -\n\
         containerd config: unchanged\n\
         disruptive: restart kubelet.service — goes through the disruptive rollout with its budget where the rollout is on; elsewhere every node applies it at once\n\
         in-place update: no\n"
    );

    let (code, stdout, stderr) = impact(
        "osc",
        &impact_fixture("osc-exporter-config.yaml"),
        &previous,
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "node-agent secret gardener-node-agent-worker-a-3b1a0c2f9d8e7a65 (pool worker-a): every node of the pool applies the change\n\
         files written: /etc/example-exporter/config.yaml\n\
         files deleted: -\n\
         units written (daemon-reload): example-exporter.service\n\
         units restarted: example-exporter.service\n\
         units stopped: -\n\
         units removed: -\n\
         containerd config: unchanged\n\
         quiet: no kubelet or containerd restart; the disruptive rollout does not hold it back\n\
         in-place update: no\n\
         note: a unit marked with node.extensions.gardener.cloud/disruptive-units would make it disruptive too; the preview does not know those marks\n"
    );

    let (code, stdout, stderr) = impact("osc", &previous, &previous, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "unchanged: no file, no unit (the node-agent secret is the same: the nodes do nothing)\n"
    );

    let (code, stdout, stderr) = impact(
        "osc",
        &impact_fixture("osc-kubelet-drop-in.yaml"),
        &previous,
        &["-o", "json"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let value: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        value,
        json!({
            "purpose": "reconcile",
            "namespace": "shoot--local--local",
            "name": "gardener-node-agent-worker-a-3b1a0c2f9d8e7a65-original",
            "secret": "gardener-node-agent-worker-a-3b1a0c2f9d8e7a65",
            "pool": "worker-a",
            "checksumChanged": true,
            "unchanged": false,
            "files": {"written": [], "deleted": []},
            "units": {
                "written": ["kubelet.service"],
                "dropIns": {"kubelet.service": {"written": ["20-max-pods.conf"], "deleted": []}},
                "restarted": ["kubelet.service"], "stopped": [], "removed": [],
            },
            "containerdConfigChanged": false,
            "registriesRemoved": [],
            "disruptive": true,
            "disruptiveBecause": ["restart kubelet.service"],
            "inPlaceUpdate": false,
            "inPlaceUpdateBecause": [],
            "notes": [],
        })
    );
}

/// An in-place pool's OSC with a new operating system version: the agent's in-place flags.
#[test]
fn render_osc_impact_says_when_nodes_update_in_place() {
    let (code, stdout, stderr) = impact(
        "osc",
        &impact_fixture("osc-in-place-new.yaml"),
        &impact_fixture("osc-in-place-previous.yaml"),
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.ends_with(
            "in-place update: yes — operating system version 13.1 → 13.2; a node applies the change once machine-controller-manager has made it ready (InPlaceUpdate/ReadyForUpdate)\n"
        ),
        "{stdout}"
    );
}

/// Provision OSCs: only the user data of new machines; never compared with a reconcile OSC.
#[test]
fn render_osc_impact_of_provision_oscs_and_refusals() {
    let provision = impact_fixture("osc-provision.yaml");
    let (code, stdout, stderr) = impact("osc", &provision, &provision, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "provision: the user data is the same: new machines boot as before\n"
    );

    let reconcile = impact_fixture("osc-previous.yaml");
    let (code, _, stderr) = impact("osc", &reconcile, &provision, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim_end(),
        format!(
            "Error: {reconcile} holds OperatingSystemConfig shoot--local--local/gardener-node-agent-worker-a-3b1a0c2f9d8e7a65-original, \
             but --previous {provision} holds OperatingSystemConfig shoot--local--local/gardener-node-agent-worker-a-3b1a0c2f9d8e7a65-init: \
             --previous must hold the same object before the change (a reconcile OSC cannot be compared with a provision one)"
        )
    );

    // The same name with another purpose.
    let dir = tempfile::tempdir().unwrap();
    let mut as_provision: Value =
        serde_norway::from_str(&std::fs::read_to_string(&reconcile).unwrap()).unwrap();
    as_provision["spec"]["purpose"] = json!("provision");
    let file = write_yaml(dir.path(), "provision.yaml", &[as_provision]);
    let (code, _, stderr) = impact("osc", &reconcile, &file, &[]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr.trim_end(),
        format!(
            "Error: {reconcile}: OperatingSystemConfig shoot--local--local/gardener-node-agent-worker-a-3b1a0c2f9d8e7a65-original \
             is a reconcile OSC, but in --previous {file} a provision one: a reconcile OSC cannot be compared with a provision one"
        )
    );

    // Another reconcile OSC of the pool is another secret: the nodes are replaced.
    let mut renamed: Value =
        serde_norway::from_str(&std::fs::read_to_string(&reconcile).unwrap()).unwrap();
    renamed["metadata"]["name"] = json!("gardener-node-agent-worker-a-0000000000000000-original");
    let file = write_yaml(dir.path(), "renamed.yaml", &[renamed]);
    let (code, _, stderr) = impact("osc", &reconcile, &file, &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.trim_end().ends_with(
            "(another name is another node-agent secret: gardenlet names a rolling pool's OSCs after what needs new machines, so the pool's nodes are replaced, not updated; `render worker --impact` previews that)"
        ),
        "{stderr}"
    );

    let worker = impact_fixture("worker-previous.yaml");
    let (code, _, stderr) = impact("osc", &reconcile, &worker, &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!(
            "{worker}, document 1 is a Worker (extensions.gardener.cloud/v1alpha1), not an OperatingSystemConfig"
        )),
        "{stderr}"
    );
}
