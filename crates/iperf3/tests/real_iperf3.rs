//! The server against the real iperf3 client (Debian's iperf3, installed by
//! scripts/setup): every case starts its own server on a port of its own
//! and its own iperf3 processes, and reads iperf3's JSON.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wirebench_engine::budget::{Budgets, Ledger};
use wirebench_engine::gate::{Gate, GateLimits};
use wirebench_iperf3::server::{Server, ServerConfig, ServerStats};

/// The cases run one at a time: on a 2-core host, iperf3 processes of
/// parallel cases starve each other's receive loops and drop datagrams.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    port: u16,
    stats: Arc<ServerStats>,
    dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(port: u16, allow: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new(GateLimits {
        max_sessions: 8,
        sessions_per_peer: 4,
        max_pending: 16,
        pending_per_peer: 16,
        allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
    });
    let server = Server::bind(
        ServerConfig {
            bind: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port,
            verbose: true,
            results_dir: Some(dir.path().to_path_buf()),
            max_session: Duration::from_secs(30),
        },
        gate,
        Ledger::new(Budgets::default()),
    )
    .unwrap();
    let stats = server.stats();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let thread = std::thread::spawn(move || server.serve_until(&s2).unwrap());
    Running {
        stop,
        thread: Some(thread),
        port,
        stats,
        dir,
    }
}

/// Runs the real iperf3 client; its exit status and JSON (or stderr).
fn iperf3(port: u16, args: &[&str]) -> (bool, serde_json::Value, String) {
    let out = Command::new("timeout")
        .arg("20")
        .arg("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-J"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("iperf3 is installed (scripts/setup)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    (out.status.success(), v, text)
}

fn sum(v: &serde_json::Value, key: &str, field: &str) -> u64 {
    v["end"][key][field].as_u64().unwrap_or(0)
}

/// The sessions the server counts as completed once it has `n` (their
/// documents stored), or after 10 s: the client exits as soon as it
/// has the results, a moment before the server has written them down.
fn completed(r: &Running, n: u64) -> u64 {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let c = r.stats.sessions_completed.load(Ordering::Relaxed);
        if c >= n || std::time::Instant::now() > end {
            return c;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn docs(r: &Running) -> Vec<serde_json::Value> {
    std::fs::read_dir(r.dir.path())
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect()
}

#[test]
fn tcp_udp_reverse_and_bidir_clients_get_every_byte() {
    let _one = one_at_a_time();
    let r = serve(15_291, &[]);
    let (ok, v, t) = iperf3(r.port, &["-t", "1"]);
    assert!(ok, "{t}");
    let (s, rx) = (
        sum(&v, "sum_sent", "bytes"),
        sum(&v, "sum_received", "bytes"),
    );
    assert!(s > 0 && rx == s, "TCP: sent {s}, server received {rx}");

    let (ok, v, t) = iperf3(
        r.port,
        &["-t", "1", "-u", "-b", "20M", "-l", "1000", "-P", "2"],
    );
    assert!(ok, "{t}");
    assert!(sum(&v, "sum", "packets") >= 2 * 2400, "{}", v["end"]["sum"]);
    assert_eq!(sum(&v, "sum", "lost_packets"), 0, "{}", v["end"]["sum"]);

    let (ok, v, t) = iperf3(r.port, &["-t", "1", "-R"]);
    assert!(ok, "{t}");
    let (s, rx) = (
        sum(&v, "sum_sent", "bytes"),
        sum(&v, "sum_received", "bytes"),
    );
    assert!(
        s > 0 && rx as f64 >= s as f64 * 0.999,
        "-R: we sent {s}, client got {rx}"
    );

    let (ok, v, t) = iperf3(
        r.port,
        &["-t", "1", "-u", "--bidir", "-b", "5M", "-l", "500"],
    );
    assert!(ok, "{t}");
    assert_eq!(sum(&v, "sum_received_bidir_reverse", "lost_packets"), 0);
    assert!(
        sum(&v, "sum_received_bidir_reverse", "packets") > 1000,
        "{}",
        v["end"]
    );

    // Each session is a result document; the UDP one has delays from
    // iperf3's stamps (same host: small and positive) and its jitter.
    assert_eq!(completed(&r, 4), 4);
    let d = docs(&r);
    assert_eq!(d.len(), 4);
    let udp = d
        .iter()
        .find(|d| {
            d["flows"][0]["transport"] == "udp"
                && d["flows"].as_array().unwrap().len() == 2
                && d["flows"][1]["direction"] == "forward"
        })
        .expect("the -P 2 UDP session's document");
    for f in udp["flows"].as_array().unwrap() {
        let delay = f["delay_s"]["mean"].as_f64().unwrap();
        assert!(delay > 0.0 && delay < 0.05, "mean delay {delay}");
        assert_eq!(f["received"]["lost"], 0);
        assert!(f["received"]["unique"].as_u64().unwrap() >= 2400);
    }
    assert_eq!(completed(&r, 4), 4);
}

#[test]
fn several_clients_at_once() {
    let _one = one_at_a_time();
    let r = serve(15_292, &[]);
    let hs: Vec<_> = (0..3)
        .map(|i| {
            let port = r.port;
            std::thread::spawn(move || {
                let args: &[&str] = if i == 0 {
                    &["-t", "2"]
                } else {
                    &["-t", "2", "-u", "-b", "10M", "-l", "1200"]
                };
                iperf3(port, args)
            })
        })
        .collect();
    for h in hs {
        let (ok, v, t) = h.join().unwrap();
        assert!(ok, "{t}");
        assert_eq!(sum(&v, "sum", "lost_packets"), 0);
    }
    assert_eq!(completed(&r, 3), 3);
}

#[test]
fn sctp_and_addresses_outside_allow_are_refused() {
    let _one = one_at_a_time();
    let r = serve(15_293, &[]);
    let (_, v, _) = iperf3(r.port, &["-t", "1", "--sctp"]);
    assert!(
        v["error"].as_str().unwrap_or("").contains("SCTP"),
        "iperf3 says why: {v}"
    );
    drop(r);
    let r = serve(15_294, &["192.0.2.0/24"]);
    // iperf3 -J can exit 0 after an error; its JSON says.
    let (ok, v, _) = iperf3(r.port, &["-t", "1"]);
    assert!(
        !ok || v["error"].is_string(),
        "127.0.0.1 is outside --allow: {v}"
    );
    assert_eq!(r.stats.sessions_started.load(Ordering::Relaxed), 0);
    assert!(r.stats.refused.load(Ordering::Relaxed) >= 1);
}

/// A real `iperf3 -s` on `port`, killed when dropped.
struct IperfServer(std::process::Child);

impl IperfServer {
    fn start(port: u16) -> IperfServer {
        let c = Command::new("iperf3")
            .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 is installed (scripts/setup)");
        // Until it listens (the port is then taken; a probe connection
        // would be a test to it).
        for _ in 0..100 {
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        IperfServer(c)
    }
}

impl Drop for IperfServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn flow(
    idt: wirebench_model::IdtModel,
    bytes: u32,
    ms: u64,
    seed: u64,
) -> wirebench_engine::FlowPlan {
    wirebench_engine::FlowPlan {
        spec: wirebench_model::FlowSpec::new(idt, wirebench_model::SizeModel::Constant { bytes })
            .unwrap(),
        transport: wirebench_wire::Transport::Udp,
        stop: wirebench_engine::Stop::DurationMs(ms),
        seed,
        opts: Default::default(),
        direction: wirebench_wire::Direction::Forward,
        meter: None,
    }
}

fn exponential(mean_ms: f64) -> wirebench_model::IdtModel {
    wirebench_model::IdtModel::Random(wirebench_model::dist::Dist::Exponential { mean: mean_ms })
}

/// `flows` sent to a real `iperf3 -s` of its own on `port` (a server per
/// run: iperf3 refuses a client while it is still finishing the previous
/// test).
fn run(
    port: u16,
    flows: Vec<wirebench_engine::FlowPlan>,
) -> (
    wirebench_engine::ResultDoc,
    wirebench_iperf3::client::ServerView,
) {
    let _srv = IperfServer::start(port);
    let mut plan = wirebench_engine::SessionPlan::new("127.0.0.1", flows);
    plan.port = port;
    plan.linger_ms = 300;
    let addr = plan.resolve().unwrap();
    wirebench_iperf3::client::run(&plan, addr, None).unwrap()
}

#[test]
fn models_sent_to_a_real_iperf3_server_are_counted_by_it() {
    let _one = one_at_a_time();
    // The acceptance case, shortened: 1000 pps x 512 B.
    let (doc, view) = run(
        15_296,
        vec![flow(
            wirebench_model::IdtModel::Constant { pps: 1000.0 },
            512,
            1000,
            1,
        )],
    );
    let f = &doc.flows[0];
    assert_eq!(f.sent.packets, 1000);
    assert_eq!(f.received.counts.packets, 1000, "the server's count");
    assert_eq!(f.received.counts.bytes, 512_000);
    assert_eq!(view.packets_received, 1000);
    assert!(f.jitter_s.rfc3550 > 0.0 && f.jitter_s.rfc3550 < 0.01);
    // Two Poisson flows (2 ms mean gap: about 500 each), two streams.
    let (doc, _) = run(
        15_297,
        vec![
            flow(exponential(2.0), 200, 1000, 2),
            flow(exponential(2.0), 200, 1000, 3),
        ],
    );
    for f in &doc.flows {
        assert!((400..600).contains(&f.sent.packets), "{}", f.sent.packets);
        assert_eq!(f.received.counts.packets, f.sent.packets);
        assert_eq!(f.received.counts.lost, Some(0));
    }
}

#[test]
fn what_an_iperf3_server_cannot_take_is_bad_input() {
    let mut plan = wirebench_engine::SessionPlan::new(
        "127.0.0.1",
        vec![flow(
            wirebench_model::IdtModel::Constant { pps: 10.0 },
            100,
            100,
            1,
        )],
    );
    plan.meter = wirebench_wire::MeterMode::Rtt;
    let e = wirebench_iperf3::client::check(&plan).unwrap_err();
    assert!(e.is_bad_input() && e.to_string().contains("-m rtt"), "{e}");
}

fn reversed(mut f: wirebench_engine::FlowPlan) -> wirebench_engine::FlowPlan {
    f.direction = wirebench_wire::Direction::Reverse;
    f
}

#[test]
fn reverse_and_bidir_streams_of_a_real_iperf3_server_are_measured_here() {
    let _one = one_at_a_time();
    let constant = |pps| wirebench_model::IdtModel::Constant { pps };
    // -R, UDP: the server sends 1000 pps x 500 B (4 Mbit/s) for 1 s.
    let (doc, _) = run(15_298, vec![reversed(flow(constant(1000.0), 500, 1000, 1))]);
    let f = &doc.flows[0];
    assert_eq!(f.direction, wirebench_wire::Direction::Reverse);
    assert!(
        (800..1200).contains(&f.sent.packets),
        "the server's count: {}",
        f.sent.packets
    );
    assert_eq!(
        f.received.counts.unique, f.sent.packets,
        "loopback loses nothing"
    );
    assert_eq!(f.received.counts.lost, Some(0));
    assert_eq!(f.received.counts.bytes, f.sent.bytes);
    // One host, one clock: the delays are true one-way delays.
    assert!(
        f.delay_s.min > 0.0 && f.delay_s.max < 0.5,
        "{:?}",
        f.delay_s
    );
    assert!(
        f.sent.duration_s > 0.5,
        "the server's span: {}",
        f.sent.duration_s
    );
    assert!(doc.total.delay_mean_s > 0.0 && doc.total.delay_mean_s <= f.delay_s.max);
    assert!(
        doc.clock.method.starts_with("unknown"),
        "{}",
        doc.clock.method
    );
    assert!(!doc.clock.applied);
    // --bidir, UDP: ours forward, the server's back, 500 pps x 400 B each.
    let fw = flow(constant(500.0), 400, 1000, 2);
    let (doc, view) = run(15_299, vec![fw.clone(), reversed(fw)]);
    let (f, r) = (&doc.flows[0], &doc.flows[1]);
    assert_eq!(f.direction, wirebench_wire::Direction::Forward);
    assert_eq!(f.sent.packets, 500);
    assert_eq!(f.received.counts.packets, 500, "the server's count");
    assert_eq!(view.packets_received, 500);
    assert_eq!(r.direction, wirebench_wire::Direction::Reverse);
    assert!(r.sent.packets > 300, "{}", r.sent.packets);
    assert_eq!(r.received.counts.unique, r.sent.packets);
    assert!(r.delay_s.max > 0.0 && r.delay_s.max < 0.5);
    assert!(doc.clock.method.starts_with("forward flows: none"));
    // -R, TCP, unpaced: every byte the server wrote is read here.
    let mut t = flow(wirebench_model::IdtModel::Max, 8192, 1000, 3);
    t.transport = wirebench_wire::Transport::Tcp;
    let (doc, _) = run(15_300, vec![reversed(t)]);
    let f = &doc.flows[0];
    assert!(f.sent.bytes > 1_000_000, "{}", f.sent.bytes);
    assert_eq!(f.received.counts.bytes, f.sent.bytes);
    assert!(f.throughput_bps.payload > 8e6);
}

#[test]
fn what_an_iperf3_server_cannot_send_is_bad_input() {
    let check = |flows| {
        let plan = wirebench_engine::SessionPlan::new("127.0.0.1", flows);
        wirebench_iperf3::client::check(&plan)
            .err()
            .filter(|e| e.is_bad_input())
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let c = || {
        flow(
            wirebench_model::IdtModel::Constant { pps: 10.0 },
            100,
            1000,
            1,
        )
    };
    let e = check(vec![reversed(flow(exponential(2.0), 100, 1000, 1))]);
    assert!(e.contains("-C PPS"), "{e}");
    let mut z = reversed(c());
    z.stop = wirebench_engine::Stop::Packets(10);
    assert!(check(vec![z]).contains("-t MS"));
    let e = check(vec![c(), c(), reversed(c())]);
    assert!(e.contains("as many forward as reverse"), "{e}");
    let mut other = reversed(c());
    other.spec.size = wirebench_model::SizeModel::Constant { bytes: 200 };
    let e = check(vec![reversed(c()), other]);
    assert!(e.contains("same rate, size and duration"), "{e}");
}
