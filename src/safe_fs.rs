//! File access on a node that a hostile folder cannot turn against the node. Shared by the
//! agent ([`crate::agent`], through [`crate::agent::ports::host`]) and the gVisor installer
//! ([`crate::gvisor_install`], through [`crate::containerd::files`]).
//!
//! Both run as root and manage files in folders that others may write to (a workload with a
//! hostPath on `/opt/bin`, say). Such a writer can put a symbolic link, a FIFO or a link to a
//! device where we expect our file, or replace a folder on the way with a link. Every
//! operation here therefore:
//!
//! - walks the folders of the path from `/` one at a time with `O_NOFOLLOW | O_DIRECTORY`
//!   and works relative to the last folder's descriptor: a link among the folders is
//!   refused ([`SafeFsError::LinkInPath`]), never followed, and cannot be swapped in between
//!   the check and the use;
//! - looks at the last component with `fstatat(AT_SYMLINK_NOFOLLOW)`, opens it with
//!   `O_NOFOLLOW | O_NONBLOCK` (a FIFO cannot stall the single-threaded agent, a link is not
//!   followed) and checks with `fstat` on the descriptor that it is the same regular file;
//! - changes modes with `fchmod` on that descriptor, never by path;
//! - reads at most a bound ([`MAX_READ_BYTES`], the caller's in [`read_at_most`], or the
//!   length of the content compared with);
//! - writes a temporary file in the folder (opened `O_EXCL | O_NOFOLLOW`) and renames it over
//!   the name: a link or FIFO in the file's place is replaced, its target is never touched.
//!
//! Paths must be absolute without `.` or `..` components (OSC paths already are, see
//! [`crate::osc_rules`]).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// The most bytes [`read`] returns; larger files are refused. Everything the agent reads
/// whole (its state files, containerd's config, OSC files from objects under etcd's size
/// limit) is far smaller.
pub const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// Mode of folders created on the way to a file.
const DIR_MODE: u32 = 0o755;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why a file operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SafeFsError {
    /// The path is not absolute or has `.`/`..` components.
    #[error("{path} is not an absolute path without `.` or `..` components")]
    InvalidPath {
        /// The path.
        path: String,
    },
    /// A folder on the way is a symbolic link (or not a folder).
    #[error(
        "{path}: {at} is a symbolic link or not a folder; links in the folders of managed files are not followed"
    )]
    LinkInPath {
        /// The path asked for.
        path: String,
        /// The offending folder.
        at: String,
    },
    /// The entry is not a regular file.
    #[error("{path} is a {kind}, not a regular file; it is not opened")]
    NotRegular {
        /// The path.
        path: String,
        /// What it is (`symbolic link`, `FIFO`, ...).
        kind: &'static str,
    },
    /// The file is larger than the read bound.
    #[error("{path} is larger than {limit} bytes; it is not read")]
    TooLarge {
        /// The path.
        path: String,
        /// The bound.
        limit: u64,
    },
    /// A system call failed.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// What is at a path, without following a final link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Nothing (or a folder on the way is missing).
    Missing,
    /// A regular file with these permission bits.
    Regular {
        /// `mode & 0o7777`.
        mode: u32,
    },
    /// Anything else: a link, FIFO, socket, device or folder.
    Other {
        /// What it is.
        kind: &'static str,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(Errno) -> SafeFsError + use<> {
    let path = path.display().to_string();
    move |errno| SafeFsError::Io {
        action,
        path,
        source: errno.into(),
    }
}

fn kind_name(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "regular file",
        FileType::Directory => "folder",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

/// The folder names of `path` and its last component.
fn split(path: &Path) -> Result<(Vec<&OsStr>, &OsStr), SafeFsError> {
    let invalid = || SafeFsError::InvalidPath {
        path: path.display().to_string(),
    };
    let mut components = path.components();
    if components.next() != Some(Component::RootDir) {
        return Err(invalid());
    }
    let mut names = Vec::new();
    for component in components {
        match component {
            Component::Normal(name) => names.push(name),
            _ => return Err(invalid()),
        }
    }
    // Path::components drops inner `.`; refuse it anyway, the raw path must be plain.
    if path
        .as_os_str()
        .as_encoded_bytes()
        .windows(3)
        .any(|w| w == b"/./")
        || path.as_os_str().as_encoded_bytes().ends_with(b"/.")
    {
        return Err(invalid());
    }
    let name = names.pop().ok_or_else(invalid)?;
    Ok((names, name))
}

/// Opens the folder `/names[0]/names[1]/...` without following links. Missing folders are
/// created (0755) when `create`, else `Ok(None)`.
fn open_dir(path: &Path, names: &[&OsStr], create: bool) -> Result<Option<OwnedFd>, SafeFsError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::openat(rustix::fs::CWD, "/", flags, Mode::empty())
        .map_err(io_error("opening the folder /", path))?;
    let mut walked = std::path::PathBuf::from("/");
    for name in names {
        walked.push(name);
        let opened = match rustix::fs::openat(&dir, *name, flags, Mode::empty()) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(DIR_MODE)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(io_error("creating the folder", &walked)(errno)),
                }
                rustix::fs::openat(&dir, *name, flags, Mode::empty())
            }
            other => other,
        };
        dir = match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(SafeFsError::LinkInPath {
                    path: path.display().to_string(),
                    at: walked.display().to_string(),
                });
            }
            Err(errno) => return Err(io_error("opening the folder", &walked)(errno)),
        };
    }
    Ok(Some(dir))
}

/// The parent folder of `path` (opened without following links) and the last component.
fn open_parent(path: &Path, create: bool) -> Result<Option<(OwnedFd, &OsStr)>, SafeFsError> {
    let (names, name) = split(path)?;
    Ok(open_dir(path, &names, create)?.map(|dir| (dir, name)))
}

fn stat_entry(stat: &Stat) -> Entry {
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type == FileType::RegularFile {
        Entry::Regular {
            mode: stat.st_mode & 0o7777,
        }
    } else {
        Entry::Other {
            kind: kind_name(file_type),
        }
    }
}

/// What is at `path`; a link is reported as a link, never followed.
pub fn entry(path: &Path) -> Result<Entry, SafeFsError> {
    let Some((dir, name)) = open_parent(path, false)? else {
        return Ok(Entry::Missing);
    };
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(stat_entry(&stat)),
        Err(Errno::NOENT) => Ok(Entry::Missing),
        Err(errno) => Err(io_error("inspecting", path)(errno)),
    }
}

/// Opens `path` if it is a regular file: `Ok(None)` when missing, [`SafeFsError::NotRegular`]
/// for anything else. The descriptor is checked with `fstat` to be the regular file that was
/// looked at (no link followed, no FIFO waited on).
pub fn open_regular(path: &Path) -> Result<Option<File>, SafeFsError> {
    let Some((dir, name)) = open_parent(path, false)? else {
        return Ok(None);
    };
    let before = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(io_error("inspecting", path)(errno)),
    };
    refuse_non_regular(&before, path)?;
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(SafeFsError::NotRegular {
                path: path.display().to_string(),
                kind: "symbolic link",
            });
        }
        Err(errno) => return Err(io_error("opening", path)(errno)),
    };
    the_file_looked_at(&before, fd, path).map(Some)
}

/// [`SafeFsError::NotRegular`] unless `stat` is a regular file's.
fn refuse_non_regular(stat: &Stat, path: &Path) -> Result<(), SafeFsError> {
    match stat_entry(stat) {
        Entry::Other { kind } => Err(SafeFsError::NotRegular {
            path: path.display().to_string(),
            kind,
        }),
        Entry::Regular { .. } | Entry::Missing => Ok(()),
    }
}

/// `fd` as a file if `fstat` shows the regular file `before` described (nothing was swapped
/// in between the look and the open).
fn the_file_looked_at(before: &Stat, fd: OwnedFd, path: &Path) -> Result<File, SafeFsError> {
    let after = rustix::fs::fstat(&fd).map_err(io_error("inspecting", path))?;
    let same = after.st_dev == before.st_dev && after.st_ino == before.st_ino;
    if let (Entry::Regular { .. }, true) = (stat_entry(&after), same) {
        Ok(File::from(fd))
    } else {
        Err(SafeFsError::NotRegular {
            path: path.display().to_string(),
            kind: "file replaced while it was opened",
        })
    }
}

/// Reads at most `limit + 1` bytes of `file`.
fn read_bounded(file: File, limit: u64, path: &Path) -> Result<Vec<u8>, SafeFsError> {
    let mut content = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|source| SafeFsError::Io {
            action: "reading",
            path: path.display().to_string(),
            source,
        })?;
    Ok(content)
}

/// The content of the regular file `path` (`None` if missing); refuses anything that is not
/// a regular file and files over [`MAX_READ_BYTES`].
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, SafeFsError> {
    read_at_most(path, MAX_READ_BYTES)
}

/// [`read`] with the caller's bound: files over `limit` bytes are refused
/// ([`SafeFsError::TooLarge`]) after reading at most `limit + 1` bytes.
pub fn read_at_most(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, SafeFsError> {
    let Some(file) = open_regular(path)? else {
        return Ok(None);
    };
    read_whole(file, limit, path).map(Some)
}

/// The content of the regular file `path`, following links: for a path this process was
/// handed whose links are expected (a file of a mounted ConfigMap is a link into a
/// timestamped folder), not for a folder others can write to. Only the link rule is relaxed:
/// anything but a regular file is refused before it is opened, the open does not block, the
/// descriptor is checked to be the file looked at, and more than `limit` bytes are refused.
/// A missing file is an error.
pub fn read_following_links(path: &Path, limit: u64) -> Result<Vec<u8>, SafeFsError> {
    let before = rustix::fs::stat(path).map_err(io_error("inspecting", path))?;
    refuse_non_regular(&before, path)?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(io_error("opening", path))?;
    read_whole(the_file_looked_at(&before, fd, path)?, limit, path)
}

/// [`read_following_links`], with `None` for a missing file (a link to nothing included).
pub fn read_following_links_if_present(
    path: &Path,
    limit: u64,
) -> Result<Option<Vec<u8>>, SafeFsError> {
    match read_following_links(path, limit) {
        Ok(content) => Ok(Some(content)),
        Err(SafeFsError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Reads the open `file` whole, refusing more than `limit` bytes; `path` names it in errors.
fn read_whole(file: File, limit: u64, path: &Path) -> Result<Vec<u8>, SafeFsError> {
    let content = read_bounded(file, limit, path)?;
    if content.len() as u64 > limit {
        return Err(SafeFsError::TooLarge {
            path: path.display().to_string(),
            limit,
        });
    }
    Ok(content)
}

/// True when `path` is a regular file with exactly `content`. Reads at most one byte more
/// than `content`; a missing file, a link, a FIFO or a device is simply "not holding it" (a
/// write then replaces the entry).
pub fn holds(path: &Path, content: &[u8]) -> Result<bool, SafeFsError> {
    let file = match open_regular(path) {
        Ok(Some(file)) => file,
        Ok(None) | Err(SafeFsError::NotRegular { .. }) => return Ok(false),
        Err(error) => return Err(error),
    };
    Ok(read_bounded(file, content.len() as u64, path)? == content)
}

/// Sets the permission bits of the regular file `path` through its descriptor (`fchmod`);
/// refuses links and special files, fails when missing.
pub fn set_mode(path: &Path, mode: u32) -> Result<(), SafeFsError> {
    let file = open_regular(path)?.ok_or_else(|| SafeFsError::Io {
        action: "changing the mode of",
        path: path.display().to_string(),
        source: io::ErrorKind::NotFound.into(),
    })?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
        .map_err(io_error("changing the mode of", path))
}

/// Atomically replaces (or creates) `path` with what `fill` writes, with exactly `mode`:
/// a temporary file in the same folder is written, fsynced and renamed over the name, then the
/// folder is fsynced. Missing folders are created (0755); a link among them is refused.
pub fn write_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), SafeFsError> {
    let Some((dir, name)) = open_parent(path, true)? else {
        // open_dir creates every missing folder, so this is only a folder removed meanwhile.
        return Err(SafeFsError::Io {
            action: "creating the folders of",
            path: path.display().to_string(),
            source: io::ErrorKind::NotFound.into(),
        });
    };
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(
        &dir,
        temp.as_os_str(),
        flags,
        Mode::from_raw_mode(mode & 0o777),
    )
    .map_err(io_error("creating a temporary file for", path))?;
    let mut file = File::from(fd);
    let result = (|| {
        fill(&mut file).map_err(|source| SafeFsError::Io {
            action: "writing",
            path: path.display().to_string(),
            source,
        })?;
        file.flush().map_err(|source| SafeFsError::Io {
            action: "writing",
            path: path.display().to_string(),
            source,
        })?;
        // The creation mode is filtered by the umask; set it exactly.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
            .map_err(io_error("changing the mode of", path))?;
        rustix::fs::fsync(&file).map_err(io_error("syncing", path))?;
        rustix::fs::renameat(&dir, temp.as_os_str(), &dir, name)
            .map_err(io_error("renaming into place", path))
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, temp.as_os_str(), AtFlags::empty());
    }
    result?;
    rustix::fs::fsync(&dir).map_err(io_error("syncing the folder of", path))
}

/// [`write_with`] for bytes in memory.
pub fn write(path: &Path, content: &[u8], mode: u32) -> Result<(), SafeFsError> {
    write_with(path, mode, |file| file.write_all(content))
}

/// Whether the folder entry `entry` is a temporary file [`write_with`] made for `name`
/// (`.<name>.tmp.<pid>.<n>`) in another process than this one: one that a process killed
/// while writing left behind.
pub fn is_leftover_temp_of(entry: &str, name: &str) -> bool {
    let Some(rest) = entry
        .strip_prefix('.')
        .and_then(|e| e.strip_prefix(name))
        .and_then(|e| e.strip_prefix(".tmp."))
    else {
        return false;
    };
    let Some((pid, counter)) = rest.split_once('.') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(pid) && digits(counter) && pid != std::process::id().to_string()
}

/// Removes the entry `path` (a link itself, never its target); returns whether it existed.
pub fn remove_file(path: &Path) -> Result<bool, SafeFsError> {
    let Some((dir, name)) = open_parent(path, false)? else {
        return Ok(false);
    };
    match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
        Ok(()) => {
            rustix::fs::fsync(&dir).map_err(io_error("syncing the folder of", path))?;
            Ok(true)
        }
        Err(Errno::NOENT) => Ok(false),
        Err(errno) => Err(io_error("removing", path)(errno)),
    }
}

/// Removes the folder `path` if it is empty; returns whether it did.
pub fn remove_dir_if_empty(path: &Path) -> Result<bool, SafeFsError> {
    let Some((dir, name)) = open_parent(path, false)? else {
        return Ok(false);
    };
    match rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(false),
        Err(errno) => Err(io_error("removing the folder", path)(errno)),
    }
}

/// The names in the folder `path` (`None` when it is missing), without `.` and `..`; the
/// folder itself and every folder on the way are opened without following links (a link
/// there is refused). Names that are not UTF-8 are left out: nothing of ours has one.
pub fn list_dir(path: &Path) -> Result<Option<Vec<String>>, SafeFsError> {
    let (mut names, name) = split(path)?;
    names.push(name);
    let Some(dir) = open_dir(path, &names, false)? else {
        return Ok(None);
    };
    let entries = rustix::fs::Dir::read_from(&dir).map_err(io_error("listing", path))?;
    let mut listed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error("listing", path))?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name != "." && name != ".." {
            listed.push(name.to_string());
        }
    }
    listed.sort();
    Ok(Some(listed))
}

/// Creates the folder `path` and its parents (0755) unless they exist; a link on the way is
/// refused.
pub fn create_dir_all(path: &Path) -> Result<(), SafeFsError> {
    let (mut names, name) = split(path)?;
    names.push(name);
    open_dir(path, &names, true).map(|_| ())
}

/// Checks that no folder on the way to `path` is a link (for operations that must go by path,
/// such as removing a folder tree).
pub fn check_folders(path: &Path) -> Result<(), SafeFsError> {
    open_parent(path, false).map(|_| ())
}

/// The tests; [`tests::temp`] and [`tests::mkfifo`] also serve the tests of modules built on
/// this one.
#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use super::*;

    /// A temporary folder and its path without links.
    pub(crate) fn temp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        // The tests' own paths must be free of links, like a node's managed folders.
        let base = dir.path().canonicalize().unwrap();
        (dir, base)
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    /// A FIFO at `path`.
    pub(crate) fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn regular_files_are_read_written_and_chmodded() {
        let (_dir, base) = temp();
        let path = base.join("a/b/file");
        assert_eq!(read(&path).unwrap(), None);
        assert_eq!(entry(&path).unwrap(), Entry::Missing);
        write(&path, b"content", 0o640).unwrap();
        assert_eq!(read(&path).unwrap().as_deref(), Some(&b"content"[..]));
        assert_eq!(entry(&path).unwrap(), Entry::Regular { mode: 0o640 });
        assert!(holds(&path, b"content").unwrap());
        assert!(!holds(&path, b"conten").unwrap());
        assert!(!holds(&path, b"content+").unwrap());
        set_mode(&path, 0o600).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert!(remove_file(&path).unwrap());
        assert!(!remove_file(&path).unwrap());
        assert!(remove_dir_if_empty(&base.join("a/b")).unwrap());
        let leftovers: Vec<_> = std::fs::read_dir(base.join("a")).unwrap().collect();
        assert!(leftovers.is_empty(), "no temporary files left");
    }

    #[test]
    fn a_link_in_place_of_the_file_is_never_followed() {
        let (_dir, base) = temp();
        let target = base.join("target");
        std::fs::write(&target, "secret").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = base.join("file");
        symlink(&target, &link).unwrap();

        assert!(matches!(
            read(&link),
            Err(SafeFsError::NotRegular {
                kind: "symbolic link",
                ..
            })
        ));
        assert_eq!(
            entry(&link).unwrap(),
            Entry::Other {
                kind: "symbolic link"
            }
        );
        assert!(!holds(&link, b"secret").unwrap());
        assert!(set_mode(&link, 0o755).is_err());
        assert_eq!(mode(&target), 0o640, "the target's mode is untouched");
        // A write replaces the link itself.
        write(&link, b"mine", 0o644).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"secret");
        assert_eq!(std::fs::read(&link).unwrap(), b"mine");
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    #[test]
    fn a_fifo_does_not_block_and_a_link_to_dev_zero_is_not_read() {
        let (_dir, base) = temp();
        let fifo = base.join("fifo");
        mkfifo(&fifo);
        let zero = base.join("zero");
        symlink("/dev/zero", &zero).unwrap();
        let started = Instant::now();
        for path in [&fifo, &zero] {
            assert!(
                matches!(read(path), Err(SafeFsError::NotRegular { .. })),
                "{path:?}"
            );
            assert!(!holds(path, b"x").unwrap());
            assert!(set_mode(path, 0o644).is_err());
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        write(&fifo, b"file", 0o644).unwrap();
        assert_eq!(read(&fifo).unwrap().as_deref(), Some(&b"file"[..]));
    }

    #[test]
    fn a_linked_folder_on_the_way_is_refused() {
        let (_dir, base) = temp();
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("file"), "theirs").unwrap();
        std::fs::create_dir(base.join("opt")).unwrap();
        symlink(&elsewhere, base.join("opt/bin")).unwrap();
        let path = base.join("opt/bin/file");
        for result in [
            write(&path, b"mine", 0o755).map(|_| ()),
            read(&path).map(|_| ()),
            set_mode(&path, 0o755),
            remove_file(&path).map(|_| ()),
            create_dir_all(&base.join("opt/bin/sub")),
        ] {
            assert!(
                matches!(&result, Err(SafeFsError::LinkInPath { at, .. }) if at.ends_with("opt/bin")),
                "{result:?}"
            );
        }
        assert_eq!(std::fs::read(elsewhere.join("file")).unwrap(), b"theirs");
        assert!(!elsewhere.join("sub").exists());
    }

    #[test]
    fn reads_are_bounded() {
        let (_dir, base) = temp();
        let path = base.join("big");
        let file = File::create(&path).unwrap();
        // Sparse: no disk used.
        file.set_len(MAX_READ_BYTES + 1).unwrap();
        assert!(matches!(read(&path), Err(SafeFsError::TooLarge { .. })));
        assert!(!holds(&path, b"small").unwrap());
        file.set_len(MAX_READ_BYTES).unwrap();
        assert_eq!(
            read(&path).unwrap().map(|c| c.len() as u64),
            Some(MAX_READ_BYTES)
        );
    }

    #[test]
    fn a_trusted_path_is_read_through_its_links_but_only_as_a_bounded_regular_file() {
        let (_dir, base) = temp();
        std::fs::create_dir(base.join("..2026_12_02")).unwrap();
        std::fs::write(base.join("..2026_12_02/flags"), "net-raw=true\n").unwrap();
        symlink("..2026_12_02", base.join("..data")).unwrap();
        symlink("..data/flags", base.join("flags")).unwrap();
        assert_eq!(
            read_following_links(&base.join("flags"), 64).unwrap(),
            b"net-raw=true\n"
        );
        assert!(matches!(
            read_following_links(&base.join("flags"), 5),
            Err(SafeFsError::TooLarge { limit: 5, .. })
        ));
        let fifo = base.join("fifo");
        mkfifo(&fifo);
        symlink("/dev/zero", base.join("zero")).unwrap();
        let started = Instant::now();
        for path in [fifo, base.join("zero")] {
            assert!(
                matches!(
                    read_following_links(&path, 64),
                    Err(SafeFsError::NotRegular { .. })
                ),
                "{path:?}"
            );
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(
            read_following_links(&base.join("missing"), 64),
            Err(SafeFsError::Io { .. })
        ));
    }

    #[test]
    fn relative_and_dotted_paths_are_refused() {
        for bad in ["rel/x", "/a/../b", "/a/./b", "/"] {
            assert!(
                matches!(read(Path::new(bad)), Err(SafeFsError::InvalidPath { .. })),
                "{bad}"
            );
        }
    }
}
