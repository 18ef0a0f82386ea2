//! Ctrl-C during `wirebench send`: the first stops the flows and still
//! collects and writes the receiver's report as a partial result; a second
//! one exits at once. Runs the built binary on loopback (port 15690).
//! Unix only: it sends SIGINT.
#![cfg(unix)]

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");
const PORT: &str = "15690";

struct Recv(Child);

impl Drop for Recv {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn recv() -> Recv {
    let r = Recv(
        Command::new(BIN)
            .args(["recv", "-p", PORT])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", 15690)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "recv never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    r
}

fn sigint(child: &Child) {
    // SAFETY: kill takes integers only; the pid is our own unreaped child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
}

fn send(extra: &[&str]) -> Child {
    Command::new(BIN)
        .args([
            "send",
            "-a",
            "127.0.0.1",
            "-p",
            PORT,
            "-C",
            "1000",
            "-t",
            "20000",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn first_ctrl_c_keeps_a_partial_result_second_exits_at_once() {
    let _r = recv();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut s = send(&[&format!("--json={}", json.display()), "--linger", "300"]);
    std::thread::sleep(Duration::from_millis(1000));
    sigint(&s);
    let st = s.wait().unwrap();
    assert_eq!(
        st.code(),
        Some(1),
        "an interrupted measurement is a failed one"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["partial"], true);
    let f = &doc["flows"][0];
    let sent = f["sent"]["packets"].as_u64().unwrap();
    assert!(
        (500..5000).contains(&sent),
        "flows stopped at the Ctrl-C, not at the end: {sent}"
    );
    assert_eq!(
        f["received"]["packets"].as_u64(),
        Some(sent),
        "report collected"
    );

    // The second Ctrl-C does not wait for the 10 s linger.
    let mut s = send(&["--linger", "10000"]);
    std::thread::sleep(Duration::from_millis(1000));
    sigint(&s);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    sigint(&s);
    let st = s.wait().unwrap();
    assert_eq!(st.code(), Some(130));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}
