//! Counting one client's API requests in kube-apiserver's audit log (written when the shared
//! control plane runs with [`super::enable_audit_log`]). `apiserver_request_total` has no
//! label for the client, so the audit log, whose events carry the `User-Agent`, is where one
//! client's requests can be told apart from the test's own and the API server's.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

/// Requests by `"<verb> <resource>[/<subresource>]"`; in a mix taken with codes
/// ([`AuditLog::take_coded`]) the requests answered 404 or 409 count under the same key with
/// `" → 404"` or `" → 409"` appended.
pub type Mix = BTreeMap<String, usize>;

/// The response codes a mix taken with codes counts apart: Not Found and Conflict, the answers
/// that tell a cache's miss and a stale write from a useful request.
pub const CODES_APART: [u16; 2] = [404, 409];

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

    /// Like [`Self::take`], with the requests answered 404 or 409 counted apart (keys
    /// `"<verb> <resource> → <code>"`, see [`CODES_APART`]), from kube-apiserver's
    /// `responseStatus.code`.
    pub fn take_coded(&mut self, client: impl Fn(&str) -> bool) -> Mix {
        let mut mix = Mix::new();
        self.read_events(|event, key| {
            if client(event["userAgent"].as_str().unwrap_or_default()) {
                *mix.entry(coded_key(event, key)).or_default() += 1;
            }
        });
        mix
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
        self.take_when_quiet_with(client, quiet, false, |_| false)
            .await
    }

    /// [`Self::take_when_quiet`] with the requests answered 404 or 409 counted apart (see
    /// [`Self::take_coded`]), where the requests whose key `periodic` accepts (a heartbeat,
    /// a health check that writes every object's status every few seconds) count but do not
    /// keep the client from being quiet.
    pub async fn take_coded_when_quiet(
        &mut self,
        client: impl Fn(&str) -> bool,
        quiet: Duration,
        periodic: impl Fn(&str) -> bool,
    ) -> Mix {
        self.take_when_quiet_with(client, quiet, true, periodic)
            .await
    }

    async fn take_when_quiet_with(
        &mut self,
        client: impl Fn(&str) -> bool,
        quiet: Duration,
        coded: bool,
        periodic: impl Fn(&str) -> bool,
    ) -> Mix {
        let mut total = Mix::new();
        loop {
            tokio::time::sleep(quiet).await;
            let more = if coded {
                self.take_coded(&client)
            } else {
                self.take(&client)
            };
            let done = more.keys().all(|key| periodic(key));
            for (key, count) in more {
                *total.entry(key).or_default() += count;
            }
            if done {
                return total;
            }
        }
    }
}

/// The key of `event` with its response code appended where it is one of [`CODES_APART`].
fn coded_key(event: &serde_json::Value, key: String) -> String {
    match event["responseStatus"]["code"].as_u64() {
        Some(code) if CODES_APART.iter().any(|c| u64::from(*c) == code) => {
            format!("{key} → {code}")
        }
        _ => key,
    }
}

/// Requests of a mix taken with codes that were answered `code` (404 or 409).
pub fn answered(mix: &Mix, code: u16) -> usize {
    let suffix = format!(" → {code}");
    mix.iter()
        .filter(|(key, _)| key.ends_with(&suffix))
        .map(|(_, count)| count)
        .sum()
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

/// Requests of one kind that kube-apiserver refused (403) for a user: who, what, why and how
/// often (from the audit log's `authorization.k8s.io/reason` annotation, which carries the
/// authorizer's reason, e.g. GRM's node-agent authorizer's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    /// The user (for a node agent `gardener.cloud:node-agent:machine:<machine>`).
    pub user: String,
    /// `"<verb> <resource>[/<subresource>] <namespace>/<name>"` (`-` for what is not set).
    pub request: String,
    /// The authorizers' reason.
    pub reason: String,
    /// How many requests.
    pub count: usize,
}

/// Every request of a user whose name starts with `user_prefix` that the audit log at `path`
/// records as refused with 403, grouped by user, request and reason.
pub fn refusals(path: &std::path::Path, user_prefix: &str) -> Vec<Refusal> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut counted: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let user = event["user"]["username"].as_str().unwrap_or_default();
        if !user.starts_with(user_prefix)
            || event["stage"] != "ResponseComplete"
            || event["responseStatus"]["code"] != 403
        {
            continue;
        }
        let object = &event["objectRef"];
        let field = |name: &str| object[name].as_str().unwrap_or("-").to_string();
        let mut resource = field("resource");
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let request = format!(
            "{} {resource} {}/{}",
            event["verb"].as_str().unwrap_or("-"),
            field("namespace"),
            field("name")
        );
        let reason = event["annotations"]["authorization.k8s.io/reason"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        *counted
            .entry((user.to_string(), request, reason))
            .or_default() += 1;
    }
    counted
        .into_iter()
        .map(|((user, request, reason), count)| Refusal {
            user,
            request,
            reason,
            count,
        })
        .collect()
}

/// How many requests of users whose name starts with `user_prefix` the audit log at `path`
/// records as answered (a watch when its response started, anything else when complete).
pub fn answered_for(path: &std::path::Path, user_prefix: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| {
            let user = event["user"]["username"].as_str().unwrap_or_default();
            let counted = if event["verb"] == "watch" {
                event["stage"] == "ResponseStarted" || event["responseStatus"]["code"] != 200
            } else {
                event["stage"] == "ResponseComplete"
            };
            user.starts_with(user_prefix) && counted
        })
        .count()
}

/// The refusals as a table, one line each, or `none`.
pub fn describe_refusals(refusals: &[Refusal]) -> String {
    if refusals.is_empty() {
        return "none".to_string();
    }
    refusals
        .iter()
        .map(|r| {
            format!(
                "\n  {} × {} by {}: {}",
                r.count, r.request, r.user, r.reason
            )
        })
        .collect()
}
