//! The per-pool rows (SHOW POOLS, DATABASES, USERS) from plain figures: one pool as before routes, then
//! two routes with their own users and modes, the default pool's place among them, and labels that never
//! repeat (pgbouncer_exporter drops a scrape that has two rows with the same labels).

use crate::config::{Config, LoginInfo, PoolMode};
use crate::ops::console::census::{self, Census, CountedClient, PoolState};
use crate::ops::console::routes::{self, DatabaseFigures, UserFigures};
use crate::pools::PoolKey;

fn served() -> LoginInfo {
    LoginInfo {
        host: "db.example".into(),
        port: 5432,
        user: "app".into(),
        password: None,
        dbname: "app".into(),
        scram_keys: None,
    }
}

fn pool(index: u16, database: &str, user: &str, mode: PoolMode, size: usize, idle: usize) -> PoolState {
    let status = pgmux_pool::Status { size, idle, ..Default::default() };
    PoolState { index, key: PoolKey { database: database.into(), user: user.into() }, mode, status, current: true }
}

fn client(pool: u16, wait_since_us: Option<u64>) -> CountedClient {
    CountedClient { pool, waiting: wait_since_us.is_some(), wait_since_us }
}

fn rows(set: &crate::ops::console::table::ResultSet) -> Vec<Vec<String>> {
    set.rows().iter().map(|r| r.iter().map(|c| c.clone().unwrap_or_else(|| "NULL".into())).collect()).collect()
}

/// The columns named `names` of every row.
fn pick(set: &crate::ops::console::table::ResultSet, names: &[&str]) -> Vec<Vec<String>> {
    let at: Vec<usize> = names
        .iter()
        .map(|n| set.columns().iter().position(|c| c.name == *n).unwrap_or_else(|| panic!("no column {n}")))
        .collect();
    rows(set).into_iter().map(|r| at.iter().map(|i| r[*i].clone()).collect()).collect()
}

fn two_routes() -> Census {
    let pools = [
        pool(0, "", "", PoolMode::Transaction, 0, 0),
        pool(1, "orders", "app_rw", PoolMode::Transaction, 3, 1),
        pool(2, "reports", "reader", PoolMode::Session, 1, 0),
    ];
    let clients = [client(1, None), client(1, None), client(1, Some(1_000)), client(2, None)];
    census::count(&pools, &clients, 1, 2_501_000, &served(), true)
}

#[test]
fn one_pool_as_before_routes_then_the_console() {
    let pools = [pool(0, "", "", PoolMode::Transaction, 4, 1)];
    let clients = [client(0, None), client(0, Some(10)), client(0, None)];
    let census = census::count(&pools, &clients, 2, 3_000_020, &served(), false);
    let set = routes::pool_rows(&census).unwrap();
    assert_eq!(
        pick(&set, &["database", "user", "cl_active", "cl_waiting", "sv_active", "sv_idle", "maxwait", "maxwait_us"]),
        [["app", "app", "2", "1", "3", "1", "3", "10"], ["pgbouncer", "pgbouncer", "2", "0", "0", "0", "0", "0"]]
    );
    assert_eq!(pick(&set, &["pool_mode"]), [["transaction"], ["statement"]]);
}

#[test]
fn each_pool_has_its_own_row_clients_servers_and_mode() {
    let census = two_routes();
    let set = routes::pool_rows(&census).unwrap();
    // The default pool holds nothing and no client can reach it: no row.
    assert_eq!(
        pick(&set, &["database", "user", "cl_active", "cl_waiting", "sv_active", "sv_idle", "maxwait", "pool_mode"]),
        [
            ["orders", "app_rw", "2", "1", "2", "1", "2", "transaction"],
            ["reports", "reader", "1", "0", "1", "0", "0", "session"],
            ["pgbouncer", "pgbouncer", "1", "0", "0", "0", "0", "statement"],
        ]
    );
    assert_eq!(census.labels(2), ("reports", "reader"));
    assert_eq!(census.labels(0), ("app", "app"), "the default pool goes by database_url's names");
    assert_eq!(census.labels(77), ("app", "app"), "an unknown pool is shown as the default one");
}

#[test]
fn the_default_pool_is_listed_when_used_and_never_under_a_routes_labels() {
    let pools = [pool(0, "", "", PoolMode::Transaction, 1, 1), pool(1, "app", "app", PoolMode::Transaction, 1, 1)];
    let census = census::count(&pools, &[], 0, 0, &served(), true);
    let set = routes::pool_rows(&census).unwrap();
    assert_eq!(pick(&set, &["database", "user"]), [["app", "app"], ["pgbouncer", "pgbouncer"]]);
    let pools = [pool(0, "", "", PoolMode::Transaction, 1, 1), pool(1, "orders", "app", PoolMode::Transaction, 0, 0)];
    let census = census::count(&pools, &[], 0, 0, &served(), true);
    let set = routes::pool_rows(&census).unwrap();
    assert_eq!(pick(&set, &["database"]), [["app"], ["orders"], ["pgbouncer"]], "default first, then by name");
    // A pool a reload retired keeps its clients' labels but leaves SHOW POOLS.
    let mut retired = pool(2, "orders", "app", PoolMode::Transaction, 1, 0);
    retired.current = false;
    let pools =
        [pool(0, "", "", PoolMode::Transaction, 0, 0), pool(1, "orders", "app", PoolMode::Session, 0, 0), retired];
    let census = census::count(&pools, &[client(2, None)], 0, 0, &served(), true);
    assert_eq!(census.listed().count(), 1);
    assert_eq!(census.labels(2), ("orders", "app"));
}

#[test]
fn databases_show_each_route_with_its_mode_user_and_limits() {
    let config = Config::from_toml_str("database_url = \"postgres://app:secret-pw@db.example:5432/app\"\n").unwrap();
    let orders = DatabaseFigures {
        name: "orders".into(),
        host: "db.example".into(),
        port: 5432,
        dbname: "shop".into(),
        force_user: Some("app_rw".into()),
        pool_size: 5,
        min_pool_size: 1,
        reserve_pool_size: 0,
        mode: PoolMode::Transaction,
        max_connections: 8,
        current_connections: 3,
        max_client_connections: 4,
        current_client_connections: 3,
        paused: false,
        disabled: true,
    };
    let reports = DatabaseFigures {
        name: "reports".into(),
        dbname: "shop".into(),
        force_user: None,
        mode: PoolMode::Session,
        disabled: false,
        ..orders.clone()
    };
    let set = routes::database_rows(&config, &[orders, reports], 1).unwrap();
    assert_eq!(pick(&set, &["name", "disabled"]), [["orders", "1"], ["reports", "0"], ["pgbouncer", "0"]]);
    assert_eq!(
        pick(
            &set,
            &["name", "database", "force_user", "pool_size", "pool_mode", "max_connections", "current_connections"]
        ),
        [
            ["orders", "shop", "app_rw", "5", "transaction", "8", "3"],
            ["reports", "shop", "NULL", "5", "session", "8", "3"],
            ["pgbouncer", "pgbouncer", "pgbouncer", "2", "statement", "0", "0"],
        ]
    );
    let text = format!("{:?}", rows(&set));
    assert!(!text.contains("secret-pw"), "no password in SHOW DATABASES: {text}");
}

#[test]
fn users_show_their_own_sizes_and_counts() {
    let users = [
        UserFigures {
            name: "app_rw".into(),
            pool_size: Some(4),
            reserve_pool_size: None,
            mode: Some(PoolMode::Session),
            max_user_connections: 6,
            current_connections: 2,
            max_user_client_connections: 7,
            current_client_connections: 5,
        },
        UserFigures { name: "reader".into(), ..Default::default() },
    ];
    let set = routes::user_rows(&users).unwrap();
    assert_eq!(
        pick(
            &set,
            &[
                "name",
                "pool_size",
                "pool_mode",
                "max_user_connections",
                "current_connections",
                "current_client_connections"
            ]
        ),
        [["app_rw", "4", "session", "6", "2", "5"], ["reader", "", "NULL", "0", "0", "0"]]
    );
}
