//! The network lab's certificates, made fresh by each run: a CA, and a server certificate for the
//! database's name signed by it, so that every client can use `sslmode=verify-full` against the CA file.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// Where the files are.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The CA certificate clients trust (`sslrootcert`).
    pub ca: PathBuf,
    /// PostgreSQL's `ssl_cert_file` and `ssl_key_file`.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl Pki {
    /// Write a new CA and a certificate for `host` into `dir`; the server's files belong to the user
    /// PostgreSQL runs as (it refuses a key others may read).
    pub fn create(dir: &Path, host: &str) -> Result<Pki, String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("making the lab's {what}: {e}");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA", &e))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "pgmux-bench lab CA");
        let ca_key = KeyPair::generate().map_err(|e| fail("CA key", &e))?;
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(|e| fail("CA", &e))?;
        let key = KeyPair::generate().map_err(|e| fail("server key", &e))?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(|e| fail("certificate", &e))?;
        params.distinguished_name.push(DnType::CommonName, host);
        let cert = params.signed_by(&key, &ca).map_err(|e| fail("certificate", &e))?;
        let pki =
            Pki { ca: dir.join("ca.pem"), server_cert: dir.join("server.crt"), server_key: dir.join("server.key") };
        let write = |path: &Path, text: String, mode: u32| -> Result<(), String> {
            std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("chmod {}: {e}", path.display()))?;
            pgmux_testkit::give_to_postgres(path).map_err(|e| format!("chown {}: {e}", path.display()))
        };
        write(&pki.ca, ca.pem(), 0o644)?;
        write(&pki.server_cert, cert.pem(), 0o644)?;
        write(&pki.server_key, key.serialize_pem(), 0o600)?;
        Ok(pki)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_and_a_certificate_for_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::create(dir.path(), "db.pgmux.test").unwrap();
        let ca = std::fs::read_to_string(&pki.ca).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(ca, std::fs::read_to_string(&pki.server_cert).unwrap());
        let mode = std::fs::metadata(&pki.server_key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
