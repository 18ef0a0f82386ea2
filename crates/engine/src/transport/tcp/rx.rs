//! TCP's receive side: a flow's data listener on the daemon, serving the
//! connection the flow was granted, and the sender's own connection for a
//! reverse flow; also the daemon's end of a reverse TCP flow, which writes
//! into the connection the sender opened (as `iperf3 -R` does).

use crate::clock::{mono_ns, realtime_ns};
use crate::net::{self, set_rcvbuf, AsRawFd};
use crate::records::{Fill, RecordReader};
use crate::session::CONNECT_TIMEOUT;
use crate::sys::{CpuClock, CpuTime};
use crate::transport::rx::{
    reply_len, unmap, unmap_addr, Awaited, DataPort, Dial, FlowRx, FlowShared, Resend, ReverseEnd,
    RxEnd, RxFlow, WorkerOutcome, POLL_MS,
};
use crate::transport::udp::rx::UdpFlow;
use crate::transport::{connect_err, hello_record, DataSock};
use crate::EngineError;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;
use wirebench_wire::auth::ProbeKey;
use wirebench_wire::{Reflection, FLAG_REFLECTED, PROBE_HEADER_LEN};

/// Opens flow `rf`'s data listener on `port` (the daemon's end).
pub(crate) fn listen(port: DataPort, rf: RxFlow) -> Result<(u16, RxEnd), EngineError> {
    let l = TcpListener::bind(port.addr).map_err(port.err("data listener"))?;
    let bound = l
        .local_addr()
        .map_err(|e| EngineError::io("data listener", e))?
        .port();
    l.set_nonblocking(true)
        .map_err(|e| EngineError::io("data listener", e))?;
    Ok((bound, Box::new(Listening { l, rf })))
}

/// A flow's data listener and its accounting, until its thread runs.
struct Listening {
    l: TcpListener,
    rf: RxFlow,
}

impl FlowRx for Listening {
    fn run(self: Box<Self>) -> WorkerOutcome {
        tcp_rx(self.l, self.rf)
    }

    fn into_udp(self: Box<Self>) -> Result<Box<UdpFlow>, RxEnd> {
        Err(self)
    }
}

/// The sender's end of a reverse flow: connects to the daemon's data port
/// and identifies the flow as a forward flow's connection does
/// ([`hello_record`]).
pub(crate) fn dial(d: Dial, rf: RxFlow) -> Result<(RxEnd, Resend), EngineError> {
    let mut t = TcpStream::connect_timeout(&d.to, CONNECT_TIMEOUT).map_err(connect_err(d.to))?;
    t.write_all(&hello_record(d.id)?)
        .map_err(|e| EngineError::io("TCP data connection", e))?;
    Ok((Box::new(Dialed { t, rf }), None))
}

/// The sender's connection of a reverse flow and its accounting.
struct Dialed {
    t: TcpStream,
    rf: RxFlow,
}

impl FlowRx for Dialed {
    fn run(self: Box<Self>) -> WorkerOutcome {
        tcp_rx_stream(self.t, self.rf)
    }

    fn into_udp(self: Box<Self>) -> Result<Box<UdpFlow>, RxEnd> {
        Err(self)
    }
}

/// Opens the daemon's end of a reverse TCP flow on `port`.
pub(crate) fn reverse_port(port: DataPort) -> Result<(u16, Box<dyn ReverseEnd>), EngineError> {
    let l = TcpListener::bind(port.addr).map_err(port.err("data listener"))?;
    let p = l
        .local_addr()
        .map_err(|e| EngineError::io("data listener", e))?
        .port();
    Ok((p, Box::new(ReversePort(l))))
}

/// The daemon's data listener of a reverse TCP flow.
struct ReversePort(TcpListener);

impl ReverseEnd for ReversePort {
    /// The sender's data connection: from the session's sender address,
    /// identified by its hello record within the wait; others are closed.
    fn await_sender(
        self: Box<Self>,
        w: &Awaited<'_>,
        plan: &crate::plan::FlowPlan,
    ) -> Result<DataSock, String> {
        let l = self.0;
        l.set_nonblocking(true)
            .map_err(|e| format!("data listener: {e}"))?;
        let s = loop {
            (w.still)()?;
            let mut pfd = [crate::net::pollfd(l.as_raw_fd(), crate::net::POLLIN)];
            if crate::net::poll(&mut pfd, 50) <= 0 {
                continue;
            }
            let Ok((mut s, from)) = l.accept() else {
                continue;
            };
            if unmap(from.ip()) != w.peer_ip {
                continue;
            }
            let _ = s.set_nonblocking(false);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut rec = [0u8; PROBE_HEADER_LEN];
            if s.read_exact(&mut rec).is_ok() && w.is_hello(&rec) {
                let _ = s.set_read_timeout(None);
                break s;
            }
        };
        let _ = s.set_nodelay(crate::sockopt::nodelay(&plan.opts, &plan.spec));
        let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
        Ok(Box::new(super::TcpTx::new(s)))
    }
}

/// Data connections a TCP flow is granted on the receiver: the one its
/// sender opens. TCP's `rx_sockets` counts it with the listener, so the
/// session's budget holds exactly the sockets the flow can keep; another
/// connection is refused (closed at once, counted foreign) while the
/// granted one is identified, else it takes the place of the silent one.
pub(crate) const GRANTED_CONNS: usize = 1;
/// Time a TCP data connection has to send its first record of this
/// session and flow, so that a connection that never sends a byte cannot
/// hold the flow's place and keep the real stream out.
pub(crate) const TCP_IDENTIFY: Duration = Duration::from_secs(2);
/// Record reader of a data connection: a user-space buffer per granted
/// connection.
const TCP_BUF: usize = 256 << 10;

/// Reflections queued beyond this (the sender does not read them) are
/// dropped; the sender counts them as round-trip loss.
const TCP_OUT_MAX: usize = 1 << 20;

struct TcpConn {
    stream: TcpStream,
    rd: RecordReader,
    /// Reflection records ([`reply_len`] bytes each) waiting to be written.
    out: Vec<u8>,
    /// Bytes of `out` already written.
    out_head: usize,
    /// When it was accepted (monotonic ns), and whether a record of this
    /// session and flow has arrived on it since.
    accepted_ns: u64,
    identified: bool,
    /// The peer as accepted, until the connection identifies (then it is
    /// the flow's `from`); None on the sender's end of a reverse flow.
    from: Option<SocketAddr>,
}

impl TcpConn {
    /// Writes queued reflections. Records not yet started get their
    /// transmit time now (and, with probe MACs, their MAC), so queueing
    /// time counts as dwell, not as path. Returns false when the
    /// connection failed.
    fn flush(&mut self, key: Option<&ProbeKey>) -> bool {
        if self.out_head >= self.out.len() {
            return true;
        }
        let rlen = reply_len(key.is_some());
        let first_fresh = self.out_head.div_ceil(rlen) * rlen;
        let tx = realtime_ns();
        let mut at = first_fresh;
        while at + rlen <= self.out.len() {
            let rec = &mut self.out[at..at + rlen];
            Reflection::stamp_tx(rec, tx);
            if let Some(k) = key {
                k.sign(rec);
            }
            at += rlen;
        }
        loop {
            match self.stream.write(&self.out[self.out_head..]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.out_head += n;
                    if self.out_head >= self.out.len() {
                        self.out.clear();
                        self.out_head = 0;
                        return true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

/// Serves flow `rf`'s data port: accepts the sender's connection (at
/// most [`GRANTED_CONNS`] at once), reads its records and writes back
/// reflections, until the session stops the flow.
fn tcp_rx(listener: TcpListener, mut rf: RxFlow) -> WorkerOutcome {
    let cpu0 = CpuTime::thread();
    let peer = rf.source.unwrap_or(SocketAddr::new(rf.peer_ip, 0));
    let (sh, reflect) = (rf.sh.clone(), rf.reflect);
    let mut conns: Vec<TcpConn> = Vec::new();
    let mut pfds: Vec<net::PollFd> = Vec::with_capacity(GRANTED_CONNS + 1);
    while !sh.stop.load(Ordering::Relaxed) {
        drop_unidentified(&mut conns, &sh);
        pfds.clear();
        pfds.push(net::pollfd(listener.as_raw_fd(), net::POLLIN));
        for c in &conns {
            let want_out = c.out_head < c.out.len();
            let out = if want_out { net::POLLOUT } else { 0 };
            pfds.push(net::pollfd(c.stream.as_raw_fd(), net::POLLIN | out));
        }
        let r = net::poll(&mut pfds, POLL_MS as i32);
        if r <= 0 {
            rf.acc.tick();
            continue;
        }
        let polled = pfds.len() - 1;
        if pfds[0].revents != 0 {
            while let Ok((s, from)) = listener.accept() {
                // Only the session's sender may connect (from the port it
                // declared, when it did): anyone else would hold the flow's
                // connection (and get reflections).
                let theirs = unmap(from.ip()) == peer.ip()
                    && (peer.port() == 0 || from.port() == peer.port());
                if !theirs || !make_room(&mut conns, &mut rf) {
                    sh.foreign();
                    continue;
                }
                let _ = s.set_nonblocking(true);
                // A fixed buffer switches the kernel's receive autotuning
                // off for the connection: 60 flows with 4 MiB each
                // advertised windows that overfilled a 1000-packet router
                // queue (50 000 retransmits where iperf3 -P 60 had 400).
                // Fixed only when the sender asks (`--window`, iperf3 -w).
                if sh.rcvbuf > 0 {
                    set_rcvbuf(s.as_raw_fd(), sh.rcvbuf);
                }
                conns.push(TcpConn {
                    stream: s,
                    rd: RecordReader::new(TCP_BUF),
                    out: Vec::with_capacity(if reflect { 64 << 10 } else { 0 }),
                    out_head: 0,
                    accepted_ns: mono_ns(),
                    identified: false,
                    from: Some(unmap_addr(from)),
                });
            }
        }
        // Backwards, so that swap_remove only moves an already handled
        // connection into the freed place.
        for ci in (0..polled).rev() {
            if pfds[ci + 1].revents == 0 {
                continue;
            }
            let ok =
                read_records(&mut conns[ci], &mut rf) && conns[ci].flush(sh.probe_key.as_ref());
            if !ok {
                conns.swap_remove(ci);
            }
        }
    }
    rf.outcome(CpuTime::thread().since(cpu0))
}

/// Closes data connections that have not sent a record of their session
/// within [`TCP_IDENTIFY`]; each one closed counts as foreign.
fn drop_unidentified(conns: &mut Vec<TcpConn>, sh: &FlowShared) {
    let now = mono_ns();
    let limit = TCP_IDENTIFY.as_nanos() as u64;
    let before = conns.len();
    conns.retain(|c| c.identified || now.saturating_sub(c.accepted_ns) < limit);
    for _ in conns.len()..before {
        sh.foreign();
    }
}

/// Whether a new connection may be served: while the flow holds fewer
/// than [`GRANTED_CONNS`] it may. Else the silent ones are read first
/// (the granted connection's hello may be waiting), and the oldest still
/// silent one is closed (counted foreign) to make room; when every held
/// connection has identified, there is no room and the newcomer is
/// refused.
fn make_room(conns: &mut Vec<TcpConn>, rf: &mut RxFlow) -> bool {
    if conns.len() < GRANTED_CONNS {
        return true;
    }
    for ci in (0..conns.len()).rev() {
        if !conns[ci].identified && !read_records(&mut conns[ci], rf) {
            conns.swap_remove(ci);
        }
    }
    while conns.len() >= GRANTED_CONNS {
        let Some(victim) = conns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.identified)
            .min_by_key(|(_, c)| c.accepted_ns)
            .map(|(i, _)| i)
        else {
            return false;
        };
        conns.swap_remove(victim);
        rf.sh.foreign();
    }
    true
}

/// Reads what is available and records every complete record. Returns false
/// when the connection is to be dropped (closed, or not ours).
fn read_records(c: &mut TcpConn, rf: &mut RxFlow) -> bool {
    let (sid, flow_id, reflect) = (rf.sid, rf.flow_id, rf.reflect);
    let rlen = reply_len(rf.sh.probe_key.is_some());
    loop {
        let ts = match c.rd.fill(&mut c.stream) {
            Fill::Data(ts) => ts,
            Fill::Again => return true,
            Fill::Closed => return false,
        };
        let offset = rf.sh.offset_ns.load(Ordering::Relaxed);
        let out = &mut c.out;
        let identified = &mut c.identified;
        let framed = c.rd.drain(
            |h| h.session == sid && h.flow == flow_id,
            |h, rec| {
                *identified = true;
                if h.is_hello() || rf.take(h, rec, ts, offset).is_none() {
                    return;
                }
                if reflect && h.is_rtt() && out.len() + rlen <= TCP_OUT_MAX {
                    let mut rh = *h;
                    rh.flags |= FLAG_REFLECTED;
                    rh.len = rlen as u16;
                    let at = out.len();
                    out.resize(at + rlen, 0);
                    let rec = &mut out[at..];
                    let _ = rh.encode(rec);
                    let _ = Reflection {
                        rx_ns: ts,
                        tx_ns: 0,
                    }
                    .encode(rec);
                }
            },
        );
        if !framed {
            // Not a record stream of this flow (or it lost framing): the
            // whole connection is foreign.
            rf.sh.foreign();
            return false;
        }
        if c.identified {
            if let Some(f) = c.from.take() {
                let _ = rf.sh.from.set(f);
            }
        }
    }
}

/// One TCP connection we opened ourselves, read until the peer closes it or
/// the flow is stopped (the sender's end of a reverse TCP flow).
fn tcp_rx_stream(stream: TcpStream, mut rf: RxFlow) -> WorkerOutcome {
    let cpu0 = CpuTime::thread();
    let _ = stream.set_nonblocking(true);
    let mut conn = TcpConn {
        stream,
        rd: RecordReader::new(TCP_BUF),
        out: Vec::new(),
        out_head: 0,
        accepted_ns: mono_ns(),
        identified: false,
        from: None,
    };
    rf.reflect = false;
    while !rf.sh.stop.load(Ordering::Relaxed) {
        let mut pfd = [net::pollfd(conn.stream.as_raw_fd(), net::POLLIN)];
        if net::poll(&mut pfd, POLL_MS as i32) <= 0 {
            rf.acc.tick();
            continue;
        }
        if !read_records(&mut conn, &mut rf) {
            break;
        }
    }
    rf.outcome(CpuTime::thread().since(cpu0))
}
