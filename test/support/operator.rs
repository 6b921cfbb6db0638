//! Runs the real `gardener-extension-node operator` binary against the test control plane,
//! as a child process in its own process group with a watchdog, like the control plane: it
//! never outlives the test binary. Tests can SIGKILL and restart it.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A running operator process.
pub struct OperatorProcess {
    child: Child,
    watchdog: Child,
    /// Its log file.
    pub log: PathBuf,
    /// Its HTTP address (`127.0.0.1:<port>`).
    pub http_address: String,
    kubeconfig: PathBuf,
    extra_args: Vec<String>,
    env: Vec<(String, String)>,
    /// The folder holding the kubeconfig and the log; removed on drop unless the test failed.
    dir: Option<PathBuf>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl OperatorProcess {
    /// Starts the operator with `--kubeconfig` (written from `kubeconfig`), leader election
    /// off unless `extra_args` set `--leader-election=...`, and `extra_args`.
    pub fn start(kubeconfig: &str, extra_args: &[&str]) -> Self {
        Self::start_with_env(kubeconfig, extra_args, &[])
    }

    /// [`Self::start`] with more environment variables (e.g. `IMAGEVECTOR_OVERWRITE`).
    pub fn start_with_env(kubeconfig: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "gardener-extension-node-operator-{}-{n}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).expect("operator dir");
        let path = dir.join("kubeconfig");
        fs::write(&path, kubeconfig).expect("kubeconfig written");
        let mut process = Self::spawn(
            path,
            extra_args.iter().map(|s| s.to_string()).collect(),
            env.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            dir.join("operator.log"),
        );
        process.dir = Some(dir);
        process
    }

    fn spawn(
        kubeconfig: PathBuf,
        extra_args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Self {
        let http_address = format!("127.0.0.1:{}", free_port());
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(binary());
        command
            .arg("operator")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--http-bind-address={http_address}"));
        if !extra_args
            .iter()
            .any(|a| a.starts_with("--leader-election="))
        {
            command.arg("--leader-election=false");
        }
        let child = command
            .args(&extra_args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(
                "RUST_LOG",
                "info,gardener_extension_node=debug,kube_client::client::builder=off",
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .expect("operator binary starts");
        let watchdog = super::spawn_child_watchdog(child.id());
        OperatorProcess {
            child,
            watchdog,
            log,
            http_address,
            kubeconfig,
            extra_args,
            env,
            dir: None,
        }
    }

    /// SIGKILLs the operator (no graceful shutdown) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }

    /// SIGTERMs the operator and waits up to `limit` for it to exit by itself: how long it
    /// took, or `None` when it was still running at `limit` (then it is SIGKILLed).
    pub fn terminate(&mut self, limit: std::time::Duration) -> Option<std::time::Duration> {
        let sent = std::time::Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let took = loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                break Some(sent.elapsed());
            }
            if sent.elapsed() >= limit {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        self.kill();
        took
    }

    /// Starts a fresh process with the same arguments and log file.
    pub fn restart(&mut self) {
        self.kill();
        let next = Self::spawn(
            self.kubeconfig.clone(),
            self.extra_args.clone(),
            self.env.clone(),
            self.log.clone(),
        );
        let dir = self.dir.take();
        *self = next;
        self.dir = dir;
    }

    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident set size (VmHWM) of the operator process in KiB, from /proc.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        super::process::peak_rss_kib(self.child.id())
    }

    /// Current resident set size (VmRSS) of the operator process in KiB, from /proc.
    pub fn rss_kib(&self) -> Option<u64> {
        super::process::rss_kib(self.child.id())
    }

    /// CPU time (user + system) the operator process has used so far, in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        super::process::cpu_seconds(self.child.id())
    }

    /// The log so far (for assertion messages).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path` on the operator's HTTP server; `(status, body)`.
    pub async fn http_get(&self, path: &str) -> Option<(u16, String)> {
        Self::http_get_at(&self.http_address, path).await
    }

    /// The value of `series` (name and labels exactly as `/metrics` writes them, e.g.
    /// `gardener_extension_node_leader`) on the operator's `/metrics`; `None` when it cannot
    /// be read or has no such series.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        Self::metric_at(&self.http_address, series).await
    }

    /// [`Self::metric`] of the operator serving on `address`.
    pub async fn metric_at(address: &str, series: &str) -> Option<f64> {
        let (_, text) = Self::http_get_at(address, "/metrics").await?;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse().ok())
    }

    /// GET `path` on `address`; `(status, body)`.
    pub async fn http_get_at(address: &str, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((status, body))
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
        // A failed test keeps the log for the person reading the failure.
        if let Some(dir) = self.dir.take().filter(|_| !std::thread::panicking()) {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// The operator binary: this build's, or `OPERATOR_BINARY` (a benchmark measuring another
/// build of the same source, e.g. the musl one of the image).
fn binary() -> std::ffi::OsString {
    std::env::var_os("OPERATOR_BINARY")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_gardener-extension-node").into())
}
