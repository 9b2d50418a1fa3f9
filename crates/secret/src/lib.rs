//! Passwords and tokens: one type for every secret pgmux holds (a configured password, a Secrets Manager
//! password, an RDS IAM token), so that no log line, `Debug` output or `--print-config` can show one by
//! accident. The text comes out only through [`Secret::expose`].
//!
//! A crate of its own, with no dependencies, so that the pooler and the AWS glue share it without
//! depending on each other.

use std::fmt;

/// A password, IAM token or other secret. `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The secret itself, for the one place that must send it (a login, a SCRAM key).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is the empty string (an unset setting).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Self {
        Secret(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_itself() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?} {:?}", Some(&s)), "*** Secret(***) Some(Secret(***))");
        assert_eq!(s.expose(), "hunter2");
    }
}
