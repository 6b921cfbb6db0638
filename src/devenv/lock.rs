//! The lock that keeps two `local-env` processes off one state folder.
//!
//! [`StateLock::acquire`] takes an exclusive `flock` on `<state>/local-env.lock` without
//! waiting and writes who holds it (process ID, HTTP address, start time) into the file. A
//! second `local-env` on the same folder fails at once with a message built from that record,
//! before it touches anything, so the running one keeps its etcd data, certificates and
//! processes. The kernel drops the lock when the holder exits, however it exits, so a crash
//! never leaves a stale lock behind.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// The lock file inside the state folder.
pub const LOCK_FILE: &str = "local-env.lock";

/// Why the state folder could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "{state} is in use by another local-env ({holder}); stop that one first (Ctrl-C in its terminal{kill}), or run a second one beside it with `cargo run -- local-env --state-dir <other folder> --http-bind-address 127.0.0.1:<other port>` (make start always uses dev/local-env)",
        kill = pid_hint(holder)
    )]
    Held {
        /// The state folder.
        state: String,
        /// What the holder recorded about itself.
        holder: String,
    },
    /// The folder or the lock file cannot be created or locked.
    #[error("locking {path}")]
    Io {
        /// The lock file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// `, or kill <pid>` when the holder's record names its process.
fn pid_hint(holder: &str) -> String {
    holder
        .split(", ")
        .find_map(|part| part.strip_prefix("process "))
        .map(|pid| format!(", or kill {pid}"))
        .unwrap_or_default()
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct StateLock {
    // Holding the open file holds the lock.
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Creates `state` if needed and locks it for this process, which serves HTTP on
    /// `http`. Fails at once if another process holds the lock.
    pub fn acquire(state: &Path, http: SocketAddr) -> Result<Self, LockError> {
        let path = state.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(state).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if let Err(errno) = flock(&file, FlockOperation::NonBlockingLockExclusive) {
            if errno == rustix::io::Errno::WOULDBLOCK {
                let mut record = String::new();
                let _ = file.read_to_string(&mut record);
                return Err(LockError::Held {
                    state: state.display().to_string(),
                    holder: describe_holder(&record),
                });
            }
            return Err(io(errno.into()));
        }
        let record = format!(
            "pid={}\nhttp={http}\nstarted={}\n",
            std::process::id(),
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(record.as_bytes()))
            .map_err(io)?;
        Ok(StateLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `process 123, HTTP 127.0.0.1:8080, started 2026-12-01T10:00:00Z` from a lock record.
fn describe_holder(record: &str) -> String {
    let field = |key: &str| {
        record
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let parts: Vec<String> = [
        field("pid").map(|v| format!("process {v}")),
        field("http").map(|v| format!("HTTP {v}")),
        field("started").map(|v| format!("started {v}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::from("it has not recorded its process yet")
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_fails_with_the_holder_and_how_to_stop_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let http: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let first = StateLock::acquire(&state, http).unwrap();
        let error = StateLock::acquire(&state, http).unwrap_err().to_string();
        let pid = std::process::id();
        assert!(
            error.starts_with(&format!(
                "{} is in use by another local-env (process {pid}, HTTP 127.0.0.1:8080, started ",
                state.display()
            )),
            "{error}"
        );
        assert!(
            error.ends_with(&format!(
                "stop that one first (Ctrl-C in its terminal, or kill {pid}), or run a second one beside it with `cargo run -- local-env --state-dir <other folder> --http-bind-address 127.0.0.1:<other port>` (make start always uses dev/local-env)"
            )),
            "{error}"
        );
        drop(first);
        // Released: the next one gets it.
        StateLock::acquire(&state, http).unwrap();
    }

    #[test]
    fn an_empty_record_still_explains() {
        assert_eq!(describe_holder(""), "it has not recorded its process yet");
        assert_eq!(pid_hint("it has not recorded its process yet"), "");
    }
}
