//! Time series of a scenario (campaigns with `interval_ms`): each run's
//! per-interval figures (`flows[].intervals` of its stored result),
//! combined over the run's flows, then summarised over the repetitions as
//! a mean with a min–max band — what the report draws as throughput,
//! delay, jitter and loss over time.

pub use wirebench_schema::series::{Band, ScenarioSeries};
use wirebench_stats::result::ResultDoc;

/// Longest series kept per scenario; later intervals are left out of the
/// summary (they stay in the stored results).
pub const MAX_POINTS: usize = 3600;

/// One run's series, combined over its flows: per interval (throughput,
/// delay, jitter, lost); delay and jitter are packet-weighted means.
type RunSeries = Vec<(f64, Option<f64>, Option<f64>, f64)>;

fn run_series(doc: &ResultDoc) -> Option<(f64, RunSeries)> {
    let mut len_s = 0.0f64;
    // Per interval: throughput, delay·packets, jitter·packets, packets, lost.
    let mut acc: Vec<[f64; 5]> = Vec::new();
    for f in &doc.flows {
        let ivs = &f.intervals;
        if let [a, b, ..] = ivs.as_slice() {
            let d = b.t_s - a.t_s;
            if d.is_finite() && d > 0.0 {
                len_s = d;
            }
        }
        for (k, iv) in ivs.iter().take(MAX_POINTS).enumerate() {
            if acc.len() <= k {
                acc.resize(k + 1, [0.0; 5]);
            }
            let p = iv.packets as f64;
            let a = &mut acc[k];
            a[0] += iv.throughput_bps;
            a[1] += iv.delay_mean_s * p;
            a[2] += iv.jitter_s * p;
            a[3] += p;
            a[4] += iv.lost as f64;
        }
    }
    if acc.is_empty() {
        return None;
    }
    let series = acc
        .into_iter()
        .map(|[tp, d, j, p, lost]| {
            let per = |x: f64| (p > 0.0).then(|| x / p);
            (tp, per(d), per(j), lost)
        })
        .collect();
    Some((len_s, series))
}

fn band(
    runs: &[RunSeries],
    pick: impl Fn(&(f64, Option<f64>, Option<f64>, f64)) -> Option<f64>,
) -> Band {
    let len = runs.iter().map(Vec::len).max().unwrap_or(0);
    let mut b = Band::default();
    for k in 0..len {
        let vals: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.get(k).and_then(&pick))
            .filter(|v| v.is_finite())
            .collect();
        if vals.is_empty() {
            b.mean.push(None);
            b.min.push(None);
            b.max.push(None);
        } else {
            b.mean
                .push(Some(vals.iter().sum::<f64>() / vals.len() as f64));
            b.min.push(vals.iter().copied().reduce(f64::min));
            b.max.push(vals.iter().copied().reduce(f64::max));
        }
    }
    b
}

/// The series of a scenario from its runs' result documents; None when no
/// run has intervals.
pub fn scenario_series<'a>(docs: impl Iterator<Item = &'a ResultDoc>) -> Option<ScenarioSeries> {
    let mut len_s = 0.0;
    let mut runs = Vec::new();
    for doc in docs {
        if let Some((l, s)) = run_series(doc) {
            if l > 0.0 {
                len_s = l;
            }
            runs.push(s);
        }
    }
    if runs.is_empty() {
        return None;
    }
    Some(ScenarioSeries {
        interval_s: len_s,
        runs: runs.len(),
        throughput_bps: band(&runs, |x| Some(x.0)),
        delay_s: band(&runs, |x| x.1),
        jitter_s: band(&runs, |x| x.2),
        lost: band(&runs, |x| Some(x.3)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_stats::result::FlowResult;
    use wirebench_stats::Interval;

    fn iv(t_s: f64, packets: u64, throughput_bps: f64, delay: f64, lost: u64) -> Interval {
        Interval {
            t_s,
            packets,
            throughput_bps,
            delay_mean_s: delay,
            jitter_s: delay / 10.0,
            lost,
            ..Interval::default()
        }
    }

    fn run(flows: Vec<Vec<Interval>>) -> ResultDoc {
        ResultDoc::with_flows(
            flows
                .into_iter()
                .map(|intervals| FlowResult {
                    intervals,
                    ..FlowResult::default()
                })
                .collect(),
        )
    }

    #[test]
    fn flows_add_and_repetitions_band() {
        // Run 1: two flows, 0.5 s intervals.
        let r1 = run(vec![
            vec![iv(0.0, 10, 1000.0, 0.002, 0), iv(0.5, 10, 1000.0, 0.004, 1)],
            vec![iv(0.0, 30, 3000.0, 0.006, 0), iv(0.5, 0, 0.0, 0.0, 2)],
        ]);
        // Run 2: one flow, one interval longer.
        let r2 = run(vec![vec![
            iv(0.0, 5, 2000.0, 0.001, 0),
            iv(0.5, 5, 6000.0, 0.001, 0),
            iv(1.0, 5, 500.0, 0.003, 4),
        ]]);
        let no_series = run(vec![vec![]]);
        let s = scenario_series([&r1, &r2, &no_series].into_iter()).unwrap();
        assert_eq!(s.runs, 2);
        assert_eq!(s.interval_s, 0.5);
        assert_eq!(
            s.throughput_bps.mean,
            [Some(3000.0), Some(3500.0), Some(500.0)]
        );
        assert_eq!(
            s.throughput_bps.min,
            [Some(2000.0), Some(1000.0), Some(500.0)]
        );
        assert_eq!(
            s.throughput_bps.max,
            [Some(4000.0), Some(6000.0), Some(500.0)]
        );
        // Run 1 interval 0: (10·2 + 30·6) / 40 ms = 5 ms; run 2: 1 ms.
        let d0 = s.delay_s.mean[0].unwrap();
        assert!((d0 - 0.003).abs() < 1e-12, "{d0}");
        assert_eq!(s.delay_s.min[0], Some(0.001));
        assert_eq!(s.lost.mean, [Some(0.0), Some(1.5), Some(4.0)]);
        // A run without packets in an interval has no delay there.
        let empty = run(vec![vec![iv(0.0, 0, 0.0, 0.0, 3)]]);
        let e = scenario_series([&empty].into_iter()).unwrap();
        assert_eq!(e.delay_s.mean, [None]);
        assert!(scenario_series([&no_series].into_iter()).is_none());
    }
}
