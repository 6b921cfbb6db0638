//! The OperatingSystemConfig as the node sees it: decoding the `osc.yaml` of the node-agent
//! secret, checking it before anything touches the disk, and merging spec and status into the
//! units and files to apply (`docs/agent.md#apply-order`, `#diff-rules`). Pure.
//!
//! The secret holds a serialised OSC with only `spec.{units,files,criConfig,inPlaceUpdates}`
//! and `status.{extensionUnits,extensionFiles,inPlaceUpdates}`. gardenlet's Go encoder writes
//! `type: ""` and `purpose: ""` (fields without `omitempty`) and `creationTimestamp: null`,
//! which the seed-side CRD type would reject, so the node decodes into [`NodeOsc`]: the same
//! unit/file types from [`crate::api::operatingsystemconfig`], nothing else, unknown fields
//! ignored.
//!
//! [`decode`] refuses a document that decodes to more than [`MAX_DECODED_BYTES`] before
//! building anything from it ([`decoded_size`]: YAML aliases are counted every time they are
//! replayed, so a small `osc.yaml` of aliases cannot expand into hundreds of megabytes).
//!
//! [`validate`] rejects what must never reach the disk: relative paths, paths with `.`/`..`
//! components, unknown inline encodings, base64 that does not decode, files with zero or
//! several content sources, unit and drop-in names that are not plain file names. Unknown unit
//! commands and other type errors already fail in [`decode`].

use std::collections::BTreeSet;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::api::operatingsystemconfig::{
    CriConfig, DropIn, File, FileContentInline, InPlaceUpdates, InPlaceUpdatesStatus, Unit,
};
use crate::osc_rules;
use crate::printable::escape_controls;

pub mod decoded_size;

/// `apiVersion` written into `last-applied-osc.yaml`.
pub const OSC_API_VERSION: &str = "extensions.gardener.cloud/v1alpha1";
/// `kind` written into `last-applied-osc.yaml`.
pub const OSC_KIND: &str = "OperatingSystemConfig";
/// Encoding value for base64 inline content.
pub const ENCODING_BASE64: &str = "b64";
/// The most an `osc.yaml` may decode to: scalar bytes plus one per node, YAML aliases counted
/// every time they are replayed ([`decoded_size`]). Twice the largest `osc.yaml` a Secret can
/// carry (1 MiB), so every document without aliases passes, while one whose aliases expand it
/// is refused before it costs memory. It also keeps what the agent writes from it (the
/// journal: new and old files; `last-applied-osc.yaml`) under the size it reads back.
pub const MAX_DECODED_BYTES: u64 = 2 * 1024 * 1024;

/// The parts of an OperatingSystemConfig a node applies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeOsc {
    /// `extensions.gardener.cloud/v1alpha1` when written by us.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `OperatingSystemConfig` when written by us.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Units, files and CRI configuration. Required: an empty document must not read as
    /// "no units, no files" and make the agent remove everything it applied.
    pub spec: NodeOscSpec,
    /// Units and files the OS extension added.
    #[serde(default)]
    pub status: NodeOscStatus,
}

/// Spec part of a [`NodeOsc`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeOscSpec {
    /// systemd units.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
    /// Files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    /// Container runtime configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_config: Option<CriConfig>,
    /// In-place update information ([`crate::agent::in_place::rules`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<InPlaceUpdates>,
}

/// Status part of a [`NodeOsc`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeOscStatus {
    /// Units added by the OS extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_units: Vec<Unit>,
    /// Files added by the OS extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extension_files: Vec<File>,
    /// In-place update instructions (the OS update command, [`crate::agent::in_place::steps`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_updates: Option<InPlaceUpdatesStatus>,
}

/// Units and files after merging spec and status: what the node must look like. Files are
/// borrowed from the OSC (their contents are most of its size); units are merged, so owned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effective<'a> {
    /// Units merged by name, in order of first appearance.
    pub units: Vec<Unit>,
    /// Files of spec then status, without files meant for other hosts.
    pub files: Vec<&'a File>,
}

impl Effective<'_> {
    /// The unit called `name`.
    pub fn unit(&self, name: &str) -> Option<&Unit> {
        self.units.iter().find(|unit| unit.name == name)
    }

    /// The (first) file at `path`.
    pub fn file(&self, path: &str) -> Option<&File> {
        self.files.iter().copied().find(|file| file.path == path)
    }
}

/// Why an OSC is refused. A configuration problem: retrying does not help, a new secret does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOsc {
    /// The secret has no `osc.yaml` key.
    #[error("the secret has no `{0}` data key")]
    MissingData(&'static str),
    /// `osc.yaml` is not YAML of the expected shape (includes unknown unit commands,
    /// cgroup drivers and other enum values).
    #[error("osc.yaml does not decode: {}", escape_controls(.0))]
    Decode(String),
    /// `osc.yaml` decodes to more than [`MAX_DECODED_BYTES`] (YAML aliases included).
    #[error(
        "osc.yaml decodes to more than {limit} bytes (YAML aliases counted each time they are used); it is not decoded"
    )]
    TooLarge {
        /// [`MAX_DECODED_BYTES`].
        limit: u64,
    },
    /// One or more entries are invalid; every problem is listed.
    #[error("osc.yaml is invalid: {}", escape_controls(&.0.join("; ")))]
    Invalid(Vec<String>),
}

/// Decodes `osc.yaml` when it decodes to at most [`MAX_DECODED_BYTES`]. `apiVersion` and
/// `kind` are set to [`OSC_API_VERSION`] and [`OSC_KIND`] whatever the document says (or
/// omits), so that [`encode`] records them.
pub fn decode(bytes: &[u8]) -> Result<NodeOsc, InvalidOsc> {
    match decoded_size::within(bytes, MAX_DECODED_BYTES) {
        Ok(()) => {}
        Err(decoded_size::SizeError::Exceeded(_)) => {
            return Err(InvalidOsc::TooLarge {
                limit: MAX_DECODED_BYTES,
            });
        }
        Err(decoded_size::SizeError::Syntax(error)) => {
            return Err(InvalidOsc::Decode(error.to_string()));
        }
    }
    let mut osc: NodeOsc =
        serde_norway::from_slice(bytes).map_err(|error| InvalidOsc::Decode(error.to_string()))?;
    OSC_API_VERSION.clone_into(&mut osc.api_version);
    OSC_KIND.clone_into(&mut osc.kind);
    Ok(osc)
}

/// Serialises an OSC for `last-applied-osc.yaml` (a decoded one carries apiVersion and kind).
pub fn encode(osc: &NodeOsc) -> Result<String, serde_norway::Error> {
    serde_norway::to_string(osc)
}

/// Checks every unit, drop-in and file; lists all problems at once.
pub fn validate(osc: &NodeOsc) -> Result<(), InvalidOsc> {
    let mut problems = Vec::new();
    let units = osc.spec.units.iter().chain(&osc.status.extension_units);
    for unit in units {
        if let Err(problem) = check_unit_name(&unit.name) {
            problems.push(format!("unit `{}`: {problem}", unit.name));
        }
        for drop_in in &unit.drop_ins {
            if let Err(problem) = check_file_name(&drop_in.name) {
                problems.push(format!(
                    "unit `{}` drop-in `{}`: {problem}",
                    unit.name, drop_in.name
                ));
            }
        }
        for path in &unit.file_paths {
            if let Err(problem) = check_path(path) {
                problems.push(format!(
                    "unit `{}` filePaths `{path}`: {problem}",
                    unit.name
                ));
            }
        }
    }
    // Each path once per host (files with different `hostName`s may share one), and every
    // unit `filePaths` entry names one of the files: otherwise which content wins, or which
    // change restarts the unit, is undefined.
    let mut seen = BTreeSet::new();
    for file in osc.spec.files.iter().chain(&osc.status.extension_files) {
        if !seen.insert((
            file.path.as_str(),
            file.host_name.as_deref().unwrap_or_default(),
        )) {
            problems.push(format!(
                "file `{}`: the path appears more than once",
                file.path
            ));
        }
    }
    let known: BTreeSet<&str> = seen.iter().map(|(path, _)| *path).collect();
    for unit in osc.spec.units.iter().chain(&osc.status.extension_units) {
        for path in &unit.file_paths {
            if check_path(path).is_ok() && !known.contains(path.as_str()) {
                problems.push(format!(
                    "unit `{}` filePaths `{path}`: names no file of this OSC",
                    unit.name
                ));
            }
        }
    }
    let files = osc.spec.files.iter().chain(&osc.status.extension_files);
    for file in files {
        if let Err(problem) = check_path(&file.path) {
            problems.push(format!("file `{}`: {problem}", file.path));
        }
        if let Err(problem) = check_content(file) {
            problems.push(format!("file `{}`: {problem}", file.path));
        }
        if let Some(mode) = file.permissions
            && mode > 0o7777
        {
            problems.push(format!(
                "file `{}`: permissions {mode} are more than mode bits (max 4095 = 07777)",
                file.path
            ));
        }
    }
    if let Some(containerd) = osc
        .spec
        .cri_config
        .as_ref()
        .and_then(|c| c.containerd.as_ref())
    {
        for plugin in &containerd.plugins {
            if plugin.path.is_empty() || plugin.path.iter().any(String::is_empty) {
                problems.push(format!(
                    "criConfig.containerd.plugins: path {:?} must be non-empty keys",
                    plugin.path
                ));
            }
            if let Some(values) = &plugin.values
                && !values.is_object()
            {
                problems.push(format!(
                    "criConfig.containerd.plugins {:?}: values must be an object",
                    plugin.path
                ));
            }
        }
        for registry in &containerd.registries {
            if let Err(problem) = check_file_name(&registry.upstream) {
                problems.push(format!(
                    "criConfig.containerd.registries upstream `{}`: {problem}",
                    registry.upstream
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InvalidOsc::Invalid(problems))
    }
}

/// An absolute, normalised path of a file (`osc_rules::path_problem`).
pub fn check_path(path: &str) -> Result<(), String> {
    match osc_rules::path_problem(path) {
        Some(problem) => Err(format!("path {problem}")),
        None => Ok(()),
    }
}

/// A plain file name (`osc_rules::file_name_problem`).
fn check_file_name(name: &str) -> Result<(), String> {
    match osc_rules::file_name_problem(name) {
        Some(problem) => Err(format!("name {problem}")),
        None => Ok(()),
    }
}

/// A unit name: a plain file name with a suffix systemd knows.
fn check_unit_name(name: &str) -> Result<(), String> {
    match osc_rules::unit_name_problem(name) {
        Some(problem) => Err(format!("unit name {problem}")),
        None => Ok(()),
    }
}

/// Exactly one content source; inline content with a known encoding that decodes.
fn check_content(file: &File) -> Result<(), String> {
    let content = &file.content;
    let sources = usize::from(content.inline.is_some())
        + usize::from(content.secret_ref.is_some())
        + usize::from(content.image_ref.is_some());
    if sources != 1 {
        return Err(format!(
            "content needs exactly one of inline, secretRef, imageRef (has {sources})"
        ));
    }
    if let Some(inline) = &content.inline {
        decode_inline(inline)?;
    }
    if let Some(secret_ref) = &content.secret_ref
        && (secret_ref.name.is_empty() || secret_ref.data_key.is_empty())
    {
        return Err("secretRef needs name and dataKey".into());
    }
    if let Some(image_ref) = &content.image_ref {
        if image_ref.image.is_empty() {
            return Err("imageRef needs an image".into());
        }
        check_path(&image_ref.file_path_in_image)
            .map_err(|problem| format!("imageRef filePathInImage: {problem}"))?;
    }
    Ok(())
}

/// The bytes of inline content: `encoding` `""` is the data as-is, `b64` is standard base64
/// (line breaks ignored, as Go's decoder does); anything else is an error.
pub fn decode_inline(inline: &FileContentInline) -> Result<Vec<u8>, String> {
    match inline.encoding.as_str() {
        "" => Ok(inline.data.clone().into_bytes()),
        ENCODING_BASE64 => {
            let compact: String = inline
                .data
                .chars()
                .filter(|c| *c != '\n' && *c != '\r')
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|error| format!("inline data is not valid base64: {error}"))
        }
        other => Err(format!(
            "unknown inline encoding `{other}` (supported: \"\" for plain, \"b64\")"
        )),
    }
}

/// Merges spec and status: files of both lists minus those whose `hostName` names
/// another host; units merged by name, a later entry overriding `enable`, `command` and
/// `content` when it sets them and appending its drop-ins and file paths.
pub fn effective<'a>(osc: &'a NodeOsc, hostname: &str) -> Effective<'a> {
    let files = osc
        .spec
        .files
        .iter()
        .chain(&osc.status.extension_files)
        .filter(|file| match file.host_name.as_deref() {
            None | Some("") => true,
            Some(host) => host.eq_ignore_ascii_case(hostname),
        })
        .collect();
    let mut units: Vec<Unit> = Vec::new();
    for unit in osc.spec.units.iter().chain(&osc.status.extension_units) {
        match units.iter_mut().find(|existing| existing.name == unit.name) {
            None => units.push(unit.clone()),
            Some(existing) => {
                if unit.enable.is_some() {
                    existing.enable = unit.enable;
                }
                if unit.command.is_some() {
                    existing.command = unit.command;
                }
                if unit.content.is_some() {
                    existing.content.clone_from(&unit.content);
                }
                existing.drop_ins.extend(unit.drop_ins.iter().cloned());
                existing.file_paths.extend(unit.file_paths.iter().cloned());
            }
        }
    }
    Effective { units, files }
}

/// Adds a drop-in to unit `unit` in the spec (creating a drop-in-only unit when missing),
/// replacing a drop-in of the same name. Used to inject the agent's own drop-ins (containerd
/// `PATH`) so they are diffed, journaled and recorded like every other drop-in.
pub fn inject_drop_in(osc: &mut NodeOsc, unit: &str, drop_in: DropIn) {
    let units = &mut osc.spec.units;
    let index = match units.iter().position(|u| u.name == unit) {
        Some(index) => index,
        None => {
            units.push(Unit {
                name: unit.to_string(),
                command: None,
                enable: None,
                content: None,
                drop_ins: Vec::new(),
                file_paths: Vec::new(),
            });
            units.len() - 1
        }
    };
    let drop_ins = &mut units[index].drop_ins;
    drop_ins.retain(|existing| existing.name != drop_in.name);
    drop_ins.push(drop_in);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operatingsystemconfig::{
        FileContent, FileContentImageRef, FileContentSecretRef, UnitCommand,
    };

    pub(crate) fn inline_file(path: &str, data: &str) -> File {
        File {
            path: path.into(),
            permissions: None,
            host_name: None,
            content: FileContent {
                inline: Some(FileContentInline {
                    encoding: String::new(),
                    data: data.into(),
                }),
                ..FileContent::default()
            },
        }
    }

    fn unit(name: &str) -> Unit {
        Unit {
            name: name.into(),
            command: None,
            enable: None,
            content: None,
            drop_ins: Vec::new(),
            file_paths: Vec::new(),
        }
    }

    const GARDENLET_OSC_YAML: &str = r#"apiVersion: extensions.gardener.cloud/v1alpha1
kind: OperatingSystemConfig
metadata:
  creationTimestamp: null
spec:
  criConfig:
    cgroupDriver: systemd
    containerd:
      sandboxImage: registry.k8s.io/pause:3.10
    name: containerd
  files:
  - content:
      inline:
        data: aGVsbG8=
        encoding: b64
    path: /etc/hello
    permissions: 420
  purpose: ""
  type: ""
  units:
  - content: |
      [Service]
      ExecStart=/bin/true
    enable: true
    name: hello.service
status:
  extensionUnits:
  - dropIns:
    - content: "[Service]\nEnvironment=A=1"
      name: 10-a.conf
    name: hello.service
"#;

    /// Regression (found by `test/resilience_agent.rs`, bad-input rows): duplicate paths and
    /// `filePaths` naming no file were applied (the last duplicate won) instead of refused.
    #[test]
    fn duplicate_paths_and_dangling_file_paths_are_refused() {
        let mut osc = NodeOsc::default();
        osc.spec.files = vec![inline_file("/etc/a", "1"), inline_file("/etc/a", "2")];
        let problems = validate(&osc).unwrap_err().to_string();
        assert!(
            problems.contains("file `/etc/a`: the path appears more than once"),
            "{problems}"
        );

        // Per host: the same path for two hosts is fine.
        let mut per_host = NodeOsc::default();
        let mut a = inline_file("/etc/a", "1");
        a.host_name = Some("node-0".into());
        let mut b = inline_file("/etc/a", "2");
        b.host_name = Some("node-1".into());
        per_host.spec.files = vec![a, b];
        validate(&per_host).unwrap();

        let mut dangling = NodeOsc::default();
        dangling.spec.files = vec![inline_file("/etc/a", "1")];
        let mut reader = unit("a.service");
        reader.file_paths = vec!["/etc/a".into(), "/etc/absent".into()];
        dangling.spec.units = vec![reader];
        let problems = validate(&dangling).unwrap_err().to_string();
        assert!(
            problems.contains("filePaths `/etc/absent`: names no file"),
            "{problems}"
        );
        assert!(!problems.contains("/etc/a`"), "{problems}");
    }

    #[test]
    fn decodes_what_gardenlet_writes() {
        let osc = decode(GARDENLET_OSC_YAML.as_bytes()).unwrap();
        assert_eq!(osc.spec.files[0].permissions, Some(0o644));
        assert_eq!(osc.spec.units[0].enable, Some(true));
        assert_eq!(osc.status.extension_units[0].drop_ins[0].name, "10-a.conf");
        validate(&osc).unwrap();
        let text = encode(&osc).unwrap();
        assert!(
            text.starts_with(
                "apiVersion: extensions.gardener.cloud/v1alpha1\nkind: OperatingSystemConfig\n"
            ),
            "{text}"
        );
        assert_eq!(decode(text.as_bytes()).unwrap().spec, osc.spec);
    }

    #[test]
    fn undecodable_input_is_a_decode_error() {
        for bad in [
            "spec: [not, a, map]",
            "spec:\n  units:\n  - name: a.service\n    command: reboot\n",
            "spec:\n  files:\n  - path: /a\n    permissions: -1\n    content: {}\n",
            "::: not yaml",
            "",
            "status: {}\n",
        ] {
            assert!(
                matches!(decode(bad.as_bytes()), Err(InvalidOsc::Decode(_))),
                "{bad}"
            );
        }
        let error =
            decode(b"spec:\n  units:\n  - name: a.service\n    command: reboot\n").unwrap_err();
        assert!(error.to_string().contains("reboot"), "{error}");
    }

    /// Issue #26 item 3: 400 files aliasing one 500 KiB string (a 528 KiB `osc.yaml`) used to
    /// decode into 200 MB; it is refused before anything is built from it. Aliases within the
    /// bound still decode (GNA's decoder accepts them too; gardenlet never writes any).
    #[test]
    fn an_osc_whose_aliases_expand_past_the_bound_is_refused_and_small_aliases_decode() {
        let big = "x".repeat(500 * 1024);
        let mut bomb = format!(
            "spec:\n  units: []\n  files:\n  - path: /etc/f0\n    content:\n      inline:\n        encoding: \"\"\n        data: &big {big}\n"
        );
        for i in 1..400 {
            bomb.push_str(&format!(
                "  - path: /etc/f{i}\n    content:\n      inline:\n        encoding: \"\"\n        data: *big\n"
            ));
        }
        assert!(bomb.len() < 600 * 1024, "{}", bomb.len());
        let error = decode(bomb.as_bytes()).unwrap_err();
        assert_eq!(
            error,
            InvalidOsc::TooLarge {
                limit: MAX_DECODED_BYTES
            }
        );
        assert!(error.to_string().contains("2097152 bytes"), "{error}");

        let small = "spec:\n  files:\n  - path: /etc/a\n    content:\n      inline: &same {encoding: \"\", data: hello}\n  - path: /etc/b\n    content:\n      inline: *same\n";
        let osc = decode(small.as_bytes()).unwrap();
        assert_eq!(osc.spec.files.len(), 2);
        assert_eq!(
            osc.spec.files[1]
                .content
                .inline
                .as_ref()
                .map(|i| i.data.as_str()),
            Some("hello")
        );
        // Without aliases, a document as large as a Secret can hold (1 MiB) decodes.
        let data = "y".repeat(1024 * 1024 - 200);
        let large = format!(
            "spec:\n  files:\n  - path: /etc/large\n    content:\n      inline:\n        encoding: \"\"\n        data: {data}\n"
        );
        assert_eq!(decode(large.as_bytes()).unwrap().spec.files.len(), 1);
    }

    #[test]
    fn path_rules() {
        for good in ["/etc/a", "/var/lib/x/y.conf", "/a..b", "/.hidden"] {
            assert_eq!(check_path(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "etc/a",
            "./a",
            "/etc/../shadow",
            "/etc/./a",
            "/etc//a",
            "/",
            "/etc/",
            "/a\0b",
            "/..",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn validation_lists_every_problem() {
        let mut osc = NodeOsc::default();
        osc.spec.files.push(inline_file("relative/path", "x"));
        osc.spec.files.push(inline_file("/etc/../etc/passwd", "x"));
        let mut unknown_encoding = inline_file("/etc/enc", "x");
        if let Some(inline) = unknown_encoding.content.inline.as_mut() {
            inline.encoding = "gzip".into();
        }
        osc.spec.files.push(unknown_encoding);
        let mut bad_b64 = inline_file("/etc/b64", "not base64!");
        if let Some(inline) = bad_b64.content.inline.as_mut() {
            inline.encoding = "b64".into();
        }
        osc.status.extension_files.push(bad_b64);
        let mut two_sources = inline_file("/etc/two", "x");
        two_sources.content.secret_ref = Some(FileContentSecretRef {
            name: "s".into(),
            data_key: "k".into(),
        });
        osc.spec.files.push(two_sources);
        let mut image = inline_file("/opt/bin/x", "");
        image.content.inline = None;
        image.content.image_ref = Some(FileContentImageRef {
            image: "img".into(),
            file_path_in_image: "x".into(),
        });
        osc.spec.files.push(image);
        let mut big_mode = inline_file("/etc/mode", "x");
        big_mode.permissions = Some(0o17777);
        osc.spec.files.push(big_mode);
        osc.spec.units.push(unit("no-suffix"));
        osc.spec.units.push(unit("../evil.service"));
        let mut with_drop_in = unit("ok.service");
        with_drop_in.drop_ins.push(DropIn {
            name: "../x.conf".into(),
            content: String::new(),
        });
        with_drop_in.file_paths.push("rel".into());
        osc.spec.units.push(with_drop_in);

        let Err(InvalidOsc::Invalid(problems)) = validate(&osc) else {
            panic!("expected problems");
        };
        let expected = [
            "file `relative/path`: path must be absolute",
            "file `/etc/../etc/passwd`: path must not contain '.' or '..' components",
            "file `/etc/enc`: unknown inline encoding `gzip`",
            "file `/etc/b64`: inline data is not valid base64",
            "file `/etc/two`: content needs exactly one of inline, secretRef, imageRef (has 2)",
            "file `/opt/bin/x`: imageRef filePathInImage: path must be absolute",
            "file `/etc/mode`: permissions 8191",
            "unit `no-suffix`: unit name needs a systemd unit suffix",
            "unit `../evil.service`: unit name must be a plain file name",
            "unit `ok.service` drop-in `../x.conf`: name must be a plain file name",
            "unit `ok.service` filePaths `rel`: path must be absolute",
        ];
        for want in expected {
            assert!(
                problems.iter().any(|p| p.starts_with(want)),
                "missing `{want}` in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    }

    #[test]
    fn inline_decoding() {
        let inline = |encoding: &str, data: &str| FileContentInline {
            encoding: encoding.into(),
            data: data.into(),
        };
        assert_eq!(
            decode_inline(&inline("", "a $HOME `x`")).unwrap(),
            b"a $HOME `x`"
        );
        assert_eq!(
            decode_inline(&inline("b64", "aGVs\nbG8=\n")).unwrap(),
            b"hello"
        );
        assert!(decode_inline(&inline("base64", "aGVsbG8=")).is_err());
    }

    #[test]
    fn merge_overrides_set_fields_and_concatenates_lists() {
        let mut osc = NodeOsc::default();
        let mut spec_unit = unit("a.service");
        spec_unit.enable = Some(true);
        spec_unit.command = Some(UnitCommand::Start);
        spec_unit.content = Some("spec".into());
        spec_unit.drop_ins.push(DropIn {
            name: "1.conf".into(),
            content: "1".into(),
        });
        spec_unit.file_paths.push("/f1".into());
        osc.spec.units.push(spec_unit);
        osc.spec.units.push(unit("b.service"));
        let mut status_unit = unit("a.service");
        status_unit.enable = Some(false);
        status_unit.drop_ins.push(DropIn {
            name: "2.conf".into(),
            content: "2".into(),
        });
        status_unit.file_paths.push("/f2".into());
        osc.status.extension_units.push(status_unit);
        let mut status_content = unit("a.service");
        status_content.content = Some("status".into());
        osc.status.extension_units.push(status_content);

        let merged = effective(&osc, "host");
        assert_eq!(merged.units.len(), 2);
        let a = merged.unit("a.service").unwrap();
        assert_eq!(a.enable, Some(false), "later enable wins");
        assert_eq!(
            a.command,
            Some(UnitCommand::Start),
            "unset command keeps the earlier"
        );
        assert_eq!(a.content.as_deref(), Some("status"), "later content wins");
        assert_eq!(
            a.drop_ins
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>(),
            ["1.conf", "2.conf"]
        );
        assert_eq!(a.file_paths, ["/f1", "/f2"]);
        assert_eq!(
            merged.units[1].name, "b.service",
            "order of first appearance"
        );
    }

    #[test]
    fn merge_filters_files_of_other_hosts() {
        let mut osc = NodeOsc::default();
        osc.spec.files.push(inline_file("/all", "x"));
        let mut mine = inline_file("/mine", "x");
        mine.host_name = Some("Node-1".into());
        osc.spec.files.push(mine);
        let mut other = inline_file("/other", "x");
        other.host_name = Some("node-2".into());
        osc.status.extension_files.push(other);
        osc.status.extension_files.push(inline_file("/status", "x"));
        let merged = effective(&osc, "node-1");
        let paths: Vec<_> = merged.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["/all", "/mine", "/status"]);
    }

    #[test]
    fn inject_drop_in_creates_or_replaces() {
        let mut osc = NodeOsc::default();
        let drop_in = |content: &str| DropIn {
            name: "30-env_config.conf".into(),
            content: content.into(),
        };
        inject_drop_in(&mut osc, "containerd.service", drop_in("1"));
        inject_drop_in(&mut osc, "containerd.service", drop_in("2"));
        assert_eq!(osc.spec.units.len(), 1);
        assert_eq!(osc.spec.units[0].drop_ins, [drop_in("2")]);
        assert!(osc.spec.units[0].content.is_none());
    }
}
