//! Reconcile: validate the providerConfig (and that a `kvm` profile's pool may run it,
//! [`super::kvm`]), render, then apply the shared MR (the RuntimeClasses of every pool's
//! profiles, [`shared`]) and the pool's MR, then [`sweep`] the MRs of pools no
//! ContainerRuntime asks for any more. A configuration error is returned before anything is
//! written, so a bad spec never changes what is in the shoot. Does not wait for MR health (the shoot may be hibernated;
//! gardenlet evaluates shoot MRs itself).

use super::profiles::{self, PoolProfiles};
use super::render::{self, InstallationInputs};
use super::{
    Error, GVisorActuator, config, data, installation_managed_resource, kvm, shared, sweep,
};
use crate::api::ContainerRuntime;
use crate::extension::managed_resource;
use crate::extension::{Outcome, Request};
use crate::imagevector::{GVISOR_INSTALLATION, ImageVector};

/// The validated, rendered manifests of one ContainerRuntime (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The pool.
    pub pool: String,
    /// Manifests of the pool's MR.
    pub installation: String,
    /// The pool's profiles.
    pub profiles: PoolProfiles,
}

/// Validates and renders with the actuator's templates and images.
pub fn render(actuator: &GVisorActuator, object: &ContainerRuntime) -> Result<Rendered, Error> {
    render_parts(
        &actuator.templates,
        &actuator.images,
        actuator.options.test_repository.as_deref(),
        object,
    )
}

/// Validates and renders without any API access (also used by `render containerruntime`).
pub fn render_parts(
    templates: &render::Templates,
    images: &ImageVector,
    test_repository: Option<&str>,
    object: &ContainerRuntime,
) -> Result<Rendered, Error> {
    let settings =
        config::validate(object.spec.default.provider_config.as_ref()).map_err(Error::Config)?;
    let inputs = installation_inputs(images, test_repository, object, settings)?;
    let profiles = PoolProfiles {
        pool: inputs.pool.clone(),
        selector: inputs.pool_selector.clone(),
        settings: inputs.settings.clone(),
    };
    Ok(Rendered {
        pool: inputs.pool.clone(),
        installation: render::render_installation(templates, &inputs).map_err(Error::Render)?,
        profiles,
    })
}

/// The shared MR's manifests from the profiles of this one pool (`render containerruntime`;
/// the operator ships the RuntimeClasses of every pool's, [`shared`]).
pub fn render_shared_alone(
    templates: &render::Templates,
    pool: &PoolProfiles,
) -> Result<String, Error> {
    let classes = profiles::runtime_classes(std::slice::from_ref(pool)).map_err(Error::Profiles)?;
    let events = super::shared::refusal_events(std::slice::from_ref(pool));
    render::render_runtime_classes(templates, &classes, events).map_err(Error::Render)
}

/// The pool's uninstall DaemonSet ([`render::render_uninstall`]), without any API access.
/// Lenient on purpose, since a deletion must not hang on the spec: an invalid
/// `providerConfig` (the runsc flags do not matter for an uninstall) only loses its
/// `testImageTag`, so the image vector's installation image is used.
pub fn render_uninstall_parts(
    templates: &render::Templates,
    images: &ImageVector,
    test_repository: Option<&str>,
    object: &ContainerRuntime,
) -> Result<String, Error> {
    let settings =
        config::validate(object.spec.default.provider_config.as_ref()).unwrap_or_default();
    let inputs = installation_inputs(images, test_repository, object, settings)?;
    render::render_uninstall(templates, &inputs).map_err(Error::Render)
}

/// The inputs of the pool's DaemonSet: the image (the test repository with the
/// providerConfig's `testImageTag`, else the image vector's) and the pool.
fn installation_inputs(
    images: &ImageVector,
    test_repository: Option<&str>,
    object: &ContainerRuntime,
    settings: config::GVisorSettings,
) -> Result<InstallationInputs, Error> {
    let image = match (test_repository, &settings.test_image_tag) {
        (Some(repository), Some(tag)) if !repository.is_empty() => format!("{repository}:{tag}"),
        _ => images
            .get(GVISOR_INSTALLATION)
            .ok_or(Error::MissingImage(GVISOR_INSTALLATION))?
            .to_string(),
    };
    Ok(InstallationInputs {
        pool: object.spec.worker_pool.name.clone(),
        pool_selector: object
            .spec
            .worker_pool
            .selector
            .match_labels
            .clone()
            .unwrap_or_default(),
        image,
        bin_dir: object.spec.binary_path.clone(),
        settings,
    })
}

/// Refuses a `kvm` profile on a pool whose machine type the landscape does not list
/// ([`kvm`]); the machine type comes from the Cluster's Shoot.
fn check_kvm(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
    pool: &PoolProfiles,
) -> Result<(), Error> {
    let machine_type = request.cluster.and_then(|cluster| {
        cluster
            .shoot
            .spec
            .provider
            .workers
            .iter()
            .find(|worker| worker.name == pool.pool)
            .and_then(|worker| worker.machine.type_.as_deref())
    });
    let profiles = pool
        .settings
        .all_profiles()
        .map(|p| (p.name.as_deref(), p.platform == config::Platform::Kvm));
    kvm::check(
        profiles,
        &pool.pool,
        machine_type,
        &actuator.options.kvm_machine_types,
    )
    .map_err(Error::Kvm)
}

/// Applies both MRs with `keepObjects=false`. [`Outcome::Unchanged`] when neither MR nor
/// secret needed a write and the sweep found nothing.
pub async fn reconcile(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
) -> Result<Outcome, Error> {
    let rendered = render(actuator, request.object)?;
    check_kvm(actuator, request, &rendered.profiles)?;
    let namespace = request.namespace();
    let cache = actuator.seed_cache();
    let shared = shared::apply(
        actuator,
        namespace,
        request.name(),
        Some(&rendered.profiles),
    )
    .await?;
    let installation = managed_resource::apply_for_shoot(
        &actuator.client,
        cache,
        namespace,
        &installation_managed_resource(&rendered.pool),
        &data(&rendered.installation),
        false,
    )
    .await?;
    let swept = sweep::sweep(actuator, namespace).await?;
    if shared || installation || swept {
        tracing::info!(pool = %rendered.pool, "ManagedResources applied");
        Ok(Outcome::done())
    } else {
        tracing::debug!(pool = %rendered.pool, "ManagedResources unchanged");
        Ok(Outcome::Unchanged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imagevector::DEFAULT_IMAGES;
    use serde_json::json;

    fn container_runtime(provider_config: serde_json::Value) -> ContainerRuntime {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "ContainerRuntime",
            "metadata": {"name": "gvisor-p", "namespace": "shoot--a--b"},
            "spec": {
                "type": "gvisor",
                "binaryPath": "/var/bin/containerruntimes",
                "providerConfig": provider_config,
                "workerPool": {"name": "p", "selector": {"matchLabels": {
                    "worker.gardener.cloud/pool": "p"}}},
            },
        }))
        .unwrap()
    }

    fn config(extra: serde_json::Value) -> serde_json::Value {
        config::provider_config(extra)
    }

    fn image_of(text: &str) -> String {
        let ds: serde_json::Value = serde_norway::from_str(text).unwrap();
        ds["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A deletion must not hang on the spec: an invalid providerConfig blocks the
    /// installation but not the uninstall, which then uses the image vector's image.
    #[test]
    fn the_uninstall_renders_whatever_the_provider_config() {
        let templates = render::Templates::new().unwrap();
        let images = ImageVector::from_yaml(DEFAULT_IMAGES, None).unwrap();
        let default_image = images.get(GVISOR_INSTALLATION).unwrap().to_string();
        let repository = Some("registry.example/test");

        let invalid = container_runtime(config(
            json!({"configFlags": {"platform": "kvm"}, "testImageTag": "v9"}),
        ));
        assert!(matches!(
            render_parts(&templates, &images, repository, &invalid),
            Err(Error::Config(_))
        ));
        let text = render_uninstall_parts(&templates, &images, repository, &invalid).unwrap();
        assert!(text.contains("--uninstall"), "{text}");
        assert_eq!(image_of(&text), default_image);

        let test_image = container_runtime(config(json!({"testImageTag": "v9"})));
        let installation = render_parts(&templates, &images, repository, &test_image).unwrap();
        let uninstall =
            render_uninstall_parts(&templates, &images, repository, &test_image).unwrap();
        assert_eq!(
            image_of(&installation.installation),
            "registry.example/test:v9"
        );
        assert_eq!(
            image_of(&uninstall),
            "registry.example/test:v9",
            "same image"
        );
    }
}
