//! The sender's side of the control session: connect, `Hello` →
//! `Ready{ports}`, the clock-offset exchange, the keep-alive watcher during
//! the run, and `Stop` → `Report` at the end. The flows themselves are
//! [`crate::pacing`]'s; this module only talks on the control connection.

use crate::clock::{mono_ns, realtime_ns};
use crate::ctl::{Ctl, Recv};
use crate::live::Forward;
use crate::plan::SessionPlan;
use crate::sys;
use crate::transport::rx::unmap;
use crate::EngineError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wirebench_schema::result::{FlowReport, ReportExtra};
use wirebench_wire::{ControlMsg, FlowSetup, CONTROL_VERSION};

/// Clock-offset exchanges before the run; the one with the smallest round
/// trip is used.
pub const OFFSET_SAMPLES: u32 = 16;
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time allowed for the report beyond the linger.
const REPORT_SLACK: Duration = Duration::from_secs(15);

/// A session the receiver accepted: its data ports are open and the clock
/// offset is measured and told; `Start` is next.
pub(crate) struct Opened {
    pub ctl: Ctl,
    /// Our address on the control connection (the flows' source address).
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub mtu: u32,
    /// Random per session, written into every probe.
    pub session: u32,
    /// The receiver's data port for each flow, in plan order.
    pub ports: Vec<u16>,
    pub clock: Offset,
    /// The receiver streams live intervals (`Hello.live` was asked and
    /// `Ready.live` confirmed it).
    pub live: bool,
    /// What the receiver was told about each flow (`Hello.flows`).
    pub setups: Vec<FlowSetup>,
    /// `--auth probes`: the session's probe key (both ends derived it
    /// from the handshake; the receiver confirmed it checks MACs).
    pub probe_key: Option<wirebench_wire::auth::ProbeKey>,
    /// The file the receiver logs the session to (`-x`, `Ready.log`).
    pub remote_log: Option<String>,
}

/// Connects to the receiver and runs the session up to (not including)
/// `Start`. `src_ports`: each flow's data socket's source port, declared
/// in `Hello` (None: a reverse flow); `live_sink`: the program shows
/// intervals as they come.
pub(crate) fn open(
    plan: &SessionPlan,
    addr: SocketAddr,
    src_ports: &[Option<u16>],
    live_sink: bool,
) -> Result<Opened, EngineError> {
    let ctl_stream = connect_control(plan, addr)?;
    let mut ctl = Ctl::new(ctl_stream);
    let local = ctl
        .stream()
        .local_addr()
        .map_err(|e| EngineError::io("control socket", e))?;
    let dst_ip = unmap(addr.ip());
    let mtu = measure_mtu(dst_ip, plan.port);
    let session: u32 = rand::random::<u32>() | 1;

    // TCP flows with intervals also stream them without a live sink: the
    // sender reads its TCP_INFO as each interval arrives, for the result.
    let live_asked = plan.interval_ms.is_some()
        && (live_sink
            || plan
                .flows
                .iter()
                .any(|f| crate::transport::caps(f.transport).tcp_info));
    let setups: Vec<FlowSetup> = plan
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| FlowSetup {
            flow_id: (i + 1) as u16,
            transport: f.transport,
            interval_ms: plan.interval_ms,
            max_len: f
                .spec
                .max_payload()
                .max(crate::pacing::min_probe_len(plan.auth_probes)),
            mtu,
            playout_buffer_ms: f.spec.voip_codec().map(|_| plan.jitter_buffer_ms),
            rcvbuf: f.opts.window,
            reverse: crate::reverse::model_for(f),
            port: f.opts.data_port,
            meter: f.meter.filter(|m| *m != plan.meter),
            src_port: src_ports.get(i).copied().flatten(),
            bulk: f.spec.is_max(),
        })
        .collect();
    let key = plan.key.as_ref();
    let nonce = crate::auth::sender_nonce(key);
    ctl.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session,
        meter: plan.meter,
        flows: setups.clone(),
        auth: nonce.map(|n| wirebench_wire::auth::to_hex(&n)),
        live: live_asked,
        auth_probes: plan.auth_probes,
        log_name: plan.remote_log.clone(),
        #[cfg(target_os = "linux")]
        xdp: crate::xdp::tx::asks(plan, unmap(local.ip()), dst_ip),
        #[cfg(not(target_os = "linux"))]
        xdp: false,
    })?;
    let reply = ctl.expect("Ready", REPLY_TIMEOUT)?;
    let (reply, probe_key) =
        crate::auth::sender_handshake(&mut ctl, key, nonce, session, reply, REPLY_TIMEOUT)?;
    let probe_key = probe_key.filter(|_| plan.auth_probes);
    let (ports, live, remote_log) = match reply {
        ControlMsg::Ready { auth_probes, .. } if plan.auth_probes && !auth_probes => {
            let m = "the receiver does not check probe MACs (--auth probes); upgrade it";
            let _ = ctl.send(&ControlMsg::Error { message: m.into() });
            return Err(EngineError::Remote(m.into()));
        }
        ControlMsg::Ready { reverse, .. } if !reverse && crate::reverse::any(plan) => {
            let m = "the receiver does not support -R/--bidir (reverse flows); upgrade it";
            let _ = ctl.send(&ControlMsg::Error { message: m.into() });
            return Err(EngineError::Remote(m.into()));
        }
        ControlMsg::Ready { ref log, .. } if plan.remote_log.is_some() && log.is_none() => {
            let m = "the receiver does not support -x (a log named by the sender); upgrade it";
            let _ = ctl.send(&ControlMsg::Error { message: m.into() });
            return Err(EngineError::Remote(m.into()));
        }
        ControlMsg::Ready {
            ports, live, log, ..
        } if ports.len() == plan.flows.len() => (ports, live && live_asked, log),
        other => {
            return Err(EngineError::Protocol(format!(
                "expected Ready with {} ports, got {other:?}",
                plan.flows.len()
            )))
        }
    };

    // A receiver that does not know `FlowSetup.port` opened a port of its
    // own choice: the flow would not use the port the user asked for.
    for (i, (s, p)) in setups.iter().zip(&ports).enumerate() {
        if let Some(want) = s.port.filter(|w| w != p) {
            let m = format!(
                "flow {}: the receiver opened data port {p}, not {want} (-rp/--data-port); upgrade it",
                i + 1
            );
            let _ = ctl.send(&ControlMsg::Error { message: m.clone() });
            return Err(EngineError::Remote(m));
        }
    }
    let clock = measure_offset(&mut ctl)?;
    // A receiver whose clock is a day or more away (a reported hostile one
    // claimed 235 years) is not measuring one-way delay; refuse rather
    // than subtract it from every delay.
    wirebench_wire::limits::check_clock(clock.offset_ns, clock.error_ns).map_err(|e| {
        EngineError::Protocol(format!(
            "receiver's clock is unusable ({e}); synchronise the clocks"
        ))
    })?;
    ctl.send(&ControlMsg::ClockOffset {
        offset_ns: clock.applied_ns(),
        error_ns: clock.error_ns,
    })?;

    Ok(Opened {
        src_ip: unmap(local.ip()),
        ctl,
        dst_ip,
        mtu,
        session,
        ports,
        clock,
        live,
        setups,
        probe_key,
        remote_log,
    })
}

/// The control connection, from the flows' source address and interface
/// when they name one (`-sa`, `--bind-dev`; all flows of a session share
/// them, [`SessionPlan::validate`]): the receiver accepts data only from
/// the control connection's address.
fn connect_control(plan: &SessionPlan, addr: SocketAddr) -> Result<TcpStream, EngineError> {
    let connect_err = |e| EngineError::Connect {
        addr: addr.to_string(),
        source: e,
    };
    let o = plan.flows.first().map(|f| &f.opts);
    let bind = o.and_then(|o| o.bind);
    let dev = o.and_then(|o| o.bind_dev.as_deref());
    if bind.is_none() && dev.is_none() {
        return TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(connect_err);
    }
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| EngineError::io("control socket", e))?;
    crate::sockopt::bind_source(&sock, addr, bind, None, dev)?;
    sock.connect_timeout(&addr.into(), CONNECT_TIMEOUT)
        .map_err(connect_err)?;
    Ok(sock.into())
}

/// Sends `Stop` and waits for the receiver's `Report` (answers to
/// keep-alives still in flight are skipped).
pub(crate) fn collect_report(
    ctl: &mut Ctl,
    linger_ms: u64,
    sent: Vec<u64>,
    live: Option<&Forward>,
) -> Result<(Vec<FlowReport>, ReportExtra), EngineError> {
    let sent_counts = sent.clone();
    ctl.send(&ControlMsg::Stop { linger_ms, sent })?;
    ctl.set_limit(crate::ctl::REPORT_LINE_LIMIT);
    let deadline = std::time::Instant::now() + Duration::from_millis(linger_ms) + REPORT_SLACK;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match ctl.expect("Report", left)? {
            ControlMsg::TimeResp { .. } => continue,
            ControlMsg::Intervals { items } => {
                if let Some(f) = live {
                    f.deliver(items, &[]);
                }
            }
            ControlMsg::Report { flows, extra } => {
                check_report(&flows, &sent_counts)?;
                return Ok((flows, extra));
            }
            other => {
                return Err(EngineError::Protocol(format!(
                    "expected Report, got {other:?}"
                )))
            }
        }
    }
}

/// A report must cover every flow exactly once (ids 1..=n) and cannot
/// claim more distinct packets than were sent: a receiver answering with no
/// flows must not make a run read "30 sent, 0 received, lost 0", exit 0.
fn check_report(reports: &[FlowReport], sent: &[u64]) -> Result<(), EngineError> {
    let bad = |m: String| {
        Err(EngineError::Protocol(format!(
            "receiver's report refused: {m}"
        )))
    };
    if reports.len() != sent.len() {
        return bad(format!(
            "{} flow reports for {} flows",
            reports.len(),
            sent.len()
        ));
    }
    for (i, &n) in sent.iter().enumerate() {
        let id = i + 1;
        let mut of_id = reports.iter().filter(|r| usize::from(r.flow_id) == id);
        let (Some(r), None) = (of_id.next(), of_id.next()) else {
            return bad(format!("flow {id} is missing or reported twice"));
        };
        if r.summary.counts.unique > n {
            return bad(format!(
                "flow {id}: {} distinct packets received of {n} sent",
                r.summary.counts.unique
            ));
        }
    }
    Ok(())
}

/// Path MTU towards the receiver from a connected UDP socket; the largest
/// interface MTU when the kernel cannot say; 1500 as the last resort.
pub(crate) fn measure_mtu(dst: IpAddr, port: u16) -> u32 {
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
pub(crate) struct Offset {
    pub offset_ns: i64,
    pub error_ns: u64,
    pub samples: u32,
}

impl Offset {
    /// An offset within its own error bound is indistinguishable from zero
    /// and is not applied: on one host (and in a namespace test-bed, where
    /// every node shares one kernel clock) the true offset is exactly 0,
    /// and subtracting a few microseconds of estimation noise would bias
    /// every delay, even push the smallest below zero.
    pub fn applied(&self) -> bool {
        self.offset_ns.unsigned_abs() > self.error_ns
    }

    pub fn applied_ns(&self) -> i64 {
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
            // A hostile receiver's timestamps may not fit: saturate, and
            // the range check refuses it.
            best = Some((rtt, i64::try_from(offset).unwrap_or(i64::MAX)));
        }
    }
    let (rtt, offset) = best.unwrap_or((0, 0));
    Ok(Offset {
        offset_ns: offset,
        error_ns: rtt / 2 + 1,
        samples: OFFSET_SAMPLES,
    })
}

/// Watches the control connection during the run: a keep-alive `TimeReq`
/// every second, and a closed or silent receiver aborts the flows.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    /// The receiver said `ReverseDone`: its reverse flows have finished.
    reverse_done: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<(Ctl, Option<String>)>,
}

impl Watcher {
    /// `live`: where streamed intervals go, with a clone of each TCP flow's
    /// socket (`tcp[i]`: flow i + 1) to read its `TCP_INFO` from.
    pub fn start(
        mut ctl: Ctl,
        abort: Arc<AtomicBool>,
        live: Option<(Arc<Forward>, Vec<Option<TcpStream>>)>,
    ) -> Result<Watcher, EngineError> {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let reverse_done = Arc::new(AtomicBool::new(false));
        let rd = reverse_done.clone();
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
                        Ok(Recv::Msg(ControlMsg::Intervals { items })) => {
                            last_heard = mono_ns();
                            if let Some((f, tcp)) = &live {
                                f.deliver(items, tcp);
                            }
                        }
                        Ok(Recv::Msg(ControlMsg::ReverseDone)) => {
                            last_heard = mono_ns();
                            rd.store(true, Ordering::Relaxed);
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
        Ok(Watcher {
            stop,
            reverse_done,
            handle,
        })
    }

    /// The receiver's reverse flows have all finished sending.
    pub fn reverse_done(&self) -> bool {
        self.reverse_done.load(Ordering::Relaxed)
    }

    pub fn finish(self) -> (Option<Ctl>, Option<String>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.join() {
            Ok((ctl, gone)) => (Some(ctl), gone),
            Err(_) => (None, Some("control thread failed".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
