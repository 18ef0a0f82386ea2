//! Figures a reviewer accepts (issue 25 item 4): y axes end at the
//! quantity's physical limit with cut error bars marked, categorical axes
//! are bars, sub-1 % differences are not magnified, one-series legends name
//! what the scenarios share, units can be forced, CDFs of wide spreads are
//! logarithmic, and each chart can be saved as its own SVG.

mod common;

use common::{info, stats};
use std::collections::BTreeMap;
use wirebench_report::render_html;
use wirebench_schema::summary::*;

/// A two-repetition campaign whose intervals explode (t(0.975, 1) = 12.7):
/// CPU 66 ± 593 % on 2 cores, loss 20.3 ± 257.3 %, throughput ± 4 Gbit/s
/// on a 1 Gbit/s link.
fn n2(x_axis: &str, xs: &[&str]) -> CampaignSummary {
    let metrics = vec![
        common::payload_info(),
        info("loss_ratio", MetricFamily::Loss, "Loss ratio", "ratio"),
        info(
            "cpu_sender",
            MetricFamily::Cpu,
            "CPU, sender process",
            "share of one core",
        ),
        info(
            "cpu_receiver",
            MetricFamily::Cpu,
            "CPU, receiver process",
            "share of one core",
        ),
        info(
            "rtt_mean_s",
            MetricFamily::Rtt,
            "Round-trip time, mean",
            "s",
        ),
    ];
    let mut scenarios = Vec::new();
    for (i, x) in xs.iter().enumerate() {
        let wide = |mean: f64, ci: f64| MetricStats {
            ci95: ci,
            ..stats(mean, 0.5, 2)
        };
        let mut m = BTreeMap::new();
        m.insert(
            "throughput_payload_bps".into(),
            wide(9.0e8 + 1e7 * i as f64, 4.0e9),
        );
        m.insert("loss_ratio".into(), wide(0.203, 2.573));
        m.insert("cpu_sender".into(), wide(0.66, 5.93));
        m.insert("cpu_receiver".into(), wide(0.30, 0.01));
        m.insert("rtt_mean_s".into(), wide(1e-4, 3e-3));
        let axes: BTreeMap<String, String> =
            [(x_axis.to_string(), x.to_string())].into_iter().collect();
        scenarios.push(ScenarioSummary {
            key: format!("{x_axis}={x}"),
            axes,
            runs_ok: 2,
            runs_planned: 2,
            metrics: m,
            upper_bound_bps: Some(9.57e8),
            runs_above_bound: 0,
            nodes: Default::default(),
            hops: Default::default(),
            series: None,
            dist: None,
        });
    }
    CampaignSummary {
        name: "n2".into(),
        campaign_file: String::new(),
        started_at: String::new(),
        environment: Environment {
            cpus: 2,
            ..Default::default()
        },
        axes: vec![x_axis.into()],
        x_axis: Some(x_axis.into()),
        baseline: None,
        metrics,
        scenarios,
        notes: vec![],
        report: Default::default(),
        rfc2544: None,
    }
}

/// Every chart panel as (metric, data-ymax, data-limit).
fn panels(html: &str) -> Vec<(String, f64, Option<f64>)> {
    let attr = |tag: &str, name: &str| -> Option<String> {
        let k = format!("{name}=\"");
        let i = tag.find(&k)? + k.len();
        Some(tag[i..].chars().take_while(|c| *c != '"').collect())
    };
    html.match_indices("<g class=\"panel\"")
        .map(|(i, _)| {
            let tag = &html[i..i + html[i..].find('>').unwrap()];
            (
                attr(tag, "data-metric").unwrap(),
                attr(tag, "data-ymax").unwrap().parse().unwrap(),
                attr(tag, "data-limit").map(|l| l.parse().unwrap()),
            )
        })
        .collect()
}

#[test]
fn axes_end_at_physical_limits_and_cut_intervals_are_marked() {
    let html = render_html(&n2("payload", &["64", "1408", "1536"]));
    let p = panels(&html);
    let get = |k: &str| p.iter().find(|x| x.0 == k).unwrap_or_else(|| panic!("{k}"));
    // Loss: a ratio, at most 100 %.
    let loss = get("loss_ratio");
    assert_eq!(loss.2, Some(100.0));
    assert!(loss.1 <= 100.0 + 1e-9, "loss axis to {}", loss.1);
    // CPU: a share of one core on a 2-core host, at most 200 %.
    let cpu = get("cpu_sender");
    assert_eq!(cpu.2, Some(200.0));
    assert!(cpu.1 <= 200.0 + 1e-9, "cpu axis to {}", cpu.1);
    // The receiver's narrow interval keeps a tight axis.
    assert!(get("cpu_receiver").1 < 50.0);
    // Throughput: the 957 Mbit/s bound plus 10 %, not the 5 Gbit/s CI end.
    let thr = get("throughput_payload_bps");
    assert!(thr.1 <= 957.0 * 1.1 + 1e-6, "throughput axis to {}", thr.1);
    // RTT has no physical limit: 1.5 × the largest mean, not the CI's 30×.
    assert!(get("rtt_mean_s").1 <= 0.1 * 1.5 + 1e-9);
    assert!(html.contains("class=\"ci-clipped\""));
    assert!(html.contains("Error bars ending in an arrowhead are cut"));

    // Intervals that fit draw no arrowhead and no such caption.
    let mut calm = n2("payload", &["64", "1408"]);
    for sc in &mut calm.scenarios {
        for st in sc.metrics.values_mut() {
            st.ci95 = st.mean * 0.01;
        }
    }
    let html = render_html(&calm);
    assert!(!html.contains("ci-clipped"));
}

#[test]
fn categorical_axes_are_bars_even_when_numeric() {
    let html = render_html(&n2("ip", &["4", "6"]));
    assert!(html.contains("data-kind=\"bars\""));
    assert!(!html.contains("data-kind=\"line\""));
    let s = n2("ip", &["4", "6"]);
    assert_eq!(
        wirebench_report::plan::layout(&s).kind,
        wirebench_report::plan::ChartKind::Bars
    );
}

#[test]
fn differences_under_one_per_cent_are_not_magnified() {
    let mut s = n2("payload", &["1400", "1408", "1416"]);
    for (i, sc) in s.scenarios.iter_mut().enumerate() {
        sc.metrics.insert(
            "throughput_payload_bps".into(),
            stats(9.5e8 * (1.0 + 0.0004 * i as f64), 0.0001, 5),
        );
    }
    let html = render_html(&s);
    let thr = html
        .split("<figure")
        .find(|f| f.contains("data-family=\"throughput\""))
        .unwrap();
    assert!(
        !thr.contains("data-zoomed"),
        "a 0.08 % difference is zoomed"
    );
    assert!(thr.contains("data-no-visible-difference=\"true\""));
    assert!(thr.contains("No visible difference: every mean lies within 0.08"));
    // 5 % differences still zoom, as S2's do.
    for (i, sc) in s.scenarios.iter_mut().enumerate() {
        sc.metrics.insert(
            "throughput_payload_bps".into(),
            stats(9.0e8 * (1.0 + 0.025 * i as f64), 0.0001, 5),
        );
    }
    let html = render_html(&s);
    assert!(html.contains("data-zoomed=\"true\""));
}

#[test]
fn a_one_series_legend_names_the_application_and_codec() {
    let mut s = n2("ip", &["4", "6"]);
    s.axes.extend(["app".to_string(), "codec".to_string()]);
    for sc in &mut s.scenarios {
        sc.axes.insert("app".into(), "voip".into());
        sc.axes.insert("codec".into(), "G.729.3".into());
    }
    let lay = wirebench_report::plan::layout(&s);
    assert_eq!(lay.series_labels, vec!["VoIP, G.729.3".to_string()]);
    let html = render_html(&s);
    assert!(!html.contains("all scenarios"));
    assert!(html.contains(">VoIP, G.729.3</text>"));
}

#[test]
fn units_can_be_forced_and_ditg_says_kbps_for_application_rates() {
    let mut s = n2("payload", &["64", "1408"]);
    s.report.units = ThroughputUnits::Mbits;
    let html = render_html(&s);
    assert!(html.contains("Payload throughput (Mbit/s)"));
    // The thesis's 73.6 Kbps G.729.3 rate, not "0.0719 Mbps".
    for sc in &mut s.scenarios {
        sc.metrics
            .insert("throughput_payload_bps".into(), stats(73_600.0, 0.001, 5));
        sc.upper_bound_bps = None;
    }
    s.report.units = ThroughputUnits::Ditg;
    let html = render_html(&s);
    assert!(html.contains("Payload throughput (Kbps, D-ITG"));
    assert!(html.contains("73.60"));
    s.report.units = ThroughputUnits::parse("Kbps").unwrap();
    assert!(render_html(&s).contains("Kbps, D-ITG"));
    assert_eq!(ThroughputUnits::parse("mbit/s"), None);
    // Campaign files and --units take the same names as the JSON store.
    for n in ThroughputUnits::NAMES {
        let u = ThroughputUnits::parse(n).unwrap();
        assert_eq!(serde_json::to_string(&u).unwrap(), format!("\"{n}\""));
    }
}
