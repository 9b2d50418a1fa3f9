//! The application host of the network lab: a network namespace of its own (`pgmux_testkit::netns`), joined
//! to the machine's by a veth pair, with its own hosts file (`/etc/netns/<name>/hosts`, which `ip netns exec`
//! mounts over `/etc/hosts` for the programs it starts) in which the database's name resolves to the
//! machine's end of the pair. The machine's side is the database host: PostgreSQL and the delay line run
//! there.
//!
//! Everything is named after the driver's pid (`pgmux-bench-<pid>-app`, interfaces `pgmb<pid>d` and
//! `pgmb<pid>a`, addresses in 10.0.0.0/8 derived from the pid), so that concurrent drivers do not collide and
//! a later driver can remove what a killed one left behind. Dropping the [`AppHost`] removes the namespace,
//! the pair and the hosts file; the programs started in it die with the driver (`PR_SET_PDEATHSIG`).

use std::net::Ipv4Addr;

use pgmux_testkit::netns::{self, Namespace, Naming};

/// The name the database is reached by, in the application host's hosts file and in its certificate.
pub const DB_HOST_NAME: &str = "db.pgmux.test";

/// `pgmux-bench-<pid>-app`, with the veth pair `pgmb<pid>d` (the database host's end) and `pgmb<pid>a`.
pub const NAMING: Naming = Naming { prefix: "pgmux-bench-", suffix: "-app", veth: Some("pgmb") };

/// The application host's namespace and its link to the machine.
#[derive(Debug)]
pub struct AppHost {
    /// The machine's end of the pair: what [`DB_HOST_NAME`] resolves to on the application host.
    pub db_addr: Ipv4Addr,
    /// The application host's address, where its poolers listen (reachable from the machine, for the
    /// driver's readiness checks).
    pub app_addr: Ipv4Addr,
    namespace: Namespace,
}

impl AppHost {
    /// Remove what killed drivers left, then create the namespace, its hosts file and the veth pair with
    /// its addresses. Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); the error says which step failed and
    /// why.
    pub fn create() -> Result<AppHost, String> {
        netns::sweep(NAMING);
        let (db_addr, app_addr) = netns::slash30(std::process::id());
        netns::check_unused(db_addr).map_err(|e| format!("cannot build the lab: {e}"))?;
        let hosts = format!("127.0.0.1\tlocalhost\n::1\tlocalhost\n{db_addr}\t{DB_HOST_NAME}\n");
        // From here on, dropping the namespace removes whatever was made.
        let mut namespace = Namespace::create(NAMING, &hosts).map_err(|e| e.to_string())?;
        namespace.link_to_host(db_addr, app_addr, 30).map_err(|e| e.to_string())?;
        Ok(AppHost { db_addr, app_addr, namespace })
    }

    /// The namespace's name, for `pgmux_testkit::netns::exec_in` and the report.
    pub fn name(&self) -> &str {
        self.namespace.name()
    }
}
