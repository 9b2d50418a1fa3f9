//! RDS IAM auth tokens must be exactly what botocore's `RDSClient.generate_db_auth_token` makes from the
//! same credentials, endpoint, user, region and clock: botocore is the reference implementation (the AWS
//! CLI's `aws rds generate-db-auth-token` is botocore).

#[path = "support/python.rs"]
mod python;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use pgmux_aws::AwsCredentials;
use pgmux_aws::iam::{TokenCache, rds_auth_token};
use serde_json::{Value, json};

const AKID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
/// Shaped like a Lambda session token: long, with `+`, `/` and `=` that need encoding.
const SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDexample+token/with==\
    AiB8wq3r5sC1yqfkTLwH8example/uZKn0dRk+P0pD2Ww0VkCrFAwiT//////////ARAAGgw0NjU5NzQ5NjI0MzgiDExample=";

struct Case {
    host: &'static str,
    port: u16,
    user: &'static str,
    region: &'static str,
    token: Option<&'static str>,
    epoch: u64,
}

const CASES: &[Case] = &[
    Case {
        host: "mydb.cluster-c1a2b3c4d5e6.us-east-1.rds.amazonaws.com",
        port: 5432,
        user: "app_user",
        region: "us-east-1",
        token: None,
        epoch: 1_700_000_000,
    },
    Case {
        host: "mydb.cluster-c1a2b3c4d5e6.us-east-1.rds.amazonaws.com",
        port: 5432,
        user: "app_user",
        region: "us-east-1",
        token: Some(SESSION_TOKEN),
        epoch: 1_700_000_000,
    },
    Case {
        host: "reader.cluster-ro-xyz.eu-central-1.rds.amazonaws.com",
        port: 6543,
        user: "Report.Reader-1",
        region: "eu-central-1",
        token: Some(SESSION_TOKEN),
        epoch: 1_735_689_599,
    },
    // Characters that must be percent-encoded, and the default HTTPS port (left out of the signed host).
    Case {
        host: "proxy.proxy-abc.ap-southeast-2.rds.amazonaws.com",
        port: 443,
        user: "odd user+name@x~y",
        region: "ap-southeast-2",
        token: None,
        epoch: 1_718_000_000,
    },
];

fn creds(token: Option<&str>) -> AwsCredentials {
    AwsCredentials::new(AKID, SECRET, token.map(str::to_string))
}

fn at(epoch: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(epoch)
}

/// botocore's tokens for `cases`, in one Python run.
fn botocore_tokens(py: &std::path::Path, cases: &[Case]) -> Vec<String> {
    let cases: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({
                "host": c.host, "port": c.port, "user": c.user, "region": c.region, "access_key_id": AKID,
                "secret_access_key": SECRET, "session_token": c.token, "epoch": c.epoch,
            })
        })
        .collect();
    let request = json!({ "op": "rds_tokens", "cases": cases }).to_string();
    let out = python::run_script(py, "botocore_reference.py", &[], &request, &[]);
    serde_json::from_str(&out).expect("a JSON list of tokens")
}

#[test]
fn tokens_equal_botocore() {
    let Some(py) = python::venv_python() else { return };
    let expected = botocore_tokens(&py, CASES);
    assert_eq!(expected.len(), CASES.len());
    for (case, expected) in CASES.iter().zip(&expected) {
        let ours = rds_auth_token(case.host, case.port, case.user, case.region, &creds(case.token), at(case.epoch))
            .expect("a token");
        let ours = ours.expose();
        assert_eq!(ours, expected, "host {} user {:?} token {}", case.host, case.user, case.token.is_some());
        assert_eq!(ours.contains("X-Amz-Security-Token="), case.token.is_some());
    }
}

/// The cache hands out botocore's token for the time it was made, for 10 minutes, then botocore's token for
/// the renewal time.
#[test]
fn cache_reuses_then_renews_like_botocore() {
    let Some(py) = python::venv_python() else { return };
    let start = 1_700_000_000;
    let case = |epoch| Case {
        host: "db.example.us-west-2.rds.amazonaws.com",
        port: 5432,
        user: "app",
        region: "us-west-2",
        token: Some(SESSION_TOKEN),
        epoch,
    };
    let expected = botocore_tokens(&py, &[case(start), case(start + 600)]);

    let now = Arc::new(AtomicU64::new(start));
    let clock = Arc::clone(&now);
    let cache = TokenCache::with_clock(
        "db.example.us-west-2.rds.amazonaws.com".into(),
        5432,
        "app".into(),
        "us-west-2".into(),
        creds(Some(SESSION_TOKEN)),
        move || at(clock.load(Ordering::SeqCst)),
    );
    assert_eq!(cache.token().unwrap().expose(), expected[0]);
    now.store(start + 599, Ordering::SeqCst);
    assert_eq!(cache.token().unwrap().expose(), expected[0], "reused within 10 minutes");
    now.store(start + 600, Ordering::SeqCst);
    assert_eq!(cache.token().unwrap().expose(), expected[1], "renewed after 10 minutes");
}
