//! Inline SVG charts: line charts over a numeric x axis and grouped bars over
//! categories, each with 95 % CI error bars and, on payload throughput, the
//! Ethernet upper bound (dashed).
//!
//! Hand-written SVG keeps the report free of scripts and external files and
//! makes the output byte-for-byte deterministic. The look follows paper
//! figures: white background, light grid, colour-blind-safe colours (Okabe &
//! Ito) paired with distinct marker shapes so series survive greyscale print.

use crate::fmt::{axis_title, decimals_for, esc, num, px, scale_in, Scale};
use crate::plan::{family_key, family_title, Chart, ChartKind, Panel};
use std::fmt::Write as _;

const PALETTE: [&str; 11] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B",
    "#7F7F7F", "#BCBD22", "#9467BD",
];
/// Distinct colours before they repeat.
pub const PALETTE_LEN: usize = PALETTE.len();
const MARKERS: usize = 6;

const FIG_W: f64 = 960.0;
const SINGLE_H: f64 = 380.0;
const MULTI_W: f64 = 480.0;
const MULTI_H: f64 = 300.0;
const LEGEND_ROW: f64 = 20.0;
/// Rough advance of one character at 12 px in DejaVu/Liberation Sans, used to
/// keep labels from colliding (no font metrics are available offline).
const CHAR_W: f64 = 7.0;

pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Draws one marker shape centred at (x, y).
fn marker(out: &mut String, i: usize, x: f64, y: f64, fill: &str, stroke: &str) {
    let r = 4.0;
    let (x, y) = (x, y);
    let attrs = format!(r#"fill="{fill}" stroke="{stroke}" stroke-width="1.5""#);
    match i % MARKERS {
        0 => {
            let _ = write!(
                out,
                r#"<circle cx="{}" cy="{}" r="{}" {attrs}/>"#,
                px(x),
                px(y),
                px(r)
            );
        }
        1 => {
            let _ = write!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="{}" {attrs}/>"#,
                px(x - r),
                px(y - r),
                px(2.0 * r),
                px(2.0 * r)
            );
        }
        2 => poly(
            out,
            &[
                (x, y - r * 1.2),
                (x + r * 1.1, y + r * 0.8),
                (x - r * 1.1, y + r * 0.8),
            ],
            &attrs,
        ),
        3 => poly(
            out,
            &[
                (x, y - r * 1.3),
                (x + r * 1.1, y),
                (x, y + r * 1.3),
                (x - r * 1.1, y),
            ],
            &attrs,
        ),
        4 => poly(
            out,
            &[
                (x, y + r * 1.2),
                (x + r * 1.1, y - r * 0.8),
                (x - r * 1.1, y - r * 0.8),
            ],
            &attrs,
        ),
        _ => {
            // An X drawn as a thick path so that it reads at small size.
            let _ = write!(
                out,
                r#"<path d="M{} {}L{} {}M{} {}L{} {}" stroke="{stroke}" stroke-width="2.2" fill="none"/>"#,
                px(x - r),
                px(y - r),
                px(x + r),
                px(y + r),
                px(x - r),
                px(y + r),
                px(x + r),
                px(y - r)
            );
        }
    }
}

fn poly(out: &mut String, pts: &[(f64, f64)], attrs: &str) {
    let p: Vec<String> = pts
        .iter()
        .map(|(x, y)| format!("{},{}", px(*x), px(*y)))
        .collect();
    let _ = write!(out, r#"<polygon points="{}" {attrs}/>"#, p.join(" "));
}

/// Step of a "nice" axis (1, 2, 2.5, 5 × 10^k) giving about `target` ticks.
fn nice_step(range: f64, target: f64) -> f64 {
    let raw = (range / target).abs();
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let n = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * mag
}

/// Decimals needed to print multiples of `step` exactly.
fn step_decimals(step: f64) -> usize {
    for d in 0..7 {
        let s = step * 10f64.powi(d);
        if (s - s.round()).abs() < 1e-6 * s.abs().max(1.0) {
            return d as usize;
        }
    }
    6
}

/// A y axis in display units.
struct YAxis {
    log: bool,
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
}

impl YAxis {
    fn linear(min: f64, max: f64) -> YAxis {
        let mut lo = min.min(0.0);
        let mut hi = max.max(lo);
        if hi - lo <= 0.0 {
            hi = lo + if lo == 0.0 { 1.0 } else { lo.abs() };
        }
        let step = nice_step(hi - lo, 5.0);
        lo = (lo / step).floor() * step;
        hi = (hi / step).ceil() * step;
        let d = step_decimals(step);
        let n = ((hi - lo) / step).round() as i64;
        let ticks = (0..=n)
            .map(|i| {
                let v = lo + i as f64 * step;
                let s = format!("{:.*}", d, v);
                (
                    v,
                    if s.starts_with("-0") && v.abs() < step / 2.0 {
                        "0".into()
                    } else {
                        s
                    },
                )
            })
            .collect();
        YAxis {
            log: false,
            lo,
            hi,
            ticks,
        }
    }

    /// A linear axis that starts at `lo` (a zoomed axis, see [`zoom_from`])
    /// instead of at zero.
    fn linear_from(lo: f64, max: f64) -> YAxis {
        let mut y = YAxis::linear(0.0, (max - lo).max(f64::MIN_POSITIVE));
        let step = y.ticks.get(1).map(|t| t.0).unwrap_or(1.0);
        let d = step_decimals(step);
        for t in &mut y.ticks {
            t.0 += lo;
            t.1 = format!("{:.*}", d, t.0);
        }
        y.lo += lo;
        y.hi += lo;
        y
    }

    fn log(min_pos: f64, max: f64) -> YAxis {
        let lo_e = min_pos.log10().floor() as i32;
        let hi_e = (max.log10().ceil() as i32).max(lo_e + 1);
        let mut ticks = Vec::new();
        let few = hi_e - lo_e <= 2;
        for e in lo_e..=hi_e {
            let base = 10f64.powi(e);
            ticks.push((base, num(base, 1)));
            if few && e < hi_e {
                for m in [2.0, 5.0] {
                    let v = base * m;
                    ticks.push((v, format!("{:.*}", decimals_for(v, 1), v)));
                }
            }
        }
        YAxis {
            log: true,
            lo: 10f64.powi(lo_e),
            hi: 10f64.powi(hi_e),
            ticks,
        }
    }

    /// Ends a linear axis at `top` when its rounded end lies above it, so
    /// that no tick reads a value the quantity cannot take.
    fn clip_top(&mut self, top: f64) {
        if self.log || top.is_nan() || top <= self.lo || self.hi <= top {
            return;
        }
        self.hi = top;
        let eps = (self.hi - self.lo) * 1e-9;
        self.ticks.retain(|t| t.0 <= top + eps);
    }

    /// Fraction 0 (bottom) … 1 (top); values outside are clamped by callers.
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            let v = v.max(self.lo * 1e-3);
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

/// Values of a panel in display units: min/max including CI ends and bounds.
fn extent(p: &Panel, sc: &Scale) -> (f64, f64, f64) {
    let mut min = f64::INFINITY;
    let mut max = f64::NEG_INFINITY;
    let mut min_pos = f64::INFINITY;
    for s in &p.series {
        for pt in &s.points {
            let m = sc.apply(pt.mean);
            let (lo, hi) = pt.ends();
            let (lo, hi) = (sc.apply(lo), sc.apply(hi));
            for v in [lo, hi, m] {
                min = min.min(v);
                max = max.max(v);
            }
            if m > 0.0 {
                min_pos = min_pos.min(m);
            }
            if lo > 0.0 {
                min_pos = min_pos.min(lo);
            }
            if let Some(b) = pt.bound {
                max = max.max(sc.apply(b));
            }
        }
    }
    (min, max, min_pos)
}

/// Where a zoomed y axis starts, in display units, or None to start at 0.
///
/// A line chart whose values (CI ends and bounds included) all lie in the
/// top fifth of their range from zero would show its differences — S2's
/// few per cent between MTUs — as flat lines; its axis starts instead at a
/// round number below the lowest value, and the caption says so. Bars always
/// start at zero (a bar's length is its value), and so does any chart whose
/// campaign says `zoom = false`.
pub(crate) fn zoom_from(chart: &Chart, p: &Panel, sc: &Scale) -> Option<f64> {
    if !chart.zoom || chart.kind != ChartKind::Line {
        return None;
    }
    if mean_spread(p).is_some_and(|d| d < NO_VISIBLE_DIFFERENCE) {
        return None;
    }
    let (min, max, _) = extent(p, sc);
    if !(min.is_finite() && max.is_finite()) || min <= 0.0 || max <= 0.0 {
        return None;
    }
    if min < 0.8 * max {
        return None;
    }
    // Leave a margin of half the data's span below the lowest value, on a
    // round step of the zoomed range.
    let span = (max - min).max(max * 1e-3);
    let step = nice_step(span * 1.5, 5.0);
    let lo = ((min - span * 0.5) / step).floor() * step;
    (lo > 0.0).then_some(lo)
}

/// Log scale only for delay-like families (delay, RTT, jitter, completion
/// time) whose means are all positive and span at least 30×, on line and
/// bar charts alike (docs/reports.md); throughput, loss and CPU stay linear
/// as in the studies.
fn wants_log(chart: &Chart, p: &Panel) -> bool {
    use wirebench_schema::summary::MetricFamily as F;
    if !matches!(chart.family, F::Delay | F::Rtt | F::Jitter | F::Completion) {
        return false;
    }
    let mut lo = f64::INFINITY;
    let mut hi = 0.0f64;
    for s in &p.series {
        for pt in &s.points {
            if pt.mean <= 0.0 {
                return false;
            }
            lo = lo.min(pt.mean);
            hi = hi.max(pt.mean);
        }
    }
    lo.is_finite() && hi / lo >= 30.0
}

/// The largest value the panel's metric can physically take, in display
/// units: 100 % for ratios and shares of all cores, the host's cores for a
/// share of one core, 5 for MOS and 100 for the R factor, and the link's
/// payload bound plus 10 % for throughput (room to show a measurement above
/// it, which is an error the tables flag). None where nothing bounds it.
pub(crate) fn physical_limit(chart: &Chart, p: &Panel, sc: &Scale) -> Option<f64> {
    let m = p.metric;
    match (m.unit.as_str(), m.key.as_str()) {
        ("ratio" | "share of all its cores", _) => Some(sc.apply(1.0)),
        ("share of one core", _) => (chart.cpus > 0).then(|| sc.apply(chart.cpus as f64)),
        (_, "mos") => Some(5.0),
        (_, "r_factor") => Some(100.0),
        ("bit/s", _) => p
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter_map(|pt| pt.bound)
            .reduce(f64::max)
            .map(|b| sc.apply(b) * 1.1),
        _ => None,
    }
}

/// The spread of a panel's means, (largest − smallest) / largest, when it
/// has two or more positive means.
pub(crate) fn mean_spread(p: &Panel) -> Option<f64> {
    let means: Vec<f64> = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|pt| pt.mean))
        .collect();
    if means.len() < 2 || means.iter().any(|m| !m.is_finite() || *m <= 0.0) {
        return None;
    }
    let hi = means.iter().copied().fold(f64::MIN, f64::max);
    let lo = means.iter().copied().fold(f64::MAX, f64::min);
    Some((hi - lo) / hi)
}

/// Differences under this share of the largest mean are not drawn larger
/// than they are (no zoomed axis): the caption says "no visible difference".
pub(crate) const NO_VISIBLE_DIFFERENCE: f64 = 0.01;

pub struct Figure {
    pub svg: String,
    pub caption: String,
}

/// Renders a family chart to one `<svg>` element.
pub fn render(chart: &Chart, fig_index: usize) -> Figure {
    let n = chart.panels.len().max(1);
    let multi = n > 1;
    let (pw, ph) = if multi {
        (MULTI_W, MULTI_H)
    } else {
        (FIG_W, SINGLE_H)
    };
    let cols = if multi { 2 } else { 1 };
    let rows = n.div_ceil(cols);

    // Legend entries: series, then the bound, then the cv mark.
    let any_cv = chart.panels.iter().any(|p| {
        p.series
            .iter()
            .any(|s| s.points.iter().any(|pt| pt.cv_warning))
    });
    let mut legend: Vec<(LegendKind, String)> = chart
        .series_labels
        .iter()
        .enumerate()
        .filter(|(i, _)| chart.panels.iter().any(|p| !p.series[*i].points.is_empty()))
        .map(|(i, l)| (LegendKind::Series(i), l.clone()))
        .collect();
    if chart.draws_bound {
        legend.push((
            LegendKind::Bound,
            "Ethernet upper bound (dashed, series colour)".into(),
        ));
    }
    if any_cv {
        let what = if chart.kind == ChartKind::Line {
            "hollow marker"
        } else {
            "pale bar"
        };
        legend.push((LegendKind::Cv, format!("{what}: cv > 10 % (runs disagree)")));
    }
    let max_chars = legend
        .iter()
        .map(|(_, l)| l.chars().count())
        .max()
        .unwrap_or(0) as f64;
    let item_w = (60.0 + CHAR_W * max_chars).min(FIG_W - 40.0);
    let lcols = (((FIG_W - 40.0) / item_w).floor() as usize).max(1);
    let lrows = legend.len().div_ceil(lcols);
    let legend_h = lrows as f64 * LEGEND_ROW + 12.0;

    let title_h = 30.0;
    let width = if multi { FIG_W } else { pw };
    let height = title_h + rows as f64 * ph + legend_h;

    let fam = family_key(chart.family);
    let mut out = String::new();
    let title = match (chart.panels.len(), chart.panels.first()) {
        (1, Some(p)) => match (&chart.x_axis, chart.kind) {
            (Some(x), ChartKind::Line) => format!("{} against {}", p.metric.label, x),
            (Some(x), ChartKind::Bars) => format!("{} by {}", p.metric.label, x),
            (None, _) => p.metric.label.clone(),
        },
        _ => family_title(chart.family).to_string(),
    };
    let _ = write!(
        out,
        r##"<svg class="chart-svg" data-family="{fam}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}" font-family="DejaVu Sans, Liberation Sans, Arial, sans-serif" font-size="12"><rect class="bg" x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/><text class="title" x="{cx}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{t}</text>"##,
        w = px(width),
        h = px(height),
        cx = px(width / 2.0),
        t = esc(&title),
    );
    for (i, p) in chart.panels.iter().enumerate() {
        let x0 = (i % cols) as f64 * pw;
        let y0 = title_h + (i / cols) as f64 * ph;
        draw_panel(
            &mut out,
            chart,
            p,
            x0,
            y0,
            pw,
            ph,
            multi,
            fig_index * 16 + i,
        );
    }
    // Legend
    let ly0 = title_h + rows as f64 * ph + 6.0;
    let _ = write!(out, r#"<g class="legend">"#);
    for (k, (kind, label)) in legend.iter().enumerate() {
        let lx = 20.0 + (k % lcols) as f64 * item_w;
        let ly = ly0 + (k / lcols) as f64 * LEGEND_ROW + 10.0;
        match kind {
            LegendKind::Series(i) => {
                let c = colour(*i);
                if chart.kind == ChartKind::Line {
                    let _ = write!(
                        out,
                        r#"<path d="M{} {}H{}" stroke="{c}" stroke-width="2"/>"#,
                        px(lx),
                        px(ly),
                        px(lx + 28.0)
                    );
                    marker(&mut out, *i, lx + 14.0, ly, c, c);
                } else {
                    let _ = write!(
                        out,
                        r#"<rect x="{}" y="{}" width="22" height="12" fill="{c}"/>"#,
                        px(lx + 3.0),
                        px(ly - 6.0)
                    );
                }
            }
            LegendKind::Bound => {
                let _ = write!(
                    out,
                    r##"<path d="M{} {}H{}" stroke="#444444" stroke-width="1.6" stroke-dasharray="6 4"/>"##,
                    px(lx),
                    px(ly),
                    px(lx + 28.0)
                );
            }
            LegendKind::Cv => {
                if chart.kind == ChartKind::Line {
                    marker(&mut out, 0, lx + 14.0, ly, "#ffffff", "#444444");
                } else {
                    let _ = write!(
                        out,
                        r##"<rect x="{}" y="{}" width="22" height="12" fill="#444444" fill-opacity="0.3" stroke="#444444"/>"##,
                        px(lx + 3.0),
                        px(ly - 6.0)
                    );
                }
            }
        }
        let _ = write!(
            out,
            r#"<text x="{}" y="{}">{}</text>"#,
            px(lx + 36.0),
            px(ly + 4.0),
            esc(label)
        );
    }
    out.push_str("</g></svg>");

    let mut caption = format!("{}.", esc(&title));
    if chart.kind == ChartKind::Line {
        caption.push_str(" One line per series; error bars: 95 % confidence interval of the mean.");
    } else {
        caption.push_str(" One bar per series; error bars: 95 % confidence interval of the mean.");
    }
    if chart.draws_bound {
        caption.push_str(
            " Dashed: the Ethernet upper bound of payload throughput for the same scenario.",
        );
    }
    let zoomed: Vec<String> = chart
        .panels
        .iter()
        .filter_map(|p| {
            let (lo, hi, _) = extent(
                p,
                &Scale {
                    factor: 1.0,
                    unit: String::new(),
                },
            );
            let sc = scale_in(&p.metric.unit, lo.abs().max(hi.abs()), chart.units);
            if wants_log(chart, p) {
                return None;
            }
            zoom_from(chart, p, &sc).map(|z| format!("{} {}", num(z, 4), sc.unit))
        })
        .collect();
    if s_clipped(&out) {
        caption.push_str(" Error bars ending in an arrowhead are cut at the end of the axis (the physical limit of the quantity, or 1.5 × the largest mean): the interval reaches further, as a wide Student-t interval over few repetitions does; the tables give it whole.");
    }
    let flat: Vec<String> = chart
        .panels
        .iter()
        .filter_map(mean_spread)
        .filter(|d| *d < NO_VISIBLE_DIFFERENCE)
        .map(|d| format!("{} %", num(d * 100.0, 2)))
        .collect();
    if !flat.is_empty() {
        let _ = write!(
            caption,
            " No visible difference: every mean lies within {} of the largest, so the axis is not zoomed to magnify it.",
            esc(&flat.join(" / "))
        );
    }
    if !zoomed.is_empty() {
        let _ = write!(
            caption,
            " The y axis starts at {}, not at zero, so that differences of a few per cent show.",
            esc(&zoomed.join(" / "))
        );
    }
    Figure { svg: out, caption }
}

fn s_clipped(svg: &str) -> bool {
    svg.contains("class=\"ci-clipped\"")
}

#[derive(Debug, Clone, Copy)]
enum LegendKind {
    Series(usize),
    Bound,
    Cv,
}

#[allow(clippy::too_many_arguments)]
fn draw_panel(
    out: &mut String,
    chart: &Chart,
    p: &Panel,
    x0: f64,
    y0: f64,
    pw: f64,
    ph: f64,
    multi: bool,
    clip_id: usize,
) {
    let (raw_min, raw_max, _) = extent(
        p,
        &Scale {
            factor: 1.0,
            unit: String::new(),
        },
    );
    // One unit per panel, chosen by the largest magnitude drawn.
    let sc = scale_in(
        &p.metric.unit,
        raw_min.abs().max(raw_max.abs()),
        chart.units,
    );
    let (mut min, mut max, min_pos) = extent(p, &sc);
    // When no mean is negative the quantity is non-negative (throughput,
    // ratios, counts): a CI reaching below zero is cut at the axis rather
    // than inventing a negative scale.
    let all_nonneg = p
        .series
        .iter()
        .all(|s| s.points.iter().all(|pt| pt.mean >= 0.0));
    if all_nonneg {
        min = min.max(0.0);
    }
    let log = wants_log(chart, p);
    // The axis ends at the physical limit, or, where nothing bounds the
    // metric, at 1.5 × the largest mean: an n = 2 confidence interval must
    // not squeeze the means into the bottom of the chart. Error bars
    // reaching beyond are cut there and marked.
    let top_mean = p
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|pt| {
            sc.apply(pt.mean)
                .max(pt.bound.map(|b| sc.apply(b)).unwrap_or(f64::MIN))
        })
        .fold(f64::MIN, f64::max);
    let limit = physical_limit(chart, p, &sc);
    let cap = match limit {
        Some(l) => Some(l.max(top_mean)),
        None if top_mean > 0.0 && !log => Some(top_mean * 1.5),
        None => None,
    };
    if let Some(c) = cap {
        max = max.min(c);
    }
    let zoomed = !log && zoom_from(chart, p, &sc).is_some();
    let mut ya = if !min.is_finite() {
        YAxis::linear(0.0, 1.0)
    } else if log {
        YAxis::log(min_pos, max)
    } else if let Some(lo) = zoom_from(chart, p, &sc) {
        YAxis::linear_from(lo, max)
    } else {
        YAxis::linear(min, max)
    };
    if let Some(c) = cap {
        ya.clip_top(c);
    }

    // Categories may need rotated labels and thus a deeper bottom margin.
    let ml = 74.0;
    let mr = 16.0;
    let mt = if multi { 26.0 } else { 10.0 };
    let plot_w = pw - ml - mr;
    let (rotate, mb) = if chart.kind == ChartKind::Bars {
        let gw = plot_w / chart.categories.len().max(1) as f64;
        let longest = chart
            .categories
            .iter()
            .map(|c| c.chars().count())
            .max()
            .unwrap_or(0) as f64;
        if longest * CHAR_W > gw * 0.95 {
            (true, 44.0 + (longest * CHAR_W * 0.6).min(90.0))
        } else {
            (false, 48.0)
        }
    } else {
        (false, 48.0)
    };
    let plot_h = ph - mt - mb;
    let (l, t) = (x0 + ml, y0 + mt);
    let (r, b) = (l + plot_w, t + plot_h);
    let yp = |v: f64| b - ya.frac(v).clamp(0.0, 1.0) * plot_h;

    let _ = write!(
        out,
        r#"<g class="panel" data-metric="{}" data-scale="{}" data-ymin="{}" data-ymax="{}"{}{}{}>"#,
        esc(&p.metric.key),
        if log { "log" } else { "linear" },
        ya.lo,
        ya.hi,
        limit
            .map(|l| format!(r#" data-limit="{l}""#))
            .unwrap_or_default(),
        if zoomed { r#" data-zoomed="true""# } else { "" },
        if mean_spread(p).is_some_and(|d| d < NO_VISIBLE_DIFFERENCE) {
            r#" data-no-visible-difference="true""#
        } else {
            ""
        }
    );
    if multi {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
            px((l + r) / 2.0),
            px(y0 + 16.0),
            esc(&p.metric.label)
        );
    }
    // Grid and y ticks
    let _ = write!(out, r#"<g class="axis y">"#);
    for (v, label) in &ya.ticks {
        let y = yp(*v);
        let _ = write!(
            out,
            r##"<path d="M{} {}H{}" stroke="#e3e3e3" stroke-width="1"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            px(l),
            px(y),
            px(r),
            px(l - 6.0),
            px(y + 4.0),
            esc(label)
        );
    }
    // Panels of a multi-panel figure carry the metric in their title, so the
    // y label is only the unit (long labels would overrun a short panel).
    let how = if log {
        ", log scale"
    } else if zoomed {
        ", zoomed"
    } else {
        ""
    };
    let ylabel = if multi {
        format!("{}{how}", sc.unit)
    } else if sc.unit.is_empty() {
        format!(
            "{}{}",
            p.metric.label,
            if zoomed { " (zoomed)" } else { "" }
        )
    } else {
        format!("{} ({}{how})", p.metric.label, sc.unit)
    };
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">{}</text></g>"#,
        px(x0 + 16.0),
        px((t + b) / 2.0),
        px(x0 + 16.0),
        px((t + b) / 2.0),
        esc(&ylabel)
    );

    // An all-zero panel (no loss at all, say) would look empty: say so.
    let all_zero = p
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .all(|pt| pt.mean == 0.0 && pt.ci95 == 0.0);
    if all_zero && p.series.iter().any(|s| !s.points.is_empty()) {
        let _ = write!(
            out,
            r##"<text class="allzero" x="{}" y="{}" text-anchor="middle" fill="#555555" font-size="13">every value is 0</text>"##,
            px((l + r) / 2.0),
            px(t + plot_h * 0.45)
        );
    }
    match chart.kind {
        ChartKind::Line => draw_lines(out, chart, p, &sc, (l, t, r, b), &ya, clip_id),
        ChartKind::Bars => draw_bars(out, chart, p, &sc, (l, t, r, b), &ya, rotate),
    }
    // Frame last so it sits above the grid.
    let _ = write!(
        out,
        r##"<path d="M{l} {t}V{b}H{r}" stroke="#333333" stroke-width="1.2" fill="none"/>"##,
        l = px(l),
        t = px(t),
        b = px(b),
        r = px(r)
    );
    out.push_str("</g>");
}

fn draw_lines(
    out: &mut String,
    chart: &Chart,
    p: &Panel,
    sc: &Scale,
    (l, t, r, b): (f64, f64, f64, f64),
    ya: &YAxis,
    clip_id: usize,
) {
    let yp = |v: f64| b - ya.frac(v).clamp(0.0, 1.0) * (b - t);
    let yp: &dyn Fn(f64) -> f64 = &yp;
    let xs: Vec<f64> = {
        let mut v: Vec<f64> = p
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|pt| pt.x))
            .collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    };
    let (xmin, xmax) = match (xs.first(), xs.last()) {
        (Some(a), Some(b)) if b > a => (*a, *b),
        (Some(a), _) => (*a - 1.0, *a + 1.0),
        _ => (0.0, 1.0),
    };
    let pad = (xmax - xmin) * 0.04;
    let (xlo, xhi) = (xmin - pad, xmax + pad);
    let xp = |x: f64| l + (x - xlo) / (xhi - xlo) * (r - l);

    // Ticks at the measured x values when they fit (the studies label each
    // size), otherwise at round numbers.
    let fits = xs.len() <= 20
        && xs.windows(2).all(|w| {
            let need = CHAR_W * (plain(w[0]).len().max(plain(w[1]).len()) as f64) + 8.0;
            xp(w[1]) - xp(w[0]) >= need
        });
    let ticks: Vec<f64> = if fits && !xs.is_empty() {
        xs.clone()
    } else {
        let step = nice_step(xhi - xlo, ((r - l) / 90.0).clamp(3.0, 10.0));
        let first = (xlo / step).ceil() as i64;
        let last = (xhi / step).floor() as i64;
        (first..=last).map(|i| i as f64 * step).collect()
    };
    let _ = write!(out, r#"<g class="axis x">"#);
    for x in &ticks {
        let xx = xp(*x);
        let _ = write!(
            out,
            r##"<path d="M{} {}V{}" stroke="#333333" stroke-width="1"/><text x="{}" y="{}" text-anchor="middle">{}</text>"##,
            px(xx),
            px(b),
            px(b + 5.0),
            px(xx),
            px(b + 18.0),
            plain(*x)
        );
    }
    let xlabel = chart.x_axis.as_deref().map(axis_title).unwrap_or_default();
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
        px((l + r) / 2.0),
        px(b + 38.0),
        esc(&xlabel)
    );

    let _ = write!(
        out,
        r#"<clipPath id="clip{clip_id}"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath>"#,
        px(l),
        px(t - 2.0),
        px(r - l),
        px(b - t + 4.0)
    );
    // Bounds first, under the data.
    for (i, s) in p.series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|pt| pt.bound.map(|bd| (xp(pt.x), yp(sc.apply(bd)))))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            r#"<g class="bound" data-series="{}" clip-path="url(#clip{clip_id})"><path d="{}" stroke="{}" stroke-width="1.5" stroke-dasharray="6 4" fill="none" opacity="0.85"/>"#,
            esc(&s.label),
            path_d(&pts),
            colour(i)
        );
        for (x, y) in &pts {
            let _ = write!(
                out,
                r#"<path d="M{} {}H{}" stroke="{}" stroke-width="1.5"/>"#,
                px(x - 3.0),
                px(*y),
                px(x + 3.0),
                colour(i)
            );
        }
        out.push_str("</g>");
    }
    // Series are dodged sideways by a few pixels (at most ±6 px in all) so
    // that coinciding means and overlapping error bars of different series
    // stay visible; the shift is far below the spacing of x values.
    let drawn: Vec<usize> = (0..p.series.len())
        .filter(|i| !p.series[*i].points.is_empty())
        .collect();
    let nd = drawn.len();
    let step = if nd > 1 {
        (12.0 / (nd - 1) as f64).min(3.0)
    } else {
        0.0
    };
    for (slot, &i) in drawn.iter().enumerate() {
        let s = &p.series[i];
        let dx = (slot as f64 - (nd as f64 - 1.0) / 2.0) * step;
        let xp = |x: f64| xp(x) + dx;
        let c = colour(i);
        let _ = write!(out, r#"<g class="series" data-series="{}">"#, esc(&s.label));
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|pt| (xp(pt.x), yp(sc.apply(pt.mean))))
            .collect();
        let _ = write!(
            out,
            r#"<path class="line" d="{}" stroke="{c}" stroke-width="2" fill="none" stroke-linejoin="round"/>"#,
            path_d(&pts)
        );
        for pt in &s.points {
            let x = xp(pt.x);
            let (lo, hi) = pt.ends();
            let (lo, hi) = (sc.apply(lo), sc.apply(hi));
            if hi > lo {
                let (y1, y2) = (yp(lo), yp(hi));
                let _ = write!(
                    out,
                    r#"<path class="ci" d="M{x} {y1}V{y2}M{xl} {y1}H{xr}M{xl} {y2}H{xr}" stroke="{c}" stroke-width="1.3" fill="none"/>"#,
                    x = px(x),
                    y1 = px(y1),
                    y2 = px(y2),
                    xl = px(x - 4.0),
                    xr = px(x + 4.0)
                );
                clip_marks(out, ya, yp, x, (lo, hi), c);
            }
        }
        for pt in &s.points {
            let x = xp(pt.x);
            let m = sc.apply(pt.mean);
            let y = yp(m);
            let _ = write!(out, "<g>");
            marker(out, i, x, y, if pt.cv_warning { "#ffffff" } else { c }, c);
            let _ = write!(
                out,
                "<title>{}: {} = {}: {} {}{}</title></g>",
                esc(&s.label),
                esc(chart.x_axis.as_deref().unwrap_or("x")),
                plain(pt.x),
                esc(&point_text(pt, sc)),
                esc(&sc.unit),
                if pt.cv_warning { " (cv > 10 %)" } else { "" }
            );
        }
        out.push_str("</g>");
    }
}

/// Marks an error bar cut by the axis: an arrowhead at the cut end, so a
/// reader knows the interval reaches further (the tables give it whole).
fn clip_marks(
    out: &mut String,
    ya: &YAxis,
    yp: &dyn Fn(f64) -> f64,
    x: f64,
    (lo, hi): (f64, f64),
    c: &str,
) {
    for (end, cut, dir) in [
        (hi, hi > ya.hi * (1.0 + 1e-9), -1.0),
        (lo, lo < ya.lo - ya.hi.abs() * 1e-9, 1.0),
    ] {
        if !cut || ya.log {
            continue;
        }
        let y = yp(end);
        let _ = write!(
            out,
            r#"<path class="ci-clipped" d="M{} {}L{} {}L{} {}Z" fill="{c}"/>"#,
            px(x - 4.5),
            px(y - dir * 6.0),
            px(x),
            px(y),
            px(x + 4.5),
            px(y - dir * 6.0),
        );
    }
}

/// A point's value for its tooltip: mean ± CI, or the mean with its
/// asymmetric (Wilson) interval in brackets.
fn point_text(pt: &crate::plan::Point, sc: &Scale) -> String {
    match pt.interval {
        Some((lo, hi)) => format!(
            "{} [{}–{}]",
            num(sc.apply(pt.mean), 3),
            num(sc.apply(lo), 3),
            num(sc.apply(hi), 3)
        ),
        None => crate::fmt::mean_ci(sc.apply(pt.mean), sc.apply(pt.ci95)),
    }
}

/// Shortest exact decimal of an x value (sizes are integers: "1408", not "1408.00").
fn plain(v: f64) -> String {
    let s = format!("{v}");
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

fn path_d(pts: &[(f64, f64)]) -> String {
    let mut d = String::new();
    for (k, (x, y)) in pts.iter().enumerate() {
        let _ = write!(d, "{}{} {}", if k == 0 { "M" } else { "L" }, px(*x), px(*y));
    }
    d
}

fn draw_bars(
    out: &mut String,
    chart: &Chart,
    p: &Panel,
    sc: &Scale,
    (l, t, r, b): (f64, f64, f64, f64),
    ya: &YAxis,
    rotate: bool,
) {
    let yp = |v: f64| b - ya.frac(v).clamp(0.0, 1.0) * (b - t);
    let yp: &dyn Fn(f64) -> f64 = &yp;
    let ng = chart.categories.len().max(1);
    let gw = (r - l) / ng as f64;
    // Only series with data take a slot, so bars stay wide.
    let slots: Vec<usize> = (0..p.series.len())
        .filter(|i| !p.series[*i].points.is_empty())
        .collect();
    let ns = slots.len().max(1);
    let bw = (gw * 0.8 / ns as f64).min(60.0);
    let group_used = bw * ns as f64;
    let y0 = yp(0.0);

    let _ = write!(out, r#"<g class="axis x">"#);
    for (g, cat) in chart.categories.iter().enumerate() {
        let cx = l + (g as f64 + 0.5) * gw;
        if rotate {
            let _ = write!(
                out,
                r#"<text x="{x}" y="{y}" text-anchor="end" transform="rotate(-35 {x} {y})">{}</text>"#,
                esc(cat),
                x = px(cx),
                y = px(b + 14.0)
            );
        } else {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                px(cx),
                px(b + 18.0),
                esc(cat)
            );
        }
    }
    if let (Some(x), false) = (&chart.x_axis, rotate) {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px((l + r) / 2.0),
            px(b + 38.0),
            esc(&axis_title(x))
        );
    }
    out.push_str("</g>");

    for (slot, &i) in slots.iter().enumerate() {
        let s = &p.series[i];
        let c = colour(i);
        let _ = write!(out, r#"<g class="series" data-series="{}">"#, esc(&s.label));
        for pt in &s.points {
            let gx = l + pt.x * gw + (gw - group_used) / 2.0;
            let x = gx + slot as f64 * bw;
            let m = sc.apply(pt.mean);
            let ym = yp(m);
            let (top, h) = if ym < y0 {
                (ym, y0 - ym)
            } else {
                (y0, ym - y0)
            };
            let _ = write!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{c}"{}><title>{}: {}: {} {}{}</title></rect>"#,
                px(x + 1.0),
                px(top),
                px((bw - 2.0).max(1.0)),
                px(h.max(0.5)),
                if pt.cv_warning {
                    format!(r#" fill-opacity="0.3" stroke="{c}" stroke-width="1.5""#)
                } else {
                    String::new()
                },
                esc(&s.label),
                esc(chart
                    .categories
                    .get(pt.x as usize)
                    .map(String::as_str)
                    .unwrap_or("")),
                esc(&point_text(pt, sc)),
                esc(&sc.unit),
                if pt.cv_warning { " (cv > 10 %)" } else { "" }
            );
            let (lo, hi) = pt.ends();
            let (lo, hi) = (sc.apply(lo), sc.apply(hi));
            let xc = x + bw / 2.0;
            if hi > lo {
                let (y1, y2) = (yp(lo), yp(hi));
                let _ = write!(
                    out,
                    r##"<path class="ci" d="M{x} {y1}V{y2}M{xl} {y1}H{xr}M{xl} {y2}H{xr}" stroke="#222222" stroke-width="1.3" fill="none"/>"##,
                    x = px(xc),
                    y1 = px(y1),
                    y2 = px(y2),
                    xl = px(xc - 3.5),
                    xr = px(xc + 3.5)
                );
                clip_marks(out, ya, yp, xc, (lo, hi), "#222222");
            }
        }
        out.push_str("</g>");
    }
    for (slot, &i) in slots.iter().enumerate() {
        let s = &p.series[i];
        if s.points.iter().all(|pt| pt.bound.is_none()) {
            continue;
        }
        let _ = write!(out, r#"<g class="bound" data-series="{}">"#, esc(&s.label));
        for pt in &s.points {
            if let Some(bd) = pt.bound {
                let gx = l + pt.x * gw + (gw - group_used) / 2.0;
                let x = gx + slot as f64 * bw;
                let y = yp(sc.apply(bd));
                let _ = write!(
                    out,
                    r##"<path d="M{} {}H{}" stroke="#222222" stroke-width="1.6" stroke-dasharray="4 2"/>"##,
                    px(x - 1.0),
                    px(y),
                    px(x + bw + 1.0)
                );
            }
        }
        out.push_str("</g>");
    }
    // The zero line: bars grow from it (it is not the frame when values go negative).
    let _ = write!(
        out,
        r##"<path d="M{} {}H{}" stroke="#333333" stroke-width="1"/>"##,
        px(l),
        px(y0),
        px(r)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(1000.0, 5.0), 200.0);
        assert_eq!(nice_step(1.0, 5.0), 0.2);
        assert_eq!(step_decimals(2.5), 1);
        assert_eq!(step_decimals(200.0), 0);
        let y = YAxis::linear(0.0, 941.0);
        assert_eq!(y.hi, 1000.0);
        assert_eq!(y.ticks.first().map(|t| t.1.as_str()), Some("0"));
        let y = YAxis::log(0.02, 35.0);
        assert!(y.lo <= 0.02 && y.hi >= 35.0);
    }

    /// S5's delay chart: bars from 3.5 µs to 403 ms. The rule of
    /// docs/reports.md (log when the means span ≥ 30×) holds for bars too;
    /// a 10× span and a non-delay family stay linear.
    #[test]
    fn log_rule_applies_to_bars() {
        use crate::plan::{Point, Series};
        use wirebench_schema::summary::{MetricFamily, MetricInfo};
        let info = MetricInfo {
            key: "delay_mean_s".into(),
            family: MetricFamily::Delay,
            label: "One-way delay, mean".into(),
            unit: "s".into(),
            combine: Default::default(),
            better: Default::default(),
        };
        let pt = |x: f64, mean: f64| Point {
            x,
            mean,
            ci95: 0.0,
            cv_warning: false,
            bound: None,
            interval: None,
        };
        let panel = |hi: f64| Panel {
            metric: &info,
            series: vec![Series {
                label: "s".into(),
                points: vec![pt(0.0, 3.5e-6), pt(1.0, hi)],
            }],
        };
        let mut chart = Chart {
            family: MetricFamily::Delay,
            kind: ChartKind::Bars,
            x_axis: Some("app".into()),
            categories: vec!["csa".into(), "voip".into()],
            series_labels: vec!["s".into()],
            panels: Vec::new(),
            draws_bound: false,
            units: Default::default(),
            zoom: true,
            cpus: 2,
        };
        assert!(wants_log(&chart, &panel(0.403)));
        assert!(!wants_log(&chart, &panel(3.5e-5)));
        chart.kind = ChartKind::Line;
        assert!(wants_log(&chart, &panel(0.403)));
        chart.family = MetricFamily::Throughput;
        assert!(!wants_log(&chart, &panel(0.403)));

        // Zoom: S2's few per cent between MTUs on a line chart start the
        // axis above zero, below the lowest value; a wide spread, bars or
        // zoom = false keep zero.
        let one = Scale {
            factor: 1.0,
            unit: String::new(),
        };
        let close = Panel {
            metric: &info,
            series: vec![Series {
                label: "s".into(),
                points: vec![pt(0.0, 0.95), pt(1.0, 1.0)],
            }],
        };
        let lo = zoom_from(&chart, &close, &one).expect("zoomed");
        assert!(lo > 0.5 && lo < 0.95, "starts below the lowest value: {lo}");
        let y = YAxis::linear_from(lo, 1.0);
        assert!(y.lo <= 0.95 && y.hi >= 1.0 && y.ticks.len() >= 3);
        assert!(zoom_from(&chart, &panel(0.403), &one).is_none());
        chart.zoom = false;
        assert!(zoom_from(&chart, &close, &one).is_none());
        chart.zoom = true;
        chart.kind = ChartKind::Bars;
        assert!(zoom_from(&chart, &close, &one).is_none());
    }
}
