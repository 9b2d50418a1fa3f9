//! The Unix-domain socket that clients on the same host (a Lambda function beside its extension, an
//! application beside its sidecar) may use instead of TCP. It is named the way libpq, and every driver that
//! follows it, looks for a server: `<dir>/.s.PGSQL.<port>`, so `psql -h DIR -p PORT` and `host: '/tmp'` find
//! it without any pgmux-specific setting.
//!
//! A socket file outlives a killed process. At bind, a file nobody answers on is taken over; one that
//! answers belongs to a live server and is left alone (an error, as PostgreSQL and PgBouncer do). The file
//! is removed when the socket is dropped.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

/// Everyone on the host may connect, as with PostgreSQL's `unix_socket_permissions` default: who may log
/// in is client authentication's business, the same as over TCP.
const MODE: u32 = 0o777;

/// A bound, listening socket file.
#[derive(Debug)]
pub(crate) struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
}

/// `<dir>/.s.PGSQL.<port>`.
pub(crate) fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

impl UnixSocket {
    /// Binds `<dir>/.s.PGSQL.<port>`, replacing a stale file of a process that is gone.
    pub(crate) fn bind(dir: &Path, port: u16) -> io::Result<UnixSocket> {
        let path = socket_path(dir, port);
        remove_if_stale(&path)?;
        let listener = UnixListener::bind(&path)?;
        let socket = UnixSocket { listener, path };
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(MODE))?;
        Ok(socket)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) async fn accept(&self) -> io::Result<UnixStream> {
        self.listener.accept().await.map(|(stream, _)| stream)
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes `path` if it is a socket file that no process listens on; fails if a process does, or if the
/// path is something other than a socket.
fn remove_if_stale(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "the path exists and is not a socket"));
    }
    // Connecting to a Unix socket does not wait: a listener answers at once, a dead file is refused.
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(io::ErrorKind::AddrInUse, "another server is listening on it")),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn named_for_libpq_stale_files_replaced_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(socket_path(Path::new("/tmp"), 5432), Path::new("/tmp/.s.PGSQL.5432"));
        let first = UnixSocket::bind(dir.path(), 6543).unwrap();
        let mode = std::fs::metadata(first.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);
        let err = UnixSocket::bind(dir.path(), 6543).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
        // A file left behind by a process that died (a std listener closed without removing its file).
        let stale = socket_path(dir.path(), 6544);
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        let second = UnixSocket::bind(dir.path(), 6544).unwrap();
        assert!(UnixStream::connect(second.path()).await.is_ok());
        let path = first.path().to_owned();
        drop(first);
        assert!(!path.exists(), "the file goes with the socket");
        let plain = socket_path(dir.path(), 6545);
        std::fs::write(&plain, b"not a socket").unwrap();
        assert_eq!(UnixSocket::bind(dir.path(), 6545).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    }
}
