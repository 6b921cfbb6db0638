//! Text that came from outside (a flag, a host path, a link's target, a file) made safe to
//! show. Pure.
//!
//! Error messages end up on a terminal (`kubectl logs`, the process's stderr) and in a pod's
//! termination message (`kubectl describe pod`). A control character in them, such as an
//! escape sequence in a path, a newline or a carriage return, can rewrite what the reader
//! sees. [`escape_controls`] writes every control character (Unicode category Cc: C0, DEL,
//! C1) as a Rust escape (`\n`, `\u{1b}`), so the text stays on one line and shows exactly
//! what was there. It is applied where messages leave the process ([`crate::cli::error_report`]
//! and the installer's termination log); log lines need nothing extra, as tracing's text and
//! JSON formats escape control characters themselves.

use std::borrow::Cow;

/// `text` with every control character written as its Rust escape; borrowed when there is
/// none.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        assert!(matches!(
            escape_controls("/etc/containerd/config.toml äöü"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("a\u{1b}[2Jb\nc\rd\te\u{7f}f\u{9b}g"),
            "a\\u{1b}[2Jb\\nc\\rd\\te\\u{7f}f\\u{9b}g"
        );
        assert!(!escape_controls("\u{1b}]0;title\u{7}").contains(char::is_control));
    }
}
