//! The network namespace every part of a chaos run lives in, so that its addresses, its host name and its
//! faults touch nothing of the machine: created by the outer process, which then re-executes the driver
//! inside it under `ip netns exec`, and removed after it, on drop, on SIGINT/SIGTERM, and (for a run that
//! was killed) by the next run's sweep.
//!
//! Why re-exec rather than `setns` on client threads: `ip netns exec` also gives the command a mount
//! namespace in which `/etc/netns/<ns>/hosts` is bind-mounted over `/etc/hosts`, and every process started
//! from it (PostgreSQL, Toxiproxy, pgmux, PgBouncer, the clients) inherits both. With `setns`, each child
//! would need the same mount dance before exec, and the driver's own resolver would still read the machine's
//! file. The machine's `/etc/hosts` is never opened for writing: flips go to `/etc/netns/<ns>/hosts`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Every namespace and `/etc/netns` directory of ours is `pgmux-chaos-<pid of the outer process>`.
pub const PREFIX: &str = "pgmux-chaos-";
/// The host name clients and poolers connect to; it points at node A's or node B's Toxiproxy address.
pub const WRITER_NAME: &str = "writer.test";

/// A namespace of ours, with lo up and a hosts file of its own; deleted on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
    deleted: bool,
}

impl Namespace {
    /// Sweep leftovers of dead runs, then create `pgmux-chaos-<our pid>` with `hosts` as its hosts file.
    pub fn create(hosts: &str) -> Result<Namespace, String> {
        if !pgmux_testkit::as_root() {
            return Err("the chaos suite needs root (network namespaces, PostgreSQL as the postgres user)".into());
        }
        sweep_leftovers();
        let name = format!("{PREFIX}{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = Namespace { name, deleted: false };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        let dir = ns.etc_dir();
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        fs::write(dir.join("hosts"), hosts).map_err(|e| format!("cannot write {}/hosts: {e}", dir.display()))?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/etc/netns/<ns>`: what `ip netns exec` binds over `/etc` for the commands it runs.
    pub fn etc_dir(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.name)
    }

    /// A command that runs `program` inside the namespace (with its hosts file as `/etc/hosts`).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Kill whatever still runs inside (only our own children can be there), delete the namespace and its
    /// `/etc/netns` directory. Idempotent.
    pub fn delete(&mut self) {
        if std::mem::replace(&mut self.deleted, true) {
            return;
        }
        remove(&self.name);
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.delete();
    }
}

fn remove(name: &str) {
    kill_inside(name);
    let _ = ip(&["netns", "del", name]);
    let _ = fs::remove_dir_all(Path::new("/etc/netns").join(name));
}

/// SIGKILL every process in namespace `name`, by pid (`ip netns pids`); they can only be ours.
fn kill_inside(name: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", name]).stderr(Stdio::null()).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
        pgmux_testkit::send_signal(pid, libc::SIGKILL);
    }
}

/// Remove namespaces and `/etc/netns` directories named `pgmux-chaos-<pid>` whose process is gone: a run
/// killed with SIGKILL could not clean up after itself.
pub fn sweep_leftovers() {
    let mut names: Vec<String> = Vec::new();
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
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
        if let Some(pid) = name.strip_prefix(PREFIX).and_then(|p| p.parse::<u32>().ok())
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            eprintln!("pgmux-chaos: removing {name}, left by a run that was killed");
            remove(&name);
        }
    }
    sweep_scratch_dirs();
}

/// Data directories `pgmux-chaos-<pid>-*` (in /dev/shm or the temporary directory) of dead processes.
fn sweep_scratch_dirs() {
    for base in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        let Ok(entries) = fs::read_dir(&base) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid =
                name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()).and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The namespace's hosts file, seen from inside: flipped by a same-length overwrite in place, because
/// `ip netns exec` bind-mounted this very inode over `/etc/hosts` (a rename would leave the mount on the old
/// file). Always written through its `/etc/netns` path, never through `/etc/hosts`.
#[derive(Debug, Clone)]
pub struct HostsFile {
    path: PathBuf,
}

impl HostsFile {
    pub fn new(namespace: &str) -> Result<HostsFile, String> {
        if !namespace.starts_with(PREFIX) {
            return Err(format!("{namespace:?} is not a chaos namespace"));
        }
        Ok(HostsFile { path: Path::new("/etc/netns").join(namespace).join("hosts") })
    }

    /// The file's text when the writer name points at `addr` (all addresses used have the same length).
    pub fn text(addr: &str) -> String {
        format!("127.0.0.1 localhost\n{addr} {WRITER_NAME}\n")
    }

    /// Point the writer name at `addr`, overwriting the file in place.
    pub fn point_at(&self, addr: &str) -> Result<(), String> {
        use std::io::Write;
        let text = HostsFile::text(addr);
        let current = fs::read(&self.path).map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        if current.len() != text.len() {
            return Err(format!("{} has {} bytes, the flip needs {}", self.path.display(), current.len(), text.len()));
        }
        let mut file = fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| format!("cannot open {}: {e}", self.path.display()))?;
        file.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}
