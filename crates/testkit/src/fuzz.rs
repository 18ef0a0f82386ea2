//! A small seeded mutation fuzzer for the parsers that read what anyone
//! on the network (or an agent's controller) may send: it starts from a
//! corpus of valid inputs kept in the repository, mutates them the ways
//! that break hand-written and derived decoders (bit flips, structural
//! bytes, integer and float edges, truncation, splicing, invalid UTF-8),
//! and hands every input to a check. A panic in the check fails the run
//! with the seed, the input's number and its bytes, so it replays exactly.
//! cargo-fuzz needs a nightly toolchain; this runs in the ordinary test
//! suite, bounded in count.

use rand::{Rng as _, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A seeded generator, enough to spread mutations (not crypto): ChaCha8,
/// as the traffic models use.
#[derive(Debug, Clone)]
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// A generator whose whole sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in 0..n (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.0.random_range(0..n)
        }
    }
}

/// Bytes that carry structure in JSON lines and the numbers decoders get
/// wrong, spliced in whole.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"",
    b"\\",
    b"\n",
    b"\r",
    b"\0",
    b" ",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"-0",
    b"1e309",
    b"-1e309",
    b"5e-324",
    b"NaN",
    b"Infinity",
    b"18446744073709551615",
    b"18446744073709551616",
    b"4294967296",
    b"65536",
    b"-9223372036854775809",
    b"0.5",
    b"\"\\ud800\"",
    b"\"\\u0000\"",
    b"\xff",
    b"\xc3\x28",
    b"\xe2\x82",
    b"\xf0\x9f\x92",
    b"\"type\"",
    b"\"flows\"",
    b"\"op\"",
    b"\"id\"",
    b"[[[[[[[[[[[[[[[[",
    b"]]]]]]]]]]]]]]]]",
];

/// Fills `out` with one mutation of a corpus entry (1 to 4 edits).
pub fn mutate(rng: &mut Rng, corpus: &[Vec<u8>], out: &mut Vec<u8>) {
    out.clear();
    if let Some(base) = corpus.get(rng.below(corpus.len())) {
        out.extend_from_slice(base);
    }
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next_u64() as u8;
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                let i = rng.below(len + 1);
                out.splice(i..i, t.iter().copied());
            }
            3 if len > 0 => {
                // Replace a run of digits (a number) with an edge value.
                let i = rng.below(len);
                if let Some(start) = out[i..].iter().position(u8::is_ascii_digit) {
                    let s = i + start;
                    let e = out[s..]
                        .iter()
                        .position(|b| !b.is_ascii_digit())
                        .map_or(len, |k| s + k);
                    let t = TOKENS[17 + rng.below(13)];
                    out.splice(s..e, t.iter().copied());
                }
            }
            4 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                out.drain(a..b);
            }
            5 if len > 0 => out.truncate(rng.below(len)),
            6 if len > 0 => {
                // Duplicate a slice in place (deep nesting, repeated keys).
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                let piece: Vec<u8> = out[a..b].to_vec();
                out.splice(b..b, piece);
            }
            7 => {
                // Splice the tail of another entry.
                if let Some(other) = corpus.get(rng.below(corpus.len())) {
                    let cut = rng.below(out.len() + 1);
                    let from = rng.below(other.len() + 1);
                    out.truncate(cut);
                    out.extend_from_slice(&other[from..]);
                }
            }
            _ => {
                let n = 1 + rng.below(8);
                let i = rng.below(len + 1);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                out.splice(i..i, bytes);
            }
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ran {
    /// Inputs checked (the corpus itself included).
    pub inputs: usize,
}

/// Checks every corpus entry, then `count` mutations of them drawn from
/// `seed`. Panics (failing the test) with the seed, the input's number and
/// its bytes when `check` panics on one.
pub fn run(corpus: &[Vec<u8>], seed: u64, count: usize, mut check: impl FnMut(&[u8])) -> Ran {
    let mut rng = Rng::new(seed);
    let mut buf = Vec::with_capacity(4096);
    let mut one = |i: usize, input: &[u8]| {
        if catch_unwind(AssertUnwindSafe(|| check(input))).is_err() {
            panic!(
                "fuzz: seed {seed:#x}, input {i} panicked: {:?}",
                String::from_utf8_lossy(input)
            );
        }
    };
    for (i, c) in corpus.iter().enumerate() {
        one(i, c);
    }
    for i in 0..count {
        mutate(&mut rng, corpus, &mut buf);
        one(corpus.len() + i, &buf);
    }
    Ran {
        inputs: corpus.len() + count,
    }
}

/// The non-empty lines of a corpus file, as bytes.
pub fn corpus_lines(text: &str) -> Vec<Vec<u8>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_the_inputs_and_mutations_change_them() {
        let corpus = corpus_lines("{\"type\":\"bye\"}\n{\"type\":\"start\",\"n\":12}\n");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        run(&corpus, 7, 500, |x| a.push(x.to_vec()));
        run(&corpus, 7, 500, |x| b.push(x.to_vec()));
        assert_eq!(a, b);
        let changed = a[2..].iter().filter(|x| !corpus.contains(x)).count();
        assert!(changed > 400, "{changed} of 500 mutated");
    }

    #[test]
    #[should_panic(expected = "fuzz: seed 0x3")]
    fn a_panicking_check_names_the_seed_and_input() {
        let corpus = corpus_lines("abc\n");
        run(&corpus, 3, 100, |x| assert!(!x.is_empty()));
    }
}
