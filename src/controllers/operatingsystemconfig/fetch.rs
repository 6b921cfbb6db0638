//! Reads the Secrets an OperatingSystemConfig's files reference (I/O), from the OSC's
//! namespace, into [`ReferencedSecrets`] for the pure renderers. A Secret that does not exist
//! is simply left out: the renderer reports it with the file that needs it.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::Error;
use super::content::{ReferencedSecrets, SecretData, referenced_secret_names};
use crate::api::operatingsystemconfig::File;

/// Reads every Secret referenced by `files` (each once).
pub async fn referenced_secrets<'a>(
    client: &Client,
    namespace: &str,
    files: impl IntoIterator<Item = &'a File>,
) -> Result<ReferencedSecrets, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secrets = ReferencedSecrets::default();
    for name in referenced_secret_names(files) {
        let secret = api.get_opt(&name).await.map_err(|source| Error::Secret {
            action: "reading",
            namespace: namespace.to_string(),
            name: name.clone(),
            source: Box::new(source),
        })?;
        if let Some(secret) = secret {
            secrets.insert(name, secret_data(&secret));
        }
    }
    Ok(secrets)
}

/// `data` and `stringData` of a Secret (`stringData` wins, as the API server merges it).
pub fn secret_data(secret: &Secret) -> SecretData {
    let mut data: SecretData = secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), value.0.clone()))
        .collect();
    data.extend(
        secret
            .string_data
            .iter()
            .flatten()
            .map(|(key, value)| (key.clone(), value.as_bytes().to_vec())),
    );
    data
}
