//! Per-flow accumulators: what the measuring end learns from every probe
//! (delay, three jitters, loss and loss bursts, duplicates, reordering,
//! throughput at four layers, per-interval series) and what the sender
//! learns about its own schedule.
//!
//! Both are fed from the engine's hot path, so `record*` is O(1) with no
//! allocation in the common case: delays go into sparse log-grid histograms
//! ([`crate::hist`], 0.79 % buckets) instead of sample vectors, and the set of received sequence numbers is a sorted deque
//! of received ranges that only grows when a gap opens, up to
//! [`MAX_GAPS`] (then the oldest gap is forgotten, its loss kept). All the heavier
//! arithmetic happens once, in `summary`.

use crate::dist::{DIST_BITS, DIST_MAX_BUCKETS};
use crate::framing::{tcp_stream, udp_datagram, LayerBytes};
use crate::hist::LogHist;
use crate::seq::SeqUnwrapper;
use crate::{IpVersion, Transport};
use std::collections::VecDeque;
pub use wirebench_schema::flow::{
    loss_text, DelayStats, Frames, Interval, Jitter, LossBursts, Quantiles, RecvCounts,
    RecvSummary, SendSummary, Throughput,
};

/// Default cap on per-interval buckets: a bogus arrival time far in the
/// future must not make the interval vector allocate gigabytes. 2^18
/// intervals is over 4 minutes at 1 ms or 3 days at 1 s, about 13 MB of
/// buckets; a receiver lowers it per flow to keep a whole session within
/// its budget ([`RecvAccumulator::with_max_intervals`]).
pub const MAX_INTERVALS: usize = 1 << 18;

const NS: f64 = 1e9;

/// Most sequence gaps one flow remembers (32 bytes each: 1 MiB). A sender
/// that skips every other number would otherwise grow the received set by
/// a range per datagram, and each late arrival would shift half of it.
/// Past the cap the oldest gap is forgotten: its loss stays counted (and
/// charged to its interval), a packet that arrives in it later counts as
/// `beyond_memory`, and the result says so.
pub const MAX_GAPS: usize = 1 << 15;

/// (t_last − t_first) × N/(N−1) in seconds: N packets sent at a constant
/// rate r span (N−1)/r, so this makes a constant-rate flow read exactly r.
/// Multiplying before dividing keeps round numbers exact in f64.
fn span_corrected_s(span_ns: u64, n: u64) -> f64 {
    span_ns as f64 * n as f64 / (n - 1) as f64 / NS
}

/// What the statistics need to know about a flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowConfig {
    /// UDP or TCP: decides the framing model.
    pub transport: Transport,
    /// IPv4 or IPv6: decides the IP header size.
    pub ip: IpVersion,
    /// MTU of the path (the framing model's M).
    pub mtu: u32,
    /// Length of one report interval in ns; None: no interval series.
    pub interval_ns: Option<u64>,
}

/// Bits per second at each layer of `lb` over `duration_s` (zero for an
/// empty or non-finite span).
fn throughput(lb: &LayerBytes, duration_s: f64) -> Throughput {
    if duration_s <= 0.0 || !duration_s.is_finite() {
        return Throughput::default();
    }
    let bps = |b: u64| b as f64 * 8.0 / duration_s;
    Throughput {
        payload: bps(lb.payload),
        ip: bps(lb.ip),
        ethernet: bps(lb.ethernet),
        wire: bps(lb.wire),
    }
}

/// A run of received sequence numbers, `start..=end`. `tag` is the interval
/// in which the gap just before this range became visible; losses in that
/// gap are charged to it.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u64,
    end: u64,
    tag: u32,
    /// Packets counted as reordered because this range lay above them when
    /// they arrived (it held the next higher number received): if it turns
    /// out to lie beyond what the sender sent, they were "reordered" only
    /// against forged numbers.
    reorders: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct IntervalAcc {
    packets: u64,
    bytes: u64,
    delay_sum_ns: f64,
    ipdv_sum_ns: f64,
    ipdv_n: u64,
    lost: u64,
}

/// Receive-side accumulator of one flow.
#[derive(Debug, Clone)]
pub struct RecvAccumulator {
    cfg: FlowConfig,
    unwrapper: SeqUnwrapper,
    ranges: VecDeque<Range>,
    /// Most ranges kept ([`MAX_GAPS`] + 1 unless a test lowers it).
    max_ranges: usize,
    /// Gaps forgotten at the bottom of the set: count, total and longest.
    forgotten: (u64, u64, u64),
    /// Arrivals at or below the forgotten horizon.
    beyond_memory: u64,
    packets: u64,
    unique: u64,
    duplicates: u64,
    reordered: u64,
    layer: LayerBytes,
    fragmented: u64,
    origin_ns: u64,
    first_ns: u64,
    last_ns: u64,
    /// min(arrival − delay): the earliest departure, receiver clock.
    first_dep_ns: i64,
    delay_min: i64,
    delay_max: i64,
    delay_sum: i128,
    // Welford running mean / sum of squared deviations (ns), for stddev.
    w_mean: f64,
    w_m2: f64,
    hist: LogHist,
    /// |IPDV| values, on the same grid.
    ipdv_hist: LogHist,
    negative: u64,
    prev_delay: Option<i64>,
    ipdv_sum: u128,
    ipdv_n: u64,
    rfc3550_ns: f64,
    intervals: Vec<IntervalAcc>,
    /// Most interval buckets this flow may allocate (≤ [`MAX_INTERVALS`]).
    max_intervals: usize,
}

impl RecvAccumulator {
    /// An accumulator whose interval series stops growing at `max` buckets
    /// (capped at [`MAX_INTERVALS`]); arrivals beyond it still count in
    /// every other statistic.
    pub fn with_max_intervals(cfg: FlowConfig, max: usize) -> Self {
        Self {
            max_intervals: max.clamp(1, MAX_INTERVALS),
            ..Self::new(cfg)
        }
    }

    /// An empty accumulator for a flow of this configuration.
    pub fn new(cfg: FlowConfig) -> Self {
        Self {
            cfg,
            unwrapper: SeqUnwrapper::new(),
            ranges: VecDeque::with_capacity(16),
            max_ranges: MAX_GAPS + 1,
            forgotten: (0, 0, 0),
            beyond_memory: 0,
            packets: 0,
            unique: 0,
            duplicates: 0,
            reordered: 0,
            layer: LayerBytes::default(),
            fragmented: 0,
            origin_ns: 0,
            first_ns: 0,
            last_ns: 0,
            first_dep_ns: 0,
            delay_min: 0,
            delay_max: 0,
            delay_sum: 0,
            w_mean: 0.0,
            w_m2: 0.0,
            hist: LogHist::new(),
            ipdv_hist: LogHist::new(),
            negative: 0,
            prev_delay: None,
            ipdv_sum: 0,
            ipdv_n: 0,
            rfc3550_ns: 0.0,
            intervals: Vec::new(),
            max_intervals: MAX_INTERVALS,
        }
    }

    /// Interval index of an arrival, None when intervals are off or the
    /// arrival lies beyond the bucket cap.
    fn interval_of(&self, arrival_ns: u64) -> Option<usize> {
        let len = self.cfg.interval_ns?.max(1);
        let idx = arrival_ns.saturating_sub(self.origin_ns) / len;
        usize::try_from(idx)
            .ok()
            .filter(|&i| i < self.max_intervals)
    }

    /// The same accumulator remembering at most `gaps` sequence gaps (at
    /// least 1), for tests of the cap.
    pub fn with_max_gaps(mut self, gaps: usize) -> Self {
        self.max_ranges = gaps.max(1) + 1;
        self
    }

    /// Forgets the lowest gap while the set holds more ranges than allowed:
    /// the two lowest ranges become one, the gap between them stays lost.
    fn forget_old_gaps(&mut self) {
        while self.ranges.len() > self.max_ranges {
            let Some(low) = self.ranges.pop_front() else {
                return;
            };
            let Some(next) = self.ranges.front_mut() else {
                return;
            };
            let gap = next.start - low.end - 1;
            let (n, total, longest) = &mut self.forgotten;
            *n += 1;
            *total = total.saturating_add(gap);
            *longest = (*longest).max(gap);
            if let Some(a) = self.intervals.get_mut(next.tag as usize) {
                a.lost += gap;
            }
            next.start = low.start;
            next.tag = low.tag;
            next.reorders += low.reorders;
        }
    }

    /// Inserts `s` into the received set. Returns (new, reordered); a
    /// number at or below a forgotten gap is neither (counted apart).
    fn insert_seq(&mut self, s: u64, tag: u32) -> (bool, bool) {
        if self.forgotten.0 > 0 && self.ranges.front().is_some_and(|r| s <= r.end) {
            self.beyond_memory += 1;
            return (false, false);
        }
        let Some(last) = self.ranges.back_mut() else {
            self.ranges.push_back(Range {
                start: s,
                end: s,
                tag,
                reorders: 0,
            });
            return (true, false);
        };
        // Common case: the next packet in order.
        if s == last.end.wrapping_add(1) && s > last.end {
            last.end = s;
            return (true, false);
        }
        if s > last.end {
            self.ranges.push_back(Range {
                start: s,
                end: s,
                tag,
                reorders: 0,
            });
            self.forget_old_gaps();
            return (true, false);
        }
        // s is at or below the highest seen: duplicate or reordered.
        let idx = self.ranges.partition_point(|r| r.start <= s);
        if idx > 0 && self.ranges[idx - 1].end >= s {
            return (false, false);
        }
        let left_adj = idx > 0 && self.ranges[idx - 1].end + 1 == s;
        // idx < len here: s is below the start of the last range.
        let right_adj = self.ranges[idx].start == s + 1;
        // The next higher number received is in ranges[idx]: charge it.
        self.ranges[idx].reorders += 1;
        match (left_adj, right_adj) {
            (true, true) => {
                // idx < len (above), so the range is there.
                if let Some(right) = self.ranges.remove(idx) {
                    self.ranges[idx - 1].end = right.end;
                    self.ranges[idx - 1].reorders += right.reorders;
                }
            }
            (true, false) => self.ranges[idx - 1].end = s,
            (false, true) => self.ranges[idx].start = s,
            (false, false) => {
                // The gap now split in two was revealed by the range above it.
                let tag = self.ranges[idx].tag;
                // (Its charge above stays with it, not with the new range.)
                self.ranges.insert(
                    idx,
                    Range {
                        start: s,
                        end: s,
                        tag,
                        reorders: 0,
                    },
                );
                self.forget_old_gaps();
            }
        }
        (true, true)
    }

    /// The 64-bit sequence number `seq32` would be recorded as, without
    /// recording it (so a caller can refuse an implausible one before it
    /// moves the unwrapping window).
    pub fn peek_seq(&self, seq32: u32) -> u64 {
        self.unwrapper.peek(seq32)
    }

    /// One received probe. `delay_ns` may be negative (clock offset);
    /// `arrival_ns` is the measuring host's clock; `payload_bytes` is the
    /// transport payload including the probe header.
    pub fn record(&mut self, seq32: u32, delay_ns: i64, arrival_ns: u64, payload_bytes: u32) {
        self.packets += 1;
        if self.unique == 0 {
            self.origin_ns = arrival_ns;
            self.first_ns = arrival_ns;
            self.last_ns = arrival_ns;
        }
        let iv = self.interval_of(arrival_ns);
        let tag = iv.unwrap_or(self.max_intervals - 1) as u32;
        let s = self.unwrapper.unwrap(seq32);
        let before = self.beyond_memory;
        let (new, reordered) = self.insert_seq(s, tag);
        if !new {
            if self.beyond_memory == before {
                self.duplicates += 1;
            }
            return;
        }
        if reordered {
            self.reordered += 1;
        }
        self.unique += 1;
        self.first_ns = self.first_ns.min(arrival_ns);
        self.last_ns = self.last_ns.max(arrival_ns);

        if self.cfg.transport.is_datagram() {
            let lb = udp_datagram(payload_bytes, self.cfg.mtu, self.cfg.ip);
            if lb.frames > 1 {
                self.fragmented += 1;
            }
            self.layer.add(&lb);
        } else {
            self.layer.payload = self.layer.payload.saturating_add(payload_bytes.into());
        }

        // Delay.
        let dep = (arrival_ns as i64).saturating_sub(delay_ns);
        if self.unique == 1 {
            self.delay_min = delay_ns;
            self.delay_max = delay_ns;
            self.first_dep_ns = dep;
        } else {
            self.first_dep_ns = self.first_dep_ns.min(dep);
            self.delay_min = self.delay_min.min(delay_ns);
            self.delay_max = self.delay_max.max(delay_ns);
        }
        self.delay_sum += i128::from(delay_ns);
        let d = delay_ns as f64;
        let dm = d - self.w_mean;
        self.w_mean += dm / self.unique as f64;
        self.w_m2 += dm * (d - self.w_mean);
        self.hist.record(delay_ns);
        if delay_ns < 0 {
            self.negative += 1;
        }

        // Jitter over consecutive received packets in arrival order.
        let ipdv = self.prev_delay.map(|p| delay_ns.abs_diff(p));
        if let Some(x) = ipdv {
            self.ipdv_sum += u128::from(x);
            self.ipdv_hist.record_u64(x);
            self.ipdv_n += 1;
            self.rfc3550_ns += (x as f64 - self.rfc3550_ns) / 16.0;
        }
        self.prev_delay = Some(delay_ns);

        if let Some(i) = iv {
            if self.intervals.len() <= i {
                self.intervals.resize(i + 1, IntervalAcc::default());
            }
            let a = &mut self.intervals[i];
            a.packets += 1;
            a.bytes = a.bytes.saturating_add(payload_bytes.into());
            a.delay_sum_ns += d;
            if let Some(x) = ipdv {
                a.ipdv_sum_ns += x as f64;
                a.ipdv_n += 1;
            }
        }
    }

    /// Running totals for live intervals ([`crate::live`]): O(1), no
    /// allocation, so a receive thread can read them once per interval.
    pub fn live_totals(&self) -> crate::live::LiveTotals {
        crate::live::LiveTotals {
            unique: self.unique,
            bytes: self.layer.payload,
            delay_sum_ns: self.delay_sum,
            ipdv_sum_ns: self.ipdv_sum,
            ipdv_n: self.ipdv_n,
            expected: self.ranges.back().map_or(0, |r| r.end.saturating_add(1)),
        }
    }

    /// Latest arrival recorded (measuring host's clock; 0 before the first).
    pub fn last_arrival_ns(&self) -> u64 {
        self.last_ns
    }

    /// Number of distinct sequence numbers seen so far.
    pub fn unique(&self) -> u64 {
        self.unique
    }

    /// Total packets recorded, duplicates included.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Summary so far. `sent`: packets the sender reports as sent (sequence
    /// numbers 0..sent), then lost = sent − unique and missing numbers after
    /// the highest one received count as a final loss burst; numbers at or
    /// beyond `sent` were never sent: they are `forged`, not received, not
    /// losses and not a cause of reordering. None: lost is counted from the
    /// gaps in 0..=highest received.
    pub fn summary(&self, sent: Option<u64>) -> RecvSummary {
        let mut intervals: Vec<IntervalAcc> = self.intervals.clone();
        let charge = |tag: u32, n: u64, intervals: &mut Vec<IntervalAcc>| {
            if let Some(a) = intervals.get_mut(tag as usize) {
                a.lost += n;
            }
        };

        // Gaps = loss bursts.
        let (mut bursts, mut burst_total, mut burst_max) = self.forgotten;
        let mut add_burst = |len: u64| {
            if len > 0 {
                bursts += 1;
                burst_total = burst_total.saturating_add(len);
                burst_max = burst_max.max(len);
            }
        };
        let mut next = 0u64;
        // Distinct numbers at or beyond `sent`, and the reorderings they
        // caused by being the highest number seen.
        let mut forged = 0u64;
        let mut forged_reorders = 0u64;
        for r in &self.ranges {
            let end = match sent {
                Some(s) if r.start >= s => {
                    forged += r.end - r.start + 1;
                    forged_reorders += r.reorders;
                    continue;
                }
                Some(s) if r.end >= s => {
                    forged += r.end - (s - 1);
                    s - 1
                }
                _ => r.end,
            };
            let gap = r.start - next;
            add_burst(gap);
            if gap > 0 {
                charge(r.tag, gap, &mut intervals);
            }
            next = end.saturating_add(1);
        }
        let unique = self.unique - forged;
        let highest_plus1 = next;
        if let Some(s) = sent {
            if s > next {
                add_burst(s - next);
                let last = intervals.len().saturating_sub(1) as u32;
                charge(last, s - next, &mut intervals);
            }
        }

        let (lost, expected) = match sent {
            Some(s) => (s.saturating_sub(unique), s),
            None => (highest_plus1.saturating_sub(unique), highest_plus1),
        };
        let loss_ratio = if expected > 0 {
            lost as f64 / expected as f64
        } else {
            0.0
        };

        let n = self.unique;
        let duration_s = match (n >= 2, self.cfg.transport) {
            (false, _) => 0.0,
            (true, Transport::Udp | Transport::Icmp) => {
                span_corrected_s(self.last_ns - self.first_ns, n)
            }
            (true, Transport::Tcp) => {
                let window = (self.last_ns as i64).saturating_sub(self.first_dep_ns);
                (window.max(0) as f64 / NS).max(span_corrected_s(self.last_ns - self.first_ns, n))
            }
        };

        let layer = match self.cfg.transport {
            Transport::Udp | Transport::Icmp => self.layer,
            Transport::Tcp => tcp_stream(self.layer.payload, self.cfg.mtu, self.cfg.ip),
        };
        let frames = Frames {
            per_datagram: if n > 0 {
                layer.frames as f64 / n as f64
            } else {
                0.0
            },
            fragmented: self.fragmented,
        };

        let s = |ns: f64| ns / NS;
        let pct = |q: f64| -> f64 {
            self.hist
                .quantile(q)
                .map(|v| v.clamp(self.delay_min, self.delay_max) as f64 / NS)
                .unwrap_or(0.0)
        };
        let delay_s = if n > 0 {
            DelayStats {
                min: s(self.delay_min as f64),
                mean: s((self.delay_sum as f64) / n as f64),
                max: s(self.delay_max as f64),
                stddev: s((self.w_m2 / n as f64).max(0.0).sqrt()),
                p50: pct(0.5),
                p90: pct(0.9),
                p99: pct(0.99),
                p999: pct(0.999),
            }
        } else {
            DelayStats::default()
        };
        let jitter_s = Jitter {
            mean_abs_ipdv: if self.ipdv_n > 0 {
                s(self.ipdv_sum as f64 / self.ipdv_n as f64)
            } else {
                0.0
            },
            rfc3550: s(self.rfc3550_ns),
            pdv_p999: if n > 0 {
                delay_s.p999 - delay_s.min
            } else {
                0.0
            },
        };

        let len_s = self.cfg.interval_ns.unwrap_or(0) as f64 / NS;
        let intervals = intervals
            .iter()
            .enumerate()
            .map(|(i, a)| Interval {
                t_s: i as f64 * len_s,
                packets: a.packets,
                throughput_bps: if len_s > 0.0 {
                    a.bytes as f64 * 8.0 / len_s
                } else {
                    0.0
                },
                delay_mean_s: if a.packets > 0 {
                    s(a.delay_sum_ns / a.packets as f64)
                } else {
                    0.0
                },
                jitter_s: if a.ipdv_n > 0 {
                    s(a.ipdv_sum_ns / a.ipdv_n as f64)
                } else {
                    0.0
                },
                lost: a.lost,
                tcp: None,
            })
            .collect();

        RecvSummary {
            counts: RecvCounts {
                packets: self.packets - forged,
                unique,
                bytes: layer.payload,
                lost: Some(lost),
                loss_ratio: Some(loss_ratio),
                duplicates: self.duplicates,
                reordered: self.reordered - forged_reorders,
                forged,
                loss_bursts: LossBursts {
                    count: bursts,
                    mean_len: if bursts > 0 {
                        burst_total as f64 / bursts as f64
                    } else {
                        0.0
                    },
                    max_len: burst_max,
                },
                negative_delays: self.negative,
                beyond_memory: self.beyond_memory,
            },
            first_arrival_ns: self.first_ns,
            last_arrival_ns: self.last_ns,
            first_departure_ns: self.first_dep_ns,
            duration_s,
            throughput_bps: throughput(&layer, duration_s),
            frames,
            delay_s,
            jitter_s,
            late_share: None,
            intervals,
            delay_hist: (n > 0).then(|| {
                let mut d = self.hist.to_dist(DIST_BITS);
                d.fit(DIST_MAX_BUCKETS);
                d
            }),
            ipdv_hist: (self.ipdv_n > 0).then(|| {
                let mut d = self.ipdv_hist.to_dist(DIST_BITS);
                d.fit(DIST_MAX_BUCKETS);
                d
            }),
        }
    }

    /// Share of the unique received packets whose delay exceeds the minimum
    /// delay by more than `depth_ns`: the packets a fixed playout buffer of
    /// that depth, anchored at the fastest packet, plays too late (a VoIP
    /// receiver drops them like lost ones). Offset-free, since the minimum
    /// moves with the clock offset exactly as every delay does. Resolution is
    /// the histogram's (buckets ≤ 0.79 % wide). 0 when nothing was received.
    pub fn late_share(&self, depth_ns: u64) -> f64 {
        let n = self.hist.len();
        if n == 0 {
            return 0.0;
        }
        let depth = i64::try_from(depth_ns).unwrap_or(i64::MAX);
        let threshold = self.delay_min.saturating_add(depth);
        self.hist.count_above(threshold) as f64 / n as f64
    }
}

/// Send-side accumulator of one flow.
#[derive(Debug, Clone)]
pub struct SendAccumulator {
    cfg: FlowConfig,
    packets: u64,
    layer: LayerBytes,
    first_ns: u64,
    last_ns: u64,
    not_sent: u64,
    /// Schedule error, ns, on the delays' grid (buckets ≤ 0.79 % wide):
    /// only the buckets used are stored, so a flow of few packets costs
    /// a few hundred bytes (a dense HDR histogram is a fixed 12.5 KiB,
    /// most of a sender's memory per flow at thousands of flows).
    err: LogHist,
    err_max: u64,
}

impl SendAccumulator {
    /// An empty accumulator for a flow of this configuration.
    pub fn new(cfg: FlowConfig) -> Self {
        Self {
            cfg,
            packets: 0,
            layer: LayerBytes::default(),
            first_ns: 0,
            last_ns: 0,
            not_sent: 0,
            err: LogHist::new(),
            err_max: 0,
        }
    }

    /// One packet sent: `scheduled_ns` is when the absolute schedule wanted
    /// it, `actual_ns` when it went.
    pub fn record_sent(&mut self, scheduled_ns: u64, actual_ns: u64, payload_bytes: u32) {
        if self.packets == 0 {
            self.first_ns = actual_ns;
            self.last_ns = actual_ns;
        } else {
            self.first_ns = self.first_ns.min(actual_ns);
            self.last_ns = self.last_ns.max(actual_ns);
        }
        self.packets += 1;
        if self.cfg.transport.is_datagram() {
            self.layer
                .add(&udp_datagram(payload_bytes, self.cfg.mtu, self.cfg.ip));
        } else {
            self.layer.payload = self.layer.payload.saturating_add(payload_bytes.into());
        }
        let e = actual_ns.saturating_sub(scheduled_ns);
        self.err_max = self.err_max.max(e);
        self.err.record_u64(e);
    }

    /// Packets the schedule wanted but that could not be sent (send error,
    /// or dropped to keep the schedule).
    pub fn record_not_sent(&mut self, count: u64) {
        self.not_sent = self.not_sent.saturating_add(count);
    }

    /// Packets recorded as sent so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// The flow's send-side figures so far.
    pub fn summary(&self) -> SendSummary {
        let n = self.packets;
        let duration_s = if n >= 2 {
            span_corrected_s(self.last_ns - self.first_ns, n)
        } else {
            0.0
        };
        let layer = match self.cfg.transport {
            Transport::Udp | Transport::Icmp => self.layer,
            Transport::Tcp => tcp_stream(self.layer.payload, self.cfg.mtu, self.cfg.ip),
        };
        let q = |p: f64| -> f64 {
            if n == 0 {
                0.0
            } else {
                let v = self.err.quantile(p).unwrap_or(0).max(0) as u64;
                v.min(self.err_max) as f64 / NS
            }
        };
        SendSummary {
            packets: n,
            bytes: layer.payload,
            duration_s,
            rate_pps: if duration_s > 0.0 {
                n as f64 / duration_s
            } else {
                0.0
            },
            not_sent: self.not_sent,
            schedule_error_s: Quantiles {
                p50: q(0.5),
                p99: q(0.99),
                max: self.err_max as f64 / NS,
            },
            throughput_bps: throughput(&layer, duration_s),
            clamped_draws: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: i64 = 1_000_000;

    fn udp4(interval_ns: Option<u64>) -> FlowConfig {
        FlowConfig {
            transport: Transport::Udp,
            ip: IpVersion::V4,
            mtu: 1500,
            interval_ns,
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// Feeds (seq, delay) pairs arriving 1 ms apart, 100 B each.
    fn feed(acc: &mut RecvAccumulator, pkts: &[(u32, i64)]) {
        for (i, &(s, d)) in pkts.iter().enumerate() {
            acc.record(s, d, 1_000_000_000 + i as u64 * MS as u64, 100);
        }
    }

    #[test]
    fn a_million_gaps_stay_within_the_gap_memory_and_are_all_lost() {
        // Every other number: one gap per datagram.
        let mut acc = RecvAccumulator::new(udp4(None));
        let n: u32 = 1_000_000;
        for k in 0..=n {
            acc.record(2 * k, MS, 1_000_000_000 + u64::from(k) * 1_000, 100);
            assert!(acc.ranges.len() <= MAX_GAPS + 1);
        }
        assert!(acc.ranges.capacity() <= 2 * (MAX_GAPS + 1));
        let s = acc.summary(Some(2 * u64::from(n) + 1));
        assert_eq!(s.counts.unique, u64::from(n) + 1);
        assert_eq!(s.counts.lost, Some(u64::from(n)));
        assert_eq!(s.counts.loss_bursts.count, u64::from(n));
        assert_eq!(s.counts.loss_bursts.max_len, 1);
        assert_eq!(s.counts.beyond_memory, 0);
    }

    #[test]
    fn a_late_packet_below_the_gap_memory_counts_apart_and_stays_lost() {
        // Gaps at 1, 3, 5, 7; two remembered.
        let mut acc = RecvAccumulator::new(udp4(Some(4 * MS as u64))).with_max_gaps(2);
        feed(
            &mut acc,
            &[
                (0, MS),
                (2, MS),
                (4, MS),
                (6, MS),
                (8, MS),
                (1, MS),
                (7, MS),
            ],
        );
        let s = acc.summary(Some(9));
        // 1 fell below the memory: neither received nor duplicate.
        assert_eq!(s.counts.beyond_memory, 1);
        assert_eq!(s.counts.duplicates, 0);
        // 7 filled a remembered gap: received, reordered.
        assert_eq!(s.counts.unique, 6);
        assert_eq!(s.counts.reordered, 1);
        assert_eq!(s.counts.lost, Some(3));
        assert_eq!(s.counts.loss_bursts.count, 3);
        // Each lost number is charged once, to the interval that showed it.
        let charged: u64 = s.intervals.iter().map(|i| i.lost).sum();
        assert_eq!(charged, 3);
    }

    #[test]
    fn forgetting_gaps_changes_no_count_when_nothing_comes_late() {
        let seqs: Vec<(u32, i64)> = (0..500u32)
            .filter(|k| k % 3 != 1 && k % 7 != 2)
            .map(|k| (k, MS))
            .collect();
        let mut full = RecvAccumulator::new(udp4(Some(10 * MS as u64)));
        let mut capped = RecvAccumulator::new(udp4(Some(10 * MS as u64))).with_max_gaps(5);
        feed(&mut full, &seqs);
        feed(&mut capped, &seqs);
        let (a, b) = (full.summary(Some(520)), capped.summary(Some(520)));
        assert_eq!(a.counts, b.counts);
        let lost = |s: &RecvSummary| s.intervals.iter().map(|i| i.lost).collect::<Vec<_>>();
        assert_eq!(lost(&a), lost(&b));
    }

    #[test]
    fn three_jitters_and_delay_on_a_short_sequence() {
        // Delays 10 12 11 15 15 ms in arrival order.
        // |ΔD| = 2 1 4 0 -> D-ITG mean = 7/4 = 1.75 ms.
        // RFC 3550: J1 = 2/16 = 0.125; J2 = 0.125 + (1-0.125)/16 = 0.1796875;
        //   J3 = 0.1796875 + (4-0.1796875)/16 = 0.41845703125;
        //   J4 = 0.41845703125 + (0-0.41845703125)/16 = 0.392303466796875 ms.
        // PDV: p99.9 = rank ceil(4.995) = 5 -> 15 ms; min 10 -> 5 ms.
        // mean 12.6 ms; population sd = sqrt(21.2/5) = 2.0591260 ms.
        let mut acc = RecvAccumulator::new(udp4(None));
        feed(
            &mut acc,
            &[
                (0, 10 * MS),
                (1, 12 * MS),
                (2, 11 * MS),
                (3, 15 * MS),
                (4, 15 * MS),
            ],
        );
        let s = acc.summary(Some(5));
        assert!(close(s.jitter_s.mean_abs_ipdv, 1.75e-3, 1e-15));
        assert!(close(s.jitter_s.rfc3550, 0.392_303_466_796_875e-3, 1e-15));
        assert!(close(s.jitter_s.pdv_p999, 5e-3, 1e-15));
        assert!(close(s.delay_s.min, 10e-3, 0.0));
        assert!(close(s.delay_s.max, 15e-3, 0.0));
        assert!(close(s.delay_s.mean, 12.6e-3, 1e-15));
        assert!(close(s.delay_s.stddev, 2.059_126_0e-3, 1e-9));
        // p50 = rank 3 = 12 ms, within the grid's 2^-7 (0.79 %).
        assert!(
            close(s.delay_s.p50, 12e-3, 12e-3 / 128.0),
            "{}",
            s.delay_s.p50
        );
        // p90 = rank ceil(4.5) = 5 = 15 ms (clamped to the exact max).
        assert!(close(s.delay_s.p90, 15e-3, 0.0));
        assert_eq!(
            (
                s.counts.lost.unwrap(),
                s.counts.duplicates,
                s.counts.reordered
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn late_share_counts_packets_beyond_min_plus_depth() {
        // Delays 10, 12, 30, 75, 80 ms: min 10 ms. A 60 ms buffer plays
        // everything up to 70 ms, so 75 and 80 are late: 2/5. A 0 buffer:
        // all but the fastest, 4/5. A 100 ms buffer: none.
        let mut a = RecvAccumulator::new(udp4(None));
        for (i, d) in [10, 12, 30, 75, 80].iter().enumerate() {
            a.record(i as u32, d * MS, i as u64 * 20 * MS as u64, 100);
        }
        assert!((a.late_share(60 * MS as u64) - 0.4).abs() < 1e-12);
        assert!((a.late_share(0) - 0.8).abs() < 1e-12);
        assert_eq!(a.late_share(100 * MS as u64), 0.0);
        // A clock offset moves every delay and the minimum alike.
        let mut b = RecvAccumulator::new(udp4(None));
        for (i, d) in [10, 12, 30, 75, 80].iter().enumerate() {
            b.record(i as u32, d * MS - 500 * MS, i as u64 * 20 * MS as u64, 100);
        }
        assert!((b.late_share(60 * MS as u64) - 0.4).abs() < 1e-12);
        assert_eq!(RecvAccumulator::new(udp4(None)).late_share(0), 0.0);
        assert_eq!(a.summary(None).late_share, None);
    }

    #[test]
    fn negative_delays_shift_but_pdv_does_not() {
        // The same shape as above, offset by -20 ms: every delay negative.
        let mut a = RecvAccumulator::new(udp4(None));
        let mut b = RecvAccumulator::new(udp4(None));
        let shape = [10, 12, 11, 15, 15, 13, 14, 10, 11, 12];
        for (i, &d) in shape.iter().enumerate() {
            a.record(i as u32, d * MS, i as u64 * 1000, 64);
            b.record(i as u32, (d - 20) * MS, i as u64 * 1000, 64);
        }
        let (sa, sb) = (a.summary(None), b.summary(None));
        assert_eq!(sb.counts.negative_delays, 10);
        assert_eq!(sa.counts.negative_delays, 0);
        assert!(close(sb.delay_s.min, -10e-3, 0.0));
        assert!(close(sb.delay_s.mean, sa.delay_s.mean - 20e-3, 1e-12));
        // percentiles follow the offset (each within the grid's 2^-7)
        assert!(close(
            sb.delay_s.p50,
            sa.delay_s.p50 - 20e-3,
            (12e-3 + 8e-3) / 128.0
        ));
        assert!(sb.delay_s.p50 < 0.0);
        // jitters are offset-free
        assert_eq!(sa.jitter_s.mean_abs_ipdv, sb.jitter_s.mean_abs_ipdv);
        assert_eq!(sa.jitter_s.rfc3550, sb.jitter_s.rfc3550);
        assert!(close(sa.jitter_s.pdv_p999, sb.jitter_s.pdv_p999, 20e-6));
        assert!(close(sa.jitter_s.pdv_p999, 5e-3, 1e-15));
    }

    #[test]
    fn reordering_rfc4737() {
        // 0 1 2 5 3 4 6: 3 and 4 arrive below the next expected (6) -> 2.
        let mut acc = RecvAccumulator::new(udp4(None));
        feed(
            &mut acc,
            &[(0, 0), (1, 0), (2, 0), (5, 0), (3, 0), (4, 0), (6, 0)],
        );
        let s = acc.summary(Some(7));
        assert_eq!(
            (
                s.counts.reordered,
                s.counts.lost.unwrap(),
                s.counts.unique,
                s.counts.duplicates
            ),
            (2, 0, 7, 0)
        );
        assert_eq!(s.counts.loss_bursts, LossBursts::default());
        // 0 2 1 3: only 1 is reordered.
        let mut acc = RecvAccumulator::new(udp4(None));
        feed(&mut acc, &[(0, 0), (2, 0), (1, 0), (3, 0)]);
        assert_eq!(acc.summary(None).counts.reordered, 1);
    }

    #[test]
    fn duplicates_count_once() {
        // 0 1 1 2 0 3 ; 1 and 0 repeat. packets 6, unique 4, dup 2;
        // a duplicate is not a reordered packet, and bytes count unique only.
        let mut acc = RecvAccumulator::new(udp4(None));
        feed(&mut acc, &[(0, 0), (1, 0), (1, 0), (2, 0), (0, 0), (3, 0)]);
        let s = acc.summary(Some(4));
        assert_eq!(
            (s.counts.packets, s.counts.unique, s.counts.duplicates),
            (6, 4, 2)
        );
        assert_eq!(
            (s.counts.reordered, s.counts.lost.unwrap(), s.counts.bytes),
            (0, 0, 400)
        );
        assert_eq!(acc.unique(), 4);
        // duplicates are ignored by jitter: delays of unique packets only.
        let mut acc = RecvAccumulator::new(udp4(None));
        feed(&mut acc, &[(0, 0), (0, 50 * MS), (1, 2 * MS)]);
        let s = acc.summary(None);
        assert!(close(s.jitter_s.mean_abs_ipdv, 2e-3, 0.0));
    }

    #[test]
    fn loss_bursts_with_and_without_sent() {
        // received 2 3 4 8, sender sent 10 (seq 0..9):
        // missing 0-1 (2), 5-7 (3), 9 (1) -> 3 bursts, mean 2, max 3, lost 6.
        let mut acc = RecvAccumulator::new(udp4(None));
        feed(&mut acc, &[(2, 0), (3, 0), (4, 0), (8, 0)]);
        let s = acc.summary(Some(10));
        assert_eq!(s.counts.lost.unwrap(), 6);
        assert!(close(s.counts.loss_ratio.unwrap(), 0.6, 1e-15));
        assert_eq!(
            s.counts.loss_bursts,
            LossBursts {
                count: 3,
                mean_len: 2.0,
                max_len: 3
            }
        );
        // without `sent`: gaps up to the highest seen (0..=8) -> 0-1, 5-7.
        let s = acc.summary(None);
        assert_eq!(s.counts.lost.unwrap(), 5);
        assert!(close(s.counts.loss_ratio.unwrap(), 5.0 / 9.0, 1e-15));
        assert_eq!(
            s.counts.loss_bursts,
            LossBursts {
                count: 2,
                mean_len: 2.5,
                max_len: 3
            }
        );
        // a late packet splitting a burst: 6 arrives -> 5 and 7 separate.
        acc.record(6, 0, 2_000_000_000, 100);
        let s = acc.summary(Some(10));
        assert_eq!(
            (
                s.counts.lost.unwrap(),
                s.counts.loss_bursts.count,
                s.counts.loss_bursts.max_len
            ),
            (5, 4, 2)
        );
        assert_eq!(s.counts.reordered, 1);
        // nothing received at all
        let s = RecvAccumulator::new(udp4(None)).summary(Some(3));
        assert_eq!(
            (
                s.counts.lost.unwrap(),
                s.counts.loss_bursts.count,
                s.counts.loss_bursts.max_len
            ),
            (3, 1, 3)
        );
        assert_eq!(s.counts.loss_ratio.unwrap(), 1.0);
    }

    /// 6.3 MB of TCP records sent over 1 s but read by the receiver in two
    /// batches 1 ms apart: the rate rests on the records' send-to-receive
    /// window (about 1 s, about 50 Mbit/s), not on the 2 ms in which the
    /// reader happened to see them (which read as 25 Gbit/s).
    #[test]
    fn tcp_rate_rests_on_the_send_to_receive_window() {
        let cfg = FlowConfig {
            transport: Transport::Tcp,
            ..udp4(None)
        };
        let mut r = RecvAccumulator::new(cfg);
        let n = 1000u64;
        let t0 = 7_000_000_000u64;
        let read_at = t0 + 1_000_000_000;
        for k in 0..n {
            let sent = t0 + k * 1_000_000;
            let arrival = if k < n / 2 {
                read_at
            } else {
                read_at + MS as u64
            };
            r.record(k as u32, (arrival - sent) as i64, arrival, 6300);
        }
        let s = r.summary(Some(n));
        assert_eq!(s.first_departure_ns, t0 as i64);
        assert!(close(s.duration_s, 1.001, 1e-9), "{}", s.duration_s);
        let bps = s.throughput_bps.payload;
        assert!(close(bps, 6300.0 * 8.0 * n as f64 / 1.001, 1.0), "{bps}");
    }

    #[test]
    fn span_corrected_rate_is_exact() {
        // 1000 packets exactly 1 ms apart span 999 ms; x 1000/999 = 1 s.
        let cfg = udp4(None);
        let mut r = RecvAccumulator::new(cfg);
        let mut t = SendAccumulator::new(cfg);
        for k in 0..1000u64 {
            let at = 5_000_000_000 + k * 1_000_000;
            r.record(k as u32, MS, at + MS as u64, 100);
            t.record_sent(at, at, 100);
        }
        let s = r.summary(Some(1000));
        assert_eq!(s.duration_s, 1.0);
        assert_eq!(s.counts.unique as f64 / s.duration_s, 1000.0);
        // payload 100 B -> ip 128, eth 146, wire 166 per packet, 1000 per s.
        assert_eq!(s.throughput_bps.payload, 800_000.0);
        assert_eq!(s.throughput_bps.ip, 1_024_000.0);
        assert_eq!(s.throughput_bps.ethernet, 1_168_000.0);
        assert_eq!(s.throughput_bps.wire, 1_328_000.0);
        assert_eq!(s.frames.per_datagram, 1.0);
        let ss = t.summary();
        assert_eq!(ss.rate_pps, 1000.0);
        assert_eq!(ss.duration_s, 1.0);
        assert_eq!(ss.throughput_bps.payload, 800_000.0);
        assert_eq!(ss.schedule_error_s, Quantiles::default());
        // one packet: no span, no rate (not infinity)
        let mut one = RecvAccumulator::new(cfg);
        one.record(0, 0, 7, 100);
        let s = one.summary(None);
        assert_eq!((s.duration_s, s.throughput_bps.payload), (0.0, 0.0));
    }

    #[test]
    fn fragmented_udp_and_tcp_records() {
        let mut acc = RecvAccumulator::new(udp4(None));
        acc.record(0, 0, 0, 1472); // 1 frame
        acc.record(1, 0, 1_000_000, 1473); // 2 frames
        let s = acc.summary(None);
        assert_eq!(s.frames.fragmented, 1);
        assert_eq!(s.frames.per_datagram, 1.5);
        // bytes over a span of 1 ms * 2/1 = 2 ms: ip 1500 + 1521 = 3021 B.
        assert!(close(s.throughput_bps.ip, 3021.0 * 8.0 / 2e-3, 1e-6));

        // TCP: 10 records of 1000 B = one 10000 B stream at MSS 1448:
        // 7 segments, ip 10364 B (see framing tests); 0.7 segments per record.
        let mut acc = RecvAccumulator::new(FlowConfig {
            transport: Transport::Tcp,
            ..udp4(None)
        });
        for k in 0..10u32 {
            acc.record(k, MS, u64::from(k) * 1_000_000, 1000);
        }
        let s = acc.summary(None);
        assert_eq!(s.counts.bytes, 10_000);
        assert!(close(s.frames.per_datagram, 0.7, 1e-12));
        assert_eq!(s.frames.fragmented, 0);
        // span 9 ms * 10/9 = 10 ms
        assert!(close(s.duration_s, 0.01, 1e-15));
        assert!(close(s.throughput_bps.ip, 10364.0 * 8.0 / 0.01, 1e-6));
    }

    /// Issue #9: 1900 forged numbers beyond the sender's count turned 32 %
    /// loss into 0.75 %; a forged number above the real ones made every
    /// later real packet "reordered". Numbers at or beyond `sent` are forged.
    #[test]
    fn numbers_beyond_sent_are_forged_not_received() {
        let mut acc = RecvAccumulator::new(udp4(None));
        let mut t = 1_000;
        let mut rec = |acc: &mut RecvAccumulator, seq: u32| {
            t += 1_000;
            acc.record(seq, 1_000, t, 100);
        };
        // Real: 0..100 sent, 0..68 arrive (32 % loss), in order except that
        // 10 comes after 11 (one real reordering).
        for seq in (0..10).chain([11, 10]).chain(12..68) {
            rec(&mut acc, seq);
            if seq == 30 {
                // Forged numbers appear mid-run, above everything real.
                for f in 5_000..6_900 {
                    rec(&mut acc, f);
                }
            }
        }
        let s = acc.summary(Some(100));
        assert_eq!(s.counts.forged, 1900);
        assert_eq!(
            (s.counts.unique, s.counts.packets, s.counts.lost.unwrap()),
            (68, 68, 32)
        );
        assert!(close(s.counts.loss_ratio.unwrap(), 0.32, 1e-12));
        assert_eq!(
            s.counts.reordered, 1,
            "only 10 is reordered against a real number"
        );
        assert_eq!(
            (s.counts.loss_bursts.count, s.counts.loss_bursts.max_len),
            (1, 32)
        );
        // A range straddling the count: 0..=7 arrive, 5 were sent.
        let mut acc = RecvAccumulator::new(udp4(None));
        for seq in 0..8 {
            acc.record(seq, 1, 1 + u64::from(seq), 100);
        }
        let s = acc.summary(Some(5));
        assert_eq!(
            (s.counts.unique, s.counts.forged, s.counts.lost.unwrap()),
            (5, 3, 0)
        );
        // Without a count nothing can be called forged.
        assert_eq!(acc.summary(None).counts.forged, 0);
        // peek does not move the window: a forged 2^32 - 1 would put
        // every later real number into the next epoch.
        let mut acc = RecvAccumulator::new(udp4(None));
        acc.record(0, 1, 1, 100);
        assert_eq!(acc.peek_seq(u32::MAX), u64::from(u32::MAX));
        assert_eq!(acc.peek_seq(1), 1);
    }

    #[test]
    fn intervals_and_loss_attribution() {
        // 100 ms intervals. Arrivals (ms after start) / seq / delay:
        //   0/0/10  50/1/20 | 100/5/10  120/3/30  150/6/10 | 250/7/10
        // Interval 0: 2 pkts, delay mean 15 ms, jitter |20-10| = 10 ms.
        // Interval 1: 3 pkts, mean (10+30+10)/3, jitter (|10-20|+|30-10|+|10-30|)/3 = 50/3 ms.
        //   seq 5 revealed the gap 2..4 there; 3 filled late -> lost 2 and 4 -> 2.
        // Interval 2: 1 pkt, jitter |10-10| = 0; sent 9 -> 8 missing at the end -> 1.
        let mut acc = RecvAccumulator::new(udp4(Some(100_000_000)));
        let t0 = 7_000_000_000u64;
        for &(ms, seq, d) in &[
            (0u64, 0u32, 10i64),
            (50, 1, 20),
            (100, 5, 10),
            (120, 3, 30),
            (150, 6, 10),
            (250, 7, 10),
        ] {
            acc.record(seq, d * MS, t0 + ms * 1_000_000, 125);
        }
        let s = acc.summary(Some(9));
        assert_eq!(s.counts.lost.unwrap(), 3);
        assert_eq!(s.intervals.len(), 3);
        let iv = &s.intervals;
        assert_eq!(
            iv.iter().map(|i| i.packets).collect::<Vec<_>>(),
            vec![2, 3, 1]
        );
        assert_eq!(iv.iter().map(|i| i.lost).collect::<Vec<_>>(), vec![0, 2, 1]);
        assert_eq!(
            iv.iter().map(|i| i.lost).sum::<u64>(),
            s.counts.lost.unwrap()
        );
        assert!(close(iv[1].t_s, 0.1, 1e-15));
        assert!(close(iv[0].delay_mean_s, 15e-3, 1e-15));
        assert!(close(iv[1].delay_mean_s, 50e-3 / 3.0, 1e-15));
        assert!(close(iv[0].jitter_s, 10e-3, 1e-15));
        assert!(close(iv[1].jitter_s, 50e-3 / 3.0, 1e-15));
        assert_eq!(iv[2].jitter_s, 0.0);
        // 2 x 125 B in 0.1 s = 20 kbit/s
        assert!(close(iv[0].throughput_bps, 20_000.0, 1e-9));
    }

    #[test]
    fn summary_serializes_with_design_field_names() {
        let mut acc = RecvAccumulator::new(udp4(Some(1_000_000)));
        feed(&mut acc, &[(0, MS), (2, 2 * MS)]);
        let v = serde_json::to_value(acc.summary(None)).unwrap();
        for k in [
            "packets",
            "bytes",
            "lost",
            "loss_ratio",
            "duplicates",
            "reordered",
            "loss_bursts",
            "throughput_bps",
            "frames",
            "delay_s",
            "jitter_s",
            "intervals",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["jitter_s"]["pdv_p999"].is_number());
        assert!(v["loss_bursts"]["mean_len"].is_number());
        assert_eq!(serde_json::to_value(IpVersion::V6).unwrap(), "v6");
        assert_eq!(serde_json::to_value(Transport::Udp).unwrap(), "udp");
    }

    #[test]
    fn schedule_error_quantiles() {
        // errors 0..=99 µs (plus one early packet = 0): p50 rank 51 of 101 -> 49 µs.
        let mut t = SendAccumulator::new(udp4(None));
        t.record_sent(1000, 500, 64); // early -> 0
        for k in 0..100u64 {
            let sched = 1_000_000 + k * 1_000_000;
            t.record_sent(sched, sched + k * 1000, 64);
        }
        t.record_not_sent(3);
        let s = t.summary();
        assert_eq!((s.packets, s.not_sent, s.bytes), (101, 3, 101 * 64));
        // Within the histogram's buckets (2^-7 ≈ 0.79 %).
        assert!(
            close(s.schedule_error_s.p50, 49e-6, 0.5e-6),
            "{}",
            s.schedule_error_s.p50
        );
        assert!(
            close(s.schedule_error_s.p99, 98e-6, 1e-6),
            "{}",
            s.schedule_error_s.p99
        );
        assert_eq!(s.schedule_error_s.max, 99e-6);
    }

    /// Brute-force reference over a set, for the property test.
    fn reference(seqs: &[u32], sent: u64) -> (u64, u64, u64, u64, u64) {
        let mut seen = std::collections::BTreeSet::new();
        let (mut dup, mut reord) = (0, 0);
        let mut max: Option<u32> = None;
        for &s in seqs {
            if !seen.insert(s) {
                dup += 1;
                continue;
            }
            if max.is_some_and(|m| s < m) {
                reord += 1;
            }
            max = max.max(Some(s));
        }
        let (mut bursts, mut maxlen, mut run) = (0, 0, 0);
        for s in 0..sent as u32 {
            if seen.contains(&s) {
                run = 0;
            } else {
                run += 1;
                if run == 1 {
                    bursts += 1;
                }
                maxlen = maxlen.max(run);
            }
        }
        (seen.len() as u64, dup, reord, bursts, maxlen)
    }

    proptest! {
        #[test]
        fn matches_brute_force_on_small_sequences(seqs in proptest::collection::vec(0u32..64, 0..200)) {
            let mut acc = RecvAccumulator::new(udp4(Some(1_000)));
            for (i, &s) in seqs.iter().enumerate() {
                acc.record(s, i as i64, i as u64 * 100, 50);
            }
            let s = acc.summary(Some(64));
            let (uniq, dup, reord, bursts, maxlen) = reference(&seqs, 64);
            prop_assert_eq!(s.counts.unique, uniq);
            prop_assert_eq!(s.counts.duplicates, dup);
            prop_assert_eq!(s.counts.reordered, reord);
            prop_assert_eq!(s.counts.lost.unwrap(), 64 - uniq);
            prop_assert_eq!(s.counts.loss_bursts.count, bursts);
            prop_assert_eq!(s.counts.loss_bursts.max_len, maxlen);
            prop_assert_eq!(s.counts.packets, seqs.len() as u64);
            if !seqs.is_empty() {
                prop_assert_eq!(s.intervals.iter().map(|i| i.lost).sum::<u64>(), s.counts.lost.unwrap());
                prop_assert_eq!(s.intervals.iter().map(|i| i.packets).sum::<u64>(), s.counts.unique);
            }
        }

        #[test]
        fn record_never_panics(
            pkts in proptest::collection::vec((any::<u32>(), any::<i64>(), any::<u64>(), any::<u32>()), 0..64),
            tcp in any::<bool>(),
            v6 in any::<bool>(),
            mtu in prop_oneof![Just(0u32), Just(1500), any::<u32>()],
            interval in prop_oneof![Just(None), Just(Some(1u64)), Just(Some(1_000_000)), any::<u64>().prop_map(Some)],
            sent in proptest::option::of(any::<u64>()),
        ) {
            let cfg = FlowConfig {
                transport: if tcp { Transport::Tcp } else { Transport::Udp },
                ip: if v6 { IpVersion::V6 } else { IpVersion::V4 },
                mtu,
                interval_ns: interval,
            };
            let mut acc = RecvAccumulator::new(cfg);
            let mut tx = SendAccumulator::new(cfg);
            for &(s, d, a, b) in &pkts {
                acc.record(s, d, a, b);
                tx.record_sent(a, d as u64, b);
            }
            let s = acc.summary(sent);
            prop_assert!(s.counts.unique <= s.counts.packets);
            prop_assert!(s.intervals.len() <= MAX_INTERVALS);
            prop_assert!(s.counts.loss_ratio.unwrap().is_finite());
            // The document must serialize and read back (no NaN/inf -> null).
            let j = serde_json::to_string(&s).unwrap();
            let back: Result<RecvSummary, _> = serde_json::from_str(&j);
            prop_assert!(back.is_ok(), "{}", j);
            let j = serde_json::to_string(&tx.summary()).unwrap();
            prop_assert!(serde_json::from_str::<SendSummary>(&j).is_ok());
        }
    }

    fn dist_acc() -> RecvAccumulator {
        RecvAccumulator::new(FlowConfig {
            transport: Transport::Udp,
            ip: IpVersion::V4,
            mtu: 1500,
            interval_ns: None,
        })
    }

    /// The merged delay dist of two flows gives the percentiles the engine
    /// computes over all their packets at once, within the grid's 2^-7;
    /// the |IPDV| dist gives the exact |IPDV| quantiles within 2^-7 too.
    #[test]
    fn merged_quantiles_match_the_engine() {
        let (mut a, mut b, mut all) = (dist_acc(), dist_acc(), dist_acc());
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut ipdv_a = Vec::new();
        let mut prev: Option<i64> = None;
        for i in 0..20_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as i64;
            let t = u64::from(i) * 10_000 + 1_000_000;
            if i % 3 == 0 {
                // Flow b: 2..6 ms with a few negative (offset) delays.
                let d = 2_000_000 + r % 4_000_000 - if i % 300 == 0 { 2_500_000 } else { 0 };
                b.record(i / 3, d, t, 100);
                all.record(i, d, t, 100);
            } else {
                // Flow a: 100 µs .. 1.1 ms.
                let d = 100_000 + r % 1_000_000;
                let seq = i - i / 3 - 1;
                a.record(seq, d, t, 100);
                all.record(i, d, t, 100);
                if let Some(p) = prev {
                    ipdv_a.push(d.abs_diff(p) as f64 / 1e9);
                }
                prev = Some(d);
            }
        }
        let (sa, sb, sall) = (a.summary(None), b.summary(None), all.summary(None));
        let mut m = sa.delay_hist.clone().unwrap();
        m.merge(sb.delay_hist.as_ref().unwrap());
        assert_eq!(m.count(), 20_000);
        assert!(m.buckets_ns.len() <= 2 * DIST_MAX_BUCKETS);
        let d = &sall.delay_s;
        for (q, want) in [(0.5, d.p50), (0.9, d.p90), (0.99, d.p99), (0.999, d.p999)] {
            let got = m.quantile(q).unwrap();
            let tol = want.abs() / (1u64 << m.bits) as f64 + 2e-9;
            assert!((got - want).abs() <= tol, "q {q}: dist {got} engine {want}");
        }
        // Negative delays are kept with their sign.
        assert!(m.quantile(0.0).unwrap() < 0.0);
        let ia = sa.ipdv_hist.unwrap();
        assert_eq!(ia.count(), ipdv_a.len() as u64);
        ipdv_a.sort_by(f64::total_cmp);
        for q in [0.5, 0.9, 0.99] {
            let k = ((q * ipdv_a.len() as f64).ceil() as usize).max(1) - 1;
            let (got, want) = (ia.quantile(q).unwrap(), ipdv_a[k]);
            let tol = want / (1u64 << ia.bits) as f64 + 2e-9;
            assert!(
                got >= want - 1e-12 && got - want <= tol,
                "q {q}: {got} {want}"
            );
        }
    }
}
