//! Adaptive repetitions: whether a scenario's runs have settled, and which
//! runs come next. Everything is decided from the stored runs alone, so an
//! interrupted campaign resumes exactly where the rule left it.

use crate::campaign::{Adaptive, Campaign, Until};
use crate::runner::{plan, PlannedRun};
use crate::store::{RunRow, RunStatus};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Where one scenario stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Settle {
    /// The scenario's key.
    pub key: String,
    /// Runs with a number for the watched metric.
    pub runs: usize,
    /// The coefficient of variation or relative CI half-width over those
    /// runs (None: fewer than two, or a mean of 0 with a spread).
    pub figure: Option<f64>,
    /// At least `repetitions` runs, and the figure is within the rule's limit.
    pub settled: bool,
    /// Still short of `max` and not settled: another run is due.
    pub more: bool,
}

/// The spread `until` measures over `values`: sample sd / |mean| (cv), or
/// t(0.975, n−1) · sd / √n / |mean| (the 95 % CI half-width relative to
/// the mean). None with fewer than two values or a zero mean with spread.
pub fn spread(values: &[f64], until: Until) -> Option<f64> {
    let a = wirebench_stats::aggregate(values).filter(|a| a.n >= 2)?;
    if a.mean == 0.0 {
        return (a.sd == 0.0).then_some(0.0);
    }
    Some(match until {
        Until::Cv(_) => a.cv,
        Until::Ci(_) => a.ci95 / a.mean.abs(),
    })
}

fn limit(until: Until) -> f64 {
    match until {
        Until::Cv(x) | Until::Ci(x) => x,
    }
}

/// The watched metric of every readable `ok` run, by scenario key, with
/// the repetitions stored `ok`.
fn values(a: &Adaptive, runs: &[RunRow]) -> BTreeMap<String, (Vec<f64>, BTreeSet<u32>)> {
    let mut out: BTreeMap<String, (Vec<f64>, BTreeSet<u32>)> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.status == RunStatus::Ok) {
        let Some(Ok(doc)) = r.result_doc() else {
            continue;
        };
        let e = out.entry(r.scenario_key.clone()).or_default();
        e.1.insert(r.repetition);
        if let Some(v) = crate::metrics::extract(&doc, r.counters.as_ref()).get(&a.metric) {
            e.0.push(*v);
        }
    }
    out
}

/// Where every scenario of `c` stands (empty without an adaptive rule).
pub fn settle(c: &Campaign, runs: &[RunRow]) -> Vec<Settle> {
    let Some(a) = &c.adaptive else {
        return Vec::new();
    };
    settle_values(c, a, &values(a, runs))
}

/// [`settle`] over the watched metric's values and the `ok` repetitions,
/// by scenario key, however they were gathered.
fn settle_values(
    c: &Campaign,
    a: &Adaptive,
    by_key: &BTreeMap<String, (Vec<f64>, BTreeSet<u32>)>,
) -> Vec<Settle> {
    c.expand()
        .into_iter()
        .map(|s| {
            let (vals, reps) = by_key.get(&s.key).cloned().unwrap_or_default();
            let figure = spread(&vals, a.until);
            let settled =
                vals.len() >= c.repetitions as usize && figure.is_some_and(|f| f <= limit(a.until));
            Settle {
                key: s.key,
                runs: vals.len(),
                figure,
                settled,
                more: !settled
                    && reps.len() >= c.repetitions as usize
                    && reps.len() < a.max as usize,
            }
        })
        .collect()
}

/// The next round: one more run of every scenario that has all its
/// planned runs, has not settled and is short of `max`, in plan order
/// (test-bed groups kept together), skipping `skip` (scenarios whose extra
/// run failed in this invocation, so a broken one cannot loop). Each takes
/// the lowest repetition number not stored `ok`.
pub fn next_round(c: &Campaign, runs: &[RunRow], skip: &HashSet<String>) -> Vec<PlannedRun> {
    let Some(a) = &c.adaptive else {
        return Vec::new();
    };
    let due: HashSet<String> = settle(c, runs)
        .into_iter()
        .filter(|s| s.more && !skip.contains(&s.key))
        .map(|s| s.key)
        .collect();
    let by_key = values(a, runs);
    plan(c)
        .into_iter()
        .filter(|p| p.repetition == 0 && due.contains(&p.scenario.key))
        .filter_map(|mut p| {
            let reps = by_key.get(&p.scenario.key).map(|v| &v.1);
            p.repetition = (0..a.max).find(|r| reps.is_none_or(|s| !s.contains(r)))?;
            Some(p)
        })
        .collect()
}

/// Report lines: the rule, how many runs the settled scenarios took, and
/// every scenario that never settled within `max` runs.
pub fn notes(c: &Campaign, runs: &[RunRow]) -> Vec<String> {
    let Some(a) = &c.adaptive else {
        return Vec::new();
    };
    notes_of(c, a, settle(c, runs))
}

/// [`notes`] from each scenario's values of the watched metric (as a
/// summary gathers them run by run), by scenario key.
pub fn notes_from_values(c: &Campaign, values: BTreeMap<String, Vec<f64>>) -> Vec<String> {
    let Some(a) = &c.adaptive else {
        return Vec::new();
    };
    let by_key = values
        .into_iter()
        .map(|(k, v)| (k, (v, BTreeSet::new())))
        .collect();
    notes_of(c, a, settle_values(c, a, &by_key))
}

fn notes_of(c: &Campaign, a: &Adaptive, all: Vec<Settle>) -> Vec<String> {
    let settled: Vec<&Settle> = all.iter().filter(|s| s.settled).collect();
    let mut out = Vec::new();
    let (lo, hi) = (
        settled.iter().map(|s| s.runs).min().unwrap_or(0),
        settled.iter().map(|s| s.runs).max().unwrap_or(0),
    );
    out.push(format!(
        "Adaptive repetitions ({}): {} of {} scenarios settled{}.",
        c.repetitions_text(),
        settled.len(),
        all.len(),
        if settled.is_empty() {
            String::new()
        } else if lo == hi {
            format!(" after {lo} runs")
        } else {
            format!(" after {lo}–{hi} runs")
        }
    ));
    let what = match a.until {
        Until::Cv(_) => "cv",
        Until::Ci(_) => "95 % CI half-width / mean",
    };
    for s in all.iter().filter(|s| !s.settled) {
        let figure = s.figure.map_or("n/a".to_string(), |f| format!("{f:.3}"));
        out.push(if s.runs >= a.max as usize {
            format!(
                "NOT SETTLED: {} after {} runs ({what} {figure} > {})",
                s.key,
                s.runs,
                limit(a.until)
            )
        } else {
            format!(
                "not settled yet: {} after {} runs ({what} {figure}); `run --resume` continues it",
                s.key, s.runs
            )
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_cv_or_relative_ci() {
        // mean 10, sample sd 1 (values 9, 10, 11).
        let v = [9.0, 10.0, 11.0];
        assert!((spread(&v, Until::Cv(0.1)).unwrap() - 0.1).abs() < 1e-12);
        // t(0.975, 2) = 4.302653; 4.302653 * 0.1 / sqrt(3) = 0.248414.
        let ci = spread(&v, Until::Ci(0.02)).unwrap();
        assert!((ci - 0.248414).abs() < 1e-5, "{ci}");
        assert_eq!(spread(&[5.0], Until::Cv(0.1)), None);
        assert_eq!(spread(&[0.0, 0.0], Until::Cv(0.1)), Some(0.0));
        assert_eq!(spread(&[-1.0, 1.0], Until::Cv(0.1)), None);
    }
}

#[cfg(test)]
mod parse_tests {
    use crate::campaign::{Campaign, Until};

    fn file(reps: &str) -> String {
        format!("packets = 10\nrepetitions = {reps}\n[loopback]\n[matrix]\nip = [4]\n")
    }

    #[test]
    fn adaptive_repetitions_parse_and_are_checked() {
        let c = Campaign::parse(&file("{ min = 5, max = 30, until_cv = 0.10 }"), "t.toml").unwrap();
        let a = c.adaptive.clone().unwrap();
        assert_eq!((c.repetitions, a.max, a.until), (5, 30, Until::Cv(0.10)));
        assert_eq!(a.metric, "throughput_payload_bps");
        assert_eq!(c.planned_runs(), 5);
        assert_eq!(c.repetitions_max(), 30);
        let c = Campaign::parse(
            &file("{ min = 3, max = 10, until_ci = \"2%\", metric = \"delay_mean_s\" }"),
            "t.toml",
        )
        .unwrap();
        let a = c.adaptive.clone().unwrap();
        assert_eq!(
            (a.until, a.metric.as_str()),
            (Until::Ci(0.02), "delay_mean_s")
        );
        // Quick: at most twice its repetitions.
        let mut q = c.clone();
        q.apply_quick().unwrap();
        assert_eq!((q.repetitions, q.adaptive.unwrap().max), (2, 4));
        assert_eq!(
            Campaign::parse(&file("3"), "t.toml").unwrap().adaptive,
            None
        );
        for (bad, needle) in [
            ("0", "must be 1..=10000, got 0"),
            ("{ min = 1, max = 5, until_cv = 0.1 }", "2 <= min <= max"),
            ("{ min = 5, max = 3, until_cv = 0.1 }", "2 <= min <= max"),
            ("{ min = 2, max = 5 }", "until_cv"),
            (
                "{ min = 2, max = 5, until_cv = 0.1, until_ci = \"2%\" }",
                "one of",
            ),
            ("{ min = 2, max = 5, until_ci = \"2\" }", "until_ci"),
            ("{ min = 2, max = 5, until_cv = -1 }", "until_cv"),
            (
                "{ min = 2, max = 5, until_cv = 0.1, metric = \"speed\" }",
                "metric",
            ),
            (
                "{ min = 2, max = 5, until_cv = 0.1, when = 1 }",
                "unknown key \"when\"",
            ),
            ("{ max = 5, until_cv = 0.1 }", "`min`"),
            ("\"many\"", "whole number"),
        ] {
            let e = Campaign::parse(&file(bad), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("t.toml:2: `repetitions`:") && e.contains(needle),
                "{bad}: {e}"
            );
        }
    }
}
