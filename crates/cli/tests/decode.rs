//! `wirebench decode`: D-ITG logs decode to what ITGDec prints, Parquet and
//! CSV exports read back to the same rows, windows add up to the totals, and
//! damaged logs or bad flags are refused with exit 2 and nothing written.
//! The D-ITG test opens sockets on loopback: run it under the network lock.

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::RowAccessor;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use wirebench_pktlog::format::{FLAG_LAST, FLAG_NOT_SENT, FLAG_RX};
use wirebench_pktlog::{FlowEnd, FlowMeta, LogFooter, LogMeta, LogReader, LogWriter, Record, Side};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");

fn wb(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn meta(side: Side) -> LogMeta {
    LogMeta {
        side,
        meter: "owd".into(),
        session: 7,
        started_at: None,
        tool: "test".into(),
        delay_offset_ns: 0,
        sessions: Vec::new(),
        flows: vec![
            FlowMeta {
                id: 1,
                transport: "udp".into(),
                ip_version: 4,
                mtu: 1500,
                src: None,
                dst: None,
            },
            FlowMeta {
                id: 2,
                transport: "tcp".into(),
                ip_version: 6,
                mtu: 9000,
                src: None,
                dst: None,
            },
        ],
    }
}

const T0: u64 = 1_800_000_000_000_000_000;

/// A receiver log: flow 1 at 1 kpps with seq 5..=9 lost and 20 duplicated,
/// flow 2 with a growing delay; sent = 1000 per flow (the last 10 of flow 2
/// lost after its last arrival).
fn receiver_log(path: &Path) -> Vec<Record> {
    let mut recs = Vec::new();
    for i in 0..1000u64 {
        if !(5..=9).contains(&i) {
            recs.push(Record {
                flow: 1,
                flags: FLAG_RX,
                size: 512,
                seq: i,
                tx_ns: T0 + i * 1_000_000,
                rx_ns: T0 + i * 1_000_000 + 100_000 + (i % 7) * 1000,
            });
        }
        if i == 20 {
            recs.push(*recs.last().unwrap());
        }
        if i < 990 {
            recs.push(Record {
                flow: 2,
                flags: FLAG_RX,
                size: 1000,
                seq: i,
                tx_ns: T0 + i * 1_000_000 + 500,
                rx_ns: T0 + i * 1_000_000 + 500 + 200_000 + i * 10,
            });
        }
    }
    let f = std::fs::File::create(path).unwrap();
    let mut w = LogWriter::with_block_records(f, &meta(Side::Recv), 100).unwrap();
    for r in &recs {
        w.push(r).unwrap();
    }
    w.finish(LogFooter {
        flows: vec![
            FlowEnd {
                id: 1,
                sent: Some(1000),
                not_sent: 0,
            },
            FlowEnd {
                id: 2,
                sent: Some(1000),
                not_sent: 0,
            },
        ],
        ..Default::default()
    })
    .unwrap();
    recs
}

#[test]
fn summary_and_windows_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("r.wblog");
    receiver_log(&log);
    let series = dir.path().join("s.csv");
    let o = wb(&[
        "decode",
        log.to_str().unwrap(),
        "--json",
        "--window",
        "100",
        "--series",
        series.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "wirebench.decode/1");
    let f1 = &v["flows"][0]["received"];
    assert_eq!(f1["packets"], 996);
    assert_eq!(f1["unique"], 995);
    assert_eq!(f1["duplicates"], 1);
    assert_eq!(f1["lost"], 5);
    assert_eq!(f1["loss_bursts"]["max_len"], 5);
    assert_eq!(f1["bytes"], 995 * 512);
    let f2 = &v["flows"][1]["received"];
    assert_eq!(f2["unique"], 990);
    assert_eq!(
        f2["lost"], 10,
        "losses after the last arrival come from the footer"
    );
    assert_eq!(v["flows"][1]["transport"], "tcp");
    // Mean delay of flow 2: 200 µs + 10 ns × mean(i) over 0..990.
    let want = (200_000.0 + 10.0 * 494.5) / 1e9;
    assert!((f2["delay_s"]["mean"].as_f64().unwrap() - want).abs() < 1e-12);

    let csv = std::fs::read_to_string(&series).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "flow,t_s,packets,bitrate_bps,packet_rate_pps,delay_mean_s,jitter_s,lost"
    );
    let (mut pk, mut lost) = ([0u64; 3], [0u64; 3]);
    let mut rows = 0;
    for l in lines {
        let c: Vec<&str> = l.split(',').collect();
        let flow: usize = c[0].parse().unwrap();
        let packets: u64 = c[2].parse().unwrap();
        pk[flow] += packets;
        lost[flow] += c[7].parse::<u64>().unwrap();
        let rate: f64 = c[4].parse().unwrap();
        assert!((rate - packets as f64 * 10.0).abs() < 1e-9, "{l}");
        rows += 1;
    }
    assert_eq!(rows, 20, "1 s of traffic in 100 ms windows, two flows");
    assert_eq!((pk[1], pk[2]), (995, 990), "windows count unique packets");
    assert_eq!(
        (lost[1], lost[2]),
        (5, 10),
        "windows' losses add up to the total"
    );

    // The same series as JSON.
    let sj = dir.path().join("s.json");
    let o = wb(&[
        "decode",
        log.to_str().unwrap(),
        "-w",
        "100",
        "--series",
        sj.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&sj).unwrap()).unwrap();
    assert_eq!(j.as_array().unwrap().len(), 20);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("lost         5 (0.500 %)"), "{out}");
}

#[test]
fn parquet_and_csv_exports_read_back_to_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("send.wblog");
    // A sender log, with packets that were not sent (no receive time, no
    // delay: null in Parquet, empty in CSV).
    let mut recs = Vec::new();
    for i in 0..300_000u64 {
        let flags = match i {
            _ if i % 1000 == 999 => FLAG_NOT_SENT,
            299_999 => FLAG_LAST,
            _ => 0,
        };
        recs.push(Record {
            flow: 1 + (i % 2) as u16,
            flags,
            size: 24 + (i % 1400) as u32,
            seq: i / 2,
            tx_ns: T0 + i * 3333,
            rx_ns: 0,
        });
    }
    // Plus reflections (RTT meter): they carry a receive time and a delay.
    for i in 0..10u64 {
        recs.push(Record {
            flow: 1,
            flags: FLAG_RX | wirebench_pktlog::format::FLAG_REFLECTED,
            size: 40,
            seq: i,
            tx_ns: T0 + i,
            rx_ns: T0 + i + 55_000 + i,
        });
    }
    let mut w = LogWriter::new(std::fs::File::create(&log).unwrap(), &meta(Side::Send)).unwrap();
    for r in &recs {
        w.push(r).unwrap();
    }
    w.finish(LogFooter::default()).unwrap();

    let pq = dir.path().join("rows.parquet");
    let csv = dir.path().join("rows.csv");
    for out in [&pq, &csv] {
        let o = wb(&[
            "decode",
            log.to_str().unwrap(),
            "--records",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let reader = SerializedFileReader::new(std::fs::File::open(&pq).unwrap()).unwrap();
    assert_eq!(
        reader.metadata().file_metadata().num_rows() as usize,
        recs.len()
    );
    let mut n = 0;
    for (row, r) in reader.get_row_iter(None).unwrap().zip(&recs) {
        let row = row.unwrap();
        assert_eq!(row.get_ushort(0).unwrap(), r.flow);
        assert_eq!(row.get_ulong(1).unwrap(), r.seq);
        assert_eq!(row.get_uint(2).unwrap(), r.size);
        assert_eq!(row.get_ulong(3).unwrap(), r.tx_ns);
        if r.received() {
            assert_eq!(row.get_ulong(4).unwrap(), r.rx_ns);
            assert_eq!(row.get_long(5).unwrap(), (r.rx_ns - r.tx_ns) as i64);
        } else {
            assert!(row.get_ulong(4).is_err(), "row {n}: rx must be null");
            assert!(row.get_long(5).is_err(), "row {n}: delay must be null");
        }
        assert_eq!(row.get_ushort(6).unwrap(), r.flags);
        n += 1;
    }
    assert_eq!(n, recs.len());

    let csv = std::fs::read_to_string(&csv).unwrap();
    let mut lines = csv.split("\r\n");
    assert_eq!(
        lines.next().unwrap(),
        "flow,seq,size,tx_ns,rx_ns,delay_ns,flags"
    );
    for (l, r) in lines.zip(&recs) {
        let want = if r.received() {
            format!(
                "{},{},{},{},{},{},{}",
                r.flow,
                r.seq,
                r.size,
                r.tx_ns,
                r.rx_ns,
                r.rx_ns - r.tx_ns,
                r.flags
            )
        } else {
            format!("{},{},{},{},,,{}", r.flow, r.seq, r.size, r.tx_ns, r.flags)
        };
        assert_eq!(l, want);
    }
    assert_eq!(csv.matches("\r\n").count(), recs.len() + 1);

    // The sender log's own summary.
    let o = wb(&["decode", log.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["side"], "send");
    assert_eq!(v["flows"][0]["sent"]["packets"], 150_000);
    assert_eq!(v["flows"][1]["sent"]["packets"], 150_000 - 300);
    assert_eq!(v["flows"][1]["sent"]["not_sent"], 300);
    assert_eq!(v["flows"][0]["rtt"]["unique"], 10);
}

#[test]
fn damaged_logs_and_bad_flags_exit_2_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("r.wblog");
    receiver_log(&log);
    let bytes = std::fs::read(&log).unwrap();
    let cut = dir.path().join("cut.wblog");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.path().join("out.csv");
    let o = wb(&[
        "decode",
        cut.to_str().unwrap(),
        "--records",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cut.wblog") && err.contains("truncated at byte"),
        "{err}"
    );
    assert!(!out.exists(), "a half-written export stayed behind");

    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"this is not a log at all, just some text\n").unwrap();
    let o = wb(&["decode", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("neither a wirebench packet log"));

    let o = wb(&["decode", log.to_str().unwrap(), "--records", "x.txt"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--records x.txt"));
    let o = wb(&["decode", "/nonexistent/log"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = wb(&[
        "decode",
        log.to_str().unwrap(),
        "--series",
        "/nonexistent/s.csv",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // A log read back whole after all this.
    let mut r = LogReader::open(std::fs::File::open(&log).unwrap()).unwrap();
    while r.next_record().unwrap().is_some() {}
}

/// The number after `label` and `=` in ITGDec's output (first occurrence).
fn itgdec_value(out: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("ITGDec printed no {label:?}:\n{out}"));
    line.split('=')
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until something listens on TCP `port` (any address), as `ss`
/// lists it; fails after `limit`.
fn listening_within(port: u16, limit: Duration) {
    let end = Instant::now() + limit;
    let filter = format!("sport = :{port}");
    loop {
        let ss = Command::new("ss")
            .args(["-Htln", &filter])
            .output()
            .expect("run ss (iproute2)");
        if ss.status.success() && !ss.stdout.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        assert!(Instant::now() < end, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ditg_logs_decode_to_what_itgdec_prints() {
    if Command::new("ITGSend").arg("-h").output().is_err() {
        panic!("D-ITG is not installed (ITGSend missing): run scripts/setup");
    }
    let dir = tempfile::tempdir().unwrap();
    /// ITGRecv, killed however the test ends.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // ITGRecv writes the -x log into its working directory.
    let recv = Kill(
        Command::new("ITGRecv")
            .args(["-Sp", "9461"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Ready when its signalling port listens (read from the socket table,
    // without connecting to it): a fixed 500 ms let a host that held its
    // start refuse ITGSend.
    listening_within(9461, Duration::from_secs(10));
    let send = Command::new("ITGSend")
        .args([
            "-Sdp",
            "9461",
            "-a",
            "127.0.0.1",
            "-rp",
            "9462",
            "-T",
            "UDP",
            "-C",
            "400",
            "-c",
            "300",
            "-t",
            "1500",
            "-l",
            "send.log",
            "-x",
            "recv.log",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(send.status.success(), "ITGSend: {}", text(&send));
    let recv_log = dir.path().join("recv.log");
    // ITGRecv writes its log when the flow ends; wait for the size to settle.
    let end = Instant::now() + Duration::from_secs(10);
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let len = std::fs::metadata(&recv_log).map(|m| m.len()).unwrap_or(0);
        if len > 0 && len == last {
            break;
        }
        last = len;
        assert!(Instant::now() < end, "ITGRecv wrote no log");
    }
    drop(recv);

    for (file, sender) in [("recv.log", false), ("send.log", true)] {
        let path = dir.path().join(file);
        let dec = Command::new("ITGDec").arg(&path).output().unwrap();
        let itg = String::from_utf8_lossy(&dec.stdout).to_string();
        let packets = itgdec_value(&itg, "Total packets");
        let mean = itgdec_value(&itg, "Average delay");
        let jitter = itgdec_value(&itg, "Average jitter");
        let bytes = itgdec_value(&itg, "Bytes received");
        assert!(
            packets > 100.0,
            "too few packets for a meaningful test:\n{itg}"
        );

        let o = wb(&["decode", path.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["format"], "d-itg");
        let f = &v["flows"][0];
        assert_eq!(
            f["src"].as_str().unwrap().split('/').next(),
            Some("127.0.0.1")
        );
        if sender {
            assert_eq!(v["side"], "send");
            assert_eq!(f["sent"]["packets"].as_f64(), Some(packets), "{itg}");
            assert_eq!(f["sent"]["bytes"].as_f64(), Some(bytes), "{itg}");
        } else {
            assert_eq!(v["side"], "recv");
            let r = &f["received"];
            assert_eq!(r["packets"].as_f64(), Some(packets), "{itg}");
            assert_eq!(r["bytes"].as_f64(), Some(bytes), "{itg}");
            // ITGDec prints 6 decimals: agree to its rounding.
            let ours = r["delay_s"]["mean"].as_f64().unwrap();
            assert!(
                (ours - mean).abs() <= 0.6e-6,
                "mean delay {ours} vs ITGDec {mean}"
            );
            let ours = r["jitter_s"]["mean_abs_ipdv"].as_f64().unwrap();
            assert!(
                (ours - jitter).abs() <= 0.6e-6,
                "jitter {ours} vs ITGDec {jitter}"
            );
        }
    }
}

/// A loopback receiver daemon logging every session into a directory,
/// killed when dropped.
struct LoggingRecv(std::process::Child);

impl LoggingRecv {
    /// Starts it on `port` and waits for its control port.
    fn start(port: &str, dir: &Path, extra: &[&str]) -> LoggingRecv {
        let child = Command::new(BIN)
            .args(["recv", "-p", port, "-B", "127.0.0.1", "-q"])
            .args(extra)
            .arg("--log-dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let recv = LoggingRecv(child);
        let end = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
            assert!(Instant::now() < end, "recv did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        recv
    }
}

impl Drop for LoggingRecv {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_receiver_log_decodes_to_the_result_documents_figures_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let port = "15471";
    let _recv = LoggingRecv::start(port, dir.path(), &[]);
    let send_dir = tempfile::tempdir().unwrap();
    let send_log = send_dir.path().join("send.wblog");
    let o = wb(&[
        "send",
        "-a",
        "127.0.0.1",
        "-p",
        port,
        "--flows",
        "2",
        "-C",
        "5000",
        "-c",
        "200",
        "-t",
        "1500",
        "--linger",
        "300",
        "--json",
        "-",
        "-l",
        send_log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1, "one session, one log: {logs:?}");
    let d = wb(&["decode", logs[0].to_str().unwrap(), "--json"]);
    assert!(d.status.success(), "{}", text(&d));
    let dec: Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(dec["side"], "recv");
    assert_eq!(dec["dropped"], 0);
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2);
    for (i, f) in flows.iter().enumerate() {
        let got = &dec["flows"][i];
        assert_eq!(got["id"], f["id"]);
        let r = &got["received"];
        for k in [
            "packets",
            "unique",
            "bytes",
            "lost",
            "duplicates",
            "reordered",
        ] {
            assert_eq!(r[k], f["received"][k], "flow {i} {k}");
        }
        assert!(
            r["unique"].as_u64().unwrap() > 5000,
            "flow {i}: too few packets"
        );
        // Counts above are exact; the statistics are the same numbers
        // summed in another order, so they agree to the last bits of an
        // f64 (one ulp has been seen), not necessarily in every bit.
        let same = |a: &Value, b: &Value, what: &str| {
            let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                "flow {i} {what}: {x} vs {y}"
            );
        };
        for k in ["min", "mean", "max", "stddev", "p50", "p99"] {
            same(&r["delay_s"][k], &f["delay_s"][k], &format!("delay {k}"));
        }
        for k in ["mean_abs_ipdv", "rfc3550"] {
            same(&r["jitter_s"][k], &f["jitter_s"][k], &format!("jitter {k}"));
        }
    }
    // The sender's own log (-l) gives the document's send side.
    let d = wb(&["decode", send_log.to_str().unwrap(), "--json"]);
    assert!(d.status.success(), "{}", text(&d));
    let dec: Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(dec["side"], "send");
    for (i, f) in flows.iter().enumerate() {
        let s = &dec["flows"][i]["sent"];
        for k in ["packets", "bytes", "not_sent"] {
            assert_eq!(s[k], f["sent"][k], "flow {i} sent {k}");
        }
        // The log keeps the transmit stamps the probes carried (wall
        // clock, one per batch); the document times sends on the
        // monotonic clock: the spans agree to far better than 0.1 %.
        let (a, b) = (
            s["duration_s"].as_f64().unwrap(),
            f["sent"]["duration_s"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-3 * b, "flow {i} duration {a} vs {b}");
    }
}

#[test]
fn a_receiver_log_stops_at_its_cap_and_the_daemon_total_holds() {
    let dir = tempfile::tempdir().unwrap();
    let port = "15473";
    // 100 records per session, 150 for the daemon.
    let _recv = LoggingRecv::start(
        port,
        dir.path(),
        &["--log-max", "3200", "--log-max-total", "4800"],
    );
    let mut kept = Vec::new();
    for _ in 0..2 {
        let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        let o = wb(&[
            "send",
            "-a",
            "127.0.0.1",
            "-p",
            port,
            "-C",
            "2000",
            "-c",
            "100",
            "-t",
            "500",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let logs: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(logs.len(), before.len() + 1, "one log per session");
        let newest = logs
            .iter()
            .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
            .unwrap();
        let d = wb(&["decode", newest.to_str().unwrap(), "--json"]);
        assert!(d.status.success(), "{}", text(&d));
        let dec: Value = serde_json::from_slice(&d.stdout).unwrap();
        let records = dec["records"].as_u64().unwrap();
        let capped = dec["capped"].as_u64().unwrap_or(0);
        let dropped = dec["dropped"].as_u64().unwrap();
        assert_eq!(records + capped + dropped, 1000, "{dec}");
        kept.push(records);
        let t = wb(&["decode", newest.to_str().unwrap()]);
        assert!(text(&t).contains("size cap"), "{}", text(&t));
    }
    assert_eq!(kept, vec![100, 50]);
}
