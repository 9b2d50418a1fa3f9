//! OS plumbing the harness cannot do in safe std: running PostgreSQL's programs as the `postgres` user when we
//! are root, tying a child's life to ours, signals, liveness checks, the clock-tick rate of `/proc`'s times,
//! and the open-file limit.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// The system user PostgreSQL runs as when the tests run as root.
const PG_SYSTEM_USER: &str = "postgres";

pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// uid and gid to run PostgreSQL's programs as: `None` when not root (run as ourselves).
fn run_as() -> Option<(u32, u32)> {
    static RUN_AS: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *RUN_AS.get_or_init(|| {
        if effective_uid() != 0 {
            return None;
        }
        match lookup_user(PG_SYSTEM_USER) {
            Ok(ids) => Some(ids),
            Err(e) => panic!(
                "\n\n*** pgmux-testkit: the tests run as root and PostgreSQL refuses to, but the `{PG_SYSTEM_USER}` \
                 system user cannot be found ({e}); create it (`useradd --system {PG_SYSTEM_USER}`, or install \
                 postgresql-15) or run the tests as a non-root user ***\n\n"
            ),
        }
    })
}

fn lookup_user(name: &str) -> io::Result<(u32, u32)> {
    let c_name = CString::new(name).map_err(io::Error::other)?;
    let mut buf: Vec<libc::c_char> = vec![0; 1024];
    loop {
        // SAFETY: passwd is plain data; getpwnam_r fills it, pointing its strings into `buf`, which outlives
        // every use (we only read the two integers before `buf` is dropped).
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: all pointers are valid for the lengths given.
        let rc = unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        match rc {
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            0 if found.is_null() => {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such user"));
            }
            0 => return Ok((pwd.pw_uid, pwd.pw_gid)),
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// Hand a path we created to the user PostgreSQL runs as (no-op when not root). Public for other programs
/// that refuse to run as root, such as PgBouncer in the benchmark, whose files must be theirs.
pub fn give_to_postgres(path: &Path) -> io::Result<()> {
    match run_as() {
        Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

/// A command for one of PostgreSQL's programs, run as the `postgres` user when we are root.
///
/// std drops supplementary groups itself (`setgroups(0, NULL)`) when root sets a uid without `groups()`.
pub(crate) fn pg_command(program: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(program);
    // Our own cwd may be unreadable for `postgres` (initdb complains); the server directory is its own.
    cmd.current_dir(cwd);
    run_as_postgres(&mut cmd);
    cmd
}

/// Run `cmd` as the user PostgreSQL runs as: the `postgres` system user when we are root, else ourselves.
/// For programs besides PostgreSQL's own that refuse to run as root (PgBouncer in the benchmark).
pub fn run_as_postgres(cmd: &mut Command) {
    if let Some((uid, gid)) = run_as() {
        cmd.uid(uid).gid(gid);
    }
}

/// Make the child get SIGKILL when the thread that spawns it exits, including when the whole test process is
/// killed. The spawning thread must live as long as the child (see `server::Postmaster`).
pub fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec (after std's setuid, which would clear the setting) and
    // only makes async-signal-safe system calls; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would ever kill this child.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Send `signal` to `pid`; false if the process does not exist.
pub fn send_signal(pid: u32, signal: libc::c_int) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// Whether a process with this pid exists (possibly owned by someone else).
pub(crate) fn pid_alive(pid: u32) -> bool {
    send_signal(pid, 0) || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Bytes available to us on the filesystem holding `path`, if it can be asked.
pub(crate) fn available_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, filled in by the call.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a valid out pointer.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

/// Block until this process holds an exclusive `flock` on `file`; released when the file is closed. Used to
/// serialise tool builds between test processes.
pub(crate) fn lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor we own for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/<pid>/stat`'s times (100 on Linux, but it is not ours to assume).
pub(crate) fn clock_ticks_per_second() -> u64 {
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
