//! Kubernetes Events (`events.k8s.io/v1`) on extension objects, one per operation outcome.
//!
//! The same event repeated (same object, type, reason, action **and note**) within
//! [`SERIES_TTL`] becomes a series: the first event's `series.count` and
//! `series.lastObservedTime` are bumped instead of writing a new object. A different note is
//! a different event, so `kubectl describe` always shows the current failure next to the
//! earlier ones, never an old message with a growing count. (kube's `Recorder` keys series
//! without the note, which is why this module writes the events itself.)
//!
//! Publishing is best effort: a failed event write is logged and never fails a reconcile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::finalizer::is_not_found;

/// The controller name events are reported under.
pub const REPORTING_CONTROLLER: &str = "gardener-extension-node";

/// How long a repeated event extends the series of its first occurrence; after that it
/// starts a new event.
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// The events API caps notes at 1 KiB.
const MAX_NOTE_BYTES: usize = 1000;

/// Whether an event is informational or a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What makes two events the same occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    type_: EventType,
    reason: String,
    action: String,
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    note: String,
}

/// The stored event of a series.
#[derive(Debug, Clone)]
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

/// Publishes events for the operator.
#[derive(Clone)]
pub struct EventPublisher {
    client: Client,
    instance: String,
    series: Arc<Mutex<HashMap<SeriesKey, Series>>>,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl EventPublisher {
    /// A publisher reporting as [`REPORTING_CONTROLLER`], instance = pod name (env
    /// `POD_NAME`) or host name.
    pub fn new(client: Client) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| REPORTING_CONTROLLER.to_string());
        EventPublisher {
            client,
            instance,
            series: Arc::default(),
        }
    }

    /// Publishes a Normal event.
    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(regarding, EventType::Normal, reason, action, note)
            .await;
    }

    /// Publishes a Warning event.
    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.publish(regarding, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let note = truncate(note, MAX_NOTE_BYTES);
        let key = SeriesKey {
            type_,
            reason: reason.to_string(),
            action: action.to_string(),
            regarding: (
                regarding.uid.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.kind.clone(),
            ),
            note,
        };
        let now = Instant::now();
        let previous = {
            let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
            series.retain(|_, s| now.duration_since(s.last) < SERIES_TTL);
            series.get(&key).cloned()
        };
        let result = match previous {
            Some(previous) => match self.bump(&previous).await {
                Err(error) if is_not_found(&error) => self.create(regarding, &key).await,
                other => other.map(|()| Series {
                    count: previous.count + 1,
                    last: now,
                    ..previous
                }),
            },
            None => self.create(regarding, &key).await,
        };
        match result {
            Ok(stored) => {
                self.series
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, stored);
            }
            Err(error) => tracing::warn!(%error, reason, "publishing event failed"),
        }
    }

    /// Counts one more occurrence on the series' event.
    async fn bump(&self, series: &Series) -> Result<(), kube::Error> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &series.namespace);
        let patch = json!({"series": EventSeries {
            count: series.count + 1,
            last_observed_time: MicroTime(Timestamp::now()),
        }});
        api.patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }

    /// Writes a new event (the first of its series).
    async fn create(
        &self,
        regarding: &ObjectReference,
        key: &SeriesKey,
    ) -> Result<Series, kube::Error> {
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let now = Timestamp::now();
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(REPORTING_CONTROLLER),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(key.type_.as_str().to_string()),
            reason: Some(key.reason.clone()),
            action: Some(key.action.clone()),
            note: Some(key.note.clone()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await?;
        Ok(Series {
            namespace,
            name,
            count: 1,
            last: Instant::now(),
        })
    }
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(super::truncate("äöü".to_string(), 3), "ä");
        assert_eq!(super::truncate("abc".to_string(), 10), "abc");
    }
}
