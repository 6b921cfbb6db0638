//! Counting one client's API requests in kube-apiserver's audit log (written when the shared
//! control plane runs with [`super::enable_audit_log`]). `apiserver_request_total` has no
//! label for the client, so the audit log, whose events carry the `User-Agent`, is where one
//! client's requests can be told apart from the test's own and the API server's.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

/// Requests by `"<verb> <resource>[/<subresource>]"`.
pub type Mix = BTreeMap<String, usize>;

/// A reader of the audit log from a position on.
pub struct AuditLog {
    path: PathBuf,
    offset: u64,
}

impl AuditLog {
    /// Starts at the current end of the log at `path` (the log need not exist yet).
    pub fn from_end(path: PathBuf) -> Self {
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        AuditLog { path, offset }
    }

    /// The requests logged since the last call whose `User-Agent` satisfies `client`, by verb
    /// and resource. A request counts once: a watch when its response starts, any other
    /// request when its response is complete. A line still being written stays for the next
    /// call.
    pub fn take(&mut self, client: impl Fn(&str) -> bool) -> Mix {
        self.take_where(|event| client(event["userAgent"].as_str().unwrap_or_default()))
    }

    /// The requests logged since the last call about objects in `namespace`, from any client
    /// (for tests where one client is the only one acting in their namespace).
    pub fn take_in_namespace(&mut self, namespace: &str) -> Mix {
        self.take_where(|event| event["objectRef"]["namespace"].as_str() == Some(namespace))
    }

    /// The requests logged since the last call about objects in `namespace`, in the order
    /// they completed, as `"<verb> <resource>[/<subresource>]"`.
    pub fn take_sequence_in_namespace(&mut self, namespace: &str) -> Vec<String> {
        let mut sequence = Vec::new();
        self.read_events(|event, key| {
            if event["objectRef"]["namespace"].as_str() == Some(namespace) {
                sequence.push(key);
            }
        });
        sequence
    }

    fn take_where(&mut self, wanted: impl Fn(&serde_json::Value) -> bool) -> Mix {
        let mut mix = Mix::new();
        self.read_events(|event, key| {
            if wanted(event) {
                *mix.entry(key).or_default() += 1;
            }
        });
        mix
    }

    /// Calls `each` with every counted event since the last call and its key.
    fn read_events(&mut self, mut each: impl FnMut(&serde_json::Value, String)) {
        let mut file = std::fs::File::open(&self.path).expect("audit log opens");
        file.seek(SeekFrom::Start(self.offset))
            .expect("audit log seeks");
        let mut text = String::new();
        file.read_to_string(&mut text).expect("audit log reads");
        let complete = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
        self.offset += complete as u64;
        for line in text[..complete].lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let verb = event["verb"].as_str().unwrap_or_default();
            let stage = event["stage"].as_str().unwrap_or_default();
            let counted = if verb == "watch" {
                stage == "ResponseStarted"
            } else {
                stage == "ResponseComplete"
            };
            if !counted {
                continue;
            }
            let object = &event["objectRef"];
            let mut resource = object["resource"].as_str().unwrap_or("-").to_string();
            if let Some(sub) = object["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            each(&event, format!("{verb} {resource}"));
        }
    }

    /// Waits until `client` has sent nothing for `quiet`, then returns everything it sent
    /// since the last call (the tail of a phase: status writes and events after the last
    /// object became ready).
    pub async fn take_when_quiet(&mut self, client: impl Fn(&str) -> bool, quiet: Duration) -> Mix {
        let mut total = Mix::new();
        loop {
            tokio::time::sleep(quiet).await;
            let more = self.take(&client);
            if more.is_empty() {
                return total;
            }
            for (key, count) in more {
                *total.entry(key).or_default() += count;
            }
        }
    }
}

/// Total requests of a mix.
pub fn total(mix: &Mix) -> usize {
    mix.values().sum()
}

/// The mix as `"patch containerruntimes/status 400, get secrets 200, …"`, largest first.
pub fn describe(mix: &Mix) -> String {
    let mut entries: Vec<(&String, &usize)> = mix.iter().collect();
    entries.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    entries
        .iter()
        .map(|(key, count)| format!("{key} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}
