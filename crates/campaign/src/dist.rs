//! Delay and jitter distributions of a scenario: every flow's compact
//! histograms (`flows[].delay_hist` / `ipdv_hist` of each stored result)
//! merged over the flows and the repetitions — exact sums of counts on a
//! common grid (see `wirebench_schema::dist`) — for the report's CDF and
//! histogram charts. The per-run |IPDV| percentiles of the tables are rows
//! of the metric table (crate::metrics).

pub use wirebench_schema::dist::ScenarioDist;
use wirebench_stats::result::ResultDoc;
pub use wirebench_stats::Histogram;

/// Most buckets a scenario's merged dist keeps in the summary.
pub const MAX_SCENARIO_BUCKETS: usize = 512;

/// A flow's dist when it has a non-empty one (documents from before they
/// existed have none).
fn non_empty(d: &Option<Histogram>) -> Option<&Histogram> {
    d.as_ref().filter(|d| d.count() > 0)
}

fn add(into: &mut Option<Histogram>, d: &Histogram) {
    match into {
        Some(m) => {
            m.merge(d);
            m.fit(MAX_SCENARIO_BUCKETS);
        }
        None => *into = Some(d.clone()),
    }
}

/// Adds one run's result document to a scenario's dists (a run without
/// histograms adds nothing).
pub fn add_doc(out: &mut ScenarioDist, doc: &ResultDoc) {
    let mut any = false;
    for f in &doc.flows {
        if let Some(d) = non_empty(&f.delay_hist) {
            add(&mut out.delay, d);
            any = true;
        }
        if let Some(d) = non_empty(&f.ipdv_hist) {
            add(&mut out.ipdv, d);
            any = true;
        }
    }
    out.runs += usize::from(any);
}

/// The merged dists of a scenario's result documents; None when no run
/// carries a histogram (results from before they existed).
pub fn scenario_dist<'a>(docs: impl Iterator<Item = &'a ResultDoc>) -> Option<ScenarioDist> {
    let mut out = ScenarioDist::default();
    for doc in docs {
        add_doc(&mut out, doc);
    }
    (out.runs > 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_stats::result::FlowResult;

    #[test]
    fn flows_and_runs_merge() {
        let d = |vals: &[i64]| Histogram::from_counts(7, vals.iter().map(|&v| (v, 1)));
        let run = |a: &[i64], b: &[i64]| {
            ResultDoc::with_flows(vec![
                FlowResult {
                    delay_hist: Some(d(a)),
                    ipdv_hist: Some(d(&[10, 20])),
                    ..FlowResult::default()
                },
                FlowResult {
                    delay_hist: Some(d(b)),
                    ..FlowResult::default()
                },
            ])
        };
        let r1 = run(&[100, 200], &[300]);
        let r2 = run(&[400], &[500, 600, 700]);
        let old = ResultDoc::with_flows(vec![FlowResult::default()]);
        let s = scenario_dist([&r1, &r2, &old].into_iter()).unwrap();
        assert_eq!(s.runs, 2);
        let delay = s.delay.unwrap();
        assert_eq!(delay.count(), 7);
        // 400 ns lies in the bucket 400..=401 (2^-7 grid above 255).
        assert_eq!(delay.quantile(0.5), Some(401e-9));
        assert_eq!(s.ipdv.unwrap().count(), 4);
        assert!(scenario_dist([&old].into_iter()).is_none());
        let m = crate::metrics::extract(&r1, None);
        assert_eq!(m["jitter_ipdv_p50_s"], 10e-9);
        assert_eq!(m["jitter_ipdv_p90_s"], 20e-9);
        assert!(!crate::metrics::extract(&old, None).contains_key("jitter_ipdv_p50_s"));
    }
}
