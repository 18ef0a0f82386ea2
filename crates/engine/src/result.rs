//! The result document `wirebench.result/1`: one JSON object per run, SI
//! units (seconds, bits per second, bytes). Field meanings: docs/engine.md
//! and docs/metrics.md.

use crate::sys::{CpuTime, HostCpuShare, HostInfo, TcpInfo};
use serde::{Deserialize, Serialize};
use wirebench_stats::{
    DelayStats, Frames, Interval, Jitter, LossBursts, RecvSummary, SendSummary, Throughput,
};

pub const SCHEMA: &str = "wirebench.result/1";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultDoc {
    pub schema: String,
    pub tool: Tool,
    /// RFC 3339 UTC time the traffic started.
    pub started_at: String,
    /// "owd" or "rtt".
    pub meter: String,
    /// True when the run ended early (peer gone); numbers cover what was seen.
    pub partial: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub host: HostInfo,
    pub clock: ClockInfo,
    pub flows: Vec<FlowResult>,
    pub total: Total,
    pub receiver: ReceiverInfo,
    pub cpu: Cpu,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ClockInfo {
    /// Receiver clock minus sender clock as measured.
    pub offset_s: f64,
    /// Half the round trip of the best exchange: the offset is within ± this.
    pub error_s: f64,
    /// Whether `offset_s` was subtracted from the delays: only when it is
    /// larger than its error bound (else it cannot be told from zero).
    pub applied: bool,
    pub method: String,
    pub samples: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Requested {
    /// Mean packets per second asked for; null for `--max`.
    pub rate_pps: Option<f64>,
    pub payload_bytes: f64,
    pub model: String,
    /// "duration 2000 ms", "packets 100", "kbytes 10".
    pub stop: String,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Received {
    /// Packets (UDP datagrams / TCP records) received, duplicates included.
    pub packets: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Payload bytes of the distinct packets.
    pub bytes: u64,
    /// Sent but not received within the linger time.
    pub lost: u64,
    pub loss_ratio: f64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Datagrams / connections on this flow's data port that were not ours.
    pub foreign: u64,
    pub loss_bursts: LossBursts,
    /// Delays below zero: the clock offset estimate is off by more than the delay.
    pub negative_delays: u64,
    /// Of those, delays below −clock.error_s: not explained by the offset's
    /// error bound (clock drift or a bad offset); the delays are suspect.
    pub negative_delays_beyond_error: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct LossSplit {
    pub not_sent: u64,
    pub receiver_host: u64,
    pub network: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FlowResult {
    pub id: u16,
    /// "udp" or "tcp".
    pub transport: String,
    /// 4 or 6.
    pub ip_version: u8,
    pub src: String,
    pub dst: String,
    /// Path MTU used for the framing model.
    pub mtu: u32,
    pub requested: Requested,
    pub sent: SendSummary,
    pub received: Received,
    pub loss_split: LossSplit,
    /// Received throughput (goodput at the payload layer).
    pub throughput_bps: Throughput,
    pub frames: Frames,
    pub delay_s: DelayStats,
    pub jitter_s: Jitter,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_s: Option<DelayStats>,
    /// Probes reflected back to the sender (rtt meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_received: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpInfo>,
    /// E-model for VoIP application models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voip: Option<Voip>,
    /// Transfer models: first byte sent to last byte received, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_s: Option<f64>,
    pub intervals: Vec<Interval>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Voip {
    pub r_factor: f64,
    pub mos: f64,
    /// Mouth-to-ear delay fed to the E-model: coding delay + the fastest
    /// packet's network delay + the playout buffer.
    pub mouth_to_ear_s: f64,
    /// Depth of the fixed playout (jitter) buffer assumed.
    pub jitter_buffer_s: f64,
    /// Share of received packets later than the buffer: lost to the
    /// listener, added to the network loss in the E-model.
    pub late_share: f64,
}

/// All flows together, for the summary line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Total {
    pub sent_packets: u64,
    pub not_sent: u64,
    pub received_packets: u64,
    pub lost: u64,
    pub loss_ratio: f64,
    pub throughput_bps: Throughput,
    /// Packet-weighted mean of the flows' mean delays.
    pub delay_mean_s: f64,
    pub delay_max_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ReceiverInfo {
    pub host: HostInfo,
    /// UDP receive-buffer drops in the receiver's network namespace during
    /// the run (all sockets, /proc/net/snmp + snmp6).
    pub rcvbuf_errors: u64,
    /// Connections to the control port during the run that were not a
    /// wirebench session.
    pub foreign_control: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Cpu {
    /// Shares of one core over the run.
    pub sender: CpuTime,
    pub receiver: CpuTime,
    pub host: HostCpuShare,
}

/// The receiver's per-flow report, sent in `ControlMsg::Report.flows`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FlowReport {
    pub flow_id: u16,
    pub summary: RecvSummary,
    pub foreign: u64,
    /// Delays below −(offset error bound): the clocks disagree by more than
    /// the offset measurement can explain.
    #[serde(default)]
    pub negative_beyond_error: u64,
}

/// The receiver's session-wide report, `ControlMsg::Report.extra`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ReportExtra {
    pub host: HostInfo,
    pub rcvbuf_errors: u64,
    pub foreign_control: u64,
    /// CPU seconds of the session's threads.
    pub cpu_s: CpuTime,
}

/// Formats nanoseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_millis(t).to_string()
}

impl ResultDoc {
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T12:34:56.789Z
        assert_eq!(
            rfc3339(1_709_210_096_789_000_000),
            "2024-02-29T12:34:56.789Z"
        );
    }
}
