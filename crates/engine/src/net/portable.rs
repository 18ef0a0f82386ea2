//! The portable send and receive paths (Windows, macOS, FreeBSD): one
//! datagram per system call through the standard library's sockets,
//! receive times taken in user space as soon as the read returns, buffer
//! sizes through socket2. Same interface as the Linux batches, so the
//! engine's loops do not change; a "batch" here holds one received
//! datagram, and sending a batch is a loop of `send` calls.
//!
//! Buffers and address slots are allocated once per flow, as on Linux.

use super::RawFd;
use std::io;
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, UdpSocket};

/// Slots per batch (sending); receiving fills one slot per call.
pub const BATCH: usize = 64;

/// How datagrams leave: one `send` call per datagram.
pub const SEND_PATH: &str = "send";
/// Where receive times come from: the clock read right after the read
/// returned (no kernel timestamps on this path).
pub const RX_TIMESTAMPS: &str = "user";
/// Receive times are read in user space: a nap between reads would add to
/// the measured delay, so the receiver must not nap.
pub const KERNEL_RX_TIMESTAMPS: bool = false;

/// Winsock's "datagram larger than the buffer" (WSAEMSGSIZE): the buffer
/// holds its first bytes, the rest is gone.
#[cfg(windows)]
const MSG_TOO_BIG: Option<i32> = Some(10040);
#[cfg(not(windows))]
const MSG_TOO_BIG: Option<i32> = None;

/// The socket behind a raw handle, borrowed: never closed here.
fn udp(fd: RawFd) -> ManuallyDrop<UdpSocket> {
    #[cfg(unix)]
    // SAFETY: the caller's socket outlives this borrow, and ManuallyDrop
    // keeps it from being closed.
    let s = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    #[cfg(windows)]
    // SAFETY: as above.
    let s = unsafe { std::os::windows::io::FromRawSocket::from_raw_socket(fd) };
    ManuallyDrop::new(s)
}

fn socket_ref(fd: RawFd, f: impl FnOnce(socket2::SockRef<'_>)) {
    let s = udp(fd);
    f(socket2::SockRef::from(&*s));
}

/// Asks for a receive buffer of `bytes` (what the system grants may be less).
pub fn set_rcvbuf(fd: RawFd, bytes: usize) {
    socket_ref(fd, |s| {
        let _ = s.set_recv_buffer_size(bytes);
    });
}

pub fn set_sndbuf(fd: RawFd, bytes: usize) {
    socket_ref(fd, |s| {
        let _ = s.set_send_buffer_size(bytes);
    });
}

/// No kernel timestamps on this path; the receiver stamps on read.
pub fn enable_rx_timestamps(_fd: RawFd) -> bool {
    false
}

/// No per-datagram IP marking on this path: the standard library's reads
/// carry no control messages.
pub fn enable_rx_marks(_fd: RawFd, _v6: bool) -> bool {
    false
}

/// Flow labels are chosen through a Linux-only interface.
pub fn set_flow_label(_fd: RawFd, _dst: std::net::Ipv6Addr, _label: u32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "choosing an IPv6 flow label is supported on Linux only",
    ))
}

/// UDP segmentation offload (UDP_SEGMENT, UDP_GRO) is a Linux kernel
/// feature.
pub const UDP_OFFLOAD: bool = false;

/// No UDP GRO on this path.
pub fn enable_gro(_fd: RawFd) -> bool {
    false
}

/// Zero-copy sends (MSG_ZEROCOPY) are a Linux kernel feature.
pub fn enable_zerocopy(_fd: RawFd) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "zero-copy sends (MSG_ZEROCOPY) are supported on Linux only",
    ))
}

/// Never called: [`enable_zerocopy`] refuses first.
pub fn send_zerocopy(_fd: RawFd, _buf: &[u8]) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

pub fn is_nobufs(_e: &io::Error) -> bool {
    false
}

/// No zero-copy sends, so no completions.
pub fn zerocopy_completions(_fd: RawFd, _f: impl FnMut(u32, u32, bool)) -> io::Result<usize> {
    Ok(0)
}

pub fn wait_errqueue(_fd: RawFd, _timeout_ms: i32) -> bool {
    false
}

/// What one datagram's IP header carried: never known on this path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpMarks {
    pub tos: Option<u8>,
    pub ttl: Option<u8>,
    pub flow_label: Option<u32>,
}

/// Receive slots, reused for every call.
pub struct RecvBatch {
    slot: usize,
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    from: [Option<SocketAddr>; BATCH],
    /// Replies queued by [`RecvBatch::queue_reply`]: (slot, length).
    replies: [(usize, usize); BATCH],
}

impl RecvBatch {
    /// Slots of `slot` bytes each, allocated once.
    pub fn new(slot: usize) -> Box<Self> {
        Box::new(RecvBatch {
            slot,
            bufs: vec![0u8; slot * BATCH],
            lens: [0; BATCH],
            from: [None; BATCH],
            replies: [(0, 0); BATCH],
        })
    }

    /// Receives one datagram into slot 0, blocking up to the socket's
    /// receive timeout. Returns 1, or the error (a timeout is WouldBlock
    /// or TimedOut, as on Linux).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let s = udp(fd);
        match s.recv_from(&mut self.bufs[..self.slot]) {
            Ok((n, from)) => {
                self.lens[0] = n;
                self.from[0] = Some(from);
                Ok(1)
            }
            Err(e) if MSG_TOO_BIG.is_some() && e.raw_os_error() == MSG_TOO_BIG => {
                // Oversized: counted as truncated (foreign), never answered.
                self.lens[0] = self.slot;
                self.from[0] = None;
                Ok(1)
            }
            Err(e) => Err(e),
        }
    }

    /// Datagram `i` of the last batch, cut to the slot.
    pub fn data(&mut self, i: usize) -> &mut [u8] {
        let len = self.lens[i].min(self.slot);
        &mut self.bufs[i * self.slot..i * self.slot + len]
    }

    /// The whole of slot `i`, for writing a reply in place.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.slot..(i + 1) * self.slot]
    }

    /// Source address of datagram `i` of the last batch.
    pub fn source(&self, i: usize) -> Option<SocketAddr> {
        self.from[i]
    }

    /// The slot is one byte larger than any datagram the flow expects
    /// (the receiver sizes it so), so a datagram filling it was cut.
    pub fn truncated(&self, i: usize) -> bool {
        self.lens[i] >= self.slot
    }

    /// Never available on this path.
    pub fn kernel_ts(&self, _i: usize) -> Option<u64> {
        None
    }

    /// Never coalesced on this path.
    pub fn gro_size(&self, _i: usize) -> Option<usize> {
        None
    }

    /// Never available on this path.
    pub fn marks(&self, _i: usize) -> IpMarks {
        IpMarks::default()
    }

    /// Queues datagram `i` (`len` bytes of its slot) to go back to where it
    /// came from, as reply number `k` of the next [`RecvBatch::flush_replies`].
    pub fn queue_reply(&mut self, k: usize, i: usize, len: usize) {
        self.replies[k] = (i, len.min(self.slot));
    }

    /// Sends the first `n` queued replies back to their senders; returns
    /// how many went out (a failed reply is round-trip loss, skipped).
    pub fn flush_replies(&mut self, fd: RawFd, n: usize) -> usize {
        let s = udp(fd);
        let mut sent = 0;
        for &(i, len) in &self.replies[..n] {
            let Some(to) = self.from[i] else { continue };
            let at = i * self.slot;
            if s.send_to(&self.bufs[at..at + len], to).is_ok() {
                sent += 1;
            }
        }
        sent
    }
}

/// Preallocated send slots for a connected socket.
pub struct SendBatch {
    slot: usize,
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    /// Per-slot destinations on an unconnected socket.
    dests: [Option<std::net::SocketAddr>; BATCH],
}

impl SendBatch {
    /// `BATCH` slots of `slot` bytes, pre-filled once with the same
    /// recognisable filler as on Linux.
    pub fn new(slot: usize) -> Box<Self> {
        let mut b = Box::new(SendBatch {
            slot,
            bufs: vec![0u8; slot * BATCH],
            lens: [0; BATCH],
            dests: [None; BATCH],
        });
        for (i, x) in b.bufs.iter_mut().enumerate() {
            *x = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
        }
        b
    }

    /// Every slot at its full length, to fill the payload content once.
    pub fn slots_mut(&mut self) -> std::slice::ChunksMut<'_, u8> {
        self.bufs.chunks_mut(self.slot.max(1))
    }

    pub fn slot(&mut self, i: usize, len: usize) -> &mut [u8] {
        let len = len.min(self.slot);
        self.lens[i] = len;
        &mut self.bufs[i * self.slot..i * self.slot + len]
    }

    /// Where slot `i` goes: `Some` on an unconnected socket, `None` to the
    /// connected peer.
    pub fn set_dest(&mut self, i: usize, to: Option<&socket2::SockAddr>) {
        self.dests[i] = to.and_then(|a| a.as_socket());
    }

    /// No UDP GSO here: the slots go one by one as [`SendBatch::send`]
    /// sends them (never called: [`UDP_OFFLOAD`] is false).
    pub fn send_segmented(
        &mut self,
        fd: RawFd,
        from: usize,
        n: usize,
    ) -> Result<super::Segmented, (io::Error, usize)> {
        self.send(fd, from, n)
            .map(|slots| super::Segmented {
                slots,
                ..Default::default()
            })
            .map_err(|e| (e, 1))
    }

    /// Never: no segmented sends on this path.
    pub fn gso_refused(_e: &io::Error) -> bool {
        false
    }

    /// Sends slots `from..n` one by one; returns how many left (at least 1
    /// unless an error is returned for slot `from`).
    pub fn send(&mut self, fd: RawFd, from: usize, n: usize) -> io::Result<usize> {
        let s = udp(fd);
        let mut i = from;
        while i < n {
            let at = i * self.slot;
            let data = &self.bufs[at..at + self.lens[i]];
            let r = match self.dests[i] {
                Some(to) => s.send_to(data, to),
                None => s.send(data),
            };
            match r {
                Ok(_) => i += 1,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if i == from => return Err(e),
                Err(_) => break,
            }
        }
        Ok(i - from)
    }
}

/// Readiness of many sockets at once: `poll`/`WSAPoll` over every socket
/// (the Linux build uses epoll; here the cost grows with the sockets).
pub struct Poller {
    fds: Vec<super::PollFd>,
    tokens: Vec<usize>,
}

impl Poller {
    /// A poller; `max_events` is a hint the poll set does not need.
    pub fn new(_max_events: usize) -> io::Result<Poller> {
        Ok(Poller {
            fds: Vec::new(),
            tokens: Vec::new(),
        })
    }

    /// Watches `fd` for readability; `token` comes back from [`Poller::wait`].
    pub fn add(&mut self, fd: RawFd, token: usize) -> io::Result<()> {
        self.fds.push(super::pollfd(fd, super::POLLIN));
        self.tokens.push(token);
        Ok(())
    }

    /// Stops watching `fd`; called before the socket is closed (a closed
    /// descriptor left in the poll set would be reported every wait).
    pub fn remove(&mut self, fd: RawFd) {
        let fd = super::pollfd(fd, 0).fd;
        if let Some(i) = self.fds.iter().position(|p| p.fd == fd) {
            self.fds.swap_remove(i);
            self.tokens.swap_remove(i);
        }
    }

    /// Waits up to `timeout_ms` and calls `f` with the token of every
    /// readable socket; returns how many there were.
    pub fn wait(&mut self, timeout_ms: i32, mut f: impl FnMut(usize)) -> usize {
        if super::poll(&mut self.fds, timeout_ms) <= 0 {
            return 0;
        }
        let mut n = 0;
        for (p, &t) in self.fds.iter_mut().zip(&self.tokens) {
            if p.revents != 0 {
                p.revents = 0;
                f(t);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::AsRawFd;
    use super::*;

    #[test]
    fn one_by_one_round_trip() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        assert!(!enable_rx_timestamps(rx.as_raw_fd()));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut sb = SendBatch::new(100);
        for i in 0..10 {
            sb.slot(i, 50 + i)[0] = i as u8;
        }
        assert_eq!(sb.send(tx.as_raw_fd(), 0, 10).unwrap(), 10);
        let mut rb = RecvBatch::new(128);
        for _ in 0..10 {
            assert_eq!(rb.recv(rx.as_raw_fd()).unwrap(), 1);
            let d = rb.data(0);
            assert_eq!(d.len(), 50 + d[0] as usize);
            assert!(!rb.truncated(0));
            assert_eq!(rb.source(0), Some(tx.local_addr().unwrap()));
            rb.queue_reply(0, 0, 20);
            assert_eq!(rb.flush_replies(rx.as_raw_fd(), 1), 1);
        }
        let mut buf = [0u8; 64];
        tx.set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        assert_eq!(tx.recv(&mut buf).unwrap(), 20);
    }
}
