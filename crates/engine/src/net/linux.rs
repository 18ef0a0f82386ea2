//! Linux socket plumbing the standard library does not offer: `recvmmsg`
//! and `sendmmsg` batches over preallocated buffers, UDP segmentation
//! offload both ways (UDP_SEGMENT sends, UDP_GRO receives), kernel receive
//! timestamps (SO_TIMESTAMPNS), forced buffer sizes.
//!
//! Every buffer and message header is allocated once per flow; the hot path
//! only rewrites lengths and calls the kernel.

use super::{RawFd, Segmented, GSO_MAX_BYTES};
use std::io;

/// Messages per `recvmmsg` / `sendmmsg` call.
pub const BATCH: usize = 64;

/// How datagrams leave: `sendmmsg` batches of up to [`BATCH`].
pub const SEND_PATH: &str = "sendmmsg";
/// Where receive times come from: the kernel's SO_TIMESTAMPNS per datagram
/// (a datagram without one falls back to the read time).
pub const RX_TIMESTAMPS: &str = "kernel";
/// Receive times are taken by the kernel, so the receiver may nap between
/// batches without adding the nap to the measured delay.
pub const KERNEL_RX_TIMESTAMPS: bool = true;

/// The one place the engine sets a socket option that the standard library
/// and socket2 do not offer; true when the kernel took it.
fn setsockopt_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> bool {
    // SAFETY: the option value is a live c_int and the length passed is its
    // size; a bad fd or option makes the call fail (EBADF, ENOPROTOOPT), it
    // cannot write anywhere.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &val as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Asks for a receive buffer of `bytes`, beyond rmem_max when privileged.
pub fn set_rcvbuf(fd: RawFd, bytes: usize) {
    let b = bytes.min(i32::MAX as usize) as libc::c_int;
    if !setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, b) {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, b);
    }
}

pub fn set_sndbuf(fd: RawFd, bytes: usize) {
    let b = bytes.min(i32::MAX as usize) as libc::c_int;
    if !setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, b) {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, b);
    }
}

/// <linux/udp.h>: per-send segment size (UDP GSO, Linux 4.18) and the
/// receive-side coalescing switch (UDP GRO, Linux 5.0).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// <net/udp.h> UDP_MAX_SEGMENTS of the oldest kernel with UDP GSO: newer
/// ones take 128, every one takes 64.
const GSO_MAX_SEGMENTS: usize = 64;
/// This system can send segmented (UDP GSO) and receive coalesced (UDP
/// GRO) datagrams.
pub const UDP_OFFLOAD: bool = true;

/// Lets the kernel hand this socket several datagrams of one flow and
/// size as one (UDP_GRO); [`RecvBatch::gro_size`] then says where to cut.
pub fn enable_gro(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1)
}

/// Sends without UDP checksums (SO_NO_CHECK): the kernel then refuses
/// segmented sends (EINVAL), which tests use to reach the fallback.
#[cfg(test)]
pub fn disable_udp_checksum(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)
}

/// Kernel receive timestamps on CLOCK_REALTIME: each datagram of a batch
/// gets the time it arrived, not the time the batch was read.
pub fn enable_rx_timestamps(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// Asks the kernel to hand each received datagram's IP marking over as
/// control messages: TOS and TTL (IPv4), or traffic class, hop limit and
/// flow information (IPv6). Read back with [`RecvBatch::marks`].
pub fn enable_rx_marks(fd: RawFd, v6: bool) -> bool {
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
            & setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)
            & setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
            & setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)
    }
}

/// `struct in6_flowlabel_req` of <linux/in6.h> (libc does not have it).
#[repr(C)]
struct In6FlowlabelReq {
    dst: libc::in6_addr,
    /// Network byte order.
    label: u32,
    action: u8,
    share: u8,
    flags: u16,
    expires: u16,
    linger: u16,
    pad: u32,
}
const IPV6_FL_A_GET: u8 = 0;
/// Shared by the sockets of one user (repeated runs reuse the label while
/// the kernel still lingers on the previous run's lease).
const IPV6_FL_S_USER: u8 = 3;
const IPV6_FL_F_CREATE: u16 = 1;

/// Leases IPv6 flow label `label` towards `dst` for this socket and lets
/// it send flow information: Linux sends a chosen label only when the
/// socket holds a lease and the connect address carries the label
/// (`sin6_flowinfo`, see [`crate::sockopt`]).
pub fn set_flow_label(fd: RawFd, dst: std::net::Ipv6Addr, label: u32) -> io::Result<()> {
    let req = In6FlowlabelReq {
        dst: libc::in6_addr {
            s6_addr: dst.octets(),
        },
        label: label.to_be(),
        action: IPV6_FL_A_GET,
        share: IPV6_FL_S_USER,
        flags: IPV6_FL_F_CREATE,
        expires: 0,
        linger: 0,
        pad: 0,
    };
    // SAFETY: `req` is a live, fully initialised struct laid out as the
    // kernel's in6_flowlabel_req and the length passed is its size; the
    // kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_FLOWLABEL_MGR,
            &req as *const _ as *const libc::c_void,
            std::mem::size_of::<In6FlowlabelReq>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if !setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO_SEND, 1) {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What one datagram's IP header carried, as far as the kernel told.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpMarks {
    pub tos: Option<u8>,
    pub ttl: Option<u8>,
    pub flow_label: Option<u32>,
}

/// Control-message space per datagram, in u64 units for alignment: a
/// timestamp (32 bytes), up to three 24-byte marking messages and the
/// 24-byte UDP_GRO segment size.
const CMSG_WORDS: usize = 20;

/// A set of receive slots for `recvmmsg`, reused for every call.
pub struct RecvBatch {
    slot: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<u64>,
    hdrs: Vec<libc::mmsghdr>,
    /// Headers for sending replies (reflections) from the same buffers.
    out_iovs: Vec<libc::iovec>,
    out_hdrs: Vec<libc::mmsghdr>,
}

impl RecvBatch {
    /// Slots of `slot` bytes each, allocated once.
    pub fn new(slot: usize) -> Box<Self> {
        let mut b = Box::new(RecvBatch {
            slot,
            bufs: vec![0u8; slot * BATCH],
            iovs: Vec::with_capacity(BATCH),
            // SAFETY: sockaddr_storage is plain integers; all zeros is valid.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            cmsgs: vec![0u64; CMSG_WORDS * BATCH],
            hdrs: Vec::with_capacity(BATCH),
            out_iovs: Vec::with_capacity(BATCH),
            out_hdrs: Vec::with_capacity(BATCH),
        });
        // The Vecs are never resized after this, so the pointers taken into
        // them below stay valid for the batch's life (it is boxed, so moving
        // the box does not move them either).
        for i in 0..BATCH {
            // In bounds (i < BATCH) and no reference made: `wrapping_add` is enough.
            let base = b.bufs.as_mut_ptr().wrapping_add(i * slot);
            b.iovs.push(libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: slot,
            });
            b.out_iovs.push(libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: 0,
            });
        }
        for i in 0..BATCH {
            // SAFETY: mmsghdr is a C struct of integers and pointers; all
            // zeros (null pointers, zero lengths) is a valid empty header.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = &mut b.addrs[i] as *mut _ as *mut libc::c_void;
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            h.msg_hdr.msg_iov = &mut b.iovs[i] as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control =
                b.cmsgs.as_mut_ptr().wrapping_add(i * CMSG_WORDS) as *mut libc::c_void;
            h.msg_hdr.msg_controllen = CMSG_WORDS * 8;
            b.hdrs.push(h);
            // SAFETY: as above, a valid empty header.
            let mut o: libc::mmsghdr = unsafe { std::mem::zeroed() };
            o.msg_hdr.msg_iov = &mut b.out_iovs[i] as *mut libc::iovec;
            o.msg_hdr.msg_iovlen = 1;
            b.out_hdrs.push(o);
        }
        b
    }

    /// Receives up to [`BATCH`] datagrams; blocks for the first one (up to
    /// the socket's receive timeout), then takes what is queued.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for i in 0..BATCH {
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            h.msg_controllen = CMSG_WORDS * 8;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: `hdrs` holds BATCH headers, each pointing at its own
        // iovec, address and control slot inside buffers this batch owns,
        // with the lengths of those slots (reset above); the kernel writes
        // no more than those lengths.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Datagram `i` of the last batch. A datagram larger than the slot comes
    /// back cut to the slot, with `truncated(i)` set.
    pub fn data(&mut self, i: usize) -> &mut [u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &mut self.bufs[i * self.slot..i * self.slot + len]
    }

    /// The whole of slot `i`, for writing a reply in place.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.slot..(i + 1) * self.slot]
    }

    /// Source address of datagram `i` of the last batch.
    pub fn source(&self, i: usize) -> Option<std::net::SocketAddr> {
        let len = self.hdrs[i].msg_hdr.msg_namelen;
        // SAFETY: `addrs[i]` is a sockaddr_storage the kernel filled in and
        // `len` is the length it reported, at most the storage's size.
        let a = unsafe { socket2::SockAddr::new(self.addrs[i], len) };
        a.as_socket()
    }

    /// Datagram `i` was larger than its slot (and came back cut).
    pub fn truncated(&self, i: usize) -> bool {
        self.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
    }

    /// Kernel receive time of datagram `i` (CLOCK_REALTIME ns), if delivered.
    pub fn kernel_ts(&self, i: usize) -> Option<u64> {
        let h = &self.hdrs[i].msg_hdr;
        // SAFETY: `h` describes control slot `i`, which the kernel filled in
        // the last `recv` and whose used length it wrote to msg_controllen;
        // CMSG_FIRSTHDR/CMSG_NXTHDR never step past that length, and an
        // SCM_TIMESTAMPNS message carries a timespec, read unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                    return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    /// Datagram `i` of the last batch holds several of its sender's
    /// datagrams of this size each (the last may be shorter), coalesced by
    /// the kernel (after [`enable_gro`]); None: it is one datagram.
    pub fn gro_size(&self, i: usize) -> Option<usize> {
        let h = &self.hdrs[i].msg_hdr;
        // SAFETY: as in `kernel_ts`: the walk stays inside control slot `i`
        // as the kernel filled it; a UDP_GRO message carries an int, read
        // unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    let g = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int);
                    return usize::try_from(g).ok().filter(|&g| g > 0);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    /// The IP marking of datagram `i` of the last batch (after
    /// [`enable_rx_marks`]; all `None` without it).
    pub fn marks(&self, i: usize) -> IpMarks {
        let h = &self.hdrs[i].msg_hdr;
        let mut m = IpMarks::default();
        // SAFETY: as in `kernel_ts`: the walk stays inside control slot `i`
        // as the kernel filled it; each message's payload is read unaligned
        // with the size the kernel gives it (IP_TOS one byte, the others an
        // int or a 32-bit word).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                let d = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::IPPROTO_IP, libc::IP_TOS) => m.tos = Some(*d),
                    (libc::IPPROTO_IP, libc::IP_TTL) => {
                        m.ttl = Some(std::ptr::read_unaligned(d as *const libc::c_int) as u8)
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                        m.tos = Some(std::ptr::read_unaligned(d as *const libc::c_int) as u8)
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                        m.ttl = Some(std::ptr::read_unaligned(d as *const libc::c_int) as u8)
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO) => {
                        let v = u32::from_be(std::ptr::read_unaligned(d as *const u32));
                        m.flow_label = Some(v & libc::IPV6_FLOWINFO_FLOWLABEL as u32);
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        m
    }

    /// Queues datagram `i` (as it now is in its slot, `len` bytes) to go back
    /// to where it came from, as reply number `k` of the next [`flush_replies`].
    pub fn queue_reply(&mut self, k: usize, i: usize, len: usize) {
        // Indexing first checks i < BATCH, so slot `i` lies inside `bufs`.
        let name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
        let namelen = self.hdrs[i].msg_hdr.msg_namelen;
        self.out_iovs[k].iov_base =
            self.bufs.as_mut_ptr().wrapping_add(i * self.slot) as *mut libc::c_void;
        self.out_iovs[k].iov_len = len.min(self.slot);
        let o = &mut self.out_hdrs[k].msg_hdr;
        o.msg_name = name;
        o.msg_namelen = namelen;
        o.msg_iov = &mut self.out_iovs[k] as *mut libc::iovec;
    }

    /// Sends the first `n` queued replies; returns how many went out.
    pub fn flush_replies(&mut self, fd: RawFd, n: usize) -> usize {
        // The unsafe call below relies on it: never past the last header.
        assert!(n <= BATCH, "{n} replies queued in a batch of {BATCH}");
        let mut done = 0;
        while done < n {
            // SAFETY: done < n <= BATCH, so the n - done headers from `done`
            // are inside `out_hdrs`; each points at an iovec and address of
            // this batch, set by `queue_reply` to lengths within its slots.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.out_hdrs.as_mut_ptr().add(done),
                    (n - done) as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // This reply is lost (e.g. the sender's port closed); the
                // sender counts it as round-trip loss. Skip it.
                done += 1;
                continue;
            }
            done += r as usize;
        }
        done
    }
}

/// Preallocated send slots for `sendmmsg`: on a connected socket, or on
/// an unconnected one with a destination per slot ([`SendBatch::set_dest`]),
/// so that one call carries packets of several flows.
pub struct SendBatch {
    slot: usize,
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Per-slot destinations, pointed at by the headers that have one.
    addrs: Vec<libc::sockaddr_storage>,
    /// Headers of segmented sends ([`SendBatch::send_segmented`]), each
    /// with its own UDP_SEGMENT control message in `seg_cmsgs`.
    seg_hdrs: Vec<libc::mmsghdr>,
    seg_cmsgs: Vec<u64>,
    /// The slots each segmented header covers: (first, count).
    runs: [(usize, usize); BATCH],
}

/// Control space of one UDP_SEGMENT message (CMSG_SPACE of a u16, 24
/// bytes on every 64-bit Linux), in u64 units.
const SEG_CMSG_WORDS: usize = 3;

impl SendBatch {
    /// `BATCH` slots of `slot` bytes, pre-filled with a pseudo-random
    /// payload once.
    pub fn new(slot: usize) -> Box<Self> {
        let mut b = Box::new(SendBatch {
            slot,
            bufs: vec![0u8; slot * BATCH],
            iovs: Vec::with_capacity(BATCH),
            hdrs: Vec::with_capacity(BATCH),
            // SAFETY: sockaddr_storage is a C struct of integers; all zeros
            // (family AF_UNSPEC) is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            seg_hdrs: Vec::with_capacity(BATCH),
            seg_cmsgs: vec![0u64; SEG_CMSG_WORDS * BATCH],
            runs: [(0, 0); BATCH],
        });
        // A recognisable filler instead of zeros, so that a compressing
        // link cannot flatter the numbers.
        for (i, x) in b.bufs.iter_mut().enumerate() {
            *x = (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0];
        }
        // As in RecvBatch::new: the Vecs are never resized after this.
        for i in 0..BATCH {
            let base = b.bufs.as_mut_ptr().wrapping_add(i * slot);
            b.iovs.push(libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: 0,
            });
        }
        for i in 0..BATCH {
            // SAFETY: mmsghdr is a C struct of integers and pointers; all
            // zeros (null pointers, zero lengths) is a valid empty header.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut b.iovs[i] as *mut libc::iovec;
            h.msg_hdr.msg_iovlen = 1;
            b.hdrs.push(h);
            // SAFETY: as above, a valid empty header.
            let mut g: libc::mmsghdr = unsafe { std::mem::zeroed() };
            g.msg_hdr.msg_control =
                b.seg_cmsgs.as_mut_ptr().wrapping_add(i * SEG_CMSG_WORDS) as *mut libc::c_void;
            g.msg_hdr.msg_controllen = SEG_CMSG_WORDS * 8;
            // SAFETY: the header points at its own control slot of
            // SEG_CMSG_WORDS * 8 bytes, room for one cmsghdr and a u16, so
            // CMSG_FIRSTHDR returns a pointer inside it; the cmsghdr is
            // written once here and only its u16 payload afterwards.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&g.msg_hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
            }
            b.seg_hdrs.push(g);
        }
        b
    }

    /// Sends slots `from..n` on a connected socket as UDP GSO: each run of
    /// slots of one length (at most [`GSO_MAX_SEGMENTS`] and
    /// [`GSO_MAX_BYTES`]) goes out as one message that the kernel, or the
    /// device, cuts into one datagram per slot; a run of one is a plain
    /// datagram. The messages go in one `sendmmsg`. Per-slot destinations
    /// ([`SendBatch::set_dest`]) are not used. On an error for the first
    /// message, the error and the slots that message held.
    pub fn send_segmented(
        &mut self,
        fd: RawFd,
        from: usize,
        n: usize,
    ) -> Result<Segmented, (io::Error, usize)> {
        // The unsafe call below relies on it: a non-empty range of slots.
        assert!(from < n && n <= BATCH, "slots {from}..{n} of {BATCH}");
        let mut m = 0;
        let mut j = from;
        while j < n {
            let len = self.iovs[j].iov_len;
            let cap = GSO_MAX_BYTES
                .checked_div(len)
                .unwrap_or(1)
                .clamp(1, GSO_MAX_SEGMENTS);
            let mut k = 1;
            while j + k < n && k < cap && self.iovs[j + k].iov_len == len {
                k += 1;
            }
            let h = &mut self.seg_hdrs[m].msg_hdr;
            h.msg_iov = self.iovs.as_mut_ptr().wrapping_add(j);
            h.msg_iovlen = k;
            if k > 1 {
                h.msg_controllen = SEG_CMSG_WORDS * 8;
                // SAFETY: the control slot was laid out in `new` with a
                // cmsghdr for a u16; CMSG_DATA points at that u16 inside the
                // slot, written unaligned. k > 1 and k * len <= GSO_MAX_BYTES
                // make len fit a u16.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, len as u16);
                }
            } else {
                h.msg_controllen = 0;
            }
            self.runs[m] = (j, k);
            m += 1;
            j += k;
        }
        loop {
            // SAFETY: the first m <= BATCH headers of `seg_hdrs` each point
            // at k consecutive iovecs of `iovs` inside from..n (lengths kept
            // within their slots by `slot()`), at no name, and at their own
            // control slot with a valid UDP_SEGMENT message or a zero
            // control length.
            let r = unsafe { libc::sendmmsg(fd, self.seg_hdrs.as_mut_ptr(), m as libc::c_uint, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err((e, self.runs[0].1));
            }
            let mut out = Segmented::default();
            for &(_, k) in &self.runs[..r as usize] {
                out.slots += k;
                if k > 1 {
                    out.sends += 1;
                    out.segments += k;
                }
            }
            return Ok(out);
        }
    }

    /// The kernel refused a segmented send for a reason that a plain send
    /// may not meet (no UDP GSO, a device that cannot checksum, a segment
    /// longer than the path's MTU allows: EINVAL, or EMSGSIZE where the
    /// plain datagram would be fragmented instead).
    pub fn gso_refused(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::ENOPROTOOPT | libc::EMSGSIZE)
        )
    }

    /// Every slot at its full length, to fill the payload content once.
    pub fn slots_mut(&mut self) -> std::slice::ChunksMut<'_, u8> {
        self.bufs.chunks_mut(self.slot.max(1))
    }

    /// Slot `i`, `len` bytes long, for the caller to write the header into.
    pub fn slot(&mut self, i: usize, len: usize) -> &mut [u8] {
        let len = len.min(self.slot);
        self.iovs[i].iov_len = len;
        &mut self.bufs[i * self.slot..i * self.slot + len]
    }

    /// Where slot `i` goes: `Some` on an unconnected socket (the address is
    /// copied into the batch), `None` to the connected peer.
    pub fn set_dest(&mut self, i: usize, to: Option<&socket2::SockAddr>) {
        let h = &mut self.hdrs[i].msg_hdr;
        match to {
            Some(a) => {
                self.addrs[i] = a.clone().as_storage();
                h.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
                h.msg_namelen = a.len();
            }
            None => {
                h.msg_name = std::ptr::null_mut();
                h.msg_namelen = 0;
            }
        }
    }

    /// Sends slots `from..n`; returns how many the kernel took (at least 1
    /// unless an error is returned for slot `from`).
    pub fn send(&mut self, fd: RawFd, from: usize, n: usize) -> io::Result<usize> {
        // The unsafe call below relies on it: a non-empty range of headers.
        assert!(from < n && n <= BATCH, "slots {from}..{n} of {BATCH}");
        loop {
            // SAFETY: from < n <= BATCH, so the n - from headers from `from`
            // are inside `hdrs`; each points at its iovec, whose length
            // `slot()` keeps within the slot, and at no name or at its own
            // entry of `addrs` with that entry's length (`set_dest`).
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.hdrs.as_mut_ptr().add(from),
                    (n - from) as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            return Ok(r as usize);
        }
    }
}

/// `SO_ZEROCOPY` of <asm-generic/socket.h> (the value of every
/// architecture but MIPS, SPARC, PA-RISC and Alpha; libc does not export it
/// for Linux).
const SO_ZEROCOPY: libc::c_int = 60;
/// <linux/errqueue.h>: the origin of a zero-copy completion, and the code
/// saying the kernel copied the data after all.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Lets a TCP socket's sends be zero-copy (SO_ZEROCOPY, Linux 4.14+); the
/// kernel's refusal is the reason a `--zerocopy` flow writes plainly.
pub fn enable_zerocopy(fd: RawFd) -> io::Result<()> {
    if setsockopt_int(fd, libc::SOL_SOCKET, SO_ZEROCOPY, 1) {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One `send(MSG_ZEROCOPY)` of `buf`: the kernel reads the bytes from these
/// pages until it reports the send complete ([`zerocopy_completions`]), so
/// the caller must leave them alone until then. Blocks as the socket does
/// (SO_SNDTIMEO, non-blocking mode).
pub fn send_zerocopy(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the pointer and length describe a live slice the kernel only
    // reads; the caller keeps it unmodified until the completion.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The kernel ran out of what it charges zero-copy sends to (optmem_max,
/// locked pages): the send was refused, nothing was sent.
pub fn is_nobufs(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Reads every zero-copy completion queued on the socket's error queue
/// without waiting; `f(lo, hi, copied)` gets each range of send numbers
/// (inclusive; the kernel numbers a socket's successful zero-copy sends
/// 0, 1, ... as u32) and whether the kernel copied them. Other error-queue
/// messages are read and dropped. Returns the ranges read.
pub fn zerocopy_completions(fd: RawFd, mut f: impl FnMut(u32, u32, bool)) -> io::Result<usize> {
    let mut n = 0;
    loop {
        // Room for one IP_RECVERR / IPV6_RECVERR message: a
        // sock_extended_err and the offender's address.
        let mut cbuf = [0u64; 16];
        // SAFETY: msghdr is plain integers and pointers; all zeros is a
        // valid empty header.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = std::mem::size_of_val(&cbuf);
        // SAFETY: `h` points at `cbuf` with its length and carries no data
        // buffers; the kernel writes at most that much control data.
        let r = unsafe { libc::recvmsg(fd, &mut h, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(n),
                io::ErrorKind::Interrupted => continue,
                _ => Err(e),
            };
        }
        // SAFETY: the walk stays inside `cbuf` as the kernel filled it
        // (msg_controllen is what it wrote); a RECVERR message carries a
        // sock_extended_err, read unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&h);
            while !c.is_null() {
                let recverr = matches!(
                    ((*c).cmsg_level, (*c).cmsg_type),
                    (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
                );
                if recverr {
                    let ee = std::ptr::read_unaligned(
                        libc::CMSG_DATA(c) as *const libc::sock_extended_err
                    );
                    if ee.ee_errno == 0 && ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                        f(
                            ee.ee_info,
                            ee.ee_data,
                            ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                        );
                        n += 1;
                    }
                }
                c = libc::CMSG_NXTHDR(&h, c);
            }
        }
    }
}

/// Waits up to `timeout_ms` for the socket's error queue (zero-copy
/// completions) to have something; true when it has.
pub fn wait_errqueue(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = [super::pollfd(fd, 0)];
    super::poll(&mut p, timeout_ms) > 0 && p[0].revents & libc::POLLERR != 0
}

/// Readiness of many sockets at once (`epoll`, level-triggered): a receive
/// worker serving thousands of flows wakes for the sockets that have
/// datagrams, at a cost that does not grow with the sockets it watches.
pub struct Poller {
    epfd: std::os::fd::OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Poller {
    /// A poller that reports up to `max_events` ready sockets per wait.
    pub fn new(max_events: usize) -> io::Result<Poller> {
        // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by
        // nothing else.
        let epfd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
        Ok(Poller {
            epfd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; max_events.max(1)],
        })
    }

    /// Watches `fd` for readability; `token` comes back from [`Poller::wait`].
    pub fn add(&mut self, fd: RawFd, token: usize) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token as u64,
        };
        // SAFETY: both descriptors are open (the caller's socket outlives
        // its registration) and `ev` is a live epoll_event the kernel only
        // reads.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd`; called before the socket is closed, so that a
    /// descriptor number the system reuses is never reported for it.
    pub fn remove(&mut self, fd: RawFd) {
        use std::os::fd::AsRawFd;
        // SAFETY: both descriptors are open; EPOLL_CTL_DEL reads no event
        // (a null one is allowed since Linux 2.6.9). A descriptor that was
        // never added fails with ENOENT, which changes nothing.
        unsafe {
            libc::epoll_ctl(
                self.epfd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits up to `timeout_ms` and calls `f` with the token of every
    /// readable socket; returns how many there were.
    pub fn wait(&mut self, timeout_ms: i32, mut f: impl FnMut(usize)) -> usize {
        use std::os::fd::AsRawFd;
        // SAFETY: `events` holds `len` writable epoll_event slots; the
        // kernel writes at most that many.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                timeout_ms,
            )
        };
        let n = n.max(0) as usize;
        for e in &self.events[..n] {
            f(e.u64 as usize);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn batch_round_trip_with_timestamps() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        assert!(enable_rx_timestamps(rx.as_raw_fd()));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut sb = SendBatch::new(100);
        for i in 0..10 {
            sb.slot(i, 50 + i)[0] = i as u8;
        }
        let mut sent = 0;
        while sent < 10 {
            sent += sb.send(tx.as_raw_fd(), sent, 10).unwrap();
        }
        let mut rb = RecvBatch::new(128);
        let mut got = 0;
        while got < 10 {
            let n = rb.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let d = rb.data(i);
                assert_eq!(d.len(), 50 + d[0] as usize);
                assert!(rb.kernel_ts(i).is_some());
            }
            // Echo them back to the sender.
            for i in 0..n {
                rb.queue_reply(i, i, 20);
            }
            assert_eq!(rb.flush_replies(rx.as_raw_fd(), n), n);
            got += n;
        }
        let mut buf = [0u8; 64];
        tx.set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        assert_eq!(tx.recv(&mut buf).unwrap(), 20);
    }
}
