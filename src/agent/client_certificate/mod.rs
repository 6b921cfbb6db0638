//! The agent's client certificate, as gardener-node-agent v1.149.3 gets and keeps it
//! (`docs/agent.md#client-certificate`): a new machine trades its bootstrap token for a
//! certificate of `gardener.cloud:node-agent:machine:<machine>` through a
//! CertificateSigningRequest, kubelet gets its bootstrap kubeconfig, and the certificate is
//! renewed at 80–88 % of its lifetime — unlike GNA, without restarting the agent: every API
//! client follows [`crate::agent::access::switching_client::Credentials`].
//!
//! [`rules`] decides (pure), [`steps`] does the I/O, [`lifecycle`] is what the agent's start and
//! main loop call.

pub mod lifecycle;
pub mod rules;
pub mod steps;
