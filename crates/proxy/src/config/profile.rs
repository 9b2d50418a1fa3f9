//! The profiles pgmux runs under (sidecar, Lambda, Lambda Managed Instances) and the defaults each changes.

use super::SslMode;

/// How pgmux runs; it decides some defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// On EC2 or in a container, next to the application.
    Sidecar,
    /// As an AWS Lambda extension: listen on 127.0.0.1:5432, trust loopback clients, verify the database's
    /// certificate, log JSON. No control connection by default: one invocation at a time per execution
    /// environment, where a control connection each would double the database connections.
    Lambda,
    /// As an extension on Lambda Managed Instances (many concurrent invocations per environment): as
    /// `Lambda`, with the pool sized from the database.
    LambdaManaged,
}

impl Profile {
    /// Either Lambda profile.
    pub fn is_lambda(self) -> bool {
        matches!(self, Profile::Lambda | Profile::LambdaManaged)
    }

    /// The TLS mode towards the database when neither the key nor database_url sets one.
    pub(super) fn default_sslmode(self) -> SslMode {
        match self {
            Profile::Sidecar => SslMode::Prefer,
            Profile::Lambda | Profile::LambdaManaged => SslMode::VerifyFull,
        }
    }

    /// Defaults that differ from the key table's, as (key, value) pairs.
    pub(super) fn defaults(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Profile::Sidecar => &[],
            Profile::Lambda => &[
                ("listen", "127.0.0.1:5432"),
                ("client_auth", "trust"),
                ("log_format", "json"),
                // A connection idle across a freeze may be dead: check it with a round trip sooner.
                ("server_check_delay", "1s"),
                ("max_connections_percent", "0"),
            ],
            Profile::LambdaManaged => &[
                ("listen", "127.0.0.1:5432"),
                ("client_auth", "trust"),
                ("log_format", "json"),
                ("server_check_delay", "1s"),
            ],
        }
    }
}
