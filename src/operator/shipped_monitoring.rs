//! Tests only: the seed monitoring the chart ships (`charts/gardener-extension-node/monitoring`)
//! against the operator's own registry. Every metric the dashboard and the alerts query is one
//! that `/metrics` exports, every query selects the installation's `job`, and every alert
//! carries the labels and annotations the seed's Alertmanager routes by. promtool runs the
//! alerts themselves (test/monitoring_rules.rs).

use std::collections::BTreeSet;

use serde_json::Value;

use super::Metrics;
use crate::extension::object_states;

const DASHBOARD: &str =
    include_str!("../../charts/gardener-extension-node/monitoring/seed-dashboard.json");
const RULES: &str = include_str!("../../charts/gardener-extension-node/monitoring/seed-rules.yaml");
const PREFIX: &str = "gardener_extension_node_";

/// The sample names `/metrics` shows once every family has a series.
fn exported() -> BTreeSet<String> {
    let Metrics {
        registry,
        controllers,
        liveness,
        objects,
    } = Metrics::register();
    controllers
        .start("Worker")
        .finish("reconcile", "error", Some("apply"));
    controllers.set_queue_depth("Worker", 1);
    controllers.set_max_concurrent("Worker", 5);
    let _active = controllers.active_worker("Worker");
    liveness.set_leader(true);
    liveness.heartbeat_renewed(chrono::Utc::now());
    objects.publish(&object_states::tally(&["Worker"], [], 0));
    let text = crate::metrics::encode(&registry).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Our metric names an expression reads, each with what follows it.
fn our_metrics(expr: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(PREFIX) {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        found.push((&tail[..end], &tail[end..]));
        rest = &tail[end..];
    }
    found
}

/// Checks that `expr` reads only exported metrics, each through a selector with `job`.
fn check_expr(expr: &str, job: &str, exported: &BTreeSet<String>) {
    let metrics = our_metrics(expr);
    let selects_up = expr.contains("up{");
    assert!(
        !metrics.is_empty() || selects_up,
        "{expr}: reads none of our metrics"
    );
    for (name, after) in metrics {
        assert!(exported.contains(name), "{expr}: {name} is not exported");
        assert!(
            after.starts_with(&format!("{{{job}")),
            "{expr}: {name} without the selector {{{job}...}}"
        );
    }
    if selects_up {
        assert!(expr.contains(&format!("up{{{job}}}")), "{expr}");
    }
}

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).unwrap()
}

#[test]
fn every_metric_the_dashboard_queries_is_exported_for_the_chosen_job() {
    let exported = exported();
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut queried = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(panel["datasource"], "prometheus-seed", "{title}");
        assert!(panel["description"].is_string(), "{title}");
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            check_expr(expr, r#"job="$job""#, &exported);
            queried.extend(our_metrics(expr).into_iter().map(|(name, _)| name));
        }
    }
    // What the issue asked the dashboard to show.
    for family in [
        "gardener_extension_node_leader",
        "gardener_extension_node_controller_reconciles_total",
        "gardener_extension_node_controller_errors_total",
        "gardener_extension_node_controller_queue_depth",
        "gardener_extension_node_controller_active_workers",
        "gardener_extension_node_controller_reconcile_duration_seconds_bucket",
        "gardener_extension_node_objects",
        "gardener_extension_node_heartbeat_last_renew_timestamp_seconds",
    ] {
        assert!(queried.contains(family), "no panel shows {family}");
    }
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
}

#[test]
fn the_dashboard_defaults_to_its_own_release() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "__UID__");
    assert_eq!(dashboard["title"], "Extension __RELEASE__");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert_eq!(variables.len(), 1);
    assert_eq!(variables[0]["name"], "job");
    assert_eq!(variables[0]["current"]["value"], "__RELEASE__");
    let query = variables[0]["query"]["query"].as_str().unwrap();
    assert_eq!(
        query,
        "label_values(gardener_extension_node_build_info, job)"
    );
    assert!(exported().contains("gardener_extension_node_build_info"));
}

#[test]
fn every_alert_reads_exported_metrics_of_its_job_and_is_labelled_for_operators() {
    let exported = exported();
    let rules: Value = serde_norway::from_str(RULES).unwrap();
    let groups = rules["groups"].as_array().unwrap();
    let mut alerts = Vec::new();
    for rule in groups.iter().flat_map(|g| g["rules"].as_array().unwrap()) {
        let alert = rule["alert"].as_str().unwrap();
        check_expr(
            rule["expr"].as_str().unwrap(),
            r#"job="__RELEASE__""#,
            &exported,
        );
        let labels = &rule["labels"];
        assert_eq!(labels["service"], "__RELEASE__", "{alert}");
        assert!(
            ["critical", "warning", "info"].contains(&labels["severity"].as_str().unwrap()),
            "{alert}"
        );
        assert_eq!(labels["type"], "seed", "{alert}");
        assert_eq!(labels["visibility"], "operator", "{alert}");
        assert_eq!(labels.as_object().unwrap().len(), 4, "{alert}: {labels}");
        for annotation in ["summary", "description"] {
            let text = rule["annotations"][annotation].as_str().unwrap_or_default();
            assert!(text.ends_with('.'), "{alert}: {annotation} {text:?}");
        }
        alerts.push(alert);
    }
    assert_eq!(
        alerts,
        [
            "ExtensionNodeDown",
            "ExtensionNodeNoLeader",
            "ExtensionNodeReconcileErrors",
            "ExtensionNodeObjectsStuck",
            "ExtensionNodeHeartbeatStale"
        ]
    );
}
