//! `client_auth = "hba"`: a pg_hba.conf-style `auth_hba_file` decides each login by how the client came
//! (TCP address, TLS, the Unix socket), its database and its user: a password method, trust, reject, no line
//! at all, `peer` over the Unix socket with the OS user running these tests (directly and through an
//! `auth_ident_file` map), and `cert` with a client certificate from a test CA. A reload with a bad file
//! says which file and line, and keeps the rules in force.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use pgmux_proxy::Listener;
use pgmux_testkit::{APP_USER, DATABASE, PgServer, Role};

use crate::auth_plain::Swap;
use crate::common::{self, scalar};

async fn connect_as(addr: SocketAddr, role: &Role) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    common::connect(addr, role, |c| {
        c.dbname(DATABASE);
    })
    .await
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    format!("{:?}", path.display().to_string())
}

/// The OS user these tests run as.
fn os_user() -> String {
    let out = std::process::Command::new("id").arg("-un").output().expect("run id -un");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_matching_line_decides_and_a_bad_reload_keeps_the_rules() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hba = dir.path().join("hba.conf");
    // Loopback is not in 10/8: the app's line is the scram one, whose mask form covers 127.0.0.1 alone.
    let rules = format!(
        "# pgmux test rules\nhost all \"pgmux_rejected\" 127.0.0.1/32 reject\nhost all {user} 10.0.0.0/8 trust\n\
         host {DATABASE},pgbouncer {user} 127.0.0.1 255.255.255.255 scram-sha-256\n",
        user = APP_USER.user
    );
    let file = write(&hba, &rules);
    let extra = format!("client_auth = \"hba\"\nauth_hba_file = {file}\nadmin_users = \"{}\"\n", APP_USER.user);
    let listener = Listener::bind(common::config(&pg, &extra)).await.unwrap();
    let source = Arc::new(Swap(Mutex::new(None)));
    listener.set_config_source(source.clone());
    let (admin, addr) = (listener.admin(), listener.local_addr().unwrap());
    tokio::spawn(listener.run());
    let mut next = common::config(&pg, &extra);
    next.listen = addr;
    *source.0.lock().unwrap() = Some(next);

    let c = connect_as(addr, &APP_USER).await.expect("the scram line lets the right password in");
    assert_eq!(scalar(&c, "select current_user").await, APP_USER.user);
    let wrong = Role { user: APP_USER.user, password: "not-it" };
    let err = connect_as(addr, &wrong).await.expect_err("a wrong password");
    assert_eq!(common::code(&err), "28P01", "{err}");

    let rejected = Role { user: "pgmux_rejected", password: "x" };
    let err = connect_as(addr, &rejected).await.expect_err("a reject line");
    assert_eq!(common::code(&err), "28000");
    assert!(common::message(&err).contains("pg_hba.conf rejects connection for host \"127.0.0.1\""), "{err}");

    let nobody = Role { user: "pgmux_nobody", password: "x" };
    let err = connect_as(addr, &nobody).await.expect_err("no line");
    assert_eq!(common::code(&err), "28000");
    let said = common::message(&err);
    assert!(said.contains("no pg_hba.conf entry for host \"127.0.0.1\", user \"pgmux_nobody\""), "{said}");

    // A bad file: the reload fails naming the file and the line, and the rules in force stay.
    write(&hba, &format!("{rules}host all all all ldap\n"));
    let err = admin.reload().expect_err("ldap is refused").to_string();
    assert!(err.contains(&format!("auth_hba_file {}, line 5: ", hba.display())), "{err}");
    assert_eq!(common::code(&connect_as(addr, &wrong).await.expect_err("still scram")), "28P01");
    assert!(connect_as(addr, &APP_USER).await.is_ok(), "still let in");

    // A good file: in force at once.
    write(&hba, &format!("host all {} 127.0.0.1/32 trust\n", APP_USER.user));
    admin.reload().expect("the new rules read");
    let c = connect_as(addr, &wrong).await.expect("trust now: no password asked");
    assert_eq!(scalar(&c, "select 1").await, "1");
    let err = connect_as(addr, &rejected).await.expect_err("no line for this user any more");
    assert!(common::message(&err).contains("no pg_hba.conf entry"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_over_the_unix_socket_with_and_without_an_ident_map() {
    let me = os_user();
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket_dir = tempfile::tempdir().unwrap();
    let hba = write(
        &dir.path().join("hba.conf"),
        &format!("local all {me} peer\nlocal all all peer map=m\nhost all all all reject\n"),
    );
    let ident = write(&dir.path().join("ident.conf"), &format!("m {me} {}\nm someone-else all\n", APP_USER.user));
    let extra = format!(
        "client_auth = \"hba\"\nauth_hba_file = {hba}\nauth_ident_file = {ident}\nunix_socket_dir = {:?}\n",
        socket_dir.path().display().to_string()
    );
    let proxy = Listener::start(common::config(&pg, &extra)).await.unwrap();
    let port = proxy.addr.port();

    // The map lets this OS user in as the application's user, with no password.
    let c = common::connect_unix(socket_dir.path(), port, APP_USER.user, None).await.expect("mapped: in");
    assert_eq!(scalar(&c, "select current_user").await, APP_USER.user);
    // A user the map does not list.
    let err = common::connect_unix(socket_dir.path(), port, "pgmux_md5", None).await.expect_err("not in the map");
    assert_eq!(common::code(&err), "28000");
    assert!(
        common::message(&err)
            .contains(&format!("no match in usermap \"m\" for user \"pgmux_md5\" authenticated as \"{me}\"")),
        "{err}"
    );
    // Over TCP the last line refuses everyone, so peer's pass is the socket's alone.
    let err = connect_as(proxy.addr, &APP_USER).await.expect_err("TCP is rejected");
    assert!(common::message(&err).contains("rejects"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_lines_want_a_certificate_from_the_ca_named_as_the_user() {
    let pki = crate::tls::Pki::new();
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The test PKI's client certificate is named after the application's user; the console uses passwords.
    let hba = write(
        &dir.path().join("hba.conf"),
        "hostssl pgbouncer all all scram-sha-256\nhostssl all all 127.0.0.1/32 cert\nhost all all all reject\n",
    );
    let extra = format!(
        "client_auth = \"hba\"\nauth_hba_file = {hba}\ntls_mode = \"require\"\ntls_cert = {:?}\ntls_key = {:?}\n\
         tls_client_ca = {:?}\n",
        pki.path("server.crt").display().to_string(),
        pki.path("server.key").display().to_string(),
        pki.path("ca.pem").display().to_string(),
    );
    let proxy = Listener::start(common::config(&pg, &extra)).await.unwrap();
    let port = proxy.addr.port();
    let psql = |client: Option<&str>| crate::tls::psql(&pki, port, ("verify-full", client), DATABASE, "select 'in'");

    let (ok, said) = psql(Some("client"));
    assert!(ok && said.starts_with("in"), "a certificate from the CA, named as the user: {said}");
    let (ok, said) = psql(None);
    assert!(!ok && said.contains("the client presented no certificate"), "no certificate: {said}");
    let (ok, said) = psql(Some("stranger"));
    assert!(!ok, "a certificate from another CA fails the handshake: {said}");
    // The same certificate, another user: the name must be the user's.
    let other = std::process::Command::new("psql")
        .args(["-X", "-At", "-c", "select 1"])
        .env("PGHOST", "localhost")
        .env("PGHOSTADDR", "127.0.0.1")
        .env("PGPORT", port.to_string())
        .env("PGUSER", "pgmux_md5")
        .env("PGDATABASE", DATABASE)
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", pki.path("ca.pem"))
        .env("PGSSLCERT", pki.path("client.crt"))
        .env("PGSSLKEY", pki.path("client.key"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success() && said.contains("do not match"), "another user: {said}");
    proxy.shutdown().await;
}

/// X.509 v1 client certificates (what `openssl ca` and `openssl x509 -req` make without extensions, as
/// PgBouncer's own test certificates are), which rustls alone refuses: one signed by the CA of
/// `tls_client_ca` gets in, one from another CA that carries the same name does not, nor does one from the
/// right CA named as another user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_client_certificate_is_checked_against_the_ca() {
    let pki = crate::tls::Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for ca in ["ca", "impostor"] {
        let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
        let mut args = vec!["req", "-x509", "-new"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-subj", "/CN=v1 test CA", "-days", "2", "-out", &crt]);
        openssl(&args);
    }
    for (client, user, ca) in
        [("good", APP_USER.user, "ca"), ("forged", APP_USER.user, "impostor"), ("other", "someone", "ca")]
    {
        let (key, csr, crt) = (format!("{client}.key"), format!("{client}.csr"), format!("{client}.crt"));
        let subject = format!("/CN={user}");
        let mut args = vec!["req", "-new"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-subj", &subject, "-out", &csr]);
        openssl(&args);
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &crt,
        ]);
        let text = openssl(&["x509", "-noout", "-text", "-in", &crt]);
        assert!(text.contains("Version: 1 (0x0)"), "{client}.crt is X.509 v1: {text}");
    }
    // The same certificate with its CA after it, as libpq sends it when it can build the chain.
    let chain = [dir.path().join("good.crt"), dir.path().join("ca.crt")].map(|f| std::fs::read_to_string(f).unwrap());
    std::fs::write(dir.path().join("chain.crt"), chain.concat()).unwrap();
    std::fs::copy(dir.path().join("good.key"), dir.path().join("chain.key")).unwrap();
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let hba = write(&dir.path().join("hba.conf"), "hostssl all all all cert\n");
    let extra = format!(
        "client_auth = \"hba\"\nauth_hba_file = {hba}\ntls_mode = \"require\"\ntls_cert = {:?}\ntls_key = {:?}\n\
         tls_client_ca = {:?}\n",
        pki.path("server.crt").display().to_string(),
        pki.path("server.key").display().to_string(),
        dir.path().join("ca.crt").display().to_string(),
    );
    let proxy = Listener::start(common::config(&pg, &extra)).await.unwrap();
    let psql = |client: &str| {
        let out = std::process::Command::new("psql")
            .args(["-X", "-At", "-c", "select 'in'"])
            .env("PGHOST", "127.0.0.1")
            .env("PGPORT", proxy.addr.port().to_string())
            .env("PGUSER", APP_USER.user)
            .env("PGDATABASE", DATABASE)
            .env("PGSSLMODE", "require")
            .env("PGSSLCERT", dir.path().join(format!("{client}.crt")))
            .env("PGSSLKEY", dir.path().join(format!("{client}.key")))
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout).trim(), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), said)
    };
    let (ok, said) = psql("good");
    assert!(ok && said.starts_with("in"), "a v1 certificate from the CA: {said}");
    let (ok, said) = psql("chain");
    assert!(ok && said.starts_with("in"), "a v1 certificate from the CA, sent with the CA: {said}");
    let (ok, said) = psql("forged");
    // rustls answers a bad signature with the decrypt_error alert.
    assert!(!ok && said.contains("SSL error"), "a v1 certificate from a CA of the same name: {said}");
    let (ok, said) = psql("other");
    assert!(!ok && said.contains("do not match"), "a v1 certificate named as another user: {said}");
    proxy.shutdown().await;
}
