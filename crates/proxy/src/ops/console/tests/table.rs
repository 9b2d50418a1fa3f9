//! Result sets as bytes on the wire.

use bytes::BytesMut;

use crate::ops::console::command::SessionSetting;
use crate::ops::console::table::*;

const COLS: [ColumnDef; 3] =
    [text("database", "d"), int8("cl_active", "n"), ColumnDef { name: "p", ty: ColumnType::Int4, doc: "" }];

fn bytes(set: &ResultSet) -> Vec<u8> {
    let mut buf = BytesMut::new();
    set.encode(&mut buf);
    buf.to_vec()
}

#[test]
fn golden_result_set() {
    let mut set = ResultSet::new(&COLS);
    set.push(["app".into(), 3i64.into(), Cell::Null]).unwrap();
    set.push([Cell::from(None::<&str>), Cell::from(u64::MAX), Cell::from(7i32)]).unwrap();
    let mut want = Vec::new();
    // RowDescription: 3 columns.
    want.extend_from_slice(b"T\0\0\0\x51\0\x03");
    want.extend_from_slice(b"database\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0");
    want.extend_from_slice(b"cl_active\0\0\0\0\0\0\0\0\0\0\x14\0\x08\xff\xff\xff\xff\0\0");
    want.extend_from_slice(b"p\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0");
    // DataRow "app", "3", NULL.
    want.extend_from_slice(b"D\0\0\0\x16\0\x03\0\0\0\x03app\0\0\0\x013\xff\xff\xff\xff");
    // DataRow NULL, i64::MAX, "7".
    want.extend_from_slice(b"D\0\0\0\x26\0\x03\xff\xff\xff\xff\0\0\0\x139223372036854775807\0\0\0\x017");
    want.extend_from_slice(b"C\0\0\0\x09SHOW\0");
    assert_eq!(bytes(&set), want);
}

#[test]
fn an_empty_result_still_describes_its_columns() {
    let set = ResultSet::new(&COLS[..1]);
    assert_eq!(
        bytes(&set),
        b"T\0\0\0\x21\0\x01database\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0C\0\0\0\x09SHOW\0"
    );
}

#[test]
fn rows_must_fit_their_columns() {
    let mut set = ResultSet::new(&COLS);
    assert_eq!(set.push(["a".into()]), Err(TableError::Arity { expected: 3, got: 1 }));
    assert_eq!(
        set.push(["a".into(), "not a number".into(), Cell::Null]),
        Err(TableError::Type { column: "cl_active", ty: ColumnType::Int8 })
    );
    assert_eq!(
        set.push(["a".into(), 1i64.into(), Cell::Int(i64::from(i32::MAX) + 1)]),
        Err(TableError::Type { column: "p", ty: ColumnType::Int4 }),
        "int4 out of range"
    );
    assert!(set.rows().is_empty(), "a refused row is not added");
    // A number in a text column is fine (PgBouncer's SHOW USERS pool_size is text).
    set.push([Cell::Int(5), 1i64.into(), Cell::Null]).unwrap();
    assert_eq!(set.rows()[0][0].as_deref(), Some("5"));
}

#[test]
fn bytea_holds_null_only_and_says_its_type() {
    let cols = [bytea("scram_client_key", "")];
    let mut set = ResultSet::new(&cols);
    assert_eq!(set.push([Cell::Int(1)]), Err(TableError::Type { column: "scram_client_key", ty: ColumnType::Bytea }));
    assert!(set.push(["key".into()]).is_err());
    set.push([Cell::Null]).unwrap();
    let raw = bytes(&set);
    // RowDescription: the column's type OID 17, typlen -1.
    let needle = b"scram_client_key\0\0\0\0\0\0\0\0\0\0\x11\xff\xff";
    assert!(raw.windows(needle.len()).any(|w| w == needle), "{raw:?}");
}

#[test]
fn booleans_are_yes_and_no() {
    let mut set = ResultSet::new(&[text("changeable", "")]);
    set.push([true.into()]).unwrap();
    set.push([false.into()]).unwrap();
    assert_eq!(set.rows(), &[vec![Some("yes".to_owned())], vec![Some("no".to_owned())]]);
}

#[test]
fn text_is_sent_as_is_including_unicode() {
    let mut set = ResultSet::new(&COLS[..1]);
    set.push(["bäckerei \"x\"".into()]).unwrap();
    let raw = bytes(&set);
    let needle = "bäckerei \"x\"".as_bytes();
    assert!(raw.windows(needle.len()).any(|w| w == needle));
}

#[test]
fn help_is_a_notice_then_show() {
    let mut buf = BytesMut::new();
    encode_help(&mut buf);
    assert_eq!(buf[0], b'N');
    assert!(buf.ends_with(b"C\0\0\0\x09SHOW\0"));
    let text = String::from_utf8_lossy(&buf);
    assert!(text.contains("SHOW SIZING|PINS|PREPARED|LATENCY") && text.contains("KILL_CLIENT <id>"));
    assert!(text.contains("SHOW FDS|SOCKETS|ACTIVE_SOCKETS|MEM|DNS_HOSTS|DNS_ZONES|PEERS|PEER_POOLS"));
}

#[test]
fn set_ignored_and_fake_settings() {
    let mut buf = BytesMut::new();
    encode_set_ignored(&mut buf);
    assert!(buf.starts_with(b"N") && buf.ends_with(b"C\0\0\0\x08SET\0"));
    let set = setting(SessionSetting::DateStyle);
    assert_eq!(set.columns()[0].name, "datestyle", "PgBouncer's name");
    assert_eq!(setting(SessionSetting::TimeZone).columns()[0].name, "timezone");
    assert_eq!(set.rows(), &[vec![Some("ISO".to_owned())]]);
}

#[test]
fn timestamps_in_pgbouncer_s_form() {
    assert_eq!(timestamp(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(timestamp(1_700_000_000), "2023-11-14 22:13:20 UTC");
    assert_eq!(timestamp(1_709_164_800), "2024-02-29 00:00:00 UTC");
    assert_eq!(timestamp(4_102_444_799), "2099-12-31 23:59:59 UTC");
}
