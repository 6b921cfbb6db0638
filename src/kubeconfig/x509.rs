//! What is read from a PEM certificate (pure): its X.509 version, for [`super::rules`], and
//! its serial and validity ([`first_certificate_facts`]) and public key
//! ([`first_certificate_public_key`]), for the agent's client certificate
//! (`crate::agent::client_certificate`).
//!
//! The version: rustls (through
//! webpki) accepts only v3 end-entity certificates, and says so only as
//! `UnsupportedCertVersion` deep inside a TLS set-up error. Reading the version needs just the
//! first field of the certificate's DER structure:
//!
//! ```text
//! Certificate ::= SEQUENCE { tbsCertificate TBSCertificate, ... }
//! TBSCertificate ::= SEQUENCE { version [0] EXPLICIT INTEGER DEFAULT v1, serialNumber ... }
//! ```
//!
//! `version` holds 0 for v1, 1 for v2 and 2 for v3; when it is absent the certificate is v1.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
/// `[0]`, context-specific and constructed: the explicit version tag.
const VERSION_TAG: u8 = 0xA0;

/// The version (1, 2 or 3) of the first `CERTIFICATE` block of `pem`; `None` when there is
/// none or it does not read as a certificate.
pub fn first_certificate_version(pem: &[u8]) -> Option<u32> {
    version(&first_certificate_der(pem)?)
}

/// What the agent's certificate renewal needs to know of a certificate: its serial number
/// (hex, for the logs) and its validity period (seconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// `serialNumber`, lower-case hex of its content octets.
    pub serial: String,
    /// `validity.notBefore`.
    pub not_before: i64,
    /// `validity.notAfter`.
    pub not_after: i64,
}

/// The serial number and validity of the first `CERTIFICATE` block of `pem`; `None` when there
/// is none or it does not read as an X.509 certificate.
///
/// ```text
/// TBSCertificate ::= SEQUENCE { version [0] EXPLICIT OPTIONAL, serialNumber INTEGER,
///     signature AlgorithmIdentifier, issuer Name, validity SEQUENCE { notBefore Time,
///     notAfter Time }, subject Name, subjectPublicKeyInfo, [1], [2], [3] OPTIONAL }
/// Time ::= CHOICE { utcTime UTCTime, generalTime GeneralizedTime }
/// ```
pub fn first_certificate_facts(pem: &[u8]) -> Option<CertificateFacts> {
    first_certificate_fields(pem).map(|(facts, _)| facts)
}

/// The public key of the first `CERTIFICATE` block of `pem`: the content of
/// `subjectPublicKeyInfo.subjectPublicKey` (for an EC key its point, as
/// `rcgen::KeyPair::public_key_raw` gives it); `None` when it does not read.
///
/// ```text
/// SubjectPublicKeyInfo ::= SEQUENCE { algorithm AlgorithmIdentifier,
///     subjectPublicKey BIT STRING }
/// ```
pub fn first_certificate_public_key(pem: &[u8]) -> Option<Vec<u8>> {
    first_certificate_fields(pem).map(|(_, key)| key)
}

/// [`CertificateFacts`] and the public key of the first certificate of `pem`.
fn first_certificate_fields(pem: &[u8]) -> Option<(CertificateFacts, Vec<u8>)> {
    let der = first_certificate_der(pem)?;
    yasna::parse_der(&der, |certificate| {
        certificate.read_sequence(|certificate| {
            let fields = certificate.next().read_sequence(|tbs| {
                tbs.read_optional(|r| r.read_tagged(yasna::Tag::context(0), |r| r.read_der()))?;
                let serial = hex::encode(tbs.next().read_tagged_der()?.value());
                tbs.next().read_der()?;
                tbs.next().read_der()?;
                let (not_before, not_after) = tbs.next().read_sequence(|validity| {
                    Ok((time(validity.next())?, time(validity.next())?))
                })?;
                tbs.next().read_der()?;
                let public_key = tbs.next().read_sequence(|info| {
                    info.next().read_der()?;
                    let (bytes, _) = info.next().read_bitvec_bytes()?;
                    Ok(bytes)
                })?;
                while tbs.read_optional(|r| r.read_der())?.is_some() {}
                let facts = CertificateFacts {
                    serial,
                    not_before,
                    not_after,
                };
                Ok((facts, public_key))
            })?;
            while certificate.read_optional(|r| r.read_der())?.is_some() {}
            Ok(fields)
        })
    })
    .ok()
}

/// An X.509 `Time` (either form) as seconds since the Unix epoch.
fn time(reader: yasna::BERReader<'_, '_>) -> yasna::ASN1Result<i64> {
    let value = reader.read_tagged_der()?;
    let parsed = match value.tag() {
        yasna::tags::TAG_UTCTIME => {
            yasna::models::UTCTime::parse(value.value()).map(|t| t.datetime().unix_timestamp())
        }
        yasna::tags::TAG_GENERALIZEDTIME => yasna::models::GeneralizedTime::parse(value.value())
            .map(|t| t.datetime().unix_timestamp()),
        _ => None,
    };
    parsed.ok_or_else(|| yasna::ASN1Error::new(yasna::ASN1ErrorKind::Invalid))
}

/// The DER bytes of the first `-----BEGIN CERTIFICATE-----` block.
fn first_certificate_der(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    let (_, rest) = text.split_once("-----BEGIN CERTIFICATE-----")?;
    let (body, _) = rest.split_once("-----END CERTIFICATE-----")?;
    let body: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(body).ok()
}

/// The version of a DER certificate (see the module docs).
fn version(der: &[u8]) -> Option<u32> {
    let (certificate, _) = element(der, SEQUENCE)?;
    let (tbs, _) = element(certificate, SEQUENCE)?;
    let Some((explicit, _)) = element(tbs, VERSION_TAG) else {
        // No version field: DEFAULT v1 (the serial number comes first).
        return element(tbs, INTEGER).map(|_| 1);
    };
    let (value, _) = element(explicit, INTEGER)?;
    match value {
        [number @ 0..=2] => Some(u32::from(*number) + 1),
        _ => None,
    }
}

/// The contents of the DER element at the start of `bytes` if its tag is `tag`, and the bytes
/// after it. Definite lengths only, as DER requires.
fn element(bytes: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = bytes.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7F);
        if count == 0 || count > std::mem::size_of::<u32>() || rest.len() < count {
            return None;
        }
        let (digits, rest) = rest.split_at(count);
        let length = digits
            .iter()
            .fold(0usize, |length, &digit| (length << 8) | usize::from(digit));
        (length, rest)
    };
    (rest.len() >= length).then(|| rest.split_at(length))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = include_str!("../../test/fixtures/kubeconfig/x509-v1-client.crt");

    #[test]
    fn versions_of_real_certificates() {
        assert_eq!(first_certificate_version(V1.as_bytes()), Some(1));
        let v3 = rcgen::generate_simple_self_signed(vec!["client".into()]).unwrap();
        assert_eq!(first_certificate_version(v3.cert.pem().as_bytes()), Some(3));
        // The first block counts: a chain whose leaf is v1.
        let chain = format!("{V1}{}", v3.cert.pem());
        assert_eq!(first_certificate_version(chain.as_bytes()), Some(1));
    }

    #[test]
    fn serial_and_validity_of_a_real_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["client".into()]).unwrap();
        // UTCTime before 2050, GeneralizedTime from 2050 on (RFC 5280): both forms.
        params.not_before = rcgen::date_time_ymd(2026, 12, 4);
        params.not_after = rcgen::date_time_ymd(2051, 1, 2);
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x0A, 0xBC, 0xDE]));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let facts = first_certificate_facts(cert.pem().as_bytes()).unwrap();
        assert_eq!(facts.serial, "0abcde");
        assert_eq!(facts.not_before, 1_796_342_400);
        assert_eq!(facts.not_after, 2_556_230_400);
        assert_eq!(
            first_certificate_facts(V1.as_bytes()).map(|f| f.not_after > f.not_before),
            Some(true)
        );
        assert_eq!(first_certificate_facts(b"not a certificate"), None);
        // A certificate cut short does not read.
        let der = first_certificate_der(cert.pem().as_bytes()).unwrap();
        let cut = base64::engine::general_purpose::STANDARD.encode(&der[..der.len() / 2]);
        let pem = format!("-----BEGIN CERTIFICATE-----\n{cut}\n-----END CERTIFICATE-----\n");
        assert_eq!(first_certificate_facts(pem.as_bytes()), None);
    }

    #[test]
    fn the_public_key_is_the_one_the_certificate_was_made_for() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let found = first_certificate_public_key(cert.pem().as_bytes()).unwrap();
        assert_eq!(found, key.public_key_raw());
        let other = rcgen::KeyPair::generate().unwrap();
        assert_ne!(found, other.public_key_raw());
        assert_eq!(first_certificate_public_key(b"not a certificate"), None);
        assert_eq!(
            first_certificate_public_key(V1.as_bytes()).map(|k| k.is_empty()),
            Some(false)
        );
    }

    #[test]
    fn structures_by_hand() {
        // SEQUENCE { SEQUENCE { [0] { INTEGER 1 }, INTEGER 5 } }: v2.
        assert_eq!(
            version(&[
                0x30, 0x0A, 0x30, 0x08, 0xA0, 0x03, 0x02, 0x01, 0x01, 0x02, 0x01, 0x05
            ]),
            Some(2)
        );
        // Long-form lengths: SEQUENCE (0x81 0x05) { SEQUENCE { INTEGER 7 } }: v1.
        assert_eq!(
            version(&[0x30, 0x81, 0x05, 0x30, 0x03, 0x02, 0x01, 0x07]),
            Some(1)
        );
        // Truncated, wrong tags, an unknown version number, not PEM at all.
        assert_eq!(version(&[0x30, 0x0A, 0x30]), None);
        assert_eq!(version(&[0x31, 0x03, 0x30, 0x01, 0x02]), None);
        assert_eq!(
            version(&[0x30, 0x07, 0x30, 0x05, 0xA0, 0x03, 0x02, 0x01, 0x07]),
            None
        );
        assert_eq!(first_certificate_version(b"not a certificate"), None);
        assert_eq!(
            first_certificate_version(
                b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----"
            ),
            None
        );
    }
}
