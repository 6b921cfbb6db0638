//! Which pools may run a gVisor profile on the `kvm` platform (pure).
//!
//! `kvm` needs `/dev/kvm` on the node: bare-metal machine types, or virtual ones with nested
//! virtualisation. Nothing in a Shoot or a CloudProfile says which machine types offer it, so
//! the landscape names them: the operator flag `--gvisor-kvm-machine-types` (chart value
//! `gvisor.kvmMachineTypes`), a list of machine type names where `*` stands for any text
//! (`*.metal`, `c3-*-metal`). A `providerConfig` that asks for `kvm` on a pool whose machine
//! type is not in that list is refused before anything is shipped; on a listed type whose
//! node still lacks `/dev/kvm`, the installer refuses the profile on that node
//! ([`crate::gvisor_install`]). docs/usage.md ("gVisor profiles").

/// Why a pool may not run `kvm`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvmRefused {
    /// The pool's machine type is not listed.
    #[error(
        "{profile} asks for platform kvm, but the machine type {machine_type:?} of pool {pool} is not known to offer /dev/kvm; the landscape lists such machine types with the operator flag --gvisor-kvm-machine-types ({listed})"
    )]
    NotListed {
        /// `the default gVisor profile` or `gVisor profile "name"`.
        profile: String,
        /// The pool.
        pool: String,
        /// Its machine type.
        machine_type: String,
        /// What is listed, or `none listed`.
        listed: String,
    },
    /// The pool or its machine type is not in the Cluster's Shoot.
    #[error(
        "{profile} asks for platform kvm, but pool {pool} has no machine type in the Cluster's Shoot to check it against --gvisor-kvm-machine-types"
    )]
    UnknownMachineType {
        /// `the default gVisor profile` or `gVisor profile "name"`.
        profile: String,
        /// The pool.
        pool: String,
    },
}

/// Whether `machine_type` matches one of `patterns` (`*`: any text, also none).
pub fn listed(machine_type: &str, patterns: &[String]) -> bool {
    patterns
        .iter()
        .any(|pattern| matches(pattern, machine_type))
}

/// Checks that every `kvm` profile (`profiles`: name, `None` for the default, and whether it
/// asks for kvm) may run on `pool` with `machine_type`.
pub fn check<'a>(
    profiles: impl IntoIterator<Item = (Option<&'a str>, bool)>,
    pool: &str,
    machine_type: Option<&str>,
    patterns: &[String],
) -> Result<(), KvmRefused> {
    let Some((name, _)) = profiles.into_iter().find(|(_, kvm)| *kvm) else {
        return Ok(());
    };
    let profile = name.map_or_else(
        || "the default gVisor profile".to_string(),
        |n| format!("gVisor profile {n:?}"),
    );
    let Some(machine_type) = machine_type.filter(|t| !t.is_empty()) else {
        return Err(KvmRefused::UnknownMachineType {
            profile,
            pool: pool.to_string(),
        });
    };
    if listed(machine_type, patterns) {
        return Ok(());
    }
    Err(KvmRefused::NotListed {
        profile,
        pool: pool.to_string(),
        machine_type: crate::api::provider_config::shorten(machine_type),
        listed: if patterns.is_empty() {
            "none listed".to_string()
        } else {
            format!("listed: {}", patterns.join(", "))
        },
    })
}

/// Glob match with `*` only.
fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn patterns_match_whole_names_with_stars_for_any_text() {
        let list = patterns(&["*.metal", "c3-*-metal", "n2-standard-8"]);
        for yes in [
            "m5.metal",
            ".metal",
            "c3-highcpu-metal",
            "c3--metal",
            "n2-standard-8",
        ] {
            assert!(listed(yes, &list), "{yes}");
        }
        for no in [
            "m5.metal2",
            "m5.large",
            "c3-metal",
            "n2-standard-80",
            "xn2-standard-8",
            "",
        ] {
            assert!(!listed(no, &list), "{no}");
        }
        assert!(listed("anything", &patterns(&["*"])));
        assert!(listed("ab", &patterns(&["a*b"])) && !listed("a", &patterns(&["a*a"])));
        assert!(!listed("m5.metal", &[]));
    }

    #[test]
    fn only_kvm_profiles_need_a_listed_machine_type() {
        let list = patterns(&["*.metal"]);
        assert_eq!(
            check([(None, false), (Some("x"), false)], "p", None, &[]),
            Ok(())
        );
        assert_eq!(
            check([(Some("fast"), true)], "p", Some("m5.metal"), &list),
            Ok(())
        );
        assert_eq!(
            check(
                [(None, false), (Some("fast"), true)],
                "p",
                Some("m5.large"),
                &list
            )
            .unwrap_err()
            .to_string(),
            "gVisor profile \"fast\" asks for platform kvm, but the machine type \"m5.large\" of pool p is not known to offer /dev/kvm; the landscape lists such machine types with the operator flag --gvisor-kvm-machine-types (listed: *.metal)"
        );
        assert!(
            check([(None, true)], "p", Some("m5.large"), &[])
                .unwrap_err()
                .to_string()
                .starts_with("the default gVisor profile asks for platform kvm")
        );
        assert!(matches!(
            check([(None, true)], "p", None, &list),
            Err(KvmRefused::UnknownMachineType { .. })
        ));
    }
}
