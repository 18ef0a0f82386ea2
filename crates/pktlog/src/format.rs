//! The on-disk layout of a wirebench per-packet log (`wirebench.pktlog/1`)
//! and the types that travel through it: the file header with its JSON
//! metadata, the fixed 32-byte packet record, the checksummed blocks records
//! are grouped in, and the end block with the run's closing facts.
//!
//! Everything is little-endian (the byte order of every host wirebench runs
//! on, so a reader can map records without swapping). The full description,
//! with offsets, is in `docs/logs.md`; the constants here are the contract.

use serde::{Deserialize, Serialize};

/// First 8 bytes of every log. The high-bit first byte and the CR LF / ^Z
/// pair catch the usual ways a binary file is mangled (7-bit transfer,
/// line-ending conversion, `type` on Windows), as PNG's signature does.
pub const MAGIC: [u8; 8] = *b"\x89WBL\r\n\x1a\n";
/// Format version written by this crate.
pub const VERSION: u16 = 1;
/// Bytes of the fixed part of the header: magic, version, record length,
/// metadata length.
pub const HEADER_FIXED_LEN: usize = 16;
/// Bytes of one packet record in version 1.
pub const RECORD_LEN: usize = 32;
/// Bytes of a block header (tag, record count, CRC-32, reserved).
pub const BLOCK_HEADER_LEN: usize = 16;
/// Tag of a block of records.
pub const BLOCK_TAG: [u8; 4] = *b"WBLB";
/// Tag of the end block (the writer finished).
pub const END_TAG: [u8; 4] = *b"WBLE";
/// Upper bound on records per block; a reader refuses larger counts, so a
/// corrupt count can never make it allocate or read without bound.
pub const MAX_BLOCK_RECORDS: usize = 65_536;
/// Upper bound on the JSON metadata and footer (1 MiB), for the same reason.
pub const MAX_JSON_LEN: usize = 1 << 20;

/// `rx_ns` holds a receive time (receiver logs; reflections in sender logs).
pub const FLAG_RX: u16 = 0x0001;
/// The schedule wanted this packet but it was not sent (sender logs);
/// `tx_ns` is then the scheduled time and the sequence number is the one
/// the next sent packet carries.
pub const FLAG_NOT_SENT: u16 = 0x0002;
/// An RTT reflection received back by the sender: `rx_ns` is the arrival
/// time minus the reflector's dwell time, so `rx_ns − tx_ns` is the round
/// trip the result document reports.
pub const FLAG_REFLECTED: u16 = 0x0004;
/// The sender marked this probe as the last of its flow.
pub const FLAG_LAST: u16 = 0x0008;
/// Flags defined by version 1; a reader keeps unknown bits (a newer writer
/// may set them) but never interprets them.
pub const KNOWN_FLAGS: u16 = FLAG_RX | FLAG_NOT_SENT | FLAG_REFLECTED | FLAG_LAST;

/// One packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Record {
    /// Flow id as in the result document.
    pub flow: u16,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Transport payload bytes, probe header included (the result
    /// document's byte unit).
    pub size: u32,
    /// Sequence number, reconstructed to 64 bits.
    pub seq: u64,
    /// Sender's transmit time, ns since the Unix epoch on the sender's clock.
    pub tx_ns: u64,
    /// Receive time, ns since the Unix epoch on the logging host's clock;
    /// 0 unless `FLAG_RX` is set.
    pub rx_ns: u64,
}

impl Record {
    /// Writes the record's 32 bytes: seq, tx, rx (u64), size (u32), flow,
    /// flags (u16).
    pub fn encode(&self, out: &mut [u8; RECORD_LEN]) {
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..16].copy_from_slice(&self.tx_ns.to_le_bytes());
        out[16..24].copy_from_slice(&self.rx_ns.to_le_bytes());
        out[24..28].copy_from_slice(&self.size.to_le_bytes());
        out[28..30].copy_from_slice(&self.flow.to_le_bytes());
        out[30..32].copy_from_slice(&self.flags.to_le_bytes());
    }

    /// Reads a record written by [`Record::encode`].
    pub fn decode(b: &[u8; RECORD_LEN]) -> Self {
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Self {
            seq: u64_at(0),
            tx_ns: u64_at(8),
            rx_ns: u64_at(16),
            size: u32::from_le_bytes([b[24], b[25], b[26], b[27]]),
            flow: u16::from_le_bytes([b[28], b[29]]),
            flags: u16::from_le_bytes([b[30], b[31]]),
        }
    }

    /// True when the record carries a receive time.
    pub fn received(&self) -> bool {
        self.flags & FLAG_RX != 0
    }

    /// rx − tx − `offset_ns`: the delay the engine recorded (one-way in
    /// receiver logs, round trip minus dwell for reflections). None without
    /// a receive time.
    pub fn delay_ns(&self, offset_ns: i64) -> Option<i64> {
        if !self.received() {
            return None;
        }
        let d = i128::from(self.rx_ns) - i128::from(self.tx_ns) - i128::from(offset_ns);
        Some(d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
    }
}

/// Which end wrote the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The sender: one record per packet sent (or not sent), plus RTT
    /// reflections it received.
    Send,
    /// The receiver: one record per probe received, in arrival order.
    Recv,
}

/// What the statistics need to know about one flow of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowMeta {
    /// Flow id, as in the records.
    pub id: u16,
    /// "udp" or "tcp".
    pub transport: String,
    /// 4 or 6.
    pub ip_version: u8,
    /// Path MTU the framing model used.
    pub mtu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Source address of the flow's packets, when known.
    pub src: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Destination address, when known.
    pub dst: Option<String>,
}

/// The header's JSON metadata: enough to recompute the run's figures from
/// the records alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// Which end wrote the log.
    pub side: Side,
    /// "owd" or "rtt".
    pub meter: String,
    /// Control-session id the probes carried.
    #[serde(default)]
    pub session: u32,
    /// RFC 3339 start of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Writer, e.g. "wirebench 0.1.0".
    #[serde(default)]
    pub tool: String,
    /// Subtracted from rx − tx to give the delay the engine recorded (the
    /// clock offset when it was applied, else 0); receiver logs only.
    #[serde(default)]
    pub delay_offset_ns: i64,
    /// The flows of the run.
    pub flows: Vec<FlowMeta>,
    /// A sender log of a run with several receivers (one session each):
    /// which flows went in which session. Empty for a one-session log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<LogSession>,
}

/// One session of a log that holds several (see [`LogMeta::sessions`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSession {
    /// The control-session id its probes carried.
    pub session: u32,
    /// The receiver it went to, as the sender named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest: Option<String>,
    /// Its flows' ids in this log.
    pub flows: Vec<u16>,
}

/// Per-flow facts known only when the run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowEnd {
    /// Flow id.
    pub id: u16,
    /// Packets the sender sent (sequence numbers 0..sent); loss is counted
    /// against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    #[serde(default)]
    /// Packets the sender could not send (counted neither sent nor lost).
    pub not_sent: u64,
}

/// The end block's JSON footer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LogFooter {
    /// Records in the file.
    pub records: u64,
    /// Records that could not be logged because the writer fell behind
    /// (the log is then incomplete; the run itself was not slowed).
    #[serde(default)]
    pub dropped: u64,
    /// Records not written because the log reached its size cap
    /// (`recv --log-max`, `--log-max-total`); the log is then incomplete.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capped: u64,
    #[serde(default)]
    /// End facts per flow.
    pub flows: Vec<FlowEnd>,
    /// True when the run was cut short (receiver gone, Ctrl-C).
    #[serde(default)]
    pub partial: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
