//! One live interval of one flow: what a receiver streams to its sender
//! while a run is still going (`wirebench send --interval MS`,
//! `--json-stream`). `wirebench_stats::live` cuts them; the control
//! protocol carries them.

use crate::result::TcpInfo;
use serde::{Deserialize, Serialize};

/// One interval of one flow, as streamed during the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LiveInterval {
    /// The flow (1-based, as in `Hello.flows`).
    pub flow_id: u16,
    /// Interval number since `Start` (0, 1, 2, ...).
    pub index: u64,
    /// Start of the interval, seconds after `Start` on the receiver.
    pub t_s: f64,
    /// Nominal length of the interval, seconds.
    pub len_s: f64,
    /// Distinct packets that arrived in the interval.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Payload bits per second over the nominal length.
    pub throughput_bps: f64,
    /// Mean delay of those packets; None when none arrived.
    pub delay_mean_s: Option<f64>,
    /// Mean |D_i − D_{i−1}| of those packets; None when fewer than one pair.
    pub jitter_s: Option<f64>,
    /// Sequence gaps that became visible in the interval. A late packet
    /// that fills an earlier gap is not taken back from the interval that
    /// counted it, so the sum of these can exceed the final `lost`; the
    /// final figure is the receiver's report.
    pub lost: u64,
    /// The sender's TCP state when it got the interval (TCP flows; filled
    /// in by the sender, never sent by the receiver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpInfo>,
}
