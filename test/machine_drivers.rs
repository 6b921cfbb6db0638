//! Integration: the machine objects our Worker controller writes, read by the real
//! machine-controller-manager v0.62.1 and gardener v1.149.3's provider-local machine
//! controller — the driver of Worker type `local` (docs/contract.md#worker).
//!
//! ```text
//! Worker ─► operator ─► MachineClass + MachineDeployment ─► MCM core ─► MachineSet, Machine
//!                                                           provider-local ─► Pod, Service,
//!                                                             user-data Secret in infra-<id>
//! ```
//!
//! Upstream CRDs (`support::Crds::Upstream`). The machine Pods never run here (no kubelet), so
//! the test stops at what the driver creates — which needs it to decode our `providerSpec` and
//! to read the credentials Secret's kubeconfig — for a rolling and an in-place
//! (`AutoInPlaceUpdate`) pool. MCM v0.62.1 refuses in-place deployments without a target
//! cluster ("in-place updates are not supported if running without a target cluster"), so the
//! controllers get one: the seed's own API server stands in for the shoot (a shoot would have
//! no Node here either, the machine Pods never boot).

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;

use std::time::Duration;

use gardener_extension_node::api::machine::Machine;
use gardener_extension_node::api::{Cluster, Worker};
use k8s_openapi::api::core::v1::{Pod, Secret, Service, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::machine_controllers::{Driver, MachineControllers, Targets};
use support::operator::OperatorProcess;
use support::{Crds, fixtures, wait_for};

const USER_DATA: &[u8] = b"#!/bin/bash\necho provisioned by <<MACHINE_NAME>>\n";
const WAIT: Duration = Duration::from_secs(120);

fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

async fn create<K>(api: &Api<K>, object: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn provider_locals_driver_creates_the_machines_of_our_classes() {
    let env = support::env_with(Crds::Upstream).await;
    let assets = std::path::PathBuf::from(std::env::var("ENVTEST_ASSETS").unwrap_or_default());
    let _operator = OperatorProcess::start(&env.kubeconfig, &["--controllers=worker"]);
    let ns = env.namespace.clone();
    let machine_namespace = format!("infra-{ns}");
    support::create_namespace(&env.client, &machine_namespace).await;
    // No kube-controller-manager here: the Pod admission needs the namespace's default
    // ServiceAccount, which its controller would create.
    create(
        &Api::<ServiceAccount>::namespaced(env.client.clone(), &machine_namespace),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "default", "namespace": machine_namespace}}),
    )
    .await;
    create(
        &Api::<Cluster>::all(env.client.clone()),
        fixtures::cluster_json(&ns),
    )
    .await;
    let secrets = Api::<Secret>::namespaced(env.client.clone(), &ns);
    // gardenlet's `cloudprovider` Secret: for provider-local the kubeconfig of the cluster
    // its machine Pods go to (here the seed itself).
    create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "cloudprovider", "namespace": ns},
               "data": {"kubeconfig": base64(env.kubeconfig.as_bytes())}}),
    )
    .await;
    create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "osc-result-pool-a-init", "namespace": ns},
               "data": {"cloud_config": base64(USER_DATA)}}),
    )
    .await;
    let mut worker = fixtures::worker_json(&ns);
    worker["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    let mut in_place = worker["spec"]["pools"][0].clone();
    in_place["name"] = json!("worker-b");
    in_place["updateStrategy"] = json!("AutoInPlaceUpdate");
    in_place["maxSurge"] = json!(0);
    in_place["maxUnavailable"] = json!(1);
    worker["spec"]["pools"]
        .as_array_mut()
        .unwrap()
        .push(in_place);
    create(&Api::<Worker>::namespaced(env.client.clone(), &ns), worker).await;

    let controllers = MachineControllers::start(
        &Targets {
            assets: &assets,
            seed_kubeconfig: &env.kubeconfig,
            shoot_kubeconfig: Some(&env.kubeconfig),
            namespace: &ns,
        },
        Driver::ProviderLocal,
    );

    // MCM core turns each MachineDeployment (rolling and in-place) into a MachineSet and a
    // Machine of our class.
    let machines = Api::<Machine>::namespaced(env.client.clone(), &ns);
    let listed = wait_for("MCM creates a Machine per pool", WAIT, || async {
        let list = machines
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut pools: Vec<(String, String)> = list
            .items
            .iter()
            .map(|m| {
                let class = m.spec.class.as_ref().map(|c| c.name.clone());
                (m.name_any(), class.unwrap_or_default())
            })
            .collect();
        pools.sort_by(|a, b| a.1.cmp(&b.1));
        match pools.as_slice() {
            [a, b] if a.1.contains("-worker-a-") && b.1.contains("-worker-b-") => Ok(pools),
            _ => Err(format!("Machines {pools:?}\n{}", controllers.logs(15))),
        }
    })
    .await;

    // provider-local's driver decoded both classes: each machine Pod boots the CloudProfile's
    // image, with its Service and the user data (MCM filled in the machine name).
    for (machine_name, class) in &listed {
        let pod_name = format!("machine-{machine_name}");
        let pods = Api::<Pod>::namespaced(env.client.clone(), &machine_namespace);
        let pod = wait_for("provider-local creates the machine Pod", WAIT, || async {
            pods.get_opt(&pod_name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!(
                        "no Pod {pod_name} (class {class})\n{}",
                        controllers.logs(15)
                    )
                })
        })
        .await;
        let container = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some(fixtures::MACHINE_IMAGE_13_2)
        );
        // The Service follows the Pod (provider-local creates them one after the other).
        let services = Api::<Service>::namespaced(env.client.clone(), &machine_namespace);
        wait_for(
            "provider-local creates the machine Service",
            WAIT,
            || async {
                services
                    .get_opt(&pod_name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no Service {pod_name}"))
            },
        )
        .await;
        let user_data = Api::<Secret>::namespaced(env.client.clone(), &machine_namespace)
            .get(&format!("{pod_name}-userdata"))
            .await
            .unwrap();
        let data = &user_data.data.unwrap()["userdata"].0;
        assert_eq!(
            String::from_utf8_lossy(data),
            format!("#!/bin/bash\necho provisioned by {machine_name}\n")
        );
    }
}
