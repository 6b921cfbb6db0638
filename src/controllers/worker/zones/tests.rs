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
