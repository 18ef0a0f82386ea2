//! What RFC 2544 trials measured and what the searches found: the trial
//! outcomes and records, and the throughput, frame-loss and back-to-back
//! answers. The searches that produce them are `wirebench_rfc2544::search`;
//! the campaign summary stores them.

use serde::{Deserialize, Serialize};

/// What a trial measured, as far as a search cares.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrialOutcome {
    /// Frames the trial was to offer: rate × length (what the schedule
    /// wanted), or the burst length, or what an unpaced trial sent.
    pub offered: u64,
    /// Frames the tester actually sent (below `offered` when it could not
    /// keep up; those count as lost: the device under test did not carry them).
    pub sent: u64,
    /// Distinct frames received.
    pub received: u64,
    /// Seconds from the first to the last frame sent.
    pub duration_s: f64,
}

impl TrialOutcome {
    /// (offered − received) / offered, RFC 2544 §26.3's frame-loss rate as a
    /// ratio. Frames received beyond `offered` (impossible but for duplicates
    /// miscounted) never make it negative.
    pub fn loss_ratio(&self) -> f64 {
        if self.offered == 0 {
            return 0.0;
        }
        self.offered.saturating_sub(self.received) as f64 / self.offered as f64
    }
    /// Frames per second the tester managed to send.
    pub fn sent_fps(&self) -> f64 {
        per_s(self.sent, self.duration_s)
    }
    /// Frames per second that arrived.
    pub fn received_fps(&self) -> f64 {
        per_s(self.received, self.duration_s)
    }
}

fn per_s(n: u64, d: f64) -> f64 {
    if d > 0.0 && d.is_finite() {
        n as f64 / d
    } else {
        0.0
    }
}

/// Why a trial is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialKind {
    /// Throughput: the first trial, at the ceiling.
    MaxRate,
    /// Throughput: a step of the search.
    Search,
    /// Throughput: the final trial at the found rate.
    Verify,
    /// Frame-loss rate: one load step.
    Load,
    /// Back-to-back: one burst.
    Burst,
}

impl TrialKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TrialKind::MaxRate => "max_rate",
            TrialKind::Search => "search",
            TrialKind::Verify => "verify",
            TrialKind::Load => "load",
            TrialKind::Burst => "burst",
        }
    }
}

/// One trial and its verdict, kept for the record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub kind: TrialKind,
    /// The rate asked for (None: unpaced).
    pub fps: Option<f64>,
    pub frames: Option<u64>,
    pub outcome: TrialOutcome,
    pub pass: bool,
}

/// The answer of a throughput search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputResult {
    /// The throughput: the highest rate that passed (0 when even the
    /// smallest step lost).
    pub fps: f64,
    /// The lowest rate that failed, if any (the limit is between the two).
    pub failed_fps: Option<f64>,
    /// The rate the search was bounded by (line rate, or the unpaced
    /// trial's send rate).
    pub ceiling_fps: f64,
    /// The ceiling itself passed and came from an unpaced trial: the
    /// tester, not the device, was the limit.
    pub tester_limited: bool,
    /// The verification trial at `fps` passed.
    pub verified: bool,
    /// The bracket closed to the resolution (false: `max_trials` ran out).
    pub converged: bool,
    /// Trials run, max-rate and verification included.
    pub trials: u32,
    /// The verification trial's outcome.
    pub verify: Option<TrialOutcome>,
}

/// One load step of the frame-loss curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FrameLossPoint {
    /// Offered load, percent of the ceiling.
    pub percent: u32,
    pub offered_fps: f64,
    /// RFC 2544 §26.3: (input − output) × 100 / input, percent.
    pub loss_percent: f64,
    pub outcome: TrialOutcome,
}

/// The answer of a back-to-back search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackToBackResult {
    /// The longest burst that arrived complete, per repetition.
    pub bursts: Vec<u64>,
    /// Their mean (RFC 2544 §26.4 reports the average).
    pub mean_frames: f64,
    pub min_frames: u64,
    pub max_frames: u64,
    /// The longest burst tried; a result equal to it means the device never
    /// lost a burst (it may take longer ones).
    pub longest_tried: u64,
    /// The burst rate.
    pub fps: f64,
    /// mean_frames / fps: how long the device absorbed line rate
    /// (RFC 9004's implied buffer time, before its correction for the
    /// device's own forwarding rate).
    pub implied_buffer_s: f64,
}
