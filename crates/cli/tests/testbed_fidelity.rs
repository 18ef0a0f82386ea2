//! Numbers a paper could print, on the emulated router test-bed (root): a
//! finite TCP transfer reports its completion time and never beats the
//! wire, and a UDP sender that overloads its own link loses the excess at
//! its own host's NIC-like queue, counted as `sender_host` in the loss
//! split. Runs are short (well under a second of traffic each).

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use wirebench_testkit::{check, measure_seeing};

const BIN: &str = env!("CARGO_BIN_EXE_wirebench");
const NAME: &str = "fidtest";
const PORT: &str = "15471";

/// The tests share one test-bed name and port, and cargo runs a file's
/// tests in parallel: one bed at a time.
static ONE_BED: Mutex<()> = Mutex::new(());

/// The test-bed and the receiver in node b; both go away on drop, also
/// when an assertion fails.
struct Bed {
    name: &'static str,
    recv: Option<Child>,
    // Dropped after Drop::drop has taken the bed down.
    _one: MutexGuard<'static, ()>,
}

impl Bed {
    fn up(args: &[&str]) -> Bed {
        Bed::up_named(NAME, args)
    }

    /// The router test-bed under its own `name` (tests other helpers of
    /// this machine may run at the same time use their own).
    fn up_named(name: &'static str, args: &[&str]) -> Bed {
        Bed::up_with("router", name, args, false)
    }

    /// The `preset` test-bed with its receiver (and, through `send_rt`,
    /// its sender) at SCHED_FIFO 50, as a host whose stack gets the CPU
    /// it needs: what is measured is then the link, not the share of a
    /// busy machine the hosts get.
    fn up_rt(preset: &str, args: &[&str]) -> Bed {
        Bed::up_with(preset, NAME, args, true)
    }

    fn up_with(preset: &str, name: &'static str, args: &[&str], rt: bool) -> Bed {
        let one = ONE_BED.lock().unwrap_or_else(|e| e.into_inner());
        let mut a = vec!["testbed", "up", preset, "--name", name];
        a.extend(args);
        let out = Command::new(BIN).args(&a).output().unwrap();
        assert!(
            out.status.success(),
            "testbed up {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut bed = Bed {
            name,
            recv: None,
            _one: one,
        };
        let ns = format!("wb-{name}-b");
        let mut recv = vec!["netns", "exec", &ns];
        if rt {
            recv.extend(["chrt", "-f", "50"]);
        }
        recv.extend([BIN, "recv", "-p", PORT]);
        let child = Command::new("ip")
            .args(&recv)
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
                .args(["netns", "exec", &format!("wb-{name}-b"), "ss", "-Htln"])
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
        self.send_text(args).0
    }

    /// `wirebench send` from node a; the result document and the summary.
    fn send_text(&self, args: &[&str]) -> (Value, String) {
        self.send_with(args, false)
    }

    /// `wirebench send` from node a at SCHED_FIFO 50 (see `up_rt`).
    fn send_rt(&self, args: &[&str]) -> Value {
        self.send_with(args, true).0
    }

    fn send_with(&self, args: &[&str], rt: bool) -> (Value, String) {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let ns = format!("wb-{}-a", self.name);
        let mut a = vec!["netns", "exec", &ns];
        if rt {
            a.extend(["chrt", "-f", "50"]);
        }
        a.extend([BIN, "send", "-a", "b", "-p", PORT]);
        a.extend(args);
        a.extend(["--linger", "300", "--json", json.to_str().unwrap()]);
        let out = Command::new("ip").args(&a).output().unwrap();
        assert!(
            out.status.success(),
            "send {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (doc, String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.recv.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new(BIN)
            .args(["testbed", "down", "--name", self.name])
            .output();
    }
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// True when the test cannot build namespaces (counted as a skip; a
/// failure under CI=true).
fn skip_unless_root(test: &str) -> bool {
    !wirebench_testkit::can_run_as_root(test, "root (network namespaces)")
}

#[test]
fn transfers_complete_no_faster_than_the_wire_and_host_drops_are_split() {
    if skip_unless_root("transfers_complete_no_faster_than_the_wire_and_host_drops_are_split") {
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
    // A 1 Gbit/s jumbo link is timed by the emulator (13 800 frames/s,
    // under EMULATOR_TIMING_MAX_FPS), which schedules every frame from the
    // last departure: nothing beats the wire.
    assert!(
        completion >= wire_min && completion < 0.5,
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

    // Paced TCP at 224 Mbit/s into the same 100 Mbit/s link: the writes
    // block and the schedule falls behind. The run still ends on time (it
    // once sent its 1 s backlog late and lasted 3.0 s for 2 s); what could
    // not leave is not_sent.
    let doc = bed.send(&["-4", "-T", "tcp", "-C", "20000", "-c", "1400", "-t", "1000"]);
    let sent = &doc["flows"][0]["sent"];
    let (secs, not_sent) = (f(sent, &["duration_s"]), f(sent, &["not_sent"]));
    eprintln!("saturated paced TCP, 1 s: sent for {secs:.3} s, not sent {not_sent}");
    assert!(secs < 1.05, "a 1 s run sent for {secs} s");
    assert!(not_sent > 5000.0, "not sent {not_sent} of 20000");
    drop(bed);
}

/// Issue 23: through one emulated link (forced by a 1 ns delay; at 1 Gbit/s
/// without impairments the default is tbf alone, whose bucket lets a
/// transfer beat the wire) S4's 5 MiB transfer at MTU 9000 never completes
/// faster than its wire minimum, the first run on a fresh bed included.
/// How close to the minimum it comes depends on the CPU the hosts get, so
/// that figure is a benchmark's (bench/link_transfer.sh: 40 of 40 within
/// 1.01 x at load 3-5, docs/testbed.md "How exact it is"); here only a
/// gross miss (the wire's time lost, not the hosts') fails. The wire
/// minimum is 42.5 ms, so a host that holds the guest 9 ms in two of the
/// three transfers passes the 1.2 x median: that bound is a timing check
/// (wirebench_testkit::measure_seeing), measured once more on a fresh bed
/// when the slow transfers saw the emulator stall; never beating the wire
/// is exact and stays a plain assert.
#[test]
fn a_transfer_through_the_emulator_never_beats_the_wire() {
    if skip_unless_root("a_transfer_through_the_emulator_never_beats_the_wire") {
        return;
    }
    measure_seeing("5 MiB through the emulator", || {
        let bed = Bed::up_rt(
            "direct",
            &["--mtu", "9000", "--rate", "1gbit", "--delay", "1ns"],
        );
        let tb = wirebench_testbed::Testbed::attach(NAME).expect("attach the test-bed");
        // (completion / wire minimum, emulator stalls, their ms) per transfer.
        let mut runs = Vec::new();
        for _ in 0..3 {
            let before = stalls(&tb);
            let doc = bed.send_rt(&["-4", "-T", "tcp", "--max", "-c", "8192", "-k", "5120"]);
            let (n, ms) = stalls(&tb);
            let fl = &doc["flows"][0];
            assert_eq!(f(fl, &["received", "bytes"]), 5_242_880.0);
            let wire_per_payload =
                f(fl, &["throughput_bps", "wire"]) / f(fl, &["throughput_bps", "payload"]);
            let wire_min = 5_242_880.0 * 8.0 * wire_per_payload / 1e9;
            runs.push((
                f(fl, &["completion_s"]) / wire_min,
                n - before.0,
                ms - before.1,
            ));
        }
        drop(bed);
        let ratios: Vec<f64> = runs.iter().map(|r| r.0).collect();
        eprintln!(
            "5 MiB through the emulator: completion / wire minimum, emulator stalls (ms) {runs:?}"
        );
        assert!(
            ratios.iter().all(|r| *r >= 1.0),
            "faster than the wire: completion / wire minimum {ratios:?}"
        );
        let mut sorted = ratios.clone();
        sorted.sort_by(f64::total_cmp);
        check(sorted[1] <= 1.2, || {
            format!(
                "median completion / wire minimum {} ({ratios:?})",
                sorted[1]
            )
        })
        .map_err(|why| {
            // The median is slow only when two transfers are: both must
            // have seen the emulator held for the host to take the blame.
            let slow: Vec<_> = runs.iter().filter(|r| r.0 > 1.2).collect();
            let seen = slow.iter().all(|r| r.1 > 0).then(|| {
                format!("the emulator stalled during each slow transfer (stalls, ms: {slow:?})")
            });
            (why, seen)
        })
    });
}

/// The emulators' stalls on every link of `tb` so far, and their summed
/// lateness (ms): a nap that ended long after its deadline, the host having
/// held the emulator's CPU.
fn stalls(tb: &wirebench_testbed::Testbed) -> (u64, f64) {
    tb.wire_counters()
        .iter()
        .flatten()
        .flatten()
        .fold((0, 0.0), |(n, ms), c| {
            (n + c.stalls, ms + c.stall_ns as f64 / 1e6)
        })
}

/// A TCP/IPv4 transfer of `kbytes` KiB from a to b, as fast as it goes,
/// judged against a link of `link_rate`.
fn transfer(bed: &Bed, kbytes: &str, link_rate: &str) -> (Value, String) {
    bed.send_with(
        &[
            "-4",
            "-T",
            "tcp",
            "--max",
            "-c",
            "8192",
            "-k",
            kbytes,
            "--link-rate",
            link_rate,
        ],
        true,
    )
}

#[test]
fn a_short_transfer_reads_the_bound_and_more_is_flagged() {
    if skip_unless_root("a_short_transfer_reads_the_bound_and_more_is_flagged") {
        return;
    }
    // S4's transfer: 5 MiB of TCP/IPv4 at 1 Gbit/s and MTU 9000 (bound
    // 8948/9038 of the link; at MTU 1500 the 2-core CI machine's own load,
    // not the link, limits it). The link is the emulator's (a jumbo link's
    // frame rate is under EMULATOR_TIMING_MAX_FPS); a tbf link's token
    // bucket would let its content through at once (1 ms: +1.5 %), and
    // late timers make any run read slower. So: no run above 1 % over the
    // bound, and the best of five within 1.5 % of it. The hosts run at
    // SCHED_FIFO 50 (`up_rt`), as bench/link_transfer.sh runs them. On a
    // quiet 2-core host (2026-11-27) single runs read 0.87-0.993 of the
    // bound and the best of three 0.977-0.993 (with or without real-time
    // hosts, before and after the emulator's receive ring), so a best of
    // three within 1 % failed about every other time.
    let bed = Bed::up_rt("router", &["--mtu", "9000", "--rate", "1gbit"]);
    let bound = 1e9 * 8948.0 / 9038.0;
    let mut best: f64 = 0.0;
    for _ in 0..5 {
        let (doc, text) = transfer(&bed, "5120", "1gbit");
        let t = &doc["total"];
        let payload = f(t, &["throughput_bps", "payload"]);
        eprintln!(
            "5 MiB at 1 Gbit/s: {:.2} Mbit/s, {:.3} of the bound",
            payload / 1e6,
            payload / bound
        );
        assert!(
            payload < 1.01 * bound,
            "{payload} bit/s above the bound {bound}"
        );
        // The document states the bound of its own traffic (the last
        // segment is short, so a little under the full-segment bound).
        let ub = f(t, &["upper_bound_bps"]);
        assert!((ub / bound - 1.0).abs() < 0.001, "upper_bound_bps {ub}");
        assert_eq!(f(t, &["link_rate_bps"]), 1e9);
        // Above by less than 1 % is allowed, and then the summary says so.
        let above = t["above_bound"] == Value::Bool(true);
        let line = if above {
            "WARNING: above the bound"
        } else {
            "Link bound"
        };
        assert!(text.contains(line), "{text}");
        best = best.max(payload);
    }
    assert!(
        best > 0.985 * bound,
        "best of five {best} bit/s, bound {bound}"
    );

    // Told the path is 500 Mbit/s while the bed carries 1 Gbit/s: the run
    // is physically impossible for that link, and says so in the document
    // and the summary.
    let (doc, text) = transfer(&bed, "2048", "500mbit");
    assert_eq!(
        doc["total"]["above_bound"],
        Value::Bool(true),
        "{}",
        doc["total"]
    );
    assert!(text.contains("WARNING: above the bound"), "{text}");
    // A bad rate names the option, exit 2.
    let ns = format!("wb-{NAME}-a");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            BIN,
            "send",
            "-a",
            "b",
            "-p",
            PORT,
            "--link-rate",
            "1gbps",
            "-z",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--link-rate"));
    drop(bed);
}

#[test]
fn an_overloaded_udp_sender_is_held_back_by_its_socket_like_a_host() {
    if skip_unless_root("an_overloaded_udp_sender_is_held_back_by_its_socket_like_a_host") {
        return;
    }
    // S5's point: 30 000 datagrams/s of 1408 B (360 Mbit/s of payload)
    // offered to the 100 Mbit/s router path, round-trip meter. A Linux
    // host with a NIC charges the datagrams in its transmit queue to the
    // socket's default send buffer (208 KiB, about 90 of these), so the
    // socket blocks, the sender falls behind and what it could not send in
    // time is not sent; the queue stays ~10 ms and the round trip (the
    // reflections are full-size, so b's queue holds some too) 20-30 ms.
    // With a 4 MiB buffer the 1000-packet queue filled instead: 120 ms of
    // round trip and most datagrams dropped in the sender's own qdisc.
    let bed = Bed::up_named("lkhq", &["--rate", "100mbit"]);
    let bound = 100e6 * 1408.0 / 1474.0;
    let mut shares = Vec::new();
    // The link stays full too: within 1 % of the Ethernet bound. The queue
    // is now ~10 ms instead of 120, so a sender thread that a loaded
    // machine leaves unscheduled longer than that idles the link (seen
    // once at load 14: 0.983); up to three runs, one must be within 1 %.
    for _ in 0..3 {
        let doc = bed.send(&[
            "-4", "-T", "udp", "-m", "rtt", "-C", "30000", "-c", "1408", "-t", "2000",
        ]);
        let fl = &doc["flows"][0];
        let rtt_p50 = f(fl, &["rtt_s", "p50"]);
        let not_sent = f(fl, &["sent", "not_sent"]);
        let sent = f(fl, &["sent", "packets"]);
        let lost = f(fl, &["received", "lost"]);
        let split = &fl["loss_split"];
        let share = f(fl, &["throughput_bps", "payload"]) / bound;
        eprintln!(
            "S5 point: rtt p50 {:.2} ms, sent {sent}, not sent {not_sent}, lost {lost}: {split}; {share:.4} of the bound",
            rtt_p50 * 1e3
        );
        assert!(
            (0.2e-3..40e-3).contains(&rtt_p50),
            "round trip p50 {rtt_p50} s"
        );
        // Offered 60 000; the link carries about 8 480/s.
        assert!(not_sent > 0.6 * 60_000.0, "not sent {not_sent}");
        assert!(
            f(split, &["sender_host"]) + f(split, &["network"]) < 0.01 * sent,
            "sent {sent}: {split}"
        );
        assert!(share < 1.01, "{share} of the bound");
        shares.push(share);
        if share > 0.99 {
            break;
        }
    }
    assert!(shares.iter().any(|s| *s > 0.99), "{shares:?} of the bound");
    // Asked for, the big buffer brings the big queue back.
    let doc = bed.send(&[
        "-4", "-T", "udp", "-m", "rtt", "-C", "30000", "-c", "1408", "-t", "1000", "--window", "4M",
    ]);
    let fl = &doc["flows"][0];
    let rtt_p50 = f(fl, &["rtt_s", "p50"]);
    eprintln!(
        "with --window 4M: rtt p50 {:.2} ms: {}",
        rtt_p50 * 1e3,
        fl["loss_split"]
    );
    assert!(rtt_p50 > 60e-3, "round trip p50 {rtt_p50} s");
    drop(bed);
}
