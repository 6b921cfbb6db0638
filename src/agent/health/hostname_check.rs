//! gardener-node-agent's host name check (gardener `pkg/nodeagent/controller/hostnamecheck`):
//! the agent finds its Node by the host name it read at start, so when the kernel's host name
//! changes it exits and systemd starts it again with the new one. Checked every
//! [`CHECK_INTERVAL`], as GNA does; not when `--hostname` fixes the name.

use std::time::Duration;

/// How often the host name is read again ([`crate::agent::ports::host::Host::kernel_hostname`]).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// Whether `kernel` (the file's text) names another host than `known` (lower case, as the
/// agent keeps it). An empty name is no change: the kernel has none yet, or the read was cut.
pub fn changed(known: &str, kernel: &str) -> Option<String> {
    let now = kernel.trim().to_lowercase();
    (!now.is_empty() && now != known).then_some(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_name_is_a_change_case_and_space_are_not() {
        assert_eq!(changed("node-a", "Node-A\n"), None);
        assert_eq!(changed("node-a", "\n"), None);
        assert_eq!(changed("node-a", "node-b\n").as_deref(), Some("node-b"));
    }
}
