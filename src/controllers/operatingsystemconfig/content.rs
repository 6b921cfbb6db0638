//! File contents of an OperatingSystemConfig (pure): decoding `inline` data and looking up
//! `secretRef` data in Secrets that were read beforehand (by [`super::fetch`]).
//!
//! Both renderers build on this: [`super::userdata`] writes the decoded bytes into the
//! provision script, [`super::nodeagent`] turns `secretRef` files into inline `b64` content
//! for `osc.yaml`. Keeping the lookup pure lets `render osc --secrets <dir>` and the unit
//! tests use the same code as the controller, with Secrets from files instead of the API.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::api::ErrorCode;
use crate::api::operatingsystemconfig::{File, FileContentImageRef, FileContentInline};

/// `inline.encoding` of plain text.
pub const ENCODING_PLAIN: &str = "";
/// `inline.encoding` of standard base64.
pub const ENCODING_B64: &str = "b64";

/// The data of one Secret, by key.
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// The Secrets an OSC's files reference, read from the OSC's namespace. A name that is not
/// here did not exist when it was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferencedSecrets {
    secrets: BTreeMap<String, SecretData>,
}

impl ReferencedSecrets {
    /// Records the data of Secret `name`.
    pub fn insert(&mut self, name: impl Into<String>, data: SecretData) {
        self.secrets.insert(name.into(), data);
    }

    /// The data of Secret `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<&SecretData> {
        self.secrets.get(name)
    }
}

/// Names of the Secrets the files reference, sorted and without duplicates.
pub fn referenced_secret_names<'a>(files: impl IntoIterator<Item = &'a File>) -> BTreeSet<String> {
    files
        .into_iter()
        .filter_map(|file| file.content.secret_ref.as_ref())
        .map(|reference| reference.name.clone())
        .collect()
}

/// Where a file's bytes come from, once resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved<'a> {
    /// The decoded bytes (from `inline` or a Secret).
    Data(Vec<u8>),
    /// A file inside a container image; only the node agent can fetch it.
    Image(&'a FileContentImageRef),
}

/// Why a file's content cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// `inline.encoding` is neither plain nor `b64` (upstream rejects e.g. `base64` too).
    #[error(
        "file {path}: unknown inline encoding {encoding:?} (use \"\" for plain text or \"b64\")"
    )]
    UnknownEncoding {
        /// File path.
        path: String,
        /// The encoding found.
        encoding: String,
    },
    /// `inline.data` does not decode as standard base64.
    #[error("file {path}: inline data is not valid base64")]
    InvalidBase64 {
        /// File path.
        path: String,
        /// Cause.
        #[source]
        source: base64::DecodeError,
    },
    /// The referenced Secret does not exist (yet).
    #[error("file {path}: the referenced Secret {secret} does not exist")]
    MissingSecret {
        /// File path.
        path: String,
        /// Secret name.
        secret: String,
    },
    /// The referenced Secret lacks the key.
    #[error("file {path}: Secret {secret} has no data key {key:?}")]
    MissingKey {
        /// File path.
        path: String,
        /// Secret name.
        secret: String,
        /// The missing key.
        key: String,
    },
    /// The content names no source.
    #[error("file {path}: content has none of inline, secretRef and imageRef")]
    NoSource {
        /// File path.
        path: String,
    },
    /// The content names more than one source.
    #[error("file {path}: content must have exactly one of inline, secretRef and imageRef")]
    SeveralSources {
        /// File path.
        path: String,
    },
}

impl ContentError {
    /// Gardener codes. A missing Secret or key may still appear (gardenlet writes referenced
    /// Secrets itself, and a restore re-creates them), so it is a *retryable* configuration
    /// problem; everything else needs a spec change: `ERR_CONFIGURATION_PROBLEM`.
    pub fn codes(&self) -> Vec<ErrorCode> {
        match self {
            ContentError::MissingSecret { .. } | ContentError::MissingKey { .. } => {
                vec![ErrorCode::RetryableConfigurationProblem]
            }
            _ => vec![ErrorCode::ConfigurationProblem],
        }
    }
}

/// Decodes inline content: plain text as is, `b64` as standard base64 (line breaks are
/// ignored, as Go's decoder does).
pub fn decode_inline(path: &str, inline: &FileContentInline) -> Result<Vec<u8>, ContentError> {
    match inline.encoding.as_str() {
        ENCODING_PLAIN => Ok(inline.data.as_bytes().to_vec()),
        ENCODING_B64 => {
            let compact: Vec<u8> = inline
                .data
                .bytes()
                .filter(|b| *b != b'\n' && *b != b'\r')
                .collect();
            STANDARD
                .decode(compact)
                .map_err(|source| ContentError::InvalidBase64 {
                    path: path.to_string(),
                    source,
                })
        }
        other => Err(ContentError::UnknownEncoding {
            path: path.to_string(),
            encoding: other.to_string(),
        }),
    }
}

/// Resolves a file's content: decoded inline data, the referenced Secret's data, or the
/// image reference. Exactly one source must be set.
pub fn resolve<'a>(
    file: &'a File,
    secrets: &ReferencedSecrets,
) -> Result<Resolved<'a>, ContentError> {
    let content = &file.content;
    let sources = usize::from(content.inline.is_some())
        + usize::from(content.secret_ref.is_some())
        + usize::from(content.image_ref.is_some());
    if sources > 1 {
        return Err(ContentError::SeveralSources {
            path: file.path.clone(),
        });
    }
    if let Some(inline) = &content.inline {
        return decode_inline(&file.path, inline).map(Resolved::Data);
    }
    if let Some(reference) = &content.secret_ref {
        let data = secrets
            .get(&reference.name)
            .ok_or_else(|| ContentError::MissingSecret {
                path: file.path.clone(),
                secret: reference.name.clone(),
            })?;
        let value = data
            .get(&reference.data_key)
            .ok_or_else(|| ContentError::MissingKey {
                path: file.path.clone(),
                secret: reference.name.clone(),
                key: reference.data_key.clone(),
            })?;
        return Ok(Resolved::Data(value.clone()));
    }
    if let Some(image) = &content.image_ref {
        return Ok(Resolved::Image(image));
    }
    Err(ContentError::NoSource {
        path: file.path.clone(),
    })
}

/// Standard base64 of `bytes` (the `b64` encoding).
pub fn encode_b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operatingsystemconfig::{FileContent, FileContentSecretRef};

    fn file(content: FileContent) -> File {
        File {
            path: "/etc/x".into(),
            permissions: None,
            host_name: None,
            content,
        }
    }

    fn inline(encoding: &str, data: &str) -> File {
        file(FileContent {
            inline: Some(FileContentInline {
                encoding: encoding.into(),
                data: data.into(),
            }),
            ..Default::default()
        })
    }

    fn secret_ref(name: &str, key: &str) -> File {
        file(FileContent {
            secret_ref: Some(FileContentSecretRef {
                name: name.into(),
                data_key: key.into(),
            }),
            ..Default::default()
        })
    }

    fn secrets() -> ReferencedSecrets {
        let mut secrets = ReferencedSecrets::default();
        secrets.insert("s", [("k".to_string(), b"\x00bin\xff".to_vec())].into());
        secrets
    }

    #[test]
    fn plain_and_b64_inline_data_decode() {
        let none = ReferencedSecrets::default();
        assert_eq!(
            resolve(&inline("", "a $HOME\n"), &none).unwrap(),
            Resolved::Data(b"a $HOME\n".to_vec())
        );
        assert_eq!(
            resolve(&inline("b64", "aGVs\nbG8K"), &none).unwrap(),
            Resolved::Data(b"hello\n".to_vec())
        );
    }

    #[test]
    fn bad_encodings_are_configuration_problems() {
        let none = ReferencedSecrets::default();
        for (encoding, data) in [("base64", "aGVsbG8K"), ("b64", "not base64!")] {
            let error = resolve(&inline(encoding, data), &none).unwrap_err();
            assert_eq!(
                error.codes(),
                vec![ErrorCode::ConfigurationProblem],
                "{error}"
            );
            assert!(error.to_string().contains("/etc/x"), "{error}");
        }
    }

    #[test]
    fn secret_refs_resolve_to_the_exact_bytes() {
        assert_eq!(
            resolve(&secret_ref("s", "k"), &secrets()).unwrap(),
            Resolved::Data(b"\x00bin\xff".to_vec())
        );
    }

    #[test]
    fn missing_secrets_and_keys_are_retryable_and_named() {
        let error = resolve(&secret_ref("absent", "k"), &secrets()).unwrap_err();
        assert!(error.to_string().contains("Secret absent"), "{error}");
        assert_eq!(
            error.codes(),
            vec![ErrorCode::RetryableConfigurationProblem]
        );
        let error = resolve(&secret_ref("s", "other"), &secrets()).unwrap_err();
        assert!(error.to_string().contains("\"other\""), "{error}");
        assert_eq!(
            error.codes(),
            vec![ErrorCode::RetryableConfigurationProblem]
        );
    }

    #[test]
    fn exactly_one_source_is_required() {
        let none = ReferencedSecrets::default();
        assert!(matches!(
            resolve(&file(FileContent::default()), &none),
            Err(ContentError::NoSource { .. })
        ));
        let mut both = secret_ref("s", "k");
        both.content.inline = inline("", "x").content.inline;
        assert!(matches!(
            resolve(&both, &secrets()),
            Err(ContentError::SeveralSources { .. })
        ));
    }

    #[test]
    fn referenced_names_are_sorted_and_unique() {
        let files = [
            secret_ref("b", "k"),
            secret_ref("a", "k"),
            secret_ref("b", "j"),
        ];
        assert_eq!(
            referenced_secret_names(&files)
                .into_iter()
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
