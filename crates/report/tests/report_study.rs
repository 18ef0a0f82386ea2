//! Study-shaped output: a campaign that mixes a size sweep, a calibration
//! sweep and an application block is drawn as separate figures (lines for the
//! sweeps, bars for the applications) with readable legends; `[report]
//! columns` gives S3's side-by-side tables with a mean row; `units = "ditg"`
//! prints D-ITG's Mbps; S2-like small effects get a zoomed y axis; and no
//! table needs a horizontal scroll bar in a real browser.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use wirebench_report::plan::{charts, parts, ChartKind};
use wirebench_report::render_html;
use wirebench_schema::summary::{CampaignSummary, MetricStats, ScenarioSummary, ThroughputUnits};

fn st(mean: f64) -> MetricStats {
    MetricStats {
        n: 5,
        mean,
        sd: mean * 0.01,
        median: mean,
        min: mean * 0.99,
        max: mean * 1.01,
        ci95: mean * 0.012,
        cv: 0.01,
        cv_warning: false,
        pct_vs_baseline: None,
    }
}

/// S5's shape: the size sweep at 30 000 pkt/s, the calibration (64 B at
/// 10 000–50 000 pkt/s) and the application block in one campaign.
fn mixed() -> CampaignSummary {
    let mut s = common::s5_like(common::S5_FILE);
    for sc in &mut s.scenarios {
        sc.axes.insert("pps".into(), "30000".into());
        sc.key.push_str(",pps=30000");
    }
    for pps in [10_000u32, 20_000, 40_000, 50_000] {
        let mut m = BTreeMap::new();
        m.insert(
            "throughput_payload_bps".to_string(),
            st(f64::from(pps.min(29_000)) * 64.0 * 8.0),
        );
        m.insert("loss_ratio".to_string(), st(0.01));
        let axes: BTreeMap<String, String> = [
            ("ip", "4"),
            ("transport", "udp"),
            ("payload", "64"),
            ("rate", "100mbit"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(std::iter::once(("pps".to_string(), pps.to_string())))
        .collect();
        s.scenarios.push(ScenarioSummary {
            key: format!("ip=4,transport=udp,payload=64,rate=100mbit,pps={pps}"),
            axes,
            runs_ok: 5,
            runs_planned: 5,
            metrics: m,
            upper_bound_bps: None,
            runs_above_bound: 0,
            nodes: Default::default(),
            hops: Default::default(),
            series: None,
            dist: None,
        });
    }
    let apps = common::apps_like();
    for m in &apps.metrics {
        if !s.metrics.iter().any(|x| x.key == m.key) {
            s.metrics.push(m.clone());
        }
    }
    s.scenarios.extend(apps.scenarios);
    s.axes.push("pps".into());
    s.axes.push("app".into());
    s
}

#[test]
fn mixed_blocks_become_separate_figures_with_readable_legends() {
    let s = mixed();
    let ps = parts(&s);
    let titles: Vec<&str> = ps.iter().filter_map(|p| p.title.as_deref()).collect();
    assert_eq!(
        titles,
        vec![
            "Against payload (30000 pkt/s)",
            "Against pps (IPv4, UDP, 64 B payload)",
            "By app"
        ],
        "{titles:?}"
    );
    // The size sweep: lines over 13 payloads, one series per ip × transport.
    let sweep = &ps[0].summary;
    assert_eq!(sweep.scenarios.len(), 52);
    let c = charts(sweep);
    assert!(c.iter().all(|c| c.kind == ChartKind::Line));
    assert_eq!(
        c[0].series_labels,
        vec!["IPv4, UDP", "IPv4, TCP", "IPv6, UDP", "IPv6, TCP"]
    );
    // The calibration: lines over pps, and the sweep's 30 000 pkt/s point
    // at 64 B belongs to it too.
    let cal = &ps[1].summary;
    assert_eq!(cal.scenarios.len(), 5);
    assert!(cal.scenarios.iter().any(|sc| sc.axes["pps"] == "30000"));
    let c = charts(cal);
    assert!(c.iter().all(|c| c.kind == ChartKind::Line));
    assert_eq!(c[0].x_axis.as_deref(), Some("pps"));
    // The applications: bars by app, series IPv4 / IPv6.
    let c = charts(&ps[2].summary);
    assert!(c.iter().all(|c| c.kind == ChartKind::Bars));
    assert_eq!(c[0].series_labels, vec!["IPv4", "IPv6"]);

    let html = render_html(&s);
    assert_eq!(html.matches("<h3 class=\"part\">").count(), 3);
    // No legend reads "axis=value" (nor "app=, codec=" for the sweep).
    for (i, _) in html.match_indices("data-series=\"") {
        let rest = &html[i + 13..];
        let label = &rest[..rest.find('"').unwrap()];
        assert!(!label.contains('='), "legend {label:?}");
    }
}

#[test]
fn columns_put_ipv4_and_ipv6_side_by_side_with_a_mean_row() {
    let mut s = common::s5_like(common::S5_FILE);
    s.report.columns = Some("ip".into());
    let html = render_html(&s);
    assert!(html.contains("<table class=\"wide\">"));
    assert!(html.contains("<th>IPv4</th><th>IPv6</th><th>Δ IPv6 vs IPv4</th>"));
    // One mean row per sweep (UDP, TCP) in each family table.
    let rows = html.matches("<tr class=\"meanrow\">").count();
    let families = html.matches("<table class=\"wide\">").count();
    assert!(rows >= 2 * 6 && rows == 2 * families, "{rows} mean rows");
    assert!(html.contains("mean over 13 payload"));
    // The mean row's Δ of payload throughput, UDP: mean over the payloads
    // of IPv6 against that of IPv4.
    let mean = |ip: &str| {
        let v: Vec<f64> = s
            .scenarios
            .iter()
            .filter(|sc| sc.axes["ip"] == ip && sc.axes["transport"] == "udp")
            .map(|sc| sc.metrics["throughput_payload_bps"].mean)
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let d = (mean("6") - mean("4")) / mean("4") * 100.0;
    let row = html
        .split("<tr class=\"meanrow\">")
        .nth(1)
        .unwrap()
        .split("</tr>")
        .next()
        .unwrap();
    assert!(row.contains("<td class=\"axis\">udp</td>"), "{row}");
    assert!(
        row.contains(&format!("{d:+.1} %")),
        "mean-row Δ {d:+.1} % in {row}"
    );
}

#[test]
fn ditg_units_print_kbit_per_s_over_1024() {
    let mut s = common::s5_like(common::S5_FILE);
    s.report.units = ThroughputUnits::Ditg;
    s.report.columns = Some("ip".into());
    let html = render_html(&s);
    assert!(html.contains("Mbps, D-ITG: kbit/s ÷ 1024"));
    let sc = s
        .scenarios
        .iter()
        .find(|x| x.key == "ip=4,transport=udp,payload=1408,rate=100mbit")
        .unwrap();
    let mbps = sc.metrics["throughput_payload_bps"].mean / 1000.0 / 1024.0;
    assert!(
        html.contains(&format!("{mbps:.2}")),
        "D-ITG Mbps {mbps:.2} not shown"
    );
}

#[test]
fn small_effects_get_a_zoomed_axis_unless_switched_off() {
    // S2: throughput within a few per cent of each other across MTUs.
    let mut s = common::s5_like(common::S5_FILE);
    s.scenarios.retain(|sc| sc.axes["transport"] == "tcp");
    for sc in &mut s.scenarios {
        let p: f64 = sc.axes["payload"].parse().unwrap();
        sc.metrics
            .insert("throughput_payload_bps".into(), st(94e6 + p * 1000.0));
    }
    let html = render_html(&s);
    assert!(html.contains("data-zoomed=\"true\""));
    assert!(html.contains("not at zero"));
    s.report.zoom = false;
    let html = render_html(&s);
    assert!(!html.contains("data-zoomed"));
}

/// Loads the report in headless Chromium with a probe script appended that
/// writes the widest horizontal overflow of any table into the title.
fn widest_overflow(html: &str, dir: &Path) -> i64 {
    let probe = html.replace(
        "</body>",
        "<script>let w=0;for(const e of document.querySelectorAll('.tablewrap')){w=Math.max(w,e.scrollWidth-e.clientWidth)}document.title='overflow='+w;</script></body>",
    );
    let dom = wirebench_testkit::chromium::dump_dom(&probe, dir, 1280);
    wirebench_testkit::chromium::number_after(&dom, "overflow=")
}

/// S5 with every throughput layer and percentile: a family of many
/// metrics, each with its Δ, beside the bound columns.
fn many_columns() -> CampaignSummary {
    let mut s = common::s5_like(common::S5_FILE);
    let extra = [
        ("throughput_ip_bps", "IP throughput", "bit/s"),
        ("throughput_wire_bps", "On-the-wire throughput", "bit/s"),
        (
            "throughput_frames_bps",
            "Frame throughput incl. FCS",
            "bit/s",
        ),
        ("rtt_p50_s", "Median round-trip time", "s"),
        ("rtt_p999_s", "99.9th percentile round-trip time", "s"),
        ("rtt_max_s", "Largest round-trip time", "s"),
    ];
    for (k, label, unit) in extra {
        let family = if unit == "s" {
            wirebench_schema::summary::MetricFamily::Rtt
        } else {
            wirebench_schema::summary::MetricFamily::Throughput
        };
        s.metrics.push(wirebench_schema::summary::MetricInfo {
            key: k.into(),
            family,
            label: label.into(),
            unit: unit.into(),
            combine: Default::default(),
            better: Default::default(),
        });
        for sc in &mut s.scenarios {
            let base = sc.metrics["throughput_payload_bps"].mean;
            let v = if unit == "s" { 0.00123456 } else { base * 1.07 };
            let mut m = st(v);
            m.pct_vs_baseline = Some(-12.5);
            sc.metrics.insert(k.into(), m);
        }
    }
    s
}

#[test]
fn tables_fit_the_page_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let mut wide = many_columns();
    wide.report.columns = Some("ip".into());
    let all = vec![mixed(), many_columns(), wide, common::apps_like()];
    let html = render_html(&all);
    let w = widest_overflow(&html, dir.path());
    assert!(w <= 0, "a table is {w} px wider than the page");
}
