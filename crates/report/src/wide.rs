//! Study-shaped tables: the values of one axis side by side (S3's "IPv4 |
//! IPv6"), the change of each against the first, and a mean row closing
//! every sweep over the x axis (S3's Table II: "mean over the six lengths:
//! IPv4 about 6 % more throughput"). Chosen with `[report] columns = "ip"`.

use crate::fmt::{esc, pct, Scale};
use crate::html::{axes_w, cell_text, col_w, column_scales, higher_is_better, metric_w, PAGE_W};
use crate::plan::axis_text;
use crate::plan::bound_applies;
use std::fmt::Write as _;
use wirebench_schema::summary::{CampaignSummary, MetricFamily, MetricInfo, ScenarioSummary};
use wirebench_stats::pct_change;

/// One row: the values of the row axes and a scenario per column value.
struct Row<'s> {
    key: Vec<String>,
    cells: Vec<Option<&'s ScenarioSummary>>,
    /// Index of the sweep the row belongs to (rows of one sweep share every
    /// row axis but x).
    group: usize,
}

fn axis_value<'s>(sc: &'s ScenarioSummary, a: &str) -> &'s str {
    sc.axes.get(a).map(String::as_str).unwrap_or("")
}

/// Writes the family's metrics `ms` as wide tables with `col_axis` as
/// columns, split so that each fits the page.
pub(crate) fn table(
    out: &mut String,
    s: &CampaignSummary,
    varying: &[String],
    col_axis: &str,
    x_axis: Option<&str>,
    ms: &[&MetricInfo],
) {
    let row_axes: Vec<String> = varying
        .iter()
        .filter(|a| a.as_str() != col_axis)
        .cloned()
        .collect();
    let mut cols: Vec<&str> = Vec::new();
    for sc in &s.scenarios {
        let v = axis_value(sc, col_axis);
        if !cols.contains(&v) {
            cols.push(v);
        }
    }
    // The x axis closes a sweep with a mean row when it is a row axis with
    // numbers for values.
    let x = x_axis.filter(|x| {
        row_axes.iter().any(|a| a == x)
            && s.scenarios
                .iter()
                .all(|sc| axis_value(sc, x).trim().parse::<f64>().is_ok())
    });
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    for sc in &s.scenarios {
        let key: Vec<String> = row_axes
            .iter()
            .map(|a| axis_value(sc, a).to_string())
            .collect();
        let gkey: Vec<String> = row_axes
            .iter()
            .zip(&key)
            .filter(|(a, _)| Some(a.as_str()) != x)
            .map(|(_, v)| v.clone())
            .collect();
        let group = match groups.iter().position(|g| *g == gkey) {
            Some(i) => i,
            None => {
                groups.push(gkey);
                groups.len() - 1
            }
        };
        let ci = cols
            .iter()
            .position(|c| *c == axis_value(sc, col_axis))
            .unwrap_or(0);
        let ri = match rows.iter().position(|r| r.key == key) {
            Some(i) => i,
            None => {
                rows.push(Row {
                    key,
                    cells: vec![None; cols.len()],
                    group,
                });
                rows.len() - 1
            }
        };
        rows[ri].cells[ci].get_or_insert(sc);
    }
    // Rows of one sweep together, sweeps in order of first appearance.
    rows.sort_by_key(|r| r.group);

    // Every metric takes the same width: a column per value and a Δ per
    // value after the first.
    let per_metric = cols.len() as f64 * metric_w() + (cols.len() - 1) as f64 * col_w(9);
    let fixed = axes_w(s, &row_axes).max(col_w(14));
    let mut chunks: Vec<Vec<&MetricInfo>> = Vec::new();
    let mut w = fixed;
    for m in ms {
        // The bound metric brings a bound and a measured/bound column per value.
        let need = per_metric
            + if with_bound(s, m, ms) {
                cols.len() as f64 * (col_w(9) + col_w(8))
            } else {
                0.0
            };
        if chunks.is_empty() || w + need > PAGE_W {
            chunks.push(Vec::new());
            w = fixed;
        }
        w += need;
        if let Some(c) = chunks.last_mut() {
            c.push(m);
        }
    }
    for chunk in chunks {
        one_table(out, s, &row_axes, col_axis, &cols, x, &rows, &chunk, ms);
    }
}

/// Whether `m` carries the upper-bound columns (payload throughput, where
/// some scenario knows its link rate), as the one-row-per-scenario tables do.
fn with_bound(s: &CampaignSummary, m: &MetricInfo, family: &[&MetricInfo]) -> bool {
    bound_applies(m, family) && s.scenarios.iter().any(|sc| sc.upper_bound_bps.is_some())
}

#[allow(clippy::too_many_arguments)]
fn one_table(
    out: &mut String,
    s: &CampaignSummary,
    row_axes: &[String],
    col_axis: &str,
    cols: &[&str],
    x: Option<&str>,
    rows: &[Row],
    ms: &[&MetricInfo],
    family: &[&MetricInfo],
) {
    let scales = column_scales(s, ms, family);
    let col_text = |c: &str| {
        let t = axis_text(col_axis, c);
        if t.is_empty() {
            format!("{col_axis} –")
        } else {
            t
        }
    };
    out.push_str("<div class=\"tablewrap\"><table class=\"wide\">\n<thead><tr>");
    for a in row_axes {
        let _ = write!(out, "<th rowspan=\"2\">{}</th>", esc(a));
    }
    if row_axes.is_empty() {
        out.push_str("<th rowspan=\"2\">scenario</th>");
    }
    let span = 2 * cols.len() - 1;
    for (m, sc) in ms.iter().zip(&scales) {
        let unit = if sc.unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", sc.unit)
        };
        let _ = write!(
            out,
            "<th colspan=\"{span}\">{}{}</th>",
            esc(&m.label),
            esc(&unit)
        );
        if with_bound(s, m, family) {
            let _ = write!(
                out,
                "<th colspan=\"{}\">Upper bound{} and measured / bound</th>",
                2 * cols.len(),
                esc(&unit)
            );
        }
    }
    out.push_str("</tr>\n<tr>");
    for m in ms {
        for c in cols {
            let _ = write!(out, "<th>{}</th>", esc(&col_text(c)));
        }
        for c in &cols[1..] {
            let _ = write!(
                out,
                "<th>Δ {} vs {}</th>",
                esc(&col_text(c)),
                esc(&col_text(cols[0]))
            );
        }
        if with_bound(s, m, family) {
            for c in cols {
                let _ = write!(
                    out,
                    "<th>{c} bound</th><th>{c} measured / bound</th>",
                    c = esc(&col_text(c))
                );
            }
        }
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (i, r) in rows.iter().enumerate() {
        out.push_str("<tr>");
        for v in &r.key {
            let _ = write!(out, "<td class=\"axis\">{}</td>", esc(v));
        }
        if row_axes.is_empty() {
            out.push_str("<td class=\"axis\">all</td>");
        }
        for (m, sc) in ms.iter().zip(&scales) {
            let means: Vec<Option<f64>> = r
                .cells
                .iter()
                .map(|c| {
                    c.and_then(|c| c.metrics.get(&m.key))
                        .filter(|st| st.n > 0 && st.mean.is_finite())
                        .map(|st| st.mean)
                })
                .collect();
            for c in &r.cells {
                match c.and_then(|c| {
                    c.metrics
                        .get(&m.key)
                        .filter(|st| st.n > 0)
                        .map(|st| (c, st))
                }) {
                    Some((scn, st)) => {
                        let cell = cell_text(m, scn, st, sc);
                        // A throughput above the physical bound (the
                        // scenario's mean or any run's own check): marked.
                        let above = m.family == MetricFamily::Throughput
                            && c.is_some_and(ScenarioSummary::above_bound);
                        if above {
                            let _ = write!(
                                out,
                                "<td class=\"above\" title=\"above the physical bound: a measurement or emulation error\">{} (above bound)</td>",
                                esc(&cell)
                            );
                        } else if st.cv_warning {
                            let _ = write!(
                                out,
                                "<td class=\"cvw\">{}<span class=\"cvflag\">cv {:.0} %</span></td>",
                                esc(&cell),
                                st.cv * 100.0
                            );
                        } else {
                            let _ = write!(out, "<td>{}</td>", esc(&cell));
                        }
                    }
                    None => out.push_str("<td>–</td>"),
                }
            }
            delta_cells(out, m, &means);
            if with_bound(s, m, family) {
                bound_cells(out, m, &r.cells, sc);
            }
        }
        out.push_str("</tr>\n");
        // A mean row after the last row of each sweep over x.
        let last_of_group = rows.get(i + 1).is_none_or(|n| n.group != r.group);
        if let (Some(x), true) = (x, last_of_group) {
            let bound_cols: Vec<&str> = ms
                .iter()
                .filter(|m| with_bound(s, m, family))
                .map(|m| m.key.as_str())
                .collect();
            mean_row(out, row_axes, x, rows, r.group, ms, &scales, &bound_cols);
        }
    }
    out.push_str("</tbody></table></div>\n");
}

/// Each column's Ethernet upper bound and its measured payload throughput
/// as a share of it (S5's "within 0.1 % of the framing model"); above the
/// bound by more than the uncertainty reads "(above bound)" on red.
fn bound_cells(out: &mut String, m: &MetricInfo, cells: &[Option<&ScenarioSummary>], sc: &Scale) {
    for c in cells {
        let b = c.and_then(|c| c.upper_bound_bps).filter(|b| *b > 0.0);
        let st = c
            .and_then(|c| c.metrics.get(&m.key))
            .filter(|st| st.n > 0 && st.mean.is_finite());
        match (b, st) {
            (Some(b), Some(st)) => {
                let share = st.mean / b * 100.0;
                let _ = write!(out, "<td>{}</td>", crate::fmt::num(sc.apply(b), 4));
                if wirebench_schema::summary::above_bound(st.mean, st.ci95, b) {
                    let _ = write!(out, "<td class=\"above\">{share:.1} % (above bound)</td>");
                } else {
                    let _ = write!(out, "<td>{share:.1} %</td>");
                }
            }
            (Some(b), None) => {
                let _ = write!(
                    out,
                    "<td>{}</td><td>–</td>",
                    crate::fmt::num(sc.apply(b), 4)
                );
            }
            _ => out.push_str("<td>–</td><td>–</td>"),
        }
    }
}

/// Δ of every column after the first against the first, coloured by the
/// metric's better direction.
fn delta_cells(out: &mut String, m: &MetricInfo, means: &[Option<f64>]) {
    for v in &means[1..] {
        match (v, means[0]) {
            (Some(v), Some(b)) => match pct_change(*v, b) {
                Some(p) if p.is_finite() => {
                    let cls = match higher_is_better(m) {
                        Some(up) if p.abs() >= 0.05 => {
                            if (p > 0.0) == up {
                                " class=\"pos\""
                            } else {
                                " class=\"neg\""
                            }
                        }
                        _ => "",
                    };
                    let _ = write!(out, "<td{cls}>{}</td>", esc(&pct(p)));
                }
                _ => out.push_str("<td>–</td>"),
            },
            _ => out.push_str("<td>–</td>"),
        }
    }
}

/// The mean over a sweep's rows of each column, and the change of those
/// means against the first column. Only rows where every column has the
/// metric count, so the columns are compared over the same x values.
#[allow(clippy::too_many_arguments)]
fn mean_row(
    out: &mut String,
    row_axes: &[String],
    x: &str,
    rows: &[Row],
    group: usize,
    ms: &[&MetricInfo],
    scales: &[Scale],
    bound_cols: &[&str],
) {
    let members: Vec<&Row> = rows.iter().filter(|r| r.group == group).collect();
    if members.len() < 2 {
        return;
    }
    out.push_str("<tr class=\"meanrow\">");
    for (ai, a) in row_axes.iter().enumerate() {
        if a == x {
            let _ = write!(
                out,
                "<td class=\"axis\">mean over {} {}</td>",
                members.len(),
                esc(x)
            );
        } else {
            let _ = write!(out, "<td class=\"axis\">{}</td>", esc(&members[0].key[ai]));
        }
    }
    for (m, sc) in ms.iter().zip(scales) {
        let value = |c: Option<&ScenarioSummary>| {
            c.and_then(|sc| sc.metrics.get(&m.key))
                .filter(|st| st.n > 0 && st.mean.is_finite())
                .map(|st| st.mean)
        };
        let complete: Vec<&&Row> = members
            .iter()
            .filter(|r| r.cells.iter().all(|c| value(*c).is_some()))
            .collect();
        let ncols = members[0].cells.len();
        let means: Vec<Option<f64>> = (0..ncols)
            .map(|c| {
                let vals: Vec<f64> = complete.iter().filter_map(|r| value(r.cells[c])).collect();
                (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
            })
            .collect();
        for v in &means {
            match v {
                Some(v) => {
                    let _ = write!(out, "<td>{}</td>", esc(&crate::fmt::num(sc.apply(*v), 4)));
                }
                None => out.push_str("<td>–</td>"),
            }
        }
        delta_cells(out, m, &means);
        if bound_cols.contains(&m.key.as_str()) {
            // A bound averaged over sizes bounds nothing: the rows say it.
            for _ in 0..ncols {
                out.push_str("<td>–</td><td>–</td>");
            }
        }
    }
    out.push_str("</tr>\n");
}
