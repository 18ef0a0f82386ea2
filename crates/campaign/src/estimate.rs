//! How long a campaign will take, before it starts: the run count and the
//! wall-clock time ("1 050 runs, about 18 h 40 min"), so that a researcher
//! can size a study (and the examples can state their full-run time).
//!
//! The model is the run loop's own sequence: per run the warm-up, the run
//! itself, the receiver's linger and a fixed per-run cost (starting the
//! sender, the control handshake and clock exchange, reading counters,
//! storing the result), a pause between runs, and a test-bed build for
//! every change of link settings. The fixed costs were measured on the
//! quick campaigns (docs/campaigns.md).

use crate::campaign::{Campaign, RunLength, Scenario, Target};
use std::collections::BTreeSet;

/// Per-run cost besides the traffic and the linger, and the cost of one
/// test-bed build (namespaces, links, qdiscs, receiver start, IPv6 address
/// settling, removal: the first run after a build took 1.3-1.5 s longer
/// than the next in S4), fitted to quick campaigns timed on a busy 2-core
/// machine (load 6-8): S2 (48 unpaced runs of 2 s + 0.5 s linger, 2
/// builds) 135 s, S4 (6 transfers of 5 MB at 1 Gbit/s + 0.5 s linger, 3
/// builds) 9.55 s and once 7.5 s, S5 (28 runs of 2 s + 0.5 s, 1 build)
/// 87 s, S3 (8 unpaced runs of 100 000 datagrams, 1 build) 24.3 s, the S5
/// calibration search 135 s.
pub const RUN_OVERHEAD_S: f64 = 0.4;
pub const TESTBED_BUILD_S: f64 = 1.0;
/// Packets per second an unpaced sender reaches when the CPU, not the
/// link, is the limit (small datagrams on the same busy machine).
const CPU_PPS: f64 = 50_000.0;
/// The engine's linger when the campaign sets none (RFC 2544's 2 s).
pub const DEFAULT_LINGER_S: f64 = 2.0;
/// Share of the link rate a bulk transfer is assumed to reach when its
/// length is in bytes (TCP over Ethernet carries about 94 % as payload).
const BULK_SHARE: f64 = 0.94;
/// Rate assumed for a bulk transfer where the campaign knows no link rate.
const UNKNOWN_LINK_BPS: f64 = 1e9;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub runs: usize,
    pub scenarios: usize,
    /// Test-bed builds (link setting changes); 0 off a test-bed.
    pub builds: usize,
    pub seconds: f64,
}

impl Estimate {
    /// "1 050 runs, about 18 h 40 min".
    pub fn describe(&self) -> String {
        format!(
            "{} runs, about {}",
            group_thousands(self.runs),
            human_duration(self.seconds)
        )
    }
}

/// Seconds one run of `s` sends for.
fn run_length_s(c: &Campaign, s: &Scenario) -> f64 {
    match c.run_length(s) {
        RunLength::Duration { seconds } => seconds,
        RunLength::Packets { count } => match s.settings.pps {
            Some(p) if !s.settings.max_rate && p > 0.0 => count as f64 / p,
            // Unpaced packets: as fast as the link carries them, or the
            // CPU sends them, whichever is slower.
            _ => {
                let bytes = count as f64 * f64::from(s.settings.payload.unwrap_or(1000) + 66);
                let link = bytes * 8.0 / s.settings.link_bps.unwrap_or(UNKNOWN_LINK_BPS);
                link.max(count as f64 / CPU_PPS) * f64::from(s.settings.flows.max(1))
            }
        },
        // Every flow sends `count` KB, all through the same link.
        RunLength::KBytes { count } => {
            count as f64 * 1024.0 * 8.0 * f64::from(s.settings.flows.max(1))
                / (s.settings.link_bps.unwrap_or(UNKNOWN_LINK_BPS) * BULK_SHARE)
        }
    }
}

/// Seconds one trial or run of `length_s` takes with the campaign's
/// warm-up (learning frames) and linger: the run loop's own sequence.
pub(crate) fn run_cost_s(c: &Campaign, warmup_s: f64, length_s: f64) -> f64 {
    let linger = c.linger_s.unwrap_or(DEFAULT_LINGER_S);
    let warm = if warmup_s > 0.0 {
        warmup_s + linger + RUN_OVERHEAD_S
    } else {
        0.0
    };
    warm + length_s + linger + RUN_OVERHEAD_S
}

/// The estimate of a parsed campaign (after `apply_quick` for --quick).
/// An `[rfc2544]` campaign's trials depend on the device: see
/// [`crate::rfc2544::estimate`].
pub fn estimate(c: &Campaign) -> Estimate {
    if c.rfc2544.is_some() {
        if let Ok(Some(e)) = crate::rfc2544::estimate(c) {
            return e;
        }
    }
    let scenarios = c.expand();
    let reps = c.repetitions as usize;
    let runs = scenarios.len() * reps;
    let per_scenario: f64 = scenarios
        .iter()
        .map(|s| run_cost_s(c, c.warmup_s, run_length_s(c, s)) * reps as f64)
        .sum();
    // The run order groups scenarios by link settings, so each distinct
    // setting is built once.
    let builds = match c.target {
        Target::Testbed(_) => scenarios
            .iter()
            .map(|s| format!("{:?}", s.link_key()))
            .collect::<BTreeSet<_>>()
            .len(),
        _ => 0,
    };
    let seconds =
        per_scenario + runs.saturating_sub(1) as f64 * c.pause_s + builds as f64 * TESTBED_BUILD_S;
    Estimate {
        runs,
        scenarios: scenarios.len(),
        builds,
        seconds,
    }
}

fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\u{a0}');
        }
        out.push(ch);
    }
    out
}

/// "45 s", "12 min", "18 h 40 min", "3 d 4 h": two units at most, rounded
/// to what an estimate can promise.
pub fn human_duration(s: f64) -> String {
    let s = s.max(0.0);
    if s < 90.0 {
        return format!("{:.0} s", s.round());
    }
    let min = (s / 60.0).round() as u64;
    if min < 60 {
        return format!("{min} min");
    }
    let (h, m) = (min / 60, min % 60);
    if h < 48 {
        // Ten-minute steps beyond a few hours.
        let m = if h >= 3 { (m + 5) / 10 * 10 } else { m };
        let (h, m) = if m == 60 { (h + 1, 0) } else { (h, m) };
        return if m == 0 {
            format!("{h} h")
        } else {
            format!("{h} h {m} min")
        };
    }
    let (d, h) = (h / 24, h % 24);
    if h == 0 {
        format!("{d} d")
    } else {
        format!("{d} d {h} h")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_an_estimate() {
        assert_eq!(human_duration(45.2), "45 s");
        assert_eq!(human_duration(600.0), "10 min");
        assert_eq!(human_duration(67_200.0), "18 h 40 min");
        assert_eq!(human_duration(7_500.0), "2 h 5 min");
        assert_eq!(human_duration(3.0 * 86_400.0 + 4.0 * 3600.0), "3 d 4 h");
        assert_eq!(group_thousands(1050), "1\u{a0}050");
    }

    /// The estimates of an example campaign, as written and with --quick.
    fn full_and_quick(example: &str) -> (Estimate, Estimate) {
        let path = format!("{}/../../examples/{example}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let mut c = Campaign::parse(&text, example).unwrap();
        let full = estimate(&c);
        c.apply_quick().unwrap();
        (full, estimate(&c))
    }

    /// The S5 calibration search --quick: 10 throughput trials (line rate,
    /// 8 bisection steps to 0.5 %, verification) and at most 10 frame-loss
    /// loads of 0.2 s learning + 2 s + 2 s linger (+ 0.4 s each): 20 × 7.0 +
    /// 1.0 = 141 s (measured: 19 trials in 135 s).
    #[test]
    fn rfc2544_search_estimate() {
        let (full, e) = full_and_quick("s5-calibration-search.toml");
        assert_eq!((e.scenarios, e.runs, e.builds), (2, 20, 1));
        assert!((e.seconds - 141.0).abs() < 1e-6, "{}", e.seconds);
        assert_eq!(full.runs, 20);
        assert_eq!(human_duration(full.seconds), "22 min");
    }

    /// S5 --quick: 14 scenarios × 2 runs of 2 s + 0.5 s linger + 0.4 s, one
    /// build: 28 × 2.9 + 1.0 = 82.2 s (a measured quick run took 87 s).
    #[test]
    fn s5_quick_estimate() {
        let (full, e) = full_and_quick("s5-ipv4-vs-ipv6.toml");
        assert_eq!((e.scenarios, e.runs, e.builds), (14, 28, 1));
        assert!((e.seconds - 82.2).abs() < 1e-6, "{}", e.seconds);
        assert!(full.runs > 10 * e.runs, "{}", full.describe());
    }
}
