//! Live frames (`send --xdp IFACE --max --xdp-tx live`) on a real veth
//! test-bed (`direct`, root): every frame the program stamped is counted
//! once, received by `recv --xdp` or refused by the sending veth (the
//! sending host's drops), over IPv4 and IPv6; a receiver without an XDP
//! program makes the sender fall back to the AF_XDP ring, saying why;
//! SIGKILL of a live sender leaves no program or map in the kernel, nothing
//! on the sending interface and nothing on `lo` (where the program is held
//! in generic mode while it runs). Runs are short (well under a second of traffic each).
#![cfg(target_os = "linux")]

#[path = "common/xdp.rs"]
mod xdp;

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use xdp::{bpf_id_exists, bpf_ids, eventually, root};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");
const NAME: &str = "xdp8lv";

static ONE_BED: Mutex<()> = Mutex::new(());
const PORT: &str = "15491";

fn ns(node: &str) -> String {
    format!("wb-{NAME}-{node}")
}

/// The `direct` test-bed with a receiver in b; gone on drop.
struct Bed {
    recv: Option<Child>,
    _one: MutexGuard<'static, ()>,
}

impl Bed {
    fn up() -> Bed {
        let one = ONE_BED.lock().unwrap_or_else(|e| e.into_inner());
        let out = Command::new(BIN)
            .args(["testbed", "up", "direct", "--name", NAME])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "testbed up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Bed {
            recv: None,
            _one: one,
        }
    }

    /// (Re)starts `recv ARGS` in b.
    fn recv(&mut self, args: &[&str]) {
        self.stop_recv();
        self.recv = Some(
            Command::new("ip")
                .args(["netns", "exec", &ns("b"), BIN, "recv", "-q", "-p", PORT])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let listening = || {
            let out = Command::new("ip")
                .args(["netns", "exec", &ns("b"), "ss", "-Htln"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).contains(&format!(":{PORT}"))
        };
        assert!(eventually(listening), "receiver did not come up");
    }

    fn stop_recv(&mut self) {
        if let Some(mut c) = self.recv.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `send -a DEST ARGS` from a.
    fn send(&self, dest: &str, args: &[&str]) -> Child {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns("a"),
                BIN,
                "send",
                "-a",
                dest,
                "-p",
                PORT,
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The document of a `send` that must succeed.
    fn doc(&self, dest: &str, args: &[&str]) -> Value {
        let out = self
            .send(dest, &[args, &["--json", "-"]].concat())
            .wait_with_output()
            .unwrap();
        assert!(
            out.status.success(),
            "send {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.stop_recv();
        let _ = Command::new("ip")
            .args(["netns", "exec", &ns("a"), BIN, "send", "--xdp", "eth0"])
            .arg("--xdp-cleanup")
            .output();
        let _ = Command::new(BIN)
            .args(["testbed", "down", "--name", NAME])
            .output();
    }
}

/// `--xdp-tx live`: `auto` may keep the ring on a loaded host (when its
/// burst check finds the peer's ring overflowing), and these tests are
/// about what live frames count.
const FLOOD: [&str; 9] = [
    "--xdp", "eth0", "--max", "-c", "64", "-z", "200000", "--xdp-tx", "live",
];

#[test]
fn live_frames_are_counted_exactly_and_fall_back_to_the_ring_without_a_receiving_program() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    let mut bed = Bed::up();
    bed.recv(&["--xdp", "eth0"]);
    for dest in ["10.0.1.2", "fd00:0:0:1::2"] {
        let v = bed.doc(dest, &FLOOD);
        let tx = v["host"]["send_path"].as_str().unwrap_or_default();
        if dest.contains('.') {
            // The summary names the path too.
            let out = bed.send(dest, &FLOOD).wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("Send path") && text.contains("xdp live frames eth0"),
                "{text}"
            );
        }
        assert!(tx.starts_with("xdp live frames eth0"), "{dest}: {tx}");
        assert!(tx.contains("when the program stamped the frame"), "{tx}");
        // In a test-bed node the program is held in the XDP dispatcher
        // (attached to the node's lo), so no call waits for RCU.
        assert!(!tx.contains("RCU grace periods"), "{tx}");
        let f = &v["flows"][0];
        let sent = f["sent"]["packets"].as_u64().unwrap();
        let got = f["received"]["packets"].as_u64().unwrap();
        let refused = v["total"]["sender_host_drops"].as_u64().unwrap_or(0);
        assert_eq!(sent, 200_000, "{dest}: {f}");
        // Every stamped frame arrived once or was refused by the sending
        // veth: nothing lost uncounted, nothing twice.
        assert_eq!(got + refused, sent, "{dest}: {f} refused {refused}");
        assert_eq!(f["received"]["unique"], got, "{dest}: {f}");
        assert_eq!(f["received"]["foreign"], 0, "{dest}");
        // Both stamps on this host's clock.
        let d = f["delay_s"]["min"].as_f64().unwrap_or(1.0);
        assert!(d.abs() < 0.01, "{dest}: {d}");
    }
    // A paced flow keeps the ring, and says why when live frames were
    // asked for.
    let v = bed.doc(
        "10.0.1.2",
        &[
            "--xdp", "eth0", "-C", "20000", "-c", "64", "-z", "2000", "--xdp-tx", "live",
        ],
    );
    let tx = v["host"]["send_path"].as_str().unwrap_or_default();
    assert!(
        tx.starts_with("af_xdp eth0") && tx.contains("live frames not used: not a --max flood"),
        "{tx}"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 2000);
    // No XDP program at b (its receiver on the socket path): the frame
    // the sender tries first is not transmitted, and the ring sends all.
    bed.recv(&["--no-xdp"]);
    let v = bed.doc("10.0.1.2", &FLOOD);
    let tx = v["host"]["send_path"].as_str().unwrap_or_default();
    assert!(
        tx.starts_with("af_xdp eth0")
            && tx.contains("live frames not used: eth0 did not transmit a live frame"),
        "{tx}"
    );
    assert_eq!(v["flows"][0]["sent"]["packets"], 200_000);
    // --xdp-tx ring: the ring, without a word on live frames.
    bed.recv(&["--xdp", "eth0"]);
    let v = bed.doc("10.0.1.2", &[&FLOOD[..7], &["--xdp-tx", "ring"]].concat());
    let tx = v["host"]["send_path"].as_str().unwrap_or_default();
    assert!(
        tx.starts_with("af_xdp eth0") && !tx.contains("live"),
        "{tx}"
    );
}

#[test]
fn sigkill_of_a_live_sender_leaves_no_program_or_map() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    let mut bed = Bed::up();
    bed.recv(&["--xdp", "eth0"]);
    let mut s = bed.send(
        "10.0.1.2",
        &[
            "--xdp", "eth0", "--max", "-c", "64", "-t", "20000", "--xdp-tx", "live",
        ],
    );
    // `ip netns exec` execs the sender: the child is the sender.
    let pid = s.id();
    let mut held = (Vec::new(), Vec::new());
    let running = eventually(|| {
        let ids = bpf_ids(pid);
        let some = !ids.0.is_empty();
        if some {
            held = ids;
        }
        some
    });
    // Running, the program is attached to a's lo in generic mode (it
    // keeps the program in the XDP dispatcher between calls).
    let lo = || {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns("a"), "ip", "link", "show", "lo"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    };
    let held_lo = eventually(lo);
    s.kill().unwrap();
    let _ = s.wait();
    assert!(running, "the live sender held no BPF program");
    assert!(held_lo, "the live program was not on a's lo");
    assert!(eventually(|| !lo()), "XDP program left on a's lo");
    let (progs, maps) = held;
    assert!(!maps.is_empty(), "the live sender's map");
    assert!(
        eventually(|| !progs.iter().any(|&id| bpf_id_exists(13, id))),
        "a program of the killed sender is still loaded: {progs:?}"
    );
    assert!(
        eventually(|| !maps.iter().any(|&id| bpf_id_exists(14, id))),
        "a map of the killed sender is still there: {maps:?}"
    );
    // Nothing was attached to a's sending interface.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns("a"), "ip", "link", "show", "eth0"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("prog/xdp"));
}
