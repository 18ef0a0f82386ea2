//! The result document `wirebench.result/1`: one JSON object per run, SI
//! units (seconds, bits per second, bytes), and its assembly from what the
//! pacer sent and the receiver reported ([`build_doc`]). Field meanings:
//! docs/engine.md and docs/metrics.md.

use crate::pacing::FlowSent;
use crate::plan::{SessionPlan, Stop};
use crate::session::Offset;
use crate::sys::{self, CpuTime, HostCpuShare, HostInfo, TcpInfo};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use wirebench_model::voip::JitterBuffer;
use wirebench_stats::{
    DelayStats, Frames, Interval, Jitter, LossBursts, RecvSummary, SendSummary, Throughput,
};
use wirebench_wire::{MeterMode, Transport};

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
    /// Probes of this session that cannot be the sender's: sequence numbers
    /// at or beyond what it sent, or beyond what it could have reached when
    /// they arrived. Not in packets/unique/lost/reordered. Non-zero means
    /// someone injected packets (use `--auth probes` to keep them out of
    /// every figure).
    #[serde(default)]
    pub forged: u64,
    /// Probes whose one-way delay was outside ± 60 s: kept out of every
    /// statistic.
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
    /// Probes refused at once: a sequence number the sender cannot have
    /// reached yet (wirebench_wire::limits::max_plausible_seq).
    #[serde(default)]
    pub forged: u64,
    /// Probes refused for a delay outside ± 60 s (forged or corrupt
    /// timestamp, or a clock that jumped).
    #[serde(default)]
    pub implausible_delays: u64,
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

pub(crate) struct DocParts<'a> {
    pub plan: &'a SessionPlan,
    pub started_real: u64,
    pub src: SocketAddr,
    pub dst_ip: IpAddr,
    pub mtu: u32,
    pub clock: Offset,
    pub outcomes: Vec<FlowSent>,
    pub reports: Vec<FlowReport>,
    pub extra: ReportExtra,
    pub run_s: f64,
    pub cpu_sender: CpuTime,
    pub host: sys::HostCpuShare,
    pub partial: Option<String>,
}

pub(crate) fn build_doc(p: DocParts) -> ResultDoc {
    let mut flows = Vec::new();
    let total_lost: u64 = p.reports.iter().map(|r| r.summary.lost).sum();
    let host_drops = p.extra.rcvbuf_errors;
    let mut total = Total::default();
    let mut delay_weighted = 0.0;
    for (i, (f, o)) in p.plan.flows.iter().zip(&p.outcomes).enumerate() {
        let id = (i + 1) as u16;
        let rep = p.reports.iter().find(|r| r.flow_id == id);
        let s = rep.map(|r| r.summary.clone()).unwrap_or_default();
        // Namespace-wide buffer drops are shared out in proportion to each
        // flow's losses, and never exceed them.
        let receiver_host = if total_lost > 0 && f.transport == Transport::Udp {
            ((host_drops.min(total_lost) as f64) * s.lost as f64 / total_lost as f64).round() as u64
        } else {
            0
        }
        .min(s.lost);
        let received = Received {
            packets: s.packets,
            unique: s.unique,
            bytes: s.bytes,
            lost: s.lost,
            loss_ratio: s.loss_ratio,
            duplicates: s.duplicates,
            reordered: s.reordered,
            foreign: rep.map(|r| r.foreign).unwrap_or(0),
            loss_bursts: s.loss_bursts,
            negative_delays: s.negative_delays,
            negative_delays_beyond_error: rep.map(|r| r.negative_beyond_error).unwrap_or(0),
            forged: s.forged + rep.map(|r| r.forged).unwrap_or(0),
            implausible_delays: rep.map(|r| r.implausible_delays).unwrap_or(0),
        };
        total.sent_packets += o.send.packets;
        total.not_sent += o.send.not_sent;
        total.received_packets += s.unique;
        total.lost += s.lost;
        total.throughput_bps.payload += s.throughput_bps.payload;
        total.throughput_bps.ip += s.throughput_bps.ip;
        total.throughput_bps.ethernet += s.throughput_bps.ethernet;
        total.throughput_bps.wire += s.throughput_bps.wire;
        delay_weighted += s.delay_s.mean * s.packets as f64;
        total.delay_max_s = total.delay_max_s.max(s.delay_s.max);
        flows.push(FlowResult {
            id,
            transport: match f.transport {
                Transport::Udp => "udp".into(),
                Transport::Tcp => "tcp".into(),
            },
            ip_version: if p.dst_ip.is_ipv4() { 4 } else { 6 },
            src: p.src.ip().to_string(),
            dst: p.dst_ip.to_string(),
            mtu: p.mtu,
            requested: Requested {
                rate_pps: f.spec.nominal_rate_pps(),
                payload_bytes: f.spec.nominal_payload_bytes(),
                model: f.spec.describe(),
                stop: match f.stop {
                    Stop::DurationMs(ms) => format!("duration {ms} ms"),
                    Stop::Packets(n) => format!("packets {n}"),
                    Stop::KBytes(k) => format!("kbytes {k}"),
                },
                seed: f.seed,
            },
            sent: o.send.clone(),
            received,
            loss_split: LossSplit {
                not_sent: o.send.not_sent,
                receiver_host,
                network: s.lost - receiver_host,
            },
            throughput_bps: s.throughput_bps,
            frames: s.frames,
            delay_s: s.delay_s,
            jitter_s: s.jitter_s,
            rtt_s: o.rtt.as_ref().map(|r| r.delay_s),
            rtt_received: o.rtt.as_ref().map(|r| r.unique),
            tcp: o.tcp,
            voip: f.spec.voip_codec().map(|c| {
                // A fixed playout buffer anchored at the fastest packet: the
                // mouth-to-ear delay is coding + fastest network delay +
                // buffer, and packets later than the buffer are lost to the
                // listener (the receiver measured their share).
                let jb = JitterBuffer::new(f64::from(p.plan.jitter_buffer_ms) / 1e3);
                let base = s.delay_s.min.max(0.0);
                let late = s.late_share.unwrap_or(0.0);
                let q = jb.quality(&c, base, s.loss_ratio, late);
                Voip {
                    r_factor: q.r_factor,
                    mos: q.mos,
                    mouth_to_ear_s: c.coding_delay_s() + base + jb.depth_s,
                    jitter_buffer_s: jb.depth_s,
                    late_share: late,
                }
            }),
            completion_s: (f.spec.transfer_bytes.is_some() && s.unique > 0 && o.first_tx > 0).then(
                || {
                    (s.last_arrival_ns as i64 - p.clock.applied_ns() - o.first_tx as i64) as f64
                        / 1e9
                },
            ),
            intervals: s.intervals,
        });
    }
    if total.received_packets > 0 {
        total.delay_mean_s = delay_weighted
            / p.reports
                .iter()
                .map(|r| r.summary.packets as f64)
                .sum::<f64>()
                .max(1.0);
    }
    if total.sent_packets > 0 {
        total.loss_ratio = total.lost as f64 / total.sent_packets as f64;
    }
    ResultDoc {
        schema: SCHEMA.into(),
        tool: Tool {
            name: "wirebench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at: rfc3339(p.started_real),
        meter: match p.plan.meter {
            MeterMode::Owd => "owd".into(),
            MeterMode::Rtt => "rtt".into(),
        },
        partial: p.partial.is_some(),
        partial_reason: p.partial,
        command: p.plan.command.clone(),
        host: sys::host_info(),
        clock: ClockInfo {
            offset_s: p.clock.offset_ns as f64 / 1e9,
            error_s: p.clock.error_ns as f64 / 1e9,
            applied: p.clock.applied(),
            method: "NTP-style 4-timestamp exchange over the control connection, smallest round trip of the samples".into(),
            samples: p.clock.samples,
        },
        flows,
        total,
        receiver: ReceiverInfo {
            host: p.extra.host.clone(),
            rcvbuf_errors: p.extra.rcvbuf_errors,
            foreign_control: p.extra.foreign_control,
        },
        cpu: Cpu {
            sender: p.cpu_sender.share(p.run_s),
            receiver: p.extra.cpu_s.share(p.run_s),
            host: p.host,
        },
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
