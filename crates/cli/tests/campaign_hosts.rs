//! `[hosts]` mode: the campaign sends to a `wirebench recv` it did not start
//! (a real host's; here one on loopback).

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wirebench_campaign::{RunStatus, Store};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");

struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn hosts_mode_uses_the_running_receiver() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let _recv = Kill(
        Command::new(BIN)
            .args(["recv", "-p", &port.to_string(), "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "receiver did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let out = Command::new(BIN)
        .args([
            "run",
            file.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "-q",
        ])
        .output()
        .unwrap();
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
