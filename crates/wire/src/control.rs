//! Control messages between sender and receiver: one JSON object per line
//! on the TCP control connection (default port 5400).
//!
//! JSON lines keep the protocol inspectable with `nc` and tolerant of added
//! fields (unknown fields are ignored by serde), which matters for a tool
//! whose two halves may be different versions on different hosts. The
//! `version` in `Hello` is checked so a mismatch fails with a clear message
//! instead of a confusing parse error later.

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub const CONTROL_VERSION: u32 = 1;
/// A control line longer than this is refused: a foreign client must not be
/// able to make the daemon buffer without bound.
pub const MAX_CONTROL_LINE: usize = 4 << 20;

use wirebench_stats::result::{FlowReport, ReportExtra};
pub use wirebench_stats::{MeterMode, Transport};

/// What the receiver must prepare for one flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSetup {
    pub flow_id: u16,
    pub transport: Transport,
    /// Length of the per-interval series the receiver keeps, if any.
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// Largest probe the sender will send, so the receiver sizes buffers.
    #[serde(default)]
    pub max_len: u32,
    /// Path MTU the sender measured (0 = unknown), so both sides count
    /// frames and fragments alike.
    #[serde(default)]
    pub mtu: u32,
    /// Depth of the playout (jitter) buffer to judge this flow against, in
    /// ms (VoIP flows): the receiver reports the share of packets that would
    /// arrive too late for it.
    #[serde(default)]
    pub playout_buffer_ms: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    /// Sender → receiver: open a session.
    Hello {
        version: u32,
        session: u32,
        meter: MeterMode,
        flows: Vec<FlowSetup>,
    },
    /// Receiver → sender: data port per flow, in the order of `Hello.flows`.
    Ready {
        ports: Vec<u16>,
    },
    /// Clock-offset exchange (NTP-style four timestamps).
    TimeReq {
        t1_ns: u64,
    },
    TimeResp {
        t1_ns: u64,
        t2_ns: u64,
        t3_ns: u64,
    },
    /// Sender → receiver: the measured clock offset (receiver clock minus
    /// sender clock) and its error bound, sent before `Start` so that the
    /// receiver's one-way delays are corrected as they are recorded.
    ClockOffset {
        offset_ns: i64,
        error_ns: u64,
    },
    /// Sender → receiver: traffic starts now.
    Start,
    /// Sender → receiver: all flows finished sending; the receiver waits
    /// `linger_ms` for stragglers and then reports.
    Stop {
        linger_ms: u64,
        #[serde(default)]
        sent: Vec<u64>,
    },
    /// Receiver → sender: its side of every flow, in the result document's
    /// own types (wirebench-stats), so the sender reads it without an
    /// untyped detour.
    Report {
        flows: Vec<FlowReport>,
        #[serde(default)]
        extra: ReportExtra,
    },
    Error {
        message: String,
    },
    Bye,
}

#[derive(Debug, Error)]
pub enum ControlError {
    #[error("control line of {0} bytes is longer than the {MAX_CONTROL_LINE}-byte limit")]
    TooLong(usize),
    #[error("malformed control message: {0}")]
    Malformed(#[from] serde_json::Error),
}

impl ControlMsg {
    /// One line of JSON, newline included.
    pub fn to_line(&self) -> String {
        // Serialising these plain enums cannot fail: no maps with non-string
        // keys, no user-defined Serialize impls.
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| {
            format!("{{\"type\":\"error\",\"message\":\"encode failed: {e}\"}}")
        });
        s.push('\n');
        s
    }

    pub fn from_line(line: &str) -> Result<Self, ControlError> {
        if line.len() > MAX_CONTROL_LINE {
            return Err(ControlError::TooLong(line.len()));
        }
        Ok(serde_json::from_str(line.trim_end())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_message() {
        let msgs = vec![
            ControlMsg::Hello {
                version: CONTROL_VERSION,
                session: 1,
                meter: MeterMode::Rtt,
                flows: vec![FlowSetup {
                    flow_id: 1,
                    transport: Transport::Udp,
                    interval_ms: Some(1000),
                    max_len: 1400,
                    mtu: 1500,
                    playout_buffer_ms: Some(60),
                }],
            },
            ControlMsg::Ready { ports: vec![40000] },
            ControlMsg::TimeReq { t1_ns: 1 },
            ControlMsg::TimeResp {
                t1_ns: 1,
                t2_ns: 2,
                t3_ns: 3,
            },
            ControlMsg::ClockOffset {
                offset_ns: -5,
                error_ns: 7,
            },
            ControlMsg::Start,
            ControlMsg::Stop {
                linger_ms: 2000,
                sent: vec![10],
            },
            ControlMsg::Report {
                flows: vec![FlowReport {
                    flow_id: 3,
                    foreign: 2,
                    ..FlowReport::default()
                }],
                extra: ReportExtra::default(),
            },
            ControlMsg::Error {
                message: "x".into(),
            },
            ControlMsg::Bye,
        ];
        for m in msgs {
            let line = m.to_line();
            assert!(line.ends_with('\n'));
            assert_eq!(ControlMsg::from_line(&line).unwrap(), m);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(ControlMsg::from_line("hello").is_err());
        assert!(ControlMsg::from_line("{\"type\":\"nope\"}").is_err());
        assert!(ControlMsg::from_line(&"x".repeat(MAX_CONTROL_LINE + 1)).is_err());
    }
}
