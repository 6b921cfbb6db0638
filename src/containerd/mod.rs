//! containerd's `config.toml`, edited without losing what others wrote there.
//!
//! Shared by the node-side parts of the extension: the gVisor installer
//! ([`crate::gvisor_install`]) registers the `runsc` runtime with it, and the node agent will
//! apply the OperatingSystemConfig's `criConfig.containerd` with it. Nothing here talks to
//! systemd or knows about gVisor; restarting containerd is the caller's business.
//!
//! - [`version`]: which config schema a file uses (absent/1, 2, 3, 4) and the CRI plugin IDs
//!   each one needs. Pure.
//! - [`config`]: [`ContainerdConfig`], a `toml_edit` document plus its version, with path
//!   based edits that keep every other key, comment, blank line and table order as they were.
//!   Pure.
//! - [`runtime`]: registering and removing a CRI runtime handler (e.g. `runsc`) under the key
//!   the file's version needs, repairing entries under another version's key. Pure.
//! - [`cri`]: the node agent's `criConfig` settings (sandbox image, cgroup driver, registry
//!   hosts dir, `conf.d` imports, CNI dir, plugin add/remove) and registry `hosts.toml`. Pure.
//! - [`files`]: reading and atomically writing files (temp file, fsync, rename, fsync of the
//!   folder), and comparing their content, through [`crate::safe_fs`] (no link followed, no
//!   FIFO waited on, reads bounded). The only module here that does I/O.
//!
//! Every edit reports whether it changed anything, and an edit that changes nothing leaves
//! the rendered text byte-identical, so callers restart containerd only for real changes.

pub mod config;
pub mod cri;
pub mod files;
pub mod runtime;
pub mod version;

pub use config::{ContainerdConfig, DEFAULT_CONFIG};
pub use runtime::{RuntimeEdit, RuntimeEntry};
pub use version::ConfigVersion;

/// Why a containerd configuration could not be read, edited or written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is not valid TOML. Only the position and the parser's reason are kept: the
    /// offending line may hold a registry password, and this message reaches the pod's
    /// termination message and Node events.
    #[error(
        "containerd config is not valid TOML at line {line}, column {column}: {reason}; fix the syntax error (or remove the file to start from a default)"
    )]
    Parse {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column (in characters) of the error.
        column: usize,
        /// The parser's description, which names no content of the file.
        reason: String,
    },
    /// The top-level `version` is an integer this code does not know.
    #[error(
        "containerd config has version = {0}, which is not supported (supported: 1, 2, 3, 4, or no version for 1); set a supported version"
    )]
    UnsupportedVersion(i64),
    /// The top-level `version` is not an integer; holds the TOML type it has (the value
    /// itself is file content and is not shown).
    #[error(
        "containerd config has a `version` that is not an integer (it is a TOML {0}); write e.g. `version = 2`"
    )]
    InvalidVersion(&'static str),
    /// A key on the way to a table holds something other than a table.
    #[error("containerd config: `{path}` must be a table but is a {found}; fix or remove that key")]
    NotATable {
        /// The dotted path of the offending key.
        path: String,
        /// What the file has there instead (`string`, `array`, ...).
        found: &'static str,
    },
    /// A `criConfig.containerd.plugins` entry with `values` that are not an object.
    #[error("containerd plugin config for `{path}`: values must be a JSON object")]
    InvalidPluginValues {
        /// The dotted path of the plugin entry.
        path: String,
    },
    /// A file was refused (a link, FIFO or device in its place, a link among its folders, too
    /// large) or a system call on it failed; see [`crate::safe_fs`].
    #[error(transparent)]
    File(#[from] crate::safe_fs::SafeFsError),
    /// Reading, writing or comparing a file failed.
    #[error("{action} {path}")]
    Io {
        /// What was being done (`reading`, `writing`, ...).
        action: &'static str,
        /// The file concerned.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True for errors a person must fix in the file (as opposed to I/O failures).
    pub fn is_config_problem(&self) -> bool {
        !matches!(
            self,
            Error::Io { .. } | Error::File(crate::safe_fs::SafeFsError::Io { .. })
        )
    }
}
