//! Reverse flows (`-R`, and the reverse half of `--bidir`): the receiver
//! daemon sends, the sender receives and measures.
//!
//! Measurement is the same code both ways: the daemon paces a reverse flow
//! with the sender's pacer ([`crate::pacing::pace_one`]: absolute schedule,
//! `sendmmsg`, not-sent accounting) and the sender receives it with the
//! daemon's receive path ([`LocalRx`]: the transport's receive loop and the
//! shared accounting of `transport::rx`). Only the roles of the two hosts
//! swap. Both ends are opened through the transport interface
//! (`Ops::reverse` on the daemon, `Ops::dial` on the sender).
//!
//! The daemon sends to nobody but the session's sender, and only where the
//! sender connected from: a UDP flow's destination is the source of a
//! `FLAG_HELLO` datagram from the control connection's peer address (so a
//! NAT's mapped port works, and no packet can name another host), a TCP
//! flow is written into the data connection the sender opened (as
//! `iperf3 -R` does). The model it paces passes the checks a sender's own
//! plan does (rate bound, sizes, stop), and the session's lifetime limit
//! ends it like any other session.

use crate::clock::{mono_ns, realtime_ns, SPIN_NS};
use crate::pacing::{pace_one, FlowSent, PaceOne};
use crate::plan::{FlowPlan, SessionPlan, Stop};
use crate::result::FlowReport;
use crate::transport::rx::{
    flow_report, rx_flow, Awaited, DataPort, Dial, FlowShared, Resend, ReverseEnd, RxAt,
    WorkerOutcome,
};
use crate::transport::{caps, ops, Ident};
use crate::EngineError;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wirebench_model::FlowSpec;
use wirebench_stats::{FlowConfig, IpVersion, SendSummary};
use wirebench_wire::auth::ProbeKey;
use wirebench_wire::limits;
use wirebench_wire::{Direction, FlowSetup, MeterMode, PROBE_HEADER_LEN};

/// How often the daemon's session thread looks whether its reverse flows
/// have ended (to say `ReverseDone`).
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(10);
/// Time the sender has, from `Start`, to reach a reverse flow's data port
/// (UDP hello, TCP connection and hello).
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// Lead between `Start` and a reverse flow's first departure, as the
/// sender's (`send::START_LEAD_NS`), so both directions start together.
const START_LEAD_NS: u64 = 20_000_000;

/// What the daemon needs to pace a reverse flow, in `FlowSetup.reverse`.
#[derive(Debug, Serialize, Deserialize)]
struct Model {
    spec: FlowSpec,
    stop: Stop,
    seed: u64,
}

/// Does the plan have a reverse flow?
pub(crate) fn any(plan: &SessionPlan) -> bool {
    plan.flows.iter().any(|f| f.direction == Direction::Reverse)
}

/// `FlowSetup.reverse` for a flow: its model for the daemon to pace, or
/// None for a forward flow.
pub(crate) fn model_for(f: &FlowPlan) -> Option<serde_json::Value> {
    if f.direction != Direction::Reverse {
        return None;
    }
    serde_json::to_value(Model {
        spec: f.spec.clone(),
        stop: f.stop,
        seed: f.seed,
    })
    .ok()
}

/// The daemon's reading of `FlowSetup.reverse`: the flow it is to send,
/// checked as a sender checks its own plan.
fn parse_model(s: &FlowSetup, v: &serde_json::Value) -> Result<FlowPlan, String> {
    let m = Model::deserialize(v).map_err(|e| format!("bad reverse model: {e}"))?;
    let plan = FlowPlan {
        spec: m.spec,
        transport: s.transport,
        stop: m.stop,
        seed: m.seed,
        opts: Default::default(),
        direction: Direction::Forward,
        meter: None,
    };
    SessionPlan::new("", vec![plan.clone()])
        .check()
        .map_err(|e| e.to_string())?;
    if plan.spec.max_payload() > s.max_len.max(PROBE_HEADER_LEN as u32) {
        return Err(format!(
            "model sends up to {} bytes, the flow's max_len is {}",
            plan.spec.max_payload(),
            s.max_len
        ));
    }
    Ok(plan)
}

struct RemoteFlow {
    plan: FlowPlan,
    flow_id: u16,
    /// The UDP source port the sender declared for its hello.
    declared: Option<u16>,
    mtu: u32,
    port: Option<Box<dyn ReverseEnd>>,
    handle: Option<JoinHandle<FlowSent>>,
}

/// The daemon's reverse flows of one session, by position in `Hello.flows`.
#[derive(Default)]
pub(crate) struct Remote {
    flows: Vec<Option<RemoteFlow>>,
    /// Stops every reverse flow (the session ended, or `Stop` came early).
    abort: Arc<AtomicBool>,
    started: bool,
    /// `ReverseDone` was said.
    announced: bool,
}

impl Remote {
    /// Any reverse flow in the session?
    pub(crate) fn any(&self) -> bool {
        self.flows.iter().any(Option::is_some)
    }

    /// Opens the data port of reverse flow `i` (position in the session)
    /// on `local_ip` and returns its port number.
    pub(crate) fn open(
        &mut self,
        i: usize,
        s: &FlowSetup,
        model: &serde_json::Value,
        local_ip: IpAddr,
    ) -> Result<u16, String> {
        let plan = parse_model(s, model)?;
        let Some(open) = ops(s.transport).reverse else {
            return Err(format!(
                "transport {}: its flows need no receiver",
                s.transport
            ));
        };
        let bind = DataPort {
            addr: SocketAddr::new(local_ip, 0),
            asked: false,
        };
        let (port, p) = open(bind).map_err(|e| e.to_string())?;
        if self.flows.len() <= i {
            self.flows.resize_with(i + 1, || None);
        }
        self.flows[i] = Some(RemoteFlow {
            plan,
            flow_id: s.flow_id,
            declared: s.src_port,
            mtu: if s.mtu >= 68 { s.mtu } else { 1500 },
            port: Some(p),
            handle: None,
        });
        Ok(port)
    }

    /// `Start`: every reverse flow gets its thread, which waits for the
    /// sender's hello from `peer_ip` and then paces the flow to it.
    pub(crate) fn start(
        &mut self,
        sid: u32,
        peer_ip: IpAddr,
        ip: IpVersion,
        probe_key: Option<&ProbeKey>,
    ) -> Result<(), EngineError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let n = self.flows.iter().flatten().count();
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let spin_ns = if n < cores { SPIN_NS } else { 0 };
        let t0 = mono_ns() + START_LEAD_NS;
        for f in self.flows.iter_mut().flatten() {
            let Some(port) = f.port.take() else { continue };
            let at = PaceOne {
                flow_id: f.flow_id,
                session: sid,
                t0,
                cfg: FlowConfig {
                    transport: f.plan.transport,
                    ip,
                    mtu: f.mtu,
                    interval_ns: None,
                },
                abort: self.abort.clone(),
                spin_ns,
                probe_key: probe_key.cloned(),
            };
            let plan = f.plan.clone();
            let from = (peer_ip, f.declared);
            let h = std::thread::Builder::new()
                .name(format!("wb-rtx-{}", f.flow_id))
                .spawn(move || send_reverse(plan, port, from, at))
                .map_err(|e| EngineError::io("reverse flow thread", e))?;
            f.handle = Some(h);
        }
        Ok(())
    }

    /// Some reverse flow is still sending.
    pub(crate) fn running(&self) -> bool {
        self.started
            && self
                .flows
                .iter()
                .flatten()
                .any(|f| f.handle.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// True once, when every reverse flow has ended: time for `ReverseDone`.
    pub(crate) fn take_done(&mut self) -> bool {
        if !self.started || self.announced || !self.any() || self.running() {
            return false;
        }
        self.announced = true;
        true
    }

    /// `Stop`: ends the reverse flows (those still sending stop now: the
    /// sender stopped early) and returns what each sent, by position. A flow
    /// that failed is an error naming it.
    pub(crate) fn finish(&mut self) -> Result<Vec<Option<SendSummary>>, String> {
        let early = self.running();
        self.abort.store(true, Ordering::Relaxed);
        let mut out = Vec::with_capacity(self.flows.len());
        for f in &mut self.flows {
            let Some(f) = f else {
                out.push(None);
                continue;
            };
            let sent = match f.handle.take().map(JoinHandle::join) {
                Some(Ok(s)) => s,
                Some(Err(_)) => return Err(format!("flow {} (reverse) failed", f.flow_id)),
                None => return Err(format!("flow {} (reverse) never started", f.flow_id)),
            };
            match sent.error {
                // Halted by the early Stop: what was sent counts.
                Some(_) if early && sent.send.packets > 0 => {}
                Some(e) => return Err(format!("flow {} (reverse): {e}", f.flow_id)),
                None => {}
            }
            out.push(Some(sent.send));
        }
        Ok(out)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // However the session ends, our reverse flows stop with it.
        self.abort.store(true, Ordering::Relaxed);
        for f in self.flows.iter_mut().flatten() {
            if let Some(h) = f.handle.take() {
                let _ = h.join();
            }
        }
    }
}

fn failed(msg: String) -> FlowSent {
    FlowSent::failed(&msg)
}

/// A reverse flow's thread on the daemon: waits for the sender's hello on
/// the flow's data port (from the session's sender, at the port it
/// declared), then paces.
fn send_reverse(
    plan: FlowPlan,
    port: Box<dyn ReverseEnd>,
    (peer_ip, declared): (IpAddr, Option<u16>),
    at: PaceOne,
) -> FlowSent {
    let deadline = mono_ns() + HELLO_WAIT.as_nanos() as u64;
    let still = || still_waiting(&at, deadline);
    let awaited = Awaited {
        session: at.session,
        flow_id: at.flow_id,
        peer_ip,
        declared,
        probe_key: at.probe_key.as_ref(),
        still: &still,
    };
    match port.await_sender(&awaited, &plan) {
        Ok(sock) => pace_one(plan, sock, at),
        Err(e) => failed(e),
    }
}

/// Ok while the sender may still show up on a reverse flow's data port.
fn still_waiting(at: &PaceOne, deadline: u64) -> Result<(), String> {
    if at.abort.load(Ordering::Relaxed) {
        return Err("the session ended before the sender reached the data port".into());
    }
    if mono_ns() > deadline {
        return Err(format!(
            "the sender did not reach the data port (UDP hello, TCP connection) within {} s; a firewall on its side?",
            HELLO_WAIT.as_secs()
        ));
    }
    Ok(())
}

/// The sender's end of a reverse flow: the daemon's own receive path (the
/// transport's receive loop, the accounting of `transport::rx`) on a
/// socket the sender connected, so both directions are measured alike.
pub(crate) struct LocalRx {
    flow_id: u16,
    playout: Option<u32>,
    shared: Arc<FlowShared>,
    handle: Option<JoinHandle<WorkerOutcome>>,
}

impl LocalRx {
    /// Reaches flow `s`'s data port as `d` says and starts receiving it.
    fn start(s: &FlowSetup, d: Dial, at: &RxAt) -> Result<(LocalRx, Resend), EngineError> {
        let Some(dial) = ops(s.transport).dial else {
            // SessionPlan::check refuses reverse flows without a receiver.
            return Err(EngineError::BadPlan(format!(
                "-R/--bidir: {} flows have no receiver to send them",
                s.transport
            )));
        };
        let rf = rx_flow(s, at, None);
        let shared = rf.sh.clone();
        let (end, again) = dial(d, rf)?;
        let handle = std::thread::Builder::new()
            .name(format!("wb-rrx-{}", s.flow_id))
            .spawn(move || end.run())
            .map_err(|e| EngineError::io("receive thread", e))?;
        Ok((
            LocalRx {
                flow_id: s.flow_id,
                playout: s.playout_buffer_ms,
                shared,
                handle: Some(handle),
            },
            again,
        ))
    }

    /// The session started now: sequence numbers are judged from here.
    fn started(&self) {
        self.shared.start_ns.store(realtime_ns(), Ordering::Relaxed);
    }

    /// Stops receiving and reports, as the daemon would (`sent`: what the
    /// daemon sent, for loss). None when the receive thread failed.
    fn finish(mut self, sent: Option<u64>) -> Option<FlowReport> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let out = self.handle.take()?.join().ok()?;
        let acc = out.accs.into_iter().next()?;
        Some(flow_report(
            self.flow_id,
            &self.shared,
            acc,
            sent,
            self.playout,
        ))
    }
}

impl Drop for LocalRx {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The sender's end of one reverse flow: its receive thread, and for UDP a
/// handle on its socket and the hello to send again at `Start`.
type LocalFlow = (LocalRx, Resend);

/// The sender's end of the session's reverse flows, by position.
#[derive(Default)]
pub(crate) struct Local {
    flows: Vec<Option<LocalFlow>>,
}

impl Local {
    /// Connects to every reverse flow's data port (`data`, in plan order,
    /// at `dst_ip`, with the UDP socket [`bind_local`] bound before
    /// `Hello`), says hello, and starts receiving. `offset_ns`: the
    /// receiver's clock minus ours, as applied.
    pub(crate) fn open(
        plan: &SessionPlan,
        setups: &[FlowSetup],
        dst_ip: IpAddr,
        data: Vec<(u16, Option<UdpSocket>)>,
        session: u32,
        (offset_ns, error_ns): (i64, u64),
        probe_key: Option<ProbeKey>,
    ) -> Result<Local, EngineError> {
        let mut flows = Vec::with_capacity(plan.flows.len());
        let ip = if dst_ip.is_ipv4() {
            IpVersion::V4
        } else {
            IpVersion::V6
        };
        let at = RxAt {
            sid: session,
            peer_ip: dst_ip,
            ip,
            meter: MeterMode::Owd,
            max_intervals: limits::intervals_per_flow(plan.flows.len()),
            live: false,
            probe_key,
            dgram_buf: crate::budget::UDP_RCVBUF,
            offset: Some((offset_ns.saturating_neg(), error_ns)),
            gro: true,
        };
        for ((f, s), (port, bound)) in plan.flows.iter().zip(setups).zip(data) {
            if f.direction != Direction::Reverse {
                flows.push(None);
                continue;
            }
            let d = Dial {
                to: SocketAddr::new(dst_ip, port),
                bound,
                id: Ident {
                    session,
                    flow: s.flow_id,
                },
            };
            flows.push(Some(LocalRx::start(s, d, &at)?));
        }
        Ok(Local { flows })
    }

    /// `Start` was sent: the hello goes once more (a lost first one would
    /// leave the daemon without our address), and sequence numbers are
    /// judged from now.
    pub(crate) fn started(&self) {
        for (rx, again) in self.flows.iter().flatten() {
            rx.started();
            if let Some(again) = again {
                again();
            }
        }
    }

    /// Stops receiving; for each reverse flow (by position) its report, as
    /// a daemon would make it (`sent[i]`: what the daemon sent).
    pub(crate) fn finish(self, sent: &[Option<u64>]) -> Vec<Option<FlowReport>> {
        self.flows
            .into_iter()
            .enumerate()
            .map(|(i, f)| f.and_then(|(rx, _)| rx.finish(sent.get(i).copied().flatten())))
            .collect()
    }
}

/// The sender's sockets of its reverse UDP flows, by position, bound
/// before `Hello` so that it declares their ports
/// ([`FlowSetup::src_port`]): the daemon sends a flow only where its
/// hello came from, and without probe MACs only from the declared port.
pub(crate) fn bind_local(
    plan: &SessionPlan,
    dst: IpAddr,
) -> Result<Vec<Option<UdpSocket>>, EngineError> {
    plan.flows
        .iter()
        .map(|f| {
            let c = caps(f.transport);
            (f.direction == Direction::Reverse && c.via_receiver && !c.connection_oriented)
                .then(|| crate::transport::udp::rx::bind_any(SocketAddr::new(dst, 0)))
                .transpose()
        })
        .collect()
}

/// The sent side of a reverse flow, as the daemon reported it.
pub(crate) fn sent_by_daemon(send: Option<SendSummary>) -> FlowSent {
    match send {
        Some(send) => FlowSent {
            error: None,
            send,
            ..failed(String::new())
        },
        None => failed("the receiver did not report what it sent".into()),
    }
}
