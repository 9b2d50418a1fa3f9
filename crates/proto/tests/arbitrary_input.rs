//! Nothing a peer sends may panic the codec: every parser and the framer get random bytes and, more to the
//! point, valid messages with random damage (bytes flipped, cut short, lengths rewritten, pieces spliced),
//! which reach the deeper branches that pure noise never gets past. Errors are fine; panics fail the test.
//! The generator is seeded, so a failure names the case that reproduces it.

use pgmux_proto::auth::scram::{ScramClient, ScramSecret, ScramServer};
use pgmux_proto::{Framer, Sender, Step, backend, frontend};
use pgmux_testkit::wire::{Rng, msg};

/// Valid messages of both directions, and start-up packets, to damage.
fn seeds() -> Vec<Vec<u8>> {
    let mut startup = Vec::new();
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    for s in ["user", "app", "database", "db", "options", "-c search_path=x", "_pq_.opt", "1", ""] {
        startup.extend_from_slice(s.as_bytes());
        startup.push(0);
    }
    let mut startup_packet = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
    startup_packet.extend_from_slice(&startup);
    let mut cancel = 16u32.to_be_bytes().to_vec();
    cancel.extend_from_slice(&80_877_102u32.to_be_bytes());
    cancel.extend_from_slice(&[0, 0, 0, 7, 1, 2, 3, 4]);
    let bind = {
        let mut b = b"portal\0stmt\0".to_vec();
        b.extend_from_slice(&[0, 1, 0, 1, 0, 2, 0, 0, 0, 2, b'4', b'2', 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 0]);
        b
    };
    vec![
        startup_packet,
        cancel,
        vec![0, 0, 0, 8, 4, 210, 22, 47],
        msg(b'Q', b"select 1; begin\0"),
        msg(b'P', b"s1\0select $1::int\0\0\x01\0\0\0\x17"),
        msg(b'B', &bind),
        msg(b'D', b"Ps1\0"),
        msg(b'C', b"Sstmt\0"),
        msg(b'E', b"portal\0\0\0\0\x05"),
        msg(b'S', b""),
        msg(b'p', b"SCRAM-SHA-256\0\0\0\0\x20n,,n=,r=abcdefghijklmnopqrstuvwx"),
        msg(b'R', &[0, 0, 0, 10, b'S', b'C', b'R', b'A', b'M', b'-', b'S', b'H', b'A', b'-', b'2', b'5', b'6', 0, 0]),
        msg(b'R', &[0, 0, 0, 5, 1, 2, 3, 4]),
        msg(b'R', b"\0\0\0\x0br=abc,s=c2FsdA==,i=4096"),
        msg(b'S', b"TimeZone\0UTC\0"),
        msg(b'K', &[0, 0, 4, 210, 0, 0, 0, 7]),
        msg(b'Z', b"I"),
        msg(b'E', b"SERROR\0VERROR\0C42P01\0Mrelation does not exist\0\0"),
        msg(b'D', &[0, 2, 0, 0, 0, 1, b'1', 0xff, 0xff, 0xff, 0xff]),
        msg(b'C', b"SELECT 1\0"),
        msg(b'd', &[7; 40]),
        msg(b'G', &[0, 0, 1, 0, 0]),
    ]
}

fn damage(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut out = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(3) {
        match rng.below(7) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next_u64() as u8;
            }
            1 => out.truncate(rng.below(out.len() + 1)),
            2 if out.len() >= 5 => {
                // Rewrite a length field to something small, huge or off by a little.
                let at = if rng.below(2) == 0 { 0 } else { 1 };
                let len = match rng.below(4) {
                    0 => rng.below(8) as u32,
                    1 => u32::MAX - rng.below(4) as u32,
                    2 => 0x4000_0000,
                    _ => (out.len() as u32).wrapping_add(rng.below(5) as u32).wrapping_sub(2),
                };
                out[at..at + 4].copy_from_slice(&len.to_be_bytes());
            }
            3 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(other.len() + 1);
                out.extend_from_slice(&other[cut..]);
            }
            4 => {
                let n = rng.below(16);
                let extra = rng.bytes(n);
                out.extend_from_slice(&extra);
            }
            5 if !out.is_empty() => {
                // Strip the zero terminators that parsers look for.
                out.retain(|b| *b != 0 || rng.below(3) != 0);
            }
            _ => {
                let n = rng.below(64);
                out = rng.bytes(n);
            }
        }
    }
    out
}

/// Every parser over `input`, and over its body when it is framed as a message.
fn parse_everything(input: &[u8], secret: &ScramSecret) {
    let _ = frontend::split_startup(input);
    for sender in [Sender::Frontend, Sender::Backend] {
        let mut framer = Framer::new(sender);
        let mut at = 0;
        // Every step consumes what it names; the loop ends at an error or when more bytes are wanted.
        for _ in 0..10_000 {
            match framer.step(&input[at..]) {
                Ok(Step::Message { len, .. }) => {
                    assert!(len <= input.len() - at, "a message longer than the buffer");
                    at += len;
                }
                Ok(Step::Stream { take, .. }) => {
                    assert!(take > 0 && take <= input.len() - at, "a stream piece outside the buffer");
                    at += take;
                }
                Ok(Step::NeedMore { .. }) | Err(_) => break,
            }
        }
    }
    let body = input.get(5..).unwrap_or_default();
    for b in [input, body] {
        let _ = frontend::sasl_initial_response(b);
        let _ = frontend::password(b);
        let _ = frontend::describe_or_close(b);
        let _ = frontend::parse_name(b);
        let _ = frontend::parse_query(b);
        let _ = frontend::bind_names(b);
        let _ = frontend::query(b);
        let _ = frontend::parse_query_bytes(b);
        let _ = backend::ready_for_query(b);
        let _ = backend::ErrorFields::parse(b);
        let _ = backend::parameter_status(b);
        let _ = backend::backend_key_data(b);
        let _ = backend::auth_request(b);
        let _ = backend::data_row(b);
        let _ = backend::row_description(b);
        let _ = backend::command_tag(b);
        let mut server = ScramServer::new(secret.clone());
        if server.client_first(b).is_ok() {
            let _ = server.client_final(b);
        }
        let mut client = ScramClient::new("pw");
        if client.server_first(b).is_ok() {
            let _ = client.server_final(b);
        }
    }
}

#[test]
fn damaged_and_random_input_never_panics() {
    let seeds = seeds();
    let secret = ScramSecret::from_password("pw", b"salt", 1);
    // Valid inputs first: the harness must accept them without complaint.
    for seed in &seeds {
        parse_everything(seed, &secret);
    }
    let mut rng = Rng::new(1); // the state 0x9E37_79B9_7F4A_7C15
    for case in 0..30_000 {
        let input = damage(&mut rng, &seeds);
        let caught = std::panic::catch_unwind(|| parse_everything(&input, &secret));
        assert!(caught.is_ok(), "case {case} panicked on input {input:02x?}");
    }
}
