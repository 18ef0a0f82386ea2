//! Time series of a scenario (campaigns with `interval_ms`): each run's
//! per-interval figures (`flows[].intervals` of its stored result),
//! combined over the run's flows, then summarised over the repetitions as
//! a mean with a min–max band — what the report draws as throughput,
//! delay, jitter and loss over time.

pub use wirebench_schema::series::{Band, ScenarioSeries, Stall, TcpSeries, MAX_STALLS};
use wirebench_stats::result::ResultDoc;
use wirebench_stats::result::TcpInfo;

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

/// The `TCP_INFO` figures drawn as a spread over flows: cwnd, srtt,
/// pacing rate, delivery rate.
const SPREAD: usize = 4;

fn spread_values(t: &TcpInfo) -> [Option<f64>; SPREAD] {
    [
        Some(t.cwnd_bytes as f64),
        Some(t.rtt_s),
        t.pacing_rate_bps,
        t.delivery_rate_bps,
    ]
}

/// Smallest, median and largest of `v` (sorted here); None when empty.
fn min_median_max(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = match n {
        0 => return None,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    Some((v[0], med, v[n - 1]))
}

/// One run's TCP figures per interval.
#[derive(Debug, Default)]
struct RunTcp {
    flows: usize,
    /// Per interval: min, median, max over the flows, per [`SPREAD`] figure.
    spread: Vec<[Option<(f64, f64, f64)>; SPREAD]>,
    /// Per interval: segments retransmitted by all flows, flows stalled.
    retransmits: Vec<f64>,
    stalled: Vec<f64>,
    stalls: Vec<Stall>,
}

/// The TCP part of run `run` (1-based); None when no flow has
/// `intervals[].tcp`. A flow stalls in interval k when nothing of it
/// arrived there although it had begun (k after its first interval with
/// data) and the run still carried data (k up to the last interval in
/// which any flow's data arrived; a flow whose intervals end early
/// stalls from there up to the one before that).
fn run_tcp(doc: &ResultDoc, run: usize) -> Option<RunTcp> {
    let tcp: Vec<_> = doc
        .flows
        .iter()
        .filter(|f| f.intervals.iter().any(|iv| iv.tcp.is_some()))
        .collect();
    if tcp.is_empty() {
        return None;
    }
    let last_data = doc
        .flows
        .iter()
        .filter_map(|f| {
            f.intervals
                .iter()
                .take(MAX_POINTS)
                .rposition(|iv| iv.packets > 0)
        })
        .max()?;
    let n = tcp
        .iter()
        .map(|f| f.intervals.len().min(MAX_POINTS))
        .max()
        .unwrap_or(0)
        .max(last_data + 1);
    let mut r = RunTcp {
        flows: tcp.len(),
        spread: vec![[None; SPREAD]; n],
        retransmits: vec![0.0; n],
        stalled: vec![0.0; n],
        stalls: Vec::new(),
    };
    let mut vals: [Vec<f64>; SPREAD] = Default::default();
    for (k, spread) in r.spread.iter_mut().enumerate() {
        vals.iter_mut().for_each(Vec::clear);
        for f in &tcp {
            if let Some(t) = f.intervals.get(k).and_then(|iv| iv.tcp.as_ref()) {
                for (v, x) in vals.iter_mut().zip(spread_values(t)) {
                    v.extend(x.filter(|x| x.is_finite()));
                }
            }
        }
        for (out, v) in spread.iter_mut().zip(vals.iter_mut()) {
            *out = min_median_max(v);
        }
    }
    for f in &tcp {
        // The flow's latest reading at or before each interval.
        let mut known: Vec<Option<&TcpInfo>> = Vec::with_capacity(n);
        let mut last = None;
        for k in 0..n {
            if let Some(t) = f.intervals.get(k).and_then(|iv| iv.tcp.as_ref()) {
                last = Some(t);
            }
            known.push(last);
        }
        let retx = |k: Option<usize>| k.and_then(|k| known[k]).map_or(0, |t| t.retransmits);
        for k in 0..n {
            let before = k.checked_sub(1);
            r.retransmits[k] += retx(Some(k)).saturating_sub(retx(before)) as f64;
        }
        let Some(first) = f.intervals.iter().position(|iv| iv.packets > 0) else {
            continue;
        };
        let mut k = first;
        while k <= last_data {
            // Flows' intervals count from each one's first packet, so a
            // flow may end one interval before the others without
            // stalling: an interval it does not have counts only before
            // the run's last one with data.
            let quiet = |k: usize| match f.intervals.get(k) {
                Some(iv) => iv.packets == 0,
                None => k < last_data,
            };
            if !quiet(k) {
                k += 1;
                continue;
            }
            let start = k;
            while k <= last_data && quiet(k) {
                r.stalled[k] += 1.0;
                k += 1;
            }
            let at = known[start];
            r.stalls.push(Stall {
                run,
                flow: f.id,
                t_s: doc
                    .flows
                    .iter()
                    .find_map(|g| g.intervals.get(start))
                    .map_or(f64::NAN, |iv| iv.t_s),
                intervals: k - start,
                cwnd_bytes: at.map_or(0, |t| t.cwnd_bytes),
                srtt_s: at.map_or(0.0, |t| t.rtt_s),
                retransmits: retx(Some(k - 1)).saturating_sub(retx(start.checked_sub(1))),
            });
        }
    }
    Some(r)
}

/// The running bands of a [`TcpSeries`].
#[derive(Debug, Default)]
struct TcpAcc {
    flows: usize,
    /// Per [`SPREAD`] figure: the runs' smallest, median and largest flow.
    spread: [[BandAcc; 3]; SPREAD],
    retransmits: BandAcc,
    stalled: BandAcc,
    stalls: Vec<Stall>,
}

impl TcpAcc {
    fn add(&mut self, r: RunTcp) {
        self.flows = self.flows.max(r.flows);
        for (k, sp) in r.spread.iter().enumerate() {
            for (acc, v) in self.spread.iter_mut().zip(sp) {
                acc[0].add(k, v.map(|v| v.0));
                acc[1].add(k, v.map(|v| v.1));
                acc[2].add(k, v.map(|v| v.2));
            }
        }
        for (k, (&x, &st)) in r.retransmits.iter().zip(&r.stalled).enumerate() {
            self.retransmits.add(k, Some(x));
            self.stalled.add(k, Some(st));
        }
        self.stalls.extend(r.stalls);
        self.stalls.sort_by_key(|s| std::cmp::Reverse(s.intervals));
        self.stalls.truncate(MAX_STALLS);
    }

    fn finish(self, len: usize) -> TcpSeries {
        let [cwnd, srtt, pacing, delivery] = self.spread.map(|[lo, med, hi]| Band {
            min: lo.finish(len).min,
            mean: med.finish(len).mean,
            max: hi.finish(len).max,
        });
        TcpSeries {
            flows: self.flows,
            cwnd_bytes: cwnd,
            srtt_s: srtt,
            pacing_rate_bps: pacing,
            delivery_rate_bps: delivery,
            retransmits: self.retransmits.finish(len),
            stalled: self.stalled.finish(len),
            stalls: self.stalls,
        }
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
    tcp: Option<TcpAcc>,
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
        if let Some(t) = run_tcp(doc, self.runs) {
            self.points = self.points.max(t.spread.len());
            self.tcp.get_or_insert_with(TcpAcc::default).add(t);
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
            tcp: self.tcp.map(|t| t.finish(self.points)),
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
        assert!(s.tcp.is_none());
    }

    fn tcp_iv(packets: u64, cwnd: u64, srtt: f64, retx: u64) -> Interval {
        Interval {
            tcp: Some(TcpInfo {
                retransmits: retx,
                rtt_s: srtt,
                cwnd_bytes: cwnd,
                mss: 1448,
                pacing_rate_bps: Some(cwnd as f64 * 8.0 / srtt),
                delivery_rate_bps: None,
            }),
            ..iv(0.0, packets, packets as f64 * 8.0, 0.001, 0)
        }
    }

    /// Three TCP flows over four intervals: flow 2 stalls in intervals 1
    /// and 2 with a one-segment window and 7 retransmits; flow 3 starts
    /// late (no stall before its first record) and stalls in the last
    /// interval. The spread is min / median / max over the flows, the
    /// retransmits are per interval over all flows, and each stall names
    /// its flow, start, length and state.
    #[test]
    fn tcp_flows_spread_and_stalls_over_time() {
        let mut flows = vec![
            (0..4).map(|k| tcp_iv(10, 20_000 + k, 0.010, 0)).collect(),
            vec![
                tcp_iv(10, 30_000, 0.020, 1),
                tcp_iv(0, 1448, 0.200, 5),
                tcp_iv(0, 1448, 0.400, 8),
                tcp_iv(10, 10_000, 0.030, 8),
            ],
            vec![
                tcp_iv(0, 10_000, 0.005, 0),
                tcp_iv(10, 10_000, 0.005, 0),
                tcp_iv(10, 10_000, 0.005, 0),
                tcp_iv(0, 10_000, 0.005, 2),
            ],
        ];
        for f in &mut flows {
            for (k, i) in f.iter_mut().enumerate() {
                i.t_s = k as f64 * 0.5;
            }
        }
        let mut doc = run(flows);
        for (i, f) in doc.flows.iter_mut().enumerate() {
            f.id = i as u16 + 1;
        }
        let s = scenario_series([&doc].into_iter()).unwrap();
        let t = s.tcp.unwrap();
        assert_eq!(t.flows, 3);
        assert_eq!(
            t.cwnd_bytes.min,
            [Some(10_000.0), Some(1448.0), Some(1448.0), Some(10_000.0)]
        );
        assert_eq!(
            t.cwnd_bytes.mean,
            [
                Some(20_000.0),
                Some(10_000.0),
                Some(10_000.0),
                Some(10_000.0)
            ]
        );
        assert_eq!(t.srtt_s.max[2], Some(0.400));
        assert_eq!(t.delivery_rate_bps.mean, [None; 4]);
        assert_eq!(
            t.retransmits.mean,
            [Some(1.0), Some(4.0), Some(3.0), Some(2.0)]
        );
        assert_eq!(t.stalled.mean, [Some(0.0), Some(1.0), Some(1.0), Some(1.0)]);
        assert_eq!(
            t.stalls,
            [
                Stall {
                    run: 1,
                    flow: 2,
                    t_s: 0.5,
                    intervals: 2,
                    cwnd_bytes: 1448,
                    srtt_s: 0.200,
                    retransmits: 7,
                },
                Stall {
                    run: 1,
                    flow: 3,
                    t_s: 1.5,
                    intervals: 1,
                    cwnd_bytes: 10_000,
                    srtt_s: 0.005,
                    retransmits: 2,
                },
            ]
        );
    }

    /// A flow whose intervals end early stalls from there, up to the
    /// interval before the run's last with data: intervals count from
    /// each flow's first packet, so lacking only the last one is no stall.
    #[test]
    fn a_flow_that_ends_early_stalls_but_a_one_interval_shift_does_not() {
        let long: Vec<Interval> = (0..4).map(|_| tcp_iv(10, 5_000, 0.001, 0)).collect();
        let shifted = long[..3].to_vec();
        let short = long[..2].to_vec();
        let mut doc = run(vec![long, shifted, short]);
        for (i, f) in doc.flows.iter_mut().enumerate() {
            f.id = i as u16 + 1;
            for (k, iv) in f.intervals.iter_mut().enumerate() {
                iv.t_s = k as f64 * 0.25;
            }
        }
        let t = scenario_series([&doc].into_iter()).unwrap().tcp.unwrap();
        assert_eq!(t.stalled.mean, [Some(0.0), Some(0.0), Some(1.0), Some(0.0)]);
        assert_eq!(t.stalls.len(), 1);
        assert_eq!((t.stalls[0].flow, t.stalls[0].t_s), (3, 0.5));
        assert_eq!(t.stalls[0].intervals, 1);
    }
}
