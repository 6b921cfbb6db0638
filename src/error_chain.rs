//! An error and its causes as one line of text, the one formatter of the crate: status
//! descriptions and events of the operator, log fields and Node events of the agent, the
//! report of a failed subcommand. Pure; sits below every feature.

use std::error::Error;

/// Renders an error with its causes, `a: b: c`, for status descriptions and events: one
/// sentence a human reads. A cause whose text the error already ends with is not repeated.
/// An API error ends the chain as `<reason>: <message>` of the API server's Status, because
/// kube's own text for it embeds a debug dump of that Status.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    let mut current = Some(error);
    while let Some(cause) = current {
        let (cause_text, last) = match api_status(cause) {
            Some(status) => (describe_status(status), true),
            None => (cause.to_string(), false),
        };
        if text.is_empty() {
            text = cause_text;
        } else if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        if last {
            break;
        }
        current = cause.source();
    }
    text
}

/// The API server's Status behind `error`, when it is one (directly or as `kube::Error::Api`,
/// boxed or not: our error variants hold `Box<kube::Error>`).
fn api_status<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a kube::core::Status> {
    let kube_error = error
        .downcast_ref::<kube::Error>()
        .or_else(|| error.downcast_ref::<Box<kube::Error>>().map(|b| &**b));
    match kube_error {
        Some(kube::Error::Api(status)) => Some(status),
        Some(_) => None,
        None => error.downcast_ref::<kube::core::Status>(),
    }
}

/// `<reason>: <message>` of an API server Status (either alone when the other is empty;
/// `HTTP <code>` when both are).
pub fn describe_status(status: &kube::core::Status) -> String {
    match (status.reason.is_empty(), status.message.is_empty()) {
        (false, false) => format!("{}: {}", status.reason, status.message),
        (false, true) => status.reason.clone(),
        (true, false) => status.message.clone(),
        (true, true) => format!("HTTP {}", status.code),
    }
}

/// [`chain`] with control characters escaped ([`crate::printable`]), for text people read
/// outside a log line: causes quote OSC strings, Secrets and command output.
pub fn printable(error: &(dyn Error + 'static)) -> String {
    crate::printable::escape_controls(&chain(error)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_read_as_reason_and_message() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading Cluster shoot--a--b")]
        struct Reading(#[source] Box<kube::Error>);
        let status = kube::core::Status::failure(
            "clusters.extensions.gardener.cloud \"shoot--a--b\" not found",
            "NotFound",
        )
        .with_code(404);
        let error = Reading(Box::new(kube::Error::Api(Box::new(status))));
        assert_eq!(
            chain(&error),
            "reading Cluster shoot--a--b: NotFound: clusters.extensions.gardener.cloud \"shoot--a--b\" not found"
        );
        let bare = kube::Error::Api(Box::new(kube::core::Status::failure("", "").with_code(500)));
        assert_eq!(chain(&bare), "HTTP 500");
    }

    #[test]
    fn chain_joins_causes_without_repeating_them() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(chain(&e), "outer: inner");
    }

    #[test]
    fn printable_escapes_what_a_cause_quotes() {
        #[derive(Debug, thiserror::Error)]
        #[error("writing /etc/a")]
        struct Writing(#[source] std::io::Error);
        let e = Writing(std::io::Error::other("bad\nline"));
        assert_eq!(printable(&e), "writing /etc/a: bad\\nline");
    }
}
