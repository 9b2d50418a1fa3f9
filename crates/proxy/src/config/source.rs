//! Where a new configuration comes from when pgmux is told to reload (`SIGHUP`, the console's `RELOAD`):
//! the binary re-reads the file and the environment and builds what AWS logins need; the pooler applies
//! it ([`crate::ops::reload`]). Tests plug in their own source.

use std::fmt;

use crate::config::Config;
use crate::config::credentials::ServerAccess;

/// A source of configurations for reloads.
pub trait ConfigSource: Send + Sync + fmt::Debug {
    /// Reads the configuration again, with what its logins need. The error says what is wrong (key and
    /// reason), and the running configuration stays.
    fn load(&self) -> Result<(Config, ServerAccess), String>;

    /// A new configuration is in force (the binary applies the log level here).
    fn applied(&self, _config: &Config) {}
}
