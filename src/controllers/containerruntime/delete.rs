//! Delete: uninstall gVisor from the pool's nodes, then remove the pool's MR (waiting unless
//! force-deleting), then the shared MR, but only when no other gvisor ContainerRuntime
//! without deletion timestamp remains in the namespace (else the shared MR is applied with
//! the remaining pools' profiles, [`super::shared`], so a profile only the leaving pool had
//! loses its RuntimeClass). Removing a MR lets the shoot's
//! resource manager (GRM) delete the DaemonSet / RuntimeClass.
//!
//! # The uninstall
//!
//! Deleting only the pool's MR would leave `runsc` registered in every node's containerd
//! config. So a deletion runs in phases, one step per run, decided by the pure [`phase`]:
//!
//! 1. **Write** the uninstall rendering ([`super::render::render_uninstall`]) into the pool's
//!    MR (the same DaemonSet in uninstall mode, through the same
//!    [`managed_resource::apply_for_shoot`] as reconcile) and requeue. GRM updates the
//!    DaemonSet in place; its rolling update replaces each node's installation pod by an
//!    uninstall pod, which removes runsc from config.toml, deletes runsc.toml and restarts
//!    containerd before it becomes Ready.
//! 2. **Wait** until GRM reports the MR's current generation applied, healthy and no longer
//!    progressing ([`managed_resource::is_rolled_out`]): every node of the pool runs a Ready
//!    uninstall pod. Meanwhile the status is Processing, "waiting for the gVisor uninstall on
//!    the pool's nodes", with GRM's reason.
//! 3. **Delete** the MR (GRM deletes the DaemonSet; the uninstall pods just exit), then the
//!    shared MR as before.
//!
//! The wait is bounded by `--gvisor-uninstall-timeout-seconds` from the ContainerRuntime's
//! deletion timestamp: after it, a `GVisorUninstallIncomplete` Warning event says why (GRM's
//! condition message) and the deletion goes on; the nodes that did not finish keep the runsc
//! entry until they are replaced. The same holds for a failure to render the uninstall
//! DaemonSet (e.g. a broken image vector): an error, retried, until the timeout.
//!
//! No uninstall at all (straight to step 3) when it cannot or need not run: force deletion,
//! a shoot being deleted or hibernated (its nodes go away, and a hibernated shoot's GRM does
//! not run), a timeout of zero, or no live MR (already deleting, or never created). Migrate
//! never uninstalls ([`super::migrate`]): the nodes keep running under the new seed.
//!
//! Every step is idempotent: a run that dies anywhere is repeated from what the MR shows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::Resource;

use super::data;
use super::reconcile::render_uninstall_parts;
use super::render::daemonset_name;
use super::{
    Error, GVisorActuator, SHARED_MANAGED_RESOURCE, installation_managed_resource, shared,
};
use crate::api::{ContainerRuntime, ManagedResource};
use crate::error_chain::chain;
use crate::extension::managed_resource;
use crate::extension::{ClusterContext, Outcome, Request};

/// Reason of the Warning event when the uninstall is given up.
pub const REASON_UNINSTALL_INCOMPLETE: &str = "GVisorUninstallIncomplete";
/// How often a deletion looks at the uninstall again.
pub const UNINSTALL_POLL: Duration = Duration::from_secs(10);
/// What the status says while the uninstall runs.
pub const WAITING_FOR_UNINSTALL: &str = "waiting for the gVisor uninstall on the pool's nodes";

/// Why the uninstall is not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Force deletion: nothing is waited for.
    ForceDelete,
    /// The shoot is being deleted: its nodes go away.
    ShootDeleted,
    /// The shoot is (being) hibernated: no nodes, and its GRM does not run.
    ShootHibernated,
    /// `--gvisor-uninstall-timeout-seconds=0`.
    Disabled,
}

impl Skip {
    fn as_str(self) -> &'static str {
        match self {
            Skip::ForceDelete => "force deletion",
            Skip::ShootDeleted => "the shoot is being deleted",
            Skip::ShootHibernated => "the shoot is hibernated",
            Skip::Disabled => "the uninstall is turned off (--gvisor-uninstall-timeout-seconds=0)",
        }
    }
}

/// Whether and why the uninstall is skipped (pure): `wait = false` is force deletion.
pub fn skip_reason(
    wait: bool,
    cluster: Option<&ClusterContext>,
    timeout: Duration,
) -> Option<Skip> {
    if !wait {
        Some(Skip::ForceDelete)
    } else if cluster.is_some_and(|c| c.shoot.is_being_deleted()) {
        Some(Skip::ShootDeleted)
    } else if cluster.is_some_and(|c| c.shoot.is_hibernation_enabled()) {
        Some(Skip::ShootHibernated)
    } else if timeout.is_zero() {
        Some(Skip::Disabled)
    } else {
        None
    }
}

/// The step of a deletion, as far as the uninstall is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// No uninstall; delete.
    Skipped(Skip),
    /// The pool's MR is absent or already being deleted: nothing to uninstall; delete.
    NoInstallation,
    /// Step 1: write the uninstall rendering into the pool's MR.
    WriteUninstall,
    /// Step 2: the uninstall is written and not finished; `reason` from GRM.
    Waiting {
        /// Why it is not finished.
        reason: String,
        /// Until the timeout.
        remaining: Duration,
    },
    /// Every node of the pool is uninstalled; delete.
    Uninstalled,
    /// The timeout passed first; warn and delete.
    TimedOut {
        /// Why it is not finished (or that it never started).
        reason: String,
    },
}

/// Decides the step (pure). `mr` is the pool's MR as read now, `uninstall_secret` the name
/// the manifest secret of the uninstall rendering has (content-addressed, so the MR carries
/// the uninstall rendering exactly when it references that secret), `waited` the time since
/// the ContainerRuntime's deletion timestamp. A finished uninstall wins over the timeout.
pub fn phase(
    skip: Option<Skip>,
    mr: Option<&ManagedResource>,
    uninstall_secret: &str,
    waited: Duration,
    timeout: Duration,
) -> Phase {
    if let Some(skip) = skip {
        return Phase::Skipped(skip);
    }
    let Some(mr) = mr.filter(|mr| mr.metadata.deletion_timestamp.is_none()) else {
        return Phase::NoInstallation;
    };
    let written = mr
        .spec
        .secret_refs
        .iter()
        .any(|r| r.name == uninstall_secret);
    if written && managed_resource::is_rolled_out(mr) {
        return Phase::Uninstalled;
    }
    let reason = if written {
        managed_resource::rollout_pending_reason(mr).unwrap_or_default()
    } else {
        "the uninstall DaemonSet was not written yet".to_string()
    };
    match timeout.checked_sub(waited).filter(|r| !r.is_zero()) {
        None => Phase::TimedOut { reason },
        Some(_) if !written => Phase::WriteUninstall,
        Some(remaining) => Phase::Waiting { reason, remaining },
    }
}

/// Deletes the ContainerRuntime's shoot objects, uninstalling gVisor from the pool's nodes
/// first (module docs). `wait = false` is force deletion: no uninstall, nothing waited for.
/// Returns Pending while the uninstall or a MR deletion is in progress.
pub async fn delete(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
    wait: bool,
) -> Result<Outcome, Error> {
    let namespace = request.namespace();
    let pool = &request.object.spec.worker_pool.name;
    let pool_mr = installation_managed_resource(pool);
    if let Some(pending) = uninstall(actuator, request, wait, &pool_mr).await? {
        return Ok(pending);
    }
    if !managed_resource::delete_and_wait(
        &actuator.client,
        actuator.seed_cache(),
        namespace,
        &pool_mr,
        wait,
    )
    .await?
    {
        return Ok(managed_resource::pending_deletion(&format!(
            "ManagedResource {pool_mr}"
        )));
    }
    if another_pool_uses_gvisor(actuator, request).await? {
        tracing::info!(
            "another gvisor ContainerRuntime remains; the shared ManagedResource keeps the RuntimeClasses of the remaining pools' profiles"
        );
        shared::apply(actuator, namespace, request.name(), None).await?;
        return Ok(Outcome::done());
    }
    if !managed_resource::delete_and_wait(
        &actuator.client,
        actuator.seed_cache(),
        namespace,
        SHARED_MANAGED_RESOURCE,
        wait,
    )
    .await?
    {
        return Ok(managed_resource::pending_deletion(&format!(
            "ManagedResource {SHARED_MANAGED_RESOURCE}"
        )));
    }
    Ok(Outcome::done())
}

/// Steps 1 and 2 of the module docs: `Some(pending)` while the uninstall runs, `None` once
/// the pool's MR may be deleted.
async fn uninstall(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
    wait: bool,
    pool_mr: &str,
) -> Result<Option<Outcome>, Error> {
    let namespace = request.namespace();
    let timeout = actuator.options.uninstall_timeout;
    let waited = since(
        request.object.meta().deletion_timestamp.as_ref(),
        Utc::now(),
    );
    let skip = skip_reason(wait, request.cluster, timeout);
    let (mr, manifests) = match skip {
        Some(_) => (None, String::new()),
        None => {
            match managed_resource::get(&actuator.client, actuator.seed_cache(), namespace, pool_mr)
                .await?
            {
                // Only a live MR needs the uninstall rendering (whose failure must not block
                // the deletion of an MR that is gone anyway).
                Some(mr) if mr.metadata.deletion_timestamp.is_none() => {
                    match render_uninstall_parts(
                        &actuator.templates,
                        &actuator.images,
                        actuator.options.test_repository.as_deref(),
                        request.object,
                    ) {
                        Ok(manifests) => (Some(mr), manifests),
                        // Retried and reported like any error, but not past the timeout: a
                        // broken image vector must not hold a deletion forever.
                        Err(error) if waited < timeout => return Err(error),
                        Err(error) => {
                            give_up(actuator, request, pool_mr, timeout, &chain(&error)).await;
                            return Ok(None);
                        }
                    }
                }
                other => (other, String::new()),
            }
        }
    };
    let secret = managed_resource::secret_name(pool_mr, &data(&manifests));
    let daemonset = daemonset_name(&request.object.spec.worker_pool.name);
    match phase(skip, mr.as_ref(), &secret, waited, timeout) {
        Phase::Skipped(skip) => {
            tracing::info!(reason = skip.as_str(), "gVisor uninstall skipped");
            Ok(None)
        }
        Phase::NoInstallation => Ok(None),
        Phase::Uninstalled => {
            tracing::info!(managed_resource = %pool_mr, %daemonset, "gVisor uninstalled from the pool's nodes");
            Ok(None)
        }
        Phase::TimedOut { reason } => {
            give_up(actuator, request, pool_mr, timeout, &reason).await;
            Ok(None)
        }
        Phase::WriteUninstall => {
            managed_resource::apply_for_shoot(
                &actuator.client,
                actuator.seed_cache(),
                namespace,
                pool_mr,
                &data(&manifests),
                false,
            )
            .await?;
            tracing::info!(managed_resource = %pool_mr, %daemonset, "gVisor uninstall DaemonSet written");
            Ok(Some(waiting(
                &format!("ManagedResource {pool_mr} now holds the uninstall DaemonSet"),
                timeout.saturating_sub(waited),
            )))
        }
        Phase::Waiting { reason, remaining } => Ok(Some(waiting(&reason, remaining))),
    }
}

/// Gives the uninstall up: a [`REASON_UNINSTALL_INCOMPLETE`] Warning event on the
/// ContainerRuntime naming the pool's DaemonSet and why (`reason`), and a log line. Once per
/// deletion: the next step deletes the MR, and a deleting MR is never uninstalled again.
async fn give_up(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
    pool_mr: &str,
    timeout: Duration,
    reason: &str,
) {
    let pool = &request.object.spec.worker_pool.name;
    let note = format!(
        "gVisor uninstall on the nodes of pool {pool} (DaemonSet kube-system/{daemonset}) did \
         not finish within {timeout:?} of the deletion; deleting the installation anyway, nodes \
         that did not finish keep the runsc runtime in containerd's config until they are \
         replaced: {reason}",
        daemonset = daemonset_name(pool),
    );
    tracing::warn!(managed_resource = %pool_mr, %reason, "gVisor uninstall incomplete; giving up");
    actuator
        .events
        .warning(
            &request.object.object_ref(&()),
            REASON_UNINSTALL_INCOMPLETE,
            "Delete",
            note,
        )
        .await;
}

/// Pending with [`WAITING_FOR_UNINSTALL`], looked at again after [`UNINSTALL_POLL`] or
/// when the timeout passes, whichever comes first.
fn waiting(reason: &str, remaining: Duration) -> Outcome {
    Outcome::Pending {
        reason: format!("{WAITING_FOR_UNINSTALL} ({reason})"),
        retry_after: UNINSTALL_POLL.min(remaining + Duration::from_millis(500)),
    }
}

/// Time from `timestamp` to `now`; zero without a timestamp or when it lies ahead (pure).
fn since(
    timestamp: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    now: DateTime<Utc>,
) -> Duration {
    timestamp
        .and_then(|t| DateTime::<Utc>::from_timestamp_millis(t.0.as_millisecond()))
        .and_then(|t| (now - t).to_std().ok())
        .unwrap_or_default()
}

async fn another_pool_uses_gvisor(
    actuator: &GVisorActuator,
    request: &Request<'_, ContainerRuntime>,
) -> Result<bool, Error> {
    Ok(actuator
        .runtimes(request.namespace())
        .await?
        .iter()
        .any(|other| other.name != request.name() && !other.deleting))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Cluster;
    use serde_json::json;

    const SECRET: &str = "managedresource-extension-runtime-gvisor-installation-p-0123abcd";
    const MINUTE: Duration = Duration::from_secs(60);
    const TIMEOUT: Duration = Duration::from_secs(600);

    fn mr(secret: &str, generation: i64, observed: i64, rolled_out: bool) -> ManagedResource {
        let (healthy, progressing) = if rolled_out {
            ("True", "False")
        } else {
            ("False", "True")
        };
        let condition = |type_: &str, status: &str| {
            json!({"type": type_, "status": status, "reason": "R",
                "message": format!("{type_} message"),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "lastUpdateTime": "2026-01-01T00:00:00Z"})
        };
        serde_json::from_value(json!({
            "apiVersion": "resources.gardener.cloud/v1alpha1",
            "kind": "ManagedResource",
            "metadata": {"name": "extension-runtime-gvisor-installation-p", "namespace": "ns",
                "generation": generation},
            "spec": {"secretRefs": [{"name": secret}]},
            "status": {"observedGeneration": observed, "conditions": [
                condition("ResourcesApplied", "True"),
                condition("ResourcesHealthy", healthy),
                condition("ResourcesProgressing", progressing),
            ]},
        }))
        .unwrap()
    }

    fn deleting(mut mr: ManagedResource) -> ManagedResource {
        mr.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        mr
    }

    fn cluster(shoot: serde_json::Value) -> ClusterContext {
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "shoot--p--s"},
            "spec": {"cloudProfile": {}, "seed": {}, "shoot": shoot},
        }))
        .unwrap();
        ClusterContext::new(cluster).unwrap()
    }

    #[test]
    fn the_uninstall_is_skipped_when_it_cannot_or_need_not_run() {
        let plain = cluster(json!({"metadata": {"name": "s"}}));
        let deleting = cluster(json!({"metadata": {"name": "s",
            "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        let hibernated = cluster(json!({"metadata": {"name": "s"},
            "spec": {"hibernation": {"enabled": true}}}));
        let waking_up = cluster(json!({"metadata": {"name": "s"},
            "spec": {"hibernation": {"enabled": false}}, "status": {"isHibernated": true}}));
        let rows = [
            (true, Some(&plain), TIMEOUT, None),
            (true, None, TIMEOUT, None),
            (true, Some(&waking_up), TIMEOUT, None),
            (false, Some(&plain), TIMEOUT, Some(Skip::ForceDelete)),
            (false, Some(&deleting), TIMEOUT, Some(Skip::ForceDelete)),
            (true, Some(&deleting), TIMEOUT, Some(Skip::ShootDeleted)),
            (
                true,
                Some(&hibernated),
                TIMEOUT,
                Some(Skip::ShootHibernated),
            ),
            (true, Some(&plain), Duration::ZERO, Some(Skip::Disabled)),
        ];
        for (i, (wait, cluster, timeout, expected)) in rows.into_iter().enumerate() {
            assert_eq!(skip_reason(wait, cluster, timeout), expected, "row {i}");
        }
    }

    #[test]
    fn phases_of_a_deletion() {
        let installation = mr(
            "managedresource-extension-runtime-gvisor-installation-p-deadbeef",
            1,
            1,
            true,
        );
        let written = mr(SECRET, 2, 1, true);
        let applied_not_rolled_out = mr(SECRET, 2, 2, false);
        let rolled_out = mr(SECRET, 2, 2, true);
        let phase_of = |mr: Option<&ManagedResource>, waited: Duration| {
            phase(None, mr, SECRET, waited, TIMEOUT)
        };

        assert_eq!(
            phase(
                Some(Skip::ShootDeleted),
                Some(&installation),
                SECRET,
                MINUTE,
                TIMEOUT
            ),
            Phase::Skipped(Skip::ShootDeleted)
        );
        assert_eq!(phase_of(None, MINUTE), Phase::NoInstallation);
        assert_eq!(
            phase_of(Some(&deleting(written.clone())), MINUTE),
            Phase::NoInstallation,
            "a deleting MR is only waited for"
        );
        assert_eq!(phase_of(Some(&installation), MINUTE), Phase::WriteUninstall);
        assert_eq!(
            phase_of(Some(&written), MINUTE),
            Phase::Waiting {
                reason: "ManagedResource extension-runtime-gvisor-installation-p: generation 2 \
                         not yet processed by gardener-resource-manager"
                    .into(),
                remaining: TIMEOUT - MINUTE,
            },
            "the old generation's healthy conditions do not count"
        );
        assert_eq!(
            phase_of(Some(&applied_not_rolled_out), MINUTE),
            Phase::Waiting {
                reason: "ManagedResource extension-runtime-gvisor-installation-p: \
                         ResourcesHealthy False: ResourcesHealthy message"
                    .into(),
                remaining: TIMEOUT - MINUTE,
            }
        );
        assert_eq!(phase_of(Some(&rolled_out), MINUTE), Phase::Uninstalled);
    }

    #[test]
    fn the_timeout_gives_up_but_never_overrides_a_finished_uninstall() {
        let phase_of =
            |mr: &ManagedResource, waited: Duration| phase(None, Some(mr), SECRET, waited, TIMEOUT);
        let rolled_out = mr(SECRET, 2, 2, true);
        assert_eq!(phase_of(&rolled_out, 2 * TIMEOUT), Phase::Uninstalled);
        assert_eq!(
            phase_of(&mr(SECRET, 2, 2, false), TIMEOUT),
            Phase::TimedOut {
                reason: "ManagedResource extension-runtime-gvisor-installation-p: \
                         ResourcesHealthy False: ResourcesHealthy message"
                    .into()
            }
        );
        assert_eq!(
            phase_of(
                &mr("managedresource-other-00000000", 1, 1, true),
                TIMEOUT + MINUTE
            ),
            Phase::TimedOut {
                reason: "the uninstall DaemonSet was not written yet".into()
            },
            "an operator down for longer than the timeout does not start an uninstall"
        );
        assert!(matches!(
            phase_of(&mr(SECRET, 2, 2, false), TIMEOUT - Duration::from_secs(1)),
            Phase::Waiting { remaining, .. } if remaining == Duration::from_secs(1)
        ));
    }

    #[test]
    fn waiting_polls_at_most_every_ten_seconds_and_wakes_up_for_the_timeout() {
        let Outcome::Pending {
            reason,
            retry_after,
        } = waiting("x", TIMEOUT)
        else {
            panic!("pending")
        };
        assert_eq!(
            reason,
            "waiting for the gVisor uninstall on the pool's nodes (x)"
        );
        assert_eq!(retry_after, UNINSTALL_POLL);
        let Outcome::Pending { retry_after, .. } = waiting("x", Duration::from_secs(2)) else {
            panic!("pending")
        };
        assert_eq!(retry_after, Duration::from_millis(2500));
    }

    #[test]
    fn time_since_the_deletion_timestamp() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let time =
            |s: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(s.parse().unwrap());
        let now = at("2026-01-01T00:10:00Z");
        assert_eq!(
            since(Some(&time("2026-01-01T00:00:00Z")), now),
            Duration::from_secs(600)
        );
        assert_eq!(
            since(Some(&time("2026-01-01T00:20:00Z")), now),
            Duration::ZERO
        );
        assert_eq!(since(None, now), Duration::ZERO);
    }
}
