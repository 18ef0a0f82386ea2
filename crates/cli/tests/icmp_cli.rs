//! `send -T icmp` (ICMP echo flows) end to end with the built binary: no
//! receiver daemon runs in any of these tests. Loopback over IPv4 and IPv6
//! (exact counts, no loss, round trips above zero); an unprivileged ping
//! socket in a private network namespace (CAP_NET_RAW dropped, so a raw
//! socket is impossible); an address nobody answers (every echo lost);
//! D-ITG script lines with -T ICMP for two destinations; bad values exit 2
//! naming the option.

mod common;
use common::{bad, f, s, send_json, u, BIN};
use serde_json::Value;
use std::process::Command;

/// Checks one flow of a run with no loss.
fn all_answered(fl: &Value, n: u64, size: u64) {
    assert_eq!(s(fl, "transport"), "icmp");
    assert_eq!(u(fl, "sent.packets"), n);
    assert_eq!(u(fl, "received.unique"), n);
    assert_eq!(u(fl, "received.lost"), 0);
    assert_eq!(u(fl, "received.bytes"), n * size);
    assert_eq!(u(fl, "received.foreign"), 0);
    assert_eq!(u(fl, "rtt_received"), n);
    assert!(f(fl, "rtt_s.min") > 0.0, "{fl}");
    assert!(f(fl, "rtt_s.max") < 1.0, "{fl}");
}

#[test]
fn echo_to_loopback_v4_and_v6_counts_exactly() {
    for (dest, n) in [("127.0.0.1", 200), ("::1", 150)] {
        let doc = send_json(&[
            "-T",
            "icmp",
            "-a",
            dest,
            "-C",
            "1000",
            "-c",
            "120",
            "-z",
            &n.to_string(),
            "--linger",
            "200",
        ]);
        assert_eq!(s(&doc, "meter"), "rtt");
        assert_eq!(doc["partial"], false);
        all_answered(&doc["flows"][0], n, 120);
        assert_eq!(s(&doc["flows"][0], "dst"), dest);
        assert_eq!(u(&doc, "total.lost"), 0);
    }
}

/// Runs `script` with `sh` in a new network namespace (loopback up) whose
/// processes lack CAP_NET_RAW: only a ping socket can send echoes.
fn in_private_netns(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args([
            "-n",
            "setpriv",
            "--bounding-set=-net_raw",
            "--inh-caps=-net_raw",
            "sh",
            "-c",
        ])
        .arg(format!("ip link set lo up && {script}"))
        .env("WB", BIN)
        .output()
        .expect("unshare")
}

#[test]
fn ping_sockets_without_raw_privilege() {
    // Outside net.ipv4.ping_group_range and without CAP_NET_RAW: refused,
    // exit 2, the message says what to change.
    let out = in_private_netns(
        "sysctl -qw net.ipv4.ping_group_range='1 0' && \
         \"$WB\" send -T icmp -a 127.0.0.1 -C 100 -z 3 --linger 50",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("-T icmp") && err.contains("ping_group_range"),
        "{err}"
    );
    // Within it: a ping socket, both families.
    let out = in_private_netns(
        "sysctl -qw net.ipv4.ping_group_range='0 0' && \
         \"$WB\" send -T icmp -a 127.0.0.1 -C 1000 -c 64 -z 100 --linger 100 --json && \
         \"$WB\" send -T icmp -a ::1 -C 1000 -c 64 -z 100 --linger 100 --json",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(docs.len(), 2);
    for d in &docs {
        all_answered(&d["flows"][0], 100, 64);
    }
}

#[test]
fn an_unanswered_address_loses_every_echo() {
    // 10.9.0.2 sits behind a veth whose far end has no such address: the
    // requests leave (a permanent neighbour entry, so no ARP failure turns
    // them into send errors) and nothing answers.
    let out = in_private_netns(
        "ip link add wbi0 type veth peer name wbi1 && ip addr add 10.9.0.1/24 dev wbi0 && \
         ip link set wbi0 up && ip link set wbi1 up && \
         ip neigh add 10.9.0.2 lladdr 02:00:00:00:00:02 dev wbi0 nud permanent && \
         sysctl -qw net.ipv4.ping_group_range='0 0' && \
         \"$WB\" send -T icmp -a 10.9.0.2 -C 500 -c 64 -z 40 --linger 100 --json",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let fl = &doc["flows"][0];
    assert_eq!(u(fl, "sent.packets"), 40);
    assert_eq!(u(fl, "sent.not_sent"), 0);
    assert_eq!(u(fl, "received.unique"), 0);
    assert_eq!(u(fl, "received.lost"), 40);
    assert_eq!(u(&doc, "total.lost"), 40);
}

#[test]
fn ditg_script_lines_with_t_icmp_for_two_destinations() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("echo.ditg");
    std::fs::write(
        &script,
        "-a 127.0.0.1 -T ICMP -C 500 -c 64 -z 50\n\
         -a ::1 -T ICMP -E 500 -u 100 300 -z 40\n",
    )
    .unwrap();
    let doc = send_json(&["--script", script.to_str().unwrap(), "--linger", "200"]);
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2);
    assert_eq!(s(&flows[0], "dst"), "127.0.0.1");
    assert_eq!(u(&flows[0], "received.unique"), 50);
    assert_eq!(s(&flows[1], "dst"), "::1");
    assert_eq!(s(&flows[1], "transport"), "icmp");
    assert_eq!(u(&flows[1], "sent.packets"), 40);
    assert_eq!(u(&flows[1], "received.unique"), 40);
    assert_eq!(u(&flows[1], "received.lost"), 0);
    assert_eq!(doc["sessions"].as_array().map(Vec::len), Some(2));
}

#[test]
fn options_that_need_a_receiver_are_refused_naming_them() {
    let base = ["-T", "icmp", "-a", "127.0.0.1", "-z", "5"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    bad(&with(&["-R"]), "-R");
    bad(&with(&["--bidir"]), "-R/--bidir");
    bad(&with(&["-m", "owd"]), "-m");
    bad(&with(&["--max"]), "--max");
    bad(&with(&["-c", "70000"]), "-c");
    bad(&with(&["--cc", "cubic"]), "--cc");
    bad(&with(&["--auth", "probes"]), "--auth");
    bad(&["-T", "smoke", "-a", "127.0.0.1"], "-T");
    // An ICMP line and a UDP line to the same destination: one session
    // cannot hold both.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("mixed.ditg");
    std::fs::write(
        &script,
        "-a 127.0.0.1 -T ICMP -z 5\n-a 127.0.0.1 -T UDP -z 5\n",
    )
    .unwrap();
    bad(&["--script", script.to_str().unwrap()], "-T icmp");
}
