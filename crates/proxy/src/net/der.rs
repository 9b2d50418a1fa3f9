//! Reading the few fields of an X.509 certificate pgmux needs, with a small DER reader: the subject's common
//! name (CN), which `cert` logins compare with the user, and the parts that check an X.509 v1 client
//! certificate's signature (see `net::v1_cert`). Every length is checked against what is left; anything
//! unexpected gives `None`, and the login is refused.

/// The parts of a certificate, as slices of its DER.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts<'a> {
    /// The whole tbsCertificate element: what the issuer signed.
    pub(crate) tbs: &'a [u8],
    /// No version field: X.509 v1.
    pub(crate) v1: bool,
    /// The contents of the issuer Name.
    pub(crate) issuer: &'a [u8],
    /// Validity, in seconds since 1970.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    /// The contents of the subject Name.
    pub(crate) subject: &'a [u8],
    /// The whole SubjectPublicKeyInfo element.
    pub(crate) spki: &'a [u8],
    /// The contents of the signature's AlgorithmIdentifier.
    pub(crate) signature_algorithm: &'a [u8],
    /// The signature's bits.
    pub(crate) signature: &'a [u8],
}

/// The parts of a DER certificate; `None` for anything that is not one.
pub(crate) fn parts(der: &[u8]) -> Option<Parts<'_>> {
    let (certificate, _) = element(der, SEQUENCE)?;
    let (tbs_contents, rest) = element(certificate, SEQUENCE)?;
    let tbs = &certificate[..certificate.len() - rest.len()];
    let (signature_algorithm, rest) = element(rest, SEQUENCE)?;
    let (signature, _) = element(rest, BIT_STRING)?;
    let signature = signature.strip_prefix(&[0])?;
    let mut fields = tbs_contents;
    let v1 = fields.first() != Some(&VERSION);
    if !v1 {
        fields = element(fields, VERSION)?.1;
    }
    fields = element(fields, INTEGER)?.1; // serial
    fields = element(fields, SEQUENCE)?.1; // signature algorithm, again
    let (issuer, rest) = element(fields, SEQUENCE)?;
    let (validity, rest) = element(rest, SEQUENCE)?;
    let (not_before, after) = time(validity)?;
    let (not_after, _) = time(after)?;
    let (subject, rest) = element(rest, SEQUENCE)?;
    let (_, after_spki) = element(rest, SEQUENCE)?;
    let spki = &rest[..rest.len() - after_spki.len()];
    Some(Parts { tbs, v1, issuer, not_before, not_after, subject, spki, signature_algorithm, signature })
}

/// The contents of a SubjectPublicKeyInfo element: its algorithm's AlgorithmIdentifier contents and the key.
pub(crate) fn public_key(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (contents, _) = element(spki, SEQUENCE)?;
    let (algorithm, rest) = element(contents, SEQUENCE)?;
    let (key, _) = element(rest, BIT_STRING)?;
    Some((algorithm, key.strip_prefix(&[0])?))
}

/// The subject's common name, if the certificate has one in a string type pgmux reads.
pub(crate) fn common_name(der: &[u8]) -> Option<String> {
    let mut subject = parts(der)?.subject;
    while !subject.is_empty() {
        let (set, rest) = element(subject, SET)?;
        subject = rest;
        let (attribute, _) = element(set, SEQUENCE)?;
        let (oid, value) = element(attribute, OID)?;
        if oid == COMMON_NAME {
            let (&tag, _) = value.split_first()?;
            let (text, _) = element(value, tag)?;
            return match tag {
                UTF8_STRING | PRINTABLE_STRING | IA5_STRING | T61_STRING => String::from_utf8(text.to_vec()).ok(),
                _ => None,
            };
        }
    }
    None
}

/// A UTCTime or GeneralizedTime at the start of `der` (`...Z` only), as seconds since 1970, and what follows.
fn time(der: &[u8]) -> Option<(i64, &[u8])> {
    let (&tag, _) = der.split_first()?;
    let (text, rest) = element(der, tag)?;
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, text) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy: i64 = text[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    let field = |i: usize| text[i..i + 2].parse::<i64>().ok();
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some((days_since_1970(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second, rest))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
fn days_since_1970(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const OID: u8 = 0x06;
const VERSION: u8 = 0xa0;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const T61_STRING: u8 = 0x14;
const IA5_STRING: u8 = 0x16;
/// 2.5.4.3, id-at-commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The contents of the element at the start of `der`, which must have tag `tag`, and what follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = der.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    (len <= rest.len()).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::{common_name, days_since_1970, parts, time};

    #[test]
    fn dates() {
        assert_eq!(days_since_1970(1970, 1, 1), 0);
        assert_eq!(days_since_1970(2000, 3, 1), 11_017);
        assert_eq!(days_since_1970(2026, 11, 29), 20_786);
        let utc = b"\x17\x0d261129041538Z";
        assert_eq!(time(utc).map(|(t, _)| t), Some(20_786 * 86_400 + 4 * 3600 + 15 * 60 + 38));
        let generalized = b"\x18\x0f20500101000000Z";
        assert_eq!(time(generalized).map(|(t, _)| t), Some(days_since_1970(2050, 1, 1) * 86_400));
        assert_eq!(time(b"\x17\x0d261329041538Z"), None, "month 13");
        assert_eq!(time(b"\x17\x0d2611290415380"), None, "no Z");
    }

    #[test]
    fn reads_the_parts_of_a_v3_certificate() {
        let key = rcgen::KeyPair::generate().expect("a key");
        let params = rcgen::CertificateParams::new(vec!["x".into()]).expect("params");
        let cert = params.self_signed(&key).expect("a certificate");
        let p = parts(cert.der()).expect("parts");
        assert!(!p.v1);
        assert_eq!(p.issuer, p.subject, "self-signed");
        assert!(p.not_before < p.not_after);
        assert_eq!(p.spki, rcgen::PublicKeyData::subject_public_key_info(&key).as_slice());
    }

    #[test]
    fn reads_the_subjects_common_name() {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Acme");
        params.distinguished_name.push(rcgen::DnType::CommonName, "pgbouncer.acme.org");
        let cert = params.self_signed(&key).expect("a certificate");
        assert_eq!(common_name(cert.der()).as_deref(), Some("pgbouncer.acme.org"));

        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Acme");
        let cert = params.self_signed(&key).expect("a certificate");
        assert_eq!(common_name(cert.der()), None, "no CN");
    }

    #[test]
    fn truncated_input_is_no_name() {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(vec!["x".into()]).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, "someone");
        let cert = params.self_signed(&key).expect("a certificate");
        let der = cert.der().to_vec();
        for cut in 0..der.len() {
            assert_eq!(common_name(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
