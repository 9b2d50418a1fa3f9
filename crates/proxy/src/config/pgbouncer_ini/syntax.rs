//! The syntax of PgBouncer's ini files, apart from what they mean: one line at a time ([`lex`], pure), and
//! the files with their `%include`s read into one list of `key = value` items, each with its section and
//! place ([`Reader`]).

use std::path::{Path, PathBuf};

use super::{At, IniError, IniErrorKind, MAX_INCLUDE_DEPTH};

/// PgBouncer's sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Databases,
    Users,
    PgBouncer,
    Peers,
}

impl Section {
    pub(super) fn named(name: &str) -> Option<Section> {
        match name {
            "databases" => Some(Section::Databases),
            "users" => Some(Section::Users),
            "pgbouncer" => Some(Section::PgBouncer),
            "peers" => Some(Section::Peers),
            _ => None,
        }
    }
}

/// One line of an ini file.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line<'a> {
    /// Blank, or a comment.
    Blank,
    Section(&'a str),
    Include(&'a str),
    Pair(String, &'a str),
}

/// What one line is; pure, so the syntax is tested without files.
pub(super) fn lex(line: &str) -> Result<Line<'_>, IniErrorKind> {
    let line = line.trim();
    if line.is_empty() || line.starts_with([';', '#']) {
        return Ok(Line::Blank);
    }
    if let Some(rest) = line.strip_prefix('[') {
        let name = rest.strip_suffix(']').ok_or(IniErrorKind::Syntax("a section header must end with ]"))?;
        return Ok(Line::Section(name.trim()));
    }
    if let Some(rest) = line.strip_prefix("%include")
        && (rest.is_empty() || rest.starts_with(char::is_whitespace))
    {
        let path = rest.trim();
        if path.is_empty() {
            return Err(IniErrorKind::Syntax("%include needs a file name"));
        }
        return Ok(Line::Include(path));
    }
    let (key, rest) = name(line)?;
    let value = rest.trim_start().strip_prefix('=').ok_or(IniErrorKind::Syntax("expected key = value"))?;
    Ok(Line::Pair(key, value.trim()))
}

/// The name a line starts with, bare or in double quotes, and the rest of the line.
fn name(line: &str) -> Result<(String, &str), IniErrorKind> {
    if let Some(quoted) = line.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '"' {
                out.push(c);
            } else if quoted[i + 1..].starts_with('"') {
                out.push('"');
                chars.next();
            } else {
                return Ok((out, &quoted[i + 1..]));
            }
        }
        return Err(IniErrorKind::Syntax("a quoted name is not closed"));
    }
    let end = line.find(|c: char| !(c.is_ascii_alphanumeric() || "_.-*".contains(c))).unwrap_or(line.len());
    if end == 0 {
        return Err(IniErrorKind::Syntax("expected a name (letters, digits, _ . - *; others in double quotes)"));
    }
    Ok((line[..end].to_owned(), &line[end..]))
}

/// One `key = value` line and where it was.
#[derive(Clone, Debug)]
pub(super) struct Item {
    pub(super) at: At,
    pub(super) section: Section,
    pub(super) key: String,
    pub(super) value: String,
}

/// The lines of a file and its includes, in order.
#[derive(Default)]
pub(super) struct Reader {
    pub(super) items: Vec<Item>,
    pub(super) files: Vec<PathBuf>,
    /// The files being read, outermost first, as the file system names them (for cycles).
    open: Vec<PathBuf>,
    section: Option<Section>,
}

impl Reader {
    /// Reads `path`; `from` is the `%include` line that names it.
    pub(super) fn file(&mut self, path: &Path, from: Option<&At>) -> Result<(), Box<IniError>> {
        let fail = |kind| match from {
            Some(at) => IniError::at(at, kind),
            None => Box::new(IniError { file: path.to_owned(), line: None, kind }),
        };
        let unreadable = |e: std::io::Error| fail(IniErrorKind::Read { path: path.to_owned(), reason: e.to_string() });
        if self.open.len() > MAX_INCLUDE_DEPTH {
            return Err(fail(IniErrorKind::IncludeTooDeep));
        }
        let canonical = std::fs::canonicalize(path).map_err(unreadable)?;
        if self.open.contains(&canonical) {
            return Err(fail(IniErrorKind::IncludeCycle(path.to_owned())));
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        self.open.push(canonical);
        self.files.push(path.to_owned());
        self.text(&text, path)?;
        self.open.pop();
        Ok(())
    }

    pub(super) fn text(&mut self, text: &str, file: &Path) -> Result<(), Box<IniError>> {
        for (n, raw) in text.lines().enumerate() {
            let at = At { file: file.to_owned(), line: n + 1 };
            match lex(raw).map_err(|kind| IniError::at(&at, kind))? {
                Line::Blank => {}
                Line::Section(name) => {
                    let section = Section::named(name)
                        .ok_or_else(|| IniError::at(&at, IniErrorKind::UnknownSection(name.to_owned())))?;
                    self.section = Some(section);
                }
                Line::Include(path) => self.file(Path::new(path), Some(&at))?,
                Line::Pair(key, value) => {
                    let section =
                        self.section.ok_or_else(|| IniError::at(&at, IniErrorKind::OutsideSection(key.clone())))?;
                    self.items.push(Item { at, section, key, value: value.to_owned() });
                }
            }
        }
        Ok(())
    }
}
