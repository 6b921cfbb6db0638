//! The agent's own access to the shoot's API server: [`credentials`] (which kubeconfig or
//! bootstrap token, and the client built from it) and [`token`] (keeping the access token
//! file in sync with its Secret).

pub mod credentials;
pub mod token;
