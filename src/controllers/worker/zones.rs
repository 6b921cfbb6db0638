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
mod tests {
    use super::*;

    fn spread(total: i32, zones: usize) -> Vec<i32> {
        (0..zones).map(|i| distribute(i, total, zones)).collect()
    }

    #[test]
    fn counts_split_evenly_with_the_remainder_on_the_first_zones() {
        assert_eq!(spread(6, 3), [2, 2, 2]);
        assert_eq!(spread(7, 3), [3, 2, 2]);
        assert_eq!(spread(8, 3), [3, 3, 2]);
        assert_eq!(spread(1, 3), [1, 0, 0]);
        assert_eq!(spread(0, 3), [0, 0, 0]);
        assert_eq!(spread(5, 1), [5]);
    }

    #[test]
    fn the_parts_always_add_up_to_the_total() {
        for total in 0..40 {
            for zones in 1..6 {
                assert_eq!(spread(total, zones).iter().sum::<i32>(), total);
            }
        }
    }

    #[test]
    fn zero_zones_count_as_one() {
        assert_eq!(distribute(0, 4, 0), 4);
    }

    #[test]
    fn integers_of_surge_and_unavailable_split_like_counts() {
        let one = IntOrString::Int(1);
        let split: Vec<_> = (0..3)
            .map(|i| distribute_int_or_percent(i, &one, 3, 9).unwrap())
            .collect();
        assert_eq!(
            split,
            [
                IntOrString::Int(1),
                IntOrString::Int(0),
                IntOrString::Int(0)
            ]
        );
    }

    #[test]
    fn percentages_stay_when_the_total_splits_evenly() {
        let value = IntOrString::String("25%".into());
        for i in 0..3 {
            assert_eq!(
                distribute_int_or_percent(i, &value, 3, 9).unwrap(),
                IntOrString::String("25%".into())
            );
        }
    }

    #[test]
    fn percentages_are_weighted_and_rounded_up_when_the_total_does_not_split() {
        // total 4 over 3 zones: shares 2, 1, 1 of an even share of 4/3.
        let value = IntOrString::String("30%".into());
        let split: Vec<_> = (0..3)
            .map(|i| distribute_int_or_percent(i, &value, 3, 4).unwrap())
            .collect();
        // 2 / (4/3) * 30 = 45; 1 / (4/3) * 30 = 22.5 -> 23.
        assert_eq!(
            split,
            [
                IntOrString::String("45%".into()),
                IntOrString::String("23%".into()),
                IntOrString::String("23%".into())
            ]
        );
    }

    #[test]
    fn malformed_percentages_are_rejected() {
        for bad in ["twelve", "12", "%", "-5%", "1.5%"] {
            let value = IntOrString::String(bad.into());
            assert_eq!(
                distribute_int_or_percent(0, &value, 2, 3),
                Err(PercentError(bad.into())),
                "{bad}"
            );
        }
    }
}
