//! In-process sessions over loopback: the library API the campaign layer
//! uses (`Daemon::bind`/`serve_until`, `send::run`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wirebench_engine::plan::{Family, FlowPlan, SessionPlan, Stop};
use wirebench_engine::{Daemon, DaemonConfig};
use wirebench_model::FlowSpec;
use wirebench_wire::{MeterMode, Transport};

fn daemon(port: u16) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let d = Daemon::bind(DaemonConfig {
        bind: None,
        port,
        verbose: true,
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || d.serve_until(&s).unwrap());
    (stop, h)
}

fn plan(dest: &str, port: u16, flows: Vec<FlowPlan>) -> SessionPlan {
    let mut p = SessionPlan::new(dest, flows);
    p.port = port;
    p.linger_ms = 300;
    p
}

fn udp(pps: f64, size: u32, stop: Stop, seed: u64) -> FlowPlan {
    FlowPlan {
        spec: FlowSpec::constant(pps, size).unwrap(),
        transport: Transport::Udp,
        stop,
        seed,
    }
}

#[test]
fn two_udp_flows_v4_and_a_v6_session_after() {
    let port = 15411;
    let (stop, h) = daemon(port);
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
    assert_eq!(f.sent.packets, 1000);
    assert_eq!(f.received.unique, 1000);
    assert_eq!(f.received.lost, 0);
    assert!(
        f.delay_s.min >= 0.0 && f.delay_s.max < 0.05,
        "{:?}",
        f.delay_s
    );
    assert_eq!(doc.flows[1].sent.packets, 123);
    assert_eq!(doc.flows[1].received.unique, 123);

    let mut p = plan("::1", port, vec![udp(1000.0, 64, Stop::KBytes(10), 3)]);
    p.family = Family::V6;
    p.meter = MeterMode::Rtt;
    let doc = wirebench_engine::run(p).unwrap();
    let f = &doc.flows[0];
    assert_eq!(f.ip_version, 6);
    assert_eq!(f.sent.bytes, 10 * 1024);
    assert_eq!(f.received.bytes, 10 * 1024);
    let rtt = f.rtt_s.unwrap();
    assert!(rtt.min > 0.0 && rtt.max < 0.01, "{rtt:?}");
    assert_eq!(f.rtt_received, Some(f.sent.packets));
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
}
