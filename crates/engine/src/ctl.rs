//! The control connection: JSON lines over TCP with a bounded line length
//! and read deadlines, so that neither side can be hung by a silent or
//! hostile peer.

use crate::EngineError;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use wirebench_wire::control::{MAX_CONTROL_LINE, REPORT_PREFIX};
use wirebench_wire::ControlMsg;

/// One control connection: JSON lines, each at most a set length, read
/// with deadlines.
pub struct Ctl {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
    limit: usize,
}

/// Line limit the sender accepts for the receiver's `Report`: a long run
/// with a fine `--interval` carries a long series (60 000 intervals are
/// about 7 MB of JSON; a session's whole budget of 2^18 about 32 MB), but
/// a hostile receiver must not make the sender buffer without bound.
pub const REPORT_LINE_LIMIT: usize = 64 << 20;

/// Longest error text from the peer that is passed on: a hostile receiver
/// must not have megabytes printed verbatim.
pub const MAX_REMOTE_ERROR: usize = 512;

/// The peer's error text made safe to print: at most [`MAX_REMOTE_ERROR`]
/// bytes (cut at a character boundary, marked), control characters
/// (terminal escapes, newlines) replaced.
pub fn sanitize_remote(msg: &str) -> String {
    let mut end = msg.len().min(MAX_REMOTE_ERROR);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = msg[..end]
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if end < msg.len() {
        out.push_str(&format!(" [… {} more bytes]", msg.len() - end));
    }
    out
}

/// One control line as a reader that ends after its newline: serves the
/// bytes [`Ctl`] holds, then reads more from the connection one chunk at a
/// time (at most [`Ctl::set_limit`] bytes in all, by the deadline), and
/// leaves whatever follows the newline buffered for the next message.
struct LineRead<'a> {
    ctl: &'a mut Ctl,
    deadline: Instant,
    /// Bytes of `ctl.buf` already served.
    pos: usize,
    /// Bytes of the line served in all.
    taken: usize,
    /// The newline was served: the line is complete.
    done: bool,
    /// Why reading stopped short, told to the caller instead of the
    /// parser's "unexpected end".
    failed: Option<EngineError>,
}

impl LineRead<'_> {
    /// Ends the line early with `e` (the reader then reports its end).
    fn fail(&mut self, e: EngineError) -> std::io::Result<usize> {
        self.failed = Some(e);
        Ok(0)
    }
}

impl Read for LineRead<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.done || self.failed.is_some() || out.is_empty() {
            return Ok(0);
        }
        while self.pos == self.ctl.buf.len() {
            // Everything held was served: drop it before reading more, so
            // the buffer never holds more than one read.
            self.ctl.buf.clear();
            self.ctl.scanned = 0;
            self.pos = 0;
            let now = Instant::now();
            if now >= self.deadline {
                return self.fail(EngineError::PeerGone(
                    "report line not complete before the deadline".into(),
                ));
            }
            match self.ctl.read_chunk(self.deadline - now) {
                Ok(0) => {
                    return self.fail(EngineError::PeerGone(
                        "peer closed the control connection inside the report".into(),
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => {
                    return self.fail(EngineError::PeerGone(format!("control read failed: {e}")))
                }
            }
        }
        let held = &self.ctl.buf[self.pos..];
        let mut n = held.len().min(out.len());
        if let Some(nl) = held[..n].iter().position(|&b| b == b'\n') {
            n = nl + 1;
            self.done = true;
        }
        if self.taken + n > self.ctl.limit {
            return self.fail(EngineError::Protocol(format!(
                "control line longer than {} bytes",
                self.ctl.limit
            )));
        }
        out[..n].copy_from_slice(&held[..n]);
        self.pos += n;
        self.taken += n;
        if self.done {
            // What follows the line stays for the next message.
            self.ctl.buf.drain(..self.pos);
            self.ctl.scanned = 0;
        }
        Ok(n)
    }
}

/// What a read with a deadline produced.
pub enum Recv {
    /// A whole message.
    Msg(ControlMsg),
    /// Nothing complete arrived before the deadline.
    Timeout,
    /// The peer closed the connection.
    Closed,
}

impl Ctl {
    /// A control connection on `stream`.
    pub fn new(stream: TcpStream) -> Self {
        let _ = stream.set_nodelay(true);
        Ctl {
            stream,
            buf: Vec::with_capacity(4096),
            scanned: 0,
            limit: MAX_CONTROL_LINE,
        }
    }

    /// Accept lines up to `limit` bytes (default: the wire's 4 MiB).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// The connection's socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Writes one message as [`ControlMsg::to_line`] spells it, streamed
    /// through a buffer: a report of thousands of flows is megabytes of
    /// JSON, which as one string added some 4 KiB per flow to the
    /// receiver's peak memory.
    pub fn send(&mut self, msg: &ControlMsg) -> Result<(), EngineError> {
        let mut w = std::io::BufWriter::with_capacity(64 << 10, &self.stream);
        serde_json::to_writer(&mut w, msg)
            .map_err(std::io::Error::from)
            .and_then(|()| w.write_all(b"\n"))
            .and_then(|()| w.flush())
            .map_err(|e| EngineError::PeerGone(format!("control write failed: {e}")))
    }

    /// Writes a `Report` line flow by flow as `flows` yields them (see
    /// [`wirebench_wire::control::write_report`]): a receiver never holds
    /// every flow's report at once.
    pub fn send_report(
        &mut self,
        flows: impl IntoIterator<Item = wirebench_schema::result::FlowReport>,
        extra: &wirebench_schema::result::ReportExtra,
    ) -> Result<(), EngineError> {
        let mut w = std::io::BufWriter::with_capacity(64 << 10, &self.stream);
        wirebench_wire::control::write_report(&mut w, flows, extra)
            .and_then(|()| w.flush())
            .map_err(|e| EngineError::PeerGone(format!("control write failed: {e}")))
    }

    /// Reads one message, waiting at most `timeout`. Malformed lines are an
    /// error (the caller decides whether that is foreign traffic).
    pub fn recv(&mut self, timeout: Duration) -> Result<Recv, EngineError> {
        let deadline = Instant::now() + timeout;
        loop {
            // Every report goes the streaming way, short ones too: one
            // parser for them all (a second copy of the report's parsing
            // code, once run, is some 100 KiB more of the binary resident).
            if self.limit > MAX_CONTROL_LINE && self.buf.starts_with(REPORT_PREFIX.as_bytes()) {
                return self.stream_report(deadline);
            }
            let found = self.buf[self.scanned..]
                .iter()
                .position(|&b| b == b'\n')
                .map(|p| p + self.scanned);
            self.scanned = self.buf.len();
            if let Some(pos) = found {
                // The line is counted whole against the limit, however it
                // arrived: a line and its newline in one read used to be
                // parsed at any length.
                if pos > self.limit {
                    return Err(EngineError::Protocol(format!(
                        "control line longer than {} bytes",
                        self.limit
                    )));
                }
                // Parsed where it lies (a report line can be megabytes),
                // then dropped from the buffer.
                let text = String::from_utf8_lossy(&self.buf[..=pos]);
                let parsed = if text.trim().is_empty() {
                    None
                } else if text.len() <= MAX_CONTROL_LINE {
                    Some(ControlMsg::from_line(&text).map_err(|e| e.to_string()))
                } else {
                    Some(ControlMsg::parse(text.trim_end()).map_err(|e| e.to_string()))
                };
                self.buf.drain(..=pos);
                self.scanned = 0;
                let Some(parsed) = parsed else { continue };
                return parsed
                    .map(Recv::Msg)
                    .map_err(|e| EngineError::Protocol(format!("malformed control message: {e}")));
            }
            if self.buf.len() > self.limit {
                return Err(EngineError::Protocol(format!(
                    "control line longer than {} bytes",
                    self.limit
                )));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Recv::Timeout);
            }
            match self.read_chunk(deadline - now) {
                Ok(0) => return Ok(Recv::Closed),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(Recv::Timeout)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                    ) {
                        return Ok(Recv::Closed);
                    }
                    return Err(EngineError::PeerGone(format!("control read failed: {e}")));
                }
            }
        }
    }

    /// Appends what one read of at most 16 KiB brings, waiting at most
    /// `wait`; returns its length (0: the peer closed).
    fn read_chunk(&mut self, wait: Duration) -> std::io::Result<usize> {
        let _ = self
            .stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        let mut chunk = [0u8; 16384];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Parses a report line (the buffer starts with its first bytes, maybe
    /// all of them) while it arrives, holding at most one read of it at a
    /// time, instead of buffering the whole line first (see
    /// [`ControlMsg::read_report`]).
    /// Past its first bytes the line is committed: running out of time, a
    /// closed connection or a malformed line end the session as an error.
    fn stream_report(&mut self, deadline: Instant) -> Result<Recv, EngineError> {
        let mut line = LineRead {
            ctl: self,
            deadline,
            pos: 0,
            taken: 0,
            done: false,
            failed: None,
        };
        // serde_json reads a byte at a time: from a small buffer, that is
        // a load, not a call into the line's checks. The line reader stops
        // at the newline, so nothing of the next message is taken in.
        let parsed = ControlMsg::read_report(std::io::BufReader::with_capacity(8192, &mut line));
        let (failed, done) = (line.failed.take(), line.done);
        match (parsed, failed) {
            (_, Some(e)) => Err(e),
            (Ok(m), None) if done => Ok(Recv::Msg(m)),
            (Ok(_), None) => Err(EngineError::Protocol(
                "malformed control message: report line does not end after the report".into(),
            )),
            (Err(e), None) => Err(EngineError::Protocol(format!(
                "malformed control message: {e}"
            ))),
        }
    }

    /// Reads until a message arrives; a timeout or close is an error naming
    /// what was awaited.
    pub fn expect(&mut self, what: &str, timeout: Duration) -> Result<ControlMsg, EngineError> {
        match self.recv(timeout)? {
            Recv::Msg(ControlMsg::Error { message }) => {
                Err(EngineError::Remote(sanitize_remote(&message)))
            }
            Recv::Msg(m) => Ok(m),
            Recv::Timeout => Err(EngineError::PeerGone(format!(
                "no {what} from the peer within {:.1} s",
                timeout.as_secs_f64()
            ))),
            Recv::Closed => Err(EngineError::PeerGone(format!(
                "peer closed the control connection while waiting for {what}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (Ctl, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (Ctl::new(a), b)
    }

    #[test]
    fn long_report_needs_the_raised_limit() {
        let big = ControlMsg::Report {
            flows: vec![],
            extra: wirebench_schema::result::ReportExtra {
                host: wirebench_schema::result::HostInfo {
                    kernel: "y".repeat(6 << 20),
                    ..Default::default()
                },
                ..Default::default()
            },
        }
        .to_line();
        // Default limit, raised but still short of the line (refused while
        // the report streams in), raised enough.
        for (limit, raised) in [
            (None, false),
            (Some(5 << 20), false),
            (Some(REPORT_LINE_LIMIT), true),
        ] {
            let (mut ctl, mut peer) = pair();
            if let Some(limit) = limit {
                ctl.set_limit(limit);
            }
            let line = big.clone();
            let w = std::thread::spawn(move || {
                let _ = peer.write_all(line.as_bytes());
            });
            let r = ctl.recv(Duration::from_secs(20));
            // Close our end first: the writer may still be blocked on a
            // line we refused to read to the end.
            drop(ctl);
            w.join().unwrap();
            match (raised, r) {
                (true, Ok(Recv::Msg(ControlMsg::Report { extra, .. }))) => {
                    assert_eq!(extra.host.kernel.len(), 6 << 20)
                }
                (false, Err(EngineError::Protocol(m))) => assert!(m.contains("longer")),
                (_, other) => panic!("raised={raised}: {:?}", other.is_ok()),
            }
        }
    }

    #[test]
    fn a_line_counts_against_the_limit_however_it_arrives() {
        // `limit` bytes before the newline pass, one more is refused, even
        // when the whole line sits in one read.
        let msg = ControlMsg::Bye.to_line();
        let body = msg.trim_end();
        for (pad, ok) in [(0usize, true), (1, false)] {
            let (mut ctl, mut peer) = pair();
            let limit = 64;
            ctl.set_limit(limit);
            let line = format!("{body}{}\n", " ".repeat(limit - body.len() + pad));
            peer.write_all(line.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            match (ok, ctl.recv(Duration::from_secs(5))) {
                (true, Ok(Recv::Msg(ControlMsg::Bye))) => {}
                (false, Err(EngineError::Protocol(m))) => assert!(m.contains("longer than 64")),
                (_, other) => panic!("pad {pad}: ok={}", other.is_ok()),
            }
        }
    }

    /// A report of many flows is parsed while it arrives: the line is never
    /// held whole, and what follows it on the connection is kept.
    #[test]
    fn report_is_read_without_holding_the_line() {
        let mut summary = wirebench_stats::RecvSummary::default();
        summary.counts.unique = 5;
        summary.delay_hist = Some(wirebench_stats::Histogram {
            bits: 7,
            buckets_ns: (0..256).map(|i| (1000 + 9 * i, 3)).collect(),
        });
        let flows: Vec<_> = (1..=400)
            .map(|i| wirebench_schema::result::FlowReport {
                flow_id: i,
                summary: summary.clone(),
                ..Default::default()
            })
            .collect();
        let report = ControlMsg::Report {
            flows,
            extra: Default::default(),
        };
        let line = report.to_line();
        assert!(line.len() > 1 << 20, "{}", line.len());
        let (mut ctl, mut peer) = pair();
        ctl.set_limit(REPORT_LINE_LIMIT);
        let (bytes, bye) = (line.clone(), ControlMsg::Bye.to_line());
        let w = std::thread::spawn(move || {
            // In pieces, the next message right behind the report.
            for piece in bytes.as_bytes().chunks(100_000) {
                peer.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            peer.write_all(bye.as_bytes()).unwrap();
            peer
        });
        let got = ctl.recv(Duration::from_secs(20)).unwrap();
        assert!(matches!(&got, Recv::Msg(m) if *m == report));
        assert!(
            ctl.buf.capacity() <= 64 << 10,
            "line buffer grew to {} bytes",
            ctl.buf.capacity()
        );
        assert!(matches!(
            ctl.recv(Duration::from_secs(5)).unwrap(),
            Recv::Msg(ControlMsg::Bye)
        ));
        // Cut short: an error, not a timeout to wait through again.
        let mut peer = w.join().unwrap();
        peer.write_all(&line.as_bytes()[..line.len() / 2]).unwrap();
        drop(peer);
        assert!(matches!(
            ctl.recv(Duration::from_secs(5)),
            Err(EngineError::PeerGone(m)) if m.contains("inside the report")
        ));
    }

    #[test]
    fn lines_split_across_reads_and_garbage() {
        let (mut ctl, mut peer) = pair();
        let l = ControlMsg::Start.to_line();
        peer.write_all(&l.as_bytes()[..5]).unwrap();
        assert!(matches!(
            ctl.recv(Duration::from_millis(50)).unwrap(),
            Recv::Timeout
        ));
        peer.write_all(&l.as_bytes()[5..]).unwrap();
        peer.write_all(b"\n{not json}\n").unwrap();
        assert!(matches!(
            ctl.recv(Duration::from_secs(1)).unwrap(),
            Recv::Msg(ControlMsg::Start)
        ));
        assert!(ctl.recv(Duration::from_secs(1)).is_err());
        drop(peer);
        assert!(matches!(
            ctl.recv(Duration::from_secs(1)).unwrap(),
            Recv::Closed
        ));
    }
}
