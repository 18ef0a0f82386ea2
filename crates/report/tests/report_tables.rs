//! Tables a reviewer accepts (issue 25 item 5): side-by-side tables keep the
//! upper-bound columns, nothing reads "-0", Δ is coloured only where more or
//! less is better (header overheads stay neutral), the loss ratio carries a
//! Wilson interval, and one unit serves a whole column family.

mod common;

use common::{info, stats};
use wirebench_report::render_html;
use wirebench_schema::summary::*;

/// The rows of every `<table>` as cell texts (tags stripped).
fn cells(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in html.match_indices("<td") {
        let start = i + html[i..].find('>').unwrap() + 1;
        let end = start + html[start..].find("</td>").unwrap();
        let mut text = String::new();
        let mut tag = false;
        for c in html[start..end].chars() {
            match c {
                '<' => tag = true,
                '>' => tag = false,
                c if !tag => text.push(c),
                _ => {}
            }
        }
        out.push(text);
    }
    out
}

#[test]
fn side_by_side_keeps_the_bound_columns() {
    let mut s = common::s5_like(common::S5_FILE);
    s.report.columns = Some("ip".into());
    let html = render_html(&s);
    assert!(html.contains("<th>IPv4 bound</th><th>IPv4 measured / bound</th>"));
    assert!(html.contains("<th>IPv6 bound</th><th>IPv6 measured / bound</th>"));
    // 1408 B UDP over IPv4 at 100 Mbit/s: bound 95.54 Mbit/s, and the
    // measured share of it is printed beside it.
    let b = common::udp_bound(1408.0, 4, 100e6) / 1e6;
    assert!(html.contains(&format!("<td>{b:.2}</td>")), "bound {b:.2}");
    let shares = cells(&html)
        .iter()
        .filter(|c| c.ends_with(" %") && c.parse::<f64>().is_err())
        .count();
    assert!(shares >= 4 * 13, "measured/bound shares: {shares}");
}

#[test]
fn no_negative_zero_and_neutral_header_overheads() {
    let mut s = common::s5_like(common::S5_FILE);
    s.baseline = Some("ip=4".into());
    for sc in &mut s.scenarios {
        let v6 = sc.axes["ip"] == "6";
        for (k, st) in sc.metrics.iter_mut() {
            st.pct_vs_baseline = v6.then_some(if k == "cpu_sender" { -0.01 } else { 3.0 });
        }
        // A drop that is -0.0 after arithmetic.
        sc.metrics
            .insert("tcp_retransmits".into(), stats(-0.0, 0.0, 15));
    }
    let html = render_html(&s);
    for c in cells(&html) {
        let first = c.split(' ').next().unwrap_or("");
        if let Some(rest) = first.strip_prefix('-') {
            assert!(
                rest.chars().any(|d| d.is_ascii_digit() && d != '0'),
                "negative zero in cell {c:?}"
            );
        }
    }
    // Payload +3 % is green (more is better); Ethernet +3 % is header
    // overhead: uncoloured.
    let row = html
        .lines()
        .find(|l| {
            l.contains("<td class=\"axis\">6</td>") && l.contains("<td class=\"axis\">udp</td>")
        })
        .expect("an IPv6 UDP row");
    assert!(row.contains("<td class=\"pos\">+3.0 %</td>"), "{row}");
    assert!(row.contains("<td>+3.0 %</td>"), "{row}");
    let eth = wirebench_schema::metrics::metric("throughput_ethernet_bps").unwrap();
    assert_eq!(eth.better, Better::Neither);
}

#[test]
fn loss_ratio_carries_a_wilson_interval() {
    let mut s = common::s5_like(common::S5_FILE);
    s.metrics.push(info(
        "lost_packets",
        MetricFamily::Loss,
        "Packets lost",
        "packets",
    ));
    s.metrics.push(info(
        "packets_sent",
        MetricFamily::Loss,
        "Packets sent",
        "packets",
    ));
    for sc in &mut s.scenarios {
        // Two runs of 1 000 packets, 203 lost in all: Student t over the
        // two ratios would read 20.3 ± 257 %.
        sc.metrics.insert(
            "loss_ratio".into(),
            MetricStats {
                ci95: 2.573,
                ..stats(0.203, 0.5, 2)
            },
        );
        sc.metrics
            .insert("lost_packets".into(), stats(101.5, 0.5, 2));
        sc.metrics
            .insert("packets_sent".into(), stats(1000.0, 0.0, 2));
    }
    let html = render_html(&s);
    // Wilson for 203 of 2000 (worked from the formula): [8.91 %, 11.56 %]
    // around 10.15 %.
    assert!(html.contains("10.2 [8.9–11.6]"));
    assert!(!html.contains("± 257"));
    // The chart's error bar is the Wilson interval too: inside 0–100 %.
    assert!(!html[html.find("data-metric=\"loss_ratio\"").unwrap()..]
        .split("</g></g>")
        .next()
        .unwrap()
        .contains("ci-clipped"));
}

#[test]
fn one_unit_per_column_family() {
    let mut s = common::s5_like(common::S5_FILE);
    for sc in &mut s.scenarios {
        sc.metrics
            .insert("throughput_payload_bps".into(), stats(9.0e5, 0.01, 15));
        sc.metrics
            .insert("throughput_ethernet_bps".into(), stats(1.2e6, 0.01, 15));
        sc.upper_bound_bps = None;
    }
    let html = render_html(&s);
    assert!(html.contains("<th>Payload throughput (Mbit/s)</th>"));
    assert!(html.contains("<th>Ethernet throughput (Mbit/s)</th>"));
    assert!(!html.contains("(kbit/s)</th>"));
}
