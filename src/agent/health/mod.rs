//! How the node is doing, reported on the Node: [`unit_check`] (pure: the `SystemdUnitsReady`
//! condition) and [`unit_report`] (its I/O), [`unit_events`] (unit job results aggregated into events) and
//! [`hostname_check`] (a changed host name restarts the agent).

pub mod hostname_check;
pub mod unit_check;
pub mod unit_events;
pub mod unit_report;
