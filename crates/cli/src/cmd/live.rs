//! `wirebench send --interval MS` / `--json-stream`: prints the intervals
//! the receiver streams while the run goes on, one line (or one JSON
//! object) per flow and interval, plus a `[SUM]` line once every flow of a
//! multi-flow session has reported the interval.
//!
//! The engine calls [`LivePrinter`] on its control thread; each line is
//! written and flushed at once, so a pipe reader sees it while the run is
//! still going.

use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use wirebench_engine::live::LiveSink;
use wirebench_engine::result::ResultDoc;
use wirebench_stats::LiveInterval;

/// Intervals waiting for the other flows' figures before the `[SUM]` line;
/// an interval some flow never reports is dropped after this many.
const MAX_PENDING_SUMS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Aligned text lines (iperf3-like).
    Human,
    /// One JSON object per line: `{"event": "interval", "data": {...}}`.
    JsonStream,
}

/// Running `[SUM]` of one interval index.
#[derive(Default)]
struct Sum {
    flows: usize,
    packets: u64,
    bytes: u64,
    throughput_bps: f64,
    delay_weighted: f64,
    jitter_weighted: f64,
    jitter_packets: u64,
    lost: u64,
    t_s: f64,
    len_s: f64,
}

pub struct LivePrinter {
    mode: Mode,
    flows: usize,
    /// Something was printed (the final summary then leaves out its
    /// interval tables).
    pub printed: AtomicBool,
    state: Mutex<BTreeMap<u64, Sum>>,
    header: AtomicBool,
}

impl LivePrinter {
    pub fn new(mode: Mode, flows: usize) -> Self {
        LivePrinter {
            mode,
            flows,
            printed: AtomicBool::new(false),
            state: Mutex::new(BTreeMap::new()),
            header: AtomicBool::new(false),
        }
    }

    fn out(&self, line: &str) {
        let mut o = std::io::stdout().lock();
        // A closed stdout (the reader went away) must not stop the run.
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
        self.printed.store(true, Ordering::Relaxed);
    }

    /// One `--json-stream` object, `event` first as iperf3 writes it.
    fn event(&self, event: &str, data: &impl serde::Serialize) {
        let data = serde_json::to_string(data)
            .unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
        self.out(&format!("{{\"event\":\"{event}\",\"data\":{data}}}"));
    }

    /// `--json-stream`'s first object: what is about to run.
    pub fn start_event(&self, data: serde_json::Value) {
        self.event("start", &data);
    }

    /// `--json-stream`'s last object: the whole result document.
    pub fn end_event(&self, doc: &ResultDoc) {
        self.event("end", doc);
    }

    /// `--json-stream` when the run could not be made at all.
    pub fn error_event(&self, msg: &str) {
        self.event("error", &msg);
    }

    fn human_line(&self, label: &str, iv: &Sum) -> String {
        let opt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), super::send::secs);
        let delay = (iv.packets > 0).then(|| iv.delay_weighted / iv.packets as f64);
        let jitter = (iv.jitter_packets > 0).then(|| iv.jitter_weighted / iv.jitter_packets as f64);
        format!(
            "[{label:>3}] {:>7.2}-{:<7.2} {:>9} {:>16} {:>12} {:>12} {:>7}",
            iv.t_s,
            iv.t_s + iv.len_s,
            iv.packets,
            super::send::bps(iv.throughput_bps),
            opt(delay),
            opt(jitter),
            iv.lost
        )
    }
}

impl Sum {
    fn add(&mut self, iv: &LiveInterval) {
        self.flows += 1;
        self.packets += iv.packets;
        self.bytes += iv.bytes;
        self.throughput_bps += iv.throughput_bps;
        if let Some(d) = iv.delay_mean_s {
            self.delay_weighted += d * iv.packets as f64;
        }
        if let Some(j) = iv.jitter_s {
            self.jitter_weighted += j * iv.packets as f64;
            self.jitter_packets += iv.packets;
        }
        self.lost += iv.lost;
        self.t_s = iv.t_s;
        self.len_s = iv.len_s;
    }
}

impl LiveSink for LivePrinter {
    fn interval(&self, iv: LiveInterval) {
        match self.mode {
            Mode::JsonStream => self.event("interval", &iv),
            Mode::Human => {
                if !self.header.swap(true, Ordering::Relaxed) {
                    self.out(&format!(
                        "[ ID] {:>15} {:>9} {:>16} {:>12} {:>12} {:>7}  (live; TCP: sender's cwnd, rtt, retransmits)",
                        "interval (s)", "packets", "throughput", "delay", "jitter", "lost"
                    ));
                }
                let mut one = Sum::default();
                one.add(&iv);
                let mut line = self.human_line(&iv.flow_id.to_string(), &one);
                if let Some(t) = &iv.tcp {
                    line.push_str(&format!(
                        "  cwnd {} KiB rtt {} retr {}",
                        t.cwnd_bytes / 1024,
                        super::send::secs(t.rtt_s),
                        t.retransmits
                    ));
                }
                self.out(&line);
                if self.flows > 1 {
                    let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    let s = st.entry(iv.index).or_default();
                    s.add(&iv);
                    if s.flows >= self.flows {
                        if let Some(s) = st.remove(&iv.index) {
                            self.out(&self.human_line("SUM", &s));
                        }
                    }
                    while st.len() > MAX_PENDING_SUMS {
                        st.pop_first();
                    }
                }
            }
        }
    }

    fn unsupported(&self) {
        let then = match self.mode {
            Mode::Human => "its interval tables are printed after the run",
            Mode::JsonStream => {
                "no \"interval\" objects follow; the intervals are in the final \"end\" object (flows[].intervals)"
            }
        };
        eprintln!(
            "wirebench: note: the receiver does not stream intervals while the run goes on (an older wirebench); {then}"
        );
    }
}
