//! Where a new configuration comes from when pgmux is told to reload (`SIGHUP`, the console's `RELOAD`):
//! the binary re-reads the file and the environment and builds what AWS logins need; the pooler applies
//! it ([`crate::ops::reload`]). Tests plug in their own source.

use std::error::Error;
use std::fmt;

use crate::config::credentials::ServerAccess;
use crate::config::{Config, ConfigError};

/// A source of configurations for reloads.
pub trait ConfigSource: Send + Sync + fmt::Debug {
    /// Reads the configuration again, with what its logins need. The error says what is wrong (key and
    /// reason), and the running configuration stays.
    fn load(&self) -> Result<(Config, ServerAccess), SourceError>;

    /// A new configuration is in force (the binary applies the log level here).
    fn applied(&self, _config: &Config) {}
}

/// Why a source could not produce a configuration.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file and the environment do not make a usable configuration: the file cannot be read or is not
    /// TOML, a key is unknown or missing, or a value is wrong (the message names the key and where the value
    /// came from).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A value the pooler accepts but the source's own user does not (the binary's `log_level`, a filter
    /// its logger must parse).
    #[error("invalid value for {key}: {value:?}: {reason}")]
    Setting {
        /// The key.
        key: &'static str,
        /// Its value.
        value: String,
        /// Why it was refused.
        reason: Box<dyn Error + Send + Sync>,
    },
    /// What the logins need could not be built from the configuration (AWS credentials, a secret, the CAs
    /// to trust); the binary's own error, to downcast.
    #[error(transparent)]
    Access(Box<dyn Error + Send + Sync>),
}

impl SourceError {
    /// The key at fault, if one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            SourceError::Config(e) => e.key(),
            SourceError::Setting { key, .. } => Some(key),
            SourceError::Access(_) => None,
        }
    }
}
