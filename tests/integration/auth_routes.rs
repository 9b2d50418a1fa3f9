//! Server credentials per pool against a real PostgreSQL: SCRAM passthrough (a verifier in the auth file,
//! the client's proved key for the server login), passthrough (the client's own password, proved once by
//! the server, checked locally after, a changed one learned), two users never accepted with each other's
//! password over a thousand alternating logins, and no secret in pgmux's log or console.

use std::net::SocketAddr;
use std::time::Duration;

use pgmux_proto::auth::md5;
use pgmux_proto::auth::scram::{ScramClient, ScramKeys, ScramSecret};
use pgmux_proxy::{Config, Listener};
use pgmux_testkit::{APP_USER, MD5_USER, PLAIN_USER, PgServer, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, code, scalar};

/// What a raw client answers pgmux's authentication requests with.
#[derive(Clone, Copy)]
enum Answer<'a> {
    /// A password: in clear text, as md5, or through SCRAM, whichever is asked for.
    Password(&'a str),
    /// SCRAM keys instead of a password (what a client computes from it, precomputed: no PBKDF2 per login).
    Keys(&'a ScramKeys),
}

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    pgmux_testkit::wire::msg(tag, body)
}

/// Logs in to `database` as `user` with hand-made protocol messages and runs `select current_user`: the
/// user the server says, or the SQLSTATE of the error pgmux sent (`client:` and why, if the client gave up).
async fn raw_login(addr: SocketAddr, user: &str, database: &str, answer: Answer<'_>) -> Result<String, String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| format!("client: {e}"))?;
    let mut startup = 196_608u32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)] {
        startup.extend_from_slice(&pgmux_testkit::wire::cstr(k));
        startup.extend_from_slice(&pgmux_testkit::wire::cstr(v));
    }
    startup.push(0);
    let mut packet = (startup.len() as u32 + 4).to_be_bytes().to_vec();
    packet.extend_from_slice(&startup);
    s.write_all(&packet).await.map_err(|e| format!("client: {e}"))?;
    let mut scram: Option<ScramClient> = None;
    let mut queried = false;
    let mut current_user = None;
    loop {
        let (tag, body) = read_message(&mut s).await?;
        match tag {
            b'R' => {
                let kind = u32::from_be_bytes(body[..4].try_into().unwrap());
                let data = &body[4..];
                let reply = match (kind, answer) {
                    (0, _) => continue,
                    (3, Answer::Password(pw)) => message(b'p', &pgmux_testkit::wire::cstr(pw)),
                    (5, Answer::Password(pw)) => {
                        let salt: [u8; 4] = data[..4].try_into().unwrap();
                        message(b'p', &pgmux_testkit::wire::cstr(&md5::client_response(user, pw, salt)))
                    }
                    (10, _) => {
                        let client = match answer {
                            Answer::Password(pw) => ScramClient::new(pw),
                            Answer::Keys(keys) => ScramClient::with_keys(keys.clone()),
                        };
                        let first = client.client_first();
                        let mut body = pgmux_testkit::wire::cstr("SCRAM-SHA-256");
                        body.extend_from_slice(&(first.len() as u32).to_be_bytes());
                        body.extend_from_slice(&first);
                        scram = Some(client);
                        message(b'p', &body)
                    }
                    (11, _) => {
                        let client = scram.as_mut().ok_or("client: SASL continue out of order")?;
                        message(b'p', &client.server_first(data).map_err(|e| format!("client: {e}"))?)
                    }
                    (12, _) => {
                        let client = scram.as_mut().ok_or("client: SASL final out of order")?;
                        client.server_final(data).map_err(|e| format!("client: {e}"))?;
                        continue;
                    }
                    (other, _) => return Err(format!("client: cannot answer authentication request {other}")),
                };
                s.write_all(&reply).await.map_err(|e| format!("client: {e}"))?;
            }
            b'E' => {
                let fields = body.split(|b| *b == 0).find(|f| f.first() == Some(&b'C'));
                return Err(fields.map(|f| String::from_utf8_lossy(&f[1..]).into_owned()).unwrap_or_default());
            }
            b'D' => {
                let len = i32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
                current_user = Some(String::from_utf8_lossy(&body[6..6 + len]).into_owned());
            }
            b'Z' if !queried => {
                queried = true;
                s.write_all(&message(b'Q', &pgmux_testkit::wire::cstr("select current_user")))
                    .await
                    .map_err(|e| format!("client: {e}"))?;
            }
            b'Z' => {
                let _ = s.write_all(&message(b'X', b"")).await;
                return current_user.ok_or_else(|| "client: no row".to_owned());
            }
            _ => {}
        }
    }
}

async fn read_message(s: &mut TcpStream) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await.map_err(|e| format!("client: {e}"))?;
    let len = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    s.read_exact(&mut body).await.map_err(|e| format!("client: {e}"))?;
    Ok((head[0], body))
}

/// A pgmux in front of `pg` with `extra` settings (the fixture's defaults), listening on `listen`.
async fn pgmux(pg: &PgServer, listen: &str, extra: &str) -> pgmux_proxy::ListenerHandle {
    let mut config: Config = common::config(pg, extra);
    config.listen = listen.parse().expect("a listen address");
    Listener::start(config).await.expect("start pgmux")
}

/// An auth file holding these lines.
fn userlist(dir: &tempfile::TempDir, lines: &[(&str, &str)]) -> String {
    let path = dir.path().join("userlist.txt");
    let text: String = lines.iter().map(|(u, p)| format!("\"{u}\" \"{p}\"\n")).collect();
    std::fs::write(&path, text).unwrap();
    format!("{:?}", path.display().to_string())
}

/// Server connections of `user` as the server sees them (pgmux's probes and password checks aside).
async fn backends_of(oracle: &tokio_postgres::Client, user: &str) -> i64 {
    oracle
        .query_one(
            "select count(*) from pg_stat_activity where backend_type = 'client backend' and usename = $1 \
             and application_name not in ('pgmux-probe', 'pgmux-password-check')",
            &[&user],
        )
        .await
        .unwrap()
        .get(0)
}

/// Failed password logins of `user` in the server's log.
fn server_refusals(pg: &PgServer, user: &str) -> usize {
    pg.log_tail(100_000).matches(&format!("password authentication failed for user \"{user}\"")).count()
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

const APP_ROUTE: &str = "[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\n";
const PASSTHROUGH_ROUTE: &str = "[[databases]]\nname = \"pt\"\ndbname = \"pgmux\"\nauth = \"passthrough\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_passthrough_logs_in_with_the_key_a_client_proved() {
    let fx = common::start("").await;
    let oracle = common::direct(&fx.pg).await;
    let verifier: String = oracle
        .query_one("select rolpassword from pg_authid where rolname = $1", &[&APP_USER.user])
        .await
        .unwrap()
        .get(0);
    let dir = tempfile::tempdir().unwrap();
    let file = userlist(&dir, &[(APP_USER.user, &verifier)]);
    for auth in ["scram-sha-256", "md5"] {
        let proxy =
            pgmux(&fx.pg, "127.0.0.1:0", &format!("client_auth = \"{auth}\"\nauth_file = {file}\n{APP_ROUTE}")).await;
        let wrong = Role { user: APP_USER.user, password: "not-it" };
        assert_eq!(code(&connect_as(proxy.addr, &wrong, "app").await.expect_err("wrong")), "28P01", "{auth}");
        let a = connect_as(proxy.addr, &APP_USER, "app").await.unwrap_or_else(|e| panic!("{auth}: {e}"));
        assert_eq!(scalar(&a, "select current_user").await, "pgmux_app");
        // A second server login while the first connection is busy: the pool logs in with the kept key.
        let mut a = a;
        let tx = a.transaction().await.unwrap();
        tx.simple_query("select 1").await.unwrap();
        let b = connect_as(proxy.addr, &APP_USER, "app").await.unwrap();
        assert_eq!(scalar(&b, "select current_user").await, "pgmux_app");
        assert_eq!(backends_of(&oracle, APP_USER.user).await, 2, "{auth}: two server logins with one key");
        tx.commit().await.unwrap();
        drop((a, b));
        proxy.shutdown().await;
        assert!(
            common::eventually(Duration::from_secs(5), || async { backends_of(&oracle, "pgmux_app").await == 0 }).await
        );
    }
    // Under trust no client proves a key: the pool says why it cannot log in.
    let proxy =
        pgmux(&fx.pg, "127.0.0.1:0", &format!("client_auth = \"trust\"\nauth_file = {file}\n{APP_ROUTE}")).await;
    let c = connect_as(proxy.addr, &APP_USER, "app").await;
    let err = match c {
        Ok(c) => c.simple_query("select 1").await.expect_err("no key to log in with"),
        Err(e) => e,
    };
    assert!(common::message(&err).contains("only as a SCRAM verifier"), "{}", common::message(&err));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_proves_once_checks_locally_and_learns_a_changed_password() {
    let fx = common::start(PASSTHROUGH_ROUTE).await;
    let oracle = common::direct(&fx.pg).await;
    // Cold: the server judges. The cleartext-method user and the SCRAM one both get in.
    for role in [PLAIN_USER, APP_USER] {
        let c = connect_as(fx.addr(), &role, "pt").await.unwrap_or_else(|e| panic!("{}: {e}", role.user));
        assert_eq!(scalar(&c, "select current_user").await, role.user);
    }
    let cold_wrong = Role { user: MD5_USER.user, password: "not-it" };
    assert_eq!(code(&connect_as(fx.addr(), &cold_wrong, "pt").await.expect_err("cold, wrong")), "28P01");
    // Warm: wrong passwords are refused locally, without a server login.
    let before = server_refusals(&fx.pg, PLAIN_USER.user);
    let wrong = Role { user: PLAIN_USER.user, password: "guess" };
    for _ in 0..20 {
        assert_eq!(code(&connect_as(fx.addr(), &wrong, "pt").await.expect_err("warm, wrong")), "28P01");
    }
    assert_eq!(server_refusals(&fx.pg, PLAIN_USER.user), before, "no wrong password reached the server");
    // The client's own user only: another user's password never logs in as the route's user.
    let swapped = Role { user: PLAIN_USER.user, password: APP_USER.password };
    assert_eq!(code(&connect_as(fx.addr(), &swapped, "pt").await.expect_err("swapped")), "28P01");

    // The password changes on the server; after the interval, one login with it is tried and learned.
    oracle.batch_execute("alter role pgmux_plain password 'changed-pw-9'").await.unwrap();
    tokio::time::sleep(pgmux_proxy::config::learned::RELEARN_INTERVAL).await;
    let changed = Role { user: PLAIN_USER.user, password: "changed-pw-9" };
    let mut c = connect_as(fx.addr(), &changed, "pt").await.expect("the changed password is learned");
    assert_eq!(code(&connect_as(fx.addr(), &PLAIN_USER, "pt").await.expect_err("the old one")), "28P01");
    // The pool's next server login uses it: hold one connection, need a second.
    let tx = c.transaction().await.unwrap();
    tx.simple_query("select 1").await.unwrap();
    let d = connect_as(fx.addr(), &changed, "pt").await.unwrap();
    assert_eq!(scalar(&d, "select current_user").await, "pgmux_plain");
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_takes_a_password_over_tls_or_the_unix_socket_and_refuses_it_in_clear_over_a_network() {
    let Some(ip) = common::non_loopback_address() else {
        eprintln!("skipped: this machine has no address but loopback");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
    let path = |f: &str| format!("{:?}", dir.path().join(f).display().to_string());
    let extra = format!(
        "unix_socket_dir = {:?}\ntls_cert = {}\ntls_key = {}\n{PASSTHROUGH_ROUTE}",
        dir.path().display().to_string(),
        path("cert.pem"),
        path("key.pem")
    );
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let proxy = pgmux(&pg, &format!("{ip}:0"), &extra).await;
    // In clear text over the network: refused before any password is asked for.
    let err = connect_as(proxy.addr, &PLAIN_USER, "pt").await.expect_err("cleartext over a network");
    assert_eq!(code(&err), "28000");
    let message = common::message(&err);
    assert!(message.contains("only over TLS, the Unix socket or a loopback address"), "{message}");
    // Over TLS, from the same address: accepted.
    let out = std::process::Command::new("psql")
        .args(["-X", "-At", "-c", "select current_user"])
        .env("PGHOST", ip.to_string())
        .env("PGPORT", proxy.addr.port().to_string())
        .env("PGUSER", PLAIN_USER.user)
        .env("PGPASSWORD", PLAIN_USER.password)
        .env("PGDATABASE", "pt")
        .env("PGSSLMODE", "require")
        .output()
        .unwrap();
    assert!(out.status.success(), "psql over TLS: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pgmux_plain");
    // Over the Unix socket: accepted.
    let (client, conn) = tokio_postgres::Config::new()
        .host_path(dir.path())
        .port(proxy.addr.port())
        .user(PLAIN_USER.user)
        .password(PLAIN_USER.password)
        .dbname("pt")
        .connect(tokio_postgres::NoTls)
        .await
        .expect("passthrough over the Unix socket");
    tokio::spawn(conn);
    assert_eq!(scalar(&client, "select current_user").await, "pgmux_plain");
}

/// Both users, alternating, 1,000 times: each gets in with its own password as itself, never with the
/// other's (odyssey#1618: a cache shared per route handed one user's credentials to the other).
async fn alternate(addr: SocketAddr, database: &str, users: [(&str, Answer<'_>); 2]) {
    for i in 0..1000 {
        let (me, mine) = users[i % 2];
        let (_, theirs) = users[(i + 1) % 2];
        assert_eq!(raw_login(addr, me, database, mine).await, Ok(me.to_owned()), "login {i} as {me}");
        assert_eq!(raw_login(addr, me, database, theirs).await, Err("28P01".to_owned()), "login {i}: {me}, other's");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_alternating_scram_logins_never_accept_the_other_users_password() {
    let fx = common::start("").await;
    let oracle = common::direct(&fx.pg).await;
    // Two SCRAM users whose verifiers share a salt (so each one's keys are at least a well-formed answer to
    // the other's challenge), set on the server as PgBouncer documents, and in the auth file.
    let salt = b"pgmux-test-salt!";
    let twin = Role { user: "pgmux_twin", password: "twin-pw-5" };
    let app_secret = ScramSecret::from_password(APP_USER.password, salt, 4096);
    let twin_secret = ScramSecret::from_password(twin.password, salt, 4096);
    oracle
        .batch_execute(&format!(
            "alter role pgmux_app password '{}'; create role pgmux_twin login password '{}'",
            app_secret.to_verifier(),
            twin_secret.to_verifier()
        ))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = userlist(&dir, &[(APP_USER.user, &app_secret.to_verifier()), (twin.user, &twin_secret.to_verifier())]);
    let proxy = pgmux(&fx.pg, "127.0.0.1:0", &format!("auth_file = {file}\n{APP_ROUTE}")).await;
    let app_keys = ScramKeys::from_password(APP_USER.password, &app_secret);
    let twin_keys = ScramKeys::from_password(twin.password, &twin_secret);
    alternate(proxy.addr, "app", [(APP_USER.user, Answer::Keys(&app_keys)), (twin.user, Answer::Keys(&twin_keys))])
        .await;
    assert_eq!(backends_of(&oracle, twin.user).await, 1, "one pool per user, each logged in with its own key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_alternating_md5_logins_never_accept_the_other_users_password() {
    let users = format!(
        "client_auth = \"md5\"\n{APP_ROUTE}[[users]]\nname = \"pgmux_app\"\npassword = \"{}\"\n\
         [[users]]\nname = \"pgmux_md5\"\npassword = \"{}\"\n",
        APP_USER.password, MD5_USER.password
    );
    let fx = common::start(&users).await;
    let answers =
        [(APP_USER.user, Answer::Password(APP_USER.password)), (MD5_USER.user, Answer::Password(MD5_USER.password))];
    alternate(fx.addr(), "app", answers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_passthrough_logins_never_accept_the_other_users_password() {
    // Each login costs pgmux one local SCRAM derivation (unoptimised in a test build): fewer rounds.
    let fx = common::start(PASSTHROUGH_ROUTE).await;
    let answers = [
        (APP_USER.user, Answer::Password(APP_USER.password)),
        (PLAIN_USER.user, Answer::Password(PLAIN_USER.password)),
    ];
    for i in 0..100 {
        let (me, mine) = answers[i % 2];
        let (_, theirs) = answers[(i + 1) % 2];
        assert_eq!(raw_login(fx.addr(), me, "pt", mine).await, Ok(me.to_owned()), "login {i} as {me}");
        assert_eq!(raw_login(fx.addr(), me, "pt", theirs).await, Err("28P01".to_owned()), "login {i}: {me}, other's");
    }
}

/// Every row of `sql` on the console, as text (an error's message if it fails).
async fn console_text(addr: SocketAddr, sql: &str) -> String {
    let console = common::connect(addr, &APP_USER, |c| {
        c.dbname("pgbouncer");
    })
    .await
    .expect("the console");
    match console.simple_query(sql).await {
        Ok(messages) => messages
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some((0..row.len()).map(|i| row.get(i).unwrap_or("")).collect::<Vec<_>>().join("|"))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => common::message(&e),
    }
}

// One thread: pgmux's tasks run where the capturing subscriber is the default.
#[tokio::test]
async fn no_password_verifier_key_or_token_reaches_the_log_the_console_or_an_error() {
    let (captured, _default) = crate::log_capture::capture();

    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let oracle = common::direct(&pg).await;
    let verifier: String = oracle
        .query_one("select rolpassword from pg_authid where rolname = $1", &[&APP_USER.user])
        .await
        .unwrap()
        .get(0);
    let dir = tempfile::tempdir().unwrap();
    let file = userlist(&dir, &[(APP_USER.user, &verifier)]);
    let proxy = pgmux(&pg, "127.0.0.1:0", &format!("auth_file = {file}\n{APP_ROUTE}{PASSTHROUGH_ROUTE}")).await;
    let mut seen = Vec::new();
    // SCRAM passthrough, passthrough, wrong passwords of each kind, a cold one.
    let app = connect_as(proxy.addr, &APP_USER, "app").await.unwrap();
    scalar(&app, "select 1").await;
    let plain = connect_as(proxy.addr, &PLAIN_USER, "pt").await.unwrap();
    scalar(&plain, "select 1").await;
    for (role, db) in [
        (Role { user: APP_USER.user, password: "wrong-guess-1" }, "app"),
        (Role { user: PLAIN_USER.user, password: "wrong-guess-2" }, "pt"),
        (Role { user: MD5_USER.user, password: "wrong-guess-3" }, "pt"),
    ] {
        seen.push(common::message(&connect_as(proxy.addr, &role, db).await.expect_err("wrong")));
    }
    for sql in ["SHOW USERS", "SHOW POOLS", "SHOW DATABASES", "SHOW CONFIG", "SHOW SERVERS", "SHOW CLIENTS"] {
        seen.push(console_text(proxy.addr, sql).await);
    }
    seen.push(format!("{:?}", proxy.admin().metrics()));
    drop((app, plain));
    proxy.shutdown().await;

    let log = captured.text();
    assert!(log.contains("passthrough password proved"), "the capture saw pgmux's log: {log}");
    let secret = ScramSecret::parse_verifier(&verifier).unwrap();
    let keys = ScramKeys::from_password(APP_USER.password, &secret);
    // The key parts of the verifier, and the client's key as base64 (the verifier form encodes it) and hex.
    let key_text =
        ScramSecret { iterations: 1, salt: vec![0], stored_key: keys.client_key, server_key: keys.client_key }
            .to_verifier();
    let client_key_b64 = key_text.rsplit(':').next().unwrap().to_owned();
    let client_key_hex: String = keys.client_key.iter().map(|b| format!("{b:02x}")).collect();
    let (_, verifier_keys) = verifier.rsplit_once('$').unwrap();
    let (stored_key, server_key) = verifier_keys.split_once(':').unwrap();
    let forbidden = [
        APP_USER.password,
        PLAIN_USER.password,
        "wrong-guess-1",
        "wrong-guess-2",
        "wrong-guess-3",
        &verifier,
        stored_key,
        server_key,
        &client_key_b64,
        &client_key_hex,
    ];
    seen.push(log);
    for text in &seen {
        for f in forbidden {
            assert!(!text.contains(f), "a secret ({} characters) appears in:\n{text}", f.len());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_query_reads_an_unknown_users_verifier_through_a_security_definer_function() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let oracle = common::direct(&pg).await;
    // As PgBouncer recommends: a superuser-owned SECURITY DEFINER function that only auth_user may run.
    oracle
        .batch_execute(
            "create role pgmux_auth login password 'auth-pw-7';
             create role pgmux_dyn login password 'dyn-pw-8';
             create schema pgmux_auth;
             create function pgmux_auth.lookup(i_user text, out usename name, out passwd text)
               returns setof record language sql security definer set search_path = pg_catalog
               as $$ select usename, passwd from pg_shadow where usename = i_user $$;
             revoke all on function pgmux_auth.lookup(text) from public;
             grant usage on schema pgmux_auth to pgmux_auth;
             grant execute on function pgmux_auth.lookup(text) to pgmux_auth;",
        )
        .await
        .unwrap();
    let auth_user = "[[users]]\nname = \"pgmux_auth\"\npassword = \"auth-pw-7\"\n";
    let route = "[[databases]]\nname = \"app\"\ndbname = \"pgmux\"\nauth_user = \"pgmux_auth\"\n";
    let extra = format!("auth_query = \"SELECT * FROM pgmux_auth.lookup($1)\"\n{route}{auth_user}");
    let proxy = pgmux(&pg, "127.0.0.1:0", &extra).await;
    let dyn_user = Role { user: "pgmux_dyn", password: "dyn-pw-8" };
    // Checked against the verifier read from the server, logged in to the server with the client's key.
    let c = connect_as(proxy.addr, &dyn_user, "app").await.expect("a user read with auth_query");
    assert_eq!(scalar(&c, "select current_user").await, "pgmux_dyn");
    let wrong = Role { user: "pgmux_dyn", password: "not-it" };
    assert_eq!(code(&connect_as(proxy.addr, &wrong, "app").await.expect_err("wrong")), "28P01");
    let nobody = Role { user: "pgmux_nobody", password: "x" };
    assert_eq!(code(&connect_as(proxy.addr, &nobody, "app").await.expect_err("no such user")), "28P01");

    // PgBouncer's default query reads pg_shadow, which auth_user may not (as on RDS and Aurora for every
    // role): the client is told so, and what to use instead.
    let proxy = pgmux(&pg, "127.0.0.1:0", &format!("{route}{auth_user}")).await;
    let err = connect_as(proxy.addr, &dyn_user, "app").await.expect_err("pg_shadow is not readable");
    assert_eq!(code(&err), "28000");
    let db = err.as_db_error().unwrap();
    assert!(db.message().contains("may not read passwords") && db.message().contains("Aurora"), "{}", db.message());
    assert!(db.hint().is_some_and(|h| h.contains("passthrough")), "{:?}", db.hint());
}
