//! The sender (`wirebench send`): runs one control session and its flows,
//! and builds the result document.
//!
//! Session: connect → `Hello` → `Ready{ports}` → clock-offset exchange
//! (`TimeReq`/`TimeResp`, best of [`OFFSET_SAMPLES`]) → `ClockOffset` →
//! `Start` → flows run (one thread each; a keep-alive `TimeReq` every
//! second watches the receiver) → `Stop{linger, sent}` → `Report` → `Bye`.
//!
//! Pacing: each flow keeps an absolute schedule t_k = t_0 + Σ gaps on
//! CLOCK_MONOTONIC, so a late packet never shifts the ones after it. The
//! pacer sleeps until [`crate::clock::SPIN_NS`] before a deadline and spins
//! the rest; every packet already due when the pacer wakes goes out in the
//! same `sendmmsg` (so gaps shorter than a syscall become batches rather
//! than drift). A packet due more than [`LATE_LIMIT_NS`] ago when its turn
//! comes is not sent and counted `not_sent`, as is a packet the kernel
//! refused; neither is ever network loss.

use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack, wait_until};
use crate::ctl::{Ctl, Recv};
use crate::net::{enable_rx_timestamps, set_rcvbuf, set_sndbuf, RecvBatch, SendBatch, BATCH};
use crate::plan::{clip_to_budget, FlowPlan, SessionPlan, Stop};
use crate::recv::unmap;
use crate::result::*;
use crate::sys::{self, CpuTime, HostCpu, TcpInfo};
use crate::EngineError;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wirebench_model::voip::JitterBuffer;
use wirebench_model::MIN_PAYLOAD;
use wirebench_stats::{
    FlowConfig, IpVersion, RecvAccumulator, RecvSummary, SendAccumulator, SendSummary, L4,
};
use wirebench_wire::{
    ControlMsg, FlowSetup, MeterMode, ProbeHeader, Reflection, Transport, CONTROL_VERSION,
    FLAG_RTT, PROBE_HEADER_LEN,
};

/// A packet whose scheduled time is more than this in the past when the
/// pacer reaches it is not sent (`not_sent`): sending it would no longer
/// follow the model, only burst to catch up. One second tolerates scheduler
/// hiccups of a loaded host without ever dropping, yet bounds the burst.
pub const LATE_LIMIT_NS: u64 = 1_000_000_000;
/// Clock-offset exchanges before the run; the one with the smallest round
/// trip is used.
pub const OFFSET_SAMPLES: u32 = 16;
/// Lead time between `Start` and the first scheduled packet, so that every
/// flow thread is up and waiting when the schedule begins.
const START_LEAD_NS: u64 = 20_000_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time allowed for the report beyond the linger.
const REPORT_SLACK: Duration = Duration::from_secs(15);

/// Runs a whole session and returns its result document. When the run
/// breaks part-way (the receiver vanished), the error is
/// [`EngineError::Partial`] carrying the document with `partial: true`.
pub fn run(plan: SessionPlan) -> Result<ResultDoc, EngineError> {
    plan.validate()?;
    let addr = plan.resolve()?;
    let ctl_stream =
        TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| EngineError::Connect {
            addr: addr.to_string(),
            source: e,
        })?;
    let mut ctl = Ctl::new(ctl_stream);
    let local = ctl
        .stream()
        .local_addr()
        .map_err(|e| EngineError::io("control socket", e))?;
    let dst_ip = unmap(addr.ip());
    let ip = if dst_ip.is_ipv4() {
        IpVersion::V4
    } else {
        IpVersion::V6
    };
    let mtu = measure_mtu(dst_ip, plan.port);
    let session: u32 = rand::random::<u32>() | 1;

    let setups: Vec<FlowSetup> = plan
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| FlowSetup {
            flow_id: (i + 1) as u16,
            transport: f.transport,
            interval_ms: plan.interval_ms,
            max_len: f.spec.max_payload(),
            mtu,
            playout_buffer_ms: f.spec.voip_codec().map(|_| plan.jitter_buffer_ms),
        })
        .collect();
    ctl.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session,
        meter: plan.meter,
        flows: setups,
    })?;
    let ports = match ctl.expect("Ready", REPLY_TIMEOUT)? {
        ControlMsg::Ready { ports } if ports.len() == plan.flows.len() => ports,
        other => {
            return Err(EngineError::Protocol(format!(
                "expected Ready with {} ports, got {other:?}",
                plan.flows.len()
            )))
        }
    };

    let clock = measure_offset(&mut ctl)?;
    ctl.send(&ControlMsg::ClockOffset {
        offset_ns: clock.applied_ns(),
        error_ns: clock.error_ns,
    })?;

    // Data sockets, all opened before Start so the schedule is not delayed.
    let mut socks = Vec::new();
    for (i, f) in plan.flows.iter().enumerate() {
        let to = SocketAddr::new(dst_ip, ports[i]);
        socks.push(open_data(f, to)?);
    }
    let src_ip = unmap(local.ip());

    // Go.
    ctl.send(&ControlMsg::Start)?;
    let started_real = realtime_ns();
    let t0 = mono_ns() + START_LEAD_NS;
    let cpu0 = CpuTime::process();
    let host0 = HostCpu::read();
    let abort = Arc::new(AtomicBool::new(false));
    let watcher = Watcher::start(ctl, abort.clone())?;

    // Spin before deadlines only while every paced flow can have a core.
    let paced = plan.flows.iter().filter(|f| !f.spec.is_max()).count();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let spin_ns = if paced < cores {
        crate::clock::SPIN_NS
    } else {
        0
    };
    let mut handles = Vec::new();
    for (i, (f, sock)) in plan.flows.iter().cloned().zip(socks).enumerate() {
        let cfg = FlowConfig {
            l4: match f.transport {
                Transport::Udp => L4::Udp,
                Transport::Tcp => L4::Tcp,
            },
            ip,
            mtu,
            interval_ns: plan.interval_ms.map(|m| m * 1_000_000),
        };
        let job = FlowJob {
            plan: f,
            flow_id: (i + 1) as u16,
            session,
            rtt: plan.meter == MeterMode::Rtt,
            t0,
            cfg,
            abort: abort.clone(),
            cancel: plan.cancel,
            spin_ns,
            paced,
        };
        match std::thread::Builder::new()
            .name(format!("wb-tx-{}", i + 1))
            .spawn(move || run_flow(job, sock))
        {
            Ok(h) => handles.push(h),
            Err(e) => {
                // Stop what already runs before giving up.
                abort.store(true, Ordering::Relaxed);
                for h in handles {
                    let _ = h.join();
                }
                let _ = watcher.finish();
                return Err(EngineError::io("flow thread", e));
            }
        }
    }
    let mut outcomes: Vec<FlowSent> = Vec::new();
    let linger_ms = plan.linger_ms;
    for h in handles {
        outcomes.push(
            h.join()
                .unwrap_or_else(|_| FlowSent::failed("flow thread panicked")),
        );
    }
    let stopped_mono = mono_ns();
    let run_s = (stopped_mono.saturating_sub(t0)) as f64 / 1e9;
    let cpu_sender = CpuTime::process().since(cpu0);
    let host1 = HostCpu::read();
    let (ctl, peer_gone) = watcher.finish();

    let mut partial: Option<String> = peer_gone;

    // Collect the receiver's side, also when a flow failed on its own (the
    // other flows' numbers are still good).
    let mut reports: Vec<FlowReport> = Vec::new();
    let mut extra = ReportExtra::default();
    if let (None, Some(mut ctl)) = (&partial, ctl) {
        let sent: Vec<u64> = outcomes.iter().map(|o| o.send.packets).collect();
        match collect_report(&mut ctl, plan.linger_ms, sent) {
            Ok((r, x)) => {
                reports = r;
                extra = x;
                let _ = ctl.send(&ControlMsg::Bye);
            }
            Err(e) => partial = Some(e.to_string()),
        }
    }
    // Reflections: the receiver already lingered before its report; without
    // a report, give them the linger here.
    let wait_ms = if partial.is_some() { linger_ms } else { 0 };
    for o in &mut outcomes {
        if let Some(rx) = o.rtt_rx.take() {
            o.rtt = Some(rx.finish(wait_ms, &abort));
        }
    }
    if partial.is_none() {
        if let Some((i, e)) = outcomes
            .iter()
            .enumerate()
            .find_map(|(i, o)| o.error.as_ref().map(|e| (i, e)))
        {
            partial = Some(format!("flow {}: {e}", i + 1));
        }
    }
    if partial.is_none() && outcomes.iter().any(|o| o.cancelled) {
        partial = Some("interrupted: flows stopped early".into());
    }

    let doc = build_doc(DocParts {
        plan: &plan,
        started_real,
        src: SocketAddr::new(src_ip, 0),
        dst_ip,
        mtu,
        clock,
        outcomes,
        reports,
        extra,
        run_s,
        cpu_sender,
        host: sys::host_cpu_share(host0, host1, run_s),
        partial: partial.clone(),
    });
    match partial {
        None => Ok(doc),
        Some(reason) => Err(EngineError::Partial {
            reason,
            doc: Box::new(doc),
        }),
    }
}

/// Sends `Stop` and waits for the receiver's `Report` (answers to
/// keep-alives still in flight are skipped).
fn collect_report(
    ctl: &mut Ctl,
    linger_ms: u64,
    sent: Vec<u64>,
) -> Result<(Vec<FlowReport>, ReportExtra), EngineError> {
    ctl.send(&ControlMsg::Stop { linger_ms, sent })?;
    ctl.set_limit(crate::ctl::REPORT_LINE_LIMIT);
    let deadline = std::time::Instant::now() + Duration::from_millis(linger_ms) + REPORT_SLACK;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match ctl.expect("Report", left)? {
            ControlMsg::TimeResp { .. } => continue,
            ControlMsg::Report { flows, extra } => {
                let mut reports = Vec::new();
                for v in flows {
                    reports.push(serde_json::from_value::<FlowReport>(v).map_err(|e| {
                        EngineError::Protocol(format!("unreadable flow report: {e}"))
                    })?);
                }
                let extra = serde_json::from_value(extra).unwrap_or_default();
                return Ok((reports, extra));
            }
            other => {
                return Err(EngineError::Protocol(format!(
                    "expected Report, got {other:?}"
                )))
            }
        }
    }
}

/// Path MTU towards the receiver from a connected UDP socket; the largest
/// interface MTU when the kernel cannot say; 1500 as the last resort.
fn measure_mtu(dst: IpAddr, port: u16) -> u32 {
    let any: IpAddr = if dst.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    UdpSocket::bind(SocketAddr::new(any, 0))
        .ok()
        .and_then(|s| {
            s.connect(SocketAddr::new(dst, port)).ok()?;
            sys::path_mtu(&s, dst.is_ipv6())
        })
        .or_else(sys::interface_mtu)
        .unwrap_or(1500)
}

/// The measured clock offset (receiver − sender) and its error bound, ns.
#[derive(Debug, Clone, Copy)]
struct Offset {
    offset_ns: i64,
    error_ns: u64,
    samples: u32,
}

impl Offset {
    /// An offset within its own error bound is indistinguishable from zero
    /// and is not applied: on one host (and in a namespace test-bed, where
    /// every node shares one kernel clock) the true offset is exactly 0,
    /// and subtracting a few microseconds of estimation noise would bias
    /// every delay, even push the smallest below zero.
    fn applied(&self) -> bool {
        self.offset_ns.unsigned_abs() > self.error_ns
    }

    fn applied_ns(&self) -> i64 {
        if self.applied() {
            self.offset_ns
        } else {
            0
        }
    }
}

/// NTP's four-timestamp exchange over the control connection.
fn measure_offset(ctl: &mut Ctl) -> Result<Offset, EngineError> {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..OFFSET_SAMPLES {
        let t1 = realtime_ns();
        ctl.send(&ControlMsg::TimeReq { t1_ns: t1 })?;
        let (t2, t3) = match ctl.expect("TimeResp", REPLY_TIMEOUT)? {
            ControlMsg::TimeResp {
                t1_ns,
                t2_ns,
                t3_ns,
            } if t1_ns == t1 => (t2_ns, t3_ns),
            other => {
                return Err(EngineError::Protocol(format!(
                    "expected TimeResp, got {other:?}"
                )))
            }
        };
        let t4 = realtime_ns();
        let rtt = (t4 as i128 - t1 as i128) - (t3 as i128 - t2 as i128);
        let rtt = rtt.max(0) as u64;
        let offset = ((t2 as i128 - t1 as i128) + (t3 as i128 - t4 as i128)) / 2;
        if best.is_none_or(|(r, _)| rtt < r) {
            best = Some((rtt, offset as i64));
        }
    }
    let (rtt, offset) = best.unwrap_or((0, 0));
    Ok(Offset {
        offset_ns: offset,
        error_ns: rtt / 2 + 1,
        samples: OFFSET_SAMPLES,
    })
}

enum DataSock {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

fn open_data(f: &FlowPlan, to: SocketAddr) -> Result<DataSock, EngineError> {
    match f.transport {
        Transport::Udp => {
            let any: IpAddr = if to.is_ipv4() {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            };
            let s = UdpSocket::bind(SocketAddr::new(any, 0))
                .map_err(|e| EngineError::io("UDP data socket", e))?;
            s.connect(to).map_err(|e| EngineError::Connect {
                addr: to.to_string(),
                source: e,
            })?;
            set_sndbuf(s.as_raw_fd(), 4 << 20);
            Ok(DataSock::Udp(s))
        }
        Transport::Tcp => {
            let s = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT).map_err(|e| {
                EngineError::Connect {
                    addr: to.to_string(),
                    source: e,
                }
            })?;
            // Paced records must leave when written; bulk can batch.
            let _ = s.set_nodelay(!f.spec.is_max());
            let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
            Ok(DataSock::Tcp(s))
        }
    }
}

/// Watches the control connection during the run: a keep-alive `TimeReq`
/// every second, and a closed or silent receiver aborts the flows.
struct Watcher {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<(Ctl, Option<String>)>,
}

impl Watcher {
    fn start(mut ctl: Ctl, abort: Arc<AtomicBool>) -> Result<Watcher, EngineError> {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let handle = std::thread::Builder::new()
            .name("wb-ctl".into())
            .spawn(move || {
                let mut last_heard = mono_ns();
                let mut next_ping = 0u64;
                while !st.load(Ordering::Relaxed) {
                    let now = mono_ns();
                    if now >= next_ping {
                        if ctl
                            .send(&ControlMsg::TimeReq {
                                t1_ns: realtime_ns(),
                            })
                            .is_err()
                        {
                            abort.store(true, Ordering::Relaxed);
                            return (ctl, Some("control connection broke".to_string()));
                        }
                        next_ping = now + 1_000_000_000;
                    }
                    match ctl.recv(Duration::from_millis(100)) {
                        Ok(Recv::Msg(ControlMsg::Error { message })) => {
                            abort.store(true, Ordering::Relaxed);
                            return (ctl, Some(format!("receiver error: {message}")));
                        }
                        Ok(Recv::Msg(_)) => last_heard = mono_ns(),
                        Ok(Recv::Timeout) => {}
                        Ok(Recv::Closed) | Err(_) => {
                            abort.store(true, Ordering::Relaxed);
                            return (
                                ctl,
                                Some("receiver closed the control connection".to_string()),
                            );
                        }
                    }
                    if mono_ns().saturating_sub(last_heard) > 10_000_000_000 {
                        abort.store(true, Ordering::Relaxed);
                        return (ctl, Some("receiver silent for 10 s".to_string()));
                    }
                }
                (ctl, None)
            })
            .map_err(|e| EngineError::io("control thread", e))?;
        Ok(Watcher { stop, handle })
    }

    fn finish(self) -> (Option<Ctl>, Option<String>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.join() {
            Ok((ctl, gone)) => (Some(ctl), gone),
            Err(_) => (None, Some("control thread failed".into())),
        }
    }
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
}

impl FlowJob {
    /// Why the flow must stop now, if it must.
    fn halted(&self) -> Option<Halt> {
        if self.abort.load(Ordering::Relaxed) {
            Some(Halt::PeerGone)
        } else if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            Some(Halt::Cancelled)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Halt {
    PeerGone,
    Cancelled,
}

struct FlowSent {
    /// CLOCK_REALTIME of the first packet sent (0 = none).
    first_tx: u64,
    send: SendSummary,
    rtt: Option<RecvSummary>,
    /// Still collecting reflections (rtt meter) until the linger is over.
    rtt_rx: Option<RttRx>,
    /// Stopped early by the caller's cancel flag (the session still reports).
    cancelled: bool,
    tcp: Option<TcpInfo>,
    error: Option<String>,
}

impl FlowSent {
    fn failed(msg: &str) -> FlowSent {
        FlowSent {
            first_tx: 0,
            send: SendSummary::default(),
            rtt: None,
            rtt_rx: None,
            cancelled: false,
            tcp: None,
            error: Some(msg.to_string()),
        }
    }
}

/// The flow's schedule: draws departures, applies the stop condition.
struct Schedule {
    gen: Box<dyn wirebench_model::Generator>,
    next_at: u64,
    end_at: Option<u64>,
    packets_left: Option<u64>,
    bytes_left: Option<u64>,
    max: bool,
    max_len: u32,
    /// Packets drawn so far.
    drawn: u64,
}

impl Schedule {
    fn new(plan: &FlowPlan, t0: u64) -> Result<Schedule, String> {
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
            max_len: plan.spec.max_payload().max(MIN_PAYLOAD),
            drawn: 0,
        })
    }

    /// The next packet: (scheduled time, size), or None when the flow is
    /// done. For `--max` flows the schedule time is meaningless (0).
    fn next(&mut self, now: u64) -> Option<(u64, u32)> {
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
        let mut size = d.size.clamp(MIN_PAYLOAD, self.max_len);
        if let Some(b) = self.bytes_left.as_mut() {
            size = clip_to_budget(size, *b, MIN_PAYLOAD);
            *b -= size as u64;
        }
        if let Some(p) = self.packets_left.as_mut() {
            *p -= 1;
        }
        Some((at, size))
    }
}

fn run_flow(job: FlowJob, sock: DataSock) -> FlowSent {
    tighten_timer_slack();
    // A max-rate flow stays at normal priority beside paced flows, whose
    // pacers must not wait for it; alone, it competes on equal terms.
    if !job.plan.spec.is_max() || job.paced == 0 {
        raise_priority();
    }
    let mut sched = match Schedule::new(&job.plan, job.t0) {
        Ok(s) => s,
        Err(e) => return FlowSent::failed(&e),
    };
    let mut acc = SendAccumulator::new(job.cfg);
    match sock {
        DataSock::Udp(s) => {
            let reflector = if job.rtt {
                match s.try_clone() {
                    Ok(rs) => Some(RttRx::start_udp(rs, &job)),
                    Err(e) => return FlowSent::failed(&format!("cannot clone socket: {e}")),
                }
            } else {
                None
            };
            let mut first_tx = 0;
            let r = udp_send(&job, &s, &mut sched, &mut acc, &mut first_tx);
            let (error, cancelled) = split_outcome(r);
            FlowSent {
                first_tx,
                send: acc.summary(),
                rtt: None,
                rtt_rx: reflector,
                cancelled,
                tcp: None,
                error,
            }
        }
        DataSock::Tcp(s) => {
            let reflector = if job.rtt {
                match s.try_clone() {
                    Ok(rs) => Some(RttRx::start_tcp(rs, &job)),
                    Err(e) => return FlowSent::failed(&format!("cannot clone socket: {e}")),
                }
            } else {
                None
            };
            let mut first_tx = 0;
            let r = tcp_send(&job, &s, &mut sched, &mut acc, &mut first_tx);
            let (error, cancelled) = split_outcome(r);
            let tcp = sys::tcp_info(&s);
            FlowSent {
                first_tx,
                send: acc.summary(),
                rtt: None,
                rtt_rx: reflector,
                cancelled,
                tcp: Some(tcp.unwrap_or_default()),
                error,
            }
        }
    }
}

/// Waits for a deadline like [`wait_until`], but in slices of at most
/// 50 ms while it is far away, so that a long gap (an OFF period, a slow
/// rate) does not delay reacting to Ctrl-C or a vanished receiver.
fn wait_or_halt(job: &FlowJob, at: u64) -> Result<u64, Halt> {
    const SLICE: u64 = 50_000_000;
    loop {
        if let Some(h) = job.halted() {
            return Err(h);
        }
        let now = mono_ns();
        if at <= now + 2 * SLICE {
            return Ok(crate::clock::wait_until_spin(at, job.spin_ns));
        }
        crate::clock::sleep_until(now + SLICE);
    }
}

/// A flow's end: Ok (done or cancelled) or a hard error.
type FlowEnd = Result<Option<Halt>, String>;

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

/// Gathers into `meta` every packet due at `now` (at least the pending
/// one), skipping hopelessly late ones. Returns how many were gathered.
fn gather(
    sched: &mut Schedule,
    pending: &mut Option<(u64, u32)>,
    now: u64,
    acc: &mut SendAccumulator,
    meta: &mut [(u64, u32)],
    room: usize,
) -> usize {
    let room = room.min(meta.len());
    let mut n = 0;
    while n < room {
        let Some((at, size)) = *pending else { break };
        if !sched.max && at > now {
            break;
        }
        if !sched.max && now - at > LATE_LIMIT_NS {
            acc.record_not_sent(1);
        } else {
            meta[n] = (at, size);
            n += 1;
        }
        *pending = sched.next(now);
    }
    n
}

fn udp_send(
    job: &FlowJob,
    s: &UdpSocket,
    sched: &mut Schedule,
    acc: &mut SendAccumulator,
    first_tx: &mut u64,
) -> FlowEnd {
    let fd = s.as_raw_fd();
    let mut batch = SendBatch::new(sched.max_len as usize);
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
        let n = gather(sched, &mut pending, now, acc, &mut meta, BATCH);
        if n == 0 {
            continue;
        }
        for (i, &(_, size)) in meta[..n].iter().enumerate() {
            h.len = size as u16;
            h.seq = seq.wrapping_add(i as u32);
            let _ = h.encode(batch.slot(i, size as usize));
        }
        let tx = realtime_ns();
        if *first_tx == 0 {
            *first_tx = tx;
        }
        for (i, &(_, size)) in meta[..n].iter().enumerate() {
            ProbeHeader::stamp_tx(batch.slot(i, size as usize), tx);
        }
        let actual = mono_ns();
        let mut i = 0;
        while i < n {
            match batch.send(fd, i, n) {
                Ok(k) => {
                    for &(at, size) in &meta[i..i + k] {
                        acc.record_sent(if sched.max { actual } else { at }, actual, size);
                    }
                    seq = seq.wrapping_add(k as u32);
                    i += k;
                }
                Err(e) => {
                    // This packet did not leave; renumber the rest so the
                    // receiver sees no gap for it.
                    acc.record_not_sent(1);
                    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                        refused += 1;
                    }
                    for (j, &(_, size)) in meta.iter().enumerate().take(n).skip(i + 1) {
                        let cur = seq.wrapping_add((j - i) as u32 - 1);
                        ProbeHeader::stamp_seq(batch.slot(j, size as usize), cur);
                    }
                    i += 1;
                    if e.kind() == ErrorKind::WouldBlock {
                        std::thread::yield_now();
                    }
                }
            }
        }
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

fn tcp_send(
    job: &FlowJob,
    s: &TcpStream,
    sched: &mut Schedule,
    acc: &mut SendAccumulator,
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
        let room = meta.len();
        let n = gather(sched, &mut pending, now, acc, &mut meta, room);
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
            let _ = h.encode(&mut buf[off..off + size as usize]);
            off += size as usize;
        }
        let actual = mono_ns();
        if let Err(e) = out.write_all(&buf[..off]) {
            acc.record_not_sent(n as u64);
            return Err(format!("TCP data connection failed: {e}"));
        }
        for &(at, size) in &meta[..n] {
            acc.record_sent(if sched.max { actual } else { at }, actual, size);
        }
        seq = seq.wrapping_add(n as u32);
    }
    let _ = out.flush();
    Ok(None)
}

/// Sender side of the RTT meter: reads reflected probes on the flow's
/// socket and records round-trip times (the receiver's dwell excluded).
struct RttRx {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<RecvSummary>,
}

impl RttRx {
    fn start_udp(sock: UdpSocket, job: &FlowJob) -> RttRx {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let cfg = job.cfg;
        let (sid, flow) = (job.session, job.flow_id);
        let slot = (job.plan.spec.max_payload() as usize).max(wirebench_wire::RTT_MIN_LEN) + 1;
        let handle = std::thread::spawn(move || {
            let mut acc = RecvAccumulator::new(cfg);
            let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
            set_rcvbuf(sock.as_raw_fd(), 8 << 20);
            enable_rx_timestamps(sock.as_raw_fd());
            let mut batch = RecvBatch::new(slot);
            let fd = sock.as_raw_fd();
            while !st.load(Ordering::Relaxed) {
                let n = match batch.recv(fd) {
                    Ok(n) => n,
                    Err(_) => continue,
                };
                let fallback = realtime_ns();
                for i in 0..n {
                    let t4 = batch.kernel_ts(i).unwrap_or(fallback);
                    if batch.truncated(i) {
                        continue;
                    }
                    let d = batch.data(i);
                    let Ok(h) = ProbeHeader::decode_datagram(d) else {
                        continue;
                    };
                    if h.session != sid || h.flow != flow || !h.is_reflected() {
                        continue;
                    }
                    let Ok(r) = Reflection::decode(d) else {
                        continue;
                    };
                    let rtt = (t4 as i64 - h.tx_ns as i64) - (r.tx_ns as i64 - r.rx_ns as i64);
                    acc.record(h.seq, rtt, t4, d.len() as u32);
                }
            }
            acc.summary(None)
        });
        RttRx { stop, handle }
    }

    /// TCP: reflections come back as 40-byte records on the same connection.
    fn start_tcp(stream: TcpStream, job: &FlowJob) -> RttRx {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let cfg = job.cfg;
        let (sid, flow) = (job.session, job.flow_id);
        let handle = std::thread::spawn(move || {
            let mut acc = RecvAccumulator::new(cfg);
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let mut rd = &stream;
            let mut buf = vec![0u8; 64 << 10];
            let mut filled = 0;
            'outer: while !st.load(Ordering::Relaxed) {
                let n = match rd.read(&mut buf[filled..]) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) =>
                    {
                        continue
                    }
                    Err(_) => break,
                };
                let t4 = realtime_ns();
                filled += n;
                let mut pos = 0;
                while filled - pos >= PROBE_HEADER_LEN {
                    let Ok(h) = ProbeHeader::decode_prefix(&buf[pos..filled]) else {
                        break 'outer;
                    };
                    let len = h.len as usize;
                    if h.session != sid
                        || h.flow != flow
                        || !h.is_reflected()
                        || len < wirebench_wire::RTT_MIN_LEN
                        || len > buf.len()
                    {
                        break 'outer;
                    }
                    if filled - pos < len {
                        break;
                    }
                    if let Ok(r) = Reflection::decode(&buf[pos..pos + len]) {
                        let rtt = (t4 as i64 - h.tx_ns as i64) - (r.tx_ns as i64 - r.rx_ns as i64);
                        acc.record(h.seq, rtt, t4, len as u32);
                    }
                    pos += len;
                }
                buf.copy_within(pos..filled, 0);
                filled -= pos;
            }
            acc.summary(None)
        });
        RttRx { stop, handle }
    }

    fn finish(self, linger_ms: u64, abort: &AtomicBool) -> RecvSummary {
        // Reflections of the last probes are still on their way back.
        let until = mono_ns() + linger_ms * 1_000_000;
        while mono_ns() < until && !abort.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

struct DocParts<'a> {
    plan: &'a SessionPlan,
    started_real: u64,
    src: SocketAddr,
    dst_ip: IpAddr,
    mtu: u32,
    clock: Offset,
    outcomes: Vec<FlowSent>,
    reports: Vec<FlowReport>,
    extra: ReportExtra,
    run_s: f64,
    cpu_sender: CpuTime,
    host: sys::HostCpuShare,
    partial: Option<String>,
}

fn build_doc(p: DocParts) -> ResultDoc {
    let mut flows = Vec::new();
    let total_lost: u64 = p.reports.iter().map(|r| r.summary.lost).sum();
    let host_drops = p.extra.rcvbuf_errors;
    let mut total = Total::default();
    let mut delay_weighted = 0.0;
    for (i, (f, o)) in p.plan.flows.iter().zip(&p.outcomes).enumerate() {
        let id = (i + 1) as u16;
        let rep = p.reports.iter().find(|r| r.flow_id == id);
        let s = rep.map(|r| r.summary.clone()).unwrap_or_default();
        // Namespace-wide buffer drops are shared out in proportion to each
        // flow's losses, and never exceed them.
        let receiver_host = if total_lost > 0 && f.transport == Transport::Udp {
            ((host_drops.min(total_lost) as f64) * s.lost as f64 / total_lost as f64).round() as u64
        } else {
            0
        }
        .min(s.lost);
        let received = Received {
            packets: s.packets,
            unique: s.unique,
            bytes: s.bytes,
            lost: s.lost,
            loss_ratio: s.loss_ratio,
            duplicates: s.duplicates,
            reordered: s.reordered,
            foreign: rep.map(|r| r.foreign).unwrap_or(0),
            loss_bursts: s.loss_bursts,
            negative_delays: s.negative_delays,
            negative_delays_beyond_error: rep.map(|r| r.negative_beyond_error).unwrap_or(0),
        };
        total.sent_packets += o.send.packets;
        total.not_sent += o.send.not_sent;
        total.received_packets += s.unique;
        total.lost += s.lost;
        total.throughput_bps.payload += s.throughput_bps.payload;
        total.throughput_bps.ip += s.throughput_bps.ip;
        total.throughput_bps.ethernet += s.throughput_bps.ethernet;
        total.throughput_bps.wire += s.throughput_bps.wire;
        delay_weighted += s.delay_s.mean * s.packets as f64;
        total.delay_max_s = total.delay_max_s.max(s.delay_s.max);
        flows.push(FlowResult {
            id,
            transport: match f.transport {
                Transport::Udp => "udp".into(),
                Transport::Tcp => "tcp".into(),
            },
            ip_version: if p.dst_ip.is_ipv4() { 4 } else { 6 },
            src: p.src.ip().to_string(),
            dst: p.dst_ip.to_string(),
            mtu: p.mtu,
            requested: Requested {
                rate_pps: f.spec.nominal_rate_pps(),
                payload_bytes: f.spec.nominal_payload_bytes(),
                model: f.spec.describe(),
                stop: match f.stop {
                    Stop::DurationMs(ms) => format!("duration {ms} ms"),
                    Stop::Packets(n) => format!("packets {n}"),
                    Stop::KBytes(k) => format!("kbytes {k}"),
                },
                seed: f.seed,
            },
            sent: o.send.clone(),
            received,
            loss_split: LossSplit {
                not_sent: o.send.not_sent,
                receiver_host,
                network: s.lost - receiver_host,
            },
            throughput_bps: s.throughput_bps,
            frames: s.frames,
            delay_s: s.delay_s,
            jitter_s: s.jitter_s,
            rtt_s: o.rtt.as_ref().map(|r| r.delay_s),
            rtt_received: o.rtt.as_ref().map(|r| r.unique),
            tcp: o.tcp,
            voip: f.spec.voip_codec().map(|c| {
                // A fixed playout buffer anchored at the fastest packet: the
                // mouth-to-ear delay is coding + fastest network delay +
                // buffer, and packets later than the buffer are lost to the
                // listener (the receiver measured their share).
                let jb = JitterBuffer::new(f64::from(p.plan.jitter_buffer_ms) / 1e3);
                let base = s.delay_s.min.max(0.0);
                let late = s.late_share.unwrap_or(0.0);
                let q = jb.quality(&c, base, s.loss_ratio, late);
                Voip {
                    r_factor: q.r_factor,
                    mos: q.mos,
                    mouth_to_ear_s: c.coding_delay_s() + base + jb.depth_s,
                    jitter_buffer_s: jb.depth_s,
                    late_share: late,
                }
            }),
            completion_s: (f.spec.transfer_bytes.is_some() && s.unique > 0 && o.first_tx > 0).then(
                || {
                    (s.last_arrival_ns as i64 - p.clock.applied_ns() - o.first_tx as i64) as f64
                        / 1e9
                },
            ),
            intervals: s.intervals,
        });
    }
    if total.received_packets > 0 {
        total.delay_mean_s = delay_weighted
            / p.reports
                .iter()
                .map(|r| r.summary.packets as f64)
                .sum::<f64>()
                .max(1.0);
    }
    if total.sent_packets > 0 {
        total.loss_ratio = total.lost as f64 / total.sent_packets as f64;
    }
    ResultDoc {
        schema: SCHEMA.into(),
        tool: Tool {
            name: "wirebench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at: rfc3339(p.started_real),
        meter: match p.plan.meter {
            MeterMode::Owd => "owd".into(),
            MeterMode::Rtt => "rtt".into(),
        },
        partial: p.partial.is_some(),
        partial_reason: p.partial,
        command: p.plan.command.clone(),
        host: sys::host_info(),
        clock: ClockInfo {
            offset_s: p.clock.offset_ns as f64 / 1e9,
            error_s: p.clock.error_ns as f64 / 1e9,
            applied: p.clock.applied(),
            method: "NTP-style 4-timestamp exchange over the control connection, smallest round trip of the samples".into(),
            samples: p.clock.samples,
        },
        flows,
        total,
        receiver: ReceiverInfo {
            host: p.extra.host.clone(),
            rcvbuf_errors: p.extra.rcvbuf_errors,
            foreign_control: p.extra.foreign_control,
        },
        cpu: Cpu {
            sender: p.cpu_sender.share(p.run_s),
            receiver: p.extra.cpu_s.share(p.run_s),
            host: p.host,
        },
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
        }
    }

    fn cfg() -> FlowConfig {
        FlowConfig {
            l4: L4::Udp,
            ip: IpVersion::V4,
            mtu: 1500,
            interval_ns: None,
        }
    }

    #[test]
    fn offset_within_its_error_is_not_applied() {
        let o = |offset_ns, error_ns| Offset {
            offset_ns,
            error_ns,
            samples: 1,
        };
        assert_eq!(o(3_000, 5_000).applied_ns(), 0);
        assert_eq!(o(-5_000, 5_000).applied_ns(), 0);
        assert_eq!(o(-5_001, 5_000).applied_ns(), -5_001);
        assert_eq!(o(2_000_000, 50_000).applied_ns(), 2_000_000);
    }

    #[test]
    fn schedule_is_absolute_and_stops_exactly() {
        let t0 = 1_000_000_000;
        let mut s = Schedule::new(&flow(1000.0, 100, Stop::Packets(5)), t0).unwrap();
        // However late the caller asks, the times stay on the grid.
        let times: Vec<u64> = std::iter::from_fn(|| s.next(u64::MAX / 2).map(|x| x.0)).collect();
        assert_eq!(
            times,
            (0..5).map(|k| t0 + k * 1_000_000).collect::<Vec<_>>()
        );
        let mut s = Schedule::new(&flow(1000.0, 100, Stop::DurationMs(10)), t0).unwrap();
        assert_eq!(std::iter::from_fn(|| s.next(0)).count(), 10);
        // Gap rounded down (333 333 ns): still R × T packets.
        let mut s = Schedule::new(&flow(3000.0, 100, Stop::DurationMs(3000)), t0).unwrap();
        assert_eq!(std::iter::from_fn(|| s.next(0)).count(), 9000);
        let mut s = Schedule::new(&flow(7.0, 100, Stop::DurationMs(60_000)), t0).unwrap();
        assert_eq!(std::iter::from_fn(|| s.next(0)).count(), 420);
        let mut s = Schedule::new(&flow(1000.0, 300, Stop::KBytes(3)), t0).unwrap();
        let sizes: Vec<u32> = std::iter::from_fn(|| s.next(0).map(|x| x.1)).collect();
        assert_eq!(sizes.iter().map(|&x| x as u64).sum::<u64>(), 3 * 1024);
        assert!(sizes.iter().all(|&x| x >= MIN_PAYLOAD));
    }

    #[test]
    fn gather_batches_due_packets_and_drops_hopeless_ones() {
        let t0 = 10_000_000_000;
        // 1 µs gaps: far below a syscall, so many are due at once.
        let mut s = Schedule::new(&flow(1e6, 100, Stop::Packets(10_000)), t0).unwrap();
        let mut acc = SendAccumulator::new(cfg());
        let mut meta = [(0u64, 0u32); BATCH];
        let mut pending = s.next(t0);
        let n = gather(
            &mut s,
            &mut pending,
            t0 + 10_000,
            &mut acc,
            &mut meta,
            BATCH,
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
                BATCH
            ),
            0
        );
        // A 1000 pps flow whose pacer wakes 1.5 s late: packets due more
        // than 1 s ago are not sent, the rest go out in full batches.
        let mut s = Schedule::new(&flow(1000.0, 100, Stop::Packets(2000)), t0).unwrap();
        let mut acc = SendAccumulator::new(cfg());
        let mut pending = s.next(t0);
        let late = t0 + 1_500_000_000;
        let mut gathered = 0;
        loop {
            let n = gather(&mut s, &mut pending, late, &mut acc, &mut meta, BATCH);
            if n == 0 {
                break;
            }
            assert!(n == BATCH || pending.is_some_and(|p| p.0 > late));
            assert!(meta[..n].iter().all(|m| late - m.0 <= LATE_LIMIT_NS));
            gathered += n;
        }
        assert_eq!(acc.summary().not_sent, 500);
        assert_eq!(gathered, 1001);
    }
}
