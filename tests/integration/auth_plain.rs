//! PgBouncer's authentication features beyond the basic ones, against a real PostgreSQL: client logins in
//! clear text (`client_auth = "plain"`, its `auth_type = plain`); a server that refuses a pool's login (the
//! clients waiting get its error at once, the server sees one failed login, and a password put right in the
//! auth file and reloaded is what the pool's next login uses); `auth_dbname`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Failed password logins of `user` in the server's log.
fn server_refusals(pg: &PgServer, user: &str) -> usize {
    pg.log_tail(100_000).matches(&format!("password authentication failed for user \"{user}\"")).count()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_asks_for_no_password_in_clear_over_a_network() {
    let Some(ip) = common::non_loopback_address() else {
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

/// A source that hands a reload the configuration the test wrote last (auth_hba.rs uses it too).
#[derive(Debug)]
pub(crate) struct Swap(pub(crate) Mutex<Option<Config>>);

impl pgmux_proxy::ConfigSource for Swap {
    fn load(&self) -> Result<(Config, pgmux_proxy::ServerAccess), pgmux_proxy::SourceError> {
        let config = self.0.lock().unwrap().clone().expect("a configuration to load");
        Ok((config, pgmux_proxy::ServerAccess::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_server_login_answers_every_waiting_client_and_a_reloaded_password_is_used() {
    let fx = common::start("").await;
    let oracle = common::direct(&fx.pg).await;
    let dir = tempfile::tempdir().unwrap();
    let file = userlist(&dir, &[(APP_USER.user, APP_USER.password), (PLAIN_USER.user, PLAIN_USER.password)]);
    // Clients log in as pgmux_app; the pool logs in as pgmux_plain with the auth file's password, one
    // connection at most, which lives one second.
    let route = "[[databases]]\nname = \"p\"\ndbname = \"pgmux\"\nuser = \"pgmux_plain\"\npool_max = 1\n\
                 server_lifetime = \"1s\"\n";
    let extra = format!("auth_file = {file}\n{route}");
    let listener = Listener::bind(common::config(&fx.pg, &extra)).await.unwrap();
    let source = Arc::new(Swap(Mutex::new(None)));
    listener.set_config_source(source.clone());
    let (admin, addr) = (listener.admin(), listener.local_addr().unwrap());
    tokio::spawn(listener.run());
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(connect_as(addr, &APP_USER, "p").await.unwrap());
    }
    assert_eq!(scalar(&clients[0], "select current_user").await, PLAIN_USER.user);

    // The password changes on the server; the pool's connection outlives its lifetime.
    oracle.batch_execute("alter role pgmux_plain password 'plain-pw-changed'").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let before = server_refusals(&fx.pg, PLAIN_USER.user);
    let answers = futures_util::future::join_all(clients.iter().map(|c| c.simple_query("select 1"))).await;
    for answer in answers {
        let err = answer.expect_err("the server refuses the pool's login");
        assert_eq!(code(&err), "08001");
        assert!(common::message(&err).contains("password authentication failed for user"), "{err}");
    }
    assert!(
        common::eventually(Duration::from_secs(5), || async { server_refusals(&fx.pg, PLAIN_USER.user) > before })
            .await,
        "the server logs the refusal"
    );
    assert_eq!(server_refusals(&fx.pg, PLAIN_USER.user), before + 1, "one failed login for three clients");

    // The auth file gets the new password; after a reload the pool's next login uses it, at once.
    userlist(&dir, &[(APP_USER.user, APP_USER.password), (PLAIN_USER.user, "plain-pw-changed")]);
    let mut next = common::config(&fx.pg, &extra);
    next.listen = addr;
    *source.0.lock().unwrap() = Some(next);
    admin.reload().expect("the reload takes the new auth file");
    let c = connect_as(addr, &APP_USER, "p").await.unwrap();
    assert_eq!(scalar(&c, "select current_user").await, PLAIN_USER.user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_dbname_runs_auth_query_in_the_database_of_the_entry_it_names() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let oracle = common::direct(&pg).await;
    oracle
        .batch_execute(
            "create role pgmux_auth login password 'auth-pw-7'; create role pgmux_dyn login password 'dyn-pw-8'",
        )
        .await
        .unwrap();
    oracle.batch_execute("create database pgmux_auth_db").await.unwrap();
    // The lookup function exists in pgmux_auth_db only: a query run in the route's own database fails.
    let server = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    let authdb = common::connect(server, &pgmux_testkit::SUPERUSER, |c| {
        c.dbname("pgmux_auth_db");
    })
    .await
    .unwrap();
    authdb
        .batch_execute(
            "create schema pgmux_auth;
             create function pgmux_auth.lookup(i_user text, out usename name, out passwd text)
               returns setof record language sql security definer set search_path = pg_catalog
               as $$ select usename, passwd from pg_shadow where usename = i_user $$;
             revoke all on function pgmux_auth.lookup(text) from public;
             grant usage on schema pgmux_auth to pgmux_auth;
             grant execute on function pgmux_auth.lookup(text) to pgmux_auth;",
        )
        .await
        .unwrap();
    let common_part = "auth_query = \"SELECT * FROM pgmux_auth.lookup($1)\"\nauth_user = \"pgmux_auth\"\n";
    let users = "[[users]]\nname = \"pgmux_auth\"\npassword = \"auth-pw-7\"\n";
    let authroute = "[[databases]]\nname = \"authroute\"\ndbname = \"pgmux_auth_db\"\n";
    let dyn_user = Role { user: "pgmux_dyn", password: "dyn-pw-8" };
    // The route's own auth_dbname, then the global one.
    let per_route = format!(
        "{common_part}[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\nauth_dbname = \"authroute\"\n{authroute}{users}"
    );
    let global = format!("{common_part}auth_dbname = \"authroute\"\n{ROUTE}{authroute}{users}");
    for extra in [per_route, global] {
        let mut config: Config = common::config(&pg, &extra);
        config.listen = "127.0.0.1:0".parse().unwrap();
        let proxy = Listener::start(config).await.unwrap();
        let c = connect_as(proxy.addr, &dyn_user, "app").await.unwrap_or_else(|e| panic!("{extra}: {e}"));
        assert_eq!(scalar(&c, "select current_user").await, "pgmux_dyn");
        let wrong = Role { user: "pgmux_dyn", password: "not-it" };
        assert_eq!(code(&connect_as(proxy.addr, &wrong, "app").await.expect_err("wrong")), "28P01");
        proxy.shutdown().await;
    }
    // An auth_dbname no entry has: the configuration's fault, said so.
    let missing = format!("{common_part}auth_dbname = \"nowhere\"\n{ROUTE}{users}");
    let mut config: Config = common::config(&pg, &missing);
    config.listen = "127.0.0.1:0".parse().unwrap();
    let proxy = Listener::start(config).await.unwrap();
    let err = connect_as(proxy.addr, &dyn_user, "app").await.expect_err("no such entry");
    assert_eq!(code(&err), "F0000");
    assert!(err.as_db_error().unwrap().hint().is_some_and(|h| h.contains("[[databases]]")));
}
