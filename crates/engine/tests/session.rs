//! In-process sessions over loopback: the library API the campaign layer
//! uses (`Daemon::bind`/`serve_until`, `send::run`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use wirebench_engine::plan::{Family, FlowPlan, Pacing, SessionPlan, Stop};
use wirebench_engine::{Daemon, DaemonConfig};
use wirebench_model::FlowSpec;
use wirebench_wire::{MeterMode, Transport};

mod common;
use common::daemon;
use wirebench_testkit::{check, measure};

fn plan(dest: &str, port: u16, flows: Vec<FlowPlan>) -> SessionPlan {
    let mut p = SessionPlan::new(dest, flows);
    p.port = port;
    p.linger_ms = 300;
    p
}

/// A TCP flow: paced at `pps` records of `size` bytes, or `--max` when
/// `pps` is None.
fn tcp(pps: Option<f64>, size: u32, stop: Stop, seed: u64) -> FlowPlan {
    let mut f = udp(pps.unwrap_or(1.0), size, stop, seed);
    if pps.is_none() {
        f.spec = FlowSpec::max_rate(size).unwrap();
    }
    f.transport = Transport::Tcp;
    f
}

fn udp(pps: f64, size: u32, stop: Stop, seed: u64) -> FlowPlan {
    FlowPlan {
        spec: FlowSpec::constant(pps, size).unwrap(),
        transport: Transport::Udp,
        stop,
        seed,
        opts: Default::default(),
        direction: Default::default(),
        meter: None,
    }
}

/// The timing checks of [`two_udp_flows_v4_and_a_v6_session_after`] run
/// alone: beside the thousand-flow session (the default two test threads
/// on a 2-core machine) its delays and spans measure that session's CPU
/// use, not this one's. The other tests run side by side.
static CPU: RwLock<()> = RwLock::new(());

fn alone() -> RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|e| e.into_inner())
}

fn beside_others() -> RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|e| e.into_inner())
}

/// Counts are asserted outright; what depends on the host lending the
/// pacer and the receiver a CPU on time (a timed flow's last packets, the
/// largest delay, spans and round trips) is a `check`, measured once more
/// when the host was busy during a failed session (wirebench_testkit).
#[test]
fn two_udp_flows_v4_and_a_v6_session_after() {
    let _cpu = alone();
    let port = 15411;
    let (stop, h) = daemon(port);
    measure("two UDP flows over 127.0.0.1", || {
        let doc = wirebench_engine::run(plan(
            "127.0.0.1",
            port,
            vec![
                udp(2000.0, 200, Stop::DurationMs(500), 1),
                udp(500.0, 1000, Stop::Packets(123), 2),
            ],
        ))
        .unwrap();
        assert!(!doc.partial);
        assert_eq!(doc.flows.len(), 2);
        let f = &doc.flows[0];
        assert_eq!(f.sent.packets + f.sent.not_sent, 1000);
        let c = &f.received.counts;
        check(
            f.sent.packets == 1000 && c.unique == 1000 && c.lost == Some(0),
            || format!("sent {:?}, received {c:?}", f.sent),
        )?;
        check(f.delay_s.min >= 0.0 && f.delay_s.max < 0.05, || {
            format!("{:?}", f.delay_s)
        })?;
        let g = &doc.flows[1];
        check(
            g.sent.packets == 123 && g.received.counts.unique == 123,
            || format!("sent {:?}, received {:?}", g.sent, g.received.counts),
        )?;
        // A timed flow has no completion time; a -z flow has one: its 123
        // packets at 500/s span about 122 intervals of 2 ms (less when the
        // first packet left late: the schedule does not move), and
        // completion is the sender's first-to-last span plus the last
        // packet's delay.
        assert_eq!(f.completion_s, None);
        let c = g.completion_s.expect("completion_s of a -z flow");
        let first_to_last = g.sent.duration_s * 122.0 / 123.0;
        check(
            (0.2..0.3).contains(&c)
                && c >= first_to_last - 1e-4
                && c <= first_to_last + g.delay_s.max + 2e-3,
            || {
                format!(
                    "completion {c}, sender span {first_to_last}, {:?}",
                    g.delay_s
                )
            },
        )?;
        // The total is both flows' bytes over the 0.5 s they span together
        // (200 000 + 123 000 B: 5.17 Mbit/s), not the sum of the flows'
        // rates (3.2 + 4.0 Mbit/s, the second over its own 0.244 s).
        let sum: f64 = doc.flows.iter().map(|f| f.throughput_bps.payload).sum();
        let t = doc.total.throughput_bps.payload;
        check((t / 5.168e6 - 1.0).abs() < 0.03, || {
            format!("total {t}, flows sum {sum}")
        })?;
        check(doc.total.sender_host_drops == 0, || {
            format!("{} sender host drops", doc.total.sender_host_drops)
        })
    });

    measure("an IPv6 round-trip session after", || {
        let mut p = plan("::1", port, vec![udp(1000.0, 64, Stop::KBytes(10), 3)]);
        p.family = Family::V6;
        p.meter = MeterMode::Rtt;
        let doc = wirebench_engine::run(p).unwrap();
        let f = &doc.flows[0];
        assert_eq!(f.ip_version, wirebench_stats::IpVersion::V6);
        assert_eq!(f.sent.bytes, 10 * 1024);
        assert_eq!(f.received.counts.bytes, 10 * 1024);
        assert_eq!(f.rtt_received, Some(f.sent.packets));
        // 160 packets of 64 B at 1000/s: about 159 ms from first to last.
        let c = f.completion_s.expect("completion_s of a -k flow");
        check((0.12..0.25).contains(&c), || format!("completion {c}"))?;
        let rtt = f.rtt_s.unwrap();
        assert!(rtt.min > 0.0, "{rtt:?}");
        check(rtt.max < 0.01, || format!("{rtt:?}"))
    });
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn silent_sender_is_abandoned_and_junk_is_foreign() {
    let _cpu = beside_others();
    use std::io::{BufRead, BufReader, Write};
    let port = 15412;
    let d = Daemon::bind(DaemonConfig {
        bind: Some("127.0.0.1".parse().unwrap()),
        port,
        verbose: false,
        idle_timeout: std::time::Duration::from_millis(500),
        ..DaemonConfig::default()
    })
    .unwrap();
    let stats = d.stats();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || d.serve_until(&s).unwrap());

    // Junk on the control port.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    // A session that says Hello and then vanishes without closing.
    let mut c2 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let hello = wirebench_wire::ControlMsg::Hello {
        version: wirebench_wire::CONTROL_VERSION,
        session: 42,
        meter: MeterMode::Owd,
        flows: vec![wirebench_wire::FlowSetup {
            flow_id: 1,
            transport: Transport::Udp,
            max_len: 100,
            mtu: 1500,
            ..Default::default()
        }],
        auth: None,
        live: false,
        auth_probes: false,
        log_name: None,
        xdp: false,
    };
    c2.write_all(hello.to_line().as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(c2.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("ready"), "{line}");
    // A sender of another protocol version is told why it is refused.
    let mut c3 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let hello99 = wirebench_wire::ControlMsg::Hello {
        version: 99,
        session: 7,
        meter: MeterMode::Owd,
        flows: vec![],
        auth: None,
        live: false,
        auth_probes: false,
        log_name: None,
        xdp: false,
    };
    c3.write_all(hello99.to_line().as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(c3).read_line(&mut line).unwrap();
    assert!(
        line.contains("error") && line.contains("version 99"),
        "{line}"
    );

    // The daemon gives up on the silent session after its 500 ms idle
    // timeout; a held host may take longer to get there, so the counters
    // are awaited (10 s at most) and then asserted exactly.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until
        && (stats.foreign_control.load(Ordering::Relaxed) < 1
            || stats.sessions_failed.load(Ordering::Relaxed) < 1
            || stats.active.load(Ordering::Relaxed) != 0)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Nothing more may follow: a second count would show in this time.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(stats.foreign_control.load(Ordering::Relaxed), 1);
    assert_eq!(stats.sessions_failed.load(Ordering::Relaxed), 1);
    assert_eq!(stats.active.load(Ordering::Relaxed), 0);

    // And the daemon serves the next one.
    let doc = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![udp(1000.0, 100, Stop::Packets(50), 9)],
    ))
    .unwrap();
    assert_eq!(doc.flows[0].received.counts.unique, 50);
    assert_eq!(stats.sessions_completed.load(Ordering::Relaxed), 1);
    drop((c, c2));
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn concurrent_sessions_on_one_daemon() {
    let _cpu = beside_others();
    let port = 15413;
    let (stop, h) = daemon(port);
    let runs: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                wirebench_engine::run(plan(
                    "127.0.0.1",
                    port,
                    vec![udp(1000.0, 200, Stop::Packets(300), i)],
                ))
                .unwrap()
            })
        })
        .collect();
    for r in runs {
        let doc = r.join().unwrap();
        assert_eq!(doc.flows[0].received.counts.unique, 300);
        assert_eq!(doc.flows[0].received.foreign, 0);
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

/// Key paths of a JSON value with array positions collapsed to `[]`.
fn key_paths(v: &serde_json::Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{k}");
                out.insert(p.clone());
                key_paths(x, &p, out);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                key_paths(x, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// The document a live session writes has every key of a stored
/// `wirebench.result/1` document of the same shape (one UDP flow with an
/// interval series): nothing renamed or dropped; keys added since are
/// listed in crates/schema/tests/result_doc.rs. It reads back into the same
/// value.
#[test]
fn live_document_has_the_stored_documents_keys() {
    let _cpu = beside_others();
    let port = 15414;
    let (stop, h) = daemon(port);
    let mut p = plan(
        "127.0.0.1",
        port,
        vec![udp(200.0, 256, Stop::DurationMs(400), 1)],
    );
    p.interval_ms = Some(200);
    p.command = Some("test".into());
    let doc = wirebench_engine::run(p).unwrap();
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();

    let live = serde_json::to_value(&doc).unwrap();
    let back: wirebench_engine::ResultDoc = serde_json::from_value(live.clone()).unwrap();
    assert_eq!(back, doc);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../schema/tests/data/result-v1-owd.json"
    );
    let mut stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // The stored run's first flow has this shape; its others are VoIP and TCP.
    let first = stored["flows"][0].clone();
    stored["flows"] = serde_json::Value::Array(vec![first]);
    let (mut want, mut got) = (Default::default(), Default::default());
    key_paths(&stored, "", &mut want);
    key_paths(&live, "", &mut got);
    let missing: Vec<_> = want.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "keys the stored document has: {missing:?}"
    );
}

/// A hundred flows in one session: every flow keeps its own schedule,
/// sequence numbers, sizes and stop condition, and is received exactly,
/// whether the UDP flows share pacer threads (a TCP flow among them keeps
/// its own thread and its place in the results) or have one each. A flow
/// stopped by its 400 ms sends its 20 packets only when the host lets
/// the pacer keep to the schedule (a pacer held past the end turns the
/// last ones into `not_sent`): that, and the session's time, are checks,
/// measured once more when the host was seen busy; the books are exact.
#[test]
fn many_flows_are_received_exactly() {
    let _cpu = beside_others();
    let port = 15415;
    let (stop, h) = daemon(port);
    for pacing in [Pacing::Auto, Pacing::Shared(3), Pacing::PerFlow] {
        measure(&format!("100 flows, pacing {pacing:?}"), || {
            let flows: Vec<FlowPlan> = (0..100)
                .map(|i| {
                    let mut f = udp(50.0, 64 + i, Stop::DurationMs(400), i as u64);
                    if i == 50 {
                        f.transport = Transport::Tcp;
                    }
                    f
                })
                .collect();
            let mut p = plan("127.0.0.1", port, flows);
            p.pacing = pacing;
            let t = std::time::Instant::now();
            let doc = wirebench_engine::run(p).unwrap();
            assert!(!doc.partial, "{pacing:?}");
            assert_eq!(doc.flows.len(), 100);
            for (i, f) in doc.flows.iter().enumerate() {
                let at = || format!("{pacing:?} flow {}", f.id);
                assert_eq!(f.id as usize, i + 1);
                assert_eq!(f.requested.payload_bytes, 64.0 + i as f64);
                assert_eq!(f.sent.packets + f.sent.not_sent, 20, "{}", at());
                let c = &f.received.counts;
                assert_eq!(c.unique, f.sent.packets, "{}", at());
                assert_eq!(c.lost, Some(0), "{}", at());
                assert_eq!(c.bytes, f.sent.packets * (64 + i as u64), "{}", at());
            }
            assert_eq!(doc.flows[50].transport, Transport::Tcp);
            for f in &doc.flows {
                check(f.sent.packets == 20, || {
                    format!("{pacing:?} flow {}: sent {:?}", f.id, f.sent)
                })?;
            }
            check(t.elapsed().as_secs() < 20, || {
                format!("took {:?}", t.elapsed())
            })
        });
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

/// One-way TCP flows with a receive thread each (more than the CPUs),
/// and more than `TCP_OWN_THREADS` of them, some of which share a
/// receive worker (epoll); the RTT-meter one keeps a thread of its own and
/// its reflections. Paced flows are received record for record, each in
/// its own flow, whether they share the sender's paced writer (the
/// default) or have a thread each (`--pacers flow`); bulk flows on the
/// sender's shared writer are received exactly as far as they were sent,
/// and every flow lasts its 400 ms.
#[test]
fn tcp_flows_on_own_and_shared_receive_workers_are_received_exactly() {
    let _cpu = beside_others();
    let port = 15419;
    let (stop, h) = daemon(port);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (paced, pacing) in [
        (2 * cores + 1, Pacing::Auto),
        (2 * cores + 1, Pacing::PerFlow),
        (wirebench_engine::budget::TCP_OWN_THREADS, Pacing::Auto),
    ] {
        measure(&format!("{paced} paced TCP flows, {pacing:?}"), || {
            tcp_session(port, paced, pacing)
        });
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

/// One session of `paced` paced one-way TCP flows, 3 bulk ones and an
/// RTT-meter one, checked as [`tcp_flows_on_own_and_shared_receive_workers_are_received_exactly`] says:
/// the books are asserted; what the host's timing decides (a timed flow's
/// last records sent, every reflection back before the end, a bulk
/// flow's span) is returned as a failed check, for `measure`.
fn tcp_session(port: u16, paced: usize, pacing: Pacing) -> Result<(), String> {
    let mut flows: Vec<FlowPlan> = (0..paced)
        .map(|i| tcp(Some(50.0), 100 + i as u32, Stop::DurationMs(400), i as u64))
        .collect();
    for i in 0..3 {
        flows.push(tcp(None, 8000, Stop::DurationMs(400), 100 + i));
    }
    let mut rtt = tcp(Some(50.0), 200, Stop::DurationMs(400), 99);
    rtt.meter = Some(MeterMode::Rtt);
    flows.push(rtt);
    let n = flows.len();
    let mut p = plan("127.0.0.1", port, flows);
    p.pacing = pacing;
    let doc = wirebench_engine::run(p).unwrap();
    assert!(!doc.partial, "{:?}", doc.partial_reason);
    assert_eq!(doc.flows.len(), n);
    let mut timing = Vec::new();
    for (i, f) in doc.flows.iter().enumerate() {
        assert_eq!(f.id as usize, i + 1);
        assert_eq!(f.transport, Transport::Tcp);
        assert_eq!(f.received.foreign, 0, "flow {}", f.id);
        assert!(f.sent.packets > 0, "flow {}", f.id);
        assert_eq!(f.received.counts.unique, f.sent.packets, "flow {}", f.id);
        assert_eq!(f.received.counts.lost, Some(0), "flow {}", f.id);
        assert_eq!(f.received.counts.duplicates, 0, "flow {}", f.id);
        if i < paced || i == n - 1 {
            assert_eq!(f.sent.packets + f.sent.not_sent, 20, "flow {}", f.id);
            if f.sent.packets != 20 {
                timing.push(format!("flow {}: sent {:?}", f.id, f.sent));
            }
        }
        if i < paced {
            assert_eq!(
                f.received.counts.bytes,
                f.sent.packets * (100 + i as u64),
                "flow {}",
                f.id
            );
        } else if i < paced + 3 {
            assert_eq!(
                f.received.counts.bytes,
                f.sent.packets * 8000,
                "flow {}",
                f.id
            );
            if (f.sent.duration_s - 0.4).abs() >= 0.01 {
                timing.push(format!("flow {}: {:?}", f.id, f.sent));
            }
        }
    }
    let r = &doc.flows[n - 1];
    assert!(r.rtt_received.is_some_and(|k| k <= r.sent.packets), "{r:?}");
    assert!(r.rtt_s.is_some_and(|d| d.min > 0.0), "{:?}", r.rtt_s);
    check(timing.is_empty(), || timing.join("; "))?;
    check(r.rtt_received == Some(20), || {
        format!("rtt_received {:?} of 20", r.rtt_received)
    })
}

/// A thousand UDP flows in one session (shared pacers on the sender,
/// shared receive workers on the receiver once the flows outnumber the
/// CPUs): every flow's every packet is received, counted to its own flow.
#[test]
fn thousand_flows_in_one_session_are_received_exactly() {
    let _cpu = beside_others();
    let port = 15416;
    let (stop, h) = daemon(port);
    let flows: Vec<FlowPlan> = (0..1000)
        .map(|i| udp(20.0, 64 + (i % 100), Stop::Packets(10), i as u64))
        .collect();
    let mut p = plan("127.0.0.1", port, flows);
    // The receive workers share the CPUs with the other tests: give them
    // the default linger to catch up (arrival times are the kernel's).
    p.linger_ms = 2000;
    let doc = wirebench_engine::run(p).unwrap();
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    assert!(!doc.partial);
    assert_eq!(doc.flows.len(), 1000);
    for (i, f) in doc.flows.iter().enumerate() {
        assert_eq!(f.id as usize, i + 1);
        assert_eq!(f.sent.packets, 10, "flow {}", f.id);
        assert_eq!(f.received.counts.unique, 10, "flow {}", f.id);
        assert_eq!(f.received.counts.lost, Some(0), "flow {}", f.id);
        assert_eq!(f.received.counts.duplicates, 0, "flow {}", f.id);
        assert_eq!(
            f.received.counts.bytes,
            10 * (64 + (i as u64 % 100)),
            "flow {}",
            f.id
        );
        assert_eq!(f.received.foreign, 0, "flow {}", f.id);
    }
}

/// Issue #11 item 2: marking is set per flow and checked where the kernel
/// shows it — the receiver reads each datagram's TOS / traffic class, TTL
/// / hop limit and flow label (IP_RECVTOS, IPV6_RECVTCLASS, ...).
#[test]
fn marking_is_set_per_flow_and_seen_by_the_receiver() {
    let _cpu = beside_others();
    use wirebench_stats::result::{DscpCount, MarksSeen};
    use wirebench_stats::SockOpts;
    let port = 15418;
    let (stop, h) = daemon(port);
    let marked = |opts: SockOpts| FlowPlan {
        opts,
        ..udp(500.0, 200, Stop::Packets(50), 1)
    };
    let ef = SockOpts {
        tos: Some(46 << 2),
        ttl: Some(7),
        flow_label: None,
        ..Default::default()
    };
    // Two flows in one session: the marked one and one left alone.
    let doc = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![marked(ef.clone()), marked(SockOpts::default())],
    ))
    .unwrap();
    let seen = |i: usize| doc.flows[i].received.marks.clone().unwrap();
    assert_eq!(doc.flows[0].received.counts.unique, 50);
    assert_eq!(
        seen(0),
        MarksSeen {
            dscp: vec![DscpCount {
                dscp: 46,
                packets: 50
            }],
            ecn_marked: 0,
            ttl_min: Some(7),
            ttl_max: Some(7),
            flow_label: None,
            flow_label_other: 0,
        }
    );
    assert_eq!(doc.flows[0].socket.as_ref(), Some(&ef));
    // The unmarked flow: best effort and the system's default TTL.
    let s1 = seen(1);
    assert_eq!(
        s1.dscp,
        vec![DscpCount {
            dscp: 0,
            packets: 50
        }]
    );
    assert!(s1.ttl_min.is_some_and(|t| t > 7), "{s1:?}");
    assert_eq!(doc.flows[1].socket, None);

    // IPv6: traffic class (AF41 + ECT(1)), hop limit, a leased flow label.
    let v6 = SockOpts {
        tos: Some((34 << 2) | 1),
        ttl: Some(9),
        flow_label: Some(0x12345),
        ..Default::default()
    };
    let doc = wirebench_engine::run(plan("::1", port, vec![marked(v6)])).unwrap();
    let s = doc.flows[0].received.marks.clone().unwrap();
    assert_eq!(
        s.dscp,
        vec![DscpCount {
            dscp: 34,
            packets: 50
        }]
    );
    assert_eq!(s.ecn_marked, 50);
    assert_eq!((s.ttl_min, s.ttl_max), (Some(9), Some(9)));
    assert_eq!((s.flow_label, s.flow_label_other), (Some(0x12345), 0));

    // A flow label towards an IPv4 receiver is the user's mistake.
    let e = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![marked(SockOpts {
            flow_label: Some(5),
            ..Default::default()
        })],
    ))
    .unwrap_err();
    assert!(e.is_bad_input(), "{e}");
    assert!(e.to_string().starts_with("--flow-label:"), "{e}");
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

/// Issue #11 item 3: TCP options per flow, checked where the kernel shows
/// them (TCP_CONGESTION read back, TCP_INFO's MSS), and refused with the
/// kernel's list or the option's name.
#[test]
fn tcp_options_are_applied_per_flow() {
    let _cpu = beside_others();
    use wirebench_stats::SockOpts;
    let port = 15417;
    let (stop, h) = daemon(port);
    let tcp = |opts: SockOpts| FlowPlan {
        transport: Transport::Tcp,
        opts,
        ..udp(1000.0, 1400, Stop::Packets(100), 1)
    };
    let reno = SockOpts {
        cc: Some("reno".into()),
        mss: Some(1000),
        window: Some(256 << 10),
        nagle: Some(true),
        ..Default::default()
    };
    let doc = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![tcp(reno), tcp(SockOpts::default())],
    ))
    .unwrap();
    let (a, b) = (&doc.flows[0], &doc.flows[1]);
    assert_eq!(a.received.counts.unique, 100);
    assert_eq!(a.tcp_cc.as_deref(), Some("reno"));
    let mss = a.tcp.unwrap().mss;
    assert!(mss > 0 && mss <= 1000, "MSS {mss}");
    // The other flow keeps the system's defaults.
    let default_cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    assert_eq!(b.tcp_cc.as_deref(), Some(default_cc.trim()));
    assert!(b.tcp.unwrap().mss > 1000, "{:?}", b.tcp);

    // An algorithm the kernel does not have: refused, listing what it allows.
    let e = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![tcp(SockOpts {
            cc: Some("nosuchcc".into()),
            ..Default::default()
        })],
    ))
    .unwrap_err();
    assert!(e.is_bad_input(), "{e}");
    let m = e.to_string();
    assert!(
        m.starts_with("--cc:") && m.contains("allows: ") && m.contains("reno"),
        "{m}"
    );
    // TCP options on a UDP flow name the option.
    let e = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![FlowPlan {
            opts: SockOpts {
                mss: Some(500),
                ..Default::default()
            },
            ..udp(100.0, 100, Stop::Packets(5), 1)
        }],
    ))
    .unwrap_err();
    assert!(e.to_string().starts_with("-M:"), "{e}");
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

/// TCP records longer than 64 KiB (`-c` up to 16 MiB, framed by the long
/// length): paced flows of 65 536 B, 1 MB and 16 MiB records, a bulk flow
/// of 300 000 B records and an RTT-meter flow of 100 000 B records are
/// received record for record, each with its own write→read delay, and
/// their bytes counted whole. A UDP flow above 64 000 B, and a long TCP
/// record with `--auth probes`, are refused before anything is sent,
/// naming the flow and the limit.
#[test]
fn tcp_records_longer_than_64_kib_are_framed_and_timed_whole() {
    let _cpu = beside_others();
    let port = 15461;
    let (stop, h) = daemon(port);
    let mut flows = Vec::new();
    for (pps, size) in [(50.0, 65_536u32), (20.0, 1_000_000), (10.0, 16 << 20)] {
        flows.push(tcp(Some(pps), size, Stop::DurationMs(300), size as u64));
    }
    flows.push(tcp(None, 300_000, Stop::DurationMs(300), 7));
    let mut rtt = tcp(Some(20.0), 100_000, Stop::DurationMs(300), 8);
    rtt.meter = Some(MeterMode::Rtt);
    flows.push(rtt);
    // The books are exact; what a held pacer or receiver changes (a timed
    // flow's last records sent, delays, every reflection back) is checked,
    // measured once more when the host was seen busy.
    measure("records longer than 64 KiB", || {
        let doc = wirebench_engine::run(plan("127.0.0.1", port, flows.clone())).unwrap();
        assert!(!doc.partial, "{:?}", doc.partial_reason);
        let sizes = [65_536u64, 1_000_000, 16 << 20, 300_000, 100_000];
        // Records each timed paced flow plans in its 300 ms.
        let planned = [Some(15), Some(6), Some(3), None, Some(6)];
        for ((f, size), want) in doc.flows.iter().zip(sizes).zip(planned) {
            let id = f.id;
            assert_eq!(f.received.foreign, 0, "flow {id}");
            assert!(f.sent.packets > 0, "flow {id}: {:?}", f.sent);
            assert_eq!(f.received.counts.unique, f.sent.packets, "flow {id}");
            assert_eq!(f.received.counts.lost, Some(0), "flow {id}");
            assert_eq!(f.received.counts.bytes, f.sent.packets * size, "flow {id}");
            assert!(f.delay_s.min > 0.0, "flow {id}: {:?}", f.delay_s);
            if let Some(want) = want {
                assert_eq!(f.sent.packets + f.sent.not_sent, want, "flow {id}");
                check(f.sent.packets == want, || {
                    format!("flow {id}: sent {:?} of {want}", f.sent)
                })?;
            }
            check(f.sent.packets > 1 && f.delay_s.max < 1.0, || {
                format!("flow {id}: {:?}, {:?}", f.sent, f.delay_s)
            })?;
        }
        // A 16 MiB record takes longer to arrive than a 1 MB one: its delay
        // is write to the read that brings its last byte.
        let (d1, d2) = (&doc.flows[1].delay_s, &doc.flows[2].delay_s);
        check(d2.mean > d1.mean, || format!("1 MB {d1:?}, 16 MiB {d2:?}"))?;
        let r = &doc.flows[4];
        assert!(r.rtt_received.is_some_and(|k| k <= r.sent.packets), "{r:?}");
        assert!(r.rtt_s.is_some_and(|d| d.min > 0.0), "{:?}", r.rtt_s);
        check(r.rtt_received == Some(6), || format!("{r:?}"))
    });

    let mut u = udp(10.0, 70_000, Stop::DurationMs(100), 1);
    let e = wirebench_engine::run(plan("127.0.0.1", port, vec![u.clone()])).unwrap_err();
    assert!(e.to_string().contains("flow 1: -c 70000: UDP"), "{e}");
    u.transport = Transport::Tcp;
    let mut p = plan("127.0.0.1", port, vec![u]);
    p.auth_probes = true;
    p.key = Some(wirebench_wire::auth::Key::from_text(b"0123456789abcdef0123").unwrap());
    let e = wirebench_engine::run(p).unwrap_err();
    assert!(e.to_string().contains("--auth probes"), "{e}");
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}
