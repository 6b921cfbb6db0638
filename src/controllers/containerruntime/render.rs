//! Rendering of the gVisor shoot manifests (pure): the shared RuntimeClasses (one per
//! profile, [`super::profiles`]) + ServiceAccount and the per-pool installation DaemonSet (or, while a ContainerRuntime is deleted, the same
//! DaemonSet in uninstall mode), from tera templates under `charts/internal/gvisor/` that are
//! embedded at compile time and parsed once at start-up.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tera::{Context, Tera};

use super::config::GVisorSettings;
use super::profiles::RuntimeClass;
use crate::api::constants::{LABEL_CRI_NAME, LABEL_WORKER_POOL};

const RUNTIME_CLASS: &str = "runtimeclass.yaml";
const INSTALLATION: &str = "installation.yaml";

/// Label on the DaemonSet and its pods in uninstall mode (value `uninstall`). The
/// installation carries none, so its rendering stayed byte-identical when uninstall came.
pub const LABEL_MODE: &str = "runtime.gvisor.extensions.gardener.cloud/mode";
/// Value of [`LABEL_MODE`] on the uninstall DaemonSet.
pub const MODE_UNINSTALL: &str = "uninstall";

/// Errors of rendering.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A template failed to render.
    #[error("template {template} failed to render")]
    Template {
        /// The template.
        template: &'static str,
        /// Cause.
        #[source]
        source: tera::Error,
    },
}

/// The parsed templates; build once at start-up.
#[derive(Debug, Clone)]
pub struct Templates {
    tera: Tera,
}

impl Templates {
    /// Parses the embedded templates. Fails only if a template is broken (a build defect),
    /// which makes start-up fail.
    pub fn new() -> Result<Self, tera::Error> {
        let mut tera = Tera::default();
        tera.add_raw_templates(vec![
            (
                RUNTIME_CLASS,
                include_str!("../../../charts/internal/gvisor/runtimeclass.yaml.tera"),
            ),
            (
                INSTALLATION,
                include_str!("../../../charts/internal/gvisor/installation.yaml.tera"),
            ),
        ])?;
        tera.register_filter("yaml", yaml_scalar);
        Ok(Templates { tera })
    }

    fn render(&self, template: &'static str, context: &Context) -> Result<String, RenderError> {
        self.tera
            .render(template, context)
            .map_err(|source| RenderError::Template { template, source })
    }
}

/// Inputs of the per-pool installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationInputs {
    /// Worker pool name.
    pub pool: String,
    /// `workerPool.selector.matchLabels` of the ContainerRuntime.
    pub pool_selector: BTreeMap<String, String>,
    /// The installation image.
    pub image: String,
    /// Where runtime binaries go on the node (`spec.binaryPath`).
    pub bin_dir: String,
    /// Validated settings (flags).
    pub settings: GVisorSettings,
}

#[derive(Serialize)]
struct InstallationContext<'a> {
    name: String,
    pool: &'a str,
    node_selector: BTreeMap<String, String>,
    image: &'a str,
    bin_dir_flag: String,
    flags_text: String,
    flags_checksum: String,
    uninstall: bool,
    mode_label: &'static str,
    refusal_events: bool,
}

/// Name of the per-pool DaemonSet.
pub fn daemonset_name(pool: &str) -> String {
    format!("containerd-gvisor-{pool}")
}

/// The node selector of the DaemonSet: containerd nodes of the pool. (The RuntimeClass, not
/// the DaemonSet, selects on the gvisor label, as upstream.)
pub fn node_selector(inputs: &InstallationInputs) -> BTreeMap<String, String> {
    let mut selector = BTreeMap::from([(LABEL_CRI_NAME.to_string(), "containerd".to_string())]);
    selector.extend(inputs.pool_selector.clone());
    selector
        .entry(LABEL_WORKER_POOL.to_string())
        .or_insert_with(|| inputs.pool.clone());
    selector
}

/// The RuntimeClasses `classes` ([`super::profiles::runtime_classes`]) and ServiceAccount
/// `kube-system/gvisor`; with `refusal_events` also the Role and RoleBinding that let the
/// installers publish refused profiles as events (`crate::gvisor_install::refusal_events`).
pub fn render_runtime_classes(
    templates: &Templates,
    classes: &[RuntimeClass],
    refusal_events: bool,
) -> Result<String, RenderError> {
    let mut context = Context::new();
    context.insert("classes", classes);
    context.insert("refusal_events", &refusal_events);
    templates.render(RUNTIME_CLASS, &context)
}

/// The tera filter `yaml`: a string as a plain YAML scalar when that reads back as the same
/// string (starts with a letter, only letters, digits and `._/-`, not a word YAML reads as a
/// boolean or null), else JSON-encoded (valid YAML whatever the string holds).
fn yaml_scalar(
    value: &tera::Value,
    _: &std::collections::HashMap<String, tera::Value>,
) -> tera::Result<tera::Value> {
    let tera::Value::String(text) = value else {
        return Err(tera::Error::msg("the yaml filter takes a string"));
    };
    const WORDS: [&str; 11] = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~", "none",
    ];
    let plain = text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        && !WORDS.contains(&text.to_ascii_lowercase().as_str());
    Ok(tera::Value::String(if plain {
        text.clone()
    } else {
        serde_json::to_string(text).map_err(tera::Error::json)?
    }))
}

/// The installation DaemonSet of one pool. The pod template carries the sha256 of the flags,
/// so a flag change rolls the pods and an unchanged config renders byte-identical output.
pub fn render_installation(
    templates: &Templates,
    inputs: &InstallationInputs,
) -> Result<String, RenderError> {
    render_daemonset(templates, inputs, false)
}

/// The uninstall DaemonSet of one pool: the installation DaemonSet with the same name,
/// labels, selector, node selector, tolerations, priority class, image, privileges and
/// host-root mount, so gardener-resource-manager updates it in place and the rolling update
/// replaces each node's installation pod by an uninstall pod. The pod runs
/// `gvisor-install --uninstall --once` as init container (containerd config cleaned and
/// restarted, or the container fails and is retried), then `gvisor-install --uninstall` in
/// the main container, which finds nothing left to do and waits for SIGTERM: a pod is Ready
/// only on a node that is uninstalled, so the DaemonSet is healthy and rolled out exactly
/// when every node of the pool is. Marked with [`LABEL_MODE`]` = `[`MODE_UNINSTALL`] on the
/// DaemonSet and its pods. The runsc flags of `inputs.settings` are not used.
pub fn render_uninstall(
    templates: &Templates,
    inputs: &InstallationInputs,
) -> Result<String, RenderError> {
    render_daemonset(templates, inputs, true)
}

fn render_daemonset(
    templates: &Templates,
    inputs: &InstallationInputs,
    uninstall: bool,
) -> Result<String, RenderError> {
    let flags_text = inputs.settings.flags_text();
    let context = InstallationContext {
        name: daemonset_name(&inputs.pool),
        pool: &inputs.pool,
        node_selector: node_selector(inputs),
        image: &inputs.image,
        bin_dir_flag: format!("--bin-dir={}", inputs.bin_dir),
        flags_checksum: hex::encode(Sha256::digest(flags_text.as_bytes())),
        flags_text,
        uninstall,
        mode_label: LABEL_MODE,
        refusal_events: !uninstall && inputs.settings.wants_kvm(),
    };
    let context = Context::from_serialize(&context).map_err(|source| RenderError::Template {
        template: INSTALLATION,
        source,
    })?;
    templates.render(INSTALLATION, &context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::containerruntime::config;
    use serde_json::json;

    fn inputs(flags: serde_json::Value) -> InstallationInputs {
        let provider_config = json!({
            "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
            "kind": "GVisorConfiguration",
            "configFlags": flags,
        });
        InstallationInputs {
            pool: "worker-a".into(),
            pool_selector: BTreeMap::from([
                (
                    "worker.gardener.cloud/pool".to_string(),
                    "worker-a".to_string(),
                ),
                (
                    "worker.garden.sapcloud.io/group".to_string(),
                    "worker-a".to_string(),
                ),
            ]),
            image: "gardener-extension-node/gvisor-installation:v0.1.0".into(),
            bin_dir: "/var/bin/containerruntimes".into(),
            settings: config::validate(Some(&provider_config)).unwrap(),
        }
    }

    fn parse_all(text: &str) -> Vec<serde_json::Value> {
        crate::devenv::apply::parse_documents(text, "rendered")
            .unwrap()
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    fn gvisor_class() -> RuntimeClass {
        super::super::profiles::runtime_classes(&[])
            .unwrap()
            .remove(0)
    }

    #[test]
    fn runtime_class_snapshot() {
        let templates = Templates::new().unwrap();
        let text = render_runtime_classes(&templates, &[gvisor_class()], false).unwrap();
        insta::assert_snapshot!(text);
        let objects = parse_all(&text);
        assert_eq!(objects[0]["handler"], "runsc");
        assert_eq!(
            objects[0]["scheduling"]["nodeSelector"]["containerruntime.worker.gardener.cloud/gvisor"],
            "true"
        );
        assert_eq!(
            objects[0]["overhead"],
            json!({"podFixed": {"cpu": "10m", "memory": "24Mi"}}),
            "the measured default (profiles::DEFAULT_OVERHEAD_*)"
        );
    }

    #[test]
    fn profiles_render_one_class_each_with_overhead_and_odd_labels_stay_valid_yaml() {
        let templates = Templates::new().unwrap();
        let mut debug = gvisor_class();
        debug.name = "gvisor-debug".into();
        debug.handler = "runsc-debug".into();
        debug.overhead_memory = Some("64Mi".into());
        debug.overhead_cpu = Some("100m".into());
        for (key, value) in [
            ("true", "yes"),
            ("a: {b}", "x\"y\n#z"),
            ("1e3", "~"),
            ("k", "007"),
        ] {
            debug.node_selector.insert(key.into(), value.into());
        }
        let text =
            render_runtime_classes(&templates, &[gvisor_class(), debug.clone()], false).unwrap();
        let objects = parse_all(&text);
        assert_eq!(objects.len(), 3, "{text}");
        assert_eq!(objects[1]["metadata"]["name"], "gvisor-debug");
        assert_eq!(objects[1]["handler"], "runsc-debug");
        assert_eq!(objects[1]["overhead"]["podFixed"]["memory"], "64Mi");
        assert_eq!(objects[1]["overhead"]["podFixed"]["cpu"], "100m");
        let selector = objects[1]["scheduling"]["nodeSelector"]
            .as_object()
            .unwrap();
        for (key, value) in &debug.node_selector {
            assert_eq!(selector[key], json!(value), "{key}");
        }
        assert_eq!(objects[2]["kind"], "ServiceAccount");
    }

    /// A pool with a `kvm` profile: its installers get a token and their Node's name and may
    /// create and patch events in `default` (nothing else); without one, neither.
    #[test]
    fn a_kvm_profile_lets_the_installers_report_refusals_as_events() {
        let templates = Templates::new().unwrap();
        let mut pool = inputs(json!({}));
        pool.settings = config::validate(Some(&config::provider_config(
            json!({"profiles": [{"name": "fast", "platform": "kvm"}]}),
        )))
        .unwrap();
        let ds = &parse_all(&render_installation(&templates, &pool).unwrap())[0];
        let spec = &ds["spec"]["template"]["spec"];
        assert_eq!(spec["automountServiceAccountToken"], true);
        assert_eq!(
            spec["containers"][0]["env"][1],
            json!({"name": "GVISOR_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
        );
        let uninstall = &parse_all(&render_uninstall(&templates, &pool).unwrap())[0];
        assert_eq!(
            uninstall["spec"]["template"]["spec"]["automountServiceAccountToken"],
            false
        );

        let objects =
            parse_all(&render_runtime_classes(&templates, &[gvisor_class()], true).unwrap());
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["RuntimeClass", "ServiceAccount", "Role", "RoleBinding"]
        );
        assert_eq!(objects[2]["metadata"]["namespace"], "default");
        assert_eq!(
            objects[2]["rules"],
            json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}])
        );
        assert_eq!(
            objects[3]["subjects"],
            json!([{"kind": "ServiceAccount", "name": "gvisor", "namespace": "kube-system"}])
        );

        let plain = &parse_all(&render_installation(&templates, &inputs(json!({}))).unwrap())[0];
        assert_eq!(
            plain["spec"]["template"]["spec"]["automountServiceAccountToken"],
            false
        );
        assert_eq!(
            plain["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn installation_snapshot() {
        let templates = Templates::new().unwrap();
        let text = render_installation(
            &templates,
            &inputs(json!({"net-raw": "true", "debug": "true"})),
        )
        .unwrap();
        insta::assert_snapshot!(text);
    }

    #[test]
    fn installation_is_valid_yaml_with_the_expected_selector_and_command() {
        let templates = Templates::new().unwrap();
        let text = render_installation(&templates, &inputs(json!({"net-raw": "true"}))).unwrap();
        let objects = parse_all(&text);
        assert_eq!(objects.len(), 1);
        let ds = &objects[0];
        assert_eq!(ds["metadata"]["name"], "containerd-gvisor-worker-a");
        let selector = &ds["spec"]["template"]["spec"]["nodeSelector"];
        assert_eq!(selector["worker.gardener.cloud/cri-name"], "containerd");
        assert_eq!(selector["worker.gardener.cloud/pool"], "worker-a");
        assert_eq!(selector["worker.garden.sapcloud.io/group"], "worker-a");
        assert!(
            selector
                .get("containerruntime.worker.gardener.cloud/gvisor")
                .is_none()
        );
        let container = &ds["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"][1], "gvisor-install");
        assert_eq!(
            container["command"][3],
            "--bin-dir=/var/bin/containerruntimes"
        );
        assert_eq!(container["env"][0]["value"], "net-raw=true\n");
        assert_eq!(container["securityContext"]["privileged"], true);
        assert_eq!(
            ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"],
            "/"
        );
    }

    #[test]
    fn uninstall_snapshot() {
        let templates = Templates::new().unwrap();
        let text = render_uninstall(
            &templates,
            &inputs(json!({"net-raw": "true", "debug": "true"})),
        )
        .unwrap();
        insta::assert_snapshot!(text);
    }

    /// The uninstall DaemonSet is the installation DaemonSet with other commands, no flags,
    /// an init container and the mode label: everything GRM and the DaemonSet controller
    /// match on (name, selector, scheduling, image, privileges, mounts) is the same, so the
    /// update is in place and rolls node by node.
    #[test]
    fn uninstall_differs_from_the_installation_only_in_mode() {
        let templates = Templates::new().unwrap();
        let i = inputs(json!({"net-raw": "true"}));
        let install = parse_all(&render_installation(&templates, &i).unwrap()).remove(0);
        let uninstall = parse_all(&render_uninstall(&templates, &i).unwrap()).remove(0);
        assert_eq!(uninstall["metadata"]["name"], install["metadata"]["name"]);
        assert_eq!(
            uninstall["metadata"]["namespace"],
            install["metadata"]["namespace"]
        );
        assert_eq!(uninstall["spec"]["selector"], install["spec"]["selector"]);
        assert_eq!(
            uninstall["spec"]["updateStrategy"],
            install["spec"]["updateStrategy"]
        );
        assert_eq!(uninstall["metadata"]["labels"][LABEL_MODE], MODE_UNINSTALL);
        assert!(install["metadata"]["labels"].get(LABEL_MODE).is_none());
        let (u, i) = (&uninstall["spec"]["template"], &install["spec"]["template"]);
        assert_eq!(u["metadata"]["labels"][LABEL_MODE], MODE_UNINSTALL);
        assert!(
            u["metadata"].get("annotations").is_none(),
            "no flags checksum"
        );
        for field in [
            "nodeSelector",
            "tolerations",
            "priorityClassName",
            "serviceAccountName",
            "securityContext",
            "volumes",
        ] {
            assert_eq!(u["spec"][field], i["spec"][field], "{field}");
        }
        let main = &u["spec"]["containers"][0];
        let installer = &i["spec"]["containers"][0];
        for field in [
            "name",
            "image",
            "securityContext",
            "volumeMounts",
            "resources",
        ] {
            assert_eq!(main[field], installer[field], "{field}");
        }
        let command = |c: &serde_json::Value| -> Vec<String> {
            c["command"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect()
        };
        let mut expected = command(installer);
        expected.push("--uninstall".into());
        assert_eq!(command(main), expected, "same dirs, plus --uninstall");
        assert!(main.get("env").is_none(), "no runsc flags");
        let init = &u["spec"]["initContainers"][0];
        expected.push("--once".into());
        assert_eq!(command(init), expected);
        for field in ["image", "securityContext", "volumeMounts"] {
            assert_eq!(init[field], installer[field], "{field}");
        }
        assert_eq!(u["spec"]["initContainers"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_flag_change_changes_the_pod_template_checksum_and_nothing_else_is_random() {
        let templates = Templates::new().unwrap();
        let a = render_installation(
            &templates,
            &inputs(json!({"net-raw": "true", "nvproxy": "true"})),
        )
        .unwrap();
        let a_again = render_installation(
            &templates,
            &inputs(json!({"nvproxy": "true", "net-raw": "true"})),
        )
        .unwrap();
        let b = render_installation(
            &templates,
            &inputs(json!({"net-raw": "false", "nvproxy": "true"})),
        )
        .unwrap();
        assert_eq!(a, a_again, "same config, same bytes");
        let checksum = |t: &str| {
            parse_all(t)[0]["spec"]["template"]["metadata"]["annotations"]["checksum/runsc-flags"]
                .clone()
        };
        assert_ne!(checksum(&a), checksum(&b));
    }

    #[test]
    fn odd_characters_in_values_stay_valid_yaml() {
        let templates = Templates::new().unwrap();
        let mut i = inputs(json!({}));
        i.pool = "a: {b}".into();
        i.image = "x\"y\n#z".into();
        for text in [
            render_installation(&templates, &i).unwrap(),
            render_uninstall(&templates, &i).unwrap(),
        ] {
            let objects = parse_all(&text);
            assert_eq!(
                objects[0]["metadata"]["labels"]["worker.gardener.cloud/pool"],
                "a: {b}"
            );
            let spec = &objects[0]["spec"]["template"]["spec"];
            assert_eq!(spec["containers"][0]["image"], "x\"y\n#z");
        }
        let uninstall = parse_all(&render_uninstall(&templates, &i).unwrap());
        assert_eq!(
            uninstall[0]["spec"]["template"]["spec"]["initContainers"][0]["image"],
            "x\"y\n#z"
        );
    }
}
