//! The Python checks (tests/observability/py/*.py), run with the virtualenv's interpreter.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::crate_dir;
use crate::tools::tools;

/// Runs `py/<script>` with `args`, `stdin` as its input; returns stdout, or panics with stderr.
pub fn run(script: &str, args: &[&str], stdin: &str) -> String {
    let (ok, stdout, stderr) = output(script, args, stdin);
    assert!(ok, "{script} {args:?} failed:\n{stdout}{stderr}");
    stdout
}

/// Runs `py/<script>` and returns whether it succeeded, its stdout and its stderr.
pub fn output(script: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let path = crate_dir().join("py").join(script);
    let mut child = Command::new(&tools().python)
        .arg(&path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    let mut input = child.stdin.take().expect("a pipe to its stdin");
    let stdin = stdin.to_owned();
    // Write from another thread: a large input must not deadlock against a full stdout pipe.
    let writer = std::thread::spawn(move || input.write_all(stdin.as_bytes()));
    let out = child.wait_with_output().expect("wait for python");
    let _ = writer.join();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}
