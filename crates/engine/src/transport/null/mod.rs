//! A test-only transport over an in-process wire: each batch is framed
//! like a probe batch, counted, and (when the end is wired) handed to the
//! receiving end in one piece. It shows what a transport is at both ends
//! (a [`Caps`], a [`FlowTx`] the pacer drives, a [`FlowRx`] feeding the
//! shared receive accounting) and that the pacer and the receive side run
//! a flow over one without knowing which; its registration is one line in
//! `transport/mod.rs`.

use super::rx::{FlowRx, RxEnd, RxFlow, WorkerOutcome, POLL_MS};
use super::tcp::rx::Listening;
use super::udp::rx::UdpFlow;
use super::{Caps, DataSock, FlowRun, FlowTx};
use crate::net::BATCH;
use crate::pacing::{each_batch, header, FlowEnd};
use crate::rtt::{Reflected, RttRx};
use crate::sys::{CpuClock, CpuTime};
use std::collections::VecDeque;
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use wirebench_wire::ProbeHeader;

/// The null transport's declaration.
pub(crate) const CAPS: Caps = Caps {
    name: "null",
    connection_oriented: false,
    via_receiver: false,
    tcp_info: false,
    tcp_options: false,
    shares_pacer: false,
    rx_sockets: 0,
    kernel_udp_drops: false,
    needs_privilege: false,
};

/// What the null transport was handed, for the test to compare with the
/// flow's own accounting.
#[derive(Default)]
pub(crate) struct Sunk {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub batches: AtomicU64,
    /// Packets whose header did not decode to the flow's next sequence
    /// number.
    pub misnumbered: AtomicU64,
}

/// The in-process wire between a null flow's two ends: whole batches
/// (records back to back), and their buffers coming back for reuse, so
/// that nothing is allocated per packet, nor per batch once running.
#[derive(Default)]
pub(crate) struct Wire {
    batches: Mutex<VecDeque<Vec<u8>>>,
    free: Mutex<Vec<Vec<u8>>>,
    ready: Condvar,
}

impl Wire {
    /// A buffer for the next batch.
    fn take_buf(&self) -> Vec<u8> {
        let mut b = self
            .free
            .lock()
            .ok()
            .and_then(|mut f| f.pop())
            .unwrap_or_default();
        b.clear();
        b
    }

    fn send(&self, batch: Vec<u8>) {
        if let Ok(mut q) = self.batches.lock() {
            q.push_back(batch);
            self.ready.notify_one();
        }
    }

    /// The next batch, waiting up to `wait` for one.
    fn recv(&self, wait: Duration) -> Option<Vec<u8>> {
        let q = self.batches.lock().ok()?;
        let (mut q, _) = self
            .ready
            .wait_timeout_while(q, wait, |q| q.is_empty())
            .ok()?;
        q.pop_front()
    }

    fn give_back(&self, buf: Vec<u8>) {
        if let Ok(mut f) = self.free.lock() {
            f.push(buf);
        }
    }
}

/// A flow's sending end into [`Sunk`] and, when wired, its receiving end.
pub(crate) struct NullTx {
    sunk: Arc<Sunk>,
    buf: Vec<u8>,
    wire: Option<Arc<Wire>>,
}

impl NullTx {
    /// A sending end that counts into `sunk`.
    pub(crate) fn new(sunk: Arc<Sunk>) -> NullTx {
        NullTx {
            sunk,
            buf: vec![0; u16::MAX as usize],
            wire: None,
        }
    }

    /// A sending end that counts into `sunk` and delivers over `wire`.
    pub(crate) fn wired(sunk: Arc<Sunk>, wire: Arc<Wire>) -> NullTx {
        NullTx {
            wire: Some(wire),
            ..NullTx::new(sunk)
        }
    }
}

/// A flow's receiving end on a [`Wire`].
pub(crate) struct NullRx {
    wire: Arc<Wire>,
    rf: RxFlow,
}

/// Most batches a stopped receiver still takes from the wire.
const DRAIN_MAX_BATCHES: usize = 4096;

impl NullRx {
    /// Receives flow `rf` from `wire`.
    pub(crate) fn new(wire: Arc<Wire>, rf: RxFlow) -> NullRx {
        NullRx { wire, rf }
    }

    /// Records one batch's probes and gives its buffer back to the wire.
    fn take(&mut self, batch: Vec<u8>) {
        let rf = &mut self.rf;
        // One receive time per batch, as a socket batch has.
        let ts = crate::clock::realtime_ns();
        let offset = rf.sh.offset_ns.load(Ordering::Relaxed);
        let mut at = 0;
        while at < batch.len() {
            let rest = &batch[at..];
            let h = match ProbeHeader::decode_prefix(rest) {
                Ok(h) if (h.len as usize) >= 1 && (h.len as usize) <= rest.len() => h,
                _ => {
                    rf.sh.foreign();
                    break;
                }
            };
            let rec = &rest[..h.len as usize];
            at += rec.len();
            if h.session != rf.sid || h.flow != rf.flow_id || rec.len() > rf.longest() {
                rf.sh.foreign();
                continue;
            }
            rf.take_record(&h, rec, rec.len(), ts, offset);
        }
        self.wire.give_back(batch);
    }
}

impl FlowRx for NullRx {
    fn run(mut self: Box<Self>) -> WorkerOutcome {
        let cpu0 = CpuTime::thread();
        let wait = Duration::from_millis(POLL_MS);
        while !self.rf.sh.stop.load(Ordering::Relaxed) {
            match self.wire.recv(wait) {
                Some(batch) => self.take(batch),
                None => self.rf.acc.tick(),
            }
        }
        // What is on the wire already was sent before the stop: a thread
        // held through the linger still counts it (as the UDP receivers
        // drain their sockets), in bounded time.
        let until = crate::clock::mono_ns() + crate::transport::rx::STOP_DRAIN_NS;
        for _ in 0..DRAIN_MAX_BATCHES {
            if crate::clock::mono_ns() >= until {
                break;
            }
            match self.wire.recv(Duration::ZERO) {
                Some(batch) => self.take(batch),
                None => break,
            }
        }
        self.rf.outcome(CpuTime::thread().since(cpu0))
    }

    fn into_udp(self: Box<Self>) -> Result<Box<UdpFlow>, RxEnd> {
        Err(self)
    }

    fn into_tcp(self: Box<Self>) -> Result<Box<Listening>, RxEnd> {
        Err(self)
    }
}

impl FlowTx for NullTx {
    fn caps(&self) -> &'static Caps {
        &CAPS
    }

    fn pace(&mut self, r: FlowRun<'_>) -> FlowEnd {
        let FlowRun {
            job,
            sched,
            acc,
            first_tx,
        } = r;
        let mut h = header(job);
        let mut meta = [(0u64, 0u32); BATCH];
        let max = sched.max;
        let (buf, sunk, wire) = (&mut self.buf, &self.sunk, &self.wire);
        each_batch(job, sched, acc, &mut meta, BATCH, |batch, acc, seq| {
            let mut out = wire.as_ref().map(|w| w.take_buf());
            let tx = crate::clock::realtime_ns();
            if *first_tx == 0 {
                *first_tx = tx;
            }
            let actual = crate::clock::mono_ns();
            for (i, &(at, size)) in batch.iter().enumerate() {
                let sq = seq.wrapping_add(i as u32);
                h.len = size as u16;
                h.seq = sq;
                h.tx_ns = tx;
                let rec = &mut buf[..size as usize];
                let _ = h.encode(rec);
                if ProbeHeader::decode_prefix(rec).map_or(true, |d| d.seq != sq) {
                    sunk.misnumbered.fetch_add(1, Ordering::Relaxed);
                }
                sunk.bytes.fetch_add(u64::from(size), Ordering::Relaxed);
                if let Some(o) = out.as_mut() {
                    o.extend_from_slice(rec);
                }
                acc.record_sent(if max { actual } else { at }, actual, size, sq, tx);
            }
            sunk.packets
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            sunk.batches.fetch_add(1, Ordering::Relaxed);
            if let (Some(w), Some(o)) = (wire, out) {
                w.send(o);
            }
            *seq = seq.wrapping_add(batch.len() as u32);
            Ok(())
        })
    }

    fn reflector(&self, _r: &Reflected) -> std::io::Result<RttRx> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    fn into_udp(self: Box<Self>) -> Result<UdpSocket, DataSock> {
        Err(self)
    }

    fn into_tcp(self: Box<Self>) -> Result<TcpStream, DataSock> {
        Err(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::tests::{cfg, flow};
    use crate::pacing::{pace_one, PaceOne};
    use crate::plan::Stop;
    use std::sync::atomic::AtomicBool;

    /// A flow paced over the null transport by the pacer's own entry
    /// point sends exactly its stop condition's packets, in order, in
    /// batches, and what the transport saw is what the flow accounted.
    #[test]
    fn the_pacer_runs_a_flow_over_the_null_transport() {
        let sunk = Arc::new(Sunk::default());
        let plan = flow(20_000.0, 200, Stop::Packets(2_000));
        let at = PaceOne {
            flow_id: 1,
            session: 7,
            t0: crate::clock::mono_ns() + 1_000_000,
            cfg: cfg(),
            abort: Arc::new(AtomicBool::new(false)),
            spin_ns: 0,
            probe_key: None,
        };
        let out = pace_one(plan, Box::new(NullTx::new(sunk.clone())), at);
        assert_eq!(out.error, None);
        assert!(!out.cancelled);
        let sent = out.send.packets + out.send.not_sent;
        assert_eq!(sent, 2_000, "the stop condition counts every packet");
        assert_eq!(sunk.packets.load(Ordering::Relaxed), out.send.packets);
        assert_eq!(sunk.bytes.load(Ordering::Relaxed), out.send.bytes);
        assert_eq!(sunk.misnumbered.load(Ordering::Relaxed), 0);
        assert!(out.first_tx > 0);
        let batches = sunk.batches.load(Ordering::Relaxed);
        assert!(batches >= 1 && batches <= out.send.packets);
        // 2 000 packets at 20 000 pps: about 0.1 s of schedule.
        assert!(out.send.duration_s > 0.05 && out.send.duration_s < 5.0);
    }

    /// A whole flow over the null transport, both ends: the pacer's entry
    /// point sends it, the receive side every transport shares (a flow's
    /// `RxFlow` as a session makes it, the loop behind `FlowRx::run`, the
    /// report the daemon sends) receives it, and the report counts every
    /// packet once, in order, with nothing lost or foreign.
    #[test]
    fn a_flow_runs_send_to_receive_over_the_null_transport() {
        use crate::transport::rx::{flow_report, rx_flow, RxAt};

        use wirebench_wire::{FlowSetup, Transport};
        let (sid, flow_id) = (7, 1);
        let setup = FlowSetup {
            flow_id,
            transport: Transport::Udp,
            max_len: 200,
            mtu: 1500,
            ..Default::default()
        };
        let at = RxAt::loopback(sid, 0, false);
        let wire = Arc::new(Wire::default());
        let rf = rx_flow(&setup, &at, None);
        let shared = rf.sh.clone();
        let end: RxEnd = Box::new(NullRx::new(wire.clone(), rf));
        let rx = std::thread::spawn(move || end.run());
        shared
            .start_ns
            .store(crate::clock::realtime_ns(), Ordering::Relaxed);
        let sunk = Arc::new(Sunk::default());
        let plan = flow(20_000.0, 200, Stop::Packets(2_000));
        let sent = pace_one(
            plan,
            Box::new(NullTx::wired(sunk.clone(), wire)),
            PaceOne {
                flow_id,
                session: sid,
                t0: crate::clock::mono_ns() + 1_000_000,
                cfg: cfg(),
                abort: Arc::new(AtomicBool::new(false)),
                spin_ns: 0,
                probe_key: None,
            },
        );
        assert_eq!(sent.error, None);
        assert_eq!(sent.send.packets + sent.send.not_sent, 2_000);
        // Everything sent is on the wire already: stopped at once, the
        // receiver still counts all of it, however late its thread ran.
        shared.stop.store(true, Ordering::Relaxed);
        let out = rx.join().unwrap();
        let acc = out.accs.into_iter().next().unwrap();
        let r = flow_report(flow_id, &shared, acc, Some(sent.send.packets), None);
        assert_eq!(r.summary.counts.unique, sent.send.packets);
        assert_eq!(r.summary.counts.lost, Some(0));
        assert_eq!(r.summary.counts.duplicates, 0);
        assert_eq!(r.summary.counts.reordered, 0);
        assert_eq!(r.foreign, 0);
        assert_eq!(r.forged + r.implausible_delays, 0);
        assert_eq!(sunk.packets.load(Ordering::Relaxed), sent.send.packets);
    }

    #[test]
    fn a_halted_flow_stops_on_the_null_transport() {
        let sunk = Arc::new(Sunk::default());
        let abort = Arc::new(AtomicBool::new(true));
        let at = PaceOne {
            flow_id: 1,
            session: 7,
            t0: crate::clock::mono_ns(),
            cfg: cfg(),
            abort,
            spin_ns: 0,
            probe_key: None,
        };
        let plan = flow(1_000.0, 100, Stop::DurationMs(10_000));
        let out = pace_one(plan, Box::new(NullTx::new(sunk.clone())), at);
        assert_eq!(out.error.as_deref(), Some("receiver gone"));
        assert_eq!(sunk.packets.load(Ordering::Relaxed), 0);
    }
}
