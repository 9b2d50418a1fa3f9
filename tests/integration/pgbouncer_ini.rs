//! pgmux started from a PgBouncer `pgbouncer.ini` and `userlist.txt`, as a PgBouncer user would start it:
//! two databases (one forcing its server user), PgBouncer's default of session pooling for one and
//! transaction pooling for the other, the users' passwords from the auth file, and the setting pgmux lacks
//! named in the warning.

use std::collections::HashSet;

use pgmux_proxy::config::{Profile, pgbouncer_ini};
use pgmux_proxy::{Listener, ListenerHandle};
use pgmux_testkit::{APP_USER, DATABASE, MD5_USER, PgOptions, PgServer, Role};
use tokio_postgres::Client;

use crate::common::{self, code, scalar};

async fn connect_to(pgmux: &ListenerHandle, role: &Role, database: &str) -> Result<Client, tokio_postgres::Error> {
    common::connect(pgmux.addr, role, |c| {
        c.dbname(database);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgmux_starts_from_a_pgbouncer_ini_with_two_databases_and_session_pooling() {
    let pg = tokio::task::spawn_blocking(|| PgServer::start_with(&PgOptions::default())).await.expect("PostgreSQL");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(
        &userlist,
        format!(
            "; users and their passwords\n\"{}\" \"{}\"\n\"{}\" \"{}\"\n",
            APP_USER.user, APP_USER.password, MD5_USER.user, MD5_USER.password
        ),
    )
    .expect("write the userlist");
    let port = pg.port();
    let ini = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\n\
             ; clients log in to the server as themselves; no pool_mode: PgBouncer's default, session\n\
             app = host=127.0.0.1 port={port} dbname={DATABASE}\n\
             ; every client as pgmux_md5, one transaction at a time\n\
             reports = host=127.0.0.1 port={port} dbname={DATABASE} user={md5} pool_mode=transaction\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = 0\n\
             unix_socket_dir =\n\
             auth_type = scram-sha-256\n\
             auth_file = {userlist}\n\
             logfile = {log}\n\
             default_pool_size = 3\n",
            md5 = MD5_USER.user,
            userlist = userlist.display(),
            log = dir.path().join("pgbouncer.log").display(),
        ),
    )
    .expect("write the ini");
    // As the other integration tests: a fixed budget, no control connection.
    let env = [("PGMUX_POOL_MAX", "6"), ("PGMUX_MAX_CONNECTIONS_PERCENT", "0")];
    let read = pgbouncer_ini::read(Profile::Sidecar, &ini, env.map(|(k, v)| (k.to_owned(), v.to_owned())))
        .expect("the ini reads");
    let left_out: Vec<&str> = read.unsupported.iter().map(|u| u.setting.as_str()).collect();
    assert_eq!(left_out, ["logfile"]);
    let pgmux = Listener::start(read.config).await.expect("pgmux starts from the ini");

    // `app`, session pooling: each client keeps its own server connection for as long as it stays.
    let a = connect_to(&pgmux, &APP_USER, "app").await.expect("pgmux_app into app");
    let b = connect_to(&pgmux, &APP_USER, "app").await.expect("pgmux_app into app, again");
    assert_eq!(scalar(&a, "select current_user").await, "pgmux_app");
    let (mut a_pids, mut b_pids) = (HashSet::new(), HashSet::new());
    for _ in 0..5 {
        a_pids.insert(scalar(&a, "select pg_backend_pid()").await);
        b_pids.insert(scalar(&b, "select pg_backend_pid()").await);
    }
    assert_eq!((a_pids.len(), b_pids.len()), (1, 1), "a session-mode client keeps one server connection");
    assert!(a_pids.is_disjoint(&b_pids), "and no other client shares it");
    a.batch_execute("set application_name = 'kept'").await.unwrap();
    b.simple_query("select 1").await.unwrap();
    assert_eq!(scalar(&a, "show application_name").await, "kept", "session state stays with the session");

    // `reports`, transaction pooling and a forced user: clients take turns on one server connection,
    // logged in as pgmux_md5 with its password from the auth file.
    let r1 = connect_to(&pgmux, &APP_USER, "reports").await.expect("pgmux_app into reports");
    let r2 = connect_to(&pgmux, &MD5_USER, "reports").await.expect("pgmux_md5 into reports");
    assert_eq!(scalar(&r1, "select current_user").await, "pgmux_md5");
    let mut shared = HashSet::new();
    for _ in 0..5 {
        shared.insert(scalar(&r1, "select pg_backend_pid()").await);
        shared.insert(scalar(&r2, "select pg_backend_pid()").await);
    }
    assert_eq!(shared.len(), 1, "transaction-mode clients used one at a time share a server connection");
    assert!(shared.is_disjoint(&a_pids) && shared.is_disjoint(&b_pids));

    // The auth file's passwords are the ones clients are checked against; the names are the ini's.
    let wrong = Role { user: APP_USER.user, password: MD5_USER.password };
    assert_eq!(code(&connect_to(&pgmux, &wrong, "app").await.expect_err("another user's password")), "28P01");
    let err = connect_to(&pgmux, &APP_USER, "nope").await.expect_err("not a database of the ini");
    assert_eq!(code(&err), "3D000");
    drop(pgmux);
}
