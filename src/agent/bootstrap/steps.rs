//! The I/O of `bootstrap`, one function per step, in gardener-node-agent's order
//! ([`super::run`] calls them): temp folder, kubelet data volume, the node agent's unit,
//! daemon-reload, enable, start, disable `gardener-node-init`, connectivity check.

use std::path::Path;
use std::time::Duration;

use tracing::{info, warn};

use super::BootstrapError;
use super::rules::{self, DATA_VOLUME_LABEL, KUBELET_DIR, NODE_AGENT_UNIT, NODE_INIT_UNIT};
use crate::agent::access::credentials::{self, Source};
use crate::agent::ports::host::{Host, HostError, run_command};
use crate::agent::ports::paths::Paths;
use crate::api::nodeagent::NodeAgentConfiguration;
use crate::api::operatingsystemconfig::UnitCommand;

/// How long the connectivity check waits for the API server.
const CONNECTIVITY_TIMEOUT: Duration = Duration::from_secs(10);

fn failed(step: &'static str) -> impl FnOnce(HostError) -> BootstrapError {
    move |source| BootstrapError::Step { step, source }
}

/// The folder for temporary files (`<config dir>/tmp`).
pub fn temp_dir<H: Host>(host: &H, paths: &Paths) -> Result<(), BootstrapError> {
    let temp = paths.temp();
    info!(path = %temp.display(), "creating the folder for temporary files");
    host.create_dir_all(&temp)
        .map_err(failed("creating the temporary folder"))
}

/// Formats the unformatted disk of `size` bytes as `/var/lib/kubelet`, as GNA's
/// `format-kubelet-data-volume` script does; nothing when a disk labelled
/// [`DATA_VOLUME_LABEL`] exists already (a second bootstrap of the same node).
pub async fn kubelet_data_volume<H: Host>(
    host: &H,
    paths: &Paths,
    size: i64,
) -> Result<(), BootstrapError> {
    let kubelet = Path::new(KUBELET_DIR);
    host.create_dir_all(kubelet)
        .map_err(failed("creating the kubelet folder"))?;
    if run_command("blkid", &["--label", DATA_VOLUME_LABEL])
        .await
        .is_ok()
    {
        info!(
            label = DATA_VOLUME_LABEL,
            "kubelet data volume formatted already"
        );
        return Ok(());
    }
    let listed = run_command(
        "lsblk",
        &["-bnP", "-o", "NAME,PARTTYPE,FSTYPE,SIZE,TYPE,MOUNTPOINT"],
    )
    .await
    .map_err(failed("listing block devices"))?;
    let devices = rules::parse_lsblk(&listed);
    let device = rules::data_device(&devices, size)
        .map(|name| format!("/dev/{name}"))
        .ok_or(BootstrapError::NoDataDevice(size))?;
    info!(%device, size, "formatting the kubelet data volume");
    run_command(
        "mkfs.ext4",
        &[
            "-L",
            DATA_VOLUME_LABEL,
            "-O",
            "quota",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0,quotatype=usrquota:grpquota:prjquota",
            &device,
        ],
    )
    .await
    .map_err(failed("formatting the kubelet data volume"))?;
    copy_kubelet_dir(host, paths).await?;
    let label = format!("LABEL={DATA_VOLUME_LABEL}");
    run_command(
        "mount",
        &[
            &label,
            KUBELET_DIR,
            "-o",
            "defaults,prjquota,errors=remount-ro",
        ],
    )
    .await
    .map_err(failed("mounting the kubelet data volume"))?;
    info!(%device, "kubelet data volume mounted at {KUBELET_DIR}");
    Ok(())
}

/// What is in `/var/lib/kubelet` already goes onto the new volume before it is mounted there.
async fn copy_kubelet_dir<H: Host>(host: &H, paths: &Paths) -> Result<(), BootstrapError> {
    let copy = paths.temp().join("varlibkubeletcp");
    host.create_dir_all(&copy)
        .map_err(failed("creating the copy folder"))?;
    let copy = copy.display().to_string();
    let label = format!("LABEL={DATA_VOLUME_LABEL}");
    run_command("mount", &[&label, &copy])
        .await
        .map_err(failed("mounting the kubelet data volume for the copy"))?;
    let copied = run_command("cp", &["-a", &format!("{KUBELET_DIR}/."), &copy]).await;
    let unmounted = run_command("umount", &[&copy]).await;
    copied.map_err(failed("copying /var/lib/kubelet to the data volume"))?;
    unmounted.map_err(failed("unmounting the copy folder"))?;
    Ok(())
}

/// The node agent's unit ([`rules::node_agent_unit`]), enabled and started after a
/// daemon-reload; then `gardener-node-init` is disabled so a reboot does not run it again.
pub async fn install_unit<H: Host>(
    host: &H,
    paths: &Paths,
    config_dir: &str,
) -> Result<(), BootstrapError> {
    let unit_file = paths.unit_file(NODE_AGENT_UNIT);
    info!(path = %unit_file.display(), "writing the node agent's unit");
    let unit = rules::node_agent_unit(config_dir)?;
    host.write(&unit_file, unit.as_bytes(), 0o644)
        .map_err(failed("writing the node agent's unit"))?;
    host.daemon_reload()
        .await
        .map_err(failed("reloading systemd"))?;
    host.enable_unit(NODE_AGENT_UNIT)
        .await
        .map_err(failed("enabling the node agent's unit"))?;
    info!(unit = NODE_AGENT_UNIT, "starting the node agent");
    host.unit_job(NODE_AGENT_UNIT, UnitCommand::Start)
        .await
        .map_err(failed("starting the node agent's unit"))?;
    host.disable_unit(NODE_INIT_UNIT)
        .await
        .map_err(failed("disabling gardener-node-init"))?;
    Ok(())
}

/// Asks the API server for its version with the bootstrap token, to say early whether the
/// node can reach it. A failure is a warning (as GNA): the node agent retries on its own.
pub async fn check_connectivity(config: &NodeAgentConfiguration, paths: &Paths) {
    let server = config.api_server.server.as_str();
    let probe = async {
        let source = Source::BootstrapToken(paths.bootstrap_token());
        let client_config = credentials::client_config(&source, config, paths)
            .await
            .map_err(|error| crate::error_chain::printable(&error))?;
        let client = crate::kubeconfig::build(client_config, "bootstrap")
            .map_err(|error| crate::error_chain::printable(&error))?;
        client
            .apiserver_version()
            .await
            .map_err(|error| crate::error_chain::printable(&error))
    };
    match tokio::time::timeout(CONNECTIVITY_TIMEOUT, probe).await {
        Ok(Ok(version)) => {
            info!(%server, version = %version.git_version, "the API server is reachable");
        }
        Ok(Err(error)) => {
            warn!(%server, %error, "API server connectivity test failed; the node may fail to join the cluster — check the network and the API server address");
        }
        Err(_) => {
            warn!(%server, timeout = ?CONNECTIVITY_TIMEOUT, "API server connectivity test timed out; the node may fail to join the cluster — check the network and the API server address");
        }
    }
}
