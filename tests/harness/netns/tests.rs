//! The parts of the namespace module that need neither root nor `ip`: names, addresses, the hosts file.

use std::net::Ipv4Addr;

use super::{Naming, NetnsError, overwrite_in_place, slash30};

const LAB: Naming = Naming { prefix: "pgmux-bench-", suffix: "-app", veth: Some("pgmb") };
const CHAOS: Naming = Naming { prefix: "pgmux-chaos-", suffix: "", veth: None };

#[test]
fn names_carry_the_pid_and_nothing_else_parses() {
    assert_eq!(LAB.name(4242), "pgmux-bench-4242-app");
    assert_eq!(CHAOS.name(4242), "pgmux-chaos-4242");
    assert_eq!(LAB.pid_of("pgmux-bench-4242-app"), Some(4242));
    assert_eq!(CHAOS.pid_of("pgmux-chaos-4242"), Some(4242));
    for other in ["pgmux-bench-4242", "pgmux-bench--app", "pgmux-bench-+42-app", "pgmux-chaos-4242-app", "x"] {
        assert_eq!(LAB.pid_of(other), None, "{other}");
    }
    assert_eq!(CHAOS.pid_of("pgmux-chaos-42-seed"), None, "a scratch directory is not a namespace");
    assert_eq!(CHAOS.pid_of("pgmux-bench-42-app"), None);
}

#[test]
fn veth_names_fit_an_interface_name() {
    assert_eq!(LAB.veth_pair(4_194_303), Some(("pgmb4194303d".to_owned(), "pgmb4194303a".to_owned())));
    assert!(LAB.veth_pair(4_194_303).is_some_and(|(d, a)| d.len() <= 15 && a.len() <= 15));
    assert_eq!(CHAOS.veth_pair(1), None);
}

#[test]
fn addresses_are_a_slash_30_per_pid() {
    assert_eq!(slash30(1), (Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(10, 0, 0, 6)));
    assert_eq!(slash30(32767), (Ipv4Addr::new(10, 1, 255, 253), Ipv4Addr::new(10, 1, 255, 254)));
    assert_eq!(slash30(4_194_303), (Ipv4Addr::new(10, 255, 255, 253), Ipv4Addr::new(10, 255, 255, 254)));
    let (a, b) = slash30(12345);
    assert_eq!(u32::from(a) & !3, u32::from(b) & !3, "one /30");
}

#[test]
fn the_hosts_file_is_overwritten_in_place_or_not_at_all() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hosts");
    std::fs::write(&path, "127.0.0.1 localhost\n127.0.20.1 writer.test\n").unwrap();
    let inode = std::fs::metadata(&path).unwrap().ino();
    overwrite_in_place(&path, "127.0.0.1 localhost\n127.0.20.2 writer.test\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1 localhost\n127.0.20.2 writer.test\n");
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the same inode, which a bind mount holds");
    let longer = overwrite_in_place(&path, "127.0.0.1 localhost\n127.0.200.2 writer.test\n").unwrap_err();
    assert!(matches!(longer, NetnsError::HostsLength { has: 43, needs: 44, .. }), "{longer:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1 localhost\n127.0.20.2 writer.test\n");
    let missing = overwrite_in_place(&dir.path().join("none"), "x").unwrap_err();
    assert!(matches!(missing, NetnsError::File { .. }), "{missing:?}");
}
