//! The configuration file pgmux was given, in either of its formats: pgmux's own TOML, or PgBouncer's
//! `pgbouncer.ini` (docs/migrating-from-pgbouncer.md). A name ending in `.ini` is PgBouncer's and one
//! ending in `.toml` pgmux's; any other is PgBouncer's if its first line that is not blank or a comment
//! opens one of PgBouncer's sections or is an `%include`. Start-up, `pgmux check` and every reload read
//! the file through [`load`], so they cannot disagree about it.

use std::path::Path;

use pgmux_proxy::config::{Config, ConfigError, Profile, pgbouncer_ini};

/// A configuration, and for a PgBouncer file the one warning about what in it pgmux does not carry out.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub warning: Option<String>,
}

impl Loaded {
    /// Logs the warning, if there is one (after logging is set up).
    pub fn warn(&self) {
        if let Some(warning) = &self.warning {
            tracing::warn!("{warning}");
        }
    }
}

/// Reads the file at `path` (none: the environment alone) in its format, with `profile`'s defaults and then
/// `env`.
pub fn load(profile: Profile, path: Option<&Path>, env: Vec<(String, String)>) -> Result<Loaded, ConfigError> {
    match path {
        Some(path) if is_ini(path)? => {
            let ini = pgbouncer_ini::read(profile, path, env)?;
            Ok(Loaded { warning: ini.warning(), config: ini.config })
        }
        _ => Ok(Loaded { config: Config::load_for(profile, path, env)?, warning: None }),
    }
}

/// Whether `path` is a PgBouncer file; its text is read only when its name does not say.
fn is_ini(path: &Path) -> Result<bool, ConfigError> {
    let named = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let text = match named.as_deref() {
        Some("ini" | "toml") => String::new(),
        _ => std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), reason: e.to_string() })?,
    };
    Ok(pgbouncer_ini::looks_like_ini(path, &text))
}

/// The process's environment, with `PGMUX_LOG_LEVEL` set to `log_level` (from `-q` / `-v`) unless the
/// environment sets it itself: the command line's verbosity then holds across reloads, as a variable would.
pub fn env(log_level: Option<&str>) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    if let Some(level) = log_level
        && !vars.iter().any(|(k, _)| k == "PGMUX_LOG_LEVEL")
    {
        vars.push(("PGMUX_LOG_LEVEL".to_owned(), level.to_owned()));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_format_is_read_from_its_name_or_its_first_section() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ini = "[databases]\napp = host=127.0.0.1 dbname=app\n[pgbouncer]\nlisten_port = 7432\nlogfile = x.log\n";
        for name in ["pgbouncer.ini", "pgbouncer.conf"] {
            let path = dir.path().join(name);
            std::fs::write(&path, ini).expect("write");
            let loaded = load(Profile::Sidecar, Some(&path), Vec::new()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(loaded.config.listen.port(), 7432, "{name}");
            assert!(loaded.warning.as_deref().is_some_and(|w| w.contains("logfile")), "{name}: {loaded:?}");
        }
        let toml = "database_url = \"postgres://app:pw@127.0.0.1/app\"\nlisten = \"127.0.0.1:7433\"\n";
        for name in ["pgmux.toml", "pgmux.conf"] {
            let path = dir.path().join(name);
            std::fs::write(&path, toml).expect("write");
            let loaded = load(Profile::Sidecar, Some(&path), Vec::new()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!((loaded.config.listen.port(), loaded.warning), (7433, None), "{name}");
        }
        let missing = load(Profile::Sidecar, Some(&dir.path().join("nope.conf")), Vec::new());
        assert!(matches!(missing, Err(ConfigError::Read { .. })), "{missing:?}");
    }
}
