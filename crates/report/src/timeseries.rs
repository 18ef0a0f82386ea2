//! Figures over time (campaigns with `interval_ms`): per scenario,
//! throughput, delay, jitter and loss per interval — the mean over the
//! repetitions as a line and their min–max as a shaded band — and, for TCP
//! flows, their `TCP_INFO` spread over the flows and the flows that
//! stalled. Its own module so the main document only calls it.

use crate::fmt::{esc, num, scale_for};
use std::fmt::Write as _;
use wirebench_schema::series::{Band, TcpSeries};
use wirebench_schema::summary::CampaignSummary;

const W: f64 = 300.0;
const H: f64 = 150.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 18.0;
const BOTTOM: f64 = 28.0;

/// Runs of consecutive indexes where `v` has a value.
fn segments(v: &[Option<f64>]) -> Vec<Vec<(usize, f64)>> {
    let mut out: Vec<Vec<(usize, f64)>> = Vec::new();
    let mut cur = Vec::new();
    for (i, x) in v.iter().enumerate() {
        match x {
            Some(x) if x.is_finite() => cur.push((i, *x)),
            _ => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// One small chart: the band, the mean line, axes with end labels.
fn chart(title: &str, unit: &str, b: &Band, interval_s: f64) -> String {
    let n = b.mean.len().max(1);
    let top = b
        .max
        .iter()
        .chain(&b.mean)
        .flatten()
        .copied()
        .filter(|x| x.is_finite())
        .fold(0.0f64, f64::max);
    let scale = scale_for(unit, top);
    let ymax = if top > 0.0 { top * 1.1 } else { 1.0 };
    let t_end = n as f64 * interval_s;
    let x = |i: usize| LEFT + (i as f64 + 0.5) / n as f64 * (W - LEFT - RIGHT);
    let y = |v: f64| TOP + (1.0 - (v / ymax).clamp(0.0, 1.0)) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg class=\"series\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{}\">",
        esc(title)
    );
    let _ = write!(
        s,
        "<text x=\"{LEFT}\" y=\"12\" font-size=\"11\">{} ({})</text>",
        esc(title),
        esc(&scale.unit)
    );
    // Axes.
    let (x0, x1, y0) = (LEFT, W - RIGHT, H - BOTTOM);
    let _ = write!(
        s,
        "<path d=\"M{x0} {TOP}V{y0}H{x1}\" stroke=\"#555\" fill=\"none\" stroke-width=\"0.8\"/>"
    );
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"end\">0</text>",
        x0 - 3.0,
        TOP + 8.0,
        num(scale.apply(ymax), 3),
        x0 - 3.0,
        y0
    );
    let _ = write!(
        s,
        "<text x=\"{x0}\" y=\"{}\" font-size=\"9\">0</text><text x=\"{x1}\" y=\"{}\" font-size=\"9\" text-anchor=\"end\">{} s</text>",
        y0 + 11.0,
        y0 + 11.0,
        num(t_end, 3)
    );
    // Band: min–max of the repetitions, where both exist.
    let pairs: Vec<Option<f64>> = b
        .min
        .iter()
        .zip(&b.max)
        .map(|(lo, hi)| lo.and(*hi))
        .collect();
    for seg in segments(&pairs) {
        let mut d = String::new();
        for (k, &(i, _)) in seg.iter().enumerate() {
            let hi = b.max[i].unwrap_or(0.0);
            let _ = write!(
                d,
                "{}{:.1} {:.1}",
                if k == 0 { "M" } else { "L" },
                x(i),
                y(hi)
            );
        }
        for &(i, _) in seg.iter().rev() {
            let lo = b.min[i].unwrap_or(0.0);
            let _ = write!(d, "L{:.1} {:.1}", x(i), y(lo));
        }
        let _ = write!(
            s,
            "<path d=\"{d}Z\" fill=\"#1f77b4\" fill-opacity=\"0.2\" stroke=\"none\"/>"
        );
    }
    for seg in segments(&b.mean) {
        let pts: Vec<String> = seg
            .iter()
            .map(|&(i, v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect();
        let _ = write!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.3\"/>",
            pts.join(" ")
        );
    }
    s.push_str("</svg>");
    s
}

/// Writes the section, or nothing when no scenario has a series.
pub fn series_section(out: &mut String, s: &CampaignSummary) {
    if s.scenarios.iter().all(|sc| sc.series.is_none()) {
        return;
    }
    out.push_str("<h3>Over time</h3>\n");
    out.push_str("<p class=\"legendnote\">Per interval of the run (<code>interval_ms</code>): line = mean over the repetitions, band = their smallest to largest value. Throughput and loss are all flows together; delay and jitter are packet-weighted means over the flows. Intervals count from each flow's first packet.</p>\n");
    for sc in &s.scenarios {
        let Some(se) = &sc.series else { continue };
        let _ = writeln!(
            out,
            "<h4>{}</h4>\n<p class=\"legendnote\">{} run{}, {} ms intervals</p>\n<div class=\"series-row\">",
            esc(&sc.key),
            se.runs,
            if se.runs == 1 { "" } else { "s" },
            num(se.interval_s * 1000.0, 3)
        );
        for (title, unit, band) in [
            ("Throughput", "bit/s", &se.throughput_bps),
            ("Delay", "s", &se.delay_s),
            ("Jitter", "s", &se.jitter_s),
            ("Packets lost", "packets", &se.lost),
        ] {
            out.push_str(&chart(title, unit, band, se.interval_s));
            out.push('\n');
        }
        out.push_str("</div>\n");
        if let Some(t) = &se.tcp {
            tcp_part(out, t, se.interval_s);
        }
    }
}

/// A scenario's TCP flows over time: `TCP_INFO` per interval as the
/// median flow (line) within the smallest and largest flow (band), the
/// retransmits and stalled flows of a run, and the longest stalls.
fn tcp_part(out: &mut String, t: &TcpSeries, interval_s: f64) {
    let _ = writeln!(
        out,
        "<p class=\"legendnote\">TCP, {} flow{} per run, the sender's TCP_INFO once per interval per flow: line = median flow (mean over the repetitions), band = smallest to largest flow; retransmits and stalled flows are all flows of a run (band over the repetitions). A flow stalls in an interval when none of its data arrived there after it had begun, while the run still carried data.</p>\n<div class=\"series-row\">",
        t.flows,
        if t.flows == 1 { "" } else { "s" }
    );
    for (title, unit, band) in [
        ("TCP cwnd", "bytes", &t.cwnd_bytes),
        ("TCP srtt", "s", &t.srtt_s),
        ("TCP delivery rate", "bit/s", &t.delivery_rate_bps),
        ("TCP pacing rate", "bit/s", &t.pacing_rate_bps),
        ("TCP retransmits", "segments", &t.retransmits),
        ("TCP flows stalled", "flows", &t.stalled),
    ] {
        if band.mean.iter().all(Option::is_none) {
            continue;
        }
        out.push_str(&chart(title, unit, band, interval_s));
        out.push('\n');
    }
    out.push_str("</div>\n");
    if t.stalls.is_empty() {
        out.push_str("<p class=\"legendnote\">No TCP flow stalled.</p>\n");
        return;
    }
    out.push_str("<table class=\"stalls\"><caption>Longest TCP stalls (state when the first stalled interval ended)</caption>\n<tr><th>run</th><th>flow</th><th>from (s)</th><th>for (s)</th><th>cwnd (B)</th><th>srtt (ms)</th><th>retransmits during</th></tr>\n");
    for st in &t.stalls {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            st.run,
            st.flow,
            num(st.t_s, 3),
            num(st.intervals as f64 * interval_s, 3),
            st.cwnd_bytes,
            num(st.srtt_s * 1e3, 3),
            st.retransmits
        );
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_split_lines_and_band() {
        let v = [Some(1.0), None, Some(2.0), Some(3.0)];
        assert_eq!(segments(&v), vec![vec![(0, 1.0)], vec![(2, 2.0), (3, 3.0)]]);
        let b = Band {
            mean: v.to_vec(),
            min: v.to_vec(),
            max: vec![Some(2.0), None, Some(4.0), Some(5.0)],
        };
        let svg = chart("Delay", "s", &b, 0.5);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("fill-opacity").count(), 2);
        assert!(svg.contains("2.00 s"), "{svg}");
    }
}
