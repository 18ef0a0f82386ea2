//! TCP record framing on the reading side: a stream carries probe records
//! back to back, each `len` bytes starting with the probe header. One
//! reader serves the receiver (data records) and the sender's RTT
//! collector (reflection records), so both frame a stream the same way.

use crate::clock::realtime_ns;
use std::io::{ErrorKind, Read};
use wirebench_wire::{ProbeHeader, PROBE_HEADER_LEN};

/// A stream's read buffer and how much of it holds unparsed bytes.
pub(crate) struct RecordReader {
    buf: Vec<u8>,
    filled: usize,
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
    /// A reader whose buffer holds `cap` bytes; records longer than that
    /// cannot be framed and end the stream (see [`RecordReader::drain`]).
    pub fn new(cap: usize) -> Self {
        RecordReader {
            buf: vec![0u8; cap],
            filled: 0,
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

    /// Hands every complete record to `each` (its header and its bytes) and
    /// keeps an incomplete tail for the next read. `accept` sees each
    /// header as soon as it has arrived; a header that does not decode, that
    /// `accept` refuses, or whose record cannot fit the buffer means the
    /// stream is not ours or has lost its framing: returns false and the
    /// caller drops the stream.
    pub fn drain(
        &mut self,
        accept: impl Fn(&ProbeHeader) -> bool,
        mut each: impl FnMut(&ProbeHeader, &[u8]),
    ) -> bool {
        let mut pos = 0;
        let mut ok = true;
        while self.filled - pos >= PROBE_HEADER_LEN {
            let h = match ProbeHeader::decode_prefix(&self.buf[pos..self.filled]) {
                Ok(h) if accept(&h) && (h.len as usize) <= self.buf.len() => h,
                _ => {
                    ok = false;
                    break;
                }
            };
            let len = h.len as usize;
            if self.filled - pos < len {
                break;
            }
            each(&h, &self.buf[pos..pos + len]);
            pos += len;
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
            len: len as u16,
            seq,
            tx_ns: 1,
        }
        .encode(&mut b)
        .unwrap();
        b
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
            assert!(rd.drain(|h| h.flow == 1, |h, b| seen.push((h.seq, b.len()))));
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
        assert!(!rd.drain(|h| h.flow == 1, |_, _| panic!("not ours")));
        // A record longer than the buffer can never complete.
        let mut rd = RecordReader::new(64);
        let mut src: &[u8] = &record(1, 0, 100)[..64];
        rd.fill(&mut src);
        assert!(!rd.drain(|_| true, |_, _| panic!("cannot fit")));
        let mut rd = RecordReader::new(64);
        let mut src: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        rd.fill(&mut src);
        assert!(!rd.drain(|_| true, |_, _| {}));
    }
}
