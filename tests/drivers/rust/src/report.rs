//! What the runner reads: one line per scenario, `<driver> <scenario> PASS|FAIL <detail>`, and the closing
//! `N passed, N failed`. Also the error type the scenarios share, which keeps the SQLSTATE so that a detail
//! can say `ERROR: prepared statement "s3" does not exist (26000)`.

use std::fmt;
use std::future::Future;
use std::io::Write;
use std::time::Duration;

/// Why a scenario, a transaction or a connection failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The SQLSTATE, when the server (or the pooler) sent an ErrorResponse.
    pub code: Option<String>,
    pub text: String,
}

impl Failure {
    /// A failure the suite itself detected (a wrong value, a broken rule).
    pub fn check(text: impl Into<String>) -> Failure {
        Failure { code: None, text: text.into() }
    }

    /// This failure with `what` in front, to say which step failed.
    pub fn context(self, what: &str) -> Failure {
        Failure { code: self.code, text: format!("{what}: {}", self.text) }
    }

    /// The message of an ErrorResponse in the contract's form, `SEVERITY: message (SQLSTATE)`.
    pub fn server(severity: &str, message: &str, code: &str) -> Failure {
        Failure { code: Some(code.to_owned()), text: format!("{severity}: {message} ({code})") }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        match e.as_db_error() {
            Some(db) => Failure::server(db.severity(), db.message(), db.code().code()),
            None => Failure::check(e.to_string()),
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Failure {
        if let sqlx::Error::Database(db) = &e {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let severity = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .map(|pg| format!("{:?}", pg.severity()).to_uppercase())
                .unwrap_or_else(|| "ERROR".to_owned());
            return Failure::server(&severity, db.message(), &code);
        }
        Failure::check(e.to_string())
    }
}

/// A scenario's result: the detail of its PASS or FAIL line.
pub type Outcome = Result<String, Failure>;

/// Fails with `text` unless `ok`.
pub fn ensure(ok: bool, text: impl FnOnce() -> String) -> Result<(), Failure> {
    if ok { Ok(()) } else { Err(Failure::check(text())) }
}

/// Counts and prints scenario lines.
#[derive(Debug)]
pub struct Report {
    passed: usize,
    failed: usize,
    timeout: Duration,
    /// `MATRIX_RUST_ONLY`, for development: `driver:scenario` pairs to run, all when empty.
    only: Vec<String>,
}

impl Report {
    pub fn new(timeout: Duration, only: Vec<String>) -> Report {
        Report { passed: 0, failed: 0, timeout, only }
    }

    /// Runs one scenario under the contract's time limit and prints its line at once (the runner reads lines
    /// as they come, to tell a slow suite from a stuck one).
    pub async fn scenario(&mut self, driver: &str, id: &str, scenario: impl Future<Output = Outcome>) {
        if !self.only.is_empty() && !self.only.iter().any(|o| *o == format!("{driver}:{id}")) {
            return;
        }
        let outcome = match tokio::time::timeout(self.timeout, scenario).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::check(format!("gave up after {} s (MATRIX_TIMEOUT_S)", self.timeout.as_secs()))),
        };
        let (verdict, detail) = match outcome {
            Ok(detail) => {
                self.passed += 1;
                ("PASS", detail)
            }
            Err(failure) => {
                self.failed += 1;
                ("FAIL", failure.text)
            }
        };
        let detail = detail.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{driver} {id} {verdict} {detail}");
        let _ = out.flush();
    }

    /// Prints the closing line.
    pub fn finish(&self) {
        println!("{} passed, {} failed", self.passed, self.failed);
    }
}
