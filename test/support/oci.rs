//! Test support: OCI image archives built without a registry or a daemon, for a node's
//! containerd to import (`ctr -n k8s.io images import`).
//!
//! One uncompressed layer per image, written from host files, bytes and links; the archive
//! holds `oci-layout`, `index.json` (with the image name in containerd's
//! `io.containerd.image.name` annotation, so the import names it) and the config, manifest
//! and layer blobs under `blobs/sha256/`. Files keep the mode given here and belong to root.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};

/// Where a file of the image comes from.
#[derive(Debug, Clone)]
pub enum Content {
    /// A file on the host, read when the archive is written.
    Host(PathBuf),
    /// These bytes.
    Bytes(Vec<u8>),
    /// A symbolic link to this target.
    Link(String),
}

/// One file of an image.
#[derive(Debug, Clone)]
pub struct ImageFile {
    /// Absolute path in the image.
    pub path: String,
    /// Its content.
    pub content: Content,
    /// Mode bits (ignored for links).
    pub mode: u32,
}

impl ImageFile {
    /// An executable copied from the host.
    pub fn executable(path: &str, host: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            content: Content::Host(host.into()),
            mode: 0o755,
        }
    }

    /// A link `path` → `target`.
    pub fn link(path: &str, target: &str) -> Self {
        Self {
            path: path.into(),
            content: Content::Link(target.into()),
            mode: 0o777,
        }
    }
}

/// An image: its reference, the process it starts and its files.
#[derive(Debug, Clone)]
pub struct Image {
    /// The full reference containerd names it by, e.g. `e2e.local/busybox:1`.
    pub reference: String,
    /// `Entrypoint` of the image config.
    pub entrypoint: Vec<String>,
    /// The files (parent folders are added with mode 0755).
    pub files: Vec<ImageFile>,
}

/// Writes `image` as an OCI archive to `archive`.
pub fn write_archive(image: &Image, archive: &Path) -> io::Result<()> {
    let work = tempfile::Builder::new().prefix("gen-oci-").tempdir()?;
    let layer_path = work.path().join("layer.tar");
    write_layer(&image.files, &layer_path)?;
    let layer = Blob::of_file(&layer_path)?;

    let config = json!({
        "architecture": go_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": image.entrypoint,
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.digest()]},
    });
    let config = Blob::of_bytes(serde_json::to_vec(&config)?);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config.descriptor("application/vnd.oci.image.config.v1+json"),
        "layers": [layer.descriptor("application/vnd.oci.image.layer.v1.tar")],
    });
    let manifest = Blob::of_bytes(serde_json::to_vec(&manifest)?);
    let tag = image
        .reference
        .rsplit_once(':')
        .map(|(_, tag)| tag)
        .filter(|tag| !tag.contains('/'))
        .unwrap_or("latest");
    let mut manifest_descriptor = manifest.descriptor("application/vnd.oci.image.manifest.v1+json");
    manifest_descriptor["annotations"] = json!({
        "io.containerd.image.name": image.reference,
        "org.opencontainers.image.ref.name": tag,
    });
    let index = json!({"schemaVersion": 2, "manifests": [manifest_descriptor]});

    let mut out = tar::Builder::new(File::create(archive)?);
    append_bytes(
        &mut out,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    )?;
    append_bytes(&mut out, "index.json", &serde_json::to_vec(&index)?, 0o644)?;
    for blob in [&config, &manifest] {
        let bytes = blob.bytes.as_deref().unwrap_or_default();
        append_bytes(&mut out, &blob.path(), bytes, 0o644)?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(layer.size);
    header.set_mode(0o644);
    out.append_data(&mut header, layer.path(), File::open(&layer_path)?)?;
    out.into_inner()?.flush()
}

/// The layer: every parent folder once, then the files in the given order.
fn write_layer(files: &[ImageFile], path: &Path) -> io::Result<()> {
    let mut layer = tar::Builder::new(File::create(path)?);
    let mut folders = BTreeSet::new();
    for file in files {
        let relative = file.path.trim_start_matches('/');
        let mut parent = Path::new(relative).parent();
        let mut missing = Vec::new();
        while let Some(folder) = parent.filter(|p| !p.as_os_str().is_empty()) {
            if folders.insert(folder.to_path_buf()) {
                missing.push(folder.to_path_buf());
            }
            parent = folder.parent();
        }
        for folder in missing.into_iter().rev() {
            let mut header = root_header(tar::EntryType::Directory, 0o755);
            layer.append_data(&mut header, folder, io::empty())?;
        }
        match &file.content {
            Content::Host(host) => {
                let size = fs::metadata(host)?.len();
                let mut header = root_header(tar::EntryType::Regular, file.mode);
                header.set_size(size);
                layer.append_data(&mut header, relative, File::open(host)?)?;
            }
            Content::Bytes(bytes) => {
                let mut header = root_header(tar::EntryType::Regular, file.mode);
                header.set_size(bytes.len() as u64);
                layer.append_data(&mut header, relative, bytes.as_slice())?;
            }
            Content::Link(target) => {
                let mut header = root_header(tar::EntryType::Symlink, 0o777);
                layer.append_link(&mut header, relative, target)?;
            }
        }
    }
    layer.into_inner()?.flush()
}

fn root_header(kind: tar::EntryType, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(0);
    header.set_mtime(0);
    header
}

fn append_bytes(
    out: &mut tar::Builder<File>,
    path: &str,
    bytes: &[u8],
    mode: u32,
) -> io::Result<()> {
    let mut header = root_header(tar::EntryType::Regular, mode);
    header.set_size(bytes.len() as u64);
    out.append_data(&mut header, path, bytes)
}

/// A content-addressed blob: its sha256, size and (for small ones) bytes.
struct Blob {
    sha256: String,
    size: u64,
    bytes: Option<Vec<u8>>,
}

impl Blob {
    fn of_bytes(bytes: Vec<u8>) -> Self {
        Self {
            sha256: hex::encode(Sha256::digest(&bytes)),
            size: bytes.len() as u64,
            bytes: Some(bytes),
        }
    }

    fn of_file(path: &Path) -> io::Result<Self> {
        let mut hasher = Sha256::new();
        let mut file = File::open(path)?;
        let mut buffer = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            size += n as u64;
        }
        Ok(Self {
            sha256: hex::encode(hasher.finalize()),
            size,
            bytes: None,
        })
    }

    fn digest(&self) -> String {
        format!("sha256:{}", self.sha256)
    }

    fn path(&self) -> String {
        format!("blobs/sha256/{}", self.sha256)
    }

    fn descriptor(&self, media_type: &str) -> serde_json::Value {
        json!({"mediaType": media_type, "digest": self.digest(), "size": self.size})
    }
}

/// The architecture name OCI configs use for this machine.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
