//! UDP: a datagram per probe. A flow's end is a connected socket sending
//! each batch of due packets with one `sendmmsg`; paced one-way flows may
//! instead share a pacer thread and its unconnected socket
//! ([`run_shared`]), so that packets of several flows leave in one call.

pub(crate) mod rx;

use super::{connect_err, Caps, DataSock, FlowRun, FlowTx, Ident, Ops};
use crate::clock::{mono_ns, raise_priority, realtime_ns, tighten_timer_slack};
use crate::net::{self, set_sndbuf, AsRawFd, RawFd, Segmented, SendBatch, BATCH};
use crate::pacing::{
    each_batch, gather, header, wait_or_stop, FlowEnd, FlowJob, FlowSent, Schedule, SendRec,
};
use crate::plan::FlowPlan;
use crate::rtt::{Reflected, RttRx};
use crate::EngineError;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use wirebench_model::MIN_PAYLOAD;
use wirebench_stats::SendAccumulator;
use wirebench_wire::auth::ProbeKey;
use wirebench_wire::{ProbeHeader, PROBE_HEADER_LEN};

/// UDP's declaration.
pub(crate) const CAPS: Caps = Caps {
    name: "udp",
    connection_oriented: false,
    via_receiver: true,
    tcp_info: false,
    tcp_options: false,
    shares_pacer: true,
    rx_sockets: 1,
    kernel_udp_drops: true,
    needs_privilege: false,
};

/// UDP's entry in the transport table.
pub(crate) const OPS: Ops = Ops {
    caps: CAPS,
    socket: Some((Type::DGRAM, Protocol::UDP)),
    connect,
    listen: Some(rx::listen),
    dial: Some(rx::dial),
    reverse: Some(rx::reverse_port),
};

fn connect(
    sock: Socket,
    peer: SocketAddr,
    _f: &FlowPlan,
    _id: Ident,
) -> Result<DataSock, EngineError> {
    sock.connect(&peer.into()).map_err(connect_err(peer))?;
    // Without `--window` the socket keeps the kernel's default send buffer
    // (`net.core.wmem_default`), as D-ITG's and iperf3's do: skbs waiting
    // in the host's qdisc are charged to it, so an overloaded sender blocks
    // (and its late packets count as not sent) instead of overfilling its
    // own transmit queue, which is how a host with a NIC behaves.
    Ok(Box::new(UdpTx::new(sock.into())))
}

/// A UDP flow's connected sending end, and how its datagrams left
/// (segmentation offload) once it has paced.
pub(crate) struct UdpTx(pub UdpSocket, Option<wirebench_schema::result::Gso>);

impl UdpTx {
    pub(crate) fn new(s: UdpSocket) -> UdpTx {
        UdpTx(s, None)
    }
}

impl FlowTx for UdpTx {
    fn caps(&self) -> &'static Caps {
        &CAPS
    }

    fn pace(&mut self, r: FlowRun<'_>) -> FlowEnd {
        let mut gso = Gso::new(&r.job.plan);
        let end = udp_send(r.job, &self.0, r.sched, r.acc, r.first_tx, &mut gso);
        self.1 = gso.result();
        end
    }

    fn ended(&self, _job: &FlowJob, sent: &mut FlowSent) {
        sent.gso = self.1.clone();
    }

    fn reflector(&self, r: &Reflected) -> std::io::Result<RttRx> {
        Ok(RttRx::start_udp(self.0.try_clone()?, r))
    }

    fn into_udp(self: Box<Self>) -> Result<UdpSocket, DataSock> {
        Ok(self.0)
    }

    fn into_tcp(self: Box<Self>) -> Result<std::net::TcpStream, DataSock> {
        Err(self)
    }

    #[cfg(target_os = "linux")]
    fn udp_socket(&self) -> Option<&UdpSocket> {
        Some(&self.0)
    }
}

/// A flow's UDP segmentation offload: whether its sends are segmented
/// now, and what came of them for the result (`flows[].gso`).
#[derive(Default)]
struct Gso {
    /// Runs of same-size datagrams go out as one segmented send.
    on: bool,
    /// The flow started with `on` (the result then says how it went).
    tried: bool,
    sends: u64,
    datagrams: u64,
    fallback: Option<String>,
}

impl Gso {
    /// `--gso on|off` as asked; `auto` (unset) segments `--max` flows,
    /// where every batch is a run of due datagrams. Only where the system
    /// has UDP GSO.
    fn new(plan: &FlowPlan) -> Gso {
        let on = net::UDP_OFFLOAD && plan.opts.gso.unwrap_or(plan.spec.is_max());
        Gso {
            on,
            tried: on,
            ..Gso::default()
        }
    }

    fn result(&self) -> Option<wirebench_schema::result::Gso> {
        self.tried.then(|| wirebench_schema::result::Gso {
            used: self.sends > 0,
            sends: self.sends,
            datagrams: self.datagrams,
            segments_per_send: if self.sends > 0 {
                self.datagrams as f64 / self.sends as f64
            } else {
                0.0
            },
            fallback: self.fallback.clone(),
        })
    }
}

/// One UDP flow's send state between batches: the socket, the header
/// template, the next sequence number and the refusal count.
struct UdpOut<'a> {
    fd: RawFd,
    h: &'a mut ProbeHeader,
    seq: &'a mut u32,
    first_tx: &'a mut u64,
    refused: &'a mut u64,
    /// `--auth probes`: signs each probe once its header is final.
    key: Option<&'a ProbeKey>,
    gso: &'a mut Gso,
}

impl UdpOut<'_> {
    /// Sends the gathered packets `meta` (scheduled time, size) with
    /// `sendmmsg`, runs of one size as segmented sends where [`Gso`] is on,
    /// stamping the transmit time immediately before the call. A packet
    /// the kernel refuses is `not_sent` (all of a refused segmented send's)
    /// and the rest of the batch is renumbered, so the receiver sees no gap
    /// for it. The kernel's first refusal of a segmented send for want of
    /// GSO turns it off for the flow and the batch goes out plainly.
    fn send(&mut self, batch: &mut SendBatch, meta: &[(u64, u32)], acc: &mut SendRec, max: bool) {
        let n = meta.len();
        let mut seq = *self.seq;
        for (i, &(_, size)) in meta.iter().enumerate() {
            self.h.len = size as u16;
            self.h.seq = seq.wrapping_add(i as u32);
            let _ = self.h.encode(batch.slot(i, size as usize));
        }
        let tx = realtime_ns();
        if *self.first_tx == 0 {
            *self.first_tx = tx;
        }
        for (i, &(_, size)) in meta.iter().enumerate() {
            let slot = batch.slot(i, size as usize);
            ProbeHeader::stamp_tx(slot, tx);
            if let Some(k) = self.key {
                k.sign(slot);
            }
        }
        let actual = mono_ns();
        let mut i = 0;
        while i < n {
            let r = if self.gso.on {
                batch.send_segmented(self.fd, i, n)
            } else {
                batch
                    .send(self.fd, i, n)
                    .map(|slots| Segmented {
                        slots,
                        ..Segmented::default()
                    })
                    .map_err(|e| (e, 1))
            };
            match r {
                Ok(s) => {
                    let k = s.slots;
                    self.gso.sends += s.sends as u64;
                    self.gso.datagrams += s.segments as u64;
                    for (j, &(at, size)) in meta[i..i + k].iter().enumerate() {
                        let sq = seq.wrapping_add(j as u32);
                        acc.record_sent(if max { actual } else { at }, actual, size, sq, tx);
                    }
                    seq = seq.wrapping_add(k as u32);
                    i += k;
                }
                Err((e, k)) if self.gso.on && k > 1 && SendBatch::gso_refused(&e) => {
                    self.gso.on = false;
                    self.gso.fallback = Some(format!(
                        "the kernel refused a segmented send of {k} datagrams ({e}); plain sendmmsg from then on"
                    ));
                }
                Err((e, k)) => {
                    for &(at, size) in &meta[i..i + k] {
                        acc.record_not_sent(1, at, seq, size);
                    }
                    if e.kind() == ErrorKind::ConnectionRefused {
                        *self.refused += k as u64;
                    }
                    for (j, &(_, size)) in meta.iter().enumerate().skip(i + k) {
                        let cur = seq.wrapping_add((j - i - k) as u32);
                        let slot = batch.slot(j, size as usize);
                        ProbeHeader::stamp_seq(slot, cur);
                        if let Some(key) = self.key {
                            key.sign(slot);
                        }
                    }
                    i += k;
                    if e.kind() == ErrorKind::WouldBlock {
                        std::thread::yield_now();
                    }
                }
            }
        }
        *self.seq = seq;
    }
}

/// Writes the flow's payload content after the header room of every slot.
fn fill_payload(batch: &mut SendBatch, plan: &FlowPlan) {
    for slot in batch.slots_mut() {
        if let Some(rest) = slot.get_mut(PROBE_HEADER_LEN..) {
            plan.spec.payload.fill(rest, plan.seed);
        }
    }
}

fn udp_send(
    job: &FlowJob,
    s: &UdpSocket,
    sched: &mut Schedule,
    acc: &mut SendRec,
    first_tx: &mut u64,
    gso: &mut Gso,
) -> FlowEnd {
    let fd = s.as_raw_fd();
    let mut batch = SendBatch::new(sched.max_len as usize);
    fill_payload(&mut batch, &job.plan);
    let mut h = header(job);
    let mut meta = [(0u64, 0u32); BATCH];
    let mut refused = 0u64;
    let max = sched.max;
    each_batch(job, sched, acc, &mut meta, BATCH, |due, acc, seq| {
        let mut out = UdpOut {
            fd,
            h: &mut h,
            seq,
            first_tx,
            refused: &mut refused,
            key: job.probe_key.as_ref(),
            gso: &mut *gso,
        };
        out.send(&mut batch, due, acc, max);
        // Every send refused for a long stretch: the receiver's port is gone.
        if refused > 1000 && acc.packets() == 0 {
            return Err("receiver refuses the data port".into());
        }
        Ok(())
    })
}

/// Where a flow on a shared pacer sends from.
enum Out {
    /// The flow's own connected socket: a flow with socket options
    /// (`-sp`, `--bind`, `--bind-dev`, marking, TTL, flow label, `-w`)
    /// keeps a socket of its own, as with a thread per flow.
    Own(UdpSocket),
    /// The pacer's unconnected socket, to this address (the receiver's
    /// data port of the flow): packets of several flows due together then
    /// leave in one `sendmmsg`.
    Shared(SockAddr),
}

/// One paced UDP flow on a shared pacer thread ([`run_shared`]).
struct SharedFlow {
    /// Position in the plan.
    idx: usize,
    out: Out,
    sched: Schedule,
    acc: SendRec,
    h: ProbeHeader,
    seq: u32,
    /// The next packet (scheduled time, size); None when the flow is done.
    pending: Option<(u64, u32)>,
    first_tx: u64,
    refused: u64,
    error: Option<String>,
    /// `--auth probes`: the session's probe key.
    key: Option<ProbeKey>,
    /// Segmentation offload of a flow with a socket of its own.
    gso: Gso,
}

/// One packet of a [`run_shared`] round on the pacer's socket: its flow
/// (index into the pacer's flows), scheduled time, size and sequence
/// number.
#[derive(Clone, Copy, Default)]
struct Msg {
    flow: usize,
    at: u64,
    size: u32,
    seq: u32,
}

/// Most send buffer the pacer's own socket gets: one default buffer per
/// flow sharing it (what each would have on a socket of its own).
const SHARED_SNDBUF_MAX: usize = 64 << 20;

/// Which flows of a pacer send from its one unconnected socket: those
/// without socket options of their own, so that what leaves is the same
/// as from a socket per flow but for the source port. Returns the socket
/// (None: no flow qualifies, or the system refused one; every flow then
/// keeps its own) and each flow's way out. `given`: the pacer's socket,
/// bound before `Hello` declared its port for the flows that share it
/// ([`pacer_sockets`]); None: one is made here.
fn share_socket(
    jobs: Vec<(usize, FlowJob, UdpSocket)>,
    given: Option<UdpSocket>,
) -> (Option<UdpSocket>, Vec<(usize, FlowJob, Out)>) {
    let shareable = |job: &FlowJob, sock: &UdpSocket| {
        if job.plan.opts.is_default() {
            sock.peer_addr().ok()
        } else {
            None
        }
    };
    let first = jobs.iter().find_map(|(_, j, s)| shareable(j, s));
    let n = jobs
        .iter()
        .filter(|(_, j, s)| shareable(j, s).is_some())
        .count();
    let shared = first.and_then(|to| {
        let s = match given {
            Some(s) => s,
            None => Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))
                .ok()?
                .into(),
        };
        if n > 1 {
            let one = socket2::SockRef::from(&s).send_buffer_size().ok()?;
            let total = (one * n).min(SHARED_SNDBUF_MAX);
            // Linux doubles what it is asked for (socket(7)); the default
            // it reports is the real size.
            let ask = if cfg!(target_os = "linux") {
                total / 2
            } else {
                total
            };
            set_sndbuf(s.as_raw_fd(), ask);
        }
        Some((s, to.is_ipv4()))
    });
    let outs = jobs
        .into_iter()
        .map(|(idx, job, sock)| {
            let out = match (&shared, shareable(&job, &sock)) {
                // One socket, one address family.
                (Some((_, v4)), Some(to)) if to.is_ipv4() == *v4 => Out::Shared(to.into()),
                _ => Out::Own(sock),
            };
            (idx, job, out)
        })
        .collect();
    (shared.map(|(s, _)| s), outs)
}

/// Paces many UDP flows on one thread: a heap of next-departure times
/// picks the flows due first; the pacer sleeps (then spins `spin_ns`)
/// until the earliest deadline and sends every packet due by then, of
/// every flow, in one round: those of flows on the pacer's socket
/// ([`share_socket`]) in one `sendmmsg` of up to [`BATCH`] packets with a
/// destination each, a flow with a socket of its own in one `sendmmsg` on
/// it. On loopback a send costs 4–6 µs per packet, most of it the
/// receive path the kernel runs inside the call; one call for the packets
/// of several flows costs less per packet, and a pacer that fell behind
/// (a late wake-up) sends its backlog in a few calls instead of one per
/// flow. A thread per flow stops scaling once the flows outnumber the
/// cores (the threads take turns waking each other late, and each costs a
/// stack); a pacer keeps every flow's absolute schedule with one wake-up
/// per deadline. Per flow it keeps only the schedule, the accumulators
/// and the destination (or socket); the send buffers are the pacer's.
pub(crate) fn run_shared(
    jobs: Vec<(usize, FlowJob, UdpSocket)>,
    spin_ns: u64,
    sock: Option<UdpSocket>,
) -> Vec<(usize, FlowSent)> {
    tighten_timer_slack();
    raise_priority();
    let mut done = Vec::new();
    let mut flows = Vec::with_capacity(jobs.len());
    let mut ctl = None;
    let mut max_len = MIN_PAYLOAD;
    // One buffer serves the pacer's flows: the first flow's content
    // (every flow of a command line has the same `--payload`).
    let content = jobs.first().map(|(_, j, _)| j.plan.clone());
    let wall_minus_mono = i128::from(realtime_ns()) - i128::from(mono_ns());
    let (shared, jobs) = share_socket(jobs, sock);
    for (idx, mut job, out) in jobs {
        match Schedule::new(&job.plan, job.t0, job.min_len()) {
            Ok(sched) => {
                max_len = max_len.max(sched.max_len);
                // Segmented sends need a connected socket.
                let gso = match out {
                    Out::Own(_) => Gso::new(&job.plan),
                    Out::Shared(_) => Gso::default(),
                };
                ctl.get_or_insert((job.abort.clone(), job.cancel, job.t0));
                flows.push(SharedFlow {
                    idx,
                    out,
                    sched,
                    acc: SendRec {
                        acc: SendAccumulator::new(job.cfg),
                        log: job.log.take(),
                        flow: job.flow_id,
                        wall_minus_mono,
                    },
                    h: header(&job),
                    seq: 0,
                    pending: None,
                    first_tx: 0,
                    refused: 0,
                    error: None,
                    key: job.probe_key.clone(),
                    gso,
                });
            }
            Err(e) => done.push((idx, FlowSent::failed(&e))),
        }
    }
    let Some((abort, cancel, t0)) = ctl else {
        return done;
    };
    // Send buffers: one for flows with a socket of their own, one for the
    // pacer's socket.
    let mut batch = SendBatch::new(max_len as usize);
    let mut multi = SendBatch::new(max_len as usize);
    if let Some(p) = &content {
        fill_payload(&mut batch, p);
        fill_payload(&mut multi, p);
    }
    let mut meta = [(0u64, 0u32); BATCH];
    let mut msgs = [Msg::default(); BATCH];
    // Flows taken off the heap in a round (allocated once: no flow is
    // taken twice in a round).
    let mut popped: Vec<usize> = Vec::with_capacity(flows.len());
    let mut heap = BinaryHeap::with_capacity(flows.len());
    for (k, f) in flows.iter_mut().enumerate() {
        f.pending = f.sched.next(t0);
        if let Some((at, _)) = f.pending {
            heap.push(Reverse((at, k)));
        }
    }
    let mut halt = None;
    while let Some(&Reverse((at, _))) = heap.peek() {
        let now = match wait_or_stop(&abort, cancel, at, spin_ns) {
            Ok(t) => t,
            Err(h) => {
                halt = Some(h);
                break;
            }
        };
        // Every flow due by now, earliest first, while the batch has room.
        let mut m = 0;
        popped.clear();
        while m < BATCH {
            let Some(&Reverse((at, k))) = heap.peek() else {
                break;
            };
            if at > now {
                break;
            }
            heap.pop();
            popped.push(k);
            let f = &mut flows[k];
            let own = match &f.out {
                Out::Own(s) => Some(s.as_raw_fd()),
                Out::Shared(_) => None,
            };
            let room = if own.is_some() { BATCH } else { BATCH - m };
            let n = gather(
                &mut f.sched,
                &mut f.pending,
                now,
                &mut f.acc,
                &mut meta,
                room,
                f.seq,
            );
            match own {
                Some(fd) if n > 0 => {
                    let mut out = UdpOut {
                        fd,
                        h: &mut f.h,
                        seq: &mut f.seq,
                        first_tx: &mut f.first_tx,
                        refused: &mut f.refused,
                        key: f.key.as_ref(),
                        gso: &mut f.gso,
                    };
                    out.send(&mut batch, &meta[..n], &mut f.acc, false);
                }
                Some(_) => {}
                None => {
                    for (j, &(at, size)) in meta[..n].iter().enumerate() {
                        msgs[m + j] = Msg {
                            flow: k,
                            at,
                            size,
                            seq: f.seq.wrapping_add(j as u32),
                        };
                    }
                    f.seq = f.seq.wrapping_add(n as u32);
                    m += n;
                }
            }
        }
        if let (Some(s), true) = (&shared, m > 0) {
            send_round(s.as_raw_fd(), &mut multi, &mut msgs[..m], &mut flows);
        }
        for &k in &popped {
            let f = &mut flows[k];
            // Every send refused for a long stretch: the receiver's port is
            // gone. Only a flow's own connected socket learns of it: the
            // pacer's unconnected socket is not told of ICMP port-unreachable
            // (no IP_RECVERR), so a shared flow's lost port shows as loss.
            if f.refused > 1000 && f.acc.packets() == 0 {
                f.error = Some("receiver refuses the data port".into());
                f.pending = None;
            }
            if let Some((at, _)) = f.pending {
                heap.push(Reverse((at, k)));
            }
        }
    }
    for f in flows {
        // Flows that had finished before a halt are complete.
        let end = match (f.error, halt.filter(|_| f.pending.is_some())) {
            (Some(e), _) => Err(e),
            (None, h) => Ok(h),
        };
        let mut sent = FlowSent::ran(f.first_tx, f.acc.summary(&f.sched), None, end);
        sent.gso = f.gso.result();
        done.push((f.idx, sent));
    }
    done
}

/// Sends a round's packets of several flows on the pacer's socket, each to
/// its flow's address, as [`UdpOut::send`] does for one flow: one transmit
/// time stamped just before the call (so the one-way delay includes the
/// wait inside the call), the send time of each packet interpolated over
/// the call (its schedule error); a packet the kernel refuses is its
/// flow's `not_sent`, and that flow's later packets are renumbered so
/// that the receiver sees no gap for it.
fn send_round(fd: RawFd, batch: &mut SendBatch, msgs: &mut [Msg], flows: &mut [SharedFlow]) {
    for (i, m) in msgs.iter().enumerate() {
        let f = &mut flows[m.flow];
        f.h.len = m.size as u16;
        f.h.seq = m.seq;
        let _ = f.h.encode(batch.slot(i, m.size as usize));
        if let Out::Shared(to) = &f.out {
            batch.set_dest(i, Some(to));
        }
    }
    let tx = realtime_ns();
    for (i, m) in msgs.iter().enumerate() {
        let f = &mut flows[m.flow];
        if f.first_tx == 0 {
            f.first_tx = tx;
        }
        let slot = batch.slot(i, m.size as usize);
        ProbeHeader::stamp_tx(slot, tx);
        if let Some(k) = &f.key {
            k.sign(slot);
        }
    }
    // The kernel takes a call's packets one after another (on loopback
    // 3-6 us each, the receive path included): packet j of k is taken to
    // leave j/k of the call's duration after its start, so that a packet
    // at the end of a long batch is not credited with the batch's start.
    let mut call = mono_ns();
    let n = msgs.len();
    let mut i = 0;
    while i < n {
        let r = batch.send(fd, i, n);
        let back = mono_ns();
        match r {
            Ok(k) => {
                let took = back.saturating_sub(call);
                for (j, m) in msgs[i..i + k].iter().enumerate() {
                    let actual = call + took * j as u64 / k as u64;
                    flows[m.flow]
                        .acc
                        .record_sent(m.at, actual, m.size, m.seq, tx);
                }
                i += k;
                call = back;
            }
            Err(e) => {
                call = back;
                let m = msgs[i];
                let f = &mut flows[m.flow];
                f.acc.record_not_sent(1, m.at, m.seq, m.size);
                if e.kind() == ErrorKind::ConnectionRefused {
                    f.refused += 1;
                }
                f.seq = f.seq.wrapping_sub(1);
                for (j, later) in msgs.iter_mut().enumerate().skip(i + 1) {
                    if later.flow == m.flow {
                        later.seq = later.seq.wrapping_sub(1);
                        let slot = batch.slot(j, later.size as usize);
                        ProbeHeader::stamp_seq(slot, later.seq);
                        if let Some(k) = &f.key {
                            k.sign(slot);
                        }
                    }
                }
                i += 1;
                if e.kind() == ErrorKind::WouldBlock {
                    std::thread::yield_now();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::tests::{flow, job, read_probes, rec};
    use crate::plan::Stop;

    #[test]
    fn a_pacer_sends_flows_without_options_from_one_socket() {
        let rxs: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let t0 = mono_ns() + 5_000_000;
        let jobs: Vec<(usize, FlowJob, UdpSocket)> = rxs
            .iter()
            .enumerate()
            .map(|(i, rx)| {
                let mut plan = flow(2000.0, 100 + i as u32, Stop::Packets(20));
                if i == 2 {
                    plan.opts.ttl = Some(64);
                }
                let s = UdpSocket::bind("127.0.0.1:0").unwrap();
                s.connect(rx.local_addr().unwrap()).unwrap();
                // Flows 1 and 2 fall due at the same instants: one round.
                let phase = if i == 2 { 100_000 } else { 0 };
                (i, job(plan, i as u16 + 1, t0 + phase), s)
            })
            .collect();
        let own = jobs[2].2.local_addr().unwrap().port();
        let own_of_shared = jobs[0].2.local_addr().unwrap().port();
        let mut sent = run_shared(jobs, 0, None);
        sent.sort_by_key(|(i, _)| *i);
        let mut ports = Vec::new();
        for ((i, o), rx) in sent.iter().zip(&rxs) {
            assert_eq!(o.error, None);
            assert_eq!((o.send.packets, o.send.not_sent), (20, 0), "flow {i}");
            assert!(o.first_tx > 0);
            let got = read_probes(rx, 20);
            let want: Vec<(u16, u32)> = (0..20).map(|k| (*i as u16 + 1, k)).collect();
            let ids: Vec<(u16, u32)> = got.iter().map(|&(f, q, _)| (f, q)).collect();
            assert_eq!(ids, want);
            assert!(got.iter().all(|g| g.2 == got[0].2));
            ports.push(got[0].2);
        }
        assert_eq!(ports[0], ports[1]);
        assert_ne!(ports[0], own_of_shared);
        assert_eq!(ports[2], own);
    }

    /// Sends `sizes` (one batch) as a `--max` flow from `tx`, segmentation
    /// offload on; returns the flow's offload state and sent count.
    #[cfg(target_os = "linux")]
    pub(super) fn send_sizes(tx: &UdpSocket, sizes: &[u32]) -> (Gso, u64, u32) {
        let j = job(flow(1000.0, 100, Stop::Packets(100)), 1, 0);
        let mut h = header(&j);
        let (mut seq, mut first_tx, mut refused) = (0u32, 0u64, 0u64);
        let mut gso = Gso {
            on: true,
            tried: true,
            ..Gso::default()
        };
        let mut acc = rec();
        let mut batch = SendBatch::new(100);
        let meta: Vec<(u64, u32)> = sizes.iter().map(|&s| (0, s)).collect();
        UdpOut {
            fd: tx.as_raw_fd(),
            h: &mut h,
            seq: &mut seq,
            first_tx: &mut first_tx,
            refused: &mut refused,
            key: None,
            gso: &mut gso,
        }
        .send(&mut batch, &meta, &mut acc, true);
        (gso, acc.packets(), seq)
    }

    /// Reads `n` datagrams: (sequence number, length).
    #[cfg(target_os = "linux")]
    fn read_seq_len(rx: &UdpSocket, n: usize) -> Vec<(u32, usize)> {
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 2048];
        (0..n)
            .map(|_| {
                let len = rx.recv(&mut buf).unwrap();
                let h = ProbeHeader::decode_datagram(&buf[..len]).unwrap();
                assert_eq!(usize::from(h.len), len);
                (h.seq, len)
            })
            .collect()
    }

    /// With UDP GSO a batch goes out as one segmented send per run of one
    /// size; on a socket without GRO every datagram arrives on its own,
    /// once, with its own sequence number and length.
    #[cfg(target_os = "linux")]
    #[test]
    fn segmented_sends_split_at_size_changes_and_every_datagram_arrives() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let sizes = [64, 64, 64, 64, 64, 80, 80, 80, 64, 64, 100];
        let (gso, sent, seq) = send_sizes(&tx, &sizes);
        assert_eq!((sent, seq), (11, 11));
        // Runs 5 x 64, 3 x 80, 2 x 64 segmented; the single 100 B plain.
        assert_eq!((gso.sends, gso.datagrams), (3, 10));
        assert!(gso.on && gso.fallback.is_none());
        let want: Vec<(u32, usize)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| (i as u32, s as usize))
            .collect();
        assert_eq!(read_seq_len(&rx, sizes.len()), want);
        let r = gso.result().unwrap();
        assert!(r.used);
        assert_eq!(r.segments_per_send, 10.0 / 3.0);
    }

    /// A kernel that refuses segmented sends (here: a socket without UDP
    /// checksums, EINVAL) turns GSO off for the flow, says why once, and
    /// the same batch goes out plainly: nothing is lost or renumbered.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_refused_segmented_send_falls_back_to_plain_datagrams() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        assert!(crate::net::disable_udp_checksum(tx.as_raw_fd()));
        let (gso, sent, seq) = send_sizes(&tx, &[64; 20]);
        assert_eq!((sent, seq), (20, 20));
        assert!(!gso.on);
        assert_eq!((gso.sends, gso.datagrams), (0, 0));
        let why = gso.fallback.clone().unwrap();
        assert!(why.contains("refused a segmented send"), "{why}");
        let want: Vec<(u32, usize)> = (0..20).map(|i| (i, 64)).collect();
        assert_eq!(read_seq_len(&rx, 20), want);
        let r = gso.result().unwrap();
        assert!(!r.used && r.fallback.is_some());
    }

    /// A packet the kernel refuses in a round of several flows is its own
    /// flow's `not_sent`; that flow's later packets are renumbered, the
    /// other flow's go out untouched.
    #[test]
    fn a_refused_packet_in_a_round_renumbers_only_its_flow() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let shared = |to: SocketAddr, id: u16| {
            let j = job(flow(1000.0, 64, Stop::Packets(10)), id, 0);
            SharedFlow {
                idx: usize::from(id),
                out: Out::Shared(to.into()),
                sched: Schedule::new(&j.plan, 0, MIN_PAYLOAD).unwrap(),
                acc: rec(),
                h: header(&j),
                seq: 0,
                pending: None,
                first_tx: 0,
                refused: 0,
                error: None,
                key: None,
                gso: Gso::default(),
            }
        };
        // Port 0 cannot be sent to (EINVAL): every packet of flow 2 fails.
        let bad: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut flows = vec![shared(rx.local_addr().unwrap(), 1), shared(bad, 2)];
        let order = [0, 1, 0, 1, 0];
        let mut msgs = [Msg::default(); 5];
        let mut seq = [0u32; 2];
        for (i, &k) in order.iter().enumerate() {
            msgs[i] = Msg {
                flow: k,
                at: i as u64,
                size: 64,
                seq: seq[k],
            };
            seq[k] += 1;
        }
        flows[0].seq = 3;
        flows[1].seq = 2;
        let mut batch = SendBatch::new(64);
        send_round(tx.as_raw_fd(), &mut batch, &mut msgs, &mut flows);
        let ids: Vec<(u16, u32)> = read_probes(&rx, 3)
            .iter()
            .map(|&(f, q, _)| (f, q))
            .collect();
        assert_eq!(ids, [(1, 0), (1, 1), (1, 2)]);
        let s0 = flows[0].acc.acc.summary();
        let s1 = flows[1].acc.acc.summary();
        assert_eq!((s0.packets, s0.not_sent, flows[0].seq), (3, 0, 3));
        assert_eq!((s1.packets, s1.not_sent, flows[1].seq), (0, 2, 0));
    }
}
