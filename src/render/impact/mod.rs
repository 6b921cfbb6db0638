//! `render worker|osc -f NEW --previous OLD --impact [-o text|json]`: what a change from OLD
//! to NEW does to machines and nodes, offline and from the code the controllers and the node
//! agent run, so the preview cannot disagree with what happens. Sits under [`super`] (the
//! `render` subcommand), which reads the files and prints; everything here is pure, one
//! operation per module:
//!
//! - [`pairs`]: the objects of both files matched by namespace and name;
//! - [`worker`]: per pool `roll`, `in-place`, `unchanged`, `new` or `removed`, from the Worker
//!   controller's validation, machine-class hash and rendering, with the changed fields
//!   ([`pool_fields`]) and what happens to the deployments ([`deployments`]);
//! - [`osc`]: for a reconcile OperatingSystemConfig, both node-agent secrets rendered as the
//!   OSC controller renders them, and the node agent's own diff, disruptive-rollout
//!   classification and in-place flags on them; for a provision one, the user data
//!   ([`provision`]).
//!
//! This module holds what they share: the flags, the output format and [`print()`].

pub mod deployments;
pub mod osc;
pub mod pairs;
pub mod pool_fields;
pub mod provision;
pub mod worker;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Serialize;

/// The `--impact` flags of `render worker` and `render osc`.
#[derive(Debug, Clone, Default, Args)]
pub struct ImpactArgs {
    /// The object(s) before the change (as `kubectl get -o yaml` prints them), to compare
    /// `--file` with; only with `--impact`.
    #[arg(long, value_name = "FILE", requires = "impact")]
    pub previous: Option<PathBuf>,
    /// Print what the change from `--previous` to `--file` does, instead of what is rendered;
    /// needs `--previous`.
    #[arg(long, requires = "previous")]
    pub impact: bool,
    /// Output of `--impact`: `text` (default) or `json`.
    #[arg(short = 'o', long = "output", value_enum, requires = "impact")]
    pub output: Option<Format>,
}

impl ImpactArgs {
    /// The `--previous` file when `--impact` is asked for.
    pub fn previous(&self) -> Option<&Path> {
        self.previous.as_deref().filter(|_| self.impact)
    }

    /// The output format.
    pub fn format(&self) -> Format {
        self.output.unwrap_or_default()
    }
}

/// Output of `--impact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// Lines for a human.
    #[default]
    Text,
    /// One JSON document: an object for one compared object, an array for several.
    Json,
}

/// The impact of one compared object, printable both ways: as text, and as JSON through
/// its `Serialize` (fields in their declared order).
pub trait Impact: Serialize {
    /// The lines of the text output.
    fn text(&self) -> String;
}

/// The output for `items` (each with the `Kind namespace/name` of its object): the text of
/// each, separated and headed by the object when there are several
/// ([`super::input::join_rendered`]); or one JSON object, or an array of them for several.
pub fn print<T: Impact>(items: &[(String, T)], format: Format) -> anyhow::Result<String> {
    match format {
        Format::Text => Ok(super::input::join_rendered(
            items
                .iter()
                .map(|(object, impact)| (object.clone(), impact.text()))
                .collect(),
        )),
        Format::Json => {
            let impacts: Vec<&T> = items.iter().map(|(_, impact)| impact).collect();
            let text = match impacts.as_slice() {
                [one] => serde_json::to_string_pretty(one),
                all => serde_json::to_string_pretty(all),
            }
            .context("serialising the impact")?;
            Ok(format!("{text}\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[derive(Serialize)]
    struct Fixed {
        x: &'static str,
    }

    impl Impact for Fixed {
        fn text(&self) -> String {
            format!("{}\n", self.x)
        }
    }

    #[test]
    fn one_object_prints_alone_several_are_headed_or_listed() {
        let one = [("Worker a/w".to_string(), Fixed { x: "p: roll" })];
        assert_eq!(print(&one, Format::Text).unwrap(), "p: roll\n");
        assert_eq!(
            print(&one, Format::Json).unwrap(),
            "{\n  \"x\": \"p: roll\"\n}\n"
        );
        let two = [
            ("Worker a/w".to_string(), Fixed { x: "p: roll" }),
            ("Worker b/w".to_string(), Fixed { x: "q: new" }),
        ];
        assert_eq!(
            print(&two, Format::Text).unwrap(),
            "---\n# Worker a/w\np: roll\n---\n# Worker b/w\nq: new\n"
        );
        let value: Value = serde_json::from_str(&print(&two, Format::Json).unwrap()).unwrap();
        assert_eq!(value, json!([{"x": "p: roll"}, {"x": "q: new"}]));
    }

    #[test]
    fn impact_only_with_previous() {
        let args = ImpactArgs {
            previous: Some("old.yaml".into()),
            impact: false,
            output: None,
        };
        assert_eq!(args.previous(), None);
        assert_eq!(args.format(), Format::Text);
    }
}
