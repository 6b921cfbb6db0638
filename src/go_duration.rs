//! Go's `time.Duration` strings: [`parse`] reads what `time.ParseDuration` reads (Node
//! annotations gardener-resource-manager writes, the agent's interval flags), [`format()`]
//! prints whole seconds as `time.Duration.String()` does (messages that read as GNA's). Pure.

use std::time::Duration;

use crate::printable::escape_controls;

/// Why a Go duration string did not parse. The input is quoted with its control characters
/// escaped (it is a Node annotation anyone with access to the Node can write).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty (Go accepts `0` but not ``).
    #[error("empty duration")]
    Empty,
    /// A number is missing or malformed (e.g. `.s`, `1..2s`).
    #[error("invalid number in duration `{}`", escape_controls(.0))]
    Number(String),
    /// A number has no unit (`1`, `1m30`).
    #[error("missing unit in duration `{}` (units: ns, us, µs, ms, s, m, h)", escape_controls(.0))]
    MissingUnit(String),
    /// An unknown unit (`1d`, `5sec`).
    #[error(
        "unknown unit `{}` in duration `{}` (units: ns, us, µs, ms, s, m, h)",
        escape_controls(unit),
        escape_controls(input)
    )]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// More than Go's `time.Duration` holds (about 292 years).
    #[error("duration `{}` is out of range", escape_controls(.0))]
    Overflow(String),
}

/// A parsed Go duration: Go durations are signed, [`Duration`] is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration {
    /// The absolute value.
    pub magnitude: Duration,
    /// True for a leading `-` (and a non-zero magnitude).
    pub negative: bool,
}

impl GoDuration {
    /// The duration as a wait time: negative durations wait for nothing.
    pub fn as_wait(self) -> Duration {
        if self.negative {
            Duration::ZERO
        } else {
            self.magnitude
        }
    }
}

/// Nanoseconds per unit, longest unit names first where one is a prefix of another.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // micro sign
    ("\u{3bc}s", 1_000), // Greek small letter mu
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// The largest magnitude Go's `time.Duration` (int64 nanoseconds) can hold.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Parses a duration the way Go's `time.ParseDuration` does: an optional sign, then one or
/// more `<decimal><unit>` parts (`1h2m3.5s`, `1.5h`, `300ms`, `-2m`); a bare `0` is allowed.
/// Computed in integer nanoseconds, so `1m33.333333333s` is exact; fractions finer than a
/// nanosecond are cut off, as in Go.
pub fn parse(input: &str) -> Result<GoDuration, DurationError> {
    let mut rest = input;
    let mut negative = false;
    if let Some(stripped) = rest.strip_prefix('-') {
        negative = true;
        rest = stripped;
    } else if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    }
    if rest == "0" {
        return Ok(GoDuration {
            magnitude: Duration::ZERO,
            negative: false,
        });
    }
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // The number: digits, optionally a dot and more digits; at least one digit overall.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Number(input.to_string()));
        }
        // The unit: everything up to the next digit or dot.
        let unit_len = after_number
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after_number.len(), |(index, _)| index);
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_string(),
                input: input.to_string(),
            })?;
        let overflow = || DurationError::Overflow(input.to_string());
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let part = whole.checked_mul(scale).ok_or_else(overflow)?;
        // Fraction as an integer over a power of ten, like Go: exact to the nanosecond,
        // truncated below it. Digits beyond the 20th cannot matter and are ignored.
        let mut numerator: u128 = 0;
        let mut denominator: u128 = 1;
        for digit in frac_part.bytes().take(20) {
            numerator = numerator * 10 + u128::from(digit - b'0');
            denominator *= 10;
        }
        let part = part
            .checked_add(numerator * scale / denominator)
            .ok_or_else(overflow)?;
        total = total.checked_add(part).ok_or_else(overflow)?;
        if total > MAX_NANOS {
            return Err(overflow());
        }
        rest = after_unit;
    }
    let secs = u64::try_from(total / 1_000_000_000)
        .map_err(|_| DurationError::Overflow(input.to_string()))?;
    let nanos = u32::try_from(total % 1_000_000_000)
        .map_err(|_| DurationError::Overflow(input.to_string()))?;
    let magnitude = Duration::new(secs, nanos);
    Ok(GoDuration {
        magnitude,
        negative: negative && !magnitude.is_zero(),
    })
}

/// Whole seconds as Go's `time.Duration.String()` prints them (`0s`, `42s`, `5m3s`,
/// `1h0m5s`), so the messages read as GNA's do. Pure.
pub fn format(duration: Duration) -> String {
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Duration {
        super::parse(text).unwrap().as_wait()
    }

    #[test]
    fn parses_what_time_duration_string_prints() {
        assert_eq!(parse("0"), Duration::ZERO);
        assert_eq!(parse("0s"), Duration::ZERO);
        assert_eq!(parse("1ns"), Duration::from_nanos(1));
        assert_eq!(parse("1.5µs"), Duration::from_nanos(1_500));
        assert_eq!(parse("1.5μs"), Duration::from_nanos(1_500));
        assert_eq!(parse("2us"), Duration::from_micros(2));
        assert_eq!(parse("300ms"), Duration::from_millis(300));
        assert_eq!(parse("45s"), Duration::from_secs(45));
        assert_eq!(parse("2m30s"), Duration::from_secs(150));
        assert_eq!(
            parse("1m33.333333333s"),
            Duration::new(93, 333_333_333),
            "GRM's typical value is exact"
        );
        assert_eq!(parse("1h2m3.5s"), Duration::new(3723, 500_000_000));
        assert_eq!(parse("1.5h"), Duration::from_secs(5400));
        assert_eq!(parse(".5s"), Duration::from_millis(500));
        assert_eq!(parse("5.s"), Duration::from_secs(5));
        assert_eq!(parse("+3s"), Duration::from_secs(3));
        assert_eq!(
            parse("1s1s"),
            Duration::from_secs(2),
            "units may repeat, as in Go"
        );
        assert_eq!(
            parse("1.0000000019s"),
            Duration::new(1, 1),
            "below a nanosecond is cut off (1.9ns -> 1ns)"
        );
        assert_eq!(
            parse("0.1234567891234567891234h"),
            Duration::new(444, 444_440_844)
        );
    }

    #[test]
    fn negative_durations_mean_no_wait() {
        let parsed = super::parse("-2m").unwrap();
        assert!(parsed.negative);
        assert_eq!(parsed.magnitude, Duration::from_secs(120));
        assert_eq!(parsed.as_wait(), Duration::ZERO);
        assert!(!super::parse("-0s").unwrap().negative);
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(super::parse(""), Err(DurationError::Empty));
        assert_eq!(super::parse("-"), Err(DurationError::Empty));
        assert!(matches!(
            super::parse("1"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            super::parse("1m30"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(super::parse(".s"), Err(DurationError::Number(_))));
        assert!(matches!(super::parse("s"), Err(DurationError::Number(_))));
        assert!(super::parse("1..2s").is_err());
        assert!(matches!(super::parse(" 1s"), Err(DurationError::Number(_))));
        assert!(matches!(
            super::parse("1d"),
            Err(DurationError::UnknownUnit { unit, .. }) if unit == "d"
        ));
        assert!(matches!(
            super::parse("5sec"),
            Err(DurationError::UnknownUnit { unit, .. }) if unit == "sec"
        ));
        assert!(matches!(
            super::parse("1 s"),
            Err(DurationError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn range_is_that_of_go() {
        // 2562047h47m16.854775807s is i64::MAX nanoseconds.
        assert_eq!(
            parse("2562047h47m16.854775807s"),
            Duration::new(9_223_372_036, 854_775_807)
        );
        assert!(matches!(
            super::parse("2562048h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            super::parse("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }
}
