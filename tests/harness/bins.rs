//! Finding the PostgreSQL server binaries, and failing loudly (never skipping) when they are missing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding `initdb` and `postgres`.
///
/// `PGMUX_PG_BIN` if set (and then only that), else the highest-numbered `/usr/lib/postgresql/*/bin` that has
/// both, else `pg_config --bindir`. The error names what to install.
pub fn pg_bin_dir() -> Result<PathBuf, String> {
    find_bin_dir(std::env::var_os("PGMUX_PG_BIN"), Path::new("/usr/lib/postgresql"))
}

/// [`pg_bin_dir`], looked up once per process; panics with its message.
pub(crate) fn bin_dir() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(pg_bin_dir) {
        Ok(dir) => dir,
        Err(message) => panic!("\n\n*** pgmux-testkit: {message} ***\n\n"),
    }
}

/// `psql` beside the server binaries if it is there (Debian puts it there), else whatever is on `PATH`.
pub(crate) fn psql_program() -> PathBuf {
    let beside = bin_dir().join("psql");
    if beside.is_file() { beside } else { PathBuf::from("psql") }
}

pub(crate) fn find_bin_dir(env: Option<OsString>, debian_root: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = env {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) { Ok(dir) } else { Err(not_found(&format!("PGMUX_PG_BIN={}", dir.display()))) };
    }
    let mut searched = vec![format!("{}/*/bin", debian_root.display())];
    if let Some(dir) = newest_debian_bin(debian_root) {
        return Ok(dir);
    }
    searched.push("`pg_config --bindir`".to_owned());
    if let Some(dir) = pg_config_bindir().filter(|dir| has_server(dir)) {
        return Ok(dir);
    }
    Err(not_found(&searched.join(" or ")))
}

fn not_found(searched: &str) -> String {
    format!(
        "PostgreSQL server binaries (initdb, postgres) not found in {searched}; install them with \
         `apt-get install postgresql-15` (Debian 12) or set PGMUX_PG_BIN=/path/to/bin"
    )
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

fn newest_debian_bin(root: &Path) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            // "15", "9.6": compare as (major, minor).
            let name = entry.file_name().into_string().ok()?;
            let mut parts = name.split('.').map(str::parse::<u32>);
            let major = parts.next()?.ok()?;
            let minor = parts.next().map_or(Some(0), Result::ok)?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some(((major, minor), bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
}

fn pg_config_bindir() -> Option<PathBuf> {
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?;
    Some(PathBuf::from(dir.trim()))
}
