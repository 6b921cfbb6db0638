//! Token sync (`docs/agent.md#token-sync`): copies `data.token` of each configured secret
//! in `kube-system` to its file, mode 0640, on a period and whenever the apply step deleted a
//! file that a sync config owns. Direct GETs, no secret cache. A missing secret or an empty
//! token is an error retried with backoff; the file is only written when its bytes differ
//! (atomically, parent folders created).

use std::path::Path;
use std::time::Duration;

use tokio::sync::Notify;

use crate::api::nodeagent::TokenSecretSyncConfig;

use crate::agent::metrics::Metrics;
use crate::agent::ports::cluster::{ApiSecrets, NAMESPACE};
use crate::agent::ports::host::Host;
use crate::error_chain::printable as error_chain;

/// Mode of token files (readable by the group, for static pods with fsGroup 0).
pub const TOKEN_FILE_MODE: u32 = 0o640;
/// Data key of the token.
pub const DATA_KEY_TOKEN: &str = "token";
/// First retry after an error; doubles up to the sync period.
const FIRST_RETRY: Duration = Duration::from_secs(5);

/// Why a token could not be synced.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The GET failed (NotFound included).
    #[error("reading secret {NAMESPACE}/{0}")]
    Get(String, #[source] kube::Error),
    /// No or an empty `token` key.
    #[error("secret {NAMESPACE}/{0} has no non-empty `token`")]
    Empty(String),
    /// Writing the file failed.
    #[error("writing {0}")]
    Write(String, #[source] crate::agent::ports::host::HostError),
}

/// Syncs one config; returns whether the file was (re)written.
pub async fn sync_one<H: Host>(
    secrets: &ApiSecrets,
    host: &H,
    config: &TokenSecretSyncConfig,
) -> Result<bool, TokenError> {
    let secret = secrets
        .get(&config.secret_name)
        .await
        .map_err(|error| TokenError::Get(config.secret_name.clone(), error))?;
    let token = secret
        .data
        .as_ref()
        .and_then(|data| data.get(DATA_KEY_TOKEN))
        .map(|value| value.0.clone())
        .filter(|token| !token.is_empty())
        .ok_or_else(|| TokenError::Empty(config.secret_name.clone()))?;
    write_token(host, Path::new(&config.path), &token)
        .map_err(|error| TokenError::Write(config.path.clone(), error))
}

/// Writes `token` to `path` (0640) unless it already holds exactly that.
pub fn write_token<H: Host>(
    host: &H,
    path: &Path,
    token: &[u8],
) -> Result<bool, crate::agent::ports::host::HostError> {
    if host.holds(path, token)? {
        if host.mode(path)? != Some(TOKEN_FILE_MODE) {
            host.set_mode(path, TOKEN_FILE_MODE)?;
        }
        return Ok(false);
    }
    host.write(path, token, TOKEN_FILE_MODE)?;
    Ok(true)
}

/// Syncs every config every `period`; a failed round is retried sooner (5 s, doubling up to
/// `period`); `trigger` starts a round at once.
pub async fn run<H: Host>(
    secrets: ApiSecrets,
    host: &H,
    configs: Vec<TokenSecretSyncConfig>,
    period: Duration,
    trigger: &Notify,
    metrics: Metrics,
) {
    if configs.is_empty() {
        return;
    }
    let mut retry = FIRST_RETRY;
    loop {
        let mut failed = false;
        for config in &configs {
            match sync_one(&secrets, host, config).await {
                Ok(true) => {
                    tracing::info!(secret = %config.secret_name, path = %config.path, "token written")
                }
                Ok(false) => {
                    tracing::debug!(secret = %config.secret_name, path = %config.path, "token up to date")
                }
                Err(error) => {
                    failed = true;
                    metrics.error("token", "sync");
                    tracing::warn!(error = %error_chain(&error), secret = %config.secret_name, "token sync failed");
                }
            }
        }
        let wait = if failed {
            let wait = retry.min(period);
            retry = (retry * 2).min(period);
            wait
        } else {
            retry = FIRST_RETRY;
            period
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = trigger.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::testing::FakeHost;

    #[test]
    fn token_is_written_once_with_0640() {
        let host = FakeHost::default();
        assert!(write_token(&host, Path::new("/var/lib/valitail/auth-token"), b"t1").unwrap());
        assert_eq!(host.file_mode("/var/lib/valitail/auth-token"), Some(0o640));
        host.take_writes();
        assert!(!write_token(&host, Path::new("/var/lib/valitail/auth-token"), b"t1").unwrap());
        assert!(host.take_writes().is_empty());
        assert!(write_token(&host, Path::new("/var/lib/valitail/auth-token"), b"t2").unwrap());
        assert_eq!(
            host.content("/var/lib/valitail/auth-token").as_deref(),
            Some("t2")
        );
    }

    /// A link in the token file's place holding the same token: without the check of the
    /// file itself, the "already there" path would chmod the link's target.
    #[test]
    fn a_link_in_the_token_files_place_is_replaced_not_chmodded() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let victim = base.join("victim");
        std::fs::write(&victim, "t1").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = base.join("auth-token");
        symlink(&victim, &path).unwrap();
        let host = crate::agent::ports::host::SystemHost::new(
            "unix:path=/nonexistent".into(),
            std::time::Duration::from_secs(1),
            "/nonexistent".into(),
            "k8s.io".into(),
            base.join("tmp"),
        );
        assert!(
            write_token(&host, &path, b"t1").unwrap(),
            "the link is replaced"
        );
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&victim), 0o600);
        assert_eq!(mode(&path), TOKEN_FILE_MODE);
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"t1");
    }
}
