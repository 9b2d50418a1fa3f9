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
use tokio::net::{TcpStream, UnixStream};
use tokio::runtime::{Handle, RuntimeFlavor};

/// A socket of either end: plain TCP, or TLS as the client of a database or as the server of a client; or a
/// client's Unix-domain socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    TlsToServer(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    TlsFromClient(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// Between taking the TCP socket out for a TLS handshake and putting the TLS stream back.
    Detached,
}

impl Stream {
    /// Whether the peer answered bytes of ours with a reset, which a TCP peer does to bytes that reach it
    /// after its program closed the socket (or that it left unread when it closed). A reset that comes after
    /// the peer's own end of file does not fail the reads, which still end in a plain end of file: it is
    /// left as the socket's pending error, which this takes (`SO_ERROR`, one system call). Over a Unix
    /// socket a write to a closed peer fails at once, so the write says it.
    pub(crate) fn reset_after_close(&self) -> bool {
        let pending = match self {
            Stream::Tcp(s) => s.take_error(),
            Stream::TlsToServer(s) => s.get_ref().0.take_error(),
            Stream::TlsFromClient(s) => s.get_ref().0.take_error(),
            Stream::Unix(_) | Stream::Detached => return false,
        };
        matches!(pending, Ok(Some(e)) if matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset))
    }
}

impl Stream {
    /// The socket of a plain (not TLS) stream, which bytes can be written to directly.
    fn plain_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Stream::Tcp(s) => Some(s.as_fd()),
            Stream::Unix(s) => Some(s.as_fd()),
            _ => None,
        }
    }
}

fn detached() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "socket is being upgraded to TLS")
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::TlsToServer(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::TlsFromClient(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::TlsToServer(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::TlsFromClient(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::TlsToServer(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            Stream::TlsFromClient(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
            Stream::TlsToServer(s) => s.is_write_vectored(),
            Stream::TlsFromClient(s) => s.is_write_vectored(),
            Stream::Detached => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsToServer(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::TlsFromClient(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsToServer(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::TlsFromClient(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::Detached => Poll::Ready(Ok(())),
        }
    }
}

/// Stop reading from a peer while this much is queued for the other one: back-pressure instead of memory.
pub(crate) const MAX_QUEUED: usize = 256 * 1024;

/// The most one client read adds to a read buffer.
pub(crate) const READ_SCRATCH: usize = 64 * 1024;

thread_local! {
    /// Where client reads land first; see [`Conn::poll_read_compact`].
    static SCRATCH: std::cell::RefCell<Box<[u8]>> = std::cell::RefCell::new(vec![0u8; READ_SCRATCH].into_boxed_slice());
}

/// Bytes queued for a socket, in order. Most of the time that is one chunk (a server's reply, a client's
/// query), written with a plain write; more chunks go out with one vectored write.
#[derive(Debug, Default)]
pub(crate) struct WriteQueue {
    head: Option<Bytes>,
    /// Chunks after `head`; allocated only when more than one is queued.
    tail: VecDeque<Bytes>,
    len: usize,
    /// Bytes written to the socket over the queue's life.
    sent: u64,
}

/// The most chunks one vectored write takes.
const MAX_SLICES: usize = 64;
/// The slices filled for a write of a few chunks: each write fills (and first clears) the whole array.
const FEW_SLICES: usize = 8;

/// Fills `slices` with `head` and the first chunks of `tail`, as many as fit, for one vectored write; says how
/// many it filled.
fn fill_slices<'a>(slices: &mut [IoSlice<'a>], head: &'a Bytes, tail: &'a VecDeque<Bytes>) -> usize {
    slices[0] = IoSlice::new(head);
    let n = (tail.len() + 1).min(slices.len());
    for (slot, chunk) in slices[1..n].iter_mut().zip(tail.iter()) {
        *slot = IoSlice::new(chunk);
    }
    n
}

/// One vectored write of `head` and the first chunks of `tail`, at most `N` in all.
fn poll_write_chunks<const N: usize>(
    stream: &mut Stream,
    cx: &mut Context<'_>,
    head: &Bytes,
    tail: &VecDeque<Bytes>,
) -> Poll<io::Result<usize>> {
    let mut slices = [IoSlice::new(&[]); N];
    let n = fill_slices(&mut slices, head, tail);
    Pin::new(stream).poll_write_vectored(cx, &slices[..n])
}

/// The same, straight to the socket.
fn write_chunks<const N: usize>(
    fd: std::os::fd::BorrowedFd<'_>,
    head: &Bytes,
    tail: &VecDeque<Bytes>,
) -> rustix::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); N];
    let n = fill_slices(&mut slices, head, tail);
    rustix::io::writev(fd, &slices[..n])
}

impl WriteQueue {
    /// Bytes written to the socket so far (not merely queued).
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// Bytes ever queued: written or waiting.
    pub(crate) fn queued_total(&self) -> u64 {
        self.sent + self.len as u64
    }

    pub(crate) fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        if self.head.is_none() {
            self.head = Some(bytes);
        } else {
            self.tail.push_back(bytes);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes `bytes` straight to a plain socket when nothing is queued ahead of them, and says how many
    /// went: the caller queues the rest. A full socket or a failed write takes none (a failure shows again
    /// at the flush, whose write fails the same way).
    pub(crate) fn write_through(&mut self, stream: &Stream, bytes: &[u8]) -> usize {
        if self.len > 0 || bytes.is_empty() {
            return 0;
        }
        let Some(fd) = stream.plain_fd() else { return 0 };
        match rustix::net::send(fd, bytes, rustix::net::SendFlags::NOSIGNAL) {
            Ok(written) => {
                self.sent += written as u64;
                written
            }
            Err(_) => 0,
        }
    }

    /// Writes until the queue is empty (`Ready(Ok)`) or the socket is full (`Pending`).
    pub(crate) fn poll_flush(&mut self, stream: &mut Stream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(head) = &self.head {
            // A plain socket almost always has room: write at once, without tokio's readiness bookkeeping,
            // and go through tokio only when the socket is full (it then registers the task's waker).
            if let Some(fd) = stream.plain_fd() {
                let result = match self.tail.len() {
                    0 => rustix::net::send(fd, head, rustix::net::SendFlags::NOSIGNAL),
                    1..FEW_SLICES => write_chunks::<FEW_SLICES>(fd, head, &self.tail),
                    _ => write_chunks::<MAX_SLICES>(fd, head, &self.tail),
                };
                match result {
                    Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Ok(written) => {
                        self.advance(written);
                        continue;
                    }
                    Err(rustix::io::Errno::AGAIN) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Poll::Ready(Err(e.into())),
                }
            }
            let result = match self.tail.len() {
                0 => Pin::new(&mut *stream).poll_write(cx, head),
                // An extended-protocol unit and its replies come in a few chunks: a few slices to fill.
                1..FEW_SLICES => poll_write_chunks::<FEW_SLICES>(stream, cx, head, &self.tail),
                _ => poll_write_chunks::<MAX_SLICES>(stream, cx, head, &self.tail),
            };
            match result {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => self.advance(written),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        self.sent += n as u64;
        while n > 0 {
            let Some(head) = self.head.as_mut() else { break };
            if n >= head.len() {
                n -= head.len();
                self.head = self.tail.pop_front();
            } else {
                let _ = head.split_to(n);
                n = 0;
            }
        }
    }

    /// Everything queued, in order, emptying the queue (tests look at what would be written).
    #[cfg(test)]
    pub(crate) fn take_all(&mut self) -> Vec<u8> {
        let mut all = Vec::with_capacity(self.len);
        all.extend(
            self.head.take().iter().chain(self.tail.drain(..).collect::<Vec<_>>().iter()).flat_map(|b| b.iter()),
        );
        self.len = 0;
        all
    }

    /// Gives back the queue's own allocation once it is empty, unless it has room for at most `keep_slots`
    /// chunks.
    pub(crate) fn shrink_if_empty(&mut self, keep_slots: usize) {
        if self.len == 0 && self.tail.capacity() > keep_slots {
            self.tail = VecDeque::new();
        }
    }

    /// Writes everything, waiting as needed.
    pub(crate) async fn flush(&mut self, stream: &mut Stream) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_flush(stream, cx)).await?;
        stream.flush().await
    }
}

/// What the last read of a connection through the scratch buffer left with tokio, kept in the connection:
/// every such read, whatever path makes it, keeps it true (see `net::armed`, which skips reads by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadNote {
    /// Every poll reads: a multi-thread runtime.
    Always,
    /// The next poll reads: the last one found bytes or the peer's end, or was held back by the task's
    /// budget (which leaves no waker), or there was none yet.
    Read,
    /// The last read found nothing and left the task's waker with tokio.
    Armed,
}

impl ReadNote {
    /// The note of a new connection, read by tasks of the runtime this is called on.
    pub(crate) fn new() -> ReadNote {
        match Handle::try_current().map(|handle| handle.runtime_flavor()) {
            Ok(RuntimeFlavor::CurrentThread) => ReadNote::Read,
            _ => ReadNote::Always,
        }
    }

    /// Notes what a read through the scratch buffer answered.
    #[inline]
    fn after<T>(&mut self, polled: &Poll<T>) {
        if *self != ReadNote::Always {
            // A poll held back by the budget answers Pending too, and leaves no waker with the socket.
            let left_waker = polled.is_pending() && tokio::task::coop::has_budget_remaining();
            *self = if left_waker { ReadNote::Armed } else { ReadNote::Read };
        }
    }
}

/// A socket with its read buffer, framer and write queue.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    pub(crate) rbuf: BytesMut,
    pub(crate) framer: Framer,
    pub(crate) out: WriteQueue,
    /// Bytes read from the socket over its life (the metrics publish them per transaction).
    pub(crate) received: u64,
    /// What its last read through the scratch buffer left with tokio (see `net::armed`).
    pub(super) note: ReadNote,
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
    pub(crate) fn with_stream(stream: Stream, sender: Sender) -> Self {
        let (rbuf, framer, out, note) = (BytesMut::new(), Framer::new(sender), WriteQueue::default(), ReadNote::new());
        Conn { stream, rbuf, framer, out, received: 0, note }
    }

    /// Takes the plain TCP socket out (for a TLS handshake); `None` if it is not plain TCP.
    pub(crate) fn take_tcp(&mut self) -> Option<TcpStream> {
        match std::mem::replace(&mut self.stream, Stream::Detached) {
            Stream::Tcp(tcp) => Some(tcp),
            other => {
                self.stream = other;
                None
            }
        }
    }

    /// Reads once into the buffer, reserving `chunk` bytes of room first.
    pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>, chunk: usize) -> Poll<io::Result<ReadOutcome>> {
        if self.rbuf.capacity() - self.rbuf.len() < chunk / 2 {
            self.rbuf.reserve(chunk);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.rbuf) {
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(ReadOutcome::Eof)),
            Poll::Ready(Ok(n)) => {
                self.received += n as u64;
                Poll::Ready(Ok(ReadOutcome::Data))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Reads once through a per-thread scratch buffer and keeps only the bytes that came, so that a
    /// connection that reads small messages and then sits idle holds no read buffer at all. Notes what the
    /// read left with tokio, for [`poll_read_armed`](Self::poll_read_armed).
    pub(crate) fn poll_read_compact(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ReadOutcome>> {
        let polled = self.poll_read_scratch(cx);
        self.note.after(&polled);
        polled
    }

    fn poll_read_scratch(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ReadOutcome>> {
        SCRATCH.with_borrow_mut(|scratch| {
            let mut buf = tokio::io::ReadBuf::new(&mut scratch[..]);
            match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => Poll::Ready(Ok(ReadOutcome::Eof)),
                Poll::Ready(Ok(())) => {
                    self.received += buf.filled().len() as u64;
                    self.rbuf.extend_from_slice(buf.filled());
                    Poll::Ready(Ok(ReadOutcome::Data))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
    }

    /// Reads once through the scratch buffer, waiting for data.
    pub(crate) async fn read_compact(&mut self) -> io::Result<ReadOutcome> {
        std::future::poll_fn(|cx| self.poll_read_compact(cx)).await
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

    /// Sends the first `n` buffered bytes to `stream` at once if nothing waits in `to`, its write queue, and
    /// moves what the socket did not take to that queue. The bytes written never leave the read buffer as a
    /// chunk of their own, which spares the buffer's sharing (a count and its atomic updates) and the queue.
    pub(crate) fn forward_through(&mut self, n: usize, to: &mut WriteQueue, stream: &Stream) {
        let written = to.write_through(stream, &self.rbuf[..n]);
        bytes::Buf::advance(&mut self.rbuf, written);
        self.forward(n - written, to);
    }

    /// Gives back buffers larger than `keep` once they are empty, so that idle connections stay small. With
    /// `keep` zero the read buffer is always let go: even an empty one may still share (and so keep alive)
    /// the allocation of bytes already split off and sent. The write queue keeps room for `keep_slots`
    /// chunks: a server connection's, which an extended-protocol unit fills with two or three each
    /// transaction, keeps its room (about 130 instructions a transaction to allocate and free again); a
    /// client's, one of thousands that sit idle, none.
    pub(crate) fn shrink_if_idle(&mut self, keep: usize, keep_slots: usize) {
        if self.rbuf.is_empty() && (keep == 0 || self.rbuf.capacity() > keep) {
            self.rbuf = BytesMut::new();
        }
        self.out.shrink_if_empty(keep_slots);
    }

    /// Without waiting: has the peer closed the socket or sent anything unasked? Used on idle server
    /// connections, which must have nothing to say, before every transaction that takes one.
    pub(crate) fn idle_peer_spoke(&mut self) -> bool {
        let mut probe = [0u8; 1];
        // A plain socket is asked without a waker (about 120 instructions fewer): while tokio has seen no
        // event on it, no system call is made; once it has, one read says whether the peer spoke.
        let plain = match &self.stream {
            Stream::Tcp(s) => Some(s.try_read(&mut probe)),
            Stream::Unix(s) => Some(s.try_read(&mut probe)),
            _ => None,
        };
        if let Some(read) = plain {
            return !matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        }
        // TLS may hold decrypted bytes, or a record that decrypts to nothing: its stream is polled.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = tokio::io::ReadBuf::new(&mut probe);
        !matches!(Pin::new(&mut self.stream).poll_read(&mut cx, &mut buf), Poll::Pending)
    }
}

#[cfg(test)]
mod tests;
