//! Matching the objects of `render ... --impact`'s two files (pure): every object of the new
//! file (`--file`) with the object of the same namespace and name in `--previous`. An object
//! without a counterpart on the other side, or named twice in one file, is refused with a
//! message that names both files, so a comparison never silently skips an object or compares
//! two different ones.

use std::path::Path;

use anyhow::bail;
use kube::Resource;

use crate::render::input::describe;

/// The two files, as messages name them.
#[derive(Debug, Clone, Copy)]
pub struct Files<'a> {
    /// `--file`.
    pub new: &'a str,
    /// `--previous`.
    pub previous: &'a str,
}

impl<'a> Files<'a> {
    /// The files at `new` and `previous`; the strings live as long as the paths.
    pub fn new(new: &'a Path, previous: &'a Path) -> Self {
        Files {
            new: path_str(new),
            previous: path_str(previous),
        }
    }
}

/// A path as text (`-` for stdin); a path that is not UTF-8 shows as `(path)`.
fn path_str(path: &Path) -> &str {
    path.to_str().unwrap_or("(path)")
}

/// One object before and after the change.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair<K> {
    /// The object in `--previous`.
    pub previous: K,
    /// The object in `--file`.
    pub new: K,
}

/// Matches `new` and `previous` by namespace and name, in the order of `new`. `mismatch`
/// adds a hint to the message for the common mistake of two single objects that differ (it
/// gets the new and the previous object).
pub fn pair<K>(
    files: Files<'_>,
    new: Vec<K>,
    previous: Vec<K>,
    mismatch: impl Fn(&K, &K) -> Option<String>,
) -> anyhow::Result<Vec<Pair<K>>>
where
    K: Resource<DynamicType = ()>,
{
    unique(files.new, &new)?;
    unique(&format!("--previous {}", files.previous), &previous)?;
    if let ([one_new], [one_previous]) = (new.as_slice(), previous.as_slice()) {
        if key(one_new) != key(one_previous) {
            let hint = mismatch(one_new, one_previous)
                .map(|h| format!(" ({h})"))
                .unwrap_or_default();
            bail!(
                "{} holds {}, but --previous {} holds {}: --previous must hold the same object before the change{hint}",
                files.new,
                describe(one_new),
                files.previous,
                describe(one_previous),
            );
        }
    }
    unmatched(files, &new, &previous)?;
    let mut previous: Vec<Option<K>> = previous.into_iter().map(Some).collect();
    let mut pairs = Vec::with_capacity(new.len());
    for object in new {
        let found = previous
            .iter_mut()
            .find(|p| p.as_ref().is_some_and(|p| key(p) == key(&object)))
            .and_then(Option::take);
        if let Some(before) = found {
            pairs.push(Pair {
                previous: before,
                new: object,
            });
        }
    }
    Ok(pairs)
}

/// Namespace and name (empty when missing).
fn key<K: Resource<DynamicType = ()>>(object: &K) -> (&str, &str) {
    let meta = object.meta();
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

/// Refuses an object named twice in one file.
fn unique<K: Resource<DynamicType = ()>>(file: &str, objects: &[K]) -> anyhow::Result<()> {
    for (index, object) in objects.iter().enumerate() {
        if objects[..index].iter().any(|o| key(o) == key(object)) {
            bail!("{file} holds {} twice", describe(object));
        }
    }
    Ok(())
}

/// Refuses objects without a counterpart, listing every one of both files.
fn unmatched<K: Resource<DynamicType = ()>>(
    files: Files<'_>,
    new: &[K],
    previous: &[K],
) -> anyhow::Result<()> {
    let missing = |from: &[K], other: &[K]| -> Vec<String> {
        from.iter()
            .filter(|o| !other.iter().any(|p| key(p) == key(*o)))
            .map(describe)
            .collect()
    };
    let (only_new, only_previous) = (missing(new, previous), missing(previous, new));
    let mut problems = Vec::new();
    if !only_new.is_empty() {
        problems.push(format!(
            "{} of {} not in --previous {}",
            only_new.join(", "),
            files.new,
            files.previous
        ));
    }
    if !only_previous.is_empty() {
        problems.push(format!(
            "{} of --previous {} not in {}",
            only_previous.join(", "),
            files.previous,
            files.new
        ));
    }
    if !problems.is_empty() {
        bail!(
            "objects are compared by namespace and name: {}",
            problems.join("; ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Worker;
    use serde_json::json;

    fn worker(namespace: &str, name: &str) -> Worker {
        serde_json::from_value(json!({
            "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Worker",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "local", "region": "r", "secretRef": {"name": "c"}, "pools": []},
        }))
        .unwrap()
    }

    const FILES: Files<'static> = Files {
        new: "new.yaml",
        previous: "old.yaml",
    };

    fn error(new: Vec<Worker>, previous: Vec<Worker>) -> String {
        match pair(FILES, new, previous, |_, _| Some("hint".into())) {
            Ok(_) => "paired".into(),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn objects_are_paired_by_namespace_and_name_in_the_new_order() {
        let pairs = pair(
            FILES,
            vec![worker("a", "w"), worker("b", "w")],
            vec![worker("b", "w"), worker("a", "w")],
            |_, _| None,
        )
        .unwrap();
        let namespaces: Vec<_> = pairs
            .iter()
            .map(|p| {
                (
                    p.new.metadata.namespace.clone().unwrap(),
                    p.previous.metadata.namespace.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            namespaces,
            [("a".into(), "a".into()), ("b".into(), "b".into())]
        );
    }

    #[test]
    fn another_single_object_is_refused_naming_both_files() {
        assert_eq!(
            error(vec![worker("a", "w")], vec![worker("a", "x")]),
            "new.yaml holds Worker a/w, but --previous old.yaml holds Worker a/x: --previous must hold the same object before the change (hint)"
        );
        assert_eq!(
            error(vec![worker("a", "w")], vec![worker("b", "w")]),
            "new.yaml holds Worker a/w, but --previous old.yaml holds Worker b/w: --previous must hold the same object before the change (hint)"
        );
    }

    #[test]
    fn unmatched_objects_of_either_file_are_refused() {
        assert_eq!(
            error(
                vec![worker("a", "w"), worker("b", "w")],
                vec![worker("a", "w"), worker("c", "w")]
            ),
            "objects are compared by namespace and name: Worker b/w of new.yaml not in --previous old.yaml; Worker c/w of --previous old.yaml not in new.yaml"
        );
        assert_eq!(
            error(
                vec![worker("a", "w")],
                vec![worker("a", "w"), worker("c", "w")]
            ),
            "objects are compared by namespace and name: Worker c/w of --previous old.yaml not in new.yaml"
        );
    }

    #[test]
    fn an_object_twice_in_one_file_is_refused() {
        assert_eq!(
            error(
                vec![worker("a", "w"), worker("a", "w")],
                vec![worker("a", "w")]
            ),
            "new.yaml holds Worker a/w twice"
        );
        assert_eq!(
            error(
                vec![worker("a", "w")],
                vec![worker("a", "w"), worker("a", "w")]
            ),
            "--previous old.yaml holds Worker a/w twice"
        );
    }
}
