//! How large a YAML document becomes once decoded, measured before [`super::decode`] builds
//! anything from it. Part of the OSC decoding step of the agent ([`super`]); pure.
//!
//! YAML anchors and aliases let a small text stand for a large value: `&a` names a node and
//! every `*a` repeats it. serde_norway replays the anchored node for each alias, so 400
//! aliases of one 500 KiB string decode into 400 separate copies (200 MB) from a 528 KiB
//! `osc.yaml`. Its own guard limits how many aliases are replayed, not how many bytes each one
//! brings.
//!
//! [`within`] walks the document once with a visitor that keeps nothing: it counts the bytes
//! of every scalar and one unit for every node, aliases replayed as the real decoder replays
//! them, and stops with [`Exceeded`] as soon as the count passes the limit. Nothing it visits
//! is copied (serde_norway hands scalars out borrowed), so the walk itself costs memory in
//! proportion to the text only.

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// The document decodes to more than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded;

/// Why [`within`] refused a document.
#[derive(Debug)]
pub enum SizeError {
    /// More than the limit.
    Exceeded(Exceeded),
    /// Not YAML (the decoder would fail on it the same way).
    Syntax(serde_norway::Error),
}

/// Checks that `bytes` decodes to at most `limit` units: scalar bytes, plus one per node
/// (so a document of many empty nodes counts too).
pub fn within(bytes: &[u8], limit: u64) -> Result<(), SizeError> {
    let budget = Budget {
        left: Cell::new(limit),
        exceeded: Cell::new(false),
    };
    let deserializer = serde_norway::Deserializer::from_slice(bytes);
    match Probe(&budget).deserialize(deserializer) {
        Ok(()) => Ok(()),
        Err(_) if budget.exceeded.get() => Err(SizeError::Exceeded(Exceeded)),
        Err(error) => Err(SizeError::Syntax(error)),
    }
}

/// What is left of the limit; `exceeded` tells the stop from a syntax error.
struct Budget {
    left: Cell<u64>,
    exceeded: Cell<bool>,
}

impl Budget {
    fn spend<E: de::Error>(&self, units: usize) -> Result<(), E> {
        let units = u64::try_from(units).unwrap_or(u64::MAX).saturating_add(1);
        match self.left.get().checked_sub(units) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(E::custom("the decoded document is larger than the limit"))
            }
        }
    }
}

/// Visits any node, spending on the [`Budget`] and keeping nothing.
#[derive(Clone, Copy)]
struct Probe<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        self.0.spend(value.len())
    }

    fn visit_bytes<E: de::Error>(self, value: &[u8]) -> Result<(), E> {
        self.0.spend(value.len())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.spend(0)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.spend(0)?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.spend(0)?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }

    /// A tagged node (`!tag value`): the tag, then the value, whatever its kind.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exceeded(text: &str, limit: u64) -> bool {
        matches!(within(text.as_bytes(), limit), Err(SizeError::Exceeded(_)))
    }

    #[test]
    fn scalars_and_nodes_count_and_aliases_count_every_time_they_are_replayed() {
        // 3 nodes (map, key, value): 1 + (1 + 1) + (1 + 5).
        assert!(within(b"a: hello\n", 9).is_ok());
        assert!(exceeded("a: hello\n", 8));
        let big = "x".repeat(1000);
        let once = format!("a: &big {big}\nb: []\n");
        assert!(within(once.as_bytes(), 1100).is_ok());
        // Each alias brings the 1000 bytes again.
        let aliased = format!("a: &big {big}\nb: [*big, *big, *big]\n");
        assert!(exceeded(&aliased, 3900));
        assert!(within(aliased.as_bytes(), 4100).is_ok());
        // An alias of a collection replays all of it.
        let nested = format!("a: &list [{big}, {big}]\nb: [*list, *list]\n");
        assert!(exceeded(&nested, 5900));
        assert!(within(nested.as_bytes(), 6100).is_ok());
    }

    #[test]
    fn tagged_nodes_are_counted_and_syntax_errors_are_not_mistaken_for_the_limit() {
        let big = "y".repeat(500);
        let tagged = format!("a: &t !custom {big}\nb: [*t, *t]\n");
        assert!(exceeded(&tagged, 1400));
        assert!(within(tagged.as_bytes(), 1600).is_ok());
        assert!(matches!(
            within(b"a: [unclosed\n", 1 << 20),
            Err(SizeError::Syntax(_))
        ));
        assert!(matches!(
            within(b"a: *nowhere\n", 1 << 20),
            Err(SizeError::Syntax(_))
        ));
    }

    #[test]
    fn the_walk_stops_at_the_limit_without_replaying_the_rest() {
        // The shape, scaled down: 400 aliases of one 50 KiB string (20 MB decoded).
        let big = "z".repeat(50 * 1024);
        let mut text = format!("anchor: &big {big}\nfiles:\n");
        for _ in 0..400 {
            text.push_str("- *big\n");
        }
        let started = std::time::Instant::now();
        assert!(exceeded(&text, 2 * 1024 * 1024));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
