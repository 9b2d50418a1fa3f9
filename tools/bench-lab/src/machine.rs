//! Where and with what a run was made (CPU, memory, kernel, the date, the versions of the four programs), so
//! that a figure in docs/benchmarks.md can be weighed and reproduced.

use std::path::Path;
use std::process::Command;

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

pub use pgmux_testkit::utc_now;

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
}
