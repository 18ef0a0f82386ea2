//! The receive side every transport shares: what a session and a flow's
//! receive loop hold in common ([`FlowShared`]), the per-packet accounting
//! a loop feeds ([`Recorder`], [`RxFlow::take_record`]), and what a receive thread
//! hands back. A transport's loop only reads its socket and frames; every
//! probe it finds goes through the same checks and accumulators here.

use crate::budget;
use crate::live::{LiveQueue, LiveTap};
use crate::result::FlowReport;
use crate::sys::CpuTime;
use crate::EngineError;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use wirebench_pktlog::format::FLAG_RX as LOG_RX;
use wirebench_pktlog::stream::LogProducer;
use wirebench_stats::{FlowConfig, IpVersion, MarksSeen, MarksTally, RecvAccumulator};
use wirebench_wire::auth::{ProbeKey, AUTH_RTT_MIN_LEN};
use wirebench_wire::limits;
use wirebench_wire::{FlowSetup, MeterMode, ProbeHeader, PROBE_HEADER_LEN, RTT_MIN_LEN};

/// How often receive loops look at their stop flag.
pub(crate) const POLL_MS: u64 = 50;

/// Longest a stopped receiver (any transport) still spends taking what
/// its sockets, rings or connections already hold. The stop comes after
/// the linger, when what the sender sent should have arrived; a receive
/// thread the host held through the linger finds it queued, and leaving
/// at the flag would count it lost although it was received. The bound
/// keeps a sender that has not stopped from holding the receiver.
pub(crate) const STOP_DRAIN_NS: u64 = 100_000_000;

/// An IPv4-mapped IPv6 address is the IPv4 address it maps.
pub(crate) fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// [`unmap`] for a socket address.
pub(crate) fn unmap_addr(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(unmap(a.ip()), a.port())
}

/// Shared between a session and one of its receive threads.
#[derive(Default)]
pub(crate) struct FlowShared {
    pub(crate) stop: AtomicBool,
    pub(crate) offset_ns: AtomicI64,
    /// Error bound of the offset; delays below its negative are flagged.
    pub(crate) error_ns: AtomicI64,
    pub(crate) negative_beyond_error: AtomicU64,
    pub(crate) foreign: AtomicU64,
    /// Receiver clock at `Start` (0: not yet): bounds the sequence numbers
    /// the sender can have reached.
    pub(crate) start_ns: AtomicU64,
    /// Probes of this session whose sequence number the sender cannot have
    /// reached yet ([`limits::max_plausible_seq`]), or without a valid MAC
    /// where probes carry one: forged.
    pub(crate) forged: AtomicU64,
    /// Probes whose delay is outside [`limits::plausible_delay`].
    pub(crate) implausible: AtomicU64,
    /// Finished live intervals on their way to the session thread.
    pub(crate) live: Arc<LiveQueue>,
    /// Receive buffer the sender asked for (`--window`); 0: the default.
    pub(crate) rcvbuf: usize,
    /// `--auth probes`: probes must end in this session key's MAC, else
    /// they are `forged`; reflections get one.
    pub(crate) probe_key: Option<ProbeKey>,
    /// Where the flow's data comes from (the registered datagram source,
    /// the identified connection's peer), for the report: set once.
    pub(crate) from: std::sync::OnceLock<SocketAddr>,
}

impl FlowShared {
    /// Decides whether a probe of this session counts as data: its delay
    /// (offset applied) must be plausible and its sequence number within
    /// reach of the sender. Counts what it refuses; returns the delay.
    /// A refused probe is neither recorded nor reflected, so no forged
    /// number moves the sequence window or a statistic.
    #[inline]
    fn admit(&self, acc: &RecvAccumulator, h: &ProbeHeader, ts: u64, offset: i64) -> Option<i64> {
        let delay = i128::from(ts) - i128::from(h.tx_ns) - i128::from(offset);
        let Some(delay) = i64::try_from(delay)
            .ok()
            .filter(|&d| limits::plausible_delay(d))
        else {
            self.implausible.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let start = self.start_ns.load(Ordering::Relaxed);
        let elapsed = if start == 0 {
            0
        } else {
            ts.saturating_sub(start)
        };
        if acc.peek_seq(h.seq) > limits::max_plausible_seq(elapsed) {
            self.forged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if delay < -self.error_ns.load(Ordering::Relaxed) {
            self.negative_beyond_error.fetch_add(1, Ordering::Relaxed);
        }
        Some(delay)
    }

    /// Counts one foreign packet or connection.
    #[inline]
    pub(crate) fn foreign(&self) {
        self.foreign.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a receive thread hands back: for each flow it served (in the
/// order the session gave them) its accumulator and the IP marking seen
/// on its data packets (None when untold), and its CPU time.
pub(crate) struct WorkerOutcome {
    pub(crate) accs: Vec<FlowRecv>,
    pub(crate) cpu: CpuTime,
}

/// A receive thread and the flows (positions in the session) it serves.
pub(crate) struct Worker {
    pub(crate) flows: Vec<usize>,
    pub(crate) handle: Option<std::thread::JoinHandle<WorkerOutcome>>,
}

/// A flow's statistics and the IP marking its packets carried.
pub(crate) type FlowRecv = (RecvAccumulator, Option<MarksSeen>);

/// A flow's statistics and, when the session is logged, its log producer:
/// every admitted probe goes into both, in the same order.
pub(crate) struct Recorder {
    pub(crate) acc: RecvAccumulator,
    pub(crate) log: Option<LogProducer>,
    /// DSCP / TTL / flow label of the admitted datagrams.
    pub(crate) marks: MarksTally,
    /// Cuts live intervals (sessions that stream them).
    pub(crate) live: Option<LiveTap>,
}

impl Recorder {
    /// The socket was quiet: close the live intervals that have ended.
    pub(crate) fn tick(&mut self) {
        if let Some(t) = self.live.as_mut() {
            t.tick(crate::clock::realtime_ns(), &self.acc);
        }
    }

    /// The flow ended: close the last live intervals.
    pub(crate) fn finish_live(&mut self) {
        if let Some(t) = self.live.as_mut() {
            t.finish(&self.acc);
        }
    }

    #[inline]
    fn record(&mut self, h: &ProbeHeader, delay: i64, ts: u64, len: usize) {
        if let Some(t) = self.live.as_mut() {
            t.before(ts, &self.acc);
        }
        if let Some(log) = self.log.as_mut() {
            log.push(wirebench_pktlog::Record {
                flow: h.flow,
                flags: LOG_RX,
                size: len as u32,
                seq: self.acc.peek_seq(h.seq),
                tx_ns: h.tx_ns,
                rx_ns: ts,
            });
        }
        self.acc.record(h.seq, delay, ts, len as u32);
    }

    /// The flow ended: its figures, with live intervals closed.
    pub(crate) fn into_recv(mut self) -> FlowRecv {
        self.finish_live();
        (self.acc, self.marks.seen())
    }
}

/// One flow's receive end as its transport is given it: who may send it,
/// what it accepts, and where each probe is counted.
pub(crate) struct RxFlow {
    pub(crate) sid: u32,
    pub(crate) flow_id: u16,
    /// RTT meter: probes are reflected to the sender.
    pub(crate) reflect: bool,
    /// Largest probe the sender declared.
    pub(crate) max_len: usize,
    /// The session's sender: data from any other address is foreign.
    pub(crate) peer_ip: IpAddr,
    /// Where the data must come from when that is known before any
    /// arrives ([`declared_source`]); else learned from the first probe
    /// that passes every check.
    pub(crate) source: Option<SocketAddr>,
    /// Receive buffer a datagram socket asks for (the sender's ask or the
    /// session's default share); streams keep autotuning unless asked.
    pub(crate) dgram_buf: usize,
    /// A datagram socket lets the kernel coalesce same-size datagrams
    /// (UDP GRO): a bulk flow, where nothing is reflected.
    pub(crate) gro: bool,
    /// The sender floods this flow (`--max`, [`FlowSetup::bulk`]): the
    /// XDP path's `--xdp-napi auto` threads the receive half only for
    /// such a flow.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) bulk: bool,
    pub(crate) acc: Recorder,
    pub(crate) sh: Arc<FlowShared>,
}

impl RxFlow {
    /// Takes one probe `h` of `len` bytes that is of this session and flow
    /// and came from the sender, received at `ts`, of which `d` holds the
    /// bytes (a datagram's all, a streamed TCP record's or an XDP receive
    /// record's first): with probe MACs its MAC is checked over `d`, then
    /// its delay and sequence number ([`FlowShared::admit`]); an admitted
    /// probe is recorded and its delay returned, anything else counted and
    /// dropped.
    #[inline]
    pub(crate) fn take_record(
        &mut self,
        h: &ProbeHeader,
        d: &[u8],
        len: usize,
        ts: u64,
        offset: i64,
    ) -> Option<i64> {
        // With probe MACs, a probe without a valid one is forged: counted,
        // never recorded or reflected.
        if self.sh.probe_key.as_ref().is_some_and(|k| !k.verify(d)) {
            self.sh.forged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let delay = self.sh.admit(&self.acc.acc, h, ts, offset)?;
        self.acc.record(h, delay, ts, len);
        Some(delay)
    }

    /// The longest datagram or record this flow accepts: its largest
    /// probe, or a reflection's length.
    pub(crate) fn longest(&self) -> usize {
        self.max_len.max(RTT_MIN_LEN)
    }

    /// The flow ended: its figures.
    pub(crate) fn outcome(self, cpu: CpuTime) -> WorkerOutcome {
        WorkerOutcome {
            accs: vec![self.acc.into_recv()],
            cpu,
        }
    }
}

/// A flow's receiving end, opened by its transport: the session runs it
/// on a thread of its own, or (datagram flows) hands it to the shared
/// workers. The loop inside is the transport's, statically dispatched;
/// the session calls the interface once per flow.
pub(crate) trait FlowRx: Send {
    /// Receives until the session stops the flow, on the calling thread.
    fn run(self: Box<Self>) -> WorkerOutcome;

    /// A UDP flow, for the receive workers that serve many flows and the
    /// AF_XDP path; `Err(self)` when this end is not one.
    fn into_udp(self: Box<Self>) -> Result<Box<super::udp::rx::UdpFlow>, RxEnd>;

    /// A one-way TCP flow's listener, for the TCP receive workers that
    /// serve many flows; `Err(self)` for anything else (an RTT-meter flow
    /// keeps a thread of its own, so its reflections never queue behind
    /// other flows' reads).
    fn into_tcp(self: Box<Self>) -> Result<Box<super::tcp::rx::Listening>, RxEnd>;
}

/// Deals flows (position in the session, state) round-robin to one
/// receive worker per CPU, fewer when there are fewer flows: each
/// worker's positions and flows.
pub(crate) fn per_cpu<T>(flows: Vec<(usize, Box<T>)>) -> Vec<(Vec<usize>, Vec<T>)> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    deal(flows, cores)
}

/// Deals flows (position in the session, state) round-robin to at most
/// `workers` receive workers: each worker's positions and flows.
pub(crate) fn deal<T>(flows: Vec<(usize, Box<T>)>, workers: usize) -> Vec<(Vec<usize>, Vec<T>)> {
    let n = flows.len().min(workers.max(1));
    let mut groups: Vec<(Vec<usize>, Vec<T>)> = (0..n).map(|_| (Vec::new(), Vec::new())).collect();
    for (k, (i, f)) in flows.into_iter().enumerate() {
        groups[k % n].0.push(i);
        groups[k % n].1.push(*f);
    }
    groups
}

/// A flow's receiving end, whatever its transport.
pub(crate) type RxEnd = Box<dyn FlowRx>;

/// Length of a reflection: the header and the reflector's times, and
/// with probe MACs the MAC trailer (a UDP reflection keeps the probe's
/// length when that is longer).
pub(crate) fn reply_len(mac: bool) -> usize {
    if mac {
        AUTH_RTT_MIN_LEN
    } else {
        RTT_MIN_LEN
    }
}

/// The address a flow's data must come from, known before any arrives:
/// the control connection's address at the source port the sender
/// declared. None (learned from the first datagram that passes every
/// check) for an older sender that declares none, and with probe MACs,
/// where only an authentic probe can teach it: that also lets the data
/// pass a NAT that maps the declared port to another.
pub(crate) fn declared_source(
    s: &FlowSetup,
    peer_ip: IpAddr,
    probe_macs: bool,
) -> Option<SocketAddr> {
    s.src_port
        .filter(|_| !probe_macs)
        .map(|p| SocketAddr::new(peer_ip, p))
}

/// How a flow's packets are counted (framing, series) from its setup.
pub(crate) fn flow_config(s: &FlowSetup, ip: IpVersion) -> FlowConfig {
    FlowConfig {
        transport: s.transport,
        ip,
        mtu: if s.mtu >= 68 { s.mtu } else { 1500 },
        // Checked by `check_flows`; an unchecked value turns the series off
        // rather than wrap.
        interval_ns: s.interval_ms.and_then(|m| limits::interval_ns(m).ok()),
    }
}

/// What a session tells each of its flows' receive ends.
pub(crate) struct RxAt {
    pub(crate) sid: u32,
    /// The sender's address.
    pub(crate) peer_ip: IpAddr,
    pub(crate) ip: IpVersion,
    pub(crate) meter: MeterMode,
    /// This flow's share of the session's interval-bucket budget.
    pub(crate) max_intervals: usize,
    /// Stream live intervals to the sender.
    pub(crate) live: bool,
    /// `--auth probes`: the session's probe key.
    pub(crate) probe_key: Option<ProbeKey>,
    /// Receive buffers of datagram sockets whose sender did not ask
    /// (`--window`): [`budget::default_buffer`].
    pub(crate) dgram_buf: u64,
    /// Our clock minus the sender's, when known before `Start` (the
    /// sender's end of a reverse flow).
    pub(crate) offset: Option<(i64, u64)>,
    /// Bulk one-way UDP flows ([`FlowSetup::bulk`]) may take coalesced
    /// datagrams (UDP GRO, Linux; `recv --gro`).
    pub(crate) gro: bool,
}

impl RxAt {
    /// A one-way session `sid` from 127.0.0.1 whose clock offset is known
    /// (zero), for tests of a flow's receive end.
    #[cfg(test)]
    pub(crate) fn loopback(sid: u32, dgram_buf: usize, gro: bool) -> RxAt {
        RxAt {
            sid,
            peer_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            ip: IpVersion::V4,
            meter: MeterMode::Owd,
            max_intervals: 1024,
            live: false,
            probe_key: None,
            dgram_buf: dgram_buf as u64,
            offset: Some((0, 0)),
            gro,
        }
    }
}

/// Flow `s`'s receive end before its transport opens it: its shared
/// state, its accounting (`log`: its end of the session's packet log).
pub(crate) fn rx_flow(s: &FlowSetup, at: &RxAt, log: Option<LogProducer>) -> RxFlow {
    let cfg = flow_config(s, at.ip);
    let mut sh = FlowShared {
        rcvbuf: s.rcvbuf.map_or(0, |w| budget::flow_buf(w) as usize),
        probe_key: at.probe_key.clone(),
        ..FlowShared::default()
    };
    if let Some((offset, error)) = at.offset {
        sh.offset_ns = AtomicI64::new(offset);
        sh.error_ns = AtomicI64::new(error.min(i64::MAX as u64) as i64);
    }
    let sh = Arc::new(sh);
    let live = match (at.live, cfg.interval_ns) {
        (true, Some(len)) => Some(LiveTap::new(sh.live.clone(), s.flow_id, len)),
        _ => None,
    };
    RxFlow {
        sid: at.sid,
        flow_id: s.flow_id,
        // Per flow: a bulk flow beside an RTT flow is not reflected.
        reflect: s.meter.unwrap_or(at.meter) == MeterMode::Rtt,
        max_len: (s.max_len as usize).clamp(PROBE_HEADER_LEN, u16::MAX as usize),
        peer_ip: at.peer_ip,
        source: declared_source(s, at.peer_ip, at.probe_key.is_some()),
        dgram_buf: s
            .rcvbuf
            .map_or(at.dgram_buf as usize, |w| budget::flow_buf(w) as usize),
        gro: at.gro && s.bulk,
        bulk: s.bulk,
        acc: Recorder {
            acc: RecvAccumulator::with_max_intervals(cfg, at.max_intervals),
            log,
            marks: MarksTally::default(),
            live,
        },
        sh,
    }
}

/// A flow's report from what its receive thread gathered (`sent`: the
/// sender's count, for loss; `playout`: the VoIP buffer to judge against).
pub(crate) fn flow_report(
    flow_id: u16,
    sh: &FlowShared,
    (acc, marks): FlowRecv,
    sent: Option<u64>,
    playout: Option<u32>,
) -> FlowReport {
    let mut summary = acc.summary(sent);
    if let Some(ms) = playout {
        summary.late_share = Some(acc.late_share(u64::from(ms) * 1_000_000));
    }
    FlowReport {
        flow_id,
        summary,
        foreign: sh.foreign.load(Ordering::Relaxed),
        negative_beyond_error: sh.negative_beyond_error.load(Ordering::Relaxed),
        forged: sh.forged.load(Ordering::Relaxed),
        implausible_delays: sh.implausible.load(Ordering::Relaxed),
        marks,
        from: sh.from.get().map(SocketAddr::to_string),
        sent: None,
    }
}

/// Where a flow's data port opens: the address, and whether the sender
/// named the port (`-rp`), so that a port that cannot be opened is its
/// error, told back with the reason.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataPort {
    pub(crate) addr: SocketAddr,
    pub(crate) asked: bool,
}

impl DataPort {
    /// The error of a failed `what` (bind, listen) on this port.
    pub(crate) fn err(self, what: &'static str) -> impl Fn(std::io::Error) -> EngineError {
        move |e| {
            if self.asked {
                EngineError::BadPlan(format!(
                    "-rp/--data-port: cannot open data port {}: {e}",
                    self.addr.port()
                ))
            } else {
                EngineError::io(what, e)
            }
        }
    }
}

/// What the sender's end of a reverse flow is given to reach the
/// receiver's data port ([`super::Ops::dial`]).
pub(crate) struct Dial {
    /// The receiver's data port.
    pub(crate) to: SocketAddr,
    /// The datagram socket bound before `Hello`, whose port the sender
    /// declared ([`wirebench_wire::FlowSetup::src_port`]).
    pub(crate) bound: Option<std::net::UdpSocket>,
    /// The session and flow the hello names.
    pub(crate) id: super::Ident,
}

/// Says the sender's hello again (a lost first datagram would leave the
/// daemon without our address); None where it cannot be lost.
pub(crate) type Resend = Option<Box<dyn Fn() + Send + Sync>>;

/// What the daemon's end of a reverse flow waits for: the sender's hello
/// on the data port, from the session's sender.
pub(crate) struct Awaited<'a> {
    pub(crate) session: u32,
    pub(crate) flow_id: u16,
    pub(crate) peer_ip: IpAddr,
    /// The datagram source port the sender declared.
    pub(crate) declared: Option<u16>,
    pub(crate) probe_key: Option<&'a ProbeKey>,
    /// Err once the wait is over (the session ended, or the deadline).
    pub(crate) still: &'a dyn Fn() -> Result<(), String>,
}

impl Awaited<'_> {
    /// Is `buf` the sender's hello for this session and flow?
    pub(crate) fn is_hello(&self, buf: &[u8]) -> bool {
        ProbeHeader::decode_prefix(buf)
            .is_ok_and(|h| h.is_hello() && h.session == self.session && h.flow == self.flow_id)
    }
}

/// The daemon's end of a reverse flow (it sends, the sender measures):
/// its data port, until the sender's hello names where to send.
pub(crate) trait ReverseEnd: Send {
    /// Waits for the sender's hello and gives the flow's sending end
    /// towards it, set up for `plan`.
    fn await_sender(
        self: Box<Self>,
        w: &Awaited<'_>,
        plan: &crate::plan::FlowPlan,
    ) -> Result<super::DataSock, String>;
}
