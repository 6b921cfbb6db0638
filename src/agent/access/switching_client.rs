//! API clients that follow renewed credentials without a restart (`docs/agent.md#client-certificate`).
//!
//! A [`kube::Client`] fixes its TLS identity when it is built, and every part of the agent holds
//! a clone of one (watches, Lease, events, the heartbeat thread's own client). [`Credentials`]
//! is the one place that knows the current client configuration; [`Credentials::client`] hands
//! out a client whose every request goes through the inner client built from the newest
//! configuration. When the certificate is renewed, [`Credentials::replace`] swaps the
//! configuration: the next request of every such client builds a new inner client (a new
//! connection pool, so new TLS handshakes with the new certificate), while requests already
//! under way — long watches among them — finish on the old connections, whose certificate is
//! still valid (it is renewed at about 80 % of its lifetime).
//!
//! Each client builds its inner clients on the runtime that sends its requests, so the
//! heartbeat thread's client keeps its connections on the heartbeat's runtime.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::Body;

/// The current client configuration, shared by every client [`Credentials::client`] made.
#[derive(Clone)]
pub struct Credentials {
    current: Arc<RwLock<Generation>>,
}

#[derive(Clone)]
struct Generation {
    number: u64,
    config: kube::Config,
}

impl Credentials {
    /// Starts with `config`.
    pub fn new(config: kube::Config) -> Self {
        Credentials {
            current: Arc::new(RwLock::new(Generation { number: 0, config })),
        }
    }

    /// Makes `config` the configuration of every client's next request.
    pub fn replace(&self, config: kube::Config) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        current.number += 1;
        current.config = config;
    }

    fn generation(&self) -> Generation {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A client that sends each request with the newest configuration, with the agent's
    /// `User-Agent` for `subcommand`. Fails where building a client from the configuration now
    /// in force fails (TLS set-up), so a broken configuration is seen at start.
    pub fn client(&self, subcommand: &'static str) -> Result<kube::Client, kube::Error> {
        let generation = self.generation();
        let default_namespace = generation.config.default_namespace.clone();
        let inner = crate::kubeconfig::build(generation.config, subcommand)?;
        let service = Switching {
            credentials: self.clone(),
            subcommand,
            built: Arc::new(Mutex::new((generation.number, inner))),
        };
        Ok(kube::Client::new(service, default_namespace))
    }
}

/// The service behind [`Credentials::client`]: the inner client of the newest generation.
#[derive(Clone)]
struct Switching {
    credentials: Credentials,
    subcommand: &'static str,
    built: Arc<Mutex<(u64, kube::Client)>>,
}

impl Switching {
    /// The inner client of the newest generation, built now when the configuration changed.
    fn inner(&self) -> Result<kube::Client, kube::Error> {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = self.credentials.generation();
        if built.0 != generation.number {
            let client = crate::kubeconfig::build(generation.config, self.subcommand)?;
            tracing::info!(
                generation = generation.number,
                "API client switched to the renewed credentials"
            );
            *built = (generation.number, client);
        }
        Ok(built.1.clone())
    }
}

impl tower_service::Service<Request<Body>> for Switching {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.inner();
        Box::pin(async move { inner?.send(request).await })
    }
}
