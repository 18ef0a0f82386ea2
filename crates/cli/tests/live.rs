//! Live intervals: `wirebench send --interval` / `--json-stream` print
//! while the run goes on (the receiver streams its interval figures over
//! the control connection), and the streamed intervals add up to the
//! result's totals. Runs the built binary on loopback (ports 15821-15823).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Recv, BIN};

/// A receiver on 127.0.0.1:`port`.
fn recv(port: u16) -> Recv {
    Recv::args(&["-B", "127.0.0.1", "-p", &port.to_string()])
}

/// Runs `wirebench send ARGS` and returns its stdout lines, each with the
/// time it was read, and the time the process ended.
fn send_lines(args: &[&str]) -> (Vec<(Instant, String)>, Instant) {
    let mut child = Command::new(BIN)
        .arg("send")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines: Vec<(Instant, String)> = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .map(|l| (Instant::now(), l))
        .collect();
    let status = child.wait().unwrap();
    let ended = Instant::now();
    assert!(status.success(), "send {args:?}: {status}");
    (lines, ended)
}

#[test]
fn json_stream_arrives_during_the_run_and_adds_up() {
    let _r = recv(15821);
    // 2 UDP flows of 500 pps for 1.5 s, 200 ms intervals.
    let (lines, ended) = send_lines(&[
        "-a",
        "127.0.0.1",
        "-p",
        "15821",
        "--flows",
        "2",
        "-C",
        "500",
        "-c",
        "200",
        "-t",
        "1500",
        "--interval",
        "200",
        "--linger",
        "300",
        "--json-stream",
    ]);
    let events: Vec<(Instant, Value)> = lines
        .iter()
        .map(|(t, l)| {
            (
                *t,
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")),
            )
        })
        .collect();
    assert_eq!(events[0].1["event"], "start", "{:?}", events[0].1);
    let (_, end) = events.last().unwrap();
    assert_eq!(end["event"], "end");
    let doc = &end["data"];
    assert_eq!(doc["schema"], "wirebench.result/1");
    let intervals: Vec<&(Instant, Value)> = events
        .iter()
        .filter(|(_, e)| e["event"] == "interval")
        .collect();
    // The first interval is read at least a second before the sender ends
    // (the run lasts 1.5 s plus the linger): it was streamed, not printed
    // from the final report.
    let first = intervals.first().expect("no interval events").0;
    assert!(
        ended.duration_since(first) > Duration::from_millis(1000),
        "first interval only {:?} before the end",
        ended.duration_since(first)
    );
    for (i, f) in doc["flows"].as_array().unwrap().iter().enumerate() {
        let id = i as u64 + 1;
        let mine: Vec<&Value> = intervals
            .iter()
            .map(|(_, e)| &e["data"])
            .filter(|d| d["flow_id"] == id)
            .collect();
        assert!(mine.len() >= 7, "flow {id}: {} intervals", mine.len());
        let sum = |k: &str| mine.iter().map(|d| d[k].as_u64().unwrap()).sum::<u64>();
        assert_eq!(
            sum("bytes"),
            f["received"]["bytes"].as_u64().unwrap(),
            "flow {id}"
        );
        assert_eq!(
            sum("packets"),
            f["received"]["unique"].as_u64().unwrap(),
            "flow {id}"
        );
        assert_eq!(f["received"]["unique"], 750, "flow {id}");
        // Consecutive interval numbers, 200 ms apart.
        for (k, d) in mine.iter().enumerate() {
            assert_eq!(d["index"], k as u64);
            assert!((d["t_s"].as_f64().unwrap() - 0.2 * k as f64).abs() < 1e-9);
        }
    }
}

/// A 500 pps TCP flow of 500-byte records on loopback with intervals of
/// `interval` ms, plus `extra` arguments.
fn tcp_run(
    port: u16,
    ms: &str,
    interval: &str,
    extra: &[&str],
) -> (Vec<(Instant, String)>, Instant) {
    let port = port.to_string();
    let mut args = vec![
        "-a",
        "127.0.0.1",
        "-p",
        &port,
        "-T",
        "tcp",
        "-C",
        "500",
        "-c",
        "500",
        "-t",
        ms,
        "--interval",
        interval,
        "--linger",
        "300",
    ];
    args.extend_from_slice(extra);
    send_lines(&args)
}

#[test]
fn tcp_interval_lines_show_tcp_state_while_running() {
    let _r = recv(15822);
    let (lines, ended) = tcp_run(15822, "1500", "250", &[]);
    let live: Vec<&(Instant, String)> = lines
        .iter()
        .filter(|(_, l)| l.starts_with("[  1]"))
        .collect();
    assert!(live.len() >= 5, "{lines:?}");
    assert!(
        ended.duration_since(live[0].0) > Duration::from_millis(900),
        "{lines:?}"
    );
    assert!(live[0].1.contains("cwnd"), "{}", live[0].1);
    // The final summary follows, without a second interval table.
    assert!(lines.iter().any(|(_, l)| l.starts_with("TOTAL")));
    assert!(!lines.iter().any(|(_, l)| l.contains("t_s       packets")));
}

#[test]
fn tcp_intervals_in_the_result_carry_tcp_info() {
    let _r = recv(15823);
    // --json to stdout: no live printer, the TCP_INFO still reaches the
    // result's intervals.
    let (lines, _) = tcp_run(15823, "1200", "200", &["--json"]);
    let text: String = lines.iter().map(|(_, l)| l.as_str()).collect();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let ivs = doc["flows"][0]["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 5, "{ivs:?}");
    let with_tcp: Vec<&Value> = ivs.iter().filter(|i| i.get("tcp").is_some()).collect();
    // Every interval but the last (or two, cut after Stop) was streamed
    // while the connection was open.
    assert!(with_tcp.len() + 2 >= ivs.len(), "{ivs:?}");
    for t in with_tcp {
        assert!(t["tcp"]["cwnd_bytes"].as_u64().unwrap() > 0, "{t}");
        assert!(t["tcp"]["mss"].as_u64().unwrap() > 0, "{t}");
        assert!(t["tcp"]["rtt_s"].as_f64().unwrap() > 0.0, "{t}");
    }
}
