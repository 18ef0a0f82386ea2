//! Delay and jitter distributions of a scenario: every flow's compact
//! histograms (`flows[].delay_hist` / `ipdv_hist` of each stored result)
//! merged over the flows and the repetitions — exact sums of counts on a
//! common grid (see `wirebench_stats::dist`) — for the report's CDF and
//! histogram charts, and the per-run |IPDV| percentiles of the tables.

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use wirebench_stats::Dist;

/// Most buckets a scenario's merged dist keeps in the summary.
pub const MAX_SCENARIO_BUCKETS: usize = 512;

/// A scenario's distributions over all flows of all ok repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ScenarioDist {
    /// Runs that contributed a histogram.
    pub runs: usize,
    /// One-way delay (RTT for round-trip flows is not included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Dist>,
    /// |IPDV| between consecutive packets of a flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv: Option<Dist>,
}

/// `key` of a flow as a dist; None when absent or not one (an old or
/// foreign document).
fn flow_dist(flow: &Value, key: &str) -> Option<Dist> {
    flow.get(key)
        .and_then(|v| serde_json::from_value::<Dist>(v.clone()).ok())
        .filter(|d| d.count() > 0)
}

fn add(into: &mut Option<Dist>, d: &Dist) {
    match into {
        Some(m) => {
            m.merge(d);
            m.fit(MAX_SCENARIO_BUCKETS);
        }
        None => *into = Some(d.clone()),
    }
}

/// The merged dists of a scenario's result documents; None when no run
/// carries a histogram (results from before they existed).
pub fn scenario_dist<'a>(docs: impl Iterator<Item = &'a Value>) -> Option<ScenarioDist> {
    let mut out = ScenarioDist::default();
    for doc in docs {
        let mut any = false;
        for f in doc
            .get("flows")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(d) = flow_dist(f, "delay_hist") {
                add(&mut out.delay, &d);
                any = true;
            }
            if let Some(d) = flow_dist(f, "ipdv_hist") {
                add(&mut out.ipdv, &d);
                any = true;
            }
        }
        out.runs += usize::from(any);
    }
    (out.runs > 0).then_some(out)
}

/// |IPDV| percentile metrics of one run: per flow from its histogram, the
/// worst flow (largest) — as the delay percentiles combine.
pub const IPDV_PERCENTILES: [(&str, f64); 4] = [
    ("jitter_ipdv_p50_s", 0.5),
    ("jitter_ipdv_p90_s", 0.9),
    ("jitter_ipdv_p99_s", 0.99),
    ("jitter_ipdv_p999_s", 0.999),
];

/// The run's |IPDV| percentiles (see [`IPDV_PERCENTILES`]); empty when no
/// flow has an |IPDV| histogram.
pub fn run_metrics(doc: &Value) -> Vec<(&'static str, f64)> {
    let dists: Vec<Dist> = doc
        .get("flows")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| flow_dist(f, "ipdv_hist"))
        .collect();
    IPDV_PERCENTILES
        .iter()
        .filter_map(|&(k, q)| {
            dists
                .iter()
                .filter_map(|d| d.quantile(q))
                .reduce(f64::max)
                .map(|v| (k, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flows_and_runs_merge() {
        let d = |vals: &[i64]| Dist::from_counts(7, vals.iter().map(|&v| (v, 1)));
        let run = |a: &[i64], b: &[i64]| {
            json!({"flows": [
                {"delay_hist": d(a), "ipdv_hist": d(&[10, 20])},
                {"delay_hist": d(b)},
            ]})
        };
        let r1 = run(&[100, 200], &[300]);
        let r2 = run(&[400], &[500, 600, 700]);
        let old = json!({"flows": [{"delay_s": {"mean": 1.0}}]});
        let s = scenario_dist([&r1, &r2, &old].into_iter()).unwrap();
        assert_eq!(s.runs, 2);
        let delay = s.delay.unwrap();
        assert_eq!(delay.count(), 7);
        // 400 ns lies in the bucket 400..=401 (2^-7 grid above 255).
        assert_eq!(delay.quantile(0.5), Some(401e-9));
        assert_eq!(s.ipdv.unwrap().count(), 4);
        assert!(scenario_dist([&old].into_iter()).is_none());
        let m = run_metrics(&r1);
        assert_eq!(m[0], ("jitter_ipdv_p50_s", 10e-9));
        assert_eq!(m[1], ("jitter_ipdv_p90_s", 20e-9));
        assert!(run_metrics(&old).is_empty());
    }
}
