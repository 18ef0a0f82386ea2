//! `wirebench recv --metrics`: a real Prometheus server (Debian's
//! `prometheus`, installed by scripts/setup) scrapes the receiver while a
//! wirebench sender and a real iperf3 client use it, and the counters it
//! stores are the packets those runs delivered. Every process is started
//! here and killed on drop.

mod common;

use common::{free_port, prometheus, send_json, u, wait_listening, Recv, BIN};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// GET on 127.0.0.1:port; the whole answer ("" when the server closed
/// without one).
fn get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn prometheus_scrapes_what_the_receiver_served() {
    let (ctl, ip3, metrics, prom) = (free_port(), free_port(), free_port(), free_port());
    let _recv = Recv::args(&[
        "-B",
        "127.0.0.1",
        "-p",
        &ctl.to_string(),
        "--iperf3",
        &ip3.to_string(),
        "--metrics",
        &format!("127.0.0.1:{metrics}"),
    ]);
    wait_listening(metrics);
    let doc = send_json(&[
        "-a",
        "127.0.0.1",
        "-p",
        &ctl.to_string(),
        "-C",
        "500",
        "-c",
        "200",
        "-z",
        "400",
        "--linger",
        "300",
    ]);
    let wb_packets = u(&doc, "total.received_packets");
    assert_eq!(wb_packets, 400, "loopback delivers every packet");
    let out = Command::new("timeout")
        .args(["20", "iperf3", "-c", "127.0.0.1", "-p", &ip3.to_string()])
        .args(["-u", "-b", "2M", "-l", "500", "-t", "1", "-J"])
        .output()
        .expect("run iperf3");
    assert!(out.status.success(), "iperf3 client failed");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J");
    let ip3_packets = j["end"]["sum"]["packets"].as_u64().unwrap_or(0)
        - j["end"]["sum"]["lost_packets"].as_u64().unwrap_or(0);
    assert!(ip3_packets > 400, "iperf3 sent {ip3_packets} datagrams");

    let text = get(metrics, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("text/plain; version=0.0.4"),
        "Prometheus text format: {text}"
    );
    assert!(get(metrics, "/nothing").starts_with("HTTP/1.1 404"));

    let dir = tempfile::tempdir().unwrap();
    let _prom = prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: wirebench_recv\n    static_configs:\n      - targets: [\"127.0.0.1:{metrics}\"]\n"
        ),
        prom,
    );
    let query = |q: &str| -> Option<f64> {
        let body = get(prom, &format!("/api/v1/query?query={q}"));
        let body = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    };
    let t = Instant::now();
    loop {
        let wb = query("wirebench_recv_packets_received_total%7Bprotocol%3D%22wirebench%22%7D");
        let i3 = query("wirebench_recv_packets_received_total%7Bprotocol%3D%22iperf3%22%7D");
        let done = query("sum(wirebench_recv_sessions_total%7Bresult%3D%22completed%22%7D)");
        let limit = query("wirebench_recv_budget_sockets%7Bstate%3D%22limit%22%7D");
        if let (Some(wb), Some(i3), Some(done), Some(limit)) = (wb, i3, done, limit) {
            assert_eq!(wb, wb_packets as f64, "wirebench packets");
            assert_eq!(i3, ip3_packets as f64, "iperf3 datagrams");
            assert_eq!(done, 2.0, "one session of each protocol completed");
            assert!(limit > 0.0, "the socket budget is exposed");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "Prometheus has no wirebench_recv series within 20 s"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn metrics_obey_allow_and_bad_addresses_exit_2() {
    let (ctl, metrics) = (free_port(), free_port());
    let _recv = Recv::args(&[
        "-B",
        "127.0.0.1",
        "-p",
        &ctl.to_string(),
        "--allow",
        "192.0.2.0/24",
        "--metrics",
        &format!("127.0.0.1:{metrics}"),
    ]);
    wait_listening(metrics);
    assert_eq!(get(metrics, "/metrics"), "", "127.0.0.1 is not in --allow");
    let out = Command::new(BIN)
        .args(["recv", "-p", &free_port().to_string(), "--metrics", "9506"])
        .output()
        .expect("run wirebench recv");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics"));
}
