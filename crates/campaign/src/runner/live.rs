//! Live figures of the run in flight for the progress bar: a campaign with
//! `interval_ms` runs its sender with `--json-stream`, and a thread reads
//! the child's stdout, sums each interval over the flows (throughput, mean
//! delay, loss) and shows it in the bar's message — and, with a progress
//! log, appends it there as one JSON line (what scripts and tests watch
//! instead of a terminal). The sender writes its result file as before, so
//! the stream only feeds the display; reading a pipe costs the run nothing.

use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use wirebench_stats::LiveInterval;

/// Where progress goes: the bar and, optionally, an NDJSON log.
#[derive(Clone)]
pub(super) struct Progress {
    pb: ProgressBar,
    log: Option<Arc<Mutex<File>>>,
}

/// One interval summed over the flows.
#[derive(Debug, Default, Clone, PartialEq)]
struct Figures {
    index: u64,
    t_s: f64,
    flows: usize,
    throughput_bps: f64,
    packets: u64,
    delay_weighted: f64,
    delay_packets: u64,
    lost: u64,
}

impl Figures {
    fn add(&mut self, iv: &LiveInterval) {
        self.index = iv.index;
        self.t_s = iv.t_s;
        self.flows += 1;
        self.throughput_bps += iv.throughput_bps;
        self.packets += iv.packets;
        if let Some(d) = iv.delay_mean_s {
            self.delay_weighted += d * iv.packets as f64;
            self.delay_packets += iv.packets;
        }
        self.lost += iv.lost;
    }

    fn delay_s(&self) -> Option<f64> {
        (self.delay_packets > 0).then(|| self.delay_weighted / self.delay_packets as f64)
    }

    fn text(&self) -> String {
        let delay = match self.delay_s() {
            Some(d) => crate::analysis::si(d, "s"),
            None => "–".into(),
        };
        format!(
            "t={:.1} s {}  delay {}  lost {}",
            self.t_s,
            crate::analysis::si(self.throughput_bps, "bit/s"),
            delay,
            self.lost
        )
    }
}

impl Progress {
    /// `log`: append progress as JSON lines to this file (created).
    pub(super) fn new(pb: ProgressBar, log: Option<&Path>) -> std::io::Result<Progress> {
        let log = match log {
            Some(p) => Some(Arc::new(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ))),
            None => None,
        };
        Ok(Progress { pb, log })
    }

    /// Appends one JSON line to the log, if any (a full disk only loses
    /// progress lines, never the run).
    pub(super) fn log(&self, v: Value) {
        if let Some(l) = &self.log {
            if let Ok(mut f) = l.lock() {
                let _ = writeln!(f, "{v}");
            }
        }
    }

    /// A run starts: the bar shows its label.
    pub(super) fn run_start(&self, label: &str) {
        self.pb.set_message(label.to_string());
        self.log(json!({"event": "run_start", "run": label}));
    }

    /// A run ended with `status`.
    pub(super) fn run_end(&self, label: &str, status: &str) {
        self.log(json!({"event": "run_end", "run": label, "status": status}));
    }

    fn show(&self, label: &str, f: &Figures) {
        self.pb.set_message(format!("{label}  {}", f.text()));
        self.log(json!({
            "event": "interval",
            "run": label,
            "index": f.index,
            "t_s": f.t_s,
            "flows": f.flows,
            "throughput_bps": f.throughput_bps,
            "delay_mean_s": f.delay_s(),
            "lost": f.lost,
        }));
    }

    /// Reads a sender's `--json-stream` until it closes, showing each
    /// interval once the next one (or the end) shows that all flows have
    /// reported it.
    pub(super) fn follow(&self, label: &str, out: impl Read) {
        let mut cur: Option<Figures> = None;
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v.get("event").and_then(Value::as_str) != Some("interval") {
                continue;
            }
            let Some(iv) = v
                .get("data")
                .and_then(|d| serde_json::from_value::<LiveInterval>(d.clone()).ok())
            else {
                continue;
            };
            match &mut cur {
                Some(f) if f.index == iv.index => f.add(&iv),
                Some(f) if iv.index < f.index => {} // a late flow's old interval
                _ => {
                    if let Some(done) = cur.take() {
                        self.show(label, &done);
                    }
                    let mut f = Figures::default();
                    f.add(&iv);
                    cur = Some(f);
                }
            }
        }
        if let Some(done) = cur {
            self.show(label, &done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_sum_over_flows_and_reach_bar_and_log() {
        let iv = |flow: u16, index: u64, packets: u64, delay: f64| {
            json!({"event": "interval", "data": LiveInterval {
                flow_id: flow, index, t_s: index as f64 * 0.5, len_s: 0.5, packets,
                bytes: packets * 100, throughput_bps: packets as f64 * 1600.0,
                delay_mean_s: Some(delay), jitter_s: None, lost: 1, tcp: None,
            }})
            .to_string()
        };
        let stream = [
            json!({"event": "start", "data": {}}).to_string(),
            iv(1, 0, 10, 0.001),
            iv(2, 0, 30, 0.003),
            "not json".into(),
            iv(1, 1, 5, 0.002),
            json!({"event": "end", "data": {}}).to_string(),
        ]
        .join("\n");
        let dir = std::env::temp_dir().join(format!("wb-live-progress-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let pb = ProgressBar::hidden();
        let p = Progress::new(pb.clone(), Some(&dir)).unwrap();
        p.follow("s #1", stream.as_bytes());
        let log = std::fs::read_to_string(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        let lines: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{log}");
        assert_eq!(lines[0]["flows"], 2);
        assert_eq!(lines[0]["throughput_bps"], 40.0 * 1600.0);
        // (10·1 + 30·3) / 40 ms
        let d = lines[0]["delay_mean_s"].as_f64().unwrap();
        assert!((d - 0.0025).abs() < 1e-12, "{d}");
        assert_eq!(lines[0]["lost"], 2);
        assert_eq!(lines[1]["index"], 1);
        let msg = pb.message();
        assert!(msg.starts_with("s #1  t=0.5 s"), "{msg}");
        assert!(msg.contains("lost 1"), "{msg}");
    }
}
