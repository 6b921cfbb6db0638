//! The Cluster of an extension object (name = the object's namespace) and the shoot it
//! embeds, plus the shoot-namespace check of the ShootNotFailed precondition.

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

use super::cache::SeedCache;
use super::error::ReconcilerError;
use super::finalizer::is_not_found;
use crate::api::constants::{LABEL_ROLE, ROLE_SHOOT};
use crate::api::{Cluster, ShootView};

/// A Cluster with its decoded shoot.
#[derive(Debug, Clone)]
pub struct ClusterContext {
    /// The Cluster object.
    pub cluster: Cluster,
    /// The lenient view of `spec.shoot`.
    pub shoot: ShootView,
}

impl ClusterContext {
    /// Decodes the shoot of `cluster`.
    pub fn new(cluster: Cluster) -> Result<Self, ReconcilerError> {
        let shoot = cluster
            .shoot()
            .map_err(|source| ReconcilerError::ShootDecode {
                name: cluster.metadata.name.clone().unwrap_or_default(),
                source,
            })?;
        Ok(ClusterContext { cluster, shoot })
    }
}

/// Reads the Cluster named `namespace`: from the cache when it holds it, else with a GET (a
/// Cluster created a moment ago may not be in the store yet). A missing Cluster is an error
/// in a shoot namespace (`gardener.cloud/role=shoot`) and `None` elsewhere (objects in e.g.
/// `garden` have none).
pub async fn lookup(
    client: &Client,
    cache: Option<&SeedCache>,
    namespace: &str,
) -> Result<Option<ClusterContext>, ReconcilerError> {
    if let Some(cluster) = cache.and_then(|c| c.cluster(namespace)) {
        return ClusterContext::new((*cluster).clone()).map(Some);
    }
    let clusters: Api<Cluster> = Api::all(client.clone());
    match clusters.get(namespace).await {
        Ok(cluster) => ClusterContext::new(cluster).map(Some),
        Err(error) if is_not_found(&error) => {
            if is_shoot_namespace(client, namespace).await? {
                Err(ReconcilerError::ClusterMissing {
                    name: namespace.to_string(),
                })
            } else {
                Ok(None)
            }
        }
        Err(error) => Err(ReconcilerError::Cluster {
            name: namespace.to_string(),
            source: Box::new(error),
        }),
    }
}

/// Whether `namespace` carries `gardener.cloud/role=shoot`.
pub async fn is_shoot_namespace(client: &Client, namespace: &str) -> Result<bool, ReconcilerError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get_opt(namespace).await {
        Ok(found) => Ok(found
            .and_then(|n| n.metadata.labels)
            .is_some_and(|l| l.get(LABEL_ROLE).map(String::as_str) == Some(ROLE_SHOOT))),
        Err(source) => Err(ReconcilerError::Namespace {
            name: namespace.to_string(),
            source: Box::new(source),
        }),
    }
}
