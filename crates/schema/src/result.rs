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

use crate::flow::{
    DelayStats, Frames, Interval, Jitter, RecvCounts, RecvSummary, SendSummary, Throughput,
};
pub use crate::opts::{DscpCount, MarksSeen, SockOpts};
use crate::{Direction, IpVersion, MeterMode, Transport};
use serde::{Deserialize, Serialize};

/// Schema name and version every result document carries in `schema`.
pub const SCHEMA: &str = "wirebench.result/1";

/// One run's result document (`wirebench.result/1`), as `send --json` writes it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ResultDoc {
    /// Always [`SCHEMA`]; readers refuse other values.
    pub schema: String,
    /// The program that wrote the document.
    pub tool: Tool,
    /// RFC 3339 UTC time the traffic started.
    pub started_at: String,
    /// Serialised "owd" or "rtt".
    pub meter: MeterMode,
    /// True when the run ended early (peer gone); numbers cover what was seen.
    pub partial: bool,
    /// Why the run is partial, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reason: Option<String>,
    /// The command line that produced the run, when the writer knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The sending host.
    pub host: HostInfo,
    /// How the receiver's clock was related to the sender's.
    pub clock: ClockInfo,
    /// Every flow of the session, in flow-id order.
    pub flows: Vec<FlowResult>,
    /// All flows together.
    pub total: Total,
    /// The receiving host and its session-wide counters.
    pub receiver: ReceiverInfo,
    /// CPU use of both ends and the sending host.
    pub cpu: Cpu,
    /// A script with several receivers: one session per receiver, started
    /// together (`clock` and `receiver` above are the first one's). Absent
    /// for a run with one receiver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<SessionPart>,
}

/// One receiver's session of a run with several receivers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SessionPart {
    /// The receiver as the command line or script named it.
    pub dest: String,
    /// Ids (in this document) of the flows that went to it.
    pub flows: Vec<u16>,
    /// Its clock against ours.
    pub clock: ClockInfo,
    /// Its host and session-wide counters.
    pub receiver: ReceiverInfo,
    /// Why its part is partial, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reason: Option<String>,
}

/// Name and version of the writing program.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Tool {
    /// Always "wirebench" for documents this project writes.
    pub name: String,
    /// The writer's package version.
    pub version: String,
}

/// The clock-offset measurement between sender and receiver.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ClockInfo {
    /// Receiver clock minus sender clock as measured.
    pub offset_s: f64,
    /// Half the round trip of the best exchange: the offset is within ± this.
    pub error_s: f64,
    /// Whether `offset_s` was subtracted from the delays: only when it is
    /// larger than its error bound (else it cannot be told from zero).
    pub applied: bool,
    /// How the offset was measured, in words (an NTP-style exchange on the
    /// control connection, smallest round trip of the samples).
    pub method: String,
    /// Number of exchanges the offset was chosen from.
    pub samples: u32,
}

/// What the flow was asked to do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Requested {
    /// Mean packets per second asked for; null for `--max`.
    pub rate_pps: Option<f64>,
    /// Mean payload bytes per packet the model asked for.
    pub payload_bytes: f64,
    /// The traffic model in words (D-ITG style).
    pub model: String,
    /// "duration 2000 ms", "packets 100", "kbytes 10".
    pub stop: String,
    /// Seed of the flow's random stream, so the schedule can be repeated.
    pub seed: u64,
    /// How long after the session's schedule start (t_0) this flow's
    /// schedule starts: flows are spread over one mean gap so that they do
    /// not all fall due at the same instant (docs/engine.md, Pacing); 0
    /// with `--phases aligned`, for a lone flow and for `--max`.
    #[serde(default)]
    pub start_phase_s: f64,
    /// Payload content other than the default filler (`--payload`):
    /// "zeros", "random" or "file:PATH".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

/// The receiver's counts of one flow (`received` in the document): the
/// measuring end's [`RecvCounts`] and what only the receiver daemon sees.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Received {
    /// Counts and statistics the measuring end computed.
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
    /// The DSCP / TTL / flow label the receiver saw in the data packets'
    /// IP headers (UDP flows; absent where the kernel does not tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<MarksSeen>,
    /// The address and port the flow's data came from, as the receiver
    /// saw them (`"127.0.0.2:9000"`, `"[::1]:9000"`): the UDP datagrams'
    /// source or the TCP connection's peer. Absent when nothing arrived
    /// and for reverse flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// Where lost packets went: not sent, dropped at the sending or the receiving host, or lost in the network.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct LossSplit {
    /// Packets the schedule wanted but the sender could not put on the wire.
    pub not_sent: u64,
    /// Sent (the socket took them) but dropped by the sending host itself:
    /// its interface queue or socket buffer was full (UDP only; the
    /// namespace's SndbufErrors shared out like `receiver_host`).
    #[serde(default)]
    pub sender_host: u64,
    /// Packets dropped in the receiving host (socket buffer overflow).
    pub receiver_host: u64,
    /// The rest of the loss: dropped somewhere on the path.
    pub network: u64,
}

/// One flow's result: what was asked, sent, received and measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FlowResult {
    /// Flow id, unique within the session.
    pub id: u16,
    /// "forward" (sender to receiver) or "reverse" (`-R`: the receiver
    /// sent, the sender measured); `src`/`dst` follow the packets.
    #[serde(default)]
    pub direction: Direction,
    /// Serialised "udp" or "tcp".
    pub transport: Transport,
    /// Serialised as the number 4 or 6.
    #[serde(with = "ip_number")]
    pub ip_version: IpVersion,
    /// Sender's IP address.
    pub src: String,
    /// Receiver's (destination) IP address.
    pub dst: String,
    /// Path MTU used for the framing model.
    pub mtu: u32,
    /// What the flow asked for.
    pub requested: Requested,
    /// Socket options the flow asked for (marking); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<SockOpts>,
    /// The sender's counts and schedule accuracy.
    pub sent: SendSummary,
    /// The receiver's counts.
    pub received: Received,
    /// Where the lost packets went.
    pub loss_split: LossSplit,
    /// Received throughput (goodput at the payload layer).
    pub throughput_bps: Throughput,
    /// Frame counts after IP fragmentation by the framing model.
    pub frames: Frames,
    /// One-way (owd) delay statistics, seconds.
    pub delay_s: DelayStats,
    /// Jitter (RFC 3550 and mean absolute delay variation), seconds.
    pub jitter_s: Jitter,
    /// Round-trip time statistics (rtt meter only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_s: Option<DelayStats>,
    /// Probes reflected back to the sender (rtt meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_received: Option<u64>,
    /// TCP_INFO at the end of a TCP flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpInfo>,
    /// TCP: the congestion control algorithm the kernel used, read back
    /// from the socket (`--cc`, or the system default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_cc: Option<String>,
    /// TCP with `--zerocopy`: whether the kernel sent from the flow's
    /// buffers and what it reported. Absent without `--zerocopy` (and in
    /// documents written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zerocopy: Option<ZeroCopy>,
    /// UDP sent with segmentation offload (`--gso`, by default `--max`
    /// flows on Linux): how the datagrams left. Absent where GSO was not
    /// tried (and in documents written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gso: Option<Gso>,
    /// E-model for VoIP application models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voip: Option<Voip>,
    /// Finite transfers (`-k`, `-z`, the file model): first byte sent to
    /// last byte received, clock-corrected, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_s: Option<f64>,
    /// Per-interval figures when `--interval` was given.
    pub intervals: Vec<Interval>,
    /// One-way delays as a compact histogram (docs/results.md "Distributions").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_hist: Option<crate::dist::Histogram>,
    /// |IPDV| values as a compact histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv_hist: Option<crate::dist::Histogram>,
}

/// What became of a TCP flow's zero-copy sends (`--zerocopy`, Linux
/// MSG_ZEROCOPY; the kernel's docs/networking/msg_zerocopy.rst).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ZeroCopy {
    /// At least one write went out with MSG_ZEROCOPY.
    pub used: bool,
    /// Writes made with MSG_ZEROCOPY that the kernel took (it numbers
    /// exactly these).
    pub sends: u64,
    /// Of those, the ones whose completion the kernel reported by the
    /// flow's end (the rest were still unacknowledged).
    pub completed: u64,
    /// Completed sends in ranges the kernel flagged as copied
    /// (SO_EE_CODE_ZEROCOPY_COPIED): it delivered them to a local socket
    /// (loopback, veth into a namespace of this host) or the device could
    /// not send from user pages, so the copy was made after all.
    pub copied: u64,
    /// Why the flow wrote (from some point on) without MSG_ZEROCOPY: the
    /// kernel refused SO_ZEROCOPY, or a send with ENOBUFS (optmem_max or
    /// locked-memory limits). Said once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// How a UDP flow's datagrams left with segmentation offload (UDP GSO,
/// Linux UDP_SEGMENT; the kernel's docs/networking/segmentation-offloads.rst):
/// one send carries a run of same-size probes, each a complete datagram
/// with its own sequence number and transmit time, which the kernel or
/// the device cuts apart.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct Gso {
    /// At least one segmented send went out.
    pub used: bool,
    /// Segmented sends the kernel took (two or more datagrams each).
    pub sends: u64,
    /// Datagrams those sends carried (the rest of the flow's, if any,
    /// went as plain datagrams: different sizes side by side, a run of
    /// one, or after a fallback).
    pub datagrams: u64,
    /// `datagrams / sends` (0 without sends).
    pub segments_per_send: f64,
    /// Why the flow sent plain datagrams from some point on: the kernel
    /// refused a segmented send (e.g. a device that cannot checksum, a
    /// segment longer than the path's MTU). Said once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// ITU-T G.107 E-model figures for a VoIP flow.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Voip {
    /// Transmission rating factor R (0–100).
    pub r_factor: f64,
    /// Mean opinion score from R (1–4.5).
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
    /// Packets sent, all flows.
    pub sent_packets: u64,
    /// Packets the schedules wanted but could not send, all flows.
    pub not_sent: u64,
    /// Packets received, all flows.
    pub received_packets: u64,
    /// Packets lost, all flows; `None` (JSON `null`) when any flow's
    /// loss is unknown (its receiver report is missing).
    pub lost: Option<u64>,
    /// `lost` over `sent_packets`; `None` exactly when `lost` is.
    pub loss_ratio: Option<f64>,
    /// All flows' bytes over the union of their spans (earliest start to
    /// latest last arrival on the receiver's clock), not the sum of the
    /// flows' rates: flows that do not overlap share one span. Documents
    /// written before it existed read it as zero; readers then add up the
    /// flows' rates.
    #[serde(default)]
    pub throughput_bps: Throughput,
    /// UDP datagrams the sending host's namespace dropped during the run
    /// (interface queue or socket buffer full; /proc/net/snmp + snmp6).
    #[serde(default)]
    pub sender_host_drops: u64,
    /// Packet-weighted mean of the flows' mean delays.
    pub delay_mean_s: f64,
    /// Largest one-way delay of any flow.
    pub delay_max_s: f64,
    /// The path's bottleneck link rate, bit/s on the wire, when the run was
    /// told it (`send --link-rate`; campaigns pass their link's rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_rate_bps: Option<f64>,
    /// The payload throughput that link allows this run's traffic: link
    /// rate × payload bits ÷ wire bits of what was received (the Ethernet
    /// upper-bound model applied to the run's own packet mix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper_bound_bps: Option<f64>,
    /// Relative uncertainty the bound check allows: the clock offset's
    /// error over the span, plus 0.1 % for timestamp and shaper resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_tolerance: Option<f64>,
    /// With a link rate: true when the run carried more wire bits per
    /// second than the link by more than `bound_tolerance` — no link can,
    /// so the number is a measurement or emulation error, not a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_bound: Option<bool>,
    /// How evenly two or more flows shared the run (absent with one flow,
    /// and in documents written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<Fairness>,
}

/// How evenly a run's flows shared it: Jain's fairness index over their
/// received payload throughputs over the run's common span (the union span
/// of `Total::throughput_bps`), and the slowest and fastest flow on that
/// span. A flow that received nothing counts, as 0.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
pub struct Fairness {
    /// (Σx)² / (n·Σx²) over the n flows' throughputs x: 1 when all are
    /// equal, 1/n when one flow has everything (R. Jain, D. Chiu, W. Hawe,
    /// DEC-TR-301, 1984).
    pub jain: f64,
    /// Flows the index is over.
    pub flows: usize,
    /// Id of the slowest flow.
    pub min_flow: u16,
    /// The slowest flow's payload bit/s over the common span.
    pub min_bps: f64,
    /// Id of the fastest flow.
    pub max_flow: u16,
    /// The fastest flow's payload bit/s over the common span.
    pub max_bps: f64,
}

/// The receiving end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct ReceiverInfo {
    /// The receiving host.
    pub host: HostInfo,
    /// UDP receive-buffer drops in the receiver's network namespace during
    /// the run (all sockets, /proc/net/snmp + snmp6).
    pub rcvbuf_errors: u64,
    /// Connections to the control port during the run that were not a
    /// wirebench session.
    pub foreign_control: u64,
    /// The file, in the receiver's log directory, it logged this session
    /// to when the sender named one (`send -x NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// CPU use over the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Cpu {
    /// Shares of one core over the run.
    pub sender: CpuTime,
    /// The receiver's session threads.
    pub receiver: CpuTime,
    /// The sending host as a whole.
    pub host: HostCpuShare,
}

/// The receiver's per-flow report, sent in `ControlMsg::Report.flows`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct FlowReport {
    /// Flow id the report is for.
    pub flow_id: u16,
    /// The receiver's accumulated counts and statistics.
    pub summary: RecvSummary,
    /// Datagrams / connections on the flow's data port that were not ours.
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
    /// What the receiver saw in the data packets' IP headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<MarksSeen>,
    /// Where the flow's data came from (address:port), as the receiver saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// A reverse flow (`-R`): what the receiver sent on it (the sender
    /// received and measured it); absent for forward flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<SendSummary>,
}

/// The receiver's session-wide report, `ControlMsg::Report.extra`; a
/// field an older receiver does not send reads as zero.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct ReportExtra {
    /// The receiving host.
    pub host: HostInfo,
    /// UDP receive-buffer drops in the receiver's namespace during the session.
    pub rcvbuf_errors: u64,
    /// Connections to the control port that were not a wirebench session.
    pub foreign_control: u64,
    /// CPU seconds of the session's threads.
    pub cpu_s: CpuTime,
}

/// CPU seconds, or (after [`CpuTime::share`]) shares of one core.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuTime {
    /// User-mode CPU.
    pub user: f64,
    /// Kernel-mode CPU.
    pub system: f64,
}

impl CpuTime {
    /// The time spent since `start` (never negative).
    pub fn since(self, start: CpuTime) -> CpuTime {
        CpuTime {
            user: (self.user - start.user).max(0.0),
            system: (self.system - start.system).max(0.0),
        }
    }

    /// The sum of two CPU times.
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
    /// User-mode share.
    pub user: f64,
    /// Kernel-mode share.
    pub system: f64,
    /// Soft-interrupt share (where the kernel does most packet work).
    pub softirq: f64,
    /// Idle share.
    pub idle: f64,
    /// Steal share: time a hypervisor gave these virtual CPUs to someone
    /// else while the run went on (Linux `steal` in /proc/stat; 0 on bare
    /// metal and on systems that do not count it). While a CPU is stolen
    /// nothing on it runs, so packets due then leave late: a run with steal
    /// explains its schedule error. Documents written before it read 0.
    #[serde(default)]
    pub steal: f64,
}

/// The TCP_INFO fields the result document carries.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct TcpInfo {
    /// Retransmitted segments over the connection's life.
    pub retransmits: u64,
    /// Smoothed round-trip time the kernel estimated.
    pub rtt_s: f64,
    /// Congestion window in bytes (segments × MSS).
    pub cwnd_bytes: u64,
    /// Maximum segment size the connection used.
    pub mss: u64,
    /// The kernel's pacing rate for the connection, bytes per second as
    /// bit/s (Linux 4.2+; absent elsewhere and in older documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_rate_bps: Option<f64>,
    /// Delivery rate of the most recent ACKed data, bit/s (Linux 4.9+;
    /// absent elsewhere and in older documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate_bps: Option<f64>,
}

/// One end of a run: its system and how it measured. `os`, `send_path` and
/// `rx_timestamps` let a report tell "Windows → Linux" from "Linux → Linux"
/// and a difference of the system from a difference of the measuring path;
/// documents written before they existed read as empty strings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HostInfo {
    /// Kernel release (Linux, macOS, FreeBSD) or Windows version and build.
    pub kernel: String,
    /// Number of online CPUs.
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

/// Why a stored document is not a [`ResultDoc`].
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `schema` is missing or names another schema or version.
    #[error("schema is {0:?}, not {SCHEMA:?}")]
    Schema(String),
    /// A key has the wrong type or a required key is missing.
    #[error("result document: {0}")]
    Shape(#[from] serde_json::Error),
}

impl ResultDoc {
    /// Reads a stored document (a campaign store row, a `--json` file),
    /// refusing documents of another schema. Keys added since a document
    /// was written read as their defaults (`#[serde(default)]`).
    pub fn from_stored(v: &serde_json::Value) -> Result<ResultDoc, ReadError> {
        match v.get("schema").and_then(serde_json::Value::as_str) {
            Some(SCHEMA) => Ok(ResultDoc::deserialize(v)?),
            other => Err(ReadError::Schema(other.unwrap_or("").to_string())),
        }
    }

    /// A document of this schema and tool with the given flows and
    /// everything else at its default: what tests and replays build.
    pub fn with_flows(flows: Vec<FlowResult>) -> ResultDoc {
        ResultDoc {
            schema: SCHEMA.into(),
            tool: Tool {
                name: "wirebench".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            flows,
            ..ResultDoc::default()
        }
    }

    /// The document as indented JSON, as `--json` writes it.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow written before `zerocopy` existed reads as None, and the
    /// object round-trips with `fallback` left out when there was none.
    #[test]
    fn zerocopy_is_optional_and_round_trips() {
        let mut f = FlowResult::default();
        let mut v = serde_json::to_value(&f).unwrap();
        assert!(v.get("zerocopy").is_none());
        v.as_object_mut().unwrap().remove("zerocopy");
        let old: FlowResult = serde_json::from_value(v).unwrap();
        assert_eq!(old.zerocopy, None);
        f.zerocopy = Some(ZeroCopy {
            used: true,
            sends: 10,
            completed: 9,
            copied: 9,
            fallback: None,
        });
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v["zerocopy"],
            serde_json::json!({"used": true, "sends": 10, "completed": 9, "copied": 9})
        );
        let back: FlowResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }
}
