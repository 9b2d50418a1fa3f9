//! What the clients record: each operation with its times, outcome and serving node, the connections that
//! ended without the client closing them, the acknowledged writes, and what the lock-holder scenario saw.
//! The report reads these; the rest of `workload` only fills them in.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Idle,
    Busy,
    InFlight,
    Holder,
    Reader,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    Connect,
    /// Warm-up before the fault (a write, so a server connection is open and used).
    Warmup,
    /// An autocommit `INSERT`.
    Write,
    /// `BEGIN; INSERT; SELECT pg_sleep(0.02); COMMIT` in four round trips.
    Txn,
    /// `BEGIN; INSERT; SELECT pg_sleep(long); COMMIT`, in flight at the fault.
    LongTxn,
    /// A reader client's autocommit `SELECT inet_server_addr(), pg_is_in_recovery()` (its warm-up too).
    Read,
}

impl OpKind {
    /// Whether a success is an acknowledged write.
    pub fn writes(self) -> bool {
        matches!(self, OpKind::Warmup | OpKind::Write | OpKind::Txn | OpKind::LongTxn)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Outcome {
    Ok,
    /// An ErrorResponse: SQLSTATE, severity (ERROR or FATAL) and the message.
    Sql {
        code: String,
        severity: String,
        message: String,
    },
    /// No ErrorResponse: the connection failed (`closed`, `refused`, `reset`, ...).
    Transport {
        error: String,
    },
    /// Abandoned after the operation timeout.
    Timeout,
}

impl Outcome {
    /// The key errors are counted by: the SQLSTATE, `net:<kind>`, or `timeout`.
    pub fn key(&self) -> Option<String> {
        match self {
            Outcome::Ok => None,
            Outcome::Sql { code, .. } => Some(code.clone()),
            Outcome::Transport { error } => Some(format!("net:{error}")),
            Outcome::Timeout => Some("timeout".to_owned()),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Op {
    pub client: u32,
    /// The database name (route) the client connected to.
    pub route: String,
    pub role: Role,
    pub seq: u32,
    pub kind: OpKind,
    pub start_ms: f64,
    pub end_ms: f64,
    pub outcome: Outcome,
    /// The client connection was closed by the other side during or right after this operation.
    pub closed: bool,
    /// `inet_server_addr()` of the node that served a successful write.
    pub node: Option<String>,
    /// Its `pg_is_in_recovery()`: a write can only succeed on a node that is not.
    pub in_recovery: Option<bool>,
}

/// A client connection that ended without the client closing it.
#[derive(Clone, Debug, Serialize)]
pub struct Disconnect {
    pub client: u32,
    pub route: String,
    pub role: Role,
    pub at_ms: f64,
}

/// What the lock-holder scenario observed directly on the node.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockWatch {
    /// The row was locked just before the kill (otherwise the scenario proved nothing).
    pub held_before_kill: bool,
    /// When, after the kill, another session could lock the row.
    pub released_after_ms: Option<f64>,
}

/// Everything the clients recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Record {
    pub ops: Vec<Op>,
    pub disconnects: Vec<Disconnect>,
    /// (client, seq) of every acknowledged write.
    pub acked: Vec<(u32, u32)>,
}

impl Record {
    pub(super) fn merge(&mut self, other: Record) {
        self.ops.extend(other.ops);
        self.disconnects.extend(other.disconnects);
        self.acked.extend(other.acked);
    }

    /// The routes its clients used, in order of first use.
    pub fn routes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for op in &self.ops {
            if !out.contains(&op.route) {
                out.push(op.route.clone());
            }
        }
        out
    }

    /// What the clients of `route` recorded.
    pub fn of_route(&self, route: &str) -> Record {
        let clients: std::collections::HashSet<u32> =
            self.ops.iter().filter(|op| op.route == route).map(|op| op.client).collect();
        Record {
            ops: self.ops.iter().filter(|op| op.route == route).cloned().collect(),
            disconnects: self.disconnects.iter().filter(|d| d.route == route).cloned().collect(),
            acked: self.acked.iter().filter(|(client, _)| clients.contains(client)).copied().collect(),
        }
    }
}
