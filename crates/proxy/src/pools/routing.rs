//! Which pool a client's (database, user) goes to, and how that pool logs in: a pure function of the
//! configuration and the users pgmux knows, so that the rules can be read and tested in one place.
//!
//! - With no `[[databases]]`, every client goes to the default pool (`database_url`'s), as pgmux always did.
//! - Otherwise the database a client names must be a route (or `*` catches the rest, its server database
//!   being the name the client gave). Its pool is keyed by the route and the server user: the route's own
//!   user if it names one, else the client's.
//! - The pool logs in with the route's password (for its own user), else the server user's from `[[users]]`
//!   or the auth file (plaintext, an md5 hash for md5 servers, or a SCRAM verifier: SCRAM passthrough with a
//!   client's proved key), else by IAM or a secret when the route or the user says so (the binary supplies
//!   those), or with the client's own password (passthrough). A user the book lacks may be looked up with
//!   `auth_query` as the route's `auth_user`.
//! - Sizes: the route's `pool_size`, else the user's, else `default_pool_size`; the route's and the user's
//!   limits across pools; the route's or the user's `pool_mode`, else the global one.

use crate::config::auth_file::UserBook;
use crate::config::{Config, LoginInfo, PoolMode, ReaderFallback, RouteSpec, Secret, ServerAuth, TargetSessionAttrs};

/// A pool's name: the database clients named and the user pgmux logs in there as. The default pool
/// (`database_url`'s, or the secret's) has empty names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PoolKey {
    pub(crate) database: String,
    pub(crate) user: String,
}

/// Where a client goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Routed {
    /// The default pool: no database is configured by name.
    Default,
    /// A named database's pool.
    Route(Box<RoutePlan>),
}

/// How a named database's pool is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RoutePlan {
    pub(crate) key: PoolKey,
    /// Where and as whom; the password when the configuration holds one.
    pub(crate) login: LoginInfo,
    pub(crate) auth: ServerAuth,
    pub(crate) secret_arn: Option<String>,
    pub(crate) cap: Option<usize>,
    pub(crate) min_pool_size: usize,
    pub(crate) mode: PoolMode,
    /// Connections above `cap` its pool may open for a client that waited `reserve_pool_timeout`.
    pub(crate) reserve: usize,
    /// The route's own `server_lifetime`, if it has one.
    pub(crate) server_lifetime: Option<std::time::Duration>,
    /// The route's own `connect_query`, if it has one.
    pub(crate) connect_query: Option<String>,
    pub(crate) route_limit: Option<usize>,
    pub(crate) user_limit: Option<usize>,
    /// Who looks up users pgmux does not know (`auth_query`): the route's `auth_user`, else the global one.
    pub(crate) auth_user: Option<String>,
    /// Where `auth_query` runs (the entry it names): the route's `auth_dbname`, else the global one.
    pub(crate) auth_dbname: Option<String>,
    /// What looks them up: the route's `auth_query`, else the global one.
    pub(crate) auth_query: String,
    /// A reader route's instances (host, port); empty for any other route, and for one that discovers them.
    pub(crate) readers: Vec<(String, u16)>,
    /// A reader route that discovers its instances in the cluster's topology: where their endpoints are.
    pub(crate) instance_domain: Option<String>,
    pub(crate) reader_fallback: ReaderFallback,
    /// Which nodes the pool may use, if not target_session_attrs (a reader instance's pool: standbys).
    pub(crate) target: Option<TargetSessionAttrs>,
    /// Served by the `*` entry: a database not named in the configuration (PgBouncer's auto-database).
    pub(crate) auto_database: bool,
}

impl RoutePlan {
    /// The plan of one reader instance's pool: the route's, at `host:port`, for standbys, named after it.
    pub(crate) fn instance(&self, host: &str, port: u16) -> RoutePlan {
        let mut plan = self.clone();
        plan.key.database = format!("{}@{host}:{port}", self.key.database);
        plan.login.host = host.to_owned();
        plan.login.port = port;
        plan.readers = Vec::new();
        plan.instance_domain = None;
        plan.target = Some(TargetSessionAttrs::Standby);
        plan
    }

    /// The plan of a discovered reader instance's pool: as [`instance`](Self::instance), named after its
    /// `server_id` (the name the console and metrics show).
    pub(crate) fn discovered(&self, server_id: &str, host: &str, port: u16) -> RoutePlan {
        let mut plan = self.instance(host, port);
        plan.key.database = format!("{}@{server_id}", self.key.database);
        plan
    }

    /// For the pool of one of its reader instances, planned as `old` (by [`instance`](Self::instance) or
    /// [`discovered`](Self::discovered)): the plan this route would give it now, if it still has that
    /// instance (still listed, or still discovering).
    pub(crate) fn instance_now(&self, old: &RoutePlan) -> Option<RoutePlan> {
        let (host, port) = (old.login.host.as_str(), old.login.port);
        let listed = self.instance(host, port);
        if listed.key == old.key {
            return self.readers.iter().any(|(h, p)| h == host && *p == port).then_some(listed);
        }
        let server_id = old.key.database.strip_prefix(&self.key.database)?.strip_prefix('@')?;
        self.instance_domain.as_ref().map(|_| self.discovered(server_id, host, port))
    }
}

/// Why a client's database cannot be served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UnknownDatabase {
    /// The names a client may use.
    pub(crate) names: Vec<String>,
}

/// Where a client of `database` logging in as `user` goes.
pub(crate) fn route(config: &Config, book: &UserBook, database: &str, user: &str) -> Result<Routed, UnknownDatabase> {
    if config.databases.is_empty() {
        return Ok(Routed::Default);
    }
    let found = config.databases.iter().find(|r| r.name == database);
    let (spec, server_db) = match found.or_else(|| config.databases.iter().find(|r| r.name == "*")) {
        Some(spec) => (spec, spec.dbname.clone().unwrap_or_else(|| database.to_owned())),
        None => {
            let names = config.databases.iter().map(|r| r.name.clone()).filter(|n| n != "*").collect();
            return Err(UnknownDatabase { names });
        }
    };
    let mut plan = plan(config, book, spec, database, server_db, user);
    plan.auto_database = found.is_none();
    Ok(Routed::Route(Box::new(plan)))
}

fn plan(
    config: &Config,
    book: &UserBook,
    spec: &RouteSpec,
    database: &str,
    server_db: String,
    user: &str,
) -> RoutePlan {
    let server_user = spec.user.clone().unwrap_or_else(|| user.to_owned());
    let known = book.get(&server_user);
    let user_spec = known.and_then(|k| k.spec.as_ref());
    // A route's own password is for its own user; otherwise the server user's from the book.
    let password: Option<Secret> = match (&spec.user, &spec.password) {
        (Some(_), Some(password)) => Some(password.clone()),
        _ => known.and_then(|k| k.password.clone()),
    };
    let auth = spec.auth.or(user_spec.and_then(|u| u.auth)).unwrap_or(if config.iam_auth {
        ServerAuth::Iam
    } else {
        ServerAuth::Password
    });
    let url = &config.database_url.login;
    let host = spec.host.clone().unwrap_or_else(|| {
        if config.database_host.is_empty() { url.host.clone() } else { config.database_host.clone() }
    });
    let port = spec.port.or(config.database_port).unwrap_or(if url.port == 0 { 5432 } else { url.port });
    let some = |n: usize| (n > 0).then_some(n);
    RoutePlan {
        key: PoolKey { database: database.to_owned(), user: server_user.clone() },
        auth,
        secret_arn: spec.secret_arn.clone().or_else(|| user_spec.and_then(|u| u.secret_arn.clone())),
        // The server user's own entry first, then the database's, as PgBouncer: a forced user's entry applies
        // to the route's pool, the client's own does not.
        cap: user_spec.and_then(|u| u.pool_max).or(spec.pool_max).or(config.default_pool_size),
        min_pool_size: spec.min_pool_size.unwrap_or(config.min_pool_size),
        mode: user_spec.and_then(|u| u.pool_mode).or(spec.pool_mode).unwrap_or(config.pool_mode),
        server_lifetime: spec.server_lifetime,
        connect_query: spec.connect_query.clone(),
        reserve: user_spec
            .and_then(|u| u.reserve_pool_size)
            .or(spec.reserve_pool_size)
            .unwrap_or(config.reserve_pool_size),
        route_limit: spec.max_db_connections.or(some(config.max_db_connections)).filter(|n| *n > 0),
        user_limit: user_spec
            .and_then(|u| u.max_user_connections)
            .or(some(config.max_user_connections))
            .filter(|n| *n > 0),
        auth_user: spec.auth_user.clone().or_else(|| (!config.auth_user.is_empty()).then(|| config.auth_user.clone())),
        auth_dbname: spec
            .auth_dbname
            .clone()
            .or_else(|| (!config.auth_dbname.is_empty()).then(|| config.auth_dbname.clone())),
        auth_query: spec.auth_query.clone().unwrap_or_else(|| config.auth_query.clone()),
        readers: match spec.discovers_readers() {
            true => Vec::new(),
            false => spec.readers.iter().map(|r| host_port(r, port)).collect(),
        },
        instance_domain: spec
            .discovers_readers()
            .then(|| crate::config::aurora::instance_domain(spec.instance_domain.as_deref(), &host))
            .flatten(),
        reader_fallback: spec.reader_fallback.unwrap_or(config.reader_fallback),
        target: None,
        auto_database: false,
        login: LoginInfo { host, port, user: server_user, password, dbname: server_db, scram_keys: None },
    }
}

/// `host[:port]`, the port defaulting to `port`.
fn host_port(entry: &str, port: u16) -> (String, u16) {
    match entry.rsplit_once(':') {
        Some((host, p)) if !host.contains(']') || host.ends_with(']') => match p.parse() {
            Ok(p) => (host.trim_matches(['[', ']']).to_owned(), p),
            Err(_) => (entry.to_owned(), port),
        },
        _ => (entry.to_owned(), port),
    }
}

/// Sizing from the database needs a user to read it, and the configuration names none.
#[derive(Debug, thiserror::Error)]
#[error(
    "max_connections_percent sizes the pools from the database, which needs a user to read it: set \
     database_url, give a route its own user and password, or set pool_max and max_connections_percent = 0"
)]
pub struct NoControlUser;

/// Whom the default pool (and with it sizing's control connection) logs in as: database_url's user, else
/// the first route with its own user and password. Without either, only a configuration that does not size
/// from the database can run.
pub(crate) fn sizing_login(config: &Config, book: &UserBook) -> Result<LoginInfo, NoControlUser> {
    if !config.database_url.login.host.is_empty() || config.databases.is_empty() {
        return Ok(config.with_overrides(config.database_url.login.clone()));
    }
    match control_login(config, book) {
        Some(login) => Ok(login),
        None if config.max_connections_percent == 0 => Ok(config.with_overrides(config.database_url.login.clone())),
        None => Err(NoControlUser),
    }
}

/// The first route that logs in as its own user with a password pgmux holds. `None` if no route does.
fn control_login(config: &Config, book: &UserBook) -> Option<LoginInfo> {
    config.databases.iter().filter(|r| r.name != "*").find_map(|spec| {
        let user = spec.user.as_deref()?;
        let plan = plan(config, book, spec, &spec.name, spec.dbname.clone().unwrap_or_else(|| spec.name.clone()), user);
        (plan.auth == ServerAuth::Password && plan.login.password.is_some()).then_some(plan.login)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::auth_file::UserEntry;

    fn config(extra: &str) -> Config {
        let text = format!("database_url = \"postgres://app:pw@db.example:5432/app\"\n{extra}");
        Config::from_toml_str(&text).expect("a valid configuration")
    }

    fn plan_of(routed: Routed) -> RoutePlan {
        match routed {
            Routed::Route(plan) => *plan,
            Routed::Default => panic!("expected a route"),
        }
    }

    #[test]
    fn with_no_databases_every_client_goes_to_the_default_pool() {
        let c = config("");
        assert_eq!(route(&c, &UserBook::build(&c, Vec::new()), "anything", "anyone"), Ok(Routed::Default));
    }

    #[test]
    fn a_route_with_its_own_user_logs_in_as_it_with_its_password() {
        let c = config(
            "[[databases]]\nname = \"app\"\nuser = \"app_rw\"\npassword = \"rw-pw\"\npool_size = 5\n\
             [[databases]]\nname = \"report\"\ndbname = \"app\"\nhost = \"reader.example\"\n",
        );
        let book = UserBook::build(&c, vec![UserEntry { user: "ann".into(), password: Secret::new("ann-pw") }]);
        let p = plan_of(route(&c, &book, "app", "ann").unwrap());
        assert_eq!(p.key, PoolKey { database: "app".into(), user: "app_rw".into() });
        assert_eq!((p.login.user.as_str(), p.login.password.as_ref().map(Secret::expose)), ("app_rw", Some("rw-pw")));
        assert_eq!((p.login.host.as_str(), p.login.port, p.cap), ("db.example", 5432, Some(5)));
        // No user of its own: the client's, with the client's password from the auth file.
        let p = plan_of(route(&c, &book, "report", "ann").unwrap());
        assert_eq!(p.key, PoolKey { database: "report".into(), user: "ann".into() });
        assert_eq!((p.login.dbname.as_str(), p.login.host.as_str()), ("app", "reader.example"));
        assert_eq!(p.login.password.as_ref().map(Secret::expose), Some("ann-pw"));
    }

    #[test]
    fn a_reader_instance_keeps_its_plan_while_its_route_still_has_it() {
        let routed = |extra: &str| {
            let c = config(&format!("[[databases]]\nname = \"app_ro\"\n{extra}\n"));
            plan_of(route(&c, &UserBook::build(&c, Vec::new()), "app_ro", "app").unwrap())
        };
        let listed = routed("readers = \"r1.example:5432,r2.example:5433\"");
        let r2 = listed.instance("r2.example", 5433);
        assert_eq!(listed.instance_now(&r2).as_ref(), Some(&r2), "unchanged, it stays");
        assert_eq!(routed("readers = \"r1.example:5432\"").instance_now(&r2), None, "no longer listed");
        let aurora = "host = \"db.cluster-abc.us-east-1.rds.amazonaws.com\"\nreaders = \"aurora\"";
        let discovering = routed(aurora);
        let found = discovering.discovered("db-2", "db-2.abc.us-east-1.rds.amazonaws.com", 5432);
        assert_eq!(discovering.instance_now(&found).as_ref(), Some(&found), "still discovering");
        assert_eq!(listed.instance_now(&found), None, "the route no longer discovers");
        let lagging = routed(&format!("{aurora}\npool_size = 3"));
        assert_ne!(lagging.instance_now(&found).as_ref(), Some(&found), "the route's settings changed");
    }

    #[test]
    fn an_unknown_database_names_those_a_client_may_use_and_a_star_catches_the_rest() {
        let c = config("[[databases]]\nname = \"app\"\n[[databases]]\nname = \"report\"\n");
        let book = UserBook::build(&c, Vec::new());
        assert_eq!(
            route(&c, &book, "nope", "app"),
            Err(UnknownDatabase { names: vec!["app".into(), "report".into()] })
        );
        let c = config("[[databases]]\nname = \"app\"\n[[databases]]\nname = \"*\"\nhost = \"other.example\"\n");
        let p = plan_of(route(&c, &book, "tenant42", "app").unwrap());
        assert_eq!((p.login.dbname.as_str(), p.login.host.as_str()), ("tenant42", "other.example"));
        assert_eq!(p.key.database, "tenant42");
        assert!(p.auto_database, "served by the `*` entry");
        assert!(!plan_of(route(&c, &book, "app", "app").unwrap()).auto_database, "named");
    }

    #[test]
    fn sizes_and_modes_come_from_the_server_user_then_the_route_then_the_defaults() {
        let c = config(
            "default_pool_size = 7\nmax_user_connections = 9\npool_mode = \"transaction\"\n\
             [[databases]]\nname = \"app\"\npool_size = 2\n[[databases]]\nname = \"mig\"\npool_mode = \"session\"\n\
             max_db_connections = 2\n[[databases]]\nname = \"forced\"\nuser = \"app\"\npool_size = 5\n\
             [[users]]\nname = \"report\"\npool_size = 3\nmax_user_connections = 4\n",
        );
        let book = UserBook::build(&c, Vec::new());
        let p = plan_of(route(&c, &book, "app", "report").unwrap());
        assert_eq!((p.cap, p.user_limit, p.route_limit, p.mode), (Some(3), Some(4), None, PoolMode::Transaction));
        let p = plan_of(route(&c, &book, "mig", "app").unwrap());
        assert_eq!((p.cap, p.user_limit, p.route_limit, p.mode), (Some(7), Some(9), Some(2), PoolMode::Session));
        let p = plan_of(route(&c, &book, "forced", "report").unwrap());
        assert_eq!(p.cap, Some(5), "a forced server user: the client's own pool_size does not apply");
    }
}
