use super::*;

fn profile(extra: Value) -> Value {
    let mut profile = json!({
        "spec": {
            "type": "local",
            "machineTypes": [{"name": "local", "capabilities": {"architecture": ["amd64"]}}],
            "providerConfig": {
                "apiVersion": API_VERSION,
                "kind": "CloudProfileConfig",
                "machineImages": [{"name": "debian", "versions": [
                    {"version": "13.2", "image": "registry.local/node:13.2"},
                    {"version": "13.3", "image": "registry.local/node:13.3", "capabilityFlavors": [
                        {"image": "registry.local/node:13.3-arm", "capabilities": {"architecture": ["arm64"]}},
                        {"image": "registry.local/node:13.3-amd", "capabilities": {"architecture": ["amd64"]}},
                    ]},
                ]}]
            }
        }
    });
    if let (Some(spec), Value::Object(extra)) = (profile["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    profile
}

fn lookup(
    profile: &Value,
    status: Option<&Value>,
    version: &str,
) -> Result<ResolvedImage, ImageError> {
    let sources = Sources {
        cloud_profile: Some(profile),
        provider_status: status,
    };
    resolve(sources, "debian", version, "local")
}

#[test]
fn without_capability_definitions_the_version_image_is_taken() {
    let image = lookup(&profile(json!({})), None, "13.2").unwrap();
    assert_eq!(image.image, "registry.local/node:13.2");
    assert!(image.capabilities.is_empty());
    // The legacy field wins even when flavors are listed.
    let image = lookup(&profile(json!({})), None, "13.3").unwrap();
    assert_eq!(image.image, "registry.local/node:13.3");
}

#[test]
fn with_capability_definitions_the_compatible_flavor_is_taken() {
    let definitions =
        json!({"machineCapabilities": [{"name": "architecture", "values": ["amd64", "arm64"]}]});
    let image = lookup(&profile(definitions), None, "13.3").unwrap();
    assert_eq!(image.image, "registry.local/node:13.3-amd");
    assert_eq!(image.capabilities["architecture"], ["amd64"]);
}

#[test]
fn the_most_preferred_value_decides_between_compatible_flavors() {
    let flavors = [
        Flavor {
            image: "a".into(),
            capabilities: BTreeMap::from([("x".into(), vec!["2".into()])]),
        },
        Flavor {
            image: "b".into(),
            capabilities: BTreeMap::from([("x".into(), vec!["1".into(), "2".into()])]),
        },
    ];
    let definitions = vec![CapabilityDefinition {
        name: "x".into(),
        values: vec!["1".into(), "2".into()],
    }];
    // The machine type says nothing: every value is supported, "1" is preferred.
    let best = best_flavor(&flavors, &Capabilities::new(), &definitions).unwrap();
    assert_eq!(best.image, "b");
    // Two identical flavors cannot be told apart.
    let twins = [flavors[0].clone(), flavors[0].clone()];
    assert!(best_flavor(&twins, &Capabilities::new(), &definitions).is_err());
}

#[test]
fn a_version_the_cloud_profile_dropped_keeps_the_image_of_the_provider_status() {
    let status = provider_status(&[ResolvedImage {
        name: "debian".into(),
        version: "12.9".into(),
        image: "registry.local/node:12.9".into(),
        capabilities: Capabilities::new(),
    }]);
    let image = lookup(&profile(json!({})), Some(&status), "12.9").unwrap();
    assert_eq!(image.image, "registry.local/node:12.9");
}

#[test]
fn an_unknown_version_names_itself() {
    let error = lookup(&profile(json!({})), None, "99").unwrap_err();
    assert_eq!(
        error.to_string(),
        "machine image \"debian\" in version \"99\" is not listed in the CloudProfile's providerConfig.machineImages (nor in the Worker's providerStatus)"
    );
    let definitions = json!({"machineCapabilities": [{"name": "architecture", "values": ["amd64", "arm64"]}],
        "machineTypes": [{"name": "local", "capabilities": {"architecture": ["s390x"]}}]});
    let error = lookup(&profile(definitions), None, "13.3").unwrap_err();
    assert!(
        error.to_string().ends_with(
            "; no capability flavor of the version fits the machine type's capabilities"
        ),
        "{error}"
    );
}

#[test]
fn a_malformed_cloud_profile_config_is_an_error_not_a_miss() {
    let bad = json!({"spec": {"providerConfig": {"machineImages": "debian"}}});
    assert!(matches!(
        lookup(&bad, None, "13.2"),
        Err(ImageError::BadCloudProfileConfig(_))
    ));
    // No providerConfig at all: nothing is listed.
    assert!(matches!(
        lookup(&json!({"spec": {}}), None, "13.2"),
        Err(ImageError::NotFound { .. })
    ));
}

#[test]
fn the_provider_status_lists_each_image_once() {
    let one = ResolvedImage {
        name: "debian".into(),
        version: "13.2".into(),
        image: "i".into(),
        capabilities: Capabilities::new(),
    };
    let status = provider_status(&[one.clone(), one]);
    assert_eq!(
        status,
        json!({"apiVersion": API_VERSION, "kind": "WorkerStatus",
            "machineImages": [{"name": "debian", "version": "13.2", "image": "i"}]})
    );
}
