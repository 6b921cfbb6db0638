//! Test support: an OCI registry on host loopback, the real one of
//! `github.com/google/go-containerregistry` (`crane registry serve`, built by
//! `hack/envtest.sh`), and pushes into it with the same tool (`crane push` of an OCI layout
//! written by `support::oci`).
//!
//! Plain HTTP on `127.0.0.1`: a node reaches it through a forwarder into its network
//! namespace (`support::node::Node::forward`) and a `hosts.toml` that names the `http://`
//! endpoint (`support::node::Node::prepare_node_image`), so `ctr images pull --hosts-dir …`
//! (gardenlet's node-init script, and the agents' `imageRef` files) pulls from it as from a
//! landscape's registry. Blobs are kept in a temporary folder; the process is killed when the
//! [`Registry`] is dropped, and by a watchdog when the test binary dies.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::oci::{Image, write_archive};

/// A running registry.
pub struct Registry {
    child: Child,
    watchdog: Child,
    crane: PathBuf,
    port: u16,
    _blobs: tempfile::TempDir,
}

impl Registry {
    /// Starts `crane registry serve` from `assets` on a free loopback port and waits until it
    /// accepts connections.
    pub fn start(assets: &Path) -> Self {
        let crane = assets.join("crane");
        assert!(
            crane.is_file(),
            "crane missing in {}: run hack/envtest.sh",
            assets.display()
        );
        let blobs = tempfile::Builder::new()
            .prefix("gen-registry-")
            .tempdir()
            .expect("registry folder");
        let port = super::agent::free_port();
        let child = Command::new(&crane)
            .args(["registry", "serve", "--address"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--disk")
            .arg(blobs.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("crane registry serve starts");
        let watchdog = super::spawn_child_watchdog(child.id());
        let registry = Self {
            child,
            watchdog,
            crane,
            port,
            _blobs: blobs,
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the registry did not listen on 127.0.0.1:{port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// Its port on host loopback.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, the registry part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes `image` under its reference (which must start with [`Registry::host`]).
    pub fn push(&self, image: &Image) {
        assert!(
            image.reference.starts_with(&format!("{}/", self.host())),
            "{} is not in this registry",
            image.reference
        );
        let work = tempfile::Builder::new()
            .prefix("gen-push-")
            .tempdir()
            .expect("push folder");
        let archive = work.path().join("image.tar");
        write_archive(image, &archive).expect("OCI archive written");
        let layout = work.path().join("layout");
        tar::Archive::new(std::fs::File::open(&archive).expect("archive opens"))
            .unpack(&layout)
            .expect("archive unpacked");
        let output = Command::new(&self.crane)
            .args(["push", "--insecure"])
            .arg(&layout)
            .arg(&image.reference)
            .output()
            .expect("crane push runs");
        assert!(
            output.status.success(),
            "crane push {}: {}",
            image.reference,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}
