//! The agent's file helpers (`safe_fs`) against a real folder tree that a hostile
//! writer built: folders, files, FIFOs and links (relative, or absolute into the tree).
//!
//! Input: text lines, `d a/b`, `f a/c` (file), `p a/p` (FIFO), `l a/x -> ../c` or
//! `l a/x -> /c` (an absolute target is placed inside the tree; `..` is not used), then one
//! operation line,
//! `read a/x`, `holds a/x`, `chmod a/x`, `write a/x` or `remove a/x`. For every input:
//! - nothing blocks (a FIFO is never waited on; libFuzzer's timeout would report it);
//! - the operation acts only when no link or FIFO is on the way or in the file's place: a
//!   read or `holds` that succeeds saw a regular file reached through folders only;
//! - no file other than the one named changes content or mode, so a link is never followed.

#![no_main]

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use gardener_extension_node::safe_fs;
use libfuzzer_sys::fuzz_target;

/// Content and mode of every regular file below `base`, by relative path (links not followed).
fn snapshot(base: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                walk(&path, base, out);
            } else if meta.is_file() {
                let content = std::fs::read(&path).unwrap_or_default();
                let relative = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
                out.insert(relative, (content, meta.permissions().mode() & 0o7777));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(base, base, &mut out);
    out
}

/// True when every folder on the way to `relative` is a real folder and the entry itself
/// is a regular file.
fn plain_regular(base: &Path, relative: &Path) -> bool {
    let mut path = base.to_path_buf();
    let mut components = relative.components().peekable();
    while let Some(component) = components.next() {
        path.push(component);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            return false;
        };
        let last = components.peek().is_none();
        if (last && !meta.is_file()) || (!last && !meta.is_dir()) {
            return false;
        }
    }
    true
}

fn plain(relative: &Path) -> bool {
    !relative.as_os_str().is_empty()
        && relative.components().count() <= 6
        && relative
            .components()
            .all(|component| matches!(component, Component::Normal(_)))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let Ok(base) = dir.path().canonicalize() else {
        return;
    };
    let mut operation = None;
    for line in text.lines().take(32) {
        let Some((kind, rest)) = line.split_once(' ') else {
            continue;
        };
        let (name, target) = match rest.split_once(" -> ") {
            Some((name, target)) => (name, Some(target)),
            None => (rest, None),
        };
        let relative = PathBuf::from(name.trim_start_matches('/'));
        if !plain(&relative) {
            continue;
        }
        let path = base.join(&relative);
        let _ = match (kind, target) {
            ("d", None) => std::fs::create_dir(&path),
            // O_EXCL: the harness itself must not open a FIFO or follow a link already there.
            ("f", None) => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .and_then(|mut file| std::io::Write::write_all(&mut file, name.as_bytes())),
            ("p", None) => rustix::fs::mknodat(
                rustix::fs::CWD,
                &path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .map_err(std::io::Error::from),
            ("l", Some(target)) if !target.contains('\0') => {
                // Absolute targets point into the tree, never at the machine's own files.
                let target = match target.strip_prefix('/') {
                    Some(inside) => base.join(inside),
                    None => PathBuf::from(target),
                };
                if target.components().any(|c| c == Component::ParentDir) {
                    // `..` (through other links) could leave the tree; an absolute target
                    // reaches every place inside it anyway.
                    continue;
                }
                symlink(&target, &path)
            }
            ("read" | "holds" | "chmod" | "write" | "remove", None) => {
                operation = Some((kind.to_string(), relative));
                continue;
            }
            _ => continue,
        };
    }
    let Some((operation, relative)) = operation else {
        return;
    };
    let path = base.join(&relative);
    let regular = plain_regular(&base, &relative);
    let before = snapshot(&base);
    match operation.as_str() {
        "read" => {
            if let Ok(Some(_)) = safe_fs::read(&path) {
                assert!(regular, "read through a link or of a special file: {relative:?}");
            }
        }
        "holds" => {
            let expected = before
                .get(&relative)
                .map(|(content, _)| content.clone())
                .unwrap_or_default();
            if let Ok(true) = safe_fs::holds(&path, &expected) {
                assert!(regular, "holds through a link: {relative:?}");
            }
        }
        "chmod" => {
            if safe_fs::set_mode(&path, 0o604).is_ok() {
                assert!(regular, "chmod through a link: {relative:?}");
            }
        }
        "write" => {
            let _ = safe_fs::write(&path, b"written", 0o640);
        }
        "remove" => {
            let _ = safe_fs::remove_file(&path);
        }
        _ => {}
    }
    // Only the named file may have changed (or appeared, or gone).
    let mut after = snapshot(&base);
    let mut before = before;
    before.remove(&relative);
    after.remove(&relative);
    assert_eq!(before, after, "{operation} {relative:?} changed another file");
});
