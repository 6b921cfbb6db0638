//! Test support: a shoot **node** — a systemd-nspawn machine (`support::nspawn`) prepared to
//! run containerd 2.x and kubelet, both built from their Go modules by
//! `hack/envtest.sh --node`. What the node runs comes from an OperatingSystemConfig applied
//! by our agent ([`NodeOsc`] builds its files and units); this module only prepares what a
//! node image and a cloud provider would:
//!
//! - **Binaries**: kubelet, containerd, containerd-shim-runc-v2 and ctr in `/usr/local/sbin`
//!   (a bind mount of a per-node folder; the host's empty `/usr/local/sbin` is the mount
//!   point), our static binary at [`AGENT_BINARY`], OCI archives in [`IMAGES_DIR`].
//!   runsc is *not* there: the gVisor installation DaemonSet must bring it.
//! - **Network**: a private network namespace with a bridge `cni0` at [`NODE_IP`] (the
//!   kubelet's node IP; the bridge CNI plugin of the OSC uses it for pods). Nodes are
//!   isolated from each other and from the host. The shoot's kube-apiserver listens on host
//!   loopback; a forwarder listens on the same port on the node's loopback, so kubeconfigs
//!   carry the same URL on the node as on the host.
//! - **Cgroups** (this host has the v1/v2 hybrid layout): like every machine of
//!   `nspawn.rs`, a node starts in folders of its own below this process's cgroup
//!   (`gen-machine-<pid>-<n>`), so its cgroup namespace is rooted there and kubelets of two
//!   nodes never share `/kubepods`.
//!   nspawn mounts the controllers read-only; they are remounted read-write inside the node
//!   (the node is a whole machine to its kubelet). The folders are removed with the machine,
//!   by the nspawn watchdog when the test binary dies, and stale ones of dead test
//!   processes at the next boot.
//! - **Kernel tunables**: kubelet insists on six `vm.*`/`kernel.*` values and would write
//!   them, host-wide. Instead the node sees files with those values bind-mounted over
//!   `/proc/sys/...`; the host's values stay as they are.
//! - **Disk**: `/var` is a per-node folder of the host's temporary folder (on disk), not
//!   the tmpfs of the volatile root: container images, pod logs and the binaries the
//!   installation pod copies are page cache there, which memory limits can reclaim.
//! - `/dev/kmsg` (kubelet's OOM watcher) is the host's, read-only; `--capability=all` and no
//!   seccomp filter from nspawn (`SYSTEMD_SECCOMP=0`), so containerd, runc and runsc get the
//!   privileges they have on a real node.
//! - **User namespace**: the node runs in its own user namespace that maps uids and gids
//!   `0..2^31-1` each to itself (`--private-users=0:2147483647`, files keep their owners).
//!   Why: this machine's capability bounding set lacks `CAP_SYS_RESOURCE`, so no process
//!   here may lower an OOM score, and gVisor's shim sets its own to -999 and refuses to
//!   start when that fails ("failed to set OOM Score on shim: … permission denied") —
//!   unless it runs in a user namespace, where it accepts the refusal. kubelet runs with
//!   its `KubeletInUserNamespace` feature gate (it then tolerates the same refusals), and
//!   containerd's `restrict_oom_score_adj` keeps the -998 kubelet asks for sandboxes from
//!   reaching runc. A real node has the capability and needs none of this; everything
//!   else (cgroups, mounts, the bridge, runsc's sandboxes) behaves as on a node.
//!
//! Clean-up: everything runs inside the machine, whose PID namespace dies with its systemd
//! (see `support::nspawn`); the forwarder is a thread of the test process.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::nspawn::{Machine, MachineOptions, NspawnError};

/// The node's IP: the address of its `cni0` bridge.
pub const NODE_IP: &str = "10.88.0.1";
/// The pod network of a node (each node has its own; they never meet).
pub const POD_SUBNET: &str = "10.88.0.0/16";
/// Where our static binary is in the node.
pub const AGENT_BINARY: &str = "/opt/gardener-extension-node/gardener-extension-node";
/// Where the OCI archives the node preloads are.
pub const IMAGES_DIR: &str = "/opt/e2e-images";
/// The binaries from `hack/envtest.sh --node` a node carries in `/usr/local/sbin`.
pub const NODE_BINARIES: [&str; 4] = ["kubelet", "containerd", "containerd-shim-runc-v2", "ctr"];

/// How many user and group ids the node's user namespace maps, each to itself (all but the
/// top half of the id space, which a full mapping would need and nspawn refuses).
const USERNS_IDS: u32 = 2_147_483_647;

/// The kernel tunables kubelet checks (`setupKernelTunables`), with the values it wants.
const KUBELET_SYSCTLS: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

/// The inotify instances every node's processes share (systemd, journald, containerd and
/// kubelet each hold some). The kernel counts them per user across user namespaces up to the
/// host's, whose default (128) runs out at about ten nodes: systemd then logs "Failed to
/// create inotify object: Too many open files" and its boot never finishes. Gardener's node
/// sysctls set this value.
const INOTIFY_MAX_USER_INSTANCES: u64 = 8192;

/// Raises the host's `fs.inotify.max_user_instances` to [`INOTIFY_MAX_USER_INSTANCES`] when
/// it is lower (never lowers it).
fn ensure_inotify_instances() -> Result<(), String> {
    let path = "/proc/sys/fs/inotify/max_user_instances";
    let current: u64 = fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{path}: {e}"))?;
    if current < INOTIFY_MAX_USER_INSTANCES {
        fs::write(path, INOTIFY_MAX_USER_INSTANCES.to_string())
            .map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

/// What a node is built from.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The folder `hack/envtest.sh --node` prints.
    pub assets: PathBuf,
    /// Our binary, statically linked (it also runs in the installation image).
    pub agent_binary: PathBuf,
    /// A folder of OCI archives (`*.tar`) the node imports before kubelet starts.
    pub images: PathBuf,
    /// The shoot kube-apiserver's port on host loopback.
    pub apiserver_port: u16,
}

/// A booted node. Its kubelet and containerd start once the agent applies [`NodeOsc`].
pub struct Node {
    /// The machine (its name is the Node's name).
    pub machine: Machine,
    forwarder: Forwarder,
    /// Further ports forwarded from the node's loopback to the host's ([`Node::forward`]).
    more_forwarders: Vec<Forwarder>,
}

/// What a node's processes use, read from its cgroups and `/proc` on the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeMemory {
    /// Processes in the node's cgroups (systemd, journald, agent, containerd, kubelet, pods).
    pub processes: usize,
    /// Sum of their VmRSS (shared pages counted once per process).
    pub rss_sum_kib: u64,
    /// Anonymous memory of the node's memory cgroup (`total_rss`).
    pub cgroup_anon_kib: u64,
    /// Page cache charged to it (`total_cache`: images, logs, binaries under /var).
    pub cgroup_cache_kib: u64,
}

impl Node {
    /// Boots a node.
    pub fn boot(options: &NodeOptions) -> Result<Self, String> {
        Self::boot_named(options, Machine::reserve_name())
    }

    /// Boots a node whose machine (and Node) name is `name`, reserved with
    /// [`Machine::reserve_name`].
    pub fn boot_named(options: &NodeOptions, name: String) -> Result<Self, String> {
        for binary in NODE_BINARIES {
            if !options.assets.join(binary).is_file() {
                return Err(format!(
                    "{binary} missing in {}: run hack/envtest.sh --node (make e2e does)",
                    options.assets.display()
                ));
            }
        }
        // The mount point of the node's binaries; an FHS folder some hosts lack.
        fs::create_dir_all("/usr/local/sbin").map_err(|e| format!("/usr/local/sbin: {e}"))?;
        ensure_inotify_instances()?;
        let folder = format!(
            "gen-node-{}-{}",
            std::process::id(),
            NODE_COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let binaries = std::env::temp_dir().join(format!("{folder}-bin"));
        link_binaries(&options.assets, &binaries)?;
        // /var on disk: the volatile root is a tmpfs, whose pages a container's memory
        // limit cannot reclaim (the installation pod copies runsc and its shim to /var).
        let var = std::env::temp_dir().join(format!("{folder}-var"));
        fs::create_dir_all(&var).map_err(|e| format!("{}: {e}", var.display()))?;
        let machine = Machine::boot_named(
            MachineOptions {
                private_network: true,
                bind_ro: vec![
                    (binaries.clone(), "/usr/local/sbin".into()),
                    (options.agent_binary.clone(), AGENT_BINARY.into()),
                    (options.images.clone(), IMAGES_DIR.into()),
                    ("/dev/kmsg".into(), "/dev/kmsg".into()),
                ],
                extra_args: vec![
                    "--capability=all".into(),
                    // See the module docs (user namespace).
                    format!("--private-users=0:{USERNS_IDS}"),
                    "--private-users-ownership=off".into(),
                ],
                bind: vec![(var.clone(), "/var".into())],
                scratch_dirs: vec![var.clone(), binaries.clone()],
                nspawn_env: vec![("SYSTEMD_SECCOMP".into(), "0".into())],
                ..MachineOptions::default()
            },
            name,
        )
        .map_err(|e: NspawnError| {
            let _ = fs::remove_dir_all(&var);
            let _ = fs::remove_dir_all(&binaries);
            e.to_string()
        })?;
        prepare(&machine)?;
        let forwarder = Forwarder::start(machine.leader_pid(), options.apiserver_port)
            .map_err(|e| format!("API forwarder into the node: {e}"))?;
        Ok(Self {
            machine,
            forwarder,
            more_forwarders: Vec::new(),
        })
    }

    /// The node's name (its host name).
    pub fn name(&self) -> &str {
        self.machine.name()
    }

    /// `systemctl status` and the journal of a unit, for failure messages.
    pub fn describe(&self, unit: &str) -> String {
        let status = self
            .machine
            .run(&["systemctl", "status", "--no-pager", unit]);
        format!(
            "--- {unit} ---\n{}{}\n{}",
            status.stdout,
            status.stderr,
            self.machine.journal(unit)
        )
    }

    /// The node's memory use now.
    pub fn memory(&self) -> NodeMemory {
        let mut memory = NodeMemory::default();
        let Some(memory_cgroup) = self
            .machine
            .cgroups()
            .iter()
            .find(|dir| dir.starts_with("/sys/fs/cgroup/memory"))
        else {
            return memory;
        };
        let stat = fs::read_to_string(memory_cgroup.join("memory.stat")).unwrap_or_default();
        for line in stat.lines() {
            let mut parts = line.split_whitespace();
            match (
                parts.next(),
                parts.next().and_then(|v| v.parse::<u64>().ok()),
            ) {
                (Some("total_rss"), Some(bytes)) => memory.cgroup_anon_kib = bytes / 1024,
                (Some("total_cache"), Some(bytes)) => memory.cgroup_cache_kib = bytes / 1024,
                _ => {}
            }
        }
        let mut pids = std::collections::BTreeSet::new();
        let mut folders = vec![memory_cgroup.clone()];
        while let Some(folder) = folders.pop() {
            let procs = fs::read_to_string(folder.join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().filter_map(|pid| pid.parse::<u32>().ok()));
            if let Ok(entries) = fs::read_dir(&folder) {
                folders.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        memory.processes = pids.len();
        memory.rss_sum_kib = pids
            .iter()
            .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .filter_map(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("VmRSS:"))
                    .and_then(|value| {
                        value
                            .trim()
                            .trim_end_matches("kB")
                            .trim()
                            .parse::<u64>()
                            .ok()
                    })
            })
            .sum();
        memory
    }

    /// Forwards `127.0.0.1:<port>` of the node to the same port on host loopback (a
    /// registry of `support::registry`, say), like the API server's port.
    pub fn forward(&mut self, port: u16) {
        let forwarder = Forwarder::start(self.machine.leader_pid(), port)
            .unwrap_or_else(|e| panic!("forwarder of port {port} into the node: {e}"));
        self.more_forwarders.push(forwarder);
    }

    /// What a node image that runs gardenlet's provision user data has before the first boot
    /// (Garden Linux and the other OS images ship it): `/etc/environment` (the node-init unit
    /// reads it), Debian's alternatives, a network that is online, containerd as a unit (here with the 2.x build of
    /// `/usr/local/sbin`), and the plain-HTTP `registry` (`host:port`, forwarded with
    /// [`Node::forward`]) in containerd's hosts folder, as a landscape's registry would be.
    pub fn prepare_node_image(&self, registry: &str) {
        let hosts = format!(
            "server = \"http://{registry}\"\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
        let dropin = "[Service]\nExecStart=\nExecStart=/usr/local/sbin/containerd\n";
        let machine = &self.machine;
        let write = |path: &str, text: &str| {
            machine
                .write_file(path, text.as_bytes(), 0o644)
                .unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        write("/etc/environment", "");
        // Debian's alternatives (`awk`, which the node-init script runs, is one): the links of
        // the host's /etc, whose /usr the node shares.
        let alternatives = machine.host_path("/etc/alternatives");
        fs::create_dir_all(&alternatives).expect("/etc/alternatives");
        for entry in fs::read_dir("/etc/alternatives")
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(target) = fs::read_link(entry.path()) {
                let _ = std::os::unix::fs::symlink(target, alternatives.join(entry.file_name()));
            }
        }
        write(
            "/etc/systemd/system/containerd.service.d/10-e2e-containerd-2.conf",
            dropin,
        );
        write(
            &format!("/etc/containerd/certs.d/{registry}/hosts.toml"),
            &hosts,
        );
        // The node's network (loopback, the bridge) is up before the first boot, but nothing
        // manages it, so systemd-networkd-wait-online would hold network-online.target — and
        // the node-init unit after it — for its 2 min timeout.
        let script =
            "systemctl daemon-reload && systemctl mask --now systemd-networkd-wait-online.service";
        machine.sh(script).expect_success("prepare the node image");
    }

    /// Plays machine-controller-manager and cloud-init: fills the placeholders of `user_data`
    /// with the bootstrap `token` and the `machine` name, then runs it as root, once.
    pub fn run_user_data(&self, user_data: &str, token: &str, machine: &str) {
        let user_data = user_data
            .replace("<<BOOTSTRAP_TOKEN>>", token)
            .replace("<<MACHINE_NAME>>", machine);
        if let Err(e) = self.run_cloud_init(&user_data) {
            panic!("{e}");
        }
    }

    /// Plays cloud-init: runs `user_data` (placeholders already filled in) as root, once.
    pub fn run_cloud_init(&self, user_data: &str) -> Result<(), String> {
        self.machine
            .write_file("/root/user-data", user_data.as_bytes(), 0o700)
            .map_err(|e| format!("/root/user-data: {e}"))?;
        let output = self.machine.run(&["bash", "/root/user-data"]);
        if output.success() {
            Ok(())
        } else {
            Err(format!(
                "the user data failed ({}): {}{}",
                output.status, output.stdout, output.stderr
            ))
        }
    }

    /// Polls `check` every 500 ms until it returns `Ok`, printing how long that took
    /// (`<node>: <what> after N s`), and returns its value and the seconds; after `timeout`
    /// panics with the last answer and what the node's units (node-init, agent, containerd,
    /// kubelet) said.
    pub async fn wait_until<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: F,
    ) -> (T, f64)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let started = std::time::Instant::now();
        loop {
            match check().await {
                Ok(value) => {
                    let took = started.elapsed().as_secs_f64();
                    eprintln!("e2e [{}]: {what} after {took:.1} s", self.name());
                    return (value, took);
                }
                Err(last) if started.elapsed() > timeout => {
                    let units = [
                        "gardener-node-init.service",
                        super::agent::AGENT_UNIT,
                        "containerd.service",
                        KUBELET_UNIT,
                    ]
                    .map(|unit| self.describe(unit))
                    .join("\n");
                    panic!(
                        "[{}] timed out after {timeout:?} waiting for {what}; last: {last}\n{units}",
                        self.name()
                    );
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// How many connections the forwarder has carried (a node that never reached the API
    /// server shows 0).
    pub fn forwarded_connections(&self) -> usize {
        self.forwarder.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.forwarder.stop.store(true, Ordering::SeqCst);
        for forwarder in &self.more_forwarders {
            forwarder.stop.store(true, Ordering::SeqCst);
        }
        self.machine.stop();
    }
}

static NODE_COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Hard links (or copies, across file systems) of the node binaries in folder `dir`.
fn link_binaries(assets: &Path, dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for binary in NODE_BINARIES {
        let source = assets.join(binary);
        let target = dir.join(binary);
        if fs::hard_link(&source, &target).is_err() {
            fs::copy(&source, &target).map_err(|e| format!("{}: {e}", source.display()))?;
        }
    }
    Ok(())
}

/// What the node image would have done: writable cgroups, kubelet's tunables, `/etc/hosts`
/// (containerd copies it into every sandbox), the bridge.
fn prepare(machine: &Machine) -> Result<(), String> {
    let mut script = String::from(
        "set -eu\n\
         for d in /sys/fs/cgroup /sys/fs/cgroup/*; do\n\
           [ -L \"$d\" ] && continue\n\
           if findmnt -no OPTIONS \"$d\" | grep -q '^ro'; then mount -o remount,bind,rw \"$d\"; fi\n\
         done\n\
         mkdir -p /run/e2e-sysctl\n\
         printf '127.0.0.1 localhost\\n::1 localhost\\n' > /etc/hosts\n",
    );
    for (key, value) in KUBELET_SYSCTLS {
        let file = format!("/run/e2e-sysctl/{}", key.replace('/', "_"));
        script.push_str(&format!(
            "echo {value} > {file}; mount --bind {file} /proc/sys/{key}\n"
        ));
    }
    script.push_str(&format!(
        "ip link add cni0 type bridge\nip addr add {NODE_IP}/16 dev cni0\nip link set cni0 up\n"
    ));
    let output = machine.sh(&script);
    if output.success() {
        Ok(())
    } else {
        Err(format!(
            "preparing the node failed: {}{}",
            output.stdout, output.stderr
        ))
    }
}

/// Listens on `127.0.0.1:<port>` in the node's network namespace and connects each
/// accepted connection to the same port on the host's loopback.
struct Forwarder {
    stop: Arc<AtomicBool>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Forwarder {
    fn start(leader: u32, port: u16) -> io::Result<Self> {
        let node_netns = File::open(format!("/proc/{leader}/ns/net"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_flag, counter) = (stop.clone(), connections.clone());
        std::thread::spawn(move || {
            let listener = listen_in(&node_netns, port);
            let listener = match listener {
                Ok(listener) => {
                    let _ = ready_tx.send(Ok(()));
                    listener
                }
                Err(error) => {
                    let _ = ready_tx.send(Err(error));
                    return;
                }
            };
            while !stop_flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        counter.fetch_add(1, Ordering::SeqCst);
                        std::thread::spawn(move || pipe(client, port));
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        });
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("forwarder thread ended"))??;
        Ok(Self { stop, connections })
    }
}

/// A non-blocking listener created inside `netns`; the calling thread returns to its own
/// network namespace before this returns, so its outgoing connections use the host's.
fn listen_in(netns: &File, port: u16) -> io::Result<TcpListener> {
    let own = File::open("/proc/thread-self/ns/net")?;
    setns(netns)?;
    let listener = TcpListener::bind(("127.0.0.1", port));
    setns(&own)?;
    let listener = listener?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Moves the calling thread into the network namespace `netns`.
fn setns(netns: &File) -> io::Result<()> {
    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
    move_into_link_name_space(netns.as_fd(), Some(LinkNameSpaceType::Network))
        .map_err(io::Error::from)
}

fn pipe(client: TcpStream, port: u16) {
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(mut client_read), Ok(mut server_write)) = (client.try_clone(), server.try_clone())
    else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        let _ = io::copy(&mut client_read, &mut server_write);
        let _ = server_write.shutdown(Shutdown::Write);
    });
    let (mut server_read, mut client_write) = (server, client);
    let _ = io::copy(&mut server_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

/// Writes `<dir>/pause.tar`: an OCI archive of `reference` whose only process sleeps (SIGKILL
/// ends it like the real pause), for nodes that run no other image.
pub fn write_pause_archive(dir: &Path, reference: &str) {
    super::oci::write_archive(
        &super::oci::Image {
            reference: reference.into(),
            entrypoint: vec!["/bin/busybox".into(), "sleep".into(), "2147483647".into()],
            files: vec![super::oci::ImageFile::executable(
                "/bin/busybox",
                "/bin/busybox",
            )],
        },
        &dir.join("pause.tar"),
    )
    .unwrap();
}

/// A token of a `kube-system` ServiceAccount bound to the `system:node` ClusterRole: the
/// kubelet's credentials (a real landscape bootstraps them through a CSR instead).
pub async fn kubelet_token(shoot: &Client, node: &str) -> String {
    let name = format!("e2e-kubelet-{node}");
    let pp = PostParams::default();
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "kube-system"}}))
            .unwrap();
    Api::<ServiceAccount>::namespaced(shoot.clone(), "kube-system")
        .create(&pp, &sa)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(shoot.clone())
        .create(&pp, &binding)
        .await
        .unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 7200}})).unwrap();
    Api::<ServiceAccount>::namespaced(shoot.clone(), "kube-system")
        .create_token_request(&name, &pp, &request)
        .await
        .unwrap()
        .status
        .and_then(|status| status.token)
        .unwrap()
}

/// The parts of a reconcile OperatingSystemConfig that make a machine a node of the shoot:
/// containerd (criConfig, a drop-in that runs the 2.x build, the CNI bridge), the preloaded
/// images, and kubelet with its config, kubeconfig and pool labels. The test puts them into
/// the OSC it creates as gardenlet; our agent applies them on the node.
#[derive(Debug, Clone)]
pub struct NodeOsc {
    /// The shoot API server URL (the same on the node, through the forwarder).
    pub server_url: String,
    /// The shoot's CA (PEM).
    pub ca_pem: String,
    /// How kubelet authenticates.
    pub kubelet_credentials: KubeletCredentials,
    /// The Node's labels (pool, CRI name, container runtimes).
    pub labels: BTreeMap<String, String>,
    /// The sandbox (pause) image reference, preloaded.
    pub sandbox_image: String,
}

/// How kubelet of a [`NodeOsc`] authenticates.
#[derive(Debug, Clone)]
pub enum KubeletCredentials {
    /// A token (bound to the `system:node` ClusterRole), in `kubeconfig-real` of the OSC.
    Token(String),
    /// kubelet's TLS bootstrap, as on a Gardener node: `--bootstrap-kubeconfig` (written by
    /// the node agent from its bootstrap token), a client certificate kube-controller-manager
    /// issues into `--kubeconfig`, and certificate rotation on.
    Bootstrap,
}

/// The kubelet unit.
pub const KUBELET_UNIT: &str = "kubelet.service";
/// The unit that imports the preloaded images.
pub const PRELOAD_UNIT: &str = "e2e-preload-images.service";

impl NodeOsc {
    /// A node of `pool` that enters through kubelet's TLS bootstrap, as a Gardener node
    /// does: the pool, node-agent Secret (`key`) and CRI labels gardenlet gives kubelet's
    /// `--node-labels` (GRM's node-agent authorizer reads the Secret's name from the Node),
    /// the preloaded `sandbox_image`.
    pub fn bootstrapping(
        server_url: String,
        ca_pem: &str,
        pool: &str,
        key: &str,
        sandbox_image: &str,
    ) -> Self {
        let labels = [
            ("worker.gardener.cloud/pool", pool),
            ("worker.gardener.cloud/gardener-node-agent-secret-name", key),
            ("worker.gardener.cloud/cri-name", "containerd"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        NodeOsc {
            server_url,
            ca_pem: ca_pem.to_string(),
            kubelet_credentials: KubeletCredentials::Bootstrap,
            labels,
            sandbox_image: sandbox_image.to_string(),
        }
    }

    /// `criConfig` of the OSC.
    pub fn cri_config(&self) -> Value {
        json!({
            "name": "containerd",
            "cgroupDriver": "cgroupfs",
            "containerd": {
                "sandboxImage": self.sandbox_image,
                "plugins": containerd_plugins(),
            },
        })
    }

    /// Files of the OSC.
    pub fn files(&self) -> Vec<Value> {
        let inline = |path: &str, mode: u32, text: &str| json!({"path": path, "permissions": mode, "content": {"inline": {"encoding": "", "data": text}}});
        let mut files = match &self.kubelet_credentials {
            KubeletCredentials::Token(token) => {
                let kubeconfig = gardener_extension_node::kubeconfig::render_token_kubeconfig(
                    &self.server_url,
                    &self.ca_pem,
                    token,
                );
                vec![
                    inline("/var/lib/kubelet/config/kubelet", 0o644, KUBELET_CONFIG),
                    inline("/var/lib/kubelet/kubeconfig-real", 0o600, &kubeconfig),
                ]
            }
            KubeletCredentials::Bootstrap => {
                let config = format!("{KUBELET_CONFIG}rotateCertificates: true\n");
                vec![inline("/var/lib/kubelet/config/kubelet", 0o644, &config)]
            }
        };
        files.push(cni_bridge_file());
        files
    }

    /// Units of the OSC: containerd's drop-in, the image preload, kubelet.
    pub fn units(&self) -> Vec<Value> {
        let labels = self
            .labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",");
        let (bootstrap, kubelet_files) = match self.kubelet_credentials {
            KubeletCredentials::Token(_) => (
                "",
                json!([
                    "/var/lib/kubelet/config/kubelet",
                    "/var/lib/kubelet/kubeconfig-real"
                ]),
            ),
            KubeletCredentials::Bootstrap => (
                "--bootstrap-kubeconfig=/var/lib/kubelet/kubeconfig-bootstrap ",
                json!(["/var/lib/kubelet/config/kubelet"]),
            ),
        };
        let kubelet = format!(
            "[Unit]\nDescription=kubelet\nAfter=containerd.service {PRELOAD_UNIT}\nWants={PRELOAD_UNIT}\n\
             [Service]\nExecStart=/usr/local/sbin/kubelet --config=/var/lib/kubelet/config/kubelet \
             {bootstrap}--kubeconfig=/var/lib/kubelet/kubeconfig-real --node-ip={NODE_IP} --node-labels={labels} --v=2\n\
             Restart=always\nRestartSec=2\n[Install]\nWantedBy=multi-user.target\n"
        );
        let preload = format!(
            "[Unit]\nDescription=import the node image's preloaded container images\n\
             After=containerd.service\nRequires=containerd.service\n\
             [Service]\nType=oneshot\nRemainAfterExit=yes\n\
             ExecStart=/bin/sh -c 'for f in {IMAGES_DIR}/*.tar; do /usr/local/sbin/ctr --namespace k8s.io images import \"$f\" || exit 1; done'\n\
             [Install]\nWantedBy=multi-user.target\n"
        );
        vec![
            json!({
                "name": "containerd.service",
                "dropIns": [{"name": "10-e2e-containerd-2.conf",
                             "content": "[Service]\nExecStart=\nExecStart=/usr/local/sbin/containerd\n"}],
            }),
            json!({"name": PRELOAD_UNIT, "enable": true, "command": "start", "content": preload}),
            json!({"name": KUBELET_UNIT, "enable": true, "command": "start", "content": kubelet,
                   "filePaths": kubelet_files}),
        ]
    }
}

/// kubelet's configuration on a node: cgroupfs (this host's cgroup v1 hierarchies), no swap
/// check, no host resolv.conf, eviction and image GC thresholds a tmpfs root never hits,
/// and `KubeletInUserNamespace` (see the module docs).
const KUBELET_CONFIG: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
failCgroupV1: false
featureGates: {KubeletInUserNamespace: true}
resolvConf: \"\"
readOnlyPort: 0
volumePluginDir: /var/lib/kubelet/volumeplugins
evictionHard: {memory.available: \"1Mi\", nodefs.available: \"1%\", imagefs.available: \"1%\", nodefs.inodesFree: \"1%\"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
";

/// The containerd patches a node of this host needs in `criConfig.containerd.plugins`.
fn containerd_plugins() -> Value {
    json!([
        // Debian's CNI plugins (containernetworking-plugins) live in /usr/lib/cni.
        {
            "op": "add",
            "path": ["io.containerd.cri.v1.runtime", "cni"],
            "values": {"bin_dirs": ["/usr/lib/cni"], "conf_dir": "/etc/cni/net.d"},
        },
        // Lowering a process's OOM score needs CAP_SYS_RESOURCE, which this machine lacks (a
        // real node has it; see the module docs): kubelet's -998 for sandboxes would make
        // runc fail, so containerd caps it.
        {
            "op": "add",
            "path": ["io.containerd.cri.v1.runtime"],
            "values": {"restrict_oom_score_adj": true},
        },
    ])
}

/// The node's CNI configuration: the bridge plugin on `cni0` with the node's pod subnet.
fn cni_bridge_file() -> Value {
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": "e2e",
        "plugins": [{
            "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
            "ipam": {"type": "host-local",
                     "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                     "routes": [{"dst": "0.0.0.0/0"}]},
        }],
    });
    json!({"path": "/etc/cni/net.d/10-e2e-bridge.conflist", "permissions": 0o644,
           "content": {"inline": {"encoding": "", "data": conflist.to_string()}}})
}

/// Where gardenlet's kubelet unit reads `$KUBELET_EXTRA_ARGS` from (`EnvironmentFile=-…`).
pub const KUBELET_EXTRA_ARGS_FILE: &str = "/var/lib/kubelet/extra_args";

/// gardenlet's reconcile OSC (`support::gardenlet_osc::render_reconcile`) with exactly the
/// pieces a node of this host cannot run as they are replaced, each for the reason given:
///
/// - **cgroup driver** `systemd` → `cgroupfs`, in `criConfig` and kubelet's configuration:
///   the node's cgroup controllers are folders below the test process's cgroup on a v1/v2
///   hybrid host (module docs), which the node's systemd does not manage as slices.
/// - **`failCgroupV1: false`** added to kubelet's configuration: that hybrid layout is
///   cgroup v1 to kubelet, which kubelet v1.35+ refuses by default.
/// - **CNI**: the bridge plugin's configuration as a file and Debian's plugin folder (plus
///   `restrict_oom_score_adj`, see [`containerd_plugins`]) as `criConfig` patches — on a
///   landscape the shoot's network extension (calico, cilium) installs its CNI; kubelet
///   reports the Node NotReady without one.
/// - **`--node-ip`** in [`KUBELET_EXTRA_ARGS_FILE`], the file gardenlet's kubelet unit reads
///   its extra arguments from: the node's only interface is the bridge, without a default
///   route, from which kubelet would pick its address.
///
/// Not changed, but provided by the node fixture instead of the OSC: the kernel settings.
/// gardenlet's `99-k8s-general.conf` is written, but the node cannot set host-wide values
/// (`systemd-sysctl.service` skips itself on the read-only `/proc/sys` of a container); the
/// six values kubelet's `protectKernelDefaults: true` checks are bind-mounted files with
/// gardenlet's values (module docs).
pub fn fit_gardenlet_reconcile(reconcile: &Value) -> Value {
    let mut osc = reconcile.clone();
    let spec = &mut osc["spec"];
    spec["criConfig"]["cgroupDriver"] = json!("cgroupfs");
    spec["criConfig"]["containerd"]["plugins"] = containerd_plugins();
    let files = spec["files"]
        .as_array_mut()
        .expect("files in the reconcile OSC");
    let kubelet_config = files
        .iter_mut()
        .find(|f| f["path"] == "/var/lib/kubelet/config/kubelet")
        .expect("gardenlet's kubelet configuration");
    let mut config = decoded_kubelet_config(kubelet_config);
    config["cgroupDriver"] = json!("cgroupfs");
    config["failCgroupV1"] = json!(false);
    let text = serde_norway::to_string(&config).expect("YAML");
    kubelet_config["content"]["inline"] = json!({"encoding": "b64", "data": b64(text.as_bytes())});
    files.push(cni_bridge_file());
    files.push(json!({
        "path": KUBELET_EXTRA_ARGS_FILE, "permissions": 0o644,
        "content": {"inline": {"encoding": "", "data": format!("KUBELET_EXTRA_ARGS=--node-ip={NODE_IP}\n")}},
    }));
    osc
}

/// The kubelet configuration of an OSC file (`inline`, plain or `b64`), as JSON.
pub fn decoded_kubelet_config(file: &Value) -> Value {
    let inline = &file["content"]["inline"];
    let data = inline["data"].as_str().expect("inline data");
    let text = match inline["encoding"].as_str() {
        Some("b64") | Some("base64") => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("base64");
            String::from_utf8(bytes).expect("UTF-8")
        }
        _ => data.to_string(),
    };
    serde_norway::from_str(&text).expect("kubelet configuration YAML")
}

fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}
