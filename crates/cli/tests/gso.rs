//! UDP segmentation offload end to end over loopback: `send --gso` (UDP
//! GSO, by default for `--max` flows) and `recv --gro` (UDP GRO): every
//! datagram of a segmented send arrives and is counted once, with GRO on
//! or off at the receiver, the result document says how the datagrams
//! left, and `--gso on` where it cannot work is refused with exit 2.
#![cfg(target_os = "linux")]

mod common;
use common::{at, bad, send_json, u, Recv};
use serde_json::Value;
use std::sync::Mutex;

static TRAFFIC: Mutex<()> = Mutex::new(());

fn argv(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// All `n` probes of the flow were sent and each arrived once, in order.
fn assert_all_arrived(fl: &Value, n: u64) {
    assert_eq!(u(fl, "sent.packets"), n, "{}", at(fl, "sent"));
    assert_eq!(u(fl, "received.unique"), n, "{}", at(fl, "received"));
    assert_eq!(u(fl, "received.lost"), 0, "{}", at(fl, "received"));
    assert_eq!(u(fl, "received.duplicates"), 0, "{}", at(fl, "received"));
}

#[test]
fn a_max_flood_is_segmented_by_default_and_every_datagram_counts_once() {
    let _g = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    for gro in ["on", "off"] {
        let _r = Recv::args(&["-p", "15781", "--gro", gro]);
        // 6400 probes of 64 B: 100 segmented sends of 64.
        let doc = send_json(&argv("-a 127.0.0.1 -p 15781 -T udp --max -c 64 -z 6400"));
        let fl = &doc["flows"][0];
        assert_all_arrived(fl, 6400);
        let g = at(fl, "gso");
        assert_eq!(g["used"], Value::Bool(true), "{g}");
        assert_eq!((u(g, "sends"), u(g, "datagrams")), (100, 6400), "{g}");
        assert_eq!(g["segments_per_send"].as_f64(), Some(64.0), "{g}");
        assert!(g.get("fallback").is_none(), "{g}");
        // IPv6, segmented (1000 B probes: 65 per 64 KiB, so runs of 64).
        let doc = send_json(&argv("-a ::1 -p 15781 -T udp --max -c 1000 -z 640"));
        let fl = &doc["flows"][0];
        assert_all_arrived(fl, 640);
        assert_eq!(u(at(fl, "gso"), "sends"), 10, "{}", at(fl, "gso"));
        // Off: one datagram per sendmmsg entry, no gso object.
        let doc = send_json(&argv(
            "-a ::1 -p 15781 -T udp --max -c 64 -z 6400 --gso off",
        ));
        let fl = &doc["flows"][0];
        assert_all_arrived(fl, 6400);
        assert!(fl.get("gso").is_none(), "{fl}");
    }
}

#[test]
fn gso_on_applies_to_paced_flows_and_auto_leaves_them_plain() {
    let _g = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    let _r = Recv::start(15782);
    let doc = send_json(&argv(
        "-a 127.0.0.1 -p 15782 -T udp -C 2000 -c 200 -z 400 --gso on",
    ));
    let fl = &doc["flows"][0];
    assert_all_arrived(fl, 400);
    // Tried; a paced flow segments only what is due at once.
    let g = at(fl, "gso");
    assert!(g.get("fallback").is_none(), "{g}");
    assert!(u(g, "datagrams") <= 400, "{g}");
    let doc = send_json(&argv("-a 127.0.0.1 -p 15782 -T udp -C 2000 -c 200 -z 400"));
    assert!(doc["flows"][0].get("gso").is_none());
}

#[test]
fn gso_on_where_it_cannot_work_exits_2_naming_the_flag() {
    // No two 40000 B datagrams fit one 64 KiB segmented send.
    bad(
        &argv("-a 127.0.0.1 -p 15783 -T udp --max -c 40000 -t 100 --gso on"),
        "--gso on",
    );
    bad(
        &argv("-a 127.0.0.1 -p 15783 -T tcp --max -t 100 --gso on"),
        "--gso on",
    );
    bad(&argv("-a 127.0.0.1 -p 15783 --gso sometimes"), "--gso");
}
