//! The budget arithmetic, the fleet's tags, and the limit before the first reading.

use super::*;

fn reading(max_connections: usize, in_use: usize, others: &[(usize, Option<usize>)]) -> Reading {
    Reading {
        max_connections,
        superuser_reserved: 3,
        reserved: 0,
        rds_reserved: 0,
        sees_all: true,
        in_use,
        others: others
            .iter()
            .enumerate()
            .map(|(i, &(open, cap))| Member { id: format!("{i:08x}"), open, limit: open, cap })
            .collect(),
    }
}

/// The plan of an instance whose id sorts after every other's: it gets no spare connection.
fn plan_as_last(r: &Reading, open: usize, percent: usize, cap: Option<usize>) -> Plan {
    plan(r, &Member { id: "~".into(), open, limit: 0, cap }, percent)
}

#[test]
fn a_lone_instance_takes_its_percentage_less_everyone_else() {
    // 40 slots, 3 reserved: 37 usable, 90 % = 33. 30 held by others, 1 by our control connection.
    let p = plan_as_last(&reading(40, 31, &[]), 0, 90, None);
    assert_eq!((p.usable, p.budget, p.outsiders, p.members), (37, 33, 30, 1));
    assert_eq!((p.share, p.limit), (2, 2));
    // Our own pool connections are not outsiders.
    let p = plan_as_last(&reading(40, 33, &[]), 2, 90, None);
    assert_eq!((p.outsiders, p.limit), (30, 2));
}

#[test]
fn instances_split_the_budget_and_a_capped_one_leaves_the_rest() {
    // 100 slots: 97 usable, 87 budget; two other instances holding 4 and 10; 5 outsiders.
    // 5 outsiders, the two others with their control connections, and our control connection.
    let r = reading(100, 5 + (4 + 1) + (10 + 1) + 1, &[(4, None), (10, None)]);
    let p = plan_as_last(&r, 0, 90, None);
    assert_eq!((p.budget, p.outsiders, p.members), (87, 5, 3));
    assert_eq!(p.share, (87 - 5 - 3) / 3);
    // One of the others is capped at 5: the two uncapped split what it leaves.
    let r = reading(100, 5 + 5 + 11 + 1, &[(4, Some(5)), (10, None)]);
    let p = plan_as_last(&r, 0, 90, None);
    assert_eq!(p.share, (87 - 5 - 3 - 5) / 2);
    // Our own cap applies after the share.
    assert_eq!(plan_as_last(&r, 0, 90, Some(3)).limit, 3);
}

/// Each of `ids` plans from the same reading, seeing the others' tags (all holding nothing, with `caps`):
/// their limits, in the order of `ids`.
fn fleet_limits(max_connections: usize, outsiders: usize, ids: &[&str], caps: &[Option<usize>]) -> Vec<usize> {
    let members: Vec<Member> =
        ids.iter().zip(caps).map(|(id, &cap)| Member { id: (*id).to_owned(), open: 0, limit: 0, cap }).collect();
    members
        .iter()
        .map(|me| {
            let mut r = reading(max_connections, outsiders + members.len(), &[]);
            r.others = members.iter().filter(|m| m.id != me.id).cloned().collect();
            plan(&r, me, 90).limit
        })
        .collect()
}

#[test]
fn what_equal_shares_leave_over_goes_to_the_first_ids_and_the_fleet_uses_its_whole_budget() {
    // W9's fleet: 50 slots, 3 reserved: 47 usable, 42 budget; 12 outsiders and 8 control connections leave
    // 22 pool connections: 2 each, and 6 over for the six first in id order.
    let ids = ["c19fc58b", "4fb47d75", "0000000a", "ffffffff", "77777777", "12345678", "abcdef01", "00000001"];
    let limits = fleet_limits(50, 12, &ids, &[None; 8]);
    // In id order: 00000001 0000000a 12345678 4fb47d75 77777777 abcdef01 take 3; c19fc58b and ffffffff 2.
    assert_eq!(limits, [2, 3, 3, 2, 3, 3, 3, 3]);
    assert_eq!(limits.iter().sum::<usize>(), 22, "the fleet's limits add up to what its budget leaves");
    assert_eq!(plan_as_last(&reading(50, 12 + 1, &[]), 0, 90, None).limit, 42 - 12 - 1, "a lone instance");
    // An instance capped at its share takes no spare: the next in line does, and the total holds.
    let mut caps = [None; 8];
    caps[7] = Some(2);
    let limits = fleet_limits(50, 12, &ids, &caps);
    assert_eq!(limits, [3, 3, 3, 2, 3, 3, 3, 2]);
    assert_eq!(limits.iter().sum::<usize>(), 22);
}

#[test]
fn every_reserved_slot_counts_and_the_limit_never_reaches_zero() {
    let mut r = reading(20, 19, &[]);
    r.reserved = 2;
    r.rds_reserved = 2;
    let p = plan_as_last(&r, 0, 100, None);
    assert_eq!((p.usable, p.budget, p.share, p.limit), (13, 13, 0, 1));
    assert_eq!(plan_as_last(&reading(3, 1, &[]), 0, 90, None).budget, 0);
}

#[test]
fn tags_round_trip_and_strangers_are_ignored() {
    let m = Member { id: "0badcafe".into(), open: 3, limit: 7, cap: None };
    assert_eq!(m.tag(), "pgmux 0badcafe open=3 limit=7 cap=-");
    assert_eq!(Member::parse(&m.tag()), Some(m));
    let capped = Member { id: "1".into(), open: 0, limit: 1, cap: Some(4) };
    assert_eq!(Member::parse(&capped.tag()), Some(capped));
    for stranger in ["pgmux-check", "pgmux", "pgmux x open=1", "pgmux x open=a limit=1 cap=-", "psql"] {
        assert_eq!(Member::parse(stranger), None, "{stranger}");
    }
}

#[test]
fn a_row_from_the_server_becomes_a_reading() {
    let row: Vec<Option<String>> =
        ["100", "3", "0", "2", "t", "12", "pgmux a open=1 limit=2 cap=-|pgmux b open=0 limit=1 cap=9"]
            .iter()
            .map(|v| Some(v.to_string()))
            .collect();
    let r = Reading::from_row(&row).unwrap();
    assert_eq!((r.max_connections, r.rds_reserved, r.in_use, r.sees_all, r.others.len()), (100, 2, 12, true, 2));
    let mut bad = row.clone();
    bad[0] = Some("lots".into());
    let err = Reading::from_row(&bad).unwrap_err();
    assert_eq!(err, RowError::NotANumber { what: "max_connections", text: "lots".into() });
    assert_eq!(err.to_string(), "max_connections is \"lots\", not a number");
    bad[0] = None;
    assert_eq!(Reading::from_row(&bad), Err(RowError::Missing { what: "max_connections" }));
}

#[test]
fn the_limit_before_the_first_reading() {
    assert_eq!(initial_limit(0, None), FALLBACK_POOL_MAX);
    assert_eq!(initial_limit(0, Some(7)), 7);
    assert_eq!(initial_limit(90, None), PROVISIONAL_LIMIT);
    assert_eq!(initial_limit(90, Some(1)), 1);
}
