//! Spreading a pool's sizes over its zones (pure).
//!
//! Each pool gets one MachineDeployment per zone, so `minimum`, `maximum`, `maxSurge`,
//! `maxUnavailable` and `autoPreserveFailedMachineMax` are split between them the way
//! Gardener's provider extensions split them (`DistributeOverZones`,
//! `DistributePositiveIntOrPercent` in `extensions/pkg/controller/worker/machines.go`):
//!
//! - a count `n` over `z` zones gives every zone `n / z`, and the remainder `n % z` goes one
//!   each to the **lowest-index** zones (zone 0 first);
//! - a percentage stays as it is when the reference total splits evenly; otherwise it is
//!   weighted by the zone's share of that total and rounded up, so a zone never gets a
//!   smaller allowance than its share.
//!
//! Used by [`super::validate`] only; nothing here touches the API.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::percent::{PercentError, parse_percent};

/// The share of `total` that zone `zone_index` (0-based) of `zone_count` zones gets.
/// `zone_count == 0` is treated as one zone.
pub fn distribute(zone_index: usize, total: i32, zone_count: usize) -> i32 {
    let zones = i32::try_from(zone_count.max(1)).unwrap_or(i32::MAX);
    let index = i32::try_from(zone_index).unwrap_or(i32::MAX);
    let base = total / zones;
    let extra = i32::from(index < total % zones);
    base + extra
}

/// Splits an int-or-percent value: a number like [`distribute`], a percentage weighted by
/// the zone's share of `total` (see the module docs).
pub fn distribute_int_or_percent(
    zone_index: usize,
    value: &IntOrString,
    zone_count: usize,
    total: i32,
) -> Result<IntOrString, PercentError> {
    match value {
        IntOrString::Int(count) => Ok(IntOrString::Int(distribute(zone_index, *count, zone_count))),
        IntOrString::String(text) => {
            let percent = parse_percent(text)?;
            let zones = i32::try_from(zone_count.max(1)).unwrap_or(i32::MAX);
            if total % zones == 0 {
                return Ok(IntOrString::String(format!("{percent}%")));
            }
            let zone_total = f64::from(distribute(zone_index, total, zone_count));
            let even_share = f64::from(total) / f64::from(zones);
            let weight = zone_total / even_share;
            let weighted = (weight * f64::from(percent)).ceil();
            Ok(IntOrString::String(format!("{weighted:.0}%")))
        }
    }
}

#[cfg(test)]
mod tests;
