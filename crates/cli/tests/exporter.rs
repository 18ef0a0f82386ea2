//! `wirebench exporter` scraped by the real Prometheus (Debian's
//! `prometheus`, installed by scripts/setup), and its answers to bad and
//! hopeless probes. Every process is started here and killed on drop.

mod common;

use common::{prometheus, wait_listening, Kill, BIN};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn start(cmd: &mut Command) -> Kill {
    Kill(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start"),
    )
}

/// GET on 127.0.0.1:port; (status line, body).
fn get(port: u16, path: &str, headers: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

#[test]
fn prometheus_scrapes_a_probe_of_a_loopback_receiver() {
    let (recv_port, exp_port, prom_port) = (15_330, 15_331, 15_332);
    let _recv = start(Command::new(BIN).args([
        "recv",
        "-q",
        "-B",
        "127.0.0.1",
        "-p",
        &recv_port.to_string(),
    ]));
    let _exp =
        start(Command::new(BIN).args(["exporter", "--listen", &format!("127.0.0.1:{exp_port}")]));
    wait_listening(recv_port);
    wait_listening(exp_port);
    let dir = tempfile::tempdir().unwrap();
    let _prom = prometheus(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:\n  - job_name: wirebench\n    metrics_path: /probe\n    params:\n      target: [\"127.0.0.1:{recv_port}\"]\n    static_configs:\n      - targets: [\"127.0.0.1:{exp_port}\"]\n"
        ),
        prom_port,
    );
    let query = |q: &str| -> Vec<serde_json::Value> {
        let (_, body) = get(prom_port, &format!("/api/v1/query?query={q}"), "");
        serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    };
    let t = Instant::now();
    loop {
        let ok = query("wirebench_probe_success");
        let loss = query("wirebench_loss_ratio");
        let owd = query("wirebench_one_way_delay_seconds");
        if ok.first().map(|r| r["value"][1] == "1").unwrap_or(false) && !loss.is_empty() {
            assert_eq!(loss[0]["metric"]["direction"], "forward");
            assert_eq!(loss[0]["value"][1], "0", "loopback loses nothing");
            assert_eq!(owd.len(), 6, "min, p50, p90, p99, p99.9, max: {owd:?}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no successful probe in Prometheus within 20 s: {ok:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn bad_probes_answer_at_once() {
    let port = 15_333;
    let _exp =
        start(Command::new(BIN).args(["exporter", "--listen", &format!("127.0.0.1:{port}")]));
    wait_listening(port);
    let (status, _) = get(port, "/probe?target=127.0.0.1&module=nope", "");
    assert!(status.contains(" 400 "), "{status}");
    let (status, _) = get(port, "/probe", "");
    assert!(status.contains(" 400 "), "no target: {status}");
    // Nothing listens on the target: a failure, not a hang.
    let t = Instant::now();
    let (status, body) = get(
        port,
        "/probe?target=127.0.0.1:15339",
        "X-Prometheus-Scrape-Timeout-Seconds: 3\r\n",
    );
    assert!(
        status.contains(" 200 ") && body.contains("wirebench_probe_success 0"),
        "{status} {body}"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    // A timeout too short for any measurement is said at once.
    let t = Instant::now();
    let (_, body) = get(
        port,
        "/probe?target=127.0.0.1:15339",
        "X-Prometheus-Scrape-Timeout-Seconds: 0.5\r\n",
    );
    assert!(body.contains("wirebench_probe_success 0"));
    assert!(t.elapsed() < Duration::from_millis(500));
    // The two above and wait_listening's connection without a request.
    // Each connection has its own thread, and on a loaded machine that
    // empty connection's thread may count after later ones: read the
    // counters until it has (5 s at most), then exactly.
    let bad3 = "wirebench_exporter_probes_total{result=\"bad_request\"} 3";
    let t = Instant::now();
    let metrics = loop {
        let (_, m) = get(port, "/metrics", "");
        if m.contains(bad3) || t.elapsed() > Duration::from_secs(5) {
            break m;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        metrics.contains("wirebench_exporter_probes_total{result=\"failure\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains(bad3), "{metrics}");
}
