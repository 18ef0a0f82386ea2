//! The RFC 2544 part of a campaign report: for a campaign with an
//! `[rfc2544]` block, the RFC §26-style tables (throughput per frame size in
//! frames/s, % of the line rate and bit/s at every layer; latency at that
//! rate; frame-loss rate per offered load; back-to-back) and two charts —
//! throughput against frame size beside each size's line rate, and the
//! frame-loss rate against offered load. Its own module so that the matrix
//! report (html.rs) stays as it is; the tables' cells come from
//! [`crate::rfc_tables::tables`], the same the terminal prints.

use crate::fmt::esc;
use crate::plan::{Chart, ChartKind, Panel, Point, Series};
use crate::rfc_tables::{elapsed_line, size_label, tables};
use crate::svg;
use std::fmt::Write as _;
use wirebench_schema::rfc2544::{Rfc2544Summary, SizeResult};
use wirebench_schema::summary::{Better, Combine, MetricFamily, MetricInfo};

fn metric(key: &str, family: MetricFamily, label: &str, unit: &str, better: Better) -> MetricInfo {
    MetricInfo {
        key: key.into(),
        family,
        label: label.into(),
        unit: unit.into(),
        combine: Combine::default(),
        better,
    }
}

fn series_label(r: &SizeResult) -> String {
    format!("IPv{} {}", r.ip, size_label(r))
}

fn point(x: f64, y: f64, bound: Option<f64>) -> Point {
    Point {
        x,
        mean: y,
        ci95: 0.0,
        cv_warning: false,
        bound,
        interval: None,
    }
}

/// Writes the RFC 2544 results of one campaign (`idx`: the campaign's
/// place in the report, for unique chart ids).
pub fn section(out: &mut String, r: &Rfc2544Summary, idx: usize) {
    out.push_str("<h3>RFC 2544 results</h3>\n");
    let link = r
        .link_bps
        .map(|b| format!("{} Mbit/s", b / 1e6))
        .unwrap_or_else(|| {
            "not known (the first trial was unpaced: shares are of the tester's maximum)".into()
        });
    let _ = writeln!(
        out,
        "<p class=\"meta\"><b>Target</b> {} · <b>link rate</b> {} · <b>MTU</b> {} · <b>trials</b> {} s{}</p>",
        esc(&r.target),
        esc(&link),
        r.mtu,
        r.trial_s,
        elapsed_line(r)
            .map(|l| format!(" · {}", esc(&l)))
            .unwrap_or_default()
    );
    if r.sizes.is_empty() {
        out.push_str("<p class=\"incomplete\">No frame size has a complete search stored.</p>\n");
    }
    for (ti, t) in tables(r).into_iter().enumerate() {
        let _ = writeln!(out, "<h4>{}</h4>", esc(&t.title));
        let _ = write!(
            out,
            "<div class=\"tablewrap\"><table class=\"rfc2544\" data-table=\"{}\">\n<thead><tr>",
            t.id
        );
        for h in &t.header {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for row in &t.rows {
            out.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                let class = if i < t.lead || (t.id == "throughput" && i + 1 == row.len()) {
                    " class=\"axis\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{class}>{}</td>", esc(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
        if t.id == "throughput" {
            throughput_chart(out, r, idx * 64 + 40 + ti);
        }
        if t.id == "frame_loss" {
            loss_chart(out, r, idx * 64 + 40 + ti);
        }
    }
}

fn figure(out: &mut String, chart: &Chart, id: usize, kind: &str, caption: &str) {
    let n = chart
        .panels
        .iter()
        .flat_map(|p| p.series.iter())
        .filter(|s| !s.points.is_empty())
        .count();
    if n == 0 {
        return;
    }
    let fig = svg::render(chart, id);
    let _ = write!(
        out,
        "<figure class=\"chart\" data-family=\"rfc2544\" data-kind=\"{kind}\" data-series-count=\"{n}\">\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
        fig.svg,
        esc(caption)
    );
}

/// Throughput (frames/s) against frame size, one line per IP version, the
/// line rate of each size dashed.
fn throughput_chart(out: &mut String, r: &Rfc2544Summary, id: usize) {
    let m = metric(
        "rfc2544_throughput_fps",
        MetricFamily::Throughput,
        "Throughput (frames/s)",
        "",
        Better::Higher,
    );
    let mut labels: Vec<String> = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    for z in &r.sizes {
        let Some(t) = &z.throughput else { continue };
        // An IMIX has no one frame size: it is in the tables only.
        let Some(single) = z.spec.single() else {
            continue;
        };
        let label = format!("IPv{}", z.ip);
        let i = match labels.iter().position(|l| *l == label) {
            Some(i) => i,
            None => {
                labels.push(label.clone());
                series.push(Series {
                    label,
                    points: Vec::new(),
                });
                labels.len() - 1
            }
        };
        series[i]
            .points
            .push(point(f64::from(single.nominal), t.fps, z.line_fps));
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    let draws_bound = r.sizes.iter().any(|z| z.line_fps.is_some());
    let chart = Chart {
        family: MetricFamily::Throughput,
        kind: ChartKind::Line,
        x_axis: Some("frame size".into()),
        categories: Vec::new(),
        series_labels: labels,
        panels: vec![Panel { metric: &m, series }],
        draws_bound,
        units: Default::default(),
        // Throughput from 0: the line rates and the loss both start there.
        zoom: false,
        cpus: 0,
    };
    let caption = if draws_bound {
        "Throughput (RFC 2544 §26.1) against frame size (nominal; 64 B is sent as the smallest frame that carries the probe header; an IMIX is in the table only). Dashed: the line rate of each size (RFC 2544 Appendix A's maximum frame rate)."
    } else {
        "Throughput (RFC 2544 §26.1) against frame size (nominal; 64 B is sent as the smallest frame that carries the probe header; an IMIX is in the table only). No link rate is known, so no line rate is drawn."
    };
    figure(out, &chart, id, "throughput", caption);
}

/// Frame-loss rate against offered load (RFC 2544 §26.3), one line per IP
/// version and frame size.
fn loss_chart(out: &mut String, r: &Rfc2544Summary, id: usize) {
    let m = metric(
        "rfc2544_frame_loss",
        MetricFamily::Loss,
        "Frame loss",
        "ratio",
        Better::Lower,
    );
    let series: Vec<Series> = r
        .sizes
        .iter()
        .filter(|z| !z.frame_loss.is_empty())
        .map(|z| {
            let mut points: Vec<Point> = z
                .frame_loss
                .iter()
                .map(|p| point(f64::from(p.percent), p.loss_percent / 100.0, None))
                .collect();
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            Series {
                label: series_label(z),
                points,
            }
        })
        .collect();
    let of = if r.link_bps.is_some() {
        "line rate"
    } else {
        "tester's maximum"
    };
    let chart = Chart {
        family: MetricFamily::Loss,
        kind: ChartKind::Line,
        x_axis: Some(format!("offered load (% of the {of})")),
        categories: Vec::new(),
        series_labels: series.iter().map(|s| s.label.clone()).collect(),
        panels: vec![Panel { metric: &m, series }],
        draws_bound: false,
        units: Default::default(),
        zoom: false,
        cpus: 0,
    };
    let caption = format!(
        "Frame-loss rate (RFC 2544 §26.3): (offered − received) / offered at each offered load, % of the {of}, from 100 % down until two loads lose nothing; one trial per point."
    );
    figure(out, &chart, id, "frame_loss", &caption);
}
