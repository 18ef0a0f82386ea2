//! The security suite: each test replays one attack on the receiver from
//! issue #9 over loopback, speaking the control protocol by hand as an
//! attacker would, and asserts the fixed behaviour. Ports 157xx.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use wirebench_engine::{Daemon, DaemonConfig, DaemonStats, Key};
use wirebench_wire::auth::{self, MAC_LEN, NONCE_LEN};
use wirebench_wire::{
    ControlMsg, FlowSetup, MeterMode, ProbeHeader, Transport, CONTROL_VERSION, FLAG_HELLO,
    FLAG_RTT, PROBE_HEADER_LEN, RTT_MIN_LEN,
};

struct Rx {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    stats: Arc<DaemonStats>,
    port: u16,
}

impl Rx {
    fn start(port: u16) -> Rx {
        Rx::start_with(DaemonConfig {
            port,
            ..DaemonConfig::default()
        })
    }

    /// A receiver on 127.0.0.1 with this configuration.
    fn start_with(cfg: DaemonConfig) -> Rx {
        let port = cfg.port;
        let d = Daemon::bind(DaemonConfig {
            bind: Some("127.0.0.1".parse().unwrap()),
            ..cfg
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
        Client::connect_from(port, "127.0.0.1")
    }

    /// Connects to the receiver on 127.0.0.1 from another loopback address.
    fn connect_from(port: u16, src: &str) -> Client {
        let w = connect_raw(port, src);
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
            auth: None,
            live: false,
            auth_probes: false,
            log_name: None,
            xdp: false,
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

fn connect_raw(port: u16, src: &str) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(src.parse().unwrap(), 0).into())
        .unwrap();
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    s.into()
}

fn udp_flow(interval_ms: Option<u64>) -> FlowSetup {
    FlowSetup {
        flow_id: 1,
        transport: Transport::Udp,
        interval_ms,
        max_len: 100,
        mtu: 1500,
        ..Default::default()
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
    let _ = c.w.write_all(&vec![
        b'x';
        wirebench_wire::limits::MAX_HELLO_LINE + (256 << 10)
    ]);
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
        ControlMsg::Ready { ports, .. } => ports[0],
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
        ControlMsg::Ready { ports, .. } => ports[0],
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
                        live: false,
                        reverse: false,
                        auth_probes: false,
                        log: None,
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
    run_keyed(port, None)
}

/// 30 packets at 100/s to 127.0.0.1:`port`, authenticating with `key`.
fn run_keyed(
    port: u16,
    key: Option<&str>,
) -> Result<wirebench_engine::ResultDoc, wirebench_engine::EngineError> {
    wirebench_engine::run(keyed_plan(port, key))
}

/// The plan [`run_keyed`] runs.
fn keyed_plan(port: u16, key: Option<&str>) -> wirebench_engine::SessionPlan {
    let mut p = wirebench_engine::SessionPlan::new(
        "127.0.0.1",
        vec![wirebench_engine::FlowPlan {
            spec: wirebench_model::FlowSpec::constant(100.0, 100).unwrap(),
            transport: Transport::Udp,
            stop: wirebench_engine::Stop::Packets(30),
            seed: 1,
            opts: Default::default(),
            direction: Default::default(),
            meter: None,
        }],
    );
    p.port = port;
    p.linger_ms = 100;
    p.key = key.map(self::key);
    p
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

const KEY: &str = "correct horse battery staple";

fn key(text: &str) -> Key {
    Key::from_text(text.as_bytes()).unwrap()
}

fn keyed_rx(port: u16) -> Rx {
    Rx::start_with(DaemonConfig {
        port,
        key: Some(key(KEY)),
        ..DaemonConfig::default()
    })
}

/// Sends an authenticating Hello with nonce `cn`; returns the receiver's
/// Challenge nonce (checking its proof with [`KEY`]) or what it sent.
fn challenge(c: &mut Client, sid: u32, cn: &[u8; NONCE_LEN]) -> Result<[u8; NONCE_LEN], String> {
    c.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session: sid,
        meter: MeterMode::Owd,
        flows: vec![udp_flow(None)],
        auth: Some(auth::to_hex(cn)),
        live: false,
        auth_probes: false,
        log_name: None,
        xdp: false,
    });
    match c.recv() {
        ControlMsg::Challenge { nonce, proof } => {
            let sn = auth::from_hex("nonce", &nonce).unwrap();
            let proof = auth::from_hex::<MAC_LEN>("proof", &proof).unwrap();
            assert!(key(KEY).verify_receiver(cn, &sn, sid, &proof));
            Ok(sn)
        }
        other => Err(format!("{other:?}")),
    }
}

fn error_text(m: ControlMsg) -> String {
    match m {
        ControlMsg::Error { message } => message,
        other => panic!("expected Error, got {other:?}"),
    }
}

/// Issue #9 item 3: anyone could start sessions. With a key, a Hello
/// without one, a wrong answer, and a replayed answer are all refused,
/// and nothing is opened for them.
#[test]
fn unauthenticated_wrong_key_and_replayed_sessions_are_refused() {
    let rx = keyed_rx(15710);
    // No key: told that one is needed, nothing more.
    let mut c = Client::connect(rx.port);
    let m = c.hello(1, MeterMode::Owd, vec![udp_flow(None)]);
    assert!(error_text(m).contains("authentication required"));
    // A malformed nonce.
    let mut c = Client::connect(rx.port);
    c.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session: 2,
        meter: MeterMode::Owd,
        flows: vec![udp_flow(None)],
        auth: Some("zz".into()),
        live: false,
        auth_probes: false,
        log_name: None,
        xdp: false,
    });
    assert!(error_text(c.recv()).contains("auth"));
    // A wrong key: the answer does not check out.
    let cn = [7u8; NONCE_LEN];
    let mut c = Client::connect(rx.port);
    let sn = challenge(&mut c, 3, &cn).unwrap();
    let wrong = key("correct horse battery stapler").sender_mac(&cn, &sn, 3);
    c.send(&ControlMsg::Auth {
        mac: auth::to_hex(&wrong),
    });
    assert_eq!(error_text(c.recv()), "authentication failed");
    // The right key: Ready. Its exchange is recorded...
    let mut c = Client::connect(rx.port);
    let sn = challenge(&mut c, 4, &cn).unwrap();
    let recorded = auth::to_hex(&key(KEY).sender_mac(&cn, &sn, 4));
    c.send(&ControlMsg::Auth {
        mac: recorded.clone(),
    });
    assert!(matches!(c.recv(), ControlMsg::Ready { .. }));
    drop(c);
    // ...and replayed word for word on a new connection: the receiver's
    // fresh nonce makes the recorded answer worthless.
    let mut c = Client::connect(rx.port);
    let sn2 = challenge(&mut c, 4, &cn).unwrap();
    assert_ne!(sn, sn2);
    c.send(&ControlMsg::Auth { mac: recorded });
    assert_eq!(error_text(c.recv()), "authentication failed");
    assert_eq!(rx.stats.auth_failed.load(Ordering::Relaxed), 4);
    assert_eq!(rx.stats.sessions_started.load(Ordering::Relaxed), 1);
}

/// The sender's side of item 3: both must hold the same key, and a sender
/// with a key refuses a receiver that cannot prove it.
#[test]
fn sender_and_receiver_must_share_the_key() {
    let rx = keyed_rx(15711);
    let doc = run_keyed(rx.port, Some(KEY)).unwrap();
    assert!(!doc.partial);
    assert_eq!(doc.flows[0].received.counts.unique, 30);
    let e = run_keyed(rx.port, None).unwrap_err().to_string();
    assert!(e.contains("authentication required"), "{e}");
    let e = run_keyed(rx.port, Some("another key of the right length"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("receiver failed authentication"), "{e}");
    let open = Rx::start(15712);
    let e = run_keyed(open.port, Some(KEY)).unwrap_err().to_string();
    assert!(e.contains("did not authenticate"), "{e}");
    assert_eq!(open.stats.sessions_started.load(Ordering::Relaxed), 1);
}

/// Item 3: 200 idle connections (or 64 kept-alive Hellos) from one address
/// locked every legitimate sender out for as long as they lasted. Now an
/// address holds at most a few handshake slots, and those are not the
/// slots sessions use.
#[test]
fn idle_connections_cannot_lock_out_an_authenticated_sender() {
    let rx = keyed_rx(15713);
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| connect_raw(rx.port, "127.0.0.2"))
        .collect();
    // Unauthenticated Hellos from another address get no session either.
    let mut hellos = Vec::new();
    for sid in 0..8 {
        let mut c = Client::connect_from(rx.port, "127.0.0.3");
        let m = c.hello(100 + sid, MeterMode::Owd, vec![udp_flow(None)]);
        assert!(error_text(m).contains("authentication required"));
        hellos.push(c);
    }
    let t0 = std::time::Instant::now();
    let doc = run_keyed(rx.port, Some(KEY)).unwrap();
    assert_eq!(doc.flows[0].received.counts.unique, 30);
    // Served at once, not after the idle connections' 5 s handshake time.
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    let refused = rx.stats.refused.load(Ordering::Relaxed);
    assert!(refused >= 192, "refused {refused}");
    drop(idle);
}

/// Item 3: per-peer session limits and `--allow`.
#[test]
fn per_peer_limit_and_allow_list() {
    let rx = Rx::start_with(DaemonConfig {
        port: 15714,
        sessions_per_peer: 4,
        allow: vec![
            "127.0.0.1".parse().unwrap(),
            "127.0.0.2/32".parse().unwrap(),
        ],
        ..DaemonConfig::default()
    });
    let mut held = Vec::new();
    for sid in 0..6 {
        let mut c = Client::connect_from(rx.port, "127.0.0.2");
        match c.hello(200 + sid, MeterMode::Owd, vec![udp_flow(None)]) {
            ControlMsg::Ready { .. } => held.push(c),
            m => assert!(error_text(m).contains("4 sessions"), "session {sid}"),
        }
    }
    assert_eq!(held.len(), 4);
    // Another allowed address is not affected.
    let doc = run_against(rx.port).unwrap();
    assert_eq!(doc.flows[0].received.counts.unique, 30);
    // An address outside the list is closed without a word.
    let mut s = connect_raw(rx.port, "127.0.0.3");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let n = std::io::Read::read_to_end(&mut s, &mut buf);
    assert!(matches!(n, Ok(0)) || n.is_err(), "{buf:?}");
    assert!(rx.stats.refused.load(Ordering::Relaxed) >= 3);
}

/// Item 3: a session cannot be kept alive for ever.
#[test]
fn session_lifetime_is_bounded() {
    let rx = Rx::start_with(DaemonConfig {
        port: 15715,
        max_session: Duration::from_millis(800),
        ..DaemonConfig::default()
    });
    let mut c = Client::connect(rx.port);
    assert!(matches!(
        c.hello(300, MeterMode::Owd, vec![udp_flow(None)]),
        ControlMsg::Ready { .. }
    ));
    let t0 = std::time::Instant::now();
    loop {
        c.send(&ControlMsg::TimeReq { t1_ns: 1 });
        match c.recv() {
            ControlMsg::TimeResp { .. } => std::thread::sleep(Duration::from_millis(100)),
            m => {
                assert!(error_text(m).contains("lifetime"));
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "still alive");
    }
    assert!(t0.elapsed() >= Duration::from_millis(600));
}

/// Issue #9 item 6: eight idle connections to a TCP data port, never
/// sending a byte, held every slot and the real stream got 0 records in.
/// Now the flow holds only the connection it was granted: each newcomer
/// takes the place of a silent one, and a connection that has not
/// identified itself (a `FLAG_HELLO` record or a probe of the session)
/// within 2 s is closed. ~2.5 s.
#[test]
fn tcp_data_port_squatting() {
    let rx = Rx::start(15716);
    let mut c = Client::connect(rx.port);
    let sid = 0x5ec0_0006;
    let mut flow = udp_flow(None);
    flow.transport = Transport::Tcp;
    let port = match c.hello(sid, MeterMode::Owd, vec![flow]) {
        ControlMsg::Ready { ports, .. } => ports[0],
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Start);
    let mut squatters: Vec<TcpStream> = (0..8)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s
        })
        .collect();
    let t0 = std::time::Instant::now();
    // The last one holds the flow's place until its 2 s are up; each of
    // the others was closed when the next came.
    let Some(mut last) = squatters.pop() else {
        unreachable!()
    };
    for (k, mut s) in squatters.into_iter().enumerate() {
        assert!(closed_by_peer(&mut s), "squatter {k} still open");
    }
    assert!(t0.elapsed() < Duration::from_millis(900));
    last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    let r = std::io::Read::read(&mut last, &mut b);
    assert!(matches!(r, Ok(0)) || r.is_err(), "{r:?}");
    let closed = t0.elapsed();
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_millis(3500),
        "{closed:?}"
    );
    // The real stream identifies at once (its first probe may be seconds
    // away: a start delay).
    let mut real = TcpStream::connect(("127.0.0.1", port)).unwrap();
    real.write_all(&probe_full(sid, 0, FLAG_HELLO, PROBE_HEADER_LEN, 0))
        .unwrap();
    for seq in 0..50 {
        real.write_all(&probe_full(sid, seq, 0, 100, now_ns()))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let f = c.stop(50);
    assert_eq!(f["summary"]["unique"], 50, "{f}");
    assert_eq!(f["foreign"], 8, "{f}");
    drop(real);
}

/// Whether the receiver closed `s` (end of stream or reset) within 1 s.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut b = [0u8; 1];
    match std::io::Read::read(s, &mut b) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// The receiver's sockets whose local port is `port`, counted by the file
/// descriptors of this process that hold them (the daemon runs in it):
/// listeners and connections alike, not the closed ones the kernel still
/// finishes.
#[cfg(target_os = "linux")]
fn fds_on_port(port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local_port = cols
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Some(inode) = cols.get(9) {
                    inodes.insert(format!("socket:[{inode}]"));
                }
            }
        }
    }
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| inodes.contains(&*l.to_string_lossy()))
        .count()
}

/// Issue #30 item 2, last clause: a TCP flow kept 8 data connections
/// where the budget counted 2 (545 fds for a budget of 121). A flow that
/// opens 8 identified connections now keeps only the one it was granted:
/// the other 7 are closed at once and counted foreign, their probes are
/// not measured, and the sockets the receiver holds on the data port are
/// exactly what the session's budget reserved for the flow.
#[cfg(target_os = "linux")]
#[test]
fn a_tcp_flow_keeps_only_the_connection_it_was_granted() {
    let rx = Rx::start(15767);
    let mut c = Client::connect(rx.port);
    let sid = 0x5ec0_0030;
    let mut flow = udp_flow(None);
    flow.transport = Transport::Tcp;
    let budget = wirebench_engine::budget::cost(
        std::slice::from_ref(&flow),
        MeterMode::Owd,
        1,
        &wirebench_engine::budget::SESSION_BUDGET,
    );
    let port = match c.hello(sid, MeterMode::Owd, vec![flow]) {
        ControlMsg::Ready { ports, .. } => ports[0],
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Start);
    let open = |k: u32| {
        // A refused connection may be closed before its writes end.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = s.write_all(&probe_full(sid, 0, FLAG_HELLO, PROBE_HEADER_LEN, 0));
        for seq in 0..10 {
            let _ = s.write_all(&probe_full(sid, k * 100 + seq, 0, 100, now_ns()));
        }
        std::thread::sleep(Duration::from_millis(50));
        s
    };
    let mut conns: Vec<TcpStream> = (0..8).map(open).collect();
    std::thread::sleep(Duration::from_millis(200));
    // The first one is served: it stays open; the others were refused.
    for (k, s) in conns.iter_mut().enumerate().skip(1) {
        assert!(closed_by_peer(s), "connection {k} is still served");
    }
    conns[0]
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut b = [0u8; 1];
    let r = std::io::Read::read(&mut conns[0], &mut b);
    assert!(
        r.as_ref().is_err_and(|e| matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "the granted connection was closed: {r:?}"
    );
    // The data port's listener and the one connection: what the budget
    // holds for the flow (its sockets, less the control connection).
    let held = fds_on_port(port);
    let tcp = wirebench_engine::transport::caps(Transport::Tcp);
    assert_eq!(held as u64, tcp.rx_sockets, "sockets held on the data port");
    assert_eq!(budget.sockets, 1 + tcp.rx_sockets, "{budget:?}");
    for seq in 10..50 {
        conns[0]
            .write_all(&probe_full(sid, seq, 0, 100, now_ns()))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let f = c.stop(50);
    assert_eq!(f["summary"]["unique"], 50, "{f}");
    assert_eq!(f["summary"]["lost"], 0, "{f}");
    assert_eq!(f["foreign"], 7, "{f}");
    drop(conns);
}

/// The sender's side of item 6: a TCP flow whose first probe comes after
/// the 2 s (a `-d` start delay) identifies its connection at once and is
/// received whole. ~2.5 s.
#[test]
fn delayed_tcp_flow_is_not_taken_for_a_squatter() {
    let rx = Rx::start(15717);
    let mut spec = wirebench_model::FlowSpec::constant(100.0, 100).unwrap();
    spec.start_delay_ms = 2_300;
    let mut p = wirebench_engine::SessionPlan::new(
        "127.0.0.1",
        vec![wirebench_engine::FlowPlan {
            spec,
            transport: Transport::Tcp,
            stop: wirebench_engine::Stop::Packets(5),
            seed: 1,
            opts: Default::default(),
            direction: Default::default(),
            meter: None,
        }],
    );
    p.port = rx.port;
    p.linger_ms = 100;
    let doc = wirebench_engine::run(p).unwrap();
    assert!(!doc.partial);
    assert_eq!(doc.flows[0].received.counts.unique, 5);
    assert_eq!(doc.flows[0].received.foreign, 0);
}

/// Items 2 and 4 again on the many-flow receive path: with more UDP flows
/// than CPUs, flows share receive workers (`udp_rx_many`), a path that
/// landed after the fixes. Spoofed probes get no reflection, the real
/// sender does, and forged sequence numbers are counted, not measured, on
/// every flow alike.
#[test]
fn many_flow_workers_keep_reflection_and_forgery_rules() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = (2 * cores + 1) as u16;
    let rx = Rx::start(15742);
    let mut c = Client::connect(rx.port);
    let sid = 0x5ec0_0042;
    let flows = (1..=n)
        .map(|id| FlowSetup {
            flow_id: id,
            ..udp_flow(None)
        })
        .collect();
    let ports = match c.hello(sid, MeterMode::Rtt, flows) {
        ControlMsg::Ready { ports, .. } => ports,
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Start);
    let pkt = |flow: u16, seq: u32| {
        let mut b = probe(sid, seq, FLAG_RTT, RTT_MIN_LEN);
        b[8..10].copy_from_slice(&flow.to_be_bytes());
        b
    };
    let victim = UdpSocket::bind("127.0.0.2:0").unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for s in [&victim, &sender] {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
    }
    let mut buf = [0u8; 256];
    for (i, &port) in ports.iter().enumerate() {
        let flow = i as u16 + 1;
        let data: SocketAddr = ([127, 0, 0, 1], port).into();
        for seq in 0..3 {
            victim.send_to(&pkt(flow, seq), data).unwrap();
        }
        // Ten real probes, each reflected to the sender only.
        for seq in 0..10 {
            sender.send_to(&pkt(flow, seq), data).unwrap();
            let (len, from) = sender.recv_from(&mut buf).unwrap();
            assert_eq!((len, from), (RTT_MIN_LEN, data), "flow {flow}");
        }
        // Beyond the 10 the sender reports sending, and far beyond reach.
        for seq in 10..15 {
            sender.send_to(&pkt(flow, seq), data).unwrap();
            let _ = sender.recv_from(&mut buf);
        }
        sender.send_to(&pkt(flow, (1 << 31) - 1), data).unwrap();
    }
    assert!(
        victim.recv_from(&mut buf).is_err(),
        "a reflection reached the victim"
    );
    std::thread::sleep(Duration::from_millis(50));
    c.send(&ControlMsg::Stop {
        linger_ms: 100,
        sent: vec![10; n as usize],
    });
    let flows = match c.recv() {
        ControlMsg::Report { flows, .. } => flows,
        other => panic!("expected Report, got {other:?}"),
    };
    c.send(&ControlMsg::Bye);
    assert_eq!(flows.len(), n as usize);
    for f in flows {
        let s = &f.summary.counts;
        let id = f.flow_id;
        assert_eq!((f.foreign, f.forged), (3, 1), "flow {id}: {f:?}");
        assert_eq!((s.unique, s.forged, s.lost), (10, 5, Some(0)), "flow {id}");
        assert_eq!(s.reordered, 0, "flow {id}");
    }
}

/// Item 3, `--auth probes`: in a session whose probes carry MACs, probes
/// with the session's and flow's ids but no MAC, a wrong one, a tampered
/// header or no room for one are `forged`: never recorded, never
/// reflected, and the figures are those of the real probes alone (a gap
/// of 10 lost stays lost, though forgeries carry exactly its numbers).
/// Reflections carry a MAC the sender can check.
#[test]
fn authenticated_probes_count_forgeries_and_keep_the_figures() {
    let rx = keyed_rx(15718);
    let mut c = Client::connect(rx.port);
    let sid = 0x5ec0_0018;
    let cn = [9u8; NONCE_LEN];
    c.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session: sid,
        meter: MeterMode::Rtt,
        flows: vec![udp_flow(None)],
        auth: Some(auth::to_hex(&cn)),
        live: false,
        auth_probes: true,
        log_name: None,
        xdp: false,
    });
    let sn = match c.recv() {
        ControlMsg::Challenge { nonce, .. } => auth::from_hex("nonce", &nonce).unwrap(),
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Auth {
        mac: auth::to_hex(&key(KEY).sender_mac(&cn, &sn, sid)),
    });
    let port = match c.recv() {
        ControlMsg::Ready {
            ports,
            auth_probes: true,
            ..
        } => ports[0],
        other => panic!("{other:?}"),
    };
    c.send(&ControlMsg::Start);
    let pk = key(KEY).probe_key(&cn, &sn, sid);
    let data: SocketAddr = ([127, 0, 0, 1], port).into();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 256];
    let signed = |seq: u32| {
        let mut b = probe(sid, seq, FLAG_RTT, 64);
        assert!(pk.sign(&mut b));
        b
    };
    // 50 sent, 10..20 lost on the way: each real probe is reflected with
    // a MAC the sender checks, covering the reflector's times.
    for seq in (0..10).chain(20..50) {
        s.send_to(&signed(seq), data).unwrap();
        let (n, _) = s.recv_from(&mut buf).unwrap();
        assert_eq!(n, 64);
        let r = ProbeHeader::decode_datagram(&buf[..n]).unwrap();
        assert!(r.is_reflected() && r.seq == seq);
        assert!(pk.verify(&buf[..n]), "reflection {seq} without a valid MAC");
        let mut bent = buf;
        bent[30] ^= 1;
        assert!(!pk.verify(&bent[..n]));
    }
    // Forgeries of the lost numbers: no MAC, another session's key, a
    // header changed after signing, too short to carry a MAC.
    let other = key(KEY).probe_key(&cn, &[1; NONCE_LEN], sid);
    for seq in 10..20 {
        s.send_to(&probe(sid, seq, FLAG_RTT, 64), data).unwrap();
    }
    for seq in 10..15 {
        let mut b = probe(sid, seq, FLAG_RTT, 64);
        other.sign(&mut b);
        s.send_to(&b, data).unwrap();
    }
    let mut b = signed(5);
    b[12..16].copy_from_slice(&15u32.to_be_bytes());
    s.send_to(&b, data).unwrap();
    s.send_to(&probe(sid, 16, FLAG_RTT, RTT_MIN_LEN), data)
        .unwrap();
    assert!(
        s.recv_from(&mut buf).is_err(),
        "a forged probe was reflected"
    );
    let f = c.stop(50);
    assert_eq!(f["forged"], 17, "{f}");
    assert_eq!(f["foreign"], 0, "{f}");
    assert_eq!(f["summary"]["unique"], 40, "{f}");
    assert_eq!(f["summary"]["lost"], 10, "{f}");
    assert_eq!(f["summary"]["reordered"], 0, "{f}");
    // A receiver without a key cannot check MACs: it refuses the session
    // rather than measure unchecked probes.
    let open = Rx::start(15719);
    let mut c = Client::connect(open.port);
    c.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session: 7,
        meter: MeterMode::Owd,
        flows: vec![udp_flow(None)],
        auth: None,
        live: false,
        auth_probes: true,
        log_name: None,
        xdp: false,
    });
    assert!(error_text(c.recv()).contains("--auth probes"));
}

/// `--auth probes` through the whole engine, every path that carries
/// probes: UDP and TCP one-way, UDP and TCP round trip (signed
/// reflections), and a reverse UDP flow (the receiver signs, the sender
/// checks). Nothing honest is counted forged, and 30-byte probes are
/// raised to the 40 bytes a header and MAC need. A plan asking for it
/// without a key is refused.
#[test]
fn authenticated_probes_end_to_end() {
    let rx = keyed_rx(15720);
    let flow = |transport, direction| wirebench_engine::FlowPlan {
        spec: wirebench_model::FlowSpec::constant(200.0, 30).unwrap(),
        transport,
        stop: wirebench_engine::Stop::Packets(30),
        seed: 1,
        opts: Default::default(),
        direction,
        meter: None,
    };
    use wirebench_wire::Direction::{Forward, Reverse};
    for meter in [MeterMode::Owd, MeterMode::Rtt] {
        let mut flows = vec![flow(Transport::Udp, Forward), flow(Transport::Tcp, Forward)];
        if meter == MeterMode::Owd {
            flows.push(flow(Transport::Udp, Reverse));
        }
        let mut p = wirebench_engine::SessionPlan::new("127.0.0.1", flows);
        p.port = rx.port;
        p.linger_ms = 100;
        p.meter = meter;
        p.key = Some(key(KEY));
        p.auth_probes = true;
        let doc = wirebench_engine::run(p).unwrap();
        assert!(!doc.partial);
        for f in &doc.flows {
            let what = format!("{meter:?} flow {} {:?}", f.id, f.transport);
            assert_eq!(f.sent.packets, 30, "{what}");
            assert_eq!(f.sent.bytes, 30 * 40, "{what}");
            assert_eq!(f.received.counts.unique, 30, "{what}");
            assert_eq!(f.received.counts.forged, 0, "{what}");
            if meter == MeterMode::Rtt {
                assert_eq!(f.rtt_received, Some(30), "{what}");
            }
        }
    }
    let mut p =
        wirebench_engine::SessionPlan::new("127.0.0.1", vec![flow(Transport::Udp, Forward)]);
    p.port = rx.port;
    p.auth_probes = true;
    let e = wirebench_engine::run(p).unwrap_err().to_string();
    assert!(e.contains("--auth probes") && e.contains("key"), "{e}");
}

/// Item 3, the receiver's side of `--auth probes`: a receiver told to
/// require probe MACs refuses a sender that proves the key but would send
/// untagged probes (the refusal names the receiver's flag and the sender's),
/// opens nothing for it, and serves one that MACs its probes. Requiring
/// MACs without a key is refused at bind.
#[test]
fn receiver_can_require_probe_macs() {
    let no_key = Daemon::bind(DaemonConfig {
        bind: Some("127.0.0.1".parse().unwrap()),
        port: 15723,
        require_probe_auth: true,
        ..DaemonConfig::default()
    });
    let e = no_key.err().expect("no key, no required MACs").to_string();
    assert!(e.contains("key"), "{e}");
    let rx = Rx::start_with(DaemonConfig {
        port: 15723,
        key: Some(key(KEY)),
        require_probe_auth: true,
        ..DaemonConfig::default()
    });
    let plan = |auth_probes| {
        let mut p = keyed_plan(rx.port, Some(KEY));
        p.auth_probes = auth_probes;
        p
    };
    let e = wirebench_engine::run(plan(false)).unwrap_err().to_string();
    assert!(
        e.contains("recv --require-auth probes") && e.contains("--auth probes"),
        "{e}"
    );
    assert_eq!(rx.stats.auth_failed.load(Ordering::Relaxed), 1);
    assert_eq!(rx.stats.sessions_started.load(Ordering::Relaxed), 0);
    let doc = wirebench_engine::run(plan(true)).unwrap();
    assert!(!doc.partial);
    let f = &doc.flows[0];
    assert_eq!(f.received.counts.unique, 30);
    assert_eq!(f.received.counts.forged, 0);
    assert_eq!(rx.stats.sessions_started.load(Ordering::Relaxed), 1);
}

/// Item 5, teardown: at `Stop` every flow's receive thread is told to stop
/// before any is joined, so a session of 200 TCP flows (a thread each,
/// each looking at its stop flag every 50 ms) ends in about one look.
/// Joined one by one, each join waits for that thread's next look: 200 ×
/// ~25 ms = ~5 s (256 flows once took 10 s, near the sender's deadline).
#[test]
fn teardown_of_many_flows_is_parallel() {
    let rx = Rx::start(15724);
    let n: u16 = 200;
    let flows = (1..=n)
        .map(|flow_id| FlowSetup {
            flow_id,
            transport: Transport::Tcp,
            ..udp_flow(None)
        })
        .collect();
    let mut c = Client::connect(rx.port);
    match c.hello(0x5ec0_0124, MeterMode::Owd, flows) {
        ControlMsg::Ready { ports, .. } => assert_eq!(ports.len(), usize::from(n)),
        other => panic!("{other:?}"),
    }
    c.send(&ControlMsg::Start);
    let t = std::time::Instant::now();
    c.send(&ControlMsg::Stop {
        linger_ms: 0,
        sent: vec![0; usize::from(n)],
    });
    let reported = match c.recv() {
        ControlMsg::Report { flows, .. } => flows.len(),
        other => panic!("expected Report, got {other:?}"),
    };
    let took = t.elapsed();
    c.send(&ControlMsg::Bye);
    assert_eq!(reported, usize::from(n));
    assert!(
        took < Duration::from_millis(2500),
        "Stop to Report took {took:?}"
    );
}

/// Issue #9 item 5: a session's sockets, socket buffers and threads are
/// budgeted per session and in total. A Hello over a per-session budget
/// is refused naming it; one within is served; two sessions share the
/// total, and what a session held is given back when it ends.
#[test]
fn budgets_refuse_over_budget_hellos_and_share_the_total() {
    use wirebench_engine::budget::{Budgets, Resources};
    let rx = Rx::start_with(DaemonConfig {
        port: 15721,
        budgets: Budgets {
            // Control connection + 3 UDP flows per session; 7 sockets in all.
            session: Resources {
                sockets: 4,
                buffer_bytes: 64 << 20,
                threads: 100,
            },
            total: Resources {
                sockets: 7,
                buffer_bytes: 1 << 30,
                threads: 100,
            },
        },
        // The totals are tested here, with every session from one address.
        peer_share_pct: 100,
        ..DaemonConfig::default()
    });
    let udp = |n: u16, rcvbuf: Option<u32>| -> Vec<FlowSetup> {
        (1..=n)
            .map(|id| FlowSetup {
                flow_id: id,
                rcvbuf,
                ..udp_flow(None)
            })
            .collect()
    };
    let refused = |flows: Vec<FlowSetup>| {
        let mut c = Client::connect(rx.port);
        error_text(c.hello(1, MeterMode::Owd, flows))
    };
    let e = refused(udp(4, None));
    assert!(
        e.contains("5 sockets") && e.contains("--session-sockets"),
        "{e}"
    );
    // Two flows at the per-flow maximum (64 MiB each: an ask above it gets it).
    let e = refused(udp(2, Some(1 << 30)));
    assert!(
        e.contains("bytes of socket buffers") && e.contains("--session-buffers"),
        "{e}"
    );
    // Threads: the session's own, and one per TCP flow (or UDP worker).
    let one_thread = Rx::start_with(DaemonConfig {
        port: 15722,
        budgets: Budgets {
            session: Resources {
                threads: 1,
                ..Budgets::default().session
            },
            ..Budgets::default()
        },
        ..DaemonConfig::default()
    });
    let tcp = FlowSetup {
        transport: Transport::Tcp,
        ..udp_flow(None)
    };
    let mut c = Client::connect(one_thread.port);
    let e = error_text(c.hello(1, MeterMode::Owd, vec![tcp]));
    assert!(
        e.contains("2 threads") && e.contains("--session-threads"),
        "{e}"
    );
    // Within budget: served. Three UDP flows share the 64 MiB.
    let mut a = Client::connect(rx.port);
    assert!(matches!(
        a.hello(0xa, MeterMode::Owd, udp(3, None)),
        ControlMsg::Ready { .. }
    ));
    // A second session would pass the total: refused while the first runs.
    let e = refused(udp(3, None));
    assert!(
        e.contains("receiver busy")
            && e.contains("hold 4 of the 7")
            && e.contains("--total-sockets"),
        "{e}"
    );
    // What is left of the total still serves a smaller session.
    let mut b = Client::connect(rx.port);
    assert!(matches!(
        b.hello(0xb, MeterMode::Owd, udp(2, None)),
        ControlMsg::Ready { .. }
    ));
    // The first session ends: its share is given back.
    a.send(&ControlMsg::Start);
    a.send(&ControlMsg::Stop {
        linger_ms: 0,
        sent: vec![0; 3],
    });
    assert!(matches!(a.recv(), ControlMsg::Report { .. }));
    a.send(&ControlMsg::Bye);
    let t0 = std::time::Instant::now();
    loop {
        let mut c = Client::connect(rx.port);
        match c.hello(0xc, MeterMode::Owd, udp(3, None)) {
            ControlMsg::Ready { .. } => break,
            other => assert!(
                t0.elapsed() < Duration::from_secs(3),
                "not given back: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(b);
    assert!(rx.stats.refused.load(Ordering::Relaxed) >= 3);
}

#[test]
fn one_sender_cannot_hold_the_whole_receiver() {
    // 7 sockets in all; one peer may hold half (3): a session of 2 UDP
    // flows (3 sockets) fits once, a second from the same address does not.
    use wirebench_engine::budget::{Budgets, Resources};
    let rx = Rx::start_with(DaemonConfig {
        port: 15724,
        budgets: Budgets {
            total: Resources {
                sockets: 7,
                ..Budgets::default().total
            },
            ..Budgets::default()
        },
        ..DaemonConfig::default()
    });
    let two = || {
        (1..=2)
            .map(|id| FlowSetup {
                flow_id: id,
                ..udp_flow(None)
            })
            .collect::<Vec<_>>()
    };
    let mut a = Client::connect(rx.port);
    assert!(matches!(
        a.hello(0x81, MeterMode::Owd, two()),
        ControlMsg::Ready { .. }
    ));
    let mut b = Client::connect(rx.port);
    let e = error_text(b.hello(0x82, MeterMode::Owd, two()));
    assert!(
        e.contains("this sender's share") && e.contains("--peer-share 50 %"),
        "{e}"
    );
}

#[test]
fn huge_rcvbuf_hellos_cannot_hold_the_receivers_budget() {
    // Default budgets: 1 GiB per session, 2 GiB in all.
    let rx = Rx::start_with(DaemonConfig {
        port: 15723,
        ..DaemonConfig::default()
    });
    let greedy = |sid: u32| {
        let mut c = Client::connect(rx.port);
        let flow = FlowSetup {
            rcvbuf: Some(1 << 30),
            ..udp_flow(None)
        };
        let m = c.hello(sid, MeterMode::Owd, vec![flow]);
        assert!(matches!(m, ControlMsg::Ready { .. }), "{m:?}");
        c
    };
    // Two sessions ask 2^30 each and stay connected...
    let (_a, _b) = (greedy(0x71), greedy(0x72));
    // ... and an ordinary sender is still served, at once.
    let mut c = Client::connect(rx.port);
    let m = c.hello(0x73, MeterMode::Owd, vec![udp_flow(None)]);
    assert!(matches!(m, ControlMsg::Ready { .. }), "{m:?}");
}

/// How a session of [`forged_first_datagram_cannot_take_a_flow`] is
/// authenticated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum AuthMode {
    NoKey,
    KeyOnly,
    ProbeMacs,
    /// The receiver runs `--require-auth probes`.
    RequiredMacs,
}

/// Opens a one-flow UDP session in `mode` whose data socket `from` is
/// declared in the Hello (None: as an older sender, declaring nothing);
/// returns the data port and, with probe MACs, the probe key.
fn open_declared(
    c: &mut Client,
    mode: AuthMode,
    sid: u32,
    meter: MeterMode,
    from: Option<u16>,
) -> (u16, Option<auth::ProbeKey>) {
    let cn = [7u8; NONCE_LEN];
    let macs = matches!(mode, AuthMode::ProbeMacs | AuthMode::RequiredMacs);
    c.send(&ControlMsg::Hello {
        version: CONTROL_VERSION,
        session: sid,
        meter,
        flows: vec![FlowSetup {
            src_port: from,
            ..udp_flow(None)
        }],
        auth: (mode != AuthMode::NoKey).then(|| auth::to_hex(&cn)),
        live: false,
        auth_probes: macs,
        log_name: None,
        xdp: false,
    });
    let mut pk = None;
    if mode != AuthMode::NoKey {
        let sn = match c.recv() {
            ControlMsg::Challenge { nonce, .. } => auth::from_hex("nonce", &nonce).unwrap(),
            other => panic!("{mode:?}: {other:?}"),
        };
        c.send(&ControlMsg::Auth {
            mac: auth::to_hex(&key(KEY).sender_mac(&cn, &sn, sid)),
        });
        pk = macs.then(|| key(KEY).probe_key(&cn, &sn, sid));
    }
    match c.recv() {
        ControlMsg::Ready { ports, .. } => (ports[0], pk),
        other => panic!("{mode:?}: {other:?}"),
    }
}

/// Issue #30 item 1: the receiver took a flow's source port from the first
/// datagram of the session from the sender's address, before the MAC and
/// the plausibility checks: one 40-byte datagram with the right session
/// id, no MAC, a plausible sequence number and time, from another port of
/// the sender's address before the first real probe, and 1000 of 1000
/// real probes were counted foreign (999 without probe MACs, the forgery
/// recorded as packet 0). In every authentication mode and with both
/// meters the real flow is now measured whole and the forgery counted
/// forged or foreign, never reflected.
#[test]
fn forged_first_datagram_cannot_take_a_flow() {
    let modes = [
        (AuthMode::NoKey, 15750),
        (AuthMode::KeyOnly, 15751),
        (AuthMode::ProbeMacs, 15752),
        (AuthMode::RequiredMacs, 15753),
    ];
    for (mode, rx_port) in modes {
        let rx = Rx::start_with(DaemonConfig {
            port: rx_port,
            key: (mode != AuthMode::NoKey).then(|| key(KEY)),
            require_probe_auth: mode == AuthMode::RequiredMacs,
            ..DaemonConfig::default()
        });
        for (k, meter) in [MeterMode::Owd, MeterMode::Rtt].into_iter().enumerate() {
            let sid = 0x5ec3_0000 + rx_port as u32 * 2 + k as u32;
            let real = UdpSocket::bind("127.0.0.1:0").unwrap();
            real.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let declared = real.local_addr().unwrap().port();
            let mut c = Client::connect(rx.port);
            let (port, pk) = open_declared(&mut c, mode, sid, meter, Some(declared));
            let data: SocketAddr = ([127, 0, 0, 1], port).into();
            let flags = if meter == MeterMode::Rtt { FLAG_RTT } else { 0 };
            // The attacker: same address, another port, the session id
            // and a plausible first probe, before the sender's first.
            let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
            attacker
                .set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            attacker.send_to(&probe(sid, 0, flags, 40), data).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            c.send(&ControlMsg::Start);
            let mut buf = [0u8; 256];
            let mut reflected = 0;
            for seq in 0..1000 {
                let mut b = probe(sid, seq, flags, 64);
                if let Some(pk) = &pk {
                    assert!(pk.sign(&mut b));
                }
                real.send_to(&b, data).unwrap();
                if meter == MeterMode::Rtt {
                    let (n, _) = real.recv_from(&mut buf).unwrap();
                    let r = ProbeHeader::decode_datagram(&buf[..n]).unwrap();
                    assert!(r.is_reflected() && r.seq == seq, "{mode:?} {meter:?}");
                    reflected += 1;
                } else if seq % 100 == 99 {
                    // Stay within the socket buffer on a busy host.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            assert!(
                attacker.recv_from(&mut buf).is_err(),
                "{mode:?} {meter:?}: the forgery was reflected"
            );
            let f = c.stop(1000);
            let what = format!("{mode:?} {meter:?}: {f}");
            assert_eq!(f["summary"]["unique"], 1000, "{what}");
            assert_eq!(f["summary"]["lost"], 0, "{what}");
            assert_eq!(f["summary"]["duplicates"], 0, "{what}");
            let refused = f["forged"].as_u64().unwrap() + f["foreign"].as_u64().unwrap();
            assert_eq!(refused, 1, "{what}");
            assert_eq!(f["from"], format!("127.0.0.1:{declared}"), "{what}");
            if meter == MeterMode::Rtt {
                assert_eq!(reflected, 1000, "{what}");
            }
        }
    }
}

/// Issue #30 item 1, an older sender that declares no source port: the
/// port is learned only from a datagram that passed every check. A
/// forgery from another port whose time is implausible, or (with probe
/// MACs) whose MAC does not verify, teaches nothing; the real flow is
/// measured whole.
#[test]
fn undeclared_source_is_learned_only_from_a_datagram_that_passes_every_check() {
    for (mode, rx_port) in [(AuthMode::NoKey, 15754), (AuthMode::ProbeMacs, 15755)] {
        let rx = Rx::start_with(DaemonConfig {
            port: rx_port,
            key: (mode != AuthMode::NoKey).then(|| key(KEY)),
            ..DaemonConfig::default()
        });
        let sid = 0x5ec3_1000 + rx_port as u32;
        let mut c = Client::connect(rx.port);
        let (port, pk) = open_declared(&mut c, mode, sid, MeterMode::Owd, None);
        let data: SocketAddr = ([127, 0, 0, 1], port).into();
        let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Without MACs: a day-old transmit time; with them: no MAC.
        let forged = match mode {
            AuthMode::NoKey => probe_full(sid, 0, 0, 40, now_ns() - 86_400_000_000_000),
            _ => probe(sid, 0, 0, 40),
        };
        attacker.send_to(&forged, data).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        c.send(&ControlMsg::Start);
        let real = UdpSocket::bind("127.0.0.1:0").unwrap();
        for seq in 0..200 {
            let mut b = probe(sid, seq, 0, 64);
            if let Some(pk) = &pk {
                assert!(pk.sign(&mut b));
            }
            real.send_to(&b, data).unwrap();
        }
        // From a third port once the flow is registered: foreign.
        attacker.send_to(&probe(sid, 5, 0, 64), data).unwrap();
        let f = c.stop(200);
        let what = format!("{mode:?}: {f}");
        assert_eq!(f["summary"]["unique"], 200, "{what}");
        assert_eq!(f["summary"]["lost"], 0, "{what}");
        let refused = f["forged"].as_u64().unwrap()
            + f["foreign"].as_u64().unwrap()
            + f["implausible_delays"].as_u64().unwrap();
        assert_eq!(refused, 2, "{what}");
        let from = real.local_addr().unwrap();
        assert_eq!(f["from"], from.to_string(), "{what}");
    }
}

/// A receiver's report of flow 1 of 30 sent: `unique` taken and
/// `foreign` datagrams counted on its port.
fn report_of(unique: u64, foreign: u64) -> String {
    let mut r = wirebench_engine::result::FlowReport {
        flow_id: 1,
        foreign,
        ..Default::default()
    };
    r.summary.counts.unique = unique;
    r.summary.counts.packets = unique;
    r.summary.counts.lost = Some(30 - unique);
    ControlMsg::Report {
        flows: vec![r],
        extra: Default::default(),
    }
    .to_line()
}

/// Issue #30 item 1, the sender's side: a flow that (almost) nothing of
/// reached the measurement while the receiver counted foreign datagrams
/// on its port was held by someone else (an older receiver that let a
/// forgery take it, a NAT that moved the port): `send` said 100 % loss and
/// exited 0. Now the run is partial, saying so; a plain 100 % loss with
/// nothing foreign is still a measurement.
#[test]
fn a_flow_taken_over_is_not_a_measurement() {
    let h = hostile_receiver(15756, |m| match m {
        ControlMsg::Stop { .. } => Some(report_of(0, 30)),
        _ => honest_time(m),
    });
    match run_against(15756) {
        Err(wirebench_engine::EngineError::Partial { reason, doc }) => {
            assert!(reason.contains("something else held it"), "{reason}");
            assert!(reason.contains("--auth probes"), "{reason}");
            assert!(doc.partial);
        }
        other => panic!(
            "a taken-over flow was a result: {:?}",
            other.map(|d| d.partial)
        ),
    }
    h.join().unwrap();
    let h = hostile_receiver(15757, |m| match m {
        ControlMsg::Stop { .. } => Some(report_of(0, 0)),
        _ => honest_time(m),
    });
    let doc = run_against(15757).unwrap();
    assert!(!doc.partial);
    assert_eq!(doc.flows[0].received.counts.lost, Some(30));
    h.join().unwrap();
}

/// Issue #30 item 1 for reverse flows: the daemon learned where to send a
/// reverse UDP flow from the first hello of the sender's address, from
/// any port. Now, without probe MACs, only a hello from the port the
/// sender declared counts; with them, a hello carrying a valid MAC counts
/// from any port (a NAT may move it) and an unsigned one from another
/// port does not. The forger's port gets nothing, the sender all 30.
#[test]
fn reverse_flows_go_only_where_the_declared_or_authentic_hello_came_from() {
    for (mode, rx_port) in [(AuthMode::NoKey, 15758), (AuthMode::ProbeMacs, 15759)] {
        let rx = Rx::start_with(DaemonConfig {
            port: rx_port,
            key: (mode != AuthMode::NoKey).then(|| key(KEY)),
            ..DaemonConfig::default()
        });
        let sid = 0x5ec3_2000 + rx_port as u32;
        let me = UdpSocket::bind("127.0.0.1:0").unwrap();
        // With MACs the sender is behind a "NAT": it declared a port its
        // hello does not come from.
        let declared = match mode {
            AuthMode::NoKey => me.local_addr().unwrap().port(),
            _ => 9,
        };
        let model = serde_json::json!({
            "spec": wirebench_model::FlowSpec::constant(1000.0, 100).unwrap(),
            "stop": wirebench_engine::Stop::Packets(30),
            "seed": 1,
        });
        let cn = [5u8; NONCE_LEN];
        let mut c = Client::connect(rx.port);
        c.send(&ControlMsg::Hello {
            version: CONTROL_VERSION,
            session: sid,
            meter: MeterMode::Owd,
            flows: vec![FlowSetup {
                reverse: Some(model),
                src_port: Some(declared),
                ..udp_flow(None)
            }],
            auth: (mode != AuthMode::NoKey).then(|| auth::to_hex(&cn)),
            live: false,
            auth_probes: mode != AuthMode::NoKey,
            log_name: None,
            xdp: false,
        });
        let mut pk = None;
        if mode != AuthMode::NoKey {
            let sn = match c.recv() {
                ControlMsg::Challenge { nonce, .. } => auth::from_hex("nonce", &nonce).unwrap(),
                other => panic!("{other:?}"),
            };
            c.send(&ControlMsg::Auth {
                mac: auth::to_hex(&key(KEY).sender_mac(&cn, &sn, sid)),
            });
            pk = Some(key(KEY).probe_key(&cn, &sn, sid));
        }
        let data = match c.recv() {
            ControlMsg::Ready {
                ports,
                reverse: true,
                ..
            } => ports[0],
            other => panic!("{mode:?}: {other:?}"),
        };
        let hello = |from: &UdpSocket, key: Option<&auth::ProbeKey>| {
            let mut b = [0u8; 40];
            ProbeHeader {
                flags: FLAG_HELLO,
                session: sid,
                flow: 1,
                len: 40,
                seq: 0,
                tx_ns: 0,
            }
            .encode(&mut b)
            .unwrap();
            if let Some(k) = key {
                assert!(k.sign(&mut b));
            }
            from.send_to(&b, ("127.0.0.1", data)).unwrap();
        };
        // The forger: the sender's address, another port, first.
        let forger = UdpSocket::bind("127.0.0.1:0").unwrap();
        hello(&forger, None);
        std::thread::sleep(Duration::from_millis(50));
        hello(&me, pk.as_ref());
        c.send(&ControlMsg::Start);
        me.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 256];
        for _ in 0..30 {
            let (n, _) = me
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("{mode:?}: the sender got nothing: {e}"));
            let h = ProbeHeader::decode_datagram(&buf[..n]).unwrap();
            assert_eq!((h.session, h.flow), (sid, 1), "{mode:?}");
        }
        forger
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        assert!(
            forger.recv_from(&mut buf).is_err(),
            "{mode:?}: the forger got data"
        );
        c.send(&ControlMsg::Stop {
            linger_ms: 0,
            sent: vec![0],
        });
        loop {
            match c.recv() {
                ControlMsg::Report { flows, .. } => {
                    assert_eq!(flows[0].sent.as_ref().unwrap().packets, 30, "{mode:?}");
                    break;
                }
                ControlMsg::ReverseDone | ControlMsg::TimeResp { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        c.send(&ControlMsg::Bye);
    }
}

/// Issue #30 item 2: 64 slow-writing control connections from 8
/// addresses (8 each, every per-address limit respected) took all 64
/// handshake slots, and every sender was refused ("64 connections are in
/// their handshake"), key or not. Now a newcomer from a lighter address
/// takes the oldest place of the heaviest one: a legitimate sender is
/// served within 1 s. And writing a byte every 300 ms does not extend the
/// 5 s handshake deadline: every slow connection is closed by 6.5 s.
#[test]
fn slow_connections_from_a_few_addresses_cannot_lock_out_a_sender() {
    for (keyed, port) in [(false, 15765), (true, 15766)] {
        let rx = Rx::start_with(DaemonConfig {
            port,
            key: keyed.then(|| key(KEY)),
            ..DaemonConfig::default()
        });
        let t_slow = std::time::Instant::now();
        let mut slow: Vec<TcpStream> = (0..64)
            .map(|i| connect_raw(port, &format!("127.0.0.{}", 20 + i % 8)))
            .collect();
        // All 64 handshake slots are held.
        let writer = {
            let mut streams: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                while t.elapsed() < Duration::from_millis(6_500) {
                    for s in &mut streams {
                        let _ = s.write_all(b" ");
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        let t0 = std::time::Instant::now();
        let mut c = Client::connect(rx.port);
        let sid = 0x5ec3_3000 + port as u32;
        let ready = if keyed {
            let cn = [3u8; NONCE_LEN];
            let sn = challenge(&mut c, sid, &cn).unwrap();
            c.send(&ControlMsg::Auth {
                mac: auth::to_hex(&key(KEY).sender_mac(&cn, &sn, sid)),
            });
            c.recv()
        } else {
            c.hello(sid, MeterMode::Owd, vec![udp_flow(None)])
        };
        let waited = t0.elapsed();
        assert!(
            matches!(ready, ControlMsg::Ready { .. }),
            "keyed {keyed}: {ready:?}"
        );
        assert!(waited < Duration::from_secs(1), "keyed {keyed}: {waited:?}");
        c.send(&ControlMsg::Start);
        let f = c.stop(0);
        assert_eq!(f["summary"]["unique"], 0, "{f}");
        writer.join().unwrap();
        // Every slow connection is closed by now, however it kept writing.
        assert!(t_slow.elapsed() < Duration::from_millis(7_500));
        for (i, s) in slow.iter_mut().enumerate() {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            let mut buf = [0u8; 256];
            let closed = loop {
                match std::io::Read::read(s, &mut buf) {
                    Ok(0) => break true,
                    // An error line for some ("not a wirebench session").
                    Ok(_) => {}
                    Err(e) => break e.kind() == std::io::ErrorKind::ConnectionReset,
                }
            };
            assert!(closed, "keyed {keyed}: slow connection {i} still open");
        }
    }
}
