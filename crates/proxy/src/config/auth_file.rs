//! PgBouncer's `auth_file` (userlist.txt): one `"user" "password"` per line, each in double quotes (a quote
//! inside doubled), the password in plaintext, as `md5` and 32 hex digits, or as a SCRAM-SHA-256 verifier.
//! Lines starting with `;` or `#`, and empty ones, are skipped; fields after the second are ignored, as
//! PgBouncer ignores them.

use std::path::Path;

use super::Secret;

/// A userlist entry: a user and what it is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserEntry {
    pub user: String,
    pub password: Secret,
}

/// Why an auth file could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthFileError {
    #[error("cannot read auth_file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("auth_file {path}, line {line}: {reason}")]
    Syntax { path: String, line: usize, reason: &'static str },
    /// `auth_hba_file` or `auth_ident_file` (client_auth = hba).
    #[error(transparent)]
    Access(#[from] super::hba::HbaError),
}

impl AuthFileError {
    /// The setting that names the file at fault.
    pub fn key(&self) -> &'static str {
        match self {
            AuthFileError::Access(e) => e.key,
            AuthFileError::Read { .. } | AuthFileError::Syntax { .. } => "auth_file",
        }
    }
}

/// Reads and parses the file at `path`.
pub fn read(path: &Path) -> Result<Vec<UserEntry>, AuthFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AuthFileError::Read { path: path.display().to_string(), reason: e.to_string() })?;
    parse(&text).map_err(|(line, reason)| AuthFileError::Syntax { path: path.display().to_string(), line, reason })
}

/// The entries of a userlist's text; `Err((line, why))` for the first line that is not one.
pub fn parse(text: &str) -> Result<Vec<UserEntry>, (usize, &'static str)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        let mut rest = line;
        let user = quoted(&mut rest).ok_or((n + 1, "expected \"user\" \"password\""))?;
        let password = quoted(&mut rest).ok_or((n + 1, "expected a quoted password after the user"))?;
        if user.is_empty() {
            return Err((n + 1, "the user name is empty"));
        }
        out.push(UserEntry { user, password: Secret::new(password) });
    }
    Ok(out)
}

/// The next double-quoted field of `rest` (`""` inside stands for `"`), advancing past it.
fn quoted(rest: &mut &str) -> Option<String> {
    let s = rest.trim_start().strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            out.push(c);
            continue;
        }
        if s[i + 1..].starts_with('"') {
            out.push('"');
            chars.next();
            continue;
        }
        *rest = &s[i + 1..];
        return Some(out);
    }
    None
}

/// Every user pgmux knows, with what it is checked against: `[[users]]` entries, then the auth file, then
/// the user of `database_url` (with client_password or the URL's password). Built at start-up and on each
/// reload; a lookup is a hash lookup (foldhash: every login looks its user up, and the names in the book are
/// the configuration's, not a client's).
#[derive(Debug, Default)]
pub struct UserBook {
    users: foldhash::HashMap<String, KnownUser>,
    /// With client_auth = hba: the rules of auth_hba_file and the maps of auth_ident_file.
    access: Option<std::sync::Arc<super::hba::AccessRules>>,
}

/// One user of the [`UserBook`].
#[derive(Clone, Debug, Default)]
pub struct KnownUser {
    /// Plaintext, `md5…` or a SCRAM verifier; `None`: known, with no password (trust, IAM, a secret).
    pub password: Option<Secret>,
    /// Its `[[users]]` entry, if it has one.
    pub spec: Option<super::UserSpec>,
}

impl UserBook {
    /// The book for `config`, reading its `auth_file` if it names one.
    pub fn load(config: &super::Config) -> Result<UserBook, AuthFileError> {
        let file = match &config.auth_file {
            Some(path) => read(path)?,
            None => Vec::new(),
        };
        let mut book = Self::build(config, file);
        if let (super::ClientAuth::Hba, Some(hba)) = (config.client_auth, &config.auth_hba_file) {
            let rules = super::hba::AccessRules::load(hba, config.auth_ident_file.as_deref())?;
            book.access = Some(std::sync::Arc::new(rules));
        }
        Ok(book)
    }

    /// The hba rules and ident maps (client_auth = hba).
    pub fn access(&self) -> Option<&super::hba::AccessRules> {
        self.access.as_deref()
    }

    /// The book for `config` and the entries of its auth file.
    pub fn build(config: &super::Config, file: Vec<UserEntry>) -> UserBook {
        let mut users = foldhash::HashMap::default();
        let url = &config.database_url.login;
        if !url.user.is_empty() {
            let password = config.client_password().cloned();
            users.insert(url.user.clone(), KnownUser { password, spec: None });
        }
        for entry in file {
            users.insert(entry.user, KnownUser { password: Some(entry.password), spec: None });
        }
        for spec in &config.users {
            let known = users.entry(spec.name.clone()).or_default();
            if spec.password.is_some() {
                known.password.clone_from(&spec.password);
            }
            known.spec = Some(spec.clone());
        }
        UserBook { users, access: None }
    }

    /// The user called `name`, if pgmux knows it.
    pub fn get(&self, name: &str) -> Option<&KnownUser> {
        self.users.get(name)
    }

    /// Every user's name, sorted (SHOW USERS); never a password.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.users.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userlists_read_as_pgbouncer_writes_them() {
        let text = "; comment\n\"alice\" \"plain pw\"\n\n\"bob\" \"md5a3556571e93b0d20722ba62be61e8c2d\" \"extra\"\n\
                    # another\n\"o\"\"brien\" \"SCRAM-SHA-256$4096:c2FsdA==$AAAA:BBBB\"\n";
        let entries = parse(text).unwrap();
        let got: Vec<(&str, &str)> = entries.iter().map(|e| (e.user.as_str(), e.password.expose())).collect();
        assert_eq!(
            got,
            [
                ("alice", "plain pw"),
                ("bob", "md5a3556571e93b0d20722ba62be61e8c2d"),
                ("o\"brien", "SCRAM-SHA-256$4096:c2FsdA==$AAAA:BBBB")
            ]
        );
    }

    #[test]
    fn broken_lines_are_named() {
        assert_eq!(parse("\"alice\"\n").unwrap_err(), (1, "expected a quoted password after the user"));
        assert_eq!(parse("\n alice pw\n").unwrap_err(), (2, "expected \"user\" \"password\""));
        assert_eq!(parse("\"a\" \"unterminated\n").unwrap_err().0, 1);
        assert_eq!(parse("\"\" \"pw\"").unwrap_err(), (1, "the user name is empty"));
    }
}
