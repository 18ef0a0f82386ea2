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
}
