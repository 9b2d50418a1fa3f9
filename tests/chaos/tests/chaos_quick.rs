//! The chaos suite's short form, run by `make test`: a few scenarios with about ten clients against pgmux and
//! PgBouncer, in a namespace of its own; fails when a goal of issue 13 that pgmux already meets (those marked
//! enforced in `pgmux_chaos::goals::GOALS`) is not met, or when any scenario could not be carried out.
//!
//! It drives the `pgmux-chaos` binary (built by cargo for this test) on the `pgmux` binary, which
//! `make chaos-quick` builds first; a missing one fails the test, naming the command to build it.

use std::path::PathBuf;

use pgmux_chaos::driver::target_dir;
use pgmux_chaos::goals::GOALS;
use pgmux_chaos::isolate::{catch_signals, run_isolated};
use pgmux_chaos::topology::PROXY_A;
use serde_json::Value;

#[test]
fn chaos_quick() {
    let pgmux = std::env::var_os("PGMUX_BIN").map_or_else(|| target_dir().join("debug").join("pgmux"), PathBuf::from);
    assert!(
        pgmux.is_file(),
        "{} is missing: run `cargo build -p pgmux` first (make chaos-quick does)",
        pgmux.display()
    );
    // Toxiproxy is built here, by the test setup itself, if it is not built yet.
    pgmux_testkit::toxiproxy::ensure_built().unwrap_or_else(|e| panic!("Toxiproxy: {e}"));
    catch_signals("chaos_quick").unwrap_or_else(|e| panic!("{e}"));

    let out = target_dir().join("chaos");
    let json = out.join("quick.json");
    let markdown = out.join("quick.md");
    let _ = std::fs::remove_file(&json);
    let args: Vec<String> = [
        "--quick",
        "--pgmux",
        &pgmux.display().to_string(),
        "--json",
        &json.display().to_string(),
        "--markdown",
        &markdown.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let driver = PathBuf::from(env!("CARGO_BIN_EXE_pgmux-chaos"));
    let code = run_isolated(&driver, &args, PROXY_A).unwrap_or_else(|e| panic!("the chaos driver: {e}"));
    assert_eq!(code, 0, "the chaos driver failed (its output is above)");

    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let results: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let summaries = results["summaries"].as_array().expect("summaries");
    assert!(!summaries.is_empty(), "no scenario ran");
    for s in summaries {
        let name = format!("{} against {}", s["scenario"], s["target"]);
        assert_eq!(s["failed_runs"].as_array().map(Vec::len), Some(0), "{name} could not be carried out: {s}");
        assert!(s["ops"].as_u64().unwrap_or(0) > 0, "{name} recorded no operation");
    }

    let verdicts = results["goals"].as_array().expect("goals");
    let mut failures = Vec::new();
    for goal in GOALS.iter().filter(|g| g.enforced) {
        let verdict = verdicts.iter().find(|v| v["id"] == goal.id).map(|v| &v["result"]);
        match verdict {
            Some(v) if v["verdict"] == "met" => {}
            Some(v) => failures.push(format!("{}: {} ({})", goal.id, v["verdict"], v["why"])),
            None => failures.push(format!("{}: no verdict", goal.id)),
        }
    }
    let report = std::fs::read_to_string(&markdown).unwrap_or_default();
    assert!(failures.is_empty(), "goals pgmux met before are not met:\n{}\n\n{report}", failures.join("\n"));
}
