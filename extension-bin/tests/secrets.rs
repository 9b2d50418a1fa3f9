//! The binary reading its database login from Secrets Manager (moto's server standing in), and picking up a
//! rotated password without an error reaching the client.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

#[path = "../../crates/aws/tests/support/python.rs"]
mod python;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, PgServer, free_port};
use tokio_postgres::NoTls;

const REGION: &str = "eu-west-1";
const CREDS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")];

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn secret(pg: &PgServer, password: &str) -> String {
    // Port as a string, as some rotation templates write it.
    format!(
        r#"{{"engine":"postgres","host":"127.0.0.1","port":"{}","username":"{}","password":"{password}","dbname":"pgmux"}}"#,
        pg.port(),
        APP_USER.user
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_in_with_a_secret_and_follows_its_rotation() {
    let Some(py) = python::venv_python() else { return };
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let moto_port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
    let _moto = Running(
        Command::new(&py)
            .arg(python::scripts_dir().join("moto_server.py"))
            .args(["-H", "127.0.0.1", "-p", &moto_port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(moto_port, "moto");
    let endpoint = format!("http://127.0.0.1:{moto_port}");
    let mut env = CREDS.to_vec();
    env.push(("AWS_DEFAULT_REGION", REGION));
    let admin = |op: &str, value: &str| {
        python::run_script(&py, "secrets_admin.py", &[&endpoint, REGION, op, "prod/orders/db", value], "", &env)
            .trim()
            .to_owned()
    };
    let arn = admin("create", &secret(&pg, APP_USER.password));

    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgmux"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PGMUX_") || k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("PGMUX_SECRET_ARN", &arn)
        .env("PGMUX_LISTEN", format!("127.0.0.1:{port}"))
        .env("PGMUX_CLIENT_AUTH", "trust")
        .env("PGMUX_POOL_MAX", "1")
        .env("PGMUX_MAX_CONNECTIONS_PERCENT", "0")
        .env("AWS_ENDPOINT_URL", &endpoint)
        .env("AWS_REGION", REGION)
        .envs(CREDS)
        .stderr(Stdio::piped());
    let mut pgmux = Running(cmd.spawn().unwrap());
    wait_for_port(port, "pgmux");

    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user(APP_USER.user).dbname("pgmux");
    let (client, conn) = cfg.connect(NoTls).await.unwrap();
    tokio::spawn(conn);
    let pid: i32 = client.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);

    // Rotation: the database password changes, then the secret; the pooled connection is dropped.
    pg.psql("alter role pgmux_app password 'rotated-pw-9'");
    admin("put", &secret(&pg, "rotated-pw-9"));
    pg.psql(&format!("select pg_terminate_backend({pid})"));
    // pg_terminate_backend only signals: wait until the backend is gone, so that pgmux sees the closed
    // connection when it next lends it (a query sent before the backend exits would get 08006, correctly).
    let gone = format!("select count(*) from pg_stat_activity where pid = {pid}");
    for _ in 0..500 {
        if pg.psql(&gone).trim() == "0" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let row = client.query_one("select 'after rotation'", &[]).await.unwrap();
    assert_eq!(row.get::<_, &str>(0), "after rotation", "the new connection logged in with the new password");

    drop(client);
    let _ = pgmux.0.kill();
    let out = pgmux.0.wait_with_output_ref();
    assert!(out.contains("retrying with refreshed credentials"), "{out}");
    assert!(!out.contains("rotated-pw-9") && !out.contains(APP_USER.password), "a password reached the log");
}

trait OutputRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl OutputRef for Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}
