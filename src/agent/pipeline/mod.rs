//! One OperatingSystemConfig apply, each step its own module (`docs/agent.md#apply-order`):
//!
//! 1. [`osc`]: decode `osc.yaml` from the secret, validate it (nothing touches the disk
//!    before this passes), merge spec and status. Pure.
//! 2. [`changes`]: diff against `last-applied-osc.yaml` into a [`journal::Journal`]. Pure.
//! 3. [`journal`]: the work list on disk, rewritten after every item, so a killed agent
//!    resumes where it stopped.
//! 4. [`apply`]: work through the journal on the host — files, containerd config, units,
//!    daemon-reload, parallel unit jobs, deletions.
//!
//! [`drift`] repairs files and units that changed on disk since the last apply, with the
//! same journal and apply.

pub mod apply;
pub mod changes;
pub mod drift;
pub mod journal;
pub mod osc;
