#![cfg(unix)]
//! `[[hosts.node]]`: a campaign over real nodes driven through agents. Here
//! the nodes are local agents on loopback (no root); the SSH and MTU
//! paths are in `agents_ssh.rs`. Port 5400 (the nodes' receiver port): the
//! tests take it one at a time.

use serde_json::Value;
use std::time::Duration;
use wirebench_campaign::{RunStatus, Store};

mod common;
use common::campaign;
use wirebench_testkit::{check, measure};

#[test]
fn local_nodes_run_and_store_every_nodes_cpu_counters_and_metadata() {
    let _one = NODE_PORT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n.toml");
    let db = dir.path().join("n.db");
    std::fs::write(
        &file,
        "name = \"nodes\"\npackets = 200\nlinger_s = 0.2\nrepetitions = 2\n\
         [hosts]\n\
         [[hosts.node]]\nname = \"a\"\nlocal = true\nrole = \"sender\"\n\
         [[hosts.node]]\nname = \"b\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n\
         [[hosts.node]]\nname = \"r1\"\nlocal = true\nrole = \"router\"\n\
         [matrix]\nip = [4]\npayload = [500]\npps = [2000]\n",
    )
    .unwrap();
    let out = campaign(&file, &db, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open(&db).unwrap();
    let c = store.campaigns().unwrap().pop().unwrap();
    let runs = store.runs(c.id).unwrap();
    assert_eq!(runs.len(), 2);
    // The campaign's environment record names every node's system.
    for n in ["a", "b", "r1"] {
        let line = &c.environment.extra[&format!("node {n}")];
        assert!(
            line.contains("kernel ") && line.contains("clock "),
            "{line}"
        );
    }
    for r in &runs {
        assert_eq!(r.status, RunStatus::Ok, "{:?}", r.error);
        let o = r.counters.as_ref().expect("observations");
        for n in ["a", "b", "r1"] {
            assert!(
                o["cpu"][n]["cores"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty()),
                "{o}"
            );
            assert!(o["metadata"][n]["kernel"]
                .as_str()
                .is_some_and(|k| !k.is_empty()));
        }
        assert_eq!(o["roles"]["r1"], "router");
        assert_eq!(o["path_mtu"]["a->b"], 65535, "{o}");
        let doc = r.result.as_ref().unwrap();
        assert_eq!(doc["flows"][0]["received"]["packets"], 200, "{doc}");
    }
}

/// Both tests below use the nodes' fixed receiver port: one at a time.
static NODE_PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A `[[hosts.node]]` campaign with `interval_ms` = 200 over local agents,
/// its progress written to a log that is read while it runs: the events in
/// order, and when the first interval and the first run's end appeared.
fn nodes_progress(
    senders: &[&str],
    env: Option<&str>,
) -> (Vec<Value>, Duration, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n.toml");
    let db = dir.path().join("n.db");
    let log = dir.path().join("progress.ndjson");
    let mut toml = String::from(
        "name = \"nodes-live\"\nrepetitions = 2\nduration_s = 1.5\ninterval_ms = 200\nlinger_s = 0.2\n[hosts]\n\
         [[hosts.node]]\nname = \"b\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n",
    );
    for s in senders {
        toml.push_str(&format!(
            "[[hosts.node]]\nname = \"{s}\"\nlocal = true\nrole = \"sender\"\nto = \"b\"\n"
        ));
    }
    toml.push_str("[matrix]\nip = [4]\npayload = [200]\npps = [400]\n");
    std::fs::write(&file, toml).unwrap();
    let mut cmd = campaign(&file, &db, &["--progress-log", log.to_str().unwrap()]);
    if let Some(e) = env {
        cmd.env("WIREBENCH_AGENT_EXTRA_ARGS", e);
    }
    let w = common::watch_progress(cmd, &log);
    (w.lines, w.lead, db, dir)
}

fn ev(v: &Value) -> &str {
    v["event"].as_str().unwrap_or("")
}

/// Two sender nodes' agents relay their senders' intervals while the run
/// goes on: the progress shows each interval summed over both nodes'
/// flows, well before the run ends.
#[test]
fn agent_runs_show_live_intervals_in_the_progress() {
    let _one = NODE_PORT.lock().unwrap_or_else(|e| e.into_inner());
    // The events, the flows per interval and the interval count are
    // exact; how early the first interval shows and each interval's rate
    // depend on the host running the agents on time, so they are checks,
    // measured once more (a fresh campaign) when the host was seen busy.
    measure("two agents' live intervals", || {
        let (lines, lead, _, _dir) = nodes_progress(&["a", "a2"], None);
        let mut per_run = 0;
        let mut off_rate = Vec::new();
        for v in &lines {
            match ev(v) {
                "run_start" => per_run = 0,
                "interval" => {
                    per_run += 1;
                    assert!(
                        v["run"].as_str().unwrap().ends_with(" #1")
                            || v["run"].as_str().unwrap().ends_with(" #2"),
                        "{v}"
                    );
                    if per_run <= 5 {
                        assert_eq!(v["flows"], 2, "{v}");
                        let tp = v["throughput_bps"].as_f64().unwrap();
                        // 2 × 400 pps × 200 B = 1.28 Mbit/s.
                        if !(tp > 0.6e6 && tp < 2.6e6) {
                            off_rate.push(v.to_string());
                        }
                        assert!(v["delay_mean_s"].as_f64().unwrap() > 0.0, "{v}");
                    }
                }
                "run_end" => {
                    assert_eq!(v["status"], "ok", "{lines:?}");
                    assert!(
                        per_run >= 6,
                        "{per_run} intervals in a 1.5 s run: {lines:?}"
                    );
                }
                other => panic!("unexpected event {other}: {v}"),
            }
        }
        assert_eq!(lines.iter().filter(|v| ev(v) == "run_end").count(), 2);
        check(lead > Duration::from_millis(500), || {
            format!("intervals came only {lead:?} before the run ended: {lines:?}")
        })?;
        check(off_rate.is_empty(), || {
            format!("intervals outside 0.6..2.6 Mbit/s: {off_rate:?}")
        })
    });
}

/// An agent from before revision 1 (played by `--protocol-revision 0`):
/// one note names the node, the runs are measured and stored as usual
/// (with their intervals in the result), only the live figures are
/// missing.
#[test]
fn an_older_agent_runs_without_live_figures_and_says_so() {
    let _one = NODE_PORT.lock().unwrap_or_else(|e| e.into_inner());
    let (lines, _, db, _dir) = nodes_progress(&["a"], Some("--protocol-revision 0"));
    let notes: Vec<&Value> = lines.iter().filter(|v| ev(v) == "note").collect();
    assert_eq!(notes.len(), 1, "{lines:?}");
    let m = notes[0]["message"].as_str().unwrap();
    assert!(
        m.contains("node a") && m.contains("revision 0") && m.contains("no live figures"),
        "{m}"
    );
    assert!(!lines.iter().any(|v| ev(v) == "interval"), "{lines:?}");
    let ends: Vec<&Value> = lines.iter().filter(|v| ev(v) == "run_end").collect();
    assert_eq!(ends.len(), 2);
    assert!(ends.iter().all(|v| v["status"] == "ok"), "{lines:?}");
    let store = Store::open(&db).unwrap();
    let c = store.campaigns().unwrap().pop().unwrap();
    for r in store.runs(c.id).unwrap() {
        let doc = r.result.as_ref().unwrap();
        let ivs = doc["flows"][0]["intervals"].as_array().unwrap();
        assert!(ivs.len() >= 7, "{doc}");
    }
}
