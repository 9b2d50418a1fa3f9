//! A client read the relay loop skips when it could only find nothing again, on a runtime where that is
//! sure (see [`ReadNote`], which each connection keeps).
//!
//! tokio's I/O driver, when an event comes for a socket, marks the socket readable and then takes the
//! waker its last empty read left and wakes it. On a current-thread runtime the driver runs only between
//! task polls, so no task sees one step without the other: while the waker a read left is still with
//! tokio, the socket is not marked, and once the waker is taken, it is. So a task whose last read of a
//! socket found nothing, and which finds the socket not marked, knows its waker is still there, and another
//! poll would only find nothing and leave the same waker: it can skip the poll. The relay loop's turn after
//! one woken by the server polls the client's socket so, once per transaction.
//!
//! On a multi-thread runtime the driver runs on one worker while the task runs on another, and the two
//! steps can straddle a poll: the task finds the mark (set for bytes it already read), reads nothing,
//! clears it and leaves its waker, which the driver then takes and wakes. Woken, the task finds the socket
//! not marked, and a skipped poll would leave no waker at all: the client's next message would wake
//! nobody (how 1bab76b's skip, which did not ask the runtime, lost wake-ups; docs/benchmarks.md). There
//! every poll reads.

use std::io;
use std::task::{Context, Poll};

use tokio::io::Interest;

use super::io::{Conn, ReadNote, ReadOutcome, Stream};

impl Stream {
    /// Whether tokio marked the socket readable: asked without a system call and without leaving a waker.
    /// Always for TLS, which may hold decrypted bytes that no socket event announces.
    fn marked_readable(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.try_io(Interest::READABLE, || Ok(())).is_ok(),
            Stream::Unix(s) => s.try_io(Interest::READABLE, || Ok(())).is_ok(),
            _ => true,
        }
    }
}

impl Conn {
    /// [`poll_read_compact`](Self::poll_read_compact), skipped while the connection's last read found nothing
    /// and tokio has not marked the socket readable since (see the module's note). Only the task that owns
    /// the connection may poll it so: the waker left with tokio is that task's.
    pub(crate) fn poll_read_armed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ReadOutcome>> {
        if self.note == ReadNote::Armed && !self.stream.marked_readable() {
            return Poll::Pending;
        }
        self.poll_read_compact(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use pgmux_proto::Sender;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    use super::*;

    /// A waker that notes it was woken.
    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A client connection on a plain socket, read as the relay loop reads it.
    struct Noted {
        conn: Conn,
    }

    impl Noted {
        fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ReadOutcome>> {
            self.conn.poll_read_armed(cx)
        }

        fn note(&self) -> ReadNote {
            self.conn.note
        }

        /// Polls once with a waker of its own: whether it found bytes, and the flag that waker sets.
        fn poll_once(&mut self) -> (bool, Arc<Flag>) {
            let flag = Arc::new(Flag::default());
            let waker = Waker::from(Arc::clone(&flag));
            let found = self.poll_read(&mut Context::from_waker(&waker)).is_ready();
            (found, flag)
        }

        /// Reads until the bytes sent are in, polling as the relay loop does.
        async fn read_some(&mut self) {
            let read = std::future::poll_fn(|cx| self.poll_read(cx));
            let found = tokio::time::timeout(Duration::from_secs(10), read).await;
            assert!(matches!(found, Ok(Ok(ReadOutcome::Data))), "the peer's bytes arrive");
        }
    }

    /// A connection made on the current runtime, and its peer.
    async fn noted_pair() -> (Noted, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a listener");
        let peer = TcpStream::connect(listener.local_addr().expect("an address")).await.expect("a connection");
        let (ours, _) = listener.accept().await.expect("the accepted side");
        (Noted { conn: Conn::with_stream(Stream::Tcp(ours), Sender::Frontend) }, peer)
    }

    /// Waits (at most ten seconds, in 10 ms steps) for `flag` to be set.
    async fn woken(flag: &Flag) -> bool {
        for _ in 0..1000 {
            if flag.0.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_skipped_read_still_wakes_the_task_when_the_client_speaks() {
        let (mut conn, mut peer) = noted_pair().await;
        let (found, first) = conn.poll_once();
        assert!(!found && conn.note() == ReadNote::Armed, "an empty socket arms the read");
        // Skipped: the first poll's waker stays with tokio, and is the one woken.
        let (found, second) = conn.poll_once();
        assert!(!found);
        peer.write_all(b"Q").await.expect("the peer writes");
        assert!(woken(&first).await, "the waker left by the first poll is woken");
        assert!(!second.0.load(Ordering::SeqCst), "the skipped poll left nothing with tokio");
        conn.read_some().await;
        assert_eq!(conn.note(), ReadNote::Read, "a read that found bytes arms nothing");
    }

    #[tokio::test]
    async fn a_read_that_found_bytes_is_not_skipped_next_time() {
        // The wake that announced the bytes took the task's waker from tokio: the next poll must leave one
        // again, though tokio already marked the socket drained (the read came back short).
        let (mut conn, mut peer) = noted_pair().await;
        peer.write_all(b"Q").await.expect("the peer writes");
        conn.read_some().await;
        let (found, flag) = conn.poll_once();
        assert!(!found);
        peer.write_all(b"S").await.expect("the peer writes again");
        assert!(woken(&flag).await, "the poll after a read left its waker");
    }

    #[tokio::test]
    async fn a_read_held_back_by_the_task_s_budget_is_not_skipped_next_time() {
        let (mut conn, mut peer) = noted_pair().await;
        peer.write_all(b"Q").await.expect("the peer writes");
        conn.read_some().await;
        // Spend the task's budget, then poll: tokio answers Pending without leaving a waker.
        std::future::poll_fn(|cx| {
            for _ in 0..10_000 {
                if std::pin::pin!(tokio::task::consume_budget()).poll(cx).is_pending() {
                    break;
                }
            }
            assert!(!tokio::task::coop::has_budget_remaining(), "the budget is spent");
            assert!(conn.poll_read(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        tokio::task::yield_now().await;
        let (found, flag) = conn.poll_once();
        assert!(!found);
        peer.write_all(b"S").await.expect("the peer writes again");
        assert!(woken(&flag).await, "the poll after the budget's refusal left its waker");
    }

    #[tokio::test]
    async fn a_read_by_other_means_keeps_the_note_true() {
        // The wait for a server reads the client with `read_compact`, not the relay's skipping poll. Its read
        // takes the bytes the socket's event announced, and that event took the waker the skipping poll
        // relied on: the next skipping poll must read, and leave its waker.
        let (mut conn, mut peer) = noted_pair().await;
        assert!(!conn.poll_once().0 && conn.note() == ReadNote::Armed, "an empty socket arms the read");
        peer.write_all(b"Q").await.expect("the peer writes");
        let read = tokio::time::timeout(Duration::from_secs(10), conn.conn.read_compact()).await;
        assert!(matches!(read, Ok(Ok(ReadOutcome::Data))), "read by other means");
        let (found, flag) = conn.poll_once();
        assert!(!found);
        peer.write_all(b"S").await.expect("the peer writes again");
        assert!(woken(&flag).await, "the poll after the other read left its waker");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_multi_thread_runtime_every_read_is_polled_and_a_late_take_is_survived() {
        let (mut conn, mut peer) = noted_pair().await;
        let flag = Arc::new(Flag::default());
        let task = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&task);
        assert!(conn.poll_read(&mut cx).is_pending(), "nothing to read yet");
        // What the I/O driver can do on this runtime: an event dispatched on another worker marked the
        // socket, a read found the mark (for bytes read before) and cleared it, then the dispatch took the
        // waker that read had left, and woke it. Played here by handing the socket's reader slot to a no-op
        // waker (tokio keeps one reader waker) and waking the task.
        let Stream::Tcp(socket) = &conn.conn.stream else { unreachable!("a plain socket") };
        assert!(socket.poll_read_ready(&mut Context::from_waker(Waker::noop())).is_pending());
        task.wake_by_ref();
        assert!(flag.0.swap(false, Ordering::SeqCst), "the task is woken");
        // Woken, the task polls again: nothing to read, and this poll must leave its waker with tokio.
        assert!(conn.poll_read(&mut cx).is_pending());
        peer.write_all(b"Q").await.expect("the peer writes");
        assert!(woken(&flag).await, "the client's next bytes wake the task");
        assert_eq!(conn.note(), ReadNote::Always);
    }

    #[tokio::test]
    async fn a_stream_that_is_not_a_plain_socket_is_always_read() {
        // TLS may hold decrypted bytes that no socket event announces; it answers as a detached stream does.
        assert!(Stream::Detached.marked_readable());
        let (conn, _peer) = noted_pair().await;
        assert_eq!(conn.note(), ReadNote::Read, "a plain socket on a current-thread runtime may skip");
    }
}
