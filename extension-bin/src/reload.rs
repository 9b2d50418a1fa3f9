//! Reloading the configuration: the file and the environment read again as at start-up (same profile),
//! AWS logins rebuilt, and the log level changed once the pooler has the new configuration in force.
//! `SIGHUP` in a sidecar and the console's `RELOAD` both come here.

use std::path::PathBuf;
use std::sync::Arc;

use pgmux_proxy::config::{Config, Profile};
use pgmux_proxy::{Admin, ConfigSource, ServerAccess, SourceError};

/// Changes the log filter of the running subscriber.
pub type SetLogLevel = Box<dyn Fn(&str) -> Result<(), LogLevelError> + Send + Sync>;

/// Why the log level could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum LogLevelError {
    /// Not a filter tracing can read.
    #[error(transparent)]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    /// The subscriber is gone.
    #[error(transparent)]
    Reload(#[from] tracing_subscriber::reload::Error),
}

/// The configuration file and environment pgmux started from.
pub struct FileSource {
    pub path: Option<PathBuf>,
    pub profile: Profile,
    /// The log level `-q` / `-v` asked for, unless the environment sets one.
    pub log_level: Option<&'static str>,
    pub set_log_level: SetLogLevel,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource").field("path", &self.path).field("profile", &self.profile).finish()
    }
}

impl ConfigSource for FileSource {
    fn load(&self) -> Result<(Config, ServerAccess), SourceError> {
        let loaded =
            crate::config_file::load(self.profile, self.path.as_deref(), crate::config_file::env(self.log_level))?;
        loaded.warn();
        let config = loaded.config;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&config.log_level) {
            return Err(SourceError::Setting { key: "log_level", value: config.log_level.clone(), reason: e.into() });
        }
        let access = crate::server_access(&config).map_err(|e| SourceError::Access(e.into()))?;
        Ok((config, access))
    }

    fn applied(&self, config: &Config) {
        if let Err(e) = (self.set_log_level)(&config.log_level) {
            tracing::warn!(error = %e, "could not change the log level");
        }
    }
}

/// Reloads on every `SIGHUP` until the process ends.
pub fn on_sighup(admin: Admin) -> Result<(), std::io::Error> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the configuration");
            // Reading the file and building AWS logins block briefly; keep them off the runtime's thread.
            let admin = admin.clone();
            match tokio::task::spawn_blocking(move || admin.reload()).await {
                Ok(Ok(outcome)) => tracing::info!(%outcome, "SIGHUP: reloaded"),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, key = e.key(), "SIGHUP: reload failed; the running configuration stays");
                }
                Err(e) => tracing::error!(error = %e, "SIGHUP: reload panicked"),
            }
        }
    });
    Ok(())
}

/// The file source for `path` and `profile`.
pub fn source(
    path: Option<PathBuf>,
    profile: Profile,
    log_level: Option<&'static str>,
    set_log_level: SetLogLevel,
) -> Arc<dyn ConfigSource> {
    Arc::new(FileSource { path, profile, log_level, set_log_level })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(file: &str) -> Result<(Config, ServerAccess), SourceError> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("pgmux.toml");
        std::fs::write(&path, format!("database_url = \"postgres://app:pw@127.0.0.1/app\"\n{file}")).expect("write");
        FileSource { path: Some(path), profile: Profile::Sidecar, log_level: None, set_log_level: Box::new(|_| Ok(())) }
            .load()
    }

    #[test]
    fn a_bad_file_says_which_key_and_where_its_value_came_from() {
        let err = load("pool_max = \"lots\"").expect_err("a bad pool_max");
        assert!(matches!(&err, SourceError::Config(_)), "{err:?}");
        assert_eq!(err.key(), Some("pool_max"));
        assert_eq!(err.to_string(), "invalid value for pool_max (config file): expected a whole number, got \"lots\"");
    }

    #[test]
    fn a_log_level_the_logger_cannot_read_is_refused_by_name() {
        let err = load("log_level = \"info,[{\"").expect_err("a bad log filter");
        assert!(matches!(&err, SourceError::Setting { key: "log_level", .. }), "{err:?}");
        assert!(err.to_string().starts_with("invalid value for log_level: \"info,[{\": "), "{err}");
        load("log_level = \"debug\"").expect("a good file loads");
    }

    #[test]
    fn a_pgbouncer_ini_is_read_again_as_an_ini() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("pgbouncer.ini");
        let source = FileSource {
            path: Some(path.clone()),
            profile: Profile::Sidecar,
            log_level: None,
            set_log_level: Box::new(|_| Ok(())),
        };
        std::fs::write(&path, "[databases]\napp = host=127.0.0.1 dbname=app\n[pgbouncer]\nlisten_port = 7000\n")
            .expect("write");
        let (config, _) = source.load().expect("an ini loads");
        assert_eq!((config.databases.len(), config.listen.port()), (1, 7000));
        std::fs::write(&path, "[databases]\napp = host=127.0.0.1 dbname=app\n[pgbouncer]\npool_mode = statement\n")
            .expect("write");
        let err = source.load().expect_err("statement mode");
        assert_eq!(err.key(), Some("pool_mode"));
        assert!(err.to_string().starts_with(&format!("{}:4: pool_mode = statement", path.display())), "{err}");
    }
}
