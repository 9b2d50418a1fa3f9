//! The router driven by byte fixtures, no sockets: what reaches the server, what the client sees, what the
//! server owes, and what is undone when a message fails or is skipped. A `Rig` plays the session: it holds
//! one client's router, the server connections it may land on, and the statement registry every client
//! shares; `serve` plays the relay loop's server half. Like the session, the rig hands the router no client
//! message while it holds (a check is out), and goes on with them once the server's answer came.

use bytes::Bytes;
use pgmux_proto::TxStatus;
use pgmux_testkit::wire::{cstr, msg};

use super::*;
use crate::net::io::WriteQueue;
use crate::protocol::failure::ServerFailure;
use crate::protocol::statements::ServerStatements;
use crate::protocol::tracker::{Route, TxTracker};

mod ddl;
mod forgetting;
mod lost;
mod state;

/// One server connection as the router sees it between links.
#[derive(Default)]
struct Server {
    tracker: TxTracker<Undo>,
    statements: Option<ServerStatements>,
    out: WriteQueue,
}

impl Server {
    fn new() -> Self {
        Server { statements: Some(ServerStatements::new()), ..Default::default() }
    }
}

struct Rig {
    router: Router,
    registry: Registry,
    servers: Vec<Server>,
    /// Which server the client is linked to.
    on: usize,
    /// Client messages not handed to the router yet, because it holds.
    unread: std::collections::VecDeque<Vec<u8>>,
}

impl Rig {
    /// A client with two servers to land on, each keeping up to `capacity` statements.
    fn new(capacity: usize) -> Rig {
        Rig {
            router: Router::new(1, true),
            registry: Registry::with_capacity(capacity),
            servers: vec![Server::new(), Server::new()],
            on: 0,
            unread: Default::default(),
        }
    }

    fn untracked() -> Rig {
        Rig { router: Router::new(1, false), ..Rig::new(10) }
    }

    /// A second client sharing this one's registry and servers.
    fn other_client(&mut self) -> Router {
        Router::new(2, true)
    }

    /// Sends client messages to the linked server; returns what was queued for it, as readable tokens.
    fn client(&mut self, messages: &[Vec<u8>]) -> Vec<String> {
        self.unread.extend(messages.iter().cloned());
        self.read_client();
        self.sent()
    }

    /// Hands the router the client's messages until it holds.
    fn read_client(&mut self) {
        while !self.router.holding()
            && let Some(m) = self.unread.pop_front()
        {
            let server = &mut self.servers[self.on];
            let statements = server.statements.as_mut().expect("statements");
            let mut view = ServerView { tracker: &mut server.tracker, statements, out: &mut server.out };
            self.router.linked(m[0], Bytes::from(m), &mut view, &self.registry);
        }
    }

    /// What was queued for the linked server since last asked, as readable tokens.
    fn sent(&mut self) -> Vec<String> {
        tokens(&self.servers[self.on].out.take_all())
    }

    /// The server's replies, in order, as the relay loop feeds them; returns what the client sees: forwarded
    /// messages as their tag, pgmux's own answers as `*` and their tag. Panics if the server is lost.
    fn serve(&mut self, replies: &[Vec<u8>]) -> Vec<String> {
        self.try_serve(replies).expect("the server stays linked")
    }

    fn try_serve(&mut self, replies: &[Vec<u8>]) -> Result<Vec<String>, ServerFailure> {
        let mut seen = Vec::new();
        for reply in replies {
            let server = &mut self.servers[self.on];
            server.tracker.take_answers(|b| seen.extend(tokens(&b).into_iter().map(|t| format!("*{t}"))));
            let statements = server.statements.as_mut().expect("statements");
            let mut view = ServerView { tracker: &mut server.tracker, statements, out: &mut server.out };
            let route = self.router.server_message(reply[0], &reply[5..], &mut view, &self.registry)?;
            if route == Route::Forward {
                seen.push((reply[0] as char).to_string());
            }
            self.read_client();
        }
        self.servers[self.on].tracker.take_answers(|b| seen.extend(tokens(&b).into_iter().map(|t| format!("*{t}"))));
        Ok(seen)
    }

    fn server_has(&mut self, server: usize, sql: &str) -> bool {
        let id = self.registry.intern(&parse_key(sql)).id;
        self.servers[server].statements.as_mut().expect("statements").has(id)
    }

    fn named(&self, name: &str) -> bool {
        self.router.names.named.contains_key(name)
    }
}

/// Readable tokens for a stream of messages: `P pgmux_1`, `B pgmux_1`, `DS s`, `CS pgmux_2`, `E`, `Q`, ...
fn tokens(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let tag = bytes[at];
        let len = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        let body = &bytes[at + 5..at + 1 + len];
        let name = |b: &[u8]| String::from_utf8_lossy(b.split(|c| *c == 0).next().unwrap_or_default()).into_owned();
        out.push(match tag {
            b'P' => format!("P {}", name(body)),
            b'B' => format!("B {}", name(&body[name(body).len() + 1..])),
            b'D' | b'C' if matches!(body.first(), Some(b'S' | b'P')) => {
                format!("{}{} {}", tag as char, body[0] as char, name(&body[1..]))
            }
            // An ErrorResponse (pgmux's own answer) shows its SQLSTATE; a client's Execute starts with a portal.
            b'E' if body.first() != Some(&0) => format!("E {}", field(body, b'C').unwrap_or_default()),
            tag => (tag as char).to_string(),
        });
        at += 1 + len;
    }
    out
}

/// A field of an ErrorResponse body.
fn field(body: &[u8], code: u8) -> Option<String> {
    let mut rest = body;
    while let Some((&kind, tail)) = rest.split_first() {
        let end = tail.iter().position(|&c| c == 0)?;
        if kind == code {
            return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
        }
        rest = &tail[end + 1..];
    }
    None
}

fn parse_key(sql: &str) -> Vec<u8> {
    let mut k = cstr(sql);
    k.extend_from_slice(&[0, 0]);
    k
}

// Client messages.
fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut body = cstr(name);
    body.extend(parse_key(sql));
    msg(b'P', &body)
}
fn bind(statement: &str) -> Vec<u8> {
    let mut body = cstr("");
    body.extend(cstr(statement));
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    msg(b'B', &body)
}
fn describe(kind: u8, name: &str) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend(cstr(name));
    msg(b'D', &body)
}
fn close(kind: u8, name: &str) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend(cstr(name));
    msg(b'C', &body)
}
fn execute() -> Vec<u8> {
    let mut body = cstr("");
    body.extend_from_slice(&[0, 0, 0, 0]);
    msg(b'E', &body)
}
fn sync() -> Vec<u8> {
    msg(b'S', b"")
}
fn flush() -> Vec<u8> {
    msg(b'H', b"")
}
fn query(sql: &str) -> Vec<u8> {
    msg(b'Q', &cstr(sql))
}

// Server replies.
fn parsed() -> Vec<u8> {
    msg(b'1', b"")
}
fn bound() -> Vec<u8> {
    msg(b'2', b"")
}
fn closed() -> Vec<u8> {
    msg(b'3', b"")
}
fn params_described() -> Vec<u8> {
    msg(b't', &[0, 0])
}
fn rows_described() -> Vec<u8> {
    msg(b'T', &[0, 0])
}
fn row() -> Vec<u8> {
    msg(b'D', &[0, 0])
}
fn done(tag: &str) -> Vec<u8> {
    msg(b'C', &cstr(tag))
}
fn ready(status: u8) -> Vec<u8> {
    msg(b'Z', &[status])
}
fn error(code: &str, message: &str) -> Vec<u8> {
    let mut body = b"SERROR\0VERROR\0C".to_vec();
    body.extend(cstr(code));
    body.push(b'M');
    body.extend(cstr(message));
    body.push(0);
    msg(b'E', &body)
}
fn fatal() -> Vec<u8> {
    msg(b'E', b"SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0")
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A name prepared and executed once on server 0.
fn prepared_once(rig: &mut Rig, name: &str, sql: &str) {
    rig.client(&[parse(name, sql), bind(name), execute(), sync()]);
    rig.serve(&[parsed(), bound(), done("SELECT 1"), ready(b'I')]);
}

// ---- Parse ----

#[test]
fn a_named_parse_goes_to_the_server_under_pgmux_name() {
    let mut rig = Rig::new(10);
    assert_eq!(rig.client(&[parse("s1", "select 1"), sync()]), strs(&["P pgmux_1", "S"]));
    assert_eq!(rig.serve(&[parsed(), ready(b'I')]), strs(&["1", "Z"]));
    assert!(rig.named("s1") && rig.server_has(0, "select 1"));
}

#[test]
fn a_parse_of_a_statement_the_server_has_is_answered_in_its_turn() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    // Another client prepares the same text under its own name: the server already has it.
    let mut other = rig.other_client();
    std::mem::swap(&mut rig.router, &mut other);
    assert_eq!(rig.client(&[parse("x", "select 1"), bind("x"), sync()]), strs(&["B pgmux_1", "S"]));
    assert_eq!(rig.serve(&[bound(), ready(b'I')]), strs(&["*1", "2", "Z"]));
}

#[test]
fn an_unnamed_parse_goes_as_it_is() {
    let mut rig = Rig::new(10);
    assert_eq!(rig.client(&[parse("", "select 2"), bind(""), execute(), sync()]), strs(&["P ", "B ", "E", "S"]));
    assert_eq!(rig.serve(&[parsed(), bound(), done("SELECT 1"), ready(b'I')]), strs(&["1", "2", "C", "Z"]));
}

#[test]
fn a_parse_reusing_a_live_name_gets_42p05_and_the_unit_is_discarded_up_to_its_sync() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    let sent = rig.client(&[parse("s1", "select 2"), bind("s1"), execute(), sync()]);
    assert_eq!(sent, strs(&["S"]), "only the Sync reaches the server");
    assert_eq!(rig.router.mode(), Mode::Normal, "the Sync ended the discarding");
    assert_eq!(rig.serve(&[ready(b'I')]), strs(&["*E 42P05", "Z"]));
}

#[test]
fn a_parse_reusing_a_live_name_without_a_server_skips_to_the_sync() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    let Verdict::Answer(err) = rig.router.unlinked(b'P', &parse("s1", "select 2")) else { panic!("answered") };
    assert_eq!(tokens(&err), strs(&["E 42P05"]));
    assert_eq!(rig.router.mode(), Mode::SkipToSync);
    assert_eq!(rig.router.unlinked(b'B', &bind("s1")), Verdict::Drop);
    let Verdict::Answer(end) = rig.router.unlinked(b'S', &sync()) else { panic!("the Sync is answered") };
    assert_eq!(tokens(&end), strs(&["Z"]));
    assert_eq!(rig.router.mode(), Mode::Normal);
}

#[test]
fn a_malformed_parse_is_answered_with_a_protocol_violation_in_its_turn() {
    let mut rig = Rig::new(10);
    assert_eq!(rig.client(&[msg(b'P', b"no terminator"), sync()]), strs(&["S"]));
    assert_eq!(rig.serve(&[ready(b'I')]), strs(&["*E 08P01", "Z"]));
}

// ---- Bind ----

#[test]
fn a_bind_is_renamed_to_the_server_name() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("s1", "select 1")]);
    assert_eq!(rig.client(&[bind("s1")]), strs(&["B pgmux_1"]));
}

#[test]
fn binds_of_named_statements_are_counted_for_show_stats_and_others_are_not() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("s1", "select 1"), parse("", "select 2")]);
    rig.client(&[bind("s1"), bind(""), bind("nope"), bind("s1")]);
    assert_eq!(rig.router.take_binds(), 2, "the client's two Binds of s1, not the unnamed or unknown one");
    assert_eq!(rig.router.take_binds(), 0, "taken once");
}

#[test]
fn a_bind_on_a_server_that_lacks_the_statement_is_preceded_by_a_parse_whose_reply_the_client_never_sees() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    rig.on = 1;
    assert_eq!(rig.client(&[bind("s1"), execute(), sync()]), strs(&["P pgmux_1", "B pgmux_1", "E", "S"]));
    assert_eq!(rig.serve(&[parsed(), bound(), done("SELECT 1"), ready(b'I')]), strs(&["2", "C", "Z"]));
    assert!(rig.server_has(1, "select 1"));
}

#[test]
fn a_bind_of_a_name_the_client_never_parsed_goes_as_it_is() {
    let mut rig = Rig::new(10);
    assert_eq!(rig.client(&[bind("nope"), sync()]), strs(&["B nope", "S"]));
    assert_eq!(
        rig.serve(&[error("26000", "prepared statement \"nope\" does not exist"), ready(b'I')]),
        strs(&["E", "Z"])
    );
}

#[test]
fn an_unnamed_bind_in_a_later_unit_on_another_server_replays_the_unnamed_parse() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("", "select 3"), sync()]);
    rig.serve(&[parsed(), ready(b'I')]);
    rig.on = 1;
    assert_eq!(rig.client(&[bind(""), execute(), sync()]), strs(&["P ", "B ", "E", "S"]));
    assert_eq!(rig.serve(&[parsed(), bound(), done("SELECT 1"), ready(b'I')]), strs(&["2", "C", "Z"]));
    // Back on the first server, whose unnamed statement is still the client's: no replay.
    rig.on = 0;
    assert_eq!(rig.client(&[bind(""), sync()]), strs(&["B ", "S"]));
}

#[test]
fn an_unnamed_statement_of_another_client_on_the_server_is_replaced() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("", "select 3"), sync()]);
    rig.serve(&[parsed(), ready(b'I')]);
    let mut other = rig.other_client();
    std::mem::swap(&mut rig.router, &mut other);
    rig.client(&[parse("", "select 4"), sync()]);
    rig.serve(&[parsed(), ready(b'I')]);
    std::mem::swap(&mut rig.router, &mut other);
    assert_eq!(rig.client(&[bind(""), sync()]), strs(&["P ", "B ", "S"]));
}

#[test]
fn a_simple_query_destroys_the_unnamed_statement_so_the_next_bind_replays_it() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("", "select 3"), sync()]);
    rig.serve(&[parsed(), ready(b'I')]);
    assert_eq!(rig.client(&[query("select 1")]), strs(&["Q"]));
    rig.serve(&[rows_described(), row(), done("SELECT 1"), ready(b'I')]);
    assert_eq!(rig.client(&[bind(""), sync()]), strs(&["P ", "B ", "S"]));
}

#[test]
fn a_large_bind_is_renamed_from_its_first_piece_with_its_declared_length_adjusted() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select length($1)");
    rig.on = 1;
    // A Bind declaring a 100,000-byte parameter, of which only the first 50 bytes are in.
    let mut body = cstr("");
    body.extend(cstr("s1"));
    body.extend_from_slice(&[0, 0, 0, 1]);
    body.extend_from_slice(&100_000u32.to_be_bytes());
    let declared = (body.len() + 100_000 + 2 + 4) as u32;
    let mut head = vec![b'B'];
    head.extend_from_slice(&declared.to_be_bytes());
    head.extend_from_slice(&body);
    head.extend_from_slice(&[b'x'; 50]);
    let server = &mut rig.servers[1];
    let mut view = ServerView {
        tracker: &mut server.tracker,
        statements: server.statements.as_mut().unwrap(),
        out: &mut server.out,
    };
    rig.router.linked_bind_head(Bytes::from(head.clone()), &mut view, &rig.registry);
    let sent = rig.servers[1].out.take_all();
    let parse_len = u32::from_be_bytes(sent[1..5].try_into().unwrap()) as usize + 1;
    assert_eq!(tokens(&sent[..parse_len]), strs(&["P pgmux_1"]), "the Parse it lacks, first");
    let bind = &sent[parse_len..];
    let renamed = u32::from_be_bytes(bind[1..5].try_into().unwrap());
    assert_eq!(renamed, declared - 3 + 8, "s1 became pgmux_1: the declared length grows by the difference");
    assert_eq!(&bind[5..15], b"\0pgmux_1\0\0");
    assert_eq!(bind.len(), head.len() - 3 + 8, "only the first piece, renamed");
}

// ---- Describe ----

#[test]
fn describe_statement_on_a_server_that_lacks_it_injects_the_parse() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    rig.on = 1;
    assert_eq!(rig.client(&[describe(b'S', "s1"), sync()]), strs(&["P pgmux_1", "DS pgmux_1", "S"]));
    assert_eq!(rig.serve(&[parsed(), params_described(), rows_described(), ready(b'I')]), strs(&["t", "T", "Z"]));
}

#[test]
fn describe_of_a_portal_goes_as_it_is() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("s1", "select 1")]);
    assert_eq!(rig.client(&[bind("s1"), describe(b'P', ""), execute(), sync()]), strs(&["B pgmux_1", "DP ", "E", "S"]));
    assert_eq!(
        rig.serve(&[parsed(), bound(), rows_described(), row(), done("SELECT 1"), ready(b'I')]),
        strs(&["1", "2", "T", "D", "C", "Z"])
    );
}

#[test]
fn describe_of_the_unnamed_statement_on_another_server_replays_its_parse() {
    let mut rig = Rig::new(10);
    rig.client(&[parse("", "select 5"), sync()]);
    rig.serve(&[parsed(), ready(b'I')]);
    rig.on = 1;
    assert_eq!(rig.client(&[describe(b'S', ""), sync()]), strs(&["P ", "DS ", "S"]));
    assert_eq!(rig.serve(&[parsed(), params_described(), msg(b'n', b""), ready(b'I')]), strs(&["t", "n", "Z"]));
}

// ---- Close, Sync, Flush ----

#[test]
fn closing_a_statement_is_answered_in_turn_and_the_server_keeps_it_for_others() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    // Another client still names the statement, as others would.
    let held = rig.registry.intern(&parse_key("select 1"));
    assert_eq!(rig.client(&[close(b'S', "s1"), sync()]), strs(&["S"]));
    assert_eq!(rig.serve(&[ready(b'I')]), strs(&["*3", "Z"]));
    assert!(!rig.named("s1") && rig.server_has(0, "select 1"));
    drop(held);
}

#[test]
fn closing_a_statement_without_a_server_needs_none() {
    let mut rig = Rig::new(10);
    prepared_once(&mut rig, "s1", "select 1");
    let Verdict::Answer(reply) = rig.router.unlinked(b'C', &close(b'S', "s1")) else { panic!("answered") };
    assert_eq!(tokens(&reply), strs(&["3"]));
    assert!(!rig.named("s1"));
}

#[test]
fn closing_a_portal_goes_to_the_server() {
    let mut rig = Rig::new(10);
    assert_eq!(rig.client(&[close(b'P', "p"), sync()]), strs(&["CP p", "S"]));
    assert_eq!(rig.serve(&[closed(), ready(b'I')]), strs(&["3", "Z"]));
}

#[test]
fn a_sync_and_a_flush_without_a_server_need_none() {
    let mut rig = Rig::new(10);
    let Verdict::Answer(reply) = rig.router.unlinked(b'S', &sync()) else { panic!("answered") };
    assert_eq!(tokens(&reply), strs(&["Z"]));
    assert_eq!(rig.router.unlinked(b'H', &flush()), Verdict::Drop);
    assert_eq!(rig.router.unlinked(b'Q', &query("select 1")), Verdict::NeedServer);
}

#[test]
fn a_flush_keeps_the_unit_open_until_its_sync() {
    let mut rig = Rig::new(10);
    assert_eq!(rig.client(&[parse("s1", "select 1"), flush()]), strs(&["P pgmux_1", "H"]));
    assert_eq!(rig.serve(&[parsed()]), strs(&["1"]));
    assert!(!rig.servers[0].tracker.may_release(), "no Sync yet");
    rig.client(&[bind("s1"), execute(), sync()]);
    rig.serve(&[bound(), done("SELECT 1"), ready(b'I')]);
    assert!(rig.servers[0].tracker.may_release());
}

// ---- Eviction ----

#[test]
fn a_full_server_closes_its_least_recently_used_statement_and_the_client_never_sees_that() {
    let mut rig = Rig::new(2);
    prepared_once(&mut rig, "a", "select 1");
    prepared_once(&mut rig, "b", "select 2");
    let sent = rig.client(&[parse("c", "select 3"), bind("c"), execute(), sync()]);
    assert_eq!(sent, strs(&["CS pgmux_1", "P pgmux_3", "B pgmux_3", "E", "S"]));
    assert_eq!(rig.serve(&[closed(), parsed(), bound(), done("SELECT 1"), ready(b'I')]), strs(&["1", "2", "C", "Z"]));
    assert!(!rig.server_has(0, "select 1") && rig.server_has(0, "select 3"));
    // The evicted statement is still the client's: used again, it is prepared again.
    assert_eq!(rig.client(&[bind("a"), sync()])[..2], strs(&["CS pgmux_2", "P pgmux_1"]));
}

#[test]
fn an_eviction_skipped_by_an_error_leaves_the_statement_where_it_was() {
    let mut rig = Rig::new(1);
    rig.client(&[parse("a", "select 1"), bind("a"), execute(), sync()]);
    // The Parse fails: nothing after it in the unit runs, so neither does anything it needed.
    rig.serve(&[error("42601", "syntax error"), ready(b'I')]);
    assert!(!rig.named("a"));
    prepared_once(&mut rig, "b", "select 2");
    // A Bind of an unknown name goes through; the eviction Close ahead of a later Parse is skipped by an
    // error in the same unit before it: the server still has the statement.
    rig.client(&[bind("nope"), parse("c", "select 3"), sync()]);
    rig.serve(&[error("26000", "nope"), ready(b'I')]);
    assert!(rig.server_has(0, "select 2"), "the Close never ran");
    assert!(!rig.named("c"));
}
