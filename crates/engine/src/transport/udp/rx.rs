//! UDP's receive side: a flow's data socket read in `recvmmsg` batches with
//! kernel timestamps, reflections sent back in one batch, and many flows
//! sharing one worker per CPU; also the daemon's end of a reverse UDP flow,
//! which learns where to send from the sender's hello.

use crate::clock::{mono_ns, realtime_ns, sleep_until, tighten_timer_slack};
use crate::net::{self, enable_rx_timestamps, set_rcvbuf, set_sndbuf, AsRawFd, RecvBatch, BATCH};
use crate::sys::{CpuClock, CpuTime};
use crate::transport::rx::{
    per_cpu, reply_len, unmap_addr, Awaited, DataPort, Dial, FlowRx, FlowShared, Resend,
    ReverseEnd, RxEnd, RxFlow, Worker, WorkerOutcome, POLL_MS, STOP_DRAIN_NS,
};
use crate::transport::tcp::rx::Listening;
use crate::transport::DataSock;
use crate::EngineError;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wirebench_wire::auth::{AUTH_PROBE_MIN_LEN, AUTH_RTT_MIN_LEN};
use wirebench_wire::{ProbeHeader, Reflection, FLAG_HELLO, FLAG_REFLECTED, PROBE_HEADER_LEN};

/// Receive buffer of the sender's end of a reverse flow.
const LOCAL_RCVBUF: usize = crate::budget::UDP_RCVBUF as usize;
/// Send buffer of the daemon's end of a reverse flow.
const REVERSE_SNDBUF: usize = crate::budget::REVERSE_SNDBUF as usize;

/// Opens flow `rf`'s data socket on `port` (the daemon's end).
pub(crate) fn listen(port: DataPort, rf: RxFlow) -> Result<(u16, RxEnd), EngineError> {
    let sock = UdpSocket::bind(port.addr).map_err(port.err("data socket"))?;
    let bound = sock
        .local_addr()
        .map_err(|e| EngineError::io("data socket", e))?
        .port();
    set_rcvbuf(sock.as_raw_fd(), rf.dgram_buf);
    let registered = rf.source;
    let flow = UdpFlow::new(sock, rf, registered, port.addr.ip().is_ipv6())?;
    Ok((bound, Box::new(flow)))
}

/// The sender's end of a reverse flow: connects the socket bound before
/// `Hello` (or a fresh one) to the daemon's data port and says hello, with
/// a MAC under `--auth probes` so that the daemon may take its source
/// wherever a NAT moved it.
pub(crate) fn dial(d: Dial, mut rf: RxFlow) -> Result<(RxEnd, Resend), EngineError> {
    let connect_err = super::super::connect_err(d.to);
    let u = match d.bound {
        Some(u) => u,
        None => bind_any(d.to)?,
    };
    let mac = rf.sh.probe_key.clone();
    let len = if mac.is_some() {
        AUTH_PROBE_MIN_LEN
    } else {
        PROBE_HEADER_LEN
    };
    let mut hello = vec![0u8; len];
    ProbeHeader {
        flags: FLAG_HELLO,
        session: d.id.session,
        flow: d.id.flow,
        len: len as u16,
        seq: 0,
        tx_ns: 0,
    }
    .encode(&mut hello)
    .map_err(|e| EngineError::Protocol(format!("hello: {e}")))?;
    if let Some(k) = &mac {
        k.sign(&mut hello);
    }
    u.connect(d.to).map_err(&connect_err)?;
    u.send(&hello).map_err(&connect_err)?;
    let again = u.try_clone().ok().map(|a| {
        Box::new(move || {
            let _ = a.send(&hello);
        }) as Box<dyn Fn() + Send + Sync>
    });
    set_rcvbuf(u.as_raw_fd(), LOCAL_RCVBUF);
    // Connected: the kernel delivers only the daemon's datagrams.
    let registered = u.peer_addr().ok().map(unmap_addr);
    rf.reflect = false;
    let v6 = rf.peer_ip.is_ipv6();
    Ok((Box::new(UdpFlow::new(u, rf, registered, v6)?), again))
}

/// A UDP socket on the unspecified address of `dst`'s family, any port.
pub(crate) fn bind_any(dst: SocketAddr) -> Result<UdpSocket, EngineError> {
    let any: SocketAddr = if dst.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    UdpSocket::bind(any).map_err(|e| EngineError::io("data socket", e))
}

/// Opens the daemon's end of a reverse UDP flow on `port`.
pub(crate) fn reverse_port(port: DataPort) -> Result<(u16, Box<dyn ReverseEnd>), EngineError> {
    let u = UdpSocket::bind(port.addr).map_err(port.err("data socket"))?;
    let p = u
        .local_addr()
        .map_err(|e| EngineError::io("data socket", e))?
        .port();
    Ok((p, Box::new(ReversePort(u))))
}

/// The daemon's data port of a reverse UDP flow.
struct ReversePort(UdpSocket);

impl ReverseEnd for ReversePort {
    /// The destination is where the sender's UDP hello came from: from the
    /// session's sender address only, for this session and flow, and at
    /// the port it declared unless the hello carries a valid probe MAC (a
    /// NAT may have moved the port; the MAC says it is the sender's). An
    /// older sender that declares nothing is taken at any port. Anything
    /// else is ignored.
    fn await_sender(
        self: Box<Self>,
        w: &Awaited<'_>,
        _plan: &crate::plan::FlowPlan,
    ) -> Result<DataSock, String> {
        let u = self.0;
        u.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| format!("data socket: {e}"))?;
        let mut buf = [0u8; 64];
        let to = loop {
            (w.still)()?;
            match u.recv_from(&mut buf) {
                Ok((n, from))
                    if unmap_addr(from).ip() == w.peer_ip
                        && w.is_hello(&buf[..n])
                        && (w.declared.is_none_or(|p| p == from.port())
                            || w.probe_key.is_some_and(|k| k.verify(&buf[..n]))) =>
                {
                    break unmap_addr(from);
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("data socket: {e}")),
            }
        };
        u.connect(to)
            .map_err(|e| format!("cannot connect to {to}: {e}"))?;
        set_sndbuf(u.as_raw_fd(), REVERSE_SNDBUF);
        Ok(Box::new(super::UdpTx::new(u)))
    }
}

/// One UDP flow as its receive thread holds it.
pub(crate) struct UdpFlow {
    pub(crate) sock: UdpSocket,
    pub(crate) rx: RxFlow,
    /// The sender's data address: its address as seen on the control
    /// connection, at the port it declared ([`wirebench_wire::FlowSetup::src_port`]),
    /// else (probe MACs, or an older sender) the port of the first datagram
    /// that passed every check. Everything else is foreign and never
    /// reflected, so a session cannot be used to send packets to a third
    /// party (spoofed source addresses) nor be taken over by one datagram.
    registered: Option<SocketAddr>,
    /// The kernel may hand several datagrams over as one (UDP GRO).
    gro: bool,
}

impl FlowRx for UdpFlow {
    fn run(self: Box<Self>) -> WorkerOutcome {
        udp_rx(*self)
    }

    fn into_udp(self: Box<Self>) -> Result<Box<UdpFlow>, RxEnd> {
        Ok(self)
    }

    fn into_tcp(self: Box<Self>) -> Result<Box<Listening>, RxEnd> {
        Err(self)
    }
}

impl UdpFlow {
    /// Sets `sock` up for receiving (kernel timestamps, the IP marking of
    /// each datagram, coalesced datagrams where asked and nothing is
    /// reflected, a read timeout to look at the stop flag).
    fn new(
        sock: UdpSocket,
        rx: RxFlow,
        registered: Option<SocketAddr>,
        v6: bool,
    ) -> Result<UdpFlow, EngineError> {
        enable_rx_timestamps(sock.as_raw_fd());
        net::enable_rx_marks(sock.as_raw_fd(), v6);
        // Reflections are queued per receive slot, one datagram each.
        let gro = rx.gro && !rx.reflect && net::enable_gro(sock.as_raw_fd());
        sock.set_read_timeout(Some(Duration::from_millis(POLL_MS)))
            .map_err(|e| EngineError::io("data socket", e))?;
        Ok(UdpFlow {
            sock,
            rx,
            registered,
            gro,
        })
    }

    /// Reads one batch from the flow's socket and records it; reflections
    /// (RTT meter) go back at once. Returns the datagrams read and the
    /// kernel time of the last one.
    fn read_batch(&mut self, batch: &mut RecvBatch) -> std::io::Result<(usize, u64)> {
        let n = batch.recv(self.sock.as_raw_fd())?;
        let fallback_ts = realtime_ns();
        let offset = self.rx.sh.offset_ns.load(Ordering::Relaxed);
        let mut queued = [(0usize, 0usize); BATCH];
        let reply_min = reply_len(self.rx.sh.probe_key.is_some());
        let mut k = 0;
        let mut last_ts = 0;
        for i in 0..n {
            let ts = batch.kernel_ts(i).unwrap_or(fallback_ts);
            last_ts = ts;
            if batch.truncated(i) {
                self.rx.sh.foreign();
                continue;
            }
            let from = batch.source(i).map(unmap_addr);
            if let Some(seg) = batch.gro_size(i) {
                // Datagrams the kernel coalesced (UDP GRO): each is taken
                // on its own, all with the one receive time the kernel
                // gave them.
                let m = batch.marks(i);
                for d in batch.data(i).chunks(seg) {
                    if self.accept(d, from, ts, offset).is_some() {
                        self.rx.acc.marks.see(m.tos, m.ttl, m.flow_label);
                    }
                }
                continue;
            }
            let d = batch.data(i);
            let Some(h) = self.accept(d, from, ts, offset) else {
                continue;
            };
            let len = d.len();
            let m = batch.marks(i);
            self.rx.acc.marks.see(m.tos, m.ttl, m.flow_label);
            if self.rx.reflect && h.is_rtt() {
                let out_len = len.max(reply_min);
                let mut rh = h;
                rh.flags |= FLAG_REFLECTED;
                rh.len = out_len as u16;
                let buf = batch.slot_mut(i);
                let _ = rh.encode(&mut buf[..out_len]);
                let _ = Reflection {
                    rx_ns: ts,
                    tx_ns: 0,
                }
                .encode(&mut buf[..out_len]);
                batch.queue_reply(k, i, out_len);
                queued[k] = (i, out_len);
                k += 1;
            }
        }
        if k > 0 {
            // One transmit time for the batch, taken just before it leaves.
            let tx = realtime_ns();
            for &(i, out_len) in &queued[..k] {
                let buf = batch.slot_mut(i);
                Reflection::stamp_tx(buf, tx);
                if let Some(key) = &self.rx.sh.probe_key {
                    key.sign(&mut buf[..out_len]);
                }
            }
            batch.flush_replies(self.sock.as_raw_fd(), k);
        }
        Ok((n, last_ts))
    }

    /// Takes one datagram `d` from `from` received at `ts`: a probe of
    /// this session and flow from the sender, authentic and plausible, is
    /// recorded and returned; anything else is counted (foreign, forged,
    /// implausible) and dropped. Shared by the socket and AF_XDP paths.
    pub(crate) fn accept(
        &mut self,
        d: &[u8],
        from: Option<SocketAddr>,
        ts: u64,
        offset: i64,
    ) -> Option<ProbeHeader> {
        let h = ProbeHeader::decode_datagram(d).ok();
        self.accept_decoded(h, d, d.len(), from, ts, offset)
    }

    /// [`UdpFlow::accept`] for a datagram of `len` bytes of which `head`
    /// holds the first ones (at least the probe header when `len` is):
    /// the AF_XDP path's receive records carry only the header. The same
    /// checks, except a probe MAC, which needs the whole datagram: with
    /// probe MACs every such probe counts as forged, so sessions with
    /// them never take this way (`xdp::rx::take`).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn accept_head(
        &mut self,
        head: &[u8],
        len: usize,
        from: Option<SocketAddr>,
        ts: u64,
        offset: i64,
    ) -> Option<ProbeHeader> {
        // As decode_datagram: the length field is the datagram's length.
        let h = if len < PROBE_HEADER_LEN {
            None
        } else {
            ProbeHeader::decode_prefix(head)
                .ok()
                .filter(|h| usize::from(h.len) == len)
        };
        self.accept_decoded(h, head, len, from, ts, offset)
    }

    /// The checks after decoding: `h` is the datagram's header (None: no
    /// probe), `len` its length, `d` its bytes (or their start).
    fn accept_decoded(
        &mut self,
        h: Option<ProbeHeader>,
        d: &[u8],
        len: usize,
        from: Option<SocketAddr>,
        ts: u64,
        offset: i64,
    ) -> Option<ProbeHeader> {
        let (sid, flow_id, peer_ip) = (self.rx.sid, self.rx.flow_id, self.rx.peer_ip);
        // A worker's batch slots fit its largest flow: longer than this
        // flow's largest probe is foreign, as a truncated datagram is.
        let longest = self.rx.longest();
        let h = match h {
            Some(h)
                if h.session == sid
                    && h.flow == flow_id
                    && !h.is_reflected()
                    && !h.is_hello()
                    && len <= longest =>
            {
                h
            }
            _ => {
                self.rx.sh.foreign();
                return None;
            }
        };
        let ours = match (self.registered, from) {
            (Some(r), Some(f)) => r == f,
            (None, Some(f)) => f.ip() == peer_ip,
            (_, None) => false,
        };
        if !ours {
            self.rx.sh.foreign();
            return None;
        }
        self.rx.take_record(&h, d, len, ts, offset)?;
        // An undeclared source is learned only from a datagram that
        // passed every check (with probe MACs: an authentic one), so no
        // single forged datagram can make the real ones foreign.
        if self.rx.sh.from.get().is_none() {
            if let Some(f) = from {
                self.registered = Some(f);
                let _ = self.rx.sh.from.set(f);
            }
        }
        Some(h)
    }

    /// The batch slot this flow needs: one byte more than its largest
    /// probe, so an oversize foreign datagram shows up as truncated
    /// instead of fitting by accident, and room for an authenticated
    /// reflection (longer than the probe). With UDP GRO, room for the
    /// largest datagram the kernel coalesces; an oversize datagram is
    /// then foreign by [`UdpFlow::accept`]'s length check.
    fn slot(&self) -> usize {
        if self.gro {
            return net::GRO_SLOT;
        }
        self.rx.max_len.max(AUTH_RTT_MIN_LEN) + 1
    }
}

/// Starts the receive threads of a session's UDP flows (`udp`: position in
/// the session, state) into `workers`. While the flows are no more than
/// the CPUs each has its own thread blocking in `recvmmsg`; more share one
/// worker per CPU, each waiting on all its sockets at once
/// ([`udp_rx_many`]): a thread per flow costs a stack and a wake-up per
/// datagram, and thousands of them only take turns on the same cores.
pub(crate) fn start_workers(
    udp: Vec<(usize, Box<UdpFlow>)>,
    workers: &mut Vec<Worker>,
) -> Result<(), EngineError> {
    for (g, (ids, flows)) in per_cpu(udp).into_iter().enumerate() {
        let h = match flows.as_slice() {
            [one] => {
                let name = format!("wb-rx-{}", one.rx.flow_id);
                let mut flows = flows;
                let Some(f) = flows.pop() else { continue };
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || udp_rx(f))
            }
            _ => {
                let mut poller =
                    net::Poller::new(1024).map_err(|e| EngineError::io("receive poller", e))?;
                for (t, f) in flows.iter().enumerate() {
                    f.sock
                        .set_nonblocking(true)
                        .map_err(|e| EngineError::io("data socket", e))?;
                    poller
                        .add(f.sock.as_raw_fd(), t)
                        .map_err(|e| EngineError::io("receive poller", e))?;
                }
                std::thread::Builder::new()
                    .name(format!("wb-rxw-{g}"))
                    .spawn(move || udp_rx_many(flows, poller))
            }
        }
        .map_err(|e| EngineError::io("receive thread", e))?;
        workers.push(Worker {
            flows: ids,
            handle: Some(h),
        });
    }
    Ok(())
}

/// Serves several UDP flows on one thread until the session stops them:
/// `poller` watches all their (non-blocking) sockets, and each ready socket
/// is read until it is empty.
fn udp_rx_many(mut flows: Vec<UdpFlow>, mut poller: net::Poller) -> WorkerOutcome {
    crate::clock::raise_priority();
    tighten_timer_slack();
    let cpu0 = CpuTime::thread();
    let slot = flows
        .iter()
        .map(UdpFlow::slot)
        .max()
        .unwrap_or(AUTH_RTT_MIN_LEN + 1);
    let mut batch = RecvBatch::new(slot);
    let reflect = flows.iter().any(|f| f.rx.reflect);
    // The session stops all its flows at once.
    let stop = match flows.first() {
        Some(f) => f.rx.sh.clone(),
        None => Arc::new(FlowShared::default()),
    };
    // Live intervals of quiet flows are closed every 10 ms at most.
    let live = flows.iter().any(|f| f.rx.acc.live.is_some());
    let mut next_tick = 0;
    while !stop.stop.load(Ordering::Relaxed) {
        if live && mono_ns() >= next_tick {
            flows.iter_mut().for_each(|f| f.rx.acc.tick());
            next_tick = mono_ns() + 10_000_000;
        }
        let mut read = 0;
        poller.wait(POLL_MS as i32, |t| {
            let Some(f) = flows.get_mut(t) else { return };
            // Read until the socket is empty (a short batch where batches
            // are real, else an error), but at most a few batches, so one
            // fast flow cannot hold up the others' rounds.
            let mut here = 0;
            while let Ok((n, _)) = f.read_batch(&mut batch) {
                here += n;
                if n == 0 || (net::KERNEL_RX_TIMESTAMPS && n < BATCH) || here >= 4 * BATCH {
                    break;
                }
            }
            read += here;
        });
        // One-way flows with kernel timestamps may let datagrams gather
        // between rounds: the nap costs no accuracy and saves wake-ups.
        if read > 0 && !reflect && net::KERNEL_RX_TIMESTAMPS {
            sleep_until(mono_ns() + NAP_MAX_NS);
        }
    }
    // The sockets are non-blocking already; one budget for all of them.
    let until = mono_ns() + STOP_DRAIN_NS;
    let mut left = DRAIN_MAX;
    for f in &mut flows {
        drain(f, &mut batch, until, &mut left);
    }
    WorkerOutcome {
        accs: flows.into_iter().map(|f| f.rx.acc.into_recv()).collect(),
        cpu: CpuTime::thread().since(cpu0),
    }
}

/// One UDP flow on its own thread: blocks in `recvmmsg` (up to the
/// socket's read timeout, to look at the stop flag) and naps between
/// batches while datagrams arrive fast ([`nap_ns`]).
fn udp_rx(mut f: UdpFlow) -> WorkerOutcome {
    crate::clock::raise_priority();
    // Naps between batches are tens of microseconds; the default 50 µs
    // timer slack would double them.
    tighten_timer_slack();
    let cpu0 = CpuTime::thread();
    let mut batch = RecvBatch::new(f.slot());
    // Kernel time of the last datagram read (0: none yet).
    let mut last_ts = 0;
    while !f.rx.sh.stop.load(Ordering::Relaxed) {
        // E.g. ECONNREFUSED queued by an ICMP error after a reflection is
        // not fatal for a receiving socket, nor is a timeout.
        let Ok((n, ts)) = f.read_batch(&mut batch) else {
            f.rx.acc.tick();
            continue;
        };
        let prev_ts = last_ts;
        if n > 0 {
            last_ts = ts;
        }
        // Reflections go back at once; a one-way flow may let the batch fill,
        // but only where the kernel stamps arrivals (a nap before a
        // user-space timestamp would be measured as delay).
        if !f.rx.reflect && net::KERNEL_RX_TIMESTAMPS {
            if let Some(nap) = nap_ns(n, prev_ts, last_ts) {
                sleep_until(mono_ns() + nap);
            }
        }
    }
    // Not blocking for the read timeout once the queue is empty. If the
    // switch fails, an empty queue costs one read timeout (POLL_MS).
    let _ = f.sock.set_nonblocking(true);
    let mut left = DRAIN_MAX;
    drain(&mut f, &mut batch, mono_ns() + STOP_DRAIN_NS, &mut left);
    f.rx.outcome(CpuTime::thread().since(cpu0))
}

/// Most datagrams a stopped receiver still takes from its sockets: the
/// receive buffers' worth of small datagrams several times over.
const DRAIN_MAX: usize = 1 << 16;

/// Takes what `f`'s (non-blocking) socket already holds once the session
/// has stopped the flow, counted as any other datagram, until the socket
/// is empty, `left` datagrams are taken or `until` (monotonic ns) passes.
///
/// Why: the stop flag is set after the linger, when everything the sender
/// sent should have arrived; a receive thread the host held through the
/// linger (a busy or stalled machine) finds it queued, and leaving at once
/// would count those datagrams lost although they were received. The
/// bounds keep a sender that has not stopped from holding the receiver.
fn drain(f: &mut UdpFlow, batch: &mut RecvBatch, until: u64, left: &mut usize) {
    while *left > 0 && mono_ns() < until {
        match f.read_batch(batch) {
            Ok((0, _)) => return,
            Ok((n, _)) => *left = left.saturating_sub(n),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return,
            // EINTR, or an error an ICMP message queued (ECONNREFUSED
            // after a reflection): reported once, the queue is still there.
            Err(_) => *left -= 1,
        }
    }
}

/// Datagrams a nap between `recvmmsg` calls aims to let queue up.
const NAP_FILL: u64 = BATCH as u64 / 2;
/// Naps shorter than this are not worth a timer wake-up.
const NAP_MIN_NS: u64 = 5_000;
/// Longest nap: bounds the wait for the stop flag and the queue built up
/// when the rate rises (the next batch is then full and read at once).
const NAP_MAX_NS: u64 = 200_000;

/// How long to sleep before the next `recvmmsg` after a batch of `n`
/// datagrams, the last of which arrived at kernel time `last_ts`, while the
/// one read before them arrived at `prev_ts` (0: there was none).
///
/// Blocking in `recvmmsg` as soon as the queue is empty costs a wake-up per
/// datagram or two at high rates (measured: 1.4–2.6 datagrams per call at
/// 300 kpps, one context switch per call), and the wake-up is paid in the
/// sender's context on loopback; when both share a core, the receiver (at
/// higher priority) even preempts the sender for every datagram. The rate is
/// measured from the previous batch's last datagram, so that a run of
/// single-datagram batches is recognised as fast too. While datagrams
/// arrive faster than one per `NAP_MAX_NS / NAP_FILL`, sleeping on a timer
/// for about the time `NAP_FILL` of them take lets the kernel queue them
/// without waking anyone.
/// Delays are unaffected: they come from kernel receive timestamps.
fn nap_ns(n: usize, prev_ts: u64, last_ts: u64) -> Option<u64> {
    if n >= BATCH || n == 0 || prev_ts == 0 || last_ts < prev_ts {
        // A full batch: more is probably queued, read at once. The first
        // batch, or a clock step: the rate is unknown, block as before.
        return None;
    }
    let gap = (last_ts - prev_ts) / n as u64;
    let nap = gap.saturating_mul(NAP_FILL);
    (NAP_MIN_NS..=NAP_MAX_NS).contains(&nap).then_some(nap)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow's receiving end on loopback as a session makes it (flow 1
    /// of session 7, the ids the sender's test helpers use), with UDP GRO
    /// or without, and a sending socket connected to it.
    #[cfg(target_os = "linux")]
    fn loopback_flow(gro: bool) -> (UdpFlow, UdpSocket, Arc<FlowShared>) {
        use crate::transport::rx::{rx_flow, RxAt};
        use wirebench_wire::{FlowSetup, Transport};
        let setup = FlowSetup {
            flow_id: 1,
            transport: Transport::Udp,
            max_len: 100,
            mtu: 1500,
            bulk: true,
            ..Default::default()
        };
        let at = RxAt::loopback(7, 1 << 20, gro);
        let rf = rx_flow(&setup, &at, None);
        let sh = rf.sh.clone();
        sh.start_ns.store(realtime_ns(), Ordering::Relaxed);
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(sock.local_addr().unwrap()).unwrap();
        let from = tx.local_addr().unwrap();
        let f = UdpFlow::new(sock, rf, Some(from), false).unwrap();
        (f, tx, sh)
    }

    /// Segmented sends of two sizes and one foreign datagram (another
    /// session's): with GRO on, the kernel hands them over in fewer
    /// receive slots than datagrams, and the flow still accounts each
    /// probe once, in order, nothing lost, the foreign one counted apart;
    /// with GRO off, one slot per datagram and the same accounting.
    #[cfg(target_os = "linux")]
    #[test]
    fn coalesced_datagrams_are_accounted_one_by_one() {
        for gro in [true, false] {
            let (mut f, tx, sh) = loopback_flow(gro);
            let mut sizes = vec![64u32; 30];
            sizes.extend([80u32; 10]);
            let (g, sent, _) = super::super::tests::send_sizes(&tx, &sizes);
            assert_eq!((sent, g.sends), (40, 2));
            let mut other = [0u8; 64];
            ProbeHeader {
                flags: 0,
                session: 8,
                flow: 1,
                len: 64,
                seq: 0,
                tx_ns: realtime_ns(),
            }
            .encode(&mut other)
            .unwrap();
            tx.send(&other).unwrap();
            let mut batch = RecvBatch::new(f.slot());
            let mut slots = 0;
            // Until the socket's read timeout says nothing more is queued.
            while let Ok((n, _)) = f.read_batch(&mut batch) {
                slots += n;
            }
            let r = crate::transport::rx::flow_report(1, &sh, f.rx.acc.into_recv(), Some(40), None);
            assert_eq!(r.summary.counts.unique, 40, "gro {gro}");
            assert_eq!(r.summary.counts.lost, Some(0), "gro {gro}");
            assert_eq!(r.summary.counts.duplicates, 0, "gro {gro}");
            assert_eq!(r.summary.counts.reordered, 0, "gro {gro}");
            assert_eq!(r.foreign, 1, "gro {gro}");
            if gro {
                // Two runs of one size and the foreign datagram.
                assert!(slots <= 3, "{slots} receive slots with GRO");
            } else {
                assert_eq!(slots, 41);
            }
        }
    }

    /// Datagrams already queued when the receive loop sees the stop flag
    /// (a thread the host held through the linger) are counted, by a
    /// flow's own thread and by a shared worker alike: here the flag is
    /// set before either reads anything, and all 150 (more than two
    /// batches) must be counted, none lost.
    #[cfg(target_os = "linux")]
    #[test]
    fn datagrams_queued_before_the_stop_are_counted() {
        for shared in [false, true] {
            let (f, tx, sh) = loopback_flow(false);
            let mut d = [0u8; 64];
            for seq in 0..150 {
                ProbeHeader {
                    flags: 0,
                    session: 7,
                    flow: 1,
                    len: 64,
                    seq,
                    tx_ns: realtime_ns(),
                }
                .encode(&mut d)
                .unwrap();
                tx.send(&d).unwrap();
            }
            sh.stop.store(true, Ordering::Relaxed);
            let mut out = if shared {
                let mut poller = net::Poller::new(16).unwrap();
                f.sock.set_nonblocking(true).unwrap();
                poller.add(f.sock.as_raw_fd(), 0).unwrap();
                udp_rx_many(vec![f], poller)
            } else {
                udp_rx(f)
            };
            assert_eq!(out.accs.len(), 1);
            let acc = out.accs.remove(0);
            let r = crate::transport::rx::flow_report(1, &sh, acc, Some(150), None);
            let c = &r.summary.counts;
            assert_eq!(c.unique, 150, "shared worker {shared}");
            assert_eq!(c.lost, Some(0), "shared worker {shared}");
            assert_eq!((c.duplicates, r.foreign), (0, 0), "shared worker {shared}");
        }
    }

    #[test]
    fn naps_only_while_datagrams_arrive_fast() {
        // 800 kpps (1.25 µs apart), 10 of them: nap for about 32 more.
        assert_eq!(nap_ns(10, 1_000, 1_000 + 10 * 1_250), Some(40_000));
        // A single datagram 2 µs after the previous one is fast too.
        assert_eq!(nap_ns(1, 1_000, 3_000), Some(64_000));
        // Full batch: read again at once.
        assert_eq!(nap_ns(BATCH, 1, 1_000 * BATCH as u64), None);
        // First batch (nothing read before), or nothing read: block.
        assert_eq!(nap_ns(5, 0, 5_000), None);
        assert_eq!(nap_ns(0, 5, 5), None);
        // Slow flow (10 kpps): the nap would exceed the cap, block instead.
        assert_eq!(nap_ns(2, 1_000, 201_000), None);
        // Back-to-back arrivals: not worth a timer.
        assert_eq!(nap_ns(5, 100, 200), None);
        // Timestamps out of order (clock step): no nap.
        assert_eq!(nap_ns(5, 100, 50), None);
    }
}
