//! A scenario's figures over time (campaigns with `interval_ms`): per
//! interval, a mean with a min–max band over the repetitions, as the report
//! draws throughput, delay, jitter and loss over time. Filled by
//! `wirebench_campaign::series` from each run's `flows[].intervals`.

use serde::{Deserialize, Serialize};

/// One figure over time: per interval, the mean over the repetitions that
/// have a value there and the smallest and largest of them (None: no
/// repetition has one, e.g. no packet arrived so there is no delay).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Band {
    /// Mean over the repetitions.
    pub mean: Vec<Option<f64>>,
    /// Smallest repetition.
    pub min: Vec<Option<f64>>,
    /// Largest repetition.
    pub max: Vec<Option<f64>>,
}

/// A scenario's figures over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ScenarioSeries {
    /// Length of one interval, seconds.
    pub interval_s: f64,
    /// Runs the series is made of.
    pub runs: usize,
    /// Payload throughput, all flows together, bit/s.
    pub throughput_bps: Band,
    /// Mean one-way delay (or RTT) of the packets of the interval, s.
    pub delay_s: Band,
    /// Mean |IPDV| of the packets of the interval, s.
    pub jitter_s: Band,
    /// Packets lost charged to the interval, all flows together.
    pub lost: Band,
    /// The TCP flows' `TCP_INFO` over time (runs whose TCP flows have
    /// `intervals[].tcp`); absent otherwise and in older summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSeries>,
}

/// The TCP flows of a scenario over time, from the sender's `TCP_INFO`
/// read once per interval per flow (`flows[].intervals[].tcp`): per
/// interval, how the flows spread within a run (smallest, median and
/// largest flow; over the repetitions the smallest of the smallest, the
/// mean of the medians, the largest of the largest), what all flows
/// together retransmitted, how many stalled, and the stalls themselves,
/// so that a collapse shows which flows stopped and in what state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TcpSeries {
    /// TCP flows per run (the most of any repetition).
    pub flows: usize,
    /// Congestion window, bytes.
    pub cwnd_bytes: Band,
    /// Smoothed RTT, seconds.
    pub srtt_s: Band,
    /// The kernel's pacing rate, bit/s (Linux).
    pub pacing_rate_bps: Band,
    /// Delivery rate of the latest ACKed data, bit/s (Linux).
    pub delivery_rate_bps: Band,
    /// Segments retransmitted in the interval, all flows of a run together
    /// (band: over the repetitions).
    pub retransmits: Band,
    /// Flows of a run that stalled in the interval (band: over the
    /// repetitions).
    pub stalled: Band,
    /// The longest stalls, longest first (at most [`MAX_STALLS`]).
    pub stalls: Vec<Stall>,
}

/// Most stalls a [`TcpSeries`] lists.
pub const MAX_STALLS: usize = 20;

/// A TCP flow that received nothing for one or more whole intervals while
/// its run went on (after its first record, before the run's last
/// interval with data), and its `TCP_INFO` when the stall began: a tiny
/// window with retransmits rising says loss recovery or a retransmission
/// timeout, a long smoothed RTT says it was queued behind the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Stall {
    /// Repetition (1-based, in the order the runs were read).
    pub run: usize,
    /// Flow id within the run.
    pub flow: u16,
    /// Start of the first stalled interval, seconds.
    pub t_s: f64,
    /// Consecutive stalled intervals.
    pub intervals: usize,
    /// Congestion window at the stall's first interval, bytes.
    pub cwnd_bytes: u64,
    /// Smoothed RTT then, seconds.
    pub srtt_s: f64,
    /// Segments the flow retransmitted during the stall.
    pub retransmits: u64,
}
