//! glibc malloc settings for the long-running subcommands: the node agent, which runs on every
//! node, and the operator, whose memory follows the seed's object count. Sits between `main` (which calls [`reexec_with_tunables`] before anything else
//! starts) and the subcommands (which say what they want through
//! [`crate::cli::Command::malloc_tunables`]).
//!
//! By default glibc raises its mmap threshold each time a large block is freed (up to 32 MiB),
//! so the next large buffers come from the brk heap, and the heap keeps its high-water mark:
//! one apply of a large `osc.yaml` (decoder events, response bodies, the rendered
//! `last-applied-osc.yaml`) leaves megabytes behind that the idle agent never uses again. A
//! fixed threshold sends blocks of 128 KiB and more to mmap, which returns them to the kernel
//! when they are freed.
//!
//! glibc reads these settings only from the `GLIBC_TUNABLES` environment variable when the
//! process starts (the crate forbids `unsafe`, so `mallopt` is out). The agent therefore
//! executes itself once more with the variable set, unless the environment already has one:
//! an operator's own `GLIBC_TUNABLES` (in the unit's `Environment=`) wins. `exec` keeps the
//! process id, so systemd and the journal see one process.

use std::ffi::OsStr;

/// The environment variable glibc reads its tunables from.
pub const ENV_GLIBC_TUNABLES: &str = "GLIBC_TUNABLES";

/// Tunables of the agent: a fixed mmap threshold of 128 KiB (glibc's initial one, no longer
/// raised) and the same trim threshold (free memory above it at the top of the heap is
/// returned).
pub const AGENT_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072";

/// Tunables of the operator: two malloc arenas instead of eight per core (its worker threads
/// then share arenas, so memory freed by one thread is reused by the others and an idle
/// operator does not keep one high-water mark per thread), and the agent's fixed mmap and
/// trim thresholds, so the multi-megabyte list responses of a large seed go back to the
/// kernel once decoded and a seed that loses thousands of objects gives the memory back.
pub const OPERATOR_TUNABLES: &str = "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072";

/// Whether to execute again with `wanted`: only when glibc is the C library and the
/// environment sets no tunables of its own (which also ends the loop after one exec). Pure.
pub fn should_reexec(current: Option<&OsStr>, wanted: Option<&str>) -> bool {
    cfg!(all(target_os = "linux", target_env = "gnu")) && current.is_none() && wanted.is_some()
}

/// Executes this same binary (`/proc/self/exe`, the inode this process runs even if the file
/// was replaced since) with the same arguments and `GLIBC_TUNABLES=tunables`, when
/// [`should_reexec`] says so. Returns only when it did not: `Ok(false)` when nothing was to be
/// done, `Err` when the exec failed (the caller goes on with glibc's defaults and logs it).
pub fn reexec_with_tunables(tunables: Option<&str>) -> std::io::Result<bool> {
    use std::os::unix::process::CommandExt;

    let current = std::env::var_os(ENV_GLIBC_TUNABLES);
    let Some(tunables) = tunables.filter(|_| should_reexec(current.as_deref(), tunables)) else {
        return Ok(false);
    };
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    Err(std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env(ENV_GLIBC_TUNABLES, tunables)
        .exec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executes_again_only_without_tunables_of_its_own() {
        let glibc = cfg!(all(target_os = "linux", target_env = "gnu"));
        assert_eq!(should_reexec(None, Some(AGENT_TUNABLES)), glibc);
        // The exec'd process (or an operator) has them: never again.
        assert!(!should_reexec(
            Some(OsStr::new(AGENT_TUNABLES)),
            Some(AGENT_TUNABLES)
        ));
        assert!(!should_reexec(
            Some(OsStr::new("glibc.malloc.arena_max=1")),
            Some(AGENT_TUNABLES)
        ));
        // Subcommands that want none.
        assert!(!should_reexec(None, None));
    }

    #[test]
    fn nothing_to_do_returns_without_exec() {
        assert!(!reexec_with_tunables(None).unwrap());
    }
}
