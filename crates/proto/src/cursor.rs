//! A bounds-checked reader over a message body, so that parsing never indexes past the end.

use crate::ParseError;

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Cursor { buf, what }
    }

    fn short(&self) -> ParseError {
        ParseError::new(self.what, "message is truncated")
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ParseError> {
        let (&b, rest) = self.buf.split_first().ok_or_else(|| self.short())?;
        self.buf = rest;
        Ok(b)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if self.buf.len() < n {
            return Err(self.short());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, ParseError> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ParseError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A NUL-terminated string that must be UTF-8.
    pub(crate) fn cstr(&mut self) -> Result<&'a str, ParseError> {
        let b = self.cstr_bytes()?;
        std::str::from_utf8(b).map_err(|_| ParseError::new(self.what, "string is not valid UTF-8"))
    }

    /// A NUL-terminated string, as bytes: for text pgmux only looks into, which the server checks against
    /// the client's encoding anyway.
    pub(crate) fn cstr_bytes(&mut self) -> Result<&'a [u8], ParseError> {
        // Every client Query and Parse comes through here: memchr looks at a word at a time.
        let end = memchr::memchr(0, self.buf).ok_or_else(|| ParseError::new(self.what, "string is not terminated"))?;
        let (s, rest) = (&self.buf[..end], &self.buf[end + 1..]);
        self.buf = rest;
        Ok(s)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    pub(crate) fn finish(&self) -> Result<(), ParseError> {
        if self.buf.is_empty() { Ok(()) } else { Err(ParseError::new(self.what, "message has trailing bytes")) }
    }
}
