//! Why the agent could not start or stopped: the error that `agent::run` and the main loop
//! (`agent::controller`) return.

/// Why the agent could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Flags or config file.
    #[error(transparent)]
    Config(#[from] crate::agent::config::ConfigError),
    /// No usable credentials.
    #[error(transparent)]
    Credentials(#[from] crate::agent::access::credentials::CredentialsError),
    /// The API client could not be built.
    #[error("building the API client")]
    Client(#[source] kube::Error),
    /// The metrics server could not bind.
    #[error("serving metrics on {address}")]
    Metrics {
        /// The address.
        address: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Signal handling could not be set up.
    #[error("installing signal handlers")]
    Signal(#[source] std::io::Error),
    /// The heartbeat thread could not be started.
    #[error("starting the heartbeat thread")]
    Heartbeat(#[source] std::io::Error),
}
