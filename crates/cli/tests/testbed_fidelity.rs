//! Numbers a paper could print, on the emulated router test-bed (root): a
//! finite TCP transfer reports its completion time and never beats the
//! wire, and a UDP sender that overloads its own link loses the excess at
//! its own host's NIC-like queue, counted as `sender_host` in the loss
//! split. Runs are short (well under a second of traffic each).

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");
const NAME: &str = "fidtest";
const PORT: &str = "15471";

/// The test-bed and the receiver in node b; both go away on drop, also
/// when an assertion fails.
struct Bed {
    recv: Option<Child>,
}

impl Bed {
    fn up(args: &[&str]) -> Bed {
        let mut a = vec!["testbed", "up", "router", "--name", NAME];
        a.extend(args);
        let out = Command::new(BIN).args(&a).output().unwrap();
        assert!(
            out.status.success(),
            "testbed up {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut bed = Bed { recv: None };
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("wb-{NAME}-b"),
                BIN,
                "recv",
                "-p",
                PORT,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        bed.recv = Some(child);
        // The receiver is up when its control port answers from node a.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            let probe = Command::new("ip")
                .args(["netns", "exec", &format!("wb-{NAME}-b"), "ss", "-Htln"])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&probe.stdout).contains(&format!(":{PORT}")) {
                return bed;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("receiver did not come up");
    }

    /// `wirebench send` from node a; the result document.
    fn send(&self, args: &[&str]) -> Value {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let ns = format!("wb-{NAME}-a");
        let mut a = vec!["netns", "exec", &ns, BIN, "send", "-a", "b", "-p", PORT];
        a.extend(args);
        a.extend(["--linger", "300", "--json", json.to_str().unwrap()]);
        let out = Command::new("ip").args(&a).output().unwrap();
        assert!(
            out.status.success(),
            "send {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.recv.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new(BIN)
            .args(["testbed", "down", "--name", NAME])
            .output();
    }
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

#[test]
fn transfers_complete_no_faster_than_the_wire_and_host_drops_are_split() {
    if !wirebench_testbed::sys::is_root() {
        eprintln!("SKIP: needs root (network namespaces)");
        return;
    }
    // S4's transfer: 5 MiB over TCP/IPv6 at 1 Gbit/s, 9000 B MTU. The wire
    // needs 42.5 ms for it (every frame's header, preamble and gap); the
    // sender's writes end in its socket buffer long before that.
    let bed = Bed::up(&["--mtu", "9000", "--rate", "1gbit"]);
    let doc = bed.send(&["-6", "-T", "tcp", "--max", "-c", "8192", "-k", "5120"]);
    let fl = &doc["flows"][0];
    assert_eq!(f(fl, &["received", "bytes"]), 5_242_880.0);
    let completion = f(fl, &["completion_s"]);
    // Wire bits per payload bit from the document's own framing model.
    let wire_per_payload =
        f(fl, &["throughput_bps", "wire"]) / f(fl, &["throughput_bps", "payload"]);
    let wire_min = 5_242_880.0 * 8.0 * wire_per_payload / 1e9;
    assert!((0.0424..0.0426).contains(&wire_min), "{wire_min}");
    eprintln!("5 MiB: completion {completion:.5} s, wire minimum {wire_min:.5} s");
    // The shaper's token bucket (1 ms of the rate) may let the first bytes
    // through at once; nothing else may beat the wire.
    assert!(
        completion >= wire_min - 1.0e-3 && completion < 0.5,
        "completion {completion} s, the wire needs {wire_min} s"
    );
    drop(bed);

    // 1400 B datagrams at 20 000/s (224 Mbit/s) into a 100 Mbit/s link
    // with a 50-packet host queue: what the link cannot take is dropped by
    // the sending host's own queue, not by the network.
    let bed = Bed::up(&["--rate", "100mbit", "--txqueuelen", "50"]);
    let doc = bed.send(&["-4", "-T", "udp", "-C", "20000", "-c", "1400", "-t", "500"]);
    let fl = &doc["flows"][0];
    let lost = f(fl, &["received", "lost"]);
    let sender_host = f(fl, &["loss_split", "sender_host"]);
    let network = f(fl, &["loss_split", "network"]);
    let sent = f(fl, &["sent", "packets"]);
    eprintln!("overload: sent {sent}, lost {lost}: {}", fl["loss_split"]);
    assert!(
        lost > 0.3 * sent,
        "lost {lost} of {sent}: {}",
        fl["loss_split"]
    );
    assert!(
        sender_host >= 0.9 * lost && network <= 0.1 * lost,
        "lost {lost}: {}",
        fl["loss_split"]
    );
    assert!(f(&doc, &["total", "sender_host_drops"]) >= sender_host);
    drop(bed);
}
