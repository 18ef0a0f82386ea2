//! What the bytes after a probe's 24-byte header are (`--payload`): a
//! fixed filler pattern (the default), zeros, random bytes, or the bytes
//! of a file. The sender fills its buffers once per flow, so the content
//! costs nothing per packet; the probe header is written over the start of
//! every packet as always.

use crate::{bad, ModelError};
use rand::RngCore;
use std::sync::Arc;

/// The stream of the flow's generator ([`crate::gen::rng`]) random payloads are drawn from
/// (the schedule uses 1-3).
const PAYLOAD_STREAM: u64 = 4;

/// Largest file prefix a payload uses: no packet or TCP write is longer.
pub const MAX_PAYLOAD_FILE_BYTES: usize = 1 << 20;

/// Payload content of a flow.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Payload {
    /// A recognisable non-repeating filler, so a compressing link cannot
    /// flatter the numbers (the default).
    #[default]
    Pattern,
    /// All zeros (what a compressing link loves).
    Zeros,
    /// Pseudo-random bytes from the flow's seed.
    Random,
    /// The bytes of a file, cycled.
    File {
        /// The file as named.
        path: String,
        /// Its first [`MAX_PAYLOAD_FILE_BYTES`] bytes (never empty).
        bytes: Arc<[u8]>,
    },
}

impl Payload {
    /// `zeros`, `random`, `pattern` or `file:PATH` (`--payload`); the file is
    /// read here, bounded like every input file.
    pub fn parse(flag: &str, s: &str) -> Result<Payload, ModelError> {
        match s {
            "pattern" => Ok(Payload::Pattern),
            "zeros" => Ok(Payload::Zeros),
            "random" => Ok(Payload::Random),
            _ => match s.strip_prefix("file:") {
                Some(path) if !path.is_empty() => {
                    let mut bytes = wirebench_input::read_bytes(std::path::Path::new(path))
                        .map_err(|e| bad(flag, e.to_string()))?;
                    if bytes.is_empty() {
                        return Err(bad(flag, format!("{path}: empty file")));
                    }
                    bytes.truncate(MAX_PAYLOAD_FILE_BYTES);
                    Ok(Payload::File {
                        path: path.to_string(),
                        bytes: bytes.into(),
                    })
                }
                _ => Err(bad(
                    flag,
                    format!("expected zeros, random, pattern or file:PATH, got {s:?}"),
                )),
            },
        }
    }

    /// Its name in the result document (`file:PATH` for a file).
    pub fn label(&self) -> String {
        match self {
            Payload::Pattern => "pattern".into(),
            Payload::Zeros => "zeros".into(),
            Payload::Random => "random".into(),
            Payload::File { path, .. } => format!("file:{path}"),
        }
    }

    /// Fills `buf` with the content: byte i is the content's byte i (files
    /// cycled), so every packet's payload starts with the same bytes.
    pub fn fill(&self, buf: &mut [u8], seed: u64) {
        match self {
            Payload::Pattern => {
                for (i, x) in buf.iter_mut().enumerate() {
                    *x = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
                }
            }
            Payload::Zeros => buf.fill(0),
            Payload::Random => {
                // Its own stream of the flow's generator, so the content
                // does not move the schedule's draws.
                crate::gen::rng(seed, PAYLOAD_STREAM).fill_bytes(buf);
            }
            Payload::File { bytes, .. } => {
                for (x, b) in buf.iter_mut().zip(bytes.iter().cycle()) {
                    *x = *b;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents() {
        let mut b = [1u8; 20];
        Payload::Zeros.fill(&mut b, 1);
        assert_eq!(b, [0; 20]);
        Payload::Random.fill(&mut b, 1);
        let r1 = b;
        assert!(r1.iter().filter(|&&x| x == 0).count() < 5);
        Payload::Random.fill(&mut b, 2);
        assert_ne!(r1, b);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p");
        std::fs::write(&f, b"abc").unwrap();
        let p = Payload::parse("--payload", &format!("file:{}", f.display())).unwrap();
        p.fill(&mut b[..7], 0);
        assert_eq!(&b[..7], b"abcabca");
        assert_eq!(p.label(), format!("file:{}", f.display()));
        std::fs::write(&f, b"").unwrap();
        let e = Payload::parse("--payload", &format!("file:{}", f.display())).unwrap_err();
        assert!(e.to_string().starts_with("--payload:") && e.to_string().contains("empty"));
        let e = Payload::parse("--payload", "file:/dev/zero").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(Payload::parse("--payload", "ones").is_err());
    }
}
