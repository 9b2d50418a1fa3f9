//! What `/proc` says of a process, for the figures of the benchmark lab and the reports of the chaos suite:
//! its resident memory and CPU time (W6 and the CPU row; the chaos soak), its parent (a postmaster's
//! children), the TCP connections it holds to a port (a pooler's server connections), and the machine's busy
//! CPU time.

use std::collections::{HashMap, HashSet};
use std::io;

use crate::sys;

#[cfg(test)]
mod tests;

/// Resident memory of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vm_rss_kib(&status)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no VmRSS line in /proc/{pid}/status")))
}

/// CPU time `pid` has used so far, user plus system, all threads, in seconds.
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_cpu_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse /proc/{pid}/stat")))?;
    Ok(ticks as f64 / sys::clock_ticks_per_second() as f64)
}

/// On-CPU time of each live thread of `pid` so far, in nanoseconds, by thread id: the first field of
/// `/proc/<pid>/task/<tid>/schedstat`. Finer than [`cpu_seconds`] (clock ticks, 10 ms), but a thread that has
/// exited is no longer counted: difference two readings thread by thread, and check against `cpu_seconds`.
pub fn thread_runtimes_ns(pid: u32) -> io::Result<HashMap<u32, u64>> {
    let mut runtimes = HashMap::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|name| name.parse().ok()) else { continue };
        let Ok(schedstat) = std::fs::read_to_string(entry.path().join("schedstat")) else { continue }; // exited
        let ns = parse_schedstat_ns(&schedstat).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse /proc/{pid}/task/{tid}/schedstat"))
        })?;
        runtimes.insert(tid, ns);
    }
    Ok(runtimes)
}

/// The first of `schedstat`'s three fields: time on the CPU, in nanoseconds.
pub fn parse_schedstat_ns(schedstat: &str) -> Option<u64> {
    let mut fields = schedstat.split_whitespace();
    let ns = fields.next()?.parse().ok()?;
    (fields.count() == 2).then_some(ns)
}

/// CPU time the whole machine has spent busy so far, all CPUs, in seconds: `/proc/stat`'s user, nice,
/// system, irq and softirq (not idle, not I/O wait, not time the hypervisor stole).
pub fn machine_busy_seconds() -> io::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let ticks = parse_busy_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "cannot parse the cpu line of /proc/stat"))?;
    Ok(ticks as f64 / sys::clock_ticks_per_second() as f64)
}

/// The busy ticks of `/proc/stat`'s first line: `cpu  user nice system idle iowait irq softirq steal …`.
pub fn parse_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = line.split_whitespace().take(7).map(str::parse).collect::<Result<_, _>>().ok()?;
    let [user, nice, system, _idle, _iowait, irq, softirq] = f[..] else { return None };
    Some(user + nice + system + irq + softirq)
}

/// `VmRSS:   12345 kB` → 12345. `None` for a kernel thread (no such line) or a line in another unit.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:"))?;
    let mut words = line.split_whitespace();
    let kib = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib)
}

/// The parent of `pid` (field 4 of `/proc/<pid>/stat`), if `pid` still exists.
pub fn parent_pid(pid: u32) -> Option<u32> {
    parse_parent_pid(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 4 of a `/proc/<pid>/stat` line, counted after the command name as [`parse_cpu_ticks`] does.
pub fn parse_parent_pid(stat: &str) -> Option<u32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime (fields 14 and 15 of `/proc/<pid>/stat`), in clock ticks. The second field, the command
/// name in parentheses, may itself hold spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name come field 3 (state), 4, 5, …: utime is field 14, the 12th of them.
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The established TCP connections process `pid` holds to port `port` (a pooler's server connections): its
/// sockets from `/proc/<pid>/fd`, matched by inode in its network namespace's TCP tables.
pub fn tcp_connections_to(pid: u32, port: u16) -> io::Result<usize> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = std::fs::read_link(entry?.path()) else { continue }; // closed meanwhile
        let inode = target.to_str().and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok());
        inodes.extend(inode);
    }
    let mut held = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        held += count_established_to(&text, port, &inodes);
    }
    Ok(held)
}

/// The lines of a `/proc/net/tcp` table that are established connections to remote port `port` from one of
/// `inodes`. A line: `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
/// inode …`, addresses as `HEXADDR:HEXPORT`, state `01` for established.
pub fn count_established_to(table: &str, port: u16, inodes: &HashSet<u64>) -> usize {
    let port = format!("{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(&"01"), Some(inode)) = (fields.get(2), fields.get(3), fields.get(9)) else {
                return false;
            };
            remote.rsplit(':').next() == Some(port.as_str()) && inode.parse().is_ok_and(|i| inodes.contains(&i))
        })
        .count()
}
