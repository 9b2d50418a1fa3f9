//! SCRAM-SHA-256 as PostgreSQL speaks it: no channel binding (pgmux does not offer `-PLUS`), the user name
//! inside the SCRAM messages ignored in favour of the start-up packet's, passwords normalised with SASLprep
//! when they can be.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The mechanism name offered in `AuthenticationSASL`.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// PostgreSQL's default iteration count.
pub const DEFAULT_ITERATIONS: u32 = 4096;

type HmacSha256 = hmac::Hmac<Sha256>;

/// Why a SCRAM exchange failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message did not follow RFC 5802's grammar.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client asked for channel binding, which pgmux does not offer.
    #[error("channel binding is not supported")]
    ChannelBinding,
    /// The nonce changed between messages.
    #[error("SCRAM nonce mismatch")]
    Nonce,
    /// The client's proof is wrong: the password is wrong.
    #[error("SCRAM proof does not match")]
    InvalidProof,
    /// The server's signature is wrong: it does not know the password.
    #[error("server signature does not match")]
    InvalidServerSignature,
    /// The server reported an error in its final message.
    #[error("server reported SCRAM error {0}")]
    ServerError(String),
    /// A message arrived in the wrong state.
    #[error("unexpected SCRAM message")]
    OutOfOrder,
    /// Logging in with a client's key: the server offered another salt or iteration count than the verifier
    /// the key was proved against, so the key cannot answer it.
    #[error("the server's SCRAM salt or iteration count differs from the verifier pgmux holds for this user")]
    VerifierMismatch,
}

/// What a server keeps to verify a password: the same data as a `SCRAM-SHA-256$…` entry in `pg_authid`.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// Salt.
    pub salt: Vec<u8>,
    /// `H(ClientKey)`.
    pub stored_key: [u8; 32],
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: [u8; 32],
}

impl fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramSecret").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl ScramSecret {
    /// Derives the secret for `password` with a given salt and iteration count.
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Self {
        let salted = salted_password(password, salt, iterations);
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&hmac(&salted, b"Client Key")),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// Reads a verifier as PostgreSQL stores it (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`,
    /// base64), as a userlist or `pg_authid` holds it; `None` if it is not one.
    pub fn parse_verifier(s: &str) -> Option<Self> {
        let rest = s.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let key = |b64: &str| -> Option<[u8; 32]> { B64.decode(b64).ok()?.try_into().ok() };
        Some(ScramSecret {
            iterations: iterations.parse().ok().filter(|n| *n > 0)?,
            salt: B64.decode(salt).ok().filter(|s: &Vec<u8>| !s.is_empty())?,
            stored_key: key(stored)?,
            server_key: key(server)?,
        })
    }

    /// The verifier in PostgreSQL's text form (see [`parse_verifier`](Self::parse_verifier)).
    pub fn to_verifier(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }

    /// Derives the secret with a fresh random 16-byte salt.
    pub fn generate(password: &str, iterations: u32) -> Self {
        let mut salt = [0u8; 16];
        rand::fill(&mut salt);
        Self::from_password(password, &salt, iterations)
    }

    /// A secret no password matches, for a login that must fail but look like any other (an unknown
    /// user): random keys and salt, with PostgreSQL's default iteration count. No PBKDF2 is run: deriving
    /// one from a random password would cost 4,096 hash rounds per attempt, work any client could ask for,
    /// and time that set unknown users apart from known ones, whose secrets are kept.
    pub fn unmatchable() -> Self {
        let (mut salt, mut stored_key, mut server_key) = ([0u8; 16], [0u8; 32], [0u8; 32]);
        rand::fill(&mut salt);
        rand::fill(&mut stored_key);
        rand::fill(&mut server_key);
        ScramSecret { iterations: DEFAULT_ITERATIONS, salt: salt.to_vec(), stored_key, server_key }
    }
}

/// What SCRAM passthrough keeps of a client's login: the `ClientKey` recovered from its proof, with the
/// verifier it was checked against (salt, iterations, `ServerKey`). It answers a server holding the same
/// verifier as the password would, without the password; it is as good as the password for that server.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramKeys {
    /// The verifier's salt and iteration count, which the server must offer.
    pub salt: Vec<u8>,
    pub iterations: u32,
    /// `HMAC(SaltedPassword, "Client Key")`, whose hash is the verifier's StoredKey.
    pub client_key: [u8; 32],
    /// The verifier's ServerKey, to check the server's signature.
    pub server_key: [u8; 32],
}

impl fmt::Debug for ScramKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramKeys").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl ScramKeys {
    /// The keys of `password` under `secret`'s salt and iterations (tests, and a password proved elsewhere).
    pub fn from_password(password: &str, secret: &ScramSecret) -> Self {
        let salted = salted_password(password, &secret.salt, secret.iterations);
        ScramKeys {
            salt: secret.salt.clone(),
            iterations: secret.iterations,
            client_key: hmac(&salted, b"Client Key"),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// Whether these keys belong to `secret`: its salt and iterations, its ServerKey, and a ClientKey that
    /// hashes to its StoredKey (the password behind both is the same).
    pub fn belong_to(&self, secret: &ScramSecret) -> bool {
        self.salt == secret.salt
            && self.iterations == secret.iterations
            && constant_time_eq(&self.server_key, &secret.server_key)
            && constant_time_eq(&sha256(&self.client_key), &secret.stored_key)
    }
}

/// SASLprep when the password allows it, the raw bytes otherwise (PostgreSQL does the same).
fn prepare(password: &str) -> Cow<'_, str> {
    stringprep::saslprep(password).unwrap_or(Cow::Borrowed(password))
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(prepare(password).as_bytes(), salt, iterations, &mut out);
    out
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_nonce() -> String {
    let mut raw = [0u8; 18];
    rand::fill(&mut raw);
    B64.encode(raw)
}

fn utf8(msg: &[u8]) -> Result<&str, ScramError> {
    std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))
}

/// The value of a `k=value` attribute.
fn attr(part: Option<&str>, key: char) -> Result<&str, ScramError> {
    let part = part.ok_or(ScramError::Malformed("missing attribute"))?;
    let mut chars = part.chars();
    if chars.next() != Some(key) || chars.next() != Some('=') {
        return Err(ScramError::Malformed("unexpected attribute"));
    }
    Ok(&part[2..])
}

/// A secret with its two HMAC keys already hashed in: what a server checking many logins against the same
/// secret keeps. An HMAC hashes its key's inner and outer block before the message; done once here, each
/// login hashes four SHA-256 blocks fewer (of about 14).
#[derive(Clone)]
pub struct KeyedSecret {
    secret: ScramSecret,
    /// Keyed with `StoredKey`: gives the ClientSignature.
    stored_mac: HmacSha256,
    /// Keyed with `ServerKey`: gives the ServerSignature.
    server_mac: HmacSha256,
}

impl KeyedSecret {
    /// `secret`, with its HMAC keys hashed in.
    pub fn new(secret: ScramSecret) -> Self {
        let key = |k: &[u8]| <HmacSha256 as KeyInit>::new_from_slice(k).unwrap_or_else(|_| unreachable!());
        KeyedSecret { stored_mac: key(&secret.stored_key), server_mac: key(&secret.server_key), secret }
    }

    /// The secret itself.
    pub fn secret(&self) -> &ScramSecret {
        &self.secret
    }
}

impl fmt::Debug for KeyedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedSecret").field("secret", &self.secret).finish_non_exhaustive()
    }
}

/// The HMAC of `data` under a key already hashed into `keyed`.
fn keyed_hmac(keyed: &HmacSha256, data: &[u8]) -> [u8; 32] {
    let mut mac = keyed.clone();
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// pgmux as the SCRAM server, checking a client's password.
#[derive(Debug)]
pub struct ScramServer {
    keyed: KeyedSecret,
    state: ServerState,
}

#[derive(Debug)]
enum ServerState {
    Initial {
        server_nonce: String,
    },
    SentFirst {
        client_first_bare: String,
        server_first: String,
        nonce: String,
        gs2_header: String,
    },
    Done,
    /// The proof was right; the client's key it carried, for SCRAM passthrough.
    Proved {
        client_key: [u8; 32],
    },
}

impl ScramServer {
    /// A server exchange with a random nonce.
    pub fn new(secret: ScramSecret) -> Self {
        Self::keyed(KeyedSecret::new(secret))
    }

    /// A server exchange with a random nonce, against a secret whose keys are hashed in already.
    pub fn keyed(keyed: KeyedSecret) -> Self {
        ScramServer { keyed, state: ServerState::Initial { server_nonce: random_nonce() } }
    }

    /// A server exchange with a given nonce suffix (for tests).
    pub fn with_nonce(secret: ScramSecret, server_nonce: String) -> Self {
        ScramServer { keyed: KeyedSecret::new(secret), state: ServerState::Initial { server_nonce } }
    }

    /// Handles the client-first message and returns the server-first message.
    pub fn client_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let ServerState::Initial { server_nonce } = &self.state else {
            return Err(ScramError::OutOfOrder);
        };
        let msg = utf8(msg)?;
        let mut parts = msg.splitn(3, ',');
        let cbind = parts.next().unwrap_or_default();
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("bad channel binding flag")),
        }
        let authzid = parts.next().ok_or(ScramError::Malformed("missing authzid"))?;
        if !authzid.is_empty() && !authzid.starts_with("a=") {
            return Err(ScramError::Malformed("bad authzid"));
        }
        let bare = parts.next().ok_or(ScramError::Malformed("missing client-first-bare"))?;
        let mut attrs = bare.split(',');
        let first = attrs.next();
        if first.is_some_and(|a| a.starts_with("m=")) {
            return Err(ScramError::Malformed("mandatory extensions are not supported"));
        }
        attr(first, 'n')?;
        let client_nonce = attr(attrs.next(), 'r')?;
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
            return Err(ScramError::Malformed("bad client nonce"));
        }
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first =
            format!("r={nonce},s={},i={}", B64.encode(&self.keyed.secret.salt), self.keyed.secret.iterations);
        let gs2_header = msg[..msg.len() - bare.len()].to_owned();
        self.state = ServerState::SentFirst {
            client_first_bare: bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
            gs2_header,
        };
        Ok(server_first.into_bytes())
    }

    /// Handles the client-final message; returns the server-final message if the proof is right.
    pub fn client_final(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        let ServerState::SentFirst { client_first_bare, server_first, nonce, gs2_header } =
            std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(ScramError::OutOfOrder);
        };
        let msg = utf8(msg)?;
        let proof_at = msg.rfind(",p=").ok_or(ScramError::Malformed("missing proof"))?;
        let without_proof = &msg[..proof_at];
        let proof = B64.decode(&msg[proof_at + 3..]).map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let mut attrs = without_proof.split(',');
        let cbind =
            B64.decode(attr(attrs.next(), 'c')?).map_err(|_| ScramError::Malformed("channel binding is not base64"))?;
        if cbind != gs2_header.as_bytes() {
            return Err(ScramError::ChannelBinding);
        }
        if attr(attrs.next(), 'r')? != nonce {
            return Err(ScramError::Nonce);
        }
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = keyed_hmac(&self.keyed.stored_mac, auth_message.as_bytes());
        let proof: [u8; 32] = proof.try_into().map_err(|_| ScramError::InvalidProof)?;
        let client_key = xor(&proof, &client_signature);
        if !constant_time_eq(&sha256(&client_key), &self.keyed.secret.stored_key) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = keyed_hmac(&self.keyed.server_mac, auth_message.as_bytes());
        self.state = ServerState::Proved { client_key };
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }

    /// After a right proof: the client's key with the verifier it was proved against, which log in to a
    /// server holding that same verifier (SCRAM passthrough). `None` before, or after a wrong proof.
    pub fn proved_keys(&self) -> Option<ScramKeys> {
        let ServerState::Proved { client_key } = &self.state else { return None };
        Some(ScramKeys {
            salt: self.keyed.secret.salt.clone(),
            iterations: self.keyed.secret.iterations,
            client_key: *client_key,
            server_key: self.keyed.secret.server_key,
        })
    }
}

/// What the client answers with: a password, or a key a client proved (SCRAM passthrough).
enum ClientSecret {
    Password(String),
    Keys(ScramKeys),
}

/// pgmux as the SCRAM client, logging in to PostgreSQL.
pub struct ScramClient {
    secret: ClientSecret,
    client_first_bare: String,
    client_nonce: String,
    state: ClientState,
}

enum ClientState {
    Initial,
    SentFinal { server_signature: [u8; 32] },
    Done,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient").finish_non_exhaustive()
    }
}

impl ScramClient {
    /// A client exchange with a random nonce and an empty user name (PostgreSQL uses the start-up user).
    pub fn new(password: &str) -> Self {
        Self::with_nonce("", password, random_nonce())
    }

    /// A client exchange with a given user name and nonce (for tests against published vectors).
    pub fn with_nonce(user: &str, password: &str, client_nonce: String) -> Self {
        ScramClient {
            secret: ClientSecret::Password(password.to_owned()),
            client_first_bare: format!("n={user},r={client_nonce}"),
            client_nonce,
            state: ClientState::Initial,
        }
    }

    /// A client exchange answering with `keys` instead of a password: the server must hold the verifier the
    /// keys were proved against.
    pub fn with_keys(keys: ScramKeys) -> Self {
        let client_nonce = random_nonce();
        ScramClient {
            secret: ClientSecret::Keys(keys),
            client_first_bare: format!("n=,r={client_nonce}"),
            client_nonce,
            state: ClientState::Initial,
        }
    }

    /// The client-first message, to send in SASLInitialResponse.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Handles the server-first message and returns the client-final message.
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, ClientState::Initial) {
            return Err(ScramError::OutOfOrder);
        }
        let server_first = utf8(msg)?;
        let mut attrs = server_first.split(',');
        let nonce = attr(attrs.next(), 'r')?;
        let salt = B64.decode(attr(attrs.next(), 's')?).map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u32 =
            attr(attrs.next(), 'i')?.parse().map_err(|_| ScramError::Malformed("bad iteration count"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramError::Nonce);
        }
        if iterations == 0 {
            return Err(ScramError::Malformed("bad iteration count"));
        }
        let (client_key, server_key) = match &self.secret {
            ClientSecret::Password(password) => {
                let salted = salted_password(password, &salt, iterations);
                (hmac(&salted, b"Client Key"), hmac(&salted, b"Server Key"))
            }
            ClientSecret::Keys(keys) if keys.salt == salt && keys.iterations == iterations => {
                (keys.client_key, keys.server_key)
            }
            ClientSecret::Keys(_) => return Err(ScramError::VerifierMismatch),
        };
        let stored_key = sha256(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let proof = xor(&client_key, &hmac(&stored_key, auth_message.as_bytes()));
        self.state = ClientState::SentFinal { server_signature: hmac(&server_key, auth_message.as_bytes()) };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server must prove it knows the password too.
    pub fn server_final(&mut self, msg: &[u8]) -> Result<(), ScramError> {
        let ClientState::SentFinal { server_signature } = std::mem::replace(&mut self.state, ClientState::Done) else {
            return Err(ScramError::OutOfOrder);
        };
        let msg = utf8(msg)?;
        if let Some(err) = msg.strip_prefix("e=") {
            return Err(ScramError::ServerError(err.to_owned()));
        }
        let verifier = msg.split(',').next();
        let sig =
            B64.decode(attr(verifier, 'v')?).map_err(|_| ScramError::Malformed("server signature is not base64"))?;
        if constant_time_eq(&sig, &server_signature) { Ok(()) } else { Err(ScramError::InvalidServerSignature) }
    }
}

#[cfg(test)]
mod tests;
