//! Reading, comparing and atomically writing the node's files (containerd config, runtime
//! configs, shim binaries). The I/O half of [`crate::containerd`].
//!
//! Writes go to a temporary file in the target's folder, which is fsynced, given its mode and
//! renamed over the target; then the folder is fsynced. Readers (containerd, a running shim
//! that `exec`s a binary) therefore see the old or the new file, never a partial one, and a
//! binary that is executing keeps running from its old inode (no `ETXTBSY`, no killed
//! shims). Blocking `std::fs` on purpose: these are a handful of small files per run.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::Error;

/// Mode of files we create unless told otherwise (containerd's config is world-readable).
pub const DEFAULT_FILE_MODE: u32 = 0o644;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Reads a file; `Ok(None)` if it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match fs::read(path) {
        Ok(content) => Ok(Some(content)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(io_error("reading", path, source)),
    }
}

/// Reads a UTF-8 text file; `Ok(None)` if it does not exist.
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

/// The permission bits of a file; `None` if it does not exist.
pub fn mode_of(path: &Path) -> Result<Option<u32>, Error> {
    match fs::metadata(path) {
        Ok(metadata) => Ok(Some(metadata.permissions().mode() & 0o7777)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(io_error("inspecting", path, source)),
    }
}

/// Atomically replaces (or creates) `path` with `content` and `mode`. Creates missing parent
/// folders (0755).
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> Result<(), Error> {
    replace_with(path, mode, |file| file.write_all(content))
}

/// Writes `content` atomically unless the file already has exactly that content; keeps the
/// existing file's mode, uses `mode` for a new one. Returns whether it wrote.
pub fn write_if_changed(path: &Path, content: &[u8], mode: u32) -> Result<bool, Error> {
    let existing = read_optional(path)?;
    if existing.as_deref() == Some(content) {
        return Ok(false);
    }
    let mode = mode_of(path)?.unwrap_or(mode);
    write_atomic(path, content, mode)?;
    Ok(true)
}

/// Atomically copies `source` to `target` with `mode` (streamed, for large binaries).
pub fn copy_atomic(source: &Path, target: &Path, mode: u32) -> Result<(), Error> {
    let mut input = File::open(source).map_err(|e| io_error("opening", source, e))?;
    replace_with(target, mode, |file| io::copy(&mut input, file).map(|_| ()))
}

/// True when both files exist and have the same bytes (a missing `b` is "different").
pub fn same_content(a: &Path, b: &Path) -> Result<bool, Error> {
    let meta_a = fs::metadata(a).map_err(|e| io_error("inspecting", a, e))?;
    let meta_b = match fs::metadata(b) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(io_error("inspecting", b, source)),
    };
    if meta_a.len() != meta_b.len() || !meta_b.is_file() {
        return Ok(false);
    }
    let mut reader_a = BufReader::new(File::open(a).map_err(|e| io_error("opening", a, e))?);
    let mut reader_b = BufReader::new(File::open(b).map_err(|e| io_error("opening", b, e))?);
    let mut chunk_a = vec![0u8; 64 * 1024];
    let mut chunk_b = vec![0u8; 64 * 1024];
    loop {
        let read = read_full(&mut reader_a, &mut chunk_a).map_err(|e| io_error("reading", a, e))?;
        let read_b = read_full(&mut reader_b, &mut chunk_b[..read])
            .map_err(|e| io_error("reading", b, e))?;
        if read_b != read || chunk_a[..read] != chunk_b[..read] {
            return Ok(false);
        }
        if read == 0 {
            return Ok(true);
        }
    }
}

/// Removes a file; returns whether it existed.
pub fn remove_if_exists(path: &Path) -> Result<bool, Error> {
    match fs::remove_file(path) {
        Ok(()) => {
            sync_parent(path)?;
            Ok(true)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(io_error("removing", path, source)),
    }
}

/// Sets the permission bits of an existing file.
pub fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| io_error("changing the mode of", path, e))
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

/// Creates a temp file next to `path`, lets `fill` write it, then fsyncs, renames and
/// fsyncs the folder. The temp file is removed on any failure.
fn replace_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), Error> {
    let parent = parent_of(path);
    fs::create_dir_all(&parent).map_err(|e| io_error("creating the folder", &parent, e))?;
    let temp = temp_path(path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)
            .map_err(|e| io_error("creating", &temp, e))?;
        fill(&mut file).map_err(|e| io_error("writing", &temp, e))?;
        // The creation mode is filtered by the umask; set it exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| io_error("changing the mode of", &temp, e))?;
        file.sync_all().map_err(|e| io_error("syncing", &temp, e))?;
        fs::rename(&temp, path).map_err(|e| io_error("renaming into place", path, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result?;
    sync_parent(path)
}

fn sync_parent(path: &Path) -> Result<(), Error> {
    let parent = parent_of(path);
    File::open(&parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io_error("syncing the folder", &parent, e))
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `.<name>.tmp.<pid>.<n>` in the same folder, so the rename stays on one file system.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    parent_of(path).join(format!(".{name}.tmp.{}.{n}", std::process::id()))
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
    use super::*;

    #[test]
    fn write_if_changed_writes_once_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/config.toml");
        assert_eq!(read_optional(&path).unwrap(), None);
        assert!(write_if_changed(&path, b"a = 1\n", 0o640).unwrap());
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
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        let target = dir.path().join("bin/target");
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
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        fs::write(&a, vec![1u8; 100_000]).unwrap();
        assert!(!same_content(&a, &b).unwrap(), "missing b differs");
        let mut other = vec![1u8; 100_000];
        other[99_999] = 2;
        fs::write(&b, &other).unwrap();
        assert!(!same_content(&a, &b).unwrap());
        fs::write(&b, vec![1u8; 100_000]).unwrap();
        assert!(same_content(&a, &b).unwrap());
        assert!(same_content(&a, &dir.path().join("missing-a")).is_ok());
        assert!(same_content(&dir.path().join("missing-a"), &a).is_err());
    }

    #[test]
    fn remove_if_exists_reports_presence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runsc.toml");
        assert!(!remove_if_exists(&path).unwrap());
        fs::write(&path, "x").unwrap();
        assert!(remove_if_exists(&path).unwrap());
        assert!(!path.exists());
    }

    #[test]
    fn invalid_utf8_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        fs::write(&path, [0xff, 0xfe]).unwrap();
        let error = read_optional_string(&path).unwrap_err();
        assert!(error.to_string().contains("not UTF-8"), "{error}");
    }
}
