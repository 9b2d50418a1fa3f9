use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use super::*;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

#[test]
fn the_chain_picks_the_first_configured_source() {
    let p = CredentialsProvider::from_vars(vars(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x"),
    ]))
    .unwrap();
    assert_eq!(p.source(), "environment variables");

    let half = CredentialsProvider::from_vars(vars(&[("AWS_SECRET_ACCESS_KEY", "secret")])).unwrap_err();
    assert!(half.to_string().contains("AWS_ACCESS_KEY_ID"), "{half}");

    let p = CredentialsProvider::from_vars(vars(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x")]))
        .unwrap();
    assert_eq!(p.source(), "container credentials endpoint");
    assert!(
        matches!(&p.source, Source::Container { url, auth: None } if url == "http://169.254.170.2/v2/credentials/x")
    );

    let p = CredentialsProvider::from_vars(vars(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials"),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/secrets/token"),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored"),
    ]))
    .unwrap();
    assert!(matches!(&p.source, Source::Container { auth: Some(ContainerAuth::File(_)), .. }));

    let remote =
        CredentialsProvider::from_vars(vars(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds")]))
            .unwrap_err();
    assert!(remote.to_string().contains("plain HTTP"), "{remote}");
    CredentialsProvider::from_vars(vars(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", "https://example.com/creds")]))
        .unwrap();
    CredentialsProvider::from_vars(vars(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://[::1]:8080/creds")])).unwrap();

    let p = CredentialsProvider::from_vars(vars(&[])).unwrap();
    assert!(matches!(&p.source, Source::Imds { base } if base == "http://169.254.169.254"));
    let p = CredentialsProvider::from_vars(vars(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1338/")]))
        .unwrap();
    assert!(matches!(&p.source, Source::Imds { base } if base == "http://127.0.0.1:1338"));
    let off = CredentialsProvider::from_vars(vars(&[("AWS_EC2_METADATA_DISABLED", "TRUE")])).unwrap_err();
    assert!(off.to_string().contains("AWS_EC2_METADATA_DISABLED"), "{off}");
    let bad = CredentialsProvider::from_vars(vars(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "ftp://x")])).unwrap_err();
    assert!(bad.to_string().contains("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "{bad}");
}

#[test]
fn both_endpoint_documents_parse_and_failures_say_why() {
    let imds = br#"{"Code":"Success","LastUpdated":"2026-11-21T10:00:00Z","Type":"AWS-HMAC",
        "AccessKeyId":"ASIAEXAMPLE","SecretAccessKey":"s3cr3t","Token":"tok","Expiration":"2026-11-21T16:30:00Z"}"#;
    let creds = parse_credentials(imds).unwrap();
    assert_eq!(creds.access_key_id(), "ASIAEXAMPLE");
    assert!(creds.has_session_token());
    assert_eq!(creds.expiry(), Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_278_600)));

    // The container endpoint: no Code, fractional seconds in some agents.
    let ecs = br#"{"AccessKeyId":"ASIAECS","SecretAccessKey":"s","Token":"t","Expiration":"2026-11-21T16:30:00.5Z",
        "RoleArn":"arn:aws:iam::123456789012:role/task"}"#;
    assert_eq!(parse_credentials(ecs).unwrap().access_key_id(), "ASIAECS");

    let failed = br#"{"Code":"AssumeRoleUnauthorizedAccess","AccessKeyId":"","SecretAccessKey":""}"#;
    assert!(parse_credentials(failed).unwrap_err().to_string().contains("AssumeRoleUnauthorizedAccess"));
    let bad_date = br#"{"AccessKeyId":"a","SecretAccessKey":"s","Expiration":"tomorrow"}"#;
    assert!(parse_credentials(bad_date).unwrap_err().to_string().contains("tomorrow"));
    let html = b"<html>not here</html>";
    assert!(parse_credentials(html).unwrap_err().to_string().contains("not the credentials document"));
}

/// A container credentials endpoint on loopback: answers with credentials that expire at `expiry`, or
/// 500 while `failing`; counts requests and keeps the last Authorization header.
struct Endpoint {
    url: String,
    hits: Arc<AtomicU32>,
    failing: Arc<std::sync::atomic::AtomicBool>,
    auth: Arc<std::sync::Mutex<Option<String>>>,
}

async fn endpoint(expiry: &'static str) -> Endpoint {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v2/credentials/task", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicU32::new(0));
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let auth = Arc::new(std::sync::Mutex::new(None));
    let (h, f, a) = (Arc::clone(&hits), Arc::clone(&failing), Arc::clone(&auth));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (h, f, a) = (Arc::clone(&h), Arc::clone(&f), Arc::clone(&a));
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let n = h.fetch_add(1, Ordering::SeqCst) + 1;
                    *a.lock().unwrap() = req.headers().get("authorization").map(|v| v.to_str().unwrap().to_owned());
                    let (status, body) = if f.load(Ordering::SeqCst) {
                        (500, "agent unavailable".to_owned())
                    } else {
                        let doc = serde_json::json!({
                            "AccessKeyId": format!("ASIA{n}"), "SecretAccessKey": "s", "Token": "t", "Expiration": expiry,
                        });
                        (200, doc.to_string())
                    };
                    let response = http::Response::builder().status(status).body(Full::new(Bytes::from(body))).unwrap();
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Endpoint { url, hits, failing, auth }
}

fn at(rfc3339: &str) -> SystemTime {
    parse_rfc3339(rfc3339).unwrap()
}

#[tokio::test]
async fn endpoint_credentials_are_cached_renewed_before_expiry_and_kept_when_renewal_fails() {
    let ep = endpoint("2026-11-21T12:00:00Z").await;
    let dir = std::env::temp_dir().join(format!("pgmux-provider-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "first-token\n").unwrap();
    let p = CredentialsProvider::from_vars(vars(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &ep.url),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file.to_str().unwrap()),
    ]))
    .unwrap();

    let first = p.credentials_at(at("2026-11-21T11:00:00Z")).await.unwrap();
    assert_eq!(first.access_key_id(), "ASIA1");
    assert_eq!(ep.auth.lock().unwrap().as_deref(), Some("first-token"));
    // An hour left: cached.
    assert_eq!(p.credentials_at(at("2026-11-21T11:30:00Z")).await.unwrap(), first);
    assert_eq!(ep.hits.load(Ordering::SeqCst), 1);

    // 14 minutes left: fetched again, with the token file read again.
    std::fs::write(&token_file, "second-token").unwrap();
    let second = p.credentials_at(at("2026-11-21T11:46:00Z")).await.unwrap();
    assert_eq!(second.access_key_id(), "ASIA2");
    assert_eq!(ep.auth.lock().unwrap().as_deref(), Some("second-token"));
    // The endpoint still hands out the same expiry: not asked again within the minute.
    p.credentials_at(at("2026-11-21T11:46:30Z")).await.unwrap();
    assert_eq!(ep.hits.load(Ordering::SeqCst), 2);

    // Renewal fails while the current ones are valid: they are kept.
    ep.failing.store(true, Ordering::SeqCst);
    let kept = p.credentials_at(at("2026-11-21T11:50:00Z")).await.unwrap();
    assert_eq!(kept.access_key_id(), "ASIA2");
    assert_eq!(ep.hits.load(Ordering::SeqCst), 3);
    // Expired and still failing: the error, which names the endpoint and its answer.
    let e = p.credentials_at(at("2026-11-21T12:00:01Z")).await.unwrap_err().to_string();
    assert!(e.contains(&ep.url) && e.contains("500") && e.contains("agent unavailable"), "{e}");
    assert!(!e.contains("second-token"), "the authorization token must not appear in errors: {e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_unreachable_endpoint_is_an_error_not_a_hang() {
    // A port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let p = CredentialsProvider::from_vars(vars(&[(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        &format!("http://127.0.0.1:{port}"),
    )]))
    .unwrap();
    let e = p.credentials().await.unwrap_err().to_string();
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
}
