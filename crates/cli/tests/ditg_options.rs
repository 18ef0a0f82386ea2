//! Walks docs/options.md's table of every ITGSend and ITGRecv option and
//! runs each row's example: a supported or mapped option must parse and
//! pass every check (send: the connection to a closed port then fails,
//! exit 1; recv: the daemon listens), an ignored one must also say so in a
//! note, and a refused one must exit 2 with a message that starts with the
//! option, not clap's generic one. So the table cannot claim what the
//! program does not do.

mod common;

use common::{free_port, BIN};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

struct Row {
    program: String,
    example: String,
    status: String,
}

/// The rows of the "ITGSend and ITGRecv options: status" table.
fn rows() -> Vec<Row> {
    let doc = include_str!("../../../docs/options.md");
    let start = doc
        .find("## ITGSend and ITGRecv options: status")
        .expect("the options table's section");
    let mut rows = Vec::new();
    for line in doc[start..].lines() {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        if cells.len() < 5 || !line.starts_with("| ITG") {
            continue;
        }
        let example = cells[2].trim_matches('`').to_string();
        rows.push(Row {
            program: cells[0].trim_start_matches("| ").to_string(),
            example,
            status: cells[3].to_string(),
        });
    }
    rows
}

/// What a run printed and how it ended (None: still running after the
/// daemon said it listens, then killed).
struct Ran {
    code: Option<i32>,
    stderr: String,
}

/// Runs `wirebench ARGS` until it exits, or (a daemon) until it prints
/// "listening on", then kills it. Bounded by 20 s.
fn run(args: &[String]) -> Ran {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirebench");
    let err = child.stderr.take().expect("piped");
    let (tx, rx) = channel();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(20);
    let mut stderr = String::new();
    let code = loop {
        while let Ok(l) = rx.try_recv() {
            stderr.push_str(&l);
            stderr.push('\n');
        }
        if stderr.contains("listening on") {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        if let Some(st) = child.try_wait().expect("try_wait") {
            let _ = reader.join();
            stderr.extend(rx.try_iter().map(|l| l + "\n"));
            break Some(st.code().unwrap_or(-1));
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} neither exited nor listened within 20 s: {stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran { code, stderr }
}

#[test]
fn every_itgsend_and_itgrecv_option_does_what_the_table_says() {
    let rows = rows();
    assert!(rows.len() >= 70, "the table lost rows: {}", rows.len());
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let idt = file("idt.txt", "1\n2\n");
    let size = file("size.txt", "100\n200\n");
    let payload = file("payload.bin", "abcdefgh");
    let script = file("flows.ditg", "-a 127.0.0.1 -C 100 -c 100 -z 10\n");
    let log = dir.path().join("send.log").to_string_lossy().into_owned();
    // Nothing listens on it: a send that passed its checks fails to connect.
    let closed = free_port().to_string();
    let mut failures = Vec::new();
    for row in &rows {
        let free = free_port().to_string();
        let example: Vec<String> = row
            .example
            .split_whitespace()
            .map(|w| match w {
                "IDT_FILE" => idt.clone(),
                "SIZE_FILE" => size.clone(),
                "PAYLOAD_FILE" => payload.clone(),
                "SCRIPT_FILE" => script.clone(),
                "LOG_FILE" => log.clone(),
                "CLOSED_PORT" => closed.clone(),
                "FREE_PORT" => free.clone(),
                w => w.to_string(),
            })
            .collect();
        let has = |o: &str| example.iter().any(|w| w == o);
        let mut args: Vec<String> = Vec::new();
        if row.program == "ITGSend" {
            args.push("send".into());
            args.extend(example.iter().cloned());
            if !has("-a") && !row.example.starts_with("SCRIPT_FILE") {
                args.extend(["-a".into(), "127.0.0.1".into()]);
            }
            if !has("-p") && !has("-Sdp") {
                args.extend(["-p".into(), closed.clone()]);
            }
        } else {
            args.push("recv".into());
            args.extend(example.iter().cloned());
            if !has("-a") {
                args.extend(["-B".into(), "127.0.0.1".into()]);
            }
            if !has("-Sp") {
                args.extend(["-p".into(), free.clone()]);
            }
        }
        let r = run(&args);
        let option = example.first().cloned().unwrap_or_default();
        let generic = r.stderr.contains("unexpected argument") || r.stderr.contains("Usage:");
        let ok = match (row.status.as_str(), r.code) {
            ("supported" | "mapped", c) => c != Some(2) && !generic,
            ("ignored", c) => c != Some(2) && r.stderr.contains("note:"),
            ("refused", Some(2)) => r.stderr.contains(&format!("wirebench: {option}")) && !generic,
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{} {:?} ({}): exit {:?}: {}",
                row.program,
                row.example,
                row.status,
                r.code,
                r.stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "rows not as documented:\n{}",
        failures.join("\n")
    );
}
