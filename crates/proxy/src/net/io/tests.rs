use super::*;

#[test]
fn advance_consumes_whole_and_partial_chunks() {
    let mut q = WriteQueue::default();
    q.push(Bytes::from_static(b"abc"));
    q.push(Bytes::new());
    q.push(Bytes::from_static(b"defg"));
    assert_eq!(q.len(), 7);
    q.advance(4);
    assert_eq!((q.len(), q.sent()), (3, 4));
    assert_eq!(q.head.as_deref(), Some(&b"efg"[..]));
    q.advance(3);
    assert_eq!((q.len(), q.sent()), (0, 7), "sent counts what was written, over the queue's life");
    assert!(q.head.is_none() && q.tail.is_empty());
}

#[tokio::test]
async fn a_flush_writes_every_chunk_once_and_in_order_however_many_are_queued() {
    // One chunk (a plain write), a few (the small array of slices), exactly as many as it holds, one
    // more, and more than one vectored write takes.
    for count in [1, 2, 3, FEW_SLICES - 1, FEW_SLICES, FEW_SLICES + 1, MAX_SLICES + 6] {
        let (mut conn, mut peer) = pair().await;
        let mut q = WriteQueue::default();
        let mut want = Vec::new();
        for i in 0..count {
            let chunk = vec![b'a' + (i % 26) as u8; 1 + i % 5];
            want.extend_from_slice(&chunk);
            q.push(Bytes::from(chunk));
        }
        let flushed = pgmux_timer::timeout(std::time::Duration::from_secs(10), q.flush(&mut conn.stream));
        assert!(matches!(flushed.await, Ok(Ok(()))), "{count} chunks are written");
        assert_eq!((q.len(), q.sent()), (0, want.len() as u64));
        let mut got = vec![0; want.len()];
        let read = pgmux_timer::timeout(std::time::Duration::from_secs(10), peer.read_exact(&mut got));
        assert!(matches!(read.await, Ok(Ok(_))), "the peer reads {count} chunks' bytes");
        assert_eq!(got, want, "{count} chunks");
    }
}

#[tokio::test]
async fn bytes_that_reach_a_peer_after_it_closed_leave_a_reset_behind_its_end_of_file() {
    use tokio::io::AsyncWriteExt as _;
    // The peer says its last words and closes before our bytes come: it never reads them.
    let (mut conn, mut peer) = pair().await;
    peer.write_all(b"FATAL").await.expect("the peer's last words");
    drop(peer);
    conn.stream.write_all(b"Q").await.expect("a write into a closed peer is taken");
    let mut got = Vec::new();
    conn.stream.read_to_end(&mut got).await.expect("its words, then a plain end of file");
    assert_eq!(got, b"FATAL");
    // The reset follows our write over loopback within a moment; across a network, a round trip later.
    let mut reset = false;
    for _ in 0..100 {
        reset = conn.stream.reset_after_close();
        if reset {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(reset, "the reset that answered our bytes is on record");

    // A peer that read our bytes and then closed leaves no reset.
    let (mut conn, mut peer) = pair().await;
    conn.stream.write_all(b"Q").await.expect("a write");
    let mut one = [0u8; 1];
    peer.read_exact(&mut one).await.expect("the peer reads it");
    peer.write_all(b"FATAL").await.expect("its last words");
    drop(peer);
    let mut got = Vec::new();
    conn.stream.read_to_end(&mut got).await.expect("its words, then a plain end of file");
    assert!(!conn.stream.reset_after_close(), "a plain close, with our bytes read");
}

#[tokio::test]
async fn a_flush_into_a_full_socket_waits_for_room_and_then_writes_the_rest() {
    // Writes go to a plain socket directly; when it is full, tokio must hold the task's waker, or the
    // flush never finishes once the peer reads. Over TCP and a Unix socket, one chunk and many.
    let (tcp, tcp_peer) = pair().await;
    let (unix, unix_peer) = UnixStream::pair().expect("a Unix socket pair");
    let ends: [(Stream, Box<dyn tokio::io::AsyncRead + Unpin + Send>); 2] =
        [(tcp.stream, Box::new(tcp_peer)), (Stream::Unix(unix), Box::new(unix_peer))];
    for (mut stream, mut peer) in ends {
        for chunks in [1, 40] {
            let mut q = WriteQueue::default();
            let step = (32 << 20) / chunks;
            let total = step * chunks;
            for i in 0..chunks {
                q.push(Bytes::from(vec![(i % 251) as u8; step]));
            }
            let mut cx = Context::from_waker(std::task::Waker::noop());
            assert!(q.poll_flush(&mut stream, &mut cx).is_pending(), "32 MiB fill the socket");
            let reader = tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let mut got = vec![0u8; total];
                peer.read_exact(&mut got).await.map(|_| (got, peer))
            });
            let flushed = pgmux_timer::timeout(std::time::Duration::from_secs(20), q.flush(&mut stream)).await;
            assert!(matches!(flushed, Ok(Ok(()))), "the flush finishes once the peer reads ({chunks} chunks)");
            assert_eq!((q.len(), q.sent()), (0, total as u64));
            let (got, back) = reader.await.expect("the reader").expect("the peer reads every byte");
            peer = back;
            assert!(got.chunks(step).enumerate().all(|(i, c)| c.iter().all(|&b| b == (i % 251) as u8)));
        }
    }
}

#[tokio::test]
async fn bytes_forwarded_through_keep_their_order_behind_queued_ones_and_count_as_sent() {
    let (mut client, mut peer) = pair().await;
    let mut server = Conn::with_stream(Stream::Detached, Sender::Backend);
    // Nothing queued: the socket takes the bytes at once, and they count as sent.
    server.rbuf.extend_from_slice(b"first|rest");
    server.forward_through(6, &mut client.out, &client.stream);
    assert_eq!((client.out.len(), client.out.sent()), (0, 6), "written at once");
    assert_eq!(&server.rbuf[..], b"rest", "the bytes written left the read buffer");
    // Something queued: the next bytes wait behind it.
    client.out.push(Bytes::from_static(b"queued|"));
    server.forward_through(4, &mut client.out, &client.stream);
    assert_eq!((client.out.len(), client.out.sent()), (11, 6), "queued behind, not written ahead");
    assert!(server.rbuf.is_empty());
    let flushed = pgmux_timer::timeout(std::time::Duration::from_secs(10), client.out.flush(&mut client.stream));
    assert!(matches!(flushed.await, Ok(Ok(()))));
    let mut got = vec![0; 17];
    peer.read_exact(&mut got).await.expect("every byte");
    assert_eq!(&got, b"first|queued|rest");

    // A socket that takes part of them: the rest is queued, in order, and flushed once the peer reads.
    let big: Vec<u8> = (0..(32u32 << 20)).map(|i| (i % 251) as u8).collect();
    server.rbuf.extend_from_slice(&big);
    server.forward_through(big.len(), &mut client.out, &client.stream);
    let taken = client.out.sent() - 17;
    assert!(taken > 0 && (taken as usize) < big.len(), "the socket took some, not 32 MiB");
    assert_eq!(client.out.len() as u64 + taken, big.len() as u64);
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; big.len()];
        peer.read_exact(&mut got).await.map(|_| got == big)
    });
    let flushed = pgmux_timer::timeout(std::time::Duration::from_secs(20), client.out.flush(&mut client.stream));
    assert!(matches!(flushed.await, Ok(Ok(()))));
    assert_eq!(reader.await.expect("the reader").ok(), Some(true), "every byte, in order");
}

use tokio::io::AsyncReadExt as _;

/// A connection on a plain socket, and its peer.
async fn pair() -> (Conn, TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a listener");
    let peer = TcpStream::connect(listener.local_addr().expect("an address")).await.expect("a connection");
    let (ours, _) = listener.accept().await.expect("the accepted side");
    (Conn::with_stream(Stream::Tcp(ours), Sender::Frontend), peer)
}
