//! Writing a subcommand's result to stdout (`crds`, `render`, the `local-env` banner): the one
//! place that knows a closed pipe is not a failure. Below every subcommand, so none of them
//! reaches up into [`crate::cli`] for it.

use std::io::Write;

/// Writes `text` to stdout. A reader that went away (`... | head -1`) is not an error: the
/// command stops writing and exits 0, as `cat` and other filters do.
pub fn print(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
