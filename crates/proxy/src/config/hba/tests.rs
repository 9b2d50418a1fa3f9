use std::net::IpAddr;

use super::*;

fn rules(text: &str) -> AccessRules {
    AccessRules { file: PathBuf::from("hba.conf"), rules: parse_hba(text).expect("the rules read"), maps: Vec::new() }
}

fn tcp<'a>(address: &str, tls: bool, database: &'a str, user: &'a str) -> Attempt<'a> {
    Attempt { address: Some(address.parse::<IpAddr>().expect("an address")), tls, database, user }
}

fn local<'a>(database: &'a str, user: &'a str) -> Attempt<'a> {
    Attempt { address: None, tls: false, database, user }
}

fn method_of(rules: &AccessRules, attempt: Attempt<'_>) -> Option<Method> {
    rules.find(&attempt).map(|r| r.method)
}

#[test]
fn the_first_matching_line_decides() {
    let r = rules(
        "# comment\n\nlocal all postgres peer\nhost all all 10.0.0.0/8 reject\nhost all all 0.0.0.0/0 md5 # tail\n",
    );
    assert_eq!(method_of(&r, local("db", "postgres")), Some(Method::Peer));
    assert_eq!(method_of(&r, local("db", "app")), None);
    assert_eq!(method_of(&r, tcp("10.1.2.3", false, "db", "app")), Some(Method::Reject));
    assert_eq!(method_of(&r, tcp("11.1.2.3", true, "db", "app")), Some(Method::Md5));
    assert_eq!(method_of(&r, tcp("::1", false, "db", "app")), None, "an IPv4 net covers no IPv6 client");
    assert_eq!(method_of(&r, tcp("::ffff:11.1.2.3", false, "db", "app")), Some(Method::Md5));
    assert_eq!(r.find(&tcp("11.1.2.3", true, "db", "app")).map(|r| r.line), Some(5));
}

#[test]
fn ssl_lines_look_at_tls() {
    let r = rules("hostssl all all all cert map=m\nhostnossl all all all scram-sha-256\n");
    let ssl = r.find(&tcp("1.2.3.4", true, "db", "u")).expect("a line");
    assert_eq!((ssl.method, ssl.map.as_deref()), (Method::Cert, Some("m")));
    assert_eq!(method_of(&r, tcp("1.2.3.4", false, "db", "u")), Some(Method::ScramSha256));
    assert_eq!(method_of(&r, local("db", "u")), None);
}

#[test]
fn lists_quotes_and_keywords() {
    let r = rules(
        "host d1,\"all\" u1 , u2 all trust\nhost sameuser all all password\nhost \"q1\"\"q2\" \"a , b\" all cert\n\
         host replication all all md5\n",
    );
    assert_eq!(method_of(&r, tcp("1.1.1.1", false, "all", "u2")), Some(Method::Trust));
    assert_eq!(method_of(&r, tcp("1.1.1.1", false, "d1", "u1")), Some(Method::Trust));
    assert_eq!(method_of(&r, tcp("1.1.1.1", false, "other", "u1")), None, "a quoted all is a name");
    assert_eq!(method_of(&r, tcp("1.1.1.1", false, "u3", "u3")), Some(Method::Password));
    assert_eq!(method_of(&r, tcp("1.1.1.1", false, "q1\"q2", "a , b")), Some(Method::Cert));
    assert_eq!(method_of(&r, tcp("1.1.1.1", false, "replication", "x")), None);
}

#[test]
fn masks_and_prefixes() {
    let r = rules(
        "host all all 127.0.0.0 255.255.255.0 password\nhost all all ff00::/8 md5\nhost all all 8.0.0.0/0 trust\n",
    );
    assert_eq!(method_of(&r, tcp("127.0.0.9", false, "d", "u")), Some(Method::Password));
    assert_eq!(method_of(&r, tcp("127.0.1.9", false, "d", "u")), Some(Method::Trust));
    assert_eq!(method_of(&r, tcp("ff11::1", false, "d", "u")), Some(Method::Md5));
    assert_eq!(method_of(&r, tcp("fe11::1", false, "d", "u")), None);
}

#[test]
fn odd_spacing_reads() {
    // The forms PgBouncer's suite reloads back and forth (test_hba_leak): tabs, blank lines of spaces and tabs,
    // spaces around commas, a comment after a line.
    let text = " \t \t\n\t\t\t# z\nlocal\t\tdbp\t\tall\t\t\t\t\tpeer\n\
                host\t\ttmp1,all\tuser1,user2 , user3\t\t\t16.0.0.0/8\tmd5\n\
                host\t\td1,d2\tt18user\t\t18.0.0.0/8\ttrust # comment\n\
                host\t\tmdb2\tmuser\t\t128.0.0.0/9\t\ttrust\nhost\t\tmdb2\tmuser\t\t128.0.0.0/1\t\tcert\n";
    let r = rules(text);
    assert_eq!(method_of(&r, local("dbp", "x")), Some(Method::Peer));
    assert_eq!(method_of(&r, tcp("16.1.1.1", false, "x", "user3")), Some(Method::Md5));
    assert_eq!(method_of(&r, tcp("18.1.1.1", false, "d2", "t18user")), Some(Method::Trust));
    assert_eq!(method_of(&r, tcp("128.1.1.1", false, "mdb2", "muser")), Some(Method::Trust));
    assert_eq!(method_of(&r, tcp("129.1.1.1", false, "mdb2", "muser")), Some(Method::Cert));
}

#[test]
fn what_pgmux_does_not_do_is_refused_with_its_line() {
    for (text, says) in [
        ("host all +admins all md5\n", "role membership"),
        ("host all all db.example.com md5\n", "host names"),
        ("host all all 1.2.3.4/33 md5\n", "prefix length"),
        ("host all all 1.2.3.4 255.0.255.0 md5\n", "not contiguous"),
        ("host all all all ldap\n", "\"ldap\""),
        ("host all all all md5 clientcert=verify-full\n", "clientcert"),
        ("host all all all md5 map=x\n", "map="),
        ("hosts all all all md5\n", "unknown connection type"),
        ("host all all\n", "ends before"),
        ("host \"all all all md5\n", "not closed"),
    ] {
        let (line, reason) = parse_hba(&format!("# first\n{text}")).expect_err(text);
        assert_eq!(line, 2, "{text}");
        assert!(reason.contains(says), "{text}: {reason}");
    }
}

#[test]
fn a_bad_file_names_itself_and_its_line() {
    let dir = tempfile::tempdir().expect("a directory");
    let hba = dir.path().join("hba.conf");
    std::fs::write(&hba, "local all all trust\nhost all all all gss\n").expect("written");
    let err = AccessRules::load(&hba, None).expect_err("gss is refused");
    let text = err.to_string();
    assert!(text.starts_with(&format!("auth_hba_file {}, line 2: ", hba.display())), "{text}");
    let missing = AccessRules::load(&dir.path().join("none"), None).expect_err("no file");
    assert!(missing.to_string().contains("cannot read it"), "{missing}");
}

#[test]
fn ident_maps() {
    let maps = parse_ident(
        "# MAPNAME SYSTEM PG\ntest pgbouncer.acme.org someuser\ntest pgbouncer.acme.org \"anotheruser\"\n\
         any \"bouncer\" all\nliteral bob \"all\"\n",
    )
    .expect("the maps read");
    let r = AccessRules { maps, ..AccessRules::default() };
    assert_eq!(r.map_allows("test", "pgbouncer.acme.org", "someuser"), MapVerdict::Allowed);
    assert_eq!(r.map_allows("test", "pgbouncer.acme.org", "anotheruser"), MapVerdict::Allowed);
    assert_eq!(r.map_allows("test", "pgbouncer.acme.org", "bouncer"), MapVerdict::NoMatch);
    assert_eq!(r.map_allows("test", "other.org", "someuser"), MapVerdict::NoMatch);
    assert_eq!(r.map_allows("any", "bouncer", "whoever"), MapVerdict::Allowed);
    assert_eq!(r.map_allows("literal", "bob", "someone"), MapVerdict::NoMatch, "a quoted all is a name");
    assert_eq!(r.map_allows("literal", "bob", "all"), MapVerdict::Allowed);
    assert_eq!(r.map_allows("nope", "bob", "bob"), MapVerdict::NoSuchMap);
    assert_eq!(parse_ident("m /^(.*)$ \\1\n").map(drop).expect_err("a regex").0, 1);
    assert_eq!(parse_ident("m a\n").map(drop).expect_err("two fields").0, 1);
}
