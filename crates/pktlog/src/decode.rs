//! Decoding a log into figures: per-flow summaries and windowed series
//! (ITGDec's `-b -d -j -p` windows), computed by the same accumulators the
//! engine runs (`wirebench-stats`), so a decoded receiver log gives exactly
//! the result document's counts. Reads wirebench logs and D-ITG binary logs
//! through one [`Source`].

use crate::ditg::{looks_like_ditg, DitgReader, DITG_RECORD_LEN};
use crate::format::{
    FlowMeta, LogFooter, LogMeta, Record, Side, FLAG_NOT_SENT, FLAG_REFLECTED, MAGIC,
};
use crate::{read_up_to, LogError, LogReader};
use serde::Serialize;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::io::{Chain, Cursor, Read};
use wirebench_stats::{
    FlowConfig, Interval, IpVersion, RecvAccumulator, RecvSummary, SendAccumulator, Throughput,
    Transport,
};

/// Log formats `wirebench decode` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `wirebench.pktlog/1`.
    Wirebench,
    /// D-ITG's binary log (ITGSend `-l`, ITGRecv `-x`).
    DItg,
}

type Peeked<R> = Chain<Cursor<Vec<u8>>, R>;

/// A log being read, whichever its format.
pub enum Source<R: Read> {
    /// A wirebench packet log (`wirebench.pktlog/1`).
    Wirebench(LogReader<Peeked<R>>),
    /// A D-ITG binary log (ITGSend `-l`, ITGRecv `-x`).
    DItg(DitgReader<Peeked<R>>),
}

impl<R: Read> Source<R> {
    /// Opens `inp` as `format`, or recognises the format from the first
    /// bytes when None. `mtu` is the framing model's MTU for logs that do
    /// not carry one (D-ITG's).
    pub fn open(mut inp: R, format: Option<Format>, mtu: u32) -> Result<Self, LogError> {
        let mut head = vec![0u8; DITG_RECORD_LEN];
        let got = read_up_to(&mut inp, &mut head).map_err(|e| LogError::io("reading log", e))?;
        head.truncate(got);
        let format = match format {
            Some(f) => f,
            None if head.starts_with(&MAGIC) => Format::Wirebench,
            None if looks_like_ditg(&head) => Format::DItg,
            None if head.is_empty() => {
                return Err(LogError::Truncated {
                    offset: 0,
                    what: "empty file",
                })
            }
            None => return Err(LogError::Unrecognised),
        };
        let inp = Cursor::new(head).chain(inp);
        Ok(match format {
            Format::Wirebench => Source::Wirebench(LogReader::open(inp)?),
            Format::DItg => Source::DItg(DitgReader::new(inp, mtu)),
        })
    }

    /// Which format the log is in.
    pub fn format(&self) -> Format {
        match self {
            Source::Wirebench(_) => Format::Wirebench,
            Source::DItg(_) => Format::DItg,
        }
    }

    /// Metadata (for D-ITG: the flows met so far).
    pub fn meta(&self) -> &LogMeta {
        match self {
            Source::Wirebench(r) => r.meta(),
            Source::DItg(r) => r.meta(),
        }
    }

    /// The next record, or None at the end of the log.
    pub fn next_record(&mut self) -> Result<Option<Record>, LogError> {
        match self {
            Source::Wirebench(r) => r.next_record(),
            Source::DItg(r) => r.next_record(),
        }
    }

    /// Which end wrote the log. A D-ITG sender log repeats the transmit
    /// time as receive time and decodes as a sender log.
    pub fn side(&self) -> Side {
        match self {
            Source::DItg(d) if d.is_sender_log() => Side::Send,
            _ => self.meta().side,
        }
    }

    fn footer(&self) -> Option<&LogFooter> {
        match self {
            Source::Wirebench(r) => r.footer(),
            Source::DItg(_) => None,
        }
    }
}

/// How to decode.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeOptions {
    /// Window length of the series in ns; None: no series.
    pub window_ns: Option<u64>,
}

/// Send-side figures of a sender log. The log has no schedule, so unlike
/// the result document's `sent` there is no schedule error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SentFigures {
    /// Packets sent.
    pub packets: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// First to last send, in seconds.
    pub duration_s: f64,
    /// Packets per second over `duration_s`.
    pub rate_pps: f64,
    /// Packets the sender logged as not sent.
    pub not_sent: u64,
    /// Send throughput at each layer.
    pub throughput_bps: Throughput,
}

/// One window of a series (ITGDec `-b -d -j -p`, plus packet rate).
/// Delay, jitter and loss are None in sender logs, which only know sends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    /// Flow id.
    pub flow: u16,
    /// Window start, seconds after the flow's first packet.
    pub t_s: f64,
    /// Packets in the window.
    pub packets: u64,
    /// Payload bits per second over the window's length.
    pub bitrate_bps: f64,
    /// Packets per second over the window's length.
    pub packet_rate_pps: f64,
    /// Mean one-way delay of the window's packets.
    pub delay_mean_s: Option<f64>,
    /// Mean delay variation (RFC 3550) over the window.
    pub jitter_s: Option<f64>,
    /// Packets missing from the window's sequence range.
    pub lost: Option<u64>,
}

/// Figures of one flow.
#[derive(Debug, Clone, Serialize)]
pub struct FlowFigures {
    #[serde(flatten)]
    /// The flow as the log header describes it.
    pub meta: FlowMeta,
    /// Receiver logs: what arrived (the result document's `received`,
    /// `delay_s`, `jitter_s`, `throughput_bps`); intervals are in `series`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub received: Option<RecvSummary>,
    /// Sender logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<SentFigures>,
    /// Sender logs of the RTT meter: the reflections (the result's `rtt_s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt: Option<RecvSummary>,
    #[serde(skip)]
    /// Windows of the flow's series, when a window length was asked.
    pub series: Vec<Window>,
}

/// A decoded log.
#[derive(Debug, Clone, Serialize)]
pub struct Decoded {
    /// Name and version of this document's layout.
    pub schema: &'static str,
    /// The log's format.
    pub format: Format,
    /// Which end wrote the log.
    pub side: Side,
    /// The meter of the run (`owd` or `rtt`).
    pub meter: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// RFC 3339 start of the run, when the log says.
    pub started_at: Option<String>,
    /// Records read.
    pub records: u64,
    /// Records the writer dropped (the log is incomplete when > 0).
    pub dropped: u64,
    /// Records the log's size cap kept out (incomplete when > 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub capped: u64,
    /// True when the run was cut short or the log is incomplete.
    pub partial: bool,
    /// Figures per flow, in flow id order.
    pub flows: Vec<FlowFigures>,
}

impl Decoded {
    /// Every flow's windows, flow by flow.
    pub fn series(&self) -> impl Iterator<Item = &Window> {
        self.flows.iter().flat_map(|f| f.series.iter())
    }
}

struct FlowState {
    meta: FlowMeta,
    recv: Option<RecvAccumulator>,
    send: Option<SendAccumulator>,
    send_windows: Option<RecvAccumulator>,
    rtt: Option<RecvAccumulator>,
}

fn flow_config(m: &FlowMeta, window_ns: Option<u64>) -> FlowConfig {
    FlowConfig {
        transport: if m.transport.eq_ignore_ascii_case("tcp") {
            Transport::Tcp
        } else {
            Transport::Udp
        },
        ip: if m.ip_version == 6 {
            IpVersion::V6
        } else {
            IpVersion::V4
        },
        mtu: m.mtu,
        interval_ns: window_ns,
    }
}

/// The accumulator's intervals as series windows. Window starts come from
/// integer ns so that 0.6 reads 0.6, not 0.6000000000000001. Without
/// receive times (`received` false) delay, jitter and loss are unknown.
fn windows(flow: u16, ivs: &[Interval], window_ns: Option<u64>, received: bool) -> Vec<Window> {
    let w = window_ns.unwrap_or(0);
    let win_s = w as f64 / 1e9;
    ivs.iter()
        .enumerate()
        .map(|(k, iv)| Window {
            flow,
            t_s: (k as u64).saturating_mul(w) as f64 / 1e9,
            packets: iv.packets,
            bitrate_bps: iv.throughput_bps,
            packet_rate_pps: iv.packets as f64 / win_s,
            delay_mean_s: received.then_some(iv.delay_mean_s),
            jitter_s: received.then_some(iv.jitter_s),
            lost: received.then_some(iv.lost),
        })
        .collect()
}

/// Reads every record of `src`, feeds the statistics, and hands each record
/// with its delay (None when it has none) to `each` (raw exports stream
/// from there, so the file is read once).
pub fn decode<R: Read>(
    src: &mut Source<R>,
    opts: &DecodeOptions,
    mut each: impl FnMut(&Record, Option<i64>) -> Result<(), LogError>,
) -> Result<Decoded, LogError> {
    let mut flows: BTreeMap<u16, FlowState> = BTreeMap::new();
    let mut records = 0u64;
    let window = opts.window_ns.filter(|&w| w > 0);
    while let Some(r) = src.next_record()? {
        records += 1;
        let side = src.side();
        let meta = src.meta();
        let offset = meta.delay_offset_ns;
        let st = match flows.entry(r.flow) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let fm = meta
                    .flows
                    .iter()
                    .find(|f| f.id == r.flow)
                    .cloned()
                    .ok_or_else(|| LogError::Corrupt {
                        offset: 0,
                        what: format!(
                            "record {records} belongs to flow {}, which the header does not list",
                            r.flow
                        ),
                    })?;
                v.insert(FlowState {
                    meta: fm,
                    recv: None,
                    send: None,
                    send_windows: None,
                    rtt: None,
                })
            }
        };
        let cfg = flow_config(&st.meta, window);
        let seq32 = r.seq as u32;
        let delay = match side {
            Side::Recv => {
                let d = r.delay_ns(offset).unwrap_or(0);
                st.recv
                    .get_or_insert_with(|| RecvAccumulator::new(cfg))
                    .record(seq32, d, r.rx_ns, r.size);
                Some(d)
            }
            Side::Send if r.flags & FLAG_NOT_SENT != 0 => {
                st.send
                    .get_or_insert_with(|| SendAccumulator::new(cfg))
                    .record_not_sent(1);
                None
            }
            Side::Send if r.flags & FLAG_REFLECTED != 0 => {
                let d = r.delay_ns(0).unwrap_or(0);
                st.rtt
                    .get_or_insert_with(|| RecvAccumulator::new(cfg))
                    .record(seq32, d, r.rx_ns, r.size);
                Some(d)
            }
            Side::Send => {
                st.send
                    .get_or_insert_with(|| SendAccumulator::new(cfg))
                    .record_sent(r.tx_ns, r.tx_ns, r.size);
                // Windows of what was sent: arrivals at the send times.
                st.send_windows
                    .get_or_insert_with(|| RecvAccumulator::new(cfg))
                    .record(seq32, 0, r.tx_ns, r.size);
                None
            }
        };
        each(&r, delay)?;
    }

    let footer = src.footer().cloned();
    let sent_of = |id: u16| -> Option<u64> {
        footer
            .as_ref()?
            .flows
            .iter()
            .find(|f| f.id == id)
            .and_then(|f| f.sent)
    };
    let mut out = Vec::with_capacity(flows.len());
    for (id, st) in flows {
        let mut series = Vec::new();
        let received = st.recv.as_ref().map(|a| {
            let mut s = a.summary(sent_of(id));
            let ivs = std::mem::take(&mut s.intervals);
            series.extend(windows(id, &ivs, window, true));
            s
        });
        if let Some(w) = &st.send_windows {
            series.extend(windows(id, &w.summary(None).intervals, window, false));
        }
        let sent = st.send.as_ref().map(|a| {
            let s = a.summary();
            SentFigures {
                packets: s.packets,
                bytes: s.bytes,
                duration_s: s.duration_s,
                rate_pps: s.rate_pps,
                not_sent: s.not_sent,
                throughput_bps: s.throughput_bps,
            }
        });
        let rtt = st.rtt.as_ref().map(|a| {
            let mut s = a.summary(None);
            s.intervals.clear();
            s
        });
        out.push(FlowFigures {
            meta: st.meta,
            received,
            sent,
            rtt,
            series,
        });
    }
    let side = src.side();
    let meta = src.meta();
    Ok(Decoded {
        schema: "wirebench.decode/1",
        format: src.format(),
        side,
        meter: meta.meter.clone(),
        started_at: meta.started_at.clone(),
        records,
        dropped: footer.as_ref().map_or(0, |f| f.dropped),
        capped: footer.as_ref().map_or(0, |f| f.capped),
        partial: footer.as_ref().is_some_and(|f| f.partial),
        flows: out,
    })
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
