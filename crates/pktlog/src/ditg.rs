//! Reader for D-ITG's binary logs (ITGSend `-l`, ITGRecv / ITGSend `-x`,
//! D-ITG 2.8), so a D-ITG user's archives decode with the same statistics
//! as wirebench's own logs.
//!
//! The layout was established by reading logs that ITGSend/ITGRecv wrote
//! next to ITGDec's text dump of the same files
//! (`ITGDec LOG -l out.txt`): 144-byte records in the host's byte order
//! (little-endian on every machine wirebench supports), no file header.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | flow id |
//! | 4 | 4 | sequence number (the first packet is 1) |
//! | 8 | 4 | source port |
//! | 12 | 4 | destination port |
//! | 16 | 4 | transmit hour |
//! | 20 | 4 | transmit minute |
//! | 24 | 4 | receive hour |
//! | 28 | 4 | receive minute |
//! | 32 | 4 | payload size in bytes |
//! | 36 | 46 | source address, NUL-terminated text |
//! | 82 | 46 | destination address, NUL-terminated text |
//! | 128 | 8 | transmit second within the minute (f64, µs resolution) |
//! | 136 | 8 | receive second within the minute (f64) |
//!
//! Times are times of day without a date. A sender log has receive = transmit.

use crate::format::{FlowMeta, LogMeta, Record, Side, FLAG_RX};
use crate::{read_up_to, LogError};
use std::io::Read;

/// Bytes per D-ITG log record.
pub const DITG_RECORD_LEN: usize = 144;
const ADDR_LEN: usize = 46;
const DAY_NS: u64 = 86_400_000_000_000;

/// One record as D-ITG wrote it, before conversion.
#[derive(Debug, Clone, PartialEq)]
struct Raw {
    flow: u32,
    seq: u32,
    src: String,
    dst: String,
    tx_tod_ns: u64,
    rx_tod_ns: u64,
    size: u32,
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn f64_at(b: &[u8], i: usize) -> f64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[i..i + 8]);
    f64::from_le_bytes(x)
}

fn addr_at(b: &[u8], i: usize) -> Option<String> {
    let field = &b[i..i + ADDR_LEN];
    let end = field.iter().position(|&c| c == 0)?;
    let s = std::str::from_utf8(&field[..end]).ok()?;
    if !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() || b".:%".contains(&c))
    {
        Some(s.to_string())
    } else {
        None
    }
}

/// Time of day in ns from D-ITG's hour, minute and fractional second; None
/// when a field is out of range.
fn tod_ns(h: u32, m: u32, s: f64) -> Option<u64> {
    if h >= 24 || m >= 60 || !s.is_finite() || !(0.0..61.0).contains(&s) {
        return None;
    }
    let whole = u64::from(h) * 3600 + u64::from(m) * 60;
    // Round to whole microseconds: D-ITG stores µs in a double, and the
    // nearest µs is what it meant (ITGDec prints the same).
    let us = (s * 1e6).round() as u64;
    Some(whole * 1_000_000_000 + us * 1000)
}

fn parse(b: &[u8]) -> Result<Raw, String> {
    let tx = tod_ns(u32_at(b, 16), u32_at(b, 20), f64_at(b, 128))
        .ok_or_else(|| "transmit time out of range".to_string())?;
    let rx = tod_ns(u32_at(b, 24), u32_at(b, 28), f64_at(b, 136))
        .ok_or_else(|| "receive time out of range".to_string())?;
    let src = addr_at(b, 36).ok_or_else(|| "source address is not an address".to_string())?;
    let dst = addr_at(b, 82).ok_or_else(|| "destination address is not an address".to_string())?;
    Ok(Raw {
        flow: u32_at(b, 0),
        seq: u32_at(b, 4),
        src: format!("{src}/{}", u32_at(b, 8)),
        dst: format!("{dst}/{}", u32_at(b, 12)),
        tx_tod_ns: tx,
        rx_tod_ns: rx,
        size: u32_at(b, 32),
    })
}

/// True when `b` (at least one record) starts like a D-ITG log.
pub fn looks_like_ditg(b: &[u8]) -> bool {
    b.len() >= DITG_RECORD_LEN && parse(&b[..DITG_RECORD_LEN]).is_ok()
}

/// Unwraps times of day into a running timeline: a time more than 12 h
/// before the previous one is taken as the next day (a log across midnight).
#[derive(Debug, Default)]
struct Timeline {
    day: u64,
    last: Option<u64>,
}

impl Timeline {
    fn place(&mut self, tod: u64) -> u64 {
        if let Some(last) = self.last {
            if tod + DAY_NS / 2 < last {
                self.day += 1;
            }
        }
        self.last = Some(tod);
        self.day * DAY_NS + tod
    }
}

/// Streams a D-ITG binary log as wirebench [`Record`]s: flow ids as D-ITG
/// gave them, sequence numbers moved to start at 0 (D-ITG starts at 1),
/// times as ns since midnight of the log's first day. Flows appear in
/// [`DitgReader::meta`] as they are met; transport is not in the log and is
/// reported as UDP, the MTU as `mtu`.
pub struct DitgReader<R: Read> {
    inp: R,
    meta: LogMeta,
    mtu: u32,
    tx_line: Timeline,
    rx_line: Timeline,
    records: u64,
    sender_log: Option<bool>,
}

impl<R: Read> DitgReader<R> {
    /// A reader of the D-ITG log `inp`; `mtu` frames its packets (D-ITG logs carry no MTU).
    pub fn new(inp: R, mtu: u32) -> Self {
        Self {
            inp,
            meta: LogMeta {
                side: Side::Recv,
                meter: "owd".into(),
                session: 0,
                started_at: None,
                tool: "D-ITG".into(),
                delay_offset_ns: 0,
                sessions: Vec::new(),
                flows: Vec::new(),
            },
            mtu,
            tx_line: Timeline::default(),
            rx_line: Timeline::default(),
            records: 0,
            sender_log: None,
        }
    }

    /// Metadata so far (flows met up to the last record read).
    pub fn meta(&self) -> &LogMeta {
        &self.meta
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The next record, `Ok(None)` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, LogError> {
        let mut b = [0u8; DITG_RECORD_LEN];
        let got =
            read_up_to(&mut self.inp, &mut b).map_err(|e| LogError::io("reading D-ITG log", e))?;
        let offset = self.records * DITG_RECORD_LEN as u64;
        if got == 0 {
            return Ok(None);
        }
        if got < DITG_RECORD_LEN {
            return Err(LogError::Truncated {
                offset: offset + got as u64,
                what: "D-ITG record (144 bytes each)",
            });
        }
        let raw = parse(&b).map_err(|what| LogError::Corrupt {
            offset,
            what: format!("D-ITG record {}: {what}", self.records + 1),
        })?;
        let flow = u16::try_from(raw.flow).map_err(|_| LogError::Corrupt {
            offset,
            what: format!(
                "D-ITG record {}: flow id {} is above 65535",
                self.records + 1,
                raw.flow
            ),
        })?;
        // A sender log (ITGSend -l) repeats the transmit time as the
        // receive time in every record.
        let same = raw.rx_tod_ns == raw.tx_tod_ns;
        let sender = *self.sender_log.get_or_insert(same);
        if sender && !same {
            self.sender_log = Some(false);
        }
        if !self.meta.flows.iter().any(|f| f.id == flow) {
            let v6 = raw.src.contains(':') || raw.dst.contains(':');
            self.meta.flows.push(FlowMeta {
                id: flow,
                transport: "udp".into(),
                ip_version: if v6 { 6 } else { 4 },
                mtu: self.mtu,
                src: Some(raw.src.clone()),
                dst: Some(raw.dst.clone()),
            });
        }
        self.records += 1;
        let tx = self.tx_line.place(raw.tx_tod_ns);
        let rx = self.rx_line.place(raw.rx_tod_ns);
        Ok(Some(Record {
            flow,
            flags: FLAG_RX,
            size: raw.size,
            seq: u64::from(raw.seq.saturating_sub(1)),
            tx_ns: tx,
            rx_ns: rx,
        }))
    }

    /// True when every record so far had receive = transmit (an ITGSend
    /// `-l` log: no delays in it).
    pub fn is_sender_log(&self) -> bool {
        self.sender_log.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_record(flow: u32, seq: u32, tx: (u32, u32, f64), rx: (u32, u32, f64)) -> Vec<u8> {
        let mut b = vec![0u8; DITG_RECORD_LEN];
        b[0..4].copy_from_slice(&flow.to_le_bytes());
        b[4..8].copy_from_slice(&seq.to_le_bytes());
        b[8..12].copy_from_slice(&40000u32.to_le_bytes());
        b[12..16].copy_from_slice(&8999u32.to_le_bytes());
        b[16..20].copy_from_slice(&tx.0.to_le_bytes());
        b[20..24].copy_from_slice(&tx.1.to_le_bytes());
        b[24..28].copy_from_slice(&rx.0.to_le_bytes());
        b[28..32].copy_from_slice(&rx.1.to_le_bytes());
        b[32..36].copy_from_slice(&512u32.to_le_bytes());
        b[36..45].copy_from_slice(b"127.0.0.1");
        b[82..85].copy_from_slice(b"::1");
        b[128..136].copy_from_slice(&tx.2.to_le_bytes());
        b[136..144].copy_from_slice(&rx.2.to_le_bytes());
        b
    }

    #[test]
    fn fields_and_midnight() {
        let mut f = raw_record(3, 1, (23, 59, 59.999_5), (23, 59, 59.999_9));
        f.extend(raw_record(3, 2, (23, 59, 59.999_9), (0, 0, 0.000_2)));
        f.extend(raw_record(3, 3, (0, 0, 0.000_3), (0, 0, 0.000_6)));
        let mut r = DitgReader::new(&f[..], 1500);
        let a = r.next_record().unwrap().unwrap();
        let b = r.next_record().unwrap().unwrap();
        let c = r.next_record().unwrap().unwrap();
        assert!(r.next_record().unwrap().is_none());
        assert_eq!((a.flow, a.seq, a.size), (3, 0, 512));
        assert_eq!(a.rx_ns - a.tx_ns, 400_000);
        assert_eq!(b.rx_ns - b.tx_ns, 300_000, "receive crossed midnight");
        assert_eq!(c.tx_ns - b.tx_ns, 400_000, "transmit crossed midnight");
        assert_eq!(r.meta().flows[0].ip_version, 6);
        assert_eq!(r.meta().flows[0].src.as_deref(), Some("127.0.0.1/40000"));
        assert!(!r.is_sender_log());
    }

    #[test]
    fn damage_is_named() {
        let mut f = raw_record(1, 1, (10, 0, 1.0), (10, 0, 1.1));
        f.extend(raw_record(1, 2, (10, 0, 1.0), (25, 0, 1.1)));
        let mut r = DitgReader::new(&f[..], 1500);
        assert!(r.next_record().unwrap().is_some());
        let e = r.next_record().unwrap_err().to_string();
        assert!(e.contains("record 2") && e.contains("byte 144"), "{e}");
        let short = &raw_record(1, 1, (10, 0, 1.0), (10, 0, 1.1))[..100];
        let e = DitgReader::new(short, 1500).next_record().unwrap_err();
        assert!(matches!(e, LogError::Truncated { offset: 100, .. }), "{e}");
        assert!(!looks_like_ditg(b"hello"));
        assert!(!looks_like_ditg(&[0xffu8; 300]));
    }
}
