//! Builders of the objects tests create. Every object built here is also applied against
//! Gardener's upstream CRDs by `test/crds_upstream.rs`, so whatever a test creates is known
//! to be accepted by a real seed.

use gardener_extension_node::api::{
    Cluster, ContainerRuntime, ManagedResource, OperatingSystemConfig, Worker,
};
use serde_json::{Value, json};

/// The Shoot embedded in a Cluster: one pool `worker-a` with gVisor, k8s 1.36.
pub fn shoot_json(namespace: &str) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "Shoot",
        "metadata": {"name": "local", "namespace": "garden-local"},
        "spec": {
            "kubernetes": {"version": "1.36.3"},
            "provider": {
                "type": "local",
                "workers": [{
                    "name": "worker-a",
                    "machine": {"type": "local", "image": {"name": "debian", "version": "13.2"}},
                    "minimum": 1,
                    "maximum": 3,
                    "zones": ["0"],
                    "cri": {
                        "name": "containerd",
                        "containerRuntimes": [{"type": "gvisor"}]
                    }
                }]
            }
        },
        "status": {
            "technicalID": namespace,
            "lastOperation": {
                "type": "Reconcile", "state": "Processing", "progress": 50,
                "description": "Reconciling", "lastUpdateTime": "2026-11-30T08:00:00Z"
            }
        }
    })
}

/// The Cluster of `namespace` (Cluster name == namespace).
pub fn cluster(namespace: &str) -> Cluster {
    serde_json::from_value(cluster_json(namespace)).expect("cluster fixture")
}

/// JSON form of [`cluster`].
pub fn cluster_json(namespace: &str) -> Value {
    json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": namespace},
        "spec": {
            "cloudProfile": cloud_profile_json(),
            "seed": {"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Seed", "metadata": {"name": "local"}},
            "shoot": shoot_json(namespace),
        }
    })
}

/// [`cluster`] with one worker pool per name of `pools` (copies of the fixture's pool).
pub fn cluster_with_pools(namespace: &str, pools: &[&str]) -> Cluster {
    let mut cluster = cluster_json(namespace);
    let workers = &mut cluster["spec"]["shoot"]["spec"]["provider"]["workers"];
    let template = workers[0].clone();
    *workers = Value::Array(
        pools
            .iter()
            .map(|pool| {
                let mut worker = template.clone();
                worker["name"] = json!(pool);
                worker
            })
            .collect(),
    );
    serde_json::from_value(cluster).expect("cluster fixture")
}

/// gardenlet's OSC of `purpose` (`provision`: `<key>-init`, else `<key>-original`) for `pool`,
/// with the reconcile annotation gardenlet creates it with.
pub fn gardenlet_osc(
    namespace: &str,
    pool: &str,
    key: &str,
    purpose: &str,
) -> OperatingSystemConfig {
    let name = match purpose {
        "provision" => format!("{key}-init"),
        _ => format!("{key}-original"),
    };
    let mut osc = operating_system_config_json(namespace, &name, purpose);
    osc["metadata"]["labels"] = json!({"worker.gardener.cloud/pool": pool});
    osc["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
    serde_json::from_value(osc).expect("osc fixture")
}

/// Name of gardenlet's ManagedResource for the node-agent secrets.
pub const GARDENLET_NODE_AGENT_MR: &str = "shoot-gardener-node-agent";

/// gardenlet's ManagedResource for the node-agent secrets, as a seed with gardenlet v1.149.3
/// has it in every shoot namespace (`origin=gardener`, no class), before
/// gardener-resource-manager reported anything for it.
pub fn gardenlet_node_agent_managed_resource(namespace: &str) -> ManagedResource {
    serde_json::from_value(json!({
        "apiVersion": "resources.gardener.cloud/v1alpha1",
        "kind": "ManagedResource",
        "metadata": {"name": GARDENLET_NODE_AGENT_MR, "namespace": namespace, "labels": {"origin": "gardener"}},
        "spec": {"secretRefs": [{"name": format!("{GARDENLET_NODE_AGENT_MR}-data")}], "keepObjects": false}
    }))
    .expect("managed resource fixture")
}

/// The CloudProfile of the fixture Cluster: provider-local's `CloudProfileConfig` lists the
/// machine image versions the tests use (debian 13.2 and 13.3), as the Worker looks them up;
/// the machine type `local` of the pools is listed as a real CloudProfile lists it
/// (provider-local's Worker reads its capabilities).
pub fn cloud_profile_json() -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1",
        "kind": "CloudProfile",
        "metadata": {"name": "local"},
        "spec": {
            "type": "local",
            "machineTypes": [{
                "name": "local", "cpu": "1", "gpu": "0", "memory": "1Gi",
                "architecture": "amd64", "usable": true
            }],
            "providerConfig": {
                "apiVersion": "local.provider.extensions.gardener.cloud/v1alpha1",
                "kind": "CloudProfileConfig",
                "machineImages": [{"name": "debian", "versions": [
                    {"version": "13.2", "image": MACHINE_IMAGE_13_2},
                    {"version": "13.3", "image": MACHINE_IMAGE_13_3},
                ]}],
            },
        },
    })
}

/// The image the fixture CloudProfile lists for debian 13.2.
pub const MACHINE_IMAGE_13_2: &str = "local/machine:debian-13.2";
/// The image the fixture CloudProfile lists for debian 13.3.
pub const MACHINE_IMAGE_13_3: &str = "local/machine:debian-13.3";

/// A gVisor ContainerRuntime for `pool`, as gardenlet creates it (name `gvisor-<pool>`).
pub fn container_runtime(namespace: &str, pool: &str) -> ContainerRuntime {
    serde_json::from_value(container_runtime_json(namespace, pool)).expect("cr fixture")
}

/// JSON form of [`container_runtime`].
pub fn container_runtime_json(namespace: &str, pool: &str) -> Value {
    json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "ContainerRuntime",
        "metadata": {"name": format!("gvisor-{pool}"), "namespace": namespace},
        "spec": {
            "type": "gvisor",
            "binaryPath": "/var/bin/containerruntimes",
            "providerConfig": {
                "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
                "kind": "GVisorConfiguration",
                "configFlags": {"net-raw": "true"}
            },
            "workerPool": {
                "name": pool,
                "selector": {"matchLabels": {
                    "worker.gardener.cloud/pool": pool,
                    "worker.garden.sapcloud.io/group": pool
                }}
            }
        }
    })
}

/// An OperatingSystemConfig with a unit (drop-in, file path), a plain, a b64, a secretRef
/// and an unencoded file.
pub fn operating_system_config(
    namespace: &str,
    name: &str,
    purpose: &str,
) -> OperatingSystemConfig {
    serde_json::from_value(operating_system_config_json(namespace, name, purpose))
        .expect("osc fixture")
}

/// JSON form of [`operating_system_config`].
pub fn operating_system_config_json(namespace: &str, name: &str, purpose: &str) -> Value {
    json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "OperatingSystemConfig",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"worker.gardener.cloud/pool": "worker-a"}
        },
        "spec": {
            "type": "debian",
            "purpose": purpose,
            "criConfig": {"name": "containerd", "cgroupDriver": "systemd"},
            "units": [{
                "name": "example.service",
                "command": "start",
                "enable": true,
                "content": "[Service]\nExecStart=/bin/sleep infinity\n",
                "dropIns": [{"name": "10-env.conf", "content": "[Service]\nEnvironment=A=b\n"}],
                "filePaths": ["/etc/example/plain"]
            }],
            "files": [
                {"path": "/etc/example/plain", "permissions": 420,
                 "content": {"inline": {"encoding": "", "data": "hello $HOME `date`\n"}}},
                {"path": "/etc/example/b64", "permissions": 384,
                 "content": {"inline": {"encoding": "b64", "data": "aGVsbG8K"}}},
                {"path": "/etc/example/from-secret",
                 "content": {"secretRef": {"name": "example-secret", "dataKey": "value"}}},
                {"path": "/var/lib/example/token",
                 "content": {"transmitUnencoded": true, "inline": {"encoding": "", "data": "<<BOOTSTRAP_TOKEN>>"}}}
            ]
        }
    })
}

/// A Worker with one pool in one zone.
pub fn worker(namespace: &str) -> Worker {
    serde_json::from_value(worker_json(namespace)).expect("worker fixture")
}

/// JSON form of [`worker`].
pub fn worker_json(namespace: &str) -> Value {
    json!({
        "apiVersion": "extensions.gardener.cloud/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": "worker", "namespace": namespace},
        "spec": {
            "type": "local",
            "region": "local",
            "secretRef": {"name": "cloudprovider", "namespace": namespace},
            "pools": [{
                "name": "worker-a",
                "machineType": "local",
                "machineImage": {"name": "debian", "version": "13.2"},
                "minimum": 1,
                "maximum": 3,
                "maxSurge": 1,
                "maxUnavailable": 0,
                "zones": ["0"],
                "labels": {"containerruntime.worker.gardener.cloud/gvisor": "true"},
                "taints": [{"key": "dedicated", "value": "gvisor", "effect": "NoSchedule"}],
                "userDataSecretRef": {"name": "osc-result-pool-a-init", "key": "cloud_config"},
                "nodeAgentSecretName": "gardener-node-agent-worker-a-0123456789abcdef",
                "kubernetesVersion": "1.36.3"
            }]
        }
    })
}

/// A status as the controllers write it after a successful operation.
pub fn succeeded_status(generation: i64) -> Value {
    json!({
        "observedGeneration": generation,
        "lastOperation": {
            "type": "Reconcile",
            "state": "Succeeded",
            "progress": 100,
            "description": "Successfully reconciled",
            "lastUpdateTime": "2026-11-30T08:00:01Z"
        },
        "lastError": null
    })
}

/// A status as the controllers write it after a failed operation.
pub fn error_status(generation: i64) -> Value {
    json!({
        "observedGeneration": generation,
        "lastOperation": {
            "type": "Reconcile",
            "state": "Error",
            "progress": 50,
            "description": "Error reconciling: bad flag",
            "lastUpdateTime": "2026-11-30T08:00:01Z"
        },
        "lastError": {
            "description": "Error reconciling: bad flag",
            "codes": ["ERR_CONFIGURATION_PROBLEM"],
            "lastUpdateTime": "2026-11-30T08:00:01Z"
        }
    })
}

/// Every object tests create, in apply order, for the upstream-CRD compatibility test.
pub fn all_objects_json(namespace: &str) -> Vec<Value> {
    vec![
        cluster_json(namespace),
        container_runtime_json(namespace, "worker-a"),
        operating_system_config_json(namespace, "osc-provision", "provision"),
        operating_system_config_json(namespace, "osc-reconcile", "reconcile"),
        operating_system_config_with_image_ref_json(namespace, "osc-image-ref"),
        worker_json(namespace),
        serde_json::to_value(cluster_with_pools(
            &format!("{namespace}-pools"),
            &["a", "b"],
        ))
        .expect("cluster"),
        serde_json::to_value(gardenlet_osc(
            namespace,
            "worker-b",
            "gardener-node-agent-worker-b-1",
            "provision",
        ))
        .expect("osc"),
        serde_json::to_value(gardenlet_node_agent_managed_resource(namespace)).expect("mr"),
        rendered_machine_deployment_json(namespace),
        mcm_machine_set_json(
            namespace,
            &rendered_machine_deployment_json(namespace),
            "00000000-0000-0000-0000-000000000001",
            "md-set",
            1,
        ),
        mcm_machine_json(
            namespace,
            &mcm_machine_set_json(
                namespace,
                &rendered_machine_deployment_json(namespace),
                "00000000-0000-0000-0000-000000000001",
                "md-set",
                1,
            ),
            "00000000-0000-0000-0000-000000000002",
            "md-set-0",
        ),
    ]
}

/// The OSC key of pool `worker-a` as gardenlet computes it for rolling pools
/// (`gardener-node-agent-<pool>-<16 hex>`); its reconcile OSC is `<key>-original`.
pub const OSC_KEY: &str = "gardener-node-agent-worker-a-0123456789abcdef";

/// The Secret `example-secret` that the `secretRef` file of [`operating_system_config`]
/// reads (key `value`).
pub fn osc_file_secret_json(namespace: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "example-secret", "namespace": namespace},
        "stringData": {"value": value}
    })
}

/// [`operating_system_config`] with `purpose: provision` and an extra `imageRef` file, which
/// a provision OSC cannot carry (a configuration error for the OSC controller).
pub fn operating_system_config_with_image_ref_json(namespace: &str, name: &str) -> Value {
    let mut osc = operating_system_config_json(namespace, name, "provision");
    if let Some(files) = osc["spec"]["files"].as_array_mut() {
        files.push(json!({
            "path": "/opt/bin/gardener-node-agent",
            "permissions": 493,
            "content": {"imageRef": {
                "image": "registry.example/gardener-node-agent:v1.150.0",
                "filePathInImage": "/gardener-node-agent"
            }}
        }));
    }
    osc
}

/// The MachineDeployment the Worker controller renders for [`worker`] in the [`cluster`] of
/// `namespace` (same code path as `render worker`), with 1 replica.
pub fn rendered_machine_deployment_json(namespace: &str) -> Value {
    let text = gardener_extension_node::render::worker::manifests(
        &worker(namespace),
        Some(&cluster(namespace)),
        Some(b"#!/bin/bash\n"),
    )
    .expect("worker fixture renders");
    serde_norway::Deserializer::from_str(&text)
        .map(|document| <Value as serde::Deserialize>::deserialize(document).expect("yaml"))
        .find(|object| object["kind"] == "MachineDeployment")
        .expect("a MachineDeployment is rendered")
}

/// A MachineSet as machine-controller-manager creates it for `deployment` (a
/// MachineDeployment as JSON): owned by it, labelled and templated like it.
pub fn mcm_machine_set_json(
    namespace: &str,
    deployment: &Value,
    deployment_uid: &str,
    name: &str,
    replicas: i32,
) -> Value {
    let template = deployment["spec"]["template"].clone();
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": template["metadata"]["labels"].clone(),
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "MachineDeployment",
                "name": deployment["metadata"]["name"].clone(),
                "uid": deployment_uid,
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "replicas": replicas,
            "selector": deployment["spec"]["selector"].clone(),
            "machineClass": template["spec"]["class"].clone(),
            "template": template,
        }
    })
}

/// A joined Machine as machine-controller-manager creates it for `set` (a MachineSet as
/// JSON): owned by the set, its Node in label `node` (`node-<name>`), a provider ID.
pub fn mcm_machine_json(namespace: &str, set: &Value, set_uid: &str, name: &str) -> Value {
    let mut labels = set["spec"]["template"]["metadata"]["labels"].clone();
    labels["node"] = json!(format!("node-{name}"));
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1",
                "kind": "MachineSet",
                "name": set["metadata"]["name"].clone(),
                "uid": set_uid,
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "class": set["spec"]["template"]["spec"]["class"].clone(),
            "providerID": format!("local:///{namespace}/{name}"),
        }
    })
}

/// The status machine-controller-manager reports for a MachineDeployment whose `replicas`
/// machines all run the current template.
pub fn mcm_deployment_status_json(generation: i64, replicas: i32) -> Value {
    json!({
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "unavailableReplicas": 0,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "True", "reason": "NewMachineSetAvailable",
             "message": "MachineSet has successfully progressed."}
        ]
    })
}

/// The status machine-controller-manager reports for a MachineSet with `replicas` ready
/// machines.
pub fn mcm_machine_set_status_json(generation: i64, replicas: i32) -> Value {
    json!({
        "observedGeneration": generation,
        "replicas": replicas,
        "fullyLabeledReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas
    })
}

/// The `machine-controller-manager` Deployment gardenlet runs in a shoot namespace (the
/// image is never pulled: the test control plane has no nodes).
pub fn mcm_deployment_json(namespace: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "machine-controller-manager", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"role": "machine-controller-manager"}},
            "template": {
                "metadata": {"labels": {"role": "machine-controller-manager"}},
                "spec": {"containers": [{"name": "mcm", "image": "registry.example/mcm:v0"}]}
            }
        }
    })
}

/// A `reconcile` OSC of pool `pool` whose Secret is `kube-system/<key>`.
pub async fn create_reconcile_osc_for(env: &super::TestEnv, key: &str, pool: &str) -> String {
    let name = format!("{key}-original");
    let mut osc = operating_system_config_json(&env.namespace, &name, "reconcile");
    osc["spec"]["files"]
        .as_array_mut()
        .unwrap()
        .retain(|f| f["content"].get("secretRef").is_none());
    osc["metadata"]["annotations"] = serde_json::json!({"gardener.cloud/operation": "reconcile"});
    osc["metadata"]["labels"] = serde_json::json!({"worker.gardener.cloud/pool": pool});
    let osc: gardener_extension_node::api::OperatingSystemConfig =
        serde_json::from_value(osc).unwrap();
    kube::Api::<gardener_extension_node::api::OperatingSystemConfig>::namespaced(
        env.client.clone(),
        &env.namespace,
    )
    .create(&kube::api::PostParams::default(), &osc)
    .await
    .unwrap();
    name
}
