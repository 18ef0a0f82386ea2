//! UDP segmentation offload end to end over loopback: `send --gso` (UDP
//! GSO, by default for `--max` flows) and `recv --gro` (UDP GRO): every
//! datagram of a segmented send arrives and is counted once, with GRO on
//! or off at the receiver, the result document says how the datagrams
//! left, and `--gso on` where it cannot work is refused with exit 2.
#![cfg(target_os = "linux")]

mod common;
use common::{argv, at, bad, json_of, send_json, u, Netns, Recv, BIN};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

static TRAFFIC: Mutex<()> = Mutex::new(());

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
    // Without GRO every datagram is an skb of its own in the receive
    // buffer, so fewer of them, lest a receiver descheduled on a busy host
    // overflows it.
    for (gro, n) in [("on", 6400u64), ("off", 1280)] {
        let _r = Recv::args(&["-p", "15781", "--gro", gro]);
        // Probes of 64 B: segmented sends of 64.
        let doc = send_json(&argv(&format!(
            "-a 127.0.0.1 -p 15781 -T udp --max -c 64 -z {n}"
        )));
        let fl = &doc["flows"][0];
        assert_all_arrived(fl, n);
        let g = at(fl, "gso");
        assert_eq!(g["used"], Value::Bool(true), "{g}");
        assert_eq!((u(g, "sends"), u(g, "datagrams")), (n / 64, n), "{g}");
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

/// Probes longer than the path's MTU (2000 B over a loopback of MTU 1500,
/// in a namespace of the test's own): the kernel refuses the segmented
/// send (EMSGSIZE), the flow falls back to plain datagrams, which the
/// kernel fragments, every probe arrives, and the document and stderr
/// say why, once.
#[test]
fn a_probe_longer_than_the_mtu_falls_back_to_plain_sends() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root for a network namespace");
        return;
    }
    let _g = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Netns::new("wbgs");
    let st = ns
        .exec()
        .args(["ip", "link", "set", "lo", "mtu", "1500"])
        .status()
        .expect("run ip");
    assert!(st.success());
    let mut recv = ns.exec();
    recv.args([BIN, "recv", "-p", "15784"]);
    let _r = Recv::command(recv, Duration::from_secs(10));
    let args = argv("-a 127.0.0.1 -p 15784 -T udp --max -c 2000 -z 1000");
    let mut send = ns.exec();
    send.args([BIN, "send"]);
    let doc = json_of(send, &args);
    let fl = &doc["flows"][0];
    assert_all_arrived(fl, 1000);
    let g = at(fl, "gso");
    assert_eq!(g["used"], Value::Bool(false), "{g}");
    let why = g["fallback"].as_str().unwrap_or_default();
    assert!(why.contains("refused a segmented send"), "{g}");
    let out = ns
        .exec()
        .args([BIN, "send"])
        .args(&args)
        .output()
        .expect("run wirebench send");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("--gso: flow 1:").count(), 1, "{err}");
}
