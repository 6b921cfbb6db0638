//! The host-root path resolver of gvisor-install (`gvisor_install::resolve`), over an
//! in-memory tree.
//!
//! Input: text lines describing a tree below the host root, then the path to resolve:
//! `d a/b` (folder), `f a/b/c` (file), `l a/x -> ../../c` (link with that target), and a
//! last line `? /a/x/y`. For every input the resolver must:
//! - end (links are followed at most `MAX_LINK_HOPS` times), without panicking;
//! - on success give an absolute path with only normal components, that never leaves the
//!   root, and whose existing part contains no link (every prefix is a folder in the tree, the
//!   last entry a folder or a file when it exists);
//! - report "missing" only when nothing is at the resolved path.

#![no_main]

use std::path::{Component, Path, PathBuf};

use gardener_extension_node::gvisor_install::resolve::{Entry, Lookup, MemoryTree, resolve};
use libfuzzer_sys::fuzz_target;

fn parse(text: &str) -> (MemoryTree, Option<PathBuf>) {
    let mut tree = MemoryTree::default();
    let mut query = None;
    for line in text.lines().take(64) {
        let Some((kind, rest)) = line.split_once(' ') else {
            continue;
        };
        let (name, entry) = match kind {
            "d" => (rest, Entry::Dir),
            "f" => (rest, Entry::File),
            "l" => match rest.split_once(" -> ") {
                Some((link, target)) => (link, Entry::Link(PathBuf::from(target))),
                None => continue,
            },
            "?" => {
                query = Some(PathBuf::from(rest));
                continue;
            }
            _ => continue,
        };
        // Only a consistent tree: plain names, a new entry in an existing folder.
        let relative = PathBuf::from(name.trim_start_matches('/'));
        let plain = relative
            .components()
            .all(|component| matches!(component, Component::Normal(_)));
        let parent = relative.parent().unwrap_or(Path::new(""));
        let parent_is_dir = tree.entry(parent).map(|e| e == Entry::Dir).unwrap_or(false);
        if plain
            && !relative.as_os_str().is_empty()
            && parent_is_dir
            && !tree.0.contains_key(&relative)
        {
            tree.0.insert(relative, entry);
        }
    }
    (tree, query)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (tree, Some(query)) = parse(text) else {
        return;
    };
    let Ok(resolved) = resolve(&tree, &query) else {
        return;
    };
    assert!(resolved.path.is_absolute(), "{resolved:?}");
    let mut prefix = PathBuf::new();
    let mut components = resolved.path.components().skip(1).peekable();
    let mut missing_seen = false;
    while let Some(component) = components.next() {
        let Component::Normal(name) = component else {
            panic!("{query:?} -> {resolved:?}: not a normal component");
        };
        prefix.push(name);
        let entry = tree.entry(&prefix).unwrap_or(Entry::Missing);
        match entry {
            Entry::Missing => missing_seen = true,
            Entry::Link(_) => panic!("{query:?} -> {resolved:?}: {prefix:?} is a link"),
            Entry::File if components.peek().is_some() => {
                panic!("{query:?} -> {resolved:?}: file {prefix:?} used as a folder")
            }
            Entry::Dir | Entry::File => {
                assert!(!missing_seen, "{query:?} -> {resolved:?}: entry below a missing one")
            }
        }
    }
    let at_end = tree
        .entry(&prefix)
        .map(|entry| entry != Entry::Missing)
        .unwrap_or(false);
    assert_eq!(
        resolved.exists,
        at_end || prefix.as_os_str().is_empty(),
        "{query:?} -> {resolved:?}"
    );
});
