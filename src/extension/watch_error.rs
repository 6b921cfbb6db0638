//! What the operator's watches say when they fail. Every watch (the controllers' own, the seed
//! cache's, the Machine watch) retries with backoff; most errors are worth a warning each
//! time, but one is not: a resource the API server does not serve, which is a missing
//! CustomResourceDefinition (a dev kubeconfig pointing at a cluster without `crds/`, a seed
//! without machine-controller-manager's CRDs). Retrying cannot fix that, so it is said once,
//! as an error naming the resource and the command that installs it, and again only after the
//! resource was served in between.

use kube::api::ApiResource;
use kube::runtime::watcher;

/// The error log of one watch (one per watch loop).
#[derive(Debug)]
pub struct WatchErrorLog {
    what: String,
    resource: String,
    missing_reported: bool,
}

impl WatchErrorLog {
    /// The log of the watch on `resource`, called `what` in log lines (e.g. `Worker`).
    pub fn new(what: impl Into<String>, resource: &ApiResource) -> Self {
        WatchErrorLog {
            what: what.into(),
            resource: resource_name(resource),
            missing_reported: false,
        }
    }

    /// Logs one error of the watch.
    pub fn error(&mut self, error: &watcher::Error) {
        let what = &self.what;
        if !is_not_served(error) {
            tracing::warn!(kind = %what, %error, "watch error; retrying with backoff");
        } else if !self.missing_reported {
            self.missing_reported = true;
            tracing::error!(kind = %what, resource = %self.resource, "{}", missing_crd_message(&self.resource));
        } else {
            tracing::debug!(kind = %what, %error, "still not served; retrying with backoff");
        }
    }

    /// Notes an event of the watch: any but `Init` (which the watcher yields before each
    /// list attempt, also before one that fails) shows the resource served, so a later
    /// absence is reported again.
    pub fn observed<K>(&mut self, event: &watcher::Event<K>) {
        if matches!(event, watcher::Event::Init) {
            return;
        }
        if std::mem::take(&mut self.missing_reported) {
            tracing::info!(kind = %self.what, resource = %self.resource, "the API server serves the resource now");
        }
    }
}

/// `plural.group` (`plural` for the core group), as `kubectl get` takes it.
fn resource_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// The one line for a resource the API server does not serve.
pub fn missing_crd_message(resource: &str) -> String {
    format!(
        "the API server does not serve {resource}: its CustomResourceDefinition is not installed; \
         install it with `kubectl apply --server-side -f crds/` from this repository (a Gardener \
         seed has it already; `make start` installs it only into the control plane it starts \
         itself when there is no dev/kubeconfig, never into a cluster you give it); retrying"
    )
}

/// Whether the error is the API server's 404 for the resource itself.
fn is_not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => {
            matches!(error, kube::Error::Api(status) if status.code == 404)
        }
        watcher::Error::WatchError(status) => status.code == 404,
        watcher::Error::NoResourceVersion => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            Status::failure("404 page not found", "Failed to parse error data")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_404_is_a_resource_the_server_does_not_serve() {
        assert!(is_not_served(&watcher::Error::InitialListFailed(
            api_error(404)
        )));
        assert!(is_not_served(&watcher::Error::WatchStartFailed(api_error(
            404
        ))));
        assert!(!is_not_served(&watcher::Error::InitialListFailed(
            api_error(403)
        )));
        assert!(!is_not_served(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn the_message_names_the_resource_and_the_install_command() {
        let resource = ApiResource::erase::<crate::api::Worker>(&());
        let name = resource_name(&resource);
        assert_eq!(name, "workers.extensions.gardener.cloud");
        let message = missing_crd_message(&name);
        assert!(
            message.contains("workers.extensions.gardener.cloud"),
            "{message}"
        );
        assert!(
            message.contains("kubectl apply --server-side -f crds/"),
            "{message}"
        );
        assert!(!message.contains('\n'));
        // `make start` against dev/kubeconfig prints this too: it must not promise to install.
        assert!(
            !message.contains("`make start` installs it into"),
            "{message}"
        );
        assert!(
            message.contains("never into a cluster you give it"),
            "{message}"
        );
        let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        assert_eq!(resource_name(&secrets), "secrets");
    }
}
