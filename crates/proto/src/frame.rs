//! Splitting a byte stream into protocol messages without copying or decoding them.
//!
//! A PostgreSQL message is a one-byte tag, a four-byte big-endian length that counts itself, and a body.
//! [`Framer`] looks at the front of a buffer and says how many bytes the next message takes; the caller
//! decides what to do with them (forward, inspect, drop) and advances its own buffer. Nothing here owns a
//! socket or awaits, so every decision is testable with byte fixtures.
//!
//! Some messages may be larger than anyone wants to hold in memory: `DataRow` / `CopyData` from the server,
//! `CopyData` and `Bind` from the client. Those are *streamed*: once their header (and, for a Bind, its two
//! names) is in, their bytes are handed on as they arrive and never buffered whole. Every other message is
//! bounded by a per-tag limit before any allocation is made for it.

use thiserror::Error;

/// Bytes in a message header: the tag and the length.
pub const HEADER_LEN: usize = 5;

/// PostgreSQL's own limit for messages that may carry data (`PQ_LARGE_MESSAGE_LIMIT`).
pub const LARGE_MESSAGE_LIMIT: usize = (1 << 30) - 1;
/// PostgreSQL's own limit for control messages such as Sync, Execute or Describe (`PQ_SMALL_MESSAGE_LIMIT`).
pub const SMALL_MESSAGE_LIMIT: usize = 10_000;
/// PostgreSQL's limit for a startup packet (`MAX_STARTUP_PACKET_LENGTH`).
pub const STARTUP_PACKET_LIMIT: usize = 10_000;
/// PostgreSQL's limit for a password or SASL message (`PG_MAX_AUTH_TOKEN_LENGTH`).
pub const AUTH_MESSAGE_LIMIT: usize = 65_535;

/// A message larger than this that may be streamed is passed on in pieces instead of being buffered whole.
pub const STREAM_THRESHOLD: usize = 16 * 1024;

/// Which peer sent the bytes being framed; it decides which tags are valid and how large they may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// A client (frontend) after start-up.
    Frontend,
    /// A server (backend).
    Backend,
}

/// Why a stream cannot be framed. Each of these is a protocol violation by the peer.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The tag is not one the peer may send.
    #[error("invalid message type {}", describe_tag(*.0))]
    UnknownTag(u8),
    /// The length field is smaller than the four bytes it occupies.
    #[error("invalid message length {len} for message type {}", describe_tag(*.tag))]
    BadLength {
        /// Message tag.
        tag: u8,
        /// The length as sent.
        len: u32,
    },
    /// The message is longer than its type allows.
    #[error("message of type {} is {len} bytes, over the limit of {limit}", describe_tag(*.tag))]
    TooLong {
        /// Message tag.
        tag: u8,
        /// The length as sent.
        len: usize,
        /// The largest length accepted for this tag.
        limit: usize,
    },
}

fn describe_tag(tag: u8) -> String {
    if tag.is_ascii_graphic() { format!("'{}'", tag as char) } else { format!("0x{tag:02x}") }
}

/// What the front of a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A whole message of `len` bytes, header included, starts the buffer.
    Message {
        /// Message tag.
        tag: u8,
        /// Length of the whole message including the tag byte.
        len: usize,
    },
    /// The first `take` bytes of the buffer belong to a streamed message: pass them on as they are.
    /// `tag` is the streamed message's type; `start` is true for the piece that holds its header.
    Stream {
        /// Message tag of the streamed message.
        tag: u8,
        /// How many bytes to pass on.
        take: usize,
        /// Whether this piece begins the message.
        start: bool,
    },
    /// Not enough bytes; the buffer should hold at least `want` bytes before the next step.
    NeedMore {
        /// Total bytes wanted from the buffer start.
        want: usize,
    },
}

/// Frames one direction of a connection. It remembers only how much of a streamed message is still to come.
#[derive(Clone, Debug)]
pub struct Framer {
    sender: Sender,
    /// The largest body accepted for a message that may carry data (at most [`LARGE_MESSAGE_LIMIT`]).
    large_limit: usize,
    /// Bytes of the current streamed message not yet passed on; zero between messages.
    streaming: usize,
    streaming_tag: u8,
}

impl Framer {
    /// A framer for messages sent by `sender`.
    pub fn new(sender: Sender) -> Self {
        Framer::with_limit(sender, LARGE_MESSAGE_LIMIT)
    }

    /// A framer that refuses data-carrying messages larger than `large_limit` (PostgreSQL's own 1 GiB at
    /// most): a pooler may hold a client's Query, Parse or Bind whole, so it bounds them tighter.
    pub fn with_limit(sender: Sender, large_limit: usize) -> Self {
        Framer { sender, large_limit: large_limit.min(LARGE_MESSAGE_LIMIT), streaming: 0, streaming_tag: 0 }
    }

    /// True while a streamed message has been started but not finished.
    pub fn mid_message(&self) -> bool {
        self.streaming > 0
    }

    /// Looks at the front of `buf` and says what it holds. The caller must consume exactly the bytes a
    /// `Message` or `Stream` step names before calling again.
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, FrameError> {
        if self.streaming > 0 {
            if buf.is_empty() {
                return Ok(Step::NeedMore { want: 1 });
            }
            let take = self.streaming.min(buf.len());
            self.streaming -= take;
            return Ok(Step::Stream { tag: self.streaming_tag, take, start: false });
        }
        let Some(header) = buf.get(..HEADER_LEN) else {
            return Ok(Step::NeedMore { want: HEADER_LEN });
        };
        let tag = header[0];
        let raw = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        let limit = match LIMITS[self.sender as usize][usize::from(tag)] {
            0 => return Err(FrameError::UnknownTag(tag)),
            limit => (limit as usize).min(self.large_limit.max(SMALL_MESSAGE_LIMIT)),
        };
        if raw < 4 {
            return Err(FrameError::BadLength { tag, len: raw });
        }
        let len = raw as usize + 1;
        if len - 1 > limit {
            return Err(FrameError::TooLong { tag, len: len - 1, limit });
        }
        if buf.len() >= len {
            return Ok(Step::Message { tag, len });
        }
        if len > STREAM_THRESHOLD && streamable(self.sender, tag) {
            // A Bind is streamed once its portal and statement names are in: a pooler renames the statement.
            if tag == b'B' && !has_two_names(&buf[HEADER_LEN..]) {
                return Ok(Step::NeedMore { want: (buf.len() + 1).min(len) });
            }
            self.streaming = len - buf.len();
            self.streaming_tag = tag;
            return Ok(Step::Stream { tag, take: buf.len(), start: true });
        }
        Ok(Step::NeedMore { want: len })
    }
}

/// Whether a Bind body's start holds both its names (two NUL-terminated strings).
fn has_two_names(body: &[u8]) -> bool {
    body.iter().filter(|&&b| b == 0).nth(1).is_some()
}

fn streamable(sender: Sender, tag: u8) -> bool {
    match sender {
        // A large Bind (a bulk insert's parameters) is passed on as it arrives, like COPY data.
        Sender::Frontend => tag == b'd' || tag == b'B',
        Sender::Backend => tag == b'D' || tag == b'd',
    }
}

/// [`limit_for`] of every tag, for each sender in its order (0: a tag the sender never sends), built at
/// compile time: every step looks its tag up rather than matching it (about thirteen steps per
/// extended-protocol transaction, counting both sides).
static LIMITS: [[u32; 256]; 2] = {
    let mut table = [[0; 256]; 2];
    let mut tag = 0;
    while tag < 256 {
        // Every limit is below 2^30.
        table[Sender::Frontend as usize][tag] = limit_for(Sender::Frontend, tag as u8) as u32;
        table[Sender::Backend as usize][tag] = limit_for(Sender::Backend, tag as u8) as u32;
        tag += 1;
    }
    table
};

/// The largest body length (length field value) accepted for `tag` from `sender`; 0 for a tag it never
/// sends.
const fn limit_for(sender: Sender, tag: u8) -> usize {
    match sender {
        Sender::Frontend => match tag {
            b'Q' | b'P' | b'B' | b'F' | b'd' => LARGE_MESSAGE_LIMIT,
            // A Describe or Close names a statement, and a Parse may give one a name of any length. PostgreSQL
            // reads these with its small limit, but pgmux gives statements names of its own towards the
            // server, so it takes them at the client's message limit; the router refuses one it would have to
            // pass on as it is over PostgreSQL's limit (a portal's, or with statement tracking off).
            b'D' | b'C' => LARGE_MESSAGE_LIMIT,
            b'E' | b'H' | b'S' | b'c' | b'X' => SMALL_MESSAGE_LIMIT,
            // CopyFail carries a message; PostgreSQL reads it with the small limit too.
            b'f' => SMALL_MESSAGE_LIMIT,
            b'p' => AUTH_MESSAGE_LIMIT,
            _ => 0,
        },
        Sender::Backend => match tag {
            b'R' | b'K' | b'S' | b'Z' | b'T' | b'D' | b'C' | b'E' | b'N' | b'A' | b'I' | b'1' | b'2' | b'3' | b'n'
            | b's' | b't' | b'G' | b'H' | b'W' | b'd' | b'c' | b'V' | b'v' => LARGE_MESSAGE_LIMIT,
            _ => 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use pgmux_testkit::wire::msg;

    use super::*;

    #[test]
    fn a_large_bind_streams_once_its_names_are_in() {
        let mut body = b"portal\0stmt".to_vec();
        let mut bind = msg(b'B', &{
            let mut full = body.clone();
            full.push(0);
            full.extend(vec![7u8; 40_000]);
            full
        });
        let mut f = Framer::new(Sender::Frontend);
        // Header and part of the statement name: wait for the name to end.
        assert_eq!(f.step(&bind[..5 + 9]), Ok(Step::NeedMore { want: 5 + 9 + 1 }));
        body.push(0);
        let head = 5 + body.len() + 100;
        assert_eq!(f.step(&bind[..head]), Ok(Step::Stream { tag: b'B', take: head, start: true }));
        assert!(f.mid_message());
        let rest = bind.split_off(head);
        assert_eq!(f.step(&rest), Ok(Step::Stream { tag: b'B', take: rest.len(), start: false }));
        assert!(!f.mid_message());
        // A small Bind is whole, as before.
        assert!(matches!(
            Framer::new(Sender::Frontend).step(&msg(b'B', b"\0s\0\0\0\0\0\0\0")),
            Ok(Step::Message { .. })
        ));
    }

    #[test]
    fn a_tighter_limit_refuses_large_messages_but_not_small_ones() {
        let mut f = Framer::with_limit(Sender::Frontend, 100_000);
        let big = [b'Q', 0, 1, 0x86, 0xa1]; // 100,001 bytes
        assert_eq!(f.step(&big), Err(FrameError::TooLong { tag: b'Q', len: 100_001, limit: 100_000 }));
        assert!(matches!(f.step(&msg(b'S', b"")), Ok(Step::Message { .. })));
        // A limit below PostgreSQL's small-message limit does not shrink that one.
        let mut tiny = Framer::with_limit(Sender::Frontend, 10);
        assert!(matches!(tiny.step(&msg(b'Q', &[b'x'; 50])), Ok(Step::Message { .. })));
    }

    #[test]
    fn a_describe_or_close_may_name_a_long_statement_up_to_the_client_limit() {
        // A 16 KiB statement name: over PostgreSQL's small-message limit, under the client's.
        let mut body = vec![b'S'];
        body.extend(vec![b'a'; 16 * 1024]);
        body.push(0);
        let mut f = Framer::with_limit(Sender::Frontend, 1 << 20);
        for tag in [b'D', b'C'] {
            assert!(matches!(f.step(&msg(tag, &body)), Ok(Step::Message { .. })), "{}", tag as char);
        }
        // Still bounded: by the client's limit, and Execute (a portal, never renamed) by PostgreSQL's.
        let mut tight = Framer::with_limit(Sender::Frontend, 16 * 1024);
        assert!(matches!(tight.step(&msg(b'D', &body)), Err(FrameError::TooLong { tag: b'D', .. })));
        assert!(matches!(f.step(&msg(b'E', &body)), Err(FrameError::TooLong { tag: b'E', .. })));
    }

    #[test]
    fn whole_messages_are_reported_with_their_length() {
        let mut buf = msg(b'Z', b"I");
        buf.extend(msg(b'C', b"SELECT 1\0"));
        let mut f = Framer::new(Sender::Backend);
        assert_eq!(f.step(&buf), Ok(Step::Message { tag: b'Z', len: 6 }));
        assert_eq!(f.step(&buf[6..]), Ok(Step::Message { tag: b'C', len: 14 }));
        assert_eq!(f.step(&buf[20..]), Ok(Step::NeedMore { want: HEADER_LEN }));
    }

    #[test]
    fn a_partial_small_message_waits_for_the_rest() {
        let buf = msg(b'T', &[0u8; 100]);
        let mut f = Framer::new(Sender::Backend);
        assert_eq!(f.step(&buf[..3]), Ok(Step::NeedMore { want: HEADER_LEN }));
        assert_eq!(f.step(&buf[..50]), Ok(Step::NeedMore { want: 105 }));
    }

    #[test]
    fn a_large_data_row_is_streamed_in_pieces() {
        let body = vec![7u8; STREAM_THRESHOLD * 2];
        let buf = msg(b'D', &body);
        let mut f = Framer::new(Sender::Backend);
        assert_eq!(f.step(&buf[..1000]), Ok(Step::Stream { tag: b'D', take: 1000, start: true }));
        assert!(f.mid_message());
        assert_eq!(f.step(&[]), Ok(Step::NeedMore { want: 1 }));
        let rest = buf.len() - 1000;
        // More than the message remains in the buffer: only the message's bytes are taken.
        let mut tail = buf[1000..].to_vec();
        tail.extend(msg(b'Z', b"I"));
        assert_eq!(f.step(&tail), Ok(Step::Stream { tag: b'D', take: rest, start: false }));
        assert!(!f.mid_message());
        assert_eq!(f.step(&tail[rest..]), Ok(Step::Message { tag: b'Z', len: 6 }));
    }

    #[test]
    fn a_large_query_is_buffered_not_streamed() {
        let buf = msg(b'Q', &vec![b'x'; STREAM_THRESHOLD * 2]);
        let mut f = Framer::new(Sender::Frontend);
        assert_eq!(f.step(&buf[..100]), Ok(Step::NeedMore { want: buf.len() }));
    }

    #[test]
    fn lengths_are_bounded_per_tag_before_allocation() {
        let mut f = Framer::new(Sender::Frontend);
        let sync = [b'S', 0, 1, 0, 0];
        assert_eq!(f.step(&sync), Err(FrameError::TooLong { tag: b'S', len: 65536, limit: SMALL_MESSAGE_LIMIT }));
        let query = [b'Q', 0x7f, 0xff, 0xff, 0xff];
        assert!(matches!(f.step(&query), Err(FrameError::TooLong { tag: b'Q', .. })));
        let short = [b'Q', 0, 0, 0, 3];
        assert_eq!(f.step(&short), Err(FrameError::BadLength { tag: b'Q', len: 3 }));
    }

    #[test]
    fn unknown_tags_are_rejected_per_direction() {
        let mut f = Framer::new(Sender::Frontend);
        assert_eq!(f.step(b"Z\0\0\0\x05I"), Err(FrameError::UnknownTag(b'Z')));
        let mut b = Framer::new(Sender::Backend);
        assert_eq!(b.step(b"Q\0\0\0\x05x"), Err(FrameError::UnknownTag(b'Q')));
        assert_eq!(
            FrameError::UnknownTag(0).to_string(),
            "invalid message type 0x00",
            "non-printable tags are shown in hex"
        );
    }
}
