//! The application host of the network lab: a network namespace of its own, joined to the machine's by a
//! veth pair, with its own `/etc/hosts` (`/etc/netns/<name>/hosts`, which `ip netns exec` mounts over
//! `/etc/hosts` for the programs it starts) in which the database's name resolves to the machine's end of
//! the pair. The machine's side is the database host: PostgreSQL and the delay line run there.
//!
//! Everything is named after the driver's pid (`pgmux-bench-<pid>-app`, interfaces `pgmb<pid>d` and
//! `pgmb<pid>a`, addresses in 10.0.0.0/8 derived from the pid), so that concurrent drivers do not collide and
//! a later driver can remove what a killed one left behind. Dropping the [`AppHost`] removes the namespace,
//! the pair and the hosts file; the programs started in it die with the driver (`PR_SET_PDEATHSIG`).

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The name the database is reached by, in the application host's hosts file and in its certificate.
pub const DB_HOST_NAME: &str = "db.pgmux.test";

const PREFIX: &str = "pgmux-bench-";

/// The application host's namespace and its link to the machine.
#[derive(Debug)]
pub struct AppHost {
    name: String,
    /// The veth end that stays on the machine (the database host).
    db_link: String,
    /// The machine's end of the pair: what [`DB_HOST_NAME`] resolves to on the application host.
    pub db_addr: Ipv4Addr,
    /// The application host's address, where its poolers listen (reachable from the machine, for the
    /// driver's readiness checks).
    pub app_addr: Ipv4Addr,
    hosts_dir: PathBuf,
}

impl AppHost {
    /// Create the namespace, the veth pair, the addresses and the hosts file. Needs root (or CAP_NET_ADMIN
    /// and CAP_SYS_ADMIN); the error says which command failed and why.
    pub fn create() -> Result<AppHost, String> {
        remove_orphans();
        let pid = std::process::id();
        let (db_addr, app_addr) = addresses(pid);
        check_unused(db_addr)?;
        let name = format!("{PREFIX}{pid}-app");
        let host = AppHost {
            db_link: format!("pgmb{pid}d"),
            hosts_dir: Path::new("/etc/netns").join(&name),
            name,
            db_addr,
            app_addr,
        };
        // From here on, Drop cleans up whatever was made.
        host.build().map(|()| host)
    }

    fn build(&self) -> Result<(), String> {
        let app_link = format!("{}a", self.db_link.trim_end_matches('d'));
        ip(&["netns", "add", &self.name])?;
        ip(&["link", "add", &self.db_link, "type", "veth", "peer", "name", &app_link])?;
        ip(&["link", "set", &app_link, "netns", &self.name])?;
        ip(&["addr", "add", &format!("{}/30", self.db_addr), "dev", &self.db_link])?;
        ip(&["link", "set", &self.db_link, "up"])?;
        ip(&["-n", &self.name, "addr", "add", &format!("{}/30", self.app_addr), "dev", &app_link])?;
        ip(&["-n", &self.name, "link", "set", &app_link, "up"])?;
        ip(&["-n", &self.name, "link", "set", "lo", "up"])?;
        std::fs::create_dir_all(&self.hosts_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.hosts_dir.display()))?;
        let hosts = format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n{}\t{DB_HOST_NAME}\n", self.db_addr);
        std::fs::write(self.hosts_dir.join("hosts"), hosts)
            .map_err(|e| format!("cannot write {}/hosts: {e}", self.hosts_dir.display()))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `program`, to be run on the application host: `ip netns exec <name> program`. Arguments and the
    /// environment pass through; the pid the caller sees is the program's own (`ip` execs it).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        exec_in(&self.name, program)
    }

    /// `program` on the application host as the `postgres` user when we are root (PgBouncer refuses to run
    /// as root). `setpriv` drops the privileges after `ip` has entered the namespace, and sets the
    /// parent-death signal again, which the change of user clears.
    pub fn command_as_postgres(&self, program: impl AsRef<OsStr>) -> Command {
        exec_as_postgres(&self.name, program)
    }
}

/// [`AppHost::command_as_postgres`] for namespace `name`.
pub fn exec_as_postgres(name: &str, program: impl AsRef<OsStr>) -> Command {
    if !pgmux_testkit::as_root() {
        return exec_in(name, program);
    }
    let mut cmd = exec_in(name, "setpriv");
    cmd.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=KILL"]).arg(program);
    cmd
}

impl Drop for AppHost {
    fn drop(&mut self) {
        // Deleting the namespace destroys the veth end inside it, and with it the pair.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.db_link]);
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
    }
}

/// `ip netns exec <name> program`: `program` in namespace `name`, with its `/etc/netns/<name>` files.
pub fn exec_in(name: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", name]).arg(program);
    cmd
}

/// The /30 of driver `pid`: 10.b.c.d with the pid's bits spread over b, c and d (pids are below 2^22).
pub fn addresses(pid: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = (pid & 0x3f_ffff) << 2;
    let [_, b, c, d] = base.to_be_bytes();
    (Ipv4Addr::new(10, b, c, d + 1), Ipv4Addr::new(10, b, c, d + 2))
}

/// Refuse to shadow a network the machine already routes to.
fn check_unused(addr: Ipv4Addr) -> Result<(), String> {
    let out = Command::new("ip")
        .args(["-4", "route", "get", &addr.to_string()])
        .output()
        .map_err(|e| format!("cannot run ip (apt-get install iproute2): {e}"))?;
    let route = String::from_utf8_lossy(&out.stdout);
    // Only the default route may cover it; anything more specific is a network in use here.
    if out.status.success() && !route.contains(" via ") && !route.starts_with("local") {
        return Err(format!("{addr} is on a network this machine uses ({}); cannot build the lab", route.trim()));
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Remove the namespaces, links and hosts files of drivers that are gone (killed with SIGKILL: their
/// children died with them, but nobody ran the clean-up).
fn remove_orphans() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.strip_suffix("-app")) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
            let _ = ip(&["link", "del", &format!("pgmb{pid}d")]);
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_a_slash_30_per_pid() {
        assert_eq!(addresses(1), (Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(10, 0, 0, 6)));
        assert_eq!(addresses(32767), (Ipv4Addr::new(10, 1, 255, 253), Ipv4Addr::new(10, 1, 255, 254)));
        assert_eq!(addresses(4_194_303), (Ipv4Addr::new(10, 255, 255, 253), Ipv4Addr::new(10, 255, 255, 254)));
        let (a, b) = addresses(12345);
        assert_eq!((u32::from(a) & !3, u32::from(b) & !3), (u32::from(a) & !3, u32::from(a) & !3));
    }
}
