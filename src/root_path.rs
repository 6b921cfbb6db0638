//! Resolving a path inside a root folder, the way a system rooted there would see it. Two
//! users: `gvisor-install` (the host's `/` at `--host-root`, "host" below) and the node
//! agent, which copies `imageRef` files out of an image mounted read-only in a folder of its
//! own (`agent::ports::host`): there the image is the root, and a link in it such as `/opt -> /`
//! means the image's `/`, never the node's.
//!
//! The installer reaches the host's `/` at `--host-root`. A symbolic link on the host, such
//! as `/etc/containerd/config.toml -> /usr/share/containerd/config.toml`, means the host's
//! `/usr/share/...`, not this container's; following it with the container's file system
//! finds the wrong file or none. [`resolve`] walks a host path one component at a time, never
//! lets the operating system follow a link, and resolves each link it meets relative to the
//! host root (an absolute target restarts from the host root):
//!
//! - `..` never leaves the host root: at the root it stays at the root, as `openat2`'s
//!   `RESOLVE_IN_ROOT` does, so `../../../etc/x` from anywhere is the host's `/etc/x`;
//! - more than [`MAX_LINK_HOPS`] links (a loop) fail with [`ResolveError::TooManyLinks`];
//! - a link whose target does not exist fails with [`ResolveError::Dangling`]: "not found
//!   through a link" is never taken as "no file" (writing a new file over the link would
//!   replace the host's real configuration);
//! - a plain missing entry (no link involved) is not an error: the result says it does not
//!   exist, and the caller may create it and its missing folders;
//! - a file where a folder is needed fails with [`ResolveError::NotADirectory`].
//!
//! The walk itself is pure over [`Lookup`] (one `lstat`/`readlink` per step), so the fuzz
//! target and the unit tests drive it with an in-memory tree; [`RootLookup`] is the real host
//! root. Resolution is done once at the start of a run, before anything is written: the host
//! is the installer's own node, and only its root can change these paths underneath a run.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Links followed in one resolution before giving up (Linux's own limit is 40).
pub const MAX_LINK_HOPS: usize = 40;

/// What is at a link-free path below the host root, without following a final link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Nothing.
    Missing,
    /// A folder.
    Dir,
    /// A symbolic link with this target text.
    Link(PathBuf),
    /// A regular file or any other non-folder (device, FIFO, socket).
    File,
}

/// Looks up single entries below the host root.
pub trait Lookup {
    /// The entry at `path`, which is relative to the host root (empty: the root) and
    /// contains only normal components, none of them a link.
    fn entry(&self, path: &Path) -> io::Result<Entry>;
}

/// The real host root, mounted at a folder of this container.
#[derive(Debug, Clone)]
pub struct RootLookup<'a> {
    /// Where the host's `/` is.
    pub root: &'a Path,
}

impl Lookup for RootLookup<'_> {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        let local = self.root.join(path);
        let metadata = match std::fs::symlink_metadata(&local) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Entry::Missing),
            Err(error) => return Err(error),
        };
        let kind = metadata.file_type();
        Ok(if kind.is_symlink() {
            Entry::Link(std::fs::read_link(&local)?)
        } else if kind.is_dir() {
            Entry::Dir
        } else {
            Entry::File
        })
    }
}

/// A host path with every link resolved inside the host root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Absolute, as the host sees it, without links, `.` or `..`.
    pub path: PathBuf,
    /// Whether something exists there.
    pub exists: bool,
}

impl Resolved {
    /// The same path below `root` (where this container reaches it).
    pub fn below(&self, root: &Path) -> PathBuf {
        root.join(self.path.strip_prefix("/").unwrap_or(&self.path))
    }
}

/// Why a host path could not be resolved. Nothing has been changed when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The path is not absolute, or has `..` components (host paths are given without them;
    /// only link targets may use `..`).
    #[error("{path} is not an absolute path without `..` components")]
    NotAbsolute {
        /// The path.
        path: String,
    },
    /// More than [`MAX_LINK_HOPS`] links, usually a loop.
    #[error(
        "{path}: more than {MAX_LINK_HOPS} symbolic links (a link loop?); fix the links on the host"
    )]
    TooManyLinks {
        /// The path being resolved.
        path: String,
    },
    /// A link points at something that does not exist.
    #[error(
        "{path}: the symbolic link {link} points at {target}, which does not exist on the host; create the target or remove the link"
    )]
    Dangling {
        /// The path being resolved.
        path: String,
        /// The link (host path).
        link: String,
        /// Its target as written in the link.
        target: String,
    },
    /// A file where a folder is needed.
    #[error("{path}: {at} is not a folder")]
    NotADirectory {
        /// The path being resolved.
        path: String,
        /// The entry that is not a folder (host path).
        at: String,
    },
    /// Looking at an entry failed.
    #[error("{path}: inspecting {at}")]
    Io {
        /// The path being resolved.
        path: String,
        /// The entry (host path).
        at: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

impl ResolveError {
    /// True when the host's files must be fixed (as opposed to an I/O failure).
    pub fn is_host_problem(&self) -> bool {
        !matches!(self, ResolveError::Io { .. })
    }
}

/// One component still to walk, and the link hop that produced it (`None`: from the path
/// asked for).
struct Pending {
    name: OsString,
    from_link: Option<usize>,
}

/// Resolves the absolute host path `path` below the root `lookup` sees (see the module docs
/// for the rules). Pure apart from `lookup`.
pub fn resolve(lookup: &impl Lookup, path: &Path) -> Result<Resolved, ResolveError> {
    let shown = || path.display().to_string();
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(ResolveError::NotAbsolute { path: shown() });
    }
    // A stack: the next component is at the end.
    let mut pending: Vec<Pending> = Vec::new();
    push_components(&mut pending, path, None);
    let mut done = PathBuf::new();
    // The links followed so far: (host path of the link, its target text).
    let mut links: Vec<(PathBuf, PathBuf)> = Vec::new();
    while let Some(next) = pending.pop() {
        if next.name == ".." {
            done.pop();
            continue;
        }
        let candidate = done.join(&next.name);
        let entry = lookup
            .entry(&candidate)
            .map_err(|source| ResolveError::Io {
                path: shown(),
                at: host_display(&candidate),
                source,
            })?;
        match entry {
            Entry::Dir => done = candidate,
            Entry::File => {
                if !pending.is_empty() {
                    return Err(ResolveError::NotADirectory {
                        path: shown(),
                        at: host_display(&candidate),
                    });
                }
                done = candidate;
            }
            Entry::Link(target) => {
                if links.len() >= MAX_LINK_HOPS {
                    return Err(ResolveError::TooManyLinks { path: shown() });
                }
                if target.is_absolute() {
                    done = PathBuf::new();
                }
                push_components(&mut pending, &target, Some(links.len()));
                links.push((candidate, target));
            }
            Entry::Missing => {
                if let Some(hop) = next.from_link {
                    let (link, target) = links
                        .get(hop)
                        .map(|(link, target)| (host_display(link), target.display().to_string()))
                        .unwrap_or_default();
                    return Err(ResolveError::Dangling {
                        path: shown(),
                        link,
                        target,
                    });
                }
                // Nothing below a missing entry exists either. Link text is pushed on top of
                // the path's own components, so everything still pending is from the path
                // asked for, which has no `..`.
                done = candidate;
                while let Some(rest) = pending.pop() {
                    done.push(rest.name);
                }
                return Ok(Resolved {
                    path: Path::new("/").join(done),
                    exists: false,
                });
            }
        }
    }
    Ok(Resolved {
        path: Path::new("/").join(done),
        exists: true,
    })
}

/// Pushes the components of `path` so that its first component is popped next.
fn push_components(pending: &mut Vec<Pending>, path: &Path, from_link: Option<usize>) {
    let names: Vec<OsString> = path
        .components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(
        names
            .into_iter()
            .rev()
            .map(|name| Pending { name, from_link }),
    );
}

fn host_display(relative: &Path) -> String {
    Path::new("/").join(relative).display().to_string()
}

/// An in-memory tree for the unit tests and the fuzz target: relative path → entry.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree(pub std::collections::BTreeMap<PathBuf, Entry>);

impl Lookup for MemoryTree {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        if path.as_os_str().is_empty() {
            return Ok(Entry::Dir);
        }
        Ok(self.0.get(path).cloned().unwrap_or(Entry::Missing))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn host() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        for folder in ["etc/containerd", "usr/share/containerd", "var/lib"] {
            std::fs::create_dir_all(root.join(folder)).unwrap();
        }
        std::fs::write(
            root.join("usr/share/containerd/config.toml"),
            "version = 2\n",
        )
        .unwrap();
        (dir, root)
    }

    fn on(root: &Path, path: &str) -> Result<Resolved, ResolveError> {
        resolve(&RootLookup { root }, Path::new(path))
    }

    fn found(path: &str) -> Resolved {
        Resolved {
            path: PathBuf::from(path),
            exists: true,
        }
    }

    #[test]
    fn absolute_link_is_resolved_in_the_host_root() {
        let (_dir, root) = host();
        symlink(
            "/usr/share/containerd/config.toml",
            root.join("etc/containerd/config.toml"),
        )
        .unwrap();
        let resolved = on(&root, "/etc/containerd/config.toml").unwrap();
        assert_eq!(resolved, found("/usr/share/containerd/config.toml"));
        assert_eq!(
            resolved.below(&root),
            root.join("usr/share/containerd/config.toml")
        );
    }

    #[test]
    fn relative_link_and_linked_folder_are_resolved() {
        let (_dir, root) = host();
        symlink(
            "../../usr/share/containerd/config.toml",
            root.join("etc/containerd/config.toml"),
        )
        .unwrap();
        assert_eq!(
            on(&root, "/etc/containerd/config.toml").unwrap(),
            found("/usr/share/containerd/config.toml")
        );
        // A linked folder with a missing file below it: the file may be created there.
        symlink("/usr/share/containerd", root.join("etc/containerd-linked")).unwrap();
        assert_eq!(
            on(&root, "/etc/containerd-linked/runsc.toml").unwrap(),
            Resolved {
                path: PathBuf::from("/usr/share/containerd/runsc.toml"),
                exists: false
            }
        );
    }

    #[test]
    fn plain_missing_paths_are_missing_not_errors() {
        let (_dir, root) = host();
        assert_eq!(
            on(
                &root,
                "/var/lib/gardener-extension-node/gvisor-install.restart-pending"
            )
            .unwrap(),
            Resolved {
                path: PathBuf::from(
                    "/var/lib/gardener-extension-node/gvisor-install.restart-pending"
                ),
                exists: false
            }
        );
    }

    #[test]
    fn dangling_links_fail_instead_of_reading_as_missing() {
        let (_dir, root) = host();
        symlink(
            "/nowhere/config.toml",
            root.join("etc/containerd/config.toml"),
        )
        .unwrap();
        let error = on(&root, "/etc/containerd/config.toml").unwrap_err();
        assert!(
            matches!(&error, ResolveError::Dangling { link, target, .. }
                if link == "/etc/containerd/config.toml" && target == "/nowhere/config.toml"),
            "{error:?}"
        );
        assert!(error.is_host_problem());
        // A dangling folder link fails too, even for a file below it.
        symlink("/no/such/dir", root.join("etc/gone")).unwrap();
        assert!(matches!(
            on(&root, "/etc/gone/runsc.toml"),
            Err(ResolveError::Dangling { .. })
        ));
    }

    #[test]
    fn link_loops_fail() {
        let (_dir, root) = host();
        symlink("b", root.join("etc/a")).unwrap();
        symlink("/etc/a", root.join("etc/b")).unwrap();
        assert!(matches!(
            on(&root, "/etc/a"),
            Err(ResolveError::TooManyLinks { .. })
        ));
        symlink("self", root.join("etc/self")).unwrap();
        assert!(matches!(
            on(&root, "/etc/self/x"),
            Err(ResolveError::TooManyLinks { .. })
        ));
    }

    #[test]
    fn links_out_of_the_host_root_are_clamped_to_it() {
        let (dir, root) = host();
        // A file next to the root, which `../` from the root would reach without clamping.
        std::fs::write(dir.path().join("outside.toml"), "secret").unwrap();
        symlink(
            "../../../../../outside.toml",
            root.join("etc/containerd/config.toml"),
        )
        .unwrap();
        // Clamped: the host's own /outside.toml, which does not exist.
        assert!(matches!(
            on(&root, "/etc/containerd/config.toml"),
            Err(ResolveError::Dangling { .. })
        ));
        std::fs::write(root.join("outside.toml"), "host").unwrap();
        assert_eq!(
            on(&root, "/etc/containerd/config.toml").unwrap(),
            found("/outside.toml")
        );
    }

    #[test]
    fn a_file_in_the_middle_is_not_a_folder() {
        let (_dir, root) = host();
        assert!(matches!(
            on(&root, "/usr/share/containerd/config.toml/x"),
            Err(ResolveError::NotADirectory { .. })
        ));
        for bad in ["etc/x", "/etc/../x", "/missing/../etc"] {
            assert!(
                matches!(on(&root, bad), Err(ResolveError::NotAbsolute { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn memory_tree_resolves_like_the_file_system() {
        let tree = MemoryTree(
            [
                (PathBuf::from("etc"), Entry::Dir),
                (
                    PathBuf::from("etc/l"),
                    Entry::Link(PathBuf::from("../../x")),
                ),
                (PathBuf::from("x"), Entry::File),
            ]
            .into(),
        );
        assert_eq!(resolve(&tree, Path::new("/etc/l")).unwrap(), found("/x"));
    }
}
