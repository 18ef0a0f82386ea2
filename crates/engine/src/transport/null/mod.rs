//! A test-only transport that sends nowhere: each batch is framed like a
//! probe batch, counted and dropped. It shows what a transport is (a
//! [`Caps`] and a [`FlowTx`]) and that the pacer runs a flow over one
//! without knowing which; its registration is one line in `transport/mod.rs`.

use super::{Caps, DataSock, FlowRun, FlowTx};
use crate::net::BATCH;
use crate::pacing::{each_batch, header, FlowEnd};
use crate::rtt::{Reflected, RttRx};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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

/// A flow's sending end into [`Sunk`].
pub(crate) struct NullTx {
    sunk: Arc<Sunk>,
    buf: Vec<u8>,
}

impl NullTx {
    /// A sending end that counts into `sunk`.
    pub(crate) fn new(sunk: Arc<Sunk>) -> NullTx {
        NullTx {
            sunk,
            buf: vec![0; u16::MAX as usize],
        }
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
        let (buf, sunk) = (&mut self.buf, &self.sunk);
        each_batch(job, sched, acc, &mut meta, BATCH, |batch, acc, seq| {
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
                acc.record_sent(if max { actual } else { at }, actual, size, sq, tx);
            }
            sunk.packets
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            sunk.batches.fetch_add(1, Ordering::Relaxed);
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
