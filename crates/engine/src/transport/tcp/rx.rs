//! TCP's receive side: a flow's data listener on the daemon, serving the
//! connection the flow was granted, and the sender's own connection for a
//! reverse flow; also the daemon's end of a reverse TCP flow, which writes
//! into the connection the sender opened (as `iperf3 -R` does).

use crate::net::AsRawFd;
use crate::session::CONNECT_TIMEOUT;
use crate::transport::rx::{
    unmap, Awaited, DataPort, Dial, FlowRx, Resend, ReverseEnd, RxEnd, RxFlow, WorkerOutcome,
};
use crate::transport::udp::rx::UdpFlow;
use crate::transport::{connect_err, hello_record, DataSock};
use crate::EngineError;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use wirebench_wire::PROBE_HEADER_LEN;

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
        crate::recv::tcp_rx(self.l, self.rf)
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
        crate::recv::tcp_rx_stream(self.t, self.rf)
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
