//! The receiver's side of the AF_XDP path (`recv --xdp IFACE`): a
//! session's UDP flow is served from AF_XDP receive rings instead of its
//! socket. The socket stays open (it holds the port and takes whatever
//! the program passes on), the XDP program steers the flow's port to the
//! rings, and each probe goes through the same checks and accumulators as
//! on the socket path (`UdpFlow::accept`). Receive times are taken when a
//! batch is picked up from the ring.

use super::frame;
use super::sys::Desc;
use super::{Action, Claim, Steer, BATCH, FRAME_SIZE};
use crate::clock::{mono_ns, realtime_ns, tighten_timer_slack};
use crate::sys::{CpuClock, CpuTime};
use crate::transport::rx::{unmap, Worker, WorkerOutcome, POLL_MS};
use crate::transport::udp::rx::UdpFlow;
use crate::{NapiUse, XdpUse};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where receive times of the XDP path come from, for the document.
pub(crate) const RX_STAMP: &str = "af_xdp ring pick-up";

/// Empty polls of the rings before the thread sleeps in `poll(2)`: a
/// busy stream costs no wake-ups, an idle one no CPU.
const SPINS: u32 = 2000;

/// The session's UDP flows waiting for a receive thread (position, state).
pub(crate) type UdpFlows = Vec<(usize, Box<UdpFlow>)>;
/// Whether the XDP path was taken: Ok(how it attached, and its sockets'
/// counters, set when the session's receive thread ends), Err(why not);
/// None: not asked.
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
}

impl RingCounts {
    fn set(&self, st: &super::XskStats) {
        self.ring_full.store(st.rx_ring_full, Ordering::Relaxed);
        self.dropped.store(st.rx_dropped, Ordering::Relaxed);
        self.fill_empty.store(st.rx_fill_empty, Ordering::Relaxed);
    }

    /// Frames lost on the receiving host.
    fn lost(&self) -> u64 {
        self.ring_full.load(Ordering::Relaxed) + self.dropped.load(Ordering::Relaxed)
    }

    /// For `recv`'s log.
    pub(crate) fn line(&self) -> String {
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
/// XDP path or not: `auto` only for one that asked. A socket-path sender
/// has no sending queue of the session's (docs/engine.md, "Sending
/// queue"), and with the receive half threaded veth drops what outruns
/// it at that sender's host (measured: about a fifth of a --max run).
fn napi_for(napi: NapiUse, asked: bool) -> NapiUse {
    match napi {
        NapiUse::Auto if !asked => NapiUse::Off,
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
    let steer = match Steer::open(iface, &[port], Action::Redirect, napi_for(napi, asked)) {
        Ok(s) => s,
        Err(e) => return (udp, Some(Err(e.to_string()))),
    };
    let desc = steer.describe();
    let drops = Arc::new(RingCounts::default());
    let dropped = drops.clone();
    let Some((i, flow)) = udp.pop() else {
        return (udp, None);
    };
    match std::thread::Builder::new()
        .name(format!("wb-xdp-rx-{}", flow.rx.flow_id))
        .spawn(move || serve(*flow, steer, port, claim, &dropped))
    {
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
            host.rx_timestamps = format!("{RX_STAMP} ({how})");
            drops.lost()
        }
        Some(Err(why)) => {
            host.rx_timestamps = format!("{} (XDP not used: {why})", host.rx_timestamps);
            0
        }
    }
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
        let mut got = 0;
        for s in &mut steer.socks {
            let n = s.recv(&mut descs);
            if n == 0 {
                continue;
            }
            got += n;
            let ts = realtime_ns();
            let offset = f.rx.sh.offset_ns.load(Ordering::Relaxed);
            for (d, b) in descs[..n].iter().zip(&mut back) {
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
        if got > 0 {
            idle = 0;
        } else if idle < SPINS {
            idle += 1;
            std::hint::spin_loop();
        } else if let Some(s) = steer.socks.first() {
            s.wait_rx(wait_ms);
        }
    }
    let st = steer.stats();
    dropped.set(&st);
    f.rx.outcome(CpuTime::thread().since(cpu0))
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

    #[test]
    fn auto_threads_napi_only_for_senders_that_asked() {
        assert_eq!(napi_for(NapiUse::Auto, true), NapiUse::Auto);
        assert_eq!(napi_for(NapiUse::Auto, false), NapiUse::Off);
        assert_eq!(napi_for(NapiUse::On, false), NapiUse::On);
        assert_eq!(napi_for(NapiUse::Off, true), NapiUse::Off);
    }
}
