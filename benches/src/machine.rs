//! Where and with what a run was made (CPU, memory, kernel, the date, the versions of the four programs), so
//! that a figure in docs/benchmarks.md can be weighed and reproduced.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub ram_gib: f64,
    pub kernel: String,
    pub os: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Versions {
    pub pgmux: String,
    pub pgbouncer: String,
    pub postgres: String,
    pub pgbench: String,
}

impl Machine {
    pub fn here() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        Machine {
            cpu: cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown".to_owned()),
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            ram_gib: mem_total_kib(&read("/proc/meminfo")).map_or(0.0, |kib| kib as f64 / (1 << 20) as f64),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            os: pretty_name(&read("/etc/os-release")).unwrap_or_else(|| "Linux".to_owned()),
        }
    }

    pub fn describe(&self) -> String {
        format!("{}, {} cores, {:.1} GiB RAM, Linux {} ({})", self.cpu, self.cores, self.ram_gib, self.kernel, self.os)
    }
}

/// The 1-minute load average (`/proc/loadavg`): other work on the machine competes with the run.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// `git rev-parse --short HEAD` of the workspace, with `-dirty` if tracked files have uncommitted changes.
pub fn pgmux_revision(workspace: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if changes.is_empty() => rev,
            _ => format!("{rev}-dirty"),
        },
        None => "unknown (not a git checkout)".to_owned(),
    }
}

/// The first line a program prints for `--version`.
pub fn program_version(program: &Path) -> String {
    match Command::new(program).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("?").trim().to_owned(),
        Err(e) => format!("unknown ({e})"),
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|line| line.split_once(':').filter(|(key, _)| key.trim() == "model name"))
        .map(|(_, value)| value.trim().to_owned())
}

fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| line.strip_prefix("MemTotal:"))?.split_whitespace().next()?.parse().ok()
}

fn pretty_name(os_release: &str) -> Option<String> {
    let value = os_release.lines().find_map(|line| line.strip_prefix("PRETTY_NAME="))?;
    Some(value.trim().trim_matches('"').to_owned())
}

/// Now, as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    utc_timestamp(secs)
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM UTC` (the civil-from-days algorithm of H. Hinnant).
pub fn utc_timestamp(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("Intel(R) Xeon(R) Processor"));
        assert_eq!(cpu_model("processor : 0\n"), None);
        assert_eq!(mem_total_kib("MemTotal:       24684084 kB\nMemFree: 1 kB\n"), Some(24_684_084));
        assert_eq!(
            pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400 + 3_660), "2000-02-29 01:01 UTC");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14 22:13 UTC");
    }
}
