//! `SecretsClient` against moto's Secrets Manager server: secrets written with boto3 the way an operator or
//! a rotation would, read back by pgmux. The client is configured as in production (`from_vars` with
//! `AWS_ENDPOINT_URL` and dummy credentials), without touching this process's environment.

#[path = "support/python.rs"]
mod python;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use pgmux_aws::secrets::SecretsClient;
use pgmux_aws::{AwsError, CredentialsProvider};
use serde_json::json;

const REGION: &str = "eu-west-1";
const DUMMY_CREDS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")];

/// A moto server on a free loopback port, killed when dropped.
struct Moto {
    child: Child,
    url: String,
    python: PathBuf,
}

impl Moto {
    fn start(python: &Path) -> Moto {
        // Ask the OS for a free port, then hand it to moto (which binds it a moment later).
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind").local_addr().expect("addr").port();
        let child = Command::new(python)
            .arg(python::scripts_dir().join("moto_server.py"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto");
        let mut moto = Moto { child, url: format!("http://127.0.0.1:{port}"), python: python.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto exited before listening: {status}");
            }
            assert!(Instant::now() < deadline, "moto did not listen on {port} within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Writes a secret with boto3 (`create` or `put`, i.e. a rotation) and returns its ARN.
    fn admin(&self, op: &str, name: &str, value: &str) -> String {
        let mut env = DUMMY_CREDS.to_vec();
        env.push(("AWS_DEFAULT_REGION", REGION));
        python::run_script(&self.python, "secrets_admin.py", &[&self.url, REGION, op, name, value], "", &env)
            .trim()
            .to_string()
    }

    /// A client configured the way the binary configures it, from environment-style variables.
    fn client(&self) -> SecretsClient {
        let url = self.url.clone();
        let client = SecretsClient::from_vars(move |name| match name {
            "AWS_ENDPOINT_URL" => Some(url.clone()),
            "AWS_REGION" => Some(REGION.into()),
            _ => DUMMY_CREDS.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()),
        })
        .expect("client");
        assert_eq!(client.endpoint(), self.url);
        client
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn read_rds_secret_and_its_rotation() {
    let Some(py) = python::venv_python() else { return };
    let moto = Moto::start(&py);
    let client = moto.client();

    let secret = json!({
        "engine": "postgres", "host": "db.cluster-x.eu-west-1.rds.amazonaws.com", "port": 5432,
        "username": "app", "password": "first-Pa55word", "dbname": "orders",
    });
    let arn = moto.admin("create", "prod/pgmux/app", &secret.to_string());
    assert!(arn.starts_with("arn:aws:secretsmanager:eu-west-1:"), "{arn}");
    let read = client.get_db_secret("prod/pgmux/app").await.unwrap();
    assert_eq!(read.engine.as_deref(), Some("postgres"));
    assert_eq!(read.host.as_deref(), Some("db.cluster-x.eu-west-1.rds.amazonaws.com"));
    assert_eq!(read.port, Some(5432));
    assert_eq!((read.username.as_str(), read.password.expose()), ("app", "first-Pa55word"));
    assert_eq!(read.dbname.as_deref(), Some("orders"));

    // Rotation: a new AWSCURRENT version; the next read sees it.
    let mut rotated = secret.clone();
    rotated["password"] = json!("second-Pa55word");
    moto.admin("put", "prod/pgmux/app", &rotated.to_string());
    let read = client.get_db_secret("prod/pgmux/app").await.unwrap();
    assert_eq!(read.password.expose(), "second-Pa55word");

    // By ARN too, as configurations usually name it.
    let by_arn = client.get_db_secret(&arn).await.unwrap();
    assert_eq!(by_arn.password.expose(), "second-Pa55word");

    // The port as a string, as some hand-made secrets have it.
    let as_string = json!({"username": "u", "password": "p", "host": "h", "port": "6432"});
    moto.admin("create", "port-as-string", &as_string.to_string());
    assert_eq!(client.get_db_secret("port-as-string").await.unwrap().port, Some(6432));
}

/// On EC2 the credentials come from the instance metadata service, here moto's stand-in for it. pgmux reads
/// the same credentials botocore reads there (IMDSv2: a session token first), and signs Secrets Manager
/// calls with them.
#[tokio::test]
async fn credentials_from_instance_metadata_as_botocore_reads_them() {
    let Some(py) = python::venv_python() else { return };
    let moto = Moto::start(&py);
    let url = moto.url.clone();
    let provider = Arc::new(
        CredentialsProvider::from_vars(|name| (name == "AWS_EC2_METADATA_SERVICE_ENDPOINT").then(|| url.clone()))
            .unwrap(),
    );
    assert_eq!(provider.source(), "EC2 instance metadata (IMDSv2)");
    let ours = provider.credentials().await.unwrap();

    let request = json!({"op": "imds_credentials", "endpoint": moto.url});
    let reference = python::run_script(&py, "botocore_reference.py", &[], &request.to_string(), &[]);
    let reference: serde_json::Value = serde_json::from_str(&reference).expect("botocore's answer");
    assert_eq!(ours.access_key_id(), reference["access_key"].as_str().unwrap());
    assert_eq!(ours.has_session_token(), reference["has_token"].as_bool().unwrap());
    let expiry = ours.expiry().expect("instance credentials expire").duration_since(std::time::UNIX_EPOCH).unwrap();
    // moto stamps each answer "now + 1 day", so the two reads may be a second apart.
    let theirs = reference["expiry_epoch"].as_u64().unwrap();
    assert!(expiry.as_secs().abs_diff(theirs) <= 5, "expiry {} vs botocore's {theirs}", expiry.as_secs());

    let secret = json!({"username": "app", "password": "imds-Pa55word", "host": "db.example", "port": 5432});
    moto.admin("create", "ec2/pgmux/app", &secret.to_string());
    let url = moto.url.clone();
    let client = SecretsClient::from_vars_with(
        move |name| match name {
            "AWS_ENDPOINT_URL" => Some(url.clone()),
            "AWS_REGION" => Some(REGION.into()),
            _ => None,
        },
        provider,
    )
    .unwrap();
    assert_eq!(client.get_db_secret("ec2/pgmux/app").await.unwrap().password.expose(), "imds-Pa55word");
}

#[tokio::test]
async fn errors_name_the_cause() {
    let Some(py) = python::venv_python() else { return };
    let moto = Moto::start(&py);
    let client = moto.client();

    let err = client.get_db_secret("does/not/exist").await.unwrap_err();
    // AWS answers 400; moto 5.2 answers 404. Callers should go by the error type, not the status.
    assert!(matches!(err, AwsError::Service { status: 400 | 404, .. }), "{err}");
    assert_eq!(err.aws_error_type(), Some("ResourceNotFoundException"));
    assert!(err.to_string().contains("ResourceNotFoundException"), "{err}");
    assert!(!err.is_retryable());

    moto.admin("create", "no-password", r#"{"username":"app","pasword":"typo-Pa55word"}"#);
    let err = client.get_db_secret("no-password").await.unwrap_err();
    assert!(matches!(err, AwsError::InvalidSecret { field: "password", .. }), "{err}");
    assert!(!err.to_string().contains("typo-Pa55word"), "{err}");

    moto.admin("create", "bad-port", r#"{"username":"app","password":"Pa55word-x","port":"fivefour"}"#);
    let err = client.get_db_secret("bad-port").await.unwrap_err();
    assert!(matches!(err, AwsError::InvalidSecret { field: "port", .. }), "{err}");
    assert!(err.to_string().contains("`port`"), "{err}");

    moto.admin("create", "not-json", "password=Pa55word-y");
    let err = client.get_db_secret("not-json").await.unwrap_err();
    assert!(err.to_string().contains("not valid JSON"), "{err}");
    assert!(!err.to_string().contains("Pa55word-y"), "{err}");
}
