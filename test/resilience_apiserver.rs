//! Resilience scenario 1: kube-apiserver is killed and started again (same port, same etcd)
//! while the operator reconciles a seed's worth of ContainerRuntimes, OperatingSystemConfigs
//! and Workers. Afterwards every object is ready, every child object exists exactly once and
//! no finalizer is lost. See `docs/reliability.md`.
//!
//! Its own test binary: it restarts the control plane that every test of a binary shares.
//! Reduced counts under `make test`; `RESILIENCE_FULL=1` (`make test-resilience`) runs the
//! full 50 ContainerRuntimes, 10 OSCs and 5 Workers.

#![allow(clippy::unwrap_used, clippy::panic)] // test crate: failing loudly is the point

mod support;

use support::load::{self, Fault};

#[tokio::test]
async fn apiserver_restart_while_reconciling_loses_nothing() {
    load::control_plane_restart(Fault::ApiServer).await;
}
