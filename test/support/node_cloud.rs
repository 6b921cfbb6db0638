//! Test support: the "node cloud" — an IaaS on loopback whose machines are the
//! systemd-nspawn nodes of [`super::node`], for our machine provider
//! (`hack/envtest/components/machine-provider-nspawn`, MCM's provider framework) the way a
//! cloud API is for a real provider.
//!
//! ```text
//! MCM core ─► Machine ─► machine-provider-nspawn ─HTTP─► NodeCloud ─► Node::boot_named
//!                                                                  └► user data (cloud-init)
//! ```
//!
//! The API (JSON) is the one documented in the provider's package comment:
//! - `PUT /machines/{name}` `{class, userData (base64), providerSpec}`: reserves a node name,
//!   answers at once with `{providerID: "nspawn:///<node>", nodeName, state: "booting"}` and
//!   boots in the background: the node (then `running`, as provider-local's machine Pod is
//!   Running before its node joins), then the user data MCM already filled in
//!   (`<<BOOTSTRAP_TOKEN>>`, `<<MACHINE_NAME>>`) — or `failed` with the sentence when either
//!   fails. A second PUT returns the machine unchanged. A `providerSpec.image` the cloud
//!   does not offer is refused with 400 (what a cloud does with an unknown image).
//! - `GET /machines/{name}`, `GET /machines?class=<class>`.
//! - `DELETE /machines/{name}`: powers the node off (its machine is stopped, its folders
//!   removed) and forgets it; 404 when there is none.
//!
//! What boots a node is the test's [`Boot`] (it knows the registry and assets); each new
//! machine is announced on [`NodeCloud::created`] so a test can grant what a real shoot's
//! node-agent authorizer would. [`NodeCloud::delay_boots`] makes it a slow cloud: a machine
//! stays `booting` that long before its boot starts (with the driver's blocking create, the
//! create call blocks as long, as provider-local's does while its machine Pod is pending).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::node::Node;
use super::nspawn::Machine;

/// Boots a node under the given (reserved) name; the cloud then runs the user data.
pub type Boot = Arc<dyn Fn(String) -> Result<Node, String> + Send + Sync>;

/// A machine the cloud has just accepted.
#[derive(Debug, Clone)]
pub struct Created {
    /// MCM's Machine name.
    pub machine: String,
    /// Its MachineClass.
    pub class: String,
    /// The node's name (also its host name and the Node's name).
    pub node: String,
}

#[derive(Debug, Clone)]
enum Phase {
    Booting,
    Running,
    Failed(String),
}

#[derive(Debug, Clone)]
struct Entry {
    class: String,
    node_name: String,
    phase: Phase,
    /// When the cloud accepted the machine (its PUT).
    accepted: std::time::Instant,
    /// When a `GET /machines/{name}` first answered `running` (a blocking create returns
    /// on that answer).
    told_running: Option<std::time::Instant>,
}

impl Entry {
    fn to_json(&self, machine: &str) -> Value {
        let (state, error) = match &self.phase {
            Phase::Booting => ("booting", None),
            Phase::Running => ("running", None),
            Phase::Failed(e) => ("failed", Some(e.clone())),
        };
        let mut value = json!({
            "name": machine,
            "providerID": format!("nspawn:///{}", self.node_name),
            "nodeName": self.node_name,
            "state": state,
        });
        if let Some(error) = error {
            value["error"] = json!(error);
        }
        value
    }
}

struct Cloud {
    boot: Boot,
    images: Vec<String>,
    /// While set, a create is accepted (the machine boots) but never answered, and its
    /// machine name is sent here: the test kills the driver in the middle of its create call.
    hold: Mutex<Option<mpsc::UnboundedSender<String>>>,
    /// How long a machine accepted from now on waits before its boot starts.
    boot_delay: Mutex<std::time::Duration>,
    machines: Mutex<BTreeMap<String, Entry>>,
    nodes: Mutex<BTreeMap<String, Node>>,
    created: mpsc::UnboundedSender<Created>,
}

/// The running cloud.
pub struct NodeCloud {
    url: String,
    cloud: Arc<Cloud>,
    created: Mutex<Option<mpsc::UnboundedReceiver<Created>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for NodeCloud {
    fn drop(&mut self) {
        self.server.abort();
        // Powers every node off.
        if let Ok(mut nodes) = self.cloud.nodes.lock() {
            nodes.clear();
        }
    }
}

impl NodeCloud {
    /// Serves on a free loopback port; `images` are the `providerSpec.image` values it offers.
    pub async fn start(boot: Boot, images: &[&str]) -> Self {
        let (created, receiver) = mpsc::unbounded_channel();
        let cloud = Arc::new(Cloud {
            boot,
            images: images.iter().map(|s| s.to_string()).collect(),
            hold: Mutex::new(None),
            boot_delay: Mutex::new(std::time::Duration::ZERO),
            machines: Mutex::new(BTreeMap::new()),
            nodes: Mutex::new(BTreeMap::new()),
            created,
        });
        let router = axum::Router::new()
            .route("/machines", get(list))
            .route("/machines/{name}", get(show).put(create).delete(delete))
            .with_state(cloud.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("node cloud port");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            url,
            cloud,
            created: Mutex::new(Some(receiver)),
            server,
        }
    }

    /// From now on, creates are accepted but not answered (see `Cloud::hold`); returns the
    /// names of the machines held.
    pub fn hold_creates(&self) -> mpsc::UnboundedReceiver<String> {
        let (sender, receiver) = mpsc::unbounded_channel();
        *self.cloud.hold.lock().expect("lock") = Some(sender);
        receiver
    }

    /// From now on, each machine accepted waits `delay` before its boot starts (a slow
    /// cloud); it is `booting` all the while.
    pub fn delay_boots(&self, delay: std::time::Duration) {
        *self.cloud.boot_delay.lock().expect("lock") = delay;
    }

    /// Answers creates again.
    pub fn release_creates(&self) {
        *self.cloud.hold.lock().expect("lock") = None;
    }

    /// The base URL (`--node-cloud-url`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The announcements of new machines (once).
    pub fn created(&self) -> mpsc::UnboundedReceiver<Created> {
        self.created
            .lock()
            .expect("lock")
            .take()
            .expect("created() is taken once")
    }

    /// Runs `f` on the node named `node`, if it is up.
    pub fn with_node<T>(&self, node: &str, f: impl FnOnce(&Node) -> T) -> Option<T> {
        self.cloud.nodes.lock().expect("lock").get(node).map(f)
    }

    /// The names of the nodes that are up.
    pub fn node_names(&self) -> Vec<String> {
        self.cloud
            .nodes
            .lock()
            .expect("lock")
            .keys()
            .cloned()
            .collect()
    }

    /// For `machine`: the time from its PUT until a GET first answered `running` — with the
    /// driver's blocking create, how long the create call blocked (it returns on that answer);
    /// `None` before (or for a machine the cloud forgot).
    pub fn accepted_until_told_running(&self, machine: &str) -> Option<std::time::Duration> {
        let machines = self.cloud.machines.lock().expect("lock");
        let entry = machines.get(machine)?;
        Some(entry.told_running?.duration_since(entry.accepted))
    }

    /// The machines it knows, as the API lists them.
    pub fn machines(&self) -> Vec<Value> {
        let machines = self.cloud.machines.lock().expect("lock");
        machines.iter().map(|(m, e)| e.to_json(m)).collect()
    }
}

fn refuse(status: StatusCode, error: String) -> Response {
    (status, Json(json!({ "error": error }))).into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRequest {
    class: String,
    user_data: String,
    provider_spec: Value,
}

async fn create(
    State(cloud): State<Arc<Cloud>>,
    Path(machine): Path<String>,
    Json(request): Json<CreateRequest>,
) -> Response {
    if let Some(entry) = cloud.machines.lock().expect("lock").get(&machine) {
        return Json(entry.to_json(&machine)).into_response();
    }
    let image = request.provider_spec["image"].as_str().unwrap_or_default();
    if !cloud.images.iter().any(|i| i == image) {
        let offered = cloud.images.join(", ");
        let error = format!("image {image:?} is not offered by this cloud (offered: {offered})");
        return refuse(StatusCode::BAD_REQUEST, error);
    }
    let user_data = match base64::engine::general_purpose::STANDARD.decode(&request.user_data) {
        Ok(data) => String::from_utf8_lossy(&data).into_owned(),
        Err(e) => return refuse(StatusCode::BAD_REQUEST, format!("userData: {e}")),
    };
    let entry = Entry {
        class: request.class.clone(),
        node_name: Machine::reserve_name(),
        phase: Phase::Booting,
        accepted: std::time::Instant::now(),
        told_running: None,
    };
    let reply = entry.to_json(&machine);
    cloud
        .machines
        .lock()
        .expect("lock")
        .insert(machine.clone(), entry.clone());
    let _ = cloud.created.send(Created {
        machine: machine.clone(),
        class: request.class,
        node: entry.node_name.clone(),
    });
    let booting = cloud.clone();
    let held = cloud.hold.lock().expect("lock").clone();
    let delay = *cloud.boot_delay.lock().expect("lock");
    tokio::task::spawn_blocking({
        let machine = machine.clone();
        move || {
            std::thread::sleep(delay);
            boot_machine(&booting, &machine, entry.node_name, &user_data)
        }
    });
    if let Some(held) = held {
        let _ = held.send(machine);
        // Never answered: the connection ends when the driver dies.
        std::future::pending::<()>().await;
    }
    (StatusCode::CREATED, Json(reply)).into_response()
}

/// Boots the node (then the machine is `running`) and runs the user data on it; a machine
/// deleted before its boot is never booted, one deleted while it boots is powered off at once.
fn boot_machine(cloud: &Cloud, machine: &str, node_name: String, user_data: &str) {
    if !cloud.machines.lock().expect("lock").contains_key(machine) {
        eprintln!("node cloud: machine {machine} deleted before its boot");
        return;
    }
    let started = std::time::Instant::now();
    let report = |phase: &Phase| {
        eprintln!(
            "node cloud: machine {machine} (node {node_name}) {phase:?} after {:.1} s",
            started.elapsed().as_secs_f64()
        );
    };
    let node = match (cloud.boot)(node_name.clone()) {
        Ok(node) => node,
        Err(e) => {
            let failed = Phase::Failed(format!("the node did not boot: {e}"));
            report(&failed);
            if let Some(entry) = cloud.machines.lock().expect("lock").get_mut(machine) {
                entry.phase = failed;
            }
            return;
        }
    };
    report(&Phase::Running);
    match cloud.machines.lock().expect("lock").get_mut(machine) {
        Some(entry) => entry.phase = Phase::Running,
        None => return, // deleted while booting: `node` is powered off here
    }
    let ran = node.run_cloud_init(user_data);
    let mut machines = cloud.machines.lock().expect("lock");
    let Some(entry) = machines.get_mut(machine) else {
        drop(machines);
        drop(node); // deleted while its user data ran: powered off now
        return;
    };
    if let Err(e) = ran {
        entry.phase = Phase::Failed(e);
        report(&entry.phase);
    }
    cloud.nodes.lock().expect("lock").insert(node_name, node);
}

async fn show(State(cloud): State<Arc<Cloud>>, Path(machine): Path<String>) -> Response {
    match cloud.machines.lock().expect("lock").get_mut(&machine) {
        Some(entry) => {
            if matches!(entry.phase, Phase::Running) && entry.told_running.is_none() {
                entry.told_running = Some(std::time::Instant::now());
            }
            Json(entry.to_json(&machine)).into_response()
        }
        None => refuse(StatusCode::NOT_FOUND, format!("no machine {machine:?}")),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    class: Option<String>,
}

async fn list(State(cloud): State<Arc<Cloud>>, Query(query): Query<ListQuery>) -> Response {
    let machines = cloud.machines.lock().expect("lock");
    let listed: Vec<Value> = machines
        .iter()
        .filter(|(_, e)| query.class.as_ref().is_none_or(|c| *c == e.class))
        .map(|(m, e)| e.to_json(m))
        .collect();
    Json(listed).into_response()
}

async fn delete(State(cloud): State<Arc<Cloud>>, Path(machine): Path<String>) -> Response {
    let Some(entry) = cloud.machines.lock().expect("lock").remove(&machine) else {
        return refuse(StatusCode::NOT_FOUND, format!("no machine {machine:?}"));
    };
    let node = cloud.nodes.lock().expect("lock").remove(&entry.node_name);
    let _ = tokio::task::spawn_blocking(move || drop(node)).await;
    eprintln!(
        "node cloud: machine {machine} (node {}) powered off",
        entry.node_name
    );
    StatusCode::NO_CONTENT.into_response()
}
