//! Reconcile: validate the providerConfig, render, then apply the shared MR and the pool's
//! MR, then [`sweep`] the MRs of pools no ContainerRuntime asks for any more. A configuration error is returned before anything is written, so a bad spec never
//! changes what is in the shoot. Does not wait for MR health (the shoot may be hibernated;
//! gardenlet evaluates shoot MRs itself).

use std::collections::BTreeMap;

use super::render::{self, InstallationInputs};
use super::{
    DATA_KEY, Error, GVisorActuator, SHARED_MANAGED_RESOURCE, config,
    installation_managed_resource, sweep,
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
    /// Manifests of the shared MR.
    pub shared: String,
    /// Manifests of the pool's MR.
    pub installation: String,
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
    Ok(Rendered {
        pool: inputs.pool.clone(),
        shared: render::render_runtime_class(templates).map_err(Error::Render)?,
        installation: render::render_installation(templates, &inputs).map_err(Error::Render)?,
    })
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

/// The data of a pool's or the shared MR secret: the manifests under [`DATA_KEY`].
pub(super) fn data(manifests: &str) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([(DATA_KEY.to_string(), manifests.as_bytes().to_vec())])
}

/// Applies both MRs with `keepObjects=false`. [`Outcome::Unchanged`] when neither MR nor
/// secret needed a write and the sweep found nothing.
pub async fn reconcile(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
) -> Result<Outcome, Error> {
    let rendered = render(actuator, request.object)?;
    let namespace = request.namespace();
    let cache = actuator.seed_cache();
    let shared = managed_resource::apply_for_shoot(
        &actuator.client,
        cache,
        namespace,
        SHARED_MANAGED_RESOURCE,
        &data(&rendered.shared),
        false,
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
        let mut config = json!({
            "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
            "kind": "GVisorConfiguration",
        });
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        config
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
