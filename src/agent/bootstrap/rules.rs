//! What `bootstrap` writes and decides, as gardener-node-agent v1.149.3 does it (gardener
//! `pkg/nodeagent/bootstrap`; `docs/agent.md#bootstrap`). Pure.

/// The unit the node agent runs as.
pub const NODE_AGENT_UNIT: &str = "gardener-node-agent.service";
/// gardenlet's first-boot unit, disabled once the node agent runs.
pub const NODE_INIT_UNIT: &str = "gardener-node-init.service";
/// Where gardenlet's node-init copies the binary to, and the unit runs it from.
pub const BINARY_PATH: &str = "/opt/bin/gardener-node-agent";
/// The folder kubelet keeps its data in (the mount point of the kubelet data volume).
pub const KUBELET_DIR: &str = "/var/lib/kubelet";
/// The file-system label of a formatted kubelet data volume.
pub const DATA_VOLUME_LABEL: &str = "KUBEDEV";

/// Why the config dir cannot be written into the node agent's unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitRefused {
    /// A control character (a line break would end the `ExecStart=` line and start a
    /// directive of its own).
    #[error(
        "--config-dir {0} has a control character (a line break, say), which a unit's ExecStart= line cannot carry"
    )]
    Control(String),
    /// Not UTF-8 (a unit file is UTF-8 text).
    #[error("--config-dir {0} is not UTF-8 text, which a unit file is")]
    NotUtf8(String),
}

/// The node agent's unit, line for line gardener's (`nodeagent.UnitContent()`), so that
/// gardenlet's OSC, which carries the same unit, finds nothing to change — for gardener's
/// config dir and any other of plain characters; another one is quoted ([`exec_argument`]).
pub fn node_agent_unit(config_dir: &str) -> Result<String, UnitRefused> {
    let argument = exec_argument(&format!("--config-dir={config_dir}"))?;
    Ok(format!(
        "[Unit]\nDescription=Gardener Node Agent\nAfter=network-online.target\n\n[Service]\nLimitMEMLOCK=infinity\nExecStart={BINARY_PATH} {argument}\nRestart=always\nRestartSec=5\nStandardOutput=journal+console\nStandardError=journal\n\n[Install]\nWantedBy=multi-user.target"
    ))
}

/// One argument of an `ExecStart=` line, written so that systemd reads it back as exactly
/// `word` (systemd.service(5), "Command lines"; systemd.syntax(7), quoting): as it is when it
/// has only characters no rule of the line touches (letters, digits, `/._-+:,=@`); otherwise
/// in double quotes, `\` and `"` escaped with a backslash, `%` doubled (specifiers) and `$`
/// doubled (environment variables). Control characters are refused ([`UnitRefused`]).
pub fn exec_argument(word: &str) -> Result<String, UnitRefused> {
    if word.chars().any(char::is_control) {
        return Err(UnitRefused::Control(
            crate::printable::escape_controls(word).into_owned(),
        ));
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:,=@".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return Ok(word.to_string());
    }
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('"');
    for c in word.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '%' => quoted.push_str("%%"),
            '$' => quoted.push_str("$$"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    Ok(quoted)
}

/// One block device as `lsblk -bnP -o NAME,PARTTYPE,FSTYPE,SIZE,TYPE,MOUNTPOINT` lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockDevice {
    /// Kernel name (`vdb`, `vdb1`).
    pub name: String,
    /// Partition type GUID; empty for a whole disk.
    pub part_type: String,
    /// File-system type; empty when unformatted.
    pub fs_type: String,
    /// Size in bytes.
    pub size: String,
    /// `disk`, `part`, ...
    pub kind: String,
    /// Where it is mounted; empty when it is not.
    pub mount_point: String,
}

/// Parses `lsblk -P` output (`KEY="value"` pairs, one device per line). Values are taken as
/// lsblk escapes them (`\x20` and the like stay as they are); lines without a name are left
/// out.
pub fn parse_lsblk(output: &str) -> Vec<BlockDevice> {
    output
        .lines()
        .filter_map(|line| {
            let mut device = BlockDevice::default();
            for (key, value) in pairs(line) {
                let field = match key {
                    "NAME" => &mut device.name,
                    "PARTTYPE" => &mut device.part_type,
                    "FSTYPE" => &mut device.fs_type,
                    "SIZE" => &mut device.size,
                    "TYPE" => &mut device.kind,
                    "MOUNTPOINT" => &mut device.mount_point,
                    _ => continue,
                };
                *field = value.to_string();
            }
            (!device.name.is_empty()).then_some(device)
        })
        .collect()
}

/// `KEY="value"` pairs of one `lsblk -P` line (lsblk escapes `"` inside values).
fn pairs(line: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = line;
    std::iter::from_fn(move || {
        let (key, after) = rest.trim_start().split_once("=\"")?;
        let (value, tail) = after.split_once('"')?;
        rest = tail;
        Some((key, value))
    })
}

/// The disk to format as the kubelet data volume, as GNA's script picks it: the first whole
/// disk without partition type or file system whose size is exactly `size` bytes, and none of
/// whose partitions is mounted. `None`: no such disk.
pub fn data_device(devices: &[BlockDevice], size: i64) -> Option<&str> {
    let size = size.to_string();
    devices
        .iter()
        .filter(|d| d.kind == "disk" && d.part_type.is_empty() && d.fs_type.is_empty())
        .filter(|d| d.size == size)
        // A kernel name, nothing a path could be made of.
        .filter(|d| {
            d.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .find(|disk| {
            !devices.iter().any(|part| {
                part.kind == "part"
                    && part.name.starts_with(&disk.name)
                    && part.mount_point.starts_with('/')
            })
        })
        .map(|disk| disk.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LSBLK: &str = concat!(
        "NAME=\"vda\" PARTTYPE=\"\" FSTYPE=\"\" SIZE=\"21474836480\" TYPE=\"disk\" MOUNTPOINT=\"\"\n",
        "NAME=\"vda1\" PARTTYPE=\"0fc63daf\" FSTYPE=\"ext4\" SIZE=\"21473787904\" TYPE=\"part\" MOUNTPOINT=\"/\"\n",
        "NAME=\"vdb\" PARTTYPE=\"\" FSTYPE=\"ext4\" SIZE=\"53687091200\" TYPE=\"disk\" MOUNTPOINT=\"\"\n",
        "NAME=\"vdc\" PARTTYPE=\"\" FSTYPE=\"\" SIZE=\"53687091200\" TYPE=\"disk\" MOUNTPOINT=\"\"\n",
    );

    #[test]
    fn the_unformatted_disk_of_the_size_is_chosen() {
        let devices = parse_lsblk(LSBLK);
        assert_eq!(devices.len(), 4);
        assert_eq!(devices[1].mount_point, "/");
        // vdb has the size but a file system; vdc is the one.
        assert_eq!(data_device(&devices, 53_687_091_200), Some("vdc"));
        // vda has no file system itself, but a mounted partition.
        assert_eq!(data_device(&devices, 21_474_836_480), None);
        assert_eq!(data_device(&devices, 1), None);
    }

    #[test]
    fn odd_lsblk_lines_do_not_make_devices() {
        let devices =
            parse_lsblk("\nNAME=\"\" TYPE=\"disk\"\ngarbage\nSIZE=\"1\" NAME=\"x\" TYPE=\"disk\n");
        // Only the last line names a device; its unterminated TYPE is not read.
        assert_eq!(devices.len(), 1, "{devices:?}");
        assert_eq!(
            (devices[0].name.as_str(), devices[0].kind.as_str()),
            ("x", "")
        );
        assert_eq!(data_device(&devices, 1), None);
    }

    #[test]
    fn the_unit_is_gardeners() {
        let unit = node_agent_unit("/var/lib/gardener-node-agent").unwrap();
        assert!(unit.contains(
            "\nExecStart=/opt/bin/gardener-node-agent --config-dir=/var/lib/gardener-node-agent\n"
        ));
        assert!(unit.ends_with("WantedBy=multi-user.target"), "{unit}");
    }

    /// Issue #41 item 8: a config dir with characters systemd would read differently goes
    /// into ExecStart quoted so that systemd reads it back as it is (the nspawn e2e test
    /// `test/agent_entry_e2e.rs` has real systemd do so), and a line break is refused.
    #[test]
    fn the_config_dir_is_quoted_for_systemd_and_a_line_break_refused() {
        let exec_start = |dir: &str| {
            let unit = node_agent_unit(dir).unwrap();
            unit.lines()
                .find_map(|line| line.strip_prefix("ExecStart=/opt/bin/gardener-node-agent "))
                .unwrap()
                .to_string()
        };
        assert_eq!(exec_start("/srv/gna-1.2_x"), "--config-dir=/srv/gna-1.2_x");
        assert_eq!(
            exec_start("/var/lib/node agent"),
            "\"--config-dir=/var/lib/node agent\""
        );
        assert_eq!(
            exec_start("/d/\"q\" \\b $HOME %n 'x';"),
            "\"--config-dir=/d/\\\"q\\\" \\\\b $$HOME %%n 'x';\""
        );
        for dir in ["/a\nExecStartPre=/bin/evil", "/a\rb", "/a\tb"] {
            let refused = node_agent_unit(dir).unwrap_err();
            assert!(
                !refused.to_string().contains('\n')
                    && refused.to_string().contains("control character"),
                "{refused}"
            );
        }
    }
}
