//! The pacer: every flow keeps an absolute schedule t_k = t_0 + Σ gaps on
//! CLOCK_MONOTONIC, so a late packet never shifts the ones after it. It
//! sleeps until [`crate::clock::SPIN_NS`] before a deadline and spins the
//! rest; every packet already due when it wakes goes out in the same
//! `sendmmsg` (UDP) or `write` (TCP records), so gaps shorter than a
//! syscall become batches rather than drift. A packet due more than
//! [`LATE_LIMIT_NS`] ago when its turn comes is not sent and counted
//! `not_sent`, as is a packet the kernel refused; neither is network loss.

use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack, wait_until};
use crate::net::{set_sndbuf, AsRawFd, RawFd, SendBatch, BATCH};
use crate::plan::{clip_to_budget, FlowPlan, Pacing, Phases, SessionPlan, Stop};
use crate::rtt::RttRx;
use crate::session::CONNECT_TIMEOUT;
use crate::sys::{self, TcpInfo};
use crate::EngineError;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wirebench_model::MIN_PAYLOAD;
use wirebench_pktlog::format::FLAG_NOT_SENT;
use wirebench_pktlog::stream::{LogProducer, LogSink};
use wirebench_pktlog::{FlowMeta, LogFooter, LogMeta, Record, Side};
use wirebench_stats::{FlowConfig, IpVersion, RecvSummary, SendAccumulator, SendSummary};
use wirebench_wire::auth::{ProbeKey, AUTH_PROBE_MIN_LEN};
use wirebench_wire::{MeterMode, ProbeHeader, Transport, FLAG_RTT, PROBE_HEADER_LEN};

/// A packet whose scheduled time is more than this in the past when the
/// pacer reaches it is not sent (`not_sent`): sending it would no longer
/// follow the model, only burst to catch up. One second tolerates scheduler
/// hiccups of a loaded host without ever dropping, yet bounds the burst.
pub const LATE_LIMIT_NS: u64 = 1_000_000_000;

/// How long after a timed flow's end packets that fell due before it may
/// still leave. Without it a pacer woken a few milliseconds late by a busy
/// host would turn the run's last due packets into `not_sent`; beyond it
/// the run is over and the rest is `not_sent`, so a saturated run still
/// ends on time.
pub const END_GRACE_NS: u64 = 20_000_000;

pub(crate) enum DataSock {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// A flow's data socket, set up and bound but not yet connected: its
/// source port is known before the receiver's data port, so that `Hello`
/// can declare it ([`wirebench_wire::FlowSetup::src_port`]).
pub(crate) struct BoundData {
    sock: Socket,
    /// The receiver's address as [`crate::sockopt::apply`] returned it
    /// (flow label included); its port is set at [`BoundData::connect`].
    peer: SocketAddr,
    pub port: u16,
}

/// Opens flow `f`'s data socket towards `dst`, applies its options and
/// binds it (to the kernel's choice of port unless `-sp` names one).
pub(crate) fn bind_data(f: &FlowPlan, dst: IpAddr) -> Result<BoundData, EngineError> {
    let (ty, proto) = match f.transport {
        Transport::Udp => (Type::DGRAM, Protocol::UDP),
        Transport::Tcp => (Type::STREAM, Protocol::TCP),
        // Sent by crate::icmp, on sockets of its own.
        Transport::Icmp => return Err(not_in_session()),
    };
    let to = SocketAddr::new(dst, 0);
    let sock = Socket::new(Domain::for_address(to), ty, Some(proto))
        .map_err(|e| EngineError::io("data socket", e))?;
    // Marking and the other per-flow options, before connecting.
    let peer = crate::sockopt::apply(&sock, to, &f.opts)?;
    let bound = |s: &Socket| s.local_addr().ok().and_then(|a| a.as_socket());
    if bound(&sock).is_none_or(|a| a.port() == 0) {
        let any: IpAddr = if dst.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        sock.bind(&SocketAddr::new(any, 0).into())
            .map_err(|e| EngineError::io("data socket", e))?;
    }
    let port = bound(&sock).map(|a| a.port()).ok_or_else(|| {
        EngineError::io("data socket", std::io::ErrorKind::AddrNotAvailable.into())
    })?;
    Ok(BoundData { sock, peer, port })
}

impl BoundData {
    /// Connects to the receiver's data port `port`.
    pub(crate) fn connect(self, f: &FlowPlan, port: u16) -> Result<DataSock, EngineError> {
        let mut peer = self.peer;
        peer.set_port(port);
        let sock = self.sock;
        let connect_err = |e| EngineError::Connect {
            addr: peer.to_string(),
            source: e,
        };
        match f.transport {
            Transport::Udp => {
                sock.connect(&peer.into()).map_err(connect_err)?;
                let s: UdpSocket = sock.into();
                if f.opts.window.is_none() {
                    set_sndbuf(s.as_raw_fd(), 4 << 20);
                }
                Ok(DataSock::Udp(s))
            }
            Transport::Icmp => Err(not_in_session()),
            Transport::Tcp => {
                sock.connect_timeout(&peer.into(), CONNECT_TIMEOUT)
                    .map_err(connect_err)?;
                let s: TcpStream = sock.into();
                let _ = s.set_nodelay(crate::sockopt::nodelay(&f.opts, &f.spec));
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                Ok(DataSock::Tcp(s))
            }
        }
    }
}

/// ICMP echo flows are sent by crate::icmp on sockets of its own.
fn not_in_session() -> EngineError {
    EngineError::BadPlan("-T icmp: echo flows are not sent through a receiver session".into())
}

/// Names the session and flow on a fresh TCP data connection
/// ([`wirebench_wire::FLAG_HELLO`]): the receiver closes connections that
/// have not identified within 2 s, and a flow's first probe may come
/// later than that (`-d` start delay, slow rates).
pub(crate) fn identify(sock: &mut DataSock, session: u32, flow: u16) -> Result<(), EngineError> {
    let DataSock::Tcp(s) = sock else {
        return Ok(());
    };
    let mut rec = [0u8; PROBE_HEADER_LEN];
    ProbeHeader {
        flags: wirebench_wire::FLAG_HELLO,
        session,
        flow,
        len: PROBE_HEADER_LEN as u16,
        seq: 0,
        tx_ns: 0,
    }
    .encode(&mut rec)
    .map_err(|e| EngineError::Protocol(format!("hello record: {e}")))?;
    std::io::Write::write_all(s, &rec).map_err(|e| EngineError::io("TCP data connection", e))
}

struct FlowJob {
    plan: FlowPlan,
    flow_id: u16,
    session: u32,
    rtt: bool,
    t0: u64,
    cfg: FlowConfig,
    abort: Arc<AtomicBool>,
    cancel: Option<&'static AtomicBool>,
    /// Spin window of the pacer (0 when the paced flows outnumber the cores).
    spin_ns: u64,
    /// Paced (not max-rate) flows in the session.
    paced: usize,
    /// Bytes of records a `--max` TCP flow hands to one `write`
    /// ([`bulk_write_bytes`]).
    tcp_write: usize,
    /// `-l`: this flow's end of the session's per-packet log.
    log: Option<LogProducer>,
    /// `--auth probes`: every probe ends in this session key's MAC.
    probe_key: Option<ProbeKey>,
}

/// A flow's send statistics and, with `-l`, its per-packet log: every sent
/// and not-sent packet goes into both.
pub(crate) struct SendRec {
    acc: SendAccumulator,
    log: Option<LogProducer>,
    flow: u16,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the start, to log a not-sent
    /// packet's scheduled time on the wall clock like the sent ones.
    wall_minus_mono: i128,
}

impl SendRec {
    pub fn new(cfg: FlowConfig, log: Option<LogProducer>, flow: u16) -> SendRec {
        SendRec {
            acc: SendAccumulator::new(cfg),
            log,
            flow,
            wall_minus_mono: i128::from(realtime_ns()) - i128::from(mono_ns()),
        }
    }

    #[inline]
    pub fn record_sent(&mut self, sched: u64, actual: u64, size: u32, seq: u32, tx_wall: u64) {
        self.acc.record_sent(sched, actual, size);
        if let Some(l) = self.log.as_mut() {
            l.push(Record {
                flow: self.flow,
                flags: 0,
                size,
                seq: u64::from(seq),
                tx_ns: tx_wall,
                rx_ns: 0,
            });
        }
    }

    /// `n` packets scheduled at `at` (monotonic) not sent; `seq` is the
    /// number the next sent packet gets (not-sent packets use none).
    #[inline]
    pub fn record_not_sent(&mut self, n: u64, at: u64, seq: u32, size: u32) {
        self.acc.record_not_sent(n);
        if let Some(l) = self.log.as_mut() {
            let wall = (i128::from(at) + self.wall_minus_mono).max(0) as u64;
            for _ in 0..n {
                l.push(Record {
                    flow: self.flow,
                    flags: FLAG_NOT_SENT,
                    size,
                    seq: u64::from(seq),
                    tx_ns: wall,
                    rx_ns: 0,
                });
            }
        }
    }

    pub fn packets(&self) -> u64 {
        self.acc.packets()
    }

    /// The flow's send summary, with the negative model draws `sched`
    /// clamped to zero.
    pub fn summary(&self, sched: &Schedule) -> SendSummary {
        SendSummary {
            clamped_draws: sched.gen.clamps(),
            ..self.acc.summary()
        }
    }
}

impl FlowJob {
    /// What the RTT collector needs to recognise this flow's reflections.
    fn reflected(&self) -> crate::rtt::Reflected {
        crate::rtt::Reflected {
            cfg: self.cfg,
            session: self.session,
            flow_id: self.flow_id,
            max_payload: self.plan.spec.max_payload().max(self.min_len()),
            probe_key: self.probe_key.clone(),
        }
    }

    /// Smallest probe this flow sends: the header, and with `--auth
    /// probes` its MAC trailer too (smaller sizes of the model are raised
    /// to it, as sizes below the header are without a MAC).
    fn min_len(&self) -> u32 {
        min_probe_len(self.probe_key.is_some())
    }

    /// Why the flow must stop now, if it must.
    fn halted(&self) -> Option<Halt> {
        stop_reason(&self.abort, self.cancel)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Halt {
    PeerGone,
    Cancelled,
}

pub(crate) struct FlowSent {
    /// CLOCK_REALTIME of the first packet sent (0 = none).
    pub first_tx: u64,
    pub send: SendSummary,
    pub rtt: Option<RecvSummary>,
    /// Still collecting reflections (rtt meter) until the linger is over.
    pub rtt_rx: Option<RttRx>,
    /// Stopped early by the caller's cancel flag (the session still reports).
    pub cancelled: bool,
    pub tcp: Option<TcpInfo>,
    /// TCP: the congestion control the kernel used (read back).
    pub tcp_cc: Option<String>,
    pub error: Option<String>,
}

impl FlowSent {
    pub(crate) fn failed(msg: &str) -> FlowSent {
        FlowSent {
            first_tx: 0,
            send: SendSummary::default(),
            rtt: None,
            rtt_rx: None,
            cancelled: false,
            tcp: None,
            tcp_cc: None,
            error: Some(msg.to_string()),
        }
    }

    /// A flow that ran: what it sent, how it ended, and the reflection
    /// collector when it measures round trips (no TCP figures).
    pub(crate) fn ran(
        first_tx: u64,
        send: SendSummary,
        rtt_rx: Option<RttRx>,
        end: FlowEnd,
    ) -> FlowSent {
        let (error, cancelled) = split_outcome(end);
        FlowSent {
            first_tx,
            send,
            rtt: None,
            rtt_rx,
            cancelled,
            tcp: None,
            tcp_cc: None,
            error,
        }
    }
}

/// Smallest probe a flow sends, with or without a MAC trailer.
pub(crate) fn min_probe_len(mac: bool) -> u32 {
    if mac {
        AUTH_PROBE_MIN_LEN as u32
    } else {
        MIN_PAYLOAD
    }
}

/// The flow's schedule: draws departures, applies the stop condition.
pub(crate) struct Schedule {
    gen: Box<dyn wirebench_model::Generator>,
    next_at: u64,
    end_at: Option<u64>,
    packets_left: Option<u64>,
    bytes_left: Option<u64>,
    pub max: bool,
    pub max_len: u32,
    /// Smallest probe ([`min_probe_len`]).
    min_len: u32,
    /// Packets drawn so far.
    drawn: u64,
    /// Start of the schedule (CLOCK_MONOTONIC).
    start_at: u64,
}

impl Schedule {
    pub fn new(plan: &FlowPlan, t0: u64, min_len: u32) -> Result<Schedule, String> {
        let gen = plan.spec.generator(plan.seed).map_err(|e| e.to_string())?;
        let start = t0 + plan.spec.start_delay_ms * 1_000_000;
        let (end_at, packets_left, bytes_left) = match plan.stop {
            Stop::DurationMs(ms) => (Some(start + ms * 1_000_000), None, None),
            Stop::Packets(n) => (None, Some(n), None),
            Stop::KBytes(k) => (None, None, Some(k * 1024)),
        };
        // A transfer model ends when its bytes are out, whatever else stops it.
        let bytes_left = match (bytes_left, plan.spec.transfer_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Schedule {
            gen,
            next_at: start,
            end_at,
            packets_left,
            bytes_left,
            max: plan.spec.is_max(),
            max_len: plan.spec.max_payload().max(min_len),
            min_len,
            drawn: 0,
            start_at: start,
        })
    }

    /// Whether a timed flow's time is up at `now` (never for `-z`/`-k`).
    pub fn time_up(&self, now: u64) -> bool {
        self.end_at.is_some_and(|end| now >= end)
    }

    /// The next packet: (scheduled time, size), or None when the flow is
    /// done. For `--max` flows the schedule time is meaningless (0).
    pub fn next(&mut self, now: u64) -> Option<(u64, u32)> {
        if self.packets_left == Some(0) || self.bytes_left == Some(0) {
            return None;
        }
        let d = self.gen.next();
        let at = if self.max { now } else { self.next_at };
        if let Some(end) = self.end_at {
            // Gaps are whole nanoseconds, so the schedule may run up to
            // 0.5 ns per packet early (3000 pps: 333 333 ns instead of
            // 333 333.3); without this margin a flow of rate R would send
            // R × T + 1 packets in T.
            let margin = if self.max { 0 } else { self.drawn / 2 };
            if at.saturating_add(margin) >= end {
                return None;
            }
        }
        self.next_at = self.next_at.saturating_add(d.gap_ns);
        self.drawn += 1;
        let mut size = d.size.clamp(self.min_len, self.max_len);
        if let Some(b) = self.bytes_left.as_mut() {
            size = clip_to_budget(size, *b, self.min_len);
            *b -= size as u64;
        }
        if let Some(p) = self.packets_left.as_mut() {
            *p -= 1;
        }
        Some((at, size))
    }
}

fn run_flow(mut job: FlowJob, sock: DataSock) -> FlowSent {
    tighten_timer_slack();
    // A max-rate flow stays at normal priority beside paced flows, whose
    // pacers must not wait for it; alone, it competes on equal terms. Bulk
    // TCP flows more than the CPUs stay at normal priority too: they are
    // clocked by their ACKs, not by a timer, and 60 of them raised took
    // the CPU from the receiver on the same host (their writes then
    // shrink: `bulk_write_bytes`).
    let crowd = job.plan.transport == Transport::Tcp && job.tcp_write < TCP_WRITE_BYTES;
    if !job.plan.spec.is_max() || (job.paced == 0 && !crowd) {
        raise_priority();
    }
    let mut sched = match Schedule::new(&job.plan, job.t0, job.min_len()) {
        Ok(s) => s,
        Err(e) => return FlowSent::failed(&e),
    };
    let mut acc = SendRec::new(job.cfg, job.log.take(), job.flow_id);
    match sock {
        DataSock::Udp(s) => {
            let reflector = if job.rtt {
                match s.try_clone() {
                    Ok(rs) => Some(RttRx::start_udp(rs, &job.reflected())),
                    Err(e) => return FlowSent::failed(&format!("cannot clone socket: {e}")),
                }
            } else {
                None
            };
            let mut first_tx = 0;
            let r = udp_send(&job, &s, &mut sched, &mut acc, &mut first_tx);
            FlowSent::ran(first_tx, acc.summary(&sched), reflector, r)
        }
        DataSock::Tcp(s) => {
            let reflector = if job.rtt {
                match s.try_clone() {
                    Ok(rs) => Some(RttRx::start_tcp(rs, &job.reflected())),
                    Err(e) => return FlowSent::failed(&format!("cannot clone socket: {e}")),
                }
            } else {
                None
            };
            let mut first_tx = 0;
            let mut ran = (0, 0);
            let r = if sched.max {
                tcp_bulk(&job, &s, &mut sched, &mut acc, &mut first_tx, &mut ran)
            } else {
                tcp_send(&job, &s, &mut sched, &mut acc, &mut first_tx)
            };
            let mut send = acc.summary(&sched);
            if sched.max {
                writer_span(&mut send, ran, job.cfg);
            }
            FlowSent {
                tcp: Some(sys::tcp_info(&s).unwrap_or_default()),
                tcp_cc: crate::sockopt::tcp_cc(&s),
                ..FlowSent::ran(first_tx, send, reflector, r)
            }
        }
    }
}

/// What [`pace_one`] needs besides the flow and its socket.
pub(crate) struct PaceOne {
    pub flow_id: u16,
    pub session: u32,
    /// CLOCK_MONOTONIC start of the schedule.
    pub t0: u64,
    pub cfg: FlowConfig,
    /// Set when the flow must stop (the session ended early).
    pub abort: Arc<AtomicBool>,
    pub spin_ns: u64,
    /// `--auth probes`: the session's probe key.
    pub probe_key: Option<ProbeKey>,
}

/// Paces one flow on the calling thread with the sender's own pacer and
/// accounting: the receiver's end of a reverse flow (crate::reverse).
pub(crate) fn pace_one(plan: FlowPlan, sock: DataSock, at: PaceOne) -> FlowSent {
    let job = FlowJob {
        plan,
        flow_id: at.flow_id,
        session: at.session,
        rtt: false,
        t0: at.t0,
        cfg: at.cfg,
        abort: at.abort,
        cancel: None,
        spin_ns: at.spin_ns,
        paced: 1,
        tcp_write: TCP_WRITE_BYTES,
        log: None,
        probe_key: at.probe_key,
    };
    run_flow(job, sock)
}

/// Waits for a deadline like [`wait_until`], but in slices of at most
/// 50 ms while it is far away, so that a long gap (an OFF period, a slow
/// rate) does not delay reacting to Ctrl-C or a vanished receiver.
fn wait_or_halt(job: &FlowJob, at: u64) -> Result<u64, Halt> {
    wait_or_stop(&job.abort, job.cancel, at, job.spin_ns)
}

/// Why flows must stop now, if they must.
pub(crate) fn stop_reason(abort: &AtomicBool, cancel: Option<&AtomicBool>) -> Option<Halt> {
    if abort.load(Ordering::Relaxed) {
        Some(Halt::PeerGone)
    } else if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
        Some(Halt::Cancelled)
    } else {
        None
    }
}

pub(crate) fn wait_or_stop(
    abort: &AtomicBool,
    cancel: Option<&AtomicBool>,
    at: u64,
    spin_ns: u64,
) -> Result<u64, Halt> {
    const SLICE: u64 = 50_000_000;
    loop {
        if let Some(h) = stop_reason(abort, cancel) {
            return Err(h);
        }
        let now = mono_ns();
        if at <= now + 2 * SLICE {
            return Ok(crate::clock::wait_until_spin(at, spin_ns));
        }
        crate::clock::sleep_until(now + SLICE);
    }
}

/// A flow's end: Ok (done or cancelled) or a hard error.
pub(crate) type FlowEnd = Result<Option<Halt>, String>;

fn split_outcome(r: FlowEnd) -> (Option<String>, bool) {
    match r {
        Ok(Some(Halt::Cancelled)) => (None, true),
        Ok(Some(Halt::PeerGone)) => (Some("receiver gone".into()), false),
        Ok(None) => (None, false),
        Err(e) => (Some(e), false),
    }
}

fn header(job: &FlowJob) -> ProbeHeader {
    ProbeHeader {
        flags: if job.rtt { FLAG_RTT } else { 0 },
        session: job.session,
        flow: job.flow_id,
        len: PROBE_HEADER_LEN as u16,
        seq: 0,
        tx_ns: 0,
    }
}

/// Hopelessly late packets skipped per [`gather`] call at most, so that a
/// schedule far beyond what the host can send still returns to the loop
/// (and its Ctrl-C check) every few microseconds: `-C 1e12` once skipped
/// for 40 s on a 3 s run, deaf to SIGINT.
const SKIP_CHUNK: u64 = 4096;

/// Gathers into `meta` every packet due at `now` (at least the pending
/// one), skipping hopelessly late ones (at most [`SKIP_CHUNK`]: it may
/// then return 0 with packets still due). Returns how many were gathered.
pub(crate) fn gather(
    sched: &mut Schedule,
    pending: &mut Option<(u64, u32)>,
    now: u64,
    acc: &mut SendRec,
    meta: &mut [(u64, u32)],
    room: usize,
    seq: u32,
) -> usize {
    let room = room.min(meta.len());
    let mut n = 0;
    let mut skipped = 0;
    // A timed flow ends on time: once its end (and the grace for a late
    // wake-up) has passed, what is still due could not leave in time and is
    // not sent (a saturated 2 s TCP run once sent its 1 s backlog and
    // lasted 3.0 s).
    let over = !sched.max
        && sched
            .end_at
            .is_some_and(|end| now >= end.saturating_add(END_GRACE_NS));
    while n < room && skipped < SKIP_CHUNK {
        let Some((at, size)) = *pending else { break };
        if !sched.max && at > now {
            break;
        }
        if !sched.max && (over || now - at > LATE_LIMIT_NS) {
            acc.record_not_sent(1, at, seq.wrapping_add(n as u32), size);
            skipped += 1;
        } else {
            meta[n] = (at, size);
            n += 1;
        }
        *pending = sched.next(now);
    }
    n
}

/// One UDP flow's send state between batches: the socket, the header
/// template, the next sequence number and the refusal count.
struct UdpOut<'a> {
    fd: RawFd,
    h: &'a mut ProbeHeader,
    seq: &'a mut u32,
    first_tx: &'a mut u64,
    refused: &'a mut u64,
    /// `--auth probes`: signs each probe once its header is final.
    key: Option<&'a ProbeKey>,
}

impl UdpOut<'_> {
    /// Sends the gathered packets `meta` (scheduled time, size) with
    /// `sendmmsg`, stamping the transmit time immediately before the call.
    /// A packet the kernel refuses is `not_sent` and the rest of the batch
    /// is renumbered, so the receiver sees no gap for it.
    fn send(&mut self, batch: &mut SendBatch, meta: &[(u64, u32)], acc: &mut SendRec, max: bool) {
        let n = meta.len();
        let mut seq = *self.seq;
        for (i, &(_, size)) in meta.iter().enumerate() {
            self.h.len = size as u16;
            self.h.seq = seq.wrapping_add(i as u32);
            let _ = self.h.encode(batch.slot(i, size as usize));
        }
        let tx = realtime_ns();
        if *self.first_tx == 0 {
            *self.first_tx = tx;
        }
        for (i, &(_, size)) in meta.iter().enumerate() {
            let slot = batch.slot(i, size as usize);
            ProbeHeader::stamp_tx(slot, tx);
            if let Some(k) = self.key {
                k.sign(slot);
            }
        }
        let actual = mono_ns();
        let mut i = 0;
        while i < n {
            match batch.send(self.fd, i, n) {
                Ok(k) => {
                    for (j, &(at, size)) in meta[i..i + k].iter().enumerate() {
                        let sq = seq.wrapping_add(j as u32);
                        acc.record_sent(if max { actual } else { at }, actual, size, sq, tx);
                    }
                    seq = seq.wrapping_add(k as u32);
                    i += k;
                }
                Err(e) => {
                    let (at, size) = meta[i];
                    acc.record_not_sent(1, at, seq, size);
                    if e.kind() == ErrorKind::ConnectionRefused {
                        *self.refused += 1;
                    }
                    for (j, &(_, size)) in meta.iter().enumerate().skip(i + 1) {
                        let cur = seq.wrapping_add((j - i) as u32 - 1);
                        let slot = batch.slot(j, size as usize);
                        ProbeHeader::stamp_seq(slot, cur);
                        if let Some(k) = self.key {
                            k.sign(slot);
                        }
                    }
                    i += 1;
                    if e.kind() == ErrorKind::WouldBlock {
                        std::thread::yield_now();
                    }
                }
            }
        }
        *self.seq = seq;
    }
}

/// Writes the flow's payload content after the header room of every slot.
fn fill_payload(batch: &mut SendBatch, plan: &FlowPlan) {
    for slot in batch.slots_mut() {
        if let Some(rest) = slot.get_mut(PROBE_HEADER_LEN..) {
            plan.spec.payload.fill(rest, plan.seed);
        }
    }
}

fn udp_send(
    job: &FlowJob,
    s: &UdpSocket,
    sched: &mut Schedule,
    acc: &mut SendRec,
    first_tx: &mut u64,
) -> FlowEnd {
    let fd = s.as_raw_fd();
    let mut batch = SendBatch::new(sched.max_len as usize);
    fill_payload(&mut batch, &job.plan);
    let mut h = header(job);
    let mut seq: u32 = 0;
    let mut meta = [(0u64, 0u32); BATCH];
    wait_until(job.t0);
    let mut pending = sched.next(mono_ns());
    let mut refused = 0u64;
    while pending.is_some() {
        if let Some(h) = job.halted() {
            return Ok(Some(h));
        }
        let (at, _) = pending.unwrap_or_default();
        let now = if sched.max {
            mono_ns()
        } else {
            match wait_or_halt(job, at) {
                Ok(t) => t,
                Err(h) => return Ok(Some(h)),
            }
        };
        let n = gather(sched, &mut pending, now, acc, &mut meta, BATCH, seq);
        if n == 0 {
            continue;
        }
        let mut out = UdpOut {
            fd,
            h: &mut h,
            seq: &mut seq,
            first_tx,
            refused: &mut refused,
            key: job.probe_key.as_ref(),
        };
        out.send(&mut batch, &meta[..n], acc, sched.max);
        // Every send refused for a long stretch: the receiver's port is gone.
        if refused > 1000 && acc.packets() == 0 {
            return Err("receiver refuses the data port".into());
        }
    }
    Ok(None)
}

/// Bytes of records per TCP write (see `tcp_send`). Measured on loopback
/// (bench/compare.sh, medians of 3): 256 KiB gave 21.0 Gbit/s with 512 B
/// records and 22.2 with 64 000 B; 1 MiB gives 27.7 and 40.3.
const TCP_WRITE_BYTES: usize = 1 << 20;

/// Bytes of records per write of each of `flows` `--max` TCP flows on
/// `cores` CPUs: [`TCP_WRITE_BYTES`] while each flow can have a CPU, then
/// shared out, down to iperf3's 128 KiB. The write buffer is the flow's
/// one allocation; 1 000 flows of 1 MiB each would hold 1 GiB.
fn bulk_write_bytes(flows: usize, cores: usize) -> usize {
    const FLOOR: usize = 128 << 10;
    if flows <= cores.max(1) {
        return TCP_WRITE_BYTES;
    }
    (TCP_WRITE_BYTES * cores.max(1) / flows).clamp(FLOOR, TCP_WRITE_BYTES)
}

/// Longest a `--max` TCP flow's `write` may block (SO_SNDTIMEO) before
/// the flow looks at its stop flags and clock again; in its last slice the
/// timeout is what is left of the run, so the flow stops on time.
const BULK_WRITE_SLICE_NS: u64 = 50_000_000;

/// The records of a `--max` TCP flow's write buffer: offsets, and which
/// have been handed to the kernel.
struct BulkBatch {
    /// Record i occupies `starts[i]..starts[i + 1]` of the buffer.
    starts: Vec<usize>,
    /// Transmit time (CLOCK_REALTIME) stamped into each record.
    tx: Vec<u64>,
    /// Records in the buffer.
    n: usize,
    /// Records wholly handed to the kernel.
    done: usize,
    /// Bytes handed to the kernel.
    off: usize,
}

impl BulkBatch {
    fn new(records: usize) -> BulkBatch {
        BulkBatch {
            starts: vec![0; records + 1],
            tx: vec![0; records],
            n: 0,
            done: 0,
            off: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.done == self.n
    }

    fn end(&self) -> usize {
        self.starts[self.n]
    }

    /// First record of which no byte has been written: from it on, the
    /// records can still be stamped with the time of the write that
    /// starts them.
    fn unbegun(&self) -> usize {
        if self.done < self.n && self.starts[self.done] < self.off {
            self.done + 1
        } else {
            self.done
        }
    }
}

/// A `--max` TCP flow: writes whole records as fast as the socket takes
/// them until the run's time is up, and stops then, on the session's
/// clock, whatever the path's speed. Each write may block at most
/// [`BULK_WRITE_SLICE_NS`] (less at the end): a write of the whole
/// buffer blocked on a path shared by 60 flows once held a flow for
/// 0.5 s past its end, or recorded every record of a run at its start.
/// A record counts as sent when its last byte is accepted, at that time;
/// records not yet begun carry the time of the write that begins them
/// (a partial write leaves the rest for the next one, which restamps
/// it). When the time is up, records not begun are not part of the run
/// (a timed `--max` flow has no schedule they were due on), and a record
/// begun but not finished ends truncated by the close: the receiver
/// drops an incomplete record, and neither side counts it.
///
/// `ran` gets the writer's first write and its stop (CLOCK_MONOTONIC).
fn tcp_bulk(
    job: &FlowJob,
    s: &TcpStream,
    sched: &mut Schedule,
    acc: &mut SendRec,
    first_tx: &mut u64,
    ran: &mut (u64, u64),
) -> FlowEnd {
    let mut w = BulkWriter::new(job, sched);
    let mut timeout_ns = 0;
    wait_until(job.t0);
    w.pending = sched.next(mono_ns());
    let r = loop {
        if let Some(h) = job.halted() {
            break Ok(Some(h));
        }
        let now = mono_ns();
        // The timeout changes only in the run's last slice.
        let left = sched.end_at.map_or(u64::MAX, |e| e.saturating_sub(now));
        let want = BULK_WRITE_SLICE_NS.min(left).max(1_000_000);
        if want != timeout_ns {
            let _ = s.set_write_timeout(Some(Duration::from_nanos(want)));
            timeout_ns = want;
        }
        match w.write_once(job, s, sched, acc, now) {
            Ok(true) => {}
            Ok(false) => break Ok(None),
            Err(e) => break Err(e),
        }
    };
    *first_tx = w.first_tx;
    *ran = w.ran(sched, mono_ns());
    r
}

/// One bulk TCP flow's writing between writes: the write buffer of
/// records, which of them the kernel has, and the schedule's next record.
struct BulkWriter {
    buf: Vec<u8>,
    meta: Vec<(u64, u32)>,
    b: BulkBatch,
    h: ProbeHeader,
    /// Sequence number of the buffer's first record.
    seq: u32,
    pending: Option<(u64, u32)>,
    first_tx: u64,
    /// CLOCK_MONOTONIC of the first write (0: none yet).
    began: u64,
}

impl BulkWriter {
    fn new(job: &FlowJob, sched: &Schedule) -> BulkWriter {
        let max_len = sched.max_len as usize;
        let cap = job.tcp_write.max(max_len);
        let mut buf = vec![0u8; cap];
        job.plan.spec.payload.fill(&mut buf, job.plan.seed);
        let records = (cap / max_len.max(1)).max(1);
        BulkWriter {
            buf,
            meta: vec![(0, 0); records],
            b: BulkBatch::new(records),
            h: header(job),
            seq: 0,
            pending: None,
            first_tx: 0,
            began: 0,
        }
    }

    /// The writer's span for [`writer_span`]: from the schedule's start
    /// (or its first write, if earlier) to `stopped`, the end at the
    /// latest.
    fn ran(&self, sched: &Schedule, stopped: u64) -> (u64, u64) {
        (
            self.began.min(sched.start_at),
            sched.end_at.map_or(stopped, |e| stopped.min(e)),
        )
    }

    /// One write of what the buffer holds, refilled from the schedule when
    /// it is empty. Ok(false) when the flow's time is up or its records
    /// are out; a write the socket refuses for now (full buffer, timeout)
    /// is Ok(true) with nothing written.
    fn write_once(
        &mut self,
        job: &FlowJob,
        s: &TcpStream,
        sched: &mut Schedule,
        acc: &mut SendRec,
        now: u64,
    ) -> Result<bool, String> {
        if sched.time_up(now) {
            return Ok(false);
        }
        let b = &mut self.b;
        if b.is_empty() {
            if self.pending.is_none() {
                return Ok(false);
            }
            self.seq = self.seq.wrapping_add(b.n as u32);
            let room = self.meta.len();
            let n = gather(
                sched,
                &mut self.pending,
                now,
                acc,
                &mut self.meta,
                room,
                self.seq,
            );
            let mut o = 0;
            for (i, &(_, size)) in self.meta[..n].iter().enumerate() {
                self.h.len = size as u16;
                self.h.seq = self.seq.wrapping_add(i as u32);
                b.starts[i] = o;
                let _ = self.h.encode(&mut self.buf[o..o + size as usize]);
                o += size as usize;
            }
            b.starts[n] = o;
            (b.n, b.done, b.off) = (n, 0, 0);
            if n == 0 {
                return Ok(true);
            }
        }
        let tx = realtime_ns();
        if self.first_tx == 0 {
            self.first_tx = tx;
            self.began = now;
        }
        for i in b.unbegun()..b.n {
            let rec = &mut self.buf[b.starts[i]..b.starts[i + 1]];
            ProbeHeader::stamp_tx(rec, tx);
            if let Some(k) = &job.probe_key {
                k.sign(rec);
            }
            b.tx[i] = tx;
        }
        let mut out = s;
        match out.write(&self.buf[b.off..b.end()]) {
            Ok(0) => Err("TCP data connection closed by the receiver".into()),
            Ok(k) => {
                b.off += k;
                let at = mono_ns();
                while b.done < b.n && b.starts[b.done + 1] <= b.off {
                    let size = self.meta[b.done].1;
                    let sq = self.seq.wrapping_add(b.done as u32);
                    acc.record_sent(at, at, size, sq, b.tx[b.done]);
                    b.done += 1;
                }
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(true)
            }
            Err(e) => Err(format!("TCP data connection failed: {e}")),
        }
    }
}

/// One bulk TCP flow on a shared writer ([`run_bulk_shared`]).
struct SharedBulk {
    idx: usize,
    job: FlowJob,
    s: TcpStream,
    sched: Schedule,
    acc: SendRec,
    w: BulkWriter,
    /// How the flow ended (None while it runs) and when.
    end: Option<FlowEnd>,
    stopped: u64,
}

/// Bulk TCP flows more than the CPUs, served by one writer thread per CPU
/// in rounds, as iperf3 serves its streams: the writer waits until some
/// of its flows' sockets have room (`poll`), then gives each of those one
/// write of up to [`bulk_write_bytes`], and again, until each flow's time
/// is up. With a thread per flow, 256 flows on 2 CPUs shared a 1 Gbit/s
/// link with a Jain index of 0.35 (some flows read 0) where iperf3 -P
/// read 1.00: the threads that the scheduler ran kept the link. The
/// sockets are non-blocking; a flow's records, stamps, stop and send
/// span are those of [`tcp_bulk`].
fn run_bulk_shared(jobs: Vec<(usize, FlowJob, TcpStream)>) -> Vec<(usize, FlowSent)> {
    let mut done = Vec::with_capacity(jobs.len());
    let mut flows = Vec::with_capacity(jobs.len());
    for (idx, mut job, s) in jobs {
        let sched = match Schedule::new(&job.plan, job.t0, job.min_len()) {
            Ok(x) => x,
            Err(e) => {
                done.push((idx, FlowSent::failed(&e)));
                continue;
            }
        };
        if let Err(e) = s.set_nonblocking(true) {
            done.push((idx, FlowSent::failed(&format!("TCP data connection: {e}"))));
            continue;
        }
        let acc = SendRec::new(job.cfg, job.log.take(), job.flow_id);
        let w = BulkWriter::new(&job, &sched);
        flows.push(SharedBulk {
            idx,
            job,
            s,
            sched,
            acc,
            w,
            end: None,
            stopped: 0,
        });
    }
    if let Some(t0) = flows.iter().map(|f| f.job.t0).min() {
        wait_until(t0);
    }
    let now = mono_ns();
    for f in &mut flows {
        f.w.pending = f.sched.next(now);
    }
    let mut pfds = Vec::with_capacity(flows.len());
    let mut live = Vec::with_capacity(flows.len());
    loop {
        let now = mono_ns();
        let halt = flows.first().and_then(|f| f.job.halted());
        pfds.clear();
        live.clear();
        let mut next_end = BULK_WRITE_SLICE_NS;
        for (k, f) in flows.iter_mut().enumerate() {
            if f.end.is_some() {
                continue;
            }
            if halt.is_some() || f.sched.time_up(now) {
                f.end = Some(Ok(halt));
                f.stopped = now;
                continue;
            }
            if let Some(e) = f.sched.end_at {
                next_end = next_end.min(e - now);
            }
            pfds.push(crate::net::pollfd(f.s.as_raw_fd(), crate::net::POLLOUT));
            live.push(k);
        }
        if live.is_empty() {
            break;
        }
        let timeout_ms = next_end.div_ceil(1_000_000).max(1) as i32;
        if crate::net::poll(&mut pfds, timeout_ms) <= 0 {
            continue;
        }
        let now = mono_ns();
        for (j, &k) in live.iter().enumerate() {
            if pfds[j].revents == 0 {
                continue;
            }
            let f = &mut flows[k];
            let r = f.w.write_once(&f.job, &f.s, &mut f.sched, &mut f.acc, now);
            match r {
                Ok(true) => {}
                Ok(false) => f.end = Some(Ok(None)),
                Err(e) => f.end = Some(Err(e)),
            }
            if f.end.is_some() {
                f.stopped = mono_ns();
            }
        }
    }
    for f in flows {
        let mut send = f.acc.summary(&f.sched);
        writer_span(&mut send, f.w.ran(&f.sched, f.stopped), f.job.cfg);
        let end = f.end.unwrap_or(Ok(None));
        done.push((
            f.idx,
            FlowSent {
                tcp: Some(sys::tcp_info(&f.s).unwrap_or_default()),
                tcp_cc: crate::sockopt::tcp_cc(&f.s),
                ..FlowSent::ran(f.w.first_tx, send, None, end)
            },
        ));
    }
    done
}

/// A bulk TCP flow's send span is the time its writer ran on the
/// session's clock (`ran`: its schedule's start, and its stop, no later
/// than its end), as iperf3 counts a stream's seconds: a flow that the
/// path held back for its last second still ran for the whole run, and a
/// thread the host scheduled late still started with the others. Spans
/// of accepted records would say otherwise: with 60 flows sharing
/// 1 Gbit/s, whole writes were accepted late or all at once, and flows of
/// a 5 s run read 0 to 6.4 s. No write takes bytes after the end (its
/// timeout ends there, to the kernel's timer tick), so the end bounds the
/// span.
fn writer_span(send: &mut SendSummary, ran: (u64, u64), cfg: FlowConfig) {
    let (began, stopped) = ran;
    if send.packets == 0 || began == 0 || stopped <= began {
        return;
    }
    let d = (stopped - began) as f64 / 1e9;
    let lb = wirebench_stats::tcp_stream(send.bytes, cfg.mtu, cfg.ip);
    let bps = |b: u64| b as f64 * 8.0 / d;
    send.duration_s = d;
    send.rate_pps = send.packets as f64 / d;
    send.throughput_bps = wirebench_stats::Throughput {
        payload: bps(lb.payload),
        ip: bps(lb.ip),
        ethernet: bps(lb.ethernet),
        wire: bps(lb.wire),
    };
}

/// Most bytes of records per write of a paced TCP flow: a write blocked
/// on a full socket buffer waits for this much room, 5 ms at 100 Mbit/s.
const PACED_TCP_WRITE_BYTES: usize = 64 << 10;

fn tcp_send(
    job: &FlowJob,
    s: &TcpStream,
    sched: &mut Schedule,
    acc: &mut SendRec,
    first_tx: &mut u64,
) -> FlowEnd {
    let mut out = s;
    // One write carries as many whole records as fit in TCP_WRITE_BYTES,
    // whatever their size: with a 64-record cap, 512 B records went out
    // 32 KiB per write and goodput was 0.85x iperf3's (128 KiB writes);
    // see docs/performance.md. Both buffers are allocated once per flow.
    let max_len = sched.max_len as usize;
    let cap = TCP_WRITE_BYTES.max(max_len);
    let mut buf = vec![0u8; cap];
    // The stream cycles through the content; each record's header is
    // written over it.
    job.plan.spec.payload.fill(&mut buf, job.plan.seed);
    let mut h = header(job);
    let mut seq: u32 = 0;
    let mut meta = vec![(0u64, 0u32); (cap / max_len.max(1)).max(1)];
    wait_until(job.t0);
    let mut pending = sched.next(mono_ns());
    while pending.is_some() {
        if let Some(h) = job.halted() {
            return Ok(Some(h));
        }
        let (at, _) = pending.unwrap_or_default();
        let now = if sched.max {
            mono_ns()
        } else {
            match wait_or_halt(job, at) {
                Ok(t) => t,
                Err(h) => return Ok(Some(h)),
            }
        };
        // A paced flow behind its schedule writes its backlog in pieces, so
        // a write blocked on a slow path ends soon after the run does.
        let room = if sched.max {
            meta.len()
        } else {
            meta.len()
                .min((PACED_TCP_WRITE_BYTES / max_len.max(1)).max(1))
        };
        let n = gather(sched, &mut pending, now, acc, &mut meta, room, seq);
        if n == 0 {
            continue;
        }
        let tx = realtime_ns();
        if *first_tx == 0 {
            *first_tx = tx;
        }
        let mut off = 0;
        for (i, &(_, size)) in meta[..n].iter().enumerate() {
            h.len = size as u16;
            h.seq = seq.wrapping_add(i as u32);
            h.tx_ns = tx;
            let rec = &mut buf[off..off + size as usize];
            let _ = h.encode(rec);
            if let Some(k) = &job.probe_key {
                k.sign(rec);
            }
            off += size as usize;
        }
        let actual = mono_ns();
        if let Err(e) = out.write_all(&buf[..off]) {
            for &(at, size) in &meta[..n] {
                acc.record_not_sent(1, at, seq, size);
            }
            return Err(format!("TCP data connection failed: {e}"));
        }
        for (j, &(at, size)) in meta[..n].iter().enumerate() {
            let sq = seq.wrapping_add(j as u32);
            acc.record_sent(if sched.max { actual } else { at }, actual, size, sq, tx);
        }
        seq = seq.wrapping_add(n as u32);
    }
    let _ = out.flush();
    Ok(None)
}

/// Where a flow on a shared pacer sends from.
enum Out {
    /// The flow's own connected socket: a flow with socket options
    /// (`-sp`, `--bind`, `--bind-dev`, marking, TTL, flow label, `-w`)
    /// keeps a socket of its own, as with a thread per flow.
    Own(UdpSocket),
    /// The pacer's unconnected socket, to this address (the receiver's
    /// data port of the flow): packets of several flows due together then
    /// leave in one `sendmmsg`.
    Shared(SockAddr),
}

/// One paced UDP flow on a shared pacer thread ([`run_shared`]).
struct SharedFlow {
    /// Position in the plan.
    idx: usize,
    out: Out,
    sched: Schedule,
    acc: SendRec,
    h: ProbeHeader,
    seq: u32,
    /// The next packet (scheduled time, size); None when the flow is done.
    pending: Option<(u64, u32)>,
    first_tx: u64,
    refused: u64,
    error: Option<String>,
    /// `--auth probes`: the session's probe key.
    key: Option<ProbeKey>,
}

/// One packet of a [`run_shared`] round on the pacer's socket: its flow
/// (index into the pacer's flows), scheduled time, size and sequence
/// number.
#[derive(Clone, Copy, Default)]
struct Msg {
    flow: usize,
    at: u64,
    size: u32,
    seq: u32,
}

/// Send buffer of the pacer's own socket per flow sharing it: as much as
/// a flow with a socket of its own gets, up to 64 MiB for the pacer.
const SHARED_SNDBUF_PER_FLOW: usize = 4 << 20;
const SHARED_SNDBUF_MAX: usize = 64 << 20;

/// Which flows of a pacer send from its one unconnected socket: those
/// without socket options of their own, so that what leaves is the same
/// as from a socket per flow but for the source port. Returns the socket
/// (None: no flow qualifies, or the system refused one; every flow then
/// keeps its own) and each flow's way out. `given`: the pacer's socket,
/// bound before `Hello` declared its port for the flows that share it
/// ([`pacer_sockets`]); None: one is made here.
fn share_socket(
    jobs: Vec<(usize, FlowJob, UdpSocket)>,
    given: Option<UdpSocket>,
) -> (Option<UdpSocket>, Vec<(usize, FlowJob, Out)>) {
    let shareable = |job: &FlowJob, sock: &UdpSocket| {
        if job.plan.opts.is_default() {
            sock.peer_addr().ok()
        } else {
            None
        }
    };
    let first = jobs.iter().find_map(|(_, j, s)| shareable(j, s));
    let n = jobs
        .iter()
        .filter(|(_, j, s)| shareable(j, s).is_some())
        .count();
    let shared = first.and_then(|to| {
        let s = match given {
            Some(s) => s,
            None => Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))
                .ok()?
                .into(),
        };
        set_sndbuf(
            s.as_raw_fd(),
            (SHARED_SNDBUF_PER_FLOW * n).min(SHARED_SNDBUF_MAX),
        );
        Some((s, to.is_ipv4()))
    });
    let outs = jobs
        .into_iter()
        .map(|(idx, job, sock)| {
            let out = match (&shared, shareable(&job, &sock)) {
                // One socket, one address family.
                (Some((_, v4)), Some(to)) if to.is_ipv4() == *v4 => Out::Shared(to.into()),
                _ => Out::Own(sock),
            };
            (idx, job, out)
        })
        .collect();
    (shared.map(|(s, _)| s), outs)
}

/// Paces many UDP flows on one thread: a heap of next-departure times
/// picks the flows due first; the pacer sleeps (then spins `spin_ns`)
/// until the earliest deadline and sends every packet due by then, of
/// every flow, in one round: those of flows on the pacer's socket
/// ([`share_socket`]) in one `sendmmsg` of up to [`BATCH`] packets with a
/// destination each, a flow with a socket of its own in one `sendmmsg` on
/// it. On loopback a send costs 4–6 µs per packet, most of it the
/// receive path the kernel runs inside the call; one call for the packets
/// of several flows costs less per packet, and a pacer that fell behind
/// (a late wake-up) sends its backlog in a few calls instead of one per
/// flow. A thread per flow stops scaling once the flows outnumber the
/// cores (the threads take turns waking each other late, and each costs a
/// stack); a pacer keeps every flow's absolute schedule with one wake-up
/// per deadline. Per flow it keeps only the schedule, the accumulators
/// and the destination (or socket); the send buffers are the pacer's.
fn run_shared(
    jobs: Vec<(usize, FlowJob, UdpSocket)>,
    spin_ns: u64,
    sock: Option<UdpSocket>,
) -> Vec<(usize, FlowSent)> {
    tighten_timer_slack();
    raise_priority();
    let mut done = Vec::new();
    let mut flows = Vec::with_capacity(jobs.len());
    let mut ctl = None;
    let mut max_len = MIN_PAYLOAD;
    // One buffer serves the pacer's flows: the first flow's content
    // (every flow of a command line has the same `--payload`).
    let content = jobs.first().map(|(_, j, _)| j.plan.clone());
    let wall_minus_mono = i128::from(realtime_ns()) - i128::from(mono_ns());
    let (shared, jobs) = share_socket(jobs, sock);
    for (idx, mut job, out) in jobs {
        match Schedule::new(&job.plan, job.t0, job.min_len()) {
            Ok(sched) => {
                max_len = max_len.max(sched.max_len);
                ctl.get_or_insert((job.abort.clone(), job.cancel, job.t0));
                flows.push(SharedFlow {
                    idx,
                    out,
                    sched,
                    acc: SendRec {
                        acc: SendAccumulator::new(job.cfg),
                        log: job.log.take(),
                        flow: job.flow_id,
                        wall_minus_mono,
                    },
                    h: header(&job),
                    seq: 0,
                    pending: None,
                    first_tx: 0,
                    refused: 0,
                    error: None,
                    key: job.probe_key.clone(),
                });
            }
            Err(e) => done.push((idx, FlowSent::failed(&e))),
        }
    }
    let Some((abort, cancel, t0)) = ctl else {
        return done;
    };
    // Send buffers: one for flows with a socket of their own, one for the
    // pacer's socket.
    let mut batch = SendBatch::new(max_len as usize);
    let mut multi = SendBatch::new(max_len as usize);
    if let Some(p) = &content {
        fill_payload(&mut batch, p);
        fill_payload(&mut multi, p);
    }
    let mut meta = [(0u64, 0u32); BATCH];
    let mut msgs = [Msg::default(); BATCH];
    // Flows taken off the heap in a round (allocated once: no flow is
    // taken twice in a round).
    let mut popped: Vec<usize> = Vec::with_capacity(flows.len());
    let mut heap = BinaryHeap::with_capacity(flows.len());
    for (k, f) in flows.iter_mut().enumerate() {
        f.pending = f.sched.next(t0);
        if let Some((at, _)) = f.pending {
            heap.push(Reverse((at, k)));
        }
    }
    let mut halt = None;
    while let Some(&Reverse((at, _))) = heap.peek() {
        let now = match wait_or_stop(&abort, cancel, at, spin_ns) {
            Ok(t) => t,
            Err(h) => {
                halt = Some(h);
                break;
            }
        };
        // Every flow due by now, earliest first, while the batch has room.
        let mut m = 0;
        popped.clear();
        while m < BATCH {
            let Some(&Reverse((at, k))) = heap.peek() else {
                break;
            };
            if at > now {
                break;
            }
            heap.pop();
            popped.push(k);
            let f = &mut flows[k];
            let own = match &f.out {
                Out::Own(s) => Some(s.as_raw_fd()),
                Out::Shared(_) => None,
            };
            let room = if own.is_some() { BATCH } else { BATCH - m };
            let n = gather(
                &mut f.sched,
                &mut f.pending,
                now,
                &mut f.acc,
                &mut meta,
                room,
                f.seq,
            );
            match own {
                Some(fd) if n > 0 => {
                    let mut out = UdpOut {
                        fd,
                        h: &mut f.h,
                        seq: &mut f.seq,
                        first_tx: &mut f.first_tx,
                        refused: &mut f.refused,
                        key: f.key.as_ref(),
                    };
                    out.send(&mut batch, &meta[..n], &mut f.acc, false);
                }
                Some(_) => {}
                None => {
                    for (j, &(at, size)) in meta[..n].iter().enumerate() {
                        msgs[m + j] = Msg {
                            flow: k,
                            at,
                            size,
                            seq: f.seq.wrapping_add(j as u32),
                        };
                    }
                    f.seq = f.seq.wrapping_add(n as u32);
                    m += n;
                }
            }
        }
        if let (Some(s), true) = (&shared, m > 0) {
            send_round(s.as_raw_fd(), &mut multi, &mut msgs[..m], &mut flows);
        }
        for &k in &popped {
            let f = &mut flows[k];
            // Every send refused for a long stretch: the receiver's port is
            // gone. Only a flow's own connected socket learns of it: the
            // pacer's unconnected socket is not told of ICMP port-unreachable
            // (no IP_RECVERR), so a shared flow's lost port shows as loss.
            if f.refused > 1000 && f.acc.packets() == 0 {
                f.error = Some("receiver refuses the data port".into());
                f.pending = None;
            }
            if let Some((at, _)) = f.pending {
                heap.push(Reverse((at, k)));
            }
        }
    }
    for f in flows {
        // Flows that had finished before a halt are complete.
        let end = match (f.error, halt.filter(|_| f.pending.is_some())) {
            (Some(e), _) => Err(e),
            (None, h) => Ok(h),
        };
        done.push((
            f.idx,
            FlowSent::ran(f.first_tx, f.acc.summary(&f.sched), None, end),
        ));
    }
    done
}

/// Sends a round's packets of several flows on the pacer's socket, each to
/// its flow's address, as [`UdpOut::send`] does for one flow: one transmit
/// time stamped just before the call (so the one-way delay includes the
/// wait inside the call), the send time of each packet interpolated over
/// the call (its schedule error); a packet the kernel refuses is its
/// flow's `not_sent`, and that flow's later packets are renumbered so
/// that the receiver sees no gap for it.
fn send_round(fd: RawFd, batch: &mut SendBatch, msgs: &mut [Msg], flows: &mut [SharedFlow]) {
    for (i, m) in msgs.iter().enumerate() {
        let f = &mut flows[m.flow];
        f.h.len = m.size as u16;
        f.h.seq = m.seq;
        let _ = f.h.encode(batch.slot(i, m.size as usize));
        if let Out::Shared(to) = &f.out {
            batch.set_dest(i, Some(to));
        }
    }
    let tx = realtime_ns();
    for (i, m) in msgs.iter().enumerate() {
        let f = &mut flows[m.flow];
        if f.first_tx == 0 {
            f.first_tx = tx;
        }
        let slot = batch.slot(i, m.size as usize);
        ProbeHeader::stamp_tx(slot, tx);
        if let Some(k) = &f.key {
            k.sign(slot);
        }
    }
    // The kernel takes a call's packets one after another (on loopback
    // 3-6 us each, the receive path included): packet j of k is taken to
    // leave j/k of the call's duration after its start, so that a packet
    // at the end of a long batch is not credited with the batch's start.
    let mut call = mono_ns();
    let n = msgs.len();
    let mut i = 0;
    while i < n {
        let r = batch.send(fd, i, n);
        let back = mono_ns();
        match r {
            Ok(k) => {
                let took = back.saturating_sub(call);
                for (j, m) in msgs[i..i + k].iter().enumerate() {
                    let actual = call + took * j as u64 / k as u64;
                    flows[m.flow]
                        .acc
                        .record_sent(m.at, actual, m.size, m.seq, tx);
                }
                i += k;
                call = back;
            }
            Err(e) => {
                call = back;
                let m = msgs[i];
                let f = &mut flows[m.flow];
                f.acc.record_not_sent(1, m.at, m.seq, m.size);
                if e.kind() == ErrorKind::ConnectionRefused {
                    f.refused += 1;
                }
                f.seq = f.seq.wrapping_sub(1);
                for (j, later) in msgs.iter_mut().enumerate().skip(i + 1) {
                    if later.flow == m.flow {
                        later.seq = later.seq.wrapping_sub(1);
                        let slot = batch.slot(j, later.size as usize);
                        ProbeHeader::stamp_seq(slot, later.seq);
                        if let Some(k) = &f.key {
                            k.sign(slot);
                        }
                    }
                }
                i += 1;
                if e.kind() == ErrorKind::WouldBlock {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// What every flow of a session shares.
pub(crate) struct Launch {
    pub session: u32,
    pub ip: IpVersion,
    pub mtu: u32,
    /// CLOCK_MONOTONIC start of the schedule.
    pub t0: u64,
    /// Set when the receiver is gone: every flow stops.
    pub abort: Arc<AtomicBool>,
    /// `--auth probes`: the session's probe key.
    pub probe_key: Option<ProbeKey>,
    /// The shared pacers' sockets ([`pacer_sockets`]), pacer by pacer.
    pub pacer_socks: Vec<UdpSocket>,
}

/// The sockets the shared pacers of `plan` send from, bound before
/// `Hello` so that it declares, for each flow, the port its probes leave
/// from ([`source_port`]). Empty when every flow has a thread of its own.
pub(crate) fn pacer_sockets(
    plan: &SessionPlan,
    dst: IpAddr,
) -> Result<Vec<UdpSocket>, EngineError> {
    let any: IpAddr = if dst.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    (0..pacers(plan))
        .map(|_| {
            UdpSocket::bind(SocketAddr::new(any, 0)).map_err(|e| EngineError::io("data socket", e))
        })
        .collect()
}

/// The source port flow `i` of `plan` sends from: its pacer's socket's
/// when it shares one ([`share_socket`]), else its own (`own`).
pub(crate) fn source_port(
    plan: &SessionPlan,
    i: usize,
    own: u16,
    pacer_socks: &[UdpSocket],
) -> u16 {
    let shares = plan
        .flows
        .get(i)
        .is_some_and(|f| shared_candidate(plan, f) && f.opts.is_default());
    match pacer_socks.get(i % pacer_socks.len().max(1)) {
        Some(s) if shares => s.local_addr().map_or(own, |a| a.port()),
        _ => own,
    }
}

/// Paced one-way UDP flows can share pacer threads; TCP (blocking
/// writes), --max (never waits) and RTT flows (reflection readers) keep a
/// thread each.
fn shared_candidate(plan: &SessionPlan, f: &FlowPlan) -> bool {
    f.direction == wirebench_wire::Direction::Forward
        && f.transport == Transport::Udp
        && !f.spec.is_max()
        && f.meter_in(plan) == MeterMode::Owd
}

/// Shared pacer threads of `plan` on this host.
fn pacers(plan: &SessionPlan) -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let candidates = plan
        .flows
        .iter()
        .filter(|f| shared_candidate(plan, f))
        .count();
    pacer_threads(plan.pacing, candidates, cores)
}

/// Runs every flow of the plan on its own socket (in plan order) and
/// returns what each sent, once all have finished. A flow without a socket
/// (a reverse flow: the receiver sends it) is not run here; its slot says
/// "flow never ran" for the caller to replace.
pub(crate) fn run_flows(
    plan: &SessionPlan,
    socks: Vec<Option<DataSock>>,
    launch: Launch,
) -> Result<Vec<FlowSent>, EngineError> {
    let Launch {
        session,
        ip,
        mtu,
        t0,
        abort,
        probe_key,
        pacer_socks,
    } = launch;
    // Spin before deadlines only while every paced flow can have a core.
    let forward = |f: &FlowPlan| f.direction == wirebench_wire::Direction::Forward;
    let paced = plan
        .flows
        .iter()
        .filter(|f| forward(f) && !f.spec.is_max())
        .count();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let candidate = |f: &FlowPlan| shared_candidate(plan, f);
    let candidates = plan.flows.iter().filter(|f| candidate(f)).count();
    let bulk_tcp = plan
        .flows
        .iter()
        .filter(|f| forward(f) && f.transport == Transport::Tcp && f.spec.is_max())
        .count();
    let tcp_write = bulk_write_bytes(bulk_tcp, cores);
    // Bulk TCP flows more than the CPUs share one writer thread per CPU
    // (run_bulk_shared); RTT-meter flows keep a thread for reflections.
    let writers = if bulk_tcp > cores { cores } else { 0 };
    let shared_bulk = |f: &FlowPlan| {
        writers > 0
            && forward(f)
            && f.transport == Transport::Tcp
            && f.spec.is_max()
            && f.meter_in(plan) == MeterMode::Owd
    };
    let mut bulk_groups: Vec<Vec<(usize, FlowJob, TcpStream)>> =
        (0..writers).map(|_| Vec::new()).collect();
    let pacers = pacers(plan);
    let shared = if pacers > 0 { candidates } else { 0 };
    // Spin before deadlines only while every pacing thread can have a core.
    let spin_ns = if pacers + (paced - shared) < cores {
        crate::clock::SPIN_NS
    } else {
        0
    };
    let sink = match &plan.log {
        None => None,
        Some(path) => {
            let sink = LogSink::create(path)
                .map_err(|e| EngineError::BadPlan(format!("-l {}: {e}", path.display())))?;
            sink.start(send_log_meta(plan, session, ip, mtu));
            Some(sink)
        }
    };
    let mut groups: Vec<Vec<(usize, FlowJob, UdpSocket)>> =
        (0..pacers).map(|_| Vec::new()).collect();
    let mut handles = Vec::new();
    for (i, (f, sock)) in plan.flows.iter().cloned().zip(socks).enumerate() {
        let Some(sock) = sock else { continue };
        let cfg = FlowConfig {
            transport: f.transport,
            ip,
            mtu,
            interval_ns: plan.interval_ms.map(|m| m * 1_000_000),
        };
        let rtt = f.meter_in(plan) == MeterMode::Rtt;
        let job = FlowJob {
            plan: f,
            flow_id: (i + 1) as u16,
            session,
            rtt,
            t0: t0 + start_phase_ns(plan, i),
            cfg,
            abort: abort.clone(),
            cancel: plan.cancel,
            spin_ns,
            paced,
            tcp_write,
            log: sink.as_ref().map(|k| k.producer()),
            probe_key: probe_key.clone(),
        };
        let sock = match sock {
            DataSock::Udp(s) if pacers > 0 && candidate(&job.plan) => {
                groups[i % pacers].push((i, job, s));
                continue;
            }
            DataSock::Tcp(s) if shared_bulk(&job.plan) => {
                bulk_groups[i % writers].push((i, job, s));
                continue;
            }
            other => other,
        };
        match std::thread::Builder::new()
            .name(format!("wb-tx-{}", i + 1))
            .spawn(move || run_flow(job, sock))
        {
            Ok(h) => handles.push((i, h)),
            Err(e) => {
                // Stop what already runs before giving up.
                abort.store(true, Ordering::Relaxed);
                for (_, h) in handles {
                    let _ = h.join();
                }
                return Err(EngineError::io("flow thread", e));
            }
        }
    }
    // Threads that serve a group of flows: the shared pacers and the
    // shared bulk TCP writers.
    type GroupRun = Box<dyn FnOnce() -> Vec<(usize, FlowSent)> + Send>;
    let mut group_runs: Vec<(String, Vec<usize>, GroupRun)> = Vec::new();
    let mut pacer_socks = pacer_socks.into_iter();
    for (g, group) in groups.into_iter().enumerate() {
        let ids = group.iter().map(|(i, _, _)| *i).collect();
        let sock = pacer_socks.next();
        let run: GroupRun = Box::new(move || run_shared(group, spin_ns, sock));
        group_runs.push((format!("wb-pacer-{g}"), ids, run));
    }
    for (g, group) in bulk_groups.into_iter().enumerate() {
        let ids = group.iter().map(|(i, _, _)| *i).collect();
        let run: GroupRun = Box::new(move || run_bulk_shared(group));
        group_runs.push((format!("wb-tcpw-{g}"), ids, run));
    }
    let mut pacer_handles = Vec::new();
    for (name, ids, run) in group_runs {
        match std::thread::Builder::new().name(name).spawn(run) {
            Ok(h) => pacer_handles.push((ids, h)),
            Err(e) => {
                abort.store(true, Ordering::Relaxed);
                for (_, h) in handles {
                    let _ = h.join();
                }
                for (_, h) in pacer_handles {
                    let _ = h.join();
                }
                return Err(EngineError::io("pacer or TCP writer thread", e));
            }
        }
    }
    let mut slots: Vec<Option<FlowSent>> = (0..plan.flows.len()).map(|_| None).collect();
    for (i, h) in handles {
        slots[i] = Some(
            h.join()
                .unwrap_or_else(|_| FlowSent::failed("flow thread panicked")),
        );
    }
    for (ids, h) in pacer_handles {
        match h.join() {
            Ok(sent) => {
                for (i, o) in sent {
                    slots[i] = Some(o);
                }
            }
            Err(_) => {
                for i in ids {
                    slots[i] = Some(FlowSent::failed("pacer or TCP writer thread panicked"));
                }
            }
        }
    }
    let outcomes: Vec<FlowSent> = slots
        .into_iter()
        .map(|o| o.unwrap_or_else(|| FlowSent::failed("flow never ran")))
        .collect();
    if let Some(sink) = sink {
        // Every producer went with its flow thread: the log is complete.
        let footer = LogFooter {
            flows: outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| wirebench_pktlog::FlowEnd {
                    id: (i + 1) as u16,
                    sent: Some(o.send.packets),
                    not_sent: o.send.not_sent,
                })
                .collect(),
            partial: outcomes.iter().any(|o| o.cancelled || o.error.is_some()),
            ..Default::default()
        };
        if let Err(e) = sink.finish(footer) {
            return Err(EngineError::BadPlan(format!(
                "-l {}: {e}",
                plan.log
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display()
            )));
        }
    }
    Ok(outcomes)
}

/// Share of each mean gap that the start phases leave free (plus the spin
/// window), so that a pacer serving flows of one rate finds a rest in every
/// gap (see [`start_phase_ns`]).
const REST_SHARE: f64 = 0.1;

/// How far after t_0 flow `i` of the plan starts its schedule
/// ([`Phases::Spread`]): i/n of the first part of its mean gap, n the
/// session's flows. With every flow starting at t_0, n flows of one rate
/// fall due at the same instant every gap, and whoever sends them (one
/// pacer, or n threads on fewer cores) sends the last one n sends late
/// (on loopback a send costs the pacer 4-6 µs, the receiver's side
/// included: 1 000 × 100 pps read a schedule-error p99 of 3-4 ms).
///
/// Spread over the whole gap, they fall due one after another, but a
/// pacer then never sleeps: a real-time (`chrt`) pacer that spins through
/// every gap is stopped by the kernel for ~50 ms each second so that
/// ordinary tasks get their 5 % (a p99 of 30-45 ms). So the phases fill
/// the gap only up to [`REST_SHARE`] of it plus the spin window: the rest
/// is a sleep in every gap. Deterministic (the same plan, the same
/// schedule); 0 for a lone flow, `--max` flows (no schedule) and models
/// without a nominal rate. docs/engine.md, Pacing.
pub(crate) fn start_phase_ns(plan: &SessionPlan, i: usize) -> u64 {
    let n = plan.flows.len();
    let Some(f) = plan.flows.get(i) else {
        return 0;
    };
    if n < 2 || plan.phases == Phases::Aligned || f.spec.is_max() {
        return 0;
    }
    match f.spec.nominal_rate_pps() {
        Some(pps) if pps.is_finite() && pps > 0.0 => {
            let gap = 1e9 / pps;
            let rest = gap * REST_SHARE + crate::clock::SPIN_NS as f64;
            // At least half the gap: beside a slow timer (2 ms spin window
            // on Windows) or a fast rate, keep most of the spreading.
            let span = (gap - rest).max(gap / 2.0);
            (span * i as f64 / n as f64) as u64
        }
        _ => 0,
    }
}

/// Shared pacer threads for `candidates` paced one-way UDP flows on
/// `cores` CPUs (0: a thread per flow). Automatically, flows share from as
/// many as the CPUs on, leaving a core to the rest of the host (on
/// loopback: the receiver).
fn pacer_threads(pacing: Pacing, candidates: usize, cores: usize) -> usize {
    match pacing {
        _ if candidates == 0 => 0,
        Pacing::PerFlow => 0,
        Pacing::Shared(n) => n.clamp(1, candidates),
        Pacing::Auto if candidates < cores => 0,
        Pacing::Auto => cores.saturating_sub(1).clamp(1, candidates),
    }
}

/// The header of a sender log: the flows' framing, so `wirebench decode`
/// recomputes what was sent.
fn send_log_meta(plan: &SessionPlan, session: u32, ip: IpVersion, mtu: u32) -> LogMeta {
    LogMeta {
        side: Side::Send,
        meter: plan.meter.as_str().into(),
        session,
        started_at: Some(
            humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        ),
        tool: format!("wirebench {}", env!("CARGO_PKG_VERSION")),
        delay_offset_ns: 0,
        flows: plan
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| FlowMeta {
                id: (i + 1) as u16,
                transport: f.transport.as_str().into(),
                ip_version: if ip == IpVersion::V4 { 4 } else { 6 },
                mtu,
                src: None,
                dst: Some(plan.dest.clone()),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_model::FlowSpec;

    fn flow(pps: f64, size: u32, stop: Stop) -> FlowPlan {
        FlowPlan {
            spec: FlowSpec::constant(pps, size).unwrap(),
            transport: Transport::Udp,
            stop,
            seed: 1,
            opts: Default::default(),
            direction: Default::default(),
            meter: None,
        }
    }

    fn cfg() -> FlowConfig {
        FlowConfig {
            transport: Transport::Udp,
            ip: IpVersion::V4,
            mtu: 1500,
            interval_ns: None,
        }
    }

    /// Flows of one rate start i/n of the gap apart; a lone flow, --max
    /// and `--phases aligned` start at t_0.
    #[test]
    fn flows_start_spread_over_one_mean_gap() {
        let stop = Stop::DurationMs(1000);
        let mut plan = SessionPlan::new(
            "127.0.0.1",
            (0..4).map(|_| flow(1000.0, 64, stop)).collect(),
        );
        let phases: Vec<u64> = (0..4).map(|i| start_phase_ns(&plan, i)).collect();
        // 1 ms gap: the last phase leaves 10 % of the gap and the spin
        // window free.
        #[cfg(target_os = "linux")]
        assert_eq!(phases, [0, 210_000, 420_000, 630_000]);
        // Elsewhere (a wider spin window): over half the gap at least.
        assert!(phases.windows(2).all(|w| w[1] > w[0]));
        assert!((375_000..=630_000).contains(&phases[3]), "{phases:?}");
        plan.phases = Phases::Aligned;
        assert!((0..4).all(|i| start_phase_ns(&plan, i) == 0));
        let lone = SessionPlan::new("127.0.0.1", vec![flow(1000.0, 64, stop)]);
        assert_eq!(start_phase_ns(&lone, 0), 0);
        let mut max = flow(1000.0, 64, stop);
        max.spec = FlowSpec::max_rate(64).unwrap();
        let mixed = SessionPlan::new("127.0.0.1", vec![flow(100.0, 64, stop), max]);
        assert_eq!(start_phase_ns(&mixed, 1), 0);
        // The schedule itself starts at t_0 + phase and keeps its length.
        let t0 = 1_000_000_000;
        let mut s = Schedule::new(&plan.flows[2], t0 + 500_000, MIN_PAYLOAD).unwrap();
        assert_eq!(s.next(t0).map(|(at, _)| at), Some(t0 + 500_000));
    }

    #[test]
    fn paced_udp_flows_share_pacers_from_as_many_as_the_cores() {
        use Pacing::*;
        assert_eq!(pacer_threads(Auto, 1, 2), 0);
        assert_eq!(pacer_threads(Auto, 2, 2), 1);
        assert_eq!(pacer_threads(Auto, 10_000, 2), 1);
        assert_eq!(pacer_threads(Auto, 60, 8), 7);
        assert_eq!(pacer_threads(Auto, 8, 8), 7);
        assert_eq!(pacer_threads(Auto, 0, 8), 0);
        assert_eq!(pacer_threads(PerFlow, 1000, 2), 0);
        assert_eq!(pacer_threads(Shared(4), 2, 8), 2);
        assert_eq!(pacer_threads(Shared(4), 100, 1), 4);
        assert_eq!(pacer_threads(Shared(0), 100, 1), 1);
        assert_eq!(pacer_threads(Shared(4), 0, 8), 0);
    }

    #[test]
    fn schedule_is_absolute_and_stops_exactly() {
        let t0 = 1_000_000_000;
        let mut s = Schedule::new(&flow(1000.0, 100, Stop::Packets(5)), t0, MIN_PAYLOAD).unwrap();
        // However late the caller asks, the times stay on the grid.
        let times: Vec<u64> = std::iter::from_fn(|| s.next(u64::MAX / 2).map(|x| x.0)).collect();
        assert_eq!(
            times,
            (0..5).map(|k| t0 + k * 1_000_000).collect::<Vec<_>>()
        );
        let mut s =
            Schedule::new(&flow(1000.0, 100, Stop::DurationMs(10)), t0, MIN_PAYLOAD).unwrap();
        assert_eq!(std::iter::from_fn(|| s.next(0)).count(), 10);
        // Gap rounded down (333 333 ns): still R × T packets.
        let mut s =
            Schedule::new(&flow(3000.0, 100, Stop::DurationMs(3000)), t0, MIN_PAYLOAD).unwrap();
        assert_eq!(std::iter::from_fn(|| s.next(0)).count(), 9000);
        let mut s =
            Schedule::new(&flow(7.0, 100, Stop::DurationMs(60_000)), t0, MIN_PAYLOAD).unwrap();
        assert_eq!(std::iter::from_fn(|| s.next(0)).count(), 420);
        let mut s = Schedule::new(&flow(1000.0, 300, Stop::KBytes(3)), t0, MIN_PAYLOAD).unwrap();
        let sizes: Vec<u32> = std::iter::from_fn(|| s.next(0).map(|x| x.1)).collect();
        assert_eq!(sizes.iter().map(|&x| x as u64).sum::<u64>(), 3 * 1024);
        assert!(sizes.iter().all(|&x| x >= MIN_PAYLOAD));
    }

    #[test]
    fn clamped_model_draws_are_reported() {
        use wirebench_model::{Dist, IdtModel, SizeModel};
        // Normal IDT mean 0.5 ms, sd 1 ms: about 31 % of the gaps are negative.
        let spec = FlowSpec::new(
            IdtModel::Random(Dist::Normal { mean: 0.5, sd: 1.0 }),
            SizeModel::Constant { bytes: 100 },
        )
        .unwrap();
        let plan = FlowPlan {
            spec,
            transport: Transport::Udp,
            stop: Stop::Packets(1000),
            seed: 7,
            opts: Default::default(),
            direction: Default::default(),
            meter: None,
        };
        let mut s = Schedule::new(&plan, 0, MIN_PAYLOAD).unwrap();
        while s.next(0).is_some() {}
        let acc = rec();
        let n = acc.summary(&s).clamped_draws;
        assert!((200..400).contains(&n), "{n}");
        assert_eq!(n, s.gen.clamps());
        let mut c = Schedule::new(&flow(1000.0, 100, Stop::Packets(10)), 0, MIN_PAYLOAD).unwrap();
        while c.next(0).is_some() {}
        assert_eq!(acc.summary(&c).clamped_draws, 0);
    }

    /// A flow's send accounting, without a log.
    fn rec() -> SendRec {
        SendRec {
            acc: SendAccumulator::new(cfg()),
            log: None,
            flow: 1,
            wall_minus_mono: 0,
        }
    }

    #[test]
    fn gather_batches_due_packets_and_drops_hopeless_ones() {
        let t0 = 10_000_000_000;
        // 1 µs gaps: far below a syscall, so many are due at once.
        let mut s = Schedule::new(&flow(1e6, 100, Stop::Packets(10_000)), t0, MIN_PAYLOAD).unwrap();
        let mut acc = rec();
        let mut meta = [(0u64, 0u32); BATCH];
        let mut pending = s.next(t0);
        let n = gather(
            &mut s,
            &mut pending,
            t0 + 10_000,
            &mut acc,
            &mut meta,
            BATCH,
            0,
        );
        assert_eq!(n, 11, "packets due at t0..=t0+10us");
        assert_eq!(meta[10].0, t0 + 10_000);
        // Nothing due yet: nothing gathered.
        assert_eq!(
            gather(
                &mut s,
                &mut pending,
                t0 + 10_500,
                &mut acc,
                &mut meta,
                BATCH,
                0
            ),
            0
        );
        // A 1000 pps flow whose pacer wakes 1.5 s late: packets due more
        // than 1 s ago are not sent, the rest go out in full batches.
        let mut s =
            Schedule::new(&flow(1000.0, 100, Stop::Packets(2000)), t0, MIN_PAYLOAD).unwrap();
        let mut acc = rec();
        let mut pending = s.next(t0);
        let late = t0 + 1_500_000_000;
        let mut gathered = 0;
        loop {
            let n = gather(&mut s, &mut pending, late, &mut acc, &mut meta, BATCH, 0);
            if n == 0 {
                break;
            }
            assert!(n == BATCH || pending.is_some_and(|p| p.0 > late));
            assert!(meta[..n].iter().all(|m| late - m.0 <= LATE_LIMIT_NS));
            gathered += n;
        }
        assert_eq!(acc.acc.summary().not_sent, 500);
        assert_eq!(gathered, 1001);
    }

    fn job(plan: FlowPlan, flow_id: u16, t0: u64) -> FlowJob {
        FlowJob {
            plan,
            flow_id,
            session: 7,
            rtt: false,
            t0,
            cfg: cfg(),
            abort: Arc::new(AtomicBool::new(false)),
            cancel: None,
            spin_ns: 0,
            paced: 3,
            tcp_write: TCP_WRITE_BYTES,
            log: None,
            probe_key: None,
        }
    }

    /// Reads `n` probes from `rx`: (flow id, seq, source port) each.
    fn read_probes(rx: &UdpSocket, n: usize) -> Vec<(u16, u32, u16)> {
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 2048];
        (0..n)
            .map(|_| {
                let (len, from) = rx.recv_from(&mut buf).unwrap();
                let h = ProbeHeader::decode_datagram(&buf[..len]).unwrap();
                assert_eq!((h.session, usize::from(h.len)), (7, len));
                (h.flow, h.seq, from.port())
            })
            .collect()
    }

    /// On a shared pacer, flows without socket options leave from the
    /// pacer's one socket and a flow with one (here a TTL) from its own;
    /// every flow's probes reach its own port with its id, numbered from 0
    /// without a gap, and are counted as before.
    #[test]
    fn a_pacer_sends_flows_without_options_from_one_socket() {
        let rxs: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let t0 = mono_ns() + 5_000_000;
        let jobs: Vec<(usize, FlowJob, UdpSocket)> = rxs
            .iter()
            .enumerate()
            .map(|(i, rx)| {
                let mut plan = flow(2000.0, 100 + i as u32, Stop::Packets(20));
                if i == 2 {
                    plan.opts.ttl = Some(64);
                }
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.connect(rx.local_addr().unwrap()).unwrap();
                // Flows 1 and 2 fall due at the same instants: one round.
                let phase = if i == 2 { 100_000 } else { 0 };
                (i, job(plan, i as u16 + 1, t0 + phase), s)
            })
            .collect();
        let own = jobs[2].2.local_addr().unwrap().port();
        let own_of_shared = jobs[0].2.local_addr().unwrap().port();
        let mut sent = run_shared(jobs, 0, None);
        sent.sort_by_key(|(i, _)| *i);
        let mut ports = Vec::new();
        for ((i, o), rx) in sent.iter().zip(&rxs) {
            assert_eq!(o.error, None);
            assert_eq!((o.send.packets, o.send.not_sent), (20, 0), "flow {i}");
            assert!(o.first_tx > 0);
            let got = read_probes(rx, 20);
            let want: Vec<(u16, u32)> = (0..20).map(|k| (*i as u16 + 1, k)).collect();
            let ids: Vec<(u16, u32)> = got.iter().map(|&(f, q, _)| (f, q)).collect();
            assert_eq!(ids, want);
            assert!(got.iter().all(|g| g.2 == got[0].2));
            ports.push(got[0].2);
        }
        assert_eq!(ports[0], ports[1]);
        assert_ne!(ports[0], own_of_shared);
        assert_eq!(ports[2], own);
    }

    /// A packet the kernel refuses in a round of several flows is its own
    /// flow's `not_sent`; that flow's later packets are renumbered, the
    /// other flow's go out untouched.
    #[test]
    fn a_refused_packet_in_a_round_renumbers_only_its_flow() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let shared = |to: SocketAddr, id: u16| {
            let j = job(flow(1000.0, 64, Stop::Packets(10)), id, 0);
            SharedFlow {
                idx: usize::from(id),
                out: Out::Shared(to.into()),
                sched: Schedule::new(&j.plan, 0, MIN_PAYLOAD).unwrap(),
                acc: rec(),
                h: header(&j),
                seq: 0,
                pending: None,
                first_tx: 0,
                refused: 0,
                error: None,
                key: None,
            }
        };
        // Port 0 cannot be sent to (EINVAL): every packet of flow 2 fails.
        let bad: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut flows = vec![shared(rx.local_addr().unwrap(), 1), shared(bad, 2)];
        let order = [0, 1, 0, 1, 0];
        let mut msgs = [Msg::default(); 5];
        let mut seq = [0u32; 2];
        for (i, &k) in order.iter().enumerate() {
            msgs[i] = Msg {
                flow: k,
                at: i as u64,
                size: 64,
                seq: seq[k],
            };
            seq[k] += 1;
        }
        flows[0].seq = 3;
        flows[1].seq = 2;
        let mut batch = SendBatch::new(64);
        send_round(tx.as_raw_fd(), &mut batch, &mut msgs, &mut flows);
        let ids: Vec<(u16, u32)> = read_probes(&rx, 3)
            .iter()
            .map(|&(f, q, _)| (f, q))
            .collect();
        assert_eq!(ids, [(1, 0), (1, 1), (1, 2)]);
        let s0 = flows[0].acc.acc.summary();
        let s1 = flows[1].acc.acc.summary();
        assert_eq!((s0.packets, s0.not_sent, flows[0].seq), (3, 0, 3));
        assert_eq!((s1.packets, s1.not_sent, flows[1].seq), (0, 2, 0));
    }

    /// A `--max` TCP flow behind a slow reader stops when its time is up,
    /// not when its blocked write would have ended; its send span is the
    /// run's, and exactly the records it counts arrive, numbered from 0,
    /// followed by at most one record cut short by the close.
    #[test]
    fn a_bulk_tcp_flow_stops_on_time_behind_a_slow_reader() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 16 << 10];
            let mut got = Vec::new();
            loop {
                std::thread::sleep(Duration::from_millis(1));
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            got
        });
        let s = TcpStream::connect(to).unwrap();
        let mut plan = flow(1.0, 8000, Stop::DurationMs(300));
        plan.spec = FlowSpec::max_rate(8000).unwrap();
        plan.transport = Transport::Tcp;
        let t0 = mono_ns() + 2_000_000;
        let mut j = job(plan, 1, t0);
        j.cfg.transport = Transport::Tcp;
        let out = run_flow(j, DataSock::Tcp(s));
        let took = mono_ns() - t0;
        assert_eq!(out.error, None);
        // The reader takes ~16 MB/s: a 1 MiB write alone would block for
        // 60 ms, the socket buffer's backlog for longer.
        assert!(took < 300_000_000 + 150_000_000, "{took} ns");
        assert!((out.send.duration_s - 0.3).abs() < 0.006, "{:?}", out.send);
        let n = out.send.packets;
        assert!(n > 10, "{n}");
        let got = reader.join().unwrap();
        let whole = got.len() / 8000;
        assert_eq!(whole as u64, n, "{} bytes", got.len());
        for (k, rec) in got.chunks_exact(8000).enumerate() {
            let h = ProbeHeader::decode_prefix(rec).unwrap();
            assert_eq!((h.session, h.flow, h.seq, h.len), (7, 1, k as u32, 8000));
        }
    }

    /// Four bulk TCP flows on one shared writer, read round-robin by a
    /// slow reader: each stops on time with a whole run's send span, the
    /// records each counts arrive intact and in order, and the writer's
    /// rounds share the reader's pace evenly.
    #[test]
    fn a_shared_writer_serves_its_bulk_flows_in_rounds_and_stops_on_time() {
        use std::io::Read;
        const REC: usize = 8000;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let socks: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(to).unwrap()).collect();
        let mut peers: Vec<std::net::TcpStream> = (0..4).map(|_| l.accept().unwrap().0).collect();
        // Connections are accepted in the order they connected; the reader
        // knows each one by the flow id in its records.
        let reader = std::thread::spawn(move || {
            for p in &peers {
                p.set_nonblocking(true).unwrap();
            }
            let mut got = vec![Vec::new(); peers.len()];
            let mut open = peers.len();
            let mut buf = vec![0u8; 8 << 10];
            while open > 0 {
                std::thread::sleep(Duration::from_millis(1));
                open = 0;
                for (p, g) in peers.iter_mut().zip(&mut got) {
                    match p.read(&mut buf) {
                        Ok(0) => {}
                        Ok(n) => {
                            g.extend_from_slice(&buf[..n]);
                            open += 1;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => open += 1,
                        Err(_) => {}
                    }
                }
            }
            got
        });
        let t0 = mono_ns() + 2_000_000;
        let jobs: Vec<(usize, FlowJob, TcpStream)> = socks
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let mut plan = flow(1.0, REC as u32, Stop::DurationMs(400));
                plan.spec = FlowSpec::max_rate(REC as u32).unwrap();
                plan.transport = Transport::Tcp;
                let mut j = job(plan, i as u16 + 1, t0);
                j.cfg.transport = Transport::Tcp;
                j.tcp_write = 128 << 10;
                (i, j, s)
            })
            .collect();
        let mut out = run_bulk_shared(jobs);
        let took = mono_ns() - t0;
        assert!(took < 400_000_000 + 150_000_000, "{took} ns");
        out.sort_by_key(|(i, _)| *i);
        let got = reader.join().unwrap();
        let mut bytes = Vec::new();
        for (i, o) in &out {
            assert_eq!(o.error, None);
            assert!((o.send.duration_s - 0.4).abs() < 0.008, "{:?}", o.send);
            let n = o.send.packets;
            let g = got
                .iter()
                .find(|g| {
                    g.len() >= REC && ProbeHeader::decode_prefix(g).unwrap().flow == *i as u16 + 1
                })
                .unwrap();
            assert_eq!((g.len() / REC) as u64, n, "flow {}", i + 1);
            for (k, rec) in g.chunks_exact(REC).enumerate() {
                let h = ProbeHeader::decode_prefix(rec).unwrap();
                assert_eq!(
                    (h.flow, h.seq, usize::from(h.len)),
                    (*i as u16 + 1, k as u32, REC)
                );
            }
            bytes.push(n as f64);
        }
        let (lo, hi) = bytes
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        assert!(lo > 0.0 && hi / lo < 2.0, "{bytes:?}");
    }

    #[test]
    fn bulk_writes_shrink_with_many_flows_down_to_128_kib() {
        assert_eq!(bulk_write_bytes(1, 2), TCP_WRITE_BYTES);
        assert_eq!(bulk_write_bytes(2, 2), TCP_WRITE_BYTES);
        assert_eq!(bulk_write_bytes(4, 2), TCP_WRITE_BYTES / 2);
        assert_eq!(bulk_write_bytes(60, 2), 128 << 10);
        assert_eq!(bulk_write_bytes(1000, 0), 128 << 10);
    }

    #[test]
    fn a_timed_flow_sends_nothing_after_its_end() {
        // A 2 s flow at 1000 pps whose pacer is 0.6 s behind when the run
        // ends: the 600 packets still due are not sent, not sent late.
        let t0 = 10_000_000_000;
        let mut s =
            Schedule::new(&flow(1000.0, 100, Stop::DurationMs(2000)), t0, MIN_PAYLOAD).unwrap();
        let mut acc = rec();
        let mut meta = [(0u64, 0u32); BATCH];
        let mut pending = s.next(t0);
        let mut gathered = 0;
        // On time for 1.4 s, then stalled.
        while let Some((at, _)) = pending.filter(|p| p.0 < t0 + 1_400_000_000) {
            gathered += gather(&mut s, &mut pending, at, &mut acc, &mut meta, BATCH, 0);
        }
        assert_eq!((gathered, acc.acc.summary().not_sent), (1400, 0));
        let end = t0 + 2_000_000_000 + END_GRACE_NS;
        while pending.is_some() {
            assert_eq!(
                gather(&mut s, &mut pending, end, &mut acc, &mut meta, BATCH, 0),
                0
            );
        }
        assert_eq!(acc.acc.summary().not_sent, 600);
    }
}
