//! The Rust suite of pgmux's driver compatibility matrix (tests/drivers/README.md): tokio-postgres and sqlx
//! at their default settings, against whatever `PGHOST`/`PGPORT` name (pgmux under the runner, PostgreSQL
//! itself when run by hand with `PGPORT` = `DIRECT_PGPORT`). Prints one line per scenario and
//! `N passed, N failed`, and exits 0: the runner decides. `--s13-child <offset>` is the child process of
//! tokio-postgres' S13.

mod env;
mod load;
mod oracle;
mod report;
mod routes;
mod s13;
mod socket;
mod sqlx_pg;
mod tokio_pg;
mod values;

use std::process::ExitCode;
use std::sync::Arc;

use env::Env;
use oracle::Oracle;
use report::Report;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        [flag, offset] if flag == s13::CHILD_FLAG => return s13::child_main(offset),
        _ => {
            eprintln!("usage: pgmux-driver-rust (with the environment of tests/drivers/README.md)");
            return ExitCode::from(2);
        }
    }
    let env = match Env::from_env() {
        Ok(env) => Arc::new(env),
        Err(problems) => {
            eprintln!("pgmux-driver-rust: {problems} (see tests/drivers/README.md)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("pgmux-driver-rust: cannot start a tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(suite(env));
    ExitCode::SUCCESS
}

async fn suite(env: Arc<Env>) {
    // A development knob, never set by the runner (which passes only the contract's variables).
    let only = std::env::var("MATRIX_RUST_ONLY").unwrap_or_default();
    let only = only.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    let mut report = Report::new(env.timeout, only);
    match Oracle::connect(&env).await {
        Ok((oracle, connection)) => {
            tokio_pg::run(&env, &oracle, &mut report).await;
            sqlx_pg::run(&env, &oracle, &mut report).await;
            report.scenario("tokio-postgres", "S16", socket::tokio_postgres(&env)).await;
            report.scenario("sqlx", "S16", socket::sqlx(&env)).await;
            report.scenario("tokio-postgres", "S17", routes::tokio_postgres(&env)).await;
            drop(oracle);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), connection).await;
        }
        // Without the oracle no scenario can be judged; say so once per driver rather than skip silently.
        Err(failure) => {
            for driver in ["tokio-postgres", "sqlx"] {
                report.scenario(driver, "S1", async { Err(failure.clone()) }).await;
            }
        }
    }
    report.finish();
}
