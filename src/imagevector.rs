//! The image vector: which container images the operator renders into shoots.
//!
//! The default (`imagevector/images.yaml`) is embedded at compile time; the file named by
//! `IMAGEVECTOR_OVERWRITE` (Gardener's convention, rendered from the chart's top-level
//! `imageVectorOverwrite` value) replaces the repository and/or tag of entries with the same
//! name and may add entries. Loaded once at start-up; a broken overwrite is a start-up error.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The embedded default.
pub const DEFAULT_IMAGES: &str = include_str!("../imagevector/images.yaml");
/// The image of the gVisor installation DaemonSet.
pub const GVISOR_INSTALLATION: &str = "runtime-gvisor-installation";

/// Errors while loading the image vector.
#[derive(Debug, thiserror::Error)]
pub enum ImageVectorError {
    /// The YAML does not parse.
    #[error("image vector {source_name} does not parse")]
    Parse {
        /// Embedded default or the overwrite file.
        source_name: String,
        /// Cause.
        #[source]
        source: serde_norway::Error,
    },
    /// The overwrite file cannot be read.
    #[error("reading image vector overwrite {path}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// An entry has neither repository nor (after merging) a tag.
    #[error("image {0} has no repository")]
    NoRepository(String),
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    images: Vec<Entry>,
}

#[derive(Debug, Clone, Deserialize)]
struct Entry {
    name: String,
    #[serde(default)]
    repository: Option<String>,
    #[serde(default)]
    tag: Option<String>,
}

/// Resolved images by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageVector {
    images: BTreeMap<String, String>,
}

impl ImageVector {
    /// Parses `default` and applies `overwrite` (both in Gardener's format).
    pub fn from_yaml(
        default: &str,
        overwrite: Option<(&str, &str)>,
    ) -> Result<Self, ImageVectorError> {
        let parse = |text: &str, name: &str| {
            serde_norway::from_str::<File>(text).map_err(|source| ImageVectorError::Parse {
                source_name: name.to_string(),
                source,
            })
        };
        let mut entries: BTreeMap<String, Entry> = parse(default, "(embedded)")?
            .images
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        if let Some((text, name)) = overwrite {
            for entry in parse(text, name)?.images {
                match entries.get_mut(&entry.name) {
                    Some(existing) => {
                        if entry.repository.is_some() {
                            existing.repository = entry.repository;
                        }
                        if entry.tag.is_some() {
                            existing.tag = entry.tag;
                        }
                    }
                    None => {
                        entries.insert(entry.name.clone(), entry);
                    }
                }
            }
        }
        let mut images = BTreeMap::new();
        for (name, entry) in entries {
            let repository = entry
                .repository
                .ok_or_else(|| ImageVectorError::NoRepository(name.clone()))?;
            let reference = match entry.tag {
                // A digest is written as `sha256:...` and joined with `@`.
                Some(tag) if tag.starts_with("sha256:") => format!("{repository}@{tag}"),
                Some(tag) => format!("{repository}:{tag}"),
                None => repository,
            };
            images.insert(name, reference);
        }
        Ok(ImageVector { images })
    }

    /// The embedded default, overwritten by the file named in `IMAGEVECTOR_OVERWRITE` if set.
    pub fn load() -> Result<Self, ImageVectorError> {
        match std::env::var_os("IMAGEVECTOR_OVERWRITE").filter(|v| !v.is_empty()) {
            Some(path) => Self::load_with_overwrite(Path::new(&path)),
            None => Self::from_yaml(DEFAULT_IMAGES, None),
        }
    }

    /// The embedded default overwritten by `path`.
    pub fn load_with_overwrite(path: &Path) -> Result<Self, ImageVectorError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ImageVectorError::Read {
            path: name.clone(),
            source,
        })?;
        Self::from_yaml(DEFAULT_IMAGES, Some((&text, &name)))
    }

    /// The image reference for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.images.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_has_a_release_tag_for_the_installation_image() {
        let images = ImageVector::from_yaml(DEFAULT_IMAGES, None).unwrap();
        let image = images.get(GVISOR_INSTALLATION).unwrap();
        let tag = image.rsplit_once(':').unwrap().1;
        assert!(tag.starts_with('v') && !tag.contains("-dev"), "{image}");
        assert_eq!(
            tag,
            format!("v{}", env!("CARGO_PKG_VERSION")),
            "default tag follows the release version"
        );
    }

    #[test]
    fn overwrite_replaces_tag_and_repository_and_adds_entries() {
        let overwrite = "images:\n- name: runtime-gvisor-installation\n  tag: v9.9.9\n- name: extra\n  repository: example/extra\n  tag: sha256:abc\n";
        let images = ImageVector::from_yaml(DEFAULT_IMAGES, Some((overwrite, "test"))).unwrap();
        assert_eq!(
            images.get(GVISOR_INSTALLATION),
            Some("gardener-extension-node/gvisor-installation:v9.9.9")
        );
        assert_eq!(images.get("extra"), Some("example/extra@sha256:abc"));
    }

    #[test]
    fn broken_overwrite_is_an_error_naming_the_file() {
        let error =
            ImageVector::from_yaml(DEFAULT_IMAGES, Some(("images: [", "over.yaml"))).unwrap_err();
        assert!(error.to_string().contains("over.yaml"), "{error}");
    }
}
