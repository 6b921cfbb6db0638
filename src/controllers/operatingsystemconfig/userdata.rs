//! The provision user data (pure): a bash script, built from exactly the `units` and `files`
//! of a `provision` OperatingSystemConfig, that cloud-init runs once on a new machine.
//!
//! Shape of the script (rules in `docs/contract.md#provision-user-data`):
//!
//! 1. `#!/bin/bash`, a comment, then the run-once guard: exit at once when
//!    [`PROVISION_MARKER`] exists (some IaaS, e.g. GCP, run user data on every boot, which
//!    would re-apply stale provisioning content); then `errexit`/`pipefail`, so a failed
//!    step ends the script *before* the marker is written and a re-run starts over.
//! 2. Per file: `mkdir -p` of its folder, the content through a heredoc, `chmod` with its
//!    permissions ([`DEFAULT_FILE_MODE`] when unset, as the node agent does). Files with a
//!    `hostName` are wrapped in a host-name check.
//! 3. Per unit: its content to `/etc/systemd/system/<name>` and its drop-ins to
//!    `/etc/systemd/system/<name>.d/<drop-in>` (mode 0600, as the node agent writes them).
//! 4. `systemctl daemon-reload`, then per unit `enable` and a non-blocking `restart` (cloud-init
//!    runs inside the boot transaction, so waiting for a start job could deadlock). As on the
//!    node agent, `enable: false` disables and `command: stop` / `enable: false` stops instead.
//! 5. The marker.
//!
//! How content travels: every heredoc delimiter is quoted (`<<'OSC_EOF'`), so bash expands
//! nothing (`$HOME`, backticks stay literal), and it is chosen per heredoc so that no line of
//! the content equals it. Files are written base64-encoded and decoded with `base64 -d`, which
//! carries any bytes; `transmitUnencoded` files go in literally instead, so that
//! machine-controller-manager can substitute `<<BOOTSTRAP_TOKEN>>` and `<<MACHINE_NAME>>` in the
//! user data, and so do unit files and drop-ins (text, smaller and readable). A heredoc always
//! ends with a newline; for literal content `head -c -1` drops exactly that one, so files get
//! their content byte for byte. Writes run under `umask 0077`, so a file is never readable by
//! others before its `chmod`.
//!
//! The output depends only on the inputs (no time, no randomness), so an unchanged OSC renders
//! byte-identical user data.

use std::fmt::Write as _;
use std::path::Path;

use super::content::{self, ContentError, ReferencedSecrets, Resolved};
use crate::api::ErrorCode;
use crate::api::operatingsystemconfig::{File, Unit, UnitCommand};
use crate::osc_rules::{self, NameKind};

/// Marker written at the end of the script; its presence makes later runs exit at once.
pub const PROVISION_MARKER: &str = "/var/lib/osc/provision-osc-applied";
/// User data above this size does not fit the user-data limit of most IaaS.
pub const USER_DATA_SIZE_WARNING: usize = 16 * 1024;
/// Mode of a file without `permissions` (the node agent's default).
pub const DEFAULT_FILE_MODE: u32 = 0o600;
/// Mode of unit files and drop-ins (as the node agent writes them).
pub const UNIT_FILE_MODE: u32 = 0o600;
/// Where units and their drop-in folders go.
pub const SYSTEMD_UNIT_DIR: &str = "/etc/systemd/system";
/// Base of the heredoc delimiters; a suffix is added when content has a line equal to it.
const DELIMITER: &str = "OSC_EOF";
/// Line width of base64 in heredocs (as `base64` prints it).
const BASE64_LINE: usize = 76;

/// Why the user data cannot be rendered. All of these need a spec change, except a missing
/// Secret or key (see [`ContentError::codes`]).
#[derive(Debug, thiserror::Error)]
pub enum UserDataError {
    /// A file's content does not resolve.
    #[error(transparent)]
    Content(#[from] ContentError),
    /// `imageRef` content: only the node agent can pull images; gardenlet never puts such
    /// files into a provision OSC.
    #[error(
        "file {path}: imageRef content ({image}) is not supported in a provision OperatingSystemConfig; only the node agent of a running node can extract files from images"
    )]
    ImageRef {
        /// File path.
        path: String,
        /// The image.
        image: String,
    },
    /// A file path that is not absolute and normalised (`osc_rules::path_problem`).
    #[error("file path {path:?} {reason}")]
    Path {
        /// The path.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A unit or drop-in name that would leave its folder or break the script
    /// (`osc_rules`).
    #[error("{what} name {name:?} {reason}")]
    Name {
        /// `unit` or `drop-in`.
        what: &'static str,
        /// The name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Content that must go into the script literally is not text without NUL bytes.
    #[error("{what} must be text without NUL bytes to be written unencoded")]
    NotText {
        /// What it is, e.g. `file /etc/x (transmitUnencoded)`.
        what: String,
    },
    /// Permissions beyond 07777.
    #[error("file {path}: permissions {mode:#o} are not a file mode")]
    Permissions {
        /// File path.
        path: String,
        /// The value.
        mode: u32,
    },
}

impl UserDataError {
    /// Gardener codes: the content's own for [`UserDataError::Content`], else
    /// `ERR_CONFIGURATION_PROBLEM`.
    pub fn codes(&self) -> Vec<ErrorCode> {
        match self {
            UserDataError::Content(error) => error.codes(),
            _ => vec![ErrorCode::ConfigurationProblem],
        }
    }
}

/// Renders the user data for `units` and `files` (a provision OSC's spec). Fails on the first
/// invalid file or unit; nothing about the OSC is guessed.
pub fn render(
    units: &[Unit],
    files: &[File],
    secrets: &ReferencedSecrets,
) -> Result<String, UserDataError> {
    let mut script = String::from(concat!(
        "#!/bin/bash\n",
        "# Provisioning of a new machine, rendered by gardener-extension-node from an\n",
        "# OperatingSystemConfig with purpose \"provision\". It runs once: later runs find the\n",
        "# marker file written at the end and exit.\n",
    ));
    let marker = quote(PROVISION_MARKER);
    let _ = write!(
        script,
        "if [ -f {marker} ]; then\n  echo \"Provision OSC already applied, exiting...\"\n  exit 0\nfi\nset -o errexit -o pipefail\numask 0022\n"
    );
    for file in files {
        write_file(&mut script, file, secrets)?;
    }
    write_units(&mut script, units)?;
    let _ = write!(
        script,
        "\nmkdir -p {}\ntouch {marker}\n",
        quote(parent(PROVISION_MARKER))
    );
    Ok(script)
}

fn write_file(
    script: &mut String,
    file: &File,
    secrets: &ReferencedSecrets,
) -> Result<(), UserDataError> {
    check_path(&file.path)?;
    let mode = file.permissions.unwrap_or(DEFAULT_FILE_MODE);
    if mode > 0o7777 {
        return Err(UserDataError::Permissions {
            path: file.path.clone(),
            mode,
        });
    }
    let bytes = match content::resolve(file, secrets)? {
        Resolved::Data(bytes) => bytes,
        Resolved::Image(image) => {
            return Err(UserDataError::ImageRef {
                path: file.path.clone(),
                image: image.image.clone(),
            });
        }
    };
    let path = quote(&file.path);
    script.push('\n');
    if let Some(host) = &file.host_name {
        check_no_control(host, || UserDataError::NotText {
            what: format!("file {} hostName", file.path),
        })?;
        let _ = writeln!(script, "if [ \"$(uname -n)\" = {} ]; then", quote(host));
    }
    let _ = writeln!(script, "mkdir -p {}", quote(parent(&file.path)));
    if file.content.transmit_unencoded == Some(true) {
        let text = literal_text(bytes, || format!("file {} (transmitUnencoded)", file.path))?;
        write_literal(script, &path, &text);
    } else {
        write_base64(script, &path, &bytes);
    }
    let _ = writeln!(script, "chmod {mode:04o} {path}");
    if file.host_name.is_some() {
        script.push_str("fi\n");
    }
    Ok(())
}

fn write_units(script: &mut String, units: &[Unit]) -> Result<(), UserDataError> {
    if units.is_empty() {
        return Ok(());
    }
    let _ = write!(script, "\nmkdir -p {}\n", quote(SYSTEMD_UNIT_DIR));
    for unit in units {
        check_name(NameKind::Unit, &unit.name)?;
        let unit_path = format!("{SYSTEMD_UNIT_DIR}/{}", unit.name);
        if let Some(content) = &unit.content {
            check_nul(content, || format!("unit {}", unit.name))?;
            write_unit_file(script, &unit_path, content);
        }
        if !unit.drop_ins.is_empty() {
            let dir = format!("{unit_path}.d");
            let _ = writeln!(script, "mkdir -p {}", quote(&dir));
            for drop_in in &unit.drop_ins {
                check_name(NameKind::DropIn, &drop_in.name)?;
                check_nul(&drop_in.content, || {
                    format!("drop-in {} of unit {}", drop_in.name, unit.name)
                })?;
                write_unit_file(script, &format!("{dir}/{}", drop_in.name), &drop_in.content);
            }
        }
    }
    script.push_str("\nsystemctl daemon-reload\n");
    // `--` ends systemctl's options: a unit name may start with `-` (`-.slice` is the root
    // slice), and without it systemctl would read such a name as options.
    for unit in units {
        let name = quote(&unit.name);
        let enable = unit.enable != Some(false);
        let stop = !enable || unit.command == Some(UnitCommand::Stop);
        let _ = writeln!(
            script,
            "systemctl {} -- {name}",
            if enable { "enable" } else { "disable" }
        );
        let _ = writeln!(
            script,
            "systemctl {} --no-block -- {name}",
            if stop { "stop" } else { "restart" }
        );
    }
    Ok(())
}

fn write_unit_file(script: &mut String, path: &str, content: &str) {
    let path = quote(path);
    write_literal(script, &path, content);
    let _ = writeln!(script, "chmod {UNIT_FILE_MODE:04o} {path}");
}

/// Writes `text` to the (quoted) path exactly: the heredoc's final newline is dropped again.
fn write_literal(script: &mut String, quoted_path: &str, text: &str) {
    let body = format!("{text}\n");
    heredoc(script, &format!("head -c -1 >{quoted_path}"), &body);
}

/// Writes `bytes` to the (quoted) path through `base64 -d`.
fn write_base64(script: &mut String, quoted_path: &str, bytes: &[u8]) {
    let encoded = content::encode_b64(bytes);
    let mut body = String::with_capacity(encoded.len() + encoded.len() / BASE64_LINE + 1);
    for chunk in encoded.as_bytes().chunks(BASE64_LINE) {
        // base64 output is ASCII, so every chunk is valid UTF-8.
        body.push_str(&String::from_utf8_lossy(chunk));
        body.push('\n');
    }
    if body.is_empty() {
        body.push('\n');
    }
    heredoc(script, &format!("base64 -d >{quoted_path}"), &body);
}

/// `(umask 0077 && <command>) <<'<delimiter>'`, the body (ending in a newline), the
/// delimiter line.
fn heredoc(script: &mut String, command: &str, body: &str) {
    let delimiter = delimiter_for(body);
    let _ = write!(
        script,
        "(umask 0077 && {command}) <<'{delimiter}'\n{body}{delimiter}\n"
    );
}

/// The first of `OSC_EOF`, `OSC_EOF_1`, `OSC_EOF_2`, ... that no line of `body` equals.
pub fn delimiter_for(body: &str) -> String {
    let mut candidate = DELIMITER.to_string();
    let mut suffix = 0u32;
    while body.split('\n').any(|line| line == candidate) {
        suffix += 1;
        candidate = format!("{DELIMITER}_{suffix}");
    }
    candidate
}

/// Single-quotes `value` for bash (no expansion of anything inside).
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

fn parent(path: &str) -> &str {
    Path::new(path)
        .parent()
        .and_then(|p| p.to_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/")
}

fn check_path(path: &str) -> Result<(), UserDataError> {
    match osc_rules::path_problem(path) {
        Some(reason) => Err(UserDataError::Path {
            path: path.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn check_name(kind: NameKind, name: &str) -> Result<(), UserDataError> {
    match kind.problem(name) {
        Some(reason) => Err(UserDataError::Name {
            what: kind.as_str(),
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn check_no_control(
    value: &str,
    error: impl FnOnce() -> UserDataError,
) -> Result<(), UserDataError> {
    if value.is_empty() || value.chars().any(char::is_control) {
        return Err(error());
    }
    Ok(())
}

fn check_nul(text: &str, what: impl FnOnce() -> String) -> Result<(), UserDataError> {
    if text.contains('\0') {
        return Err(UserDataError::NotText { what: what() });
    }
    Ok(())
}

/// Decoded bytes as text for a literal heredoc: valid UTF-8 (the script is text) and no NUL
/// (bash drops NUL bytes from heredocs).
fn literal_text(bytes: Vec<u8>, what: impl Fn() -> String) -> Result<String, UserDataError> {
    let text = String::from_utf8(bytes).map_err(|_| UserDataError::NotText { what: what() })?;
    check_nul(&text, what)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operatingsystemconfig::{
        DropIn, FileContent, FileContentImageRef, FileContentInline, FileContentSecretRef,
    };

    fn inline_file(path: &str, encoding: &str, data: &str, unencoded: bool) -> File {
        File {
            path: path.into(),
            permissions: None,
            host_name: None,
            content: FileContent {
                inline: Some(FileContentInline {
                    encoding: encoding.into(),
                    data: data.into(),
                }),
                transmit_unencoded: unencoded.then_some(true),
                ..Default::default()
            },
        }
    }

    fn unit(name: &str) -> Unit {
        Unit {
            name: name.into(),
            command: None,
            enable: None,
            content: Some("[Service]\nExecStart=/bin/true\n".into()),
            drop_ins: Vec::new(),
            file_paths: Vec::new(),
        }
    }

    /// Shaped like gardenlet's provision OSC (node-init unit, CA, token and machine-name
    /// placeholders, init script), plus the cases the script must get right.
    fn provision_like() -> (Vec<Unit>, Vec<File>, ReferencedSecrets) {
        let mut init = unit("gardener-node-init.service");
        init.command = Some(UnitCommand::Start);
        init.enable = Some(true);
        init.content = Some(
            "[Unit]\nDescription=Downloads the gardener-node-agent binary\nAfter=containerd.service\nRequires=containerd.service\n[Service]\nType=oneshot\nExecStart=/var/lib/gardener-node-agent/init.sh\n[Install]\nWantedBy=multi-user.target\n"
                .into(),
        );
        let mut containerd = unit("containerd.service");
        containerd.content = None;
        containerd.drop_ins = vec![DropIn {
            name: "10-exec.conf".into(),
            content: "[Service]\nExecStart=\nExecStart=/usr/bin/containerd --config=/etc/containerd/config.toml".into(),
        }];
        let mut stopped = unit("legacy.service");
        stopped.enable = Some(false);

        let mut ca = inline_file(
            "/var/lib/gardener-node-agent/cluster-ca.crt",
            "b64",
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJjekNDQVJpZ0F3SUJBZ0lVQ2V4YW1wbGUKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=",
            false,
        );
        ca.permissions = Some(0o644);
        let mut token = inline_file(
            "/var/lib/gardener-node-agent/credentials/bootstrap-token",
            "",
            "<<BOOTSTRAP_TOKEN>>",
            true,
        );
        token.permissions = Some(0o640);
        let machine_name = inline_file(
            "/var/lib/gardener-node-agent/machine-name",
            "",
            "<<MACHINE_NAME>>",
            true,
        );
        let mut script = inline_file(
            "/var/lib/gardener-node-agent/init.sh",
            "",
            "#!/bin/bash\necho \"$HOME `date`\" 'single'\n",
            false,
        );
        script.permissions = Some(0o755);
        let tricky = inline_file(
            "/etc/example/it's here",
            "",
            "OSC_EOF\nOSC_EOF_1\n$(rm -rf /)\n",
            true,
        );
        let mut per_host = inline_file("/etc/hostname-only", "", "for machine-0", false);
        per_host.host_name = Some("machine-0".into());
        let from_secret = File {
            path: "/etc/from-secret".into(),
            permissions: Some(0o600),
            host_name: None,
            content: FileContent {
                secret_ref: Some(FileContentSecretRef {
                    name: "credentials".into(),
                    data_key: "token".into(),
                }),
                ..Default::default()
            },
        };
        let mut secrets = ReferencedSecrets::default();
        secrets.insert(
            "credentials",
            [("token".to_string(), b"s3cr3t\x00\xff".to_vec())].into(),
        );
        (
            vec![init, containerd, stopped],
            vec![
                ca,
                token,
                machine_name,
                script,
                tricky,
                per_host,
                from_secret,
            ],
            secrets,
        )
    }

    #[test]
    fn user_data_snapshot() {
        let (units, files, secrets) = provision_like();
        let script = render(&units, &files, &secrets).unwrap();
        insta::assert_snapshot!(script);
    }

    #[test]
    fn rendering_is_byte_stable() {
        let (units, files, secrets) = provision_like();
        assert_eq!(
            render(&units, &files, &secrets).unwrap(),
            render(&units, &files, &secrets).unwrap()
        );
    }

    #[test]
    fn guard_comes_first_and_marker_last() {
        let (units, files, secrets) = provision_like();
        let script = render(&units, &files, &secrets).unwrap();
        let guard = script
            .find("if [ -f '/var/lib/osc/provision-osc-applied' ]")
            .unwrap();
        let first_write = script
            .find("mkdir -p '/var/lib/gardener-node-agent'")
            .unwrap();
        assert!(guard < first_write);
        assert!(
            script.ends_with(
                "\nmkdir -p '/var/lib/osc'\ntouch '/var/lib/osc/provision-osc-applied'\n"
            )
        );
        assert!(script.starts_with("#!/bin/bash\n"));
    }

    #[test]
    fn placeholders_stay_literal_and_other_files_are_encoded() {
        let (units, files, secrets) = provision_like();
        let script = render(&units, &files, &secrets).unwrap();
        assert!(
            script.contains("\n<<BOOTSTRAP_TOKEN>>\nOSC_EOF\n"),
            "{script}"
        );
        assert!(script.contains("\n<<MACHINE_NAME>>\nOSC_EOF\n"), "{script}");
        assert!(
            !script.contains("$HOME"),
            "plain files travel base64-encoded"
        );
    }

    #[test]
    fn delimiters_never_collide_with_content() {
        assert_eq!(delimiter_for("a\nb\n"), "OSC_EOF");
        assert_eq!(delimiter_for("OSC_EOF\n"), "OSC_EOF_1");
        assert_eq!(delimiter_for("OSC_EOF\nOSC_EOF_1\n"), "OSC_EOF_2");
        // Only whole lines count.
        assert_eq!(delimiter_for(" OSC_EOF\nOSC_EOF \n"), "OSC_EOF");
        let (units, files, secrets) = provision_like();
        let script = render(&units, &files, &secrets).unwrap();
        assert!(script.contains("<<'OSC_EOF_2'\nOSC_EOF\nOSC_EOF_1\n$(rm -rf /)\n\nOSC_EOF_2\n"));
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn modes_default_to_0600_and_units_get_0600() {
        let file = inline_file("/etc/a", "", "x", false);
        let script = render(&[unit("a.service")], &[file], &ReferencedSecrets::default()).unwrap();
        assert!(script.contains("chmod 0600 '/etc/a'\n"));
        assert!(script.contains("chmod 0600 '/etc/systemd/system/a.service'\n"));
    }

    #[test]
    fn unit_commands_follow_enable_and_command() {
        let (units, files, secrets) = provision_like();
        let script = render(&units, &files, &secrets).unwrap();
        for line in [
            "systemctl enable -- 'gardener-node-init.service'\nsystemctl restart --no-block -- 'gardener-node-init.service'\n",
            "systemctl enable -- 'containerd.service'\nsystemctl restart --no-block -- 'containerd.service'\n",
            "systemctl disable -- 'legacy.service'\nsystemctl stop --no-block -- 'legacy.service'\n",
        ] {
            assert!(script.contains(line), "{line}");
        }
        let reload = script.find("systemctl daemon-reload").unwrap();
        assert!(reload < script.find("systemctl enable").unwrap());
    }

    #[test]
    fn no_units_means_no_systemctl() {
        let file = inline_file("/etc/a", "", "x", false);
        let script = render(&[], &[file], &ReferencedSecrets::default()).unwrap();
        assert!(!script.contains("systemctl"));
    }

    #[test]
    fn image_refs_are_rejected_with_a_clear_configuration_error() {
        let file = File {
            path: "/opt/bin/gardener-node-agent".into(),
            permissions: Some(0o755),
            host_name: None,
            content: FileContent {
                image_ref: Some(FileContentImageRef {
                    image: "registry.example/gna:v1".into(),
                    file_path_in_image: "/gardener-node-agent".into(),
                }),
                ..Default::default()
            },
        };
        let error = render(&[], &[file], &ReferencedSecrets::default()).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("imageRef"), "{text}");
        assert!(text.contains("/opt/bin/gardener-node-agent"), "{text}");
        assert_eq!(error.codes(), vec![ErrorCode::ConfigurationProblem]);
    }

    #[test]
    fn invalid_names_paths_and_modes_are_configuration_errors() {
        let none = ReferencedSecrets::default();
        let cases: Vec<(Vec<Unit>, Vec<File>)> = vec![
            (vec![], vec![inline_file("relative/path", "", "x", false)]),
            (vec![], vec![inline_file("/etc/a\nb", "", "x", false)]),
            (vec![], vec![inline_file("/etc/dir/", "", "x", false)]),
            (vec![unit("../escape.service")], vec![]),
            (vec![unit("")], vec![]),
            (vec![], vec![inline_file("/etc/a", "", "nul\0byte", true)]),
            (
                vec![],
                vec![File {
                    permissions: Some(0o17777),
                    ..inline_file("/etc/a", "", "x", false)
                }],
            ),
        ];
        for (units, files) in cases {
            let error = render(&units, &files, &none).unwrap_err();
            assert_eq!(
                error.codes(),
                vec![ErrorCode::ConfigurationProblem],
                "{error}"
            );
        }
        let mut drop_in = unit("a.service");
        drop_in.drop_ins = vec![DropIn {
            name: "x/y.conf".into(),
            content: String::new(),
        }];
        assert!(matches!(
            render(&[drop_in], &[], &none),
            Err(UserDataError::Name {
                what: "drop-in",
                ..
            })
        ));
    }

    #[test]
    fn missing_secret_is_reported_with_its_name() {
        let (units, files, _) = provision_like();
        let error = render(&units, &files, &ReferencedSecrets::default()).unwrap_err();
        assert!(error.to_string().contains("credentials"), "{error}");
        assert_eq!(
            error.codes(),
            vec![ErrorCode::RetryableConfigurationProblem]
        );
    }
}
