//! TCP record framing on the reading side: a stream carries probe records
//! back to back, each `len` bytes starting with the probe header. One
//! reader serves the receiver (data records) and the sender's RTT
//! collector (reflection records), so both frame a stream the same way.

use crate::clock::realtime_ns;
use std::io::{ErrorKind, Read};
use wirebench_wire::{ProbeHeader, LONG_HEADER_LEN, PROBE_HEADER_LEN};

/// A stream's read buffer and how much of it holds unparsed bytes.
pub(crate) struct RecordReader {
    buf: Vec<u8>,
    filled: usize,
    /// Whether a record may be read past rather than held whole.
    stream: bool,
    /// The record being read past: only its first bytes are kept.
    part: Option<Part>,
}

/// A record whose header has arrived but not all of its bytes (a
/// streaming reader's): the receiver needs its header and its length,
/// not the filler, so a 16 MiB record costs no 16 MiB buffer and no
/// bytes are moved to make room for it.
struct Part {
    h: ProbeHeader,
    /// The header (and a long record's length).
    head: [u8; LONG_HEADER_LEN],
    head_len: usize,
    len: usize,
    /// Bytes still to come.
    left: usize,
}

/// What one read produced.
pub(crate) enum Fill {
    /// Bytes arrived; CLOCK_REALTIME of the read that completed them.
    Data(u64),
    /// Nothing to read now (non-blocking) or the read timed out.
    Again,
    /// The peer closed the stream, or it failed.
    Closed,
}

impl RecordReader {
    /// A reader whose buffer holds `cap` bytes and which hands over whole
    /// records; records longer than that cannot be framed and end the
    /// stream (see [`RecordReader::drain`]).
    pub fn new(cap: usize) -> Self {
        RecordReader {
            buf: vec![0u8; cap],
            filled: 0,
            stream: false,
            part: None,
        }
    }

    /// A reader that reads past a record's bytes once its header is in
    /// and hands over only the header (for when nothing checks the rest,
    /// i.e. no probe MAC): records of any length up to
    /// [`wirebench_wire::MAX_TCP_RECORD`].
    pub fn streaming(cap: usize) -> Self {
        RecordReader {
            stream: true,
            ..RecordReader::new(cap)
        }
    }

    /// One read from `src` into the free part of the buffer (retried on
    /// EINTR).
    pub fn fill(&mut self, src: &mut impl Read) -> Fill {
        loop {
            return match src.read(&mut self.buf[self.filled..]) {
                Ok(0) => Fill::Closed,
                Ok(n) => {
                    self.filled += n;
                    Fill::Data(realtime_ns())
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    Fill::Again
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => Fill::Closed,
            };
        }
    }

    /// Hands every complete record to `each` (its header, its bytes, its
    /// length) and keeps an incomplete tail for the next read; a streaming
    /// reader keeps only an incomplete record's header, and its bytes are
    /// then the header alone (and a long record's length). `accept` sees
    /// each header as soon as it has arrived; a header that does not
    /// decode, that `accept` refuses, or whose record cannot fit the
    /// buffer of a whole-record reader means the stream is not ours or has
    /// lost its framing: returns false and the caller drops the stream.
    pub fn drain(
        &mut self,
        accept: impl Fn(&ProbeHeader) -> bool,
        mut each: impl FnMut(&ProbeHeader, &[u8], usize),
    ) -> bool {
        let mut pos = 0;
        if let Some(p) = &mut self.part {
            pos = p.left.min(self.filled);
            p.left -= pos;
            if p.left > 0 {
                self.filled = 0;
                return true;
            }
            if let Some(p) = self.part.take() {
                each(&p.h, &p.head[..p.head_len], p.len);
            }
        }
        let mut ok = true;
        while self.filled - pos >= PROBE_HEADER_LEN {
            let rest = &self.buf[pos..self.filled];
            let h = match ProbeHeader::decode_prefix(rest) {
                Ok(h) if accept(&h) => h,
                _ => {
                    ok = false;
                    break;
                }
            };
            let len = match h.record_len(rest) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(_) => {
                    ok = false;
                    break;
                }
            };
            if rest.len() >= len {
                each(&h, &rest[..len], len);
                pos += len;
                continue;
            }
            if self.stream {
                let head_len = if len > usize::from(u16::MAX) {
                    LONG_HEADER_LEN
                } else {
                    PROBE_HEADER_LEN
                };
                let mut head = [0u8; LONG_HEADER_LEN];
                head[..head_len].copy_from_slice(&rest[..head_len]);
                self.part = Some(Part {
                    h,
                    head,
                    head_len,
                    len,
                    left: len - rest.len(),
                });
                pos = self.filled;
            } else if len > self.buf.len() {
                ok = false;
            }
            break;
        }
        self.buf.copy_within(pos..self.filled, 0);
        self.filled -= pos;
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(flow: u16, seq: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        ProbeHeader {
            flags: 0,
            session: 7,
            flow,
            len: 0,
            seq,
            tx_ns: 1,
        }
        .encode_record(&mut b)
        .unwrap();
        b
    }

    /// A streaming reader with a 4 KiB buffer frames records of 24 B to
    /// 16 MiB, split anywhere (here: in 1000-byte reads, and one read
    /// ending inside a long record's length field), handing over each
    /// record's header and its length once its last byte is in; a forged
    /// long length ends the stream.
    #[test]
    fn a_streaming_reader_frames_records_longer_than_its_buffer() {
        let sizes = [24usize, 70_000, 100, 65_535, 65_536, 16 << 20, 5_000, 24];
        let mut stream = Vec::new();
        for (seq, &len) in sizes.iter().enumerate() {
            stream.extend(record(1, seq as u32, len));
        }
        let mut rd = RecordReader::streaming(4096);
        let mut seen = Vec::new();
        let mut pieces: Vec<&[u8]> = vec![&stream[..24 + 70_000 + 26], &stream[24 + 70_000 + 26..]];
        let rest = pieces.pop().unwrap();
        pieces.extend(rest.chunks(1000));
        // Bytes of the stream read so far, when each record was handed over.
        let mut fed = 0;
        for piece in pieces {
            let mut src = piece;
            while !src.is_empty() {
                let before = src.len();
                assert!(matches!(rd.fill(&mut src), Fill::Data(_)));
                fed += before - src.len();
                assert!(rd.drain(
                    |h| h.flow == 1,
                    |h, b, n| {
                        assert_eq!(ProbeHeader::decode_prefix(b).unwrap(), *h);
                        seen.push((h.seq, n, fed))
                    }
                ));
            }
        }
        let lens: Vec<usize> = seen.iter().map(|s| s.1).collect();
        assert_eq!(lens, sizes);
        // Each record was handed over by the read that brought its last byte.
        let mut end = 0;
        for (k, &(seq, n, at)) in seen.iter().enumerate() {
            end += n;
            assert_eq!(seq, k as u32);
            assert!(end <= at && at < end + 4096, "{k}: {at} {end}");
        }
        let mut bad = record(1, 0, 70_000);
        bad[24..28].copy_from_slice(&(1u32 << 30).to_be_bytes());
        let mut rd = RecordReader::streaming(4096);
        let mut src: &[u8] = &bad[..4096];
        rd.fill(&mut src);
        assert!(!rd.drain(|_| true, |_, _, _| panic!("forged length")));
    }

    #[test]
    fn records_split_across_reads_are_framed() {
        let mut stream = Vec::new();
        for (seq, len) in [(0u32, 24usize), (1, 100), (2, 30)] {
            stream.extend(record(1, seq, len));
        }
        let mut rd = RecordReader::new(256);
        let mut seen = Vec::new();
        // Deliver in awkward pieces: 10, 50, the rest.
        for piece in [&stream[..10], &stream[10..60], &stream[60..]] {
            let mut src = piece;
            assert!(matches!(rd.fill(&mut src), Fill::Data(_)));
            assert!(rd.drain(
                |h| h.flow == 1,
                |h, b, n| {
                    assert_eq!(b.len(), n);
                    seen.push((h.seq, n))
                }
            ));
        }
        assert_eq!(seen, vec![(0, 24), (1, 100), (2, 30)]);
        let mut empty: &[u8] = &[];
        assert!(matches!(rd.fill(&mut empty), Fill::Closed));
    }

    #[test]
    fn foreign_or_oversized_records_end_the_stream() {
        let mut rd = RecordReader::new(256);
        let mut src: &[u8] = &record(2, 0, 24);
        rd.fill(&mut src);
        assert!(!rd.drain(|h| h.flow == 1, |_, _, _| panic!("not ours")));
        // A record longer than the buffer can never complete.
        let mut rd = RecordReader::new(64);
        let mut src: &[u8] = &record(1, 0, 100)[..64];
        rd.fill(&mut src);
        assert!(!rd.drain(|_| true, |_, _, _| panic!("cannot fit")));
        let mut rd = RecordReader::new(64);
        let mut src: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        rd.fill(&mut src);
        assert!(!rd.drain(|_| true, |_, _, _| {}));
    }
}
