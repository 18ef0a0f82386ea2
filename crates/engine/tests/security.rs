//! The security suite: each test replays one attack on the receiver from
//! issue #9 over loopback, speaking the control protocol by hand as an
//! attacker would, and asserts the fixed behaviour. Ports 157xx.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wirebench_engine::{Daemon, DaemonConfig, DaemonStats};
use wirebench_wire::{
    ControlMsg, FlowSetup, MeterMode, ProbeHeader, Transport, CONTROL_VERSION, FLAG_RTT,
    RTT_MIN_LEN,
};

struct Rx {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    stats: Arc<DaemonStats>,
    port: u16,
}

impl Rx {
    fn start(port: u16) -> Rx {
        let d = Daemon::bind(DaemonConfig {
            port,
            bind: Some("127.0.0.1".parse().unwrap()),
            ..DaemonConfig::default()
        })
        .unwrap();
        let stats = d.stats();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = Some(std::thread::spawn(move || d.serve_until(&s).unwrap()));
        Rx {
            stop,
            handle,
            stats,
            port,
        }
    }
}

impl Drop for Rx {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A hand-driven control connection.
struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let w = TcpStream::connect(("127.0.0.1", port)).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Client { w, r }
    }

    fn send(&mut self, m: &ControlMsg) {
        self.w.write_all(m.to_line().as_bytes()).unwrap();
    }

    fn recv(&mut self) -> ControlMsg {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        ControlMsg::from_line(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Sends a Hello and returns the receiver's answer.
    fn hello(&mut self, sid: u32, meter: MeterMode, flows: Vec<FlowSetup>) -> ControlMsg {
        self.send(&ControlMsg::Hello {
            version: CONTROL_VERSION,
            session: sid,
            meter,
            flows,
        });
        self.recv()
    }

    /// Stop with `sent` and the report's first flow as JSON.
    fn stop(&mut self, sent: u64) -> serde_json::Value {
        self.send(&ControlMsg::Stop {
            linger_ms: 100,
            sent: vec![sent],
        });
        match self.recv() {
            ControlMsg::Report { mut flows, .. } => {
                self.send(&ControlMsg::Bye);
                serde_json::to_value(flows.remove(0)).unwrap()
            }
            other => panic!("expected Report, got {other:?}"),
        }
    }
}

fn udp_flow(interval_ms: Option<u64>) -> FlowSetup {
    FlowSetup {
        flow_id: 1,
        transport: Transport::Udp,
        interval_ms,
        max_len: 100,
        mtu: 1500,
        playout_buffer_ms: None,
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn probe(sid: u32, seq: u32, flags: u8, len: usize) -> Vec<u8> {
    probe_full(sid, seq, flags, len, now_ns())
}

fn probe_full(sid: u32, seq: u32, flags: u8, len: usize, tx_ns: u64) -> Vec<u8> {
    let mut b = vec![0u8; len];
    ProbeHeader {
        flags,
        session: sid,
        flow: 1,
        len: len as u16,
        seq,
        tx_ns,
    }
    .encode(&mut b)
    .unwrap();
    b
}

/// Issue #9 item 1: one Hello with `interval_ms = 76480200929599801`
/// (× 10^6 wraps to 64 ns) made the receiver allocate ~940 k buckets per
/// flow. It is refused naming the field, before anything is allocated, and
/// the daemon goes on serving.
#[test]
fn memory_bomb_hello_is_refused() {
    let rx = Rx::start(15701);
    let mut c = Client::connect(rx.port);
    match c.hello(
        1,
        MeterMode::Owd,
        vec![udp_flow(Some(76_480_200_929_599_801))],
    ) {
        ControlMsg::Error { message } => assert!(message.contains("interval_ms"), "{message}"),
        other => panic!("bomb accepted: {other:?}"),
    }
    // Other out-of-range numbers are refused the same way.
    let mut f = udp_flow(None);
    f.max_len = 1 << 30;
    let mut c = Client::connect(rx.port);
    assert!(matches!(
        c.hello(2, MeterMode::Owd, vec![f]),
        ControlMsg::Error { .. }
    ));
    // A Hello line longer than any real one is cut off, not buffered.
    let mut c = Client::connect(rx.port);
    let _ = c.w.write_all(&vec![b'x'; 256 << 10]);
    let mut line = String::new();
    let _ = c.r.read_line(&mut line);
    assert!(!line.contains("ready"));
    // A sane Hello is still served.
    let mut c = Client::connect(rx.port);
    assert!(matches!(
        c.hello(3, MeterMode::Owd, vec![udp_flow(Some(1))]),
        ControlMsg::Ready { .. }
    ));
    // A Stop with an out-of-range linger is refused, not slept through.
    c.send(&ControlMsg::Stop {
        linger_ms: u64::MAX,
        sent: vec![0],
    });
    assert!(matches!(c.recv(), ControlMsg::Error { .. }));
    // So is an absurd clock offset.
    let mut c = Client::connect(rx.port);
    assert!(matches!(
        c.hello(4, MeterMode::Owd, vec![udp_flow(None)]),
        ControlMsg::Ready { .. }
    ));
    c.send(&ControlMsg::ClockOffset {
        offset_ns: i64::MIN,
        error_ns: 0,
    });
    assert!(matches!(c.recv(), ControlMsg::Error { .. }));
    assert_eq!(rx.stats.sessions_completed.load(Ordering::Relaxed), 0);
}

/// Issue #9 item 2: an attacker opened an RTT session from its own address
/// and sent probes carrying a victim's source address; every one was
/// reflected to the victim. Now only the session's sender (the control
/// connection's address, at the port of its first probe) gets reflections;
/// the rest are foreign. On loopback 127.0.0.2 plays the victim.
#[test]
fn no_reflection_to_a_third_party() {
    let rx = Rx::start(15702);
    let mut c = Client::connect(rx.port);
    let sid = 0x5ec0_0002;
    let port = match c.hello(sid, MeterMode::Rtt, vec![udp_flow(None)]) {
        ControlMsg::Ready { ports } => ports[0],
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Start);
    let data: SocketAddr = ([127, 0, 0, 1], port).into();
    let victim = UdpSocket::bind("127.0.0.2:0").unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other_port = UdpSocket::bind("127.0.0.1:0").unwrap();
    for s in [&victim, &sender, &other_port] {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
    }
    let mut buf = [0u8; 256];
    // "Spoofed" probes: the session's id, the victim's source address.
    for seq in 0..5 {
        victim
            .send_to(&probe(sid, seq, FLAG_RTT, RTT_MIN_LEN), data)
            .unwrap();
    }
    assert!(
        victim.recv_from(&mut buf).is_err(),
        "a reflection reached the victim"
    );
    // The real sender registers its port with its first probe and is
    // answered.
    sender
        .send_to(&probe(sid, 0, FLAG_RTT, RTT_MIN_LEN), data)
        .unwrap();
    let (n, from) = sender.recv_from(&mut buf).unwrap();
    assert_eq!((n, from), (RTT_MIN_LEN, data));
    // Another port on the sender's own address is not the registered one.
    other_port
        .send_to(&probe(sid, 1, FLAG_RTT, RTT_MIN_LEN), data)
        .unwrap();
    assert!(other_port.recv_from(&mut buf).is_err());
    let f = c.stop(2);
    assert_eq!(f["foreign"], 6, "{f}");
    assert_eq!(f["summary"]["unique"], 1, "{f}");
}

fn probe_at(sid: u32, seq: u32, tx_ns: u64) -> Vec<u8> {
    probe_full(sid, seq, 0, 64, tx_ns)
}

/// Issue #9 item 4: forged sequence numbers hid a 32 % loss, one
/// `seq = 2^31 − 1` made a 2 147 475 647-packet loss burst, and forged
/// timestamps gave delays of +1.8e9 s and −7.4e9 s. Now numbers the sender
/// cannot have reached, or at/beyond what it reports sending, are `forged`,
/// impossible delays are `implausible_delays`, and neither enters a figure.
#[test]
fn forged_probes_do_not_bend_the_figures() {
    let rx = Rx::start(15703);
    let mut c = Client::connect(rx.port);
    let sid = 0x5ec0_0004;
    let port = match c.hello(sid, MeterMode::Owd, vec![udp_flow(Some(1000))]) {
        ControlMsg::Ready { ports } => ports[0],
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Start);
    let data: SocketAddr = ([127, 0, 0, 1], port).into();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // The sender sends 0..100; 0..68 arrive (32 % loss).
    for seq in 0..68 {
        s.send_to(&probe_at(sid, seq, now_ns()), data).unwrap();
    }
    // The attacker (spoofing the sender) adds numbers beyond what was sent,
    // one far beyond anything reachable, and two impossible timestamps.
    for seq in 100..300 {
        s.send_to(&probe_at(sid, seq, now_ns()), data).unwrap();
    }
    s.send_to(&probe_at(sid, (1 << 31) - 1, now_ns()), data)
        .unwrap();
    s.send_to(
        &probe_at(sid, 68, now_ns() + 1_800_000_000_000_000_000),
        data,
    )
    .unwrap();
    s.send_to(&probe_at(sid, 69, 0), data).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let f = c.stop(100);
    let sum = &f["summary"];
    assert_eq!(sum["unique"], 68, "{f}");
    assert_eq!(sum["lost"], 32, "{f}");
    assert_eq!(sum["reordered"], 0, "{f}");
    assert_eq!(sum["forged"], 200, "{f}");
    assert_eq!(f["forged"], 1, "{f}");
    assert_eq!(f["implausible_delays"], 2, "{f}");
    assert_eq!(sum["loss_bursts"]["max_len"], 32, "{f}");
    let lost_in_intervals: u64 = sum["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["lost"].as_u64().unwrap())
        .sum();
    assert_eq!(lost_in_intervals, 32, "{f}");
    assert!(sum["delay_s"]["max"].as_f64().unwrap() < 1.0, "{f}");
    assert!(sum["delay_s"]["min"].as_f64().unwrap() > -1.0, "{f}");
}

/// A hostile receiver: answers the handshake, then whatever `on` says to
/// each message (raw JSON lines, so it can say what no honest one would).
fn hostile_receiver(port: u16, on: fn(&ControlMsg) -> Option<String>) -> JoinHandle<()> {
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let data = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 0) {
            let Ok(m) = ControlMsg::from_line(&line) else {
                break;
            };
            line.clear();
            let reply = match &m {
                ControlMsg::Hello { .. } => Some(
                    ControlMsg::Ready {
                        ports: vec![data.local_addr().unwrap().port()],
                    }
                    .to_line(),
                ),
                _ => on(&m),
            };
            if let Some(reply) = reply {
                if w.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
        }
    })
}

fn honest_time(m: &ControlMsg) -> Option<String> {
    match m {
        ControlMsg::TimeReq { t1_ns } => Some(
            ControlMsg::TimeResp {
                t1_ns: *t1_ns,
                t2_ns: now_ns(),
                t3_ns: now_ns(),
            }
            .to_line(),
        ),
        _ => None,
    }
}

fn run_against(port: u16) -> Result<wirebench_engine::ResultDoc, wirebench_engine::EngineError> {
    let mut p = wirebench_engine::SessionPlan::new(
        "127.0.0.1",
        vec![wirebench_engine::FlowPlan {
            spec: wirebench_model::FlowSpec::constant(100.0, 100).unwrap(),
            transport: Transport::Udp,
            stop: wirebench_engine::Stop::Packets(30),
            seed: 1,
        }],
    );
    p.port = port;
    p.linger_ms = 100;
    wirebench_engine::run(p)
}

/// Issue #9 item 7: a Report with zero flows was accepted (exit 0, "30
/// sent, 0 received, lost 0"), a 235-year clock offset was applied, and a
/// 3 MB error text was printed verbatim.
#[test]
fn a_hostile_receiver_cannot_mislead_the_sender() {
    // Zero flows in the report: the run is incomplete, not a clean 0 % loss.
    let h = hostile_receiver(15704, |m| match m {
        ControlMsg::Stop { .. } => Some("{\"type\":\"report\",\"flows\":[],\"extra\":{}}\n".into()),
        _ => honest_time(m),
    });
    match run_against(15704) {
        Err(wirebench_engine::EngineError::Partial { reason, doc }) => {
            assert!(reason.contains("report"), "{reason}");
            assert!(doc.partial);
        }
        other => panic!("zero-flow report accepted: {:?}", other.map(|d| d.partial)),
    }
    h.join().unwrap();
    // A clock 235 years away is refused before the run.
    let h = hostile_receiver(15705, |m| match m {
        ControlMsg::TimeReq { t1_ns } => Some(
            ControlMsg::TimeResp {
                t1_ns: *t1_ns,
                t2_ns: now_ns() + 235 * 365 * 86_400 * 1_000_000_000,
                t3_ns: now_ns() + 235 * 365 * 86_400 * 1_000_000_000,
            }
            .to_line(),
        ),
        _ => None,
    });
    let e = run_against(15705).unwrap_err().to_string();
    assert!(e.contains("clock"), "{e}");
    h.join().unwrap();
    // A 3 MB error text comes out short and without control characters.
    let h = hostile_receiver(15706, |m| match m {
        ControlMsg::TimeReq { .. } => Some(
            ControlMsg::Error {
                message: format!("\u{1b}[2J{}", "x".repeat(3 << 20)),
            }
            .to_line(),
        ),
        _ => None,
    });
    let e = run_against(15706).unwrap_err().to_string();
    assert!(e.len() < 1000 && !e.contains('\u{1b}'), "{} bytes", e.len());
    assert!(e.contains("more bytes"), "{e}");
    h.join().unwrap();
}
