//! Compatibility: every object under `example/seed/` and every object our tests create is
//! accepted by a kube-apiserver that has Gardener's **upstream** CRDs installed (from
//! `../shared/gardener-crds/`), including status writes through `/status`; and every field of
//! our generated CRDs exists there with a compatible type.
//!
//! Where that folder is absent the test says so and passes: the upstream CRDs are data we
//! must not copy into the repository.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;

use gardener_extension_node::api::all_crds;
use gardener_extension_node::crds::{schema_of, walk_schema};
use gardener_extension_node::devenv::apply;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
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
        // Clusters have no status; a ManagedResource's is gardener-resource-manager's.
        if applied
            .types
            .as_ref()
            .is_some_and(|t| t.kind == "Cluster" || t.kind == "ManagedResource")
        {
            continue;
        }
        for status in [fixtures::error_status(1), fixtures::succeeded_status(1)] {
            support::patch_status_dynamic(&env.client, &applied, status)
                .await
                .unwrap_or_else(|e| panic!("status of {} rejected: {e:#?}", applied.name_any()));
        }
    }
}

/// Every field of our generated CRDs exists in the upstream schema with a compatible type
/// (pure: reads the files, starts no control plane).
#[test]
fn every_path_we_define_exists_upstream_with_a_compatible_type() {
    let Some(dir) = support::upstream_crd_dir() else {
        eprintln!("../shared/gardener-crds not present: schema comparison skipped");
        return;
    };
    let mut checked = 0;
    let mut problems = Vec::new();
    for crd in all_crds() {
        let kind = crd.spec.names.kind.clone();
        let file: PathBuf = dir.join(format!(
            "10-crd-{}_{}.yaml",
            crd.spec.group, crd.spec.names.plural
        ));
        let text = std::fs::read_to_string(&file).unwrap();
        let upstream: CustomResourceDefinition = serde_norway::from_str(&text).unwrap();

        assert_eq!(crd.spec.group, upstream.spec.group, "{kind}");
        assert_eq!(crd.spec.scope, upstream.spec.scope, "{kind}: scope");
        assert_eq!(crd.spec.names.plural, upstream.spec.names.plural, "{kind}");
        assert_eq!(
            crd.spec.names.singular, upstream.spec.names.singular,
            "{kind}"
        );
        assert_eq!(
            crd.spec.names.short_names, upstream.spec.names.short_names,
            "{kind}"
        );
        let (ours, theirs) = (&crd.spec.versions[0], &upstream.spec.versions[0]);
        assert_eq!(ours.name, theirs.name, "{kind}: version");
        assert_eq!(
            ours.subresources, theirs.subresources,
            "{kind}: subresources"
        );
        assert_eq!(columns(ours), columns(theirs), "{kind}: printer columns");

        let upstream_schema = schema_of(&upstream);
        walk_schema("", &schema_of(&crd), &mut |path, node| {
            checked += 1;
            compare_node(&kind, path, node, &upstream_schema, &mut problems);
        });
    }
    assert!(
        problems.is_empty(),
        "schema differences:\n{}",
        problems.join("\n")
    );
    assert!(checked > 300, "walked only {checked} schema nodes");
}

/// Finds the upstream node for `path`; `None` plus `true` if an ancestor preserves unknown
/// fields without describing the child.
fn upstream_node<'a>(root: &'a Value, path: &str) -> Result<&'a Value, bool> {
    let mut node = root;
    let mut rest = path;
    while !rest.is_empty() {
        let (step, next): (Option<&Value>, &str) = if let Some(r) = rest.strip_prefix("[]") {
            (node.get("items"), r)
        } else if let Some(r) = rest.strip_prefix("{}") {
            (node.get("additionalProperties"), r)
        } else {
            let r = rest.strip_prefix('.').unwrap();
            let end = r.find(['.', '[', '{']).unwrap_or(r.len());
            (
                node.get("properties").and_then(|p| p.get(&r[..end])),
                &r[end..],
            )
        };
        match step {
            Some(child) => node = child,
            None => return Err(is_true(node, "x-kubernetes-preserve-unknown-fields")),
        }
        rest = next;
    }
    Ok(node)
}

/// Appends to `problems` every way in which our node at `path` is incompatible upstream.
fn compare_node(
    kind: &str,
    path: &str,
    ours: &Value,
    upstream_root: &Value,
    problems: &mut Vec<String>,
) {
    let theirs = match upstream_node(upstream_root, path) {
        Ok(node) => node,
        Err(true) => return, // below an upstream object that keeps unknown fields
        Err(false) => {
            problems.push(format!("{kind}{path}: not in the upstream schema"));
            return;
        }
    };
    let mut check = |ok: bool, what: String| {
        if !ok {
            problems.push(format!("{kind}{path}: {what}"));
        }
    };
    let int_or_string = |n: &Value| is_true(n, "x-kubernetes-int-or-string");
    check(
        int_or_string(ours) == int_or_string(theirs),
        "int-or-string differs".into(),
    );
    if let (Some(a), Some(b)) = (ours.get("type"), theirs.get("type")) {
        check(a == b, format!("type {a} here, {b} upstream"));
    } else if theirs.get("type").is_some() && !int_or_string(theirs) {
        // We left the type open (raw JSON value); then we must keep unknown fields.
        check(
            is_true(ours, "x-kubernetes-preserve-unknown-fields"),
            "untyped here but typed upstream".into(),
        );
    }
    if let (Some(a), Some(b)) = (ours.get("format"), theirs.get("format")) {
        check(a == b, format!("format {a} here, {b} upstream"));
    }
    if is_true(theirs, "x-kubernetes-preserve-unknown-fields") && theirs.get("properties").is_none()
    {
        check(
            is_true(ours, "x-kubernetes-preserve-unknown-fields"),
            "upstream keeps unknown fields, we would prune them".into(),
        );
    }
    // Everything we require must be required upstream too, or objects written by others
    // could fail our schema.
    let required = |n: &Value| -> BTreeSet<String> {
        n.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut extra: Vec<String> = required(ours)
        .difference(&required(theirs))
        .cloned()
        .collect();
    if path.is_empty() {
        // kube's derived root types always have a `spec`; upstream MCM/GRM CRDs do not
        // require it, but every writer sets it.
        extra.retain(|r| r != "spec");
    }
    check(
        extra.is_empty(),
        format!("required here but not upstream: {extra:?}"),
    );
}

fn is_true(node: &Value, key: &str) -> bool {
    node.get(key).and_then(Value::as_bool) == Some(true)
}

/// Printer columns as (name, type, jsonPath).
fn columns(version: &CustomResourceDefinitionVersion) -> Vec<(String, String, String)> {
    let columns = version.additional_printer_columns.iter().flatten();
    columns
        .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
        .collect()
}
