//! The S5 study in `--quick` mode on the emulated test-bed: UDP 1408 B over
//! IPv4 through a 100 Mbit/s router path must reach its Ethernet upper
//! bound within 1 % (the thesis saw ~0.1 %). Needs root (namespaces).

use std::path::{Path, PathBuf};
use wirebench_campaign::analysis::run_metrics;
use wirebench_campaign::stalls::run_stalls;
use wirebench_campaign::{summarize, Store};
use wirebench_testkit::measure_seeing;

mod common;
use common::campaign;

const KEY: &str = "ip=4,transport=udp,meter=rtt,payload=1408,pps=30000";

/// One quick campaign: its output, and each stored repetition's payload
/// throughput for the 1408 B scenario as a share of the Ethernet bound.
fn attempt(file: &Path, db: &Path) -> (std::process::Output, Vec<f64>) {
    let out = campaign(file, db, &["--quick"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let store = Store::open_existing(db).unwrap_or_else(|e| panic!("{e}\n{stderr}"));
    let bound = 100e6 * 1408.0 / (1408.0 + 8.0 + 20.0 + 38.0);
    let ratios = match store.latest() {
        Ok(Some(c)) => store
            .runs(c.id)
            .unwrap()
            .iter()
            .filter(|r| r.scenario_key == KEY && r.status.as_str() == "ok")
            .filter_map(|r| run_metrics(r).get("throughput_payload_bps").copied())
            .map(|tp| tp / bound)
            .collect(),
        _ => Vec::new(),
    };
    (out, ratios)
}

/// The link emulators' stalls in the 1408 B scenario's runs of the
/// latest campaign in `db` (`stalls::run_stalls` of each run's counters),
/// said as evidence when there were any.
fn stalled(db: &Path) -> Option<String> {
    let store = Store::open_existing(db).ok()?;
    let c = store.latest().ok()??;
    let per_run: Vec<(u64, f64)> = store
        .runs(c.id)
        .ok()?
        .iter()
        .filter(|r| r.scenario_key == KEY)
        .filter_map(|r| r.counters.as_ref().map(run_stalls))
        .collect();
    per_run
        .iter()
        .any(|(n, _)| *n > 0)
        .then(|| format!("the link emulators stalled in its runs (stalls, seconds: {per_run:?})"))
}

#[test]
fn s5_quick_udp_1408_ipv4_reaches_the_upper_bound() {
    if !wirebench_testkit::can_run_as_root(
        "s5_quick_udp_1408_ipv4_reaches_the_upper_bound",
        "root (network namespaces)",
    ) {
        return;
    }
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/s5-ipv4-vs-ipv6.toml");
    let dir = tempfile::tempdir().unwrap();
    // An emulated link is a qdisc timer: while the host does not run it (a
    // vCPU preempted by the hypervisor, CPU steal), the link idles and that
    // time is lost for good, as it would be for a real NIC whose driver
    // stopped. A 25 ms stall costs a 2 s run 1.2 % (seen once in CI: the
    // two repetitions averaged 98.77 %). So at least one repetition must be
    // within 1 % and none more than 3 % below; a campaign that misses it
    // is measured once more (a fresh campaign) only when the host was seen
    // busy or held, or its runs' emulators counted stalls
    // (wirebench_testkit::measure_seeing); otherwise the miss fails.
    let within = |r: &[f64]| {
        r.len() == 2
            && r.iter().any(|x| (x - 1.0).abs() <= 0.01)
            && r.iter().all(|x| *x >= 0.97 && *x <= 1.01)
    };
    let mut n = 0;
    let (out, ratios, db) = measure_seeing("S5 quick, UDP 1408 B IPv4", || {
        n += 1;
        let db = dir.path().join(format!("s5-{n}.db"));
        let (out, ratios) = attempt(&file, &db);
        if within(&ratios) {
            return Ok((out, ratios, db));
        }
        let why = format!(
            "payload throughput of the repetitions {ratios:?} of the bound: none within 1 % or one over 3 % below"
        );
        Err((why, stalled(&db)))
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let store = Store::open_existing(&db).unwrap_or_else(|e| panic!("{e}\n{stderr}"));
    let s = summarize(&store, "s5-ipv4-vs-ipv6").unwrap();
    let sc = s
        .scenarios
        .iter()
        .find(|x| x.key == KEY)
        .unwrap_or_else(|| panic!("no scenario {KEY}\n{stdout}\n{stderr}"));
    assert_eq!(
        sc.runs_ok, 2,
        "both quick repetitions must succeed\n{stdout}\n{stderr}"
    );
    let bound = sc
        .upper_bound_bps
        .expect("100 Mbit/s link and MTU 1500 give a bound");
    assert!((bound - 100e6 * 1408.0 / (1408.0 + 8.0 + 20.0 + 38.0)).abs() < 1.0);
    let tp = &sc.metrics["throughput_payload_bps"];
    eprintln!(
        "S5 quick: UDP 1408 B IPv4 {:.3} Mbit/s = {:.3} % of the bound {:.3} Mbit/s (repetitions {:?})",
        tp.mean / 1e6,
        tp.mean / bound * 100.0,
        bound / 1e6,
        ratios
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
        .find(|r| r.scenario_key == KEY && r.status.as_str() == "ok")
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
    // r1 forwarded what left a (the sender's socket holds back the excess
    // over the link rate; a drop, if any, is at a's own queue).
    let tx = |n: &str, i: &str| c["nodes"][n][i]["tx_packets"].as_u64().unwrap();
    let (left_a, fwd) = (tx("a", "eth0"), tx("r1", "eth1"));
    assert!(
        left_a > 1000 && left_a.abs_diff(fwd) <= 10,
        "{left_a} {fwd}: {c}"
    );
    for site in c["drop_sites"].as_array().unwrap() {
        assert_eq!(site["node"], "a", "{c}");
    }
    // Beside the drop sites, where each hop's time went: a→r1 carried
    // the run's 1408 B datagrams (1474 B wire: 117.9 µs each at 100
    // Mbit/s), with no propagation delay configured.
    let hop = c["hops"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["from"] == "a" && h["to"] == "r1"))
        .unwrap_or_else(|| panic!("no hop a→r1: {c}"));
    assert!(hop["frames"].as_u64().unwrap_or(0) > 1000, "{hop}");
    let ser = hop["serialisation_s"].as_f64().unwrap_or(0.0);
    assert!((100e-6..118e-6).contains(&ser), "{hop}");
    assert!(hop["propagation_s"].as_f64().unwrap_or(1.0) < 1e-6, "{hop}");
    assert!(out.status.success(), "wirebench run failed: {stderr}");
    // The test-bed is gone.
    assert!(!wirebench_testbed::exists("wbc"), "test-bed left behind");
}
