//! D-ITG's log options end to end on loopback: `send -x NAME` (the
//! receiver logs the session under the sender's name, confined to its
//! `--log-dir`) and one `send -l FILE` for a script whose flows go to two
//! receivers, each decoded and checked against the result document.

mod common;

use common::{free_port, Recv, BIN};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output};

fn wb(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run wirebench")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `wirebench decode FILE --json`, which must succeed.
fn decode(path: &Path) -> Value {
    let o = wb(&["decode", path.to_str().unwrap(), "--json"]);
    assert!(
        o.status.success(),
        "decode {}: {}",
        path.display(),
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout).expect("decode's JSON")
}

/// A ten-packet `send -x NAME` to the receiver on 127.0.0.1:PORT.
fn send_x(port: &str, name: &str) -> Output {
    wb(&[
        "send",
        "-a",
        "127.0.0.1",
        "-p",
        port,
        "-z",
        "10",
        "-x",
        name,
    ])
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn send_x_names_the_receivers_log_and_it_decodes_to_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let _recv = Recv::args(&[
        "-B",
        "127.0.0.1",
        "-p",
        &port,
        "--log-dir",
        dir.path().to_str().unwrap(),
    ]);
    let run = |name: &str| -> Value {
        let o = wb(&[
            "send",
            "-a",
            "127.0.0.1",
            "-p",
            &port,
            "-C",
            "2000",
            "-c",
            "200",
            "-z",
            "1500",
            "--linger",
            "300",
            "-x",
            name,
            "--json",
        ]);
        assert!(o.status.success(), "send -x {name}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let doc = run("mine.log");
    assert_eq!(doc["receiver"]["log"], "mine.log");
    assert_eq!(names(dir.path()), ["mine.log"]);
    let dec = decode(&dir.path().join("mine.log"));
    assert_eq!(dec["side"], "recv");
    assert_eq!(dec["dropped"], 0);
    let (got, want) = (&dec["flows"][0]["received"], &doc["flows"][0]["received"]);
    assert!(want["unique"].as_u64().unwrap() > 1000, "{want}");
    for k in ["unique", "bytes", "lost", "duplicates", "reordered"] {
        assert_eq!(got[k], want[k], "received {k}");
    }
    // The same name again: never overwritten, the next free one is used
    // and told to the sender.
    let doc = run("mine.log");
    assert_eq!(doc["receiver"]["log"], "mine-1.log");
    assert_eq!(names(dir.path()), ["mine-1.log", "mine.log"]);

    // A path is refused by the sender before anything is sent.
    for bad in ["../escape.log", "/tmp/x.log", ".hidden"] {
        let o = send_x(&port, bad);
        assert_eq!(o.status.code(), Some(2), "-x {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("-x"), "{}", stderr(&o));
    }
    // ... and by the receiver, whoever asks: a raw Hello with a path.
    let mut c = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    c.write_all(
        b"{\"type\":\"hello\",\"version\":1,\"session\":9,\"meter\":\"owd\",\"flows\":[{\"flow_id\":1,\"transport\":\"udp\",\"max_len\":100,\"mtu\":1500}],\"log_name\":\"../../etc/evil\"}\n",
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(&c).read_line(&mut line).unwrap();
    assert!(
        line.contains("\"error\"") && line.contains("is a path"),
        "{line}"
    );
    assert_eq!(names(dir.path()), ["mine-1.log", "mine.log"]);
    assert!(!dir.path().parent().unwrap().join("evil").exists());
}

#[test]
fn a_receiver_without_a_log_dir_or_with_no_log_names_refuses_x() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().to_str().unwrap();
    for (extra, reason) in [
        (&[][..], "keeps no logs"),
        (&["--log-dir", logs, "--no-log-names"][..], "--no-log-names"),
    ] {
        let port = free_port().to_string();
        let mut args = vec!["-B", "127.0.0.1", "-p", &port];
        args.extend_from_slice(extra);
        let _recv = Recv::args(&args);
        let o = send_x(&port, "r.log");
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(reason), "{}", stderr(&o));
    }
    assert!(names(dir.path()).is_empty());
}

#[test]
fn one_send_log_holds_a_scripts_flows_to_two_receivers() {
    let rx: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let port = free_port().to_string();
    // Two receivers on one control port, at two loopback addresses.
    let _a = Recv::args(&[
        "-B",
        "127.0.0.1",
        "-p",
        &port,
        "--log-dir",
        rx[0].path().to_str().unwrap(),
    ]);
    let _b = Recv::args(&[
        "-B",
        "127.0.0.2",
        "-p",
        &port,
        "--log-dir",
        rx[1].path().to_str().unwrap(),
    ]);
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("flows.ditg");
    std::fs::write(
        &script,
        "-a 127.0.0.1 -C 1000 -c 200 -z 600\n\
         -a 127.0.0.2 -T UDP -C 500 -c 300 -z 300\n\
         -a 127.0.0.1 -T TCP -C 200 -c 100 -z 150\n",
    )
    .unwrap();
    let log = work.path().join("all.wblog");
    let o = wb(&[
        "send",
        "--script",
        script.to_str().unwrap(),
        "-p",
        &port,
        "--linger",
        "300",
        "-l",
        log.to_str().unwrap(),
        "-x",
        "itg.log",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    // Only the joined log is left beside it.
    assert_eq!(names(work.path()), ["all.wblog", "flows.ditg"]);
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 3);
    let dec = decode(&log);
    assert_eq!(dec["side"], "send");
    assert_eq!(dec["records"], 600 + 300 + 150, "every packet sent, once");
    let got = dec["flows"].as_array().unwrap();
    assert_eq!(got.len(), 3);
    for (f, g) in flows.iter().zip(got) {
        // The log numbers flows as the document does (grouped by receiver).
        assert_eq!(g["id"], f["id"]);
        assert_eq!(g["dst"], f["dst"], "flow {}", f["id"]);
        for k in ["packets", "bytes", "not_sent"] {
            assert_eq!(g["sent"][k], f["sent"][k], "flow {} sent {k}", f["id"]);
        }
    }
    // -x reached both receivers: each logged its own session's flows.
    for (d, n) in rx.iter().zip([2usize, 1]) {
        assert_eq!(names(d.path()), ["itg.log"]);
        let r = decode(&d.path().join("itg.log"));
        assert_eq!(r["flows"].as_array().unwrap().len(), n);
    }
    let sessions = doc["sessions"].as_array().unwrap();
    assert!(
        sessions.iter().all(|s| s["receiver"]["log"] == "itg.log"),
        "{sessions:?}"
    );
}
