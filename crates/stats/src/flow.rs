//! Per-flow accumulators: what the measuring end learns from every probe
//! (delay, three jitters, loss and loss bursts, duplicates, reordering,
//! throughput at four layers, per-interval series) and what the sender
//! learns about its own schedule.
//!
//! Both are fed from the engine's hot path, so `record*` is O(1) with no
//! allocation in the common case: delays go into HDR histograms instead of
//! sample vectors, and the set of received sequence numbers is a sorted vector
//! of received ranges that only grows when a gap opens. All the heavier
//! arithmetic happens once, in `summary`.

use crate::framing::{tcp_stream, udp_datagram, LayerBytes};
use crate::hist::SignedHist;
use crate::seq::SeqUnwrapper;
use crate::{IpVersion, L4};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Cap on per-interval buckets: a bogus arrival time far in the future must
/// not make the interval vector allocate gigabytes. 2^20 intervals is over
/// 17 minutes at 1 ms or 12 days at 1 s.
pub const MAX_INTERVALS: usize = 1 << 20;

const NS: f64 = 1e9;

/// What the statistics need to know about a flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowConfig {
    pub l4: L4,
    pub ip: IpVersion,
    /// MTU of the path (the framing model's M).
    pub mtu: u32,
    /// Length of one report interval in ns; None: no interval series.
    pub interval_ns: Option<u64>,
}

/// Maximal runs of consecutive lost sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct LossBursts {
    pub count: u64,
    pub mean_len: f64,
    pub max_len: u64,
}

/// Bits per second at each layer (see [`LayerBytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Throughput {
    pub payload: f64,
    pub ip: f64,
    pub ethernet: f64,
    pub wire: f64,
}

impl Throughput {
    fn from_bytes(lb: &LayerBytes, duration_s: f64) -> Self {
        if duration_s <= 0.0 || !duration_s.is_finite() {
            return Self::default();
        }
        let bps = |b: u64| b as f64 * 8.0 / duration_s;
        Self {
            payload: bps(lb.payload),
            ip: bps(lb.ip),
            ethernet: bps(lb.ethernet),
            wire: bps(lb.wire),
        }
    }
}

/// Ethernet frames per datagram (UDP) or per record (TCP).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Frames {
    /// Mean frames per unique datagram / record.
    pub per_datagram: f64,
    /// Datagrams that needed more than one frame (IP fragmentation); always 0
    /// for TCP, which segments instead of fragmenting.
    pub fragmented: u64,
}

/// Delay statistics in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct DelayStats {
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// Population standard deviation of the delays.
    pub stddev: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

/// The three jitter definitions, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Jitter {
    /// D-ITG: mean of |D_i − D_{i−1}| over consecutive received packets.
    pub mean_abs_ipdv: f64,
    /// RFC 3550 §6.4.1 running estimate, final value.
    pub rfc3550: f64,
    /// RFC 5481 PDV: p99.9 − min of the delay.
    pub pdv_p999: f64,
}

/// One interval of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Interval {
    /// Start of the interval, seconds after the first arrival.
    pub t_s: f64,
    pub packets: u64,
    /// Payload bits per second over the nominal interval length.
    pub throughput_bps: f64,
    pub delay_mean_s: f64,
    /// Mean |D_i − D_{i−1}| of the packets that arrived in this interval.
    pub jitter_s: f64,
    /// Lost packets charged to this interval (see docs/metrics.md).
    pub lost: u64,
}

/// Everything the measuring end knows about one flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RecvSummary {
    /// Datagrams / records received, duplicates included.
    pub packets: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Payload bytes of the unique packets.
    pub bytes: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    pub duplicates: u64,
    /// RFC 4737 reordered packets.
    pub reordered: u64,
    pub loss_bursts: LossBursts,
    pub first_arrival_ns: u64,
    pub last_arrival_ns: u64,
    /// Span-corrected: (last − first) × N/(N−1); 0 with fewer than 2 packets.
    pub duration_s: f64,
    pub throughput_bps: Throughput,
    pub frames: Frames,
    pub delay_s: DelayStats,
    /// Packets whose delay was below zero (clock offset larger than the delay).
    pub negative_delays: u64,
    pub jitter_s: Jitter,
    pub intervals: Vec<Interval>,
}

/// A run of received sequence numbers, `start..=end`. `tag` is the interval
/// in which the gap just before this range became visible; losses in that
/// gap are charged to it.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u64,
    end: u64,
    tag: u32,
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
    ranges: Vec<Range>,
    packets: u64,
    unique: u64,
    duplicates: u64,
    reordered: u64,
    layer: LayerBytes,
    fragmented: u64,
    origin_ns: u64,
    first_ns: u64,
    last_ns: u64,
    delay_min: i64,
    delay_max: i64,
    delay_sum: i128,
    // Welford running mean / sum of squared deviations (ns), for stddev.
    w_mean: f64,
    w_m2: f64,
    hist: SignedHist,
    negative: u64,
    prev_delay: Option<i64>,
    ipdv_sum: u128,
    ipdv_n: u64,
    rfc3550_ns: f64,
    intervals: Vec<IntervalAcc>,
}

impl RecvAccumulator {
    pub fn new(cfg: FlowConfig) -> Self {
        Self {
            cfg,
            unwrapper: SeqUnwrapper::new(),
            ranges: Vec::with_capacity(16),
            packets: 0,
            unique: 0,
            duplicates: 0,
            reordered: 0,
            layer: LayerBytes::default(),
            fragmented: 0,
            origin_ns: 0,
            first_ns: 0,
            last_ns: 0,
            delay_min: 0,
            delay_max: 0,
            delay_sum: 0,
            w_mean: 0.0,
            w_m2: 0.0,
            hist: SignedHist::new(),
            negative: 0,
            prev_delay: None,
            ipdv_sum: 0,
            ipdv_n: 0,
            rfc3550_ns: 0.0,
            intervals: Vec::new(),
        }
    }

    /// Interval index of an arrival, None when intervals are off or the
    /// arrival lies beyond [`MAX_INTERVALS`].
    fn interval_of(&self, arrival_ns: u64) -> Option<usize> {
        let len = self.cfg.interval_ns?.max(1);
        let idx = arrival_ns.saturating_sub(self.origin_ns) / len;
        usize::try_from(idx).ok().filter(|&i| i < MAX_INTERVALS)
    }

    /// Inserts `s` into the received set. Returns (new, reordered).
    fn insert_seq(&mut self, s: u64, tag: u32) -> (bool, bool) {
        let Some(last) = self.ranges.last_mut() else {
            self.ranges.push(Range {
                start: s,
                end: s,
                tag,
            });
            return (true, false);
        };
        // Common case: the next packet in order.
        if s == last.end.wrapping_add(1) && s > last.end {
            last.end = s;
            return (true, false);
        }
        if s > last.end {
            self.ranges.push(Range {
                start: s,
                end: s,
                tag,
            });
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
        match (left_adj, right_adj) {
            (true, true) => {
                self.ranges[idx - 1].end = self.ranges[idx].end;
                self.ranges.remove(idx);
            }
            (true, false) => self.ranges[idx - 1].end = s,
            (false, true) => self.ranges[idx].start = s,
            (false, false) => {
                // The gap now split in two was revealed by the range above it.
                let tag = self.ranges[idx].tag;
                self.ranges.insert(
                    idx,
                    Range {
                        start: s,
                        end: s,
                        tag,
                    },
                );
            }
        }
        (true, true)
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
        let tag = iv.unwrap_or(MAX_INTERVALS - 1) as u32;
        let s = self.unwrapper.unwrap(seq32);
        let (new, reordered) = self.insert_seq(s, tag);
        if !new {
            self.duplicates += 1;
            return;
        }
        if reordered {
            self.reordered += 1;
        }
        self.unique += 1;
        self.first_ns = self.first_ns.min(arrival_ns);
        self.last_ns = self.last_ns.max(arrival_ns);

        if self.cfg.l4 == L4::Udp {
            let lb = udp_datagram(payload_bytes, self.cfg.mtu, self.cfg.ip);
            if lb.frames > 1 {
                self.fragmented += 1;
            }
            self.layer.add(&lb);
        } else {
            self.layer.payload = self.layer.payload.saturating_add(payload_bytes.into());
        }

        // Delay.
        if self.unique == 1 {
            self.delay_min = delay_ns;
            self.delay_max = delay_ns;
        } else {
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

    /// Number of distinct sequence numbers seen so far.
    pub fn unique(&self) -> u64 {
        self.unique
    }

    /// Total packets recorded, duplicates included.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// The flow's configuration.
    pub fn config(&self) -> FlowConfig {
        self.cfg
    }

    /// Summary so far. `sent`: packets the sender reports as sent (sequence
    /// numbers 0..sent), then lost = sent − unique and missing numbers after
    /// the highest one received count as a final loss burst. None: lost is
    /// counted from the gaps in 0..=highest received.
    pub fn summary(&self, sent: Option<u64>) -> RecvSummary {
        let mut intervals: Vec<IntervalAcc> = self.intervals.clone();
        let charge = |tag: u32, n: u64, intervals: &mut Vec<IntervalAcc>| {
            if let Some(a) = intervals.get_mut(tag as usize) {
                a.lost += n;
            }
        };

        // Gaps = loss bursts.
        let mut bursts = 0u64;
        let mut burst_total = 0u64;
        let mut burst_max = 0u64;
        let mut add_burst = |len: u64| {
            if len > 0 {
                bursts += 1;
                burst_total = burst_total.saturating_add(len);
                burst_max = burst_max.max(len);
            }
        };
        let mut next = 0u64;
        for r in &self.ranges {
            let gap = r.start - next;
            add_burst(gap);
            if gap > 0 {
                charge(r.tag, gap, &mut intervals);
            }
            next = r.end.saturating_add(1);
        }
        let highest_plus1 = next;
        if let Some(s) = sent {
            if s > next {
                add_burst(s - next);
                let last = intervals.len().saturating_sub(1) as u32;
                charge(last, s - next, &mut intervals);
            }
        }

        let (lost, expected) = match sent {
            Some(s) => (s.saturating_sub(self.unique), s),
            None => (highest_plus1.saturating_sub(self.unique), highest_plus1),
        };
        let loss_ratio = if expected > 0 {
            lost as f64 / expected as f64
        } else {
            0.0
        };

        let n = self.unique;
        let duration_s = if n >= 2 {
            (self.last_ns - self.first_ns) as f64 / NS * n as f64 / (n - 1) as f64
        } else {
            0.0
        };

        let layer = match self.cfg.l4 {
            L4::Udp => self.layer,
            L4::Tcp => tcp_stream(self.layer.payload, self.cfg.mtu, self.cfg.ip),
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
            })
            .collect();

        RecvSummary {
            packets: self.packets,
            unique: n,
            bytes: layer.payload,
            lost,
            loss_ratio,
            duplicates: self.duplicates,
            reordered: self.reordered,
            loss_bursts: LossBursts {
                count: bursts,
                mean_len: if bursts > 0 {
                    burst_total as f64 / bursts as f64
                } else {
                    0.0
                },
                max_len: burst_max,
            },
            first_arrival_ns: self.first_ns,
            last_arrival_ns: self.last_ns,
            duration_s,
            throughput_bps: Throughput::from_bytes(&layer, duration_s),
            frames,
            delay_s,
            negative_delays: self.negative,
            jitter_s,
            intervals,
        }
    }
}

/// p50, p99 and max of a quantity, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// What the sender knows about its own flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SendSummary {
    pub packets: u64,
    pub bytes: u64,
    /// Span-corrected over the actual send times.
    pub duration_s: f64,
    pub rate_pps: f64,
    /// Packets the schedule wanted that could not be sent.
    pub not_sent: u64,
    /// Lateness against the absolute schedule (early counts as 0).
    pub schedule_error_s: Quantiles,
    pub throughput_bps: Throughput,
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
    err: Histogram<u64>,
    err_max: u64,
}

impl SendAccumulator {
    pub fn new(cfg: FlowConfig) -> Self {
        Self {
            cfg,
            packets: 0,
            layer: LayerBytes::default(),
            first_ns: 0,
            last_ns: 0,
            not_sent: 0,
            err: Histogram::new(3).expect("sigfig 3 is valid"),
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
        if self.cfg.l4 == L4::Udp {
            self.layer
                .add(&udp_datagram(payload_bytes, self.cfg.mtu, self.cfg.ip));
        } else {
            self.layer.payload = self.layer.payload.saturating_add(payload_bytes.into());
        }
        let e = actual_ns.saturating_sub(scheduled_ns);
        self.err_max = self.err_max.max(e);
        if self.err.record(e).is_err() {
            self.err.saturating_record(e);
        }
    }

    /// Packets the schedule wanted but that could not be sent (send error,
    /// or dropped to keep the schedule).
    pub fn record_not_sent(&mut self, count: u64) {
        self.not_sent = self.not_sent.saturating_add(count);
    }

    pub fn packets(&self) -> u64 {
        self.packets
    }

    pub fn summary(&self) -> SendSummary {
        let n = self.packets;
        let duration_s = if n >= 2 {
            (self.last_ns - self.first_ns) as f64 / NS * n as f64 / (n - 1) as f64
        } else {
            0.0
        };
        let layer = match self.cfg.l4 {
            L4::Udp => self.layer,
            L4::Tcp => tcp_stream(self.layer.payload, self.cfg.mtu, self.cfg.ip),
        };
        let q = |p: f64| -> f64 {
            if n == 0 {
                0.0
            } else {
                self.err.value_at_quantile(p).min(self.err_max) as f64 / NS
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
            throughput_bps: Throughput::from_bytes(&layer, duration_s),
        }
    }
}
