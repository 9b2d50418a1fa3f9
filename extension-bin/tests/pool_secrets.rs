//! Named databases whose users log in with Secrets Manager secrets of their own (moto's server standing in):
//! each pool reads its user's secret, and rotating one user's secret is followed by that user's pool alone.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

#[path = "../../crates/aws/tests/support/python.rs"]
mod python;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgmux_testkit::{APP_USER, MD5_USER, PgServer, Role, free_port};
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

fn secret(pg: &PgServer, user: &str, password: &str) -> String {
    format!(
        r#"{{"engine":"postgres","host":"127.0.0.1","port":{},"username":"{user}","password":"{password}","dbname":"pgmux"}}"#,
        pg.port()
    )
}

async fn client(port: u16, role: &Role) -> tokio_postgres::Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(port).user(role.user).dbname("app");
    let (client, conn) = cfg.connect(NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

async fn pid(client: &tokio_postgres::Client) -> i32 {
    client.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_logs_in_with_its_own_secret_and_one_rotation_disturbs_no_other_pool() {
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
    let admin = |op: &str, name: &str, value: &str| {
        python::run_script(&py, "secrets_admin.py", &[&endpoint, REGION, op, name, value], "", &env).trim().to_owned()
    };
    let app_arn = admin("create", "prod/app/db", &secret(&pg, APP_USER.user, APP_USER.password));
    let md5_arn = admin("create", "prod/md5/db", &secret(&pg, MD5_USER.user, MD5_USER.password));

    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pgmux.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndatabase_url = \"postgres://pgmux_app@127.0.0.1:{}/pgmux\"\n\
             client_auth = \"trust\"\npool_max = 2\nmax_connections_percent = 0\n\
             [[databases]]\nname = \"app\"\ndbname = \"pgmux\"\nauth = \"secret\"\n\
             [[users]]\nname = \"pgmux_app\"\nsecret_arn = \"{app_arn}\"\n\
             [[users]]\nname = \"pgmux_md5\"\nsecret_arn = \"{md5_arn}\"\n",
            pg.port()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgmux"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PGMUX_") || k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("--config")
        .arg(&config)
        .env("AWS_ENDPOINT_URL", &endpoint)
        .env("AWS_REGION", REGION)
        .envs(CREDS)
        .stderr(Stdio::piped());
    let mut pgmux = Running(cmd.spawn().unwrap());
    wait_for_port(port, "pgmux");

    let app = client(port, &APP_USER).await;
    let md5 = client(port, &MD5_USER).await;
    assert_eq!(app.query_one("select current_user::text", &[]).await.unwrap().get::<_, String>(0), "pgmux_app");
    assert_eq!(md5.query_one("select current_user::text", &[]).await.unwrap().get::<_, String>(0), "pgmux_md5");
    let app_pid = pid(&app).await;
    let md5_pid = pid(&md5).await;

    // pgmux_md5's secret rotates: the role's password, then the secret; its pooled connection goes.
    pg.psql("alter role pgmux_md5 password 'rotated-md5-pw'");
    admin("put", "prod/md5/db", &secret(&pg, MD5_USER.user, "rotated-md5-pw"));
    pg.psql(&format!("select pg_terminate_backend({md5_pid})"));
    let gone = format!("select count(*) from pg_stat_activity where pid = {md5_pid}");
    for _ in 0..500 {
        if pg.psql(&gone).trim() == "0" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_ne!(pid(&md5).await, md5_pid, "a new server login, with the rotated secret");
    assert_eq!(pid(&app).await, app_pid, "pgmux_app's pool kept its connection");

    drop((app, md5));
    let _ = pgmux.0.kill();
    let out = {
        use std::io::Read;
        let _ = pgmux.0.wait();
        let mut s = String::new();
        if let Some(mut e) = pgmux.0.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    };
    assert!(out.contains("retrying with refreshed credentials"), "{out}");
    let changed: Vec<&str> = out.lines().filter(|l| l.contains("secret changed")).collect();
    assert!(changed.len() == 1 && changed[0].contains("pgmux_md5"), "only pgmux_md5's secret was re-read: {out}");
    for password in [APP_USER.password, MD5_USER.password, "rotated-md5-pw"] {
        assert!(!out.contains(password), "a password reached the log");
    }
}
