//! Reading the objects `render` works on (pure apart from reading the file): one or more
//! YAML/JSON documents, each an object or a `List` of objects, as `kubectl get -o yaml`
//! prints them. Every object's `apiVersion` and `kind` are checked before it is decoded, so a
//! file of the wrong kind gets a message naming what it is and what was expected, not a
//! complaint about a field the other kind lacks.

use std::path::Path;

use anyhow::{Context, bail};
use kube::Resource;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// "a" or "an" before a kind.
fn article(kind: &str) -> &'static str {
    match kind.chars().next() {
        Some('A' | 'E' | 'I' | 'O' | 'U') => "an",
        _ => "a",
    }
}

/// The `render` subcommand that takes objects of `kind`, for hints in messages.
fn subcommand_for(kind: &str) -> Option<&'static str> {
    match kind {
        "ContainerRuntime" => Some("render containerruntime"),
        "OperatingSystemConfig" => Some("render osc"),
        "Worker" => Some("render worker"),
        _ => None,
    }
}

/// Reads `path` (`-` for stdin) as text.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// Every object of kind `K` in `text` (named `source` in messages): each document may be
/// one object or a `List` (also `<Kind>List`); empty documents are skipped. Fails on the
/// first object that is not a `K`, naming its position, and when there is none at all.
pub fn parse_objects<K>(source: &str, text: &str) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    parse_objects_hinted(source, text, Hint::Subcommand)
}

/// What a message about an object of another kind suggests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// The `render` subcommand for that kind (the file was given to the wrong command).
    Subcommand,
    /// Nothing: the file must hold the kind of another file (`--previous`).
    None,
}

/// [`parse_objects`] with the hint of its messages chosen.
fn parse_objects_hinted<K>(source: &str, text: &str, hint: Hint) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let expected_kind = K::kind(&());
    let expected_api_version = K::api_version(&());
    let expected = format!(
        "{} {expected_kind} ({expected_api_version})",
        article(&expected_kind)
    );
    let mut objects = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value =
            Value::deserialize(document).with_context(|| format!("{source} does not decode"))?;
        let place = format!("{source}, document {}", index + 1);
        match value {
            Value::Null => continue,
            Value::Object(_) => {}
            _ => bail!("{place} is not an object; expected {expected}"),
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind == "List" || kind == format!("{expected_kind}List") {
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .with_context(|| format!("{place} is {} {kind} without items", article(kind)))?;
            for (item_index, item) in items.iter().enumerate() {
                let place = format!("{place}, item {}", item_index + 1);
                objects.push(decode::<K>(&place, item.clone(), &expected, hint)?);
            }
        } else {
            objects.push(decode::<K>(&place, value, &expected, hint)?);
        }
    }
    if objects.is_empty() {
        bail!("{source} holds no object; expected {expected}");
    }
    Ok(objects)
}

/// Checks `apiVersion` and `kind` of one object, then decodes it.
fn decode<K>(place: &str, value: Value, expected: &str, hint: Hint) -> anyhow::Result<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let expected_kind = K::kind(&());
    let expected_api_version = K::api_version(&());
    let field = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    match (field("apiVersion"), field("kind")) {
        (Some(api_version), Some(kind))
            if api_version == expected_api_version && kind == expected_kind => {}
        (Some(api_version), Some(kind)) => {
            let hint = subcommand_for(kind)
                .filter(|_| kind != expected_kind && hint == Hint::Subcommand)
                .map(|command| format!(" (use `{command}` for it)"))
                .unwrap_or_default();
            bail!(
                "{place} is {} {kind} ({api_version}), not {expected}{hint}",
                article(kind)
            );
        }
        (None, None) => bail!("{place} has no apiVersion and no kind; expected {expected}"),
        (None, Some(_)) => bail!("{place} has no apiVersion; expected {expected}"),
        (Some(_), None) => bail!("{place} has no kind; expected {expected}"),
    }
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("without a name")
        .to_string();
    serde_json::from_value(value)
        .with_context(|| format!("{place}: {expected_kind} {name} does not decode"))
}

/// Every `K` in the file at `path` (`-` for stdin), see [`parse_objects`].
pub fn read_objects<K>(path: &Path) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    parse_objects(&path.display().to_string(), &read_text(path)?)
}

/// Every `K` in the `--previous` file at `path`, the objects before a change that the file
/// `new` holds after it (`render ... --impact`): the same reading as [`read_objects`], but a
/// message about an object of another kind names both files and does not send the user to
/// another subcommand.
pub fn read_previous<K>(path: &Path, new: &Path) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let source = path.display().to_string();
    let text = read_text(path)?;
    parse_objects_hinted(&source, &text, Hint::None).with_context(|| {
        format!(
            "--previous {source} must hold the {} {} holds, before the change",
            K::kind(&()),
            new.display()
        )
    })
}

/// The one `K` in the file at `path` (e.g. the `--cluster` of a render).
pub fn read_one<K>(path: &Path) -> anyhow::Result<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let mut objects = read_objects::<K>(path)?;
    match objects.len() {
        1 => Ok(objects.remove(0)),
        n => bail!(
            "{} holds {n} objects; expected one {}",
            path.display(),
            K::kind(&())
        ),
    }
}

/// Joins the rendered text of several objects: one object's text unchanged; for several,
/// each begins with a `---` line and a comment naming its object.
pub fn join_rendered(parts: Vec<(String, String)>) -> String {
    if parts.len() == 1 {
        return parts.into_iter().map(|(_, text)| text).collect();
    }
    parts
        .into_iter()
        .map(|(object, text)| {
            let text = text.strip_prefix("---\n").unwrap_or(&text).to_string();
            format!("---\n# {object}\n{text}")
        })
        .collect()
}

/// `Kind namespace/name` of an object, for [`join_rendered`].
pub fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{} {}/{}",
        K::kind(&()),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ContainerRuntime, Worker};

    const CR: &str = "apiVersion: extensions.gardener.cloud/v1alpha1
kind: ContainerRuntime
metadata: {name: gvisor-a, namespace: shoot--a--b}
spec: {type: gvisor, binaryPath: /usr/bin, workerPool: {name: a, selector: {}}}
";

    fn error<K>(text: &str) -> String
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        match parse_objects::<K>("in.yaml", text) {
            Ok(_) => String::from("parsed"),
            Err(error) => format!("{error:#}"),
        }
    }

    #[test]
    fn the_kind_is_checked_before_the_fields() {
        assert_eq!(
            error::<Worker>(CR),
            "in.yaml, document 1 is a ContainerRuntime (extensions.gardener.cloud/v1alpha1), \
             not a Worker (extensions.gardener.cloud/v1alpha1) (use `render containerruntime` for it)"
        );
        assert_eq!(
            error::<ContainerRuntime>("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
            "in.yaml, document 1 is a ConfigMap (v1), not a ContainerRuntime (extensions.gardener.cloud/v1alpha1)"
        );
        assert_eq!(
            error::<ContainerRuntime>("spec: {}\n"),
            "in.yaml, document 1 has no apiVersion and no kind; expected a ContainerRuntime (extensions.gardener.cloud/v1alpha1)"
        );
        assert_eq!(
            error::<ContainerRuntime>("kind: ContainerRuntime\n"),
            "in.yaml, document 1 has no apiVersion; expected a ContainerRuntime (extensions.gardener.cloud/v1alpha1)"
        );
        assert_eq!(
            error::<crate::api::OperatingSystemConfig>("---\n"),
            "in.yaml holds no object; expected an OperatingSystemConfig (extensions.gardener.cloud/v1alpha1)"
        );
        assert_eq!(
            error::<ContainerRuntime>("- a\n"),
            "in.yaml, document 1 is not an object; expected a ContainerRuntime (extensions.gardener.cloud/v1alpha1)"
        );
    }

    #[test]
    fn lists_and_several_documents_yield_every_object_in_order() {
        let two = CR.replace("gvisor-a", "gvisor-b");
        let text = format!("---\n{CR}---\n{two}");
        let names = |objects: Vec<ContainerRuntime>| -> Vec<String> {
            objects
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect()
        };
        let parsed = parse_objects::<ContainerRuntime>("in.yaml", &text).unwrap();
        assert_eq!(names(parsed), ["gvisor-a", "gvisor-b"]);

        let a: Value = serde_norway::from_str(CR).unwrap();
        let b: Value = serde_norway::from_str(&two).unwrap();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [a, b]});
        let parsed =
            parse_objects::<ContainerRuntime>("in.yaml", &serde_norway::to_string(&list).unwrap())
                .unwrap();
        assert_eq!(names(parsed), ["gvisor-a", "gvisor-b"]);

        // An item of another kind is named by its position.
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [a, {"apiVersion": "v1", "kind": "Secret"}]});
        assert_eq!(
            error::<ContainerRuntime>(&serde_norway::to_string(&list).unwrap()),
            "in.yaml, document 1, item 2 is a Secret (v1), not a ContainerRuntime (extensions.gardener.cloud/v1alpha1)"
        );
    }

    #[test]
    fn a_field_error_names_the_object() {
        let broken = CR.replace("binaryPath: /usr/bin, ", "");
        let message = error::<ContainerRuntime>(&broken);
        assert!(
            message.starts_with("in.yaml, document 1: ContainerRuntime gvisor-a does not decode: missing field `binaryPath`"),
            "{message}"
        );
    }

    #[test]
    fn several_rendered_objects_are_separated_and_named() {
        assert_eq!(
            join_rendered(vec![("A x/a".into(), "a: 1\n".into())]),
            "a: 1\n"
        );
        assert_eq!(
            join_rendered(vec![
                ("A x/a".into(), "a: 1\n".into()),
                ("A x/b".into(), "---\nb: 2\n".into())
            ]),
            "---\n# A x/a\na: 1\n---\n# A x/b\nb: 2\n"
        );
    }
}
