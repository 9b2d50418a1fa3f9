//! Splits an admin query into words, strings and punctuation. Bounded: a word longer than
//! [`MAX_WORD_LEN`] or a character that belongs to no token stops it with a reason.

use super::command::MAX_WORD_LEN;

/// One token of an admin query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Token {
    /// A bare word: ASCII letters, digits and `_ . : / + -`, as written.
    Word(String),
    /// A `"double-quoted"` identifier, unquoted.
    Quoted(String),
    /// A `'single-quoted'` string, unquoted.
    Str(String),
    Equals,
    Semicolon,
}

/// Why a query has no tokens.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum LexError {
    /// A quote opened at `at` (a byte offset) and never closed.
    #[error("unterminated {quote}quote{quote} at {at}")]
    Unterminated { quote: char, at: usize },
    /// A quoted token past [`MAX_WORD_LEN`] characters.
    #[error("a quoted name or value longer than {} characters", MAX_WORD_LEN)]
    LongQuoted,
    /// A bare word past [`MAX_WORD_LEN`] bytes.
    #[error("a word longer than {} characters", MAX_WORD_LEN)]
    LongWord,
    /// A character that starts no token, at a byte offset.
    #[error("unexpected character {found:?} at {at}")]
    Unexpected { found: char, at: usize },
}

fn bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.:/+-".contains(c)
}

/// The tokens of `query`, or why it has none.
pub(super) fn tokens(query: &str) -> Result<Vec<Token>, LexError> {
    let mut out = Vec::new();
    let mut chars = query.char_indices().peekable();
    while let Some(&(at, c)) = chars.peek() {
        match c {
            c if c.is_ascii_whitespace() => {
                chars.next();
            }
            '=' => {
                chars.next();
                out.push(Token::Equals);
            }
            ';' => {
                chars.next();
                out.push(Token::Semicolon);
            }
            '"' | '\'' => {
                chars.next();
                let text = quoted(&mut chars, c).ok_or(LexError::Unterminated { quote: c, at })?;
                if text.chars().count() > MAX_WORD_LEN {
                    return Err(LexError::LongQuoted);
                }
                out.push(if c == '"' { Token::Quoted(text) } else { Token::Str(text) });
            }
            c if bare(c) => {
                let mut word = String::new();
                while let Some(&(_, c)) = chars.peek().filter(|(_, c)| bare(*c)) {
                    word.push(c);
                    chars.next();
                }
                if word.len() > MAX_WORD_LEN {
                    return Err(LexError::LongWord);
                }
                out.push(Token::Word(word));
            }
            other => return Err(LexError::Unexpected { found: other, at }),
        }
    }
    Ok(out)
}

/// The rest of a quoted token, the opening quote already read; a doubled quote stands for one. `None`
/// when the closing quote is missing.
fn quoted(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>, quote: char) -> Option<String> {
    let mut text = String::new();
    while let Some((_, c)) = chars.next() {
        if c != quote {
            text.push(c);
        } else if chars.peek().is_some_and(|&(_, next)| next == quote) {
            chars.next();
            text.push(quote);
        } else {
            return Some(text);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::Token::*;
    use super::*;

    #[test]
    fn words_strings_and_punctuation() {
        assert_eq!(
            tokens(" SET a.b= 'x''y' ;").unwrap(),
            vec![Word("SET".into()), Word("a.b".into()), Equals, Str("x'y".into()), Semicolon]
        );
        assert_eq!(tokens("pause \"my \"\"db\"\"\"").unwrap(), vec![Word("pause".into()), Quoted("my \"db\"".into())]);
        assert_eq!(tokens("").unwrap(), vec![]);
    }

    #[test]
    fn stray_characters_and_open_quotes_are_reasons() {
        assert_eq!(tokens("show (stats)"), Err(LexError::Unexpected { found: '(', at: 5 }));
        assert_eq!(tokens("show (stats)").unwrap_err().to_string(), "unexpected character '(' at 5");
        assert_eq!(tokens("set a = 'open"), Err(LexError::Unterminated { quote: '\'', at: 8 }));
        assert_eq!(tokens("set a = 'open").unwrap_err().to_string(), "unterminated 'quote' at 8");
        assert_eq!(tokens("show stäts"), Err(LexError::Unexpected { found: 'ä', at: 7 }));
        assert_eq!(tokens(&"w".repeat(MAX_WORD_LEN + 1)), Err(LexError::LongWord));
    }
}
