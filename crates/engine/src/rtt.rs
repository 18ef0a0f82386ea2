//! Sender side of the RTT meter: a collector per flow reads the probes the
//! receiver reflects (UDP datagrams with kernel timestamps, or 40-byte
//! records on the TCP connection) and records round-trip times with the
//! receiver's dwell excluded (TWAMP, RFC 5357). It runs beside the pacer so
//! that sending never waits for reflections.

use crate::clock::{mono_ns, realtime_ns};
use crate::net::{enable_rx_timestamps, set_rcvbuf, AsRawFd, RecvBatch};
use crate::records::{Fill, RecordReader};
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wirebench_stats::{FlowConfig, RecvAccumulator, RecvSummary};
use wirebench_wire::auth::{ProbeKey, AUTH_RTT_MIN_LEN};
use wirebench_wire::{ProbeHeader, Reflection};

/// A round-trip summary with the reflections refused for a bad MAC
/// counted as forged.
fn with_forged(mut s: RecvSummary, forged: u64) -> RecvSummary {
    s.counts.forged += forged;
    s
}

/// The flow whose reflections a collector accepts.
pub(crate) struct Reflected {
    pub cfg: FlowConfig,
    pub session: u32,
    pub flow_id: u16,
    /// Largest probe payload the flow sends (sizes the receive slots).
    pub max_payload: u32,
    /// `--auth probes`: reflections must carry this session key's MAC;
    /// those that do not are counted `forged` and not measured.
    pub probe_key: Option<ProbeKey>,
}

/// Sender side of the RTT meter: reads reflected probes on the flow's
/// socket and records round-trip times (the receiver's dwell excluded).
pub(crate) struct RttRx {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<RecvSummary>,
}

impl RttRx {
    pub fn start_udp(sock: UdpSocket, job: &Reflected) -> RttRx {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let cfg = job.cfg;
        let (sid, flow) = (job.session, job.flow_id);
        let slot = (job.max_payload as usize).max(AUTH_RTT_MIN_LEN) + 1;
        let key = job.probe_key.clone();
        let handle = std::thread::spawn(move || {
            let mut acc = RecvAccumulator::new(cfg);
            let mut forged = 0u64;
            let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
            set_rcvbuf(sock.as_raw_fd(), 8 << 20);
            enable_rx_timestamps(sock.as_raw_fd());
            let mut batch = RecvBatch::new(slot);
            let fd = sock.as_raw_fd();
            while !st.load(Ordering::Relaxed) {
                let n = match batch.recv(fd) {
                    Ok(n) => n,
                    Err(_) => continue,
                };
                let fallback = realtime_ns();
                for i in 0..n {
                    let t4 = batch.kernel_ts(i).unwrap_or(fallback);
                    if batch.truncated(i) {
                        continue;
                    }
                    let d = batch.data(i);
                    let Ok(h) = ProbeHeader::decode_datagram(d) else {
                        continue;
                    };
                    if h.session != sid || h.flow != flow || !h.is_reflected() {
                        continue;
                    }
                    if key.as_ref().is_some_and(|k| !k.verify(d)) {
                        forged += 1;
                        continue;
                    }
                    let Ok(r) = Reflection::decode(d) else {
                        continue;
                    };
                    let rtt = (t4 as i64 - h.tx_ns as i64) - (r.tx_ns as i64 - r.rx_ns as i64);
                    acc.record(h.seq, rtt, t4, d.len() as u32);
                }
            }
            with_forged(acc.summary(None), forged)
        });
        RttRx { stop, handle }
    }

    /// TCP: reflections come back as 40-byte records on the same connection.
    pub fn start_tcp(stream: TcpStream, job: &Reflected) -> RttRx {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let cfg = job.cfg;
        let (sid, flow) = (job.session, job.flow_id);
        let key = job.probe_key.clone();
        let handle = std::thread::spawn(move || {
            let mut acc = RecvAccumulator::new(cfg);
            let mut forged = 0u64;
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let mut src = &stream;
            let mut rd = RecordReader::new(64 << 10);
            while !st.load(Ordering::Relaxed) {
                let t4 = match rd.fill(&mut src) {
                    Fill::Data(t) => t,
                    Fill::Again => continue,
                    Fill::Closed => break,
                };
                let ours = |h: &ProbeHeader| {
                    h.session == sid
                        && h.flow == flow
                        && h.is_reflected()
                        && h.len as usize >= wirebench_wire::RTT_MIN_LEN
                };
                let framed = rd.drain(ours, |h, rec, _| {
                    if key.as_ref().is_some_and(|k| !k.verify(rec)) {
                        forged += 1;
                        return;
                    }
                    if let Ok(r) = Reflection::decode(rec) {
                        let rtt = (t4 as i64 - h.tx_ns as i64) - (r.tx_ns as i64 - r.rx_ns as i64);
                        acc.record(h.seq, rtt, t4, rec.len() as u32);
                    }
                });
                if !framed {
                    break;
                }
            }
            with_forged(acc.summary(None), forged)
        });
        RttRx { stop, handle }
    }

    pub fn finish(self, linger_ms: u64, abort: &AtomicBool) -> RecvSummary {
        // Reflections of the last probes are still on their way back.
        let until = mono_ns() + linger_ms * 1_000_000;
        while mono_ns() < until && !abort.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}
