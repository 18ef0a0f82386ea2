//! The AF_XDP path on a real veth test-bed (`direct`, root): a paced
//! session sent and received by XDP delivers every probe over IPv4 and
//! IPv6, by receive records (the default) and by AF_XDP rings, and writes
//! a valid document that says which path and timestamps it used; records
//! count the probes a shaper dropped as lost, exactly; SIGKILL of either
//! end leaves no XDP program (nor its record map) on the interface and no
//! AF_XDP socket behind (the namespace's count in /proc/net/protocols);
//! threaded NAPI is switched on the bed's own veth only and put back
//! after every ending, SIGKILL included (by `recv --xdp-cleanup`); the
//! sender's session queue appears on its noqueue veth only for the
//! session and is gone after every ending (SIGKILL: by `send
//! --xdp-cleanup` or the next sender), a configured root and `--xdp-txq
//! keep` left alone. Runs are short (a second of traffic at most).
#![cfg(target_os = "linux")]

#[path = "common/xdp.rs"]
mod xdp;

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use xdp::{bpf_id_exists, bpf_ids, eventually, root};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");
const NAME: &str = "wbxdp";
const PORT: &str = "15481";

static ONE_BED: Mutex<()> = Mutex::new(());

fn ns(node: &str) -> String {
    format!("wb-{NAME}-{node}")
}

/// `ip netns exec NODE cmd...` output as text.
fn in_node(node: &str, cmd: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns(node)])
        .args(cmd)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether NODE's eth0 has an XDP program attached.
fn xdp_attached(node: &str) -> bool {
    in_node(node, &["ip", "link", "show", "eth0"]).contains("prog/xdp")
}

/// AF_XDP sockets open in NODE's namespace: the XDP line of
/// /proc/net/protocols (per namespace; `ss --xdp` needs xsk_diag, which
/// not every kernel has).
fn xsk_count(node: &str) -> usize {
    in_node(node, &["cat", "/proc/net/protocols"])
        .lines()
        .find(|l| l.starts_with("XDP "))
        .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        .expect("an XDP line in /proc/net/protocols")
}

/// The `direct` test-bed and a `recv --xdp eth0` in node b; both go away
/// on drop, also when an assertion fails.
struct Bed {
    recv: Option<Child>,
    _one: MutexGuard<'static, ()>,
}

impl Bed {
    /// The bed with `recv --xdp eth0` in b.
    fn up() -> Bed {
        Bed::with_recv(&["--xdp", "eth0"])
    }

    /// The bed with `recv RECV_ARGS` in b.
    fn with_recv(recv_args: &[&str]) -> Bed {
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
        let mut bed = Bed {
            recv: None,
            _one: one,
        };
        bed.recv = Some(
            Command::new("ip")
                .args(["netns", "exec", &ns("b"), BIN, "recv", "-q", "-p", PORT])
                .args(recv_args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let up = eventually(|| in_node("b", &["ss", "-Htln"]).contains(&format!(":{PORT}")));
        assert!(up, "receiver did not come up");
        bed
    }

    /// `send --xdp eth0 ARGS` from a.
    fn send(&self, dest: &str, args: &[&str]) -> Child {
        self.send_as(dest, &[&["--xdp", "eth0"], args].concat())
    }

    /// `send ARGS` from a.
    fn send_as(&self, dest: &str, args: &[&str]) -> Child {
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
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.recv.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A killed sender's queue goes with the namespace, its journal
        // under /run does not.
        let _ = Command::new("ip")
            .args(["netns", "exec", &ns("a"), BIN, "send", "--xdp", "eth0"])
            .arg("--xdp-cleanup")
            .output();
        let _ = Command::new(BIN)
            .args(["testbed", "down", "--name", NAME])
            .output();
    }
}

#[test]
fn a_paced_xdp_session_delivers_every_probe_over_ipv4_and_ipv6() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    let bed = Bed::up();
    paced_session_counts_every_probe(&bed, "xdp program (native XDP, receive records");
    drop(bed);
    let bed = Bed::with_recv(&["--xdp", "eth0", "--xdp-rx", "ring"]);
    paced_session_counts_every_probe(&bed, "af_xdp ring pick-up (native XDP, AF_XDP");
}

/// A paced session to each of b's addresses delivers all of its 10 000
/// probes, received as `rx_stamps` says; two flows take the socket path.
fn paced_session_counts_every_probe(bed: &Bed, rx_stamps: &str) {
    for dest in ["10.0.1.2", "fd00:0:0:1::2"] {
        let out = bed
            .send(
                dest,
                &["-C", "20000", "-c", "64", "-z", "10000", "--json", "-"],
            )
            .wait_with_output()
            .unwrap();
        assert!(
            out.status.success(),
            "send to {dest}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        wirebench_engine::result::ResultDoc::from_stored(&v).expect("a valid result document");
        let send_path = v["host"]["send_path"].as_str().unwrap_or_default();
        assert!(
            send_path.starts_with("af_xdp eth0") && send_path.contains("ring hand-off"),
            "{dest}: sent by {send_path}"
        );
        let rx = v["receiver"]["host"]["rx_timestamps"]
            .as_str()
            .unwrap_or_default();
        assert!(rx.starts_with(rx_stamps), "{dest}: received by {rx}");
        let f = &v["flows"][0];
        assert_eq!(f["sent"]["packets"], 10000, "{dest}");
        assert_eq!(f["received"]["packets"], 10000, "{dest}: {f}");
        assert_eq!(f["received"]["unique"], 10000, "{dest}: {f}");
        assert_eq!(f["received"]["lost"], 0, "{dest}: {f}");
        assert_eq!(f["received"]["foreign"], 0, "{dest}");
        assert_eq!(v["receiver"]["rcvbuf_errors"], 0, "{dest}");
        // Frames built with TTL 64 and class 0: the marks the receiver saw.
        assert_eq!(f["received"]["marks"]["ttl_min"], 64, "{dest}: {f}");
        assert_eq!(f["received"]["marks"]["ttl_max"], 64, "{dest}: {f}");
        // Both stamps on this host's clock (the program's TAI stamp less
        // the TAI offset): the fastest probe within 10 ms of zero either
        // way (a clock offset the session applied may be a few us off).
        let d = f["delay_s"]["min"].as_f64().unwrap_or(1.0);
        assert!(d.abs() < 0.01, "{dest}: {d}");
        assert_eq!(f["ip_version"], if dest.contains(':') { 6 } else { 4 });
    }
    // Two flows: the socket path at both ends, each saying why.
    let out = bed
        .send(
            "10.0.1.2",
            &[
                "--flows", "2", "-C", "2000", "-c", "64", "-z", "1000", "--json", "-",
            ],
        )
        .wait_with_output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let send_path = v["host"]["send_path"].as_str().unwrap_or_default();
    assert!(
        send_path.starts_with("sendmmsg (--xdp eth0 not used: 2 flows"),
        "{send_path}"
    );
    let rx = v["receiver"]["host"]["rx_timestamps"]
        .as_str()
        .unwrap_or_default();
    assert!(rx.starts_with("kernel (XDP not used: 2 UDP flows"), "{rx}");
    assert_eq!(v["total"]["received_packets"], 2000, "{}", v["total"]);
    // The session is over: its program and socket went with it.
    assert!(
        eventually(|| !xdp_attached("b")),
        "XDP program left after the session"
    );
    assert_eq!(xsk_count("b"), 0);
}

#[test]
fn sigkill_of_either_end_leaves_no_xdp_program_or_socket() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    for rx_how in ["records", "ring"] {
        sigkill_leaves_nothing(rx_how);
    }
}

/// [`sigkill_of_either_end_leaves_no_xdp_program_or_socket`] with the
/// receiver taking frames `rx_how` (`--xdp-rx`).
fn sigkill_leaves_nothing(rx_how: &str) {
    let mut bed = Bed::with_recv(&["--xdp", "eth0", "--xdp-rx", rx_how]);
    let mut sender = bed.send("10.0.1.2", &["-C", "1000", "-c", "64", "-t", "20000"]);
    // Mid-session: the program is on b's eth0, a socket at a and, with
    // rings, at b (receive records need none).
    let b_socks = usize::from(rx_how == "ring");
    let running =
        eventually(|| xdp_attached("b") && xsk_count("b") == b_socks && xsk_count("a") > 0);
    let (a, b) = (xsk_count("a"), xsk_count("b"));
    // The receiver's own BPF objects (`ip netns exec` execs it, so the
    // child is the receiver): its program and, with records, its map.
    let (progs, maps) = bpf_ids(bed.recv.as_ref().unwrap().id());
    sender.kill().unwrap();
    let _ = sender.wait();
    assert!(
        running,
        "{rx_how}: the XDP session did not start (a: {a}, b: {b} sockets)"
    );
    assert!(
        eventually(|| xsk_count("a") == 0),
        "AF_XDP socket left in a"
    );
    let said = send_cleanup_in_a();
    assert!(said.contains("sending queue removed"), "{said}");
    let recv = bed.recv.as_mut().unwrap();
    recv.kill().unwrap();
    let _ = recv.wait();
    bed.recv = None;
    assert!(
        eventually(|| !xdp_attached("b")),
        "{rx_how}: XDP program left on b's eth0"
    );
    assert!(
        eventually(|| xsk_count("b") == 0),
        "AF_XDP socket left in b"
    );
    // The program and the record map went with the receiver.
    assert!(!progs.is_empty(), "{rx_how}: the receiver held no program");
    assert!(
        rx_how != "records" || !maps.is_empty(),
        "{rx_how}: the receiver held no record map"
    );
    for id in &progs {
        assert!(eventually(|| !bpf_id_exists(13, *id)), "program {id} left");
    }
    for id in &maps {
        assert!(
            eventually(|| !bpf_id_exists(14, *id)),
            "{rx_how}: map {id} left"
        );
    }
    // Nothing for --xdp-cleanup to find either.
    assert!(xdp_cleanup_in_b().contains("0 wirebench XDP program"));
}

/// Receive records count the probes a shaper at the sender dropped as
/// lost, exactly as the sequence numbers say: a socket-path sender
/// (whose frames pass a's root qdisc) through a tbf slower than its rate,
/// to a receiver taking records.
#[test]
fn receive_records_count_the_probes_a_shaper_dropped() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    let bed = Bed::up();
    let tc = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns("a"),
            "tc",
            "qdisc",
            "add",
            "dev",
            "eth0",
        ])
        .args([
            "root", "tbf", "rate", "4mbit", "burst", "3000", "limit", "3000",
        ])
        .output()
        .unwrap();
    assert!(
        tc.status.success(),
        "{}",
        String::from_utf8_lossy(&tc.stderr)
    );
    let v = doc(
        &bed,
        "10.0.1.2",
        &["-C", "20000", "-c", "64", "-z", "10000"],
    );
    let (tx, rx) = paths(&v);
    assert_eq!(tx, "sendmmsg");
    assert!(rx.starts_with("xdp program ("), "{rx}");
    let f = &v["flows"][0];
    let sent = f["sent"]["packets"].as_u64().unwrap();
    let got = f["received"]["packets"].as_u64().unwrap();
    let lost = f["received"]["lost"].as_u64().unwrap();
    assert!(sent > 9000, "{f}");
    // 20 000 probes/s of 106 wire bytes is 17 Mbit/s: most are dropped.
    assert!(got > 0 && lost > sent / 2, "{f}");
    assert_eq!(got + lost, sent, "{f}");
    assert_eq!(f["received"]["duplicates"], 0, "{f}");
    assert_eq!(f["received"]["foreign"], 0, "{f}");
}

/// What `recv --xdp eth0 --xdp-cleanup` in b says (it must succeed).
fn xdp_cleanup_in_b() -> String {
    xdp_cleanup_in("b", "recv")
}

/// What `send --xdp eth0 --xdp-cleanup` in a says (it must succeed).
fn send_cleanup_in_a() -> String {
    xdp_cleanup_in("a", "send")
}

/// What `CMD --xdp eth0 --xdp-cleanup` in NODE says (it must succeed).
fn xdp_cleanup_in(node: &str, cmd: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns(node), BIN, cmd, "--xdp", "eth0"])
        .arg("--xdp-cleanup")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `recv -q ARGS` in NODE, listening when `start` returns; killed on
/// drop.
struct Recv(Option<Child>);

impl Recv {
    fn start(node: &str, args: &[&str]) -> Recv {
        let c = Command::new("ip")
            .args(["netns", "exec", &ns(node), BIN, "recv", "-q"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let r = Recv(Some(c));
        let port = args.iter().skip_while(|a| **a != "-p").nth(1).unwrap();
        assert!(eventually(
            || in_node(node, &["ss", "-Htln"]).contains(&format!(":{port}"))
        ));
        r
    }

    /// The process, no longer killed on drop.
    fn into_child(mut self) -> Child {
        self.0.take().unwrap()
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// NODE's `threaded` setting of IFACE ("0", "1").
fn threaded(node: &str, iface: &str) -> String {
    in_node(node, &["cat", &format!("/sys/class/net/{iface}/threaded")])
        .trim()
        .to_string()
}

/// A veth pair the test-bed did not make, between a (`xdf1`, 10.77.0.1)
/// and b (`xdf0`, 10.77.0.2): gone on drop (and with the namespaces).
struct Foreign;

impl Foreign {
    fn add() -> Foreign {
        for cmd in [
            &[
                "ip", "link", "add", "xdf0", "type", "veth", "peer", "name", "xdf1",
            ][..],
            &["ip", "link", "set", "xdf1", "netns", &ns("a")],
            &["ip", "addr", "add", "10.77.0.2/24", "dev", "xdf0"],
            &["ip", "link", "set", "xdf0", "up"],
        ] {
            in_node("b", cmd);
        }
        in_node("a", &["ip", "addr", "add", "10.77.0.1/24", "dev", "xdf1"]);
        in_node("a", &["ip", "link", "set", "xdf1", "up"]);
        Foreign
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        in_node("b", &["ip", "link", "del", "xdf0"]);
    }
}

#[test]
fn threaded_napi_is_switched_on_the_beds_veth_only_and_put_back_after_sigkill() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    // `on`: `auto` also wants a CPU to spare, which a loaded host running
    // the tests may not have; the switching and putting back are the same.
    let mut bed = Bed::with_recv(&["--xdp", "eth0", "--xdp-napi", "on"]);
    assert_eq!(threaded("b", "eth0"), "0");
    // A session: threaded while it runs, the document says so, and the
    // setting is back when it ends.
    let v = doc(
        &bed,
        "10.0.1.2",
        &["--xdp", "eth0", "-C", "20000", "-c", "64", "-z", "4000"],
    );
    let (_, rx) = paths(&v);
    assert!(rx.contains("threaded NAPI"), "{rx}");
    assert_eq!(v["flows"][0]["received"]["packets"], 4000);
    assert!(eventually(|| threaded("b", "eth0") == "0"), "not put back");
    // SIGTERM (as Ctrl-C) mid-session: put back before the process ends.
    let mut sender = bed.send("10.0.1.2", &["-C", "1000", "-c", "64", "-t", "20000"]);
    let switched = eventually(|| xdp_attached("b") && threaded("b", "eth0") == "1");
    let mut recv = bed.recv.take().unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &recv.id().to_string()])
        .status();
    let st = recv.wait().unwrap();
    sender.kill().unwrap();
    let _ = sender.wait();
    assert!(switched, "threaded NAPI not switched on mid-session");
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert_eq!(threaded("b", "eth0"), "0", "SIGTERM left it switched");
    assert!(!xdp_cleanup_in_b().contains("restored"));
    bed.recv =
        Some(Recv::start("b", &["-p", PORT, "--xdp", "eth0", "--xdp-napi", "on"]).into_child());
    // SIGKILL of the receiver mid-session: the switch outlives it (the
    // kernel keeps the setting), `recv --xdp-cleanup` puts it back.
    let mut sender = bed.send("10.0.1.2", &["-C", "1000", "-c", "64", "-t", "20000"]);
    let switched = eventually(|| xdp_attached("b") && threaded("b", "eth0") == "1");
    let recv = bed.recv.as_mut().unwrap();
    recv.kill().unwrap();
    let _ = recv.wait();
    bed.recv = None;
    sender.kill().unwrap();
    let _ = sender.wait();
    assert!(switched, "threaded NAPI not switched on mid-session");
    assert!(eventually(|| !xdp_attached("b")));
    assert_eq!(
        threaded("b", "eth0"),
        "1",
        "the kill left nothing to restore"
    );
    let said = xdp_cleanup_in_b();
    assert!(said.contains("threaded NAPI setting restored"), "{said}");
    assert_eq!(threaded("b", "eth0"), "0");
    assert!(!xdp_attached("b"), "cleanup left its program");
    // Nothing left to restore the second time.
    let said = xdp_cleanup_in_b();
    assert!(!said.contains("restored"), "{said}");
    // An interface the bed did not make, in the bed's own namespace: left
    // alone.
    let _foreign = Foreign::add();
    let _other = Recv::start("b", &["-p", PORT, "--xdp", "xdf0"]);
    let v = doc(
        &bed,
        "10.77.0.2",
        &["--xdp", "xdf1", "-C", "20000", "-c", "64", "-z", "2000"],
    );
    let (_, rx) = paths(&v);
    assert!(
        rx.starts_with("xdp program (") && !rx.contains("threaded"),
        "{rx}"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 2000);
    assert_eq!(threaded("b", "xdf0"), "0");
}

/// Runs `send -a DEST ARGS` from a and returns its document (the run
/// must succeed).
fn doc(bed: &Bed, dest: &str, args: &[&str]) -> Value {
    let out = bed
        .send_as(dest, &[args, &["--json", "-"]].concat())
        .wait_with_output()
        .unwrap();
    assert!(
        out.status.success(),
        "send {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The document's send path and the receiver's timestamp source.
fn paths(v: &Value) -> (String, String) {
    let s = |p: &Value| p.as_str().unwrap_or_default().to_string();
    (
        s(&v["host"]["send_path"]),
        s(&v["receiver"]["host"]["rx_timestamps"]),
    )
}

/// The sender of `v` kept to the socket path for `why`, did not ask the
/// receiver, and sent its `sent` packets.
fn socket_path_because(v: &Value, why: &str, sent: u64) {
    let (tx, rx) = paths(v);
    assert!(
        tx.starts_with(&format!("sendmmsg (AF_XDP not used: {why}")),
        "{tx}"
    );
    assert_eq!(
        rx, "kernel",
        "a receiver not asked stays on its socket path"
    );
    assert_eq!(v["flows"][0]["sent"]["packets"], sent);
}

#[test]
fn xdp_auto_takes_the_path_at_both_ends_where_it_can_and_a_plain_send_does_not() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    let bed = Bed::with_recv(&[]);
    let paced = ["-C", "60000", "-c", "64", "-z", "6000", "--xdp", "auto"];
    // Neither end names an interface: the sender finds eth0 (it holds the
    // session's address) and asks the plain receiver, which finds its own.
    let v = doc(&bed, "10.0.1.2", &paced);
    let (tx, rx) = paths(&v);
    assert!(tx.starts_with("af_xdp eth0, "), "{tx}");
    assert!(rx.starts_with("xdp program ("), "{rx}");
    assert_eq!(v["flows"][0]["received"]["packets"], 6000);
    // The summary says so too.
    let out = bed.send_as("10.0.1.2", &paced).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Send path") && text.contains("af_xdp eth0"),
        "{text}"
    );
    assert!(
        text.contains("Receive timestamps") && text.contains("xdp program"),
        "{text}"
    );
    // Without --xdp (and with --no-xdp) the socket path, and the receiver
    // is not asked: a script comparing `--max` with `--max --xdp IFACE`
    // compares the two paths.
    for opt in [&[][..], &["--no-xdp"][..]] {
        let v = doc(&bed, "10.0.1.2", &[&paced[..6], opt].concat());
        assert_eq!(paths(&v), ("sendmmsg".into(), "kernel".into()), "{opt:?}");
        assert_eq!(v["flows"][0]["sent"]["packets"], 6000);
    }
    // Sessions the path is not for (reflected, slow) are no candidates:
    // neither end mentions it.
    for args in [
        &["-m", "rtt", "-C", "60000", "-z", "500", "--xdp", "auto"][..],
        &["-C", "2000", "-z", "500", "--xdp", "auto"][..],
    ] {
        let v = doc(&bed, "10.0.1.2", args);
        assert_eq!(paths(&v), ("sendmmsg".into(), "kernel".into()), "{args:?}");
        assert_eq!(v["flows"][0]["received"]["packets"], 500);
    }
    // A shaping qdisc on the sender's interface: AF_XDP would skip it, so
    // the sender keeps to the socket path.
    // (pfifo_fast, one of the defaults, then puts a plain queue back.)
    let tc = |q: &[&str]| {
        in_node(
            "a",
            &[&["tc", "qdisc", "replace", "dev", "eth0", "root"], q].concat(),
        );
    };
    tc(&["tbf", "rate", "1gbit", "burst", "64kb", "latency", "50ms"]);
    let v = doc(&bed, "10.0.1.2", &paced);
    tc(&["pfifo_fast"]);
    socket_path_because(&v, "eth0 has a tbf qdisc", 6000);
    // Loopback: the kernel drops IPv4 frames sent past the socket layer,
    // so the socket path runs and says so.
    let _lo = Recv::start("a", &["-p", PORT]);
    let v = doc(
        &bed,
        "127.0.0.1",
        &["--max", "-c", "64", "-z", "500", "--xdp", "auto"],
    );
    socket_path_because(&v, "lo is a loopback device: the kernel drops IPv4", 500);
    assert!(eventually(|| xsk_count("a") == 0 && xsk_count("b") == 0));
    assert!(eventually(|| !xdp_attached("b")));
}

/// NODE's eth0 root qdisc as "KIND HANDLE" ("noqueue 0:").
fn root_qdisc(node: &str) -> String {
    in_node(node, &["tc", "qdisc", "show", "dev", "eth0", "root"])
        .split_whitespace()
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends `signal` to `child` and returns its exit status.
fn signal(child: &mut Child, signal: &str) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    child.wait().unwrap()
}

#[test]
fn the_senders_queue_lives_as_long_as_its_session_on_a_noqueue_veth_only() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    const OURS: &str = "pfifo_fast 7762:";
    let bed = Bed::up();
    assert_eq!(root_qdisc("a"), "noqueue 0:");
    let run = ["--xdp", "eth0", "-C", "20000", "-c", "64", "-z", "4000"];
    // A session: the document says it added the queue, gone at its end.
    let v = doc(&bed, "10.0.1.2", &run);
    let (tx, _) = paths(&v);
    assert!(
        tx.contains(&format!("sending queue {OURS} for the session")),
        "{tx}"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 4000);
    assert_eq!(root_qdisc("a"), "noqueue 0:");
    // Mid-session it is there; SIGTERM and a second Ctrl-C remove it
    // before the process ends, a first Ctrl-C ends the session (which
    // removes it).
    let long = ["-C", "1000", "-c", "64", "-t", "20000"];
    for (sigs, code) in [
        (&["-TERM"][..], Some(143)),
        (&["-INT", "-INT"][..], Some(130)),
        (&["-INT"][..], None),
    ] {
        let mut sender = bed.send("10.0.1.2", &long);
        let added = eventually(|| root_qdisc("a") == OURS && xsk_count("a") > 0);
        for sig in &sigs[..sigs.len() - 1] {
            let _ = Command::new("kill")
                .args([*sig, &sender.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_millis(100));
        }
        let st = signal(&mut sender, sigs[sigs.len() - 1]);
        assert!(added, "{sigs:?}: no session queue mid-session");
        if code.is_some() {
            assert_eq!(st.code(), code, "{sigs:?}: {st:?}");
        }
        assert_eq!(root_qdisc("a"), "noqueue 0:", "{sigs:?} left the queue");
    }
    // SIGKILL: the queue outlives the process; --xdp-cleanup removes it,
    // and finds nothing the second time.
    let mut sender = bed.send("10.0.1.2", &long);
    let added = eventually(|| root_qdisc("a") == OURS && xsk_count("a") > 0);
    signal(&mut sender, "-KILL");
    assert!(added, "no session queue mid-session");
    assert_eq!(root_qdisc("a"), OURS, "the kill left nothing to remove");
    let said = send_cleanup_in_a();
    assert!(said.contains("sending queue removed"), "{said}");
    assert_eq!(root_qdisc("a"), "noqueue 0:");
    assert!(!send_cleanup_in_a().contains("removed"));
    // SIGKILL again: the next sender removes the dead one's queue, adds
    // its own, and removes that at its end.
    let mut sender = bed.send("10.0.1.2", &long);
    assert!(eventually(|| root_qdisc("a") == OURS && xsk_count("a") > 0));
    signal(&mut sender, "-KILL");
    assert_eq!(root_qdisc("a"), OURS);
    let v = doc(&bed, "10.0.1.2", &run);
    assert!(paths(&v).0.contains("for the session"), "{v}");
    assert_eq!(root_qdisc("a"), "noqueue 0:");
    assert!(!send_cleanup_in_a().contains("removed"));
    // --xdp-txq keep: nothing added, and the document says why.
    let mut sender = bed.send("10.0.1.2", &[&long[..], &["--xdp-txq", "keep"]].concat());
    let seen = eventually(|| xsk_count("a") > 0);
    let kept = root_qdisc("a");
    signal(&mut sender, "-KILL");
    assert!(seen && kept == "noqueue 0:", "{kept}");
    let v = doc(
        &bed,
        "10.0.1.2",
        &[&run[..], &["--xdp-txq", "keep"]].concat(),
    );
    assert!(
        paths(&v)
            .0
            .contains("no sending queue added (--xdp-txq keep)"),
        "{v}"
    );
    // A root someone configured is left alone, during and after.
    in_node(
        "a",
        &[
            "tc", "qdisc", "add", "dev", "eth0", "root", "handle", "5:", "pfifo",
        ],
    );
    let v = doc(&bed, "10.0.1.2", &run);
    let configured = root_qdisc("a");
    in_node("a", &["tc", "qdisc", "del", "dev", "eth0", "root"]);
    assert!(
        paths(&v)
            .0
            .contains("no sending queue added (eth0 has its own root qdisc, pfifo 5:)"),
        "{v}"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 4000);
    assert_eq!(configured, "pfifo 5:");
}

#[test]
fn napi_auto_threads_floods_of_an_xdp_sender_only_and_off_is_the_default() {
    if !root() {
        eprintln!("SKIPPED: needs root (network namespaces, XDP)");
        return;
    }
    // The default leaves the interface alone.
    let bed = Bed::up();
    let v = doc(
        &bed,
        "10.0.1.2",
        &["--xdp", "eth0", "-C", "20000", "-c", "64", "-z", "1000"],
    );
    let (_, rx) = paths(&v);
    assert!(
        rx.starts_with("xdp program (") && !rx.contains("threaded"),
        "{rx}"
    );
    drop(bed);
    let bed = Bed::with_recv(&["--xdp", "eth0", "--xdp-napi", "auto"]);
    let flood = ["--max", "-c", "64", "-z", "4000"];
    let v = doc(&bed, "10.0.1.2", &[&["--xdp", "eth0"], &flood[..]].concat());
    let (tx, rx) = paths(&v);
    // Threaded when the host had a CPU to spare, else the document says
    // why not (this test cannot choose the host's load).
    let on_thread = rx.contains("threaded NAPI");
    assert!(
        on_thread || rx.contains("NAPI not moved to a thread: "),
        "{rx}"
    );
    // A receive half on a thread of its own overflows under live frames,
    // so the flood takes the ring and its sending queue. Unthreaded (a
    // loaded host), the receive runs within the sender's transmit and live
    // frames may serve: the sender's path says which.
    assert!(
        tx.contains("for the session") || (!on_thread && tx.starts_with("xdp live frames ")),
        "{tx} (receiver: {rx})"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 4000);
    assert!(eventually(|| threaded("b", "eth0") == "0"), "not put back");
    // A paced flow from the same sender is not threaded: its pacer would
    // wait on the kernel thread's wake-ups.
    let paced = ["-C", "20000", "-c", "64", "-z", "4000"];
    let v = doc(&bed, "10.0.1.2", &[&["--xdp", "eth0"], &paced[..]].concat());
    let (tx, rx) = paths(&v);
    assert!(tx.contains("for the session"), "{tx}");
    assert!(
        rx.starts_with("xdp program (") && !rx.contains("threaded"),
        "{rx}"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 4000);
    // A socket-path sender has no sending queue: the receiver still takes
    // the XDP path (it serves every session) but does not thread it
    // (paced here, as a flood could lose at the sender's own qdisc; the
    // unit test `auto_threads_napi_only_for_floods_whose_senders_asked`
    // covers a socket-path flood).
    let v = doc(&bed, "10.0.1.2", &paced);
    let (tx, rx) = paths(&v);
    assert_eq!(tx, "sendmmsg");
    assert!(
        rx.starts_with("xdp program (") && !rx.contains("threaded"),
        "{rx}"
    );
    assert_eq!(v["flows"][0]["received"]["packets"], 4000);
}
