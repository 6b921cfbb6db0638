//! Builders of OSC parts for the agent's unit tests, and the in-memory host they run on
//! ([`crate::agent::ports::fake_host`]). Compiled only for tests.

use crate::api::operatingsystemconfig::{
    DropIn, File, FileContent, FileContentImageRef, FileContentInline, FileContentSecretRef, Unit,
};

pub use crate::agent::ports::fake_host::{FakeHost, MapSecrets, Op};

/// A plain inline file.
pub fn inline_file(path: &str, data: &str) -> File {
    File {
        path: path.into(),
        permissions: None,
        host_name: None,
        content: FileContent {
            inline: Some(FileContentInline {
                encoding: String::new(),
                data: data.into(),
            }),
            ..FileContent::default()
        },
    }
}

/// A file from a secret.
pub fn secret_file(path: &str, secret: &str, key: &str) -> File {
    File {
        path: path.into(),
        permissions: None,
        host_name: None,
        content: FileContent {
            secret_ref: Some(FileContentSecretRef {
                name: secret.into(),
                data_key: key.into(),
            }),
            ..FileContent::default()
        },
    }
}

/// A file extracted from an image.
pub fn image_file(path: &str, image: &str, path_in_image: &str) -> File {
    File {
        path: path.into(),
        permissions: Some(0o755),
        host_name: None,
        content: FileContent {
            image_ref: Some(FileContentImageRef {
                image: image.into(),
                file_path_in_image: path_in_image.into(),
            }),
            ..FileContent::default()
        },
    }
}

/// A unit with nothing set.
pub fn unit(name: &str) -> Unit {
    Unit {
        name: name.into(),
        command: None,
        enable: None,
        content: None,
        drop_ins: Vec::new(),
        file_paths: Vec::new(),
    }
}

/// A drop-in.
pub fn drop_in(name: &str, content: &str) -> DropIn {
    DropIn {
        name: name.into(),
        content: content.into(),
    }
}
