//! The transport interface: what the sending side (the pacer, the session,
//! the receiver's end of reverse flows) asks of a transport, so that UDP,
//! TCP and ICMP echo each live in one module behind it, not in every loop.
//!
//! A transport declares itself ([`Caps`], looked up once per flow with
//! [`caps`]), opens a flow's sending end ([`bind_data`], then
//! [`BoundData::connect`]) and paces a flow's schedule on that end in
//! batches ([`FlowTx::pace`]). On the receiving side it opens a flow's
//! data port ([`Ops::listen`]), or the sender's end of a reverse flow
//! ([`Ops::dial`]), and runs the flow's receive loop
//! ([`rx::FlowRx::run`]), which feeds every probe to the accounting all
//! transports share ([`rx::RxFlow::take_record`]). The pacer and the session call
//! the interface once per flow; the per-packet loops are the transport's
//! own, statically dispatched, so the interface costs nothing per packet.
//!
//! Adding a transport: a module here (its [`Ops`] entry, a `FlowTx`, a
//! `FlowRx`), and its `mod` line and arm in [`ops`]; docs/engine.md lists
//! the files.

pub(crate) mod icmp;
pub(crate) mod rx;
pub(crate) mod tcp;
pub(crate) mod udp;

#[cfg(test)]
mod null;

use crate::pacing::{FlowEnd, FlowJob, FlowSent, Schedule, SendRec};
use crate::plan::FlowPlan;
use crate::rtt::{Reflected, RttRx};
use crate::EngineError;
use rx::{DataPort, Dial, Resend, ReverseEnd, RxEnd, RxFlow};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use wirebench_wire::{ProbeHeader, Transport, PROBE_HEADER_LEN};

/// What a transport declares about itself; the engine asks these instead
/// of naming the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The transport's name on the command line and in documents.
    pub name: &'static str,
    /// A connection per flow carrying a byte stream of length-framed
    /// records (records, not datagrams, are the unit of loss and order).
    pub connection_oriented: bool,
    /// Flows go through a receiver session (`Hello`, a data port each);
    /// false for ICMP echo, answered by the destination's own stack.
    pub via_receiver: bool,
    /// The kernel's TCP_INFO can be read from the flow's socket (cwnd,
    /// rtt, retransmits in live lines and the document).
    pub tcp_info: bool,
    /// Accepts the TCP socket options (`--cc`, `-M`, `-D`/`--nagle`).
    pub tcp_options: bool,
    /// Paced one-way flows without options of their own may leave from a
    /// pacer's shared socket in one batch call.
    pub shares_pacer: bool,
    /// Opening a socket may need privileges (root, CAP_NET_RAW or
    /// `net.ipv4.ping_group_range`).
    pub needs_privilege: bool,
    /// Sockets a flow holds on the receiver (its receive budget).
    pub rx_sockets: u64,
    /// The kernel's UDP buffer drop counters (sender `SndbufErrors`,
    /// receiver `RcvbufErrors`) count this transport's packets, so a
    /// flow's losses are split between the hosts and the network.
    pub kernel_udp_drops: bool,
}

/// A flow's connected sending end, as the pacer drives it. The pacer
/// makes one call per flow ([`FlowTx::pace`]); the batch loop inside is
/// the transport's.
pub(crate) trait FlowTx: Send {
    /// What this end's transport declares.
    fn caps(&self) -> &'static Caps;

    /// Sends the flow's schedule on this end until it ends or the job
    /// halts: gathers the due packets ([`crate::pacing::each_batch`]),
    /// frames them, sends them as one batch, and records each.
    fn pace(&mut self, run: FlowRun<'_>) -> FlowEnd;

    /// The round-trip meter's reader of reflected probes, on a clone of
    /// this end.
    fn reflector(&self, r: &Reflected) -> std::io::Result<RttRx>;

    /// Adds what the socket knows once the flow has ended (TCP_INFO, the
    /// congestion control used, the writer's span).
    fn ended(&self, _job: &FlowJob, _sent: &mut FlowSent) {}

    /// The UDP socket, for a shared pacer to send from; `Err(self)` when
    /// this end is not one.
    fn into_udp(self: Box<Self>) -> Result<UdpSocket, DataSock>;

    /// The TCP stream, for a shared bulk writer; `Err(self)` when this end
    /// is not one.
    fn into_tcp(self: Box<Self>) -> Result<TcpStream, DataSock>;

    /// The TCP stream, to read TCP_INFO from a clone during the run.
    fn tcp_stream(&self) -> Option<&TcpStream> {
        None
    }

    /// The UDP socket, for a path that sends the flow's datagrams itself
    /// from the same port (the AF_XDP path).
    #[cfg(target_os = "linux")]
    fn udp_socket(&self) -> Option<&UdpSocket> {
        None
    }
}

/// What [`FlowTx::pace`] works on: the flow, its schedule, its accounting.
pub(crate) struct FlowRun<'a> {
    /// The flow and its session.
    pub job: &'a FlowJob,
    /// Its departures.
    pub sched: &'a mut Schedule,
    /// Where each sent and not-sent packet is recorded.
    pub acc: &'a mut SendRec,
    /// Gets the CLOCK_REALTIME of the first packet sent.
    pub first_tx: &'a mut u64,
}

/// A flow's sending end, whatever its transport.
pub(crate) type DataSock = Box<dyn FlowTx>;

/// How the session opens and connects a transport's flows: its entry in
/// the transport table ([`ops`]).
pub(crate) struct Ops {
    /// What the transport declares.
    pub caps: Caps,
    /// The socket a flow's sending end is made of; None when its flows do
    /// not go through a receiver session.
    pub socket: Option<(Type, Protocol)>,
    /// Connects a bound socket to the receiver's data port and makes it
    /// the flow's sending end (for streams, identified to the receiver).
    pub connect: fn(Socket, SocketAddr, &FlowPlan, Ident) -> Result<DataSock, EngineError>,
    /// The receiver's side: opens a flow's data port (binds, listens)
    /// and gives its port and receiving end. None when its flows do not
    /// go through a receiver session.
    pub listen: Option<Listen>,
    /// The sender's end of a reverse flow: reaches the receiver's data
    /// port, identifies the flow (its hello) and gives the receiving end.
    pub dial: Option<DialFn>,
    /// The receiver's end of a reverse flow: opens its data port, where
    /// the sender's hello will say where to send.
    pub reverse: Option<ReverseFn>,
}

/// [`Ops::listen`]: a flow's data port and its receiving end.
pub(crate) type Listen = fn(DataPort, RxFlow) -> Result<(u16, RxEnd), EngineError>;
/// [`Ops::dial`]: the sender's receiving end of a reverse flow, and how to
/// say its hello again.
pub(crate) type DialFn = fn(Dial, RxFlow) -> Result<(RxEnd, Resend), EngineError>;
/// [`Ops::reverse`]: the daemon's data port of a reverse flow.
pub(crate) type ReverseFn = fn(DataPort) -> Result<(u16, Box<dyn ReverseEnd>), EngineError>;

/// Which session and flow a data connection belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ident {
    pub session: u32,
    pub flow: u16,
}

/// The transport table: transport `t`'s entry.
pub(crate) fn ops(t: Transport) -> &'static Ops {
    match t {
        Transport::Udp => &udp::OPS,
        Transport::Tcp => &tcp::OPS,
        Transport::Icmp => &icmp::OPS,
    }
}

/// The declaration of transport `t`.
pub fn caps(t: Transport) -> &'static Caps {
    &ops(t).caps
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
    let Some((ty, proto)) = ops(f.transport).socket else {
        return Err(not_in_session(f.transport));
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
    /// Connects to the receiver's data port `port` as flow `id`.
    pub(crate) fn connect(
        self,
        f: &FlowPlan,
        port: u16,
        id: Ident,
    ) -> Result<DataSock, EngineError> {
        let mut peer = self.peer;
        peer.set_port(port);
        (ops(f.transport).connect)(self.sock, peer, f, id)
    }
}

/// The error for a transport whose flows bypass the receiver session.
pub(crate) fn not_in_session(t: Transport) -> EngineError {
    EngineError::BadPlan(format!(
        "-T {}: its flows are not sent through a receiver session",
        t.as_str()
    ))
}

/// The error of a failed connect to `peer`.
pub(crate) fn connect_err(peer: SocketAddr) -> impl Fn(std::io::Error) -> EngineError {
    move |e| EngineError::Connect {
        addr: peer.to_string(),
        source: e,
    }
}

/// The hello record naming flow `id` on a fresh data connection
/// ([`wirebench_wire::FLAG_HELLO`]).
pub(crate) fn hello_record(id: Ident) -> Result<[u8; PROBE_HEADER_LEN], EngineError> {
    let mut rec = [0u8; PROBE_HEADER_LEN];
    ProbeHeader {
        flags: wirebench_wire::FLAG_HELLO,
        session: id.session,
        flow: id.flow,
        len: PROBE_HEADER_LEN as u16,
        seq: 0,
        tx_ns: 0,
    }
    .encode(&mut rec)
    .map_err(|e| EngineError::Protocol(format!("hello record: {e}")))?;
    Ok(rec)
}
