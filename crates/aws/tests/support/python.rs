//! A Python virtualenv with botocore, boto3 and moto for the tests, made on first use under `target/`.
//!
//! The venv lives in `target/pgmux-aws-py-<hash of the pins>` and is created once per pin set, under a file
//! lock so parallel tests and test binaries wait for one installer. When Python or the packages cannot be had,
//! tests are skipped with the exact command to run, except in CI (`CI=true`) where that is a failure.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root: the nearest directory above this crate holding Cargo.lock.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().find(|d| d.join("Cargo.lock").exists()).unwrap_or(manifest).to_path_buf()
}

/// The directory with requirements.txt, constraints.txt and the helper scripts (beside this file, wherever
/// the test that includes it lives).
pub fn scripts_dir() -> PathBuf {
    let here = Path::new(file!()).parent().and_then(Path::parent).unwrap_or(Path::new("."));
    workspace_root().join(here).join("python")
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("target"),
    }
}

/// FNV-1a: a stable name for the pin set (std's hasher is randomly seeded).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The venv's python, creating the venv if needed; `None` (test skipped) outside CI when that is impossible.
pub fn venv_python() -> Option<PathBuf> {
    match ensure_venv() {
        Ok(python) => Some(python),
        Err(message) if in_ci() => panic!("{message}"),
        Err(message) => {
            eprintln!("SKIPPED (Python test dependencies unavailable; in CI this fails): {message}");
            None
        }
    }
}

fn ensure_venv() -> Result<PathBuf, String> {
    let scripts = scripts_dir();
    let requirements = scripts.join("requirements.txt");
    let constraints = scripts.join("constraints.txt");
    let mut pins = fs::read(&requirements).map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    pins.extend(fs::read(&constraints).map_err(|e| format!("cannot read {}: {e}", constraints.display()))?);
    let base = target_dir();
    let venv = base.join(format!("pgmux-aws-py-{:016x}", fnv(&pins)));
    let python = venv.join("bin/python");
    let done = venv.join(".installed");

    fs::create_dir_all(&base).map_err(|e| format!("cannot create {}: {e}", base.display()))?;
    let lock_path = base.join("pgmux-aws-py.lock");
    let lock = File::create(&lock_path).map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if done.exists() {
        return Ok(python);
    }

    let system_python = std::env::var("PGMUX_PYTHON").unwrap_or_else(|_| "python3".into());
    let commands = format!(
        "{system_python} -m venv {venv} && {venv}/bin/python -m pip install -r {req} -c {con}",
        venv = venv.display(),
        req = requirements.display(),
        con = constraints.display(),
    );
    let _ = fs::remove_dir_all(&venv);
    let steps: [(&str, Vec<&str>); 2] = [
        (system_python.as_str(), vec!["-m", "venv", path_str(&venv)?]),
        (
            path_str(&python)?,
            vec![
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--quiet",
                "-r",
                path_str(&requirements)?,
                "-c",
                path_str(&constraints)?,
            ],
        ),
    ];
    eprintln!("setting up the Python test venv: {commands}");
    for (program, args) in steps {
        let out = Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {program}: {e}. Set it up by hand with: {commands}"))?;
        if !out.status.success() {
            return Err(format!(
                "`{program} {}` failed ({}): {}\nSet it up by hand with: {commands}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let mut marker = File::create(&done).map_err(|e| format!("cannot create {}: {e}", done.display()))?;
    let _ = marker.write_all(&pins);
    Ok(python)
}

fn path_str(path: &Path) -> Result<&str, String> {
    path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))
}

/// Runs `script` (in tests/python) with `stdin` as input and returns its stdout; panics on failure.
pub fn run_script(python: &Path, script: &str, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> String {
    let mut child = Command::new(python)
        .arg(scripts_dir().join(script))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write to python");
    let out = child.wait_with_output().expect("wait for python");
    assert!(
        out.status.success(),
        "{script} {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 from python")
}
