//! The checks a configuration passes once every key is read: values that are each valid on their own
//! but do not work together, or that only make sense with another key set.

use std::collections::BTreeMap;

use super::{CONSOLE_DATABASE, ClientAuth, Config, ConfigError, Reason, Source, SslMode, aurora, routes};

impl Config {
    /// Checks values that are each valid but do not work together.
    pub(super) fn validate(&self, sources: &BTreeMap<&'static str, Source>) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, rule: &'static str| ConfigError::Invalid {
            key: key.to_owned(),
            origin: sources.get(key).cloned().unwrap_or(Source::Default),
            reason: Reason::Rule(rule),
        };
        if self.database_url.login.host.is_empty() && self.secret_arn.is_empty() && self.databases.is_empty() {
            return Err(ConfigError::Missing("database_url"));
        }
        routes::validate(&self.databases, &self.users)?;
        aurora::validate(self)?;
        self.validate_pool(&invalid)?;
        self.validate_limits(&invalid)?;
        self.validate_client_auth(&invalid)?;
        self.validate_client_tls(&invalid)?;
        self.validate_metrics(&invalid)?;
        self.validate_intervals(&invalid)?;
        Ok(())
    }

    /// What one client may send and how many clients and threads there are.
    fn validate_limits(&self, invalid: &impl Fn(&'static str, &'static str) -> ConfigError) -> Result<(), ConfigError> {
        if !(10_000..=(1 << 30) - 1).contains(&self.max_client_message) {
            return Err(invalid(
                "max_client_message",
                "must be between 10000 and 1073741823 bytes (PostgreSQL's own limit)",
            ));
        }
        if self.max_client_buffers < self.max_client_message {
            return Err(invalid(
                "max_client_buffers",
                "must be at least max_client_message, or no message of that size could ever be received",
            ));
        }
        if self.max_client_conn == 0 {
            return Err(invalid("max_client_conn", "must be at least 1"));
        }
        if self.workers == 0 || self.workers > 256 {
            return Err(invalid("workers", "must be between 1 and 256"));
        }
        Ok(())
    }

    /// What each client_auth method needs to check a client against, and where it may be used.
    fn validate_client_auth(
        &self,
        invalid: &impl Fn(&'static str, &'static str) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let password_checked =
            matches!(self.client_auth, ClientAuth::Md5 | ClientAuth::ScramSha256 | ClientAuth::Plain);
        if password_checked && self.client_password().is_none() && self.databases.is_empty() {
            return Err(invalid(
                "client_auth",
                "md5, scram-sha-256 and plain need a password to check clients against: set client_password \
                 (database_url has none)",
            ));
        }
        if self.client_auth == ClientAuth::Hba && self.auth_hba_file.is_none() {
            return Err(invalid("auth_hba_file", "client_auth = hba reads its rules from auth_hba_file: set it"));
        }
        if self.client_auth == ClientAuth::Cert && self.tls_client_ca.is_none() {
            return Err(invalid(
                "tls_client_ca",
                "client_auth = cert checks client certificates against tls_client_ca: set it",
            ));
        }
        if self.client_auth == ClientAuth::Trust && self.profile.is_lambda() && !self.listen.ip().is_loopback() {
            return Err(invalid("listen", "in Lambda mode clients are trusted, so pgmux listens on loopback only"));
        }
        if self.auth_dbname == CONSOLE_DATABASE {
            // PgBouncer's words, which its test suite and operators' scripts look for in the log.
            return Err(invalid(
                "auth_dbname",
                "cannot use the reserved \"pgbouncer\" database as an auth_dbname: it is the admin console, which \
                 has no users to look up; name a [[databases]] entry on the server",
            ));
        }
        Ok(())
    }

    /// The CloudWatch namespace, as CloudWatch accepts it.
    fn validate_metrics(
        &self,
        invalid: &impl Fn(&'static str, &'static str) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let namespace_ok = |ns: &str| {
            (1..=255).contains(&ns.len())
                && !ns.starts_with("AWS/")
                && ns.chars().all(|c| c.is_ascii_alphanumeric() || "._#:/-".contains(c))
        };
        if !namespace_ok(&self.metrics_namespace) {
            return Err(invalid(
                "metrics_namespace",
                "must be 1 to 255 of A-Z a-z 0-9 . _ # : / - and not start with AWS/ (reserved for AWS)",
            ));
        }
        Ok(())
    }

    /// Waits and intervals that make no sense at zero.
    fn validate_intervals(
        &self,
        invalid: &impl Fn(&'static str, &'static str) -> ConfigError,
    ) -> Result<(), ConfigError> {
        for (key, d) in [
            ("query_wait_timeout", self.query_wait_timeout),
            ("server_connect_timeout", self.server_connect_timeout),
            ("client_login_timeout", self.client_login_timeout),
            ("pool_sizing_interval", self.pool_sizing_interval),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be greater than zero"));
            }
        }
        Ok(())
    }

    /// The pool's size settings, which bound one another and the control connection.
    fn validate_pool(&self, invalid: &impl Fn(&'static str, &'static str) -> ConfigError) -> Result<(), ConfigError> {
        if self.pool_max == Some(0) {
            return Err(invalid("pool_max", "must be at least 1 (leave it unset to size from the database)"));
        }
        if self.max_connections_percent > 100 {
            return Err(invalid("max_connections_percent", "must be between 0 (off) and 100"));
        }
        if self.max_connections_percent > 0 && self.pool_max == Some(1) {
            return Err(invalid(
                "pool_max",
                "1 leaves no room for the control connection that sizing from the database keeps open (pool_max \
                 counts every connection pgmux opens): set it to 2 or more, or max_connections_percent = 0 for a \
                 fixed pool",
            ));
        }
        if let Some(max) = self.pool_max
            && self.min_pool_size > max - usize::from(self.max_connections_percent > 0)
        {
            return Err(invalid("min_pool_size", "must leave room within pool_max (less the control connection)"));
        }
        Ok(())
    }

    /// TLS for clients: a certificate with its key wherever TLS is offered, and a CA where client
    /// certificates are checked. With `tls_mode = disable` a half-set pair is allowed: the console sets
    /// them one at a time.
    fn validate_client_tls(
        &self,
        invalid: &impl Fn(&'static str, &'static str) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if self.tls_mode == SslMode::Disable {
            return Ok(());
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(invalid("tls_cert", "tls_cert and tls_key go together"));
        }
        if self.requires_client_tls() && self.tls_cert.is_none() {
            return Err(invalid(
                "tls_mode",
                "require, verify-ca and verify-full need tls_cert and tls_key to offer TLS",
            ));
        }
        if self.tls_mode.verifies_certificate() && self.tls_client_ca.is_none() {
            return Err(invalid(
                "tls_client_ca",
                "tls_mode = verify-ca and verify-full check client certificates against tls_client_ca: set it",
            ));
        }
        Ok(())
    }
}
