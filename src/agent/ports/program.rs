//! Running a program on the node and keeping what it printed: the OS update command of an
//! in-place update ([`crate::agent::in_place::steps::run_os_update`]) through
//! [`super::host::Host::run_program`]. No shell; standard input is `/dev/null`; each stream's
//! last [`MAX_OUTPUT_BYTES`] are kept (a failed upgrade prints pages, its reason is at the end).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest output kept of each stream (its end: where the failure is).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// What a failed run left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramOutput {
    /// The end of its standard output.
    pub stdout: String,
    /// The end of its error output.
    pub stderr: String,
    /// How it ended (`exit status: 1`, `signal: 9 (SIGKILL)`, `not started`, ...).
    pub ending: String,
}

impl ProgramOutput {
    /// Both streams, standard output first.
    pub fn combined(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// One run of `program`; killed after `timeout`.
pub async fn run(program: &str, args: &[String], timeout: Duration) -> Result<(), ProgramOutput> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = child.map_err(|error| ProgramOutput {
        stderr: format!("system failure: cannot run {program}: {error}"),
        ending: "not started".into(),
        ..ProgramOutput::default()
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let run = async {
        let (stdout, stderr) = tokio::join!(read_tail(stdout), read_tail(stderr));
        let status = child.wait().await;
        (status, stdout, stderr)
    };
    let (status, stdout, stderr) =
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| ProgramOutput {
                stderr: format!("system failure: {program} did not finish within {timeout:?}"),
                ending: "killed".into(),
                ..ProgramOutput::default()
            })?;
    let ending = match status {
        Ok(status) if status.success() => return Ok(()),
        Ok(status) => status.to_string(),
        Err(error) => format!("waiting for it failed: {error}"),
    };
    Err(ProgramOutput {
        stdout,
        stderr,
        ending,
    })
}

/// Reads a stream to its end, keeping its last [`MAX_OUTPUT_BYTES`].
async fn read_tail<R: AsyncRead + Unpin>(stream: Option<R>) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buffer[..n]);
                if kept.len() > MAX_OUTPUT_BYTES {
                    let excess = kept.len() - MAX_OUTPUT_BYTES;
                    kept.drain(..excess);
                }
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}
