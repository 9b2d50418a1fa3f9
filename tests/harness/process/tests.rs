//! The process helper against real children (`sh`, `sleep`, `true`): stopping, waiting, logging, failing.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{ChildProcess, RunError, Stopped, Waited, WatchedChild, run, tail};

fn sleep() -> Command {
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    cmd
}

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

#[test]
fn a_child_that_ends_on_sigterm_is_not_killed() {
    let mut child = ChildProcess::spawn("sleep", sh("exec sleep 30")).unwrap();
    let stopped = child.stop().unwrap();
    assert!(matches!(stopped, Stopped::Exited(_)), "{stopped:?}");
    assert_eq!(stopped.to_string(), "signal: 15 (SIGTERM)");
    assert_eq!(child.stop(), None, "a second stop has nothing to do");
    assert_eq!(child.pid(), None);
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
    let mut child = ChildProcess::spawn("stubborn", sh("trap '' TERM; exec sleep 30"))
        .unwrap()
        .with_stop_grace(Duration::from_millis(200));
    // Let the shell set its trap before it is asked to stop.
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let stopped = child.stop().unwrap();
    assert_eq!(stopped, Stopped::Killed { grace: Duration::from_millis(200) });
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(stopped.to_string(), "killed: still running 200ms after SIGTERM");
}

#[test]
fn a_child_that_had_exited_says_so() {
    let mut child = ChildProcess::spawn("true", Command::new("true")).unwrap();
    assert!(matches!(child.wait(Duration::from_secs(10), || false), Waited::Exited(s) if s.success()));
    assert!(!child.signal(libc::SIGTERM), "no signal to a child that has exited");
    assert!(matches!(child.stop(), Some(Stopped::AlreadyExited(s)) if s.success()));
}

#[test]
fn waits_end_at_the_deadline_or_on_interrupt() {
    let mut child = ChildProcess::spawn("sleep", sleep()).unwrap();
    let started = Instant::now();
    assert_eq!(child.wait(Duration::from_millis(100), || false), Waited::TimedOut);
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(child.wait(Duration::from_secs(30), || true), Waited::Interrupted);
    assert!(child.pid().is_some(), "the child still runs after a wait that gave up");
}

#[test]
fn waiting_for_a_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap();
    let mut child = ChildProcess::spawn("sleep", sleep()).unwrap();
    let took = child.wait_listening(open, Instant::now(), Duration::from_secs(5), Duration::from_millis(1), || false);
    assert!(took.is_ok(), "{took:?}");
    drop(listener);
    let limit = Duration::from_millis(100);
    let closed = child.wait_listening(open, Instant::now(), limit, Duration::from_millis(10), || false);
    let closed = closed.unwrap_err();
    assert_eq!(closed.why, Waited::TimedOut);
    assert_eq!(closed.to_string(), format!("sleep did not listen on {open} within 100ms"));
    let mut gone = ChildProcess::spawn("true", Command::new("true")).unwrap();
    let exited = gone.wait_listening(open, Instant::now(), Duration::from_secs(5), Duration::from_millis(10), || false);
    let exited = exited.unwrap_err();
    assert!(matches!(exited.why, Waited::Exited(s) if s.success()), "{exited:?}");
    assert_eq!(exited.to_string(), format!("true exited before listening on {open} (exit status: 0)"));
}

#[test]
fn a_logged_child_has_its_output_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let mut child = ChildProcess::spawn_logged("sh", sh("echo one; echo; echo two >&2"), &log).unwrap();
    assert!(matches!(child.wait(Duration::from_secs(10), || false), Waited::Exited(_)));
    assert_eq!(child.output(), "one\n\ntwo\n");
    assert_eq!(child.output_tail(1), "two");
    let mut short = ChildProcess::spawn_short_lived_logged("sh", sh("echo three"), &log).unwrap();
    assert!(matches!(short.wait(Duration::from_secs(10), || false), Waited::Exited(_)));
    assert_eq!(short.output_tail(5), "one\ntwo\nthree", "appended, blank lines left out");
}

#[test]
fn a_stop_request_is_passed_on_once() {
    let mut child = ChildProcess::spawn("sleep", sleep()).unwrap();
    let (status, asked) = child.wait_passing_on_stop(|| true, Duration::from_secs(10)).unwrap();
    assert!(asked);
    assert_eq!(status.to_string(), "signal: 15 (SIGTERM)");
    let mut done = ChildProcess::spawn("true", Command::new("true")).unwrap();
    let (status, asked) = done.wait_passing_on_stop(|| false, Duration::from_secs(10)).unwrap();
    assert!(status.success() && !asked);
}

#[test]
fn a_watched_child_outlives_the_thread_that_started_it() {
    let child =
        std::thread::spawn(|| WatchedChild::spawn("watched-sleep", sh("exec sleep 30")).unwrap()).join().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(child.exited(), None, "still running after its starter's thread ended");
    assert_eq!(child.wait_exit(Duration::from_millis(50)), None);
    assert!(child.signal(libc::SIGTERM));
    assert_eq!(child.wait_exit(Duration::from_secs(10)).as_deref(), Some("signal: 15 (SIGTERM)"));
    assert!(!child.signal(libc::SIGTERM), "no signal to a child seen to exit");
}

#[test]
fn a_failed_command_says_what_it_printed() {
    let out = run(sh("echo fine"), "echo").unwrap();
    assert_eq!(out.stdout, b"fine\n");
    let err = run(sh("echo partly; echo 'no such thing' >&2; exit 3"), "the step").unwrap_err();
    assert!(matches!(err, RunError::Failed { .. }));
    assert_eq!(err.to_string(), "the step failed (exit status: 3): partly\nno such thing");
    let silent = run(sh("exit 1"), "quiet").unwrap_err();
    assert_eq!(silent.to_string(), "quiet failed (exit status: 1): (no output)");
    let missing = run(Command::new("/nonexistent/program"), "a missing program").unwrap_err();
    assert!(matches!(missing, RunError::CannotStart { .. }));
    assert!(missing.to_string().starts_with("cannot run a missing program: "), "{missing}");
}

#[test]
fn tails_leave_out_blank_lines() {
    assert_eq!(tail("a\n\nb\n  \nc\n", 2), "b\nc");
    assert_eq!(tail("a\n", 5), "a");
    assert_eq!(tail("\n \n", 3), "(no output)");
}
