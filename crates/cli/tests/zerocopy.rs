//! `send --zerocopy` (MSG_ZEROCOPY TCP sends) end to end over loopback:
//! records arrive whole, the result document says what the kernel did
//! with the sends, a kernel that cannot take them (option memory spent,
//! in a namespace of the test's own) leaves plain writes and the reason,
//! and flows that are not forward TCP are refused with exit 2.
#![cfg(target_os = "linux")]

mod common;
use common::{argv, at, bad, json_of, send_json, u, Netns, Recv, BIN};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

static TRAFFIC: Mutex<()> = Mutex::new(());

/// The flow's records all arrived (TCP on loopback loses none; a record
/// cut by the close at the end is counted by neither side) and the kernel
/// took the sends zero-copy, reported every one complete, and copied them
/// (it copies when it delivers to a local socket).
fn assert_zero_copied(fl: &Value) {
    let sent = u(fl, "sent.packets");
    assert!(sent > 0, "{fl}");
    assert_eq!(u(fl, "received.unique"), sent, "{}", at(fl, "received"));
    assert_eq!(u(fl, "received.lost"), 0);
    let z = at(fl, "zerocopy");
    assert_eq!(z["used"], Value::Bool(true), "{z}");
    let sends = u(z, "sends");
    assert!(sends > 0, "{z}");
    assert_eq!(u(z, "completed"), sends, "{z}");
    assert!(u(z, "copied") > 0, "{z}");
    assert!(z.get("fallback").is_none(), "{z}");
}

#[test]
fn zerocopy_records_arrive_whole_and_the_document_counts_the_kernels_copies() {
    let _g = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    let _r = Recv::start(15741);
    // One bulk flow of 1 MiB records (FLAG_LONG) over IPv6.
    let doc = send_json(&argv(
        "-a ::1 -p 15741 -T tcp --max -c 1048576 -t 400 --zerocopy",
    ));
    assert_zero_copied(&doc["flows"][0]);
    // Three bulk flows of 64000 B on the shared writer, IPv4.
    let doc = send_json(&argv(
        "-a 127.0.0.1 -p 15741 -T tcp --max -c 64000 --flows 3 -t 400 --zerocopy",
    ));
    for fl in doc["flows"].as_array().unwrap() {
        assert_zero_copied(fl);
    }
    // A paced flow of small records: every one due is sent and arrives.
    let doc = send_json(&argv(
        "-a 127.0.0.1 -p 15741 -T tcp -C 200 -c 300 -t 400 --zerocopy",
    ));
    let fl = &doc["flows"][0];
    assert_eq!(u(fl, "sent.packets"), 80, "{}", at(fl, "sent"));
    assert_zero_copied(fl);
    // Without the flag the document has no zerocopy object.
    let doc = send_json(&argv("-a 127.0.0.1 -p 15741 -T tcp --max -c 64000 -t 200"));
    assert!(doc["flows"][0].get("zerocopy").is_none());
}

/// The kernel charges each zero-copy send's completion to the socket's
/// option memory (net.core.optmem_max, per namespace in recent kernels):
/// with 64 bytes of it every MSG_ZEROCOPY send fails with ENOBUFS. The
/// flow then writes plainly, all its records arrive, and the document
/// says zero-copy was not used and why.
#[test]
fn zerocopy_falls_back_to_plain_writes_when_the_kernel_has_no_option_memory() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root for a network namespace");
        return;
    }
    let _g = TRAFFIC.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Netns::new("wbzc");
    let mut sysctl = ns.exec();
    sysctl.args(["sysctl", "-qw", "net.core.optmem_max=64"]);
    assert!(sysctl.status().expect("run sysctl").success());
    let mut recv = ns.exec();
    recv.args([BIN, "recv", "-p", "15742"]);
    let _r = Recv::command(recv, Duration::from_secs(10));
    let mut send = ns.exec();
    send.args([BIN, "send"]);
    let args = argv("-a 127.0.0.1 -p 15742 -T tcp --max -c 64000 -t 300 --zerocopy");
    let doc = json_of(send, &args);
    let fl = &doc["flows"][0];
    let sent = u(fl, "sent.packets");
    assert!(sent > 0);
    assert_eq!(u(fl, "received.unique"), sent);
    let z = at(fl, "zerocopy");
    assert_eq!(z["used"], Value::Bool(false), "{z}");
    assert_eq!(u(z, "sends"), 0, "{z}");
    let why = z["fallback"].as_str().unwrap_or_default();
    assert!(why.contains("optmem_max"), "{z}");
    // The human summary and stderr say it too, stderr once for the
    // three flows.
    let out = ns
        .exec()
        .args([BIN, "send"])
        .args(&args)
        .args(["--flows", "3"])
        .output()
        .expect("run wirebench send");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Zero-copy") && stdout.contains("optmem_max"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("--zerocopy: flow").count(), 1, "{stderr}");
}

#[test]
fn zerocopy_is_refused_for_udp_icmp_reverse_and_in_scripts_for_udp() {
    bad(
        &["-a", "127.0.0.1", "-T", "udp", "-C", "10", "--zerocopy"],
        "--zerocopy",
    );
    bad(
        &["-a", "127.0.0.1", "-T", "icmp", "-C", "10", "--zerocopy"],
        "--zerocopy",
    );
    bad(
        &["-a", "127.0.0.1", "-T", "tcp", "-R", "--zerocopy"],
        "--zerocopy",
    );
    bad(
        &argv("-a 127.0.0.1 -T tcp --max --iperf3 --zerocopy"),
        "--zerocopy",
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("zc.toml");
    std::fs::write(&script, "[[flow]]\nidt = \"C 10\"\nzerocopy = true\n").unwrap();
    bad(
        &["-a", "127.0.0.1", "--script", script.to_str().unwrap()],
        "--zerocopy",
    );
    let script = dir.path().join("zc-bad.toml");
    std::fs::write(&script, "[[flow]]\ntransport = \"tcp\"\nzerocopy = 1\n").unwrap();
    bad(
        &["-a", "127.0.0.1", "--script", script.to_str().unwrap()],
        "zc-bad.toml:3: zerocopy",
    );
}
