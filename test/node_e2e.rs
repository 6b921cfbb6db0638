//! e2e on a real shoot node (`make e2e`): the mission's whole path, with real components only.
//!
//! ```text
//! seed kube-apiserver ── our operator ── ManagedResources ── gardener-resource-manager
//!                                                                   │
//! shoot kube-apiserver + kube-controller-manager + kube-scheduler ◄─┘
//!        ▲                         │ node-agent secret, DaemonSet, RuntimeClass
//!        │                         ▼
//! node (systemd-nspawn): our agent ─► containerd 2.x + kubelet ─► installation pod
//!                                     (gvisor-install: runsc into containerd) ─► gVisor pod
//! ```
//!
//! The test plays gardenlet (Cluster, OSCs, ContainerRuntime in the seed; tokens in the
//! shoot), the machine-controller-manager and cloud-init (it boots the node and runs the
//! user data our operator rendered, with the placeholders filled in) and a user (pods in the
//! shoot). Everything else is the real thing: kube-apiserver, kube-controller-manager,
//! kube-scheduler and kubelet from `k8s.io/kubernetes`, gardener-resource-manager from
//! `github.com/gardener/gardener`, containerd from `github.com/containerd/containerd/v2`,
//! runsc and its shim from `gvisor.dev/gvisor` (`hack/envtest.sh --node`), Debian's runc and
//! CNI plugins, and our static binary in the node and in the installation image. Images are
//! OCI archives built here (`support::oci`) and preloaded on the node, as a node image would.
//!
//! Needs root, the node components and a static build of our binary in
//! `E2E_STATIC_BINARY`; `make e2e` provides them, and `cargo test` skips this file
//! (`#[ignore]`).

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gardener_extension_node::api::{Cluster, ContainerRuntime, ManagedResource};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node as KubeNode, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::agent::{CONFIG_DIR, PoolOscs, limited_token_in};
use support::node::{AGENT_BINARY, Node, NodeOptions, NodeOsc};
use support::oci::{Content, Image, ImageFile, write_archive};

const POOL: &str = "worker-a";
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";
const BUSYBOX_IMAGE: &str = "e2e.local/busybox:e2e";
const INSTALLATION_REPOSITORY: &str = "e2e.local/gardener-extension-node/gvisor-installation";
const INSTALLATION_TAG: &str = "v0.1.0-e2e";
const RUNSC_ROOT: &str = "/run/containerd/runsc/k8s.io";
const BIN_DIR: &str = "/var/bin/containerruntimes";

/// How long each stage may take on a loaded 2-core machine.
const STAGE_TIMEOUT: Duration = Duration::from_secs(240);

fn required_env(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run this test with `make e2e`")),
    )
}

/// The three images the node preloads: pause, a busybox workload, and the gVisor
/// installation image with the layout of the Dockerfile's `gvisor-installation` stage.
fn build_images(dir: &Path, assets: &Path, static_binary: &Path) {
    let busybox = |reference: &str, entrypoint: &[&str]| Image {
        reference: reference.into(),
        entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
        files: vec![
            ImageFile::executable("/bin/busybox", "/bin/busybox"),
            ImageFile::link("/bin/sh", "busybox"),
        ],
    };
    // A sandbox that only sleeps; SIGKILL ends it like the real pause.
    support::node::write_pause_archive(dir, PAUSE_IMAGE);
    write_archive(
        &busybox(BUSYBOX_IMAGE, &["/bin/sh"]),
        &dir.join("busybox.tar"),
    )
    .unwrap();
    let installation = Image {
        reference: format!("{INSTALLATION_REPOSITORY}:{INSTALLATION_TAG}"),
        entrypoint: vec![
            "/usr/local/bin/gardener-extension-node".into(),
            "gvisor-install".into(),
        ],
        files: vec![
            ImageFile::executable("/usr/local/bin/gardener-extension-node", static_binary),
            ImageFile::executable("/var/content/runsc", assets.join("runsc")),
            ImageFile::executable(
                "/var/content/containerd-shim-runsc-v1",
                assets.join("containerd-shim-runsc-v1"),
            ),
            ImageFile {
                path: "/etc/gardener-extension-node/image".into(),
                content: Content::Bytes(b"built by test/node_e2e.rs\n".to_vec()),
                mode: 0o644,
            },
        ],
    };
    write_archive(&installation, &dir.join("gvisor-installation.tar")).unwrap();
}

/// [`Node::wait_until`] for the value alone.
async fn wait_on_node<T, F, Fut>(node: &Node, what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    node.wait_until(what, timeout, check).await.0
}

fn pod(name: &str, runtime_class: Option<&str>, script: &str) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["/bin/busybox", "sh", "-c", script],
            }],
        },
    });
    if let Some(class) = runtime_class {
        pod["spec"]["runtimeClassName"] = json!(class);
    }
    serde_json::from_value(pod).unwrap()
}

async fn running_pod(pods: &Api<Pod>, name: &str) -> Result<Pod, String> {
    let pod = pods
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no pod")?;
    let status = pod.status.clone().unwrap_or_default();
    if status.phase.as_deref() == Some("Running") {
        Ok(pod)
    } else {
        Err(format!(
            "phase {:?}, conditions {:?}, containers {:?}",
            status.phase, status.conditions, status.container_statuses
        ))
    }
}

/// What kubelet logged of the pod's container `main` on the node.
fn container_log(node: &Node, pod: &Pod) -> String {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    node.machine
        .sh(&format!(
            "cat /var/log/pods/default_{name}_{uid}/main/*.log"
        ))
        .stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the node components and a static binary: make e2e"]
async fn a_gvisor_pod_runs_on_a_real_node_and_deleting_the_runtime_uninstalls_it() {
    let assets = required_env("ENVTEST_ASSETS");
    let static_binary = required_env("E2E_STATIC_BINARY");
    let env = support::env().await;
    let ns = env.namespace.clone();
    let shoot = support::shoot::Shoot::start_with_scheduler(&env).await;
    let shoot_client = shoot.client().await;
    let shoot_url = shoot.plane.server_url();
    let shoot_ca = shoot.plane.ca_pem().to_string();
    let apiserver_port = shoot.plane.apiserver_port();

    let images = tempfile::Builder::new()
        .prefix("gen-e2e-images-")
        .tempdir()
        .unwrap();
    build_images(images.path(), &assets, &static_binary);
    let overwrite = images.path().join("imagevector-overwrite.yaml");
    std::fs::write(
        &overwrite,
        format!(
            "images:\n- name: runtime-gvisor-installation\n  repository: {INSTALLATION_REPOSITORY}\n  tag: \"{INSTALLATION_TAG}\"\n"
        ),
    )
    .unwrap();
    let overwrite_path = overwrite.display().to_string();
    let mut operator = support::operator::OperatorProcess::start_with_env(
        &env.kubeconfig,
        &["--controllers=containerruntime,operatingsystemconfig"],
        &[("IMAGEVECTOR_OVERWRITE", overwrite_path.as_str())],
    );

    let started = Instant::now();
    let node = Node::boot(&NodeOptions {
        assets: assets.clone(),
        agent_binary: static_binary.clone(),
        images: images.path().to_path_buf(),
        apiserver_port,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let node_name = node.name().to_string();
    eprintln!(
        "e2e: node {node_name} booted in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // gardenlet's part: the Cluster and the pool's two OSCs.
    let cluster: Cluster = serde_json::from_value(support::fixtures::cluster_json(&ns)).unwrap();
    Api::<Cluster>::all(env.client.clone())
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let key = format!("gardener-node-agent-{POOL}-e2e");
    let agent_token =
        limited_token_in(&shoot_client, "kube-system", &node_name, &[key.as_str()]).await;
    let mut labels = BTreeMap::new();
    for (label, value) in [
        ("worker.gardener.cloud/pool", POOL),
        ("worker.garden.sapcloud.io/group", POOL),
        ("worker.gardener.cloud/cri-name", "containerd"),
        ("containerruntime.worker.gardener.cloud/gvisor", "true"),
    ] {
        labels.insert(label.to_string(), value.to_string());
    }
    let node_osc = NodeOsc {
        server_url: shoot_url.clone(),
        ca_pem: shoot_ca.clone(),
        kubelet_credentials: support::node::KubeletCredentials::Token(
            support::node::kubelet_token(&shoot_client, &node_name).await,
        ),
        labels,
        sandbox_image: PAUSE_IMAGE.into(),
    };
    let pool = PoolOscs {
        namespace: ns.clone(),
        key: key.clone(),
        pool: POOL.into(),
        server_url: shoot_url.clone(),
        ca_pem: shoot_ca.clone(),
        agent_unit_content: format!(
            "[Unit]\nDescription=gardener-extension-node agent\nAfter=network-online.target\n[Service]\nEnvironment=RUST_LOG=info,gardener_extension_node=debug\nExecStart={AGENT_BINARY} --log-format json agent --config-dir={CONFIG_DIR}\nRestart=always\nRestartSec=1\n[Install]\nWantedBy=multi-user.target\n"
        ),
    };
    let reconcile = pool.reconcile(node_osc.cri_config(), &node_osc.files(), &node_osc.units());
    pool.create(&env.client, &reconcile).await;

    // Our operator renders the user data; GRM carries the node-agent secret into the shoot.
    let user_data = pool.user_data(&env.client, STAGE_TIMEOUT).await;
    let shoot_secrets = Api::<Secret>::namespaced(shoot_client.clone(), "kube-system");
    support::wait_for(
        "the node-agent secret in the shoot (through GRM)",
        STAGE_TIMEOUT,
        || async {
            shoot_secrets
                .get_opt(&key)
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .ok_or_else(|| "not there yet".to_string())
        },
    )
    .await;

    // MCM's and cloud-init's part: placeholders, then the user data as root.
    node.run_user_data(&user_data, &agent_token, &node_name);

    // The agent applies the reconcile OSC: containerd, the images, kubelet — the Node appears.
    let nodes = Api::<KubeNode>::all(shoot_client.clone());
    wait_on_node(&node, "the Node is Ready", STAGE_TIMEOUT, || async {
        let found = nodes
            .get_opt(&node_name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Node yet")?;
        let conditions = found.status.and_then(|s| s.conditions).unwrap_or_default();
        let ready = conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready {
            Ok(())
        } else {
            Err(format!("{conditions:?}"))
        }
    })
    .await;

    // gardenlet creates the ContainerRuntime; the DaemonSet's pod installs gVisor.
    let runtime: ContainerRuntime =
        serde_json::from_value(support::fixtures::container_runtime_json(&ns, POOL)).unwrap();
    let runtimes = Api::<ContainerRuntime>::namespaced(env.client.clone(), &ns);
    runtimes
        .create(&PostParams::default(), &runtime)
        .await
        .unwrap();
    let containerd_before = node
        .machine
        .unit_property("containerd.service", "InvocationID");
    let daemon_sets = Api::<DaemonSet>::namespaced(shoot_client.clone(), "kube-system");
    let shoot_pods = Api::<Pod>::namespaced(shoot_client.clone(), "kube-system");
    let ds_name = format!("containerd-gvisor-{POOL}");
    wait_on_node(
        &node,
        "the installation pod is Ready",
        STAGE_TIMEOUT,
        || async {
            let ds = daemon_sets
                .get_opt(&ds_name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no DaemonSet yet")?;
            let status = ds.status.unwrap_or_default();
            let pods = shoot_pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=containerd-gvisor"))
                .await
                .map_err(|e| e.to_string())?;
            let pod_states: Vec<_> = pods
                .items
                .iter()
                .map(|p| {
                    (
                        p.metadata.name.clone(),
                        p.status.clone().map(|s| (s.phase, s.container_statuses)),
                    )
                })
                .collect();
            if status.number_ready == 1 && status.desired_number_scheduled == 1 {
                Ok(())
            } else {
                Err(format!("DaemonSet status {status:?}; pods {pod_states:?}"))
            }
        },
    )
    .await;
    // The pod is Ready once its container runs; the installation is done when containerd
    // has been restarted with runsc in its config.
    wait_on_node(
        &node,
        "runsc in containerd's config and containerd restarted",
        STAGE_TIMEOUT,
        || async {
            let config = node
                .machine
                .read_file("/etc/containerd/config.toml")
                .map_err(|e| e.to_string())?;
            let restarted = node
                .machine
                .unit_property("containerd.service", "InvocationID")
                != containerd_before;
            let active = node
                .machine
                .unit_property("containerd.service", "ActiveState")
                == "active";
            if String::from_utf8_lossy(&config).contains("runsc") && restarted && active {
                Ok(())
            } else {
                Err(format!("restarted: {restarted}, active: {active}"))
            }
        },
    )
    .await;
    assert!(node.machine.exists(format!("{BIN_DIR}/runsc")));

    // kubelet sees the new runtime handler through the CRI, and the installed runsc runs
    // on this node (systrap platform, no KVM needed).
    wait_on_node(
        &node,
        "runsc among the Node's runtime handlers",
        STAGE_TIMEOUT,
        || async {
            let found = nodes.get(&node_name).await.map_err(|e| e.to_string())?;
            let handlers: Vec<String> = found
                .status
                .and_then(|s| s.runtime_handlers)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|h| h.name)
                .collect();
            if handlers.iter().any(|h| h == "runsc") {
                Ok(())
            } else {
                Err(format!("handlers {handlers:?}"))
            }
        },
    )
    .await;
    let direct = node.machine.run(&[
        &format!("{BIN_DIR}/runsc"),
        "--network=none",
        "--root=/run/e2e-runsc-do",
        "do",
        "dmesg",
    ]);
    assert!(
        direct.stdout.contains("Starting gVisor"),
        "the installed runsc runs on the node: {}{}",
        direct.stdout,
        direct.stderr
    );

    // A user's pod in gVisor.
    let pods = Api::<Pod>::namespaced(shoot_client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(
            "in-gvisor",
            Some("gvisor"),
            "/bin/busybox dmesg; exec /bin/busybox sleep 3600",
        ),
    )
    .await
    .unwrap();
    let running = wait_on_node(&node, "the gVisor pod is Running", STAGE_TIMEOUT, || {
        running_pod(&pods, "in-gvisor")
    })
    .await;
    let log = wait_on_node(
        &node,
        "gVisor's boot lines in the pod log",
        STAGE_TIMEOUT,
        || async {
            let log = container_log(&node, &running);
            if log.contains("Starting gVisor") {
                Ok(log)
            } else {
                Err(format!("log so far: {log}"))
            }
        },
    )
    .await;
    eprintln!("e2e: the gVisor pod's dmesg:\n{log}");
    let listed = node
        .machine
        .run(&[&format!("{BIN_DIR}/runsc"), "--root", RUNSC_ROOT, "list"]);
    let container_id = running
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .unwrap_or_default();
    let container_id = container_id.trim_start_matches("containerd://");
    assert!(
        !container_id.is_empty() && listed.stdout.contains(container_id),
        "runsc lists the pod's container {container_id}: {}{}",
        listed.stdout,
        listed.stderr
    );

    // Deleting the ContainerRuntime uninstalls gVisor from the node's containerd.
    pods.delete("in-gvisor", &DeleteParams::default())
        .await
        .unwrap();
    let containerd_installed = node
        .machine
        .unit_property("containerd.service", "InvocationID");
    runtimes
        .delete(&format!("gvisor-{POOL}"), &DeleteParams::default())
        .await
        .unwrap();
    wait_on_node(
        &node,
        "the ContainerRuntime is gone",
        STAGE_TIMEOUT,
        || async {
            match runtimes
                .get_opt(&format!("gvisor-{POOL}"))
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(cr) => Err(format!("still there: {:?}", cr.status)),
            }
        },
    )
    .await;
    let config_toml = String::from_utf8(
        node.machine
            .read_file("/etc/containerd/config.toml")
            .unwrap(),
    )
    .unwrap();
    assert!(
        !config_toml.contains("runsc"),
        "runsc left in config.toml:\n{config_toml}"
    );
    assert!(!node.machine.exists("/etc/containerd/runsc.toml"));
    assert_ne!(
        node.machine
            .unit_property("containerd.service", "InvocationID"),
        containerd_installed,
        "the uninstall restarted containerd"
    );
    wait_on_node(&node, "the DaemonSet is gone", STAGE_TIMEOUT, || async {
        match daemon_sets
            .get_opt(&ds_name)
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;

    // runc still serves pods.
    pods.create(
        &PostParams::default(),
        &pod("in-runc", None, "exec /bin/busybox sleep 3600"),
    )
    .await
    .unwrap();
    wait_on_node(&node, "the runc pod is Running", STAGE_TIMEOUT, || {
        running_pod(&pods, "in-runc")
    })
    .await;

    let managed = Api::<ManagedResource>::namespaced(env.client.clone(), &ns);
    assert!(
        managed
            .get_opt(
                &gardener_extension_node::controllers::containerruntime::installation_managed_resource(POOL)
            )
            .await
            .unwrap()
            .is_none()
    );
    eprintln!(
        "e2e: API connections through the node's forwarder: {}",
        node.forwarded_connections()
    );
    operator.kill();
    drop(node);
}
