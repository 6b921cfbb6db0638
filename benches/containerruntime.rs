//! Benchmark: 200 gVisor ContainerRuntimes in 50 shoot namespaces on a real kube-apiserver.
//! Measures the time from the first create until every object passes gardenlet's readiness
//! check, and the operator's peak RSS (VmHWM). Writes its section of `docs/benchmarks.md`.
//!
//! Run: `cargo bench --bench containerruntime` (release build of the operator).

#![allow(clippy::unwrap_used, clippy::panic, dead_code)] // a measuring tool, not a controller

#[path = "../test/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use gardener_extension_node::api::{Cluster, ContainerRuntime, LastOperationType};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::gardener::check_ready;
use support::operator::OperatorProcess;
use support::{fixtures, wait_for};

const NAMESPACES: usize = 50;
const PER_NAMESPACE: usize = 4;

#[tokio::main]
async fn main() {
    if !support::benchmarks::invoked_by_cargo_bench() {
        return;
    }
    let env = support::env().await;
    let mut operator = OperatorProcess::start(&env.kubeconfig, &["--controllers=containerruntime"]);
    wait_for("operator ready", Duration::from_secs(60), || async {
        match operator.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let mut namespaces = Vec::new();
    for i in 0..NAMESPACES {
        let namespace = format!("shoot--bench--{i:02}");
        support::create_namespace(&env.client, &namespace).await;
        Api::<Cluster>::all(env.client.clone())
            .create(&PostParams::default(), &fixtures::cluster(&namespace))
            .await
            .unwrap();
        namespaces.push(namespace);
    }

    let started = Instant::now();
    let creates = namespaces.iter().flat_map(|namespace| {
        (0..PER_NAMESPACE).map(|p| {
            let client = env.client.clone();
            let namespace = namespace.clone();
            async move {
                let mut cr = fixtures::container_runtime_json(&namespace, &format!("pool-{p}"));
                cr["metadata"]["annotations"] = json!({"gardener.cloud/operation": "reconcile"});
                Api::<ContainerRuntime>::namespaced(client, &namespace)
                    .create(&PostParams::default(), &serde_json::from_value(cr).unwrap())
                    .await
                    .unwrap();
            }
        })
    });
    futures::future::join_all(creates).await;
    let created = started.elapsed();

    let total = NAMESPACES * PER_NAMESPACE;
    let all: Api<ContainerRuntime> = Api::all(env.client.clone());
    wait_for(
        "all ContainerRuntimes ready",
        Duration::from_secs(300),
        || async {
            let list = all
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let ready = list
                .items
                .iter()
                .filter(|cr| check_ready(*cr, LastOperationType::Create).is_ok())
                .count();
            if ready == total {
                Ok(())
            } else {
                Err(format!(
                    "{ready}/{total} ready; e.g. {:?}",
                    list.items
                        .iter()
                        .find(|cr| check_ready(*cr, LastOperationType::Create).is_err())
                        .map(|cr| cr.name_any())
                ))
            }
        },
    )
    .await;
    let converged = started.elapsed();
    let peak_kib = operator.peak_rss_kib().unwrap_or(0);
    operator.kill();

    let section = format!(
        "## ContainerRuntime (gVisor): {total} objects in {NAMESPACES} namespaces\n\n\
         Command: `cargo bench --bench containerruntime` (operator built in the bench profile, \
         `--max-concurrent-reconciles=5` default, real kube-apiserver {kube} + etcd on loopback, \
         {cores} cores).\n\n\
         | measure | result | target |\n|---|---|---|\n\
         | creating the {total} objects (test client, parallel) | {created:.2?} | — |\n\
         | first create → all {total} pass gardenlet's readiness check | {converged:.2?} | < 20 s |\n\
         | operator peak RSS (VmHWM) | {peak:.1} MiB | < 30 MiB |\n\n\
         Measured on {date}.\n",
        kube = "v1.36.3",
        cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        peak = peak_kib as f64 / 1024.0,
        date = chrono::Utc::now().format("%Y-%m-%d"),
    );
    println!("{section}");
    support::benchmarks::write_section("containerruntime", &section);
}
