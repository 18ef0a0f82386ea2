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

/// Version of the control protocol; `Hello.version` must equal it.
pub const CONTROL_VERSION: u32 = 1;
/// A control line longer than this is refused: a foreign client must not be
/// able to make the daemon buffer without bound.
pub const MAX_CONTROL_LINE: usize = 4 << 20;

use wirebench_schema::live::LiveInterval;
use wirebench_schema::result::{FlowReport, ReportExtra};

/// Most intervals in one `Intervals` message (about 250 bytes of JSON each).
pub const MAX_LIVE_ITEMS: usize = 1024;
pub use wirebench_schema::{Direction, MeterMode, Transport};

/// What the receiver must prepare for one flow. `Default` is a UDP flow
/// with every optional part absent, so a literal names only what it sets
/// and a new optional field does not touch every literal.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FlowSetup {
    /// Flow id, unique within the session; probes carry it.
    pub flow_id: u16,
    /// UDP or TCP: decides what kind of data port the receiver opens.
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
    /// Receive buffer in bytes for this flow's data socket (`--window`);
    /// absent: the receiver's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvbuf: Option<u32>,
    /// A reverse flow (`-R`): the receiver sends it, paced by this model
    /// (the engine's own JSON of the flow's traffic model, stop condition
    /// and seed), to the session's sender only. Absent: a forward flow.
    /// An older receiver ignores it and answers `Ready` without `reverse`,
    /// which the sender refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<serde_json::Value>,
    /// The data port the receiver must open for this flow (`-rp`,
    /// `--data-port`; 1024 and up), or refuse the session saying why.
    /// Absent: the receiver chooses. An older receiver ignores it; the
    /// sender then sees another port in `Ready` and refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// This flow's meter when it differs from the session's (`Hello.meter`):
    /// the receiver reflects exactly the flows whose meter is rtt, so a
    /// bulk flow beside an RTT flow is not reflected. Absent: the session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter: Option<MeterMode>,
    /// The source port of the sender's data socket for this flow (bound
    /// before `Hello`): without probe MACs the receiver takes the flow's
    /// data only from the control connection's address at this port, so a
    /// datagram from another port cannot take the flow over. Absent (an
    /// older sender, or a reverse flow): the receiver learns the port from
    /// the first datagram that passes every check (docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_port: Option<u16>,
    /// A bulk UDP flow (`--max`): the receiver may take its datagrams
    /// coalesced (UDP GRO, `recv --gro`), which stamps each run of them
    /// with one receive time. Absent (paced flows, an older sender):
    /// every datagram is received and stamped on its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bulk: bool,
}

/// One control message; serialised with a `type` tag in snake_case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    /// Sender → receiver: open a session.
    Hello {
        /// Must be [`CONTROL_VERSION`].
        version: u32,
        /// Session id the sender chose; every probe of the session carries it.
        session: u32,
        /// One-way delay at the receiver, or round trip via reflection.
        meter: MeterMode,
        /// The flows to prepare, in flow-id order.
        flows: Vec<FlowSetup>,
        /// The sender's nonce (hex) when it authenticates with a key
        /// ([`crate::auth`]); absent otherwise, so unauthenticated Hellos
        /// read as before.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<String>,
        /// Stream interval figures during the run (`Intervals`) for the
        /// flows with an `interval_ms`. Older receivers ignore it and say
        /// nothing in `Ready.live`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        live: bool,
        /// Every probe of the session carries a MAC (`--auth probes`,
        /// [`crate::auth::ProbeKey`]); only with `auth`. Older receivers
        /// ignore it and say nothing in `Ready.auth_probes`, which the
        /// sender refuses.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        auth_probes: bool,
        /// The name the receiver should log this session under (ITGSend's
        /// `-x`): one file name, confined to the receiver's log directory
        /// ([`crate::limits::check_log_name`]). Absent: the receiver's own
        /// naming, if it logs at all. An older receiver ignores it and says
        /// nothing in `Ready.log`, which the sender refuses.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_name: Option<String>,
        /// The sender will send the session's flow by its AF_XDP path
        /// where it can and asks the receiver to take it off AF_XDP rings
        /// too (a receiver left to choose does so only when asked). Older
        /// receivers ignore it and use their socket path.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        xdp: bool,
    },
    /// Receiver → sender, after an authenticating `Hello`: the receiver's
    /// nonce and its proof that it holds the key (hex).
    Challenge {
        /// The receiver's nonce, fresh for this connection.
        nonce: String,
        /// HMAC over both nonces and the session id, receiver's label.
        proof: String,
    },
    /// Sender → receiver: the answer to `Challenge` (hex HMAC).
    Auth {
        /// HMAC over both nonces and the session id, sender's label.
        mac: String,
    },
    /// Receiver → sender: data port per flow, in the order of `Hello.flows`.
    Ready {
        /// One data port per flow, in the order of `Hello.flows`.
        ports: Vec<u16>,
        /// The receiver will send `Intervals` during the run (it was asked
        /// and knows how).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        live: bool,
        /// The receiver will send the reverse flows of `Hello.flows` (it
        /// knows how); absent from receivers that do not.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reverse: bool,
        /// The receiver checks (and puts) a MAC on every probe of the
        /// session, as `Hello.auth_probes` asked.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        auth_probes: bool,
        /// The file the receiver logs this session to, inside its log
        /// directory: `Hello.log_name`, or that name with a `-k` suffix
        /// when the name was taken. Present only when a name was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log: Option<String>,
    },
    /// Receiver → sender, during the run: every reverse flow has finished
    /// sending (the sender then sends `Stop`).
    ReverseDone,
    /// Receiver → sender, during the run and before `Report`: finished
    /// intervals of the flows, oldest first (only when `Hello.live` asked for
    /// them). At most [`MAX_LIVE_ITEMS`] per message.
    Intervals {
        /// The intervals, any flows, each flow's in order.
        items: Vec<LiveInterval>,
    },
    /// Clock-offset exchange (NTP-style four timestamps).
    TimeReq {
        /// Sender's clock when it sent the request.
        t1_ns: u64,
    },
    /// Receiver → sender: answer to `TimeReq` with the receiver's clock on receipt and reply.
    TimeResp {
        /// The request's `t1_ns`, echoed.
        t1_ns: u64,
        /// Receiver's clock when the request arrived.
        t2_ns: u64,
        /// Receiver's clock when the reply left.
        t3_ns: u64,
    },
    /// Sender → receiver: the measured clock offset (receiver clock minus
    /// sender clock) and its error bound, sent before `Start` so that the
    /// receiver's one-way delays are corrected as they are recorded.
    ClockOffset {
        /// Receiver clock minus sender clock, nanoseconds.
        offset_ns: i64,
        /// Half the round trip of the exchange the offset came from: the offset is within ± this.
        error_ns: u64,
    },
    /// Sender → receiver: traffic starts now.
    Start,
    /// Sender → receiver: all flows finished sending; the receiver waits
    /// `linger_ms` for stragglers and then reports.
    Stop {
        /// How long the receiver waits for late packets before it reports.
        linger_ms: u64,
        /// Packets sent per flow, in `Hello.flows` order, so the receiver can tell loss from not-sent.
        #[serde(default)]
        sent: Vec<u64>,
    },
    /// Receiver → sender: its side of every flow, in the result document's
    /// own types (wirebench-stats), so the sender reads it without an
    /// untyped detour.
    Report {
        /// One report per flow, in `Hello.flows` order.
        flows: Vec<FlowReport>,
        /// Session-wide figures (host, receive-buffer drops, CPU).
        #[serde(default)]
        extra: ReportExtra,
    },
    /// Either side: the session cannot go on, with the reason in words.
    Error {
        /// The reason, for the other side's user.
        message: String,
    },
    /// Either side: the session ends normally.
    Bye,
}

/// Why a control line could not be read.
#[derive(Debug, Error)]
pub enum ControlError {
    /// The line is longer than [`MAX_CONTROL_LINE`]; carries its length.
    #[error("control line of {0} bytes is longer than the {MAX_CONTROL_LINE}-byte limit")]
    TooLong(usize),
    /// The line is not a control message this version knows.
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

    /// Parses one line (with or without its newline); refuses overlong lines before parsing.
    pub fn from_line(line: &str) -> Result<Self, ControlError> {
        if line.len() > MAX_CONTROL_LINE {
            return Err(ControlError::TooLong(line.len()));
        }
        Ok(Self::parse(line.trim_end())?)
    }

    /// Parses one message of any length (the caller bounds it).
    ///
    /// `Report` is by far the largest message: one entry per flow with its
    /// delay and |IPDV| histograms. serde reads an internally tagged enum by
    /// first buffering the whole message as untyped content, some 100 bytes
    /// per histogram bucket: at 1 000 flows that was ~50 MB, most of the
    /// sender's peak memory. A report as [`ControlMsg::to_line`] writes it
    /// (compact JSON, tag first) is therefore read straight into its types;
    /// any other spelling takes the generic path.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        if text.starts_with(REPORT_PREFIX) {
            // The "type" key is ignored here: the prefix already named it.
            let b: ReportBody = serde_json::from_str(text)?;
            return Ok(b.into());
        }
        serde_json::from_str(text)
    }

    /// Reads one `Report` as [`ControlMsg::to_line`] writes it (compact,
    /// tag first) from `r`, which must end where the line ends: the caller
    /// has seen [`REPORT_PREFIX`] and bounds the line. Unlike
    /// [`ControlMsg::parse`] the line is never held whole: a report of 60
    /// flows is some 300 KB of JSON, which buffered as one line (grown by
    /// doubling to 512 KiB) was half of the sender's peak memory at the end
    /// of such a session.
    pub fn read_report<R: std::io::Read>(r: R) -> Result<Self, serde_json::Error> {
        let b: ReportBody = serde_json::from_reader(r)?;
        Ok(b.into())
    }
}

/// Writes a `Report` line exactly as [`ControlMsg::to_line`] spells it,
/// one flow at a time as `flows` yields them, so that the writer never holds
/// every flow's report at once (each carries up to 2 × 256 histogram
/// buckets: 8 KiB per flow at 60 flows, most of a receiver's peak at the
/// end of such a session).
pub fn write_report<W: std::io::Write>(
    mut w: W,
    flows: impl IntoIterator<Item = FlowReport>,
    extra: &ReportExtra,
) -> std::io::Result<()> {
    w.write_all(REPORT_PREFIX.as_bytes())?;
    w.write_all(br#""flows":["#)?;
    for (i, f) in flows.into_iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        serde_json::to_writer(&mut w, &f)?;
    }
    w.write_all(br#"],"extra":"#)?;
    serde_json::to_writer(&mut w, extra)?;
    w.write_all(b"}\n")
}

/// A `Report`'s fields, read straight into their types (see
/// [`ControlMsg::parse`]).
#[derive(Deserialize)]
struct ReportBody {
    flows: Vec<FlowReport>,
    #[serde(default)]
    extra: ReportExtra,
}

impl From<ReportBody> for ControlMsg {
    fn from(b: ReportBody) -> Self {
        ControlMsg::Report {
            flows: b.flows,
            extra: b.extra,
        }
    }
}

/// How [`ControlMsg::to_line`] begins a `Report`.
pub const REPORT_PREFIX: &str = r#"{"type":"report","#;

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
                    rcvbuf: Some(1 << 20),
                    reverse: Some(serde_json::json!({"seed": 3})),
                    port: Some(40000),
                    ..Default::default()
                }],
                auth: Some("00ff".into()),
                live: true,
                auth_probes: true,
                log_name: Some("recv.log".into()),
                xdp: true,
            },
            ControlMsg::Challenge {
                nonce: "01".into(),
                proof: "02".into(),
            },
            ControlMsg::Auth { mac: "03".into() },
            ControlMsg::Ready {
                ports: vec![40000],
                live: true,
                reverse: true,
                auth_probes: true,
                log: Some("recv-1.log".into()),
            },
            ControlMsg::ReverseDone,
            ControlMsg::Intervals {
                items: vec![LiveInterval {
                    flow_id: 1,
                    index: 2,
                    t_s: 0.2,
                    len_s: 0.1,
                    packets: 3,
                    bytes: 300,
                    throughput_bps: 24_000.0,
                    delay_mean_s: Some(0.001),
                    jitter_s: None,
                    lost: 1,
                    tcp: None,
                }],
            },
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

    /// A report as written takes the direct path and reads the same as
    /// through the tagged enum; other spellings still read.
    #[test]
    fn report_lines_read_directly_and_generically() {
        let mut summary = wirebench_schema::flow::RecvSummary::default();
        summary.counts.unique = 7;
        summary.delay_hist = Some(wirebench_schema::dist::Histogram {
            bits: 7,
            buckets_ns: vec![(-3, 1), (1003, 6)],
        });
        let m = ControlMsg::Report {
            flows: vec![FlowReport {
                flow_id: 1,
                summary,
                ..FlowReport::default()
            }],
            extra: ReportExtra::default(),
        };
        let line = m.to_line();
        assert!(line.starts_with(REPORT_PREFIX), "{line}");
        let generic: ControlMsg = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(generic, m);
        assert_eq!(ControlMsg::from_line(&line).unwrap(), m);
        let spaced = line.replacen(r#""type":"report","#, r#""type": "report", "#, 1);
        assert_eq!(ControlMsg::from_line(&spaced).unwrap(), m);
        assert!(ControlMsg::from_line(r#"{"type":"report","extra":{}}"#).is_err());
        // Written flow by flow: the same bytes.
        let two = ControlMsg::Report {
            flows: vec![
                FlowReport {
                    flow_id: 1,
                    foreign: 3,
                    ..FlowReport::default()
                },
                FlowReport {
                    flow_id: 2,
                    ..FlowReport::default()
                },
            ],
            extra: ReportExtra {
                rcvbuf_errors: 9,
                ..ReportExtra::default()
            },
        };
        for msg in [&m, &two] {
            let ControlMsg::Report { flows, extra } = msg.clone() else {
                unreachable!()
            };
            let mut out = Vec::new();
            write_report(&mut out, flows, &extra).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), msg.to_line());
        }
        // From a reader: the same message; a reader that ends early or
        // holds more than one value is an error.
        assert_eq!(ControlMsg::read_report(line.as_bytes()).unwrap(), m);
        assert!(ControlMsg::read_report(&line.as_bytes()[..line.len() - 3]).is_err());
        assert!(ControlMsg::read_report(format!("{line}{line}").as_bytes()).is_err());
    }

    #[test]
    fn hello_without_auth_reads_and_writes_as_before() {
        let line = r#"{"type":"hello","version":1,"session":3,"meter":"owd","flows":[]}"#;
        let m = ControlMsg::from_line(line).unwrap();
        assert!(matches!(m, ControlMsg::Hello { auth: None, .. }));
        assert!(!m.to_line().contains("auth"));
    }

    #[test]
    fn live_fields_are_optional_both_ways() {
        // An older sender's Hello and an older receiver's Ready parse, and
        // a session without live intervals writes the same lines as before.
        let old = r#"{"type":"hello","version":1,"session":5,"meter":"owd","flows":[]}"#;
        assert!(matches!(
            ControlMsg::from_line(old).unwrap(),
            ControlMsg::Hello { live: false, .. }
        ));
        assert_eq!(
            ControlMsg::from_line(r#"{"type":"ready","ports":[1]}"#).unwrap(),
            ControlMsg::Ready {
                ports: vec![1],
                live: false,
                reverse: false,
                auth_probes: false,
                log: None,
            }
        );
        let line = ControlMsg::Ready {
            ports: vec![1],
            live: false,
            reverse: false,
            auth_probes: false,
            log: None,
        }
        .to_line();
        assert_eq!(line, "{\"type\":\"ready\",\"ports\":[1]}\n");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(ControlMsg::from_line("hello").is_err());
        assert!(ControlMsg::from_line("{\"type\":\"nope\"}").is_err());
        assert!(ControlMsg::from_line(&"x".repeat(MAX_CONTROL_LINE + 1)).is_err());
    }
}
