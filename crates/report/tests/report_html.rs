//! The HTML report: structure (one chart per family, one series per
//! scenario-series), self-containment, escaping and determinism.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use wirebench_report::render_html;
use wirebench_schema::summary::CampaignSummary;

/// Every `<figure class="chart" ...>` element's opening tag and inner text.
fn figures(html: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("<figure class=\"chart\"") {
        let after = &rest[i..];
        let tag_end = after.find('>').unwrap();
        let end = after.find("</figure>").unwrap();
        out.push((
            after[..tag_end + 1].to_string(),
            after[tag_end + 1..end].to_string(),
        ));
        rest = &after[end..];
    }
    out
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let pat = format!("{name}=\"");
    let i = tag.find(&pat)? + pat.len();
    let j = tag[i..].find('"')? + i;
    Some(tag[i..j].to_string())
}

/// Scenario-series computed independently of the library: distinct values of
/// all axes except the x axis (constant axes do not split series).
fn expected_series(s: &CampaignSummary, x: &str) -> usize {
    expected_series_with(s, x, None)
}

/// Same, counting only the scenarios that carry `metric`.
fn expected_series_with(s: &CampaignSummary, x: &str, metric: Option<&str>) -> usize {
    s.scenarios
        .iter()
        .filter(|sc| metric.is_none_or(|m| sc.metrics.contains_key(m)))
        .map(|sc| {
            sc.axes
                .iter()
                .filter(|(k, _)| k.as_str() != x)
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<BTreeSet<_>>()
        .len()
}

fn families_present(s: &CampaignSummary) -> BTreeSet<String> {
    s.metrics
        .iter()
        .filter(|m| s.scenarios.iter().any(|sc| sc.metrics.contains_key(&m.key)))
        .map(|m| {
            serde_json::to_value(m.family)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Checks one campaign's charts: one figure per family, each SVG well-formed
/// XML, each panel holding exactly the expected series with one marker (line)
/// or bar per scenario that has the metric.
fn check_charts(html: &str, s: &CampaignSummary, x: &str, bars: bool) {
    let figs = figures(html);
    let fams: Vec<String> = figs
        .iter()
        .map(|(t, _)| attr(t, "data-family").unwrap())
        .collect();
    let uniq: BTreeSet<String> = fams.iter().cloned().collect();
    assert_eq!(uniq.len(), fams.len(), "one chart per family, got {fams:?}");
    assert_eq!(uniq, families_present(s));
    let want = expected_series(s, x);
    for (tag, inner) in &figs {
        let fam = attr(tag, "data-family").unwrap();
        assert_eq!(
            attr(tag, "data-kind").unwrap(),
            if bars { "bars" } else { "line" }
        );
        let a = inner.find("<svg").unwrap();
        let b = inner.rfind("</svg>").unwrap() + "</svg>".len();
        let doc = roxmltree::Document::parse(&inner[a..b])
            .unwrap_or_else(|e| panic!("{fam}: SVG not XML: {e}"));
        let panels: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some("panel"))
            .collect();
        assert!(!panels.is_empty(), "{fam} has no panel");
        if fam == "cpu" || fam == "tcp" {
            // Small multiples: one panel per metric of the family.
            assert_eq!(
                panels.len(),
                s.metrics
                    .iter()
                    .filter(|m| m.key.starts_with(fam.as_str()))
                    .count()
            );
        } else {
            assert_eq!(panels.len(), 1, "{fam}: one panel");
        }
        for p in panels {
            let key = p.attribute("data-metric").unwrap();
            let series: Vec<_> = p
                .descendants()
                .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some("series"))
                .collect();
            let want = expected_series_with(s, x, Some(key));
            assert_eq!(series.len(), want, "{fam}/{key}: series count");
            let labels: BTreeSet<_> = series
                .iter()
                .map(|n| n.attribute("data-series").unwrap())
                .collect();
            assert_eq!(labels.len(), want, "series labels distinct");
            // Every scenario with this metric is one point (marker title or bar).
            let with_metric = s
                .scenarios
                .iter()
                .filter(|sc| sc.metrics.contains_key(key))
                .count();
            let points: usize = series
                .iter()
                .map(|n| n.descendants().filter(|d| d.has_tag_name("title")).count())
                .sum();
            assert_eq!(points, with_metric, "{fam}/{key}: points");
        }
        let bound_groups = doc
            .descendants()
            .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some("bound"))
            .count();
        if fam == "throughput" && s.scenarios.iter().any(|sc| sc.upper_bound_bps.is_some()) {
            assert_eq!(bound_groups, want, "upper bound drawn per series");
        } else {
            assert_eq!(bound_groups, 0, "{fam}: no bound");
        }
    }
}

#[test]
fn line_charts_one_per_family_one_series_per_scenario_series() {
    let s = common::s5_like(common::S5_FILE);
    let html = render_html(&s);
    // ip × transport; the constant rate axis does not split series.
    assert_eq!(expected_series(&s, "payload"), 4);
    check_charts(&html, &s, "payload", false);
    // The RTT chart spans orders of magnitude and goes log; throughput stays linear.
    assert!(html.contains(r#"data-metric="rtt_mean_s" data-scale="log""#));
    assert!(html.contains(r#"data-metric="throughput_payload_bps" data-scale="linear""#));
    // Units in human scale on the axes.
    assert!(html.contains("Payload throughput (Mbit/s)"));
    assert!(html.contains("(ms, log scale)"));
    assert!(html.contains("Loss ratio (%)"));
    // Loss is not all zero in the fixture; without it the panel says so.
    assert!(!html.contains("every value is 0"));
    let mut z = s.clone();
    for sc in &mut z.scenarios {
        let st = sc.metrics.get_mut("loss_ratio").unwrap();
        (st.mean, st.ci95) = (0.0, 0.0);
    }
    assert_eq!(render_html(&z).matches("every value is 0").count(), 1);
    // Payload sizes labelled as integers at each measured size.
    assert!(html.contains(">1408</text>") && !html.contains("1408.0"));
}

#[test]
fn categorical_axes_give_grouped_bars() {
    let s = common::apps_like();
    let html = render_html(&s);
    assert_eq!(expected_series(&s, "app"), 2);
    check_charts(&html, &s, "app", true);
    for app in common::APPS {
        assert!(
            html.contains(&format!(">{app}</text>")),
            "category {app} labelled"
        );
    }
    // Issue #10 bug 5: the log rule of docs/reports.md holds for bars.
    // These delays span 1.3x: linear. S5's applications spanned 3.5 us
    // (an idle flow) to 403 ms (a saturated one): log, said in the label.
    let delay = r#"data-metric="delay_mean_s" data-scale="#;
    assert!(html.contains(&format!("{delay}\"linear\"")), "{html}");
    let mut s = s;
    for (i, sc) in s.scenarios.iter_mut().enumerate() {
        let mean = if i == 0 { 3.5e-6 } else { 0.403 };
        sc.metrics
            .insert("delay_mean_s".into(), common::stats(mean, 0.04, 20));
    }
    let html = render_html(&s);
    assert!(html.contains(&format!("{delay}\"log\"")), "{html}");
    assert!(html.contains("log scale"));
}

#[test]
fn tables_show_ci_baseline_change_cv_flag_and_bound_share() {
    let s = common::s5_like(common::S5_FILE);
    let html = render_html(&s);
    assert!(html.contains("<th>Δ</th>"));
    assert!(html.contains("Measured / bound"));
    // The one noisy scenario is flagged visibly, and only it.
    let flagged = html
        .matches("<span class=\"cvflag\">cv 18 %</span>")
        .count();
    assert_eq!(flagged, 1);
    assert_eq!(html.matches("class=\"cvw\"").count(), 1);
    // Baseline rows (ip=4) marked: 26 scenarios in each of the 6 family tables.
    assert_eq!(html.matches("<tr class=\"baseline\">").count(), 26 * 6);
    // IPv6 TCP 1536 B RTT is 20 % below IPv4 in the fixture.
    assert!(html.contains("-20.0 %"));
    // Measured / bound for ip 4 udp 1408: 0.998 of the bound (±0.2 % noise).
    let sc = s
        .scenarios
        .iter()
        .find(|x| x.key == "ip=4,transport=udp,payload=1408,rate=100mbit")
        .unwrap();
    let share = sc.metrics["throughput_payload_bps"].mean / sc.upper_bound_bps.unwrap() * 100.0;
    assert!(
        html.contains(&format!("<td>{share:.1} %</td>")),
        "share {share:.1}"
    );
    // Environment and notes.
    assert!(html.contains("Linux 6.1.0-27-amd64"));
    assert!(html.contains("router forwarding appears as host softirq"));
}

#[test]
fn self_contained_no_external_references() {
    let all = vec![common::s5_like(common::S5_FILE), common::apps_like()];
    let html = render_html(&all);
    let lower = html.to_ascii_lowercase();
    for bad in [
        "http://", "https://", "src=", "<link", "@import", "url(http", "<script", "<iframe", "<img",
    ] {
        assert!(!lower.contains(bad), "report contains {bad}");
    }
    // The only hrefs are in-page anchors and each chart's own SVG (a data:
    // URL that parses as a standalone SVG), the only url() are clip paths.
    let mut downloads = 0;
    for (i, _) in lower.match_indices("href=") {
        const DATA: &str = "href=\"data:image/svg+xml;base64,";
        if lower[i..].starts_with(DATA) {
            let b64: String = html[i + DATA.len()..]
                .chars()
                .take_while(|c| *c != '"')
                .collect();
            let svg = String::from_utf8(decode_base64(&b64)).unwrap();
            let doc = roxmltree::Document::parse(&svg).expect("standalone SVG parses");
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            assert_eq!(
                doc.root_element().tag_name().namespace(),
                Some("http://www.w3.org/2000/svg")
            );
            downloads += 1;
            continue;
        }
        assert!(lower[i..].starts_with("href=\"#"), "non-local href at {i}");
    }
    assert_eq!(
        downloads,
        html.matches("<figure class=\"chart\" data-family").count(),
        "every chart has its download"
    );
    for (i, _) in lower.match_indices("url(") {
        assert!(lower[i..].starts_with("url(#"), "non-local url() at {i}");
    }
    // Two campaigns: both sections and a table of contents.
    assert_eq!(html.matches("<section class=\"campaign\"").count(), 2);
    assert!(html.contains("<a href=\"#c2\">s1-applications</a>"));
}

#[test]
fn campaign_file_and_every_string_is_escaped() {
    let file = "name = \"evil\"\n# </pre><script>alert('x')</script> & <b>bold</b>\n";
    let mut s = common::s5_like(file);
    s.name = "<img onerror=x>".into();
    s.notes.push("<script>n()</script>".into());
    s.environment
        .extra
        .insert("<k>".into(), "\"v\" & <w>".into());
    s.scenarios[0]
        .axes
        .insert("transport".into(), "udp<x>".into());
    s.metrics[0].label = "Payload <i>".into();
    let html = render_html(&s);
    assert!(!html.contains("<script"), "script tag leaked");
    assert!(!html.contains("<img"), "img tag leaked");
    assert!(!html.contains("<b>bold"));
    assert!(!html.contains("udp<x>") && !html.contains("<i>"));
    assert!(html.contains(
        "# &lt;/pre&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;"
    ));
    assert!(html.contains("&lt;script&gt;n()&lt;/script&gt;"));
    // The campaign file round-trips through the <pre> exactly once unescaped.
    let i =
        html.find("<pre class=\"campaign-file\">").unwrap() + "<pre class=\"campaign-file\">".len();
    let j = html[i..].find("</pre>").unwrap() + i;
    let back = html[i..j]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    assert_eq!(back, file);
    // The SVGs stay well-formed with hostile labels.
    for (_, inner) in figures(&html) {
        let a = inner.find("<svg").unwrap();
        let b = inner.rfind("</svg>").unwrap() + 6;
        roxmltree::Document::parse(&inner[a..b]).unwrap();
    }
}

#[test]
fn deterministic_output() {
    let all = vec![common::s5_like(common::S5_FILE), common::apps_like()];
    let a = render_html(&all);
    let b = render_html(&all.clone());
    assert_eq!(a, b);
    // Single-summary convenience matches a one-element slice.
    assert_eq!(render_html(&all[0]), render_html(&all[..1]));
}

#[test]
fn degenerate_inputs_render() {
    // No scenarios, one scenario, missing metric values, NaN: still a valid page.
    let mut s = common::s5_like("");
    s.scenarios.truncate(1);
    let html = render_html(&s);
    assert!(html.contains("</html>"));
    let mut s = common::apps_like();
    s.scenarios.clear();
    let html = render_html(&s);
    assert_eq!(figures(&html).len(), 0);
    let mut s = common::s5_like("");
    for sc in &mut s.scenarios {
        sc.metrics.get_mut("loss_ratio").unwrap().ci95 = f64::NAN;
        sc.metrics.remove("rtt_mean_s");
    }
    let html = render_html(&s);
    assert!(!html.contains("NaN"));
    let empty: Vec<CampaignSummary> = vec![];
    assert!(render_html(&empty).contains("No campaign"));
    let _ = BTreeMap::<u8, u8>::new();
}

/// A throughput above its physical bound by more than its CI is marked in
/// the table, not printed silently; one within its uncertainty is not.
#[test]
fn above_bound_is_marked() {
    let mut s = common::s5_like("x");
    let html = render_html(&s);
    assert!(!html.contains("(above bound)"));
    let sc = &mut s.scenarios[0];
    let b = sc.upper_bound_bps.unwrap();
    sc.metrics.insert(
        "throughput_payload_bps".into(),
        common::stats(1.05 * b, 0.001, 15),
    );
    let html = render_html(&s);
    assert_eq!(html.matches("(above bound)").count(), 1, "one cell");
    assert!(html.contains("<td class=\"above\""));
}

/// Issue #10 item 4: a run whose own bound check fired (`total.above_bound`,
/// counted per scenario as `runs_above_bound`) marks its scenario's row in
/// every table and its throughput in the side-by-side tables, even when the
/// scenario's mean lies within the bound.
#[test]
fn runs_above_their_own_bound_mark_the_row() {
    let mut s = common::s5_like("x");
    let i = 3;
    let key = s.scenarios[i].key.clone();
    let mark = |html: &str| html.matches("(2 above bound)").count();
    assert_eq!(mark(&render_html(&s)), 0);
    s.scenarios[i].runs_above_bound = 2;
    assert!(s.scenarios[i].above_bound());
    let html = render_html(&s);
    // The runs cell of every family table the scenario has a row in.
    let tables = html.matches("<th>runs</th>").count();
    assert!(tables >= 3, "{tables} tables");
    assert_eq!(mark(&html), tables, "one marked runs cell per table");
    assert_eq!(
        html.matches("(2 runs above bound)").count(),
        1,
        "bound cell"
    );
    // Only that scenario's row.
    let marked_rows: Vec<&str> = html
        .split("<tr")
        .filter(|r| r.contains("above bound)"))
        .collect();
    assert!(marked_rows.len() >= tables, "{}", marked_rows.len());
    let axes = &s.scenarios[i].axes;
    for r in &marked_rows {
        for v in [&axes["ip"], &axes["transport"], &axes["payload"]] {
            assert!(
                r.contains(&format!("<td class=\"axis\">{v}</td>")),
                "{key}: {r}"
            );
        }
    }
    // Side-by-side tables: that scenario's throughput cells are marked.
    s.report.columns = Some("ip".into());
    let html = render_html(&s);
    assert!(html.contains("<table class=\"wide\">"));
    let wide = html.matches("(above bound)</td>").count();
    assert!(wide >= 1, "no marked throughput cell in {html}");
    s.scenarios[i].runs_above_bound = 0;
    assert_eq!(render_html(&s).matches("(above bound)</td>").count(), 0);
}

/// Δ colours follow each metric's direction in the metric table, not its
/// family: more packets received is better, more packets lost is worse
/// (both are in the loss family; the report once coloured both red).
#[test]
fn change_colour_follows_the_metric_table() {
    use wirebench_schema::summary::{MetricStats, ScenarioSummary};
    let render_one = |key: &str| {
        let sc = |name: &str, mean: f64, pct: f64| ScenarioSummary {
            key: format!("ip={name}"),
            axes: BTreeMap::from([("ip".to_string(), name.to_string())]),
            runs_ok: 5,
            runs_planned: 5,
            metrics: BTreeMap::from([(
                key.to_string(),
                MetricStats {
                    pct_vs_baseline: Some(pct),
                    ..common::stats(mean, 0.01, 5)
                },
            )]),
            upper_bound_bps: None,
            runs_above_bound: 0,
            nodes: Default::default(),
            hops: Default::default(),
            series: None,
            dist: None,
        };
        let mut s = common::apps_like();
        s.axes = vec!["ip".into()];
        s.x_axis = None;
        s.baseline = Some("ip=4".into());
        s.metrics = wirebench_schema::metrics::metric_catalogue()
            .into_iter()
            .filter(|m| m.key == key)
            .collect();
        s.scenarios = vec![sc("4", 1000.0, 0.0), sc("6", 1100.0, 10.0)];
        render_html(&s)
    };
    let received = render_one("packets_received");
    assert!(
        received.contains("<td class=\"pos\">+10.0 %</td>"),
        "{received}"
    );
    assert!(!received.contains("class=\"neg\""));
    let lost = render_one("lost_packets");
    assert!(lost.contains("<td class=\"neg\">+10.0 %</td>"), "{lost}");
    assert!(!lost.contains("class=\"pos\""));
}

#[test]
fn nodes_table_lists_every_hop_in_path_order_with_its_cpu_and_drops() {
    use wirebench_schema::summary::{MetricStats, NodeFigures};
    let stats = |mean: f64, ci95: f64| MetricStats {
        n: 2,
        mean,
        sd: 0.0,
        median: mean,
        min: mean,
        max: mean,
        ci95,
        cv: 0.0,
        cv_warning: false,
        pct_vs_baseline: None,
    };
    let fig = |role: &str, busy: f64, drops: f64| NodeFigures {
        role: role.into(),
        cpu_busy: Some(stats(busy, 0.01)),
        cpu_softirq: Some(stats(busy / 2.0, 0.0)),
        drops: Some(stats(drops, 0.0)),
        links: if role == "router" {
            vec!["eth0 mtu 9000, qdisc tbf, gro on gso on tso on".into()]
        } else {
            vec![]
        },
    };
    let mut s = common::apps_like();
    let sc = &mut s.scenarios[0];
    sc.nodes = [
        ("b".to_string(), fig("receiver", 0.3, -0.0)),
        ("r2".to_string(), fig("router", 0.7, 200.0)),
        ("a".to_string(), fig("sender", 0.5, 0.0)),
        ("r1".to_string(), fig("router", 0.15, 0.0)),
    ]
    .into();
    let html = render_html(&s);
    let at = |k: &str| html.find(&format!("data-node=\"{k}\"")).unwrap();
    assert!(html.contains("Nodes: CPU and drops per hop"));
    assert!(at("a") < at("r1") && at("r1") < at("r2") && at("r2") < at("b"));
    let r2 = &html[at("r2")..];
    let r2 = &r2[..r2.find("</tr>").unwrap()];
    assert!(
        r2.contains("70.0 ± 1.0 %") && r2.contains("35.0 %") && r2.contains(">200<"),
        "{r2}"
    );
    // The links as the router read them back during its runs.
    assert!(
        r2.ends_with("<td class=\"axis\">eth0 mtu 9000, qdisc tbf, gro on gso on tso on</td>"),
        "{r2}"
    );
    let b = &html[at("b")..];
    assert!(
        b[..b.find("</tr>").unwrap()].ends_with("<td>0</td><td class=\"axis\">–</td>"),
        "{b}"
    );
    // Real hosts are not called the test-bed; the emulated test-bed is.
    assert!(html.contains("Each node is its own host"), "{html}");
    let mut bed = s.clone();
    bed.environment.topology = "test-bed preset router, a -> b".into();
    assert!(render_html(&bed).contains("every node shares one kernel"));
    // A share whose n = 2 interval leaves 0–100 % prints the interval
    // cut at the range, never "66 ± 593 %".
    s.scenarios[0].nodes.get_mut("a").unwrap().cpu_busy = Some(stats(0.66, 5.93));
    let html = render_html(&s);
    let a = &html[html.find("data-node=\"a\"").unwrap()..];
    let a = &a[..a.find("</tr>").unwrap()];
    assert!(a.contains("<td>66.0 [0–100] %</td>"), "{a}");
    assert!(!a.contains("593"), "{a}");
    // Campaigns without agents have no such table.
    assert!(!render_html(&common::apps_like()).contains("Nodes: CPU"));
}

/// Runs over emulated links get the per-hop split: a row per hop in the
/// order given, its three means in µs and a bar whose parts are their
/// shares; campaigns without hops have no such table.
#[test]
fn hops_table_splits_each_hops_time() {
    use wirebench_schema::summary::{HopFigures, MetricStats};
    let stats = |mean: f64| MetricStats {
        n: 3,
        mean,
        sd: 0.0,
        median: mean,
        min: mean,
        max: mean,
        ci95: 0.0,
        cv: 0.0,
        cv_warning: false,
        pct_vs_baseline: None,
    };
    let hop = |from: &str, to: &str, q: f64, ser: f64, p: f64| HopFigures {
        from: from.into(),
        to: to.into(),
        queueing_s: Some(stats(q)),
        serialisation_s: Some(stats(ser)),
        propagation_s: Some(stats(p)),
    };
    assert!(!render_html(&common::apps_like()).contains("Where time went"));
    let mut s = common::apps_like();
    s.scenarios[0].hops = vec![
        hop("a", "r1", 0.0, 123.04e-6, 0.0),
        hop("r1", "b", 25e-6, 25e-6, 50e-6),
    ];
    let html = render_html(&s);
    assert!(html.contains("<h4>Where time went, per hop</h4>"), "{html}");
    let row = |h: &str| {
        let r = &html[html.find(&format!("<td class=\"axis\">{h}</td>")).unwrap()..];
        r[..r.find("</tr>").unwrap()].to_string()
    };
    let a = row("a→r1");
    assert!(a.contains("<td>123 µs</td>"), "{a}");
    assert!(a.contains("width:0.0%;background:#d95f02"), "{a}");
    assert!(a.contains("width:100.0%;background:#1b9e77"), "{a}");
    let b = row("r1→b");
    assert!(
        b.contains("width:25.0%;background:#d95f02")
            && b.contains("width:25.0%;background:#1b9e77")
            && b.contains("width:50.0%;background:#7570b3"),
        "{b}"
    );
    assert!(html.find("a→r1").unwrap() < html.find("r1→b").unwrap());
}

/// Scenarios with delay and |IPDV| histograms get the distribution
/// section: a CDF chart per quantity with a line per scenario, a delay
/// histogram per scenario and the percentile table; without them, none.
#[test]
fn distributions_are_charted() {
    use wirebench_schema::dist::Histogram;
    use wirebench_schema::dist::ScenarioDist;
    let mut s = common::apps_like();
    assert!(!render_html(&s).contains("<h3>Distributions</h3>"));
    let n = s.scenarios.len();
    for (i, sc) in s.scenarios.iter_mut().enumerate() {
        // Delays (i+1)·1..=1000 µs: p50 = (i+1)·500 µs.
        let k = i as i64 + 1;
        sc.dist = Some(ScenarioDist {
            runs: 3,
            delay: Some(Histogram::from_counts(
                7,
                (1..=1000).map(|v| (v * 1000 * k, 1)),
            )),
            ipdv: Some(Histogram::from_counts(7, (1..=100).map(|v| (v * 100, 1)))),
        });
    }
    let html = render_html(&s);
    assert!(html.contains("<h3>Distributions</h3>"), "section");
    assert_eq!(html.matches("<svg class=\"cdf\"").count(), 2);
    let cdf = &html[html.find("<svg class=\"cdf\"").unwrap()..];
    let cdf = &cdf[..cdf.find("</svg>").unwrap()];
    assert_eq!(cdf.matches("<polyline").count(), n, "a line per scenario");
    assert_eq!(html.matches("<svg class=\"hist\"").count(), n);
    // Scenario 1's median: 500 µs, reported as the top of its bucket on
    // the 2^-7 grid (499 712..=501 759 ns, 2048 ns wide).
    let table = &html[html.find("<table class=\"percentiles\"").unwrap()..];
    assert!(table.contains("<td>502 µs</td>"), "p50 cell: {table}");
}

/// Issue #12 item 2: scenarios whose runs stored intervals get the "Over
/// time" section: per scenario a throughput, delay, jitter and loss chart,
/// each the repetitions' mean as a line over their min–max band; without
/// series, no section.
#[test]
fn series_over_time_are_charted_per_scenario() {
    let mut s = common::apps_like();
    assert!(!render_html(&s).contains("<h3>Over time</h3>"));
    s.scenarios[0].series = Some(series(10, 0.2, 3));
    let html = render_html(&s);
    assert!(html.contains("<h3>Over time</h3>"), "section");
    assert!(!html.contains("TCP cwnd"), "no TCP part without TCP flows");
    assert!(html.contains("3 runs, 200 ms intervals"), "legend");
    assert_eq!(html.matches("<svg class=\"series\"").count(), 4);
    for title in ["Throughput", "Delay", "Jitter", "Packets lost"] {
        let at = html
            .find(&format!("aria-label=\"{title}\""))
            .unwrap_or_else(|| panic!("no {title} chart"));
        let chart = &html[at..];
        let chart = &chart[..chart.find("</svg>").unwrap()];
        assert_eq!(chart.matches("<polyline").count(), 1, "{title}: one line");
        assert_eq!(
            chart.matches("fill-opacity").count(),
            1,
            "{title}: one band"
        );
    }
}

/// `n` intervals rising from `base` by 1, the band ±0.5 around them.
fn band(n: usize, base: f64) -> wirebench_schema::series::Band {
    let at = |d: f64| (0..n).map(|i| Some(base + i as f64 + d)).collect();
    wirebench_schema::series::Band {
        mean: at(0.0),
        min: at(-0.5),
        max: at(0.5),
    }
}

/// A scenario series of `n` intervals of `interval_s` over `runs` runs,
/// without TCP flows.
fn series(n: usize, interval_s: f64, runs: usize) -> wirebench_schema::series::ScenarioSeries {
    wirebench_schema::series::ScenarioSeries {
        interval_s,
        runs,
        throughput_bps: band(n, 1e6),
        delay_s: band(n, 1e-3),
        jitter_s: band(n, 1e-4),
        lost: band(n, 0.0),
        tcp: None,
    }
}

/// A scenario with TCP flows: their TCP_INFO charts beside the four (the
/// pacing rate has no readings and is left out) and the stalls table,
/// naming the flow that stalled and its state.
#[test]
fn tcp_flows_over_time_show_their_spread_and_stalls() {
    use wirebench_schema::series::{Band, ScenarioSeries, Stall, TcpSeries};
    let mut s = common::apps_like();
    let band = |base| band(4, base);
    s.scenarios[0].series = Some(ScenarioSeries {
        tcp: Some(TcpSeries {
            flows: 60,
            cwnd_bytes: band(1e5),
            srtt_s: band(1e-3),
            pacing_rate_bps: Band {
                mean: vec![None; 4],
                min: vec![None; 4],
                max: vec![None; 4],
            },
            delivery_rate_bps: band(1e8),
            retransmits: band(10.0),
            stalled: band(1.0),
            stalls: vec![Stall {
                run: 2,
                flow: 17,
                t_s: 1.5,
                intervals: 3,
                cwnd_bytes: 2896,
                srtt_s: 0.2125,
                retransmits: 41,
            }],
        }),
        ..series(4, 0.5, 1)
    });
    let html = render_html(&s);
    assert_eq!(html.matches("<svg class=\"series\"").count(), 4 + 5);
    for title in [
        "TCP cwnd",
        "TCP srtt",
        "TCP delivery rate",
        "TCP retransmits",
        "TCP flows stalled",
    ] {
        assert!(html.contains(&format!("aria-label=\"{title}\"")), "{title}");
    }
    assert!(!html.contains("TCP pacing rate"));
    assert!(html.contains("60 flows per run"));
    assert!(
        html.contains("<tr><td>2</td><td>17</td><td>1.50</td><td>1.50</td><td>2896</td><td>212</td><td>41</td></tr>"),
        "{}",
        &html[html.find("<table class=\"stalls\"").unwrap_or(0)..]
    );
}

fn decode_base64(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = A.iter().position(|a| *a == c).expect("base64 digit") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
