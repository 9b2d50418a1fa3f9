//! Checking a password a client sent in clear text (`auth_type = plain`) against however it is stored:
//! plaintext, an md5 hash (`md5` + md5(password ‖ user)) or a SCRAM-SHA-256 verifier. Every comparison takes
//! the same time whatever the bytes compared hold.

use super::{md5, scram};

/// Whether `password`, sent by `user` in clear text, is the one `stored` holds.
pub fn verify(user: &str, stored: &str, password: &str) -> bool {
    if let Some(verifier) = scram::ScramSecret::parse_verifier(stored) {
        return scram::ScramKeys::from_password(password, &verifier).belong_to(&verifier);
    }
    if md5::is_stored_hash(stored) {
        return same(md5::stored_hash(user, password).as_bytes(), stored.as_bytes());
    }
    same(password.as_bytes(), stored.as_bytes())
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plaintext_password_is_checked_as_it_is() {
        assert!(verify("puser1", "foo", "foo"));
        assert!(!verify("puser1", "foo", "fo"));
        assert!(!verify("puser1", "foo", "foo "));
        assert!(!verify("puser1", "foo", ""));
    }

    #[test]
    fn an_md5_hash_is_checked_with_the_user_s_name() {
        let stored = md5::stored_hash("muser1", "foo");
        assert!(verify("muser1", &stored, "foo"));
        assert!(!verify("muser1", &stored, "wrong"));
        // The hash of another user's same password is not this user's.
        assert!(!verify("muser2", &stored, "foo"));
        // A client that sends the hash itself has not sent the password.
        assert!(!verify("muser1", &stored, &stored));
    }

    #[test]
    fn a_scram_verifier_is_checked_by_deriving_its_keys() {
        let verifier = scram::ScramSecret::generate("foo", 4096).to_verifier();
        assert!(verify("scramuser1", &verifier, "foo"));
        assert!(!verify("scramuser1", &verifier, "wrong"));
        assert!(!verify("scramuser1", &verifier, &verifier));
    }
}
