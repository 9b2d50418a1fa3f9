//! The common name (CN) of a client certificate's subject, which `cert` logins compare with the user. A small
//! DER reader for the few fields on the way (rustls has verified the certificate already; this only reads):
//! Certificate → tbsCertificate → [version], serial, signature, issuer, validity, subject → the CN attribute.
//! Every length is checked against what is left; anything unexpected gives `None`, and the login is refused.

/// The subject's common name, if the certificate has one in a string type pgmux reads.
pub(crate) fn common_name(der: &[u8]) -> Option<String> {
    let (certificate, _) = element(der, SEQUENCE)?;
    let (mut tbs, _) = element(certificate, SEQUENCE)?;
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs, VERSION)?.1;
    }
    for tag in [INTEGER, SEQUENCE, SEQUENCE, SEQUENCE] {
        tbs = element(tbs, tag)?.1; // serial, signature, issuer, validity
    }
    let (mut subject, _) = element(tbs, SEQUENCE)?;
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

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
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
    use super::common_name;

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
