//! PostgreSQL's MD5 password scheme: `"md5" + hex(md5(hex(md5(password + user)) + salt))`.

use md5::{Digest, Md5};

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// The stored form of a password, as in `pg_authid.rolpassword`: `md5` + hex(md5(password + user)).
pub fn stored_hash(user: &str, password: &str) -> String {
    let mut h = Md5::new();
    h.update(password.as_bytes());
    h.update(user.as_bytes());
    format!("md5{}", hex(&h.finalize()))
}

/// What a client sends in answer to `AuthenticationMD5Password` with `salt`.
pub fn client_response(user: &str, password: &str, salt: [u8; 4]) -> String {
    let stored = stored_hash(user, password);
    let mut h = Md5::new();
    h.update(&stored.as_bytes()[3..]);
    h.update(salt);
    format!("md5{}", hex(&h.finalize()))
}

/// Whether `s` is a stored MD5 password (`md5` and 32 hex digits) rather than the password itself.
pub fn is_stored_hash(s: &str) -> bool {
    s.len() == 35 && s.starts_with("md5") && s[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a client sends in answer to `AuthenticationMD5Password` with `salt`, from the stored hash alone
/// (which is all the MD5 exchange needs: a pooler may log in with a userlist's hash).
pub fn response_from_stored(stored: &str, salt: [u8; 4]) -> String {
    let mut h = Md5::new();
    h.update(stored.get(3..).unwrap_or_default().as_bytes());
    h.update(salt);
    format!("md5{}", hex(&h.finalize()))
}

/// Checks a client's MD5 response against a stored hash, in constant time with respect to its content.
pub fn verify_stored(stored: &str, salt: [u8; 4], response: &str) -> bool {
    let expected = response_from_stored(stored, salt);
    expected.len() == response.len()
        && expected.bytes().zip(response.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Checks a client's MD5 response in constant time with respect to its content.
pub fn verify(user: &str, password: &str, salt: [u8; 4], response: &str) -> bool {
    let expected = client_response(user, password, salt);
    expected.len() == response.len()
        && expected.bytes().zip(response.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_hash_answers_as_the_password_does() {
        let stored = stored_hash("alice", "secret");
        assert!(is_stored_hash(&stored) && !is_stored_hash("secret") && !is_stored_hash("md5xyz"));
        let salt = [1, 2, 3, 4];
        assert_eq!(response_from_stored(&stored, salt), client_response("alice", "secret", salt));
        assert!(verify_stored(&stored, salt, &client_response("alice", "secret", salt)));
        assert!(!verify_stored(&stored, salt, &client_response("alice", "wrong", salt)));
    }

    #[test]
    fn matches_postgres_stored_hash() {
        // SELECT 'md5' || md5('secret' || 'alice') in PostgreSQL.
        assert_eq!(stored_hash("alice", "secret"), "md54a0a68b43b6cd5cf266fa02f196e2371");
    }

    #[test]
    fn response_round_trip() {
        let salt = [1, 2, 3, 4];
        let r = client_response("alice", "secret", salt);
        // Computed independently with Python's hashlib.
        assert_eq!(r, "md598a0412b9c31436fc53776e863350083");
        assert!(verify("alice", "secret", salt, &r));
        assert!(!verify("alice", "wrong", salt, &r));
        assert!(!verify("alice", "secret", [0, 0, 0, 0], &r));
        assert!(!verify("alice", "secret", salt, "md5"));
    }
}
