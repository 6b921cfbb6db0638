//! Text from outside (an OSC, a Secret, a command's output, a flag, a host path, a link's
//! target) made safe to show to a person.
//!
//! Messages the node agent writes where people read them (Node events that `kubectl describe
//! node` prints, Node annotations, log lines) often quote what they refuse: an OSC path, an
//! image name, a command's last line. Such text may carry terminal escape sequences (which
//! clear a screen or rewrite a title bar), line breaks (a forged second log line or event
//! line) or bidirectional overrides (text that reads differently than it is). [`escape_controls`]
//! writes each of those characters as a visible escape instead, so the message stays on one
//! line and shows what was really there. Pure; used where messages leave a process: the
//! printable error chain (`error_chain::printable`), the agent's event recorder
//! (`agent::ports::cluster::NodeEvents`) and OSC rejection message (`agent::pipeline::osc`), every
//! subcommand's error report (`cli::error_report`) and the installer's termination log. Log
//! lines need nothing extra: tracing's text and JSON formats
//! escape control characters themselves.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a reader as it is: a control character (C0, DEL, C1: line
/// breaks, tabs, `ESC`, `CSI`) or a character that reorders text (bidirectional marks,
/// embeddings, overrides and isolates).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every [`is_unsafe`] character written as an escape: `\n`, `\r`, `\t`, else
/// `\u{1b}` (its code point in hex). Everything else, backslashes included, stays as it is,
/// so escaping the result again changes nothing. Borrows when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            c if is_unsafe(c) => {
                // Writing to a String cannot fail.
                let _ = write!(escaped, "\\u{{{:x}}}", u32::from(c));
            }
            c => escaped.push(c),
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

    #[test]
    fn control_and_reordering_characters_become_visible_escapes() {
        assert_eq!(
            escape_controls("/etc/\u{1b}[2J\nsecond line\r\t\u{7f}\u{9b}\u{0}"),
            "/etc/\\u{1b}[2J\\nsecond line\\r\\t\\u{7f}\\u{9b}\\u{0}"
        );
        assert_eq!(
            escape_controls("abc\u{202e}def\u{2066}"),
            "abc\\u{202e}def\\u{2066}"
        );
    }

    #[test]
    fn plain_text_is_borrowed_and_escaping_twice_changes_nothing() {
        for plain in ["", "/etc/app.conf: path must be absolute", "é ü → 漢字 \\n"] {
            assert!(
                matches!(escape_controls(plain), Cow::Borrowed(_)),
                "{plain}"
            );
        }
        let once = escape_controls("a\u{1b}b\nc").into_owned();
        assert_eq!(escape_controls(&once), once);
        assert!(!once.chars().any(is_unsafe));
    }
}
