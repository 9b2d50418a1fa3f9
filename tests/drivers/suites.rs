//! The suites the runner knows, whether each is ready to run, and running one: a child process with the
//! contract's environment, its stdout read line by line against its time budget, and its output checked
//! against the contract (tests/drivers/README.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// One suite: a program and what it needs before it can run.
#[derive(Debug)]
pub struct Suite {
    pub name: &'static str,
    /// The program and its arguments, relative to the repository root.
    pub command: Vec<String>,
    /// A runtime that must be on `PATH`, and the Debian packages that provide it.
    pub runtime: Option<(&'static str, &'static str)>,
    /// Files `make drivers-setup` produces; missing ones mean the suite is not built.
    pub built: Vec<PathBuf>,
    /// How to build it when `make drivers-setup` is not what the developer wants to run.
    pub build_hint: String,
    /// Sources whose change makes the build out of date (the Rust suite's, which cargo builds; the other
    /// suites' setup scripts keep their own builds current).
    pub sources: Option<PathBuf>,
}

/// Every suite, in the order they run. `bin_dir` is `target/<profile>`, where the Rust suite is built.
pub fn all(root: &Path, bin_dir: &Path) -> Vec<Suite> {
    let d = root.join("tests/drivers");
    let node_modules = if d.join("node/package.json").exists() { vec![d.join("node/node_modules")] } else { vec![] };
    let rust_bin = bin_dir.join("pgmux-driver-rust");
    let profile = bin_dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
    let rust_build = match profile {
        "debug" => "cargo build -p pgmux-driver-rust".to_owned(),
        "release" => "cargo build --release -p pgmux-driver-rust".to_owned(),
        other => format!("cargo build --profile {other} -p pgmux-driver-rust"),
    };
    vec![
        Suite {
            name: "node",
            command: vec!["node".into(), "tests/drivers/node/matrix.mjs".into()],
            runtime: Some(("node", "nodejs npm")),
            built: [vec![d.join("node/matrix.mjs")], node_modules].concat(),
            build_hint: "tests/drivers/node/setup.sh".into(),
            sources: None,
        },
        Suite {
            name: "python",
            command: vec!["tests/drivers/python/.venv/bin/python".into(), "tests/drivers/python/matrix.py".into()],
            runtime: None,
            built: vec![d.join("python/.venv/bin/python"), d.join("python/matrix.py")],
            build_hint: "tests/drivers/python/setup.sh".into(),
            sources: None,
        },
        Suite {
            name: "go",
            command: vec!["tests/drivers/go/matrix".into()],
            runtime: None,
            built: vec![d.join("go/matrix")],
            build_hint: "tests/drivers/go/setup.sh".into(),
            sources: None,
        },
        Suite {
            name: "java",
            command: vec!["java".into(), "-jar".into(), "tests/drivers/java/target/matrix.jar".into()],
            runtime: Some(("java", "default-jdk-headless maven")),
            built: vec![d.join("java/target/matrix.jar")],
            build_hint: "tests/drivers/java/setup.sh".into(),
            sources: None,
        },
        Suite {
            name: "rust",
            command: vec![rust_bin.to_string_lossy().into_owned()],
            runtime: None,
            built: vec![rust_bin],
            build_hint: rust_build,
            sources: Some(d.join("rust/src")),
        },
    ]
}

impl Suite {
    /// Why the suite cannot run, naming what to install or build; `None` when it is ready.
    pub fn not_ready(&self, root: &Path) -> Option<String> {
        if let Some((program, packages)) = self.runtime
            && !on_path(program)
        {
            return Some(format!(
                "`{program}` is not installed: run make drivers-setup (tests/prereqs.sh installs {packages} \
                 with apt-get as root; otherwise apt-get install {packages})"
            ));
        }
        let missing: Vec<String> = self
            .built
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
            .collect();
        if !missing.is_empty() {
            return Some(format!(
                "not built: run make drivers-setup (or {}); missing {}",
                self.build_hint,
                missing.join(", ")
            ));
        }
        let built = self.built.iter().filter_map(|p| p.metadata().and_then(|m| m.modified()).ok()).min()?;
        let sources = self.sources.as_ref()?;
        newest_change(sources).filter(|&changed| changed > built)?;
        Some(format!(
            "out of date: {} changed after the build; run make drivers-setup (or {})",
            sources.strip_prefix(root).unwrap_or(sources).display(),
            self.build_hint
        ))
    }
}

/// When a file under `dir` last changed (`target` and hidden directories aside).
fn newest_change(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || name == "target" {
            continue;
        }
        let changed =
            if path.is_dir() { newest_change(&path) } else { entry.metadata().and_then(|m| m.modified()).ok() };
        newest = newest.max(changed);
    }
    newest
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// One `<driver> <scenario> PASS|FAIL <detail>` line.
#[derive(Debug, Clone)]
pub struct Line {
    pub suite: &'static str,
    pub driver: String,
    pub scenario: String,
    pub pass: bool,
    pub detail: String,
}

impl Line {
    /// Parses a scenario line; `None` for anything else.
    pub fn parse(suite: &'static str, text: &str) -> Option<Line> {
        let mut parts = text.trim_end().splitn(4, ' ');
        let (driver, scenario, verdict) = (parts.next()?, parts.next()?, parts.next()?);
        let detail = parts.next().unwrap_or("").to_owned();
        let number = scenario.strip_prefix('S')?.trim_end_matches(|c: char| c.is_ascii_lowercase());
        if driver.is_empty() || number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let pass = match verdict {
            "PASS" => true,
            "FAIL" => false,
            _ => return None,
        };
        Some(Line { suite, driver: driver.to_owned(), scenario: scenario.to_owned(), pass, detail })
    }

    pub fn text(&self) -> String {
        let verdict = if self.pass { "PASS" } else { "FAIL" };
        format!("{} {} {verdict} {}", self.driver, self.scenario, self.detail).trim_end().to_owned()
    }
}

/// What one suite run produced.
#[derive(Debug)]
pub struct Run {
    pub suite: &'static str,
    pub lines: Vec<Line>,
    /// Breaches of the contract (not built, killed, bad exit, summary that disagrees...): each counts as a
    /// failure.
    pub problems: Vec<String>,
    pub elapsed: Duration,
}

impl Run {
    pub fn not_run(suite: &'static str, why: String) -> Run {
        Run { suite, lines: Vec::new(), problems: vec![why], elapsed: Duration::ZERO }
    }
}

/// Runs `suite` from `root` with `env` (the contract's variables), printing its lines as they come. The
/// budget follows the contract, `MATRIX_TIMEOUT_S` × (scenarios + 1): since the number of scenarios is
/// only known at the end, the suite is killed once it has run `timeout` × (lines so far + 2) without
/// finishing, which a suite within the contract never does.
pub async fn run(suite: &Suite, root: &Path, env: &BTreeMap<String, String>, timeout: Duration) -> Run {
    let started = Instant::now();
    let mut command = Command::new(&suite.command[0]);
    command.args(&suite.command[1..]).current_dir(root);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("PG") || key.starts_with("MATRIX_") || key.starts_with("DIRECT_PG") {
            command.env_remove(key.as_ref());
        }
    }
    command
        .envs(env)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Run::not_run(suite.name, format!("cannot start {}: {e}", suite.command.join(" "))),
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Run::not_run(suite.name, "no stdout/stderr pipe".to_owned());
    };
    let stderr = tokio::spawn(tail(stderr, 40));
    let mut run = Run { suite: suite.name, lines: Vec::new(), problems: Vec::new(), elapsed: Duration::ZERO };
    let summary = read_stdout(suite.name, stdout, &mut run, started, timeout).await;
    let status = match summary {
        Err(budget) => {
            kill_group(&mut child).await;
            run.problems.push(format!(
                "killed after {} s: over its budget of MATRIX_TIMEOUT_S × (scenarios so far + 2) = {} s",
                started.elapsed().as_secs(),
                budget.as_secs()
            ));
            None
        }
        Ok(summary) => {
            check_summary(&mut run, summary);
            match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
                Ok(Ok(status)) => Some(status),
                Ok(Err(e)) => {
                    run.problems.push(format!("cannot wait for it: {e}"));
                    None
                }
                Err(_) => {
                    kill_group(&mut child).await;
                    run.problems.push("closed its stdout but did not exit within 10 s; killed".to_owned());
                    None
                }
            }
        }
    };
    if let Some(status) = status
        && !status.success()
    {
        run.problems.push(format!("exited with {status} (a suite exits 0 and lets the runner decide)"));
    }
    let stderr =
        tokio::time::timeout(Duration::from_secs(5), stderr).await.ok().and_then(Result::ok).unwrap_or_default();
    if (!run.problems.is_empty() || run.lines.iter().any(|l| !l.pass)) && !stderr.is_empty() {
        println!("[{}] last lines of its stderr:", suite.name);
        for line in &stderr {
            println!("[{}] ! {line}", suite.name);
        }
    }
    run.elapsed = started.elapsed();
    run
}

/// Reads the suite's stdout to its end; returns the `N passed, N failed` counts it printed last (if any),
/// or the budget it overran.
async fn read_stdout(
    name: &'static str,
    stdout: impl AsyncRead + Unpin,
    run: &mut Run,
    started: Instant,
    timeout: Duration,
) -> Result<Option<(usize, usize)>, Duration> {
    let mut lines = BufReader::new(stdout).lines();
    let mut summary = None;
    loop {
        let budget = timeout * u32::try_from(run.lines.len() + 2).unwrap_or(u32::MAX);
        let next = tokio::time::timeout_at((started + budget).into(), lines.next_line()).await;
        match next {
            Err(_) => return Err(budget),
            Ok(Ok(None)) => return Ok(summary),
            Ok(Err(e)) => {
                run.problems.push(format!("cannot read its stdout: {e}"));
                return Ok(summary);
            }
            Ok(Ok(Some(text))) => {
                println!("[{name}] {text}");
                if let Some(line) = Line::parse(name, &text) {
                    run.lines.push(line);
                    summary = None;
                } else if let Some(counts) = parse_summary(&text) {
                    summary = Some(counts);
                }
            }
        }
    }
}

/// `N passed, N failed` (optionally with `, N skipped`).
fn parse_summary(text: &str) -> Option<(usize, usize)> {
    let (passed, rest) = text.trim().split_once(" passed, ")?;
    let failed = rest.split(" failed").next()?;
    Some((passed.parse().ok()?, failed.parse().ok()?))
}

fn check_summary(run: &mut Run, summary: Option<(usize, usize)>) {
    let passed = run.lines.iter().filter(|l| l.pass).count();
    let failed = run.lines.len() - passed;
    match summary {
        None => run.problems.push("did not end with `N passed, N failed`".to_owned()),
        Some(counts) if counts != (passed, failed) => run.problems.push(format!(
            "its summary says {} passed, {} failed but its lines say {passed} passed, {failed} failed",
            counts.0, counts.1
        )),
        Some(_) => {}
    }
    if run.lines.is_empty() {
        run.problems.push("printed no scenario line".to_owned());
    }
    let mut seen = std::collections::BTreeSet::new();
    for line in &run.lines {
        if !seen.insert((line.driver.clone(), line.scenario.clone())) {
            run.problems.push(format!("printed {} {} more than once", line.driver, line.scenario));
        }
    }
}

/// The last `keep` lines of a stream.
async fn tail(stream: impl AsyncRead + Unpin, keep: usize) -> Vec<String> {
    let mut lines = BufReader::new(stream).lines();
    let mut last = std::collections::VecDeque::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if last.len() == keep {
            last.pop_front();
        }
        last.push_back(line);
    }
    last.into()
}

/// Kills the suite and everything it started (it leads its own process group).
async fn kill_group(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status().await;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(script: &str) -> Suite {
        Suite {
            name: "fake",
            command: vec!["sh".into(), "-c".into(), script.into()],
            runtime: None,
            built: Vec::new(),
            build_hint: String::new(),
            sources: None,
        }
    }

    #[test]
    fn scenario_lines_follow_the_contract() {
        let line =
            Line::parse("go", "pgx S13 FAIL ERROR: prepared statement \"x\" already exists (42P05)").expect("a line");
        assert_eq!((line.driver.as_str(), line.scenario.as_str(), line.pass), ("pgx", "S13", false));
        assert_eq!(line.detail, "ERROR: prepared statement \"x\" already exists (42P05)");
        assert!(Line::parse("rust", "sqlx S5d PASS").is_some_and(|l| l.pass && l.detail.is_empty()));
        for noise in ["pgx S4 pass 1", "pgx 4 PASS x", "pgx Sx PASS x", "12 passed, 0 failed", ""] {
            assert!(Line::parse("go", noise).is_none(), "{noise:?}");
        }
        assert_eq!(parse_summary("12 passed, 3 failed"), Some((12, 3)));
        assert_eq!(parse_summary("12 passed, 3 failed, 1 skipped"), Some((12, 3)));
    }

    #[test]
    fn a_missing_suite_says_how_to_build_it() {
        let mut suite = fake("true");
        suite.built = vec![PathBuf::from("/nonexistent/tests/drivers/go/matrix")];
        suite.build_hint = "tests/drivers/go/setup.sh".into();
        let why = suite.not_ready(Path::new("/nonexistent")).expect("not ready");
        assert!(why.starts_with("not built: run make drivers-setup"), "{why}");
        assert!(why.ends_with("missing tests/drivers/go/matrix"), "{why}");
    }

    #[tokio::test]
    async fn a_suite_over_its_budget_is_killed() {
        let suite = fake("echo 'd S1 PASS ok'; sleep 30 & wait");
        let started = Instant::now();
        let run = run(&suite, Path::new("/"), &BTreeMap::new(), Duration::from_millis(500)).await;
        // Budget: 0.5 s × (1 line + 2).
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        assert_eq!(run.lines.len(), 1);
        assert!(run.problems.iter().any(|p| p.starts_with("killed after")), "{:?}", run.problems);
    }

    #[tokio::test]
    async fn a_suite_that_breaks_the_contract_fails() {
        let suite = fake("echo 'd S1 PASS ok'; echo 'd S1 FAIL again'; echo '2 passed, 0 failed'; exit 3");
        let run = run(&suite, Path::new("/"), &BTreeMap::new(), Duration::from_secs(10)).await;
        let problems = run.problems.join(" | ");
        assert!(problems.contains("its lines say 1 passed, 1 failed"), "{problems}");
        assert!(problems.contains("printed d S1 more than once"), "{problems}");
        assert!(problems.contains("exited with exit status: 3"), "{problems}");
    }
}
