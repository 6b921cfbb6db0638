//! The percentage half of an `IntOrString` (`maxSurge: "25%"`), parsed the way Gardener's
//! validation accepts it (pure). Shared by the Worker controller (zone distribution) and the
//! OperatingSystemConfig controller (a pool's rollout budget for the node agents).

/// A percentage that does not parse (`"12%"` is fine, `"twelve"` or `"12"` as a string is not).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither a number nor a percentage like \"25%\"")]
pub struct PercentError(pub String);

/// Parses `"25%"` into 25.
pub fn parse_percent(text: &str) -> Result<i32, PercentError> {
    text.strip_suffix('%')
        .and_then(|number| number.parse::<i32>().ok())
        .filter(|number| *number >= 0)
        .ok_or_else(|| PercentError(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_non_negative_number_with_a_percent_sign_parses() {
        assert_eq!(parse_percent("25%"), Ok(25));
        assert_eq!(parse_percent("0%"), Ok(0));
        for bad in ["25", "-5%", "2.5%", "%", "twenty%"] {
            assert_eq!(parse_percent(bad), Err(PercentError(bad.into())), "{bad}");
        }
    }
}
