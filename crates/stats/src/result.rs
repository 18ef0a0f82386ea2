//! The result document `wirebench.result/1` as types: one JSON object per
//! run, SI units (seconds, bits per second, bytes). The engine writes it,
//! the campaign store and the report read it, so it lives here, in the one
//! crate all of them depend on; the receiver's part of it
//! ([`FlowReport`], [`ReportExtra`]) travels typed in the control
//! protocol's `Report`. Field meanings: docs/engine.md and docs/metrics.md.
//!
//! The JSON is the contract: renaming a field here breaks stored results,
//! so every key is checked against stored documents in
//! `tests/result_doc.rs`.

use crate::{
    DelayStats, Frames, Interval, IpVersion, Jitter, MeterMode, RecvCounts, RecvSummary,
    SendSummary, Throughput, Transport,
};
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "wirebench.result/1";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultDoc {
    pub schema: String,
    pub tool: Tool,
    /// RFC 3339 UTC time the traffic started.
    pub started_at: String,
    /// Serialised "owd" or "rtt".
    pub meter: MeterMode,
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

/// The receiver's counts of one flow (`received` in the document): the
/// measuring end's [`RecvCounts`] and what only the receiver daemon sees.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Received {
    #[serde(flatten)]
    pub counts: RecvCounts,
    /// Datagrams / connections on this flow's data port that were not ours.
    pub foreign: u64,
    /// Of the negative delays, those below −clock.error_s: not explained by
    /// the offset's error bound (clock drift or a bad offset); the delays
    /// are suspect.
    pub negative_delays_beyond_error: u64,
    /// Probes whose one-way delay was outside ± 60 s: kept out of every
    /// statistic. (`forged`, in the counts, includes the probes the
    /// receiver refused at once.)
    #[serde(default)]
    pub implausible_delays: u64,
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
    /// Serialised "udp" or "tcp".
    pub transport: Transport,
    /// Serialised as the number 4 or 6.
    #[serde(with = "ip_number")]
    pub ip_version: IpVersion,
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
    /// Probes refused at once: a sequence number the sender cannot have
    /// reached yet (wirebench_wire::limits::max_plausible_seq).
    #[serde(default)]
    pub forged: u64,
    /// Probes refused for a delay outside ± 60 s (forged or corrupt
    /// timestamp, or a clock that jumped).
    #[serde(default)]
    pub implausible_delays: u64,
}

/// The receiver's session-wide report, `ControlMsg::Report.extra`; a
/// field an older receiver does not send reads as zero.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ReportExtra {
    pub host: HostInfo,
    pub rcvbuf_errors: u64,
    pub foreign_control: u64,
    /// CPU seconds of the session's threads.
    pub cpu_s: CpuTime,
}

/// CPU seconds, or (after [`CpuTime::share`]) shares of one core.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
}

impl CpuTime {
    pub fn since(self, start: CpuTime) -> CpuTime {
        CpuTime {
            user: (self.user - start.user).max(0.0),
            system: (self.system - start.system).max(0.0),
        }
    }

    pub fn plus(self, o: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user + o.user,
            system: self.system + o.system,
        }
    }

    /// As a share of one core over `secs`.
    pub fn share(self, secs: f64) -> CpuTime {
        if secs <= 0.0 {
            return CpuTime::default();
        }
        CpuTime {
            user: self.user / secs,
            system: self.system / secs,
        }
    }
}

/// Host CPU over a run as a share of one core (2.0 = two cores busy).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct HostCpuShare {
    pub user: f64,
    pub system: f64,
    pub softirq: f64,
    pub idle: f64,
}

/// The TCP_INFO fields the result document carries.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct TcpInfo {
    pub retransmits: u64,
    pub rtt_s: f64,
    pub cwnd_bytes: u64,
    pub mss: u64,
}

/// One end of a run: its system and how it measured. `os`, `send_path` and
/// `rx_timestamps` let a report tell "Windows → Linux" from "Linux → Linux"
/// and a difference of the system from a difference of the measuring path;
/// documents written before they existed read as empty strings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    /// Kernel release (Linux, macOS, FreeBSD) or Windows version and build.
    pub kernel: String,
    pub cpus: u32,
    /// "linux", "windows", "macos", "freebsd" (Rust's `std::env::consts::OS`).
    #[serde(default)]
    pub os: String,
    /// How this end sends datagrams: "sendmmsg" (Linux) or "send".
    #[serde(default)]
    pub send_path: String,
    /// Where this end's receive times come from: "kernel" or "user".
    #[serde(default)]
    pub rx_timestamps: String,
}

impl ResultDoc {
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// `ip_version` is the number 4 or 6 in the document (the framing model's
/// [`IpVersion`] serialises as "v4"/"v6" elsewhere).
mod ip_number {
    use crate::IpVersion;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &IpVersion, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(v.number())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpVersion, D::Error> {
        match u8::deserialize(d)? {
            4 => Ok(IpVersion::V4),
            6 => Ok(IpVersion::V6),
            n => Err(D::Error::custom(format!(
                "ip_version must be 4 or 6, got {n}"
            ))),
        }
    }
}
