use super::*;

// The SCRAM-SHA-256 example of RFC 7677, section 3.
const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                            p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc_secret() -> ScramSecret {
    ScramSecret::from_password("pencil", &B64.decode(SALT_B64).unwrap(), 4096)
}

#[test]
fn a_verifier_reads_back_as_postgresql_wrote_it() {
    // SELECT rolpassword FROM pg_authid for a role whose password is 'pencil' (salt and keys of that run).
    let secret = ScramSecret::from_password("pencil", b"0123456789abcdef", 4096);
    let text = secret.to_verifier();
    assert!(text.starts_with("SCRAM-SHA-256$4096:"), "{text}");
    assert_eq!(ScramSecret::parse_verifier(&text), Some(secret));
    for bad in ["", "md5abc", "SCRAM-SHA-256$x:c2FsdA==$a:b", "SCRAM-SHA-256$4096:$AAAA:AAAA", "SCRAM-SHA-256$4096"] {
        assert!(ScramSecret::parse_verifier(bad).is_none(), "{bad}");
    }
}

#[test]
fn client_matches_rfc7677() {
    let mut c = ScramClient::with_nonce("user", "pencil", CLIENT_NONCE.into());
    assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
    assert_eq!(c.server_first(SERVER_FIRST.as_bytes()).unwrap(), CLIENT_FINAL.as_bytes());
    assert_eq!(c.server_final(SERVER_FINAL.as_bytes()), Ok(()));
}

#[test]
fn server_matches_rfc7677() {
    let mut s = ScramServer::with_nonce(rfc_secret(), SERVER_NONCE.into());
    let first = s.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
    assert_eq!(first, SERVER_FIRST.as_bytes());
    assert_eq!(s.client_final(CLIENT_FINAL.as_bytes()).unwrap(), SERVER_FINAL.as_bytes());
}

#[test]
fn a_keyed_secret_signs_as_the_plain_hmac_does() {
    let keyed = KeyedSecret::new(rfc_secret());
    for data in [&b""[..], b"n=user,r=abc", &[7u8; 300]] {
        assert_eq!(keyed_hmac(&keyed.stored_mac, data), hmac(&keyed.secret().stored_key, data));
        assert_eq!(keyed_hmac(&keyed.server_mac, data), hmac(&keyed.secret().server_key, data));
    }
    assert_ne!(keyed_hmac(&keyed.stored_mac, b"x"), keyed_hmac(&keyed.server_mac, b"x"), "two keys, two MACs");
}

#[test]
fn an_unmatchable_secret_refuses_a_proof_and_is_new_each_time() {
    let secret = ScramSecret::unmatchable();
    assert_eq!((secret.iterations, secret.salt.len()), (DEFAULT_ITERATIONS, 16));
    assert_ne!(secret, ScramSecret::unmatchable());
    let mut server = ScramServer::new(secret);
    let mut client = ScramClient::new("pencil");
    let first = server.client_first(&client.client_first()).unwrap();
    let last = client.server_first(&first).unwrap();
    assert_eq!(server.client_final(&last), Err(ScramError::InvalidProof));
}

#[test]
fn wrong_password_is_an_invalid_proof() {
    let mut s = ScramServer::new(ScramSecret::generate("right", DEFAULT_ITERATIONS));
    let mut c = ScramClient::new("wrong");
    let first = s.client_first(&c.client_first()).unwrap();
    let fin = c.server_first(&first).unwrap();
    assert_eq!(s.client_final(&fin), Err(ScramError::InvalidProof));
}

#[test]
fn client_and_server_agree() {
    let mut s = ScramServer::new(ScramSecret::generate("pässwörd", 4096));
    let mut c = ScramClient::new("pässwörd");
    let first = s.client_first(&c.client_first()).unwrap();
    let fin = c.server_first(&first).unwrap();
    let last = s.client_final(&fin).unwrap();
    assert_eq!(c.server_final(&last), Ok(()));
}

#[test]
fn client_rejects_a_server_that_does_not_know_the_password() {
    let mut s = ScramServer::new(ScramSecret::generate("other", 4096));
    let mut c = ScramClient::new("mine");
    let first = s.client_first(&c.client_first()).unwrap();
    c.server_first(&first).unwrap();
    let forged = format!("v={}", B64.encode([0u8; 32]));
    assert_eq!(c.server_final(forged.as_bytes()), Err(ScramError::InvalidServerSignature));
    let mut c2 = ScramClient::new("mine");
    let bad_nonce = "r=someoneelse,s=AAAA,i=4096";
    assert_eq!(c2.server_first(bad_nonce.as_bytes()), Err(ScramError::Nonce));
}

#[test]
fn malformed_client_messages_are_errors() {
    let secret = rfc_secret();
    for bad in [&b""[..], b"x,,n=,r=a", b"n,,r=abc", b"n,,n=u", b"p=tls-unique,,n=,r=a", b"\xff"] {
        let mut s = ScramServer::new(secret.clone());
        assert!(s.client_first(bad).is_err(), "{bad:?} accepted");
    }
    let mut s = ScramServer::with_nonce(secret, SERVER_NONCE.into());
    s.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
    assert!(s.client_final(b"c=biws,r=x").is_err());
    let mut s = ScramServer::new(rfc_secret());
    assert_eq!(s.client_final(CLIENT_FINAL.as_bytes()), Err(ScramError::OutOfOrder));
}

#[test]
fn secrets_do_not_print_their_keys() {
    let dbg = format!("{:?}", rfc_secret());
    assert!(!dbg.contains("stored_key") && !dbg.contains("server_key"), "{dbg}");
    let dbg = format!("{:?}", ScramKeys::from_password("pencil", &rfc_secret()));
    assert!(!dbg.contains("client_key") && !dbg.contains("server_key"), "{dbg}");
}

/// One full exchange of `client` against a server holding `secret`; the server's proved keys on success.
fn exchange(secret: &ScramSecret, client: &mut ScramClient) -> Result<Option<ScramKeys>, ScramError> {
    let mut s = ScramServer::new(secret.clone());
    let first = s.client_first(&client.client_first())?;
    let fin = client.server_first(&first)?;
    let last = s.client_final(&fin)?;
    client.server_final(&last)?;
    Ok(s.proved_keys())
}

#[test]
fn a_clients_proved_key_logs_in_to_a_server_with_the_same_verifier_and_no_other() {
    let secret = ScramSecret::generate("pencil", 4096);
    // A client proves its password to pgmux (playing the server with the verifier)...
    let keys = exchange(&secret, &mut ScramClient::new("pencil")).unwrap().expect("keys after a right proof");
    assert_eq!(keys, ScramKeys::from_password("pencil", &secret));
    // ... and pgmux logs in to the real server with the key alone, checking the server's signature.
    let again = exchange(&secret, &mut ScramClient::with_keys(keys.clone())).expect("the key logs in");
    assert_eq!(again, Some(keys.clone()), "the same key, proved again");
    // The same password under another salt is another verifier: the key cannot answer it.
    let resalted = ScramSecret::generate("pencil", 4096);
    assert_eq!(exchange(&resalted, &mut ScramClient::with_keys(keys.clone())), Err(ScramError::VerifierMismatch));
    // Same salt, another password: the server refuses the proof.
    let other = ScramSecret::from_password("other", &secret.salt, 4096);
    assert_eq!(exchange(&other, &mut ScramClient::with_keys(keys)), Err(ScramError::InvalidProof));
}

#[test]
fn a_wrong_proof_leaves_no_keys() {
    let secret = ScramSecret::generate("right", 4096);
    let mut s = ScramServer::new(secret);
    let mut c = ScramClient::new("wrong");
    let first = s.client_first(&c.client_first()).unwrap();
    let fin = c.server_first(&first).unwrap();
    assert_eq!(s.client_final(&fin), Err(ScramError::InvalidProof));
    assert!(s.proved_keys().is_none());
}
