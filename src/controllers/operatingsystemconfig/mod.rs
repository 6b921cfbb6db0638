//! The OperatingSystemConfig controller for the OS types of `--os-types` (the OSC's
//! `spec.type` is the worker's machine image name; default `debian,ubuntu`).
//!
//! Per purpose (`docs/contract.md#purposes`):
//!
//! - `provision`: the spec's units and files become a bash user-data script ([`userdata`]),
//!   stored in the Secret `osc-result-<osc>` (or the one `status.cloudConfig.secretRef`
//!   already names) under `cloud_config`, controlled by the OSC; the status gets
//!   `cloudConfig.secretRef`. User data above 16 KiB is reported in the status description
//!   and as a Warning event.
//! - `reconcile`: no user data. The status gets the extension units/files of the OS type
//!   ([`extensions`]), and — while we ship them ([`handover`], `--node-agent-secrets`) — the
//!   node-agent config secret `kube-system/<key>` ([`nodeagent`]) goes into the shoot
//!   through the ManagedResource `extension-osc-<key>` (see
//!   [`nodeagent::managed_resource_name`] for why per key). Both reach gardenlet in one
//!   status patch with the Succeeded state.
//!
//! Layout: [`content`], [`userdata`], [`extensions`] and [`nodeagent`] are pure; [`fetch`]
//! reads referenced Secrets; [`user_data_secrets`] remembers the user-data Secrets we wrote; [`reconcile`], [`delete`], [`migrate`], [`restore`] are the
//! operations (one file each), and [`handover`] moves the node-agent secrets between
//! gardenlet and us when gardenlet's own ManagedResource for them comes or goes; runs read
//! the Cluster from the operator's cache, and [`budget_wake`] runs a namespace's OSCs again
//! when its pools' rollout budgets change.
//!
//! Errors a user must fix carry `ERR_CONFIGURATION_PROBLEM` (bad encoding, `imageRef` in a
//! provision OSC, invalid paths or unit names, a reconcile OSC without pool label). A missing
//! referenced Secret or key carries `ERR_RETRYABLE_CONFIGURATION_PROBLEM`: it may still appear
//! (gardenlet writes such Secrets itself; a restore re-creates them), so it is retried with
//! backoff instead of failing the shoot at once. API failures carry no code.

pub mod add;
pub mod budget_wake;
pub mod content;
pub mod delete;
pub mod extensions;
pub mod fetch;
pub mod handover;
pub mod migrate;
pub mod monitoring;
pub mod nodeagent;
pub mod os_update;
pub mod reconcile;
pub mod restore;
pub mod rollout;
pub mod user_data_secrets;
pub mod userdata;
pub mod validate;

use std::sync::Arc;

use kube::Client;

use crate::api::constants::DATA_KEY_CLOUD_CONFIG;
use crate::api::{ErrorCode, OperatingSystemConfig};
use crate::extension::cache::SeedCache;
use crate::extension::events::EventPublisher;
use crate::extension::managed_resource::ManagedResourceError;
use crate::extension::{Classify, Outcome, Request};

/// Prefix of the user-data Secret name.
pub const RESULT_SECRET_PREFIX: &str = "osc-result-";
/// Data key of the user data (re-exported for readers of this module).
pub const USER_DATA_KEY: &str = DATA_KEY_CLOUD_CONFIG;

/// Errors of the OperatingSystemConfig actuator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user data cannot be rendered.
    #[error("rendering the user data")]
    UserData(#[source] userdata::UserDataError),
    /// The node-agent secret cannot be rendered.
    #[error("rendering the node-agent secret")]
    NodeAgent(#[source] nodeagent::NodeAgentError),
    /// A Secret API call failed.
    #[error("{action} Secret {namespace}/{name}")]
    Secret {
        /// What we tried.
        action: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The view of the other ManagedResources is not there yet.
    #[error(
        "the seed's other ManagedResources are not listed yet; cannot tell whether one of them ships the node-agent secret"
    )]
    DeliveryUnknown,
    /// Listing (or reading) objects failed.
    #[error("reading {what} in namespace {namespace:?}")]
    List {
        /// What was listed or read.
        what: &'static str,
        /// The namespace (empty: all).
        namespace: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A ManagedResource operation failed.
    #[error("managing the node-agent ManagedResource")]
    ManagedResource(#[source] ManagedResourceError),
    /// The shoot monitoring objects cannot be rendered (a broken build, not the user's).
    #[error("rendering the shoot monitoring objects")]
    Monitoring(#[source] monitoring::rules::RenderError),
    /// Extension status fields do not serialise (a bug, not the user's).
    #[error("encoding the extension status")]
    Status(#[source] serde_json::Error),
    /// Units or files no node could apply (see [`validate`]).
    #[error("invalid units or files")]
    Spec(#[source] validate::SpecError),
    /// The in-place OS version cannot be given to the update script.
    #[error("in-place OS update")]
    OsVersion(#[source] os_update::InvalidOsVersion),
    /// The rendered content does not fit into a Secret.
    #[error(
        "the {what} is {bytes} bytes, more than a Secret can hold ({max} bytes){largest}",
        max = validate::MAX_SECRET_DATA_BYTES
    )]
    TooLarge {
        /// `user data` or `node-agent Secret`.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// `; the largest file is <path> (<n> bytes of inline data)`, or empty.
        largest: String,
    },
}

impl Classify for Error {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            Error::UserData(error) => error.codes(),
            Error::NodeAgent(error) => error.codes(),
            Error::ManagedResource(error) => error.codes(),
            Error::Secret { .. }
            | Error::Status(_)
            | Error::Monitoring(_)
            | Error::List { .. }
            | Error::DeliveryUnknown => Vec::new(),
            Error::Spec(_) | Error::TooLarge { .. } | Error::OsVersion(_) => {
                vec![ErrorCode::ConfigurationProblem]
            }
        }
    }

    fn category(&self) -> &'static str {
        match self {
            Error::UserData(_) => "user-data",
            Error::NodeAgent(_) => "node-agent-secret",
            Error::Secret { .. } => "secret",
            Error::List { .. } => "list",
            Error::DeliveryUnknown => "node-agent-delivery",
            Error::ManagedResource(_) => "managed-resource",
            Error::Status(_) => "status",
            Error::Monitoring(_) => "monitoring",
            Error::Spec(_) => "spec",
            Error::OsVersion(_) => "in-place",
            Error::TooLarge { .. } => "size",
        }
    }
}

impl From<ManagedResourceError> for Error {
    fn from(error: ManagedResourceError) -> Self {
        Error::ManagedResource(error)
    }
}

/// The OperatingSystemConfig actuator.
#[derive(Clone)]
pub struct OscActuator {
    client: Client,
    /// The operator's seed cache (our ManagedResources, the manifest secrets); `None` reads
    /// with GETs.
    cache: Option<SeedCache>,
    /// Our access Secrets of the rollout status ([`rollout::watch::access_secrets`]); `None`
    /// reads with GETs.
    access_secrets: Option<rollout::watch::AccessSecrets>,
    /// Our user-data Secrets' metadata ([`user_data_secrets`]); `None` applies them on every
    /// run and reads them with GETs.
    user_data_secrets: Option<user_data_secrets::UserDataSecrets>,
    events: EventPublisher,
    node_agent_secrets: handover::NodeAgentSecrets,
    claims: Arc<handover::claims::SecretClaims>,
}

impl OscActuator {
    /// Builds the actuator. `node_agent_secrets` is `--node-agent-secrets`: who ships the
    /// node-agent secret of reconcile OSCs ([`handover`]); run [`handover::run`] beside the
    /// controller, it feeds the actuator's view of the other ManagedResources.
    pub fn new(
        client: Client,
        cache: Option<SeedCache>,
        events: EventPublisher,
        node_agent_secrets: handover::NodeAgentSecrets,
    ) -> Self {
        OscActuator {
            client,
            cache,
            access_secrets: None,
            user_data_secrets: None,
            events,
            node_agent_secrets,
            claims: Arc::default(),
        }
    }

    /// Resolves once every view the runs read beside the caches holds its first list: the
    /// other ManagedResources' claims and the access and user-data Secret stores (part of
    /// the controller's readiness, so that runs right after start-up neither wait nor fall
    /// back to requests).
    pub async fn wait_synced(&self) {
        self.claims.wait_synced().await;
        if let Some(store) = &self.access_secrets {
            store.wait_synced().await;
        }
        if let Some(store) = &self.user_data_secrets {
            store.wait_synced().await;
        }
    }

    /// Reads the access Secrets from `store` instead of with GETs.
    pub fn with_access_secrets(mut self, store: rollout::watch::AccessSecrets) -> Self {
        self.access_secrets = Some(store);
        self
    }

    /// Reads the user-data Secrets' metadata from `store` ([`user_data_secrets::start`]).
    pub fn with_user_data_secrets(mut self, store: user_data_secrets::UserDataSecrets) -> Self {
        self.user_data_secrets = Some(store);
        self
    }

    /// Whether we ship the node-agent secret of the `reconcile` OSC `osc` now: the mode
    /// says so, and (in `auto`) no other ManagedResource manages `kube-system/<key>`.
    pub async fn ships_node_agent_secret(
        &self,
        osc: &OperatingSystemConfig,
    ) -> Result<bool, Error> {
        let namespace = osc.metadata.namespace.as_deref().unwrap_or_default();
        let key = nodeagent::key_of(osc.metadata.name.as_deref().unwrap_or_default());
        Ok(self.ships_secret(namespace, key).await?.0)
    }

    /// Whether we ship the shoot Secret `kube-system/<key>` of `namespace` now, with the
    /// other ManagedResource that manages it (asked in `auto` mode only).
    pub async fn ships_secret(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<(bool, Option<String>), Error> {
        let owner = match self.node_agent_secrets {
            handover::NodeAgentSecrets::Auto => self.claims.owner(namespace, key).await?,
            _ => None,
        };
        Ok((self.node_agent_secrets.we_ship(owner.is_some()), owner))
    }
}

/// Name and namespace of the user-data Secret of `osc`: what `status.cloudConfig.secretRef`
/// names (an empty namespace meaning the OSC's), else `osc-result-<name>` in its namespace.
pub fn result_secret_ref(osc: &OperatingSystemConfig) -> (String, String) {
    let own_namespace = osc.metadata.namespace.clone().unwrap_or_default();
    let reference = osc
        .status
        .as_ref()
        .and_then(|status| status.cloud_config.as_ref())
        .map(|cloud_config| &cloud_config.secret_ref)
        .filter(|reference| !reference.name.is_empty());
    match reference {
        Some(reference) => (
            reference.name.clone(),
            reference
                .namespace
                .clone()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(own_namespace),
        ),
        None => (
            format!(
                "{RESULT_SECRET_PREFIX}{}",
                osc.metadata.name.as_deref().unwrap_or_default()
            ),
            own_namespace,
        ),
    }
}

/// The key of `osc` ([`nodeagent::key_of`]): its node-agent secret's name.
pub fn osc_key(osc: &OperatingSystemConfig) -> &str {
    nodeagent::key_of(osc.metadata.name.as_deref().unwrap_or_default())
}

/// The node-agent ManagedResource of a `reconcile` OSC ([`nodeagent::managed_resource_name`]).
pub fn node_agent_managed_resource(osc: &OperatingSystemConfig) -> String {
    nodeagent::managed_resource_name(nodeagent::key_of(
        osc.metadata.name.as_deref().unwrap_or_default(),
    ))
}

impl crate::extension::Actuator for OscActuator {
    type Object = OperatingSystemConfig;
    type Error = Error;

    async fn reconcile(
        &self,
        request: &Request<'_, OperatingSystemConfig>,
    ) -> Result<Outcome, Error> {
        reconcile::reconcile(self, request).await
    }

    async fn delete(&self, request: &Request<'_, OperatingSystemConfig>) -> Result<Outcome, Error> {
        delete::delete(self, request, true).await
    }

    async fn force_delete(
        &self,
        request: &Request<'_, OperatingSystemConfig>,
    ) -> Result<Outcome, Error> {
        delete::delete(self, request, false).await
    }

    async fn migrate(
        &self,
        request: &Request<'_, OperatingSystemConfig>,
    ) -> Result<Outcome, Error> {
        migrate::migrate(self, request).await
    }

    async fn restore(
        &self,
        request: &Request<'_, OperatingSystemConfig>,
    ) -> Result<Outcome, Error> {
        restore::restore(self, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::SecretReference;
    use crate::api::operatingsystemconfig::{CloudConfig, OperatingSystemConfigStatus};

    fn osc(status: Option<OperatingSystemConfigStatus>) -> OperatingSystemConfig {
        let mut osc: OperatingSystemConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "OperatingSystemConfig",
            "metadata": {"name": "pool-a-init", "namespace": "shoot--p--s"},
            "spec": {"type": "debian", "purpose": "provision"}
        }))
        .unwrap();
        osc.status = status;
        osc
    }

    fn with_ref(name: &str, namespace: Option<&str>) -> Option<OperatingSystemConfigStatus> {
        Some(OperatingSystemConfigStatus {
            cloud_config: Some(CloudConfig {
                secret_ref: SecretReference {
                    name: name.into(),
                    namespace: namespace.map(String::from),
                },
            }),
            ..Default::default()
        })
    }

    #[test]
    fn result_secret_defaults_to_osc_result_name() {
        assert_eq!(
            result_secret_ref(&osc(None)),
            ("osc-result-pool-a-init".into(), "shoot--p--s".into())
        );
    }

    #[test]
    fn result_secret_reuses_the_status_reference() {
        assert_eq!(
            result_secret_ref(&osc(with_ref("custom", Some("elsewhere")))),
            ("custom".into(), "elsewhere".into())
        );
        assert_eq!(
            result_secret_ref(&osc(with_ref("custom", None))),
            ("custom".into(), "shoot--p--s".into())
        );
        assert_eq!(
            result_secret_ref(&osc(with_ref("", None))).0,
            "osc-result-pool-a-init"
        );
    }

    #[test]
    fn classification() {
        let missing = Error::UserData(userdata::UserDataError::Content(
            content::ContentError::MissingSecret {
                path: "/x".into(),
                secret: "s".into(),
            },
        ));
        assert!(!missing.is_configuration_problem());
        assert_eq!(
            missing.codes(),
            vec![ErrorCode::RetryableConfigurationProblem]
        );
        let image = Error::UserData(userdata::UserDataError::ImageRef {
            path: "/x".into(),
            image: "i".into(),
        });
        assert!(image.is_configuration_problem());
        assert_eq!(image.category(), "user-data");
    }
}
