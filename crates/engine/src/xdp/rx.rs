//! The receiver's side of the AF_XDP path (`recv --xdp IFACE`): a
//! session's UDP flow is served from AF_XDP receive rings instead of its
//! socket. The socket stays open (it holds the port and takes whatever
//! the program passes on), the XDP program steers the flow's port to the
//! rings, and each probe goes through the same checks and accumulators as
//! on the socket path (`UdpFlow::accept`). Receive times are taken when a
//! batch is picked up from the ring.
//!
//! Or, where the session allows it ([`XdpRx`]), no frame crosses a ring:
//! the XDP program writes each frame's receive record (receive time, probe
//! header, IP and UDP headers) into a ring in a BPF map and drops the
//! frame, and the receive thread reads the records from its mapping of the
//! map and runs them through the same checks (`UdpFlow::accept_head`).

use super::frame;
use super::prog::rec;
use super::sys::{Desc, RecordRing, Slot, RECORD_LEN};
use super::{Action, Claim, Steer, BATCH, FRAME_SIZE};
use crate::clock::{mono_ns, realtime_ns, tighten_timer_slack};
use crate::sys::{CpuClock, CpuTime};
use crate::transport::rx::{unmap, Worker, WorkerOutcome, POLL_MS, STOP_DRAIN_NS};
use crate::transport::udp::rx::UdpFlow;
use crate::{NapiUse, XdpRx, XdpUse};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where receive times of the XDP path come from, for the document.
pub(crate) const RX_STAMP: &str = "af_xdp ring pick-up";
/// The same for receive records: stamped by the XDP program.
pub(crate) const RECORD_STAMP: &str = "xdp program";

/// Empty polls of the rings before the thread sleeps in `poll(2)`: a
/// busy stream costs no wake-ups, an idle one no CPU.
const SPINS: u32 = 2000;

/// The session's UDP flows waiting for a receive thread (position, state).
pub(crate) type UdpFlows = Vec<(usize, Box<UdpFlow>)>;
/// Whether the XDP path was taken: Ok(the receive timestamps' source and
/// how it attached, and its drop counters, set when the session's receive
/// thread ends), Err(why not); None: not asked.
pub(crate) type Taken = Option<Result<(String, Arc<RingCounts>), String>>;

/// The receive sockets' `XDP_STATISTICS` at the end of a session: where
/// the frames the XDP program steered but nobody read went.
#[derive(Debug, Default)]
pub(crate) struct RingCounts {
    /// The rx ring was full (the receive thread fell behind).
    ring_full: AtomicU64,
    /// No UMEM frame to copy into (fill ring empty) and other drops.
    dropped: AtomicU64,
    /// Times the kernel found the fill ring empty.
    fill_empty: AtomicU64,
    /// Receive records: records the program overwrote before they were
    /// read (and any still unfinished at the end).
    overrun: AtomicU64,
    /// Receive records, not rings.
    records: bool,
}

impl RingCounts {
    fn set(&self, st: &super::XskStats) {
        self.ring_full.store(st.rx_ring_full, Ordering::Relaxed);
        self.dropped.store(st.rx_dropped, Ordering::Relaxed);
        self.fill_empty.store(st.rx_fill_empty, Ordering::Relaxed);
    }

    /// Frames lost on the receiving host.
    fn lost(&self) -> u64 {
        self.ring_full.load(Ordering::Relaxed)
            + self.dropped.load(Ordering::Relaxed)
            + self.overrun.load(Ordering::Relaxed)
    }

    /// For `recv`'s log.
    pub(crate) fn line(&self) -> String {
        if self.records {
            return format!(
                "XDP receive records lost {} frames (record ring overrun)",
                self.overrun.load(Ordering::Relaxed)
            );
        }
        format!(
            "AF_XDP rings dropped {} frames (rx ring full {}, no fill frame or other {}; fill ring found empty {} times)",
            self.lost(),
            self.ring_full.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.fill_empty.load(Ordering::Relaxed)
        )
    }
}

/// The interface the receiver's half of the XDP path would use for a
/// session at `local_ip` whose sender `asked` for it (`Hello.xdp`): None
/// when not to try, Err(why not) when it cannot.
fn iface_for(mode: &XdpUse, asked: bool, local_ip: IpAddr) -> Option<Result<String, String>> {
    match mode {
        XdpUse::Off => None,
        XdpUse::Iface(i) => Some(Ok(i.clone())),
        XdpUse::Auto if !asked => None,
        XdpUse::Auto if !super::sys::is_root() => Some(Err(
            "not root (AF_XDP and XDP programs need CAP_NET_RAW and CAP_BPF)".into(),
        )),
        XdpUse::Auto => Some(super::iface_of(local_ip).and_then(|i| {
            if super::is_loopback(&i) {
                Err(format!(
                    "{i} is a loopback device: its one queue takes one AF_XDP socket, the sender's"
                ))
            } else {
                super::no_shaping(&i, false).map(|()| i)
            }
        })),
    }
}

/// The threaded-NAPI setting for a session whose sender `asked` for the
/// XDP path or not, for a `bulk` (`--max`) flow or a paced one: `auto`
/// only for a flood its sender sends by XDP. A socket-path sender has no
/// sending queue of the session's (docs/engine.md, "Sending queue"), and
/// with the receive half threaded veth drops what outruns it at that
/// sender's host (measured: about a fifth of a --max run). A paced flow
/// gains nothing from a second CPU and its pacer loses: the kernel
/// thread's wake-ups stall the sender (1 Mpps of 64 B, p99 schedule error
/// 0.4-2.6 ms threaded against 17-128 us not; docs/engine.md, "Threaded
/// NAPI").
fn napi_for(napi: NapiUse, asked: bool, bulk: bool) -> NapiUse {
    match napi {
        NapiUse::Auto if !asked || !bulk => NapiUse::Off,
        n => n,
    }
}

/// Takes the session's UDP flows onto the XDP path `mode` allows when it
/// can ([`iface_for`]): one UDP flow, one-way (no reflections), and no
/// other session on the path. Returns the flows left for the socket
/// workers and what happened: Ok(description) when the path was taken,
/// Err(why not) when it was tried and not taken.
pub(crate) fn take(
    mode: &XdpUse,
    napi: NapiUse,
    how: XdpRx,
    asked: bool,
    local_ip: IpAddr,
    mut udp: UdpFlows,
    workers: &mut Vec<Worker>,
) -> (UdpFlows, Taken) {
    let iface = match iface_for(mode, asked, local_ip) {
        None => return (udp, None),
        Some(Err(why)) => return (udp, Some(Err(why))),
        Some(Ok(i)) => i,
    };
    let iface = iface.as_str();
    if udp.len() != 1 {
        let why = format!(
            "{} UDP flows (the XDP path serves one per session)",
            udp.len()
        );
        return (udp, Some(Err(why)));
    }
    if udp[0].1.rx.reflect {
        return (
            udp,
            Some(Err(
                "RTT meter (reflections leave by the socket path)".into()
            )),
        );
    }
    let Some(claim) = Claim::take() else {
        return (udp, Some(Err("another session holds the XDP path".into())));
    };
    let port = match udp[0].1.sock.local_addr() {
        Ok(a) => match super::on_iface(iface, unmap(a.ip())) {
            Ok(()) => a.port(),
            Err(why) => return (udp, Some(Err(why))),
        },
        Err(e) => return (udp, Some(Err(e.to_string()))),
    };
    let mut records =
        records_for(how, udp[0].1.rx.sh.probe_key.is_some()).map_err(|why| why.map(String::from));
    let action = match records {
        Ok(()) => Action::Records {
            from: unmap(udp[0].1.rx.peer_ip),
        },
        Err(_) => Action::Redirect,
    };
    let napi = napi_for(napi, asked, udp[0].1.rx.bulk);
    let opened = match Steer::open(iface, &[port], action, napi) {
        // A kernel without what records need (helper 208, Linux 6.1;
        // mmapable arrays, 5.5): the rings, saying why.
        Err(e) if records.is_ok() => {
            records = Err(Some(format!("no receive records: {e}")));
            Steer::open(iface, &[port], Action::Redirect, napi)
        }
        r => r,
    };
    let mut steer = match opened {
        Ok(s) => s,
        Err(e) => return (udp, Some(Err(e.to_string()))),
    };
    let attached = steer.describe();
    let ring = steer.records.take();
    let desc = match (&ring, &records) {
        (Some(_), _) => format!("{RECORD_STAMP} ({attached}, bpf_ktime_get_tai_ns)"),
        (None, Err(Some(why))) => format!("{RX_STAMP} ({}; {why})", steer.describe()),
        (None, _) => format!("{RX_STAMP} ({})", steer.describe()),
    };
    let drops = Arc::new(RingCounts {
        records: ring.is_some(),
        ..RingCounts::default()
    });
    let dropped = drops.clone();
    let Some((i, flow)) = udp.pop() else {
        return (udp, None);
    };
    match std::thread::Builder::new()
        .name(format!("wb-xdp-rx-{}", flow.rx.flow_id))
        .spawn(move || match ring {
            Some(ring) => serve_records(*flow, steer, ring, port, claim, &dropped),
            None => serve(*flow, steer, port, claim, &dropped),
        }) {
        Ok(h) => {
            workers.push(Worker {
                flows: vec![i],
                handle: Some(h),
            });
            (udp, Some(Ok((desc, drops))))
        }
        Err(e) => (udp, Some(Err(format!("receive thread: {e}")))),
    }
}

/// Sets the receiving host's `rx_timestamps` for the report (where the
/// XDP path took them, or the socket path's with why XDP was not used) and
/// returns the frames the rings dropped for want of room (the receiving
/// host's drops, as UDP receive-buffer errors are on the socket path).
pub(crate) fn describe(host: &mut wirebench_schema::result::HostInfo, taken: &Taken) -> u64 {
    match taken {
        None => 0,
        Some(Ok((how, drops))) => {
            host.rx_timestamps = how.clone();
            drops.lost()
        }
        Some(Err(why)) => {
            host.rx_timestamps = format!("{} (XDP not used: {why})", host.rx_timestamps);
            0
        }
    }
}

/// Whether a session takes receive records (`how`, and whether its
/// probes carry MACs): Ok, or Err(why not, when worth saying).
fn records_for(how: XdpRx, macs: bool) -> Result<(), Option<&'static str>> {
    match how {
        XdpRx::Ring => Err(None),
        _ if macs => Err(Some(
            "no receive records: probe MACs are checked over the whole datagram",
        )),
        XdpRx::Auto | XdpRx::Records => Ok(()),
    }
}

/// Receive records handled per look at the stop flag and the clock.
const RECORD_BATCH: u64 = 16384;

/// The reader's sleep when it has caught up: 1 500 records at 1.5 Mpps,
/// under 1 % of the ring.
const RECORD_NAP_US: u64 = 1000;

/// How long the end of a session waits for records the program claimed
/// but had not finished writing (it runs in softirq, without sleeping:
/// microseconds) before counting them lost.
const UNFINISHED_NS: u64 = 10_000_000;

/// Receives flow `f` from the records the program of `steer` writes into
/// `ring` until the session stops it.
fn serve_records(
    mut f: UdpFlow,
    steer: Steer,
    ring: RecordRing,
    port: u16,
    _claim: Claim,
    dropped: &RingCounts,
) -> WorkerOutcome {
    crate::clock::raise_priority();
    tighten_timer_slack();
    let cpu0 = CpuTime::thread();
    let tai = super::sys::tai_offset_ns();
    let live = f.rx.acc.live.is_some();
    let mut next_tick = 0;
    // From the first record: the program ran from its attachment on,
    // maybe before this thread started.
    let mut seen = 0;
    let mut lost = 0u64;
    loop {
        let stopping = f.rx.sh.stop.load(Ordering::Relaxed);
        if live && mono_ns() >= next_tick {
            f.rx.acc.tick();
            next_tick = mono_ns() + 10_000_000;
        }
        let offset = f.rx.sh.offset_ns.load(Ordering::Relaxed);
        let got = drain(&ring, &mut seen, &mut lost, RECORD_BATCH, |r| {
            take_record(&mut f, r, port, tai, offset)
        });
        if stopping {
            // The records claimed by now are the session's: wait a little
            // for any still unfinished, then count what is left as lost.
            let end = ring.produced();
            let until = mono_ns() + UNFINISHED_NS;
            while seen < end && mono_ns() < until {
                let left = end - seen;
                let n = drain(&ring, &mut seen, &mut lost, left, |r| {
                    take_record(&mut f, r, port, tai, offset)
                });
                if n == 0 {
                    std::hint::spin_loop();
                }
            }
            lost += end.saturating_sub(seen);
            break;
        }
        if got < RECORD_BATCH {
            // Caught up: sleep while records gather. Their times were
            // taken when the frames arrived, so a record's wait costs no
            // accuracy, only ring room (RING_RECORDS), and a reader that
            // does not spin leaves its CPU to the host: on veth the
            // sender's CPU also runs the receive half.
            std::thread::sleep(std::time::Duration::from_micros(RECORD_NAP_US));
        }
    }
    dropped.overrun.store(lost, Ordering::Relaxed);
    drop(steer);
    f.rx.outcome(CpuTime::thread().since(cpu0))
}

/// Hands the whole records from `*seen` on (at most `max`) to `each`,
/// in order, advancing `*seen`; records the program overwrote before they
/// were read (the ring overran) count into `*lost`. Stops at a record
/// still being written. Returns the records handed over.
fn drain(
    ring: &RecordRing,
    seen: &mut u64,
    lost: &mut u64,
    max: u64,
    mut each: impl FnMut(&[u8; RECORD_LEN]),
) -> u64 {
    let mut rec = [0u8; RECORD_LEN];
    let mut got = 0;
    // The producer index is read only when a record was lapped: a reader
    // polling it would pull its cache line away from the program's
    // fetch-add on every frame.
    while got < max {
        match ring.read(*seen, &mut rec) {
            Slot::Ready => {
                each(&rec);
                *seen += 1;
                got += 1;
            }
            Slot::Overwritten => {
                *lost += 1;
                *seen += 1;
            }
            Slot::Lapped => {
                // The oldest records the ring still holds start here.
                let oldest = ring.produced().saturating_sub(ring.size());
                let skip = oldest.saturating_sub(*seen).max(1);
                *lost += skip;
                *seen += skip;
            }
            Slot::NotYet => break,
        }
    }
    got
}

/// Runs one receive record through the flow's checks, as [`serve`] runs
/// a frame: the record's IP and UDP headers parsed as [`frame::parse`]
/// parses a frame's, its probe header by `UdpFlow::accept_head`.
fn take_record(f: &mut UdpFlow, r: &[u8; RECORD_LEN], port: u16, tai: i64, offset: i64) {
    let Some(p) = parse_record(r).filter(|p| p.dst_port == port) else {
        f.rx.sh.foreign.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let from = p
        .src_ok
        .then(|| SocketAddr::new(unmap(f.rx.peer_ip), p.src_port));
    let ts = (u64_at(r, rec::TIME) as i64).wrapping_sub(tai) as u64;
    let head = &r[rec::HEAD..rec::HEAD + wirebench_wire::PROBE_HEADER_LEN];
    if f.accept_head(head, p.len, from, ts, offset).is_some() {
        f.rx.acc.marks.see(Some(p.tos), Some(p.ttl), p.flow_label);
    }
}

fn u64_at(r: &[u8; RECORD_LEN], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&r[at..at + 8]);
    u64::from_ne_bytes(b)
}

/// A receive record's datagram as [`frame::parse`] would give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordedDatagram {
    src_ok: bool,
    src_port: u16,
    dst_port: u16,
    /// UDP payload bytes.
    len: usize,
    tos: u8,
    ttl: u8,
    flow_label: Option<u32>,
}

/// Parses a record's IP and UDP headers with [`frame::parse`]'s checks:
/// a UDP length of at least its header, the datagram within the frame
/// and within the IP packet. The program took only frames whose
/// Ethernet, IP (no options) and UDP headers it could read.
fn parse_record(r: &[u8; RECORD_LEN]) -> Option<RecordedDatagram> {
    let ip = &r[rec::IP..rec::IP + 8];
    let udp = &r[rec::UDP..rec::UDP + 8];
    let frame_len = usize::from(u16::from_ne_bytes([
        r[rec::FRAME_LEN],
        r[rec::FRAME_LEN + 1],
    ]));
    let (ip_end, ip_payload_end, tos, ttl, flow_label) = match ip[0] >> 4 {
        4 => (
            14 + 20,
            14 + usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            ip[1],
            r[rec::TTL],
            None,
        ),
        6 => {
            let vtf = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]);
            (
                14 + 40,
                14 + 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]])),
                ((vtf >> 20) & 0xff) as u8,
                ip[7],
                Some(vtf & 0xfffff),
            )
        }
        _ => return None,
    };
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    let end = ip_end + udp_len;
    if udp_len < 8 || end > frame_len || end > ip_payload_end {
        return None;
    }
    Some(RecordedDatagram {
        src_ok: r[rec::SRC_OK] == 1,
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        len: udp_len - 8,
        tos,
        ttl,
        flow_label,
    })
}

/// Gives every receive socket all its frames to fill; returns the scratch
/// of a receive loop (descriptors taken, frames to give back).
fn prime(steer: &mut Steer) -> ([Desc; BATCH], [u64; BATCH]) {
    let all: Vec<u64> = (0..steer.rx_frames)
        .map(|i| u64::from(i) * u64::from(FRAME_SIZE))
        .collect();
    for s in &mut steer.socks {
        s.fill(&all);
    }
    ([super::NO_DESC; BATCH], [0u64; BATCH])
}

/// Receives flow `f` from the rings of `steer` until the session stops it.
fn serve(
    mut f: UdpFlow,
    mut steer: Steer,
    port: u16,
    _claim: Claim,
    dropped: &RingCounts,
) -> WorkerOutcome {
    crate::clock::raise_priority();
    tighten_timer_slack();
    let cpu0 = CpuTime::thread();
    let (mut descs, mut back) = prime(&mut steer);
    let live = f.rx.acc.live.is_some();
    let mut next_tick = 0;
    let mut idle = 0u32;
    let wait_ms = if steer.socks.len() > 1 {
        1
    } else {
        POLL_MS as i32
    };
    while !f.rx.sh.stop.load(Ordering::Relaxed) {
        if live && mono_ns() >= next_tick {
            f.rx.acc.tick();
            next_tick = mono_ns() + 10_000_000;
        }
        let got = take_rings(&mut f, &mut steer, port, &mut descs, &mut back);
        if got > 0 {
            idle = 0;
        } else if idle < SPINS {
            idle += 1;
            std::hint::spin_loop();
        } else if let Some(s) = steer.socks.first() {
            s.wait_rx(wait_ms);
        }
    }
    // Frames already on the rings arrived before the stop: a thread the
    // host held through the linger still counts them, in bounded time
    // (as the socket path drains its sockets).
    let until = mono_ns() + STOP_DRAIN_NS;
    for _ in 0..DRAIN_ROUNDS {
        if mono_ns() >= until || take_rings(&mut f, &mut steer, port, &mut descs, &mut back) == 0 {
            break;
        }
    }
    let st = steer.stats();
    dropped.set(&st);
    f.rx.outcome(CpuTime::thread().since(cpu0))
}

/// Rounds a stopped flow still reads from its rings (a batch per socket
/// each): more than the rings hold.
const DRAIN_ROUNDS: usize = 4096;

/// One round over `steer`'s receive rings: every frame taken goes
/// through flow `f`'s checks and back to its fill ring. Returns the
/// frames taken.
fn take_rings(
    f: &mut UdpFlow,
    steer: &mut Steer,
    port: u16,
    descs: &mut [Desc; BATCH],
    back: &mut [u64; BATCH],
) -> usize {
    let mut got = 0;
    for s in &mut steer.socks {
        let n = s.recv(descs);
        if n == 0 {
            continue;
        }
        got += n;
        let ts = realtime_ns();
        let offset = f.rx.sh.offset_ns.load(Ordering::Relaxed);
        for (d, b) in descs[..n].iter().zip(back.iter_mut()) {
            // Aligned UMEM: the frame's start is the address rounded down.
            *b = d.addr & !u64::from(FRAME_SIZE - 1);
            let Some(fr) = s.frame(d.addr, d.len as usize) else {
                continue;
            };
            let p = match frame::parse(fr) {
                Some(p) if p.dst_port == port => p,
                _ => {
                    f.rx.sh.foreign.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            let from = SocketAddr::new(unmap(p.src.ip()), p.src.port());
            let data = &fr[p.payload.0..p.payload.1];
            if f.accept(data, Some(from), ts, offset).is_some() {
                f.rx.acc.marks.see(Some(p.tos), Some(p.ttl), p.flow_label);
            }
        }
        s.fill(&back[..n]);
    }
    got
}

/// What [`sink`] saw on its port.
#[derive(Debug, Clone)]
pub struct SinkCount {
    /// Frames the XDP program matched.
    pub matched: u64,
    /// Frames taken off the AF_XDP rings ([`Action::Redirect`] only).
    pub received: u64,
    /// How long the sink ran, from its first frame on.
    pub secs: f64,
    /// The socket's own counters at the end.
    pub stats: super::XskStats,
    /// How the program and sockets attached.
    pub mode: String,
}

/// The path-limit measurement's receiving end: counts the frames to UDP
/// `port` on `iface` for `secs` seconds from the first one, dropping them
/// in the XDP program ([`Action::Drop`]) or taking them off the AF_XDP
/// rings ([`Action::Redirect`]), with threaded NAPI as `napi` allows (as a
/// receiver would). Gives up after `wait_secs` without a frame.
pub fn sink(
    iface: &str,
    port: u16,
    action: Action,
    napi: NapiUse,
    secs: f64,
    wait_secs: f64,
) -> Result<SinkCount, super::XdpError> {
    crate::clock::raise_priority();
    let mut steer = Steer::open(iface, &[port], action, napi)?;
    let (mut descs, mut back) = prime(&mut steer);
    let give_up = mono_ns() + (wait_secs * 1e9) as u64;
    let mut started: Option<(u64, u64, u64)> = None;
    let mut received = 0u64;
    let mut idle = 0u32;
    loop {
        let now = mono_ns();
        match started {
            None if now > give_up => break,
            None => {
                let m = steer.matched(port);
                if m > 0 {
                    started = Some((now, m, received));
                }
            }
            Some((t, _, _)) if now >= t + (secs * 1e9) as u64 => break,
            Some(_) => {}
        }
        let mut got = 0;
        for s in &mut steer.socks {
            let n = s.recv(&mut descs);
            for (d, b) in descs[..n].iter().zip(&mut back) {
                *b = d.addr & !u64::from(FRAME_SIZE - 1);
            }
            s.fill(&back[..n]);
            got += n;
        }
        received += got as u64;
        if got > 0 {
            idle = 0;
        } else if action == Action::Drop {
            std::thread::sleep(std::time::Duration::from_millis(1));
        } else if idle < SPINS {
            // As the receiver does: with threaded NAPI the kernel thread
            // filling the rings may share this CPU, and a sink that never
            // sleeps takes its time.
            idle += 1;
            std::hint::spin_loop();
        } else if let Some(s) = steer.socks.first() {
            s.wait_rx(1);
        }
    }
    let (t0, m0, r0) = started.unwrap_or((mono_ns(), steer.matched(port), received));
    Ok(SinkCount {
        matched: steer.matched(port) - m0,
        received: received - r0,
        secs: (mono_ns() - t0) as f64 / 1e9,
        stats: steer.stats(),
        mode: steer.describe(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe frame from `src` to `dst` with a `len`-byte payload whose
    /// probe header says `seq`.
    fn probe_frame(src: &str, dst: &str, seq: u32, len: usize) -> Vec<u8> {
        let ep = frame::Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
        };
        let hl = ep.header_len();
        let mut f = vec![0u8; hl + len];
        frame::write_headers(&mut f, &ep);
        if len >= wirebench_wire::PROBE_HEADER_LEN {
            wirebench_wire::ProbeHeader {
                flags: 0,
                session: 0x1234_5678,
                flow: 1,
                len: len as u16,
                seq,
                tx_ns: 42,
            }
            .encode(&mut f[hl..])
            .unwrap();
        }
        frame::finish(&mut f, ep.v6());
        f
    }

    /// The record program run by the kernel on crafted frames
    /// (BPF_PROG_TEST_RUN, root): records say what the frames held,
    /// other ports pass untouched, and a ring overrun is counted, never
    /// read as records.
    #[test]
    fn the_record_program_writes_what_the_frames_held_and_overruns_are_counted() {
        use super::super::{prog, records_map, sys};
        use std::os::fd::AsRawFd;
        if !sys::is_root() {
            eprintln!("SKIPPED: needs root (running BPF programs)");
            return;
        }
        for (src, dst, other) in [
            ("10.0.1.1:5000", "10.0.1.2:7000", "10.0.9.9:5000"),
            ("[fd00::1]:5000", "[fd00::2]:7000", "[fd00::9]:5000"),
        ] {
            let ports = sys::map_create(sys::MAP_ARRAY, 4, 8, 65536, "wb_t_ports").unwrap();
            let (records, ring) = records_map().unwrap();
            sys::map_update(
                &ports,
                &prog::port_key(7000).to_ne_bytes(),
                &1u64.to_ne_bytes(),
            )
            .unwrap();
            let from = src.parse::<SocketAddr>().unwrap().ip();
            let code = prog::program(
                ports.as_raw_fd(),
                -1,
                records.as_raw_fd(),
                Action::Records { from },
            );
            let p = sys::prog_load(&code, prog::PROG_NAME).unwrap();
            let run = |f: &[u8], n: u32| sys::prog_test_run(&p, f, n).unwrap();
            let (mut seen, mut lost) = (0u64, 0u64);
            let mut got = Vec::new();
            let mut take = |seen: &mut u64, lost: &mut u64| {
                got.clear();
                drain(&ring, seen, lost, u64::MAX, |r| {
                    got.push((*r, parse_record(r)));
                });
                got.clone()
            };
            // The flow's probe, one from elsewhere, a datagram shorter
            // than a probe header: recorded and dropped.
            assert_eq!(run(&probe_frame(src, dst, 7, 64), 1), 1);
            assert_eq!(run(&probe_frame(other, dst, 8, 40), 1), 1);
            assert_eq!(run(&probe_frame(src, dst, 9, 10), 1), 1);
            // Another port passes, unrecorded.
            let to_other_port = dst.replace("7000", "7001");
            assert_eq!(run(&probe_frame(src, &to_other_port, 1, 64), 1), 2);
            let r = take(&mut seen, &mut lost);
            assert_eq!((r.len(), seen, lost), (3, 3, 0), "{src}");
            let d: Vec<RecordedDatagram> = r.iter().map(|x| x.1.unwrap()).collect();
            assert_eq!(
                (d[0].src_ok, d[0].src_port, d[0].dst_port, d[0].len),
                (true, 5000, 7000, 64)
            );
            assert_eq!((d[1].src_ok, d[1].len), (false, 40), "{src}");
            assert_eq!(d[2].len, 10);
            assert_eq!(d[0].ttl, 64);
            assert_eq!(d[0].flow_label.is_some(), from.is_ipv6());
            let h = wirebench_wire::ProbeHeader::decode_prefix(&r[0].0[rec::HEAD..rec::HEAD + 24])
                .unwrap();
            assert_eq!((h.seq, h.len, h.tx_ns, h.session), (7, 64, 42, 0x1234_5678));
            // No header in the short one: zeros, which decode to no probe.
            assert_eq!(&r[2].0[rec::HEAD..rec::HEAD + 24], &[0u8; 24]);
            // Stamped on CLOCK_TAI, now.
            let tai_now = (crate::clock::realtime_ns() as i64 + sys::tai_offset_ns()) as u64;
            let t = u64_at(&r[0].0, rec::TIME);
            assert!(
                t <= tai_now && tai_now - t < 10_000_000_000,
                "{t} {tai_now}"
            );
            // Overrun: 5 more than the ring holds while nobody reads.
            let size = ring.size();
            assert_eq!(run(&probe_frame(src, dst, 1, 64), (size + 5) as u32), 1);
            let r = take(&mut seen, &mut lost);
            assert_eq!(lost, 5, "{src}");
            assert_eq!(r.len() as u64, size, "{src}");
            assert_eq!(seen, 3 + size + 5);
            assert!(r
                .iter()
                .all(|x| x.1.is_some_and(|d| d.len == 64 && d.src_ok)));
        }
    }

    #[test]
    fn records_serve_sessions_without_probe_macs_unless_rings_are_asked() {
        assert_eq!(records_for(XdpRx::Auto, false), Ok(()));
        assert_eq!(records_for(XdpRx::Records, false), Ok(()));
        assert_eq!(records_for(XdpRx::Ring, false), Err(None));
        assert_eq!(records_for(XdpRx::Ring, true), Err(None));
        // A MAC covers the whole datagram, which a record does not hold.
        for how in [XdpRx::Auto, XdpRx::Records] {
            let why = records_for(how, true).unwrap_err().unwrap_or_default();
            assert!(why.contains("MAC"), "{why}");
        }
    }

    #[test]
    fn auto_threads_napi_only_for_floods_whose_senders_asked() {
        assert_eq!(napi_for(NapiUse::Auto, true, true), NapiUse::Auto);
        assert_eq!(napi_for(NapiUse::Auto, false, true), NapiUse::Off);
        assert_eq!(napi_for(NapiUse::Auto, true, false), NapiUse::Off);
        assert_eq!(napi_for(NapiUse::On, false, false), NapiUse::On);
        assert_eq!(napi_for(NapiUse::Off, true, true), NapiUse::Off);
    }
}
