//! The alerts we ship, run by promtool: the seed's (the chart's PrometheusRule) and the
//! shoot's (the node agents' PrometheusRule the OSC controller ships,
//! `monitoring::rules::prometheus_rule`, tests in `test/monitoring/shoot-rules.test.yaml`).
//! The promtool tests are ignored in `make test`'s main run and run right after it, once
//! `hack/envtest.sh --prometheus` has built promtool beside the tests (`make test-rules` runs
//! them alone):
//!
//! - `seed_rules_pass_promtool` renders the chart with the real helm (release
//!   `gardener-extension-node`), writes the PrometheusRule's `spec` to a rules file, and runs
//!   `promtool check rules` and `promtool test rules` with `test/monitoring/seed-rules.test.yaml`
//!   beside it. promtool comes from the component build (`hack/envtest.sh`, or
//!   `$ENVTEST_ASSETS`). Without it the test fails rather than skips;
//! - `shoot_rules_pass_promtool` does the same with the shoot's rules;
//! - `dashboard_queries_parse` hands every query of the rendered seed dashboard (and of the
//!   shoot dashboard) to
//!   `promtool check rules` (as recording rules), so a query Plutono could not run fails here;
//! - `every_alert_has_a_firing_and_a_quiet_case` checks that the promtool tests cover every
//!   shipped alert both ways, seed and shoot (no promtool needed).

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gardener_extension_node::controllers::operatingsystemconfig::monitoring::rules;
use gardener_extension_node::devenv::{self, apply};
use serde_json::Value;

const CHART: &str = "charts/gardener-extension-node";
const RELEASE: &str = "gardener-extension-node";
/// The namespace the expected annotations in the test file name.
const NAMESPACE: &str = "extension-gardener-extension-node-6x7pq";
const TESTS: &str = "test/monitoring/seed-rules.test.yaml";
const SHOOT_TESTS: &str = "test/monitoring/shoot-rules.test.yaml";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs promtool from the component folder (`$ENVTEST_ASSETS`, else what `hack/envtest.sh`
/// prints) with `args` in `dir`.
fn promtool(args: &[&str], dir: &Path) -> Output {
    let assets = devenv::resolve_assets(None, &repo_root())
        .unwrap_or_else(|e| panic!("no component folder (hack/envtest.sh): {e:#}"));
    let binary = assets.join("promtool");
    assert!(
        binary.is_file(),
        "{} is missing: promtool comes from the component build, run hack/envtest.sh (or point \
         ENVTEST_ASSETS at a folder that has it)",
        binary.display()
    );
    Command::new(&binary)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", binary.display()))
}

/// The objects the chart renders for [`RELEASE`] in [`NAMESPACE`].
fn rendered() -> Vec<kube::api::DynamicObject> {
    let helm = Command::new("bash")
        .arg(repo_root().join("hack/helm.sh"))
        .output()
        .unwrap();
    assert!(helm.status.success(), "hack/helm.sh: {}", text(&helm));
    let helm = String::from_utf8(helm.stdout).unwrap();
    let output = Command::new(helm.trim())
        .args(["template", RELEASE, CHART, "--namespace", NAMESPACE])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "helm template: {}", text(&output));
    let manifests = String::from_utf8(output.stdout).unwrap();
    apply::parse_documents(&manifests, "helm template").unwrap()
}

/// The rendered object of `kind` (exactly one).
fn only(kind: &str) -> kube::api::DynamicObject {
    let objects: Vec<_> = rendered()
        .into_iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
        .collect();
    assert_eq!(objects.len(), 1, "one {kind}");
    objects.into_iter().next().unwrap()
}

/// The `spec` of the PrometheusRule the chart renders.
fn rendered_rules() -> Value {
    only("PrometheusRule").data["spec"].clone()
}

/// The alert names of a rules `spec`.
fn alerts(spec: &Value) -> Vec<String> {
    spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

/// The shoot's PrometheusRule `spec`, as the OSC controller ships it.
fn shoot_rules() -> Value {
    rules::prometheus_rule("shoot--project--name").unwrap()["spec"].clone()
}

/// `promtool check rules` on `spec` written as `rules_file`, then `promtool test rules` with
/// `tests` beside it (its `rule_files` names `rules_file`).
fn passes_promtool(spec: &Value, rules_file: &str, tests: &str) {
    let dir = tempfile::tempdir().unwrap();
    // JSON is YAML: promtool reads the spec as a rules file as it is.
    let rules = serde_json::to_string_pretty(spec).unwrap();
    std::fs::write(dir.path().join(rules_file), rules).unwrap();
    let test_file = Path::new(tests).file_name().unwrap().to_str().unwrap();
    std::fs::copy(repo_root().join(tests), dir.path().join(test_file)).unwrap();

    let check = promtool(&["check", "rules", rules_file], dir.path());
    assert!(
        check.status.success(),
        "promtool check rules:\n{}",
        text(&check)
    );
    let test = promtool(&["test", "rules", test_file], dir.path());
    assert!(
        test.status.success(),
        "promtool test rules:\n{}",
        text(&test)
    );
    println!("promtool test rules {tests}:\n{}", text(&test));
}

#[test]
#[ignore = "needs promtool: make test runs it after the main run"]
fn seed_rules_pass_promtool() {
    passes_promtool(&rendered_rules(), "seed-rules.yaml", TESTS);
}

#[test]
#[ignore = "needs promtool: make test runs it after the main run"]
fn shoot_rules_pass_promtool() {
    passes_promtool(&shoot_rules(), "shoot-rules.yaml", SHOOT_TESTS);
}

/// `promtool check rules` on every query of `dashboard` (as recording rules; `$job` filled in).
fn queries_parse(dashboard: &Value, what: &str) {
    let mut rules = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let id = panel["id"].as_u64().unwrap();
        for target in panel["targets"].as_array().unwrap() {
            // Plutono fills in the variable; any job will do for the syntax.
            let expr = target["expr"].as_str().unwrap().replace("$job", RELEASE);
            let reference = target["refId"].as_str().unwrap();
            rules.push(serde_json::json!({
                "record": format!("dashboard:panel_{id}_{reference}"),
                "expr": expr,
            }));
        }
    }
    let groups = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yaml"), groups.to_string()).unwrap();
    let check = promtool(&["check", "rules", "dashboard.yaml"], dir.path());
    assert!(
        check.status.success(),
        "promtool check rules (the {what} dashboard's queries):\n{}",
        text(&check)
    );
}

#[test]
#[ignore = "needs promtool: make test runs it after the main run"]
fn dashboard_queries_parse() {
    let config_map = only("ConfigMap");
    let json = config_map.data["data"][format!("{RELEASE}.json")]
        .as_str()
        .unwrap();
    queries_parse(&serde_json::from_str(json).unwrap(), "seed");
    queries_parse(
        &serde_json::from_str(rules::DASHBOARD_JSON).unwrap(),
        "shoot",
    );
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_case() {
    covers_every_alert(&rendered_rules(), "seed-rules.yaml", TESTS);
    covers_every_alert(&shoot_rules(), "shoot-rules.yaml", SHOOT_TESTS);
}

fn covers_every_alert(spec: &Value, rules_file: &str, tests: &str) {
    let tests: Value =
        serde_norway::from_str(&std::fs::read_to_string(repo_root().join(tests)).unwrap()).unwrap();
    assert_eq!(tests["rule_files"], serde_json::json!([rules_file]));
    let cases: Vec<&Value> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .collect();
    let shipped = alerts(spec);
    assert!(!shipped.is_empty());
    for alert in &shipped {
        let of_alert = || cases.iter().filter(|c| c["alertname"] == alert.as_str());
        let fires = of_alert().any(|c| {
            c["exp_alerts"]
                .as_array()
                .is_some_and(|alerts| !alerts.is_empty())
        });
        let quiet = of_alert().any(|c| {
            c.get("exp_alerts")
                .is_none_or(|a| a.is_null() || a.as_array().is_some_and(Vec::is_empty))
        });
        assert!(fires, "{alert}: no case where it fires");
        assert!(quiet, "{alert}: no case where it stays quiet");
    }
    for case in &cases {
        let name = case["alertname"].as_str().unwrap();
        assert!(
            shipped.iter().any(|a| a == name),
            "{name} is tested but not shipped"
        );
    }
}
