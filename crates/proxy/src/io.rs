//! One end of a proxied connection: its socket, the bytes read but not yet handled, and the bytes waiting to
//! be written. Reads and writes are plain `poll_*` calls so that one task can drive both ends of a session at
//! once, full duplex, without ever losing bytes to a cancelled future.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use pgmux_proto::{Framer, Sender};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The socket type of both ends (TLS is not built yet).
pub(crate) type Stream = TcpStream;

/// Stop reading from a peer while this much is queued for the other one: back-pressure instead of memory.
pub(crate) const MAX_QUEUED: usize = 256 * 1024;

/// Bytes queued for a socket, in order, written with vectored writes.
#[derive(Debug, Default)]
pub(crate) struct WriteQueue {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl WriteQueue {
    pub(crate) fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.chunks.push_back(bytes);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes until the queue is empty (`Ready(Ok)`) or the socket is full (`Pending`).
    pub(crate) fn poll_flush(&mut self, stream: &mut Stream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        const MAX_SLICES: usize = 64;
        while !self.chunks.is_empty() {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let n = self.chunks.len().min(MAX_SLICES);
            for (slot, chunk) in slices.iter_mut().zip(self.chunks.iter()) {
                *slot = IoSlice::new(chunk);
            }
            let written = match Pin::new(&mut *stream).poll_write_vectored(cx, &slices[..n]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(w)) => w,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            self.advance(written);
        }
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else { break };
            if n >= front.len() {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                let _ = front.split_to(n);
                n = 0;
            }
        }
    }

    /// Writes everything, waiting as needed.
    pub(crate) async fn flush(&mut self, stream: &mut Stream) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_flush(stream, cx)).await?;
        stream.flush().await
    }
}

/// A socket with its read buffer, framer and write queue.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    pub(crate) rbuf: BytesMut,
    pub(crate) framer: Framer,
    pub(crate) out: WriteQueue,
}

/// What one read produced.
#[derive(Debug)]
pub(crate) enum ReadOutcome {
    /// New bytes are in the buffer.
    Data,
    /// The peer closed its end.
    Eof,
}

impl Conn {
    pub(crate) fn new(stream: Stream, sender: Sender) -> Self {
        Conn { stream, rbuf: BytesMut::new(), framer: Framer::new(sender), out: WriteQueue::default() }
    }

    /// Reads once into the buffer, reserving `chunk` bytes of room first.
    pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>, chunk: usize) -> Poll<io::Result<ReadOutcome>> {
        if self.rbuf.capacity() - self.rbuf.len() < chunk / 2 {
            self.rbuf.reserve(chunk);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.rbuf) {
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(ReadOutcome::Eof)),
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(ReadOutcome::Data)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Reads once, waiting for data.
    pub(crate) async fn read(&mut self, chunk: usize) -> io::Result<ReadOutcome> {
        std::future::poll_fn(|cx| self.poll_read(cx, chunk)).await
    }

    /// Queues `bytes` and writes everything queued.
    pub(crate) async fn send(&mut self, bytes: Bytes) -> io::Result<()> {
        self.out.push(bytes);
        self.out.flush(&mut self.stream).await
    }

    /// Moves the first `n` buffered bytes to the write queue of `to`, without copying.
    pub(crate) fn forward(&mut self, n: usize, to: &mut WriteQueue) {
        if n > 0 {
            to.push(self.rbuf.split_to(n).freeze());
        }
    }

    /// Gives back a large idle read buffer so that idle connections stay small.
    pub(crate) fn shrink_if_idle(&mut self, keep: usize) {
        if self.rbuf.is_empty() && self.rbuf.capacity() > keep {
            self.rbuf = BytesMut::new();
        }
    }

    /// Without waiting: has the peer closed the socket or sent anything unasked? Used on idle server
    /// connections, which must have nothing to say.
    pub(crate) fn idle_peer_spoke(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut probe = [0u8; 1];
        let mut buf = tokio::io::ReadBuf::new(&mut probe);
        !matches!(Pin::new(&mut self.stream).poll_read(&mut cx, &mut buf), Poll::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_consumes_whole_and_partial_chunks() {
        let mut q = WriteQueue::default();
        q.push(Bytes::from_static(b"abc"));
        q.push(Bytes::new());
        q.push(Bytes::from_static(b"defg"));
        assert_eq!(q.len(), 7);
        q.advance(4);
        assert_eq!(q.len(), 3);
        assert_eq!(q.chunks.front().map(|b| &b[..]), Some(&b"efg"[..]));
        q.advance(3);
        assert_eq!(q.len(), 0);
        assert!(q.chunks.is_empty());
    }
}
