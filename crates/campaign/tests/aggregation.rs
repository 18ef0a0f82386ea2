//! Aggregation from stored runs matches hand-computed statistics, and the
//! store keeps (campaign, scenario, repetition) unique.

use serde_json::json;
use std::collections::BTreeMap;
use wirebench_campaign::campaign::Campaign;
use wirebench_campaign::store::{NewCampaign, NewRun, RunStatus, Store};
use wirebench_campaign::summarize;
use wirebench_campaign::summary::Environment;
use wirebench_stats::result::{CpuTime, FlowResult, ResultDoc};

const FILE: &str = r#"
name = "agg"
repetitions = 3
baseline = "ip=4"
[testbed]
preset = "router"
mtu = 1500
link_rate = "100mbit"
[matrix]
ip = [4, 6]
transport = ["udp"]
payload = [1408]
"#;

/// A run of two flows: payload throughput split evenly, the given mean
/// delays (p99 twice the mean) and received packets; flow 1 lost 10.
fn doc(payload_bps: f64, delay: [f64; 2], pkts: [u64; 2]) -> serde_json::Value {
    let flow = |i: usize, lost: u64, not_sent: u64| {
        let mut f = FlowResult::default();
        f.throughput_bps.payload = payload_bps / 2.0;
        f.delay_s.mean = delay[i];
        f.delay_s.p99 = delay[i] * 2.0;
        f.received.counts.packets = pkts[i];
        f.received.counts.lost = Some(lost);
        f.sent.packets = pkts[i] + lost;
        f.sent.not_sent = not_sent;
        f
    };
    let mut d = ResultDoc::with_flows(vec![flow(0, 0, 1), flow(1, 10, 0)]);
    d.cpu.sender = CpuTime {
        user: 0.25,
        system: 0.5,
    };
    serde_json::to_value(d).unwrap()
}

fn put(store: &Store, cid: i64, key: &str, ip: &str, rep: u32, d: &serde_json::Value) -> bool {
    let counters = json!({"nodes": {}, "drop_sites": [
        {"node": "r1", "iface": "eth1", "kind": "qdisc", "count": rep + 1},
        {"node": "a", "iface": "eth0", "kind": "tx", "count": 0}
    ]});
    let axes: BTreeMap<String, String> = [("ip", ip), ("transport", "udp"), ("payload", "1408")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    store
        .record_run(&NewRun {
            campaign_id: cid,
            scenario_key: key,
            axes: &axes,
            repetition: rep,
            status: RunStatus::Ok,
            result: Some(d),
            counters: Some(&counters),
            command: "test",
            error: None,
            started_at: "t0",
            ended_at: "t1",
        })
        .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn hand_computed_mean_sd_ci_and_pct() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("w.db")).unwrap();
    let c = Campaign::parse(FILE, "agg.toml").unwrap();
    let env = Environment::default();
    let cid = store
        .create_campaign(&NewCampaign {
            name: &c.name,
            origin: "agg.toml",
            file_text: FILE,
            started_at: "now",
            environment: &env,
            planned_runs: c.planned_runs(),
            quick: false,
        })
        .unwrap();
    let k4 = "ip=4,transport=udp,payload=1408";
    let k6 = "ip=6,transport=udp,payload=1408";
    for (i, v) in [100.0, 110.0, 120.0].iter().enumerate() {
        assert!(put(
            &store,
            cid,
            k4,
            "4",
            i as u32,
            &doc(*v, [0.001, 0.003], [100, 300])
        ));
    }
    for (i, v) in [90.0, 95.0, 100.0].iter().enumerate() {
        assert!(put(
            &store,
            cid,
            k6,
            "6",
            i as u32,
            &doc(*v, [0.001, 0.003], [100, 300])
        ));
    }
    // An ok run is never replaced, so a repeated insert cannot double-count.
    assert!(!put(&store, cid, k4, "4", 0, &doc(1e9, [0.0, 0.0], [1, 1])));
    assert_eq!(store.runs(cid).unwrap().len(), 6);

    let s = summarize(&store, "agg").unwrap();
    assert_eq!(s.baseline.as_deref(), Some("ip=4"));
    let s4 = s.scenarios.iter().find(|x| x.key == k4).unwrap();
    let s6 = s.scenarios.iter().find(|x| x.key == k6).unwrap();
    assert_eq!((s4.runs_ok, s4.runs_planned), (3, 3));
    let t4 = &s4.metrics["throughput_payload_bps"];
    // mean 110, sample sd 10, t(0.975, 2) = 4.302652730, ci = t·sd/√3.
    assert!(close(t4.mean, 110.0));
    assert!(close(t4.sd, 10.0));
    assert!(
        (t4.ci95 - 4.302652730 * 10.0 / 3f64.sqrt()).abs() < 1e-6,
        "{}",
        t4.ci95
    );
    assert!(close(t4.cv, 10.0 / 110.0));
    assert!(!t4.cv_warning);
    assert_eq!(t4.pct_vs_baseline, Some(0.0));
    let t6 = &s6.metrics["throughput_payload_bps"];
    assert!(close(t6.mean, 95.0));
    assert!(close(t6.sd, 5.0));
    assert!((t6.ci95 - 4.302652730 * 5.0 / 3f64.sqrt()).abs() < 1e-6);
    assert!(close(t6.pct_vs_baseline.unwrap(), -100.0 * 15.0 / 110.0));
    // Flows folded: delay weighted by received packets (100·1 ms + 300·3 ms)/400,
    // p99 the worst flow, loss 10 of 410 sent, CPU user + system.
    assert!(close(s4.metrics["delay_mean_s"].mean, 0.0025));
    assert!(close(s4.metrics["delay_p99_s"].mean, 0.006));
    assert!(close(s4.metrics["loss_ratio"].mean, 10.0 / 410.0));
    assert!(close(s4.metrics["not_sent"].mean, 1.0));
    assert!(close(s4.metrics["cpu_sender"].mean, 0.75));
    // Upper bound, 100 Mbit/s, MTU 1500, IPv4 UDP 1408 B: 1408 / (1408+8+20+38) of the rate.
    assert!(close(s4.upper_bound_bps.unwrap(), 100e6 * 1408.0 / 1474.0));
    assert!(close(s6.upper_bound_bps.unwrap(), 100e6 * 1408.0 / 1494.0));
    assert!(s.metrics.iter().any(|m| m.key == "throughput_payload_bps"));
    assert!(s.notes.iter().any(|n| n.contains("softirq")));
    // Drops located per hop: r1/eth1 qdisc 1 + 2 + 3 over the three ok runs of each scenario.
    let drops = s
        .notes
        .iter()
        .find(|n| n.contains("drops located"))
        .expect("drop note");
    assert!(drops.contains(&format!("{k4}: r1/eth1 qdisc 6")), "{drops}");
}
