//! The pacer: every flow keeps an absolute schedule t_k = t_0 + Σ gaps on
//! CLOCK_MONOTONIC, so a late packet never shifts the ones after it. It
//! sleeps until [`crate::clock::SPIN_NS`] before a deadline and spins the
//! rest; every packet already due when it wakes goes out in the same
//! `sendmmsg` (UDP) or `write` (TCP records), so gaps shorter than a
//! syscall become batches rather than drift. A packet due more than
//! [`LATE_LIMIT_NS`] ago when its turn comes is not sent and counted
//! `not_sent`, as is a packet the kernel refused; neither is network loss.

use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack, wait_until};
use crate::plan::{clip_to_budget, FlowPlan, Pacing, Phases, SessionPlan, Stop};
use crate::rtt::RttRx;
use crate::sys::TcpInfo;
use crate::transport::tcp::{
    bulk_write_bytes, paced_buffer_bytes, run_bulk_shared, run_paced_shared, TCP_WRITE_BYTES,
};
use crate::transport::udp::run_shared;
use crate::transport::{caps, DataSock, FlowRun};
use crate::EngineError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wirebench_model::MIN_PAYLOAD;
use wirebench_pktlog::format::FLAG_NOT_SENT;
use wirebench_pktlog::stream::{LogProducer, LogSink};
use wirebench_pktlog::{FlowMeta, LogFooter, LogMeta, Record, Side};
use wirebench_stats::{FlowConfig, IpVersion, RecvSummary, SendAccumulator, SendSummary};
use wirebench_wire::auth::{ProbeKey, AUTH_PROBE_MIN_LEN};
use wirebench_wire::{MeterMode, ProbeHeader, FLAG_RTT, PROBE_HEADER_LEN};

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

pub(crate) struct FlowJob {
    pub(crate) plan: FlowPlan,
    pub(crate) flow_id: u16,
    pub(crate) session: u32,
    pub(crate) rtt: bool,
    pub(crate) t0: u64,
    pub(crate) cfg: FlowConfig,
    pub(crate) abort: Arc<AtomicBool>,
    pub(crate) cancel: Option<&'static AtomicBool>,
    /// Spin window of the pacer (0 when the paced flows outnumber the cores).
    pub(crate) spin_ns: u64,
    /// Paced (not max-rate) flows in the session.
    pub(crate) paced: usize,
    /// Bytes of records a `--max` TCP flow hands to one `write`
    /// ([`bulk_write_bytes`]).
    pub(crate) tcp_write: usize,
    /// `-l`: this flow's end of the session's per-packet log.
    pub(crate) log: Option<LogProducer>,
    /// `--auth probes`: every probe ends in this session key's MAC.
    pub(crate) probe_key: Option<ProbeKey>,
}

/// A flow's send statistics and, with `-l`, its per-packet log: every sent
/// and not-sent packet goes into both.
pub(crate) struct SendRec {
    pub(crate) acc: SendAccumulator,
    pub(crate) log: Option<LogProducer>,
    pub(crate) flow: u16,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the start, to log a not-sent
    /// packet's scheduled time on the wall clock like the sent ones.
    pub(crate) wall_minus_mono: i128,
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
    pub(crate) fn reflected(&self) -> crate::rtt::Reflected {
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
    pub(crate) fn min_len(&self) -> u32 {
        min_probe_len(self.probe_key.is_some())
    }

    /// Why the flow must stop now, if it must.
    pub(crate) fn halted(&self) -> Option<Halt> {
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
    /// TCP `--zerocopy`: what the kernel did with the sends.
    pub zerocopy: Option<wirebench_schema::result::ZeroCopy>,
    /// UDP with segmentation offload: how the datagrams left.
    pub gso: Option<wirebench_schema::result::Gso>,
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
            zerocopy: None,
            gso: None,
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
            zerocopy: None,
            gso: None,
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
    pub(crate) gen: Box<dyn wirebench_model::Generator>,
    pub(crate) next_at: u64,
    pub(crate) end_at: Option<u64>,
    pub(crate) packets_left: Option<u64>,
    pub(crate) bytes_left: Option<u64>,
    pub max: bool,
    pub max_len: u32,
    /// Smallest probe ([`min_probe_len`]).
    pub(crate) min_len: u32,
    /// Packets drawn so far.
    pub(crate) drawn: u64,
    /// Start of the schedule (CLOCK_MONOTONIC).
    pub(crate) start_at: u64,
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

pub(crate) fn run_flow(mut job: FlowJob, mut sock: DataSock) -> FlowSent {
    tighten_timer_slack();
    // A max-rate flow stays at normal priority beside paced flows, whose
    // pacers must not wait for it; alone, it competes on equal terms. Bulk
    // TCP flows more than the CPUs stay at normal priority too: they are
    // clocked by their ACKs, not by a timer, and 60 of them raised took
    // the CPU from the receiver on the same host (their writes then
    // shrink: `bulk_write_bytes`).
    let crowd = sock.caps().connection_oriented && job.tcp_write < TCP_WRITE_BYTES;
    if !job.plan.spec.is_max() || (job.paced == 0 && !crowd) {
        raise_priority();
    }
    let mut sched = match Schedule::new(&job.plan, job.t0, job.min_len()) {
        Ok(s) => s,
        Err(e) => return FlowSent::failed(&e),
    };
    let mut acc = SendRec::new(job.cfg, job.log.take(), job.flow_id);
    let reflector = if job.rtt {
        match sock.reflector(&job.reflected()) {
            Ok(r) => Some(r),
            Err(e) => return FlowSent::failed(&format!("cannot clone socket: {e}")),
        }
    } else {
        None
    };
    let mut first_tx = 0;
    let r = sock.pace(FlowRun {
        job: &job,
        sched: &mut sched,
        acc: &mut acc,
        first_tx: &mut first_tx,
    });
    let mut sent = FlowSent::ran(first_tx, acc.summary(&sched), reflector, r);
    sock.ended(&job, &mut sent);
    sent
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
pub(crate) fn wait_or_halt(job: &FlowJob, at: u64) -> Result<u64, Halt> {
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

/// A flow's send loop, the part every transport shares: waits for the
/// start and then for each due packet (a `--max` flow does not wait),
/// gathers what is due (at most `room`, into `meta`) and hands the batch
/// to `send` with the flow's next sequence number, which `send` advances
/// past the packets it numbered. `send` returning an error ends the flow.
pub(crate) fn each_batch(
    job: &FlowJob,
    sched: &mut Schedule,
    acc: &mut SendRec,
    meta: &mut [(u64, u32)],
    room: usize,
    mut send: impl FnMut(&[(u64, u32)], &mut SendRec, &mut u32) -> Result<(), String>,
) -> FlowEnd {
    let mut seq: u32 = 0;
    wait_until(job.t0);
    let mut pending = sched.next(mono_ns());
    while let Some((at, _)) = pending {
        if let Some(h) = job.halted() {
            return Ok(Some(h));
        }
        let now = if sched.max {
            mono_ns()
        } else {
            match wait_or_halt(job, at) {
                Ok(t) => t,
                Err(h) => return Ok(Some(h)),
            }
        };
        let n = gather(sched, &mut pending, now, acc, meta, room, seq);
        if n == 0 {
            continue;
        }
        send(&meta[..n], acc, &mut seq)?;
    }
    Ok(None)
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

pub(crate) fn header(job: &FlowJob) -> ProbeHeader {
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
/// (and its Ctrl-C check) every few microseconds: skipping a schedule of
/// `-C 1e12` in one go takes far longer than the run and ignores SIGINT
/// meanwhile.
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
    // not sent (else a saturated run sends its backlog after its end and
    // lasts longer than asked).
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
    /// Set when the program cancels the run: flows stop generating.
    pub cancel: Option<&'static AtomicBool>,
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

/// Paced one-way UDP flows can share pacer threads; --max (never waits)
/// and RTT flows (reflection readers) keep a thread each, and paced TCP
/// flows share writers of their own ([`paced_tcp_candidate`]).
fn shared_candidate(plan: &SessionPlan, f: &FlowPlan) -> bool {
    f.direction == wirebench_wire::Direction::Forward
        && caps(f.transport).shares_pacer
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

/// Forward `--max` flows of a connection-oriented transport: the bulk
/// TCP flows among which [`bulk_write_bytes`] shares the CPUs.
fn bulk_tcp_flows(plan: &SessionPlan) -> usize {
    plan.flows
        .iter()
        .filter(|f| {
            f.direction == wirebench_wire::Direction::Forward
                && caps(f.transport).connection_oriented
                && f.spec.is_max()
        })
        .count()
}

/// Time the sender adds to its start lead for its shared TCP writers:
/// each fills its flows' write buffers ([`bulk_write_bytes`] each for
/// bulk flows, [`paced_buffer_bytes`] for paced ones) before its first
/// write, and a bulk flow's span starts at t_0 whether or not its writer
/// had begun, a paced flow's first records are due then. Filling
/// 1 000 × 128 KiB took the shared writer 145 ms on a 2-CPU host at load
/// 7–14 (92 ms of CPU, two thirds of it the kernel clearing fresh pages)
/// where the lead for 1 000 flows was 70 ms; 2 ns a byte leaves room for
/// a busier host.
pub(crate) fn tcp_writer_lead_ns(plan: &SessionPlan) -> u64 {
    const NS_PER_BYTE: u64 = 2;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let n = bulk_tcp_flows(plan);
    let paced = plan.flows.iter().filter(|f| paced_tcp_candidate(plan, f));
    let paced_bytes: usize = if paced_tcp_writers(plan.pacing, paced.clone().count(), cores) > 0 {
        paced
            .map(|f| {
                paced_buffer_bytes(
                    f.spec.max_payload().max(MIN_PAYLOAD) as usize,
                    f.opts.zerocopy == Some(true),
                )
            })
            .sum()
    } else {
        0
    };
    (n * bulk_write_bytes(n, cores) + paced_bytes) as u64 * NS_PER_BYTE
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
        cancel,
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
    let tcp_write = bulk_write_bytes(bulk_tcp_flows(plan), cores);
    // Two or more one-way bulk TCP flows share one writer thread
    // (run_bulk_shared), as iperf3 before 3.16 serves its streams;
    // RTT-meter flows keep a thread for reflections. Writers on several
    // CPUs make the CPUs take turns sending the queue of a shared link,
    // and a veth link delivers what each CPU sent on that CPU's backlog:
    // every flow arrives reordered and retransmits as if it lost
    // packets (docs/performance.md, "Many TCP flows").
    let bulk_owd = |f: &FlowPlan| {
        forward(f)
            && caps(f.transport).connection_oriented
            && f.spec.is_max()
            && f.meter_in(plan) == MeterMode::Owd
    };
    let writers = usize::from(plan.flows.iter().filter(|f| bulk_owd(f)).count() >= 2);
    let shared_bulk = |f: &FlowPlan| writers > 0 && bulk_owd(f);
    let mut bulk_groups: Vec<Vec<(usize, FlowJob, TcpStream)>> =
        (0..writers).map(|_| Vec::new()).collect();
    // Paced one-way TCP flows share writer threads as the UDP ones share
    // pacers (run_paced_shared).
    let paced_owd = |f: &FlowPlan| paced_tcp_candidate(plan, f);
    let tcp_candidates = plan.flows.iter().filter(|f| paced_owd(f)).count();
    let tcp_writers = paced_tcp_writers(plan.pacing, tcp_candidates, cores);
    let mut paced_groups: Vec<Vec<(usize, FlowJob, TcpStream)>> =
        (0..tcp_writers).map(|_| Vec::new()).collect();
    let pacers = pacers(plan);
    let shared = if pacers > 0 { candidates } else { 0 };
    let shared_tcp = if tcp_writers > 0 { tcp_candidates } else { 0 };
    // Spin before deadlines only while every pacing thread can have a core.
    let spin_ns = if pacers + tcp_writers + (paced - shared - shared_tcp) < cores {
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
            cancel,
            spin_ns,
            paced,
            tcp_write,
            log: sink.as_ref().map(|k| k.producer()),
            probe_key: probe_key.clone(),
        };
        let sock = if pacers > 0 && candidate(&job.plan) {
            match sock.into_udp() {
                Ok(s) => {
                    groups[i % pacers].push((i, job, s));
                    continue;
                }
                Err(other) => other,
            }
        } else if tcp_writers > 0 && paced_owd(&job.plan) {
            match sock.into_tcp() {
                Ok(s) => {
                    paced_groups[i % tcp_writers].push((i, job, s));
                    continue;
                }
                Err(other) => other,
            }
        } else if shared_bulk(&job.plan) {
            match sock.into_tcp() {
                Ok(s) => {
                    bulk_groups[i % writers].push((i, job, s));
                    continue;
                }
                Err(other) => other,
            }
        } else {
            sock
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
    for (g, group) in paced_groups.into_iter().enumerate() {
        let ids = group.iter().map(|(i, _, _)| *i).collect();
        let run: GroupRun = Box::new(move || run_paced_shared(group, spin_ns));
        group_runs.push((format!("wb-tcpp-{g}"), ids, run));
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

/// Paced one-way TCP flows, which can share writer threads
/// ([`paced_tcp_writers`]); RTT-meter flows keep a thread each, as their
/// bulk kin do.
fn paced_tcp_candidate(plan: &SessionPlan, f: &FlowPlan) -> bool {
    f.direction == wirebench_wire::Direction::Forward
        && f.transport == wirebench_wire::Transport::Tcp
        && !f.spec.is_max()
        && f.meter_in(plan) == MeterMode::Owd
}

/// Writer threads for `candidates` paced one-way TCP flows on `cores`
/// CPUs (0: a thread per flow): automatically one, from as many flows as
/// CPUs on. A thread per flow switched among 60 flows for a quarter of
/// its CPU, and writers on several CPUs reorder what they send through
/// one veth link (docs/engine.md, Pacing).
fn paced_tcp_writers(pacing: Pacing, candidates: usize, cores: usize) -> usize {
    shared_threads(pacing, candidates, cores, 1)
}

/// Shared pacer threads for `candidates` paced one-way UDP flows on
/// `cores` CPUs (0: a thread per flow). Automatically, flows share from as
/// many as the CPUs on, leaving a core to the rest of the host (on
/// loopback: the receiver).
fn pacer_threads(pacing: Pacing, candidates: usize, cores: usize) -> usize {
    shared_threads(pacing, candidates, cores, cores.saturating_sub(1))
}

/// Threads shared by `candidates` flows on `cores` CPUs as `pacing` asks:
/// none (a thread per flow) below as many flows as CPUs, else `auto`.
fn shared_threads(pacing: Pacing, candidates: usize, cores: usize, auto: usize) -> usize {
    match pacing {
        _ if candidates == 0 => 0,
        Pacing::PerFlow => 0,
        Pacing::Shared(n) => n.clamp(1, candidates),
        Pacing::Auto if candidates < cores => 0,
        Pacing::Auto => auto.clamp(1, candidates),
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
        sessions: Vec::new(),
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
pub(crate) mod tests {
    use super::*;
    use crate::net::BATCH;
    use std::time::Duration;
    use wirebench_model::FlowSpec;
    use wirebench_wire::Transport;

    pub(crate) fn flow(pps: f64, size: u32, stop: Stop) -> FlowPlan {
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

    pub(crate) fn cfg() -> FlowConfig {
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

    /// The start lead grows with the bulk TCP writers' buffers (1 000
    /// flows: 64 KiB each, 2 ns a byte) and only with them.
    #[test]
    fn shared_tcp_writers_get_a_start_lead_for_their_buffers() {
        let stop = Stop::DurationMs(1000);
        let bulk = |n: usize| {
            let flows = (0..n)
                .map(|_| {
                    let mut f = flow(1.0, 8000, stop);
                    f.spec = FlowSpec::max_rate(8000).unwrap();
                    f.transport = Transport::Tcp;
                    f
                })
                .collect();
            SessionPlan::new("127.0.0.1", flows)
        };
        assert!(tcp_writer_lead_ns(&bulk(1000)) >= 1000 * (64 << 10) * 2);
        assert_eq!(tcp_writer_lead_ns(&bulk(0)), 0);
        // 1 000 paced flows on the shared writer: 8 records of 8000 B each.
        let mut paced = bulk(1000);
        for f in &mut paced.flows {
            f.spec = FlowSpec::constant(100.0, 8000).unwrap();
        }
        assert_eq!(tcp_writer_lead_ns(&paced), 1000 * 64_000 * 2);
        // A thread per flow fills its own buffer before its schedule.
        paced.pacing = Pacing::PerFlow;
        assert_eq!(tcp_writer_lead_ns(&paced), 0);
        let mut udp = bulk(3);
        for f in &mut udp.flows {
            f.transport = Transport::Udp;
            f.spec = FlowSpec::constant(100.0, 8000).unwrap();
        }
        assert_eq!(tcp_writer_lead_ns(&udp), 0);
    }

    #[test]
    fn paced_flows_share_pacers_and_writers_from_as_many_as_the_cores() {
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
        assert_eq!(paced_tcp_writers(Auto, 1, 2), 0);
        assert_eq!(paced_tcp_writers(Auto, 60, 2), 1);
        assert_eq!(paced_tcp_writers(Auto, 60, 8), 1);
        assert_eq!(paced_tcp_writers(PerFlow, 60, 2), 0);
        assert_eq!(paced_tcp_writers(Shared(2), 60, 2), 2);
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
    pub(crate) fn rec() -> SendRec {
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

    pub(crate) fn job(plan: FlowPlan, flow_id: u16, t0: u64) -> FlowJob {
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
    pub(crate) fn read_probes(rx: &UdpSocket, n: usize) -> Vec<(u16, u32, u16)> {
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
