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
//! The gVisor part: the ContainerRuntime asks for two profiles besides the default one,
//! `no-raw` (other runsc flags: each pod's sandbox runs with its profile's, read from its
//! command line) and `kvm` (refused by the installer on this node, which has no `/dev/kvm`; a
//! pod asking for it fails for want of the handler). Then the next release's installation
//! image, another runsc build, is rolled out while a gVisor pod runs: the pod keeps its
//! sandbox and old version, exec works before and after, a new pod runs the new version, and
//! the old version's files go once the old pod is deleted. The run prints its timeline.
//! `bench_gvisor_pod_start_and_memory_against_runc` (`make bench-gvisor`) measures pod start
//! and memory under runc and gVisor on the same node.
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
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::agent::{CONFIG_DIR, PoolOscs, limited_token_in};
use support::node::{AGENT_BINARY, Node, NodeOptions, NodeOsc};
use support::oci::{Content, Image, ImageFile, write_archive};

const POOL: &str = "worker-a";
const PAUSE_IMAGE: &str = "e2e.local/pause:e2e";
const BUSYBOX_IMAGE: &str = "e2e.local/busybox:e2e";
const INSTALLATION_REPOSITORY: &str = "e2e.local/gardener-extension-node/gvisor-installation";
const INSTALLATION_TAG: &str = "v0.1.0-e2e";
/// The next release's installation image: another runsc build (`hack/envtest.sh --node`
/// links `runsc-next` with another version string).
const UPGRADE_TAG: &str = "v0.2.0-e2e";
const RUNSC_ROOT: &str = "/run/containerd/runsc/k8s.io";
const BIN_DIR: &str = "/var/bin/containerruntimes";
/// The pool's machine type in the Cluster fixture: listed for `kvm` profiles, so the operator
/// renders the `kvm` profile's RuntimeClass and the node (without `/dev/kvm`) refuses it.
const MACHINE_TYPE: &str = "local";

/// How long each stage may take on a loaded 2-core machine.
const STAGE_TIMEOUT: Duration = Duration::from_secs(240);

fn required_env(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run this test with `make e2e`")),
    )
}

/// The images the node preloads: pause, a busybox workload, and two releases of the gVisor
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
    for (tag, runsc, archive) in [
        (INSTALLATION_TAG, "runsc", "gvisor-installation.tar"),
        (UPGRADE_TAG, "runsc-next", "gvisor-installation-next.tar"),
    ] {
        let installation = Image {
            reference: format!("{INSTALLATION_REPOSITORY}:{tag}"),
            entrypoint: vec![
                "/usr/local/bin/gardener-extension-node".into(),
                "gvisor-install".into(),
            ],
            files: vec![
                ImageFile::executable("/usr/local/bin/gardener-extension-node", static_binary),
                ImageFile::executable("/var/content/runsc", assets.join(runsc)),
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
        write_archive(&installation, &dir.join(archive)).unwrap();
    }
}

/// The image vector overwrite that makes the operator ship the installation image `tag`.
fn image_vector_overwrite(dir: &Path, tag: &str) -> String {
    let path = dir.join(format!("imagevector-overwrite-{tag}.yaml"));
    std::fs::write(
        &path,
        format!(
            "images:\n- name: runtime-gvisor-installation\n  repository: {INSTALLATION_REPOSITORY}\n  tag: \"{tag}\"\n"
        ),
    )
    .unwrap();
    path.display().to_string()
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

/// The runtime handlers kubelet reports for Node `name` (from the CRI).
async fn runtime_handlers(nodes: &Api<KubeNode>, name: &str) -> Result<Vec<String>, String> {
    let found = nodes.get(name).await.map_err(|e| e.to_string())?;
    Ok(found
        .status
        .and_then(|s| s.runtime_handlers)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|h| h.name)
        .collect())
}

/// The first container's ID of `pod`, without the `containerd://` prefix.
fn container_id(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

/// The gVisor versions installed on the node (folders under `BIN_DIR/gvisor`).
fn installed_versions(node: &Node) -> Vec<String> {
    let listed = node
        .machine
        .sh(&format!("ls {BIN_DIR}/gvisor 2>/dev/null || true"));
    listed
        .stdout
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A gVisor sandbox process on the node.
#[derive(Debug)]
struct Sandbox {
    pid: String,
    /// The binary it runs (`/proc/<pid>/exe`).
    exe: String,
    /// Its command line: runsc passes the runsc config's flags as `--key=value`.
    args: String,
}

/// The sandbox of `pod`: the `runsc-sandbox` process in the pod's cgroup (named after its
/// UID, with `_` for `-` under the systemd driver).
fn sandbox_of(node: &Node, pod: &Pod) -> Result<Sandbox, String> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let listed = node.machine.sh(
        "for d in /proc/[0-9]*; do a=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); \
         case \"$a\" in runsc-sandbox*) ;; *) continue ;; esac; \
         echo \"${d#/proc/}|$(readlink $d/exe)|$(tr '\\n' ' ' < $d/cgroup)|$a\"; done",
    );
    listed
        .stdout
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(4, '|');
            Some((
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            ))
        })
        .find(|(_, _, cgroup, _)| cgroup.contains(&uid) || cgroup.contains(&uid.replace('-', "_")))
        .map(|(pid, exe, _, args)| Sandbox {
            pid: pid.to_string(),
            exe: exe.to_string(),
            args: args.to_string(),
        })
        .ok_or_else(|| format!("no sandbox of pod {uid}:\n{}", listed.stdout))
}

/// Runs `args` in the container `id` through containerd's task API (`ctr tasks exec`, which
/// goes to the container's shim as kubelet's CRI exec does); its output.
fn ctr_exec(node: &Node, id: &str, args: &[&str]) -> String {
    let exec_id = format!("e2e-{}", std::process::id());
    let mut command = vec![
        "/usr/local/sbin/ctr",
        "--namespace",
        "k8s.io",
        "tasks",
        "exec",
        "--exec-id",
        exec_id.as_str(),
        id,
    ];
    command.extend_from_slice(args);
    let output = node.machine.run(&command);
    format!("{}{}", output.stdout, output.stderr)
}

/// The log of the installation pod's container (the Ready one) on the node.
async fn installer_log(node: &Node, shoot_pods: &Api<Pod>) -> Result<String, String> {
    let pods = shoot_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=containerd-gvisor"))
        .await
        .map_err(|e| e.to_string())?;
    let pod = pods
        .items
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .ok_or("no running installation pod")?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    Ok(node
        .machine
        .sh(&format!(
            "cat /var/log/pods/kube-system_{name}_{uid}/container-runtime-gvisor-containerd/*.log"
        ))
        .stdout)
}

/// The message of a `reason` event about pod `pod` in `default`.
async fn pod_event(client: &kube::Client, pod: &str, reason: &str) -> Result<String, String> {
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), "default");
    let listed = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .map_err(|e| e.to_string())?;
    let all: Vec<String> = listed
        .items
        .iter()
        .map(|e| format!("{:?}: {:?}", e.reason, e.message))
        .collect();
    listed
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .and_then(|e| e.message)
        .ok_or_else(|| format!("events of {pod}: {all:?}"))
}

/// Waits until the installation DaemonSet runs the image `tag` and its pod is Ready.
async fn wait_for_installation(
    node: &Node,
    daemon_sets: &Api<DaemonSet>,
    shoot_pods: &Api<Pod>,
    ds_name: &str,
    tag: &str,
) {
    wait_on_node(
        node,
        &format!("the installation pod of {tag} is Ready"),
        STAGE_TIMEOUT,
        || async {
            let ds = daemon_sets
                .get_opt(ds_name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no DaemonSet yet")?;
            let image = ds
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let generation = ds.metadata.generation;
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
            let rolled = image.ends_with(&format!(":{tag}"))
                && status.observed_generation == generation
                && status.updated_number_scheduled == Some(1)
                && status.number_ready == 1
                && status.desired_number_scheduled == 1;
            if rolled {
                Ok(())
            } else {
                Err(format!(
                    "image {image}, DaemonSet status {status:?}; pods {pod_states:?}"
                ))
            }
        },
    )
    .await;
}

/// A shoot node booted the way gardenlet, MCM and cloud-init bring one up, with our operator
/// (OSC and ContainerRuntime controllers, the first installation release) beside it.
struct ShootNode {
    env: support::TestEnv,
    /// Kept for the shoot control plane's lifetime.
    _shoot: support::shoot::Shoot,
    shoot_client: kube::Client,
    node: Node,
    node_name: String,
    nodes: Api<KubeNode>,
    images: tempfile::TempDir,
    operator: support::operator::OperatorProcess,
    operator_args: Vec<String>,
}

fn start_operator(
    env: &support::TestEnv,
    args: &[String],
    image_vector: &str,
) -> support::operator::OperatorProcess {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    support::operator::OperatorProcess::start_with_env(
        &env.kubeconfig,
        &args,
        &[("IMAGEVECTOR_OVERWRITE", image_vector)],
    )
}

/// Boots the node, has our operator render the pool's user data and the agent apply it, and
/// waits for the Node to be Ready.
async fn shoot_node() -> ShootNode {
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
    let kvm_machine_types = format!("--gvisor-kvm-machine-types={MACHINE_TYPE}");
    let operator_args = vec![
        "--controllers=containerruntime,operatingsystemconfig".to_string(),
        kvm_machine_types,
    ];
    let first_release = image_vector_overwrite(images.path(), INSTALLATION_TAG);
    let operator = start_operator(&env, &operator_args, &first_release);

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

    ShootNode {
        env,
        _shoot: shoot,
        shoot_client,
        node,
        node_name,
        nodes,
        images,
        operator,
        operator_args,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the node components and a static binary: make e2e"]
async fn a_gvisor_pod_runs_on_a_real_node_and_deleting_the_runtime_uninstalls_it() {
    let ShootNode {
        env,
        _shoot,
        shoot_client,
        node,
        node_name,
        nodes,
        images,
        operator,
        operator_args,
    } = shoot_node().await;
    let ns = env.namespace.clone();
    // gardenlet creates the ContainerRuntime with two more profiles: `no-raw` (other runsc
    // flags) and `kvm` (the platform this node cannot offer); the DaemonSet's pod installs.
    let timeline = Instant::now();
    let stage = |what: &str| eprintln!("e2e: {:>6.1} s  {what}", timeline.elapsed().as_secs_f64());
    let mut runtime_json = support::fixtures::container_runtime_json(&ns, POOL);
    runtime_json["spec"]["providerConfig"]["profiles"] = json!([
        {"name": "no-raw", "configFlags": {"net-raw": "false"}},
        {"name": "kvm", "platform": "kvm"},
    ]);
    let runtime: ContainerRuntime = serde_json::from_value(runtime_json).unwrap();
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
    wait_for_installation(&node, &daemon_sets, &shoot_pods, &ds_name, INSTALLATION_TAG).await;
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
    let first = installed_versions(&node);
    assert_eq!(first.len(), 1, "one version installed: {first:?}");
    let first = first[0].clone();
    let runsc = format!("{BIN_DIR}/gvisor/{first}/runsc");
    stage(&format!("gVisor {first} installed, containerd restarted"));

    // kubelet sees the handlers of the profiles this node runs through the CRI; not the kvm
    // one, which the installer refused, logged and reported on the Node.
    wait_on_node(
        &node,
        "runsc and runsc-no-raw among the Node's runtime handlers",
        STAGE_TIMEOUT,
        || async {
            let handlers = runtime_handlers(&nodes, &node_name).await?;
            let has = |name: &str| handlers.iter().any(|h| h == name);
            if has("runsc") && has("runsc-no-raw") && !has("runsc-kvm") {
                Ok(())
            } else {
                Err(format!("handlers {handlers:?}"))
            }
        },
    )
    .await;
    // The installer's reason, in its log. (In a landscape also a Warning event
    // GVisorProfileRefused on the Node, test/gvisor_install.rs against a real API server with
    // the shoot's Role: here pods cannot reach the API server, the node has no kube-proxy.)
    let refusal = wait_on_node(
        &node,
        "the installer's refusal of the kvm profile in its log",
        STAGE_TIMEOUT,
        || async {
            let log = installer_log(&node, &shoot_pods).await?;
            log.lines()
                .find(|line| line.contains("action=\"refused\""))
                .map(str::to_string)
                .ok_or(format!("log so far: {log}"))
        },
    )
    .await;
    assert!(
        refusal.contains("profile=\"kvm\"")
            && refusal.contains(
                "platform kvm needs /dev/kvm (a character device), which this node does not have"
            ),
        "{refusal}"
    );
    stage(&format!("installer refused the kvm profile: {refusal}"));
    let direct = node.machine.run(&[
        &runsc,
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

    // A user's pod in each profile: each sandbox runs with its profile's runsc flags and the
    // installed version's runsc.
    let pods = Api::<Pod>::namespaced(shoot_client.clone(), "default");
    let mut sandboxes = BTreeMap::new();
    for (name, class, net_raw) in [
        ("in-gvisor", "gvisor", "true"),
        ("in-no-raw", "gvisor-no-raw", "false"),
    ] {
        pods.create(
            &PostParams::default(),
            &pod(
                name,
                Some(class),
                "/bin/busybox dmesg; exec /bin/busybox sleep 3600",
            ),
        )
        .await
        .unwrap();
        let running = wait_on_node(&node, &format!("{name} is Running"), STAGE_TIMEOUT, || {
            running_pod(&pods, name)
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
        let sandbox = sandbox_of(&node, &running).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            sandbox.args.contains(&format!("--net-raw={net_raw}")),
            "{name} runs under its profile's runsc config: {sandbox:?}"
        );
        assert_eq!(sandbox.exe, runsc, "{name}: {sandbox:?}");
        stage(&format!(
            "{name} ({class}) Running, sandbox pid {} with --net-raw={net_raw}, {}",
            sandbox.pid, sandbox.exe
        ));
        if name == "in-gvisor" {
            eprintln!("e2e: the gVisor pod's dmesg:\n{log}");
        }
        sandboxes.insert(name, (running, sandbox));
    }
    let (old_pod, old_sandbox) = sandboxes.remove("in-gvisor").unwrap();
    let old_container = container_id(&old_pod);
    let listed = node.machine.run(&[&runsc, "--root", RUNSC_ROOT, "list"]);
    assert!(
        !old_container.is_empty() && listed.stdout.contains(&old_container),
        "runsc lists the pod's container {old_container}: {}{}",
        listed.stdout,
        listed.stderr
    );

    // A pod asking for the kvm profile cannot start here: no handler for it on this node.
    pods.create(
        &PostParams::default(),
        &pod("in-kvm", Some("gvisor-kvm"), "exec /bin/busybox sleep 3600"),
    )
    .await
    .unwrap();
    let failure = wait_on_node(
        &node,
        "the kvm pod's sandbox fails for want of its handler",
        STAGE_TIMEOUT,
        || pod_event(&shoot_client, "in-kvm", "FailedCreatePodSandBox"),
    )
    .await;
    assert!(failure.contains("runsc-kvm"), "{failure}");
    assert_ne!(
        pods.get("in-kvm")
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase)
            .as_deref(),
        Some("Running")
    );
    stage(&format!("in-kvm fails: {failure}"));
    pods.delete("in-kvm", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("in-no-raw", &DeleteParams::default())
        .await
        .unwrap();

    // The next release ships another runsc build. The operator restarts with it and gardenlet
    // asks for a reconcile: the DaemonSet rolls, its pod installs the new version beside the
    // old one and restarts containerd, while in-gvisor keeps running in the old version.
    let exec_before = ctr_exec(
        &node,
        &old_container,
        &["/bin/busybox", "echo", "exec-before"],
    );
    assert!(exec_before.contains("exec-before"), "{exec_before}");
    let mut first_operator = operator;
    first_operator.terminate(Duration::from_secs(30));
    let next_release = image_vector_overwrite(images.path(), UPGRADE_TAG);
    let mut operator = start_operator(&env, &operator_args, &next_release);
    let containerd_before_upgrade = node
        .machine
        .unit_property("containerd.service", "InvocationID");
    runtimes
        .patch(
            &format!("gvisor-{POOL}"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}}),
            ),
        )
        .await
        .unwrap();
    stage("upgrade: operator restarted with the next release, reconcile requested");
    wait_for_installation(&node, &daemon_sets, &shoot_pods, &ds_name, UPGRADE_TAG).await;
    let second = wait_on_node(
        &node,
        "the next version installed and containerd restarted",
        STAGE_TIMEOUT,
        || async {
            let versions = installed_versions(&node);
            let restarted = node
                .machine
                .unit_property("containerd.service", "InvocationID")
                != containerd_before_upgrade;
            let config = String::from_utf8(
                node.machine
                    .read_file("/etc/containerd/config.toml")
                    .map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            match versions.iter().find(|v| **v != first) {
                Some(next)
                    if restarted
                        && config.contains(&format!("gvisor/{next}/containerd-shim-runsc-v1")) =>
                {
                    Ok(next.clone())
                }
                _ => Err(format!("versions {versions:?}, restarted {restarted}")),
            }
        },
    )
    .await;
    stage(&format!(
        "gVisor {second} installed beside {first}, containerd restarted"
    ));
    let next_runsc = format!("{BIN_DIR}/gvisor/{second}/runsc");
    let version = node.machine.run(&[&next_runsc, "--version"]).stdout;
    assert!(version.contains("-next"), "{version}");
    assert!(
        node.machine.exists(&runsc),
        "the old version stays while in-gvisor runs in it"
    );
    let old_now = sandbox_of(&node, &old_pod).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        old_now.pid, old_sandbox.pid,
        "in-gvisor's sandbox kept running"
    );
    assert_eq!(old_now.exe, runsc, "in the old version");
    let still = running_pod(&pods, "in-gvisor").await.unwrap();
    assert_eq!(container_id(&still), old_container);
    // Exec goes through containerd's task API to the pod's (old) shim, the path kubelet's
    // CRI exec takes (the API server cannot reach this node's kubelet: private network).
    let exec_after = ctr_exec(
        &node,
        &old_container,
        &["/bin/busybox", "echo", "exec-after"],
    );
    assert!(exec_after.contains("exec-after"), "{exec_after}");
    stage("in-gvisor still Running in the old version (same sandbox pid), exec works");

    // A new pod runs in the new version.
    pods.create(
        &PostParams::default(),
        &pod(
            "in-gvisor-next",
            Some("gvisor"),
            "exec /bin/busybox sleep 3600",
        ),
    )
    .await
    .unwrap();
    let next_pod = wait_on_node(&node, "in-gvisor-next is Running", STAGE_TIMEOUT, || {
        running_pod(&pods, "in-gvisor-next")
    })
    .await;
    let next_sandbox = sandbox_of(&node, &next_pod).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(next_sandbox.exe, next_runsc, "{next_sandbox:?}");
    stage(&format!("in-gvisor-next Running in {second}"));

    // in-gvisor is deleted cleanly; then the installer (waiting) removes the old version.
    pods.delete("in-gvisor", &DeleteParams::default())
        .await
        .unwrap();
    wait_on_node(&node, "in-gvisor is gone", STAGE_TIMEOUT, || async {
        match pods.get_opt("in-gvisor").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(pod) => Err(format!("{:?}", pod.status.map(|s| s.phase))),
        }
    })
    .await;
    stage("in-gvisor deleted");
    wait_on_node(&node, "the old version removed", STAGE_TIMEOUT, || async {
        let versions = installed_versions(&node);
        if versions == [second.clone()] {
            Ok(())
        } else {
            Err(format!("versions {versions:?}"))
        }
    })
    .await;
    stage(&format!("gVisor {first} removed by the waiting installer"));
    pods.delete("in-gvisor-next", &DeleteParams::default())
        .await
        .unwrap();
    wait_on_node(&node, "in-gvisor-next is gone", STAGE_TIMEOUT, || async {
        match pods
            .get_opt("in-gvisor-next")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;

    // Deleting the ContainerRuntime uninstalls gVisor from the node's containerd.
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
    stage("ContainerRuntime deleted: nodes uninstalled");
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
    assert!(!node.machine.exists("/etc/containerd/runsc-no-raw.toml"));
    assert!(
        !node.machine.exists(format!("{BIN_DIR}/gvisor")),
        "every version removed: {:?}",
        installed_versions(&node)
    );
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

/// What one pod's cgroup holds, read on the node.
#[derive(Debug, Clone, Copy, Default)]
struct PodCgroup {
    /// Working set: usage minus inactive file pages (what kubelet reports), bytes.
    working_set: u64,
    /// Anonymous memory, bytes.
    anon: u64,
    /// CPU time so far, nanoseconds.
    cpu_ns: u64,
}

/// The pod-level cgroup of the pod with `uid` (cgroup v1 or v2; systemd or cgroupfs naming).
fn pod_cgroup(node: &Node, uid: &str) -> Result<PodCgroup, String> {
    let underscored = uid.replace('-', "_");
    let script = format!(
        "for base in /sys/fs/cgroup/memory /sys/fs/cgroup; do \
           d=$(find $base -maxdepth 5 -type d \\( -name '*pod{underscored}.slice' -o -name 'pod{uid}' \\) 2>/dev/null | head -1); \
           [ -n \"$d\" ] && break; done; \
         [ -n \"$d\" ] || exit 1; \
         if [ -f $d/memory.usage_in_bytes ]; then \
           echo usage $(cat $d/memory.usage_in_bytes); grep -E '^(total_inactive_file|total_rss) ' $d/memory.stat; \
           for m in cpu,cpuacct cpuacct,cpu cpuacct; do c=$(echo $d | sed \"s#/sys/fs/cgroup/memory#/sys/fs/cgroup/$m#\"); \
             if [ -f $c/cpuacct.usage ]; then echo cpu_ns $(cat $c/cpuacct.usage); break; fi; done; \
         else \
           echo usage $(cat $d/memory.current); grep -E '^(inactive_file|anon) ' $d/memory.stat; \
           echo cpu_ns $(( $(grep '^usage_usec ' $d/cpu.stat | cut -d' ' -f2) * 1000 )); \
         fi"
    );
    let output = node.machine.sh(&script);
    if !output.status.success() {
        return Err(format!("no cgroup of pod {uid}: {}", output.stderr));
    }
    let value = |key: &str| {
        output
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key} ")))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let usage = value("usage").ok_or(format!("no usage: {}", output.stdout))?;
    let inactive = value("total_inactive_file")
        .or(value("inactive_file"))
        .unwrap_or(0);
    Ok(PodCgroup {
        working_set: usage.saturating_sub(inactive),
        anon: value("total_rss").or(value("anon")).unwrap_or(0),
        cpu_ns: value("cpu_ns").unwrap_or(0),
    })
}

/// The mean VmRSS (KiB) of the node's processes whose command line holds `name`.
fn rss_of(node: &Node, name: &str) -> u64 {
    let output = node.machine.sh(&format!(
        "for d in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" in *{name}*) \
           grep '^VmRSS:' $d/status 2>/dev/null | tr -s ' ' | cut -d' ' -f2;; esac; done"
    ));
    let rss: Vec<u64> = output
        .stdout
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .collect();
    rss.iter().sum::<u64>() / rss.len().max(1) as u64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The timestamp (RFC 3339, nanoseconds) of the first line of `pod`'s container log.
fn first_log_line_at(node: &Node, pod: &Pod) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let log = container_log(node, pod);
    let first = log.lines().next().ok_or("no log line yet")?;
    let stamp = first.split_whitespace().next().ok_or("empty line")?;
    chrono::DateTime::parse_from_rfc3339(stamp)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{stamp}: {e}"))
}

/// One runtime's medians over its pods (seconds, MiB, millicores).
#[derive(Debug)]
struct RuntimeFigures {
    label: &'static str,
    to_output: f64,
    output_min: f64,
    output_max: f64,
    to_running: f64,
    working_set_mib: f64,
    anon_mib: f64,
    cpu_millicores: f64,
    shim_rss_mib: f64,
}

/// Starts per runtime.
const BENCH_STARTS: usize = 10;

/// `make bench-gvisor`: pod start latency and memory, runc against gVisor (the default
/// profile, systrap), on the real node of `make e2e`, into docs/benchmarks.md (section
/// `gvisor`); the measured difference is what the RuntimeClass's default `overhead` is made of
/// (docs/usage.md). Pods start one after the other and keep running: 10 per runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark on a real node: make bench-gvisor"]
async fn bench_gvisor_pod_start_and_memory_against_runc() {
    let ShootNode {
        env,
        _shoot,
        shoot_client,
        node,
        node_name,
        nodes,
        images: _images,
        mut operator,
        operator_args: _,
    } = shoot_node().await;
    let runtime: ContainerRuntime = serde_json::from_value(
        support::fixtures::container_runtime_json(&env.namespace, POOL),
    )
    .unwrap();
    let runtimes = Api::<ContainerRuntime>::namespaced(env.client.clone(), &env.namespace);
    runtimes
        .create(&PostParams::default(), &runtime)
        .await
        .unwrap();
    let daemon_sets = Api::<DaemonSet>::namespaced(shoot_client.clone(), "kube-system");
    let shoot_pods = Api::<Pod>::namespaced(shoot_client.clone(), "kube-system");
    let ds_name = format!("containerd-gvisor-{POOL}");
    wait_for_installation(&node, &daemon_sets, &shoot_pods, &ds_name, INSTALLATION_TAG).await;
    wait_on_node(&node, "runsc among the handlers", STAGE_TIMEOUT, || async {
        let handlers = runtime_handlers(&nodes, &node_name).await?;
        if handlers.iter().any(|h| h == "runsc") {
            Ok(())
        } else {
            Err(format!("{handlers:?}"))
        }
    })
    .await;

    let pods = Api::<Pod>::namespaced(shoot_client.clone(), "default");
    let mut rows = Vec::new();
    for (label, class) in [("runc", None), ("gVisor (runsc, systrap)", Some("gvisor"))] {
        let mut to_output = Vec::new();
        let mut to_running = Vec::new();
        let mut started = Vec::new();
        for i in 0..BENCH_STARTS {
            let name = format!("bench-{}-{i}", class.unwrap_or("runc"));
            let created_at = chrono::Utc::now();
            let created = Instant::now();
            pods.create(
                &PostParams::default(),
                &pod(&name, class, "echo started; exec /bin/busybox sleep 3600"),
            )
            .await
            .unwrap();
            let running = loop {
                if let Ok(pod) = running_pod(&pods, &name).await {
                    break pod;
                }
                assert!(created.elapsed() < STAGE_TIMEOUT, "{name} not Running");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            to_running.push(created.elapsed().as_secs_f64());
            let first = wait_on_node(&node, "the first log line", STAGE_TIMEOUT, || async {
                first_log_line_at(&node, &running)
            })
            .await;
            to_output.push((first - created_at).num_microseconds().unwrap_or(0) as f64 / 1e6);
            started.push(running);
        }
        // Settled: what each pod's cgroup holds, and its CPU over 10 s.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let before: Vec<PodCgroup> = started
            .iter()
            .map(|p| pod_cgroup(&node, p.metadata.uid.as_deref().unwrap()).unwrap())
            .collect();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after: Vec<PodCgroup> = started
            .iter()
            .map(|p| pod_cgroup(&node, p.metadata.uid.as_deref().unwrap()).unwrap())
            .collect();
        let mut working_set: Vec<f64> = after
            .iter()
            .map(|c| c.working_set as f64 / 1048576.0)
            .collect();
        let mut anon: Vec<f64> = after.iter().map(|c| c.anon as f64 / 1048576.0).collect();
        let mut cpu: Vec<f64> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| a.cpu_ns.saturating_sub(b.cpu_ns) as f64 / 10e9 * 1000.0)
            .collect();
        let shim = if class.is_some() {
            "containerd-shim-runsc-v1"
        } else {
            "containerd-shim-runc-v2"
        };
        let shim_rss = rss_of(&node, shim) as f64 / 1024.0;
        assert!(
            after.iter().all(|c| c.cpu_ns > 0),
            "every pod's cgroup has used CPU: {after:?}"
        );
        let (output_min, output_max) = min_max(&to_output);
        rows.push(RuntimeFigures {
            label,
            to_output: median(&mut to_output),
            output_min,
            output_max,
            to_running: median(&mut to_running),
            working_set_mib: median(&mut working_set),
            anon_mib: median(&mut anon),
            cpu_millicores: median(&mut cpu),
            shim_rss_mib: shim_rss,
        });
        eprintln!("bench: {label}: {:?}", rows.last().unwrap());
        for pod in &started {
            pods.delete(&pod.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
        for pod in &started {
            wait_on_node(&node, "the pod is gone", STAGE_TIMEOUT, || async {
                match pods
                    .get_opt(&pod.name_any())
                    .await
                    .map_err(|e| e.to_string())?
                {
                    None => Ok(()),
                    Some(_) => Err("still there".to_string()),
                }
            })
            .await;
        }
    }

    let (runc, gvisor) = (&rows[0], &rows[1]);
    let memory_overhead = gvisor.working_set_mib - runc.working_set_mib;
    let cpu_overhead = gvisor.cpu_millicores - runc.cpu_millicores;
    let mut body = String::from(
        "## gVisor against runc: pod start and memory on a real node\n\n\
         Command: `make bench-gvisor` (`bench_gvisor_pod_start_and_memory_against_runc` in `test/node_e2e.rs`): the systemd-nspawn node of `make e2e` (containerd 2.x and kubelet built from their Go modules, our agent), gVisor installed by the operator's DaemonSet (runsc and its shim from `gvisor.dev/gvisor`, default profile, platform systrap); per runtime 10 busybox pods (`echo started; sleep 3600`, no resources asked for) created one after the other, each kept running. **Start**: from the create request to the container's first log line (containerd's timestamp; the node shares the host's clock), and to `Running` as the API shows it (polled every 50 ms; kubelet reports it after its next relist). **Memory and CPU** of each pod's cgroup (pod level, as the RuntimeClass overhead is accounted: for gVisor the sandbox, i.e. the Sentry and the gofer, with the container in it) 10 s after the last pod started; CPU over the next 10 s. The shims run outside the pods' cgroups (containerd's); the mean resident memory of one shim process is given apart. Figures are medians over the 10 pods.\n\n\
         | runtime | start → first output (median) | min / max | start → `Running` in the API (median) | pod working set | pod anonymous memory | pod CPU, idle | RSS of one shim |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in &rows {
        body.push_str(&format!(
            "| {} | {:.2} s | {:.2} / {:.2} s | {:.2} s | {:.1} MiB | {:.1} MiB | {:.1} millicores | {:.1} MiB |\n",
            row.label,
            row.to_output,
            row.output_min,
            row.output_max,
            row.to_running,
            row.working_set_mib,
            row.anon_mib,
            row.cpu_millicores,
            row.shim_rss_mib
        ));
    }
    body.push_str(&format!(
        "\ngVisor minus runc, per pod: working set {memory_overhead:.1} MiB, CPU {cpu_overhead:.1} millicores when idle; start {:.2} s later to the first output. The RuntimeClass's default `overhead.podFixed` is this difference rounded up (memory to the next 8 MiB, CPU to the next 10 millicores, at least 10): see `DEFAULT_OVERHEAD` in `src/controllers/containerruntime/profiles.rs` and docs/usage.md.\n\nMeasured on {}.\n",
        gvisor.to_output - runc.to_output,
        chrono::Utc::now().format("%Y-%m-%d")
    ));
    support::benchmarks::write_section("gvisor", &body);
    eprintln!("{body}");
    operator.kill();
    drop(node);
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)))
}
