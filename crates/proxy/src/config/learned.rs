//! Server logins a pool learns from its own clients, for users whose password pgmux does not hold:
//!
//! - **SCRAM passthrough.** The user's password is known only as a SCRAM verifier (an `auth_file` entry
//!   copied from the server's `pg_authid`). A client that proves its password to pgmux with SCRAM hands over,
//!   inside its proof, the `ClientKey` (`ClientProof XOR HMAC(StoredKey, AuthMessage)`, which pgmux checks by
//!   hashing it back to the verifier's StoredKey). With the verifier's salt and iteration count that key
//!   answers the server's SCRAM challenge as the password would, because the server holds the same verifier.
//!   pgmux never sees a password; the key is kept in memory only, in this pool, which logs in as that one
//!   user.
//! - **Passthrough.** The client gives its password in clear text (over the Unix socket, loopback or TLS:
//!   the login path enforces that). The first one is proved by a server login; pgmux then keeps a SCRAM
//!   verifier it made itself (a random salt) and checks later logins against it, so a wrong password costs
//!   no server login. A password that fails that check may be a changed one: it is tried against the server,
//!   but at most once per [`RELEARN_INTERVAL`] for the pool, so that a stream of wrong passwords cannot turn
//!   into a stream of server logins. The pool's own server logins use the last proved password.
//!
//! Each value lives in one pool, and a pool serves one server user: two users never share what was learned.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pgmux_proto::auth::scram::{DEFAULT_ITERATIONS, ScramKeys, ScramSecret};
use tokio::time::Instant;

use super::{LoginInfo, Secret};

/// How often a password that fails the local check is tried against the server, per pool (one server user).
/// Short enough that a password changed on the server is learned within seconds by a client that retries;
/// long enough that a client guessing passwords costs the server at most one failed login per interval.
pub const RELEARN_INTERVAL: Duration = Duration::from_secs(10);

/// What a pool learns from, fixed when it is made.
#[derive(Clone, Debug)]
enum Source {
    /// The verifier the server holds; clients' proved keys log in.
    ScramVerifier(ScramSecret),
    /// The clients' own passwords.
    Passthrough,
}

#[derive(Default)]
struct Held {
    keys: Option<ScramKeys>,
    password: Option<Secret>,
    /// pgmux's own verifier of `password` (a random salt), for local checks.
    verifier: Option<ScramSecret>,
    /// The last time a password was tried against the server.
    last_server_try: Option<Instant>,
}

/// A client's password held against what the pool has proved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalCheck {
    /// It is the proved password: no server login needed.
    Match,
    /// Another password, and the server was asked about one too recently to ask again.
    Refused,
    /// The server must be asked (nothing proved yet, or the password may have changed).
    AskServer,
}

/// The credentials of a pool that logs in as its clients proved they may (its `Credentials` are in
/// `credentials.rs`, beside the trait).
pub struct LearnedCredentials {
    /// Where and as whom; the secret part is filled from what was learned.
    login: LoginInfo,
    source: Source,
    /// Shared with the pools of the same route's reader instances ([`sharing_with`](Self::sharing_with)).
    held: Arc<Mutex<Held>>,
}

impl std::fmt::Debug for LearnedCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LearnedCredentials").field("user", &self.login.user).field("source", &self.source).finish()
    }
}

impl LearnedCredentials {
    /// A pool whose user's password is the SCRAM `verifier` the server holds too.
    pub fn scram_passthrough(mut login: LoginInfo, verifier: ScramSecret) -> Self {
        login.password = None;
        LearnedCredentials { login, source: Source::ScramVerifier(verifier), held: Arc::default() }
    }

    /// A pool that logs in with its clients' own passwords.
    pub fn passthrough(mut login: LoginInfo) -> Self {
        login.password = None;
        LearnedCredentials { login, source: Source::Passthrough, held: Arc::default() }
    }

    /// The credentials of a reader instance's pool of the same route, logging in at `login` (its host and
    /// port): what a client proves to either pool, both use. A reader route's clients log in through its
    /// writer's pool, and without this its instances' pools would never learn a key or a password.
    pub fn sharing_with(&self, mut login: LoginInfo) -> Self {
        login.password = None;
        LearnedCredentials { login, source: self.source.clone(), held: Arc::clone(&self.held) }
    }

    /// The server user this pool logs in as.
    pub fn user(&self) -> &str {
        &self.login.user
    }

    /// Whether the pool takes clients' passwords (rather than SCRAM keys).
    pub fn wants_passwords(&self) -> bool {
        matches!(self.source, Source::Passthrough)
    }

    /// Keeps a client's proved SCRAM keys, if they were proved against this pool's verifier (an auth file
    /// reloaded with another verifier for the user makes older keys useless, and they are not kept).
    pub fn keep_keys(&self, keys: ScramKeys) {
        let Source::ScramVerifier(verifier) = &self.source else { return };
        if keys.belong_to(verifier) {
            self.held.lock().keys = Some(keys);
        }
    }

    /// Holds `password` against the last proved one, at `now`. Costs one local SCRAM derivation (as a
    /// server's own check does), outside the lock.
    pub fn check(&self, password: &str, now: Instant) -> LocalCheck {
        let verifier = self.held.lock().verifier.clone();
        if verifier.as_ref().is_some_and(|v| ScramKeys::from_password(password, v).belong_to(v)) {
            return LocalCheck::Match;
        }
        let mut held = self.held.lock();
        if verifier.is_none() {
            // Nothing proved yet: every login is the server's to judge, as a direct login would be.
            return LocalCheck::AskServer;
        }
        match held.last_server_try {
            Some(at) if now.saturating_duration_since(at) < RELEARN_INTERVAL => LocalCheck::Refused,
            _ => {
                held.last_server_try = Some(now);
                LocalCheck::AskServer
            }
        }
    }

    /// The server accepted `password` at `now`: the pool logs in with it from now on, and checks clients
    /// against a verifier of it.
    pub fn proved(&self, password: Secret, now: Instant) {
        let verifier = ScramSecret::generate(password.expose(), DEFAULT_ITERATIONS);
        let mut held = self.held.lock();
        held.password = Some(password);
        held.verifier = Some(verifier);
        held.last_server_try = Some(now);
    }

    /// The login to try `password` with against the server.
    pub fn login_with(&self, password: Secret) -> LoginInfo {
        LoginInfo { password: Some(password), ..self.login.clone() }
    }
}

impl LearnedCredentials {
    /// What the pool's next server login uses: the last proved key or password; why there is none yet.
    pub fn current(&self) -> Result<LoginInfo, String> {
        let mut login = self.login.clone();
        let held = self.held.lock();
        match &self.source {
            Source::ScramVerifier(_) if held.keys.is_some() => login.scram_keys.clone_from(&held.keys),
            Source::Passthrough if held.password.is_some() => login.password.clone_from(&held.password),
            Source::ScramVerifier(_) => {
                return Err(format!(
                    "pgmux holds the password of user \"{}\" only as a SCRAM verifier, and logs in to the server \
                     with the key of a client that proved it with scram-sha-256; none has since this pool was made",
                    login.user
                ));
            }
            Source::Passthrough => {
                return Err(format!(
                    "user \"{}\" logs in with its clients' own passwords (auth = passthrough), and no client has \
                     proved one since this pool was made",
                    login.user
                ));
            }
        }
        Ok(login)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgmux_proto::auth::scram::{ScramClient, ScramServer};

    fn login() -> LoginInfo {
        LoginInfo {
            host: "db".into(),
            port: 5432,
            user: "ann".into(),
            password: None,
            dbname: "app".into(),
            scram_keys: None,
        }
    }

    /// The keys a client proving `password` with SCRAM against `verifier` hands pgmux.
    fn proved_keys(verifier: &ScramSecret, password: &str) -> Option<ScramKeys> {
        let mut server = ScramServer::new(verifier.clone());
        let mut client = ScramClient::new(password);
        let first = server.client_first(&client.client_first()).ok()?;
        let fin = client.server_first(&first).ok()?;
        server.client_final(&fin).ok()?;
        server.proved_keys()
    }

    #[test]
    fn a_scram_pool_logs_in_with_the_key_a_client_proved_and_only_for_its_verifier() {
        let verifier = ScramSecret::generate("ann-pw", 4096);
        let creds = LearnedCredentials::scram_passthrough(login(), verifier.clone());
        let err = creds.current().expect_err("no client yet");
        assert!(err.to_string().contains("only as a SCRAM verifier"), "{err}");
        // Keys proved against another verifier (the auth file changed) are not kept.
        creds.keep_keys(proved_keys(&ScramSecret::generate("ann-pw", 4096), "ann-pw").unwrap());
        assert!(creds.current().is_err());
        let keys = proved_keys(&verifier, "ann-pw").unwrap();
        creds.keep_keys(keys.clone());
        let got = creds.current().unwrap();
        assert_eq!((got.scram_keys, got.password), (Some(keys), None));
        assert!(!format!("{creds:?}").contains("key"), "{creds:?}");
    }

    #[test]
    fn passthrough_checks_locally_once_proved_and_asks_the_server_at_most_once_per_interval() {
        let creds = LearnedCredentials::passthrough(login());
        let t0 = Instant::now();
        // Cold: every password is the server's to judge.
        assert_eq!(creds.check("anything", t0), LocalCheck::AskServer);
        assert_eq!(creds.check("anything", t0), LocalCheck::AskServer);
        creds.proved(Secret::new("ann-pw"), t0);
        assert_eq!(creds.current().unwrap().password.as_ref().map(Secret::expose), Some("ann-pw"));
        assert_eq!(creds.check("ann-pw", t0), LocalCheck::Match);
        // A wrong password right after a proof costs no server login...
        assert_eq!(creds.check("wrong", t0 + Duration::from_secs(1)), LocalCheck::Refused);
        // ... and later, one per interval.
        let later = t0 + RELEARN_INTERVAL;
        assert_eq!(creds.check("new-pw", later), LocalCheck::AskServer);
        assert_eq!(creds.check("new-pw", later + Duration::from_secs(1)), LocalCheck::Refused);
        // A changed password, once proved, replaces the old one.
        creds.proved(Secret::new("new-pw"), later);
        assert_eq!(creds.check("new-pw", later), LocalCheck::Match);
        assert_eq!(creds.check("ann-pw", later), LocalCheck::Refused);
        assert_eq!(creds.current().unwrap().password.as_ref().map(Secret::expose), Some("new-pw"));
    }

    #[test]
    fn a_reader_instance_logs_in_at_its_own_host_with_what_its_writer_learned() {
        let writer = LearnedCredentials::passthrough(login());
        let reader = writer.sharing_with(LoginInfo { host: "reader-1".into(), ..login() });
        assert!(reader.current().is_err(), "nothing proved yet");
        writer.proved(Secret::new("ann-pw"), Instant::now());
        let got = reader.current().unwrap();
        assert_eq!((got.host.as_str(), got.password.as_ref().map(Secret::expose)), ("reader-1", Some("ann-pw")));
        assert_eq!(writer.current().unwrap().host, "db");
        // And the other way round, for SCRAM passthrough's keys.
        let verifier = ScramSecret::generate("ann-pw", 4096);
        let writer = LearnedCredentials::scram_passthrough(login(), verifier.clone());
        let reader = writer.sharing_with(LoginInfo { host: "reader-1".into(), ..login() });
        reader.keep_keys(proved_keys(&verifier, "ann-pw").unwrap());
        assert!(writer.current().unwrap().scram_keys.is_some());
        assert_eq!(reader.current().unwrap().host, "reader-1");
    }
}
