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

use crate::campaign::{Campaign, Order, RunLength, Scenario, Target};

/// Per-run cost besides the traffic and the linger, the cost of one
/// test-bed build (namespaces, links, qdiscs, receiver start, removal) and
/// the wait of a bed whose first run is IPv6 (S4's first run on each new
/// bed took 1.32-1.47 s longer than the next; a bed that starts with IPv4
/// runs does not show it, nor do its later IPv6 runs). Fitted to the quick
/// campaigns timed on a 2-core machine at load 3-5 (docs/campaigns.md has
/// the table): fixed cost per run 0.25-0.35 s (one flow or 60 UDP flows;
/// 60 TCP flows 0.65 s), wall time outside the runs 0.1-0.2 s per build.
pub const RUN_OVERHEAD_S: f64 = 0.3;
/// Seconds of one test-bed build (see [`RUN_OVERHEAD_S`]).
pub(crate) const TESTBED_BUILD_S: f64 = 0.15;
/// Extra seconds of a bed whose first run is IPv6 (see [`RUN_OVERHEAD_S`]).
pub(crate) const IPV6_FIRST_S: f64 = 1.4;
/// Packets per second an unpaced sender reaches when the CPU, not the
/// link, is the limit: S3's 128 B datagrams went at 210 000-245 000/s at
/// load 3-5 on the same machine (at load 6-8 about 40 000/s: CPU-bound
/// runs take what the machine has left, see docs/campaigns.md).
const CPU_PPS: f64 = 230_000.0;
/// The engine's linger when the campaign sets none (RFC 2544's 2 s).
pub const DEFAULT_LINGER_S: f64 = 2.0;
/// Share of the link rate a bulk transfer is assumed to reach when its
/// length is in bytes (TCP over Ethernet carries about 94 % as payload).
const BULK_SHARE: f64 = 0.94;
/// Rate assumed for a bulk transfer where the campaign knows no link rate.
const UNKNOWN_LINK_BPS: f64 = 1e9;

/// A campaign's size and expected wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Runs in total (scenarios × repetitions).
    pub runs: usize,
    /// Scenarios of the expanded matrix.
    pub scenarios: usize,
    /// Test-bed builds (link setting changes); 0 off a test-bed.
    pub builds: usize,
    /// Expected wall-clock time of the whole campaign, in seconds.
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
                let link = bytes * 8.0 / s.settings.link_bps().unwrap_or(UNKNOWN_LINK_BPS);
                link.max(count as f64 / CPU_PPS) * f64::from(s.settings.flows.max(1))
            }
        },
        // Every flow sends `count` KB, all through the same link.
        RunLength::KBytes { count } => {
            count as f64 * 1024.0 * 8.0 * f64::from(s.settings.flows.max(1))
                / (s.settings.link_bps().unwrap_or(UNKNOWN_LINK_BPS) * BULK_SHARE)
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
    let (builds, v6_first) = match c.target {
        Target::Testbed(_) => beds(c, &scenarios),
        _ => (0, 0.0),
    };
    let seconds = per_scenario
        + runs.saturating_sub(1) as f64 * c.pause_s
        + builds as f64 * TESTBED_BUILD_S
        + v6_first * IPV6_FIRST_S;
    Estimate {
        runs,
        scenarios: scenarios.len(),
        builds,
        seconds,
    }
}

/// The test-bed builds and how many of them (expected, when the order is
/// shuffled) start with an IPv6 run. The run order groups scenarios by
/// link settings (runner::order::plan), so each distinct setting is built
/// once and its first run is the group's first scenario, or any of them
/// when shuffled.
fn beds(c: &Campaign, scenarios: &[Scenario]) -> (usize, f64) {
    // (link key, scenarios, IPv6 scenarios, first is IPv6) per group, in
    // the order the groups first appear.
    let mut groups: Vec<(wirebench_testbed::LinkOpts, usize, usize, bool)> = Vec::new();
    for s in scenarios {
        let k = s.link_key();
        let v6 = s.settings.ip == 6;
        match groups.iter_mut().find(|g| g.0 == k) {
            Some(g) => {
                g.1 += 1;
                g.2 += usize::from(v6);
            }
            None => groups.push((k, 1, usize::from(v6), v6)),
        }
    }
    let v6_first = groups
        .iter()
        .map(|&(_, n, v6, first)| match c.order {
            Order::Sequential => f64::from(u8::from(first)),
            Order::Shuffled { .. } => v6 as f64 / n as f64,
        })
        .sum();
    (groups.len(), v6_first)
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

    /// The S5 calibration search --quick on its test-bed (routers capped at
    /// 29 000 packets/s, 30.2 % of the line rate of 110 B frames at 100
    /// Mbit/s): 4 throughput trials and 9 frame-loss loads (100 % down to
    /// 40 % lose, 30 % and 20 % do not), each 0.2 s learning + 2 s + 2 s
    /// linger (+ 0.3 s each): 13 × 6.8 + 0.15 = 88.55 s (measured: 4 + 9
    /// trials in 93.6 s).
    #[test]
    fn rfc2544_search_estimate() {
        let (full, e) = full_and_quick("s5-calibration-search.toml");
        assert_eq!((e.scenarios, e.runs, e.builds), (2, 13, 1));
        assert!((e.seconds - 88.55).abs() < 1e-6, "{}", e.seconds);
        assert_eq!(full.runs, 13);
        assert_eq!(human_duration(full.seconds), "14 min");
    }

    /// Without a known cap the estimate counts the trials the searches
    /// plan: 2 + ⌈log2(1 / 0.005)⌉ = 10 and 100 / 10 = 10 loads.
    #[test]
    fn rfc2544_search_without_a_cap_counts_the_planned_trials() {
        let path = format!(
            "{}/../../examples/s5-calibration-search.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path)
            .unwrap()
            .replace("forward_pps = 29000", "");
        let mut c = Campaign::parse(&text, "s5-nocap.toml").unwrap();
        c.apply_quick().unwrap();
        let e = estimate(&c);
        assert_eq!(e.runs, 20);
        assert!(
            (e.seconds - (20.0 * 6.8 + 0.15)).abs() < 1e-6,
            "{}",
            e.seconds
        );
    }

    /// S5 --quick: 14 scenarios × 2 runs of 2 s + 0.5 s linger + 0.3 s, one
    /// build that starts with IPv4: 28 × 2.8 + 0.15 = 78.55 s (measured
    /// 78.6 s).
    #[test]
    fn s5_quick_estimate() {
        let (full, e) = full_and_quick("s5-ipv4-vs-ipv6.toml");
        assert_eq!((e.scenarios, e.runs, e.builds), (14, 28, 1));
        assert!((e.seconds - 78.55).abs() < 1e-6, "{}", e.seconds);
        assert!(full.runs > 10 * e.runs, "{}", full.describe());
    }

    /// S4 --quick: three beds (MTU 1500, 4000, 9000), each starting with an
    /// IPv6 transfer of 5 MiB (at 94 % of 1 Gbit/s) + 0.5 s linger + 0.3 s:
    /// 6 × 0.8446 + 3 × (0.15 + 1.4) = 9.72 s (measured 9.05 s).
    #[test]
    fn s4_quick_estimate_counts_the_ipv6_wait_of_each_bed() {
        let (_, e) = full_and_quick("s4-jumbo-ipv6-tcp.toml");
        assert_eq!((e.runs, e.builds), (6, 3));
        let transfer = 5120.0 * 1024.0 * 8.0 / (1e9 * BULK_SHARE);
        let want = 6.0 * (transfer + 0.5 + RUN_OVERHEAD_S) + 3.0 * (TESTBED_BUILD_S + IPV6_FIRST_S);
        assert!((e.seconds - want).abs() < 1e-9, "{} vs {want}", e.seconds);
        assert!((e.seconds - 9.72).abs() < 0.01, "{}", e.seconds);
    }

    /// Which beds start with IPv6: the first scenario of each link setting
    /// in sequential order, the IPv6 share of its scenarios when shuffled.
    #[test]
    fn ipv6_first_beds_follow_the_run_order() {
        let text = |order: &str, ips: &str| {
            format!(
                "order = \"{order}\"\nduration_s = 1\nlinger_s = 0\n[testbed]\npreset = \"direct\"\n[matrix]\nip = {ips}\nmtu = [1500, 9000]\npayload = [100, 200]\n"
            )
        };
        let v6_wait = |order: &str, ips: &str| {
            let c = Campaign::parse(&text(order, ips), "t.toml").unwrap();
            let e = estimate(&c);
            assert_eq!(e.builds, 2);
            let rest = e.runs as f64 * (1.0 + RUN_OVERHEAD_S) + 2.0 * TESTBED_BUILD_S;
            (e.seconds - rest) / IPV6_FIRST_S
        };
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(v6_wait("sequential", "[4, 6]"), 0.0));
        assert!(near(v6_wait("sequential", "[6, 4]"), 2.0));
        assert!(near(v6_wait("shuffled", "[4, 6]"), 1.0));
        assert!(near(v6_wait("shuffled", "[4]"), 0.0));
    }
}
