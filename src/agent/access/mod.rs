//! The agent's own access to the shoot's API server: [`credentials`] (which kubeconfig or
//! bootstrap token, and the client configuration built from it), [`kubeconfigs`] (the
//! kubeconfigs in GNA's layout), [`switching_client`] (the
//! clients that follow a renewed certificate) and [`token`] (keeping the access token file in
//! sync with its Secret).

pub mod credentials;
pub mod kubeconfigs;
pub mod switching_client;
pub mod token;
