//! Bytes on the wire for tests that build protocol messages by hand, and a small seeded generator for tests
//! that shake parsers and peers with random input (seeded, so a failure names the case that reproduces it).

/// A protocol message: `tag`, a length that counts itself, then `body`.
pub fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A NUL-terminated string, as the protocol writes names and SQL.
pub fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// xorshift64*: small, seeded, good enough to shake a parser. Not for anything that needs real randomness.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_counts_its_own_length_and_the_generator_repeats_per_seed() {
        assert_eq!(msg(b'S', b""), b"S\0\0\0\x04");
        assert_eq!(msg(b'Q', &cstr("x")), b"Q\0\0\0\x06x\0");
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.bytes(16), b.bytes(16));
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
        assert!((0..1000).all(|_| a.below(10) < 10));
    }
}
