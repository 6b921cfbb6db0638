//! The second step of `make bench-machines`: a disruptive change applied in place on the
//! pool's nodes by the agents' disruptive rollout (`docs/agent.md#disruptive-rollout`), whose
//! budget our OSC controller derives from the pool's `maxUnavailable` in the Cluster. The
//! pool's Nodes and slot Leases are sampled at 2 Hz while the change rolls through.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gardener_extension_node::agent::rollout::slots;
use gardener_extension_node::api::constants::ANNOTATION_ROLLOUT_BUDGET;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::agent::NODE_CHECKSUM;
use crate::support::wait_for;

/// The node-agent Secret's checksum annotation (what the Nodes report once applied).
const SECRET_CHECKSUM: &str = "checksum/data-script";

/// `reconcile` with a drop-in on kubelet: a change the agents classify as disruptive
/// (kubelet restarts).
pub fn with_kubelet_drop_in(reconcile: &Value) -> Value {
    let mut osc = reconcile.clone();
    let units = osc["spec"]["units"].as_array_mut().expect("units");
    let kubelet = units
        .iter_mut()
        .find(|u| u["name"] == "kubelet.service")
        .expect("the kubelet unit");
    kubelet["dropIns"] = json!([{
        "name": "50-bench-machines.conf",
        "content": "[Service]\nEnvironment=BENCH_MACHINES_ROLLOUT=1\n",
    }]);
    osc
}

/// The node-agent Secret `kube-system/<key>` once it carries a checksum other than
/// `previous`: (checksum, budget annotation).
pub async fn new_secret(shoot: &Client, key: &str, previous: Option<&str>) -> (String, String) {
    let secrets = Api::<Secret>::namespaced(shoot.clone(), "kube-system");
    wait_for(
        "the changed node-agent Secret",
        Duration::from_secs(120),
        || async {
            let secret = secrets.get(key).await.map_err(|e| e.to_string())?;
            let annotations = secret.annotations();
            let checksum = annotations.get(SECRET_CHECKSUM).cloned();
            match checksum {
                Some(checksum) if Some(checksum.as_str()) != previous => Ok((
                    checksum,
                    annotations
                        .get(ANNOTATION_ROLLOUT_BUDGET)
                        .cloned()
                        .unwrap_or_default(),
                )),
                other => Err(format!("checksum {other:?}")),
            }
        },
    )
    .await
}

/// The current checksum of the node-agent Secret `kube-system/<key>`.
pub async fn secret_checksum(shoot: &Client, key: &str) -> Option<String> {
    Api::<Secret>::namespaced(shoot.clone(), "kube-system")
        .get(key)
        .await
        .ok()?
        .annotations()
        .get(SECRET_CHECKSUM)
        .cloned()
}

/// What the sampler saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub samples: usize,
    /// Most Nodes not `Ready` at once.
    pub most_not_ready: usize,
    /// Most slot holders at once.
    pub most_holders: usize,
    /// Most Nodes unavailable at once: not `Ready` or in a disruptive change (holding a slot).
    pub most_unavailable: usize,
    /// Every Node seen holding a slot.
    pub holders: BTreeSet<String>,
    /// Seconds from the start until every Node reported `checksum`, was `Ready` and no slot
    /// was held.
    pub done_after: Option<f64>,
}

/// Samples the Nodes and the slot Lease `<key>` (every slot in it) every 500 ms until every one of
/// `size` Nodes reports `checksum`, is `Ready` and no slot is held; fails once nothing of that
/// (which Nodes applied, are not Ready, hold a slot) has changed for `stall`: a busy machine
/// makes the rollout slower, not a failure.
pub async fn sample_until_rolled_out(
    shoot: &Client,
    key: &str,
    size: usize,
    checksum: &str,
    stall: Duration,
) -> Seen {
    let nodes = Api::<KubeNode>::all(shoot.clone());
    let leases = Api::<Lease>::namespaced(shoot.clone(), "kube-system");
    let started = Instant::now();
    let mut seen = Seen::default();
    let mut progress = (String::new(), started);
    loop {
        let tick = Instant::now();
        assert!(
            progress.1.elapsed() < stall,
            "no progress for {stall:?} ({:?} in all), not rolled out: {} {seen:?}",
            started.elapsed(),
            progress.0
        );
        let Ok(list) = nodes.list(&Default::default()).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        // Every slot is in the one Lease `<key>` (docs/agent.md#slots).
        // A failed read says nothing about the slots: look again (as for the Nodes).
        let holders: BTreeSet<String> = match leases.get_opt(key).await {
            Ok(Some(lease)) => slots::holders(&lease)
                .into_iter()
                .map(|(_, holder)| holder)
                .collect(),
            Ok(None) => BTreeSet::new(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let not_ready: BTreeSet<String> = list
            .items
            .iter()
            .filter(|n| !is_ready(n))
            .map(ResourceExt::name_any)
            .collect();
        let applied: BTreeSet<String> = list
            .items
            .iter()
            .filter(|n| n.annotations().get(NODE_CHECKSUM).map(String::as_str) == Some(checksum))
            .map(ResourceExt::name_any)
            .collect();
        let now = format!("applied {applied:?}, not Ready {not_ready:?}, holding {holders:?}");
        if now != progress.0 {
            progress = (now, Instant::now());
        }
        let applied = applied.len();
        seen.samples += 1;
        seen.most_not_ready = seen.most_not_ready.max(not_ready.len());
        seen.most_holders = seen.most_holders.max(holders.len());
        // Holders are node names (the agents hold slots as their Node).
        seen.most_unavailable = seen.most_unavailable.max(not_ready.union(&holders).count());
        seen.holders.extend(holders.iter().cloned());
        if applied == size && list.items.len() == size && not_ready.is_empty() && holders.is_empty()
        {
            seen.done_after = Some(started.elapsed().as_secs_f64());
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(500).saturating_sub(tick.elapsed())).await;
    }
}

fn is_ready(node: &KubeNode) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
