//! Kubernetes resource quantities as text, the way apimachinery prints them (pure): parse a
//! quantity, add two, and print the canonical form (`resource.Quantity.String()`), which the
//! Worker's in-place pool hash (`controllers::worker::in_place`) and the node agent's in-place
//! checks feed into SHA-256 and so must match byte for
//! byte.
//!
//! The rules followed (apimachinery `pkg/api/resource/quantity.go`, `CanonicalizeBytes`):
//! zero prints `0`; a binary-suffixed value (`Ki` … `Ei`) prints with the largest power of
//! 1024 that divides it, unless it is below 1024 in magnitude or not whole, which prints as a
//! decimal; a decimal value drops its factors of ten and prints with an exponent that is a
//! multiple of three, as an SI suffix (`n u m "" k M G T P E`) or, for exponent-written
//! input, `e<exp>`. A sum keeps the format of the left operand unless that is zero.
//! Values are held in nano units (the finest scale apimachinery keeps), rounded up.

/// How a quantity prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `m`, `k`, `M`, … or no suffix.
    DecimalSi,
    /// `Ki`, `Mi`, `Gi`, ….
    BinarySi,
    /// `e3`, `e-3`, ….
    DecimalExponent,
}

/// A parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    /// The value in units of 10⁻⁹.
    nanos: i128,
    /// How it prints.
    format: Format,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

fn pow(base: i128, exponent: u32) -> Option<i128> {
    base.checked_pow(exponent)
}

/// `value × 10^exponent` rounded up (away from zero for positive values, as apimachinery).
fn scale10(value: i128, exponent: i32) -> Option<i128> {
    if exponent >= 0 {
        value.checked_mul(pow(10, exponent.unsigned_abs())?)
    } else {
        let divisor = pow(10, exponent.unsigned_abs())?;
        let quotient = value / divisor;
        Some(if value % divisor > 0 {
            quotient + 1
        } else {
            quotient
        })
    }
}

impl Quantity {
    /// Parses `text` (`100m`, `1.5Gi`, `2e3`, `-1`); `None` when it is not a quantity or is
    /// out of range.
    pub fn parse(text: &str) -> Option<Quantity> {
        let text = text.trim();
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let digits: i128 = format!("{whole}{fraction}").parse().ok()?;
        let fraction_len = i32::try_from(fraction.len()).ok()?;
        let (format, magnitude) = match suffix {
            "" => (Format::DecimalSi, Ok(0)),
            "n" => (Format::DecimalSi, Ok(-9)),
            "u" => (Format::DecimalSi, Ok(-6)),
            "m" => (Format::DecimalSi, Ok(-3)),
            "k" => (Format::DecimalSi, Ok(3)),
            "M" => (Format::DecimalSi, Ok(6)),
            "G" => (Format::DecimalSi, Ok(9)),
            "T" => (Format::DecimalSi, Ok(12)),
            "P" => (Format::DecimalSi, Ok(15)),
            "E" => (Format::DecimalSi, Ok(18)),
            "Ki" => (Format::BinarySi, Err(1)),
            "Mi" => (Format::BinarySi, Err(2)),
            "Gi" => (Format::BinarySi, Err(3)),
            "Ti" => (Format::BinarySi, Err(4)),
            "Pi" => (Format::BinarySi, Err(5)),
            "Ei" => (Format::BinarySi, Err(6)),
            other => {
                let exponent = other.strip_prefix(['e', 'E'])?.parse::<i32>().ok()?;
                (Format::DecimalExponent, Ok(exponent))
            }
        };
        let nanos = match magnitude {
            Ok(exponent) => scale10(digits, 9 + exponent - fraction_len)?,
            Err(power) => scale10(
                digits
                    .checked_mul(pow(1024, power)?)?
                    .checked_mul(NANOS_PER_UNIT)?,
                -fraction_len,
            )?,
        };
        Some(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// `self + other` (`None` on overflow), in the format of `self` (of `other` when `self` is zero).
    pub fn checked_add(self, other: Quantity) -> Option<Quantity> {
        Some(Quantity {
            nanos: self.nanos.checked_add(other.nanos)?,
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        })
    }

    /// The value in units of 10⁻⁹, whatever the format: quantities written differently
    /// (`1Gi`, `1024Mi`, `1073741824`) have the same value.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The canonical text.
    pub fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".to_string();
        }
        let whole = self.nanos % NANOS_PER_UNIT == 0;
        if self.format == Format::BinarySi && self.nanos.abs() >= 1024 * NANOS_PER_UNIT && whole {
            let mut amount = self.nanos / NANOS_PER_UNIT;
            let mut power = 0;
            while power < 6 && amount % 1024 == 0 {
                amount /= 1024;
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            return format!("{amount}{suffix}");
        }
        let (mut amount, mut exponent) = (self.nanos, -9i32);
        while amount % 10 == 0 {
            amount /= 10;
            exponent += 1;
        }
        match exponent.rem_euclid(3) {
            1 => {
                amount *= 10;
                exponent -= 1;
            }
            2 => {
                amount *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        let si = match exponent {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        match (self.format, si) {
            (Format::DecimalExponent, _) if exponent == 0 => format!("{amount}"),
            (Format::DecimalExponent, _) | (_, None) => format!("{amount}e{exponent}"),
            (_, Some(suffix)) => format!("{amount}{suffix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text).unwrap().canonical()
    }

    #[test]
    fn prints_as_apimachinery_does() {
        for (input, printed) in [
            ("0", "0"),
            ("0Gi", "0"),
            ("100m", "100m"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("20k", "20k"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("1Gi", "1Gi"),
            ("2e3", "2e3"),
            ("1e0", "1"),
            ("-100m", "-100m"),
            ("1n", "1n"),
        ] {
            assert_eq!(canonical(input), printed, "{input}");
        }
    }

    #[test]
    fn sums_keep_the_left_format() {
        let sum = |a: &str, b: &str| {
            Quantity::parse(a)
                .unwrap()
                .checked_add(Quantity::parse(b).unwrap())
                .unwrap()
                .canonical()
        };
        assert_eq!(sum("80m", "20m"), "100m");
        assert_eq!(sum("1Gi", "512Mi"), "1536Mi");
        assert_eq!(sum("1", "500m"), "1500m");
        assert_eq!(sum("0", "1Gi"), "1Gi");
        assert_eq!(sum("10k", "10k"), "20k");
    }

    #[test]
    fn garbage_is_not_a_quantity() {
        for input in ["", "abc", "1x", "1.2.3", "."] {
            assert_eq!(Quantity::parse(input), None, "{input}");
        }
    }
}
