//! Delay and jitter distributions (flent's CDF plots, ITGPlot's delay
//! histograms): per campaign one CDF chart of the one-way delay and one of
//! |IPDV| with a line per scenario, a delay histogram per scenario, and a
//! table of their percentiles — all from the scenario's histograms merged
//! over flows and repetitions. Its own module so the main document only
//! calls it.

use crate::fmt::{esc, num, scale_for};
use std::fmt::Write as _;
use wirebench_schema::dist::Histogram;
use wirebench_schema::summary::{CampaignSummary, ScenarioSummary};

const W: f64 = 460.0;
const H: f64 = 240.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 30.0;
/// Small per-scenario histograms.
const HW: f64 = 300.0;
const HH: f64 = 150.0;
/// Histogram bars between the smallest value and the 99.9th percentile.
const BINS: usize = 40;
/// The colour of line `i` (the charts' colour-blind-safe palette) and,
/// once the palette is used up, a dash pattern, so no two lines look alike.
fn line_style(i: usize) -> (&'static str, &'static str) {
    const DASHES: [&str; 3] = ["", "6 3", "2 2"];
    let n = crate::svg::PALETTE_LEN;
    (crate::svg::colour(i), DASHES[(i / n) % DASHES.len()])
}

/// The x range of a set of dists: smallest value to the largest p99.9
/// (the far tail would squeeze every curve into one corner).
fn x_range(ds: &[&Histogram]) -> Option<(f64, f64)> {
    let lo = ds.iter().filter_map(|d| d.quantile(0.0)).reduce(f64::min)?;
    let hi = ds
        .iter()
        .filter_map(|d| d.quantile(0.999))
        .reduce(f64::max)?;
    Some(if hi > lo { (lo, hi) } else { (lo, lo + 1e-9) })
}

fn axes(s: &mut String, w: f64, h: f64, lo: f64, hi: f64, ytop: &str) {
    let scale = scale_for("s", hi.abs().max(lo.abs()));
    let (x0, x1, y0) = (LEFT, w - RIGHT, h - BOTTOM);
    let _ = write!(
        s,
        "<path d=\"M{x0} {TOP}V{y0}H{x1}\" stroke=\"#555\" fill=\"none\" stroke-width=\"0.8\"/>\
<text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"end\">{ytop}</text>\
<text x=\"{}\" y=\"{y0}\" font-size=\"9\" text-anchor=\"end\">0</text>\
<text x=\"{x0}\" y=\"{}\" font-size=\"9\">{} {}</text>\
<text x=\"{x1}\" y=\"{}\" font-size=\"9\" text-anchor=\"end\">{} {}</text>",
        x0 - 3.0,
        TOP + 8.0,
        x0 - 3.0,
        y0 + 12.0,
        num(scale.apply(lo), 3),
        esc(&scale.unit),
        y0 + 12.0,
        num(scale.apply(hi), 3),
        esc(&scale.unit),
    );
}

/// One CDF chart: a line per (label, dist). The x axis is logarithmic when
/// the values span a decade or more (delays from an idle and a loaded path
/// span five), with a tick per decade.
fn cdf_chart(title: &str, lines: &[(&str, &Histogram)]) -> String {
    let ds: Vec<&Histogram> = lines.iter().map(|l| l.1).collect();
    let Some((lo, hi)) = x_range(&ds) else {
        return String::new();
    };
    let log = lo > 0.0 && hi / lo >= 10.0;
    let frac = |v: f64| {
        if log {
            (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10())
        } else {
            (v - lo) / (hi - lo)
        }
    };
    let x = |v: f64| LEFT + frac(v).clamp(0.0, 1.0) * (W - LEFT - RIGHT);
    let y = |f: f64| TOP + (1.0 - f.clamp(0.0, 1.0)) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"cdf\" data-scale=\"{}\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{t}\"><text x=\"{LEFT}\" y=\"13\" font-size=\"11\">{t}: share of packets ≤ x{}</text>",
        if log { "log" } else { "linear" },
        if log { " (log scale)" } else { "" },
        t = esc(title)
    );
    axes(&mut s, W, H, lo, hi, "1");
    if log {
        let scale = scale_for("s", hi);
        let y0 = H - BOTTOM;
        let mut e = lo.log10().ceil() as i32;
        while f64::from(e) <= hi.log10() {
            let v = 10f64.powi(e);
            let xx = x(v);
            // Decades too close to the end labels would overprint them.
            if xx - LEFT > 40.0 && W - RIGHT - xx > 40.0 {
                let _ = write!(
                    s,
                    "<path class=\"decade\" d=\"M{xx:.1} {TOP}V{y0}\" stroke=\"#e3e3e3\"/><text x=\"{xx:.1}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{} {}</text>",
                    y0 + 12.0,
                    num(scale.apply(v), 3),
                    esc(&scale.unit)
                );
            }
            e += 1;
        }
    }
    for (i, (label, d)) in lines.iter().enumerate() {
        // A step per bucket: the share rises at the bucket's value.
        let mut pts: Vec<String> = Vec::new();
        let mut prev = 0.0;
        for (v, f) in d.cdf() {
            if v > hi {
                pts.push(format!("{:.1},{:.1}", x(hi), y(prev)));
                break;
            }
            pts.push(format!("{:.1},{:.1}", x(v), y(prev)));
            pts.push(format!("{:.1},{:.1}", x(v), y(f)));
            prev = f;
        }
        let (colour, dash) = line_style(i);
        let _ = write!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"{}><title>{}</title></polyline>",
            pts.join(" "),
            if dash.is_empty() {
                String::new()
            } else {
                format!(" stroke-dasharray=\"{dash}\"")
            },
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// Shares of the values per bar of `BINS` equal bars from the smallest
/// value to the p99.9 (values above it are left out: the caption says so).
fn bins(d: &Histogram) -> Option<(f64, f64, Vec<f64>)> {
    let (lo, hi) = x_range(&[d])?;
    let n = d.count() as f64;
    let mut out = vec![0.0; BINS];
    for &(v, c) in &d.buckets_ns {
        let v = v as f64 / 1e9;
        if v > hi {
            break;
        }
        let k = (((v - lo) / (hi - lo)) * BINS as f64) as usize;
        out[k.min(BINS - 1)] += c as f64 / n;
    }
    Some((lo, hi, out))
}

fn histogram(title: &str, d: &Histogram, colour: &str) -> String {
    let Some((lo, hi, shares)) = bins(d) else {
        return String::new();
    };
    let top = shares.iter().copied().fold(0.0f64, f64::max).max(1e-12);
    let bw = (HW - LEFT - RIGHT) / BINS as f64;
    let y = |f: f64| TOP + (1.0 - f / top) * (HH - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"hist\" viewBox=\"0 0 {HW} {HH}\" width=\"{HW}\" height=\"{HH}\" role=\"img\" aria-label=\"{t}\"><text x=\"{LEFT}\" y=\"13\" font-size=\"11\">{t}</text>",
        t = esc(title)
    );
    axes(
        &mut s,
        HW,
        HH,
        lo,
        hi,
        &format!("{} %", num(top * 100.0, 3)),
    );
    for (k, f) in shares.iter().enumerate().filter(|(_, f)| **f > 0.0) {
        let _ = write!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>",
            LEFT + k as f64 * bw,
            y(*f),
            (bw - 0.6).max(0.5),
            HH - BOTTOM - y(*f)
        );
    }
    s.push_str("</svg>");
    s
}

fn pct_cells(out: &mut String, d: Option<&Histogram>) {
    for q in [0.5, 0.9, 0.99, 0.999] {
        match d.and_then(|d| d.quantile(q)) {
            Some(v) => {
                let sc = scale_for("s", v.abs());
                let _ = write!(out, "<td>{} {}</td>", num(sc.apply(v), 3), esc(&sc.unit));
            }
            None => out.push_str("<td>–</td>"),
        }
    }
}

/// Writes the section, or nothing when no scenario has a distribution.
pub fn dist_section(out: &mut String, s: &CampaignSummary) {
    let with: Vec<(&ScenarioSummary, &wirebench_schema::dist::ScenarioDist)> = s
        .scenarios
        .iter()
        .filter_map(|sc| sc.dist.as_ref().map(|d| (sc, d)))
        .collect();
    if with.is_empty() {
        return;
    }
    out.push_str("<h3>Distributions</h3>\n");
    out.push_str("<p class=\"legendnote\">One-way delay and |IPDV| (|D<sub>i</sub> − D<sub>i−1</sub>| of consecutive packets) of every packet of every flow and repetition of a scenario, from the receivers' histograms (buckets at most 0.8 % wide, coarser where a flow's spread needed it). The x axes end at the largest 99.9th percentile; histograms leave out the values above their own.</p>\n");
    for (title, pick) in [
        (
            "One-way delay",
            (|d: &wirebench_schema::dist::ScenarioDist| d.delay.as_ref())
                as fn(&wirebench_schema::dist::ScenarioDist) -> Option<&Histogram>,
        ),
        ("|IPDV|", |d| d.ipdv.as_ref()),
    ] {
        let lines: Vec<(&str, &Histogram)> = with
            .iter()
            .filter_map(|(sc, d)| pick(d).map(|x| (sc.key.as_str(), x)))
            .collect();
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<figure class=\"chart\" data-kind=\"cdf\">\n{}\n<figcaption>{}: CDF per scenario.</figcaption>\n</figure>",
            cdf_chart(title, &lines),
            esc(title)
        );
    }
    out.push_str("<ul class=\"legend\">\n");
    for (i, (sc, _)) in with.iter().enumerate() {
        let _ = writeln!(
            out,
            "<li><svg width=\"22\" height=\"8\" style=\"vertical-align:middle\"><path d=\"M1 4H21\" stroke=\"{}\" stroke-width=\"2.5\"{}/></svg> {}</li>",
            line_style(i).0,
            if line_style(i).1.is_empty() {
                String::new()
            } else {
                format!(" stroke-dasharray=\"{}\"", line_style(i).1)
            },
            esc(&sc.key)
        );
    }
    out.push_str("</ul>\n<div class=\"series-row\">\n");
    for (i, (sc, d)) in with.iter().enumerate() {
        if let Some(dd) = &d.delay {
            out.push_str(&histogram(
                &format!("Delay, {}", sc.key),
                dd,
                line_style(i).0,
            ));
            out.push('\n');
        }
    }
    out.push_str("</div>\n<table class=\"percentiles\">\n<tr><th>Scenario</th><th>runs</th><th>delay p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>|IPDV| p50</th><th>p90</th><th>p99</th><th>p99.9</th></tr>\n");
    for (sc, d) in &with {
        let _ = write!(out, "<tr><td>{}</td><td>{}</td>", esc(&sc.key), d.runs);
        pct_cells(out, d.delay.as_ref());
        pct_cells(out, d.ipdv.as_ref());
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_steps_and_bins() {
        let d = Histogram::from_counts(7, (1..=100).map(|i| (i * 1000, 1)));
        let svg = cdf_chart("Delay", &[("a", &d), ("b", &d)]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        let (lo, hi, b) = bins(&d).unwrap();
        // Bucket tops: 1 000 ns -> 1 003, 100 000 ns -> 100 351.
        assert_eq!((lo, hi), (1003e-9, 100_351e-9));
        let total: f64 = b.iter().sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!(histogram("h", &d, "#000").matches("<rect").count() > 30);
        assert!(cdf_chart("x", &[]).is_empty());
        // 1 µs to 100 µs: two decades, so a log axis with a tick per decade.
        assert!(svg.contains("data-scale=\"log\"") && svg.contains("class=\"decade\""));
        let narrow = Histogram::from_counts(7, (100..=200).map(|i| (i * 1000, 1)));
        assert!(cdf_chart("x", &[("a", &narrow)]).contains("data-scale=\"linear\""));
        // Every line looks different, past the palette too.
        let styles: std::collections::BTreeSet<_> = (0..30).map(line_style).collect();
        assert_eq!(styles.len(), 30);
    }
}
