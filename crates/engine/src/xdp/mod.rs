//! The AF_XDP data path (Linux): UDP probes leave through an AF_XDP
//! socket's transmit ring and arrive through one's receive ring, bypassing
//! the socket layer that limits the `sendmmsg`/`recvmmsg` path to well
//! under a million small packets per second.
//!
//! Shape: [`TxPort::open`] / [`Steer::open`] take an interface (and queue)
//! and give batch send / batch receive with timestamps; `tx` and `rx` drive
//! them with the engine's own schedule, accounting and probe format. The
//! kernel objects (program, maps, link, sockets) are file descriptors held
//! by these values: closing them — by drop, exit or SIGKILL — removes
//! them, so nothing stays attached. Crate choice and modes: docs/engine.md,
//! "AF_XDP path".

pub(crate) mod frame;
mod live;
mod napi;
mod prog;
pub(crate) mod rx;
mod sys;
pub(crate) mod tx;
mod txq;

pub use frame::Endpoints;
pub use live::{live_flood, LiveTx, Ran};
pub use prog::Action;
pub use rx::{sink, SinkCount};
pub use sys::XskStats;
pub use tx::flood;

use crate::plan::{NapiUse, TxqUse};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

/// Bytes per UMEM frame: one page holds two, and any probe up to a
/// 1500-byte MTU fits with its headers.
pub(crate) const FRAME_SIZE: u32 = 2048;
/// UMEM frames of a transmit socket.
pub(crate) const FRAMES: u32 = 4096;
/// Descriptors per transmit ring.
pub(crate) const RING: u32 = 2048;
/// UMEM frames of all receive sockets together (128 MiB): what a receiver
/// descheduled for a while can hold. A flow's frames all arrive on one
/// queue, and on a loaded host the receive thread was seen to stall for
/// longer than 16 384 frames last at 360 kpps (45 ms; the fill ring ran
/// empty); 65 536 last 44 ms at 1.49 Mpps, 180 ms at 360 kpps.
const RX_FRAMES_ALL: u32 = 65536;
/// Fewest UMEM frames of one receive socket.
const RX_FRAMES_MIN: u32 = 4096;

/// UMEM frames of each receive socket, and descriptors of its rings (a
/// power of two, as rings must be), for `queues` sockets.
pub(crate) fn rx_frames(queues: u32) -> u32 {
    let share = RX_FRAMES_ALL / queues.max(1);
    // The largest power of two not above the share.
    let pow2 = 1u32 << (31 - share.max(1).leading_zeros());
    pow2.max(RX_FRAMES_MIN)
}
/// An empty descriptor, to initialise batches.
pub(crate) const NO_DESC: sys::Desc = sys::Desc {
    addr: 0,
    len: 0,
    options: 0,
};
/// Descriptors handed over per batch.
pub(crate) const BATCH: usize = 64;

/// Why the AF_XDP path could not be set up.
#[derive(Debug, Error)]
pub enum XdpError {
    /// The interface is missing or unusable.
    #[error("interface {iface}: {source}")]
    Iface {
        /// Its name.
        iface: String,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// A bpf(2) or socket call failed.
    #[error("{what}: {source}")]
    Kernel {
        /// The call.
        what: &'static str,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The verifier refused the steering program.
    #[error("the kernel refused the XDP program: {source}; verifier: {log}")]
    Verifier {
        /// What the kernel said.
        source: std::io::Error,
        /// The verifier's log.
        log: String,
    },
    /// This interface or kernel cannot do it.
    #[error("{0}")]
    Unsupported(String),
}

fn kernel(what: &'static str) -> impl FnOnce(std::io::Error) -> XdpError {
    move |source| XdpError::Kernel { what, source }
}

/// An interface's index, or an error naming it.
pub fn ifindex(iface: &str) -> Result<u32, XdpError> {
    sys::ifindex(iface).map_err(|source| XdpError::Iface {
        iface: iface.to_string(),
        source,
    })
}

/// How a socket ended up bound: "zero-copy" or "copy".
fn mode_name(m: sys::Mode) -> &'static str {
    match m {
        sys::Mode::ZeroCopy => "zero-copy",
        sys::Mode::Copy => "copy",
    }
}

/// The receive queues of `iface` (at least 1).
fn rx_queues(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// The XDP program on an interface steering the registered UDP ports to
/// AF_XDP sockets (one per receive queue), or dropping them.
pub struct Steer {
    // Restored while the program is still attached (the switch needs
    // the veth's NAPI instances, which live as long as the program).
    napi: napi::Napi,
    socks: Vec<sys::Xsk>,
    /// [`Action::Records`]: the program's receive records.
    records: Option<sys::RecordRing>,
    /// The record map (the loaded program holds it too).
    _records_map: Option<OwnedFd>,
    /// UMEM frames of each socket.
    rx_frames: u32,
    ports: OwnedFd,
    // The link holds the program on the interface; drop order: link first.
    _link: OwnedFd,
    _prog: OwnedFd,
    _xsks: OwnedFd,
    /// "native" or "generic" (skb) XDP.
    pub attach: &'static str,
}

impl Steer {
    /// Loads the program for `ports` on `iface`, native XDP where the
    /// driver has it, else generic; with [`Action::Redirect`] an AF_XDP
    /// socket per receive queue. Then restores the interface's NAPI
    /// setting from a journal a killed receiver left, and switches it to
    /// threaded NAPI as `napi` allows (docs/engine.md, "Threaded NAPI").
    pub fn open(
        iface: &str,
        ports: &[u16],
        action: Action,
        napi: NapiUse,
    ) -> Result<Steer, XdpError> {
        let idx = ifindex(iface)?;
        let port_map = sys::map_create(sys::MAP_ARRAY, 4, 8, 65536, "wb_ports")
            .map_err(kernel("BPF port map"))?;
        let queues = rx_queues(iface);
        let xsk_map = sys::map_create(sys::MAP_XSKMAP, 4, 4, queues.max(1), "wb_xsks")
            .map_err(kernel("BPF XSKMAP"))?;
        let (records_map, records) = match action {
            Action::Records { .. } => {
                let (m, r) = records_map()?;
                (Some(m), Some(r))
            }
            _ => (None, None),
        };
        let code = prog::program(
            port_map.as_raw_fd(),
            xsk_map.as_raw_fd(),
            records_map.as_ref().map_or(-1, |m| m.as_raw_fd()),
            action,
        );
        let prog = sys::prog_load(&code, prog::PROG_NAME)
            .map_err(|(source, log)| XdpError::Verifier { source, log })?;
        let mut socks = Vec::new();
        if action == Action::Redirect {
            for q in 0..queues {
                let x = sys::Xsk::open(
                    idx,
                    q,
                    sys::XskConfig {
                        frames: rx_frames(queues),
                        frame_size: FRAME_SIZE,
                        ring: rx_frames(queues),
                        rx: true,
                        tx: false,
                    },
                )
                .map_err(kernel("AF_XDP receive socket"))?;
                let fd = x.raw_fd() as u32;
                sys::map_update(&xsk_map, &q.to_ne_bytes(), &fd.to_ne_bytes())
                    .map_err(kernel("XSKMAP entry"))?;
                socks.push(x);
            }
        }
        for &p in ports {
            sys::map_update(
                &port_map,
                &prog::port_key(p).to_ne_bytes(),
                &1u64.to_ne_bytes(),
            )
            .map_err(kernel("BPF port map entry"))?;
        }
        let (link, attach) = match sys::xdp_link(&prog, idx, sys::XDP_FLAGS_DRV) {
            Ok(l) => (l, "native"),
            Err(_) => (
                sys::xdp_link(&prog, idx, sys::XDP_FLAGS_SKB).map_err(|source| {
                    XdpError::Iface {
                        iface: iface.to_string(),
                        source,
                    }
                })?,
                "generic",
            ),
        };
        // The link is ours alone (an interface takes one XDP link), so a
        // journal found now is a dead receiver's; one that cannot be
        // restored stays for `cleanup` to report.
        let napi = match napi::restore_stale(iface, idx) {
            Ok(_) => napi::switch(iface, idx, napi),
            Err(why) => napi::Napi::Left(why),
        };
        Ok(Steer {
            napi,
            rx_frames: rx_frames(queues),
            socks,
            records,
            _records_map: records_map,
            ports: port_map,
            _link: link,
            _prog: prog,
            _xsks: xsk_map,
            attach,
        })
    }

    /// Frames the program has matched on `port` so far.
    pub fn matched(&self, port: u16) -> u64 {
        let mut v = [0u8; 8];
        match sys::map_lookup(&self.ports, &prog::port_key(port).to_ne_bytes(), &mut v) {
            Ok(()) => u64::from_ne_bytes(v).saturating_sub(1),
            Err(_) => 0,
        }
    }

    /// "native XDP, AF_XDP copy mode, threaded NAPI" and the like, for
    /// the result document.
    pub fn describe(&self) -> String {
        let mut d = match (self.socks.first(), &self.records) {
            (Some(s), _) => format!("{} XDP, AF_XDP {} mode", self.attach, mode_name(s.mode)),
            (None, Some(_)) => format!("{} XDP, receive records in a BPF map", self.attach),
            (None, None) => format!("{} XDP", self.attach),
        };
        if let Some(n) = self.napi.describe() {
            d.push_str(", ");
            d.push_str(&n);
        }
        d
    }

    /// Why the interface was left without threaded NAPI (None: it runs
    /// threaded).
    pub fn napi_left(&self) -> Option<&str> {
        match &self.napi {
            napi::Napi::Left(why) | napi::Napi::Busy(why) => Some(why),
            _ => None,
        }
    }

    /// Drop counters of the receive sockets, summed.
    pub fn stats(&self) -> XskStats {
        self.socks.iter().fold(XskStats::default(), |a, s| {
            let b = s.stats();
            XskStats {
                rx_dropped: a.rx_dropped + b.rx_dropped,
                rx_invalid: a.rx_invalid + b.rx_invalid,
                tx_invalid: a.tx_invalid + b.tx_invalid,
                rx_ring_full: a.rx_ring_full + b.rx_ring_full,
                rx_fill_empty: a.rx_fill_empty + b.rx_fill_empty,
            }
        })
    }
}

/// The one-entry mmapable array the [`Action::Records`] program writes
/// its receive records into, and its mapping here.
fn records_map() -> Result<(OwnedFd, sys::RecordRing), XdpError> {
    let bytes = (prog::RING_RECORDS + 1) * sys::RECORD_LEN as u64;
    let map = sys::map_create_flags(
        sys::MAP_ARRAY,
        4,
        bytes as u32,
        1,
        sys::MAP_F_MMAPABLE,
        "wb_records",
    )
    .map_err(kernel("BPF record map"))?;
    let ring =
        sys::RecordRing::map(&map, prog::RING_RECORDS).map_err(kernel("BPF record map mmap"))?;
    Ok((map, ring))
}

/// A transmit-only AF_XDP socket on queue 0 of an interface, and the
/// sending queue the session gave the interface, if any.
pub struct TxPort {
    xsk: sys::Xsk,
    // Dropped after the socket: the queue goes once nothing sends.
    txq: txq::Txq,
    /// The interface's name.
    iface: String,
}

impl TxPort {
    /// Opens an AF_XDP socket on queue 0 of `iface` for sending. Before,
    /// removes a sending queue a killed sender left on it and gives it one
    /// for this session as `txq` allows (docs/engine.md, "Sending queue").
    pub fn open(iface: &str, txq: TxqUse) -> Result<TxPort, XdpError> {
        let idx = ifindex(iface)?;
        let txq = match txq::restore_stale(iface, idx) {
            Ok(_) => txq::add(iface, idx, txq),
            Err(why) => txq::Txq::Left(why),
        };
        let cfg = sys::XskConfig {
            frames: FRAMES,
            frame_size: FRAME_SIZE,
            ring: RING,
            rx: false,
            tx: true,
        };
        // The kernel frees a closed socket's hold on the queue in a
        // deferred work item, so a session right after another one (a
        // script's next run) can find it busy for a moment.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let xsk = loop {
            match sys::Xsk::open(idx, 0, cfg) {
                Err(e)
                    if e.raw_os_error() == Some(libc::EBUSY)
                        && std::time::Instant::now() < until =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => break r.map_err(kernel("AF_XDP transmit socket"))?,
            }
        };
        Ok(TxPort {
            xsk,
            txq,
            iface: iface.to_string(),
        })
    }

    /// "AF_XDP copy mode, sending queue pfifo_fast 7762: for the session"
    /// and the like.
    pub fn describe(&self) -> String {
        format!(
            "AF_XDP {} mode, {}",
            mode_name(self.xsk.mode),
            self.txq.describe()
        )
    }
}

/// Only one session at a time may hold an interface's XDP program and
/// queue sockets in this process.
static BUSY: AtomicBool = AtomicBool::new(false);

/// Held while a session uses the XDP path.
pub(crate) struct Claim(());

impl Claim {
    pub(crate) fn take() -> Option<Claim> {
        BUSY.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
            .then_some(Claim(()))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::Release);
    }
}

/// Ok when `ip` is one of `iface`'s addresses, else why not: the XDP path
/// only sees what crosses that interface.
pub(crate) fn on_iface(iface: &str, ip: IpAddr) -> Result<(), String> {
    match sys::iface_has(iface, ip) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{ip} is not an address of {iface}")),
        Err(e) => Err(format!("{iface}: {e}")),
    }
}

/// The interface holding address `ip` (a loopback address not listed,
/// such as 127.0.0.2, is loopback's), or why there is none.
pub(crate) fn iface_of(ip: IpAddr) -> Result<String, String> {
    let names = sys::ifaces_with(ip).map_err(|e| format!("interface list: {e}"))?;
    match names.into_iter().next() {
        Some(n) => Ok(n),
        None if ip.is_loopback() => Ok("lo".into()),
        None => Err(format!("no interface holds {ip}")),
    }
}

/// The MAC address of `iface`.
pub fn mac_of(iface: &str) -> Result<[u8; 6], XdpError> {
    let s =
        std::fs::read_to_string(format!("/sys/class/net/{iface}/address")).map_err(|source| {
            XdpError::Iface {
                iface: iface.to_string(),
                source,
            }
        })?;
    parse_mac(s.trim())
        .ok_or_else(|| XdpError::Unsupported(format!("{iface}: no Ethernet address")))
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// Whether `iface` is a loopback device (ARPHRD_LOOPBACK): its frames
/// carry all-zero Ethernet addresses and it has no neighbour table.
pub fn is_loopback(iface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/type")).is_ok_and(|t| t.trim() == "772")
}

/// The Ethernet address frames to `ip` out of `iface` (index `ifindex`)
/// go to: the neighbour table's entry, or zeros on a loopback device
/// (which takes every frame as its own).
pub fn next_hop_mac(iface: &str, ifindex: u32, ip: IpAddr) -> Result<Option<[u8; 6]>, XdpError> {
    if is_loopback(iface) {
        return Ok(Some([0; 6]));
    }
    neighbour(ifindex, ip)
}

/// The link-layer address the kernel's neighbour table holds for `ip` on
/// interface `ifindex` (RTM_GETNEIGH dump), if it holds one.
pub fn neighbour(ifindex: u32, ip: IpAddr) -> Result<Option<[u8; 6]>, XdpError> {
    const RTM_NEWNEIGH: u16 = 28;
    const RTM_GETNEIGH: u16 = 30;
    const NDA_DST: u16 = 1;
    const NDA_LLADDR: u16 = 2;
    const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;
    let family = if ip.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    } as u8;
    // nlmsghdr (16) + ndmsg (12).
    let mut req = dump_request::<28>(RTM_GETNEIGH);
    req[16] = family;
    let want: Vec<u8> = match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut found = None;
    sys::netlink_dump(&req, |ty, m| {
        if ty != RTM_NEWNEIGH || m.len() < 12 || found.is_some() {
            return;
        }
        let idx = u32::from_ne_bytes([m[4], m[5], m[6], m[7]]);
        let state = u16::from_ne_bytes([m[8], m[9]]);
        if idx != ifindex || state & NUD_VALID == 0 {
            return;
        }
        let (mut dst, mut ll) = (None, None);
        each_attr(&m[12..], |ty, v| match ty {
            NDA_DST => dst = Some(v),
            NDA_LLADDR => ll = v.try_into().ok(),
            _ => {}
        });
        if dst == Some(&want[..]) {
            found = ll;
        }
    })
    .map_err(kernel("neighbour table"))?;
    Ok(found)
}

/// A route-netlink dump request of type `ty`, `N` bytes: the message
/// header, then a zeroed family header for the caller to fill.
fn dump_request<const N: usize>(ty: u16) -> [u8; N] {
    let mut req = [0u8; N];
    req[0..4].copy_from_slice(&(N as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&ty.to_ne_bytes());
    req[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req
}

/// Hands each route-netlink attribute in `a` (type, value) to `each`,
/// stopping at the first malformed one.
fn each_attr<'a>(mut a: &'a [u8], mut each: impl FnMut(u16, &'a [u8])) {
    while a.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([a[0], a[1]]));
        let ty = u16::from_ne_bytes([a[2], a[3]]);
        if len < 4 || len > a.len() {
            return;
        }
        each(ty, &a[4..len]);
        a = &a[((len + 3) & !3).min(a.len())..];
    }
}

/// A queueing discipline of an interface.
struct Qdisc {
    /// Its parent's handle (`TC_H_ROOT` for the root).
    parent: u32,
    /// Its own handle (0 for the kernel's default root).
    handle: u32,
    /// "noqueue", "pfifo_fast", "tbf", …
    kind: String,
}

/// The queueing disciplines of interface `ifindex` (RTM_GETQDISC dump).
fn qdiscs(ifindex: u32) -> Result<Vec<Qdisc>, XdpError> {
    const RTM_NEWQDISC: u16 = 36;
    const RTM_GETQDISC: u16 = 38;
    const TCA_KIND: u16 = 1;
    // nlmsghdr (16) + tcmsg (20), family AF_UNSPEC.
    let req = dump_request::<36>(RTM_GETQDISC);
    let mut found = Vec::new();
    sys::netlink_dump(&req, |ty, m| {
        if ty != RTM_NEWQDISC || m.len() < 20 {
            return;
        }
        if u32::from_ne_bytes([m[4], m[5], m[6], m[7]]) != ifindex {
            return;
        }
        let handle = u32::from_ne_bytes([m[8], m[9], m[10], m[11]]);
        let parent = u32::from_ne_bytes([m[12], m[13], m[14], m[15]]);
        each_attr(&m[20..], |ty, v| {
            if ty == TCA_KIND {
                let kind = v.split(|&b| b == 0).next().unwrap_or_default();
                found.push(Qdisc {
                    parent,
                    handle,
                    kind: String::from_utf8_lossy(kind).into_owned(),
                });
            }
        });
    })
    .map_err(kernel("queueing discipline list"))?;
    Ok(found)
}

/// Ok when the XDP path on `iface` skips no queueing discipline someone
/// set up to shape or emulate a link, else which one: AF_XDP hands the
/// sender's frames straight to the driver, past the root qdisc
/// (`egress`), and the receiver's XDP program takes frames before any
/// ingress or clsact qdisc sees them. The kernel's own defaults (noqueue,
/// pfifo_fast, mq, fq_codel, fq) only queue, so skipping them changes no
/// emulated link.
pub(crate) fn no_shaping(iface: &str, egress: bool) -> Result<(), String> {
    const TC_H_INGRESS: u32 = 0xFFFF_FFF1;
    const DEFAULTS: [&str; 5] = ["noqueue", "pfifo_fast", "mq", "fq_codel", "fq"];
    let idx = ifindex(iface).map_err(|e| e.to_string())?;
    let all = qdiscs(idx).map_err(|e| e.to_string())?;
    let shaping = all.iter().find(|q| {
        if egress {
            q.parent == txq::TC_H_ROOT && !DEFAULTS.contains(&q.kind.as_str())
        } else {
            q.parent == TC_H_INGRESS
        }
    });
    match shaping {
        None => Ok(()),
        Some(Qdisc { kind, .. }) => Err(format!(
            "{iface} has a {kind} qdisc that the AF_XDP path would skip (--xdp {iface} takes it all the same)"
        )),
    }
}

/// What [`cleanup`] found and undid on an interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// wirebench XDP programs detached (held by a hung wirebench).
    pub programs: usize,
    /// Whether a threaded-NAPI switch a killed receiver left was undone.
    pub napi_restored: bool,
    /// Whether a sending queue a killed sender left was removed.
    pub txq_removed: bool,
}

/// Detaches every wirebench XDP program from `iface` that a link still
/// holds (a process that hangs on to one), removes the sending queue a
/// killed sender left, then restores the interface's NAPI setting from a
/// journal a killed receiver left. Links die with their last descriptor,
/// so after a crash or SIGKILL there are none, but the qdisc and the NAPI
/// switch outlive their process: restoring the switch needs the veth's
/// NAPI instances, so a pass-everything program is attached for the
/// moment it takes.
pub fn cleanup(iface: &str) -> Result<Cleaned, XdpError> {
    let idx = ifindex(iface)?;
    let mut n = 0;
    for l in sys::xdp_links().map_err(kernel("BPF link list"))? {
        if l.ifindex == idx && l.prog_name == prog::PROG_NAME {
            sys::link_detach(l.id).map_err(kernel("BPF link detach"))?;
            n += 1;
        }
    }
    let txq_removed = txq::restore_stale(iface, idx).map_err(|why| {
        XdpError::Unsupported(format!(
            "{iface}: the sending queue a killed sender left could not be removed: {why}"
        ))
    })?;
    let napi_restored = napi::stale(iface);
    if napi_restored {
        // No ports: the program passes every frame on to the kernel.
        let s = Steer::open(iface, &[], Action::Drop, NapiUse::Off)?;
        let why = s.napi_left().map(str::to_string);
        drop(s);
        if napi::stale(iface) {
            return Err(XdpError::Unsupported(format!(
                "{iface}: the threaded-NAPI setting a killed receiver left could not be restored: {}",
                why.unwrap_or_default()
            )));
        }
    }
    Ok(Cleaned {
        programs: n,
        napi_restored,
        txq_removed,
    })
}

/// Puts back the interface settings this process changed — threaded-NAPI
/// switches and sending queues — for a signal handler about to end it (a
/// session's own end does so by itself; after SIGKILL, [`cleanup`] or the
/// next session does). Returns how many were put back.
pub fn restore_now() -> usize {
    napi::restore_own() + txq::restore_own()
}

/// The kind of link `ifindex` is ("veth", "bridge", …; None for a
/// device without one, such as a physical NIC or loopback), from its
/// RTM_GETLINK entry.
fn link_kind(ifindex: u32) -> Result<Option<String>, XdpError> {
    const RTM_NEWLINK: u16 = 16;
    const RTM_GETLINK: u16 = 18;
    const IFLA_LINKINFO: u16 = 18;
    const IFLA_INFO_KIND: u16 = 1;
    const NLA_TYPE_MASK: u16 = 0x3fff;
    // nlmsghdr (16) + ifinfomsg (16), family AF_UNSPEC.
    let req = dump_request::<32>(RTM_GETLINK);
    let mut kind = None;
    sys::netlink_dump(&req, |ty, m| {
        if ty != RTM_NEWLINK || m.len() < 16 {
            return;
        }
        if u32::from_ne_bytes([m[4], m[5], m[6], m[7]]) != ifindex {
            return;
        }
        each_attr(&m[16..], |ty, v| {
            if ty & NLA_TYPE_MASK == IFLA_LINKINFO {
                each_attr(v, |ty, v| {
                    if ty & NLA_TYPE_MASK == IFLA_INFO_KIND {
                        let k = v.split(|&b| b == 0).next().unwrap_or_default();
                        kind = Some(String::from_utf8_lossy(k).into_owned());
                    }
                });
            }
        });
    })
    .map_err(kernel("link list"))?;
    Ok(kind)
}

/// Whether any wirebench XDP program is attached to `iface` (tests).
pub fn attached(iface: &str) -> Result<bool, XdpError> {
    let idx = ifindex(iface)?;
    Ok(sys::xdp_links()
        .map_err(kernel("BPF link list"))?
        .iter()
        .any(|l| l.ifindex == idx && l.prog_name == prog::PROG_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_frames_are_a_power_of_two_per_queue_within_the_budget() {
        assert_eq!(rx_frames(1), 65536);
        assert_eq!(rx_frames(2), 32768);
        assert_eq!(rx_frames(3), 16384);
        assert_eq!(rx_frames(0), 65536);
        assert_eq!(rx_frames(64), RX_FRAMES_MIN);
        for q in 1..100 {
            let f = rx_frames(q);
            assert!(f.is_power_of_two(), "{q} queues: {f}");
            assert!(
                f == RX_FRAMES_MIN || f * q <= RX_FRAMES_ALL,
                "{q} queues: {f}"
            );
        }
    }

    #[test]
    fn link_kinds_come_from_the_link_table() {
        let lo = ifindex("lo").unwrap();
        assert_eq!(link_kind(lo).unwrap(), None);
        assert_eq!(link_kind(u32::MAX).unwrap(), None);
    }

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(parse_mac("02:fc:00:00:00:01"), Some([2, 0xfc, 0, 0, 0, 1]));
        assert_eq!(parse_mac("02:fc:00:00:00"), None);
        assert_eq!(parse_mac("02:fc:00:00:00:01:07"), None);
        assert_eq!(parse_mac("zz:fc:00:00:00:01"), None);
    }

    #[test]
    fn loopback_addresses_are_los_and_its_queue_discipline_shapes_nothing() {
        assert!(is_loopback("lo"));
        assert!(!is_loopback("no-such-if0"));
        assert_eq!(iface_of("127.0.0.1".parse().unwrap()), Ok("lo".into()));
        // Not listed by getifaddrs, still loopback's.
        assert_eq!(iface_of("127.0.0.2".parse().unwrap()), Ok("lo".into()));
        assert!(iface_of("192.0.2.77".parse().unwrap()).is_err());
        assert_eq!(no_shaping("lo", true), Ok(()));
        assert_eq!(no_shaping("lo", false), Ok(()));
        assert_eq!(
            next_hop_mac("lo", 1, "127.0.0.1".parse().unwrap()).ok(),
            Some(Some([0; 6]))
        );
    }

    #[test]
    fn only_an_interfaces_own_addresses_are_on_it() {
        assert_eq!(on_iface("lo", "127.0.0.1".parse().unwrap()), Ok(()));
        assert!(on_iface("lo", "192.0.2.1".parse().unwrap()).is_err());
        assert!(on_iface("no-such-if0", "127.0.0.1".parse().unwrap()).is_err());
    }
}
