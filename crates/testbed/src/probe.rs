//! Our own reachability and path-MTU probes, so that `check` needs neither
//! ping nor any tool on the machine: UDP sockets are opened inside the
//! nodes' namespaces from this process (see [`crate::sys::in_netns`]).
//!
//! Path MTU is measured, not computed: the largest UDP payload that crosses
//! with the don't-fragment bit set (IP_PMTUDISC_DO / IPV6_PMTUDISC_DO), plus
//! 28 B (IPv4 + UDP headers) or 48 B (IPv6 + UDP). A datagram over the first
//! link's MTU is refused by the sender's kernel with EMSGSIZE; one over a
//! later link's MTU is dropped by the router, whose ICMP "fragmentation
//! needed" / "packet too big" updates the sender's path MTU so that the
//! next send is refused with EMSGSIZE too.

use crate::error::TestbedError;
use crate::os;
use crate::sys::in_netns;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// IPv4 + UDP header bytes.
pub const V4_OVERHEAD: u32 = 28;
/// IPv6 + UDP header bytes.
pub const V6_OVERHEAD: u32 = 48;

/// What became of one don't-fragment datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DfOutcome {
    /// It arrived whole (unfragmented: DF was set).
    Delivered,
    /// The sender's kernel refused it with EMSGSIZE (immediately, or after
    /// a router's ICMP told it the path MTU).
    Refused,
    /// Neither arrived nor refused within the timeout.
    Lost,
}

fn any_addr(v6: bool) -> SocketAddr {
    if v6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    }
}

/// Tells this process's probes from another's on a shared port.
fn probe_tag() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ ((std::process::id() as u64) << 32)
}

/// Length of a [`PeerResponder`]'s acknowledgement: the probe's 16-byte
/// stamp and its length (u32, big-endian).
const ACK_LEN: usize = 20;

/// The receiving end of a path-MTU probe between two hosts (two agents):
/// a UDP socket whose thread acknowledges every datagram of at least 16
/// bytes with its stamp and length. A small acknowledgement comes back
/// whatever the probe's size, so only the forward path is measured.
pub struct PeerResponder {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeerResponder {
    /// Binds the UDP echo responder to `addr`, on a port of the kernel's choice.
    pub fn bind(addr: IpAddr) -> Result<PeerResponder, TestbedError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let sock = UdpSocket::bind(SocketAddr::new(addr, 0))
            .map_err(|e| TestbedError::io(format!("binding a probe responder on {addr}"), e))?;
        let port = sock
            .local_addr()
            .map_err(|e| TestbedError::io("probe responder address", e))?
            .port();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| TestbedError::io("probe responder timeout", e))?;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !flag.load(Ordering::Relaxed) {
                if let Ok((n, src)) = sock.recv_from(&mut buf) {
                    if n >= 16 {
                        let mut ack = [0u8; ACK_LEN];
                        ack[..16].copy_from_slice(&buf[..16]);
                        ack[16..].copy_from_slice(&(n as u32).to_be_bytes());
                        let _ = sock.send_to(&ack, src);
                    }
                }
            }
        });
        Ok(PeerResponder {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// The port it answers on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for PeerResponder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Path MTU (bytes of IP packet) toward a [`PeerResponder`] at `dest`,
/// measured with don't-fragment datagrams from this thread's namespace;
/// None when not even a small datagram is acknowledged.
pub fn peer_path_mtu(dest: SocketAddr) -> Result<Option<u32>, TestbedError> {
    let v6 = dest.is_ipv6();
    let mut p = ProbePair::to_peer(dest)?;
    let over = if v6 { V6_OVERHEAD } else { V4_OVERHEAD };
    Ok(p.max_payload(v6)?.map(|m| m + over))
}

/// A UDP socket bound inside a namespace.
pub fn udp_socket_in(ns: &str, bind: SocketAddr) -> Result<UdpSocket, TestbedError> {
    in_netns(ns, || {
        UdpSocket::bind(bind)
            .map_err(|e| TestbedError::io(format!("binding UDP {bind} in {ns}"), e))
    })
}

pub use crate::os::set_dont_fragment;

/// Where a probe's arrival is seen.
enum Arrival {
    /// The receiving socket is ours (another namespace of this host).
    Local(UdpSocket),
    /// The receiver is another process, usually on another host (a
    /// [`PeerResponder`]): it acknowledges each datagram with its stamp and
    /// length, and the acknowledgement comes back to the sending socket.
    Acked,
}

/// A sender in `from_ns` connected to a receiver in `to_ns` at `to_addr`,
/// or to a [`PeerResponder`] elsewhere.
pub(crate) struct ProbePair {
    tx: UdpSocket,
    rx: Arrival,
    tag: u64,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
}

impl ProbePair {
    pub(crate) fn new(
        from_ns: &str,
        to_ns: &str,
        to_addr: IpAddr,
        v6: bool,
    ) -> Result<ProbePair, TestbedError> {
        let rx = udp_socket_in(to_ns, SocketAddr::new(to_addr, 0))?;
        let port = rx
            .local_addr()
            .map_err(|e| TestbedError::io("probe receiver address", e))?
            .port();
        let tx = udp_socket_in(from_ns, any_addr(v6))?;
        tx.connect(SocketAddr::new(to_addr, port))
            .map_err(|e| TestbedError::io(format!("connecting a probe to {to_addr}"), e))?;
        set_dont_fragment(&tx, v6).map_err(|e| TestbedError::io("setting don't-fragment", e))?;
        Ok(ProbePair {
            tx,
            rx: Arrival::Local(rx),
            tag: probe_tag(),
            buf: vec![0u8; 65536],
            rbuf: vec![0u8; 65536],
        })
    }

    /// A path-MTU prober toward a [`PeerResponder`] at `dest`, from this
    /// thread's network namespace.
    pub(crate) fn to_peer(dest: SocketAddr) -> Result<ProbePair, TestbedError> {
        let v6 = dest.is_ipv6();
        let tx = UdpSocket::bind(any_addr(v6))
            .map_err(|e| TestbedError::io("binding a probe socket", e))?;
        tx.connect(dest)
            .map_err(|e| TestbedError::io(format!("connecting a probe to {dest}"), e))?;
        set_dont_fragment(&tx, v6).map_err(|e| TestbedError::io("setting don't-fragment", e))?;
        Ok(ProbePair {
            tx,
            rx: Arrival::Acked,
            tag: probe_tag(),
            buf: vec![0u8; 65536],
            rbuf: vec![0u8; 65536],
        })
    }

    fn stamp(&self, seq: u64) -> [u8; 16] {
        let mut st = [0u8; 16];
        st[..8].copy_from_slice(&self.tag.to_be_bytes());
        st[8..].copy_from_slice(&seq.to_be_bytes());
        st
    }

    fn fill(&mut self, size: usize, seq: u64) {
        let stamp = self.stamp(seq);
        let b = &mut self.buf[..size];
        b.fill(0x5a);
        let n = stamp.len().min(size);
        b[..n].copy_from_slice(&stamp[..n]);
    }

    fn matches(&self, got: &[u8], size: usize, seq: u64) -> bool {
        if got.len() != size {
            return false;
        }
        let stamp = self.stamp(seq);
        let n = stamp.len().min(size);
        got[..n] == stamp[..n]
    }

    /// Waits up to `timeout` for the datagram (`size`, `seq`) at the receiver.
    fn wait_rx(&mut self, size: usize, seq: u64, timeout: Duration) -> Result<bool, TestbedError> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let sock = match &self.rx {
                Arrival::Local(s) => s,
                Arrival::Acked => &self.tx,
            };
            sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| TestbedError::io("probe timeout", e))?;
            match sock.recv_from(&mut self.rbuf) {
                Ok((n, src)) => {
                    let got = &self.rbuf[..n];
                    match &self.rx {
                        Arrival::Local(rx) => {
                            if self.matches(got, size, seq) {
                                // Echo it back for the round trip (small echoes only).
                                if size <= 64 {
                                    let _ = rx.send_to(got, src);
                                }
                                return Ok(true);
                            }
                        }
                        Arrival::Acked => {
                            if got.len() == ACK_LEN
                                && got[..16] == self.stamp(seq)
                                && got[16..] == (size as u32).to_be_bytes()
                            {
                                return Ok(true);
                            }
                        }
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(false)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Receiving on the connected sending socket (a peer's
                // acknowledgements), a router's "too big" or a closed port
                // surfaces here: not arrived; the next send says which.
                Err(e)
                    if matches!(self.rx, Arrival::Acked)
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EMSGSIZE) | Some(libc::ECONNREFUSED)
                        ) =>
                {
                    return Ok(false)
                }
                Err(e) => return Err(TestbedError::io("probe receive", e)),
            }
        }
    }

    /// Sends one DF datagram of `size` payload bytes, up to `tries` times.
    pub(crate) fn df_probe(
        &mut self,
        size: usize,
        tries: u32,
        timeout: Duration,
    ) -> Result<DfOutcome, TestbedError> {
        for attempt in 0..tries.max(1) {
            let seq = ((size as u64) << 16) | attempt as u64;
            self.fill(size, seq);
            match self.tx.send(&self.buf[..size]) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(os::EMSGSIZE) => return Ok(DfOutcome::Refused),
                // A pending ICMP error surfaces on the next call; try again.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(os::ECONNREFUSED) | Some(os::EHOSTUNREACH) | Some(os::ENETUNREACH)
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(TestbedError::io("sending a probe", e)),
            }
            if self.wait_rx(size, seq, timeout)? {
                return Ok(DfOutcome::Delivered);
            }
            if let Ok(Some(e)) = self.tx.take_error() {
                if e.raw_os_error() == Some(os::EMSGSIZE) {
                    // The router's "too big" arrived: the path refuses this size.
                    return Ok(DfOutcome::Refused);
                }
            }
        }
        // A "too big" that arrived after the last wait (the router's first
        // neighbour solicitation toward us can be lost, and the ICMP then
        // waits for the 1 s retransmit) has still lowered the path MTU: a
        // last send is refused locally if so, and nothing leaves.
        let seq = ((size as u64) << 16) | 0xffff;
        self.fill(size, seq);
        if let Err(e) = self.tx.send(&self.buf[..size]) {
            if e.raw_os_error() == Some(os::EMSGSIZE) {
                return Ok(DfOutcome::Refused);
            }
        }
        Ok(DfOutcome::Lost)
    }

    /// Round trip of a small datagram: request to the receiver, echo back.
    pub(crate) fn echo(
        &mut self,
        tries: u32,
        timeout: Duration,
    ) -> Result<Option<Duration>, TestbedError> {
        for attempt in 0..tries.max(1) {
            let size = 32;
            let seq = 0xec40_0000 | attempt as u64;
            self.fill(size, seq);
            let t0 = Instant::now();
            match self.tx.send(&self.buf[..size]) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(os::ECONNREFUSED) => continue,
                Err(e) => return Err(TestbedError::io("sending an echo probe", e)),
            }
            if !self.wait_rx(size, seq, timeout)? {
                continue;
            }
            self.tx
                .set_read_timeout(Some(timeout))
                .map_err(|e| TestbedError::io("probe timeout", e))?;
            loop {
                match self.tx.recv(&mut self.rbuf) {
                    Ok(n) => {
                        let got = self.rbuf[..n].to_vec();
                        if self.matches(&got, size, seq) {
                            return Ok(Some(t0.elapsed()));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        Ok(None)
    }

    /// The largest payload that arrives with DF set: binary search between
    /// a small datagram that must arrive and the IP maximum.
    pub(crate) fn max_payload(&mut self, v6: bool) -> Result<Option<u32>, TestbedError> {
        let t = Duration::from_millis(300);
        let mut lo = 16usize;
        if self.df_probe(lo, 3, t)? != DfOutcome::Delivered {
            return Ok(None);
        }
        let mut hi = if v6 { 65535 - 8 } else { 65535 - 28 } + 1;
        // Invariant: lo fits, hi does not.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match self.df_probe(mid, 3, t)? {
                DfOutcome::Delivered => lo = mid,
                _ => hi = mid,
            }
        }
        Ok(Some(lo as u32))
    }
}
