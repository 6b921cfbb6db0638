//! How the node's units are doing, reported on the Node: [`unit_check`] (the
//! `SystemdUnitsReady` condition) and [`unit_events`] (unit job results aggregated into
//! events).

pub mod unit_check;
pub mod unit_events;
