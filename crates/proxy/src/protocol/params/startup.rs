//! The session parameters a client's start-up packet carries: its keys, and the `-c` settings of its
//! `options`, with what `ignore_startup_parameters` drops and what `track_extra_parameters` refuses.

use pgmux_proto::encode::ErrorMessage;
use pgmux_proto::sqlstate;

use super::Param;

/// Start-up keys that are about the connection, not session parameters.
const CONNECTION_KEYS: &[&str] = &["user", "database", "replication", "options"];

/// Parameters PgBouncer always follows: with `track_extra_parameters` set, these and the ones it lists are
/// all a client may send.
const ALWAYS_TRACKED: &[&str] =
    &["client_encoding", "datestyle", "timezone", "standard_conforming_strings", "application_name"];

/// What a start-up packet may carry (PgBouncer's `ignore_startup_parameters` and `track_extra_parameters`):
/// names to drop, and, when `track_extra_parameters` is set, the only names followed (others are refused).
/// pgmux's own default is to follow every parameter.
///
/// It borrows the two settings as written and matches names in them as it goes, without building lists: a
/// login asks a handful of names, and every new connection would otherwise pay for the lists' strings.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StartupRules<'a> {
    /// Names dropped wherever they come (`options` here: untracked names in it are dropped).
    ignore: &'a str,
    /// Names followed beside [`ALWAYS_TRACKED`]; none listed: every name.
    track: &'a str,
}

impl<'a> StartupRules<'a> {
    /// From the two settings as written: comma-separated names, any case; an empty `track` follows all.
    pub(crate) fn new(ignore: &'a str, track: &'a str) -> Self {
        // A list that names nothing is kept empty, so that asking it is one comparison.
        let some = |list: &'a str| if names(list).next().is_some() { list } else { "" };
        StartupRules { ignore: some(ignore), track: some(track) }
    }

    fn ignored(&self, k: &str) -> bool {
        listed(self.ignore, k)
    }

    fn untracked(&self, k: &str) -> bool {
        !self.track.is_empty() && !ALWAYS_TRACKED.iter().any(|n| n.eq_ignore_ascii_case(k)) && !listed(self.track, k)
    }
}

/// The names of a comma-separated setting, trimmed, the empty ones left out.
fn names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|n| !n.is_empty())
}

/// Whether `list` names `k`, in any case (parameter names are case-insensitive).
fn listed(list: &str, k: &str) -> bool {
    !list.is_empty() && names(list).any(|n| n.eq_ignore_ascii_case(k))
}

/// A parameter a client may not send while `track_extra_parameters` is set: pgmux would not follow it.
fn untracked(name: &str, in_options: bool) -> ErrorMessage {
    let message = if in_options {
        format!("unsupported startup parameter in options: {name}")
    } else {
        format!("unsupported startup parameter: {name}")
    };
    ErrorMessage::fatal(sqlstate::FEATURE_NOT_SUPPORTED, message).with_hint(
        "track_extra_parameters lists the parameters pgmux follows; add it there, list it in \
         ignore_startup_parameters to drop it, or leave track_extra_parameters unset to follow every one",
    )
}

/// The session parameters of a start-up packet: every key except the connection ones, with `options`
/// (`-c name=value`, `--name=value`) expanded in place, less what `rules` drops; a name `rules` does not
/// follow is refused (0A000).
pub(crate) fn from_startup(params: &[(String, String)], rules: &StartupRules) -> Result<Vec<Param>, ErrorMessage> {
    let mut out: Vec<Param> = Vec::new();
    let mut put = |name: &str, value: &str| {
        out.retain(|p| !p.name.eq_ignore_ascii_case(name));
        out.push(Param { name: name.to_owned(), value: value.to_owned() });
    };
    for (name, value) in params {
        match name.as_str() {
            "options" => {
                for (n, v) in parse_options(value)? {
                    if rules.ignored(&n) || (rules.untracked(&n) && rules.ignored("options")) {
                        continue;
                    }
                    if rules.untracked(&n) {
                        return Err(untracked(&n, true));
                    }
                    put(&n, &v);
                }
            }
            "replication" if !matches!(value.as_str(), "false" | "0" | "off" | "no") => {
                return Err(ErrorMessage::fatal(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "pgmux does not pool replication connections",
                )
                .with_hint("connect to the database directly for replication"));
            }
            n if CONNECTION_KEYS.contains(&n) || n.starts_with("_pq_.") => {}
            n if rules.ignored(n) => {}
            n if rules.untracked(n) => return Err(untracked(n, false)),
            n => put(n, value),
        }
    }
    Ok(out)
}

/// Splits a libpq `options` string (whitespace-separated, backslash escapes) into `-c` settings.
fn parse_options(options: &str) -> Result<Vec<(String, String)>, ErrorMessage> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
                in_word = true;
            }
            c if c.is_ascii_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    // PostgreSQL refuses a malformed option as a syntax error (42601); the words are PgBouncer's, which
    // scripts and its test suite match.
    let bad = |w: &str| {
        ErrorMessage::fatal(
            sqlstate::SYNTAX_ERROR,
            "unsupported options startup parameter: only '-c config=val' and '--config=val' are allowed",
        )
        .with_detail(format!("{w:?} is not of that form"))
    };
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let setting = if w == "-c" {
            it.next().ok_or_else(|| bad(&w))?
        } else if let Some(rest) = w.strip_prefix("-c") {
            rest.to_owned()
        } else if let Some(rest) = w.strip_prefix("--") {
            rest.to_owned()
        } else {
            return Err(bad(&w));
        };
        let (name, value) = setting.split_once('=').ok_or_else(|| bad(&setting))?;
        // Like PostgreSQL, dashes in a command-line name mean underscores.
        out.push((name.replace('-', "_"), value.to_owned()));
    }
    Ok(out)
}
