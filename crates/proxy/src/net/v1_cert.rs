//! X.509 v1 client certificates. rustls (webpki) verifies v3 certificates only, but `openssl ca` and
//! `openssl x509 -req` without extensions make v1 ones, and PgBouncer's users (and its test suite) have
//! them. This verifier hands every certificate to rustls's own, except a v1 client certificate: that one is
//! accepted when a CA of `tls_client_ca` (matched by name) signed it, by that CA's key, and now is within
//! its validity. A v1 certificate has no extensions to check (no CA flag, no key usage); it must be directly
//! under a configured CA. Other certificates the client sends with it (libpq adds the CA it trusts) are not
//! used. In the handshake, its key proves
//! possession as a TLS 1.3 raw public key would (TLS 1.2 is refused for it).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};
use rustls_pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};

use super::der;

/// rustls's client certificate verifier, and the v1 certificates it cannot check.
#[derive(Debug)]
pub(crate) struct WithV1 {
    inner: Arc<dyn ClientCertVerifier>,
    /// The CAs of tls_client_ca, in DER.
    cas: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl WithV1 {
    pub(crate) fn new(
        inner: Arc<dyn ClientCertVerifier>,
        cas: Vec<CertificateDer<'static>>,
        algorithms: WebPkiSupportedAlgorithms,
    ) -> Self {
        WithV1 { inner, cas, algorithms }
    }

    /// A v1 certificate's own check: a configured CA of its issuer's name signed it, and it is valid now.
    fn verify_v1(&self, cert: &der::Parts<'_>, now: UnixTime) -> Result<ClientCertVerified, Error> {
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < cert.not_before {
            return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
        }
        if now > cert.not_after {
            return Err(Error::InvalidCertificate(CertificateError::Expired));
        }
        let mut named = false;
        for ca in &self.cas {
            let Some(ca) = der::parts(ca.as_ref()) else { continue };
            if ca.subject != cert.issuer {
                continue;
            }
            named = true;
            let Some((key_algorithm, key)) = der::public_key(ca.spki) else { continue };
            let signed = self.algorithms.all.iter().any(|alg| {
                alg.public_key_alg_id().as_ref() == key_algorithm
                    && alg.signature_alg_id().as_ref() == cert.signature_algorithm
                    && alg.verify_signature(key, cert.tbs, cert.signature).is_ok()
            });
            if signed {
                return Ok(ClientCertVerified::assertion());
            }
        }
        Err(Error::InvalidCertificate(if named {
            CertificateError::BadSignature
        } else {
            CertificateError::UnknownIssuer
        }))
    }
}

/// The parts of `cert` when it is X.509 v1.
fn v1<'a>(cert: &'a CertificateDer<'_>) -> Option<der::Parts<'a>> {
    der::parts(cert.as_ref()).filter(|p| p.v1)
}

impl ClientCertVerifier for WithV1 {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        match v1(end_entity) {
            Some(parts) => self.verify_v1(&parts, now),
            _ => self.inner.verify_client_cert(end_entity, intermediates, now),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        if v1(cert).is_some() {
            return Err(Error::General("an X.509 v1 client certificate is accepted over TLS 1.3 only".into()));
        }
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match v1(cert) {
            Some(parts) => rustls::crypto::verify_tls13_signature_with_raw_key(
                message,
                &SubjectPublicKeyInfoDer::from(parts.spki),
                dss,
                &self.algorithms,
            ),
            None => self.inner.verify_tls13_signature(message, cert, dss),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
