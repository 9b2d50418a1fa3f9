//! The connection budget: from one reading of the database (its settings, who is connected, which other
//! pgmux instances are there) to the number of pool connections this instance may hold. A pure function of
//! its inputs, with no I/O and nothing from the rest of the crate, so that every rule below is a unit test.
//!
//! `usable = max_connections − reserved`, `budget = usable × max_connections_percent / 100`; everything that
//! is not a pgmux connection counts against it first, then the instances split the rest equally (an instance
//! capped below its share by `pool_max` leaves the difference to the others; what equal shares leave over goes
//! one each to the first instances in the order of their ids), each keeping one connection for control. An
//! instance never goes below one pool connection: when the budget is gone, the database's own refusals take
//! over (the server pool lowers its limit on SQLSTATE 53300).
//!
//! Every instance names its control connection `pgmux <id> open=<n> limit=<n> cap=<n|->`, so that each sees
//! the others, what they hold and what they may hold, in the same `pg_stat_activity` that shows everyone
//! else's connections: the database is the only coordination point of a fleet.

use std::fmt;

/// The limit when sizing is off and `pool_max` is unset.
pub const FALLBACK_POOL_MAX: usize = 20;

/// The limit until the first reading, when sizing is on: enough to serve, small enough to be safe.
pub const PROVISIONAL_LIMIT: usize = 2;

/// The prefix of a control connection's `application_name`.
const TAG_PREFIX: &str = "pgmux ";

/// Another pgmux instance, as its control connection's tag shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its instance id.
    pub id: String,
    /// Pool connections it holds.
    pub open: usize,
    /// Its current limit.
    pub limit: usize,
    /// Its `pool_max`, if set.
    pub cap: Option<usize>,
}

impl Member {
    /// Reads a tag; `None` if it is not one.
    pub fn parse(tag: &str) -> Option<Member> {
        let mut words = tag.strip_prefix(TAG_PREFIX)?.split_ascii_whitespace();
        let id = words.next()?.to_owned();
        let (mut open, mut limit, mut cap) = (None, None, None);
        for word in words {
            match word.split_once('=')? {
                ("open", v) => open = v.parse().ok(),
                ("limit", v) => limit = v.parse().ok(),
                ("cap", "-") => cap = Some(None),
                ("cap", v) => cap = Some(Some(v.parse().ok()?)),
                _ => {}
            }
        }
        Some(Member { id, open: open?, limit: limit?, cap: cap? })
    }

    /// The tag for `application_name`.
    pub fn tag(&self) -> String {
        let cap = self.cap.map_or_else(|| "-".to_owned(), |c| c.to_string());
        format!("{TAG_PREFIX}{} open={} limit={} cap={cap}", self.id, self.open, self.limit)
    }
}

/// What one reading of the database says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// `max_connections`.
    pub max_connections: usize,
    /// `superuser_reserved_connections`.
    pub superuser_reserved: usize,
    /// `reserved_connections` (PostgreSQL 16 and later; 0 before).
    pub reserved: usize,
    /// `rds.rds_superuser_reserved_connections` (RDS and Aurora; 0 elsewhere).
    pub rds_reserved: usize,
    /// Whether the control connection's role may see every backend (`pg_read_all_stats`).
    pub sees_all: bool,
    /// Client backends on the server, every database and role, this control connection included.
    pub in_use: usize,
    /// The other pgmux instances.
    pub others: Vec<Member>,
}

impl Reading {
    /// Every reserved slot: superuser, `reserved_connections`, RDS's.
    pub fn reserved_total(&self) -> usize {
        self.superuser_reserved + self.reserved + self.rds_reserved
    }

    /// Reads the row of the sizing query (see `sizing`): the settings, then the count, then the tags.
    pub fn from_row(row: &[Option<String>]) -> Result<Reading, RowError> {
        let number = |i: usize, what: &'static str| -> Result<usize, RowError> {
            let text = row.get(i).and_then(|v| v.as_deref()).ok_or(RowError::Missing { what })?;
            text.trim().parse().map_err(|_| RowError::NotANumber { what, text: text.to_owned() })
        };
        let others = row.get(6).and_then(|v| v.as_deref()).unwrap_or_default();
        Ok(Reading {
            max_connections: number(0, "max_connections")?,
            superuser_reserved: number(1, "superuser_reserved_connections")?,
            reserved: number(2, "reserved_connections")?,
            rds_reserved: number(3, "rds.rds_superuser_reserved_connections")?,
            sees_all: row.get(4).and_then(|v| v.as_deref()) == Some("t"),
            in_use: number(5, "the count of client backends")?,
            others: others.split('|').filter_map(Member::parse).collect(),
        })
    }
}

/// Why the sizing query's row is not a reading.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    /// A column is missing or NULL.
    #[error("no value for {what}")]
    Missing {
        /// The setting or count the column holds.
        what: &'static str,
    },
    /// A column that should hold a number does not.
    #[error("{what} is {text:?}, not a number")]
    NotANumber {
        /// The setting or count the column holds.
        what: &'static str,
        /// What it holds instead.
        text: String,
    },
}

/// What pgmux makes of a reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `max_connections` minus the reserved slots.
    pub usable: usize,
    /// `max_connections_percent` of `usable`: what the fleet may hold, with everyone else's connections.
    pub budget: usize,
    /// Client backends that belong to no pgmux of the fleet.
    pub outsiders: usize,
    /// pgmux instances, this one included.
    pub members: usize,
    /// This instance's equal share of the pool connections left (before `pool_max`).
    pub share: usize,
    /// The limit this instance takes: the share (and one more for the first instances in id order, while
    /// equal shares leave some over), capped by `pool_max`, at least 1.
    pub limit: usize,
}

/// Works out this instance's limit from a reading, given this instance as it is about to publish itself:
/// its id, the pool connections it holds (`open`, besides its control connection) and its `pool_max`.
pub fn plan(r: &Reading, me: &Member, percent: usize) -> Plan {
    let usable = r.max_connections.saturating_sub(r.reserved_total());
    let budget = usable * percent / 100;
    let fleet_held: usize = r.others.iter().map(|m| m.open + 1).sum::<usize>() + me.open + 1;
    let outsiders = r.in_use.saturating_sub(fleet_held);
    let members = r.others.len() + 1;
    // Pool connections the fleet may hold: the budget less everyone else's, less a control connection each.
    let mut left = budget.saturating_sub(outsiders).saturating_sub(members);
    // Equal shares; whoever is capped below the share takes only its cap, the rest split what remains.
    let mut caps: Vec<Option<usize>> = r.others.iter().map(|m| m.cap).chain([me.cap]).collect();
    caps.sort_by_key(|c| c.unwrap_or(usize::MAX));
    let mut uncapped = caps.len();
    for c in &caps {
        match c {
            Some(c) if *c < left / uncapped => {
                left -= c;
                uncapped -= 1;
            }
            _ => break,
        }
    }
    let share = left / uncapped.max(1);
    // What equal shares leave over goes one connection each to the first instances in the order of their
    // ids that can take one more. Every instance works that out alike from the same tags, so the fleet uses
    // its whole budget and no slot is taken twice.
    let spare = left - share * uncapped;
    let takes_more = |m: &Member| m.cap.is_none_or(|c| c > share);
    let ahead = r.others.iter().filter(|m| takes_more(m) && m.id < me.id).count();
    let extra = usize::from(takes_more(me) && ahead < spare);
    let limit = me.cap.map_or(share + extra, |c| (share + extra).min(c)).max(1);
    Plan { usable, budget, outsiders, members, share, limit }
}

/// The limit before any reading: `pool_max`, else the fallback (sizing off) or the provisional one.
pub fn initial_limit(percent: usize, cap: Option<usize>) -> usize {
    match (percent, cap) {
        (0, cap) => cap.unwrap_or(FALLBACK_POOL_MAX),
        (_, cap) => cap.map_or(PROVISIONAL_LIMIT, |c| c.min(PROVISIONAL_LIMIT)),
    }
}

/// What `pgmux check` found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The reading.
    pub reading: Reading,
    /// The plan for a new instance with this configuration.
    pub plan: Plan,
    /// `max_connections_percent`.
    pub percent: usize,
    /// The most pool connections `pool_max` allows (less the control connection when sizing is on).
    pub cap: Option<usize>,
}

impl Report {
    /// Problems that make the configuration unusable, as messages a person can act on.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.reading.sees_all {
            out.push(
                "the database role cannot read every row of pg_stat_activity, so pgmux cannot see the other \
                 pgmux instances: GRANT pg_read_all_stats (or pg_monitor) TO the role"
                    .to_owned(),
            );
        }
        if self.percent > 0 && self.plan.budget == 0 {
            out.push(format!(
                "the budget is zero: max_connections {} minus {} reserved leaves {} usable, and {} % of that is \
                 nothing; raise max_connections_percent or max_connections",
                self.reading.max_connections,
                self.reading.reserved_total(),
                self.plan.usable,
                self.percent
            ));
        } else if self.percent > 0 && self.plan.budget <= self.plan.outsiders + self.plan.members {
            out.push(format!(
                "the budget of {} is used up: {} connections belong to others and {} pgmux instances need a \
                 control connection each; pgmux would run with 1 pool connection",
                self.plan.budget, self.plan.outsiders, self.plan.members
            ));
        }
        out
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, p) = (&self.reading, &self.plan);
        writeln!(f, "max_connections                          {}", r.max_connections)?;
        writeln!(f, "superuser_reserved_connections           {}", r.superuser_reserved)?;
        writeln!(f, "reserved_connections                     {}", r.reserved)?;
        writeln!(f, "rds.rds_superuser_reserved_connections   {}", r.rds_reserved)?;
        writeln!(f, "usable                                   {}", p.usable)?;
        writeln!(f, "max_connections_percent                  {}", self.percent)?;
        writeln!(f, "budget                                   {}", p.budget)?;
        writeln!(f, "client backends now                      {}", r.in_use)?;
        writeln!(f, "of which belong to no pgmux              {}", p.outsiders)?;
        writeln!(f, "sees every backend (pg_read_all_stats)   {}", if r.sees_all { "yes" } else { "no" })?;
        writeln!(f, "pgmux instances (with this one)          {}", p.members)?;
        for m in &r.others {
            writeln!(f, "  {}", m.tag())?;
        }
        writeln!(f, "share                                    {}", p.share)?;
        writeln!(f, "pool connections at most (pool_max)      {}", self.cap.map_or("-".to_owned(), |c| c.to_string()))?;
        if self.percent == 0 {
            write!(f, "pool limit                               {} (sizing off)", initial_limit(0, self.cap))
        } else {
            write!(f, "pool limit                               {}", p.limit)
        }
    }
}

#[cfg(test)]
mod tests;
