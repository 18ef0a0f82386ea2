//! Live intervals: `wirebench send --interval` / `--json-stream` print
//! while the run goes on (the receiver streams its interval figures over
//! the control connection), and the streamed intervals add up to the
//! result's totals; a campaign with interval_ms shows them in its progress.
//! Runs the built binary on loopback (ports 15821-15825, and a free port).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Recv, BIN};
use wirebench_testkit::{check, measure};

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
    stream_adds_up(15821, 2);
}

/// More flows than CPUs: the receiver serves them from shared receive
/// workers (one per CPU), which stream the intervals the same way.
#[test]
fn json_stream_with_more_flows_than_cpus() {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    stream_adds_up(15824, cpus + 2);
}

/// UDP flows of 750 packets at 500 pps (1.5 s; stopped by count, so the
/// totals are exact however late the host ran the pacer), 200 ms intervals:
/// the intervals arrive
/// while the run goes on and add up to each flow's received totals.
fn stream_adds_up(port: u16, flows: usize) {
    let _r = recv(port);
    let (port, flows) = (port.to_string(), flows.to_string());
    let (lines, ended) = send_lines(&[
        "-a",
        "127.0.0.1",
        "-p",
        &port,
        "--flows",
        &flows,
        "-C",
        "500",
        "-c",
        "200",
        "-z",
        "750",
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
    let all = doc["flows"].as_array().unwrap();
    assert_eq!(all.len().to_string(), flows);
    for (i, f) in all.iter().enumerate() {
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

/// A campaign with `interval_ms`: its progress (the bar's message, here
/// the `--progress-log` a script would watch) carries each run's live
/// interval figures while the run goes on, and the stored runs give the
/// scenario its series and its delay distribution, whose packet count is
/// the runs' received packets.
#[test]
fn campaign_progress_shows_live_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "name = \"live-progress\"\nrepetitions = 2\nduration_s = 1.5\ninterval_ms = 200\nlinger_s = 0.2\n[loopback]\n[matrix]\nip = [4]\ntransport = [\"udp\"]\npayload = [200]\npps = [400]\n",
    )
    .unwrap();
    // The events and the interval count are exact; how early the first
    // interval shows and each interval's rate depend on the host running
    // the sender and the receiver on time, so they are checks, measured
    // once more (a fresh campaign) when the host was seen busy.
    let mut attempt = 0;
    let db = measure("campaign live progress", || {
        attempt += 1;
        let db = dir.path().join(format!("w{attempt}.db"));
        let log = dir.path().join(format!("progress{attempt}.ndjson"));
        // Watch the log while the campaign runs: when did the first interval
        // of run 1 and the end of run 1 appear?
        let w = common::watch_progress(
            common::campaign(&file, &db, &["--progress-log", log.to_str().unwrap()]),
            &log,
        );
        let lines = w.lines;
        let ev = |v: &Value| v["event"].as_str().unwrap_or("").to_string();
        assert_eq!(lines.iter().filter(|v| ev(v) == "run_end").count(), 2);
        // Between each run's start and end: its intervals, with traffic.
        let mut cur = None;
        let mut per_run = 0;
        let mut off_rate = Vec::new();
        for v in &lines {
            match ev(v).as_str() {
                "run_start" => {
                    cur = v["run"].as_str().map(str::to_string);
                    per_run = 0;
                }
                "interval" => {
                    assert_eq!(v["run"].as_str(), cur.as_deref());
                    per_run += 1;
                    if per_run <= 5 {
                        let tp = v["throughput_bps"].as_f64().unwrap();
                        // 400 pps × 200 B = 640 kbit/s.
                        if !(tp > 300e3 && tp < 1.3e6) {
                            off_rate.push(v.to_string());
                        }
                        assert!(v["delay_mean_s"].as_f64().unwrap() > 0.0, "{v}");
                    }
                }
                "run_end" => {
                    assert_eq!(v["status"], "ok");
                    assert!(per_run >= 6, "{per_run} intervals in a 1.5 s run");
                }
                other => panic!("unexpected event {other}"),
            }
        }
        check(w.lead > Duration::from_millis(500), || {
            format!("intervals came only {:?} before the run ended", w.lead)
        })?;
        check(off_rate.is_empty(), || {
            format!("intervals outside 300 kbit/s..1.3 Mbit/s: {off_rate:?}")
        })?;
        Ok(db)
    });
    let store = wirebench_campaign::Store::open_existing(&db).unwrap();
    let s = wirebench_campaign::analysis::summarize(&store, "live-progress").unwrap();
    let sc = &s.scenarios[0];
    assert!(sc.series.as_ref().is_some_and(|x| x.runs == 2));
    let dist = sc.dist.as_ref().unwrap();
    let received = sc.metrics["packets_received"].mean * 2.0;
    assert_eq!(dist.runs, 2);
    assert_eq!(dist.delay.as_ref().unwrap().count() as f64, received);
    assert!(sc.metrics.contains_key("jitter_ipdv_p99_s"));
}

/// A receiver that does not stream intervals (an older release, played by
/// the hidden `recv --no-live-intervals`): the sender says so on stderr
/// and still gives every interval with the final result — as tables after
/// the run, and with `--json-stream` in the `end` object's document, where
/// they add up to the totals.
#[test]
fn a_receiver_without_live_intervals_gets_a_note_and_the_final_intervals() {
    let _r = Recv::args(&["-B", "127.0.0.1", "-p", "15825", "--no-live-intervals"]);
    let send = |extra: &[&str]| {
        let out = Command::new(BIN)
            .args([
                "send",
                "-a",
                "127.0.0.1",
                "-p",
                "15825",
                "-C",
                "500",
                "-c",
                "200",
                "-z",
                "600",
                "--interval",
                "200",
                "--linger",
                "300",
            ])
            .args(extra)
            .output()
            .unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        assert!(out.status.success(), "{extra:?}: {e}");
        assert!(
            e.contains("the receiver does not stream intervals"),
            "{extra:?}: {e}"
        );
        (o, e)
    };
    let (text, err) = send(&[]);
    assert!(err.contains("printed after the run"), "{err}");
    assert!(!text.contains("[  1]"), "{text}");
    assert!(text.contains("t_s       packets"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("TOTAL")), "{text}");

    let (stream, err) = send(&["--json-stream"]);
    assert!(err.contains("\"end\" object"), "{err}");
    let events: Vec<Value> = stream
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["start", "end"], "{stream}");
    let flow = &events[1]["data"]["flows"][0];
    let ivs = flow["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 6, "{ivs:?}");
    let packets: u64 = ivs.iter().map(|i| i["packets"].as_u64().unwrap()).sum();
    assert_eq!(packets, flow["received"]["unique"].as_u64().unwrap());
    assert_eq!(packets, 600);
}
