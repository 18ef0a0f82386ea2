//! Two campaigns in one figure (issue 25 item 2, report part): two quick
//! S4-like campaigns labelled as OS pairings become one table with a column
//! per pairing and one chart with a series per pairing.

mod common;

use common::{info, stats};
use std::collections::BTreeMap;
use wirebench_report::{combine, render_html, CombineError};
use wirebench_schema::summary::*;

/// S4 quick: 5 MB TCP/IPv6 at MTU 1500 / 4000 / 9000, two repetitions.
fn s4(name: &str, gain: f64) -> CampaignSummary {
    let metrics = vec![
        common::payload_info(),
        info(
            "rtt_mean_s",
            MetricFamily::Rtt,
            "Round-trip time, mean",
            "s",
        ),
    ];
    let scenarios = [1500u32, 4000, 9000]
        .iter()
        .map(|&mtu| {
            let mut m = BTreeMap::new();
            m.insert(
                "throughput_payload_bps".to_string(),
                stats(6e8 * gain * (1.0 + f64::from(mtu) / 36000.0), 0.02, 2),
            );
            m.insert("rtt_mean_s".to_string(), stats(2e-4 / gain, 0.05, 2));
            let axes: BTreeMap<String, String> = [
                ("ip", "6".to_string()),
                ("transport", "tcp".to_string()),
                ("mtu", mtu.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            ScenarioSummary {
                key: format!("ip=6,transport=tcp,mtu={mtu}"),
                axes,
                runs_ok: 2,
                runs_planned: 2,
                metrics: m,
                upper_bound_bps: Some(common::tcp_bound(6, 1e9)),
                runs_above_bound: 0,
                nodes: Default::default(),
                hops: Default::default(),
                series: None,
                dist: None,
            }
        })
        .collect();
    CampaignSummary {
        name: name.into(),
        campaign_file: format!("name = \"{name}\"\n"),
        started_at: "2026-11-27T03:00:00Z".into(),
        environment: Environment {
            kernel: format!("kernel of {name}"),
            cpus: 2,
            ..Default::default()
        },
        axes: vec!["ip".into(), "transport".into(), "mtu".into()],
        x_axis: Some("mtu".into()),
        baseline: Some("mtu=1500".into()),
        metrics,
        scenarios,
        notes: vec![],
        report: Default::default(),
        rfc2544: None,
    }
}

fn pairings() -> Vec<(String, CampaignSummary)> {
    vec![
        ("Windows 7 → Linux".into(), s4("s4-win-lin", 0.8)),
        ("Linux → Linux".into(), s4("s4-lin-lin", 1.0)),
    ]
}

#[test]
fn two_campaigns_share_one_table_and_one_chart() {
    let c = combine(&pairings()).unwrap();
    assert_eq!(c.scenarios.len(), 6);
    assert_eq!(c.report.columns.as_deref(), Some("campaign"));
    let html = render_html(&c);
    // One throughput chart, two series named by the labels.
    let thr: Vec<&str> = html
        .split("<figure class=\"chart\"")
        .filter(|f| f.contains("data-family=\"throughput\""))
        .collect();
    assert_eq!(thr.len(), 1);
    assert!(thr[0].contains("data-kind=\"line\"") && thr[0].contains("data-series-count=\"2\""));
    for l in ["Windows 7 → Linux", "Linux → Linux"] {
        assert!(thr[0].contains(&format!("data-series=\"{l}\"")), "{l}");
    }
    // One table per family with both pairings as columns and the change
    // of the second against the first.
    assert!(html.contains("<th>Windows 7 → Linux</th><th>Linux → Linux</th><th>Δ Linux → Linux vs Windows 7 → Linux</th>"));
    let tables = html.split("<h4>Throughput</h4>").nth(1).unwrap();
    let first = &tables[..tables.find("</table>").unwrap()];
    assert_eq!(
        first.matches("<tr").count(),
        2 + 3 + 1,
        "2 header rows, 3 MTUs, a mean row"
    );
    // Each campaign's environment and file stay apart, under its label.
    assert!(html.contains("kernel of s4-win-lin") && html.contains("kernel of s4-lin-lin"));
    assert!(c
        .campaign_file
        .contains("# ---- Linux → Linux: campaign s4-lin-lin ----"));
}

#[test]
fn combining_refuses_what_would_merge_series() {
    let mut p = pairings();
    assert_eq!(combine(&p[..1]).unwrap_err(), CombineError::TooFew(1));
    p[1].0 = p[0].0.clone();
    assert!(matches!(combine(&p), Err(CombineError::DuplicateLabel(_))));
}
