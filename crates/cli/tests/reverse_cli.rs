//! `send -R` and `send --bidir` end to end over loopback with the built
//! binary: the receiver process says what it sent, the sender's document
//! what arrived (exact counts), per direction; bad values exit 2.

mod common;
use common::{bad, s, send, send_json, u, Recv};
use std::time::Duration;

#[test]
fn reverse_udp_v4_is_sent_by_the_receiver_process() {
    let r = Recv::start(15951);
    let doc = send_json(&[
        "-a",
        "127.0.0.1",
        "-p",
        "15951",
        "-R",
        "-C",
        "2000",
        "-c",
        "200",
        "-z",
        "300",
        "--linger",
        "200",
    ]);
    let fl = &doc["flows"][0];
    assert_eq!(s(fl, "direction"), "reverse");
    assert_eq!(u(fl, "sent.packets"), 300);
    assert_eq!(u(fl, "received.unique"), 300);
    assert_eq!(u(fl, "received.lost"), 0);
    assert_eq!(u(fl, "received.bytes"), 300 * 200);
    // The receiver process did the sending.
    let line = r.wait_for("(reverse): sent", Duration::from_secs(5));
    assert!(line.contains("sent 300 packets, 60000 bytes"), "{line}");
}

#[test]
fn bidir_tcp_v6_reports_each_direction() {
    let r = Recv::start(15952);
    let doc = send_json(&[
        "-a", "::1", "-6", "-p", "15952", "--bidir", "-T", "tcp", "-C", "1000", "-c", "500", "-z",
        "200", "--linger", "200",
    ]);
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2);
    assert_eq!(s(&flows[0], "direction"), "forward");
    assert_eq!(s(&flows[1], "direction"), "reverse");
    for fl in flows {
        assert_eq!(u(fl, "sent.packets"), 200);
        assert_eq!(u(fl, "received.unique"), 200);
        assert_eq!(u(fl, "received.bytes"), 200 * 500);
    }
    // Addresses follow the packets.
    assert_eq!(s(&flows[1], "src"), "::1");
    let line = r.wait_for("(reverse): sent", Duration::from_secs(5));
    assert!(line.contains("sent 200 packets"), "{line}");
}

#[test]
fn toml_script_sets_the_direction_per_flow() {
    let _r = Recv::start(15953);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("flows.toml");
    std::fs::write(
        &script,
        "[[flow]]\nidt = \"constant 1000\"\nsize = \"constant 100\"\npackets = 100\n\
         direction = \"reverse\"\n\n[[flow]]\nidt = \"constant 1000\"\nsize = \"constant 100\"\n\
         packets = 150\ndirection = \"bidir\"\n\n[[flow]]\nidt = \"constant 1000\"\n\
         size = \"constant 100\"\npackets = 50\n",
    )
    .unwrap();
    let doc = send_json(&[
        "-a",
        "127.0.0.1",
        "-p",
        "15953",
        "--script",
        script.to_str().unwrap(),
        "--linger",
        "200",
    ]);
    let flows = doc["flows"].as_array().unwrap();
    let got: Vec<(&str, u64, u64)> = flows
        .iter()
        .map(|f| {
            (
                s(f, "direction"),
                u(f, "sent.packets"),
                u(f, "received.unique"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("reverse", 100, 100),
            ("forward", 150, 150),
            ("reverse", 150, 150),
            ("forward", 50, 50),
        ]
    );
}

#[test]
fn bad_direction_values_exit_2_naming_the_option() {
    bad(&["-a", "127.0.0.1", "-R", "--bidir"], "--bidir");
    bad(&["-a", "127.0.0.1", "-R", "-m", "rtt"], "-R");
    bad(&["-a", "127.0.0.1", "--bidir", "-b", "46"], "-R/--bidir");
    bad(
        &["-a", "127.0.0.1", "-R", "--payload", "zeros"],
        "--payload",
    );
    bad(
        &["-a", "127.0.0.1", "--bidir", "--payload", "random"],
        "--payload",
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.toml");
    std::fs::write(&script, "[[flow]]\npackets = 5\ndirection = \"sideways\"\n").unwrap();
    bad(
        &["-a", "127.0.0.1", "--script", script.to_str().unwrap()],
        "direction",
    );
}

#[test]
fn a_script_with_two_receivers_runs_two_sessions_in_one_document() {
    // Two daemons on one port, on two loopback addresses.
    let _a = Recv::args(&["-B", "127.0.0.2", "-p", "15954"]);
    let _b = Recv::args(&["-B", "127.0.0.3", "-p", "15954"]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("two.ditg");
    std::fs::write(
        &script,
        "-a 127.0.0.2 -C 1000 -c 100 -z 120\n\
         -a 127.0.0.3 -C 1000 -c 200 -z 80\n\
         -a 127.0.0.2 -T tcp -C 500 -c 300 -z 60\n",
    )
    .unwrap();
    let doc = send_json(&[
        "-p",
        "15954",
        "--script",
        script.to_str().unwrap(),
        "--linger",
        "200",
    ]);
    let flows = doc["flows"].as_array().unwrap();
    // Flows grouped by receiver (first named first), numbered 1.. overall.
    let got: Vec<(u64, &str, u64, u64)> = flows
        .iter()
        .map(|f| {
            (
                u(f, "id"),
                s(f, "dst"),
                u(f, "sent.packets"),
                u(f, "received.unique"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, "127.0.0.2", 120, 120),
            (2, "127.0.0.2", 60, 60),
            (3, "127.0.0.3", 80, 80),
        ]
    );
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(s(&sessions[0], "dest"), "127.0.0.2");
    assert_eq!(sessions[0]["flows"], serde_json::json!([1, 2]));
    assert_eq!(s(&sessions[1], "dest"), "127.0.0.3");
    assert_eq!(sessions[1]["flows"], serde_json::json!([3]));
    assert_eq!(u(&doc, "total.sent_packets"), 260);
    assert_eq!(u(&doc, "total.received_packets"), 260);
    assert_eq!(doc["partial"], false);

    // One receiver missing: nothing runs, the error names it.
    let script = dir.path().join("gone.ditg");
    std::fs::write(
        &script,
        "-a 127.0.0.2 -C 1000 -c 100 -z 50\n-a 127.0.0.4 -C 1000 -c 100 -z 50\n",
    )
    .unwrap();
    let out = send(&["-p", "15954", "--script", script.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("127.0.0.4"), "{err}");
}

#[test]
fn meters_are_per_flow_a_bulk_flow_beside_an_rtt_flow_is_not_reflected() {
    // Receiver and sender in a private network namespace, so its UDP
    // counters count exactly their datagrams: the RTT flow's probes and
    // their reflections, and the bulk flow's probes only.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("meters.toml");
    std::fs::write(
        &script,
        "[[flow]]\nmeter = \"rtt\"\nidt = \"constant 1000\"\nsize = \"constant 100\"\npackets = 120\n\n\
         [[flow]]\nidt = \"constant 1000\"\nsize = \"constant 300\"\npackets = 200\n",
    )
    .unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-n", "sh", "-c"])
        .arg(
            "ip link set lo up && \"$WB\" recv -q -B 127.0.0.1 -p 15955 & R=$!; \
             trap 'kill $R 2>/dev/null' EXIT; sleep 0.3; \
             out() { awk '/^Udp:/ && $2 ~ /^[0-9]/ {print $5}' /proc/net/snmp; }; \
             a=$(out); \"$WB\" send -a 127.0.0.1 -p 15955 --script \"$S\" --linger 200 \
             --json \"$J\" >/dev/null || exit 1; b=$(out); echo \"udp_out $((b - a))\"",
        )
        .env("WB", common::BIN)
        .env("S", &script)
        .env("J", dir.path().join("r.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r.json")).unwrap()).unwrap();
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(u(&flows[0], "rtt_received"), 120);
    assert!(common::f(&flows[0], "rtt_s.min") > 0.0);
    assert!(
        flows[1].get("rtt_s").is_none_or(|v| v.is_null()),
        "{}",
        flows[1]
    );
    assert_eq!(u(&flows[1], "received.unique"), 200);
    // 120 probes + 120 reflections + 200 bulk probes; 520 if the bulk flow
    // had been reflected too.
    assert!(text.contains("udp_out 440"), "{text}");
}
