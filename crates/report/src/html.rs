//! The HTML document: one section per campaign with its charts, the tables of
//! mean ± CI and change against the baseline, the environment and the exact
//! campaign file.
//!
//! The file is self-contained (inline CSS and SVG, no scripts, no fonts or
//! images from elsewhere) so it opens offline and can be archived with the
//! results; every piece of text from the store is escaped.

use crate::fmt::{esc, mean_ci, num, pct, scale_in, Scale};
use crate::plan::{self, bound_applies, family_title, ChartKind};
use crate::svg;
use crate::wide;
use std::fmt::Write as _;
use wirebench_schema::summary::{Better, CampaignSummary, MetricInfo, ScenarioSummary};

const CSS: &str = r#"
:root{color-scheme:light}
body{font-family:"DejaVu Sans","Liberation Sans",Arial,sans-serif;margin:24px auto;max-width:1180px;padding:0 16px;color:#1a1a1a;background:#ffffff;line-height:1.4}
h1{font-size:26px;margin:0 0 4px}
h2{font-size:21px;margin:36px 0 8px;border-bottom:2px solid #0072B2;padding-bottom:4px}
h3{font-size:17px;margin:26px 0 8px}
h4{font-size:14px;margin:18px 0 6px}
nav ul{margin:4px 0;padding-left:20px}
.meta{color:#444;margin:4px 0}
.meta b{color:#1a1a1a}
figure.chart{margin:18px 0 26px;padding:0}
figure.chart svg{max-width:100%;height:auto;display:block;border:1px solid #e6e6e6}
figcaption{font-size:13px;color:#444;margin-top:6px}
.tablewrap{overflow-x:auto;margin:6px 0 14px}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #d4d4d4;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f2f5f8;text-align:center;white-space:normal;max-width:140px}
tr.meanrow td{border-top:2px solid #888;font-weight:bold}
td.axis{text-align:left;background:#fbfbfb}
tr.baseline td{background:#eef6ee}
td.cvw,tr.baseline td.cvw{background:#fff1cc}
td.above,tr.baseline td.above{background:#ffd6d6;font-weight:bold}
.cvflag{color:#9a5b00;font-weight:bold;font-size:11px;margin-left:4px}
.pos{color:#176b2c}.neg{color:#a02020}
.incomplete{color:#a02020;font-weight:bold}
.notes li{margin:2px 0}
dl.env{display:grid;grid-template-columns:max-content auto;gap:2px 16px;font-size:14px}
dl.env dt{font-weight:bold}
dl.env dd{margin:0;font-family:"DejaVu Sans Mono",monospace;white-space:pre-wrap;word-break:break-all}
pre.campaign-file{background:#f6f6f6;border:1px solid #ddd;padding:10px;font-size:12.5px;overflow-x:auto;white-space:pre}
.legendnote{font-size:12px;color:#555}
a.svg-download{font-size:12px;white-space:nowrap}
@media print{a.svg-download{display:none}}
@media print{body{max-width:none;margin:0}.tablewrap{overflow:visible}figure.chart{break-inside:avoid}th,td{white-space:normal}}
"#;

/// The whole report for one or more campaigns.
pub fn document(summaries: &[CampaignSummary]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let names: Vec<&str> = summaries.iter().map(|s| s.name.as_str()).collect();
    let title = if names.is_empty() {
        "wirebench report".to_string()
    } else {
        format!("wirebench report: {}", names.join(", "))
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        esc(&title),
        CSS,
        esc(&title)
    );
    if summaries.is_empty() {
        out.push_str("<p>No campaign to report.</p>\n");
    }
    if summaries.len() > 1 {
        out.push_str("<nav><ul>\n");
        for (i, s) in summaries.iter().enumerate() {
            let _ = writeln!(out, "<li><a href=\"#c{}\">{}</a></li>", i + 1, esc(&s.name));
        }
        out.push_str("</ul></nav>\n");
    }
    for (i, s) in summaries.iter().enumerate() {
        campaign_section(&mut out, s, i);
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn is_baseline(s: &CampaignSummary, sc: &ScenarioSummary) -> bool {
    let Some(b) = s
        .baseline
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
    else {
        return false;
    };
    if sc.key == b {
        return true;
    }
    // A baseline may be given as a partial key, e.g. "mtu=1500".
    b.split(',').all(|kv| match kv.split_once('=') {
        Some((k, v)) => sc.axes.get(k.trim()).is_some_and(|x| x == v.trim()),
        None => false,
    })
}

fn campaign_section(out: &mut String, s: &CampaignSummary, idx: usize) {
    let _ = writeln!(
        out,
        "<section class=\"campaign\" id=\"c{}\">\n<h2>Campaign {}</h2>",
        idx + 1,
        esc(&s.name)
    );
    let runs_ok: usize = s.scenarios.iter().map(|x| x.runs_ok).sum();
    let runs_planned: usize = s.scenarios.iter().map(|x| x.runs_planned).sum();
    let varying = plan::varying_axes(s);
    let fixed: Vec<String> = plan::all_axes(s)
        .into_iter()
        .filter(|a| !varying.contains(a))
        .filter_map(|a| {
            s.scenarios
                .first()
                .and_then(|sc| sc.axes.get(&a))
                .map(|v| format!("{a}={v}"))
        })
        .collect();
    let _ = writeln!(
        out,
        "<p class=\"meta\"><b>Started</b> {} · <b>scenarios</b> {} · <b>runs</b> {} of {} planned{}</p>",
        esc(&s.started_at),
        s.scenarios.len(),
        runs_ok,
        runs_planned,
        if runs_ok < runs_planned {
            " <span class=\"incomplete\">(incomplete)</span>"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "<p class=\"meta\"><b>Varying axes</b> {} · <b>x axis</b> {} · <b>baseline</b> {}</p>",
        if varying.is_empty() {
            "none".to_string()
        } else {
            esc(&varying.join(", "))
        },
        esc(s.x_axis.as_deref().unwrap_or("none")),
        esc(s.baseline.as_deref().unwrap_or("none"))
    );
    if !fixed.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"meta\"><b>Fixed</b> {}</p>",
            esc(&fixed.join(", "))
        );
    }
    if !s.notes.is_empty() {
        out.push_str("<h3>Notes</h3>\n<ul class=\"notes\">\n");
        for n in &s.notes {
            let _ = writeln!(out, "<li>{}</li>", esc(n));
        }
        out.push_str("</ul>\n");
    }

    if let Some(r) = &s.rfc2544 {
        // Search trials at different rates: the RFC tables replace the
        // per-scenario means.
        crate::rfc2544::section(out, r, idx);
        section_tail(out, s);
        return;
    }

    let parts = plan::parts(s);
    let several = parts.len() > 1;
    for (pi, part) in parts.iter().enumerate() {
        if let Some(t) = &part.title {
            let _ = writeln!(out, "<h3 class=\"part\">{}</h3>", esc(t));
        }
        part_body(out, &part.summary, idx * 256 + pi * 16, several);
    }
    crate::nodes::nodes_table(out, s);
    crate::nodes::hops_table(out, s);
    crate::timeseries::series_section(out, s);
    crate::dist::dist_section(out, s);

    section_tail(out, s);
}

/// The charts and tables of one part of a campaign (the whole campaign when
/// it has one part); `nested` puts their headings one level down.
fn part_body(out: &mut String, s: &CampaignSummary, fig_base: usize, nested: bool) {
    let h = if nested { "h4" } else { "h3" };
    let charts = plan::charts(s);
    if !charts.is_empty() {
        let _ = writeln!(out, "<{h}>Charts</{h}>");
    }
    let lay = plan::layout(s);
    let series_note = if lay.series_axes.is_empty() {
        format!(
            "one series: {}",
            lay.series_labels.first().map(String::as_str).unwrap_or("")
        )
    } else {
        format!(
            "one series per combination of {}",
            lay.series_axes.join(", ")
        )
    };
    for (ci, chart) in charts.iter().enumerate() {
        let fig = svg::render(chart, fig_base + ci);
        let n_series = chart
            .series_labels
            .iter()
            .enumerate()
            .filter(|(i, _)| chart.panels.iter().any(|p| !p.series[*i].points.is_empty()))
            .count();
        let _ = write!(
            out,
            "<figure class=\"chart\" data-family=\"{}\" data-kind=\"{}\" data-series-count=\"{}\" data-x=\"{}\">\n{}\n<figcaption>{} ({}). {}</figcaption>\n</figure>\n",
            plan::family_key(chart.family),
            if chart.kind == ChartKind::Line { "line" } else { "bars" },
            n_series,
            esc(chart.x_axis.as_deref().unwrap_or("")),
            fig.svg,
            fig.caption,
            esc(&series_note),
            download_link(&fig.svg, &format!("{}-{}-{}", s.name, fig_base + ci, plan::family_key(chart.family)))
        );
    }

    let _ = writeln!(out, "<{h}>Tables</{h}>");
    let varying = plan::varying_axes(s);
    let columns = s
        .report
        .columns
        .as_deref()
        .filter(|c| varying.iter().any(|v| v == c));
    let _ = writeln!(
        out,
        "<p class=\"legendnote\">Mean ± half-width of the 95 % confidence interval (Student t) over the repetitions; the loss ratio is lost ÷ sent over every packet of the repetitions with its Wilson 95 % interval in brackets. <span class=\"cvflag\">cv</span> marks a coefficient of variation above 10 %: the runs disagree and the mean deserves doubt.{}{}</p>",
        match columns {
            Some(c) => format!(
                " The values of {} stand side by side; Δ: change of the mean against the first of them (green is better, red worse); a mean row closes each sweep over {}.",
                esc(c),
                esc(lay.x_axis.as_deref().unwrap_or("the rows"))
            ),
            None if s.baseline.is_some() => " Δ: change of the mean against the baseline scenario (green rows); green Δ is better, red worse.".to_string(),
            None => String::new(),
        },
        if s.report.units.is_ditg() {
            " Throughput in D-ITG's units, as the studies printed them: Kbps is ITGDec's kbit/s, Mbps is that divided by 1024."
        } else {
            ""
        }
    );
    for (family, ms) in plan::metrics_by_family(s) {
        let _ = writeln!(out, "<h4>{}</h4>", esc(family_title(family)));
        match columns {
            Some(c) => wide::table(out, s, &varying, c, lay.x_axis.as_deref(), &ms),
            None => {
                for chunk in fit_columns(s, &varying, &ms) {
                    family_table(out, s, &varying, &chunk, &ms);
                }
            }
        }
    }
}

/// A link that saves the chart as its own SVG file (a `data:` URL: the
/// report stays one file without scripts).
pub(crate) fn download_link(svg: &str, name: &str) -> String {
    format!(
        "<a class=\"svg-download\" download=\"{}.svg\" href=\"data:image/svg+xml;base64,{}\">Download SVG</a>",
        esc(&crate::fmt::file_stem(name)),
        crate::fmt::base64(crate::fmt::standalone_svg(svg).as_bytes())
    )
}

/// Width the page gives a table, px (the body's 1180 px less its padding).
pub(crate) const PAGE_W: f64 = 1140.0;
/// Mean width of a character of the table font, px.
const TABLE_CHAR_W: f64 = 7.2;

/// Estimated width of a table column holding `chars` characters.
pub(crate) fn col_w(chars: usize) -> f64 {
    16.0 + TABLE_CHAR_W * chars as f64
}

/// Estimated width of a metric's column: its header wraps (at most 140
/// px), its cells do not, and "95.54 ± 0.12" with a cv flag takes about 20
/// characters, which is the wider of the two.
pub(crate) fn metric_w() -> f64 {
    col_w(20)
}

/// Estimated width of the axis columns of a table.
pub(crate) fn axes_w(s: &CampaignSummary, axes: &[String]) -> f64 {
    axes.iter()
        .map(|a| {
            let longest = s
                .scenarios
                .iter()
                .map(|sc| sc.axes.get(a).map(|v| v.chars().count()).unwrap_or(0))
                .max()
                .unwrap_or(0);
            col_w(longest.max(a.chars().count()))
        })
        .sum()
}

/// Splits a family's metrics into tables narrow enough for the page (no
/// column behind a scroll bar): each table repeats the axis columns.
fn fit_columns<'a>(
    s: &CampaignSummary,
    varying: &[String],
    ms: &[&'a MetricInfo],
) -> Vec<Vec<&'a MetricInfo>> {
    let fixed = axes_w(s, varying).max(col_w(8)) + col_w(5);
    let delta = if s.baseline.is_some() { col_w(7) } else { 0.0 };
    let bound_w = col_w(12) + col_w(10);
    let mut out: Vec<Vec<&MetricInfo>> = Vec::new();
    let mut cur: Vec<&MetricInfo> = Vec::new();
    let mut w = fixed;
    for m in ms {
        let mut add = metric_w() + delta;
        if bound_applies(m, ms) && s.scenarios.iter().any(|sc| sc.upper_bound_bps.is_some()) {
            add += bound_w;
        }
        if !cur.is_empty() && w + add > PAGE_W {
            out.push(std::mem::take(&mut cur));
            w = fixed;
        }
        w += add;
        cur.push(m);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The environment, the campaign file and the end of the section.
fn section_tail(out: &mut String, s: &CampaignSummary) {
    environment(out, s);
    let _ = write!(
        out,
        "<h3>Campaign file</h3>\n<pre class=\"campaign-file\">{}</pre>\n</section>\n",
        esc(&s.campaign_file)
    );
}

/// Whether a rise of this metric is an improvement, so Δ can be coloured
/// green for better and red for worse; None when it is neither. The
/// direction is the metric table's (`wirebench_schema::metrics`), carried
/// in the summary.
pub(crate) fn higher_is_better(m: &MetricInfo) -> Option<bool> {
    match m.better {
        Better::Higher => Some(true),
        Better::Lower => Some(false),
        Better::Neither => None,
    }
}

/// One display unit per stored unit over the whole family (`family`) and
/// every scenario, so payload and Ethernet throughput read in the same
/// unit, in every table the family is split into.
pub(crate) fn column_scales(
    s: &CampaignSummary,
    ms: &[&MetricInfo],
    family: &[&MetricInfo],
) -> Vec<Scale> {
    ms.iter()
        .map(|m| {
            let max = family
                .iter()
                .filter(|f| f.unit == m.unit)
                .flat_map(|f| s.scenarios.iter().filter_map(|sc| sc.metrics.get(&f.key)))
                .filter(|st| st.mean.is_finite())
                .map(|st| st.mean.abs())
                .fold(0.0, f64::max);
            scale_in(&m.unit, max, s.report.units)
        })
        .collect()
}

/// A cell's text: mean ± CI, or for the loss ratio the share of every
/// packet of the repetitions with its Wilson interval in brackets (a
/// Student-t interval over two runs reads "20 ± 257 %").
pub(crate) fn cell_text(
    m: &MetricInfo,
    scn: &ScenarioSummary,
    st: &wirebench_schema::summary::MetricStats,
    sc: &Scale,
) -> String {
    if m.key == plan::PROPORTION {
        if let Some((p, lo, hi)) = plan::loss_proportion(scn) {
            let (p, lo, hi) = (sc.apply(p), sc.apply(lo), sc.apply(hi));
            let d = crate::fmt::decimals_for(p.max(hi), 3).min(6);
            return format!(
                "{} [{:.*}–{:.*}]",
                crate::fmt::no_negative_zero(format!("{p:.d$}")),
                d,
                lo,
                d,
                hi
            );
        }
    }
    match m.unit.as_str() {
        // Ratios and shares of all cores live in 0..=1 whatever a
        // Student-t interval over few runs says.
        "ratio" | "share of all its cores" => crate::fmt::mean_ci_in(
            sc.apply(st.mean),
            sc.apply(st.ci95),
            sc.apply(0.0),
            sc.apply(1.0),
        ),
        _ => mean_ci(sc.apply(st.mean), sc.apply(st.ci95)),
    }
}

/// One table of a family's metrics `ms` (all of `family`, or the part of
/// them that fits the page).
fn family_table(
    out: &mut String,
    s: &CampaignSummary,
    varying: &[String],
    ms: &[&MetricInfo],
    family: &[&MetricInfo],
) {
    let has_baseline = s.baseline.is_some();
    let scales = column_scales(s, ms, family);
    let bound_metric = ms.iter().position(|m| bound_applies(m, family));
    let any_bound =
        bound_metric.is_some() && s.scenarios.iter().any(|sc| sc.upper_bound_bps.is_some());
    let bound_scale = bound_metric.map(|i| scales[i].clone());

    out.push_str("<div class=\"tablewrap\"><table>\n<thead><tr>");
    for a in varying {
        let _ = write!(out, "<th>{}</th>", esc(a));
    }
    if varying.is_empty() {
        out.push_str("<th>scenario</th>");
    }
    out.push_str("<th>runs</th>");
    for (m, sc) in ms.iter().zip(&scales) {
        let unit = if sc.unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", sc.unit)
        };
        let _ = write!(out, "<th>{}{}</th>", esc(&m.label), esc(&unit));
        if has_baseline {
            out.push_str("<th>Δ</th>");
        }
    }
    if any_bound {
        let unit = bound_scale
            .as_ref()
            .map(|s| s.unit.clone())
            .unwrap_or_default();
        let _ = write!(
            out,
            "<th>Upper bound ({})</th><th>Measured / bound</th>",
            esc(&unit)
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for scn in &s.scenarios {
        let base = is_baseline(s, scn);
        let _ = write!(out, "<tr{}>", if base { " class=\"baseline\"" } else { "" });
        for a in varying {
            let _ = write!(
                out,
                "<td class=\"axis\">{}</td>",
                esc(scn.axes.get(a).map(String::as_str).unwrap_or(""))
            );
        }
        if varying.is_empty() {
            let _ = write!(out, "<td class=\"axis\">{}</td>", esc(&scn.key));
        }
        // Runs whose own bound check fired mark the row in every table,
        // whatever the family: the scenario's numbers are suspect.
        if scn.runs_above_bound > 0 {
            let _ = write!(
                out,
                "<td class=\"above\" title=\"{n} run(s) carried more than their link by more than their uncertainty (total.above_bound): a measurement or emulation error\">{}/{} ({n} above bound)</td>",
                scn.runs_ok,
                scn.runs_planned,
                n = scn.runs_above_bound
            );
        } else {
            let _ = write!(
                out,
                "<td{}>{}/{}</td>",
                if scn.runs_ok < scn.runs_planned {
                    " class=\"incomplete\""
                } else {
                    ""
                },
                scn.runs_ok,
                scn.runs_planned
            );
        }
        for (m, sc) in ms.iter().zip(&scales) {
            match scn.metrics.get(&m.key) {
                Some(st) if st.n > 0 => {
                    let cell = cell_text(m, scn, st, sc);
                    if st.cv_warning {
                        let _ = write!(
                            out,
                            "<td class=\"cvw\" title=\"coefficient of variation {} % &gt; 10 %\">{}<span class=\"cvflag\">cv {} %</span></td>",
                            num(st.cv * 100.0, 2),
                            esc(&cell),
                            num(st.cv * 100.0, 2)
                        );
                    } else {
                        let _ = write!(out, "<td>{}</td>", esc(&cell));
                    }
                    if has_baseline {
                        match st.pct_vs_baseline {
                            Some(p) if p.is_finite() => {
                                let cls = match (higher_is_better(m), p) {
                                    (Some(up), p) if p.abs() >= 0.05 => {
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
                        }
                    }
                }
                _ => {
                    out.push_str("<td>–</td>");
                    if has_baseline {
                        out.push_str("<td>–</td>");
                    }
                }
            }
        }
        if any_bound {
            let bsc = bound_scale.as_ref();
            match (scn.upper_bound_bps, bsc) {
                (Some(b), Some(bsc)) if b > 0.0 => {
                    let st = bound_metric
                        .and_then(|i| scn.metrics.get(&ms[i].key))
                        .filter(|st| st.n > 0);
                    let _ = write!(out, "<td>{}</td>", num(bsc.apply(b), 4));
                    match st {
                        // Above the physical limit by more than the
                        // uncertainty: an error, said so in the cell.
                        Some(st) if wirebench_schema::summary::above_bound(st.mean, st.ci95, b) => {
                            let _ = write!(
                                out,
                                "<td class=\"above\" title=\"above the physical bound by more than the 95 % CI: a measurement or emulation error\">{:.1} % (above bound)</td>",
                                st.mean / b * 100.0
                            );
                        }
                        Some(st) if scn.runs_above_bound > 0 => {
                            let _ = write!(
                                out,
                                "<td class=\"above\" title=\"{n} run(s) above their own bound (total.above_bound)\">{:.1} % ({n} runs above bound)</td>",
                                st.mean / b * 100.0,
                                n = scn.runs_above_bound
                            );
                        }
                        Some(st) => {
                            let _ = write!(out, "<td>{:.1} %</td>", st.mean / b * 100.0);
                        }
                        None => out.push_str("<td>–</td>"),
                    }
                }
                _ => out.push_str("<td>–</td><td>–</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

fn environment(out: &mut String, s: &CampaignSummary) {
    let e = &s.environment;
    out.push_str("<h3>Environment</h3>\n<dl class=\"env\">\n");
    let mut row = |k: &str, v: &str| {
        if !v.is_empty() {
            let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
        }
    };
    row("kernel", &e.kernel);
    row("CPU", &e.cpu_model);
    row(
        "CPUs",
        &if e.cpus > 0 {
            e.cpus.to_string()
        } else {
            String::new()
        },
    );
    row("tool version", &e.tool_version);
    row("topology", &e.topology);
    for (k, v) in &e.extra {
        row(k, v);
    }
    out.push_str("</dl>\n");
}
