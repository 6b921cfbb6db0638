//! Reading, comparing and atomically writing the node's files (containerd config, runtime
//! configs, shim binaries) for the gVisor installer. The I/O half of [`crate::containerd`].
//!
//! Every operation goes through [`crate::safe_fs`]: no link is followed, neither among the
//! folders (refused) nor at the file itself (a write replaces the link, a read refuses it,
//! a comparison counts it as "different"); nothing but a regular file is opened, without
//! blocking, so a FIFO or a device in a file's place never stalls or floods a run; and reads
//! are bounded by [`MAX_READ_BYTES`]. The caller resolves the links it means to follow
//! (config.toml's, inside the host root) before it calls these.
//!
//! Writes go to a temporary file in the target's folder, which is fsynced, given its mode and
//! renamed over the target; then the folder is fsynced. Readers (containerd, a running shim
//! that `exec`s a binary) therefore see the old or the new file, never a partial one, and a
//! binary that is executing keeps running from its old inode (no `ETXTBSY`, no killed
//! shims). Blocking I/O on purpose: these are a handful of small files per run.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::safe_fs::{self, SafeFsError};

use super::Error;

/// Mode of files we create unless told otherwise (containerd's config is world-readable).
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// The largest file [`read_optional`] reads. containerd's config.toml and runsc.toml are a
/// few KiB; parsing TOML takes about ten times a file's size in memory, so a bound far above
/// any real config keeps a run small whatever sits at the path.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Reads a regular file (at most [`MAX_READ_BYTES`]); `Ok(None)` if it does not exist.
/// Anything else at the path (a link, a FIFO, a device) is refused.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    Ok(safe_fs::read_at_most(path, MAX_READ_BYTES)?)
}

/// Reads a UTF-8 text file; `Ok(None)` if it does not exist. See [`read_optional`].
pub fn read_optional_string(path: &Path) -> Result<Option<String>, Error> {
    read_optional(path)?
        .map(|bytes| {
            String::from_utf8(bytes).map_err(|error| {
                io_error(
                    "reading (not UTF-8)",
                    path,
                    io::Error::new(io::ErrorKind::InvalidData, error),
                )
            })
        })
        .transpose()
}

/// Whether anything (a file, a link, a FIFO, ...) is at `path`; a link is not followed.
pub fn exists(path: &Path) -> Result<bool, Error> {
    Ok(safe_fs::entry(path)? != safe_fs::Entry::Missing)
}

/// True when `path` is a regular file holding exactly `content` (reads at most one byte
/// more); a link or any other non-file is "not holding it".
pub fn holds(path: &Path, content: &[u8]) -> Result<bool, Error> {
    Ok(safe_fs::holds(path, content)?)
}

/// The permission bits of the regular file `path`; `None` if nothing or no regular file is
/// there.
pub fn mode_of(path: &Path) -> Result<Option<u32>, Error> {
    Ok(match safe_fs::entry(path)? {
        safe_fs::Entry::Regular { mode } => Some(mode),
        safe_fs::Entry::Missing | safe_fs::Entry::Other { .. } => None,
    })
}

/// Atomically replaces (or creates) `path` with `content` and `mode`; whatever was at the
/// path (a link included) is replaced, never written through. Creates missing parent
/// folders (0755).
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> Result<(), Error> {
    Ok(safe_fs::write(path, content, mode)?)
}

/// Writes `content` atomically unless the file already has exactly that content; keeps the
/// existing file's mode, uses `mode` for a new one. Returns whether it wrote.
pub fn write_if_changed(path: &Path, content: &[u8], mode: u32) -> Result<bool, Error> {
    if holds(path, content)? {
        return Ok(false);
    }
    let mode = mode_of(path)?.unwrap_or(mode);
    write_atomic(path, content, mode)?;
    Ok(true)
}

/// Atomically copies `source` (a path in this container, e.g. the installation image) to
/// `target` with `mode`, streamed for large binaries.
pub fn copy_atomic(source: &Path, target: &Path, mode: u32) -> Result<(), Error> {
    let mut input = File::open(source).map_err(|e| io_error("opening", source, e))?;
    Ok(safe_fs::write_with(target, mode, |file| {
        io::copy(&mut input, file).map(|_| ())
    })?)
}

/// True when `target` is a regular file with the same bytes as `source` (a path in this
/// container). A missing target, a link or any other non-file there is "different".
pub fn same_content(source: &Path, target: &Path) -> Result<bool, Error> {
    let source_file = File::open(source).map_err(|e| io_error("opening", source, e))?;
    let target_file = match safe_fs::open_regular(target) {
        Ok(Some(file)) => file,
        Ok(None) | Err(SafeFsError::NotRegular { .. }) => return Ok(false),
        Err(error) => return Err(error.into()),
    };
    let length = |file: &File, path: &Path| {
        file.metadata()
            .map(|meta| meta.len())
            .map_err(|e| io_error("inspecting", path, e))
    };
    if length(&source_file, source)? != length(&target_file, target)? {
        return Ok(false);
    }
    let mut reader_a = BufReader::new(source_file);
    let mut reader_b = BufReader::new(target_file);
    let mut chunk_a = vec![0u8; 64 * 1024];
    let mut chunk_b = vec![0u8; 64 * 1024];
    loop {
        let read =
            read_full(&mut reader_a, &mut chunk_a).map_err(|e| io_error("reading", source, e))?;
        let read_b = read_full(&mut reader_b, &mut chunk_b[..read])
            .map_err(|e| io_error("reading", target, e))?;
        if read_b != read || chunk_a[..read] != chunk_b[..read] {
            return Ok(false);
        }
        if read == 0 {
            return Ok(true);
        }
    }
}

/// Removes the entry at `path` (a link itself, never its target); returns whether it
/// existed.
pub fn remove_if_exists(path: &Path) -> Result<bool, Error> {
    Ok(safe_fs::remove_file(path)?)
}

/// The names in the folder `path` (`None` when missing), sorted; a link at the folder or on
/// the way to it is refused.
pub fn list_dir(path: &Path) -> Result<Option<Vec<String>>, Error> {
    Ok(safe_fs::list_dir(path)?)
}

/// Removes the folder `path` if it is empty; returns whether it did.
pub fn remove_dir_if_empty(path: &Path) -> Result<bool, Error> {
    Ok(safe_fs::remove_dir_if_empty(path)?)
}

/// Sets the permission bits of the existing regular file `path` (a link is refused, its
/// target never changed).
pub fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    Ok(safe_fs::set_mode(path, mode)?)
}

/// Fills `buf` as far as the reader allows; returns the bytes read (short only at EOF).
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> Error {
    Error::Io {
        action,
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;
    // Temporary folders reached without links (safe_fs refuses links among the folders).
    use crate::safe_fs::tests::{mkfifo, temp};

    #[test]
    fn write_if_changed_writes_once_and_keeps_the_mode() {
        let (_dir, base) = temp();
        let path = base.join("sub/dir/config.toml");
        assert_eq!(read_optional(&path).unwrap(), None);
        assert!(!exists(&path).unwrap());
        assert!(write_if_changed(&path, b"a = 1\n", 0o640).unwrap());
        assert!(exists(&path).unwrap());
        assert_eq!(mode_of(&path).unwrap(), Some(0o640));
        assert!(!write_if_changed(&path, b"a = 1\n", 0o600).unwrap());
        set_mode(&path, 0o600).unwrap();
        assert!(write_if_changed(&path, b"a = 2\n", 0o644).unwrap());
        assert_eq!(mode_of(&path).unwrap(), Some(0o600), "existing mode kept");
        assert_eq!(read_optional_string(&path).unwrap().unwrap(), "a = 2\n");
        let leftovers: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["config.toml"], "no temp files left");
    }

    #[test]
    fn copy_atomic_replaces_a_file_that_is_open() {
        let (_dir, base) = temp();
        let source = base.join("source");
        let target = base.join("bin/target");
        fs::write(&source, vec![7u8; 200_000]).unwrap();
        write_atomic(&target, b"old", 0o755).unwrap();
        let mut old = File::open(&target).unwrap();
        assert!(!same_content(&source, &target).unwrap());
        copy_atomic(&source, &target, 0o755).unwrap();
        assert!(same_content(&source, &target).unwrap());
        assert_eq!(mode_of(&target).unwrap(), Some(0o755));
        let mut still_old = String::new();
        old.read_to_string(&mut still_old).unwrap();
        assert_eq!(still_old, "old", "an open handle keeps the old inode");
    }

    #[test]
    fn same_content_compares_bytes() {
        let (_dir, base) = temp();
        let a = base.join("a");
        let b = base.join("b");
        fs::write(&a, vec![1u8; 100_000]).unwrap();
        assert!(!same_content(&a, &b).unwrap(), "missing b differs");
        let mut other = vec![1u8; 100_000];
        other[99_999] = 2;
        fs::write(&b, &other).unwrap();
        assert!(!same_content(&a, &b).unwrap());
        fs::write(&b, vec![1u8; 100_000]).unwrap();
        assert!(same_content(&a, &b).unwrap());
        assert!(same_content(&a, &base.join("missing-a")).is_ok());
        assert!(same_content(&base.join("missing-a"), &a).is_err());
    }

    #[test]
    fn remove_if_exists_reports_presence() {
        let (_dir, base) = temp();
        let path = base.join("runsc.toml");
        assert!(!remove_if_exists(&path).unwrap());
        fs::write(&path, "x").unwrap();
        assert!(remove_if_exists(&path).unwrap());
        assert!(!path.exists());
    }

    #[test]
    fn invalid_utf8_is_reported() {
        let (_dir, base) = temp();
        let path = base.join("config.toml");
        fs::write(&path, [0xff, 0xfe]).unwrap();
        let error = read_optional_string(&path).unwrap_err();
        assert!(error.to_string().contains("not UTF-8"), "{error}");
    }

    /// A link in a file's place: compared as "different", replaced by writes and copies,
    /// removed itself, refused by reads and chmod; its target never changes.
    #[test]
    fn a_link_in_a_files_place_is_replaced_never_followed() {
        let (_dir, base) = temp();
        let victim = base.join("passwd");
        fs::write(&victim, "root:x:0:0\n").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let source = base.join("runsc");
        fs::write(&source, "root:x:0:0\n").unwrap();
        for name in ["binary", "runsc.toml", "marker"] {
            symlink(&victim, base.join(name)).unwrap();
        }
        assert!(!same_content(&source, &base.join("binary")).unwrap());
        assert!(!holds(&base.join("runsc.toml"), b"root:x:0:0\n").unwrap());
        assert!(exists(&base.join("marker")).unwrap());
        assert_eq!(mode_of(&base.join("binary")).unwrap(), None);
        assert!(set_mode(&base.join("binary"), 0o755).is_err());
        assert!(read_optional(&base.join("runsc.toml")).is_err());

        copy_atomic(&source, &base.join("binary"), 0o755).unwrap();
        write_atomic(&base.join("runsc.toml"), b"[runsc_config]\n", 0o644).unwrap();
        assert!(remove_if_exists(&base.join("marker")).unwrap());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "root:x:0:0\n");
        assert_eq!(
            fs::metadata(&victim).unwrap().permissions().mode() & 0o7777,
            0o644
        );
        for name in ["binary", "runsc.toml"] {
            assert!(
                fs::symlink_metadata(base.join(name)).unwrap().is_file(),
                "{name}"
            );
        }
        assert!(!base.join("marker").exists());
    }

    #[test]
    fn reads_are_bounded_and_refuse_fifos() {
        let (_dir, base) = temp();
        let big = base.join("config.toml");
        File::create(&big)
            .unwrap()
            .set_len(MAX_READ_BYTES + 1)
            .unwrap();
        let error = read_optional(&big).unwrap_err();
        assert!(
            error.to_string().contains("larger than 1048576 bytes"),
            "{error}"
        );
        assert!(error.is_config_problem());
        let fifo = base.join("fifo");
        mkfifo(&fifo);
        let error = read_optional(&fifo).unwrap_err();
        assert!(error.to_string().contains("is a FIFO"), "{error}");
    }
}
