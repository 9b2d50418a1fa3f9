//! Client logins in clear text (`client_auth = "plain"`, PgBouncer's `auth_type = plain`).

use std::net::SocketAddr;

use pgmux_proto::auth::md5;
use pgmux_proxy::{Config, Listener};
use pgmux_testkit::{APP_USER, MD5_USER, PLAIN_USER, PgServer, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, code, scalar};

/// An auth file holding these lines, at `dir/userlist.txt`; its path as a TOML string.
fn userlist(dir: &tempfile::TempDir, lines: &[(&str, &str)]) -> String {
    let path = dir.path().join("userlist.txt");
    let text: String = lines.iter().map(|(u, p)| format!("\"{u}\" \"{p}\"\n")).collect();
    std::fs::write(&path, text).unwrap();
    format!("{:?}", path.display().to_string())
}

async fn connect_as(
    addr: SocketAddr,
    role: &Role,
    database: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    common::connect(addr, role, |c| {
        c.dbname(database);
    })
    .await
}

/// The kind of the first authentication request pgmux sends a client that starts a session as `user`.
async fn first_auth_request(addr: SocketAddr, user: &str, database: &str) -> u32 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)] {
        body.extend_from_slice(&pgmux_testkit::wire::cstr(k));
        body.extend_from_slice(&pgmux_testkit::wire::cstr(v));
    }
    body.push(0);
    let mut packet = (body.len() as u32 + 4).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    s.write_all(&packet).await.unwrap();
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(head[0], b'R', "an authentication request first");
    u32::from_be_bytes(head[5..9].try_into().unwrap())
}

/// The SCRAM verifier the server keeps for `user`.
async fn verifier_of(oracle: &tokio_postgres::Client, user: &str) -> String {
    oracle.query_one("select rolpassword from pg_authid where rolname = $1", &[&user]).await.unwrap().get(0)
}

const ROUTE: &str = "[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_takes_passwords_in_clear_text_and_checks_them_however_they_are_stored() {
    let fx = common::start("").await;
    let oracle = common::direct(&fx.pg).await;
    let dir = tempfile::tempdir().unwrap();
    // One user per stored form: a SCRAM verifier (whose server login then uses the keys of the password the
    // client sent), an md5 hash, plaintext.
    // Leaked: a Role's password is 'static.
    let scram: &'static str = verifier_of(&oracle, APP_USER.user).await.leak();
    let md5_hash: &'static str = md5::stored_hash(MD5_USER.user, MD5_USER.password).leak();
    let file =
        userlist(&dir, &[(APP_USER.user, scram), (MD5_USER.user, md5_hash), (PLAIN_USER.user, PLAIN_USER.password)]);
    let mut config: Config = common::config(&fx.pg, &format!("client_auth = \"plain\"\nauth_file = {file}\n{ROUTE}"));
    config.listen = "127.0.0.1:0".parse().unwrap();
    let proxy = Listener::start(config).await.unwrap();
    assert_eq!(first_auth_request(proxy.addr, APP_USER.user, "app").await, 3, "AuthenticationCleartextPassword");
    for role in [APP_USER, MD5_USER, PLAIN_USER] {
        let c = connect_as(proxy.addr, &role, "app").await.unwrap_or_else(|e| panic!("{}: {e}", role.user));
        assert_eq!(scalar(&c, "select current_user").await, role.user);
        let wrong = Role { user: role.user, password: "not-it" };
        assert_eq!(code(&connect_as(proxy.addr, &wrong, "app").await.expect_err("wrong")), "28P01", "{}", role.user);
        // The stored form itself is not the password.
        let stored = match role.user {
            u if u == APP_USER.user => scram,
            u if u == MD5_USER.user => md5_hash,
            _ => continue,
        };
        let replayed = Role { user: role.user, password: stored };
        assert_eq!(code(&connect_as(proxy.addr, &replayed, "app").await.expect_err("hash")), "28P01");
    }
    // A user pgmux does not know fails as a wrong password does.
    let nobody = Role { user: "nosuchuser", password: "whatever" };
    assert_eq!(code(&connect_as(proxy.addr, &nobody, "app").await.expect_err("unknown")), "28P01");
}

/// This machine's own address that is not loopback, if it has one.
fn non_loopback_address() -> Option<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect("192.0.2.1:9").ok()?;
    Some(probe.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_asks_for_no_password_in_clear_over_a_network() {
    let Some(ip) = non_loopback_address() else {
        eprintln!("skipped: this machine has no address but loopback");
        return;
    };
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = userlist(&dir, &[(PLAIN_USER.user, PLAIN_USER.password)]);
    let mut config: Config = common::config(&pg, &format!("client_auth = \"plain\"\nauth_file = {file}\n{ROUTE}"));
    config.listen = format!("{ip}:0").parse().unwrap();
    let proxy = Listener::start(config).await.unwrap();
    let err = connect_as(proxy.addr, &PLAIN_USER, "app").await.expect_err("clear text over a network");
    assert_eq!(code(&err), "28000");
    assert!(common::message(&err).contains("only over TLS, the Unix socket or loopback"), "{}", common::message(&err));
}
