//! Compatibility: every object under `example/seed/` and every object our tests create is
//! accepted by a kube-apiserver that has Gardener's **upstream** CRDs installed (from
//! `../shared/gardener-crds/`), including status writes through `/status`.
//!
//! Where that folder is absent the test says so and passes: the upstream CRDs are data we
//! must not copy into the repository.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use gardener_extension_node::devenv::apply;
use kube::ResourceExt;
use kube::api::DynamicObject;
use support::{Crds, fixtures};

fn upstream_present() -> bool {
    if support::upstream_crd_dir().is_none() {
        eprintln!("../shared/gardener-crds not present: upstream compatibility not checked");
        return false;
    }
    true
}

#[tokio::test]
async fn example_objects_are_accepted_by_upstream_crds() {
    if !upstream_present() {
        return;
    }
    let env = support::env_with(Crds::Upstream).await;
    let objects = support::read_objects(&support::repo_root().join("example/seed"));
    assert!(
        objects.len() >= 5,
        "example/seed has the namespace, a Cluster and three kinds"
    );
    apply::apply_all(&env.client, &objects, &env.namespace)
        .await
        .unwrap_or_else(|e| panic!("{e:#?}"));
}

#[tokio::test]
async fn test_fixtures_and_their_status_are_accepted_by_upstream_crds() {
    if !upstream_present() {
        return;
    }
    let env = support::env_with(Crds::Upstream).await;
    for value in fixtures::all_objects_json(&env.namespace) {
        let object: DynamicObject = serde_json::from_value(value).unwrap();
        let applied = apply::apply_object(&env.client, &object, &env.namespace, false)
            .await
            .unwrap_or_else(|e| panic!("{} rejected: {e:#?}", object.name_any()));
        if applied.types.as_ref().is_some_and(|t| t.kind == "Cluster") {
            continue;
        }
        for status in [fixtures::error_status(1), fixtures::succeeded_status(1)] {
            support::patch_status_dynamic(&env.client, &applied, status)
                .await
                .unwrap_or_else(|e| panic!("status of {} rejected: {e:#?}", applied.name_any()));
        }
    }
}
