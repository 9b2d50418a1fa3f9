//! TLS to the database with libpq's sslmode semantics, against a PostgreSQL with `ssl = on` and a CA made
//! here; and TLS offered to clients.

use std::path::PathBuf;

use pgmux_testkit::{APP_USER, PgOptions, PgServer};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::common;

/// A CA and a server certificate for `localhost` (not for 127.0.0.1), written to a directory PostgreSQL
/// can read.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = make_ca("pgmux test CA");
        let other = make_ca("someone else's CA");
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("other-ca.pem"), other.pem()).unwrap();
        std::fs::write(dir.path().join("server.crt"), cert.pem()).unwrap();
        // Client certificates: one from the CA (named after the application's user), one from another CA.
        for (name, issuer) in [("client", &ca), ("stranger", &other)] {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.distinguished_name.push(DnType::CommonName, APP_USER.user);
            let cert = params.signed_by(&key, issuer).unwrap();
            std::fs::write(dir.path().join(format!("{name}.crt")), cert.pem()).unwrap();
            let key_path = dir.path().join(format!("{name}.key"));
            std::fs::write(&key_path, key.serialize_pem()).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let key_path = dir.path().join("server.key");
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for f in ["server.crt", "server.key"] {
            pgmux_testkit::give_to_postgres(&dir.path().join(f)).unwrap();
        }
        Pki { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn make_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

async fn ssl_server(pki: &Pki) -> PgServer {
    let conf = vec![
        ("ssl".to_owned(), "on".to_owned()),
        ("ssl_cert_file".to_owned(), pki.path("server.crt").display().to_string()),
        ("ssl_key_file".to_owned(), pki.path("server.key").display().to_string()),
    ];
    let opts = PgOptions { extra_conf: conf, ..PgOptions::default() };
    tokio::task::spawn_blocking(move || PgServer::start_with(&opts)).await.unwrap()
}

/// Starts pgmux towards `host` with TLS settings, and runs one query through it.
async fn query_through(pg: &PgServer, host: &str, tls: &str) -> Result<String, tokio_postgres::Error> {
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"postgres://{}:{}@{host}:{}/pgmux\"\nclient_auth = \"trust\"\n{tls}",
        APP_USER.user,
        APP_USER.password,
        pg.port()
    );
    let proxy = pgmux_proxy::Listener::start(pgmux_proxy::Config::from_toml_str(&text).unwrap()).await.unwrap();
    let nopw = pgmux_testkit::Role { user: APP_USER.user, password: "" };
    let result = async {
        let c = common::connect(proxy.addr, &nopw, |_| {}).await?;
        let row = c.query_one("select ssl::text from pg_stat_ssl where pid = pg_backend_pid()", &[]).await?;
        Ok(row.get::<_, String>(0))
    }
    .await;
    proxy.shutdown().await;
    result
}

fn root(pki: &Pki, file: &str) -> String {
    format!("ssl_root_cert = {:?}", pki.path(file).display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_passes_with_the_right_ca_and_host() {
    let pki = Pki::new();
    let pg = ssl_server(&pki).await;
    let tls = format!("sslmode = \"verify-full\"\n{}", root(&pki, "ca.pem"));
    assert_eq!(query_through(&pg, "localhost", &tls).await.unwrap(), "true", "the server link is encrypted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_host_name_fails_verify_full_but_passes_verify_ca() {
    let pki = Pki::new();
    let pg = ssl_server(&pki).await;
    let err = query_through(&pg, "127.0.0.1", &format!("sslmode = \"verify-full\"\n{}", root(&pki, "ca.pem")))
        .await
        .unwrap_err();
    assert_eq!(common::code(&err), "08001");
    let msg = common::message(&err);
    assert!(msg.contains("TLS") && msg.contains("127.0.0.1"), "{msg}");
    assert!(msg.to_lowercase().contains("name"), "the reason should say the name is wrong: {msg}");
    let ok = query_through(&pg, "127.0.0.1", &format!("sslmode = \"verify-ca\"\n{}", root(&pki, "ca.pem"))).await;
    assert_eq!(ok.unwrap(), "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_ca_fails_with_08001() {
    let pki = Pki::new();
    let pg = ssl_server(&pki).await;
    let err = query_through(&pg, "localhost", &format!("sslmode = \"verify-full\"\n{}", root(&pki, "other-ca.pem")))
        .await
        .unwrap_err();
    assert_eq!(common::code(&err), "08001");
    let msg = common::message(&err);
    assert!(msg.contains("TLS") && msg.to_lowercase().contains("issuer"), "{msg}");
    // require encrypts without checking, like libpq.
    let ok = query_through(&pg, "localhost", "sslmode = \"require\"").await;
    assert_eq!(ok.unwrap(), "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_against_a_server_without_tls() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let err = query_through(&pg, "127.0.0.1", "sslmode = \"require\"").await.unwrap_err();
    assert_eq!(common::code(&err), "08001");
    assert!(common::message(&err).contains("does not offer TLS"), "{err}");
    assert_eq!(query_through(&pg, "127.0.0.1", "sslmode = \"prefer\"").await.unwrap(), "false");
    assert_eq!(query_through(&pg, "127.0.0.1", "sslmode = \"disable\"").await.unwrap(), "false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_can_use_tls_when_a_certificate_is_configured() {
    let pki = Pki::new();
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let tls = format!(
        "client_auth = \"scram-sha-256\"\ntls_cert = {:?}\ntls_key = {:?}",
        pki.path("server.crt").display().to_string(),
        pki.path("server.key").display().to_string()
    );
    let cfg = common::config(&pg, &tls);
    let proxy = pgmux_proxy::Listener::start(cfg).await.unwrap();
    let port = proxy.addr.port().to_string();
    let psql = |sslmode: &str| {
        let out = std::process::Command::new("psql")
            .args(["-X", "-At", "-c", "select 'over tls'"])
            .env("PGHOST", "localhost")
            .env("PGHOSTADDR", "127.0.0.1")
            .env("PGPORT", &port)
            .env("PGUSER", APP_USER.user)
            .env("PGPASSWORD", APP_USER.password)
            .env("PGDATABASE", "pgmux")
            .env("PGSSLMODE", sslmode)
            .env("PGSSLROOTCERT", pki.path("ca.pem"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = psql("verify-full");
    assert!(ok, "psql over TLS failed: {err}");
    assert_eq!(out, "over tls");
    // Plain clients still get in: TLS is offered, not required.
    let (ok, _, err) = psql("disable");
    assert!(ok, "{err}");
    proxy.shutdown().await;
}

/// psql to pgmux at `port` (as `localhost`, trusting the test CA) with `sslmode` and, if named, a client
/// certificate of the test PKI; runs `sql` on `database`. Whether it worked, and what it said.
pub(crate) fn psql(
    pki: &Pki,
    port: u16,
    (sslmode, client): (&str, Option<&str>),
    database: &str,
    sql: &str,
) -> (bool, String) {
    let cert = client.map_or_else(|| pki.path("none.crt"), |c| pki.path(&format!("{c}.crt")));
    let key = client.map_or_else(|| pki.path("none.key"), |c| pki.path(&format!("{c}.key")));
    let out = std::process::Command::new("psql")
        .args(["-X", "-At", "-c", sql])
        .env("PGHOST", "localhost")
        .env("PGHOSTADDR", "127.0.0.1")
        .env("PGPORT", port.to_string())
        .env("PGUSER", APP_USER.user)
        .env("PGPASSWORD", APP_USER.password)
        .env("PGDATABASE", database)
        .env("PGSSLMODE", sslmode)
        .env("PGSSLROOTCERT", pki.path("ca.pem"))
        .env("PGSSLCERT", cert)
        .env("PGSSLKEY", key)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout).trim(), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

/// `tls_mode = require`: a TCP client without TLS is refused (28000), one with TLS gets in. The console's
/// `SET client_tls_sslmode` changes it for new logins: to `verify-full`, where only a client certificate
/// from `tls_client_ca` gets in, and to `disable`, where TLS is no longer offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_mode_require_refuses_plain_clients_and_verify_full_wants_a_client_certificate() {
    let pki = Pki::new();
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let tls = format!(
        "client_auth = \"scram-sha-256\"\nadmin_users = \"{}\"\ntls_mode = \"require\"\ntls_cert = {:?}\n\
         tls_key = {:?}\ntls_client_ca = {:?}",
        APP_USER.user,
        pki.path("server.crt").display().to_string(),
        pki.path("server.key").display().to_string(),
        pki.path("ca.pem").display().to_string(),
    );
    let proxy = pgmux_proxy::Listener::start(common::config(&pg, &tls)).await.unwrap();
    let port = proxy.addr.port();
    let run = |sslmode: &'static str, client: Option<&'static str>| {
        let pki = &pki;
        move || psql(pki, port, (sslmode, client), "pgmux", "select 'in'")
    };
    let (ok, said) = run("disable", None)();
    assert!(!ok && said.contains("TLS only"), "a plain client is refused: {said}");
    let (ok, said) = run("verify-full", None)();
    assert!(ok && said.starts_with("in"), "over TLS: {said}");

    let set =
        |mode: &str| psql(&pki, port, ("require", None), "pgbouncer", &format!("SET client_tls_sslmode = '{mode}'"));
    let (ok, said) = set("verify-full");
    assert!(ok, "SET client_tls_sslmode = verify-full: {said}");
    let (ok, said) = run("verify-full", Some("client"))();
    assert!(ok, "a certificate from tls_client_ca: {said}");
    let (ok, said) = run("verify-full", None)();
    assert!(!ok, "no client certificate under verify-full: {said}");
    let (ok, said) = run("verify-full", Some("stranger"))();
    assert!(!ok, "a certificate from another CA under verify-full: {said}");

    let (ok, said) =
        psql(&pki, port, ("verify-full", Some("client")), "pgbouncer", "SET client_tls_sslmode = 'disable'");
    assert!(ok, "SET client_tls_sslmode = disable: {said}");
    let (ok, said) = run("disable", None)();
    assert!(ok, "TLS off: a plain client gets in: {said}");
    let (ok, said) = run("require", None)();
    assert!(!ok, "TLS off: no longer offered: {said}");
    proxy.shutdown().await;
}

/// The certificate offered to clients: an X.509 v1 certificate (what `openssl x509 -req` makes without
/// extensions, as PgBouncer's own test certificates are) is offered as it is, and a key that is not the
/// certificate's is refused at start, naming tls_key.
#[test]
fn a_v1_certificate_is_offered_and_a_key_of_another_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name);
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "v1.key",
        "-subj",
        "/CN=localhost",
        "-out",
        "v1.csr",
    ]);
    openssl(&["x509", "-req", "-in", "v1.csr", "-signkey", "v1.key", "-days", "2", "-out", "v1.crt"]);
    let text =
        std::process::Command::new("openssl").args(["x509", "-noout", "-text", "-in"]).arg(at("v1.crt")).output();
    assert!(String::from_utf8_lossy(&text.unwrap().stdout).contains("Version: 1"), "openssl made a v1 certificate");
    pgmux_proxy::net::tls::client_acceptor(&at("v1.crt"), &at("v1.key"), None).expect("a v1 certificate is offered");

    let other = KeyPair::generate().unwrap();
    std::fs::write(at("other.key"), other.serialize_pem()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
    std::fs::write(at("v3.crt"), cert.pem()).unwrap();
    let Err(err) = pgmux_proxy::net::tls::client_acceptor(&at("v3.crt"), &at("other.key"), None) else {
        panic!("a key of another certificate was taken");
    };
    assert!(err.to_string().starts_with("tls_key"), "{err}");
}
