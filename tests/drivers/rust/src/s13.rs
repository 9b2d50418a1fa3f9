//! S13 for tokio-postgres: statement names collide across processes. tokio-postgres names statements `s<n>`
//! from a counter that starts at 0 in every process, so two processes that each prepare one statement both
//! call it `s0`. The suite runs itself twice in child mode (`--s13-child <offset>`); each child prepares
//! `s0` = `SELECT $1::int4 + <offset>` (its own SQL) and `s1` = `SELECT $1::int4 * 3` (the same SQL in both),
//! then executes both `MATRIX_TXNS` times outside a transaction and checks every result. The parent steps
//! both children through connect, prepare and execute together (a `go` line on their stdin after each step),
//! so that the two processes really overlap.

use std::process::{ExitCode, Stdio};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::env::Env;
use crate::load::Tally;
use crate::oracle::TpConn;
use crate::report::{Failure, Outcome, ensure};

/// The argument that starts the suite binary as an S13 child.
pub const CHILD_FLAG: &str = "--s13-child";

/// The two children's offsets: their own statements return `i + offset`.
const OFFSETS: [i32; 2] = [1000, 2000];

/// One child as the parent sees it.
struct ChildProcess {
    offset: i32,
    process: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// `ok …` or `fail …`, once the child has said it.
    verdict: Option<String>,
}

impl ChildProcess {
    fn spawn(offset: i32) -> Result<ChildProcess, Failure> {
        let exe = std::env::current_exe().map_err(|e| Failure::check(format!("cannot find the suite binary: {e}")))?;
        let mut process = Command::new(&exe)
            .arg(CHILD_FLAG)
            .arg(offset.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::check(format!("cannot start {}: {e}", exe.display())))?;
        let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(Failure::check("the S13 child has no stdin/stdout pipe"));
        };
        Ok(ChildProcess { offset, process, stdin, stdout: BufReader::new(stdout).lines(), verdict: None })
    }

    /// Waits for the child to finish step `step` (its line says so) unless it has already given a verdict.
    async fn reached(&mut self, step: &str) {
        if self.verdict.is_some() {
            return;
        }
        self.verdict = match self.stdout.next_line().await {
            Ok(Some(line)) if line == step && step != "a verdict" => None,
            Ok(Some(line)) if line.starts_with("ok ") || line.starts_with("fail ") => Some(line),
            Ok(Some(line)) => Some(format!("fail said {line:?} instead of {step:?}")),
            Ok(None) => Some("fail exited early (its stderr is the suite's)".to_owned()),
            Err(e) => Some(format!("fail cannot read its stdout: {e}")),
        };
    }

    /// Reads the child's last line, `ok …` or `fail …`, unless it has already given it.
    async fn verdict(&mut self) {
        if self.verdict.is_none() {
            self.reached("a verdict").await;
        }
    }

    async fn go(&mut self) {
        if self.verdict.is_none() {
            let _ = self.stdin.write_all(b"go\n").await;
        }
    }
}

/// Runs both children in step and passes if each got only its own SQL's results.
pub async fn tokio_postgres() -> Outcome {
    let mut children = OFFSETS.iter().map(|&o| ChildProcess::spawn(o)).collect::<Result<Vec<_>, Failure>>()?;
    for step in ["connected", "prepared", "done"] {
        futures_util::future::join_all(children.iter_mut().map(|c| c.reached(step))).await;
        for child in &mut children {
            child.go().await;
        }
    }
    futures_util::future::join_all(children.iter_mut().map(ChildProcess::verdict)).await;
    let mut reports = Vec::new();
    let mut failed = false;
    for mut child in children {
        let _ = child.process.wait().await;
        let verdict = child.verdict.unwrap_or_else(|| "fail gave no verdict".to_owned());
        failed |= !verdict.starts_with("ok ");
        let text = verdict.split_once(' ').map_or("", |(_, rest)| rest).to_owned();
        reports.push(format!("process {}: {text}", child.offset));
    }
    let summary = reports.join("; ");
    if failed { Err(Failure::check(summary)) } else { Ok(summary) }
}

/// The child's `main`: prints `connected`, `prepared`, `done` as it goes (waiting for `go` after each) and
/// then `ok <what it did>`, or `fail <why>` at the first failure; exits 0 either way unless it could not run.
pub fn child_main(offset: &str) -> ExitCode {
    let Ok(offset) = offset.parse::<i32>() else {
        eprintln!("{CHILD_FLAG} needs a whole-number offset, got {offset:?}");
        return ExitCode::from(2);
    };
    let env = match Env::from_env() {
        Ok(env) => env,
        Err(problems) => {
            eprintln!("pgmux-driver-rust {CHILD_FLAG}: {problems}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start a tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(child(&env, offset)) {
        Ok(done) => println!("ok {done}"),
        Err(failure) => println!("fail {failure}"),
    }
    ExitCode::SUCCESS
}

/// Says that `step` is done and waits for the parent's `go`.
async fn step_done(step: &str, parent: &mut Lines<BufReader<tokio::io::Stdin>>) -> Result<(), Failure> {
    println!("{step}");
    match parent.next_line().await {
        Ok(Some(line)) if line == "go" => Ok(()),
        other => Err(Failure::check(format!("expected `go` from the parent after {step}, got {other:?}"))),
    }
}

async fn child(env: &Env, offset: i32) -> Result<String, Failure> {
    let mut parent = BufReader::new(tokio::io::stdin()).lines();
    let conn = TpConn::connect(&env.tokio_config(&format!("matrix-tokio-postgres-s13-{offset}"))).await?;
    let result = child_steps(&conn, &mut parent, env.txns, offset).await;
    conn.close().await;
    result
}

async fn child_steps(
    conn: &TpConn,
    parent: &mut Lines<BufReader<tokio::io::Stdin>>,
    txns: usize,
    offset: i32,
) -> Result<String, Failure> {
    step_done("connected", parent).await?;
    // The process's first two statements: tokio-postgres names them s0 and s1.
    let own =
        conn.client.prepare(&format!("SELECT $1::int4 + {offset}")).await.map_err(|e| prepare_failure(e, "s0"))?;
    let shared = conn.client.prepare("SELECT $1::int4 * 3").await.map_err(|e| prepare_failure(e, "s1"))?;
    step_done("prepared", parent).await?;
    let mut tally = Tally::default();
    for i in 0..i32::try_from(txns).unwrap_or(i32::MAX) {
        let round = async {
            let mine: i32 = conn.client.query_one(&own, &[&i]).await?.try_get(0)?;
            ensure(mine == i + offset, || {
                format!("s0 returned {mine}, expected {} (the other process's SQL?)", i + offset)
            })?;
            let tripled: i32 = conn.client.query_one(&shared, &[&i]).await?.try_get(0)?;
            ensure(tripled == 3 * i, || format!("s1 returned {tripled}, expected {}", 3 * i))
        };
        tally.record(round.await);
    }
    tally.clean("execution pairs")?;
    step_done("done", parent).await?;
    Ok(format!("s0 (own SQL) and s1 (shared SQL) right {txns} times each outside a transaction"))
}

fn prepare_failure(e: tokio_postgres::Error, name: &str) -> Failure {
    Failure::from(e).context(&format!("preparing {name}"))
}
