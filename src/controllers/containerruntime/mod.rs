//! The ContainerRuntime controller for type `gvisor`: ships the gVisor RuntimeClass and a
//! per-pool installation DaemonSet into the shoot through ManagedResources.
//!
//! - [`config`] validates the `providerConfig` (pure), [`kvm`] which pools may run the `kvm`
//!   platform (pure), [`profiles`] the shoot's RuntimeClasses from every pool's profiles
//!   (pure);
//! - [`render`] renders the manifests from the embedded templates (pure);
//! - [`reconcile`], [`delete`], [`migrate`], [`restore`]: one operation each, the I/O;
//!   [`shared`] applies the shared MR for both reconcile and delete.
//!
//! ManagedResources (names as upstream runtime-gvisor, so it can be replaced in place):
//! `extension-runtime-gvisor` (shared by all pools of a shoot) and
//! `extension-runtime-gvisor-installation-<pool>`. While a ContainerRuntime is deleted, the
//! pool's ManagedResource first carries the uninstall DaemonSet ([`delete`]).

pub mod add;
pub mod config;
pub mod delete;
pub mod kvm;
pub mod migrate;
pub mod profiles;
pub mod reconcile;
pub mod render;
pub mod restore;
pub mod shared;
pub mod sweep;

use std::time::Duration;

use kube::Client;

use crate::api::{ContainerRuntime, ErrorCode};
use crate::extension::cache::{ObjectStore, SeedCache};
use crate::extension::events::EventPublisher;
use crate::extension::managed_resource::ManagedResourceError;
use crate::extension::{Classify, Outcome, Request};
use crate::imagevector::ImageVector;

/// The ContainerRuntime type this controller handles.
pub const TYPE: &str = "gvisor";
/// The shared ManagedResource.
pub const SHARED_MANAGED_RESOURCE: &str = "extension-runtime-gvisor";
/// Data key of the manifests in the MR secrets.
pub const DATA_KEY: &str = "config.yaml";

/// Prefix of the pools' installation ManagedResources.
pub const INSTALLATION_MANAGED_RESOURCE_PREFIX: &str = "extension-runtime-gvisor-installation-";

/// The data of a pool's or the shared MR secret: the manifests under [`DATA_KEY`].
fn data(manifests: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::collections::BTreeMap::from([(DATA_KEY.to_string(), manifests.as_bytes().to_vec())])
}

/// Name of a pool's installation ManagedResource.
pub fn installation_managed_resource(pool: &str) -> String {
    format!("{INSTALLATION_MANAGED_RESOURCE_PREFIX}{pool}")
}

/// Errors of the gVisor actuator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The providerConfig is invalid (the user must fix the Shoot).
    #[error("invalid providerConfig")]
    Config(#[source] config::ConfigError),
    /// The pools' profiles cannot become one set of RuntimeClasses (the user must fix the
    /// Shoot).
    #[error("the gVisor profiles of the shoot's pools conflict")]
    Profiles(#[source] profiles::Conflict),
    /// A `kvm` profile on a pool that may not run it.
    #[error("platform kvm refused")]
    Kvm(#[source] kvm::KvmRefused),
    /// Rendering failed.
    #[error("rendering the shoot manifests")]
    Render(#[source] render::RenderError),
    /// The image vector lacks the installation image.
    #[error("the image vector has no image {0:?}")]
    MissingImage(&'static str),
    /// A ManagedResource operation failed.
    #[error("managing ManagedResources")]
    ManagedResource(#[source] ManagedResourceError),
    /// Listing the namespace's ContainerRuntimes failed.
    #[error("listing ContainerRuntimes in {namespace}")]
    List {
        /// Namespace.
        namespace: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
}

impl Classify for Error {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            Error::Config(_) | Error::Profiles(_) | Error::Kvm(_) => {
                vec![ErrorCode::ConfigurationProblem]
            }
            Error::ManagedResource(error) => error.codes(),
            _ => Vec::new(),
        }
    }

    fn category(&self) -> &'static str {
        match self {
            Error::Config(_) | Error::Profiles(_) | Error::Kvm(_) => "configuration",
            Error::Render(_) | Error::MissingImage(_) => "render",
            Error::ManagedResource(_) => "managed-resource",
            Error::List { .. } => "list",
        }
    }
}

impl From<ManagedResourceError> for Error {
    fn from(error: ManagedResourceError) -> Self {
        Error::ManagedResource(error)
    }
}

/// Operator options of the gVisor controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `--gvisor-installation-test-repository`: together with a `testImageTag` in the
    /// providerConfig it replaces the installation image.
    pub test_repository: Option<String>,
    /// `--gvisor-uninstall-timeout-seconds`: how long a deletion waits for the uninstall on
    /// the pool's nodes, from the ContainerRuntime's deletion timestamp; zero turns the
    /// uninstall off ([`delete`]).
    pub uninstall_timeout: Duration,
    /// `--gvisor-kvm-machine-types`: the machine types (`*` for any text) that offer
    /// `/dev/kvm`, where a profile may ask for the `kvm` platform ([`kvm`]).
    pub kvm_machine_types: Vec<String>,
}

/// The part of a stored ContainerRuntime `GVisorActuator::runtimes` reads: decoded
/// leniently, so one object our types reject does not hide its siblings.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredParts {
    spec: StoredSpec,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StoredSpec {
    #[serde(rename = "type")]
    type_: Option<String>,
    worker_pool: Option<StoredPool>,
    provider_config: Option<serde_json::Value>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredPool {
    name: Option<String>,
    selector: StoredSelector,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StoredSelector {
    match_labels: Option<std::collections::BTreeMap<String, String>>,
}

/// What the actuator reads instead of asking the API server: the operator's [`SeedCache`]
/// and the store of ContainerRuntimes the controller's watch keeps.
#[derive(Clone)]
pub struct Caches {
    /// Clusters, our ManagedResources, the manifest secrets.
    pub seed: SeedCache,
    /// The ContainerRuntimes.
    pub runtimes: ObjectStore,
}

/// The gVisor actuator: the client, the parsed templates, the image vector, the event
/// publisher, the options and (in the operator) the caches.
#[derive(Clone)]
pub struct GVisorActuator {
    client: Client,
    templates: render::Templates,
    images: ImageVector,
    events: EventPublisher,
    options: Options,
    caches: Option<Caches>,
}

impl GVisorActuator {
    /// Builds the actuator; without `caches` it reads with GETs and lists.
    pub fn new(
        client: Client,
        templates: render::Templates,
        images: ImageVector,
        events: EventPublisher,
        options: Options,
        caches: Option<Caches>,
    ) -> Self {
        GVisorActuator {
            client,
            templates,
            images,
            events,
            options,
            caches,
        }
    }

    fn seed_cache(&self) -> Option<&SeedCache> {
        self.caches.as_ref().map(|c| &c.seed)
    }

    /// The gvisor ContainerRuntimes of `namespace`: from the controller's store, or without
    /// one from a list.
    async fn runtimes(&self, namespace: &str) -> Result<Vec<Runtime>, Error> {
        if let Some(caches) = &self.caches {
            return Ok(caches
                .runtimes
                .in_namespace(namespace)
                .into_iter()
                .filter_map(|(name, stored)| {
                    let parts: StoredParts = stored.decode().ok()?;
                    let pool = parts.spec.worker_pool?;
                    Some(Runtime {
                        name,
                        pool: pool.name?,
                        selector: pool.selector.match_labels.unwrap_or_default(),
                        provider_config: parts.spec.provider_config,
                        deleting: stored.deleting,
                    })
                    .filter(|_| parts.spec.type_.as_deref() == Some(TYPE))
                })
                .collect());
        }
        let api: kube::Api<ContainerRuntime> =
            kube::Api::namespaced(self.client.clone(), namespace);
        Ok(api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(|source| Error::List {
                namespace: namespace.to_string(),
                source: Box::new(source),
            })?
            .items
            .into_iter()
            .filter(|r| r.spec.default.type_ == TYPE)
            .map(|r| Runtime {
                deleting: r.metadata.deletion_timestamp.is_some(),
                name: r.metadata.name.unwrap_or_default(),
                pool: r.spec.worker_pool.name,
                selector: r.spec.worker_pool.selector.match_labels.unwrap_or_default(),
                provider_config: r.spec.default.provider_config,
            })
            .collect())
    }
}

/// What the sweep, the shared MR and the deletion need of a gvisor ContainerRuntime.
#[derive(Debug, Clone, PartialEq)]
struct Runtime {
    name: String,
    pool: String,
    /// `spec.workerPool.selector.matchLabels`.
    selector: std::collections::BTreeMap<String, String>,
    /// `spec.providerConfig`, not validated.
    provider_config: Option<serde_json::Value>,
    deleting: bool,
}

impl crate::extension::Actuator for GVisorActuator {
    type Object = ContainerRuntime;
    type Error = Error;

    async fn reconcile(&self, request: &Request<'_, ContainerRuntime>) -> Result<Outcome, Error> {
        reconcile::reconcile(self, request).await
    }

    async fn delete(&self, request: &Request<'_, ContainerRuntime>) -> Result<Outcome, Error> {
        delete::delete(self, request, true).await
    }

    async fn force_delete(
        &self,
        request: &Request<'_, ContainerRuntime>,
    ) -> Result<Outcome, Error> {
        delete::delete(self, request, false).await
    }

    async fn migrate(&self, request: &Request<'_, ContainerRuntime>) -> Result<Outcome, Error> {
        migrate::migrate(self, request).await
    }

    async fn restore(&self, request: &Request<'_, ContainerRuntime>) -> Result<Outcome, Error> {
        restore::restore(self, request).await
    }
}
