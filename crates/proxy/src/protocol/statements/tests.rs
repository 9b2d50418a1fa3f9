use super::*;

fn key(q: &str) -> Vec<u8> {
    let mut k = q.as_bytes().to_vec();
    k.extend_from_slice(b"\0\0\0");
    k
}

#[test]
fn the_same_query_gets_the_same_statement_from_any_client() {
    let r = Registry::default();
    let a = r.intern(&key("select 1"));
    let b = r.intern(&key("select 1"));
    let c = r.intern(&key("select 2"));
    assert!(Arc::ptr_eq(&a, &b));
    assert_ne!(a.id, c.id);
    assert_eq!(a.name, server_name(a.id));
    assert_eq!(&a.parse[5..], format!("{}\0select 1\0\0\0", a.name).as_bytes());
    assert_eq!(a.query(), "select 1");
}

#[test]
fn a_named_statement_that_is_not_utf8_is_read_like_an_unnamed_one() {
    // A LATIN1 client's INSERT with an accented literal: a write, outside a transaction block.
    let r = Registry::default();
    let mut k = b"insert into t values ('caf\xe9')".to_vec();
    k.extend_from_slice(b"\0\0\0");
    assert!(r.intern(&k).may_commit(false));
}

#[test]
fn an_unused_statement_is_made_anew() {
    let r = Registry::default();
    let first = r.intern(&key("select 1")).id;
    let again = r.intern(&key("select 1")).id;
    assert_ne!(first, again, "nobody held the first, so its entry was gone");
}

#[test]
fn invalidation_renews_under_a_new_name() {
    let r = Registry::default();
    let a = r.intern(&key("select * from t"));
    r.invalidate(&a);
    assert!(a.is_invalid());
    let b = r.renew(&a);
    assert_ne!(a.id, b.id);
    assert!(!b.is_invalid());
    assert!(Arc::ptr_eq(&b, &r.intern(&key("select * from t"))));
}

fn row_description(columns: &[(&str, i32, i32)]) -> Vec<u8> {
    let mut b = (columns.len() as u16).to_be_bytes().to_vec();
    for (i, (name, oid, typmod)) in columns.iter().enumerate() {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&(16384 + i as i32).to_be_bytes());
        b.extend_from_slice(&(i as i16 + 1).to_be_bytes());
        b.extend_from_slice(&oid.to_be_bytes());
        b.extend_from_slice(&4i16.to_be_bytes());
        b.extend_from_slice(&typmod.to_be_bytes());
        b.extend_from_slice(&(i as i16 % 2).to_be_bytes());
    }
    b
}

#[test]
fn shapes_differ_in_names_types_and_modifiers_only() {
    let one = Shape::of_rows(&row_description(&[("a", 23, -1)])).unwrap();
    let mut moved = row_description(&[("a", 23, -1)]);
    moved[4..8].copy_from_slice(&99i32.to_be_bytes()); // another table, as after CREATE OR REPLACE VIEW
    moved[14..16].copy_from_slice(&1i16.to_be_bytes()); // and binary
    assert_eq!(Shape::of_rows(&moved).unwrap(), one);
    for other in [
        row_description(&[("a", 23, -1), ("b", 23, -1)]),
        row_description(&[("b", 23, -1)]),
        row_description(&[("a", 20, -1)]),
        row_description(&[("a", 23, 14)]),
        row_description(&[]),
    ] {
        assert_ne!(Shape::of_rows(&other).unwrap(), one);
    }
    assert_ne!(Shape::of_rows(&row_description(&[])).unwrap(), Shape::no_data(), "no columns is not NoData");
    assert!(Shape::of_rows(b"\0\x01a").is_err());
}

#[test]
fn a_statement_keeps_the_first_shape_seen_and_a_name_expects_its_own_or_that() {
    let r = Registry::default();
    let stmt = r.intern(&key("select * from t"));
    let old = Shape::of_rows(&row_description(&[("a", 23, -1)])).unwrap();
    let new = Shape::of_rows(&row_description(&[("a", 23, -1), ("b", 23, -1)])).unwrap();
    let mut named = Named::new(Arc::clone(&stmt));
    assert_eq!(named.expected(), None);
    assert!(stmt.saw(&old) && stmt.saw(&old));
    assert_eq!(named.expected(), Some(&old), "the first shape pgmux saw");
    assert!(!stmt.saw(&new), "a copy that returns something else");
    assert_eq!(stmt.shape(), Some(&old), "the first stays");
    named.saw(new.clone());
    assert_eq!(named.expected(), Some(&new), "what the client saw itself comes first");
    named.saw(old);
    assert_eq!(named.expected(), Some(&new), "and stays");
}

fn add(s: &mut ServerStatements, id: u64, capacity: usize) -> Option<u64> {
    s.add(id);
    s.evict_over(capacity, id)
}

#[test]
fn a_lowered_capacity_is_reached_at_the_next_statement() {
    let mut s = ServerStatements::new();
    for id in 1..=5 {
        assert_eq!(add(&mut s, id, 5), None);
    }
    s.add(6);
    let evicted: Vec<u64> = std::iter::from_fn(|| s.evict_over(2, 6)).collect();
    assert_eq!(evicted, [1, 2, 3, 4], "the oldest, down to two, the new one kept");
    assert_eq!(s.len(), 2);
}

#[test]
fn a_server_knows_what_its_copies_return_until_they_go() {
    let shape = Shape::of_rows(&row_description(&[("a", 23, -1)])).unwrap();
    let mut s = ServerStatements::new();
    let cap = 1;
    s.set_shape(1, shape.clone());
    assert_eq!(s.shape(1), None, "no copy, nothing to note");
    add(&mut s, 1, cap);
    assert_eq!(s.shape(1), None, "not described yet");
    s.set_shape(1, shape.clone());
    assert_eq!(s.shape(1), Some(&shape));
    assert_eq!(add(&mut s, 2, cap), Some(1));
    s.restore(1);
    assert_eq!(s.shape(1), None, "evicted and put back: described again when it matters");
}

#[test]
fn servers_evict_the_least_recently_used() {
    let mut s = ServerStatements::new();
    let cap = 2;
    assert_eq!(add(&mut s, 1, cap), None);
    assert_eq!(add(&mut s, 2, cap), None);
    assert!(s.has(1));
    assert_eq!(add(&mut s, 3, cap), Some(2), "2 was used longest ago");
    assert!(s.has(1) && s.has(3) && !s.has(2));
    assert_eq!(s.len(), 2);
    let stats = Arc::clone(s.stats());
    let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
    assert_eq!((read(&stats.parses), read(&stats.evictions), read(&stats.prepared)), (3, 1, 2));
    assert_eq!(read(&stats.hits), 3, "1 found twice and 3 once; 2 was gone");
    s.clear();
    assert!(!s.has(1));
}
