//! In-place node updates (GEP-31), the pure half: which in-place work an OSC change needs
//! (the journal's `inPlaceUpdates` flags), whether machine-controller-manager lets the node
//! start it, and how command output and failure reasons are judged. No I/O; the calls to the
//! API server and the host are in [`crate::agent::in_place::steps`], which the controller runs
//! around [`crate::agent::pipeline::apply`] (`docs/agent.md#in-place-updates`).
//!
//! Follows gardener-node-agent (gardener v1.149,
//! `pkg/nodeagent/controller/operatingsystemconfig/changes.go`: flags computed only when the
//! last applied and the new OSC both have `spec.inPlaceUpdates`; `reconciler.go`: the gate,
//! the output patterns, the finish condition) and machine-controller-manager's keys
//! (`pkg/apis/machine/v1alpha1/machine_types.go` for the Node condition, the labels file for
//! `node.machine.sapcloud.io/*`). Deliberate differences:
//!
//! - the node's OS version is read the way this extension's update script reads it
//!   (`/etc/debian_version` on Debian, the leading number of `VERSION` in os-release on
//!   Ubuntu), so a Debian point release is seen; other OSes fall back to GNA's rule (the
//!   first dotted number in `PRETTY_NAME`);
//! - versions compare by their numbers (`12.7` = `12.7.0`);
//! - an OSC without the kubelet config file on either side has no kubelet config change
//!   (GNA fails the reconcile); reservations are compared by value after summing
//!   `kubeReserved` and `systemReserved`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::agent::pipeline::journal::InPlaceUpdateFlags;
use crate::agent::pipeline::osc::{self, NodeOsc};
use crate::agent::ports::program::ProgramOutput;
use crate::api::operatingsystemconfig::InPlaceUpdates;
use crate::api::quantity::Quantity;

pub use crate::api::constants::{CONDITION_IN_PLACE_UPDATE, REASON_READY_FOR_UPDATE};
/// Node label with the agent's result.
pub const LABEL_UPDATE_RESULT: &str = "node.machine.sapcloud.io/update-result";
/// [`LABEL_UPDATE_RESULT`] after a successful update.
pub const RESULT_SUCCESSFUL: &str = "successful";
/// [`LABEL_UPDATE_RESULT`] after a failed update (machine-controller-manager keeps the node
/// out of the rollout; the agent retries on its next reconcile).
pub const RESULT_FAILED: &str = "failed";
/// Node annotation with the reason of a failed update.
pub const ANNOTATION_FAILED_REASON: &str = "node.machine.sapcloud.io/update-failed-reason";
/// Node annotation with the OS version an update was started for.
pub const ANNOTATION_UPDATING_OS_VERSION: &str =
    "node-agent.gardener.cloud/updating-operating-system-version";
/// Where the OSC carries kubelet's configuration (a `spec.files` entry).
pub const KUBELET_CONFIG_PATH: &str = "/var/lib/kubelet/config/kubelet";
/// kubelet's CPU manager state, removed when the policy changes (kubelet refuses to start
/// with a state of another policy).
pub const CPU_MANAGER_STATE_PATH: &str = "/var/lib/kubelet/cpu_manager_state";
/// os-release.
pub const OS_RELEASE_PATH: &str = "/etc/os-release";
/// os-release when `/etc/os-release` is missing.
pub const OS_RELEASE_FALLBACK_PATH: &str = "/usr/lib/os-release";
/// Debian's full version (`12.7`).
pub const DEBIAN_VERSION_PATH: &str = "/etc/debian_version";
/// Longest failure reason written to the Node (annotation values share a 256 KiB budget).
pub const MAX_REASON_CHARS: usize = 1024;

/// Whether any in-place work is flagged.
pub fn any(flags: &InPlaceUpdateFlags) -> bool {
    flags.operating_system
        || kubelet(flags)
        || flags.certificate_authorities_rotation.kubelet
        || flags.certificate_authorities_rotation.node_agent
        || flags.service_account_key_rotation
}

/// Whether kubelet work (minor version, config, CPU manager policy) is flagged: kubelet must
/// be healthy again before the update counts as done.
pub fn kubelet(flags: &InPlaceUpdateFlags) -> bool {
    flags.kubelet.minor_version || flags.kubelet.config || flags.kubelet.cpu_manager_policy
}

/// The node's OS version from os-release (and `/etc/debian_version` on Debian), read as the
/// update script reads it; `None` when none is found.
pub fn os_version(os_release: &str, debian_version: Option<&str>) -> Option<String> {
    let fields = os_release_fields(os_release);
    let get = |key: &str| fields.get(key).map(String::as_str).unwrap_or_default();
    match get("ID") {
        "debian" => debian_version
            .map(str::trim)
            .filter(|v| is_dotted_number(v))
            .map(str::to_string)
            .or_else(|| Some(get("VERSION_ID").to_string()).filter(|v| is_dotted_number(v))),
        "ubuntu" => leading_number(get("VERSION")),
        _ => first_number(get("PRETTY_NAME")),
    }
}

/// `KEY=value` lines of os-release, quotes removed.
fn os_release_fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| {
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            (key.trim().to_string(), value.to_string())
        })
        .collect()
}

/// Digits separated by single dots.
fn is_dotted_number(text: &str) -> bool {
    !text.is_empty()
        && text
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// The dotted number `text` starts with.
fn leading_number(text: &str) -> Option<String> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let number = text[..end].trim_end_matches('.');
    is_dotted_number(number).then(|| number.to_string())
}

/// The first dotted number anywhere in `text` (GNA's `\b\d+(\.\d+)*\b` on `PRETTY_NAME`).
fn first_number(text: &str) -> Option<String> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    leading_number(&text[start..])
}

/// The numbers of a version (`v1.33.2` → 1, 33, 2); `None` when it is not one.
fn numbers(version: &str) -> Option<Vec<u64>> {
    let version = version.trim();
    let version = version.strip_prefix('v').unwrap_or(version);
    // Pre-release or build suffixes do not count (`1.33.0-gke.1`).
    let core = version.split(['-', '+']).next().unwrap_or_default();
    core.split('.').map(|part| part.parse().ok()).collect()
}

/// Whether two versions have the same numbers (missing parts count as 0).
pub fn same_version(a: &str, b: &str) -> bool {
    match (numbers(a), numbers(b)) {
        (Some(a), Some(b)) => {
            let len = a.len().max(b.len());
            (0..len).all(|i| a.get(i).unwrap_or(&0) == b.get(i).unwrap_or(&0))
        }
        _ => a.trim() == b.trim(),
    }
}

/// Whether `new` is another minor (or major) version than `old`.
pub fn minor_version_changed(old: &str, new: &str) -> Result<bool, FlagsError> {
    let minor = |version: &str| {
        numbers(version)
            .filter(|n| n.len() >= 2)
            .map(|n| (n[0], n[1]))
            .ok_or_else(|| FlagsError::Version(version.to_string()))
    };
    Ok(minor(old)? != minor(new)?)
}

/// Why the flags could not be computed (the reconcile fails and is retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagsError {
    /// The node's OS version could not be read.
    #[error("the node's operating system version is not known (os-release has none)")]
    UnknownOsVersion,
    /// A kubelet version is not `major.minor[.patch]`.
    #[error("kubelet version {0:?} is not a version")]
    Version(String),
    /// The kubelet config file of an OSC does not decode.
    #[error("kubelet config {path}: {message}")]
    KubeletConfig {
        /// The file.
        path: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// The kubelet settings an in-place update reacts to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletSettings {
    /// `evictionHard` thresholds GNA compares (missing: empty).
    pub eviction_hard: BTreeMap<&'static str, String>,
    /// `kubeReserved` + `systemReserved` per resource, by value in units of 10⁻⁹ (see
    /// [`Quantity::nanos`]; `None`: not reserved).
    pub reserved: BTreeMap<&'static str, Option<i128>>,
    /// `cpuManagerPolicy` as written.
    pub cpu_manager_policy: String,
}

/// The `evictionHard` signals that change a node in place.
const EVICTION_SIGNALS: [&str; 5] = [
    "memory.available",
    "imagefs.available",
    "imagefs.inodesFree",
    "nodefs.available",
    "nodefs.inodesFree",
];
/// The reserved resources that change a node in place.
const RESERVED: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct KubeletConfigFields {
    #[serde(default)]
    eviction_hard: Option<BTreeMap<String, String>>,
    #[serde(default)]
    kube_reserved: Option<BTreeMap<String, String>>,
    #[serde(default)]
    system_reserved: Option<BTreeMap<String, String>>,
    #[serde(default)]
    cpu_manager_policy: Option<String>,
}

/// The kubelet settings of `osc` (from the inline `spec.files` entry at
/// [`KUBELET_CONFIG_PATH`]); `None` when the OSC has no such file.
pub fn kubelet_settings(osc: &NodeOsc) -> Result<Option<KubeletSettings>, FlagsError> {
    let error = |message: String| FlagsError::KubeletConfig {
        path: KUBELET_CONFIG_PATH,
        message,
    };
    let Some(file) = osc
        .spec
        .files
        .iter()
        .find(|f| f.path == KUBELET_CONFIG_PATH)
    else {
        return Ok(None);
    };
    let Some(inline) = &file.content.inline else {
        return Err(error("not inline content".into()));
    };
    let bytes = osc::decode_inline(inline).map_err(error)?;
    let fields: KubeletConfigFields =
        serde_norway::from_slice(&bytes).map_err(|e| error(e.to_string()))?;
    let eviction = fields.eviction_hard.unwrap_or_default();
    let mut reserved = BTreeMap::new();
    for resource in RESERVED {
        let mut sum: Option<Quantity> = None;
        for map in [&fields.kube_reserved, &fields.system_reserved]
            .into_iter()
            .flatten()
        {
            if let Some(text) = map.get(resource) {
                let invalid = || error(format!("{resource} reservation {text:?}"));
                let value = Quantity::parse(text).ok_or_else(invalid)?;
                sum = Some(match sum {
                    Some(sum) => sum.checked_add(value).ok_or_else(invalid)?,
                    None => value,
                });
            }
        }
        reserved.insert(resource, sum.as_ref().map(Quantity::nanos));
    }
    Ok(Some(KubeletSettings {
        eviction_hard: EVICTION_SIGNALS
            .into_iter()
            .filter_map(|signal| eviction.get(signal).map(|v| (signal, v.clone())))
            .collect(),
        reserved,
        cpu_manager_policy: fields.cpu_manager_policy.unwrap_or_default(),
    }))
}

/// The in-place flags of a change from `old` (the last applied OSC) to `new`, with the node's
/// current OS version. All false unless both OSCs have `spec.inPlaceUpdates`.
pub fn flags(
    old: Option<&NodeOsc>,
    new: &NodeOsc,
    current_os: Option<&str>,
) -> Result<InPlaceUpdateFlags, FlagsError> {
    let mut flags = InPlaceUpdateFlags::default();
    let Some(old) = old else { return Ok(flags) };
    let (Some(old_spec), Some(new_spec)) = (&old.spec.in_place_updates, &new.spec.in_place_updates)
    else {
        return Ok(flags);
    };
    let current = current_os.ok_or(FlagsError::UnknownOsVersion)?;
    flags.operating_system = !same_version(current, &new_spec.operating_system_version);
    if old_spec.kubelet != new_spec.kubelet {
        flags.kubelet.minor_version = minor_version_changed(&old_spec.kubelet, &new_spec.kubelet)?;
    }
    if let (Some(old_kubelet), Some(new_kubelet)) = (kubelet_settings(old)?, kubelet_settings(new)?)
    {
        flags.kubelet.config = old_kubelet.eviction_hard != new_kubelet.eviction_hard
            || old_kubelet.reserved != new_kubelet.reserved;
        flags.kubelet.cpu_manager_policy =
            old_kubelet.cpu_manager_policy != new_kubelet.cpu_manager_policy;
    }
    let (ca, sa) = rotations(old_spec, new_spec);
    flags.certificate_authorities_rotation.kubelet = ca;
    flags.certificate_authorities_rotation.node_agent = ca;
    flags.service_account_key_rotation = sa;
    Ok(flags)
}

/// CA and service-account-key rotation: started for the first time (no rotation info before,
/// an initiation time now) or a changed initiation time.
pub fn rotations(old: &InPlaceUpdates, new: &InPlaceUpdates) -> (bool, bool) {
    let Some(new) = &new.credentials_rotation else {
        return (false, false);
    };
    let Some(old) = &old.credentials_rotation else {
        let ca = new
            .certificate_authorities
            .as_ref()
            .is_some_and(|r| r.last_initiation_time.is_some());
        let sa = new
            .service_account_key
            .as_ref()
            .is_some_and(|r| r.last_initiation_time.is_some());
        return (ca, sa);
    };
    let changed = |old: &Option<_>, new: &Option<_>| match (old, new) {
        (
            Some(crate::api::operatingsystemconfig::RotationInitiation {
                last_initiation_time: old,
            }),
            Some(crate::api::operatingsystemconfig::RotationInitiation {
                last_initiation_time: new,
            }),
        ) => old != new,
        _ => false,
    };
    (
        changed(&old.certificate_authorities, &new.certificate_authorities),
        changed(&old.service_account_key, &new.service_account_key),
    )
}

/// What the Node says about starting flagged in-place work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// machine-controller-manager made the node ready (condition `InPlaceUpdate` with reason
    /// `ReadyForUpdate`).
    Ready,
    /// An earlier attempt failed (`update-result=failed`): try again.
    Retry,
    /// Not selected or not drained yet: wait for the Node to change.
    Wait,
}

/// The gate for flagged in-place work: `reason` is the `InPlaceUpdate` condition's reason,
/// `result` the `update-result` label.
pub fn gate(reason: Option<&str>, result: Option<&str>) -> Gate {
    if reason == Some(REASON_READY_FOR_UPDATE) {
        Gate::Ready
    } else if result == Some(RESULT_FAILED) {
        Gate::Retry
    } else {
        Gate::Wait
    }
}

/// Whether the finished update is reported (pods deleted, `update-result=successful`): the
/// node was made ready and is not reported successful yet, or an earlier attempt failed.
pub fn should_report_success(reason: Option<&str>, result: Option<&str>) -> bool {
    (reason == Some(REASON_READY_FOR_UPDATE) && result != Some(RESULT_SUCCESSFUL))
        || result == Some(RESULT_FAILED)
}

/// Whether the OS update was tried for `desired` before and the node still runs another
/// version (it rolled back, or the update did not take): the update failed.
pub fn rolled_back(flags: &InPlaceUpdateFlags, attempted: Option<&str>, desired: &str) -> bool {
    flags.operating_system && attempted.is_some_and(|attempted| same_version(attempted, desired))
}

/// How a failed OS update command's output is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `network problems`: try again (every 30 s, up to 5 min).
    Retriable,
    /// `invalid arguments` or `system failure`, or anything else: the update failed.
    Fatal,
}

/// Judges the output of a failed OS update command (case-insensitive, as GNA).
pub fn classify(output: &str) -> Failure {
    if output.to_lowercase().contains("network problems") {
        Failure::Retriable
    } else {
        Failure::Fatal
    }
}

/// A failure reason fit for a Node annotation: control characters become spaces, runs of
/// white space one space, at most [`MAX_REASON_CHARS`] characters (cut with `…`).
pub fn failure_reason(text: &str) -> String {
    let collapsed = one_line(text);
    if collapsed.chars().count() <= MAX_REASON_CHARS {
        return collapsed;
    }
    let mut cut: String = collapsed.chars().take(MAX_REASON_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// `text` on one line: control characters become spaces, runs of white space one space.
fn one_line(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    cleaned.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The failure reason of a failed OS update run, for the Node annotation: the command's own
/// last message first (the last non-blank line of its error output, else of its standard
/// output: where a script such as this extension's `os-update.sh` says `system failure: ...`),
/// then the command and how it ended, then as much of the output before that message as fits
/// in [`MAX_REASON_CHARS`], from its end (after a failed `apt-get full-upgrade` the
/// progress lines come first and the errors last). One line, no control characters.
pub fn command_failure_reason(command: &str, output: &ProgramOutput) -> String {
    let (last, earlier) = last_message(output);
    let head = failure_reason(&format!("{last} ({command}: {})", output.ending));
    let earlier = one_line(&earlier);
    const SEPARATOR: &str = "; output before it: ";
    let budget = MAX_REASON_CHARS.saturating_sub(head.chars().count() + SEPARATOR.len());
    // Too little room left for a useful tail, or nothing to show.
    if earlier.is_empty() || budget < 32 {
        return head;
    }
    let length = earlier.chars().count();
    let tail: String = if length <= budget {
        earlier
    } else {
        let kept: String = earlier.chars().skip(length - (budget - 1)).collect();
        format!("…{kept}")
    };
    format!("{head}{SEPARATOR}{tail}")
}

/// The last non-blank line of the error output (else of the standard output) and everything
/// printed before it (standard output first).
fn last_message(output: &ProgramOutput) -> (String, String) {
    if let Some((line, before)) = split_last_line(&output.stderr) {
        return (line, format!("{}\n{before}", output.stdout));
    }
    split_last_line(&output.stdout)
        .unwrap_or_else(|| ("the command printed nothing".to_string(), String::new()))
}

/// The last non-blank line of `text` and the lines before it.
fn split_last_line(text: &str) -> Option<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let index = lines.iter().rposition(|line| !line.trim().is_empty())?;
    let before = lines.get(..index).unwrap_or_default().join("\n");
    Some((lines.get(index)?.to_string(), before))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::inline_file;
    use crate::api::operatingsystemconfig::{CredentialsRotation, RotationInitiation};

    fn in_place(os: &str, kubelet: &str) -> InPlaceUpdates {
        InPlaceUpdates {
            operating_system_version: os.into(),
            kubelet: kubelet.into(),
            credentials_rotation: None,
        }
    }

    fn osc(spec: Option<InPlaceUpdates>, kubelet_config: Option<&str>) -> NodeOsc {
        let mut osc = NodeOsc::default();
        osc.spec.in_place_updates = spec;
        if let Some(config) = kubelet_config {
            osc.spec
                .files
                .push(inline_file(KUBELET_CONFIG_PATH, config));
        }
        osc
    }

    const DEBIAN: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nID=debian\n";
    const UBUNTU: &str = "PRETTY_NAME=\"Ubuntu 24.04.2 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nVERSION=\"24.04.2 LTS (Noble Numbat)\"\nID=ubuntu\n";

    #[test]
    fn the_os_version_is_read_like_the_update_script_reads_it() {
        assert_eq!(os_version(DEBIAN, Some("12.7\n")).as_deref(), Some("12.7"));
        // Without (or with a non-numeric) debian_version, os-release's major version.
        assert_eq!(os_version(DEBIAN, None).as_deref(), Some("12"));
        assert_eq!(
            os_version(DEBIAN, Some("trixie/sid\n")).as_deref(),
            Some("12")
        );
        assert_eq!(os_version(UBUNTU, None).as_deref(), Some("24.04.2"));
        // Others: GNA's rule, the first number in PRETTY_NAME.
        let garden = "ID=gardenlinux\nPRETTY_NAME='Garden Linux 1592.4'\n";
        assert_eq!(os_version(garden, None).as_deref(), Some("1592.4"));
        assert_eq!(os_version("ID=x\nPRETTY_NAME=rolling\n", None), None);
    }

    #[test]
    fn versions_compare_by_number() {
        assert!(same_version("12.7", "12.7.0"));
        assert!(same_version("v1.33.2", "1.33.2"));
        assert!(!same_version("12.7", "12.8"));
        assert!(!same_version("24.04", "24.04.2"));
        assert_eq!(minor_version_changed("1.33.1", "1.33.4"), Ok(false));
        assert_eq!(minor_version_changed("1.33.4", "1.34.0"), Ok(true));
        assert_eq!(minor_version_changed("v1.33.4", "2.0.0"), Ok(true));
        assert!(minor_version_changed("1", "1.34.0").is_err());
    }

    #[test]
    fn no_flags_unless_both_oscs_are_in_place() {
        let new = osc(Some(in_place("12.8", "1.34.0")), None);
        assert_eq!(
            flags(None, &new, Some("12.7")),
            Ok(InPlaceUpdateFlags::default())
        );
        let old = osc(None, None);
        assert_eq!(
            flags(Some(&old), &new, Some("12.7")),
            Ok(InPlaceUpdateFlags::default())
        );
        let old = osc(Some(in_place("12.7", "1.33.0")), None);
        assert_eq!(
            flags(Some(&old), &osc(None, None), Some("12.7")),
            Ok(InPlaceUpdateFlags::default())
        );
        // Both in place: the OS version must be known.
        assert_eq!(
            flags(Some(&old), &new, None),
            Err(FlagsError::UnknownOsVersion)
        );
    }

    #[test]
    fn os_and_kubelet_version_flags() {
        let old = osc(Some(in_place("12.7", "1.33.0")), None);
        let f = flags(
            Some(&old),
            &osc(Some(in_place("12.8", "1.33.5")), None),
            Some("12.7"),
        )
        .unwrap();
        assert!(f.operating_system);
        assert!(!f.kubelet.minor_version);
        assert!(any(&f) && !kubelet(&f));
        // The node already runs the wanted version (after the reboot): no OS work.
        let f = flags(
            Some(&old),
            &osc(Some(in_place("12.8", "1.34.0")), None),
            Some("12.8.0"),
        )
        .unwrap();
        assert!(!f.operating_system);
        assert!(f.kubelet.minor_version);
        assert!(kubelet(&f));
        let f = flags(
            Some(&old),
            &osc(Some(in_place("12.7", "1.33.0")), None),
            Some("12.7"),
        )
        .unwrap();
        assert!(!any(&f));
    }

    #[test]
    fn kubelet_config_flags_follow_the_fields_gna_compares() {
        let spec = || Some(in_place("12.7", "1.33.0"));
        let base = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: 100Mi\n  pid.available: 10%\nkubeReserved:\n  cpu: 80m\n  memory: 1Gi\nsystemReserved:\n  memory: 512Mi\nmaxPods: 110\n";
        let check = |new: &str| {
            flags(
                Some(&osc(spec(), Some(base))),
                &osc(spec(), Some(new)),
                Some("12.7"),
            )
            .unwrap()
        };
        // Fields GNA ignores.
        let f = check(&base.replace("maxPods: 110", "maxPods: 250"));
        assert!(!f.kubelet.config && !f.kubelet.cpu_manager_policy);
        let f = check(&base.replace("pid.available: 10%", "pid.available: 5%"));
        assert!(!f.kubelet.config);
        // Same sum, moved between kube and system reservations, written differently.
        let moved = base
            .replace("  memory: 1Gi\n", "  memory: 1024Mi\n")
            .replace(
                "kubeReserved:\n  cpu: 80m",
                "kubeReserved:\n  cpu: \"0.08\"",
            );
        assert!(!check(&moved).kubelet.config);
        // Changes that count.
        assert!(
            check(&base.replace("memory.available: 100Mi", "memory.available: 200Mi"))
                .kubelet
                .config
        );
        assert!(check(&base.replace("cpu: 80m", "cpu: 100m")).kubelet.config);
        assert!(
            check(&format!("{base}cpuManagerPolicy: static\n"))
                .kubelet
                .cpu_manager_policy
        );
        // No kubelet config on one side: no config flag.
        let f = flags(
            Some(&osc(spec(), None)),
            &osc(spec(), Some(base)),
            Some("12.7"),
        )
        .unwrap();
        assert!(!f.kubelet.config);
        // A config that does not decode fails.
        assert!(
            flags(
                Some(&osc(spec(), Some(base))),
                &osc(spec(), Some("kubeReserved: [")),
                Some("12.7")
            )
            .is_err()
        );
    }

    #[test]
    fn quantities() {
        // Reservations are compared by value in units of 10⁻⁹.
        let value = |text: &str| Quantity::parse(text).as_ref().map(Quantity::nanos);
        assert_eq!(value("100m"), Some(100_000_000));
        assert_eq!(value("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(value("2e3"), Some(2000 * 1_000_000_000));
        assert_eq!(value("1.5G"), Some(1_500_000_000 * 1_000_000_000));
        assert_eq!(value("12"), Some(12 * 1_000_000_000));
        assert_eq!(value("abc"), None);
        assert_eq!(value("1Zi"), None);
        assert_eq!(value("1Gi"), value("1073741824"));
    }

    #[test]
    fn moving_a_reservation_between_kube_and_system_is_no_change() {
        let spec = || Some(in_place("12.7", "1.33.0"));
        let config = |kube: &str, system: &str| {
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nkubeReserved:\n  cpu: \"{kube}\"\nsystemReserved:\n  cpu: \"{system}\"\n"
            )
        };
        let check = |old: &str, new: &str| {
            flags(
                Some(&osc(spec(), Some(old))),
                &osc(spec(), Some(new)),
                Some("12.7"),
            )
            .unwrap()
            .kubelet
            .config
        };
        // 200m + 100m (f64: 0.30000000000000004) and 300m + 0 are the same 300m.
        assert!(!check(&config("200m", "100m"), &config("300m", "0")));
        assert!(!check(&config("100m", "200m"), &config("200m", "100m")));
        assert!(check(&config("200m", "100m"), &config("200m", "200m")));
    }

    #[test]
    fn rotation_flags() {
        let at = |s: &str| RotationInitiation {
            last_initiation_time: Some(s.parse().unwrap()),
        };
        let with = |ca: Option<RotationInitiation>, sa: Option<RotationInitiation>| {
            let mut spec = in_place("12.7", "1.33.0");
            spec.credentials_rotation = Some(CredentialsRotation {
                certificate_authorities: ca,
                service_account_key: sa,
            });
            spec
        };
        let none = in_place("12.7", "1.33.0");
        // First rotation info.
        assert_eq!(
            rotations(&none, &with(None, Some(at("2026-01-01T00:00:00Z")))),
            (false, true)
        );
        assert_eq!(
            rotations(&none, &with(Some(at("2026-01-01T00:00:00Z")), None)),
            (true, false)
        );
        // Changed time.
        let old = with(
            Some(at("2026-01-01T00:00:00Z")),
            Some(at("2026-01-01T00:00:00Z")),
        );
        let new = with(
            Some(at("2026-01-01T00:00:00Z")),
            Some(at("2026-02-01T00:00:00Z")),
        );
        assert_eq!(rotations(&old, &new), (false, true));
        assert_eq!(rotations(&old, &old), (false, false));
        assert_eq!(rotations(&old, &none), (false, false));
    }

    #[test]
    fn the_gate_waits_for_ready_for_update_or_a_failed_result() {
        assert_eq!(gate(Some("ReadyForUpdate"), None), Gate::Ready);
        assert_eq!(gate(Some("ReadyForUpdate"), Some("failed")), Gate::Ready);
        assert_eq!(gate(Some("SelectedForUpdate"), Some("failed")), Gate::Retry);
        for reason in [
            None,
            Some("CandidateForUpdate"),
            Some("SelectedForUpdate"),
            Some("DrainSuccessful"),
            Some("UpdateSuccessful"),
        ] {
            assert_eq!(gate(reason, None), Gate::Wait, "{reason:?}");
        }
        assert!(should_report_success(Some("ReadyForUpdate"), None));
        assert!(!should_report_success(
            Some("ReadyForUpdate"),
            Some("successful")
        ));
        assert!(should_report_success(None, Some("failed")));
        assert!(!should_report_success(Some("UpdateSuccessful"), None));
    }

    #[test]
    fn a_rollback_is_an_attempt_for_the_wanted_version_that_did_not_take() {
        let mut f = InPlaceUpdateFlags::default();
        assert!(!rolled_back(&f, Some("12.8"), "12.8"));
        f.operating_system = true;
        assert!(rolled_back(&f, Some("12.8"), "12.8.0"));
        assert!(!rolled_back(&f, Some("12.7"), "12.8"));
        assert!(!rolled_back(&f, None, "12.8"));
    }

    #[test]
    fn command_output_and_reasons() {
        assert_eq!(
            classify("E: network problems: apt-get update failed"),
            Failure::Retriable
        );
        assert_eq!(classify("Network Problems"), Failure::Retriable);
        assert_eq!(classify("invalid arguments: 13.1"), Failure::Fatal);
        assert_eq!(classify("system failure: dpkg"), Failure::Fatal);
        assert_eq!(classify("segfault"), Failure::Fatal);
        assert_eq!(failure_reason("a\nb\t\x1b[31mc  d\r\n"), "a b [31mc d");
        let long = "é".repeat(MAX_REASON_CHARS + 10);
        let reason = failure_reason(&long);
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS);
        assert!(reason.ends_with('…'));
    }

    /// Issue #26 item 8: after a failed `apt-get full-upgrade` the reason held apt's progress
    /// lines (standard output came first and filled the 1,024 characters), not the script's
    /// `system failure: ...` line.
    #[test]
    fn the_commands_last_message_comes_first_then_the_end_of_the_output() {
        let progress: String = (0..2000)
            .map(|i| format!("Get:{i} http://deb.debian.org/debian bookworm/main pkg{i} [12 kB]\n"))
            .collect();
        let output = ProgramOutput {
            stdout: progress,
            stderr: "E: Sub-process /usr/bin/dpkg returned an error code (1)\n\x1b[31msystem failure: apt-get full-upgrade failed (see above)\x1b[0m\n\n".into(),
            ending: "exit status: 1".into(),
        };
        let reason = command_failure_reason("/opt/bin/os-update", &output);
        assert!(
            reason.starts_with(
                "[31msystem failure: apt-get full-upgrade failed (see above) [0m (/opt/bin/os-update: exit status: 1); output before it: …"
            ),
            "{reason}"
        );
        assert!(
            reason.ends_with(
                "pkg1999 [12 kB] E: Sub-process /usr/bin/dpkg returned an error code (1)"
            ),
            "{reason}"
        );
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS);
        assert!(!reason.chars().any(char::is_control), "{reason:?}");
        assert_eq!(classify(&output.combined()), Failure::Fatal);

        // Only standard output: its last line leads; short output is kept whole.
        let output = ProgramOutput {
            stdout: "updating\ninvalid arguments: 13.1\n".into(),
            stderr: String::new(),
            ending: "exit status: 2".into(),
        };
        assert_eq!(
            command_failure_reason("update", &output),
            "invalid arguments: 13.1 (update: exit status: 2); output before it: updating"
        );
        // Nothing printed.
        let output = ProgramOutput {
            ending: "signal: 9 (SIGKILL)".into(),
            ..ProgramOutput::default()
        };
        assert_eq!(
            command_failure_reason("update", &output),
            "the command printed nothing (update: signal: 9 (SIGKILL))"
        );
        // A network problem anywhere in the output is retried (GNA matches the whole text).
        let output = ProgramOutput {
            stdout: "network problems: mirror down\n".into(),
            stderr: "exiting\n".into(),
            ending: "exit status: 1".into(),
        };
        assert_eq!(classify(&output.combined()), Failure::Retriable);
    }
}
