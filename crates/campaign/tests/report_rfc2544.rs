//! The RFC 2544 part of the report, from trials in a results store: an
//! `[rfc2544]` campaign run against a device model with known limits (a
//! 7 000 packets/s cap with a 100-packet queue for 64 B frames behind
//! 10 Mbit/s links, nothing but the link for 1518 B), summarised from the
//! store and rendered. The tables must show what the model implies — the
//! cap within the search resolution, 100 % of the line rate for 1518 B,
//! loss 1 − cap/offered, the burst the queue absorbs — and the loss-vs-load
//! chart must draw one line per IP version and size through those points.

use wirebench_campaign::rfc2544::{simulate, Step, Test, TestFrame, TrialOutcome};
use wirebench_campaign::{Campaign, Store};
use wirebench_report::render_html;

const CAP: f64 = 7000.0;
const QUEUE: f64 = 100.0;
const TRIAL_S: f64 = 2.0;

const FILE: &str = "name = \"rfc-report\"
[testbed]
preset = \"router\"
link_rate = \"10mbit\"
[rfc2544]
frames = [64, 1518]
trial_s = 2
b2b_repeats = 2
b2b_longest_s = 0.1
";

/// The device: 64 B frames are forwarded at most CAP/s after a QUEUE-packet
/// queue; larger frames only meet the link.
fn device(_t: Test, spec: &TestFrame, step: Step) -> TrialOutcome {
    let Step::Trial { fps, frames, .. } = step else {
        panic!("no trial to run")
    };
    let fps = fps.expect("a link rate is known: every trial is paced");
    let cap = if spec.key() == "64" { CAP } else { f64::MAX };
    let (offered, secs) = match frames {
        Some(n) => (n, n as f64 / fps),
        None => ((fps * TRIAL_S).round() as u64, TRIAL_S),
    };
    let carried = if frames.is_some() {
        QUEUE + cap * secs
    } else {
        cap * secs
    };
    TrialOutcome {
        offered,
        sent: offered,
        received: (offered as f64).min(carried.floor()) as u64,
        duration_s: secs,
    }
}

fn render() -> String {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("r.db")).unwrap();
    let c = Campaign::parse(FILE, "rfc.toml").unwrap();
    let id = simulate(&c, &store, &mut device).unwrap();
    let s = wirebench_campaign::summarize(&store, &id.to_string()).unwrap();
    assert!(s.rfc2544.is_some(), "an [rfc2544] campaign has RFC results");
    render_html(&s)
}

/// The cells of the table `test`'s row that starts with `ip`, `frame`.
fn row(html: &str, test: &str, ip: &str, frame: &str) -> Vec<String> {
    let start = html
        .find(&format!("<table class=\"rfc2544\" data-table=\"{test}\">"))
        .unwrap_or_else(|| panic!("no {test} table"));
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    let lead = format!("<tr><td class=\"axis\">{ip}</td><td class=\"axis\">{frame}</td>");
    let r = table
        .find(&lead)
        .unwrap_or_else(|| panic!("{test}: no row {ip} {frame}"));
    let tr = &table[r..r + table[r..].find("</tr>").unwrap()];
    tr.split("<td")
        .skip(1)
        .map(|c| {
            let c = &c[c.find('>').unwrap() + 1..];
            c[..c.find("</td>").unwrap()].to_string()
        })
        .collect()
}

fn num(cell: &str) -> f64 {
    cell.parse()
        .unwrap_or_else(|_| panic!("{cell:?} is not a number"))
}

#[test]
fn tables_show_the_device_limits() {
    let html = render();
    let line64: f64 = 10e6 / (8.0 * 90.0); // 64 B is sent as 70 B: 90 B on the wire
    let line1518: f64 = 10e6 / (8.0 * 1538.0);
    // Throughput: the cap within the resolution (0.5 % of the line rate).
    let t = row(&html, "throughput", "IPv4", "64 (sent 70)");
    let fps = num(&t[2]);
    assert!(
        fps <= CAP && fps >= CAP - 0.005 * line64,
        "64 B found at {fps} fps, cap {CAP}"
    );
    assert!((num(&t[3]) - 100.0 * fps / line64).abs() < 0.01, "{t:?}");
    assert_eq!(num(&t[4]), line64.round(), "{t:?}");
    assert!(t[5].ends_with("bit/s") && t[8].ends_with("bit/s"), "{t:?}");
    let t = row(&html, "throughput", "IPv6", "1518");
    assert_eq!(t[3], "100.00", "1518 B passes at the line rate: {t:?}");
    assert_eq!(num(&t[2]), line1518.round());
    // Wire bit/s at the line rate is the link rate.
    assert_eq!(t[8], "10.00 Mbit/s", "{t:?}");
    // Latency at that rate: the model's constant delay, in µs.
    let l = row(&html, "latency", "IPv4", "64 (sent 70)");
    assert_eq!(l[3], "100.0", "{l:?}");
    // Frame loss: 1 − cap/offered at 100 % and 90 % of the line rate.
    let f = row(&html, "frame_loss", "IPv4", "64 (sent 70)");
    assert!(
        (num(&f[2]) - 100.0 * (1.0 - CAP / line64)).abs() < 0.01,
        "{f:?}"
    );
    assert!((num(&f[3]) - 100.0 * (1.0 - CAP / (0.9 * line64))).abs() < 0.01);
    assert_eq!(row(&html, "frame_loss", "IPv4", "1518")[2], "0.00");
    // Back-to-back: the queue fills at line rate − cap, so QUEUE / (1 − cap/line)
    // frames pass; the bisection stops within 0.5 % of the longest burst.
    let b = row(&html, "back_to_back", "IPv4", "64 (sent 70)");
    let model = QUEUE / (1.0 - CAP / line64);
    let longest = num(&b[6]);
    assert_eq!(longest, (line64 * 0.1).round());
    assert!(
        num(&b[2]) <= model && num(&b[2]) >= model - (0.005 * longest).round() - 1.0,
        "burst {} frames, model {model:.1}: {b:?}",
        b[2]
    );
    assert_eq!(b[5], "2", "repeats: {b:?}");
    // IPv4 and IPv6 side by side (RFC 5180 / RFC 8219): one row per size,
    // both stacks' throughput, % of line, IPv6 / IPv4 and latency.
    let start = html
        .find("<table class=\"rfc2544\" data-table=\"ip_side_by_side\">")
        .expect("a side-by-side table");
    let table = &html[start..start + html[start..].find("</table>").unwrap()];
    assert!(
        table.contains("<tr><td class=\"axis\">1518</td><td>813</td><td>813</td><td>100.00</td><td>100.00</td><td>100.0</td><td>100.0</td><td>100.0</td></tr>"),
        "{table}"
    );
    // 64 B: both stacks meet the same packet cap.
    assert!(table.contains("<tr><td class=\"axis\">64</td>"), "{table}");
    // The matrix tables of per-scenario means are not shown for search trials.
    assert!(!html.contains("<h3>Tables</h3>"));
    assert!(html.contains("<h3>RFC 2544 results</h3>"));
}

/// An IMIX search against a device that carries at most 5 Mbit/s of
/// Ethernet frames (bytes, not packets): the throughput is found at 5 Mbit/s
/// of the mix's mean frame, and the line rate is that of the mean frame.
#[test]
fn imix_found_at_the_devices_bit_rate() {
    const IMIX_FILE: &str = "name = \"rfc-imix\"
[testbed]
preset = \"router\"
link_rate = \"10mbit\"
[rfc2544]
ip = [4]
frames = [\"imix\"]
tests = [\"throughput\"]
trial_s = 2
";
    const ETH_BPS: f64 = 5e6;
    let mut bit_capped = |_t: Test, spec: &TestFrame, step: Step| {
        let Step::Trial { fps, .. } = step else {
            panic!("no trial to run")
        };
        let fps = fps.expect("paced");
        let offered = (fps * TRIAL_S).round() as u64;
        let carried = ETH_BPS * TRIAL_S / (8.0 * spec.mean_frame());
        TrialOutcome {
            offered,
            sent: offered,
            received: (offered as f64).min(carried.floor()) as u64,
            duration_s: TRIAL_S,
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("r.db")).unwrap();
    let c = Campaign::parse(IMIX_FILE, "imix.toml").unwrap();
    let id = simulate(&c, &store, &mut bit_capped).unwrap();
    let s = wirebench_campaign::summarize(&store, &id.to_string()).unwrap();
    let html = render_html(&s);
    // 7 × 70 (64 B grows to carry the probe header) + 4 × 594 + 1518, / 12.
    let mean: f64 = (7.0 * 70.0 + 4.0 * 594.0 + 1518.0) / 12.0;
    let t = row(
        &html,
        "throughput",
        "IPv4",
        "imix 64:7,594:4,1518:1 (mean 365.3)",
    );
    let line = 10e6 / (8.0 * (mean + 20.0));
    assert_eq!(
        num(&t[4]),
        line.round(),
        "line rate of the mean frame: {t:?}"
    );
    let fps = num(&t[2]);
    let want = ETH_BPS / (8.0 * mean);
    assert!(
        fps <= want + 0.5 && fps >= want - 0.005 * line - 0.5,
        "found {fps} fps, device {want:.1}: {t:?}"
    );
    // The Ethernet column is the device's bit rate (within the resolution).
    let eth: f64 = num(t[7].trim_end_matches(" Mbit/s"));
    assert!((4.95..=5.0).contains(&eth), "{t:?}");
}

#[test]
fn loss_chart_draws_one_line_per_size_through_the_points() {
    let html = render();
    let at = html
        .find("data-kind=\"frame_loss\"")
        .expect("a loss-vs-load chart");
    let fig = &html[at..at + html[at..].find("</figure>").unwrap()];
    let svg = &fig[fig.find("<svg").unwrap()..fig.find("</svg>").unwrap() + 6];
    let doc = roxmltree::Document::parse(svg).expect("the chart is well-formed SVG");
    let series: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("series"))
        .collect();
    let labels: Vec<&str> = series
        .iter()
        .filter_map(|n| n.attribute("data-series"))
        .collect();
    assert_eq!(
        labels,
        [
            "IPv4 64 (sent 70)",
            "IPv4 1518",
            "IPv6 64 (sent 90)",
            "IPv6 1518"
        ]
    );
    // IPv4 64 B: loss from 100 % down until two loads lose nothing; each
    // point's tooltip carries its load and loss in percent.
    let line64: f64 = 10e6 / (8.0 * 90.0);
    let tips: Vec<String> = series[0]
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text().map(String::from))
        .collect();
    let mut loads = Vec::new();
    for tip in &tips {
        // "IPv4 64 (sent 70): offered load (...) = 60: 16.0 %"
        let rest = &tip[tip.find(" = ").unwrap() + 3..];
        let (load, loss) = rest.split_once(": ").unwrap();
        let load: f64 = load.parse().unwrap();
        let loss: f64 = loss.trim_end_matches(" %").trim().parse().unwrap();
        let model = 100.0 * (1.0 - CAP / (load / 100.0 * line64)).max(0.0);
        assert!(
            (loss - model).abs() < 0.05,
            "{load} %: {loss} vs {model}: {tip}"
        );
        loads.push(load as u32);
    }
    // 7000 of 13 889 fps is 50.4 %: 50 % and 40 % lose nothing.
    assert_eq!(loads, [40, 50, 60, 70, 80, 90, 100], "{tips:?}");
    assert!(svg.contains("Frame loss against offered load (% of the line rate)"));
    // The throughput chart draws each size's line rate.
    let at = html.find("data-kind=\"throughput\"").unwrap();
    let fig = &html[at..at + html[at..].find("</figure>").unwrap()];
    assert!(fig.contains("class=\"bound\""), "line rates drawn");
}

#[test]
fn json_export_carries_the_results() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("r.db")).unwrap();
    let c = Campaign::parse(FILE, "rfc.toml").unwrap();
    let id = simulate(&c, &store, &mut device).unwrap();
    let s = wirebench_campaign::summarize(&store, &id.to_string()).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&wirebench_report::to_json(&[s], None).unwrap()).unwrap();
    let sizes = j["campaigns"][0]["rfc2544"]["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 4);
    assert_eq!(sizes[0]["spec"]["frame"], 70);
}
