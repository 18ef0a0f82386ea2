//! Comparing operating systems: a stored campaign whose `sender` axis picks
//! a Windows or a Linux node sending to one Linux receiver. The analysis
//! reads the system at each end from the result documents and the report
//! draws one series per pair of systems ("Windows → Linux" against
//! "Linux → Linux"), not per node name.

use std::collections::BTreeMap;
use wirebench_campaign::campaign::Campaign;
use wirebench_campaign::store::{NewCampaign, NewRun, RunStatus, Store};
use wirebench_campaign::summarize;
use wirebench_report::plan::layout;
use wirebench_report::render_html;
use wirebench_schema::summary::Environment;
use wirebench_stats::result::{FlowResult, HostInfo, ResultDoc};

const FILE: &str = r#"
name = "systems"
repetitions = 2
[hosts]
[[hosts.node]]
name = "win"
local = true
role = "sender"
to = "rx"
[[hosts.node]]
name = "lin"
local = true
role = "sender"
to = "rx"
[[hosts.node]]
name = "rx"
local = true
role = "receiver"
ipv4 = "127.0.0.1"
[matrix]
sender = ["win", "lin"]
payload = [64, 512]
pps = [1000]
"#;

fn doc(sender_os: &str, delay: f64) -> serde_json::Value {
    let mut f = FlowResult::default();
    f.throughput_bps.payload = 1e6;
    f.delay_s.mean = delay;
    f.delay_s.p99 = delay;
    f.received.counts.packets = 1000;
    f.received.counts.lost = Some(0);
    f.sent.packets = 1000;
    let mut d = ResultDoc::with_flows(vec![f]);
    let host = |os: &str| HostInfo {
        os: os.into(),
        kernel: "k".into(),
        cpus: 2,
        ..HostInfo::default()
    };
    d.host = host(sender_os);
    d.receiver.host = host("linux");
    serde_json::to_value(d).unwrap()
}

/// A store holding the campaign with `reps` runs per scenario, the sender
/// node's system given by `os_of(node)`.
fn stored(dir: &std::path::Path, reps: u32, os_of: fn(&str) -> &'static str) -> Store {
    let store = Store::open(dir.join("s.db")).unwrap();
    let c = Campaign::parse(FILE, "s.toml").unwrap();
    let campaign = NewCampaign {
        name: &c.name,
        origin: "s.toml",
        file_text: FILE,
        started_at: "now",
        environment: &Environment::default(),
        planned_runs: c.planned_runs(),
        quick: false,
    };
    let cid = store.create_campaign(&campaign).unwrap();
    for s in c.expand() {
        let os = os_of(s.settings.sender.as_deref().unwrap_or(""));
        for rep in 0..reps {
            let d = doc(os, 0.001 * f64::from(rep + 1));
            let run = NewRun {
                campaign_id: cid,
                scenario_key: &s.key,
                axes: &s.axes,
                repetition: rep,
                status: RunStatus::Ok,
                result: Some(&d),
                counters: None,
                command: "test",
                error: None,
                started_at: "t0",
                ended_at: "t1",
            };
            store.record_run(&run).unwrap();
        }
    }
    store
}

#[test]
fn report_groups_runs_by_the_systems_at_each_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = stored(dir.path(), 2, |node| match node {
        "win" => "windows",
        _ => "linux",
    });
    let sum = summarize(&store, "systems").unwrap();
    assert_eq!(sum.scenarios.len(), 4);
    let mut seen = BTreeMap::new();
    for sc in &sum.scenarios {
        let sys = sc.axes.get("systems").expect("systems axis").clone();
        // The node name says nothing the systems do not: left out.
        assert!(!sc.axes.contains_key("sender"), "{:?}", sc.axes);
        *seen.entry(sys).or_insert(0) += 1;
    }
    assert_eq!(
        seen,
        [
            ("Linux → Linux".to_string(), 2),
            ("Windows → Linux".to_string(), 2)
        ]
        .into()
    );
    let lay = layout(&sum);
    assert_eq!(lay.x_axis.as_deref(), Some("payload"));
    let mut labels = lay.series_labels.clone();
    labels.sort();
    assert_eq!(labels, ["Linux → Linux", "Windows → Linux"]);
    let html = render_html(&[sum][..]);
    assert!(
        html.contains("Windows → Linux"),
        "series named in the report"
    );
}

#[test]
fn an_all_linux_campaign_keeps_its_axes() {
    let dir = tempfile::tempdir().unwrap();
    let store = stored(dir.path(), 1, |_| "linux");
    let sum = summarize(&store, "systems").unwrap();
    assert!(sum
        .scenarios
        .iter()
        .all(|sc| !sc.axes.contains_key("systems") && sc.axes.contains_key("sender")));
}
