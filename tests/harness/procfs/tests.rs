//! The `/proc` parsers against captured lines, and the readers against this very process.

use std::collections::HashSet;

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
fn thread_runtimes_from_schedstat() {
    assert_eq!(parse_schedstat_ns("650366 12 2\n"), Some(650_366));
    assert_eq!(parse_schedstat_ns("650366 12\n"), None);
    assert_eq!(parse_schedstat_ns("-1 0 0"), None);
    // This process: the test's own thread is among its threads, and has run.
    let spin = (0..200_000u64).fold(0u64, |acc, n| acc.wrapping_mul(31).wrapping_add(n));
    let runtimes = thread_runtimes_ns(std::process::id()).expect("reading this process's threads");
    assert!(spin != 1 && !runtimes.is_empty() && runtimes.values().any(|&ns| ns > 0), "{runtimes:?}");
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
    assert!(crate::sys::clock_ticks_per_second() >= 1);
    assert_eq!(parent_pid(me), Some(std::os::unix::process::parent_id()));
    assert!(machine_busy_seconds().unwrap() > 0.0);
}

#[test]
fn parent_from_stat_even_with_awkward_names() {
    assert_eq!(parse_parent_pid("23016 (cat) R 23014 23014 16226 0 -1"), Some(23014));
    assert_eq!(parse_parent_pid("42 (tokio (rt) x) S 1 42 42 0"), Some(1));
    assert_eq!(parse_parent_pid("42 (short)"), None);
}
