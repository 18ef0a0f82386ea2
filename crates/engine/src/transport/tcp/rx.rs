//! TCP's receive side: a flow's data listener on the daemon, serving the
//! connection the flow was granted (one-way flows on receive workers
//! shared by the flows beyond the CPUs, an RTT-meter flow on a thread of
//! its own), and the sender's own connection for a reverse flow; also the
//! daemon's end of a reverse TCP flow, which writes into the connection
//! the sender opened (as `iperf3 -R` does).

use crate::budget;
use crate::clock::{mono_ns, realtime_ns};
use crate::net::{self, set_rcvbuf, AsRawFd};
use crate::records::{Fill, RecordReader};
use crate::session::CONNECT_TIMEOUT;
use crate::sys::{CpuClock, CpuTime};
use crate::transport::rx::{
    deal, reply_len, unmap, unmap_addr, Awaited, DataPort, Dial, FlowRx, FlowShared, Resend,
    ReverseEnd, RxEnd, RxFlow, Worker, WorkerOutcome, POLL_MS, STOP_DRAIN_NS,
};
use crate::transport::udp::rx::UdpFlow;
use crate::transport::{connect_err, hello_record, DataSock};
use crate::EngineError;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wirebench_wire::auth::ProbeKey;
use wirebench_wire::{Reflection, FLAG_LONG, FLAG_REFLECTED, PROBE_HEADER_LEN};

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
pub(crate) struct Listening {
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

    fn into_tcp(self: Box<Self>) -> Result<Box<Listening>, RxEnd> {
        if self.rf.reflect {
            Err(self)
        } else {
            Ok(self)
        }
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

    fn into_tcp(self: Box<Self>) -> Result<Box<Listening>, RxEnd> {
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

/// A data connection's record reader: records are read past once their
/// header is in, unless a probe MAC at a record's end must be checked
/// (then records are held whole, and [`TCP_BUF`] bounds their length).
fn record_reader(rf: &RxFlow) -> RecordReader {
    if rf.sh.probe_key.is_some() {
        RecordReader::new(TCP_BUF)
    } else {
        RecordReader::streaming(TCP_BUF)
    }
}

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
    /// Registered with a shared worker's poller.
    watched: bool,
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
    let sh = rf.sh.clone();
    let mut conns: Vec<TcpConn> = Vec::new();
    let mut pfds: Vec<net::PollFd> = Vec::with_capacity(GRANTED_CONNS + 1);
    // The poll set is rebuilt every round: nothing to forget on close.
    let mut forget = |_: &TcpConn| {};
    while !sh.stop.load(Ordering::Relaxed) {
        drop_unidentified(&mut conns, &sh, &mut forget);
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
        // Backwards, so that swap_remove only moves an already handled
        // connection into the freed place; before accepting, which may
        // close one of them to make room.
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
        if pfds[0].revents != 0 {
            accept(&listener, &mut conns, &mut rf, peer, &mut forget);
        }
    }
    read_left(&mut conns, &mut rf, mono_ns() + STOP_DRAIN_NS);
    rf.outcome(CpuTime::thread().since(cpu0))
}

/// Accepts the connections waiting on `listener`: only the session's
/// sender's (from the port it declared, when it did: anyone else would
/// hold the flow's connection and get reflections), as far as
/// [`make_room`] lets them in; the rest count as foreign. `closing` sees
/// every held connection before it is closed.
fn accept(
    listener: &TcpListener,
    conns: &mut Vec<TcpConn>,
    rf: &mut RxFlow,
    peer: SocketAddr,
    closing: &mut impl FnMut(&TcpConn),
) {
    while let Ok((s, from)) = listener.accept() {
        // Only the session's sender may connect (from the port it
        // declared, when it did): anyone else would hold the flow's
        // connection (and get reflections).
        let theirs =
            unmap(from.ip()) == peer.ip() && (peer.port() == 0 || from.port() == peer.port());
        if !theirs || !make_room(conns, rf, closing) {
            rf.sh.foreign();
            continue;
        }
        let _ = s.set_nonblocking(true);
        // A fixed buffer switches the kernel's receive autotuning
        // off for the connection: 60 flows with 4 MiB each
        // advertised windows that overfilled a 1000-packet router
        // queue (50 000 retransmits where iperf3 -P 60 had 400).
        // Fixed only when the sender asks (`--window`, iperf3 -w).
        if rf.sh.rcvbuf > 0 {
            set_rcvbuf(s.as_raw_fd(), rf.sh.rcvbuf);
        }
        conns.push(TcpConn {
            stream: s,
            rd: record_reader(rf),
            out: Vec::with_capacity(if rf.reflect { 64 << 10 } else { 0 }),
            out_head: 0,
            accepted_ns: mono_ns(),
            identified: false,
            watched: false,
            from: Some(unmap_addr(from)),
        });
    }
}

/// A one-way TCP flow on a shared receive worker: its listener, the
/// connection(s) its sender opened, its accounting.
struct SharedFlow {
    l: TcpListener,
    conns: Vec<TcpConn>,
    rf: RxFlow,
    /// The session's sender, at the port it declared (0: any port).
    peer: SocketAddr,
}

/// Ready sockets a shared TCP worker takes from one wait.
const TCP_EVENTS: usize = 1024;

/// How often a shared TCP worker closes its flows' connections that have
/// not identified in time ([`TCP_IDENTIFY`] is seconds: this is plenty).
const TCP_SWEEP_NS: u64 = 100_000_000;

/// Poller tokens of flow `k` of a shared TCP worker: its listener, and
/// its connections together (a flow holds one, [`GRANTED_CONNS`]; an
/// event reads them all).
fn listener_token(k: usize) -> usize {
    2 * k
}
fn conns_token(k: usize) -> usize {
    2 * k + 1
}

/// Starts the receive workers of a session's one-way TCP flows (`tcp`:
/// position in the session, listener), each serving its flows with
/// [`tcp_rx_many`]: a thread per flow, at most
/// [`budget::TCP_OWN_THREADS`] (1 000 threads would not fit the
/// session's thread budget), which then share the flows out.
pub(crate) fn start_workers(
    tcp: Vec<(usize, Box<Listening>)>,
    workers: &mut Vec<Worker>,
) -> Result<(), EngineError> {
    for (g, (ids, flows)) in deal(tcp, budget::TCP_OWN_THREADS).into_iter().enumerate() {
        let mut poller =
            net::Poller::new(TCP_EVENTS).map_err(|e| EngineError::io("receive poller", e))?;
        let mut shared = Vec::with_capacity(flows.len());
        for (k, f) in flows.into_iter().enumerate() {
            poller
                .add(f.l.as_raw_fd(), listener_token(k))
                .map_err(|e| EngineError::io("receive poller", e))?;
            shared.push(SharedFlow {
                peer: f.rf.source.unwrap_or(SocketAddr::new(f.rf.peer_ip, 0)),
                l: f.l,
                conns: Vec::new(),
                rf: f.rf,
            });
        }
        let h = std::thread::Builder::new()
            .name(format!("wb-rxt-{g}"))
            .spawn(move || tcp_rx_many(shared, poller))
            .map_err(|e| EngineError::io("receive thread", e))?;
        workers.push(Worker {
            flows: ids,
            handle: Some(h),
        });
    }
    Ok(())
}

/// Serves several one-way TCP flows on one thread until the session
/// stops them: `poller` (epoll on Linux) watches their listeners and
/// connections, and each readable connection is read up to
/// [`TCP_FILLS_PER_TURN`] buffers at a time, so that a fast flow cannot
/// hold up the others (the wait is level-triggered: it comes back for
/// the rest).
fn tcp_rx_many(mut flows: Vec<SharedFlow>, mut poller: net::Poller) -> WorkerOutcome {
    let cpu0 = CpuTime::thread();
    // The session stops all its flows at once.
    let stop = match flows.first() {
        Some(f) => f.rf.sh.clone(),
        None => Arc::new(FlowShared::default()),
    };
    let live = flows.iter().any(|f| f.rf.acc.live.is_some());
    let (mut next_tick, mut next_sweep) = (0, 0);
    let mut ready = Vec::with_capacity(TCP_EVENTS);
    while !stop.stop.load(Ordering::Relaxed) {
        let now = mono_ns();
        if live && now >= next_tick {
            flows.iter_mut().for_each(|f| f.rf.acc.tick());
            next_tick = now + 10_000_000;
        }
        if now >= next_sweep {
            for f in flows
                .iter_mut()
                .filter(|f| f.conns.iter().any(|c| !c.identified))
            {
                drop_unidentified(&mut f.conns, &f.rf.sh, &mut |c| {
                    poller.remove(c.stream.as_raw_fd())
                });
            }
            next_sweep = now + TCP_SWEEP_NS;
        }
        ready.clear();
        poller.wait(POLL_MS as i32, |t| ready.push(t));
        for &t in &ready {
            let k = t / 2;
            let Some(f) = flows.get_mut(k) else { continue };
            if t == listener_token(k) {
                accept(&f.l, &mut f.conns, &mut f.rf, f.peer, &mut |c| {
                    poller.remove(c.stream.as_raw_fd())
                });
                f.conns.retain_mut(|c| {
                    if !c.watched {
                        c.watched = poller.add(c.stream.as_raw_fd(), conns_token(k)).is_ok();
                    }
                    c.watched
                });
                continue;
            }
            for ci in (0..f.conns.len()).rev() {
                if !read_records(&mut f.conns[ci], &mut f.rf) {
                    poller.remove(f.conns[ci].stream.as_raw_fd());
                    f.conns.swap_remove(ci);
                }
            }
        }
    }
    // One time budget for all the flows.
    let until = mono_ns() + STOP_DRAIN_NS;
    for f in &mut flows {
        read_left(&mut f.conns, &mut f.rf, until);
    }
    WorkerOutcome {
        accs: flows.into_iter().map(|f| f.rf.acc.into_recv()).collect(),
        cpu: CpuTime::thread().since(cpu0),
    }
}

/// Closes data connections that have not sent a record of their session
/// within [`TCP_IDENTIFY`]; each one closed counts as foreign, and
/// `closing` sees it first.
fn drop_unidentified(
    conns: &mut Vec<TcpConn>,
    sh: &FlowShared,
    closing: &mut impl FnMut(&TcpConn),
) {
    let now = mono_ns();
    let limit = TCP_IDENTIFY.as_nanos() as u64;
    conns.retain(|c| {
        let keep = c.identified || now.saturating_sub(c.accepted_ns) < limit;
        if !keep {
            closing(c);
            sh.foreign();
        }
        keep
    });
}

/// Whether a new connection may be served: while the flow holds fewer
/// than [`GRANTED_CONNS`] it may. Else the silent ones are read first
/// (the granted connection's hello may be waiting), and the oldest still
/// silent one is closed (counted foreign) to make room; when every held
/// connection has identified, there is no room and the newcomer is
/// refused. `closing` sees every connection before it is closed.
fn make_room(
    conns: &mut Vec<TcpConn>,
    rf: &mut RxFlow,
    closing: &mut impl FnMut(&TcpConn),
) -> bool {
    if conns.len() < GRANTED_CONNS {
        return true;
    }
    for ci in (0..conns.len()).rev() {
        if !conns[ci].identified && !read_records(&mut conns[ci], rf) {
            closing(&conns[ci]);
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
        closing(&conns[victim]);
        conns.swap_remove(victim);
        rf.sh.foreign();
    }
    true
}

/// Reads of one connection's buffer per turn: 8 x [`TCP_BUF`] is 2 MiB,
/// ~70 µs of a 25 Gbit/s loopback flow, so a shared worker's other flows
/// wait no longer than that for their turn.
const TCP_FILLS_PER_TURN: usize = 8;

/// Reads what is available (up to [`TCP_FILLS_PER_TURN`] buffers; the
/// caller's wait comes back for the rest) and records every complete
/// record. Returns false when the connection is to be dropped (closed,
/// or not ours).
fn read_records(c: &mut TcpConn, rf: &mut RxFlow) -> bool {
    read_turn(c, rf) != Turn::Drop
}

/// What one turn of reading a connection ([`read_turn`]) left.
#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// The socket had nothing more to read.
    Emptied,
    /// The turn's reads ran out first: more may be queued.
    More,
    /// Closed, or not ours: to be dropped.
    Drop,
}

/// Turns a stopped flow still reads from each of its connections (up to
/// [`TCP_FILLS_PER_TURN`] buffers each): 64 MiB, more than a receive
/// buffer holds.
const TCP_DRAIN_TURNS: usize = 32;

/// Once the session has stopped the flow: reads what `conns` already
/// hold, recorded as usual, until each is empty, [`TCP_DRAIN_TURNS`]
/// turns are read or `until` (monotonic ns) passes. The stop comes after
/// the linger, when what the sender wrote should have arrived; a thread
/// the host held through the linger finds it queued, and leaving at once
/// would count it lost although it was received.
fn read_left(conns: &mut [TcpConn], rf: &mut RxFlow, until: u64) {
    for c in conns {
        for _ in 0..TCP_DRAIN_TURNS {
            if mono_ns() >= until || read_turn(c, rf) != Turn::More {
                break;
            }
        }
    }
}

/// [`read_records`], saying whether the socket was emptied.
fn read_turn(c: &mut TcpConn, rf: &mut RxFlow) -> Turn {
    let (sid, flow_id, reflect) = (rf.sid, rf.flow_id, rf.reflect);
    let rlen = reply_len(rf.sh.probe_key.is_some());
    for _ in 0..TCP_FILLS_PER_TURN {
        let ts = match c.rd.fill(&mut c.stream) {
            Fill::Data(ts) => ts,
            Fill::Again => return Turn::Emptied,
            Fill::Closed => return Turn::Drop,
        };
        let offset = rf.sh.offset_ns.load(Ordering::Relaxed);
        let out = &mut c.out;
        let identified = &mut c.identified;
        let framed = c.rd.drain(
            |h| h.session == sid && h.flow == flow_id,
            |h, rec, len| {
                *identified = true;
                if h.is_hello() || rf.take_record(h, rec, len, ts, offset).is_none() {
                    return;
                }
                if reflect && h.is_rtt() && out.len() + rlen <= TCP_OUT_MAX {
                    let mut rh = *h;
                    rh.flags = (rh.flags | FLAG_REFLECTED) & !FLAG_LONG;
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
            return Turn::Drop;
        }
        if c.identified {
            if let Some(f) = c.from.take() {
                let _ = rf.sh.from.set(f);
            }
        }
    }
    Turn::More
}

/// One TCP connection we opened ourselves, read until the peer closes it or
/// the flow is stopped (the sender's end of a reverse TCP flow).
fn tcp_rx_stream(stream: TcpStream, mut rf: RxFlow) -> WorkerOutcome {
    let cpu0 = CpuTime::thread();
    let _ = stream.set_nonblocking(true);
    let mut conn = TcpConn {
        stream,
        rd: record_reader(&rf),
        out: Vec::new(),
        out_head: 0,
        accepted_ns: mono_ns(),
        identified: false,
        watched: false,
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
            // Closed or foreign: nothing left to read.
            return rf.outcome(CpuTime::thread().since(cpu0));
        }
    }
    read_left(
        std::slice::from_mut(&mut conn),
        &mut rf,
        mono_ns() + STOP_DRAIN_NS,
    );
    rf.outcome(CpuTime::thread().since(cpu0))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::transport::rx::{flow_report, rx_flow, RxAt};
    use wirebench_wire::{FlowSetup, ProbeHeader, Transport};

    /// Records already in a connection's socket when the flow is stopped
    /// (a receive thread the host held through the linger) are counted by
    /// [`read_left`], all of them, none lost; a reader leaving at the flag
    /// counted none.
    #[test]
    fn records_queued_at_the_stop_are_counted() {
        const N: u32 = 50;
        let setup = FlowSetup {
            flow_id: 1,
            transport: Transport::Tcp,
            max_len: 1000,
            mtu: 1500,
            ..Default::default()
        };
        let mut rf = rx_flow(&setup, &RxAt::loopback(7, 1 << 20, false), None);
        let sh = rf.sh.clone();
        sh.start_ns.store(realtime_ns(), Ordering::Relaxed);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (stream, from) = l.accept().unwrap();
        stream.set_nonblocking(true).unwrap();
        let mut rec = [0u8; 1000];
        for seq in 0..N {
            ProbeHeader {
                flags: 0,
                session: 7,
                flow: 1,
                len: 1000,
                seq,
                tx_ns: realtime_ns(),
            }
            .encode(&mut rec)
            .unwrap();
            tx.write_all(&rec).unwrap();
        }
        // 50 kB fit the receive buffer; wait (5 s at most) until all of it
        // is queued there, so the drain has everything to find.
        let until = mono_ns() + 5_000_000_000;
        let queued = || {
            let mut n: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int to the pointer given.
            let r = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut n) };
            if r == 0 {
                n as usize
            } else {
                0
            }
        };
        while queued() < 1000 * N as usize && mono_ns() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(queued(), 1000 * N as usize);
        let mut conns = vec![TcpConn {
            stream,
            rd: record_reader(&rf),
            out: Vec::new(),
            out_head: 0,
            accepted_ns: mono_ns(),
            identified: false,
            watched: false,
            from: Some(from),
        }];
        sh.stop.store(true, Ordering::Relaxed);
        read_left(&mut conns, &mut rf, mono_ns() + STOP_DRAIN_NS);
        let r = flow_report(1, &sh, rf.acc.into_recv(), Some(u64::from(N)), None);
        let c = &r.summary.counts;
        assert_eq!((c.unique, c.lost, c.duplicates), (u64::from(N), Some(0), 0));
        assert_eq!(r.foreign, 0);
        drop(tx);
    }
}
