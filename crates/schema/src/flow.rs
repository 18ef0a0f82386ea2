//! Per-flow figures as the result document and the control protocol's
//! `Report` carry them: what a measuring end learned about one flow and
//! what a sender knows of its own schedule. The accumulators that compute
//! them are `wirebench_stats::flow`; these are the shapes they produce.

use crate::dist::Histogram;
use serde::{Deserialize, Serialize};

/// Maximal runs of consecutive lost sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct LossBursts {
    /// Number of loss bursts.
    pub count: u64,
    /// Mean burst length, packets.
    pub mean_len: f64,
    /// Longest burst, packets.
    pub max_len: u64,
}

/// Bits per second at each layer (see [`crate::framing::LayerBytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Throughput {
    /// Payload (application) bits per second.
    pub payload: f64,
    /// IP packets, headers included.
    pub ip: f64,
    /// Ethernet frames, header and FCS included.
    pub ethernet: f64,
    /// On the wire: preamble, start delimiter and inter-frame gap included.
    pub wire: f64,
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
    /// Smallest delay.
    pub min: f64,
    /// Mean delay.
    pub mean: f64,
    /// Largest delay.
    pub max: f64,
    /// Population standard deviation of the delays.
    pub stddev: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
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
    /// Packets that arrived in this interval.
    pub packets: u64,
    /// Payload bits per second over the nominal interval length.
    pub throughput_bps: f64,
    /// Mean one-way delay of those packets.
    pub delay_mean_s: f64,
    /// Mean |D_i − D_{i−1}| of the packets that arrived in this interval.
    pub jitter_s: f64,
    /// Lost packets charged to this interval (see docs/metrics.md).
    pub lost: u64,
    /// TCP flows run with live intervals: the sender's `TCP_INFO` (cwnd,
    /// smoothed RTT, retransmits so far) when it got this interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<crate::result::TcpInfo>,
}

/// How many packets of a flow arrived, and how many did not: the counts
/// the measuring end reports (`received` in the result document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RecvCounts {
    /// Datagrams / records received, duplicates included.
    pub packets: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Payload bytes of the unique packets.
    pub bytes: u64,
    /// Sent but not received within the linger time. `None` (JSON `null`)
    /// when nobody knows: a sender's result whose receiver report is
    /// missing (the receiver died or vanished). A measuring end always
    /// knows its own and says a number.
    pub lost: Option<u64>,
    /// `lost` over the packets sent; `None` exactly when `lost` is.
    pub loss_ratio: Option<f64>,
    /// Packets received more than once (counted beyond the first).
    pub duplicates: u64,
    /// RFC 4737 reordered packets.
    pub reordered: u64,
    /// Distinct sequence numbers at or beyond what the sender reports having
    /// sent: forged packets, kept out of `packets`, `unique`, `lost` and
    /// `reordered` (their delays and bytes are not separable afterwards; a
    /// flow with `forged > 0` has suspect delay figures).
    #[serde(default)]
    pub forged: u64,
    /// Runs of consecutive lost sequence numbers.
    pub loss_bursts: LossBursts,
    /// Packets whose delay was below zero (clock offset larger than the delay).
    pub negative_delays: u64,
    /// Packets that arrived below the flow's gap-memory horizon: the
    /// receiver keeps at most a fixed number of sequence gaps per flow and
    /// forgets the oldest past it (their loss stays counted), so a packet
    /// arriving that late cannot be told from a duplicate. It counts as
    /// lost, as a packet past OWAMP's timeout does; non-zero means the
    /// flow's reordering and duplicate counts are lower bounds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub beyond_memory: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `lost` for people: "N (x.xxx %)", or "unknown" when the loss is
/// (no receiver report), never a 0 that was not measured.
pub fn loss_text(lost: Option<u64>, loss_ratio: Option<f64>) -> String {
    match (lost, loss_ratio) {
        (Some(l), Some(r)) => format!("{l} ({:.3} %)", r * 100.0),
        (Some(l), None) => l.to_string(),
        _ => "unknown (no receiver report)".into(),
    }
}

/// Everything the measuring end knows about one flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RecvSummary {
    /// Packet counts (flattened: the JSON keys are the counts' own).
    #[serde(flatten)]
    pub counts: RecvCounts,
    /// Arrival time of the first packet, measuring host's clock, ns since the epoch.
    pub first_arrival_ns: u64,
    /// Arrival time of the last packet, same clock.
    pub last_arrival_ns: u64,
    /// Earliest departure of a received packet on the measuring host's
    /// clock: arrival − one-way delay (the delay already has the clock
    /// offset taken out). 0 when nothing arrived.
    #[serde(default)]
    pub first_departure_ns: i64,
    /// The span the rates rest on. UDP: arrivals, span-corrected
    /// (last − first) × N/(N−1), kernel receive times per datagram. TCP:
    /// the records' send-to-receive window, last arrival − first departure,
    /// because records arrive in whatever batches the reader happened to
    /// read, so their arrival span can collapse. 0 with fewer than 2 packets.
    pub duration_s: f64,
    /// Received bits per second at each layer over `duration_s`.
    pub throughput_bps: Throughput,
    /// Frames per datagram / record and fragmentation.
    pub frames: Frames,
    /// One-way delay statistics (offset-corrected).
    pub delay_s: DelayStats,
    /// Jitter by the three definitions.
    pub jitter_s: Jitter,
    /// Share of the received packets a fixed playout (jitter) buffer would
    /// have played too late; filled by the measuring end when the sender
    /// asks for it (VoIP flows), see [`RecvAccumulator::late_share`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_share: Option<f64>,
    /// Per-interval series when the flow asked for intervals.
    pub intervals: Vec<Interval>,
    /// The one-way delays as a compact histogram (CDF, percentiles over
    /// flows and repetitions); None when nothing arrived or from an older
    /// receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_hist: Option<Histogram>,
    /// |IPDV| = |D_i − D_{i−1}| over consecutive received packets, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv_hist: Option<Histogram>,
}

impl RecvSummary {
    /// Coarsens the histograms to at most `max` buckets each (see
    /// [`crate::dist::per_flow_budget`]).
    pub fn fit_dists(&mut self, max: usize) {
        for d in [&mut self.delay_hist, &mut self.ipdv_hist]
            .into_iter()
            .flatten()
        {
            d.fit(max);
        }
    }
}

/// p50, p99 and max of a quantity, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

/// What the sender knows about its own flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SendSummary {
    /// Packets sent.
    pub packets: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Span-corrected over the actual send times.
    pub duration_s: f64,
    /// Packets per second over `duration_s`.
    pub rate_pps: f64,
    /// Packets the schedule wanted that could not be sent.
    pub not_sent: u64,
    /// Lateness against the absolute schedule (early counts as 0).
    pub schedule_error_s: Quantiles,
    /// Sent bits per second at each layer.
    pub throughput_bps: Throughput,
    /// Model draws (gaps, ON/OFF durations) that came out negative and were
    /// clamped to zero: how far the model had to be bent (absent in
    /// documents written before it was reported: 0).
    #[serde(default)]
    pub clamped_draws: u64,
}
