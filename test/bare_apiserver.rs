//! Integration: the operator against a bare kube-apiserver, as `make start` runs it with a
//! `dev/kubeconfig` pointing at a cluster without the CRDs. It says once per missing resource
//! which CustomResourceDefinition is missing and how to install it (no repeated 404
//! warnings), stays alive and not ready, and goes on by itself once `crds/` is applied.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::time::Duration;

use gardener_extension_node::devenv;
use support::operator::OperatorProcess;
use support::{Crds, wait_for};

#[tokio::test]
async fn missing_crds_are_named_once_and_applying_them_lets_the_operator_go_on() {
    let env = support::env_with(Crds::Nothing).await;
    let operator = OperatorProcess::start(&env.kubeconfig, &[]);
    let missing = [
        "clusters.extensions.gardener.cloud",
        "managedresources.resources.gardener.cloud",
    ];
    wait_for("the missing-CRD lines", Duration::from_secs(60), || async {
        let log = operator.log_text();
        for resource in missing {
            let line = format!("the API server does not serve {resource}: its CustomResourceDefinition is not installed");
            if !log.contains(&line) {
                return Err(format!("no line for {resource}\n{log}"));
            }
        }
        Ok(())
    })
    .await;
    // Several retries later (the watch backs off from 800 ms), still one line each and no
    // warning per retry.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let log = operator.log_text();
    for resource in missing {
        let line = format!("the API server does not serve {resource}");
        assert_eq!(log.matches(&line).count(), 1, "{resource}:\n{log}");
    }
    assert!(
        log.contains("kubectl apply --server-side -f crds/"),
        "{log}"
    );
    let loud_404s = log
        .lines()
        // The 404's own text, not the digits: a timestamp such as `57.740412Z` holds "404".
        .filter(|l| {
            (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains("404 page not found")
        })
        .count();
    assert_eq!(loud_404s, 0, "no warning per retry (debug only):\n{log}");
    assert_eq!(operator.http_get("/healthz").await.map(|r| r.0), Some(200));
    assert_ne!(operator.http_get("/readyz").await.map(|r| r.0), Some(200));

    devenv::apply::install_crds(&env.client, &support::repo_root().join("crds"))
        .await
        .unwrap();
    wait_for("ready after the CRDs", Duration::from_secs(120), || async {
        match operator.http_get("/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}\n{}", operator.log_text())),
        }
    })
    .await;
    let log = operator.log_text();
    assert!(
        log.contains("the API server serves the resource now"),
        "{log}"
    );
}
