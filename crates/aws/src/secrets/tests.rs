use super::*;
use std::collections::HashMap;

#[path = "../../tests/support/python.rs"]
mod python;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let mut map: HashMap<String, String> =
        [("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "secret"), ("AWS_REGION", "eu-west-1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    map.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    move |k| map.get(k).cloned()
}

#[test]
fn endpoint_precedence() {
    let endpoint = |pairs: &[(&str, &str)]| SecretsClient::from_vars(vars(pairs)).unwrap().endpoint().to_string();
    assert_eq!(endpoint(&[]), "https://secretsmanager.eu-west-1.amazonaws.com");
    assert_eq!(endpoint(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")]), "http://127.0.0.1:5000");
    assert_eq!(
        endpoint(&[("AWS_ENDPOINT_URL", "http://a:1"), ("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://b:2")]),
        "http://b:2"
    );
    assert_eq!(
        endpoint(&[("AWS_ENDPOINT_URL", "http://a:1"), ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")]),
        "https://secretsmanager.eu-west-1.amazonaws.com"
    );
    assert_eq!(endpoint(&[("AWS_USE_FIPS_ENDPOINT", "TRUE")]), "https://secretsmanager-fips.eu-west-1.amazonaws.com");
    assert_eq!(endpoint(&[("AWS_REGION", "cn-north-1")]), "https://secretsmanager.cn-north-1.amazonaws.com.cn");

    let err = SecretsClient::from_vars(vars(&[("AWS_ENDPOINT_URL", "localhost:5000")])).unwrap_err();
    assert!(err.to_string().contains("Secrets Manager endpoint"), "{err}");
    let err = SecretsClient::from_vars(vars(&[("AWS_REGION", "")])).unwrap_err();
    assert!(err.to_string().contains("AWS_REGION"), "{err}");
}

#[tokio::test]
async fn invalid_endpoint_is_reported_by_the_call() {
    let client = SecretsClient::new("nonsense".into(), "us-east-1".into(), AwsCredentials::new("a", "b", None));
    let err = client.get_db_secret("x").await.unwrap_err();
    assert!(matches!(err, AwsError::InvalidSetting { .. }), "{err}");
}

#[tokio::test]
async fn unreachable_endpoint_is_a_retryable_transport_error() {
    // A port nothing listens on: bind, learn the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client =
        SecretsClient::new(format!("http://127.0.0.1:{port}"), "us-east-1".into(), AwsCredentials::new("a", "b", None));
    let err = client.get_db_secret("x").await.unwrap_err();
    assert!(matches!(err, AwsError::Transport { .. }), "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
}

fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        map.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    Response { status, headers: map, body: Bytes::from(body.to_string()) }
}

#[test]
fn service_errors_carry_status_type_and_message() {
    let err = check_status(response(
        400,
        &[],
        r#"{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret."}"#,
    ))
    .unwrap_err();
    assert_eq!(err.aws_error_type(), Some("ResourceNotFoundException"));
    assert_eq!(
        err.to_string(),
        "Secrets Manager answered HTTP 400 ResourceNotFoundException: Secrets Manager can't find the specified secret."
    );

    let err = check_status(response(
        400,
        &[],
        r#"{"__type":"com.amazonaws.secretsmanager#AccessDeniedException","Message":"no"}"#,
    ))
    .unwrap_err();
    assert_eq!(err.aws_error_type(), Some("AccessDeniedException"));

    let err = check_status(response(
        400,
        &[("x-amzn-ErrorType", "ThrottlingException:http://internal.amazon.com/coral/")],
        "{}",
    ))
    .unwrap_err();
    assert_eq!(err.aws_error_type(), Some("ThrottlingException"));
    assert!(err.is_retryable());

    let err = check_status(response(502, &[], "<html>Bad Gateway</html>")).unwrap_err();
    assert_eq!(err.aws_error_type(), Some("Unknown"));
    assert!(err.to_string().contains("Bad Gateway") && err.is_retryable(), "{err}");

    assert!(check_status(response(200, &[], "{}")).is_ok());
}

#[test]
fn secret_string_errors_do_not_echo_the_body() {
    assert_eq!(secret_string(br#"{"SecretString":"{\"a\":1}"}"#).unwrap(), r#"{"a":1}"#);
    let err = secret_string(br#"{"SecretBinary":"c2VjcmV0"}"#).unwrap_err();
    assert!(err.to_string().contains("SecretBinary"), "{err}");
    let err = secret_string(br#"{"SecretString": "hunter2"#).unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

/// The signed GetSecretValue request carries the same SigV4 headers botocore's `SigV4Auth` computes for it
/// (moto does not check signatures, so this is what stands between a signing mistake and production).
#[test]
fn signature_matches_botocore() {
    let Some(py) = python::venv_python() else { return };
    let epoch = 1_718_900_000u64;
    for token in [None, Some("IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+token=")] {
        let creds = AwsCredentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            token.map(Into::into),
        );
        for url in ["https://secretsmanager.eu-west-1.amazonaws.com", "http://127.0.0.1:5000/"] {
            let client = SecretsClient::new(url.into(), "eu-west-1".into(), creds.clone());
            let endpoint = client.endpoint.as_ref().unwrap();
            let body = r#"{"SecretId": "prod/db/app"}"#;
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(epoch);
            let request = client.signed_request(endpoint, &creds, TARGET_GET_SECRET_VALUE, body, at).unwrap();
            let ours = |name: &str| request.headers().get(name).map(|v| v.to_str().unwrap().to_string());

            let reference = serde_json::json!({
                "op": "sigv4_headers", "method": "POST", "url": endpoint.request_url(),
                "headers": {"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET_GET_SECRET_VALUE},
                "body": body, "service": "secretsmanager", "region": "eu-west-1",
                "access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "session_token": token, "epoch": epoch,
            });
            let out = python::run_script(&py, "botocore_reference.py", &[], &reference.to_string(), &[]);
            let theirs: HashMap<String, String> = serde_json::from_str(&out).unwrap();
            assert_eq!(ours("authorization").as_ref(), theirs.get("Authorization"), "{url} token={token:?}");
            assert_eq!(ours("x-amz-date").as_ref(), theirs.get("X-Amz-Date"));
            assert_eq!(ours("x-amz-security-token").as_ref(), theirs.get("X-Amz-Security-Token"));
        }
    }
}
