//! Network namespaces for the test tools, so that their addresses, host names and faults touch nothing of the
//! machine: the chaos suite runs its whole driver inside one, the benchmark lab puts its application host in
//! one, linked to the machine by a veth pair.
//!
//! Each namespace has a hosts file of its own, `/etc/netns/<name>/hosts`, which `ip netns exec` bind-mounts
//! over `/etc/hosts` for the programs it starts (and their children inherit the mount). The machine's
//! `/etc/hosts` is never written. Two shapes, on one [`Namespace`]:
//! - a program inside ([`Namespace::command`], or [`exec_in`] by name): the chaos suite re-executes its driver
//!   that way, and everything the driver starts is inside too;
//! - a veth pair to the machine ([`Namespace::link_to_host`]): the lab's database stays on the machine and
//!   its clients and poolers reach it across the link.
//!
//! Names carry the pid of the process that made them ([`Naming`]), so concurrent runs never collide and
//! [`sweep`] can remove what a run killed with SIGKILL left behind. A namespace is deleted on drop, with
//! whatever still runs inside it, its veth pair and its `/etc/netns` directory; a run's signal handling
//! decides when that drop happens.

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::{RunError, run};

#[cfg(test)]
mod tests;

/// How a tool names its namespaces: `<prefix><pid><suffix>`, the pid being that of the process that made
/// it; veth pairs, when there is one, `<veth><pid>d` on the machine and `<veth><pid>a` inside (interface
/// names have at most 15 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Naming {
    pub prefix: &'static str,
    pub suffix: &'static str,
    pub veth: Option<&'static str>,
}

impl Naming {
    /// The namespace of process `pid`.
    pub fn name(&self, pid: u32) -> String {
        format!("{}{pid}{}", self.prefix, self.suffix)
    }

    /// The pid a name of this naming carries; `None` for anybody else's name.
    pub fn pid_of(&self, name: &str) -> Option<u32> {
        let pid = name.strip_prefix(self.prefix)?.strip_suffix(self.suffix)?;
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        pid.parse().ok()
    }

    /// The veth pair of process `pid`: the machine's end, the namespace's end.
    pub fn veth_pair(&self, pid: u32) -> Option<(String, String)> {
        self.veth.map(|veth| (format!("{veth}{pid}d"), format!("{veth}{pid}a")))
    }

    /// Who made namespaces of this naming, for messages (`pgmux-chaos` for `pgmux-chaos-`).
    fn owner(&self) -> &str {
        self.prefix.trim_end_matches('-')
    }
}

/// What went wrong making a namespace or its files.
#[derive(Debug)]
pub enum NetnsError {
    /// An `ip` command failed (or `ip` is missing: iproute2).
    Ip(RunError),
    /// A file under `/etc/netns` could not be read or written.
    File { path: PathBuf, source: io::Error },
    /// The hosts file is not as long as its new text: an in-place overwrite would leave a tail behind.
    HostsLength { path: PathBuf, has: usize, needs: usize },
    /// A link address is on a network the machine already routes to.
    AddressInUse { addr: Ipv4Addr, route: String },
    /// A veth pair was asked of a namespace whose [`Naming`] has no veth names.
    NoVethNames { namespace: String },
}

impl fmt::Display for NetnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetnsError::Ip(e @ RunError::CannotStart { .. }) => write!(f, "{e} (apt-get install iproute2)"),
            NetnsError::Ip(e) => write!(f, "{e}"),
            NetnsError::File { path, source } => write!(f, "{}: {source}", path.display()),
            NetnsError::HostsLength { path, has, needs } => {
                write!(f, "{} has {has} bytes, the new text {needs}", path.display())
            }
            NetnsError::AddressInUse { addr, route } => {
                write!(f, "{addr} is on a network this machine uses ({route}); cannot link a namespace to it")
            }
            NetnsError::NoVethNames { namespace } => write!(f, "{namespace} was not named for a veth pair"),
        }
    }
}

impl std::error::Error for NetnsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NetnsError::Ip(e) => Some(e),
            NetnsError::File { source, .. } => Some(source),
            NetnsError::HostsLength { .. } | NetnsError::AddressInUse { .. } | NetnsError::NoVethNames { .. } => None,
        }
    }
}

/// A namespace of ours, with lo up and a hosts file of its own; deleted on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
    /// The machine's end of the veth pair, once made.
    host_link: Option<String>,
    naming: Naming,
    deleted: bool,
}

impl Namespace {
    /// Create this process's namespace of `naming` with `hosts` as its `/etc/hosts`. Needs root (or
    /// CAP_NET_ADMIN and CAP_SYS_ADMIN). Call [`sweep`] first, so that a dead run's leftovers go.
    pub fn create(naming: Naming, hosts: &str) -> Result<Namespace, NetnsError> {
        let name = naming.name(std::process::id());
        ip(&["netns", "add", &name])?;
        // From here on, the drop removes whatever was made.
        let ns = Namespace { name, host_link: None, naming, deleted: false };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        let dir = ns.etc_dir();
        fs::create_dir_all(&dir).map_err(|source| NetnsError::File { path: dir.clone(), source })?;
        let path = ns.hosts_path();
        fs::write(&path, hosts).map_err(|source| NetnsError::File { path, source })?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/etc/netns/<name>`: what `ip netns exec` binds over files of `/etc` for the commands it runs.
    pub fn etc_dir(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.name)
    }

    /// The namespace's hosts file, as the machine sees it.
    pub fn hosts_path(&self) -> PathBuf {
        hosts_path(&self.name)
    }

    /// `program`, to be run inside: `ip netns exec <name> program`.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        exec_in(&self.name, program)
    }

    /// [`Namespace::command`] as the `postgres` user when we are root ([`exec_as_postgres`]).
    pub fn command_as_postgres(&self, program: impl AsRef<OsStr>) -> Command {
        exec_as_postgres(&self.name, program)
    }

    /// Join the namespace to the machine with a veth pair named by [`Naming::veth_pair`]: the machine's end
    /// gets `host_addr/prefix_len`, the namespace's `ns_addr/prefix_len`, both up.
    pub fn link_to_host(&mut self, host_addr: Ipv4Addr, ns_addr: Ipv4Addr, prefix_len: u8) -> Result<(), NetnsError> {
        let Some((host_end, ns_end)) = self.naming.veth_pair(std::process::id()) else {
            return Err(NetnsError::NoVethNames { namespace: self.name.clone() });
        };
        ip(&["link", "add", &host_end, "type", "veth", "peer", "name", &ns_end])?;
        self.host_link = Some(host_end.clone());
        ip(&["link", "set", &ns_end, "netns", &self.name])?;
        ip(&["addr", "add", &format!("{host_addr}/{prefix_len}"), "dev", &host_end])?;
        ip(&["link", "set", &host_end, "up"])?;
        ip(&["-n", &self.name, "addr", "add", &format!("{ns_addr}/{prefix_len}"), "dev", &ns_end])?;
        ip(&["-n", &self.name, "link", "set", &ns_end, "up"])
    }

    /// Kill whatever still runs inside (only our own children can be there), delete the namespace, its veth
    /// pair and its `/etc/netns` directory. Idempotent.
    pub fn delete(&mut self) {
        if std::mem::replace(&mut self.deleted, true) {
            return;
        }
        remove(&self.name, self.host_link.as_deref());
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.delete();
    }
}

/// `ip netns exec <name> program`: `program` in namespace `name`, with its `/etc/netns/<name>` files.
/// Arguments and the environment pass through; the pid the caller sees is the program's own (`ip` execs
/// it), and so is a parent-death signal set on the command.
pub fn exec_in(name: &str, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", name]).arg(program);
    cmd
}

/// `program` in namespace `name` as the `postgres` user when we are root (PgBouncer refuses to run as
/// root). `setpriv` drops the privileges after `ip` has entered the namespace, and sets the parent-death
/// signal again, which the change of user clears.
pub fn exec_as_postgres(name: &str, program: impl AsRef<OsStr>) -> Command {
    if !crate::as_root() {
        return exec_in(name, program);
    }
    let mut cmd = exec_in(name, "setpriv");
    cmd.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=KILL"]).arg(program);
    cmd
}

/// `/etc/netns/<name>/hosts`.
pub fn hosts_path(name: &str) -> PathBuf {
    Path::new("/etc/netns").join(name).join("hosts")
}

/// Replace the text of a namespace's hosts file by a text of the same length, in place: `ip netns exec`
/// bind-mounted this very inode over `/etc/hosts` for the programs running inside, so a new file renamed
/// over it would leave them reading the old one.
pub fn overwrite_in_place(path: &Path, text: &str) -> Result<(), NetnsError> {
    let file_error = |source| NetnsError::File { path: path.to_owned(), source };
    let current = fs::read(path).map_err(file_error)?;
    if current.len() != text.len() {
        return Err(NetnsError::HostsLength { path: path.to_owned(), has: current.len(), needs: text.len() });
    }
    let mut file = fs::OpenOptions::new().write(true).open(path).map_err(file_error)?;
    file.write_all(text.as_bytes()).map_err(file_error)
}

/// Remove the namespaces (and their veth pairs and `/etc/netns` directories) of `naming` whose process is
/// gone: a run killed with SIGKILL could not clean up after itself.
pub fn sweep(naming: Naming) {
    let mut names: Vec<String> = Vec::new();
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).stderr(Stdio::null()).output() {
        // Lines are "name" or "name (id: 3)".
        let text = String::from_utf8_lossy(&out.stdout);
        names.extend(text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned));
    }
    if let Ok(entries) = fs::read_dir("/etc/netns") {
        names.extend(entries.flatten().filter_map(|e| e.file_name().into_string().ok()));
    }
    names.sort();
    names.dedup();
    for name in names {
        if let Some(pid) = naming.pid_of(&name)
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            eprintln!("{}: removing {name}, left by a run that was killed", naming.owner());
            let host_link = naming.veth_pair(pid).map(|(host_end, _)| host_end);
            remove(&name, host_link.as_deref());
        }
    }
}

/// The /30 of process `pid`, for a veth pair: 10.b.c.d with the pid's bits spread over b, c and d (pids
/// are below 2^22); the machine's end first.
pub fn slash30(pid: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = (pid & 0x3f_ffff) << 2;
    let [_, b, c, d] = base.to_be_bytes();
    (Ipv4Addr::new(10, b, c, d + 1), Ipv4Addr::new(10, b, c, d + 2))
}

/// Refuse an address the machine already routes to other than by its default route: a link there would
/// shadow a network in use.
pub fn check_unused(addr: Ipv4Addr) -> Result<(), NetnsError> {
    let mut cmd = Command::new("ip");
    cmd.args(["-4", "route", "get", &addr.to_string()]);
    let out = match run(cmd, "ip route get") {
        Ok(out) => out,
        // No route at all: nothing here uses it.
        Err(RunError::Failed { .. }) => return Ok(()),
        Err(e) => return Err(NetnsError::Ip(e)),
    };
    let route = String::from_utf8_lossy(&out.stdout);
    if !route.contains(" via ") && !route.starts_with("local") {
        return Err(NetnsError::AddressInUse { addr, route: route.trim().to_owned() });
    }
    Ok(())
}

/// Kill what runs inside `name`, delete it, the machine's end of its veth pair if any, and its files.
fn remove(name: &str, host_link: Option<&str>) {
    kill_inside(name);
    // Deleting the namespace destroys the veth end inside it, and with it the pair; the link is deleted
    // again in case the pair never got as far as the namespace.
    let _ = ip(&["netns", "del", name]);
    if let Some(link) = host_link {
        let _ = Command::new("ip").args(["link", "del", link]).stderr(Stdio::null()).status();
    }
    let _ = fs::remove_dir_all(Path::new("/etc/netns").join(name));
}

/// SIGKILL every process in namespace `name`, by pid (`ip netns pids`); they can only be ours.
fn kill_inside(name: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", name]).stderr(Stdio::null()).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
        crate::send_signal(pid, libc::SIGKILL);
    }
}

fn ip(args: &[&str]) -> Result<(), NetnsError> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    run(cmd, &format!("ip {}", args.join(" "))).map(drop).map_err(NetnsError::Ip)
}
