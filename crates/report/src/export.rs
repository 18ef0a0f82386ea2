//! CSV and JSON exports of every aggregate and every run, for spreadsheets and
//! scripts that want the numbers rather than the pictures.
//!
//! CSV follows RFC 4180: fields holding a comma, quote, CR/LF or edge spaces
//! are quoted and inner quotes doubled; numbers use Rust's shortest
//! round-tripping decimal form, empty for missing or non-finite values.

use crate::ReportError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use wirebench_schema::summary::CampaignSummary;

/// The key metrics of one stored run, as the CLI reads them from the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The campaign's name.
    pub campaign: String,
    /// Scenario key, as in [`wirebench_schema::summary::ScenarioSummary::key`].
    pub scenario: String,
    /// Repetition number within the scenario, counted from 1 as `wirebench
    /// results list` shows it (the store's row keeps its own index).
    pub repetition: u64,
    /// The run's id in the results store (`wirebench results show ID`).
    #[serde(default)]
    pub run_id: Option<i64>,
    /// When the run started and ended (RFC 3339, UTC), as the store has them.
    #[serde(default)]
    pub started_at: String,
    /// See `started_at`.
    #[serde(default)]
    pub ended_at: String,
    /// "ok", "failed", ... as the store records it.
    pub status: String,
    /// Axis name → value as text, as in the scenario's summary.
    pub axes: BTreeMap<String, String>,
    /// Metric key → value in SI units.
    pub metrics: BTreeMap<String, f64>,
}

/// File names `write_csv` creates inside its directory.
pub const AGGREGATES_CSV: &str = "aggregates.csv";
/// The per-run file `write_csv` creates beside [`AGGREGATES_CSV`].
pub const RUNS_CSV: &str = "runs.csv";
/// The per-run file in long form (one row per run × metric, with units).
pub const RUNS_LONG_CSV: &str = "runs_long.csv";

/// Quotes one CSV field when needed.
pub fn csv_field(s: &str) -> String {
    let needs = s.contains([',', '"', '\n', '\r'])
        || s.starts_with(' ')
        || s.ends_with(' ')
        || s.starts_with('\t');
    if needs {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

fn csv_line(out: &mut String, fields: &[String]) {
    let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
    out.push_str(&line.join(","));
    out.push_str("\r\n");
}

/// Axis names across campaigns, first-seen order.
fn axis_union(summaries: &[CampaignSummary]) -> Vec<String> {
    let mut axes: Vec<String> = Vec::new();
    for s in summaries {
        for a in crate::plan::all_axes(s) {
            if !axes.contains(&a) {
                axes.push(a);
            }
        }
    }
    axes
}

/// Column name of an axis, prefixed when it would collide with a fixed column.
fn axis_col(a: &str, fixed: &[&str]) -> String {
    if fixed.contains(&a) {
        format!("axis_{a}")
    } else {
        a.to_string()
    }
}

/// One row per campaign × scenario × metric.
pub fn aggregates_csv(summaries: &[CampaignSummary]) -> String {
    let axes = axis_union(summaries);
    let fixed_all = [
        "campaign",
        "scenario",
        "metric",
        "family",
        "unit",
        "n",
        "mean",
        "sd",
        "median",
        "min",
        "max",
        "ci95",
        "cv",
        "cv_warning",
        "pct_vs_baseline",
        "upper_bound_bps",
        "pct_of_upper_bound",
        "runs_ok",
        "runs_planned",
    ];
    let mut out = String::new();
    let mut head: Vec<String> = vec!["campaign".into(), "scenario".into()];
    head.extend(axes.iter().map(|a| axis_col(a, &fixed_all)));
    head.extend(fixed_all[2..].iter().map(|s| s.to_string()));
    csv_line(&mut out, &head);
    for s in summaries {
        let fam_metrics: Vec<&wirebench_schema::summary::MetricInfo> = s
            .metrics
            .iter()
            .filter(|m| m.family == wirebench_schema::summary::MetricFamily::Throughput)
            .collect();
        for sc in &s.scenarios {
            // Metrics in the campaign's declared order, then any undeclared ones.
            let mut keys: Vec<&str> = s
                .metrics
                .iter()
                .map(|m| m.key.as_str())
                .filter(|k| sc.metrics.contains_key(*k))
                .collect();
            for k in sc.metrics.keys() {
                if !keys.contains(&k.as_str()) {
                    keys.push(k);
                }
            }
            for k in keys {
                let Some(st) = sc.metrics.get(k) else {
                    continue;
                };
                let info = s.metrics.iter().find(|m| m.key == k);
                let bound_here = info.is_some_and(|m| crate::plan::bound_applies(m, &fam_metrics));
                let mut row: Vec<String> = vec![s.name.clone(), sc.key.clone()];
                row.extend(
                    axes.iter()
                        .map(|a| sc.axes.get(a).cloned().unwrap_or_default()),
                );
                row.push(k.to_string());
                row.push(
                    info.map(|m| crate::plan::family_key(m.family).to_string())
                        .unwrap_or_default(),
                );
                row.push(info.map(|m| m.unit.clone()).unwrap_or_default());
                row.push(st.n.to_string());
                for v in [st.mean, st.sd, st.median, st.min, st.max, st.ci95, st.cv] {
                    row.push(csv_num(v));
                }
                row.push(st.cv_warning.to_string());
                row.push(st.pct_vs_baseline.map(csv_num).unwrap_or_default());
                let bound = if bound_here { sc.upper_bound_bps } else { None };
                row.push(bound.map(csv_num).unwrap_or_default());
                row.push(
                    bound
                        .filter(|b| *b > 0.0)
                        .map(|b| csv_num(st.mean / b * 100.0))
                        .unwrap_or_default(),
                );
                row.push(sc.runs_ok.to_string());
                row.push(sc.runs_planned.to_string());
                csv_line(&mut out, &row);
            }
        }
    }
    out
}

/// The run columns every per-run file starts with.
const RUN_COLUMNS: [&str; 7] = [
    "campaign",
    "run_id",
    "scenario",
    "repetition",
    "status",
    "started_at",
    "ended_at",
];

fn run_fields(r: &RunRecord) -> Vec<String> {
    vec![
        r.campaign.clone(),
        r.run_id.map(|i| i.to_string()).unwrap_or_default(),
        r.scenario.clone(),
        r.repetition.to_string(),
        r.status.clone(),
        r.started_at.clone(),
        r.ended_at.clone(),
    ]
}

/// Axis columns of the per-run files, first-seen order, and whether a
/// `paced` column follows them: `pps` holds a number or "max" (unpaced), so
/// it is written as the number (empty when unpaced) plus `paced` true/false,
/// and the column stays numeric for a spreadsheet or a data frame.
fn run_axes(runs: &[RunRecord]) -> (Vec<String>, bool) {
    let mut axes: Vec<String> = Vec::new();
    for r in runs {
        for a in r.axes.keys() {
            if !axes.contains(a) {
                axes.push(a.clone());
            }
        }
    }
    let paced = axes.iter().any(|a| a == PPS);
    (axes, paced)
}

const PPS: &str = "pps";

fn axis_fields(r: &RunRecord, axes: &[String], paced: bool) -> Vec<String> {
    let mut out: Vec<String> = axes
        .iter()
        .map(|a| {
            let v = r.axes.get(a).cloned().unwrap_or_default();
            if a == PPS && v.trim().parse::<f64>().is_err() {
                String::new()
            } else {
                v
            }
        })
        .collect();
    if paced {
        let v = r.axes.get(PPS).map(|v| v.trim()).unwrap_or("");
        out.push(match v {
            "" => String::new(),
            v if v.parse::<f64>().is_ok() => "true".into(),
            _ => "false".into(),
        });
    }
    out
}

fn run_header(axes: &[String], paced: bool) -> Vec<String> {
    let mut head: Vec<String> = RUN_COLUMNS.iter().map(|s| s.to_string()).collect();
    head.extend(axes.iter().map(|a| axis_col(a, &RUN_COLUMNS)));
    if paced {
        head.push(axis_col("paced", &RUN_COLUMNS));
    }
    head
}

/// One row per run, one column per metric (wide, as spreadsheets like it).
/// Every metric column is a number in the SI unit of the metric table
/// (`runs_long.csv` names it per row); run id and times identify the run.
pub fn runs_csv(runs: &[RunRecord]) -> String {
    let (axes, paced) = run_axes(runs);
    let mut metrics: Vec<String> = Vec::new();
    for r in runs {
        for m in r.metrics.keys() {
            if !metrics.contains(m) {
                metrics.push(m.clone());
            }
        }
    }
    metrics.sort();
    let mut out = String::new();
    let mut head = run_header(&axes, paced);
    head.extend(metrics.iter().cloned());
    csv_line(&mut out, &head);
    for r in runs {
        let mut row = run_fields(r);
        row.extend(axis_fields(r, &axes, paced));
        row.extend(
            metrics
                .iter()
                .map(|m| r.metrics.get(m).map(|v| csv_num(*v)).unwrap_or_default()),
        );
        csv_line(&mut out, &row);
    }
    out
}

/// The tidy (long) form: one row per run × metric with its `value` and
/// `unit` (the metric table's SI unit), for R's tidyverse or pandas'
/// `pivot`. A run without metrics (failed) keeps one row with an empty
/// metric, so no run disappears.
pub fn runs_long_csv(runs: &[RunRecord]) -> String {
    let (axes, paced) = run_axes(runs);
    let mut out = String::new();
    let mut head = run_header(&axes, paced);
    head.extend(["metric", "value", "unit"].map(String::from));
    csv_line(&mut out, &head);
    for r in runs {
        let mut lead = run_fields(r);
        lead.extend(axis_fields(r, &axes, paced));
        if r.metrics.is_empty() {
            let mut row = lead.clone();
            row.extend([String::new(), String::new(), String::new()]);
            csv_line(&mut out, &row);
        }
        for (k, v) in &r.metrics {
            let mut row = lead.clone();
            row.push(k.clone());
            row.push(csv_num(*v));
            row.push(
                wirebench_schema::metrics::metric(k)
                    .map(|m| m.unit.to_string())
                    .unwrap_or_default(),
            );
            csv_line(&mut out, &row);
        }
    }
    out
}

fn write_file(path: &Path, text: &str) -> Result<(), ReportError> {
    crate::write_output(path, text.as_bytes())
}

/// Writes `aggregates.csv` (always), `runs.csv` and `runs_long.csv` (when runs are given) into
/// `dir`, creating it. Returns the paths written.
pub fn write_csv(
    dir: &Path,
    summaries: &[CampaignSummary],
    runs: Option<&[RunRecord]>,
) -> Result<Vec<std::path::PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    let agg = dir.join(AGGREGATES_CSV);
    write_file(&agg, &aggregates_csv(summaries))?;
    written.push(agg);
    if let Some(runs) = runs {
        let p = dir.join(RUNS_CSV);
        write_file(&p, &runs_csv(runs))?;
        written.push(p);
        let p = dir.join(RUNS_LONG_CSV);
        write_file(&p, &runs_long_csv(runs))?;
        written.push(p);
    }
    Ok(written)
}

#[derive(Serialize)]
struct JsonExport<'a> {
    schema: &'static str,
    campaigns: &'a [CampaignSummary],
    #[serde(skip_serializing_if = "Option::is_none")]
    runs: Option<&'a [RunRecord]>,
}

/// Schema name of the JSON export.
pub const JSON_SCHEMA: &str = "wirebench.report/1";

/// Every aggregate (the full summaries) and, when given, every run, as one
/// JSON document `{schema, campaigns, runs}`. Non-finite numbers become null.
pub fn to_json(
    summaries: &[CampaignSummary],
    runs: Option<&[RunRecord]>,
) -> Result<String, ReportError> {
    let doc = JsonExport {
        schema: JSON_SCHEMA,
        campaigns: summaries,
        runs,
    };
    let mut s = serde_json::to_string_pretty(&doc).map_err(ReportError::Json)?;
    s.push('\n');
    Ok(s)
}

/// Writes [`to_json`] to `path`.
pub fn write_json(
    path: &Path,
    summaries: &[CampaignSummary],
    runs: Option<&[RunRecord]>,
) -> Result<(), ReportError> {
    write_file(path, &to_json(summaries, runs)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_num(f64::NAN), "");
        assert_eq!(csv_num(0.1), "0.1");
    }
}
