//! Logging in: what the client is told, and what a login costs the database.

use super::{Rig, tags};
use crate::testing::{FakeServer, Reply};

#[tokio::test]
async fn a_trusted_client_sees_the_server_s_parameters_and_a_cancel_key_of_pgmux_s_own() {
    let mut rig = Rig::new(2, "").await;
    let client = rig.login().await;
    let greeting = tags(&client.greeting);
    assert!(greeting.starts_with('R') && greeting.ends_with("KZ"), "{greeting}");
    let version = client.greeting.iter().find(|m| m.tag == b'S' && m.body.starts_with(b"server_version\0"));
    assert_eq!(version.map(|m| &m.body[..]), Some(&b"server_version\x0015.0 (fake)\0"[..]));
    // The key is pgmux's: a cancel must come through pgmux, never straight to a server the client may no
    // longer be using.
    assert_ne!(client.key, FakeServer::key(1));
    // The first login checked the start-up parameters on a server connection, which went back to the pool.
    assert_eq!((rig.fake.accepted(), rig.pool().idle), (1, 1));
}

#[tokio::test]
async fn a_client_with_parameters_seen_before_logs_in_while_every_connection_is_busy() {
    let mut rig = Rig::new(1, "").await;
    let mut first = rig.login().await;
    first.query("BEGIN").await;
    // Needing a server connection for its login, it would wait in line behind the open transaction.
    let second = rig.login().await;
    assert_ne!(second.key, first.key, "each client has a key of its own");
    assert_eq!(rig.fake.accepted(), 1);
}

#[tokio::test]
async fn a_client_asking_for_another_database_is_refused_with_3d000() {
    let mut rig = Rig::new(2, "").await;
    let mut client = rig.connect().await;
    client.startup(&[("user", "app"), ("database", "elsewhere")]).await;
    let reply = client.closed().await;
    assert_eq!(tags(&reply), "E");
    assert_eq!(reply[0].code(), "3D000");
    assert_eq!(rig.fake.accepted(), 0, "no server connection was opened for it");
}

#[tokio::test]
async fn a_start_up_parameter_the_server_refuses_fails_the_login_with_the_server_s_error() {
    let mut rig = Rig::new(2, "").await;
    rig.fake.on("'work_mem'", Reply::Error("22023"));
    let mut client = rig.connect().await;
    client.startup(&[("user", "app"), ("database", "db"), ("work_mem", "plenty")]).await;
    let reply = client.closed().await;
    assert_eq!(tags(&reply), "E");
    assert_eq!(reply[0].code(), "22023");
    // The check ran in a transaction of pgmux's own, rolled back, and the connection is fit to lend.
    assert!(rig.fake.ran("ROLLBACK") == [1], "{:?}", rig.fake.sql());
    assert_eq!(rig.pool().idle, 1);
}
