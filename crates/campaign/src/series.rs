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

/// One figure's running band: per interval the sum and count of the
/// repetitions' values (for the mean) and their smallest and largest.
#[derive(Debug, Default)]
struct BandAcc(Vec<(f64, usize, f64, f64)>);

impl BandAcc {
    fn add(&mut self, k: usize, v: Option<f64>) {
        if self.0.len() <= k {
            self.0
                .resize(k + 1, (0.0, 0, f64::INFINITY, f64::NEG_INFINITY));
        }
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let a = &mut self.0[k];
            *a = (a.0 + v, a.1 + 1, a.2.min(v), a.3.max(v));
        }
    }

    fn finish(self, len: usize) -> Band {
        let mut b = Band::default();
        for k in 0..len {
            match self.0.get(k) {
                Some(&(sum, n, min, max)) if n > 0 => {
                    b.mean.push(Some(sum / n as f64));
                    b.min.push(Some(min));
                    b.max.push(Some(max));
                }
                _ => {
                    b.mean.push(None);
                    b.min.push(None);
                    b.max.push(None);
                }
            }
        }
        b
    }
}

/// A scenario's series built one run at a time: memory grows with the
/// length of the series, not with the number of runs.
#[derive(Debug, Default)]
pub struct SeriesAcc {
    len_s: f64,
    runs: usize,
    points: usize,
    bands: [BandAcc; 4],
}

impl SeriesAcc {
    /// Adds one run's result document (a run without intervals adds nothing).
    pub fn add(&mut self, doc: &ResultDoc) {
        let Some((l, s)) = run_series(doc) else {
            return;
        };
        if l > 0.0 {
            self.len_s = l;
        }
        self.runs += 1;
        self.points = self.points.max(s.len());
        for (k, (tp, d, j, lost)) in s.into_iter().enumerate() {
            self.bands[0].add(k, Some(tp));
            self.bands[1].add(k, d);
            self.bands[2].add(k, j);
            self.bands[3].add(k, Some(lost));
        }
    }

    /// The series; None when no run had intervals.
    pub fn finish(self) -> Option<ScenarioSeries> {
        if self.runs == 0 {
            return None;
        }
        let [tp, d, j, lost] = self.bands;
        Some(ScenarioSeries {
            interval_s: self.len_s,
            runs: self.runs,
            throughput_bps: tp.finish(self.points),
            delay_s: d.finish(self.points),
            jitter_s: j.finish(self.points),
            lost: lost.finish(self.points),
        })
    }
}

/// The series of a scenario from its runs' result documents; None when no
/// run has intervals.
pub fn scenario_series<'a>(docs: impl Iterator<Item = &'a ResultDoc>) -> Option<ScenarioSeries> {
    let mut acc = SeriesAcc::default();
    for doc in docs {
        acc.add(doc);
    }
    acc.finish()
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
