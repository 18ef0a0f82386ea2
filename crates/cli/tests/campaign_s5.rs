//! The S5 study in `--quick` mode on the emulated test-bed: UDP 1408 B over
//! IPv4 through a 100 Mbit/s router path must reach its Ethernet upper
//! bound within 1 % (the thesis saw ~0.1 %). Needs root (namespaces).

use std::path::PathBuf;
use std::process::Command;
use wirebench_campaign::{summarize, Store};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");

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
    let out = Command::new(BIN)
        .args([
            "run",
            file.to_str().unwrap(),
            "--quick",
            "--db",
            db.to_str().unwrap(),
            "-q",
        ])
        .output()
        .unwrap();
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
    assert!(out.status.success(), "wirebench run failed: {stderr}");
    // The test-bed is gone.
    assert!(!wirebench_testbed::exists("wbc"), "test-bed left behind");
}
