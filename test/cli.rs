//! The command line as a user meets it: error reports without backtraces, a closed stdout,
//! plain logs into a pipe, a taken HTTP port, a kubeconfig that names a program, and `render`
//! on files of the wrong kind, with several documents or with a `List`. Runs the real binary;
//! no cluster.

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
