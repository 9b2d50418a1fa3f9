//! The writer host name and the file that says where it points: the namespace's own hosts file, which the
//! failover scenarios flip from node A's proxy to node B's. Written through its `/etc/netns` path, in place
//! (`pgmux_testkit::netns::overwrite_in_place`), never through `/etc/hosts`.

use std::path::PathBuf;

use pgmux_testkit::netns;

use crate::NAMING;

/// The host name clients and poolers connect to; it points at node A's or node B's Toxiproxy address.
pub const WRITER_NAME: &str = "writer.test";

/// The hosts file of the namespace the driver runs in.
#[derive(Debug, Clone)]
pub struct HostsFile {
    path: PathBuf,
}

impl HostsFile {
    pub fn new(namespace: &str) -> Result<HostsFile, String> {
        if !namespace.starts_with(NAMING.prefix) {
            return Err(format!("{namespace:?} is not a chaos namespace"));
        }
        Ok(HostsFile { path: netns::hosts_path(namespace) })
    }

    /// The file's text when the writer name points at `addr` (all addresses used have the same length).
    pub fn text(addr: &str) -> String {
        format!("127.0.0.1 localhost\n{addr} {WRITER_NAME}\n")
    }

    /// Point the writer name at `addr`, overwriting the file in place.
    pub fn point_at(&self, addr: &str) -> Result<(), String> {
        netns::overwrite_in_place(&self.path, &HostsFile::text(addr)).map_err(|e| e.to_string())
    }
}
