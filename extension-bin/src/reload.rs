//! Reloading the configuration: the file and the environment read again as at start-up (same profile),
//! AWS logins rebuilt, and the log level changed once the pooler has the new configuration in force.
//! `SIGHUP` in a sidecar and the console's `RELOAD` both come here.

use std::path::PathBuf;
use std::sync::Arc;

use pgmux_proxy::config::{Config, Profile};
use pgmux_proxy::{Admin, ConfigSource, ServerAccess};

/// Changes the log filter of the running subscriber.
pub type SetLogLevel = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The configuration file and environment pgmux started from.
pub struct FileSource {
    pub path: Option<PathBuf>,
    pub profile: Profile,
    pub set_log_level: SetLogLevel,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource").field("path", &self.path).field("profile", &self.profile).finish()
    }
}

impl ConfigSource for FileSource {
    fn load(&self) -> Result<(Config, ServerAccess), String> {
        let config =
            Config::load_for(self.profile, self.path.as_deref(), std::env::vars()).map_err(|e| e.to_string())?;
        tracing_subscriber::EnvFilter::try_new(&config.log_level)
            .map_err(|e| format!("invalid value for log_level: {:?}: {e}", config.log_level))?;
        let access = crate::server_access(&config).map_err(|e| e.message)?;
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
                Ok(Err(e)) => tracing::error!(error = %e, "SIGHUP: reload failed; the running configuration stays"),
                Err(e) => tracing::error!(error = %e, "SIGHUP: reload panicked"),
            }
        }
    });
    Ok(())
}

/// The file source for `path` and `profile`.
pub fn source(path: Option<PathBuf>, profile: Profile, set_log_level: SetLogLevel) -> Arc<dyn ConfigSource> {
    Arc::new(FileSource { path, profile, set_log_level })
}
