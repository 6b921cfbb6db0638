//! The shoot Prometheus' view of our node agents (`docs/operations.md#shoot-alerts-and-dashboard`):
//! per shoot namespace one ManagedResource for the seed (class `seed`),
//! [`rules::MANAGED_RESOURCE`], with a ScrapeConfig that reaches every agent of the shoot
//! whose node-agent secret we ship through the API server's node proxy, the agents'
//! PrometheusRule (`assets/alerts.yaml`), a dashboard ConfigMap (`assets/dashboard.json`) and
//! the shoot API server's CA for the scrape. [`rules`] renders it (pure); [`step`] keeps it
//! in step with the node-agent ManagedResources of the namespace, called by
//! [`super::reconcile`], [`super::delete`] and [`super::migrate`].

pub mod rules;
pub mod step;
