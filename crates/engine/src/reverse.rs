//! Reverse flows (`-R`, and the reverse half of `--bidir`): the receiver
//! daemon sends, the sender receives and measures.
//!
//! Measurement is the same code both ways: the daemon paces a reverse flow
//! with the sender's pacer ([`crate::pacing::pace_one`]: absolute schedule,
//! `sendmmsg`, not-sent accounting) and the sender receives it with the
//! daemon's receive path ([`crate::recv::LocalRx`]: kernel timestamps,
//! sequence window, framing). Only the roles of the two hosts swap.
//!
//! The daemon sends to nobody but the session's sender, and only where the
//! sender connected from: a UDP flow's destination is the source of a
//! `FLAG_HELLO` datagram from the control connection's peer address (so a
//! NAT's mapped port works, and no packet can name another host), a TCP
//! flow is written into the data connection the sender opened (as
//! `iperf3 -R` does). The model it paces passes the checks a sender's own
//! plan does (rate bound, sizes, stop), and the session's lifetime limit
//! ends it like any other session.

use crate::clock::{mono_ns, SPIN_NS};
use crate::net::{set_sndbuf, AsRawFd};
use crate::pacing::{pace_one, FlowSent, PaceOne};
use crate::plan::{FlowPlan, SessionPlan, Stop};
use crate::recv::{unmap, LocalAt, LocalRx, LocalSock};
use crate::session::CONNECT_TIMEOUT;
use crate::transport::tcp::TcpTx;
use crate::transport::udp::UdpTx;
use crate::transport::DataSock;
use crate::EngineError;
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wirebench_model::FlowSpec;
use wirebench_stats::{FlowConfig, IpVersion, SendSummary};
use wirebench_wire::auth::{ProbeKey, AUTH_PROBE_MIN_LEN};
use wirebench_wire::{Direction, FlowSetup, ProbeHeader, Transport, FLAG_HELLO, PROBE_HEADER_LEN};

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

/// A reverse flow's data port before `Start`.
enum Port {
    Udp(UdpSocket),
    Tcp(TcpListener),
}

struct RemoteFlow {
    plan: FlowPlan,
    flow_id: u16,
    /// The UDP source port the sender declared for its hello.
    declared: Option<u16>,
    mtu: u32,
    port: Option<Port>,
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
        let bind = SocketAddr::new(local_ip, 0);
        let (port, p) = match s.transport {
            Transport::Udp => {
                let u = UdpSocket::bind(bind).map_err(|e| format!("data socket: {e}"))?;
                (u.local_addr(), Port::Udp(u))
            }
            Transport::Tcp => {
                let l = TcpListener::bind(bind).map_err(|e| format!("data listener: {e}"))?;
                (l.local_addr(), Port::Tcp(l))
            }
            Transport::Icmp => return Err("transport icmp: echo flows need no receiver".into()),
        };
        let port = port.map_err(|e| format!("data socket: {e}"))?.port();
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

/// Is `buf` the sender's hello for this session and flow?
fn is_hello(buf: &[u8], sid: u32, flow: u16) -> bool {
    ProbeHeader::decode_prefix(buf)
        .is_ok_and(|h| h.is_hello() && h.session == sid && h.flow == flow)
}

/// A reverse flow's thread on the daemon: finds the sender (its address,
/// and the UDP port it declared), then paces.
fn send_reverse(
    plan: FlowPlan,
    port: Port,
    (peer_ip, declared): (IpAddr, Option<u16>),
    at: PaceOne,
) -> FlowSent {
    let deadline = mono_ns() + HELLO_WAIT.as_nanos() as u64;
    let sock = match port {
        Port::Udp(u) => match udp_peer(&u, (peer_ip, declared), &at, deadline) {
            Ok(to) => match u.connect(to) {
                Ok(()) => {
                    set_sndbuf(u.as_raw_fd(), 4 << 20);
                    Box::new(UdpTx(u)) as DataSock
                }
                Err(e) => return failed(format!("cannot connect to {to}: {e}")),
            },
            Err(e) => return failed(e),
        },
        Port::Tcp(l) => match tcp_peer(&l, peer_ip, &at, deadline) {
            Ok(s) => {
                let _ = s.set_nodelay(crate::sockopt::nodelay(&plan.opts, &plan.spec));
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                Box::new(TcpTx::new(s))
            }
            Err(e) => return failed(e),
        },
    };
    pace_one(plan, sock, at)
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

/// The address the sender's UDP hello came from: from the session's
/// sender address only, for this session and flow, and at the port it
/// declared unless the hello carries a valid probe MAC (a NAT may have
/// moved the port; the MAC says it is the sender's). An older sender that
/// declares nothing is taken at any port. Anything else is ignored; no
/// hello by `deadline` is an error.
fn udp_peer(
    u: &UdpSocket,
    (peer_ip, declared): (IpAddr, Option<u16>),
    at: &PaceOne,
    deadline: u64,
) -> Result<SocketAddr, String> {
    u.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| format!("data socket: {e}"))?;
    let mut buf = [0u8; 64];
    loop {
        still_waiting(at, deadline)?;
        match u.recv_from(&mut buf) {
            Ok((n, from))
                if unmap(from.ip()) == peer_ip
                    && is_hello(&buf[..n], at.session, at.flow_id)
                    && (declared.is_none_or(|p| p == from.port())
                        || at.probe_key.as_ref().is_some_and(|k| k.verify(&buf[..n]))) =>
            {
                return Ok(SocketAddr::new(unmap(from.ip()), from.port()));
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("data socket: {e}")),
        }
    }
}

/// The sender's TCP data connection: from the session's sender address,
/// identified by its hello record within the deadline.
fn tcp_peer(
    l: &TcpListener,
    peer_ip: IpAddr,
    at: &PaceOne,
    deadline: u64,
) -> Result<TcpStream, String> {
    l.set_nonblocking(true)
        .map_err(|e| format!("data listener: {e}"))?;
    loop {
        still_waiting(at, deadline)?;
        let mut pfd = [crate::net::pollfd(l.as_raw_fd(), crate::net::POLLIN)];
        if crate::net::poll(&mut pfd, 50) <= 0 {
            continue;
        }
        let Ok((mut s, from)) = l.accept() else {
            continue;
        };
        if unmap(from.ip()) != peer_ip {
            continue;
        }
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut rec = [0u8; PROBE_HEADER_LEN];
        if s.read_exact(&mut rec).is_ok() && is_hello(&rec, at.session, at.flow_id) {
            let _ = s.set_read_timeout(None);
            return Ok(s);
        }
    }
}

/// The sender's end of one reverse flow: its receive thread, and for UDP a
/// handle on its socket and the hello to send again at `Start`.
type LocalFlow = (LocalRx, Option<UdpSocket>, Vec<u8>);

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
        let at = LocalAt {
            sid: session,
            peer_ip: dst_ip,
            ip,
            flows: plan.flows.len(),
            offset_ns: offset_ns.saturating_neg(),
            error_ns,
            probe_key,
        };
        for ((f, s), (port, bound)) in plan.flows.iter().zip(setups).zip(data) {
            if f.direction != Direction::Reverse {
                flows.push(None);
                continue;
            }
            let to = SocketAddr::new(dst_ip, port);
            let flow = s.flow_id;
            // With probe MACs a UDP hello carries one, so the daemon may
            // take its source from it wherever a NAT moved it.
            let mac = at
                .probe_key
                .as_ref()
                .filter(|_| f.transport == Transport::Udp);
            let len = if mac.is_some() {
                AUTH_PROBE_MIN_LEN
            } else {
                PROBE_HEADER_LEN
            };
            let mut hello = vec![0u8; len];
            ProbeHeader {
                flags: FLAG_HELLO,
                session,
                flow,
                len: len as u16,
                seq: 0,
                tx_ns: 0,
            }
            .encode(&mut hello)
            .map_err(|e| EngineError::Protocol(format!("hello: {e}")))?;
            if let Some(k) = mac {
                k.sign(&mut hello);
            }
            let connect_err = |e| EngineError::Connect {
                addr: to.to_string(),
                source: e,
            };
            let (sock, again) = match f.transport {
                Transport::Udp => {
                    let u = match bound {
                        Some(u) => u,
                        None => bind_any(dst_ip)?,
                    };
                    u.connect(to).map_err(connect_err)?;
                    u.send(&hello).map_err(connect_err)?;
                    let again = u.try_clone().ok();
                    (LocalSock::Udp(u), again)
                }
                Transport::Tcp => {
                    // Identified like a forward flow's connection
                    // (pacing::identify writes the same record).
                    let mut t =
                        TcpStream::connect_timeout(&to, CONNECT_TIMEOUT).map_err(connect_err)?;
                    t.write_all(&hello)
                        .map_err(|e| EngineError::io("TCP data connection", e))?;
                    (LocalSock::Tcp(t), None)
                }
                // SessionPlan::validate refuses reverse ICMP echo flows.
                Transport::Icmp => {
                    return Err(EngineError::BadPlan(
                        "-R/--bidir: ICMP echo flows (-T icmp) have no receiver to send them"
                            .into(),
                    ))
                }
            };
            flows.push(Some((LocalRx::start(s, sock, &at)?, again, hello)));
        }
        Ok(Local { flows })
    }

    /// `Start` was sent: the hello goes once more (a lost first one would
    /// leave the daemon without our address), and sequence numbers are
    /// judged from now.
    pub(crate) fn started(&self) {
        for (rx, again, hello) in self.flows.iter().flatten() {
            rx.started();
            if let Some(u) = again {
                let _ = u.send(hello);
            }
        }
    }

    /// Stops receiving; for each reverse flow (by position) its report, as
    /// a daemon would make it (`sent[i]`: what the daemon sent).
    pub(crate) fn finish(
        self,
        sent: &[Option<u64>],
    ) -> Vec<Option<wirebench_stats::result::FlowReport>> {
        self.flows
            .into_iter()
            .enumerate()
            .map(|(i, f)| f.and_then(|(rx, _, _)| rx.finish(sent.get(i).copied().flatten())))
            .collect()
    }
}

/// A UDP socket on the unspecified address of `dst`'s family, any port.
fn bind_any(dst: IpAddr) -> Result<UdpSocket, EngineError> {
    let any: IpAddr = if dst.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    UdpSocket::bind(SocketAddr::new(any, 0)).map_err(|e| EngineError::io("data socket", e))
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
            (f.direction == Direction::Reverse && f.transport == Transport::Udp)
                .then(|| bind_any(dst))
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
