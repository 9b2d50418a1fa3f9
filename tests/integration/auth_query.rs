//! `auth_user` / `auth_query` as PgBouncer runs them, against a real PostgreSQL: the default query's
//! `VALID UNTIL`, trust with an auth_user, a database's own auth_query, `[users]` entries without a password
//! and console users looked up, what `auth_dbname` may name (never the console, never a disabled entry), a
//! server's 3D000 passed on, and what the log says (the server's error, never a password or verifier).

use std::net::SocketAddr;

use pgmux_proxy::{Config, Listener};
use pgmux_testkit::{APP_USER, PgOptions, PgServer, Role};

use crate::common::{self, code, scalar};

/// The role that reads passwords: a superuser, as the default query reads `pg_authid`.
const AUTH: Role = Role { user: "pgmux_auth", password: "auth-pw-7" };
/// A user pgmux does not know.
const DYN: Role = Role { user: "pgmux_dyn", password: "dyn-pw-8" };
/// Who looks users up, and its password (top-level keys: they come before any table).
const AUTH_USER: &str = "auth_user = \"pgmux_auth\"\n";
const AUTH_USERS: &str = "[[users]]\nname = \"pgmux_auth\"\npassword = \"auth-pw-7\"\n";
const APP: &str = "[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\n";

/// A server holding AUTH and DYN, and a superuser's connection to it.
async fn server(opts: PgOptions) -> (PgServer, tokio_postgres::Client) {
    let pg = tokio::task::spawn_blocking(move || PgServer::start_with(&opts)).await.unwrap();
    let oracle = common::direct(&pg).await;
    oracle
        .batch_execute(
            "create role pgmux_auth login superuser password 'auth-pw-7';
             create role pgmux_dyn login password 'dyn-pw-8';",
        )
        .await
        .unwrap();
    (pg, oracle)
}

async fn pgmux(pg: &PgServer, extra: &str) -> pgmux_proxy::ListenerHandle {
    Listener::start(common::config(pg, extra)).await.expect("start pgmux")
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

/// The SQLSTATE and message a login fails with.
async fn refusal(addr: SocketAddr, role: &Role, database: &str) -> (String, String) {
    let err = connect_as(addr, role, database).await.map(drop).expect_err("refused");
    (code(&err), common::message(&err))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_auth_query_refuses_a_password_past_valid_until() {
    let (pg, oracle) = server(PgOptions::default()).await;
    let proxy = pgmux(&pg, &format!("{AUTH_USER}{APP}{AUTH_USERS}")).await;
    let c = connect_as(proxy.addr, &DYN, "app").await.expect("looked up with the default auth_query");
    assert_eq!(scalar(&c, "select current_user").await, DYN.user);
    drop(c);
    oracle.batch_execute("alter role pgmux_dyn valid until '1999-01-01'").await.unwrap();
    assert_eq!(refusal(proxy.addr, &DYN, "app").await.0, "28P01", "an expired password is no password");
    oracle.batch_execute("alter role pgmux_dyn valid until 'infinity'").await.unwrap();
    connect_as(proxy.addr, &DYN, "app").await.expect("valid again");
    // A role that may not log in is no user, refused as a wrong password is.
    oracle.batch_execute("alter role pgmux_dyn nologin").await.unwrap();
    assert_eq!(refusal(proxy.addr, &DYN, "app").await.0, "28P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_changed_on_the_server_is_the_one_the_next_login_needs() {
    // pgmux keeps each user's SCRAM secret between logins; it must follow what the lookup reads now.
    let (pg, oracle) = server(PgOptions::default()).await;
    let proxy = pgmux(&pg, &format!("{AUTH_USER}{APP}{AUTH_USERS}")).await;
    connect_as(proxy.addr, &DYN, "app").await.expect("the first password");
    oracle.batch_execute("alter role pgmux_dyn password 'dyn-pw-9'").await.unwrap();
    let changed = Role { user: DYN.user, password: "dyn-pw-9" };
    let c = connect_as(proxy.addr, &changed, "app").await.expect("the new password, without a reload");
    assert_eq!(scalar(&c, "select current_user").await, DYN.user);
    assert_eq!(refusal(proxy.addr, &DYN, "app").await.0, "28P01", "the old password no longer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_with_auth_user_lets_the_servers_users_in_and_tells_others_there_is_no_such_user() {
    // The server trusts loopback, so that a user without a password can log in there too.
    let (pg, oracle) = server(PgOptions { trust_loopback: true, ..PgOptions::default() }).await;
    oracle.batch_execute("create role pgmux_nopw login").await.unwrap();
    // A database with a forced user too (PgBouncer's issue 1103: an unknown user there crashed it).
    let forced = "[[databases]]\nname = \"forced\"\ndbname = \"pgmux\"\nuser = \"pgmux_auth\"\n";
    let proxy = pgmux(&pg, &format!("client_auth = \"trust\"\n{AUTH_USER}{APP}{forced}{AUTH_USERS}")).await;
    let anything = |user: &'static str| Role { user, password: "whatever" };
    for user in [DYN.user, "pgmux_nopw"] {
        let c = connect_as(proxy.addr, &anything(user), "app").await.unwrap_or_else(|e| panic!("{user}: {e}"));
        assert_eq!(scalar(&c, "select current_user").await, user);
    }
    for database in ["app", "forced"] {
        let (code, message) = refusal(proxy.addr, &anything("pgmux_ghost"), database).await;
        assert_eq!(code, "28000", "{message}");
        assert!(message.contains("no such user"), "{message}");
    }
    let c = connect_as(proxy.addr, &anything(AUTH.user), "forced").await.expect("the forced user's own login");
    assert_eq!(scalar(&c, "select current_user").await, AUTH.user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_databases_own_auth_query_comes_first_and_one_the_server_refuses_is_a_config_error() {
    let (pg, _oracle) = server(PgOptions::default()).await;
    let own = "[[databases]]\nname = \"own\"\ndbname = \"pgmux\"\n\
               auth_query = \"SELECT rolname, rolpassword FROM pg_authid WHERE rolname = $1\"\n";
    let broken = "[[databases]]\nname = \"broken\"\ndbname = \"pgmux\"\n\
                  auth_query = \"SELECT usename, passwd FROM not_pg_shadow WHERE usename = $1\"\n";
    // The global query finds no password for anyone.
    let extra = format!("{AUTH_USER}auth_query = \"SELECT $1, NULL\"\n{APP}{own}{broken}{AUTH_USERS}");
    let proxy = pgmux(&pg, &extra).await;
    let c = connect_as(proxy.addr, &DYN, "own").await.expect("the database's own query");
    assert_eq!(scalar(&c, "select current_user").await, DYN.user);
    assert_eq!(refusal(proxy.addr, &DYN, "app").await.0, "28P01", "the global query, which finds no password");
    let (code, message) = refusal(proxy.addr, &DYN, "broken").await;
    assert_eq!(code, "F0000", "{message}");
    assert!(message.starts_with("bouncer config error: "), "{message}");
    assert!(!message.contains("not_pg_shadow"), "the server's error is for the log only: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_entries_without_a_password_and_console_users_are_looked_up() {
    let (pg, _oracle) = server(PgOptions::default()).await;
    // DYN has an entry that sets a limit only, and may use the console's SHOW commands.
    let limits = "[[users]]\nname = \"pgmux_dyn\"\npool_max = 1\n";
    let top = format!("{AUTH_USER}stats_users = [\"pgmux_dyn\"]\n");
    let proxy = pgmux(&pg, &format!("{top}auth_dbname = \"app\"\n{APP}{AUTH_USERS}{limits}")).await;
    let c = connect_as(proxy.addr, &DYN, "app").await.expect("a [users] entry without a password");
    assert_eq!(scalar(&c, "select current_user").await, DYN.user);
    let wrong = Role { user: DYN.user, password: "not-it" };
    assert_eq!(refusal(proxy.addr, &wrong, "app").await.0, "28P01");
    let console = connect_as(proxy.addr, &DYN, "pgbouncer").await.expect("a stats user looked up");
    console.simple_query("SHOW STATS").await.expect("SHOW STATS");
    assert_eq!(refusal(proxy.addr, &wrong, "pgbouncer").await.0, "28P01");
    // Without a global auth_dbname the query would run in the console itself, which has no users.
    let proxy = pgmux(&pg, &format!("{top}{APP}{AUTH_USERS}{limits}")).await;
    let (code, message) = refusal(proxy.addr, &DYN, "pgbouncer").await;
    assert_eq!(code, "F0000", "{message}");
    assert!(message.starts_with("bouncer config error: "), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_dbname_never_names_the_console_nor_a_disabled_entry() {
    let (pg, _oracle) = server(PgOptions::default()).await;
    // Globally: the configuration is refused (at start-up, RELOAD or SET), in PgBouncer's words.
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = {:?}\n{AUTH_USER}auth_dbname = \"pgbouncer\"\n{APP}{AUTH_USERS}",
        pg.url(&APP_USER)
    );
    let err = Config::from_toml_str(&text).expect_err("the console as auth_dbname").to_string();
    assert!(err.contains("cannot use the reserved \"pgbouncer\" database as an auth_dbname"), "{err}");
    // A database's own: its logins are refused as the configuration's fault.
    let to_console = "[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\nauth_dbname = \"pgbouncer\"\n";
    let proxy = pgmux(&pg, &format!("{AUTH_USER}{to_console}{AUTH_USERS}")).await;
    let (code, message) = refusal(proxy.addr, &DYN, "app").await;
    assert_eq!(code, "F0000", "{message}");
    assert!(message.starts_with("bouncer config error: "), "{message}");
    // A disabled one: refused until ENABLE.
    let authdb = "[[databases]]\nname = \"authdb\"\ndbname = \"pgmux\"\n";
    let proxy = pgmux(&pg, &format!("{AUTH_USER}auth_dbname = \"authdb\"\n{APP}{authdb}{AUTH_USERS}")).await;
    let console = connect_as(proxy.addr, &APP_USER, "pgbouncer").await.expect("the console");
    console.simple_query("DISABLE authdb").await.expect("DISABLE");
    let (code, message) = refusal(proxy.addr, &DYN, "app").await;
    assert_eq!((code.as_str(), message.as_str()), ("55000", "authentication database \"authdb\" is disabled"));
    console.simple_query("ENABLE authdb").await.expect("ENABLE");
    connect_as(proxy.addr, &DYN, "app").await.expect("enabled again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_server_lacks_is_the_servers_3d000() {
    let (pg, _oracle) = server(PgOptions::default()).await;
    let proxy = pgmux(&pg, &format!("{AUTH_USER}[[databases]]\nname = \"*\"\n{AUTH_USERS}")).await;
    let (code, message) = refusal(proxy.addr, &DYN, "nosuchdb").await;
    assert_eq!((code.as_str(), message.as_str()), ("3D000", "database \"nosuchdb\" does not exist"));
    let c = connect_as(proxy.addr, &DYN, "pgmux").await.expect("a database it has");
    assert_eq!(scalar(&c, "select current_database()").await, "pgmux");
}

// One thread: pgmux's tasks run where the capturing subscriber is the default.
#[tokio::test]
async fn the_log_has_the_servers_error_and_never_a_password_or_verifier_read_even_when_it_quotes_one() {
    let (captured, _default) = crate::log_capture::capture();

    let (pg, oracle) = server(PgOptions::default()).await;
    let verifier: String =
        oracle.query_one("select rolpassword from pg_authid where rolname = $1", &[&DYN.user]).await.unwrap().get(0);
    let broken = "[[databases]]\nname = \"broken\"\ndbname = \"pgmux\"\n\
                  auth_query = \"SELECT usename, passwd FROM not_pg_shadow WHERE usename = $1\"\n";
    // A query that casts the password: the server quotes it back in its error, which is logged blanked.
    let casting = "[[databases]]\nname = \"casting\"\ndbname = \"pgmux\"\n\
                   auth_query = \"SELECT rolname, rolpassword::int FROM pg_authid WHERE rolname = $1\"\n";
    let proxy = pgmux(&pg, &format!("{AUTH_USER}{APP}{broken}{casting}{AUTH_USERS}")).await;
    let c = connect_as(proxy.addr, &DYN, "app").await.expect("looked up");
    scalar(&c, "select 1").await;
    let wrong = Role { user: DYN.user, password: "wrong-guess-9" };
    assert_eq!(refusal(proxy.addr, &wrong, "app").await.0, "28P01");
    assert_eq!(refusal(proxy.addr, &DYN, "broken").await.0, "F0000");
    assert_eq!(refusal(proxy.addr, &DYN, "casting").await.0, "F0000");
    drop(c);
    proxy.shutdown().await;

    let log = captured.text();
    assert!(log.contains("relation \"not_pg_shadow\" does not exist"), "the server's error is logged: {log}");
    assert!(log.contains("invalid input syntax for type integer: \"<a stored password, not logged>\""), "{log}");
    let (_, keys) = verifier.rsplit_once('$').unwrap();
    let (stored_key, server_key) = keys.split_once(':').unwrap();
    for secret in [DYN.password, AUTH.password, "wrong-guess-9", verifier.as_str(), stored_key, server_key] {
        assert!(!log.contains(secret), "a secret ({} characters) is in the log:\n{log}", secret.len());
    }
}
