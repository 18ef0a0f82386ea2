//! Live intervals (`--interval` while the run goes on): the receiver's
//! side cuts each flow's running totals at interval boundaries
//! ([`LiveTap`], in the receive thread, once per interval) and its session
//! thread streams them to the sender as `Intervals` messages
//! ([`recv_streaming`]); the sender hands them to a [`LiveSink`].
//!
//! Receive threads and the session thread meet in a small bounded queue
//! per flow ([`LiveQueue`]): the lock is taken once per interval, never per
//! packet, and a session thread that cannot keep up drops the oldest
//! intervals (counted) instead of growing.

use crate::ctl::{Ctl, Recv};
use crate::EngineError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wirebench_stats::result::{FlowResult, TcpInfo};
use wirebench_stats::{LiveCutter, LiveInterval, RecvAccumulator};
use wirebench_wire::control::MAX_LIVE_ITEMS;
use wirebench_wire::ControlMsg;

/// Intervals a flow's queue holds before the oldest are dropped.
const QUEUE_CAP: usize = 4096;
/// Intervals without packets cut in one go; a longer silence (or a clock
/// step) skips ahead instead of spinning through empty intervals.
const MAX_CATCH_UP: u64 = 1024;

/// What a sender does with the intervals the receiver streams. Called on
/// the sender's control thread: keep it short (print, send on a channel).
pub trait LiveSink: Send + Sync {
    /// One finished interval of one flow (TCP flows carry the sender's
    /// `TCP_INFO` read when the interval arrived).
    fn interval(&self, iv: LiveInterval);
    /// The receiver does not stream intervals (an older version): only
    /// the final report will have them.
    fn unsupported(&self) {}
}

/// A [`LiveSink`] in a [`crate::SessionPlan`] (which is `Clone + Debug`).
#[derive(Clone)]
pub struct Live(pub Arc<dyn LiveSink>);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live(..)")
    }
}

/// Hand-over of one flow's finished intervals from its receive thread to
/// the session thread.
#[derive(Debug, Default)]
pub(crate) struct LiveQueue {
    /// Receiver clock at `Start` (0: not yet): interval 0 begins here when
    /// no packet arrives within the first interval.
    pub start_ns: AtomicU64,
    q: Mutex<VecDeque<LiveInterval>>,
    /// Intervals dropped because the queue was full.
    pub dropped: AtomicU64,
}

impl LiveQueue {
    fn push(&self, iv: LiveInterval) {
        // A poisoned lock only means another thread panicked mid-push; the
        // queue itself is still a valid VecDeque.
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= QUEUE_CAP {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(iv);
    }

    fn drain_into(&self, out: &mut Vec<LiveInterval>) {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        out.extend(q.drain(..));
    }
}

/// A receive thread's interval cutter for one flow.
pub(crate) struct LiveTap {
    q: Arc<LiveQueue>,
    flow_id: u16,
    len_ns: u64,
    cutter: LiveCutter,
    /// End of the current interval, receiver clock; 0 until the first
    /// packet or tick after `Start`.
    next_ns: u64,
    index: u64,
}

impl LiveTap {
    pub fn new(q: Arc<LiveQueue>, flow_id: u16, len_ns: u64) -> Self {
        LiveTap {
            q,
            flow_id,
            len_ns: len_ns.max(1),
            cutter: LiveCutter::default(),
            next_ns: 0,
            index: 0,
        }
    }

    /// Before recording a packet that arrived at `ts`: closes the intervals
    /// that ended before it. One comparison unless a boundary was crossed.
    #[inline]
    pub fn before(&mut self, ts: u64, acc: &RecvAccumulator) {
        if ts >= self.next_ns {
            self.cut_until(ts, acc);
        }
    }

    /// Closes every interval that ended at or before `now` (a receive
    /// thread calls this when its socket has been quiet, so intervals
    /// without packets are reported too).
    pub fn tick(&mut self, now: u64, acc: &RecvAccumulator) {
        if self.next_ns == 0 {
            // Nothing arrived yet: once a whole interval has passed since
            // `Start`, count from there, so a flow that gets nothing shows
            // empty intervals instead of silence.
            let start = self.q.start_ns.load(Ordering::Relaxed);
            if start == 0 || now < start.saturating_add(self.len_ns) {
                return;
            }
            self.next_ns = start.saturating_add(self.len_ns);
        }
        if now >= self.next_ns {
            self.cut_until(now, acc);
        }
    }

    fn cut_until(&mut self, t: u64, acc: &RecvAccumulator) {
        if self.next_ns == 0 {
            // Intervals count from the flow's first packet, like the
            // series in the result document (`intervals[].t_s`).
            self.next_ns = t.saturating_add(self.len_ns);
        }
        let behind = t.saturating_sub(self.next_ns) / self.len_ns;
        if behind > MAX_CATCH_UP {
            // Report what was there, then skip the silent stretch.
            self.emit(acc);
            self.index += behind;
            self.next_ns = self.next_ns.saturating_add(behind * self.len_ns);
        }
        while t >= self.next_ns {
            self.emit(acc);
        }
    }

    fn emit(&mut self, acc: &RecvAccumulator) {
        let iv = self
            .cutter
            .cut(self.flow_id, self.index, self.len_ns, acc.live_totals());
        self.q.push(iv);
        self.index += 1;
        self.next_ns = self.next_ns.saturating_add(self.len_ns);
    }

    /// At the end of the flow: closes the intervals up to the last packet
    /// and the one it is in, so the streamed intervals add up to the totals.
    pub fn finish(&mut self, acc: &RecvAccumulator) {
        if self.next_ns == 0 && acc.unique() == 0 {
            return;
        }
        let last = acc.last_arrival_ns();
        if self.next_ns == 0 || last >= self.next_ns {
            self.cut_until(last, acc);
        }
        self.emit(acc);
    }
}

/// How often the session thread looks for finished intervals: twice per
/// interval, between 10 ms and half a second.
pub(crate) fn stream_every(interval_ms: u64) -> Duration {
    Duration::from_millis((interval_ms / 2).clamp(10, 500))
}

/// `ctl.recv(idle)` for a receiver's session thread that also streams the
/// flows' finished intervals while it waits. Without queues it is exactly
/// `ctl.recv(idle)`.
pub(crate) fn recv_streaming(
    ctl: &mut Ctl,
    idle: Duration,
    every: Duration,
    queues: &[Arc<LiveQueue>],
) -> Result<Recv, EngineError> {
    if queues.is_empty() {
        return ctl.recv(idle);
    }
    let deadline = Instant::now() + idle;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Recv::Timeout);
        }
        let r = ctl.recv(left.min(every))?;
        send_pending(ctl, queues)?;
        match r {
            Recv::Timeout => continue,
            other => return Ok(other),
        }
    }
}

/// Sends every queued interval, in messages of at most [`MAX_LIVE_ITEMS`].
pub(crate) fn send_pending(ctl: &mut Ctl, queues: &[Arc<LiveQueue>]) -> Result<(), EngineError> {
    let mut items = Vec::new();
    for q in queues {
        q.drain_into(&mut items);
    }
    while !items.is_empty() {
        let rest = items.split_off(items.len().min(MAX_LIVE_ITEMS));
        ctl.send(&ControlMsg::Intervals { items })?;
        items = rest;
    }
    Ok(())
}

/// The sender's end: passes streamed intervals to the plan's sink, and
/// keeps each TCP flow's `TCP_INFO` per interval for the result document.
pub(crate) struct Forward {
    /// Where the intervals go (None: streamed only for the TCP figures).
    pub sink: Option<Live>,
    /// Flows in the session (ids 1..=flows).
    pub flows: usize,
    /// `TCP_INFO` read per interval: (flow index, interval index, info).
    /// Locked once per interval, never per packet; bounded.
    tcp_seen: Mutex<Vec<(usize, u64, TcpInfo)>>,
}

/// TCP_INFO samples kept for the result document, over all flows.
const MAX_TCP_SAMPLES: usize = 1 << 18;

impl Forward {
    pub fn new(sink: Option<Live>, flows: usize) -> Self {
        Forward {
            sink,
            flows,
            tcp_seen: Mutex::new(Vec::new()),
        }
    }

    /// Hands over the plausible intervals of `items`, each TCP flow's with
    /// the sender's `TCP_INFO` of its socket now (`tcp[i]`: flow i + 1).
    pub fn deliver(&self, items: Vec<LiveInterval>, tcp: &[Option<std::net::TcpStream>]) {
        for mut iv in items {
            if !plausible(&iv, self.flows) {
                continue;
            }
            let i = usize::from(iv.flow_id) - 1;
            if let Some(Some(s)) = tcp.get(i) {
                iv.tcp = crate::sys::tcp_info(s);
                if let Some(t) = iv.tcp {
                    let mut seen = self.tcp_seen.lock().unwrap_or_else(|e| e.into_inner());
                    if seen.len() < MAX_TCP_SAMPLES {
                        seen.push((i, iv.index, t));
                    }
                }
            }
            if let Some(sink) = &self.sink {
                sink.0.interval(iv);
            }
        }
    }

    /// Puts the `TCP_INFO` read for each streamed interval into the
    /// result's intervals of the same flow and index (both count from the
    /// flow's first arrival).
    pub fn fill_tcp(&self, flows: &mut [FlowResult]) {
        let seen = self.tcp_seen.lock().unwrap_or_else(|e| e.into_inner());
        for &(i, index, t) in seen.iter() {
            let slot = flows.get_mut(i).and_then(|f| {
                usize::try_from(index)
                    .ok()
                    .and_then(|k| f.intervals.get_mut(k))
            });
            if let Some(iv) = slot {
                iv.tcp = Some(t);
            }
        }
    }
}

/// The sender's checks on streamed intervals: a flow the session has, and
/// figures that are numbers. Anything else is dropped (the final report is
/// checked on its own).
pub(crate) fn plausible(iv: &LiveInterval, flows: usize) -> bool {
    let finite = |x: f64| x.is_finite() && x >= 0.0;
    iv.flow_id >= 1
        && usize::from(iv.flow_id) <= flows
        && finite(iv.t_s)
        && finite(iv.len_s)
        && finite(iv.throughput_bps)
        && iv.delay_mean_s.is_none_or(|d| d.is_finite())
        && iv.jitter_s.is_none_or(finite)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_stats::{FlowConfig, IpVersion, Transport};

    fn acc() -> RecvAccumulator {
        RecvAccumulator::new(FlowConfig {
            transport: Transport::Udp,
            ip: IpVersion::V4,
            mtu: 1500,
            interval_ns: None,
        })
    }

    fn drain(q: &LiveQueue) -> Vec<LiveInterval> {
        let mut v = Vec::new();
        q.drain_into(&mut v);
        v
    }

    #[test]
    fn tap_cuts_at_boundaries_and_adds_up() {
        let q = Arc::new(LiveQueue::default());
        let start = 1_000_000_000_000u64;
        q.start_ns.store(start, Ordering::Relaxed);
        let ms = 1_000_000u64;
        let mut tap = LiveTap::new(q.clone(), 3, 100 * ms);
        let mut a = acc();
        // Packets at 30, 60 ms (interval 0), 150 ms (1), none in 2, 350 (3);
        // seq 3 is missing, seq 2 comes after 4.
        for (seq, at, bytes) in [(0u32, 30, 100), (1, 60, 100), (4, 150, 200), (2, 350, 100)] {
            let ts = start + at * ms;
            tap.before(ts, &a);
            a.record(seq, 5 * ms as i64, ts, bytes);
        }
        let v = drain(&q);
        assert_eq!(v.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(v[0].bytes, 200);
        assert_eq!((v[1].bytes, v[1].lost), (200, 2));
        assert_eq!((v[2].packets, v[2].delay_mean_s), (0, None));
        // A quiet socket: the tick closes nothing before the boundary...
        tap.tick(start + 399 * ms, &a);
        assert!(drain(&q).is_empty());
        // ...and the end closes the interval of the last packet.
        tap.finish(&a);
        let last = drain(&q);
        assert_eq!(last.len(), 1);
        assert_eq!((last[0].index, last[0].bytes), (3, 100));
        assert!((last[0].t_s - 0.3).abs() < 1e-9);
        assert_eq!(200 + 200 + 100, a.summary(None).counts.bytes);
    }

    #[test]
    fn long_silence_skips_ahead_and_queue_is_bounded() {
        let q = Arc::new(LiveQueue::default());
        q.start_ns.store(1, Ordering::Relaxed);
        let mut tap = LiveTap::new(q.clone(), 1, 1);
        let mut a = acc();
        tap.before(1, &a);
        a.record(0, 1, 1, 100);
        tap.tick(u64::MAX / 2, &a);
        let v = drain(&q);
        assert!(v.len() <= QUEUE_CAP);
        assert_eq!(v.iter().map(|i| i.bytes).sum::<u64>(), 100);
        assert!(q.dropped.load(Ordering::Relaxed) == 0);
        for _ in 0..QUEUE_CAP + 5 {
            q.push(LiveInterval::default());
        }
        assert_eq!(drain(&q).len(), QUEUE_CAP);
        assert_eq!(q.dropped.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn implausible_intervals_are_refused() {
        let ok = LiveInterval {
            flow_id: 2,
            ..Default::default()
        };
        assert!(plausible(&ok, 2));
        assert!(!plausible(&ok, 1));
        assert!(!plausible(
            &LiveInterval {
                throughput_bps: f64::NAN,
                ..ok.clone()
            },
            2
        ));
        assert!(!plausible(
            &LiveInterval {
                flow_id: 0,
                ..ok.clone()
            },
            2
        ));
    }
}
