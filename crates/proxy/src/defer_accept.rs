//! `TCP_DEFER_ACCEPT` on the client listener (Linux): the kernel hands a new connection over only once the
//! client has sent something. A PostgreSQL client always speaks first (its start-up packet, or a request for
//! TLS or GSS), so pgmux wakes once per new client, with its first bytes already there to read, rather than
//! once to accept and again when those bytes arrive. PgBouncer sets the same option by default on Linux.

#![allow(unsafe_code)] // setsockopt(2); see the SAFETY note

use tokio::net::TcpListener;

/// How long the kernel holds a connection that has sent nothing before handing it over anyway, in seconds
/// (PgBouncer's value). A connection that is never used costs the kernel a little, not pgmux.
const HOLD_SECONDS: libc::c_int = 45;

/// Sets the option on `listener`; an error if the kernel refuses it.
#[cfg(target_os = "linux")]
pub(crate) fn set(listener: &TcpListener) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = HOLD_SECONDS;
    let len = std::mem::size_of_val(&value) as libc::socklen_t;
    // SAFETY: the descriptor belongs to `listener`, which is alive for the call; the kernel reads `len`
    // bytes from `value`, a c_int that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&raw const value).cast(),
            len,
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Elsewhere there is no such option: nothing to do.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set(_listener: &TcpListener) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// Reads the option back the way `ss` and the kernel see it.
    fn get(listener: &TcpListener) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of_val(&value) as libc::socklen_t;
        // SAFETY: as in `set`; the kernel writes at most `len` bytes into `value`.
        let rc = unsafe {
            libc::getsockopt(
                listener.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&raw mut value).cast(),
                &raw mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
        value
    }

    #[tokio::test]
    async fn a_client_is_accepted_once_it_has_spoken() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        assert_eq!(get(&listener), 0, "off on a fresh socket");
        set(&listener).unwrap();
        assert!(get(&listener) > 0, "on once set (the kernel rounds the seconds to its retransmissions)");
        let addr = listener.local_addr().unwrap();
        // A client that has connected but said nothing is not handed over.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let early = tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
        assert!(early.is_err(), "a connection that sent nothing was accepted");
        // Once it speaks, it is, with its bytes there to read.
        silent.write_all(b"\0\0\0\x08\x04\xd2\x16\x2f").await.unwrap();
        let (mut accepted, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 8];
        accepted.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"\0\0\0\x08\x04\xd2\x16\x2f");
    }
}
