//! Which database nodes pgmux may lend: a node's role as its server reports it, and `target_session_attrs`
//! (libpq's setting and names) saying which roles will do.

use std::fmt;

use super::error::UnknownName;

/// What a node is, as its server says at login (or after a promotion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRole {
    /// Accepts writes: not in recovery, `default_transaction_read_only` off.
    ReadWrite,
    /// Not in recovery but read-only by default (`default_transaction_read_only = on`): a writer being
    /// switched away from (blue/green) or set read-only by an administrator.
    ReadOnly,
    /// A hot standby: in recovery, every transaction read-only.
    Standby,
}

impl NodeRole {
    /// The role from the values a server reports: `in_hot_standby` and `default_transaction_read_only`
    /// (PostgreSQL 14 and later report both), or `transaction_read_only` read with a query on older servers.
    pub fn from_settings(in_hot_standby: Option<&str>, read_only: Option<&str>) -> Option<NodeRole> {
        let on = |v: Option<&str>| v.map(|v| v.eq_ignore_ascii_case("on"));
        match (on(in_hot_standby), on(read_only)) {
            (Some(true), _) => Some(NodeRole::Standby),
            (Some(false), Some(true)) => Some(NodeRole::ReadOnly),
            (Some(false), _) => Some(NodeRole::ReadWrite),
            (None, _) => None,
        }
    }
}

impl fmt::Display for NodeRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeRole::ReadWrite => "read-write",
            NodeRole::ReadOnly => "read-only (not in recovery)",
            NodeRole::Standby => "hot standby",
        })
    }
}

/// Which nodes pgmux accepts for new server connections, with libpq's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetSessionAttrs {
    /// Any node.
    Any,
    /// A node that accepts writes (the default: clients of a pooler in front of a writer expect to write).
    ReadWrite,
    /// A node that does not accept writes.
    ReadOnly,
    /// A node not in recovery.
    Primary,
    /// A hot standby.
    Standby,
    /// A standby if there is one; with one host, any node.
    PreferStandby,
}

impl TargetSessionAttrs {
    /// Parses libpq's value.
    pub fn parse(s: &str) -> Result<Self, UnknownName> {
        Ok(match s {
            "any" => TargetSessionAttrs::Any,
            "read-write" => TargetSessionAttrs::ReadWrite,
            "read-only" => TargetSessionAttrs::ReadOnly,
            "primary" => TargetSessionAttrs::Primary,
            "standby" => TargetSessionAttrs::Standby,
            "prefer-standby" => TargetSessionAttrs::PreferStandby,
            other => {
                return Err(UnknownName {
                    setting: "target_session_attrs",
                    got: other.to_owned(),
                    expected: "any, read-write, read-only, primary, standby or prefer-standby",
                });
            }
        })
    }

    /// Whether a node in `role` will do.
    pub fn accepts(self, role: NodeRole) -> bool {
        match self {
            TargetSessionAttrs::Any | TargetSessionAttrs::PreferStandby => true,
            TargetSessionAttrs::ReadWrite => role == NodeRole::ReadWrite,
            TargetSessionAttrs::ReadOnly => role != NodeRole::ReadWrite,
            TargetSessionAttrs::Primary => role != NodeRole::Standby,
            TargetSessionAttrs::Standby => role == NodeRole::Standby,
        }
    }

    /// Whether the role must be known at all (with `any`, no question is asked).
    pub fn cares(self) -> bool {
        !matches!(self, TargetSessionAttrs::Any | TargetSessionAttrs::PreferStandby)
    }
}

impl fmt::Display for TargetSessionAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::Standby => "standby",
            TargetSessionAttrs::PreferStandby => "prefer-standby",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_come_from_what_the_server_reports() {
        assert_eq!(NodeRole::from_settings(Some("on"), Some("off")), Some(NodeRole::Standby));
        assert_eq!(NodeRole::from_settings(Some("off"), Some("on")), Some(NodeRole::ReadOnly));
        assert_eq!(NodeRole::from_settings(Some("off"), Some("off")), Some(NodeRole::ReadWrite));
        assert_eq!(NodeRole::from_settings(Some("off"), None), Some(NodeRole::ReadWrite));
        assert_eq!(NodeRole::from_settings(None, Some("off")), None, "no in_hot_standby: ask the server");
    }

    #[test]
    fn target_session_attrs_as_libpq_reads_them() {
        use NodeRole::*;
        let table = [
            ("any", [true, true, true]),
            ("read-write", [true, false, false]),
            ("read-only", [false, true, true]),
            ("primary", [true, true, false]),
            ("standby", [false, false, true]),
            ("prefer-standby", [true, true, true]),
        ];
        for (name, wants) in table {
            let attrs = TargetSessionAttrs::parse(name).unwrap();
            assert_eq!(attrs.to_string(), name);
            for (role, want) in [ReadWrite, ReadOnly, Standby].into_iter().zip(wants) {
                assert_eq!(attrs.accepts(role), want, "{name} {role}");
            }
        }
        assert!(TargetSessionAttrs::parse("writer").unwrap_err().to_string().contains("read-write"));
    }
}
