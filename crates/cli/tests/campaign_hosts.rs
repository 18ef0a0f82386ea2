//! `[hosts]` mode: the campaign sends to a `wirebench recv` it did not start
//! (a real host's; here one on loopback).

use wirebench_campaign::{RunStatus, Store};

mod common;
use common::{campaign, free_port, Recv};

#[test]
fn hosts_mode_uses_the_running_receiver() {
    let port = free_port();
    let _recv = Recv::start(port);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.toml");
    let db = dir.path().join("h.db");
    std::fs::write(
        &file,
        format!(
            "name = \"hosts\"\npackets = 30\nlinger_s = 0.1\n[hosts]\nreceiver = \"127.0.0.1\"\nreceiver6 = \"::1\"\nport = {port}\nmtu = 1500\nlink_rate = \"1gbit\"\n[matrix]\nip = [4, 6]\npayload = [1000]\npps = [1000]\n"
        ),
    )
    .unwrap();
    let out = campaign(&file, &db, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open_existing(&db).unwrap();
    let c = store.latest().unwrap().unwrap();
    let runs = store.runs(c.id).unwrap();
    assert_eq!(runs.len(), 2);
    for r in &runs {
        assert_eq!(r.status, RunStatus::Ok);
        let d = r.result.as_ref().unwrap();
        assert_eq!(d["flows"][0]["received"]["packets"], 30, "{d}");
        let want = if r.axes["ip"] == "6" {
            "::1"
        } else {
            "127.0.0.1"
        };
        assert!(
            r.command.contains(&format!("-a {want} -p {port}")),
            "{}",
            r.command
        );
    }
    // The real path's MTU and rate give the upper bound without touching it.
    let s = wirebench_campaign::summarize(&store, "hosts").unwrap();
    assert!(s.scenarios.iter().all(|x| x.upper_bound_bps.is_some()));
}
