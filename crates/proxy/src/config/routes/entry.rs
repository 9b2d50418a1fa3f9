//! Reading entries as they are written outside TOML: PgBouncer's libpq-style `key=value` strings, and the
//! `name = key=value ...` lists of `PGMUX_DATABASES` and `PGMUX_USERS`.

use super::EntryError;

/// One `name = key=value ...` entry, its pairs in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub pairs: Vec<(String, String)>,
}

impl Entry {
    /// A libpq-style connection string, as PgBouncer's `[databases]` values are written: `key=value` pairs
    /// separated by spaces, a value in single quotes when it holds spaces (`\'` and `\\` inside).
    pub fn parse_connstr(name: &str, s: &str) -> Result<Entry, EntryError> {
        let mut pairs = Vec::new();
        let mut chars = s.chars().peekable();
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.peek().is_none() {
                break;
            }
            let mut key = String::new();
            while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
                key.push(c);
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.next() != Some('=') {
                return Err(EntryError::syntax(name, format!("expected key=value, found {key:?} without a value")));
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let mut value = String::new();
            if chars.next_if_eq(&'\'').is_some() {
                loop {
                    match chars.next() {
                        None => {
                            return Err(EntryError::syntax(name, format!("the quoted value of {key} is not closed")));
                        }
                        Some('\'') => break,
                        Some('\\') => value.push(
                            chars.next().ok_or_else(|| EntryError::syntax(name, "a \\ ends the value".to_owned()))?,
                        ),
                        Some(c) => value.push(c),
                    }
                }
            } else {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    value.push(c);
                }
            }
            pairs.push((key.to_ascii_lowercase(), value));
        }
        Ok(Entry { name: name.to_owned(), pairs })
    }

    /// The entries of an environment variable: `name = connstr` entries separated by `;` (outside quotes)
    /// or new lines.
    pub fn parse_list(var: &str, s: &str) -> Result<Vec<Entry>, EntryError> {
        let mut out = Vec::new();
        for part in split_outside_quotes(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (name, rest) = part
                .split_once('=')
                .ok_or_else(|| EntryError::syntax(var, format!("expected `name = key=value ...`, found {part:?}")))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(EntryError::syntax(var, format!("an entry has no name: {part:?}")));
            }
            out.push(Entry::parse_connstr(name, rest)?);
        }
        Ok(out)
    }
}

/// `s` split at `;` and new lines that are not inside single quotes.
fn split_outside_quotes(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '\'' => quoted = !quoted,
            ';' | '\n' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}
