//! The watch that feeds [`super::claims::SecretClaims`]: every ManagedResource of the seed
//! that is not ours (label selector `origin!=<ours>`; ours are in the seed cache). Only the
//! claims are kept, never the objects, and a namespace is reported to the hand-over loop
//! ([`super::run`]) only when its claims change, not on every status write of
//! gardener-resource-manager.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;

use super::claims::{ClaimsByNamespace, SecretClaims, claim_of};
use crate::api::ManagedResource;
use crate::api::constants::ORIGIN;

/// What the hand-over loop is told: `None` once the first list is in, then each namespace
/// whose claims changed.
pub type Change = Option<String>;

/// Runs until the stream ends (the task is aborted on shutdown).
pub async fn watch_other_managed_resources(
    client: kube::Client,
    claims: Arc<SecretClaims>,
    changes: mpsc::UnboundedSender<Change>,
) {
    let api: Api<ManagedResource> = Api::all(client);
    let config = watcher::Config::default().labels(&format!("origin!={ORIGIN}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut relisted: Option<ClaimsByNamespace> = None;
    let mut first = true;
    loop {
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "watch of the other ManagedResources failed; retrying");
                continue;
            }
        };
        let changed = match event {
            Event::Init => {
                relisted = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(mr) => {
                if let (Some(seen), Some(claim)) = (relisted.as_mut(), claim_of(&mr)) {
                    let by_name = seen.entry(mr.namespace().unwrap_or_default()).or_default();
                    by_name.insert(mr.name_any(), claim);
                }
                Vec::new()
            }
            Event::InitDone => {
                let changed = relisted.take().map(|seen| claims.replace(seen));
                if first {
                    first = false;
                    claims.mark_synced();
                    let _ = changes.send(None);
                    continue;
                }
                changed.unwrap_or_default()
            }
            Event::Apply(mr) => changed_namespace(&claims, &mr, claim_of(&mr)),
            Event::Delete(mr) => changed_namespace(&claims, &mr, None),
        };
        for namespace in changed {
            tracing::info!(%namespace, "node-agent Secret claims of other ManagedResources changed");
            let _ = changes.send(Some(namespace));
        }
    }
}

fn changed_namespace(
    claims: &SecretClaims,
    mr: &ManagedResource,
    claim: Option<super::claims::Claim>,
) -> Vec<String> {
    let namespace = mr.namespace().unwrap_or_default();
    if claims.set(&namespace, &mr.name_any(), claim) {
        vec![namespace]
    } else {
        Vec::new()
    }
}
