//! The S5 study in `--quick` mode on the emulated test-bed: UDP 1408 B over
//! IPv4 through a 100 Mbit/s router path must reach its Ethernet upper
//! bound within 1 % (the thesis saw ~0.1 %). Needs root (namespaces).

use std::path::PathBuf;
use wirebench_campaign::{summarize, Store};

mod common;
use common::campaign;

#[test]
fn s5_quick_udp_1408_ipv4_reaches_the_upper_bound() {
    if !wirebench_testbed::sys::is_root() {
        eprintln!(
            "SKIP: s5_quick_udp_1408_ipv4_reaches_the_upper_bound needs root (network namespaces)"
        );
        return;
    }
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/s5-ipv4-vs-ipv6.toml");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s5.db");
    let out = campaign(&file, &db, &["--quick"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let store = Store::open_existing(&db).unwrap_or_else(|e| panic!("{e}\n{stderr}"));
    let s = summarize(&store, "s5-ipv4-vs-ipv6").unwrap();
    let key = "ip=4,transport=udp,meter=rtt,payload=1408,pps=30000";
    let sc = s
        .scenarios
        .iter()
        .find(|x| x.key == key)
        .unwrap_or_else(|| panic!("no scenario {key}\n{stdout}\n{stderr}"));
    assert_eq!(
        sc.runs_ok, 2,
        "both quick repetitions must succeed\n{stdout}\n{stderr}"
    );
    let bound = sc
        .upper_bound_bps
        .expect("100 Mbit/s link and MTU 1500 give a bound");
    assert!((bound - 100e6 * 1408.0 / (1408.0 + 8.0 + 20.0 + 38.0)).abs() < 1.0);
    let tp = &sc.metrics["throughput_payload_bps"];
    let ratio = tp.mean / bound;
    eprintln!(
        "S5 quick: UDP 1408 B IPv4 {:.3} Mbit/s = {:.3} % of the bound {:.3} Mbit/s",
        tp.mean / 1e6,
        ratio * 100.0,
        bound / 1e6
    );
    assert!(
        (ratio - 1.0).abs() <= 0.01,
        "payload throughput {} is {:.2} % of the bound {}",
        tp.mean,
        ratio * 100.0,
        bound
    );
    // At 1536 B the datagram no longer fits a 1500-byte MTU: the summary says so.
    let frag = s
        .notes
        .iter()
        .find(|n| n.contains("IP fragmentation detected"))
        .expect("fragmentation note");
    assert!(
        frag.contains("ip=4,transport=udp,meter=rtt,payload=1536"),
        "{frag}"
    );
    assert!(!frag.contains("payload=1408,"), "{frag}");
    // The campaign as a whole ran clean: every planned run stored once.
    let runs = store.runs(store.latest().unwrap().unwrap().id).unwrap();
    let planned: usize = s.scenarios.iter().map(|x| x.runs_planned).sum();
    assert_eq!(runs.len(), planned, "{stdout}\n{stderr}");
    // The test-bed's runs went through an agent in every node's namespace:
    // each stored run carries every node's role, CPU, counters and
    // metadata, and the path MTU checked before it.
    let ok = runs
        .iter()
        .find(|r| r.scenario_key == key && r.status.as_str() == "ok")
        .expect("a stored ok run");
    let c = ok.counters.as_ref().expect("counters of a test-bed run");
    assert_eq!(
        c["roles"],
        serde_json::json!({"a": "sender", "r1": "router", "b": "receiver"}),
        "{c}"
    );
    assert_eq!(c["path_mtu"]["a->b"], 1500, "{c}");
    for n in ["a", "r1", "b"] {
        assert!(c["cpu"][n]["host"].is_object(), "cpu of {n}: {c}");
        assert!(c["nodes"][n].is_object(), "counters of {n}: {c}");
        assert!(
            c["metadata"][n]["kernel"].is_string(),
            "metadata of {n}: {c}"
        );
    }
    // r1 forwarded what left a (the excess over the link rate is dropped
    // at a's own queue, the only drop site).
    let tx = |n: &str, i: &str| c["nodes"][n][i]["tx_packets"].as_u64().unwrap();
    let (left_a, fwd) = (tx("a", "eth0"), tx("r1", "eth1"));
    assert!(
        left_a > 1000 && left_a.abs_diff(fwd) <= 10,
        "{left_a} {fwd}: {c}"
    );
    for site in c["drop_sites"].as_array().unwrap() {
        assert_eq!(site["node"], "a", "{c}");
    }
    assert!(out.status.success(), "wirebench run failed: {stderr}");
    // The test-bed is gone.
    assert!(!wirebench_testbed::exists("wbc"), "test-bed left behind");
}
