//! Live figures of the run in flight for the progress bar: a campaign with
//! `interval_ms` runs its sender with `--json-stream`, and a thread reads
//! the child's stdout, sums each interval over the flows (throughput, mean
//! delay, loss) and shows it in the bar's message — and, with a progress
//! log, appends it there as one JSON line (what scripts and tests watch
//! instead of a terminal). The sender writes its result file as before, so
//! the stream only feeds the display; reading a pipe costs the run nothing.
//! Runs through agents get the same objects relayed by each sender node's
//! agent (agent protocol revision 1) and feed them to a [`Follower`] with
//! one source per sender node.

use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::collections::BTreeMap;
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

    /// A note for whoever watches: above the bar, and in the log as
    /// `{"event":"note","message":..}`.
    pub(super) fn note(&self, message: &str) {
        self.pb.suspend(|| eprintln!("wirebench: {message}"));
        self.log(json!({"event": "note", "message": message}));
    }

    /// Reads a sender's `--json-stream` until it closes.
    pub(super) fn follow(&self, label: &str, out: impl Read) {
        let mut f = Follower::new(self, label, 1);
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                f.feed(0, &v);
            }
        }
        f.finish();
    }
}

/// Sums one run's intervals over the flows of every source (a local
/// sender's pipe, or each sender node's agent) and shows interval `k` once
/// every source has moved past it or ended, so no flow's figure is left
/// out and nothing waits for the end of the run.
pub(super) struct Follower<'a> {
    progress: &'a Progress,
    label: &'a str,
    pending: BTreeMap<u64, Figures>,
    /// Per source: the highest index seen, and whether it ended.
    seen: Vec<(Option<u64>, bool)>,
    /// Indices below this were shown; a late flow's old interval is left
    /// out.
    shown_below: u64,
}

impl<'a> Follower<'a> {
    pub(super) fn new(progress: &'a Progress, label: &'a str, sources: usize) -> Self {
        Follower {
            progress,
            label,
            pending: BTreeMap::new(),
            seen: vec![(None, false); sources.max(1)],
            shown_below: 0,
        }
    }

    /// One `--json-stream` object of `source`; others than intervals are
    /// ignored.
    pub(super) fn feed(&mut self, source: usize, v: &Value) {
        if v.get("event").and_then(Value::as_str) != Some("interval") {
            return;
        }
        let Some(iv) = v
            .get("data")
            .and_then(|d| serde_json::from_value::<LiveInterval>(d.clone()).ok())
        else {
            return;
        };
        let Some(seen) = self.seen.get_mut(source) else {
            return;
        };
        seen.0 = Some(seen.0.map_or(iv.index, |s| s.max(iv.index)));
        if iv.index >= self.shown_below {
            self.pending.entry(iv.index).or_default().add(&iv);
        }
        self.flush(false);
    }

    /// `source` ended (its sender exited).
    pub(super) fn end(&mut self, source: usize) {
        if let Some(s) = self.seen.get_mut(source) {
            s.1 = true;
        }
        self.flush(false);
    }

    /// The run ended: shows what is left.
    pub(super) fn finish(mut self) {
        self.flush(true);
    }

    fn flush(&mut self, all: bool) {
        while let Some((&k, _)) = self.pending.first_key_value() {
            let complete = all
                || self
                    .seen
                    .iter()
                    .all(|&(max, ended)| ended || max.is_some_and(|m| m > k));
            if !complete {
                break;
            }
            if let Some(f) = self.pending.remove(&k) {
                self.progress.show(self.label, &f);
            }
            self.shown_below = k + 1;
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

    /// Two sender nodes' agents relay their flows' intervals in bursts
    /// that interleave: an interval is shown once both have moved past it
    /// (or ended), summed over both, and in order.
    #[test]
    fn follower_waits_for_every_source() {
        let iv = |flow: u16, index: u64| {
            json!({"event": "interval", "data": LiveInterval {
                flow_id: flow, index, t_s: index as f64 * 0.5, len_s: 0.5, packets: 10,
                bytes: 1000, throughput_bps: 16000.0,
                delay_mean_s: Some(0.001), jitter_s: None, lost: 0, tcp: None,
            }})
        };
        let path = std::env::temp_dir().join(format!("wb-live-follow-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let p = Progress::new(ProgressBar::hidden(), Some(&path)).unwrap();
        let read = || -> Vec<Value> {
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let mut f = Follower::new(&p, "r #1", 2);
        // Node 0 runs ahead by two intervals: nothing complete yet.
        for k in 0..3 {
            f.feed(0, &iv(1, k));
        }
        assert!(read().is_empty());
        // Node 1 reaches interval 1: interval 0 is complete, 1 is not.
        f.feed(1, &iv(2, 0));
        f.feed(1, &iv(2, 1));
        let got = read();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["index"], 0);
        assert_eq!(got[0]["flows"], 2);
        // Node 1 ends: interval 1 is shown; 2 waits for node 0.
        f.end(1);
        let got = read();
        assert_eq!(got.len(), 2, "{got:?}");
        // Node 0 ends: interval 2 is shown, with the one flow it had.
        f.end(0);
        let got = read();
        let _ = std::fs::remove_file(&path);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[1]["index"], 1);
        assert_eq!(got[1]["flows"], 2);
        assert_eq!(got[2]["index"], 2);
        assert_eq!(got[2]["flows"], 1);
        f.finish();
    }
}
