//! Acceptance tests of the emulated test-bed. They build real namespaces,
//! so they need root; without it each one prints why it skips. Each test
//! uses its own test-bed name; the heavy ones hold a lock so that only one
//! builds or sends traffic at a time. Linux only, as test-beds are.
//! `WB_TEST_BED_PREFIX` (a few lowercase letters or digits) goes before
//! the names of the tests that take theirs from [`bed`], so that two
//! checkouts can run them on one machine at once.

#![cfg(target_os = "linux")]

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wirebench_testbed::*;
use wirebench_testkit::{check, measure_seeing};

static HEAVY: Mutex<()> = Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A test's test-bed name: `base` after `WB_TEST_BED_PREFIX`, if set
/// (`Testbed::up` refuses a name that is too long or not lowercase).
fn bed(base: &str) -> String {
    format!(
        "{}{base}",
        std::env::var("WB_TEST_BED_PREFIX").unwrap_or_default()
    )
}

fn root(test: &str) -> bool {
    wirebench_testkit::can_run(test, sys::is_root(), "root (network namespaces, veth, tc)")
}

/// Everything with the test-bed's prefix that exists anywhere we create things.
fn leftovers(name: &str) -> Vec<String> {
    let prefix = format!("wb-{name}-");
    let mut v = Vec::new();
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if l.starts_with(&prefix) {
            v.push(format!("netns {l}"));
        }
    }
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if l.contains(&prefix) {
            v.push(format!("link {l}"));
        }
    }
    for dir in ["/etc/netns", "/run/netns"] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    v.push(format!("file {}", e.path().display()));
                }
            }
        }
    }
    // The state file and the emulators' counters files.
    if let Ok(rd) = std::fs::read_dir(STATE_DIR) {
        for e in rd.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}."))
            {
                v.push(format!("file {}", e.path().display()));
            }
        }
    }
    v
}

fn assert_checks(tb: &Testbed, expect_mtu: u32) {
    let checks = tb.check().unwrap();
    let hosts = tb.hosts().len();
    assert_eq!(checks.len(), hosts * (hosts - 1) * 2);
    for c in &checks {
        assert!(c.skipped.is_none(), "{c:?}");
        assert!(c.ok(), "check failed: {c:?}");
        assert_eq!(c.path_mtu, Some(expect_mtu), "{c:?}");
    }
}

#[test]
fn presets_come_up_check_and_go_away() {
    if !root("presets_come_up_check_and_go_away") {
        return;
    }
    let _g = heavy();
    for (name, p) in [
        ("tpdirect", "direct"),
        ("tprouter", "router"),
        ("tptwo", "two-routers"),
    ] {
        let _ = remove(name);
        let t0 = Instant::now();
        let tb = Testbed::up(name, &preset(p, &LinkOpts::default()).unwrap()).unwrap();
        eprintln!("{p}: up in {:?}", t0.elapsed());
        assert_eq!(tb.hosts(), vec!["a", "b"]);
        assert_checks(&tb, 1500);
        // Routers forward, hosts do not.
        for n in tb
            .spec()
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .collect::<Vec<_>>()
        {
            let out = tb
                .command(&n, "cat")
                .unwrap()
                .arg("/proc/sys/net/ipv4/ip_forward")
                .output()
                .unwrap();
            let want = if tb.routers().contains(&n) { "1" } else { "0" };
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), want, "{n}");
        }
        // Node names resolve inside every node, both families.
        let out = tb
            .command("a", "getent")
            .unwrap()
            .args(["ahosts", "b"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&tb.addr("b", false).unwrap().to_string()),
            "{text}"
        );
        assert!(
            text.contains(&tb.addr("b", true).unwrap().to_string()),
            "{text}"
        );
        // Offloads are off by default.
        let out = tb
            .command("a", "ethtool")
            .unwrap()
            .args(["-k", "eth0"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("tcp-segmentation-offload: off"), "{text}");
        assert!(text.contains("generic-segmentation-offload: off"), "{text}");
        // attach finds it again; down removes every trace.
        let again = Testbed::attach(name).unwrap();
        assert_eq!(again.plan(), tb.plan());
        assert!(!leftovers(name).is_empty());
        tb.down().unwrap();
        assert_eq!(leftovers(name), Vec::<String>::new());
        assert!(Testbed::attach(name).is_err());
    }
}

#[test]
fn switch_topology_and_offloads_on() {
    if !root("switch_topology_and_offloads_on") {
        return;
    }
    let _g = heavy();
    let name = "tpswitch";
    let _ = remove(name);
    let text = r#"
[defaults]
mtu = 4000
[[node]]
name = "a"
kind = "host"
[[node]]
name = "c"
kind = "host"
[[node]]
name = "sw"
kind = "switch"
[[node]]
name = "r1"
kind = "router"
[[node]]
name = "b"
kind = "host"
[[link]]
endpoints = ["a", "sw"]
[[link]]
endpoints = ["c", "sw"]
[[link]]
endpoints = ["sw", "r1"]
[[link]]
endpoints = ["r1", "b"]
"#;
    let spec = parse_topology(
        text,
        Path::new("switch.toml"),
        &LinkOpts {
            offloads: Some(true),
            // Full 4000 B frames must pass the shaper whole (its one-frame
            // peak bucket sets the largest packet it takes).
            rate_bps: Some(1_000_000_000),
            ..Default::default()
        },
    )
    .unwrap();
    let tb = Testbed::up(name, &spec).unwrap();
    assert_eq!(tb.hosts().len(), 3);
    assert_checks(&tb, 4000);
    let out = tb
        .command("a", "ethtool")
        .unwrap()
        .args(["-k", "eth0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tcp-segmentation-offload: on"), "{text}");
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

#[test]
fn jumbo_frames_and_path_mtu() {
    if !root("jumbo_frames_and_path_mtu") {
        return;
    }
    let _g = heavy();
    let name = "tpjumbo";
    let _ = remove(name);
    let o = LinkOpts {
        mtu: Some(9000),
        ..Default::default()
    };
    let tb = Testbed::up(name, &preset("router", &o).unwrap()).unwrap();
    assert_eq!(
        tb.df_probe("a", "b", false, 8972).unwrap(),
        DfOutcome::Delivered
    );
    assert_eq!(
        tb.df_probe("a", "b", true, 8952).unwrap(),
        DfOutcome::Delivered
    );
    assert_eq!(
        tb.df_probe("a", "b", false, 8973).unwrap(),
        DfOutcome::Refused
    );
    assert_eq!(
        tb.df_probe("a", "b", true, 8953).unwrap(),
        DfOutcome::Refused
    );
    assert_eq!(tb.path_mtu("a", "b", false).unwrap(), 9000);
    assert_eq!(tb.path_mtu("b", "a", true).unwrap(), 9000);
    tb.down().unwrap();

    // The same path with its second link at 1500: the router refuses the
    // jumbo datagram (ICMP), the sender then gets EMSGSIZE; nothing is
    // fragmented and nothing large arrives.
    let text = r#"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "r1"
kind = "router"
[[node]]
name = "b"
kind = "host"
[[link]]
endpoints = ["a", "r1"]
mtu = 9000
[[link]]
endpoints = ["r1", "b"]
mtu = 1500
"#;
    let spec = parse_topology(text, Path::new("mixed.toml"), &LinkOpts::default()).unwrap();
    let tb = Testbed::up(name, &spec).unwrap();
    let before = tb.counters().unwrap();
    assert_eq!(
        tb.df_probe("a", "b", false, 8972).unwrap(),
        DfOutcome::Refused
    );
    assert_eq!(
        tb.df_probe("a", "b", true, 8952).unwrap(),
        DfOutcome::Refused
    );
    let d = tb.counters().unwrap().delta(&before);
    // b received no datagram of that size, whole or in fragments.
    let rx = d.get("b", "eth0").unwrap();
    assert!(rx.rx_bytes < 3000, "b received {} bytes", rx.rx_bytes);
    assert_eq!(tb.path_mtu("a", "b", false).unwrap(), 1500);
    assert_eq!(tb.path_mtu("a", "b", true).unwrap(), 1500);
    assert_eq!(
        tb.df_probe("a", "b", false, 1472).unwrap(),
        DfOutcome::Delivered
    );
    assert_eq!(
        tb.df_probe("a", "b", false, 1473).unwrap(),
        DfOutcome::Refused
    );
    assert_eq!(
        tb.df_probe("a", "b", true, 1452).unwrap(),
        DfOutcome::Delivered
    );
    assert_eq!(
        tb.df_probe("a", "b", true, 1453).unwrap(),
        DfOutcome::Refused
    );
    let checks = tb.check().unwrap();
    assert!(
        checks.iter().all(|c| c.ok() && c.path_mtu == Some(1500)),
        "{checks:?}"
    );
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// A receiver in `b` (8 MiB buffer, reads time out after `idle`) and a
/// sender in `a` connected to it.
fn udp_pair(tb: &Testbed, idle: Duration) -> (UdpSocket, UdpSocket) {
    let dst = tb.addr("b", false).unwrap();
    let rx: UdpSocket = tb
        .in_node("b", move || {
            UdpSocket::bind(SocketAddr::new(dst, 0)).map_err(|e| TestbedError::Probe(e.to_string()))
        })
        .unwrap();
    let port = rx.local_addr().unwrap().port();
    let _ = socket_opt(&rx, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20);
    rx.set_read_timeout(Some(idle)).unwrap();
    let tx: UdpSocket = tb
        .in_node("a", || {
            UdpSocket::bind("0.0.0.0:0").map_err(|e| TestbedError::Probe(e.to_string()))
        })
        .unwrap();
    tx.connect(SocketAddr::new(dst, port)).unwrap();
    (rx, tx)
}

/// What [`saturate`] measured.
struct Saturated {
    /// Payload bit/s at the receiver after a warm-up.
    bps: f64,
    /// Seconds the rate was measured over.
    span: f64,
    sent: u64,
    received: u64,
    /// Arrival gaps longer than [`STALL_NS`] after the warm-up, with the
    /// link kept backlogged: something on the path ran late. How many and
    /// the longest (printed, for the reader of a failure).
    stalls: u64,
    longest_ns: u64,
    /// The time the last emulated wire stood idle while the rate was
    /// measured, by the emulator's own account (None without one): what
    /// its source (the sending host, the router, the wire before) left it
    /// without a frame, lost for good. Arrival gaps alone over-count that:
    /// an emulator that sends late catches up, its backlog arriving at once.
    wire_idle_ns: Option<u64>,
    /// Stalls the emulators counted over the whole run, all links and
    /// directions, and their summed lateness (ns).
    wire_stalls: u64,
    wire_stall_ns: u64,
    /// The longest a datagram waited in b's socket before the receiver
    /// read it (ns): a receiver the host held that long can let the
    /// socket's buffer overflow.
    read_lag_ns: u64,
}

/// An arrival gap on a backlogged 100 Mbit/s link that only something run
/// late explains: more than twice the token bucket tbf is given there (4
/// frames, 490 us).
const STALL_NS: u64 = 1_000_000;

/// A blocking UDP sender in `a` as fast as it can for `secs`, a receiver in
/// `b` counting payload bytes and timing arrivals.
fn saturate(tb: &Testbed, payload: usize, gso_segs: usize, secs: f64, sndbuf: i32) -> Saturated {
    let (rx, tx) = udp_pair(tb, Duration::from_millis(500));
    socket_opt(&tx, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, sndbuf).unwrap();
    if gso_segs > 1 {
        // UDP GSO: one send carries gso_segs datagrams as one skb through
        // the qdisc; the shaper must still charge each frame its overhead.
        // 103 = UDP_SEGMENT
        socket_opt(&tx, libc::SOL_UDP, 103, payload as i32).expect("UDP_SEGMENT");
    }
    let wires_before = tb.wire_counters();
    let sender = std::thread::spawn(move || {
        // Real-time priority where root allows it: a sender that waits for
        // a CPU longer than its socket buffer lasts lets the link idle.
        wirebench_testkit::realtime_thread();
        let buf = vec![0x42u8; payload * gso_segs];
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut sent = 0u64;
        // Bounded in time and count.
        while Instant::now() < end && sent < 10_000_000 {
            if tx.send(&buf).is_ok() {
                sent += gso_segs as u64;
            }
        }
        sent
    });
    // Kernel receive timestamps: the measurement does not depend on when
    // this thread gets to read the socket. It runs at real-time priority
    // all the same: one held for longer than b's socket buffer lasts
    // (8 MiB, about 0.4 s of the link) would lose datagrams there.
    socket_opt(&rx, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
    let warm_ns = 500_000_000u64;
    let (received, t_start, t_last, bytes_after, stalls, longest_ns, read_lag_ns, wires_at_start) =
        std::thread::scope(|s| {
            s.spawn(|| {
                wirebench_testkit::realtime_thread();
                let mut buf = vec![0u8; 65536];
                let mut first: Option<u64> = None;
                let mut t_start: Option<u64> = None;
                let mut t_last = 0u64;
                let mut bytes_after = 0u64;
                let mut received = 0u64;
                let (mut stalls, mut longest_ns, mut lag_ns) = (0u64, 0u64, 0u64);
                let mut wires_at_start = None;
                // Ends on a quiet spell that began after the sender's last
                // send: a gap while it still sends is the host's, not the end.
                let bound =
                    Instant::now() + Duration::from_secs_f64(secs) + Duration::from_secs(30);
                while Instant::now() < bound {
                    let sender_done = sender.is_finished();
                    let Some((n, ts)) = recv_ts(&rx, &mut buf) else {
                        if sender_done {
                            break;
                        }
                        continue;
                    };
                    lag_ns = lag_ns.max(realtime_ns().saturating_sub(ts));
                    received += 1;
                    let f = *first.get_or_insert(ts);
                    if ts.saturating_sub(f) >= warm_ns {
                        if t_start.is_none() {
                            t_start = Some(ts);
                            wires_at_start = Some(tb.wire_counters());
                        } else {
                            bytes_after += n as u64;
                            let gap = ts.saturating_sub(t_last);
                            longest_ns = longest_ns.max(gap);
                            if gap > STALL_NS {
                                stalls += 1;
                            }
                        }
                        t_last = ts;
                    }
                }
                (
                    received,
                    t_start,
                    t_last,
                    bytes_after,
                    stalls,
                    longest_ns,
                    lag_ns,
                    wires_at_start,
                )
            })
            .join()
            .unwrap()
        });
    let sent = sender.join().unwrap();
    // Bytes after the reference datagram over the time since it arrived.
    let span = (t_last - t_start.expect("datagrams arrived after the warm-up")) as f64 / 1e9;
    let wires_after = tb.wire_counters();
    // The last link's busier direction is the one that carried the flood.
    let wire_idle_ns = wires_at_start.and_then(|before| {
        let (b, a) = (before.last()?.as_ref()?, *wires_after.last()?);
        let a = a?;
        (0..2)
            .map(|d| a[d].delta(&b[d]))
            .max_by_key(|w| w.delivered)
            .map(|w| w.idle_ns)
    });
    let (mut wire_stalls, mut wire_stall_ns) = (0, 0);
    for (b, a) in wires_before.iter().zip(&wires_after) {
        if let (Some(b), Some(a)) = (b, a) {
            for d in 0..2 {
                let w = a[d].delta(&b[d]);
                wire_stalls += w.stalls;
                wire_stall_ns += w.stall_ns;
            }
        }
    }
    Saturated {
        bps: bytes_after as f64 * 8.0 / span,
        span,
        sent,
        received,
        stalls,
        longest_ns,
        wire_idle_ns,
        wire_stalls,
        wire_stall_ns,
        read_lag_ns,
    }
}

/// One datagram and its kernel receive time (ns, CLOCK_REALTIME); None on
/// timeout.
fn recv_ts(s: &UdpSocket, buf: &mut [u8]) -> Option<(usize, u64)> {
    use std::os::fd::AsRawFd;
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: msghdr is integers and pointers; all zeros is an empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: `msg` points at the live `iov` (over `buf`) and `cbuf`, with
    // their lengths; the kernel writes no more.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return None;
    }
    let mut ts = None;
    // SAFETY: the CMSG macros walk `cbuf` within the length the kernel
    // wrote to msg_controllen; a timestamp's data is a timespec, read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let t: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Some((
        n as usize,
        ts.expect("SO_TIMESTAMPNS gives every datagram a time"),
    ))
}

fn socket_opt(s: &UdpSocket, level: i32, opt: i32, val: i32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the value is a live i32 and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            &val as *const i32 as *const libc::c_void,
            4,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn rate_100mbit_carries_what_ethernet_carries() {
    if !root("rate_100mbit_carries_what_ethernet_carries") {
        return;
    }
    let _g = heavy();
    let name = &bed("tprate");
    let _ = remove(name);
    let o = LinkOpts {
        mtu: Some(1500),
        rate_bps: Some(parse_rate("100mbit").unwrap()),
        ..Default::default()
    };
    let tb = Testbed::up(name, &preset("router", &o).unwrap()).unwrap();
    assert!(tb.check().unwrap().iter().all(|c| c.ok()));

    // What the kernel counts: a 1000 B payload is 1042 B in the qdisc
    // (UDP 8 + IPv4 20 + Ethernet header 14); tbf adds the other 24.
    let before = tb.counters().unwrap();
    let dst = tb.addr("b", false).unwrap();
    let tx: UdpSocket = tb
        .in_node("a", || {
            UdpSocket::bind("0.0.0.0:0").map_err(|e| TestbedError::Probe(e.to_string()))
        })
        .unwrap();
    for _ in 0..100 {
        tx.send_to(&[7u8; 1000], SocketAddr::new(dst, 9)).unwrap();
    }
    // They leave a's qdisc within a few ms; a host that holds this
    // thread or the qdisc's timer only makes that later.
    let deadline = Instant::now() + Duration::from_secs(5);
    let d = loop {
        let d = tb.counters().unwrap().delta(&before);
        let q = &d.get("a", "eth0").unwrap().qdisc;
        if q.sent_packets >= 100 || Instant::now() >= deadline {
            break d;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let q = &d.get("a", "eth0").unwrap().qdisc;
    assert_eq!(q.kind, "tbf");
    assert!(q.sent_packets >= 100, "{q:?}");
    // Allow a few small control packets (neighbour discovery) besides ours.
    let extra = q.sent_bytes as i64 - 100 * 1042;
    assert!(
        (0..=(q.sent_packets as i64 - 100) * 200).contains(&extra),
        "{q:?}"
    );

    // A send buffer (512 KiB, which the kernel doubles) that holds less
    // than the host's 1000-frame queue, so that the socket blocks before
    // the queue overflows, yet deep enough (~50 ms of the link) that a
    // sender descheduled on a busy machine does not let the link idle.
    let fits = 512 << 10;
    // A 1408 B payload's frame on the wire: UDP, IPv4, Ethernet header,
    // FCS, preamble, inter-frame gap.
    let wire: u64 = 1408 + 8 + 20 + 14 + 4 + 8 + 12;
    let expect: f64 = 100e6 * 1408.0 / wire as f64;
    assert!((expect / 1e6 - 95.52).abs() < 0.01);
    // Plain datagrams, then UDP GSO (16 datagrams per send, one skb in the
    // qdisc): still what Ethernet carries, every frame charged its 24 B.
    // Beside 4 CPU hogs a normal-priority sender let the link idle: 1.0-2.3 %
    // short in 4 runs of 4. At real-time priority (saturate, as root) 4 of 4
    // passed at -0.03 to -0.91 %: the shaper's dequeues are still the
    // kernel's (softirq), so the rate is measured once more when the host
    // was busy during a failed run. What was lost, and where, never depends
    // on the scheduler.
    //
    // A clean run reads -0.02 to 0 %. A run that reads short had its last
    // wire stand idle: its source (the sender, a's tbf timer, the first
    // emulator, r1's forwarding) left it without a frame, each time the
    // host ran something late. The emulator counts that idle time, so the
    // rate over the wire's busy time is the shaper's own accounting: it
    // read -0.002 to +0.001 % of the model in 8 runs, idle and beside two
    // CPU hogs (where the whole-run rate read -0.19 to -1.11 %). Arrival
    // gaps at b over-count the idle time: an emulator that wakes late sends
    // its backlog at once and catches up (their "busy-time" read up to
    // +4.3 % under contention), so they are printed, not checked.
    //
    // Checked: the busy-time rate within 0.1 % (what Ethernet carries,
    // every frame charged its 24 B), and the whole-run rate (what a user
    // reads) within 1 %. A whole-run shortfall is measured once more when
    // the wire's idle time explains at least half of it, and it is the
    // host's, not the shaper's, when the host was contended during the run
    // and the idle time explains at least 90 % of it; on an uncontended
    // host it stands.
    for (what, gso) in [("1408 B", 1), ("1408 B with UDP GSO x16", 16)] {
        measure_seeing(&format!("saturating 100mbit with {what}"), || {
            let contention = wirebench_testkit::Contention::start();
            let before = tb.counters().unwrap();
            let r = saturate(&tb, 1408, gso, 3.0, fits);
            let d = tb.counters().unwrap().delta(&before);
            let contended = contention
                .share()
                .is_some_and(|c| c >= wirebench_testkit::CONTENDED);
            let err = (r.bps - expect) / expect;
            let idle_ns = r
                .wire_idle_ns
                .expect("the router preset's 100 Mbit/s links are emulated")
                as f64;
            let busy_err = (r.bps * r.span / (r.span - idle_ns / 1e9) - expect) / expect;
            eprintln!(
                "saturating {what} over 100mbit: {:.3} Mbit/s payload (model {:.3}, {:+.3} %), sent {}, received {}; \
                 last wire idle {:.1} ms, rate over its busy time {:+.4} %; {} arrival gaps > 1 ms (longest {} us); \
                 host contended: {contended}",
                r.bps / 1e6,
                expect / 1e6,
                err * 100.0,
                r.sent,
                r.received,
                idle_ns / 1e6,
                busy_err * 100.0,
                r.stalls,
                r.longest_ns / 1000,
            );
            eprintln!(
                "drop sites: {:?}; emulator stalls {} ({:.1} ms in all); longest wait in b's socket {:.1} ms",
                d.drop_sites(),
                r.wire_stalls,
                r.wire_stall_ns as f64 / 1e6,
                r.read_lag_ns as f64 / 1e6
            );
            // The sender was held back by its own link (socket blocked), so
            // nothing was dropped anywhere on the way.
            assert_eq!(d.node_drops("a"), 0, "{:?}", d.drop_sites());
            assert_eq!(d.node_drops("r1"), 0, "{:?}", d.drop_sites());
            // Every datagram reached b's reader, unless the host held the
            // reader past what b's socket buffer holds, or the path.
            let held = evidence([
                (r.read_lag_ns >= 10_000_000).then(|| {
                    format!(
                        "a datagram waited {:.1} ms in b's socket",
                        r.read_lag_ns as f64 / 1e6
                    )
                }),
                stalls_seen(r.wire_stalls, r.wire_stall_ns as f64),
            ]);
            let delivered = check(r.sent == r.received, || {
                format!(
                    "sent {}, received {}: {:?}",
                    r.sent,
                    r.received,
                    d.drop_sites()
                )
            })
            .map_err(|why| (why, held));
            let short_ns = (-err).max(0.0) * r.span * 1e9;
            let seen = (idle_ns >= short_ns / 2.0).then(|| {
                format!(
                    "the last wire stood idle {:.1} ms of its {:.1} ms shortfall",
                    idle_ns / 1e6,
                    short_ns / 1e6
                )
            });
            let hosts = contended && short_ns > 0.0 && idle_ns >= 0.9 * short_ns;
            delivered?;
            check(busy_err.abs() < 0.001, || {
                format!(
                    "payload throughput over the wire's busy time {:+.4} % off the model",
                    busy_err * 100.0
                )
            })
            .and_then(|()| {
                check(err.abs() < 0.01 || hosts, || {
                    format!("payload throughput {} vs {expect}", r.bps)
                })
            })
            .map_err(|why| (why, seen))
        });
    }

    // A socket buffer deeper than the NIC-like queue (4 MiB, as wirebench
    // forces): the queue, not the socket, overflows, so what the link could
    // not carry is dropped at the sender's own host, as behind a real NIC,
    // and nowhere else.
    let before = tb.counters().unwrap();
    let Saturated { sent, received, .. } = saturate(&tb, 1408, 1, 1.0, 4 << 20);
    let d = tb.counters().unwrap().delta(&before);
    eprintln!("4 MiB send buffer: sent {sent}, received {received}");
    assert!(sent > received, "sent {sent}, received {received}");
    assert_eq!(d.node_drops("a"), sent - received, "{:?}", d.drop_sites());
    assert_eq!(d.node_drops("r1"), 0, "{:?}", d.drop_sites());
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// What [`paced`] sent and received.
struct Paced {
    sent: u64,
    received: u64,
    /// Seconds the sending took.
    took: f64,
    /// How far the sender fell behind its schedule.
    behind: Behind,
}

/// How punctually a test sender kept its absolute schedule: sends over
/// 1 ms after their due time, and the latest (ns). A sender the host held
/// sends its backlog at once, a burst the path was not meant to see.
#[derive(Debug, Default, Clone, Copy)]
struct Behind {
    late: u64,
    latest_ns: u64,
}

impl Behind {
    /// Notes a send due at `due`, made now.
    fn note(&mut self, due: Instant) {
        let b = Instant::now().saturating_duration_since(due);
        if b > Duration::from_millis(1) {
            self.late += 1;
        }
        self.latest_ns = self.latest_ns.max(b.as_nanos() as u64);
    }

    /// Adds another run's account to this one.
    fn add(&mut self, o: Behind) {
        self.late += o.late;
        self.latest_ns = self.latest_ns.max(o.latest_ns);
    }

    /// `sender`'s late sends as evidence of a hold; None when on time.
    fn seen(&self, sender: &str) -> Option<String> {
        (self.late > 0).then(|| format!("{sender} sent {self}"))
    }
}

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} over 1 ms late (the latest {:.1} ms)",
            self.late,
            self.latest_ns as f64 / 1e6
        )
    }
}

/// The emulators' stalls (`stall_ns` in all) as evidence of a hold; None
/// without one.
fn stalls_seen(stalls: u64, stall_ns: f64) -> Option<String> {
    (stalls > 0).then(|| {
        format!(
            "the emulators counted {stalls} stalls ({:.1} ms in all)",
            stall_ns / 1e6
        )
    })
}

/// [`measure_seeing`]'s evidence: what a run saw of the host holding it,
/// joined; None when it saw nothing.
fn evidence<const N: usize>(seen: [Option<String>; N]) -> Option<String> {
    let seen: Vec<String> = seen.into_iter().flatten().collect();
    (!seen.is_empty()).then(|| seen.join("; "))
}

/// Sends `pps` datagrams/s of `payload` B from a to b for `secs` on an
/// absolute schedule, from a thread at real-time priority.
fn paced(tb: &Testbed, payload: usize, pps: f64, secs: f64) -> Paced {
    let (rx, tx) = udp_pair(tb, Duration::from_millis(300));
    let n = (pps * secs) as u64;
    let sender = std::thread::spawn(move || {
        // A sender waiting for a CPU would send its backlog as a burst.
        wirebench_testkit::realtime_thread();
        let buf = vec![0x42u8; payload];
        let t0 = Instant::now();
        let (mut sent, mut behind) = (0u64, Behind::default());
        for k in 0..n {
            let due = t0 + Duration::from_secs_f64(k as f64 / pps);
            let now = Instant::now();
            if due > now + Duration::from_micros(200) {
                std::thread::sleep(due - now - Duration::from_micros(100));
            }
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            behind.note(due);
            if tx.send(&buf).is_ok() {
                sent += 1;
            }
        }
        (sent, t0.elapsed().as_secs_f64(), behind)
    });
    let mut buf = [0u8; 2048];
    let mut received = 0u64;
    // Ends on a quiet spell that began after the last send (a 300 ms gap
    // while the sender still sends is the host's, not the end); bounded.
    let end = Instant::now() + Duration::from_secs_f64(secs) + Duration::from_secs(30);
    while Instant::now() < end {
        let sender_done = sender.is_finished();
        match rx.recv(&mut buf) {
            Ok(_) => received += 1,
            Err(_) if sender_done => break,
            Err(_) => {}
        }
    }
    let (sent, took, behind) = sender.join().unwrap();
    Paced {
        sent,
        received,
        took,
        behind,
    }
}

/// S5's calibration sweep (64 B datagrams at 10 000 … 50 000 packets/s
/// through a router that forwards about 29 000/s; loss 0, 0.01, 0.78,
/// 27.9, 42.5 %) scaled down tenfold in rate and queue, so that a busy
/// 2-core machine can send it on time: a router capped at 2 900 packets/s
/// (`forward_pps`) with a 100-packet queue, 1 000 … 5 000 packets/s for 1 s.
/// Loss must follow the fluid model and every drop must be at the router.
/// (The full-rate sweep is a hand run in docs/testbed.md.)
#[test]
fn forward_pps_caps_a_router() {
    if !root("forward_pps_caps_a_router") {
        return;
    }
    let _g = heavy();
    let name = &bed("tpfwd");
    let _ = remove(name);
    let cap = 2_900.0;
    let queue = 100u32;
    let o = LinkOpts {
        rate_bps: Some(parse_rate("100mbit").unwrap()),
        forward_pps: Some(cap as u64),
        txqueuelen: Some(queue),
        ..Default::default()
    };
    let tb = Testbed::up(name, &preset("router", &o).unwrap()).unwrap();
    assert!(tb.check().unwrap().iter().all(|c| c.ok()));
    let secs = 1.0;
    let queue = queue as f64;
    // Exact on any host: every datagram sent, every loss a drop the nodes
    // or wires counted. What the host's timing decides is checked as
    // timing: a sender held past its schedule sends a burst (the router's
    // queue overflows below the cap, the sender's own queue may too) and
    // takes longer; the sweep is measured once more when the run saw that.
    measure_seeing("the forwarding cap's sweep", || {
        let mut losses = Vec::new();
        let mut timing = Ok(());
        let (mut behind, mut stalls, mut stall_ns) = (Behind::default(), 0u64, 0u64);
        for pps in [1_000.0, 2_000.0, 3_000.0, 4_000.0, 5_000.0] {
            let (before, w0) = (tb.counters().unwrap(), tb.wire_counters());
            let p = paced(&tb, 64, pps, secs);
            let (d, w1) = (tb.counters().unwrap().delta(&before), tb.wire_counters());
            let (sent, received, took) = (p.sent, p.received, p.took);
            let loss = 1.0 - received as f64 / sent as f64;
            // Fluid model: the router forwards `cap` per second and queues
            // `queue` packets; what exceeds both is dropped.
            let offered = sent as f64 / took;
            let model = ((offered - cap) * took - queue).max(0.0) / sent as f64;
            let wires: Vec<WireCounters> = w0
                .iter()
                .zip(&w1)
                .filter_map(|(b, a)| Some((b.as_ref()?, a.as_ref()?)))
                .flat_map(|(b, a)| [a[0].delta(&b[0]), a[1].delta(&b[1])])
                .collect();
            let wire_drops: u64 = wires
                .iter()
                .map(|w| w.lost + w.queue_drops + w.buffer_drops + w.aqm_drops)
                .sum();
            behind.add(p.behind);
            stalls += wires.iter().map(|w| w.stalls).sum::<u64>();
            stall_ns += wires.iter().map(|w| w.stall_ns).sum::<u64>();
            eprintln!(
                "{pps} pps through a {cap} pps router: sent {sent} in {took:.3} s ({}), received {received}, \
                 loss {:.2} % (fluid model {:.2} %), drops {:?}, wire drops {wire_drops}",
                p.behind,
                loss * 100.0,
                model * 100.0,
                d.drop_sites()
            );
            assert_eq!(sent, (pps * secs) as u64);
            // Every loss is a drop counted on the way (give or take a
            // neighbour discovery packet of the router's own in its queue).
            let lost = sent - received;
            let (at_a, at_r1) = (d.node_drops("a"), d.node_drops("r1"));
            assert!(
                (at_a + at_r1 + wire_drops).abs_diff(lost) <= 2,
                "{pps} pps: lost {lost}: {:?}, wire drops {wire_drops}",
                d.drop_sites()
            );
            losses.push(loss);
            timing = timing
                .and_then(|()| {
                    check(took < secs * 1.1, || {
                        format!("{pps} pps: the sender ran late: {took} s")
                    })
                })
                .and_then(|()| {
                    // On time, every loss is the router's.
                    check(at_a == 0 && at_r1.abs_diff(lost) <= 2, || {
                        format!("{pps} pps: lost {lost}, at a {at_a}, at r1 {at_r1}")
                    })
                })
                .and_then(|()| {
                    check((loss - model).abs() < 0.04, || {
                        format!("{pps} pps: loss {loss} vs model {model}")
                    })
                });
        }
        let seen = evidence([
            behind.seen("the sender"),
            stalls_seen(stalls, stall_ns as f64),
        ]);
        timing
            .and_then(|()| {
                check(losses[0] < 0.001 && losses[1] < 0.001, || {
                    format!("loss below the cap: {losses:?}")
                })
            })
            .and_then(|()| {
                check(losses.windows(2).all(|w| w[1] >= w[0]), || {
                    format!("loss does not rise with the rate: {losses:?}")
                })
            })
            .map_err(|why| (why, seen))
    });
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

#[test]
fn bad_input_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(
        &p,
        "[[node]]\nname = \"a\"\nkind = \"host\"\n[[node]]\nname = \"b\"\nkind = \"host\"\n[[link]]\nendpoints = [\"a\", \"b\"]\nmtu = 40\n",
    )
    .unwrap();
    match load_file(&p, &LinkOpts::default()) {
        Err(TestbedError::File { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (9, "mtu"))
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(
        &p,
        "[[node]]\nname = \"a\"\nkind = \"host\"\n[[link]]\nendpoints = [\"a\"]\nrate = 5\n",
    )
    .unwrap();
    let e = load_file(&p, &LinkOpts::default()).unwrap_err();
    assert!(e.is_bad_input());
    assert!(e.to_string().contains(":5: field `endpoints`"), "{e}");
    // A spec built in code and wrong: refused before anything exists.
    let mut spec = preset("router", &LinkOpts::default()).unwrap();
    spec.links[1].endpoints[1] = "zz".into();
    let e = Testbed::up("tpbad", &spec).unwrap_err();
    assert!(e.is_bad_input(), "{e}");
    assert!(e.to_string().contains("zz"), "{e}");
    spec.links[1].endpoints[1] = "b".into();
    spec.links[1].mtu = 70000;
    assert!(Testbed::up("tpbad", &spec).unwrap_err().is_bad_input());
    assert!(
        Testbed::up("bad-name", &preset("direct", &LinkOpts::default()).unwrap())
            .unwrap_err()
            .is_bad_input()
    );
    if sys::is_root() {
        assert_eq!(leftovers("tpbad"), Vec::<String>::new());
    }
}

/// A long chain, so that `up` takes long enough to be killed in the middle;
/// its links' frame rates are under `EMULATOR_TIMING_MAX_FPS`, so each has a wire
/// emulator to clean up too.
fn chain_spec(routers: usize) -> TopologySpec {
    let mut t = TopologySpec::chain(routers);
    for l in &mut t.links {
        l.rate_bps = Some(100_000_000);
    }
    t
}

/// Not a test on its own: the body of the child process the kill tests start.
#[test]
#[ignore]
fn helper_child_up() {
    let Ok(name) = std::env::var("WB_TEST_CHILD_UP") else {
        return;
    };
    if std::env::var("WB_TEST_CHILD_SIGNAL").is_ok() {
        cleanup_on_signal().unwrap();
    }
    let tb = Testbed::up(&name, &chain_spec(12)).unwrap();
    eprintln!("child: up complete");
    let _ = tb;
    std::thread::sleep(Duration::from_secs(30));
}

fn spawn_child(name: &str, signal: bool) -> std::process::Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "helper_child_up",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("WB_TEST_CHILD_UP", name);
    if signal {
        c.env("WB_TEST_CHILD_SIGNAL", "1");
    }
    c.spawn().unwrap()
}

fn read_complete(name: &str) -> Option<bool> {
    let t = std::fs::read_to_string(state_path(name)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&t).ok()?;
    v.get("complete")?.as_bool()
}

fn wait_for_state(name: &str) {
    let end = Instant::now() + Duration::from_secs(20);
    while read_complete(name).is_none() {
        assert!(Instant::now() < end, "child never wrote its state");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn sigkill_in_the_middle_of_up_is_cleaned_by_the_next_up() {
    if !root("sigkill_in_the_middle_of_up_is_cleaned_by_the_next_up") {
        return;
    }
    let _g = heavy();
    let name = "tpkill";
    let _ = remove(name);
    let mut child = spawn_child(name, false);
    wait_for_state(name);
    // Let it create some namespaces, then kill it hard.
    let end = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("wb-tpkill-"))
                .count()
        })
        .unwrap_or(0)
        < 3
    {
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        read_complete(name),
        Some(false),
        "the child was not killed mid-up"
    );
    let left = leftovers(name);
    eprintln!("left by the killed process: {} items", left.len());
    assert!(left.iter().any(|l| l.starts_with("netns")));
    assert!(Testbed::attach(name).is_err());
    // The next up of the same name cleans and succeeds.
    let tb = Testbed::up(name, &chain_spec(12)).unwrap();
    assert_eq!(read_complete(name), Some(true));
    // 13 segments: addressing past 9 (hex in IPv6) routes both families.
    assert_checks(&tb, 1500);
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

#[test]
fn sigterm_during_up_removes_what_was_built() {
    if !root("sigterm_during_up_removes_what_was_built") {
        return;
    }
    let _g = heavy();
    let name = "tpterm";
    let _ = remove(name);
    let mut child = spawn_child(name, true);
    wait_for_state(name);
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: kill takes integers only; the pid is our own unreaped child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// The user-space emulator carries frames, not GSO super-packets: a link
/// with offloads on and a delay needs netem; where the kernel lacks it,
/// `up` stops before creating anything. Offloads off, the same link uses
/// the emulator (see `delay_and_loss_without_netem`).
#[test]
fn delay_with_offloads_on_needs_netem_and_fails_before_creating_anything() {
    if !root("delay_with_offloads_on_needs_netem_and_fails_before_creating_anything") {
        return;
    }
    let _g = heavy();
    let name = "tpnetem";
    let _ = remove(name);
    let text = pair_text("rate = \"10mbit\"\ndelay = \"20ms\"\nloss = \"0%\"\noffloads = true");
    let spec = parse_topology(&text, Path::new("netem.toml"), &LinkOpts::default()).unwrap();
    assert_eq!(spec.links[0].impairment.unwrap().delay_ns, 20_000_000);
    let mut plain = spec.clone();
    plain.links[0].offloads = false;
    assert_eq!(
        testbed::choose_backend(&plain.links[0], false).unwrap(),
        testbed::LinkBackend::TbfEmulator
    );
    if !sys::netem_available() {
        let e = Testbed::up(name, &spec).unwrap_err();
        assert!(matches!(e, TestbedError::NoNetem { .. }), "{e}");
        assert!(e.to_string().contains("sch_netem"), "{e}");
        assert!(e.to_string().contains("offloads"), "{e}");
        eprintln!("this kernel has no netem: {e}");
        assert_eq!(leftovers(name), Vec::<String>::new());
        return;
    }
    // Where the kernel has netem: 20 ms each way.
    let tb = Testbed::up(name, &spec).unwrap();
    assert_eq!(tb.backends(), [testbed::LinkBackend::Netem]);
    let rtt = tb.echo("a", "b", false).unwrap().expect("echo");
    assert!(rtt >= Duration::from_millis(40), "{rtt:?}");
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

#[test]
fn shipped_topology_files_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) == Some("toml") {
            let spec = load_file(&p, &LinkOpts::default()).unwrap_or_else(|e| panic!("{e}"));
            let plan = Plan::new("t", &spec).unwrap();
            assert!(!plan.nodes.is_empty());
            n += 1;
        }
    }
    assert!(n >= 2);
    let spec = load_file(&dir.join("lan-wan.toml"), &LinkOpts::default()).unwrap();
    let plan = Plan::new("t", &spec).unwrap();
    assert_eq!(plan.expected_path_mtu("h1", "remote", false), Some(1500));
    assert_eq!(plan.expected_path_mtu("h1", "h2", true), Some(9000));
}

/// Realtime clock in ns, the clock the kernel stamps received datagrams with.
fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Pids of the processes in a namespace (`ip netns pids`).
fn netns_pids(ns: &str) -> Vec<i32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Whether a process runs (a zombie waiting for a reaper does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().chars().next()))
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// Waits up to 2 s for `pids` to end (SIGKILL is not instantaneous).
fn all_end(pids: &[i32]) -> bool {
    let end = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.iter().all(|&p| !alive(p))
}

/// One-way delays (ns) of `n` datagrams of `payload` bytes sent `gap` apart
/// from a to b, and how many were lost.
fn one_way(tb: &Testbed, payload: usize, n: usize, gap: Duration) -> (Vec<u64>, usize) {
    let p = probe(tb, payload, n, gap);
    (p.delays, p.lost)
}

/// What [`probe`] sent and received.
struct Probes {
    /// One-way delays (ns) of the datagrams received.
    delays: Vec<u64>,
    /// Datagrams sent and never received.
    lost: usize,
    /// Sends that returned an error.
    send_errors: usize,
    /// How far the sender fell behind its schedule.
    behind: Behind,
}

/// [`one_way`], also telling how punctually the sender kept its schedule.
fn probe(tb: &Testbed, payload: usize, n: usize, gap: Duration) -> Probes {
    let (rx, tx) = udp_pair(tb, Duration::from_millis(300));
    socket_opt(&rx, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
    let sender = std::thread::spawn(move || {
        // A sender waiting for a CPU would send its backlog as a burst.
        wirebench_testkit::realtime_thread();
        let mut buf = vec![0u8; payload];
        let (mut errors, mut behind) = (0usize, Behind::default());
        let start = Instant::now();
        for i in 0..n {
            // Absolute deadlines: a late send does not push the rest.
            let due = start + gap * i as u32;
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            behind.note(due);
            buf[..8].copy_from_slice(&realtime_ns().to_le_bytes());
            if tx.send(&buf).is_err() {
                errors += 1;
            }
        }
        (errors, behind)
    });
    let mut buf = vec![0u8; 65536];
    let mut delays = Vec::with_capacity(n);
    let end = Instant::now() + gap * n as u32 + Duration::from_secs(10);
    while Instant::now() < end {
        // A quiet spell ends the run only if it began after the last send.
        let sender_done = sender.is_finished();
        match recv_ts(&rx, &mut buf) {
            Some((len, ts)) if len == payload => {
                let sent = u64::from_le_bytes(buf[..8].try_into().unwrap());
                delays.push(ts.saturating_sub(sent));
            }
            Some(_) => {}
            None if sender_done => break,
            None => {}
        }
    }
    let (send_errors, behind) = sender.join().unwrap();
    let lost = n - delays.len().min(n);
    Probes {
        delays,
        lost,
        send_errors,
        behind,
    }
}

/// Issue 23, L1: a lone 1518 B frame crosses each 100 Mbit/s hop in its
/// serialisation time (1538 B on the wire: 123.04 µs), as on Ethernet, not
/// at once as through a token bucket with credit.
#[test]
fn a_lone_frame_takes_its_wire_time_on_every_hop() {
    if !root("a_lone_frame_takes_its_wire_time_on_every_hop") {
        return;
    }
    let _g = heavy();
    let name = &bed("tlwire");
    let _ = remove(name);
    let o = LinkOpts {
        rate_bps: Some(100_000_000),
        ..Default::default()
    };
    let tb = Testbed::up(name, &preset("router", &o).unwrap()).unwrap();
    assert_eq!(
        tb.backends(),
        [
            testbed::LinkBackend::TbfEmulator,
            testbed::LinkBackend::TbfEmulator
        ]
    );
    // 1472 B of UDP payload is a 1518 B frame (1514 B without FCS).
    let model = 2.0 * 1538.0 * 8.0 / 100e6 * 1e9;
    // An idle VM can wake the emulator late for every lone frame (~80 us);
    // the emulator measures that itself, and when its own lateness
    // explains a minimum above the bound the run is measured once more.
    measure_seeing("a lone frame's wire time", || {
        let e0 = tb.send_errors();
        let (d, lost) = one_way(&tb, 1472, 100, Duration::from_millis(20));
        let e1 = tb.send_errors();
        assert_eq!(lost, 0);
        let min = *d.iter().min().unwrap() as f64;
        let mut s = d.clone();
        s.sort_unstable();
        // The emulator's own median lateness, summed over the two hops.
        let own: u64 = (0..2)
            .filter_map(|li| {
                let e = e1[li].as_ref()?[0].delta(&e0[li].as_ref()?[0]);
                e.quantile_ns(0.5)
            })
            .sum();
        eprintln!(
            "lone 1518 B frame over 2 x 100 Mbit/s: one-way min {:.1} us, p50 {:.1} us (model {:.1} us); the emulator's own p50 lateness over both hops {:.1} us",
            min / 1e3,
            s[s.len() / 2] as f64 / 1e3,
            model / 1e3,
            own as f64 / 1e3
        );
        // No frame is faster than the wire; the fastest is close to it.
        assert!(min >= 0.999 * model, "{min} < {model}");
        let excess = min - 1.30 * model;
        let seen = (excess > 0.0 && own as f64 >= excess).then(|| {
            format!(
                "the emulator woke late by {:.1} us of the {:.1} us excess",
                own as f64 / 1e3,
                excess / 1e3
            )
        });
        check(min <= 1.30 * model, || format!("{min} > 1.3 x {model}")).map_err(|why| (why, seen))
    });
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// Issue 23: the emulator measures its own error per frame. Lone frames
/// over the router preset's two 100 Mbit/s hops: each hop's histogram
/// counts every frame it sent (as many as it delivered), its mean is the
/// summed lateness over them, and a lone frame, whose deadline the
/// emulator spins for, leaves within 200 µs of it at the median
/// (measured with the 15 µs spin lead: p50 0.9–20 µs, p99 18–106 µs,
/// quiet and beside 4 CPU hogs; the p99 is printed, not checked: a few
/// frames a hypervisor delayed set it, and the timing figures belong to
/// bench/link_emulator.sh).
#[test]
fn the_emulator_measures_its_own_send_error() {
    if !root("the_emulator_measures_its_own_send_error") {
        return;
    }
    let _g = heavy();
    let name = &bed("e6lone");
    let _ = remove(name);
    let o = LinkOpts {
        rate_bps: Some(100_000_000),
        ..Default::default()
    };
    let tb = Testbed::up(name, &preset("router", &o).unwrap()).unwrap();
    // The counts are exact on any host; the p99 is timing, measured once
    // more when the host was contended.
    wirebench_testkit::measure("lone frames' send error", || {
        let (w0, e0) = (tb.wire_counters(), tb.send_errors());
        // While frames flow (and within a second of their last one) the
        // emulators ask the kernel for CPUs that poll when idle
        // (docs/testbed.md). Read 300 ms into the 0.9 s of probes, not
        // after them: a test thread the host held over 0.7 s after the
        // probes' end would read it after the request rightly ended.
        let ((d, lost), latency) = std::thread::scope(|s| {
            let sampler = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                cpu_latency_us()
            });
            let probes = one_way(&tb, 1472, 300, Duration::from_millis(3));
            (probes, sampler.join().unwrap())
        });
        let (w1, e1) = (tb.wire_counters(), tb.send_errors());
        match latency {
            Some(us) => assert_eq!(us, 0, "CPU latency request while the links carry frames"),
            None => eprintln!("no /dev/cpu_dma_latency here: its request not checked"),
        }
        assert_eq!(lost, 0);
        assert_eq!(d.len(), 300);
        let mut worst = 0;
        for li in 0..2 {
            let w = w1[li].unwrap()[0].delta(&w0[li].unwrap()[0]);
            let e = e1[li].as_ref().unwrap()[0].delta(&e0[li].as_ref().unwrap()[0]);
            let (p50, p99, max) = (
                e.quantile_ns(0.5).unwrap(),
                e.quantile_ns(0.99).unwrap(),
                e.quantile_ns(1.0).unwrap(),
            );
            let mean = w.late_ns / e.count();
            eprintln!(
                "hop {li}: {} frames sent, error mean {mean} ns, p50 <= {p50} ns, p99 <= {p99} ns, max <= {max} ns",
                e.count()
            );
            // The probes and perhaps a neighbour solicitation or its answer.
            assert!((300..=306).contains(&e.count()), "{w:?} {}", e.count());
            assert_eq!(e.count(), w.delivered, "{w:?}");
            assert!(p50 <= p99 && p99 <= max);
            assert!(
                mean <= max,
                "mean {mean} above the largest bucket's edge {max}"
            );
            worst = worst.max(p50);
        }
        check(worst < 200_000, || format!("median send error {worst} ns"))
    });
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// A stall is counted: an emulator stopped (SIGSTOP, as a hypervisor
/// that does not run the guest would leave it) past the deadline of a
/// frame it holds counts the nap that ended that much late (in the
/// direction of the frame first due then: the held datagram's, or a
/// neighbour probe's if one was due sooner), and the hop times carry it.
#[test]
fn a_stall_is_counted_in_the_frames_direction() {
    if !root("a_stall_is_counted_in_the_frames_direction") {
        return;
    }
    let _g = heavy();
    let name = &bed("e7stall");
    let _ = remove(name);
    let o = LinkOpts {
        rate_bps: Some(100_000_000),
        delay_ns: Some(300_000_000),
        ..Default::default()
    };
    let tb = Testbed::up(name, &preset("direct", &o).unwrap()).unwrap();
    let (rx, tx) = udp_pair(&tb, Duration::from_secs(5));
    // Neighbour discovery first: its frames take the delay too.
    tx.send(b"warm").unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(rx.recv(&mut buf).unwrap(), 4);
    let pid = netns_pids(&testbed::link_netns(name, 0))[0];
    // The frame is held for 300 ms; the emulator naps towards that
    // deadline and is stopped across it. A host that holds this thread
    // for 250 ms between the send and the stop may let the frame leave
    // first: such a try is made again (at most 3 in all).
    let mut tries = 0;
    let (before, after) = loop {
        tries += 1;
        let before = tb.wire_counters();
        let t0 = Instant::now();
        tx.send(b"held").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: kill(2) on the emulator's pid; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let to_stop = t0.elapsed();
        std::thread::sleep(Duration::from_millis(600));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        assert_eq!(rx.recv(&mut buf).unwrap(), 4, "the held frame arrives");
        let after = tb.wire_counters();
        if to_stop < Duration::from_millis(250) {
            break (before, after);
        }
        eprintln!("try {tries}: the stop came {to_stop:?} after the send; once more");
        assert!(
            tries < 3,
            "the host held this thread past the frame's deadline 3 times"
        );
    };
    let d = after[0].unwrap()[0].delta(&before[0].unwrap()[0]);
    let back = after[0].unwrap()[1].delta(&before[0].unwrap()[1]);
    eprintln!("a→b {d:?}; b→a {back:?}");
    // The held frame left late by the stop past its deadline: about
    // 300 ms (at least 600 ms stopped, from at most 250 ms after the send,
    // against a 300 ms deadline), in the wire's own books; neighbour
    // frames held with it add theirs (0.6-1.9 s in all with 1-5 frames).
    assert!(d.delivered >= 1, "{d:?}");
    assert!(
        (100_000_000..d.delivered * 5_000_000_000).contains(&d.late_ns),
        "{d:?}"
    );
    // The nap across the stop counts once, in the direction of the frame
    // first due: the held one's, or b→a's if a neighbour frame there was
    // due sooner. Which one is not asserted: one run in about 15 counted
    // it in b→a with no b→a frame in, delivered or lost over the span
    // (an open question for the emulator's books). A neighbour frame's
    // own late nap on a busy host may add one.
    assert!(d.stalls + back.stalls >= 1, "{d:?} {back:?}");
    let late = d.stall_ns + back.stall_ns;
    assert!((100_000_000..5_000_000_000).contains(&late), "{late} ns");
    let hops = hop_times(&tb.spec().links, &before, &after);
    assert!(
        hops.iter().any(|h| h.stalls >= 1 && h.stall_s > 0.1),
        "{hops:?}"
    );
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// The CPU latency the kernel now grants every request
/// (`/dev/cpu_dma_latency`, µs); None where the kernel has no such device.
fn cpu_latency_us() -> Option<i32> {
    use std::io::Read;
    let mut f = std::fs::File::open("/dev/cpu_dma_latency").ok()?;
    let mut b = [0u8; 4];
    f.read_exact(&mut b).ok()?;
    Some(i32::from_ne_bytes(b))
}

/// Hosts a and b on one link with `link`'s settings (TOML lines).
fn pair_text(link: &str) -> String {
    format!(
        r#"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "b"
kind = "host"
[[link]]
endpoints = ["a", "b"]
{link}
"#
    )
}

/// a — r1 — b, each link's settings given as TOML lines.
fn chain3(a_r1: &str, r1_b: &str) -> TopologySpec {
    let text = format!(
        r#"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "r1"
kind = "router"
[[node]]
name = "b"
kind = "host"
[[link]]
endpoints = ["a", "r1"]
{a_r1}
[[link]]
endpoints = ["r1", "b"]
{r1_b}
"#
    );
    parse_topology(&text, Path::new("chain3.toml"), &LinkOpts::default()).unwrap()
}

fn delay_loss_spec(extra: &str) -> TopologySpec {
    chain3(
        "rate = \"100mbit\"",
        &format!("rate = \"100mbit\"\ndelay = \"20ms\"\n{extra}"),
    )
}

/// Issue 23, L3: delay and loss on a kernel without netem. 5 000 probes at
/// 1 000/s: mean one-way delay 20 ms plus two frame times, loss within its
/// binomial range (50 expected, sd 7).
///
/// The time split's propagation and serialisation, the wire's own books
/// and its loss ratio are exact on any host and fail at once. What depends
/// on the host keeping time is checked as timing: every probe reaching the
/// delayed wire in its turn, no queueing, the mean delay. A CI host once
/// held the run long enough that 840 of the 5 000 probes never reached
/// r1→b (its emulator counting 17 stalls). When the run saw the host hold
/// it (the emulators counted a stall, the probe sender fell behind) it is
/// measured once more on a fresh test-bed and the second result stands; a
/// wrong split or a wire that loses what it should not fails both.
#[test]
fn delay_and_loss_without_netem() {
    if !root("delay_and_loss_without_netem") {
        return;
    }
    let _g = heavy();
    let name = &bed("tldelay");
    measure_seeing("delay 20 ms, loss 1 %", || {
        let _ = remove(name);
        let tb = Testbed::up(name, &delay_loss_spec("loss = \"1%\"")).unwrap();
        let (before, nodes) = (tb.wire_counters(), tb.counters().unwrap());
        let p = probe(&tb, 64, 5000, Duration::from_millis(1));
        let wires = tb.wire_counters();
        let drops = tb.counters().unwrap().delta(&nodes).drop_sites();
        let hops = hop_times(&tb.spec().links, &before, &wires);
        tb.down().unwrap();
        assert_eq!(leftovers(name), Vec::<String>::new());
        // Each hop's a→b direction over the probes.
        let span = |li: usize| {
            let (Some(b), Some(a)) = (&before[li], &wires[li]) else {
                panic!("link {li} has no emulator: {wires:?}")
            };
            a[0].delta(&b[0])
        };
        let (w1, w) = (span(0), span(1));
        eprintln!("wire a→r1: {w1:?}\nwire r1→b: {w:?}");
        let stalls: u64 = hops.iter().map(|h| h.stalls).sum();
        let stall_s: f64 = hops.iter().map(|h| h.stall_s).sum();
        let seen = evidence([
            stalls_seen(stalls, stall_s * 1e9),
            p.behind.seen("the probe sender"),
        ]);
        // Where the time went on r1→b: 20 ms of propagation and each 106 B
        // frame's 130 B of wire time, 10.4 µs, of serialisation.
        let h = hops
            .iter()
            .find(|h| h.from == "r1" && h.to == "b")
            .unwrap_or_else(|| panic!("{hops:?}"));
        eprintln!("hop r1→b: {h:?}");
        assert!((h.propagation_s - 0.020).abs() < 1e-4, "{h:?}");
        assert!((h.serialisation_s - 10.4e-6).abs() < 0.5e-6, "{h:?}");
        // a→r1 has no delay: serialisation only.
        let h1 = hops
            .iter()
            .find(|h| h.from == "a" && h.to == "r1")
            .unwrap_or_else(|| panic!("{hops:?}"));
        assert!(h1.propagation_s < 1e-6, "{h1:?}");
        // The wire's books: every frame in was delivered or lost, but for
        // a frame or two in the 20 ms delay line at either snapshot (a
        // neighbour solicitation from `up` still held at the first: a
        // fresh-clone CI run read 5 002 in against 5 003 delivered or
        // lost); and the loss model drew its 1 % (3 sd either side) of
        // what came in.
        let out = w.delivered + w.lost + w.queue_drops + w.buffer_drops;
        assert!(w.frames_in.abs_diff(out) <= 2, "{w:?}");
        assert!(w.frames_in >= 1000, "{w:?}");
        let wire_loss = w.lost as f64 / w.frames_in as f64 * 100.0;
        assert!(
            (0.55..=1.45).contains(&wire_loss),
            "wire loss {wire_loss:.2} %: {w:?}"
        );
        let d = &p.delays;
        let mean = d.iter().sum::<u64>() as f64 / d.len() as f64 / 1e6;
        let loss = p.lost as f64 / 5000.0 * 100.0;
        let mut s = d.clone();
        s.sort_unstable();
        let q = |f: f64| s[((s.len() - 1) as f64 * f) as usize] as f64 / 1e6;
        eprintln!(
            "delay 20 ms, loss 1 %: mean one-way {mean:.3} ms (min {:.3}, p50 {:.3}, p99 {:.3}, max {:.3}), loss {loss:.2} %; \
             probes sent {}, send errors {}",
            q(0.0),
            q(0.5),
            q(0.99),
            q(1.0),
            p.behind,
            p.send_errors
        );
        // Nothing arrives before the delay and the two frame times.
        assert!(*d.iter().min().unwrap() >= 20_000_000);
        // Timing: every probe (and now and then a neighbour solicitation or
        // its answer) reached r1→b, which alone lost any; at 1 000/s nothing
        // waits for the wire; the mean is the delay and two frame times.
        check(
            p.send_errors == 0
                && drops.is_empty()
                && w1.lost + w1.queue_drops + w1.buffer_drops == 0,
            || {
                format!(
                    "probes dropped before r1→b: send errors {}, drop sites {drops:?}, a→r1 {w1:?}",
                    p.send_errors
                )
            },
        )
        .and_then(|()| {
            check(
                w.frames_in >= 5000 && w.queue_drops + w.buffer_drops == 0,
                || {
                    format!(
                        "r1→b saw {} frames in (goal >= 5000, none dropped for room): {w:?}",
                        w.frames_in
                    )
                },
            )
        })
        .and_then(|()| {
            check(w.lost.abs_diff(p.lost as u64) <= 3, || {
                format!("r1→b lost {} frames, the probes {}: {w:?}", w.lost, p.lost)
            })
        })
        .and_then(|()| {
            check((0.55..=1.45).contains(&loss), || {
                format!("probe loss {loss:.2} % (goal 0.55-1.45)")
            })
        })
        .and_then(|()| {
            check(h.queueing_s < 5e-6, || {
                format!(
                    "mean queueing on r1→b {:.1} µs (goal < 5 µs): {h:?}",
                    h.queueing_s * 1e6
                )
            })
        })
        .and_then(|()| {
            check((20.0..=20.4).contains(&mean), || {
                format!("mean one-way delay {mean:.3} ms (goal 20-20.4)")
            })
        })
        .map_err(|why| (why, seen))
    });
}

/// The emulator is a process in the link's namespace: `down` ends it, and
/// so does the loss of its interfaces (their namespaces deleted by hand).
#[test]
fn emulators_end_with_their_testbed_and_their_interfaces() {
    if !root("emulators_end_with_their_testbed_and_their_interfaces") {
        return;
    }
    let _g = heavy();
    let name = "tlgone";
    let _ = remove(name);
    let tb = Testbed::up(name, &delay_loss_spec("")).unwrap();
    let pids: Vec<i32> = (0..2)
        .flat_map(|li| netns_pids(&testbed::link_netns(name, li)))
        .collect();
    assert_eq!(pids.len(), 2, "one emulator per link: {pids:?}");
    tb.down().unwrap();
    assert!(all_end(&pids), "{pids:?} outlived down");
    assert_eq!(leftovers(name), Vec::<String>::new());
    // Interfaces gone under a running emulator: it notices and exits.
    let tb = Testbed::up(name, &delay_loss_spec("")).unwrap();
    let pids = netns_pids(&testbed::link_netns(name, 1));
    assert_eq!(pids.len(), 1);
    for n in ["r1", "b"] {
        let ns = tb.netns(n).unwrap();
        assert!(Command::new("ip")
            .args(["netns", "del", &ns])
            .status()
            .unwrap()
            .success());
    }
    let end = Instant::now() + Duration::from_secs(5);
    while alive(pids[0]) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone = !alive(pids[0]);
    remove(name).unwrap();
    assert!(
        gone,
        "emulator {} kept running without its interfaces",
        pids[0]
    );
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// A controller SIGKILLed after `up` leaves its test-bed (and the
/// emulators, which are the test-bed's wires) running, as `testbed up`
/// does on purpose; the next `down` of that name ends every one of them.
#[test]
fn emulators_of_a_killed_controller_go_with_the_next_down() {
    if !root("emulators_of_a_killed_controller_go_with_the_next_down") {
        return;
    }
    let _g = heavy();
    let name = "tlkill";
    let _ = remove(name);
    let mut child = spawn_child(name, false);
    let end = Instant::now() + Duration::from_secs(60);
    while read_complete(name) != Some(true) {
        assert!(Instant::now() < end, "the child never completed up");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let links = chain_spec(12).links.len();
    let pids: Vec<i32> = (0..links)
        .flat_map(|li| netns_pids(&testbed::link_netns(name, li)))
        .collect();
    assert_eq!(pids.len(), links, "one emulator per link: {pids:?}");
    assert!(pids.iter().all(|&p| alive(p)));
    assert!(remove(name).unwrap());
    assert!(all_end(&pids), "{pids:?} outlived down");
    assert_eq!(leftovers(name), Vec::<String>::new());
}

/// a —(unshaped)— r1 —(20 Mbit/s, `extra`)— b.
fn bottleneck_spec(extra: &str) -> TopologySpec {
    chain3("", &format!("rate = \"20mbit\"\n{extra}"))
}

/// One CUBIC TCP bulk flow from a to b for `secs` (bounded in time), started
/// before the call returns; the join handle gives the bytes received.
fn tcp_bulk(tb: &Testbed, secs: f64) -> std::thread::JoinHandle<u64> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let dst = tb.addr("b", false).unwrap();
    let l: TcpListener = tb
        .in_node("b", move || {
            TcpListener::bind(SocketAddr::new(dst, 0))
                .map_err(|e| TestbedError::Probe(e.to_string()))
        })
        .unwrap();
    let to = l.local_addr().unwrap();
    let mut tx: TcpStream = tb
        .in_node("a", move || {
            TcpStream::connect_timeout(&to, Duration::from_secs(5))
                .map_err(|e| TestbedError::Probe(e.to_string()))
        })
        .unwrap();
    let (mut rx, _) = l.accept().unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // A loss-based sender, the one that fills a drop-tail queue (the
    // host's default here is BBR, which keeps its own queue short).
    {
        use std::os::fd::AsRawFd;
        let cc = b"cubic";
        // SAFETY: a valid socket and a buffer of the stated length.
        let rc = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                cc.as_ptr() as *const libc::c_void,
                cc.len() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }
    // Both ends at real-time priority: an end waiting for a CPU would
    // leave the bottleneck's queue to drain, not the AQM.
    let reader = std::thread::spawn(move || {
        wirebench_testkit::realtime_thread();
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0u64;
        while let Ok(n) = rx.read(&mut buf) {
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        got
    });
    std::thread::spawn(move || {
        wirebench_testkit::realtime_thread();
        let buf = vec![0x5au8; 1 << 16];
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            if tx.write_all(&buf).is_err() {
                break;
            }
        }
        drop(tx);
        reader.join().unwrap_or(0)
    })
}

/// What one bottleneck run under TCP bulk load showed.
#[derive(Debug)]
struct BulkRun {
    /// Median one-way delay of the probes (a sparse flow), ms.
    probe_p50_ms: f64,
    /// Mean wait for the wire at r1→b over every frame, ms.
    wire_queue_ms: f64,
    /// Frames CoDel dropped at r1→b.
    aqm_drops: u64,
}

/// One CUBIC bulk flow through the 20 Mbit/s bottleneck with `extra` on
/// it for 5 s; after 1.5 s (the queue built), 250 probes of 64 B at
/// 100/s, each its own UDP flow beside the bulk one. The queue the flow
/// builds and the probes' delays are the host's timing as much as the
/// AQM's (an end or the emulator held lets the queue drain, or TCP back
/// off): `timing` checks them, and a run that fails them while the
/// emulators counted a stall or the probe sender fell behind is measured
/// once more on a fresh test-bed.
fn bulk_with_probes(
    name: &str,
    extra: &str,
    timing: impl Fn(&BulkRun) -> Result<(), String>,
) -> BulkRun {
    measure_seeing(&format!("bulk TCP and probes over {extra:?}"), || {
        let _ = remove(name);
        let tb = Testbed::up(name, &bottleneck_spec(extra)).unwrap();
        let start = tb.wire_counters();
        let bulk = tcp_bulk(&tb, 5.0);
        std::thread::sleep(Duration::from_millis(1500));
        let before = tb.wire_counters();
        let p = probe(&tb, 64, 250, Duration::from_millis(10));
        let after = tb.wire_counters();
        let got = bulk.join().unwrap();
        let end = tb.wire_counters();
        let hops = hop_times(&tb.spec().links, &before, &after);
        // Stalls over the whole run, the bulk flow's start included.
        let (stalls, stall_ns) = hop_times(&tb.spec().links, &start, &end)
            .iter()
            .fold((0, 0.0), |(n, s), h| (n + h.stalls, s + h.stall_s * 1e9));
        tb.down().unwrap();
        assert_eq!(leftovers(name), Vec::<String>::new());
        let mut d = p.delays;
        assert!(!d.is_empty(), "{extra:?}: no probe arrived");
        d.sort_unstable();
        let med = d[d.len() / 2] as f64 / 1e6;
        let h = hops
            .iter()
            .find(|h| h.from == "r1" && h.to == "b")
            .unwrap_or_else(|| panic!("{hops:?}"));
        let w = after[1].unwrap()[0].delta(&before[1].unwrap()[0]);
        eprintln!(
            "{extra:?}: TCP {:.2} Mbit/s, probe one-way p50 {med:.2} ms, wire queueing mean {:.2} ms, CoDel drops {}; \
             emulator stalls {stalls} ({:.1} ms in all), probes sent {}",
            got as f64 * 8.0 / 5.0 / 1e6,
            h.queueing_s * 1e3,
            w.aqm_drops,
            stall_ns / 1e6,
            p.behind
        );
        let run = BulkRun {
            probe_p50_ms: med,
            wire_queue_ms: h.queueing_s * 1e3,
            aqm_drops: w.aqm_drops,
        };
        let seen = evidence([
            stalls_seen(stalls, stall_ns),
            p.behind.seen("the probe sender"),
        ]);
        check(got > 5_000_000, || {
            format!("{extra:?}: the bulk flow moved {got} B")
        })
        .and_then(|()| timing(&run))
        .map(|()| run)
        .map_err(|why| (why, seen))
    })
}

/// The baseline of the AQM tests: with a 200-frame drop-tail queue the
/// bulk flow fills the router's queue (123 ms) and probes wait behind it.
fn drop_tail_queue_stands(name: &str) {
    let tail = bulk_with_probes(name, "queue = \"200p\"", |r| {
        check(r.probe_p50_ms > 80.0, || {
            format!("drop-tail probes read {} ms", r.probe_p50_ms)
        })
    });
    // Exact: a drop-tail queue has no AQM to drop.
    assert_eq!(tail.aqm_drops, 0);
}

/// Issue 23: CoDel in the emulator holds the bottleneck's standing queue
/// near its 5 ms target under a TCP bulk flow, where the same link with a
/// 200-frame drop-tail queue lets TCP fill it (200 × 616 µs = 123 ms at
/// 20 Mbit/s). Probes sharing the queue read the queue's delay.
#[test]
fn codel_holds_the_standing_queue_near_target() {
    if !root("codel_holds_the_standing_queue_near_target") {
        return;
    }
    let _g = heavy();
    let name = &bed("tlaqm");
    drop_tail_queue_stands(name);
    // CoDel: the queue is the emulator's, near 5 ms.
    bulk_with_probes(name, "queue = \"200p\"\naqm = \"codel\"", |codel| {
        check(codel.probe_p50_ms < 25.0, || {
            format!("codel probes read {} ms", codel.probe_p50_ms)
        })
        .and_then(|()| {
            check((1.0..20.0).contains(&codel.wire_queue_ms), || {
                format!("codel sojourn {} ms", codel.wire_queue_ms)
            })
        })
        // Only a standing queue, which a held host may not let build,
        // makes CoDel drop.
        .and_then(|()| check(codel.aqm_drops > 0, || "CoDel never dropped".to_string()))
    });
}

/// Issue 23: FQ-CoDel keeps a sparse flow's delay low beside a TCP bulk
/// flow (RFC 8290: the probes' flow queue is new each time, served before
/// the bulk queue, so a probe waits at most for the bulk frame on the
/// wire, 616 µs at 20 Mbit/s), while CoDel holds the bulk flow's own queue
/// near target; on the same link with a drop-tail queue the probes wait
/// behind the whole standing queue.
#[test]
fn fq_codel_keeps_a_sparse_flow_fast_beside_bulk_tcp() {
    if !root("fq_codel_keeps_a_sparse_flow_fast_beside_bulk_tcp") {
        return;
    }
    let _g = heavy();
    let name = &bed("tlfqc");
    drop_tail_queue_stands(name);
    // Under CoDel alone the probes share the bulk queue (8 ms at the
    // median here); flow isolation puts them below its 5 ms target.
    bulk_with_probes(name, "queue = \"200p\"\naqm = \"fq_codel\"", |fq| {
        check(fq.probe_p50_ms < 3.0, || {
            format!("fq_codel probes read {} ms", fq.probe_p50_ms)
        })
        .and_then(|()| {
            check((0.5..20.0).contains(&fq.wire_queue_ms), || {
                format!("fq_codel mean sojourn {} ms", fq.wire_queue_ms)
            })
        })
        .and_then(|()| {
            check(fq.aqm_drops > 0, || {
                "CoDel never dropped the bulk flow".to_string()
            })
        })
    });
}

/// Issue 23: a trace-driven link (Mahimahi's format) carries what its
/// trace offers. The trace repeats every 100 ms with 1, 2 or 3
/// opportunities per ms (200 in all: 2 000/s, 24 Mbit/s of IP packets);
/// a saturating sender of 1472 B datagrams (1500 B IP, one opportunity
/// each) gets 2 000 × 1472 × 8 = 23.552 Mbit/s of payload.
#[test]
fn a_trace_link_carries_the_traces_mean_rate() {
    if !root("a_trace_link_carries_the_traces_mean_rate") {
        return;
    }
    let _g = heavy();
    let name = &bed("tltrace");
    let _ = remove(name);
    let dir = tempfile::tempdir().unwrap();
    let mut trace = String::new();
    for ms in 1..=100 {
        for _ in 0..(ms % 3) + 1 {
            trace.push_str(&format!("{ms}\n"));
        }
    }
    std::fs::write(dir.path().join("cell.trace"), trace).unwrap();
    let text = pair_text("trace = \"cell.trace\"");
    let spec = parse_topology(&text, &dir.path().join("t.toml"), &LinkOpts::default()).unwrap();
    let mean = spec.links[0].trace.as_ref().unwrap()[0].mean_bps();
    assert_eq!(mean, 24e6);
    let tb = Testbed::up(name, &spec).unwrap();
    assert_eq!(tb.backends(), [testbed::LinkBackend::TbfEmulator]);
    let model = 2000.0 * 1472.0 * 8.0;
    // The rate is the emulator's keeping time: an opportunity it passes
    // while the host holds it, or one the held sender leaves without a
    // frame, is lost for good. A run that misses the bound while the
    // emulator counted a stall or its wire stood idle is measured once
    // more; a link that carries the wrong rate fails both.
    measure_seeing("the trace link's rate", || {
        let r = saturate(&tb, 1472, 1, 3.0, 4 << 20);
        let ratio = r.bps / model;
        let idle_ms = r.wire_idle_ns.unwrap_or(0) as f64 / 1e6;
        eprintln!(
            "trace link: {:.4} Mbit/s of payload over {:.2} s (model {:.4}), ratio {ratio:.5}; \
             wire idle {idle_ms:.1} ms, emulator stalls {} ({:.1} ms in all), {} arrival gaps > 1 ms (longest {} us)",
            r.bps / 1e6,
            r.span,
            model / 1e6,
            r.wire_stalls,
            r.wire_stall_ns as f64 / 1e6,
            r.stalls,
            r.longest_ns / 1000
        );
        let seen = evidence([
            stalls_seen(r.wire_stalls, r.wire_stall_ns as f64),
            (idle_ms > 0.0).then(|| format!("the wire stood idle {idle_ms:.1} ms")),
        ]);
        check((ratio - 1.0).abs() < 0.005, || {
            format!("{} vs {model}", r.bps)
        })
        .map_err(|why| (why, seen))
    });
    tb.down().unwrap();
    assert_eq!(leftovers(name), Vec::<String>::new());
}
