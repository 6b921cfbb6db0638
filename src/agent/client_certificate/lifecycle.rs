//! The client certificate's three moments, as the agent's start and main loop call them:
//! [`bootstrap`] (a new machine trades its bootstrap token for a certificate), [`kubelet`]
//! (kubelet's bootstrap kubeconfig) and [`renew_forever`] (a new certificate at 80–88 % of
//! the lifetime, switched to without a restart).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube::config::Kubeconfig;
use tokio::sync::watch;
use tracing::{info, warn};

use super::rules;
use super::steps::{self, CertificateError, unix_now};
use crate::agent::access::credentials::{self, CredentialsError, Source};
use crate::agent::access::kubeconfigs;
use crate::agent::access::switching_client::Credentials;
use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster::{NodeEvents, NodeMeta};
use crate::agent::ports::paths::Paths;
use crate::api::nodeagent::NodeAgentConfiguration;
use crate::error_chain::printable as error_chain;
use crate::kubeconfig::x509::CertificateFacts;

/// How long one request is waited for (GNA's).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// First pause after a failed bootstrap (GNA's unit restarts it after 5 s); it doubles up to
/// [`MAX_BOOTSTRAP_RETRY`], where GNA keeps trying every 5 s, each time with a new request.
const FIRST_BOOTSTRAP_RETRY: Duration = Duration::from_secs(5);
const MAX_BOOTSTRAP_RETRY: Duration = Duration::from_secs(60);
/// How long to wait after the certificate could not be read.
const UNREADABLE_RETRY: Duration = Duration::from_secs(300);
/// The shortest time between two renewals.
const MIN_RENEWAL_SPACING: Duration = Duration::from_secs(10);
/// The event reason of a failed renewal.
pub const REASON_RENEWAL_FAILED: &str = "ClientCertificateRenewalFailed";
/// How long the renewal loop waits for the Node before it reports a clock skew found at start.
const NODE_WAIT: Duration = Duration::from_secs(120);
/// The Warning event when a new client certificate is not valid by the node's clock.
pub const REASON_CLOCK_SKEW: &str = "ClientCertificateClockSkew";

/// Why the bootstrap did not end in a certificate.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The bootstrap client could not be configured.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// A client could not be built (with the bootstrap token, or with the new certificate).
    #[error("building the API client")]
    Client(#[source] kube::Error),
    /// No certificate.
    #[error(transparent)]
    Certificate(#[from] CertificateError),
}

/// A new machine: asks for a client certificate with the bootstrap token (`token`) and writes
/// `credentials/kubeconfig`; a failure is logged and tried again (5 s, doubling up to 1 min)
/// until it works — the caller races it with the stop signals.
pub async fn bootstrap(config: &NodeAgentConfiguration, paths: &Paths, token: &Path) {
    let mut pause = FIRST_BOOTSTRAP_RETRY;
    loop {
        match bootstrap_once(config, paths, token).await {
            Ok(()) => return,
            Err(error) => warn!(
                error = %error_chain(&error),
                retry_in = ?pause,
                "getting the client certificate with the bootstrap token failed; trying again"
            ),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_BOOTSTRAP_RETRY);
    }
}

async fn bootstrap_once(
    config: &NodeAgentConfiguration,
    paths: &Paths,
    token: &Path,
) -> Result<(), BootstrapError> {
    let machine = steps::read_machine_name(&paths.machine_name())?;
    let source = Source::BootstrapToken(token.to_path_buf());
    let client_config = credentials::client_config(&source, config, paths).await?;
    let client = crate::kubeconfig::build(client_config, "agent-bootstrap")
        .map_err(BootstrapError::Client)?;
    info!(%machine, "asking for a client certificate with the bootstrap token");
    let issued = steps::request(&client, &machine, REQUEST_TIMEOUT).await?;
    let server = credentials::server(config, "credentials/bootstrap-token")?;
    let ca = credentials::ca_source(config, paths, |path| path.exists());
    let kubeconfig = kubeconfigs::kubeconfig(server, &ca, &issued.cert_pem, &issued.key_pem);
    usable(&kubeconfig, &paths.kubeconfig(), paths).await?;
    steps::write_kubeconfig(&paths.kubeconfig(), &kubeconfig)?;
    info!(
        %machine,
        serial = %issued.facts.serial,
        not_after = issued.facts.not_after,
        path = %paths.kubeconfig().display(),
        "client certificate issued and written"
    );
    // No event yet: the bootstrap identity may create CSRs only. The renewal loop reports it
    // once the Node is known (`renew_forever`).
    let _ = warn_on_skew(&issued.facts);
    Ok(())
}

/// Writes kubelet's bootstrap kubeconfig when there is a bootstrap token and kubelet has no
/// credentials of its own yet (GNA's bootstrapper, before the controllers start). A failure
/// is logged: kubelet then waits for its kubeconfig, and the next start tries again.
pub fn kubelet(config: &NodeAgentConfiguration, paths: &Paths, kubelet_dir: &Path) {
    let token = paths.bootstrap_token();
    let has_token = token.symlink_metadata().is_ok();
    if !rules::kubelet_needs_bootstrap(has_token, steps::kubelet_has_credentials(kubelet_dir)) {
        return;
    }
    let written = (|| -> Result<_, BootstrapError> {
        let server = credentials::server(config, "kubelet's bootstrap kubeconfig")?;
        let ca = credentials::ca_source(config, paths, |path| path.exists());
        let token = credentials::read_token(&token)?;
        let kubeconfig = kubeconfigs::kubelet_bootstrap_kubeconfig(server, &ca, &token);
        let path = steps::kubelet_bootstrap_path(kubelet_dir);
        steps::write_kubeconfig(&path, &kubeconfig)?;
        Ok(path)
    })();
    match written {
        Ok(path) => info!(path = %path.display(), "kubelet's bootstrap kubeconfig written"),
        Err(error) => warn!(
            error = %error_chain(&error),
            "writing kubelet's bootstrap kubeconfig failed; kubelet cannot join until it is there"
        ),
    }
}

/// What one renewal needs: the agent's credentials, one client of them, and where the
/// kubeconfig is. Shared by the periodic renewal ([`renew_forever`]) and the certificate
/// authority rotation of an in-place update ([`crate::agent::in_place::steps::finish`]), which
/// both call [`Renewer::renew_once`].
pub struct Renewer {
    /// The configuration every client of the agent follows.
    pub credentials: Credentials,
    /// A client of those credentials.
    pub client: kube::Client,
    /// The agent's configuration (server and CA for reloading).
    pub config: NodeAgentConfiguration,
    /// The agent's paths.
    pub paths: Paths,
    /// One renewal at a time (the periodic one and an in-place one could meet).
    running: tokio::sync::Mutex<()>,
}

impl Renewer {
    /// A renewer of the certificate in `paths.kubeconfig()`.
    pub fn new(
        credentials: Credentials,
        client: kube::Client,
        config: NodeAgentConfiguration,
        paths: Paths,
    ) -> Self {
        Renewer {
            credentials,
            client,
            config,
            paths,
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// One renewal: a new certificate asked for with the current one, written into the
    /// kubeconfig (the rest of it kept, so a CA file it names is read again), then every
    /// client switched to it. [`CertificateError::NoCertificate`] (inside
    /// [`BootstrapError::Certificate`]) before anything is asked for when the kubeconfig has no
    /// client certificate (a token): there is nothing to renew.
    pub async fn renew_once(&self) -> Result<CertificateFacts, BootstrapError> {
        let _running = self.running.lock().await;
        let path = self.paths.kubeconfig();
        steps::current_certificate(&path)?;
        let machine = steps::read_machine_name(&self.paths.machine_name())?;
        let issued = steps::request(&self.client, &machine, REQUEST_TIMEOUT).await?;
        let current = steps::read_kubeconfig(&path)?;
        let renewed = rules::with_certificate(&current, &issued.cert_pem, &issued.key_pem)
            .ok_or_else(|| CertificateError::NoCertificate(path.display().to_string()))?;
        let config = usable(&renewed, &path, &self.paths).await?;
        steps::write_kubeconfig(&path, &renewed)?;
        self.credentials.replace(config);
        info!(
            serial = %issued.facts.serial,
            not_after = issued.facts.not_after,
            "client certificate renewed; the API clients switch to it without a restart"
        );
        let _ = warn_on_skew(&issued.facts);
        Ok(issued.facts)
    }
}

/// The client configuration of `kubeconfig`, which is to be written to `path`, once a client
/// builds from it: what would not load or build (a key the TLS library refuses, say) is not
/// written, and the credentials in use stay.
async fn usable(
    kubeconfig: &Kubeconfig,
    path: &Path,
    paths: &Paths,
) -> Result<kube::Config, BootstrapError> {
    let config = credentials::from_kubeconfig(kubeconfig.clone(), path, paths).await?;
    crate::kubeconfig::build(config.clone(), "agent").map_err(BootstrapError::Client)?;
    Ok(config)
}

/// What the periodic renewal needs from the running agent.
pub struct Renewal {
    /// The renewal itself.
    pub renewer: Arc<Renewer>,
    /// Events on the Node, once it is known (the agent's one recorder).
    pub events: Arc<NodeEvents>,
    /// The Node.
    pub node: watch::Receiver<Option<NodeMeta>>,
    /// Error counters.
    pub metrics: Metrics,
}

/// Renews the certificate of `credentials/kubeconfig` whenever it is due, for as long as the
/// agent runs; ends at once when that kubeconfig has no client certificate (a token).
pub async fn renew_forever(renewal: Renewal) {
    let path = renewal.renewer.paths.kubeconfig();
    // At least this long between two requests, so a clock far off (every certificate already
    // due) cannot make a loop of requests.
    let mut at_least = Duration::ZERO;
    let mut first = true;
    loop {
        let facts = match steps::current_certificate(&path) {
            Ok(facts) => facts,
            Err(error @ CertificateError::NoCertificate(_)) => {
                info!(reason = %error, "no certificate renewal");
                return;
            }
            Err(error) => {
                warn!(error = %error_chain(&error), "reading the client certificate failed; trying again in 5 min");
                tokio::time::sleep(UNREADABLE_RETRY).await;
                continue;
            }
        };
        renewal
            .metrics
            .certificate(facts.not_before, facts.not_after);
        if std::mem::take(&mut first) {
            report_early_certificate(&renewal, &facts).await;
        }
        let due = rules::renewal_due(&facts, fastrand::f64());
        let wait = Duration::from_secs(u64::try_from(due - unix_now()).unwrap_or(0)).max(at_least);
        info!(serial = %facts.serial, not_after = facts.not_after, renew_in = ?wait, "client certificate");
        tokio::time::sleep(wait).await;
        at_least = renew_reported(&renewal, &facts).await;
    }
}

/// One renewal of the certificate `current` as [`renew_forever`] makes it, reported: a new
/// certificate not valid by this node's clock gets the clock-skew event, a failure (a
/// certificate refused among them: the credentials in use stay) its log line, error counter
/// and Warning event [`REASON_RENEWAL_FAILED`]. Returns how long to wait at least before the
/// next one.
pub async fn renew_reported(renewal: &Renewal, current: &CertificateFacts) -> Duration {
    match renewal.renewer.renew_once().await {
        Ok(renewed) => {
            if let Some(note) = rules::clock_skew(&renewed, unix_now()) {
                warn_on_node(renewal, REASON_CLOCK_SKEW, note).await;
            }
            MIN_RENEWAL_SPACING
        }
        Err(error) => {
            let pause = rules::retry_after(current, unix_now());
            report_failure(renewal, &error, pause).await;
            pause
        }
    }
}

/// A failed renewal: a log line, the error counter and a Warning event on the Node.
async fn report_failure(renewal: &Renewal, error: &BootstrapError, pause: Duration) {
    let note = format!(
        "renewing the client certificate failed, trying again in {pause:?}: {}",
        error_chain(error)
    );
    warn!(%note);
    renewal.metrics.error("client-certificate", "renew");
    warn_on_node(renewal, REASON_RENEWAL_FAILED, note).await;
}

/// A certificate that is not valid by this node's clock says the clock is off
/// ([`rules::clock_skew`]): a warning in the log; `Some(note)` for an event where one can be
/// sent.
fn warn_on_skew(facts: &CertificateFacts) -> Option<String> {
    let note = rules::clock_skew(facts, unix_now())?;
    warn!(
        not_before = facts.not_before,
        not_after = facts.not_after,
        "{note}"
    );
    Some(note)
}

/// A certificate not valid yet by this clock when the agent starts (the bootstrap's, whose
/// identity could not send events): the skew event as soon as the Node is known.
async fn report_early_certificate(renewal: &Renewal, facts: &CertificateFacts) {
    if facts.not_before <= unix_now() {
        return;
    }
    if let Some(note) = warn_on_skew(facts) {
        let mut node = renewal.node.clone();
        let _ = tokio::time::timeout(NODE_WAIT, node.wait_for(Option::is_some)).await;
        warn_on_node(renewal, REASON_CLOCK_SKEW, note).await;
    }
}

/// A Warning event on the Node, once the Node is known (before, the log line is all).
async fn warn_on_node(renewal: &Renewal, reason: &str, note: String) {
    let node = renewal.node.borrow().clone();
    if let Some(node) = node {
        renewal
            .events
            .report(&renewal.metrics, &node, true, reason, note)
            .await;
    }
}
