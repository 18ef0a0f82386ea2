//! What to draw, decided from the data alone (no geometry here): which axis
//! goes on x, how scenarios group into series, which metric each family's
//! chart shows, and whether the chart is a line chart or grouped bars.
//!
//! A *series* is every scenario sharing the values of all varying axes except
//! the x axis; this is how the studies drew them (one line per OS / IP
//! version / transport against payload size). Axes that never vary carry no
//! information and stay out of series labels.

use std::collections::BTreeMap;
use wirebench_schema::summary::{
    CampaignSummary, MetricFamily, MetricInfo, ScenarioSummary, ThroughputUnits,
};

/// Line chart over a numeric x axis, or grouped bars over categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartKind {
    /// Lines over a numeric x axis (payload, frame size, MTU...).
    Line,
    /// Grouped bars over categories.
    Bars,
}

/// One point (line) or bar of a series.
#[derive(Debug, Clone)]
pub struct Point {
    /// Numeric x (line charts) or category index (bars).
    pub x: f64,
    /// Mean over the repetitions.
    pub mean: f64,
    /// Half-width of its 95 % confidence interval.
    pub ci95: f64,
    /// The repetitions vary by more than the studies' 10 % limit.
    pub cv_warning: bool,
    /// Ethernet upper bound for this scenario, drawn on payload throughput.
    pub bound: Option<f64>,
    /// An interval that is not mean ± ci95: the Wilson interval of a
    /// proportion (loss), whose ends are not symmetric about the mean.
    pub interval: Option<(f64, f64)>,
}

impl Point {
    /// Lower and upper end of the point's 95 % interval.
    pub fn ends(&self) -> (f64, f64) {
        self.interval
            .unwrap_or((self.mean - self.ci95, self.mean + self.ci95))
    }
}

/// The Wilson score interval of a proportion of `x` successes in `n`
/// trials at 95 % (z = 1.96; E. B. Wilson, JASA 22, 1927): unlike mean ±
/// t·sd/√n it stays inside 0…1 and is not zero when no packet was lost.
pub fn wilson(x: f64, n: f64) -> Option<(f64, f64)> {
    if n.is_nan() || n <= 0.0 || !(0.0..=n).contains(&x) {
        return None;
    }
    const Z: f64 = 1.959_963_984_540_054;
    let p = x / n;
    let z2 = Z * Z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// The metric whose interval is a Wilson interval: the loss ratio, a
/// proportion of packets.
pub const PROPORTION: &str = "loss_ratio";

/// A scenario's loss as a proportion over every packet of its runs:
/// (lost / sent pooled over the repetitions, Wilson low, Wilson high), from
/// the `lost_packets` and `packets_sent` means × n. None without counts.
pub fn loss_proportion(sc: &ScenarioSummary) -> Option<(f64, f64, f64)> {
    let lost = sc.metrics.get("lost_packets").filter(|m| m.n > 0)?;
    let sent = sc.metrics.get("packets_sent").filter(|m| m.n > 0)?;
    let x = (lost.mean * lost.n as f64).round();
    let n = (sent.mean * sent.n as f64).round();
    let (lo, hi) = wilson(x, n)?;
    Some((x / n, lo, hi))
}

/// The scenarios that share every axis value but x: one line or one
/// colour of bars.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend: the series axes' values.
    pub label: String,
    /// Its points in x order.
    pub points: Vec<Point>,
}

/// One panel: one metric against x, all series.
#[derive(Debug, Clone)]
pub struct Panel<'a> {
    /// The metric drawn.
    pub metric: &'a MetricInfo,
    /// Every series, in [`Chart::series_labels`] order.
    pub series: Vec<Series>,
}

/// One figure: a metric family.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// The family the chart draws.
    pub family: MetricFamily,
    /// Lines or bars.
    pub kind: ChartKind,
    /// Axis on x (line) or grouping axis (bars); None when nothing varies.
    pub x_axis: Option<String>,
    /// Category labels for bars (index = Point::x).
    pub categories: Vec<String>,
    /// Series labels in drawing order (the same across panels, so colours match).
    pub series_labels: Vec<String>,
    /// One panel per metric shown (several for CPU and TCP state).
    pub panels: Vec<Panel<'a>>,
    /// Some panel draws the Ethernet upper bound.
    pub draws_bound: bool,
    /// Throughput units (the campaign's `[report] units`).
    pub units: ThroughputUnits,
    /// Whether a line chart's y axis may start above zero (`[report] zoom`).
    pub zoom: bool,
    /// CPUs of the measuring host (0: unknown): a "share of one core" is at
    /// most this many cores.
    pub cpus: usize,
}

/// How the scenarios of one campaign split into x values and series.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Lines over a numeric x axis, or bars over categories.
    pub kind: ChartKind,
    /// The axis on x (line) or the grouping axis (bars), if one varies.
    pub x_axis: Option<String>,
    /// Varying axes other than x, in campaign order: they name series.
    pub series_axes: Vec<String>,
    /// Category labels for bars (index = [`Point::x`]).
    pub categories: Vec<String>,
    /// Series labels in drawing order.
    pub series_labels: Vec<String>,
    /// Per scenario index: (series index, x value or category index).
    pub place: Vec<(usize, f64)>,
}

/// All axis names in campaign order, then any further ones scenarios carry.
pub fn all_axes(s: &CampaignSummary) -> Vec<String> {
    let mut axes: Vec<String> = s.axes.clone();
    for sc in &s.scenarios {
        for k in sc.axes.keys() {
            if !axes.contains(k) {
                axes.push(k.clone());
            }
        }
    }
    axes
}

/// Axes whose value differs between scenarios.
pub fn varying_axes(s: &CampaignSummary) -> Vec<String> {
    all_axes(s)
        .into_iter()
        .filter(|a| {
            let mut first: Option<&str> = None;
            s.scenarios.iter().any(|sc| {
                let v = sc.axes.get(a).map(String::as_str).unwrap_or("");
                match first {
                    None => {
                        first = Some(v);
                        false
                    }
                    Some(f) => f != v,
                }
            })
        })
        .collect()
}

fn axis_value<'s>(sc: &'s ScenarioSummary, axis: &str) -> &'s str {
    sc.axes.get(axis).map(String::as_str).unwrap_or("")
}

fn distinct_in_order<'s>(s: &'s CampaignSummary, axis: &str) -> Vec<&'s str> {
    let mut v: Vec<&str> = Vec::new();
    for sc in &s.scenarios {
        let x = axis_value(sc, axis);
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// One axis value as a reader says it: `IPv6`, `UDP`, `MTU 9000`,
/// `1408 B payload`, `CSa`; an axis this function does not know reads
/// `axis value`. Empty when the scenario has no value for the axis (an axis
/// of another `[[matrix]]` block).
pub fn axis_text(axis: &str, value: &str) -> String {
    let v = value.trim();
    if v.is_empty() {
        return String::new();
    }
    match axis {
        "ip" => match v {
            "4" => "IPv4".into(),
            "6" => "IPv6".into(),
            _ => format!("IP {v}"),
        },
        "transport" => v.to_ascii_uppercase(),
        "meter" => match v {
            "rtt" => "round trip".into(),
            "owd" => "one-way".into(),
            _ => format!("meter {v}"),
        },
        "payload" => format!("{v} B payload"),
        "frame" => format!("{v} B frames"),
        "mtu" => format!("MTU {v}"),
        "pps" if v == "max" => "unpaced".into(),
        "pps" => format!("{v} pkt/s"),
        "flows" => format!("{v} flows"),
        "link_rate" => format!("{v} link"),
        "forward_pps" => format!("router cap {v} pkt/s"),
        "offloads" => match v {
            "true" | "on" => "offloads on".into(),
            "false" | "off" => "offloads off".into(),
            _ => format!("offloads {v}"),
        },
        "app" => app_name(v).to_string(),
        "codec" => v.to_string(),
        // Derived from the result documents: "Windows → Linux".
        "systems" => v.to_string(),
        // A combined report's label, as the user wrote it.
        "campaign" | "pairing" => v.to_string(),
        _ => format!("{axis} {v}"),
    }
}

/// The studies' names of D-ITG's application models.
fn app_name(v: &str) -> &str {
    match v {
        "csa" => "CSa",
        "csi" => "CSi",
        "quake3" => "Quake3",
        "voip" => "VoIP",
        "dns" => "DNS",
        "telnet" => "Telnet",
        "voip-real" => "VoIP (real codec)",
        "opus" => "Opus",
        "video" => "video",
        "file" => "file transfer",
        other => other,
    }
}

/// Label of a series from its axis values, e.g. `IPv6, UDP`. Axes the
/// scenario has no value for are left out.
pub fn series_label(sc: &ScenarioSummary, series_axes: &[String]) -> String {
    let parts: Vec<String> = series_axes
        .iter()
        .map(|a| axis_text(a, axis_value(sc, a)))
        .filter(|t| !t.is_empty())
        .collect();
    if parts.is_empty() {
        return "all scenarios".to_string();
    }
    parts.join(", ")
}

/// A group of scenarios drawn and tabled together, with its own x axis.
#[derive(Debug, Clone)]
pub struct Part {
    /// Heading when a campaign has several parts (None: the only part).
    pub title: Option<String>,
    /// The campaign restricted to this part's scenarios.
    pub summary: CampaignSummary,
}

/// Axes whose values name kinds, not quantities, even when they are
/// written as numbers (`ip = [4, 6]`): a line between IPv4 and IPv6 would
/// invent values in between, so they are drawn as grouped bars.
#[rustfmt::skip]
pub const CATEGORICAL_AXES: &[&str] = &["ip", "transport", "meter", "app", "codec", "pairing", "sender", "systems", "campaign", "offloads", "direction", "cc", "dscp", "idt", "size"];

/// Whether an axis is one of [`CATEGORICAL_AXES`].
pub fn is_categorical(axis: &str) -> bool {
    CATEGORICAL_AXES.contains(&axis)
}

fn numeric(v: &str) -> bool {
    v.trim().parse::<f64>().is_ok_and(f64::is_finite)
}

fn sub_summary(s: &CampaignSummary, idx: &[usize], x_axis: Option<String>) -> CampaignSummary {
    CampaignSummary {
        scenarios: idx.iter().map(|&i| s.scenarios[i].clone()).collect(),
        x_axis,
        ..s.clone()
    }
}

/// Splits a campaign into the parts a reader expects to see apart: the
/// scenarios of `[[matrix]]` blocks with different axes (a size sweep and an
/// application block) and, inside a sweep, scenarios that sweep another
/// numeric axis at one x value (S5's calibration: 64 B at 10 000–50 000
/// pkt/s beside the size sweep at 30 000 pkt/s). Numeric sweeps then become
/// line charts and categorical axes bar charts, each in its own figure.
pub fn parts(s: &CampaignSummary) -> Vec<Part> {
    // Scenarios grouped by which axes they have values for, in order of
    // first appearance: one group per kind of [[matrix]] block.
    let mut groups: Vec<(Vec<&String>, Vec<usize>)> = Vec::new();
    for (i, sc) in s.scenarios.iter().enumerate() {
        let sig: Vec<&String> = sc
            .axes
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, _)| k)
            .collect();
        match groups.iter_mut().find(|(g, _)| *g == sig) {
            Some((_, v)) => v.push(i),
            None => groups.push((sig, vec![i])),
        }
    }
    let mut out: Vec<(Vec<usize>, Option<String>)> = Vec::new();
    for (_, idx) in groups {
        let sub = sub_summary(s, &idx, s.x_axis.clone());
        let lay = layout(&sub);
        let xs = lay
            .x_axis
            .as_ref()
            .map(|x| distinct_in_order(&sub, x).len());
        if lay.kind != ChartKind::Line || xs.unwrap_or(0) < 3 {
            out.push((idx, lay.x_axis));
            continue;
        }
        // Series with a single x value in a sweep of three or more: they
        // sweep something else.
        let mut count = vec![0usize; lay.series_labels.len()];
        for &(si, _) in &lay.place {
            count[si] += 1;
        }
        let (mut lone, mut sweep) = (Vec::new(), Vec::new());
        for (&i, &(si, _)) in idx.iter().zip(&lay.place) {
            if count[si] == 1 {
                lone.push(i);
            } else {
                sweep.push(i);
            }
        }
        if lone.len() < 2 || sweep.is_empty() {
            out.push((idx, lay.x_axis));
            continue;
        }
        let lone_sub = sub_summary(s, &lone, None);
        let x2 = varying_axes(&lone_sub)
            .into_iter()
            .filter(|a| Some(a) != lay.x_axis.as_ref() && !is_categorical(a))
            .filter(|a| {
                lone_sub
                    .scenarios
                    .iter()
                    .all(|sc| numeric(axis_value(sc, a)))
            })
            .max_by_key(|a| distinct_in_order(&lone_sub, a).len());
        let Some(x2) = x2 else {
            out.push((idx, lay.x_axis));
            continue;
        };
        // The sweep's scenario that sits on the other sweep (same values on
        // every other axis) belongs to both figures.
        let fixed: Vec<(String, String)> = all_axes(&lone_sub)
            .into_iter()
            .filter(|a| *a != x2 && !varying_axes(&lone_sub).contains(a))
            .map(|a| {
                let v = axis_value(&lone_sub.scenarios[0], &a).to_string();
                (a, v)
            })
            .collect();
        let mut second: Vec<usize> = sweep
            .iter()
            .copied()
            .filter(|&i| {
                fixed
                    .iter()
                    .all(|(a, v)| axis_value(&s.scenarios[i], a) == v.as_str())
            })
            .chain(lone.iter().copied())
            .collect();
        second.sort_unstable();
        out.push((sweep, lay.x_axis.clone()));
        out.push((second, Some(x2)));
    }
    if out.len() == 1 {
        return vec![Part {
            title: None,
            summary: s.clone(),
        }];
    }
    // Axes with two or more values somewhere (not merely absent from some
    // blocks): what tells the parts apart.
    let campaign_varying: Vec<String> = all_axes(s)
        .into_iter()
        .filter(|a| {
            let mut vals: Vec<&str> = s
                .scenarios
                .iter()
                .map(|sc| axis_value(sc, a).trim())
                .filter(|v| !v.is_empty())
                .collect();
            vals.sort_unstable();
            vals.dedup();
            vals.len() > 1
        })
        .collect();
    out.into_iter()
        .map(|(idx, x)| {
            let sub = sub_summary(s, &idx, x.clone());
            let lay = layout(&sub);
            let inner = varying_axes(&sub);
            // What holds this part together: axes that vary in the campaign
            // but not here.
            let held: Vec<String> = campaign_varying
                .iter()
                .filter(|a| !inner.contains(a))
                .map(|a| axis_text(a, axis_value(&sub.scenarios[0], a)))
                .filter(|t| !t.is_empty())
                .collect();
            let head = match (&lay.x_axis, lay.kind) {
                (Some(x), ChartKind::Line) => format!("Against {x}"),
                (Some(x), ChartKind::Bars) => format!("By {x}"),
                (None, _) => "Scenarios".to_string(),
            };
            let title = if held.is_empty() {
                head
            } else {
                format!("{head} ({})", held.join(", "))
            };
            Part {
                title: Some(title),
                summary: sub,
            }
        })
        .collect()
}

/// Axes a one-series legend names when they hold one value: what a reader
/// needs to tell the figure from its neighbours (test-bed settings such as
/// the link rate are in the header's fixed axes).
#[rustfmt::skip]
const LEGEND_FIXED: &[&str] = &["ip", "transport", "app", "codec", "pairing", "sender", "systems", "campaign", "payload", "frame", "pps", "mtu"];

/// Decides x axis, chart kind and series for a campaign.
pub fn layout(s: &CampaignSummary) -> Layout {
    let varying = varying_axes(s);
    // The campaign's x axis when it varies; otherwise the varying axis with
    // the most values (ties: campaign order) becomes the bar grouping.
    let x_axis = match &s.x_axis {
        Some(x) if varying.contains(x) => Some(x.clone()),
        _ => {
            let mut best: Option<(usize, &String)> = None;
            for a in &varying {
                let n = distinct_in_order(s, a).len();
                if best.map(|(bn, _)| n > bn).unwrap_or(true) {
                    best = Some((n, a));
                }
            }
            best.map(|(_, a)| a.clone())
        }
    };
    let numeric = x_axis.as_ref().is_some_and(|x| {
        s.x_axis.as_deref() == Some(x.as_str())
            && !is_categorical(x)
            && s.scenarios.iter().all(|sc| {
                axis_value(sc, x)
                    .trim()
                    .parse::<f64>()
                    .is_ok_and(f64::is_finite)
            })
    });
    let kind = if numeric {
        ChartKind::Line
    } else {
        ChartKind::Bars
    };
    let series_axes: Vec<String> = varying
        .iter()
        .filter(|a| Some(*a) != x_axis.as_ref())
        .cloned()
        .collect();

    // One series: the legend names what the scenarios share instead (the
    // application and codec of a part, say), never "all scenarios".
    let label_axes: Vec<String> = if series_axes.is_empty() {
        all_axes(s)
            .into_iter()
            .filter(|a| Some(a) != x_axis.as_ref() && LEGEND_FIXED.contains(&a.as_str()))
            .collect()
    } else {
        series_axes.clone()
    };
    let mut categories: Vec<String> = Vec::new();
    let mut series_labels: Vec<String> = Vec::new();
    let mut place = Vec::with_capacity(s.scenarios.len());
    for sc in &s.scenarios {
        let label = series_label(sc, &label_axes);
        let si = match series_labels.iter().position(|l| *l == label) {
            Some(i) => i,
            None => {
                series_labels.push(label);
                series_labels.len() - 1
            }
        };
        let x = match (&x_axis, kind) {
            (Some(xa), ChartKind::Line) => axis_value(sc, xa).trim().parse::<f64>().unwrap_or(0.0),
            (Some(xa), ChartKind::Bars) => {
                // Kinds read as a reader says them ("IPv6", "UDP"), other
                // values as written.
                let raw = axis_value(sc, xa);
                let v = match axis_text(xa, raw) {
                    t if is_categorical(xa) && !t.is_empty() => t,
                    _ => raw.to_string(),
                };
                match categories.iter().position(|c| *c == v) {
                    Some(i) => i as f64,
                    None => {
                        categories.push(v);
                        (categories.len() - 1) as f64
                    }
                }
            }
            (None, _) => {
                if categories.is_empty() {
                    categories.push(s.name.clone());
                }
                0.0
            }
        };
        place.push((si, x));
    }
    Layout {
        kind,
        x_axis,
        series_axes,
        categories,
        series_labels,
        place,
    }
}

/// The metric key whose chart carries the Ethernet upper bound.
const PAYLOAD_THROUGHPUT: &str = "throughput_payload_bps";

/// Metric keys (rows of `wirebench_schema::metrics::METRICS`) each family's
/// chart prefers, in order, so the chart shows what the studies plotted
/// (payload throughput, mean delay...); a family with none of them draws
/// its first metric.
fn preference(f: MetricFamily) -> &'static [&'static str] {
    match f {
        MetricFamily::Throughput => &[PAYLOAD_THROUGHPUT],
        MetricFamily::Delay => &["delay_mean_s", "delay_p50_s"],
        MetricFamily::Rtt => &["rtt_mean_s", "rtt_min_s"],
        MetricFamily::Jitter => &["jitter_mean_abs_ipdv_s", "jitter_rfc3550_s"],
        MetricFamily::Loss => &["loss_ratio", "lost_packets"],
        MetricFamily::Tcp => &["tcp_retransmits"],
        MetricFamily::Voip => &["mos", "r_factor"],
        MetricFamily::Cpu | MetricFamily::Completion => &[],
    }
}

/// Metrics that have at least one value, grouped by family (family order).
pub fn metrics_by_family(s: &CampaignSummary) -> BTreeMap<MetricFamily, Vec<&MetricInfo>> {
    let mut out: BTreeMap<MetricFamily, Vec<&MetricInfo>> = BTreeMap::new();
    for m in &s.metrics {
        let has = s.scenarios.iter().any(|sc| {
            sc.metrics
                .get(&m.key)
                .is_some_and(|st| st.n > 0 && st.mean.is_finite())
        });
        if has
            && !out
                .get(&m.family)
                .is_some_and(|v| v.iter().any(|x| x.key == m.key))
        {
            out.entry(m.family).or_default().push(m);
        }
    }
    out
}

/// The metric a single-panel family chart shows.
pub fn primary<'a>(family: MetricFamily, ms: &[&'a MetricInfo]) -> Option<&'a MetricInfo> {
    for p in preference(family) {
        if let Some(m) = ms.iter().find(|m| m.key == *p) {
            return Some(m);
        }
    }
    ms.first().copied()
}

/// Most panels a CPU figure holds (one per node/component metric).
pub const MAX_CPU_PANELS: usize = 8;

/// Whether the upper bound belongs on this metric's chart: it bounds payload
/// throughput only.
pub fn bound_applies(m: &MetricInfo, family_metrics: &[&MetricInfo]) -> bool {
    m.family == MetricFamily::Throughput
        && (m.key == PAYLOAD_THROUGHPUT || family_metrics.len() == 1)
}

/// One chart per metric family present.
pub fn charts(s: &CampaignSummary) -> Vec<Chart<'_>> {
    let lay = layout(s);
    let mut out = Vec::new();
    for (family, ms) in metrics_by_family(s) {
        // CPU (one panel per node/component) and TCP state (retransmits,
        // RTT, cwnd: different units) are small multiples; every other
        // family draws its headline metric.
        let panel_metrics: Vec<&MetricInfo> =
            if matches!(family, MetricFamily::Cpu | MetricFamily::Tcp) {
                ms.iter().take(MAX_CPU_PANELS).copied().collect()
            } else {
                primary(family, &ms).into_iter().collect()
            };
        let mut draws_bound = false;
        let mut panels = Vec::new();
        for m in panel_metrics {
            let with_bound = bound_applies(m, &ms);
            let mut series: Vec<Series> = lay
                .series_labels
                .iter()
                .map(|l| Series {
                    label: l.clone(),
                    points: Vec::new(),
                })
                .collect();
            for (sc, &(si, x)) in s.scenarios.iter().zip(&lay.place) {
                let Some(st) = sc.metrics.get(&m.key) else {
                    continue;
                };
                if st.n == 0 || !st.mean.is_finite() {
                    continue;
                }
                let bound = if with_bound {
                    sc.upper_bound_bps.filter(|b| b.is_finite() && *b > 0.0)
                } else {
                    None
                };
                draws_bound |= bound.is_some();
                let pts = &mut series[si].points;
                // A scenario repeated at the same x (should not happen) keeps
                // its first occurrence.
                if pts.iter().any(|p| p.x == x) {
                    continue;
                }
                pts.push(Point {
                    x,
                    mean: st.mean,
                    ci95: if st.ci95.is_finite() {
                        st.ci95.abs()
                    } else {
                        0.0
                    },
                    cv_warning: st.cv_warning,
                    bound,
                    interval: if m.key == PROPORTION {
                        loss_proportion(sc).map(|(_, lo, hi)| (lo, hi))
                    } else {
                        None
                    },
                });
            }
            for se in &mut series {
                se.points.sort_by(|a, b| a.x.total_cmp(&b.x));
            }
            panels.push(Panel { metric: m, series });
        }
        out.push(Chart {
            family,
            kind: lay.kind,
            x_axis: lay.x_axis.clone(),
            categories: lay.categories.clone(),
            series_labels: lay.series_labels.clone(),
            panels,
            draws_bound,
            units: s.report.units,
            zoom: s.report.zoom,
            cpus: s.environment.cpus,
        });
    }
    out
}

/// A human title for a family's figure.
pub fn family_title(f: MetricFamily) -> &'static str {
    match f {
        MetricFamily::Throughput => "Throughput",
        MetricFamily::Delay => "One-way delay",
        MetricFamily::Rtt => "Round-trip time",
        MetricFamily::Jitter => "Jitter",
        MetricFamily::Loss => "Loss",
        MetricFamily::Cpu => "CPU per node",
        MetricFamily::Tcp => "TCP state",
        MetricFamily::Voip => "VoIP quality",
        MetricFamily::Completion => "Completion time",
    }
}

/// Stable lowercase name of a family (matches its serde name).
pub fn family_key(f: MetricFamily) -> &'static str {
    match f {
        MetricFamily::Throughput => "throughput",
        MetricFamily::Delay => "delay",
        MetricFamily::Rtt => "rtt",
        MetricFamily::Jitter => "jitter",
        MetricFamily::Loss => "loss",
        MetricFamily::Cpu => "cpu",
        MetricFamily::Tcp => "tcp",
        MetricFamily::Voip => "voip",
        MetricFamily::Completion => "completion",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_schema::summary::{MetricStats, ScenarioSummary};

    fn sc(axes: &[(&str, &str)]) -> ScenarioSummary {
        let mut metrics = BTreeMap::new();
        metrics.insert(
            "m".to_string(),
            MetricStats {
                n: 3,
                mean: 1.0,
                sd: 0.0,
                median: 1.0,
                min: 1.0,
                max: 1.0,
                ci95: 0.0,
                cv: 0.0,
                cv_warning: false,
                pct_vs_baseline: None,
            },
        );
        ScenarioSummary {
            key: axes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            axes: axes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            runs_ok: 3,
            runs_planned: 3,
            metrics,
            upper_bound_bps: None,
            runs_above_bound: 0,
            nodes: Default::default(),
            hops: Default::default(),
            series: None,
            dist: None,
        }
    }

    fn summary(axes: &[&str], x: Option<&str>, scs: Vec<ScenarioSummary>) -> CampaignSummary {
        CampaignSummary {
            name: "t".into(),
            campaign_file: String::new(),
            started_at: String::new(),
            environment: Default::default(),
            axes: axes.iter().map(|a| a.to_string()).collect(),
            x_axis: x.map(String::from),
            baseline: None,
            metrics: vec![MetricInfo {
                key: "m".into(),
                family: MetricFamily::Throughput,
                label: "M".into(),
                unit: "bit/s".into(),
                combine: Default::default(),
                better: Default::default(),
            }],
            scenarios: scs,
            notes: vec![],
            report: Default::default(),
            rfc2544: None,
        }
    }

    #[test]
    fn numeric_x_gives_lines_and_constant_axes_do_not_split_series() {
        let s = summary(
            &["mtu", "ip", "rate"],
            Some("mtu"),
            vec![
                sc(&[("mtu", "9000"), ("ip", "6"), ("rate", "1gbit")]),
                sc(&[("mtu", "1500"), ("ip", "6"), ("rate", "1gbit")]),
                sc(&[("mtu", "4000"), ("ip", "4"), ("rate", "1gbit")]),
            ],
        );
        let l = layout(&s);
        assert_eq!(l.kind, ChartKind::Line);
        assert_eq!(l.series_axes, vec!["ip".to_string()]);
        assert_eq!(
            l.series_labels,
            vec!["IPv6".to_string(), "IPv4".to_string()]
        );
        let c = charts(&s);
        // Points sorted by x within a series.
        let xs: Vec<f64> = c[0].panels[0].series[0]
            .points
            .iter()
            .map(|p| p.x)
            .collect();
        assert_eq!(xs, vec![1500.0, 9000.0]);
    }

    #[test]
    fn categorical_or_missing_x_gives_bars() {
        let s = summary(
            &["codec", "ip"],
            Some("codec"),
            vec![
                sc(&[("codec", "G.711.1"), ("ip", "4")]),
                sc(&[("codec", "G.729.2"), ("ip", "4")]),
                sc(&[("codec", "G.711.1"), ("ip", "6")]),
            ],
        );
        let l = layout(&s);
        assert_eq!(l.kind, ChartKind::Bars);
        assert_eq!(
            l.categories,
            vec!["G.711.1".to_string(), "G.729.2".to_string()]
        );
        assert_eq!(l.series_labels.len(), 2);
        // No x axis: the varying axis with the most values groups the bars.
        let s = summary(
            &["ip", "app"],
            None,
            vec![
                sc(&[("app", "dns"), ("ip", "4")]),
                sc(&[("app", "csa"), ("ip", "4")]),
                sc(&[("app", "quake3"), ("ip", "6")]),
            ],
        );
        let l = layout(&s);
        assert_eq!(
            (l.kind, l.x_axis.as_deref()),
            (ChartKind::Bars, Some("app"))
        );
        // Nothing varies: one group, one series.
        let s = summary(&["ip"], Some("payload"), vec![sc(&[("ip", "4")])]);
        let l = layout(&s);
        assert_eq!((l.categories.len(), l.series_labels.len()), (1, 1));
    }

    /// A preferred key that is not a row of the metric table would never be
    /// chosen: each must be one, of the family that prefers it.
    #[test]
    fn preferred_keys_are_rows_of_the_metric_table() {
        use MetricFamily as F;
        for f in [
            F::Throughput,
            F::Delay,
            F::Rtt,
            F::Jitter,
            F::Loss,
            F::Cpu,
            F::Tcp,
            F::Voip,
            F::Completion,
        ] {
            for k in preference(f) {
                let m = wirebench_schema::metrics::metric(k)
                    .unwrap_or_else(|| panic!("{k} is not in the metric table"));
                assert_eq!(m.family, f, "{k}");
            }
        }
    }

    /// Wilson's interval, checked against values worked by hand from the
    /// formula: 0 of 100 gives [0, 3.70 %], 20 of 100 [13.34 %, 28.88 %].
    #[test]
    fn wilson_intervals() {
        let (lo, hi) = wilson(0.0, 100.0).unwrap();
        assert!(lo.abs() < 1e-12, "{lo}");
        assert!((hi - 0.036_993).abs() < 1e-5, "{hi}");
        let (lo, hi) = wilson(20.0, 100.0).unwrap();
        assert!((lo - 0.133_367).abs() < 1e-5, "{lo}");
        assert!((hi - 0.288_829).abs() < 1e-5, "{hi}");
        assert!(wilson(1.0, 0.0).is_none() && wilson(5.0, 4.0).is_none());
    }

    #[test]
    fn primary_metric_prefers_what_the_studies_plotted() {
        let t = |k: &str| MetricInfo {
            key: k.into(),
            family: MetricFamily::Throughput,
            label: k.into(),
            unit: "bit/s".into(),
            combine: Default::default(),
            better: Default::default(),
        };
        let (a, b) = (t("throughput_ip_bps"), t("throughput_payload_bps"));
        assert_eq!(
            primary(MetricFamily::Throughput, &[&a, &b]).unwrap().key,
            b.key
        );
        assert!(bound_applies(&b, &[&a, &b]) && !bound_applies(&a, &[&a, &b]));
    }
}
