//! The psql client the harness talks to its servers with (as the tests' own code would, over TCP).

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;

use crate::server::HOST;
use crate::{Role, bins};

/// psql as `role` against `database` on our host and `port`.
pub(crate) fn psql_as(port: u16, role: &Role, database: &str, sql: &str) -> Result<String, String> {
    psql_with_timeout(port, role, database, sql, None)
}

pub(crate) fn psql_with_timeout(
    port: u16,
    role: &Role,
    database: &str,
    sql: &str,
    connect_timeout_secs: Option<u32>,
) -> Result<String, String> {
    let mut cmd = Command::new(bins::psql_program());
    cmd.args(["-X", "-q", "-At", "-w", "-v", "ON_ERROR_STOP=1", "-h", HOST])
        .args(["-p", &port.to_string(), "-U", role.user, "-d", database, "-f", "-"])
        .env("PGPASSWORD", role.password)
        .env("PGSSLMODE", "disable")
        .env_remove("PGSERVICE")
        .env_remove("PGOPTIONS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(secs) = connect_timeout_secs {
        cmd.env("PGCONNECT_TIMEOUT", secs.to_string());
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", bins::psql_program().display()))?;
    // Feed stdin from another thread so a large script cannot deadlock against a large result.
    let mut stdin = child.stdin.take().ok_or("psql has no stdin")?;
    let script = sql.to_owned();
    let feeder = thread::spawn(move || {
        let _ = stdin.write_all(script.as_bytes());
        let _ = stdin.write_all(b"\n");
    });
    let out = child.wait_with_output().map_err(|e| format!("psql: {e}"))?;
    let _ = feeder.join();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!("{} ({})", stderr.trim(), out.status))
    }
}
