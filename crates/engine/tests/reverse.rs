//! Reverse (`-R`) and bidirectional flows over loopback: the receiver
//! daemon sends, the sender measures; exact counts both ways, UDP and TCP,
//! IPv4 and IPv6, and a clear refusal from a receiver that cannot.

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::Ordering;
use wirebench_engine::plan::{Family, FlowPlan, SessionPlan, Stop};
use wirebench_engine::EngineError;
use wirebench_model::FlowSpec;
use wirebench_testkit::{check, measure};
use wirebench_wire::{Direction, Transport};

mod common;
use common::daemon;

fn flow(transport: Transport, n: u64, direction: Direction) -> FlowPlan {
    FlowPlan {
        spec: FlowSpec::constant(2000.0, 300).unwrap(),
        transport,
        stop: Stop::Packets(n),
        seed: 1,
        opts: Default::default(),
        direction,
        meter: None,
    }
}

fn plan(dest: &str, port: u16, flows: Vec<FlowPlan>) -> SessionPlan {
    let mut p = SessionPlan::new(dest, flows);
    p.port = port;
    p.linger_ms = 200;
    p.family = if dest.contains(':') {
        Family::V6
    } else {
        Family::V4
    };
    p
}

/// Counts are asserted outright; the session's time, the largest delay
/// and the sending rate depend on the host lending the pacers a CPU on
/// time, so they are checks, measured once more when the host was seen
/// busy or held (wirebench_testkit).
#[test]
fn reverse_flows_are_sent_by_the_receiver_and_measured_here() {
    let port = 15941;
    let (stop, h) = daemon(port);
    for (dest, here) in [("127.0.0.1", "127.0.0.1"), ("::1", "::1")] {
        measure(&format!("reverse flows to {dest}"), || {
            let t = std::time::Instant::now();
            let doc = wirebench_engine::run(plan(
                dest,
                port,
                vec![
                    flow(Transport::Udp, 400, Direction::Reverse),
                    flow(Transport::Tcp, 300, Direction::Reverse),
                ],
            ))
            .unwrap();
            let took = t.elapsed();
            assert!(!doc.partial, "{:?}", doc.partial_reason);
            for (f, n) in doc.flows.iter().zip([400, 300]) {
                assert_eq!(f.direction, Direction::Reverse);
                // What the receiver's pacer sent, and what arrived here.
                assert_eq!(f.sent.packets, n, "{dest} flow {}", f.id);
                assert_eq!(f.sent.bytes, n * 300);
                assert_eq!(f.received.counts.unique, n, "{dest} flow {}", f.id);
                assert_eq!(f.received.counts.lost, Some(0));
                assert_eq!(f.received.counts.bytes, n * 300);
                // The packets went from the receiver to us.
                assert_eq!(f.src, dest);
                assert_eq!(f.dst, here);
                assert!(f.delay_s.min >= 0.0, "{:?}", f.delay_s);
            }
            assert_eq!(doc.total.sent_packets, 700);
            assert_eq!(doc.total.received_packets, 700);
            // 400 packets at 2000/s: 0.2 s; the run ends soon after the
            // receiver's flows do (ReverseDone), not after a timeout.
            check(took.as_secs_f64() < 2.0, || format!("took {took:?}"))?;
            for f in &doc.flows {
                check(f.delay_s.max < 0.1, || {
                    format!("{dest} flow {}: {:?}", f.id, f.delay_s)
                })?;
                check(f.sent.rate_pps > 1500.0, || {
                    format!("{dest} flow {}: {} pps", f.id, f.sent.rate_pps)
                })?;
            }
            Ok(())
        });
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn bidir_reports_both_directions_separately() {
    let port = 15942;
    let (stop, h) = daemon(port);
    for transport in [Transport::Udp, Transport::Tcp] {
        let doc = wirebench_engine::run(plan(
            "127.0.0.1",
            port,
            vec![
                flow(transport, 250, Direction::Forward),
                FlowPlan {
                    spec: FlowSpec::constant(1000.0, 500).unwrap(),
                    ..flow(transport, 150, Direction::Reverse)
                },
            ],
        ))
        .unwrap();
        assert!(!doc.partial, "{:?}", doc.partial_reason);
        let (fw, rv) = (&doc.flows[0], &doc.flows[1]);
        assert_eq!(fw.direction, Direction::Forward);
        assert_eq!(rv.direction, Direction::Reverse);
        assert_eq!((fw.sent.packets, fw.received.counts.unique), (250, 250));
        assert_eq!((rv.sent.packets, rv.received.counts.unique), (150, 150));
        assert_eq!(fw.received.counts.bytes, 250 * 300);
        assert_eq!(rv.received.counts.bytes, 150 * 500);
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["flows"][0]["direction"], "forward");
        assert_eq!(json["flows"][1]["direction"], "reverse");
    }
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}

#[test]
fn a_receiver_without_reverse_support_is_refused_clearly() {
    // A receiver of before -R: it answers Ready without "reverse".
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let old = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("\"reverse\""), "{line}");
        (&s).write_all(b"{\"type\":\"ready\",\"ports\":[9]}\n")
            .unwrap();
        line.clear();
        let _ = r.read_line(&mut line);
        line
    });
    let err = wirebench_engine::run(plan(
        "127.0.0.1",
        port,
        vec![flow(Transport::Udp, 10, Direction::Reverse)],
    ))
    .unwrap_err();
    assert!(matches!(err, EngineError::Remote(_)), "{err:?}");
    assert!(err.to_string().contains("does not support -R"), "{err}");
    // The receiver is told why, too.
    assert!(old.join().unwrap().contains("does not support -R"));
}

#[test]
fn reverse_flows_refuse_what_does_not_reach_the_receiver() {
    let mut p = plan(
        "127.0.0.1",
        1,
        vec![flow(Transport::Udp, 10, Direction::Reverse)],
    );
    p.meter = wirebench_wire::MeterMode::Rtt;
    let e = wirebench_engine::run(p).unwrap_err();
    assert!(e.is_bad_input() && e.to_string().contains("-R"), "{e}");
    let mut f = flow(Transport::Udp, 10, Direction::Reverse);
    f.opts.ttl = Some(3);
    let e = wirebench_engine::run(plan("127.0.0.1", 1, vec![f])).unwrap_err();
    assert!(e.is_bad_input() && e.to_string().contains("-R"), "{e}");
}

#[test]
fn the_receiver_sends_only_to_the_control_peers_address() {
    use std::net::UdpSocket;
    use std::time::Duration;
    use wirebench_wire::{ControlMsg, FlowSetup, MeterMode, ProbeHeader, CONTROL_VERSION};
    let port = 15943;
    let (stop, h) = daemon(port);
    let ctl = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut rd = BufReader::new(ctl.try_clone().unwrap());
    let mut line = String::new();
    let say = |m: ControlMsg| (&ctl).write_all(m.to_line().as_bytes()).unwrap();
    let model = serde_json::json!({
        "spec": FlowSpec::constant(1000.0, 100).unwrap(),
        "stop": Stop::Packets(30),
        "seed": 1,
    });
    say(ControlMsg::Hello {
        version: CONTROL_VERSION,
        session: 77,
        meter: MeterMode::Owd,
        flows: vec![FlowSetup {
            flow_id: 1,
            transport: Transport::Udp,
            max_len: 100,
            mtu: 1500,
            reverse: Some(model),
            ..Default::default()
        }],
        auth: None,
        live: false,
        auth_probes: false,
        log_name: None,
        xdp: false,
    });
    rd.read_line(&mut line).unwrap();
    let data = match ControlMsg::from_line(&line).unwrap() {
        ControlMsg::Ready {
            ports,
            reverse: true,
            ..
        } => ports[0],
        other => panic!("{other:?}"),
    };
    let hello = |from: &UdpSocket| {
        let mut b = [0u8; 24];
        ProbeHeader {
            flags: wirebench_wire::FLAG_HELLO,
            session: 77,
            flow: 1,
            len: 24,
            seq: 0,
            tx_ns: 0,
        }
        .encode(&mut b)
        .unwrap();
        from.send_to(&b, ("127.0.0.1", data)).unwrap();
    };
    // A third party (another address than the control connection's) says
    // hello first: it must get nothing.
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    hello(&other);
    let me = UdpSocket::bind("127.0.0.1:0").unwrap();
    hello(&me);
    say(ControlMsg::Start);
    me.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 256];
    let mut got = 0;
    while got < 30 {
        let (n, from) = me.recv_from(&mut buf).unwrap();
        assert_eq!(from.port(), data);
        let h = ProbeHeader::decode_datagram(&buf[..n]).unwrap();
        assert_eq!((h.session, h.flow, n), (77, 1, 100));
        got += 1;
    }
    other
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(
        other.recv_from(&mut buf).is_err(),
        "the third party got data"
    );
    say(ControlMsg::Stop {
        linger_ms: 0,
        sent: vec![0],
    });
    loop {
        line.clear();
        rd.read_line(&mut line).unwrap();
        match ControlMsg::from_line(&line).unwrap() {
            ControlMsg::Report { flows, .. } => {
                assert_eq!(flows[0].sent.as_ref().unwrap().packets, 30);
                break;
            }
            ControlMsg::ReverseDone | ControlMsg::TimeResp { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    say(ControlMsg::Bye);
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}
