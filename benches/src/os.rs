//! What the benchmark driver reads from and asks of the operating system: a process's resident memory and
//! CPU time from `/proc` (the figures of W6 and of the CPU row), the clock-tick rate those are counted in,
//! and the open-file limit, which W6's 10,000 idle clients need raised before any pooler is spawned.
#![allow(unsafe_code)] // sysconf, getrlimit and setrlimit; see the SAFETY notes

use std::collections::HashSet;
use std::io;

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
    Ok(ticks as f64 / clock_ticks_per_second() as f64)
}

/// CPU time the whole machine has spent busy so far, all CPUs, in seconds: `/proc/stat`'s user, nice,
/// system, irq and softirq (not idle, not I/O wait, not time the hypervisor stole).
pub fn machine_busy_seconds() -> io::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let ticks = parse_busy_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "cannot parse the cpu line of /proc/stat"))?;
    Ok(ticks as f64 / clock_ticks_per_second() as f64)
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

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/<pid>/stat`'s times (100 on Linux, but it is not ours to assume).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// Raise `RLIMIT_NOFILE` as far as allowed: the hard limit to `want` when we may (root), then the soft limit
/// to the hard one. Children inherit it, so call this before spawning anything. Returns the soft limit now
/// in force, which the caller compares with what it needs.
pub fn raise_open_file_limit(want: u64) -> io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid out pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_max < want {
        let raised = libc::rlimit { rlim_cur: want, rlim_max: want };
        // SAFETY: a valid pointer to a plain struct. Failure (not root, or above fs.nr_open) is fine: we
        // still raise the soft limit to the old hard one below.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(want);
        }
    }
    let soft = libc::rlimit { rlim_cur: limit.rlim_max.min(want.max(limit.rlim_cur)), rlim_max: limit.rlim_max };
    // SAFETY: as above; a soft limit up to the hard limit is always allowed.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(soft.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_from_status() {
        let status = "Name:\tpgbouncer\nVmPeak:\t  30000 kB\nVmRSS:\t    7264 kB\nRssAnon:\t 3000 kB\n";
        assert_eq!(parse_vm_rss_kib(status), Some(7264));
        assert_eq!(parse_vm_rss_kib("Name:\tkthreadd\nState:\tS (sleeping)\n"), None);
        assert_eq!(parse_vm_rss_kib("VmRSS:\t7 MB\n"), None);
    }

    #[test]
    fn cpu_ticks_from_stat_even_with_awkward_names() {
        let stat = "23016 (cat) R 23014 23014 16226 0 -1 4194304 101 0 0 0 7 3 0 0 20 0 1 0 300468 3133440 387";
        assert_eq!(parse_cpu_ticks(stat), Some(10));
        let stat = "42 (tokio (rt) x) S 1 42 42 0 -1 4194560 500 0 0 0 1234 56 0 0 20 0 9 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some(1290));
        assert_eq!(parse_cpu_ticks("42 (short) S 1 2"), None);
        assert_eq!(parse_cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn server_connections_from_the_tcp_table() {
        // Two established to port 5432 (0x1538), one of them another process's; one to 5432 in TIME_WAIT
        // (06); one established to another port; the listening socket.
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000   0        0 100 1 0 100 0 0 10 0
   1: 0100007F:D431 0100007F:1538 01 00000000:00000000 00:00000000 00000000   0        0 201 1 0 20 4 30 10 -1
   2: 0100007F:D432 0100007F:1538 01 00000000:00000000 00:00000000 00000000   0        0 202 1 0 20 4 30 10 -1
   3: 0100007F:D433 0100007F:1538 06 00000000:00000000 03:00001770 00000000   0        0 0 3 0
   4: 0100007F:D434 0100007F:1539 01 00000000:00000000 00:00000000 00000000   0        0 203 1 0 20 4 30 10 -1
";
        let ours: HashSet<u64> = [100, 201, 203, 0].into_iter().collect();
        assert_eq!(count_established_to(table, 5432, &ours), 1);
        assert_eq!(count_established_to(table, 5433, &ours), 1);
        assert_eq!(count_established_to(table, 5434, &ours), 0);
        assert_eq!(count_established_to("", 5432, &ours), 0);
    }

    #[test]
    fn busy_ticks_leave_out_idle_iowait_and_steal() {
        let stat = "cpu  100 2 30 5000 40 5 6 700 0 0\ncpu0 50 1 15 2500 20 2 3 350 0 0\nintr 123\n";
        assert_eq!(parse_busy_ticks(stat), Some(100 + 2 + 30 + 5 + 6));
        assert_eq!(parse_busy_ticks("cpu0 1 2 3 4 5 6 7\n"), None, "the first line must be the total");
        assert_eq!(parse_busy_ticks("cpu  1 2 3\n"), None);
        assert_eq!(parse_busy_ticks(""), None);
    }

    #[test]
    fn our_own_process_has_figures() {
        let me = std::process::id();
        assert!(rss_kib(me).unwrap() > 0);
        assert!(cpu_seconds(me).unwrap() >= 0.0);
        assert!(clock_ticks_per_second() >= 1);
        assert!(machine_busy_seconds().unwrap() > 0.0);
    }
}
