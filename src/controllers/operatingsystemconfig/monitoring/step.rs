//! Keeps a shoot namespace's monitoring ManagedResource ([`super`]) in step with the
//! node-agent ManagedResources we ship there (I/O). Called after a run changed (or kept) its
//! own node-agent ManagedResource; the keys are read from the seed cache (our own recent
//! writes included) under a per-namespace lock, so two OSCs of one shoot running at once
//! cannot write a list that misses the other's key.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use tracing::{info, warn};

use super::rules;
use crate::api::ManagedResource;
use crate::api::constants::GENERIC_TOKEN_KUBECONFIG_SECRET_NAME;
use crate::controllers::operatingsystemconfig::{Error, OscActuator};
use crate::extension::managed_resource;

/// The lock name (beside the MR's own) that serialises computing and applying the list.
const LOCK: &str = "extension-node-monitoring/keys";

/// Brings the monitoring MR of `namespace` in step: `key`'s node-agent MR stays (`shipping`)
/// or goes. No key left: the MR is deleted (the seed's resource manager removes its
/// objects). The shoot API server's CA comes from gardenlet's generic token kubeconfig (one
/// GET per call); while it is missing the MR is left as it is, with a log line.
pub async fn keep_in_step(
    actuator: &OscActuator,
    namespace: &str,
    key: &str,
    shipping: bool,
) -> Result<(), Error> {
    let _turn = match actuator.cache.as_ref() {
        Some(cache) => Some(cache.lock(namespace, LOCK).await),
        None => None,
    };
    let mut keys = rules::keys_of(&managed_resource_names(actuator, namespace).await?);
    if shipping {
        keys.insert(key.to_string());
    } else {
        keys.remove(key);
    }
    let cache = actuator.cache.as_ref();
    if keys.is_empty() {
        let gone =
            managed_resource::delete(&actuator.client, cache, namespace, rules::MANAGED_RESOURCE)
                .await?;
        if gone {
            info!(%namespace, managed_resource = rules::MANAGED_RESOURCE, "no node agent of ours left in the shoot: its monitoring goes");
        }
        return Ok(());
    }
    let Some(ca_data) = shoot_ca(actuator, namespace).await? else {
        return Ok(());
    };
    let data = rules::render(namespace, &keys, &ca_data).map_err(Error::Monitoring)?;
    let written = managed_resource::apply_for_seed(
        &actuator.client,
        cache,
        namespace,
        rules::MANAGED_RESOURCE,
        &data,
    )
    .await?;
    if written {
        info!(%namespace, managed_resource = rules::MANAGED_RESOURCE, keys = ?keys, "shoot monitoring of the node agents applied");
    }
    Ok(())
}

async fn managed_resource_names(
    actuator: &OscActuator,
    namespace: &str,
) -> Result<Vec<String>, Error> {
    if let Some(cache) = actuator.cache.as_ref() {
        return Ok(cache.known_managed_resource_names(namespace));
    }
    let list = Api::<ManagedResource>::namespaced(actuator.client.clone(), namespace)
        .list_metadata(&ListParams::default())
        .await
        .map_err(|source| Error::List {
            what: "ManagedResources",
            namespace: namespace.to_string(),
            source: Box::new(source),
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|mr| mr.metadata.deletion_timestamp.is_none())
        .filter_map(|mr| mr.metadata.name)
        .collect())
}

/// The shoot API server's CA (base64 of PEM) from the generic token kubeconfig that the
/// Cluster names; `None` (logged) while it is missing or unusable.
async fn shoot_ca(actuator: &OscActuator, namespace: &str) -> Result<Option<String>, Error> {
    let name = actuator
        .cache
        .as_ref()
        .and_then(|cache| cache.cluster(namespace))
        .map(|cluster| cluster.generic_token_kubeconfig_secret_name().to_string())
        .unwrap_or_else(|| GENERIC_TOKEN_KUBECONFIG_SECRET_NAME.to_string());
    let secret = Api::<Secret>::namespaced(actuator.client.clone(), namespace)
        .get_opt(&name)
        .await
        .map_err(|source| Error::Secret {
            action: "reading",
            namespace: namespace.to_string(),
            name: name.clone(),
            source: Box::new(source),
        })?;
    let yaml = secret
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("kubeconfig"))
        .and_then(|k| String::from_utf8(k.0.clone()).ok());
    let Some(yaml) = yaml else {
        warn!(%namespace, secret = %name, "no generic token kubeconfig: the shoot monitoring of the node agents waits for it");
        return Ok(None);
    };
    let origin = format!("Secret {namespace}/{name}");
    match crate::kubeconfig::shoot_endpoint(&yaml, &origin) {
        Ok(endpoint) if is_base64(&endpoint.certificate_authority_data) => {
            Ok(Some(endpoint.certificate_authority_data))
        }
        Ok(_) => {
            warn!(%namespace, secret = %name, "the generic token kubeconfig's certificate-authority-data is no base64: the shoot monitoring of the node agents waits for a usable one");
            Ok(None)
        }
        Err(error) => {
            warn!(%namespace, secret = %name, error = %crate::error_chain::printable(&error), "the generic token kubeconfig is unusable: the shoot monitoring of the node agents waits for a usable one");
            Ok(None)
        }
    }
}

fn is_base64(data: &str) -> bool {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .is_ok_and(|pem| !pem.is_empty())
}
