//! The sender's side of the AF_XDP path: one UDP flow paced by the
//! engine's own schedule ([`crate::pacing::Schedule`], `gather`) and
//! accounted by its `SendRec`, with frames instead of datagrams. Every
//! UMEM frame is written once (headers and payload at the flow's largest
//! size); per packet only the probe header, the lengths and checksums are
//! patched. The transmit time is taken once per batch, just before the
//! descriptors are handed to the ring.

use super::frame::{self, Endpoints};
use super::sys::{Desc, Kick};
use super::{TxPort, BATCH, FRAMES, FRAME_SIZE};
use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack, wait_until};
use crate::pacing::Launch;
use crate::pacing::{gather, min_probe_len, wait_or_stop, FlowSent, Schedule, SendRec};
use crate::plan::{FlowPlan, SessionPlan, XdpTx, XdpUse};
use crate::transport::DataSock;
use crate::EngineError;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wirebench_model::SizeModel;
use wirebench_stats::FlowConfig;
use wirebench_wire::auth::ProbeKey;
use wirebench_wire::{Direction, MeterMode, Transport};
use wirebench_wire::{ProbeHeader, PROBE_HEADER_LEN};

/// Where the transmit times of the XDP path are taken, for the document.
pub(crate) const TX_STAMP: &str = "tx time at ring hand-off";

/// Everything a flow needs besides its port and endpoints.
pub(crate) struct TxFlow {
    pub plan: FlowPlan,
    pub flow_id: u16,
    pub session: u32,
    pub t0: u64,
    pub cfg: FlowConfig,
    pub abort: Arc<AtomicBool>,
    pub cancel: Option<&'static AtomicBool>,
    pub spin_ns: u64,
    pub probe_key: Option<ProbeKey>,
}

impl TxPort {
    /// Writes the headers for `ep` and the payload `fill` gives into every
    /// frame; returns the free list (every frame).
    fn prepare(&mut self, ep: &Endpoints, fill: impl Fn(&mut [u8])) -> Vec<u64> {
        let mut free = Vec::with_capacity(FRAMES as usize);
        for i in (0..FRAMES).rev() {
            let addr = u64::from(i) * u64::from(FRAME_SIZE);
            if let Some(f) = self.xsk.frame_mut(addr, FRAME_SIZE as usize) {
                frame::write_headers(f, ep);
                fill(&mut f[ep.header_len()..]);
                free.push(addr);
            }
        }
        free
    }

    /// Moves completed frames back to the free list.
    fn reclaim(&mut self, free: &mut Vec<u64>) {
        let mut done = [0u64; BATCH];
        loop {
            let n = self.xsk.completed(&mut done);
            free.extend_from_slice(&done[..n]);
            if n < BATCH {
                return;
            }
        }
    }
}

/// After the driver dropped a frame: the receiving side's softirq is
/// behind (on veth, deferred to a ksoftirqd thread that this spinning
/// sender outranks), so give up the CPU for it instead of feeding the
/// overflowing ring.
fn back_off() {
    std::thread::sleep(std::time::Duration::from_micros(BACK_OFF_US));
}

/// How long [`back_off`] sleeps: a 256-frame veth ring drains in well
/// under this.
const BACK_OFF_US: u64 = 100;

/// What the sender does while the interface's queue is stopped (the
/// peer's ring is full, its receive half behind). Without threaded NAPI
/// each `sendto` runs the peer's pending receive softirq on the way out,
/// so calling again drains the ring; with it, or when a busy host left
/// the softirq to `ksoftirqd`, the receive half runs in a kernel thread
/// below this thread's priority, and a sender that kept calling kept it
/// off the CPU (perf, threaded at load 7: the sending thread 14.5 % of
/// all samples, mostly such calls, the NAPI thread 2.7 %). So it calls
/// again at once [`STALL_RETRIES`] times, then sleeps [`STALL_US`].
#[derive(Default)]
struct Stall {
    /// `sendto` calls in a row that found the queue stopped.
    run: u32,
}

impl Stall {
    /// After a wake-up that left `kick`; true when it slept.
    fn after(&mut self, kick: Kick) -> bool {
        if kick != Kick::Pending {
            self.run = 0;
            return false;
        }
        self.run += 1;
        if self.run < STALL_RETRIES {
            return false;
        }
        self.run = 0;
        std::thread::sleep(std::time::Duration::from_micros(STALL_US));
        true
    }
}

/// Calls in a row that found the queue stopped before [`Stall`] sleeps.
const STALL_RETRIES: u32 = 16;

/// How long [`Stall`] sleeps: the peer's 256-frame ring holds about
/// 170 us of frames at 1.5 Mpps, so the ring does not run dry meanwhile.
const STALL_US: u64 = 50;

/// Largest probe payload the path can carry for `ep`'s address family.
pub(crate) fn max_payload(v6: bool) -> u32 {
    FRAME_SIZE - frame::header_len(v6) as u32
}

/// Sends flow `f` through `port` to `ep` and returns what it sent.
pub(crate) fn send_flow(port: &mut TxPort, ep: Endpoints, f: TxFlow) -> FlowSent {
    raise_priority();
    tighten_timer_slack();
    let mut sched = match Schedule::new(&f.plan, f.t0, min_probe_len(f.probe_key.is_some())) {
        Ok(s) => s,
        Err(e) => return FlowSent::failed(&e),
    };
    if sched.max_len > max_payload(ep.v6()) {
        return FlowSent::failed("payload larger than an XDP frame");
    }
    let mut acc = SendRec::new(f.cfg, None, f.flow_id);
    let mut stall = Stall::default();
    let (plan, hl, v6) = (&f.plan, ep.header_len(), ep.v6());
    let mut free = port.prepare(&ep, |p| {
        if let Some(rest) = p.get_mut(PROBE_HEADER_LEN..) {
            plan.spec.payload.fill(rest, plan.seed);
        }
    });
    let mut h = ProbeHeader {
        flags: 0,
        session: f.session,
        flow: f.flow_id,
        len: PROBE_HEADER_LEN as u16,
        seq: 0,
        tx_ns: 0,
    };
    let mut seq: u32 = 0;
    let mut first_tx = 0;
    let mut meta = [(0u64, 0u32); BATCH];
    let mut descs = [super::NO_DESC; BATCH];
    wait_until(f.t0);
    let mut pending = sched.next(mono_ns());
    let end = loop {
        if pending.is_none() {
            break Ok(None);
        }
        if let Some(h) = crate::pacing::stop_reason(&f.abort, f.cancel) {
            break Ok(Some(h));
        }
        let (at, _) = pending.unwrap_or_default();
        let now = if sched.max {
            mono_ns()
        } else {
            match wait_or_stop(&f.abort, f.cancel, at, f.spin_ns) {
                Ok(t) => t,
                Err(h) => break Ok(Some(h)),
            }
        };
        port.reclaim(&mut free);
        let room = free.len().min(port.xsk.tx_room(BATCH));
        if room == 0 {
            // The kernel has not taken the last frames yet: push it on.
            match port.xsk.kick() {
                Err(e) => break Err(format!("AF_XDP transmit: {e}")),
                Ok(k) => {
                    stall.after(k);
                }
            }
            std::hint::spin_loop();
            continue;
        }
        let n = gather(
            &mut sched,
            &mut pending,
            now,
            &mut acc,
            &mut meta,
            room,
            seq,
        );
        if n == 0 {
            continue;
        }
        for (i, &(_, size)) in meta[..n].iter().enumerate() {
            let addr = free.pop().unwrap_or_default();
            let len = hl + size as usize;
            descs[i] = Desc {
                addr,
                len: len as u32,
                options: 0,
            };
            h.len = size as u16;
            h.seq = seq.wrapping_add(i as u32);
            if let Some(fr) = port.xsk.frame_mut(addr, len) {
                let _ = h.encode(&mut fr[hl..]);
            }
        }
        let tx = realtime_ns();
        if first_tx == 0 {
            first_tx = tx;
        }
        for d in &descs[..n] {
            if let Some(fr) = port.xsk.frame_mut(d.addr, d.len as usize) {
                ProbeHeader::stamp_tx(&mut fr[hl..], tx);
                if let Some(k) = &f.probe_key {
                    k.sign(&mut fr[hl..]);
                }
                frame::finish(fr, v6);
            }
        }
        let actual = mono_ns();
        let drops = port.xsk.driver_drops;
        let kick = match port.xsk.send(&descs[..n]) {
            Ok((k, kick)) if k == n => kick,
            Ok(_) | Err(_) => {
                // tx_room promised the room: a refusal here is the kernel's.
                break Err("AF_XDP transmit ring refused frames".into());
            }
        };
        if port.xsk.driver_drops != drops {
            back_off();
        }
        stall.after(kick);
        for (j, &(at, size)) in meta[..n].iter().enumerate() {
            let s = seq.wrapping_add(j as u32);
            acc.record_sent(if sched.max { actual } else { at }, actual, size, s, tx);
        }
        seq = seq.wrapping_add(n as u32);
    };
    // Frames on the ring are sent, not lost: wait (bounded) until the
    // kernel completed them, so the receiver's count is final at Stop.
    let drain_by = mono_ns() + 1_000_000_000;
    while free.len() < FRAMES as usize && mono_ns() < drain_by {
        let _ = port.xsk.kick();
        port.reclaim(&mut free);
        std::thread::yield_now();
    }
    FlowSent::ran(first_tx, acc.summary(&sched), None, end)
}

/// Sends `size`-byte UDP payloads (probe-less filler) to `ep` as fast as
/// the ring takes them for `secs` seconds: the path-limit measurement.
/// Returns the frames the kernel completed, less those the driver dropped.
pub fn flood(port: &mut TxPort, ep: Endpoints, size: u32, secs: f64) -> Result<u64, String> {
    if size > max_payload(ep.v6()) || (size as usize) < PROBE_HEADER_LEN {
        return Err(format!(
            "size {size}: not between {PROBE_HEADER_LEN} and {}",
            max_payload(ep.v6())
        ));
    }
    raise_priority();
    let len = ep.header_len() + size as usize;
    let mut free = port.prepare(&ep, |p| p.fill(0x5a));
    for &a in &free {
        if let Some(fr) = port.xsk.frame_mut(a, len) {
            frame::finish(fr, ep.v6());
        }
    }
    let total = free.len();
    let mut descs = [Desc {
        addr: 0,
        len: len as u32,
        options: 0,
    }; BATCH];
    let mut sent = 0u64;
    let mut stall = Stall::default();
    let end = mono_ns() + (secs * 1e9) as u64;
    while mono_ns() < end {
        port.reclaim(&mut free);
        let n = free.len().min(port.xsk.tx_room(BATCH));
        if n == 0 {
            stall.after(port.xsk.kick().map_err(|e| e.to_string())?);
            continue;
        }
        for d in &mut descs[..n] {
            d.addr = free.pop().unwrap_or_default();
        }
        let drops = port.xsk.driver_drops;
        let (k, kick) = port.xsk.send(&descs[..n]).map_err(|e| e.to_string())?;
        sent += k as u64;
        if port.xsk.driver_drops != drops {
            back_off();
        }
        stall.after(kick);
    }
    let drain_by = mono_ns() + 1_000_000_000;
    while free.len() < total && mono_ns() < drain_by {
        let _ = port.xsk.kick();
        port.reclaim(&mut free);
    }
    Ok((sent - (total - free.len()) as u64).saturating_sub(port.xsk.driver_drops))
}

/// What a session asked of the XDP path and got.
pub(crate) enum Chosen {
    /// The plan said `XdpUse::Off`.
    NotAsked,
    /// Asked for, not taken: why (the socket path runs instead).
    Fallback(String),
    /// The flow goes out of this port, framed for these endpoints.
    Xdp(Box<Picked>),
}

/// The XDP path as chosen: the ring sender's port, the endpoints, and
/// how the frames are handed over.
pub(crate) struct Picked {
    port: TxPort,
    ep: Endpoints,
    /// Live frames asked for (`XdpTx`) and the flow allows them: try.
    try_live: bool,
    /// Why the ring sends though live frames were asked for (`None`: not
    /// asked, or live frames sent).
    why_ring: Option<String>,
    /// Whether live frames sent the flow.
    live: bool,
    /// Frames the live sender stamped that the interface did not take.
    live_refused: u64,
    /// Why the live program was not held in the kernel's XDP dispatcher
    /// (each call then waits for RCU grace periods), when it was not.
    live_unheld: Option<String>,
}

impl Chosen {
    /// `host.send_path` of the document: the path, and for the socket
    /// path why the XDP path (`asked` by the plan) was not taken.
    pub(crate) fn send_path(&self, asked: &XdpUse) -> Option<String> {
        let why = |why: &str| match asked {
            XdpUse::Iface(i) => format!("--xdp {i} not used: {why}"),
            _ => format!("AF_XDP not used: {why}"),
        };
        match self {
            Chosen::NotAsked => None,
            Chosen::Fallback(w) => Some(format!("{} ({})", crate::net::SEND_PATH, why(w))),
            Chosen::Xdp(x) if x.live => Some(format!(
                "xdp live frames {} (BPF_PROG_TEST_RUN, no skb{}), {}",
                x.port.iface,
                x.live_unheld
                    .as_deref()
                    .map(|w| format!("; RCU grace periods per call: {w}"))
                    .unwrap_or_default(),
                super::live::TX_STAMP
            )),
            Chosen::Xdp(x) => Some(format!(
                "af_xdp {}, {}, {TX_STAMP}{}",
                x.port.iface,
                x.port.describe(),
                x.why_ring
                    .as_deref()
                    .map(|w| format!(" (live frames not used: {w})"))
                    .unwrap_or_default()
            )),
        }
    }

    /// Frames the interface's driver dropped after the XDP path handed
    /// them over: the sending host's drops, as `SndbufErrors` are on the
    /// socket path.
    pub(crate) fn driver_drops(&self) -> u64 {
        match self {
            Chosen::Xdp(x) => x.port.xsk.driver_drops + x.live_refused,
            _ => 0,
        }
    }
}

/// The session's one flow when the session has the shape the XDP path
/// serves — one forward one-way (OWD) UDP flow without socket options or
/// a packet log — else why not. The sender asks the receiver for its
/// half (`Hello.xdp`) only then.
pub(crate) fn shape(plan: &SessionPlan) -> Result<&FlowPlan, String> {
    let [f] = plan.flows.as_slice() else {
        return Err(format!(
            "{} flows (the XDP path sends one per session)",
            plan.flows.len()
        ));
    };
    if f.direction != Direction::Forward || f.transport != Transport::Udp {
        return Err("only forward UDP flows".into());
    }
    if f.meter_in(plan) != MeterMode::Owd {
        return Err("RTT meter (reflections come back by the socket path)".into());
    }
    if !f.opts.is_default() {
        return Err("socket options (marking, buffers) apply to the socket path only".into());
    }
    if plan.log.is_some() {
        return Err("-l packet logs are written by the socket path".into());
    }
    Ok(f)
}

/// Slowest mean packet rate at which `XdpUse::Auto` takes the path:
/// below it the socket path keeps up with the asked rate on any host
/// this runs on, and its kernel receive timestamps are the finer ones.
pub(crate) const AUTO_MIN_PPS: f64 = 50_000.0;

/// Ok when `f` is fast enough for `XdpUse::Auto` to take the XDP path
/// (`--max`, or a mean rate of at least [`AUTO_MIN_PPS`]), else why not.
fn fast_enough(f: &FlowPlan) -> Result<(), String> {
    if f.spec.is_max() {
        return Ok(());
    }
    match f.spec.nominal_rate_pps() {
        Some(pps) if pps >= AUTO_MIN_PPS => Ok(()),
        Some(pps) => Err(format!(
            "{pps:.0} packets/s, below the {AUTO_MIN_PPS:.0} where the socket path stops keeping up"
        )),
        None => Err("the model has no mean rate".into()),
    }
}

/// What the XDP path needs that is known before the session starts: the
/// session's shape ([`shape`]), the interface the plan allows (for
/// `XdpUse::Auto` the one holding `src_ip`, for a fast enough flow,
/// without a shaping qdisc), not an IPv4 loopback ([`loopback_ok`]),
/// holding `src_ip`, and the Ethernet address of `dst_ip` on it. Returns
/// the flow, the interface and that address, or why not.
fn pick(
    plan: &SessionPlan,
    src_ip: IpAddr,
    dst_ip: IpAddr,
) -> Result<(&FlowPlan, String, [u8; 6]), String> {
    let f = shape(plan)?;
    let auto = plan.xdp == XdpUse::Auto;
    let iface = match &plan.xdp {
        XdpUse::Off => return Err("--no-xdp".into()),
        XdpUse::Iface(i) => i.clone(),
        XdpUse::Auto => {
            fast_enough(f)?;
            let i = auto_iface(src_ip)?;
            super::no_shaping(&i, true)?;
            i
        }
    };
    loopback_ok(&iface, dst_ip, auto)?;
    let idx = super::ifindex(&iface).map_err(|e| e.to_string())?;
    super::on_iface(&iface, src_ip)?;
    let dst_mac = super::next_hop_mac(&iface, idx, dst_ip)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no neighbour entry for {dst_ip} on {iface} (not on its link?)"))?;
    Ok((f, iface, dst_mac))
}

/// Whether the plan considers the XDP path for this session at all:
/// `--xdp IFACE` always (and says why not when it cannot), `XdpUse::Auto`
/// for a session of the path's [`shape`] that is [`fast_enough`] (other
/// sessions are no candidates and their documents do not mention it).
fn considered(plan: &SessionPlan) -> bool {
    match plan.xdp {
        XdpUse::Off => false,
        XdpUse::Iface(_) => true,
        XdpUse::Auto => shape(plan).is_ok_and(|f| fast_enough(f).is_ok()),
    }
}

/// Whether the sender will try the XDP path, so asks the receiver to take
/// its half (`Hello.xdp`): everything [`pick`] checks holds.
pub(crate) fn asks(plan: &SessionPlan, src_ip: IpAddr, dst_ip: IpAddr) -> bool {
    plan.xdp != XdpUse::Off && pick(plan, src_ip, dst_ip).is_ok()
}

/// The interface `XdpUse::Auto` sends from: the one holding the
/// session's address `src_ip`, when the process may use AF_XDP at all.
fn auto_iface(src_ip: IpAddr) -> Result<String, String> {
    if !super::sys::is_root() {
        return Err("not root (AF_XDP and XDP programs need CAP_NET_RAW and CAP_BPF)".into());
    }
    super::iface_of(src_ip)
}

/// Decides whether the session's flow can leave by the XDP path the plan
/// allows (`plan.xdp`): [`pick`], and every probe within the interface's
/// MTU. `socks` are the flows' connected data sockets (their ports are
/// the probes' source ports).
pub(crate) fn choose(
    plan: &SessionPlan,
    socks: &[Option<DataSock>],
    src_ip: IpAddr,
    dst_ip: IpAddr,
    dst_port: Option<u16>,
    mtu: u32,
) -> Chosen {
    if !considered(plan) {
        return Chosen::NotAsked;
    }
    match try_choose(plan, socks, src_ip, dst_ip, dst_port, mtu) {
        Ok(x) => Chosen::Xdp(Box::new(x)),
        Err(why) => Chosen::Fallback(why),
    }
}

/// Ok unless `iface` is a loopback device the XDP path does not serve
/// (docs/engine.md, "AF_XDP path", measured on Linux 6.18): IPv4 frames
/// that reach loopback without the route the socket path attaches to
/// them are dropped as martians, and IPv6 frames outrun its receive
/// backlog and are lost uncounted, so only an explicit `--xdp lo` takes
/// it, and only for IPv6.
fn loopback_ok(iface: &str, dst_ip: IpAddr, auto: bool) -> Result<(), String> {
    if !super::is_loopback(iface) {
        Ok(())
    } else if dst_ip.is_ipv4() {
        Err(format!(
            "{iface} is a loopback device: the kernel drops IPv4 frames that arrive there \
             without a route (drop reasons IP_LOCALNET, IP_LOCAL_SOURCE)"
        ))
    } else if auto {
        Err(format!(
            "{iface} is a loopback device: frames passing the socket layer overrun its \
             receive backlog unseen (--xdp {iface} sends IPv6 this way all the same)"
        ))
    } else {
        Ok(())
    }
}

fn try_choose(
    plan: &SessionPlan,
    socks: &[Option<DataSock>],
    src_ip: IpAddr,
    dst_ip: IpAddr,
    dst_port: Option<u16>,
    mtu: u32,
) -> Result<Picked, String> {
    let (f, iface, dst_mac) = pick(plan, src_ip, dst_ip)?;
    let iface = iface.as_str();
    let hl = frame::header_len(dst_ip.is_ipv6()) as u32;
    let biggest = f.spec.max_payload();
    if biggest + hl - 14 > mtu || biggest > max_payload(dst_ip.is_ipv6()) {
        return Err(format!(
            "{biggest}-byte payloads exceed the MTU {mtu} (the XDP path does not fragment)"
        ));
    }
    let (Some(Some(s)), Some(dst_port)) = (
        socks
            .first()
            .map(|d| d.as_ref().and_then(|d| d.udp_socket())),
        dst_port,
    ) else {
        return Err("no UDP data socket".into());
    };
    let src_port = s.local_addr().map_err(|e| e.to_string())?.port();
    let ep = Endpoints {
        src_mac: super::mac_of(iface).map_err(|e| e.to_string())?,
        dst_mac,
        src: SocketAddr::new(src_ip, src_port),
        dst: SocketAddr::new(dst_ip, dst_port),
    };
    let port = TxPort::open(iface, plan.xdp_txq).map_err(|e| e.to_string())?;
    let (try_live, why_ring) = match live_allowed(plan, f) {
        Ok(()) => (true, None),
        // Said where live frames were asked for: `--xdp-tx live`, or
        // `auto` for a `--max` flood (a paced flow is no candidate).
        Err(w) => {
            let asked =
                plan.xdp_tx == XdpTx::Live || (plan.xdp_tx == XdpTx::Auto && f.spec.is_max());
            (false, asked.then_some(w))
        }
    };
    Ok(Picked {
        port,
        ep,
        try_live,
        why_ring,
        live: false,
        live_refused: 0,
        live_unheld: None,
    })
}

/// Ok when the plan asks for live frames (`XdpTx`) and flow `f` is what
/// they serve: a `--max` flood of one payload size without probe MACs
/// (one frame, stamped per run, and never paced: live frames have no
/// back-pressure, [`super::live`]); else why not (`None` reason when
/// the plan asked for the ring).
fn live_allowed(plan: &SessionPlan, f: &FlowPlan) -> Result<(), String> {
    match plan.xdp_tx {
        XdpTx::Ring => Err("--xdp-tx ring".into()),
        _ if !f.spec.is_max() => Err("not a --max flood (paced flows keep the ring)".into()),
        _ if plan.auth_probes => Err("--auth probes (a MAC per probe)".into()),
        _ if !matches!(f.spec.size, SizeModel::Constant { .. }) || f.spec.packetize.is_some() => {
            Err("payload sizes vary (live frames send one frame)".into())
        }
        _ => Ok(()),
    }
}

/// Runs the session's flows: by the XDP path when it was chosen, else by
/// the socket path ([`crate::pacing::run_flows`]).
pub(crate) fn run_flows(
    plan: &SessionPlan,
    socks: Vec<Option<DataSock>>,
    launch: Launch,
    chosen: &mut Chosen,
) -> Result<Vec<FlowSent>, EngineError> {
    let x = match std::mem::replace(chosen, Chosen::NotAsked) {
        Chosen::Xdp(x) => x,
        other => {
            *chosen = other;
            return crate::pacing::run_flows(plan, socks, launch);
        }
    };
    let mut x = *x;
    let f = plan.flows[0].clone();
    let job = TxFlow {
        cfg: FlowConfig {
            transport: f.transport,
            ip: launch.ip,
            mtu: launch.mtu,
            interval_ns: plan.interval_ms.map(|m| m * 1_000_000),
        },
        plan: f,
        flow_id: 1,
        session: launch.session,
        t0: launch.t0,
        abort: launch.abort,
        cancel: launch.cancel,
        spin_ns: crate::clock::SPIN_NS,
        probe_key: launch.probe_key,
    };
    let strict = plan.xdp_tx == XdpTx::Live;
    let h = std::thread::Builder::new()
        .name("wb-xdp-tx-1".into())
        .spawn(move || {
            let live = if x.try_live {
                match super::live::open_for(&x.port.iface, &x.ep, &job, strict) {
                    Ok(l) => Some(l),
                    Err(why) => {
                        // host.send_path says why (and `send` prints it).
                        x.why_ring = Some(why);
                        None
                    }
                }
            } else {
                None
            };
            let sent = match live {
                Some(mut l) => {
                    x.live = true;
                    x.live_unheld = l.unheld().map(String::from);
                    let (sent, refused) = super::live::send_flow(&mut l, job);
                    x.live_refused = refused;
                    sent
                }
                None => send_flow(&mut x.port, x.ep, job),
            };
            (sent, x)
        })
        .map_err(|e| EngineError::io("flow thread", e))?;
    let sent = match h.join() {
        Ok((sent, x)) => {
            *chosen = Chosen::Xdp(Box::new(x));
            sent
        }
        Err(_) => FlowSent::failed("flow thread panicked"),
    };
    // The data sockets stay open to the end: they hold the source port.
    drop(socks);
    Ok(vec![sent])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Stop;
    use wirebench_model::FlowSpec;

    fn flow(spec: FlowSpec) -> FlowPlan {
        FlowPlan {
            spec,
            transport: Transport::Udp,
            stop: Stop::Packets(10),
            seed: 1,
            opts: Default::default(),
            direction: Direction::Forward,
            meter: None,
        }
    }

    #[test]
    fn a_stopped_queue_is_called_again_then_slept_on() {
        let mut st = Stall::default();
        let slept: Vec<bool> = (0..2 * STALL_RETRIES)
            .map(|_| st.after(Kick::Pending))
            .collect();
        let at: Vec<usize> = (0..slept.len()).filter(|&i| slept[i]).collect();
        let n = STALL_RETRIES as usize;
        assert_eq!(at, [n - 1, 2 * n - 1]);
        // A call that moved the frames (or dropped one) starts the count
        // again.
        for _ in 0..n - 1 {
            assert!(!st.after(Kick::Pending));
        }
        assert!(!st.after(Kick::Done));
        assert!(!st.after(Kick::Pending));
        assert!(!st.after(Kick::Dropped));
        assert!((0..n).any(|_| st.after(Kick::Pending)));
    }

    #[test]
    fn auto_takes_max_and_fast_flows_only() {
        let ok = |s: Result<FlowSpec, _>| fast_enough(&flow(s.unwrap()));
        assert_eq!(ok(FlowSpec::max_rate(64)), Ok(()));
        assert_eq!(ok(FlowSpec::constant(AUTO_MIN_PPS, 64)), Ok(()));
        let slow = ok(FlowSpec::constant(2000.0, 64)).unwrap_err();
        assert!(slow.starts_with("2000 packets/s"), "{slow}");
    }

    #[test]
    fn only_the_shape_the_path_serves_is_asked_for() {
        let mut plan = SessionPlan::new("x", vec![flow(FlowSpec::max_rate(64).unwrap())]);
        assert!(shape(&plan).is_ok());
        plan.meter = MeterMode::Rtt;
        assert!(shape(&plan).unwrap_err().starts_with("RTT meter"));
        plan.meter = MeterMode::Owd;
        plan.flows.push(plan.flows[0].clone());
        assert!(shape(&plan).unwrap_err().starts_with("2 flows"));
        plan.flows.pop();
        plan.flows[0].transport = Transport::Tcp;
        assert!(shape(&plan).is_err());
        // Off never asks, whatever the shape; Auto considers only fast
        // flows of the shape.
        plan.flows[0].transport = Transport::Udp;
        let lo = "127.0.0.1".parse().unwrap();
        assert!(!asks(&plan, lo, lo) && !considered(&plan));
        plan.xdp = XdpUse::Auto;
        assert!(considered(&plan));
        plan.flows[0].spec = FlowSpec::constant(2000.0, 64).unwrap();
        assert!(!considered(&plan));
        plan.xdp = XdpUse::Iface("lo".into());
        assert!(considered(&plan));
    }

    #[test]
    fn loopback_takes_no_ipv4_and_ipv6_only_when_named() {
        let (v4, v6) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        assert!(loopback_ok("lo", v4, false)
            .unwrap_err()
            .contains("IP_LOCALNET"));
        assert!(loopback_ok("lo", v6, true).is_err());
        assert_eq!(loopback_ok("lo", v6, false), Ok(()));
        // A non-loopback interface is not this check's business.
        assert_eq!(loopback_ok("no-such-if0", v4, true), Ok(()));
    }
}
