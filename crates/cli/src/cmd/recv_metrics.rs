//! `wirebench recv --metrics ADDR:PORT`: the receiver's own counters at
//! `/metrics` in the Prometheus text format (base units), so a monitoring
//! team can see sessions, flows, packets, foreign traffic and the budgets
//! in use of a receiver it already scrapes. Read-only: nothing here can
//! change what the daemon does.

use super::prom::{family, read_request, respond, rows};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wirebench_engine::budget::Ledger;
use wirebench_engine::{Cidr, DaemonStats};
use wirebench_iperf3::server::ServerStats;

/// What `/metrics` reads.
pub struct Sources {
    /// The wirebench daemon's counters.
    pub daemon: Arc<DaemonStats>,
    /// The budget ledger that wirebench and iperf3 sessions share.
    pub ledger: Arc<Ledger>,
    /// The iperf3 server's counters, with `--iperf3`.
    pub iperf3: Option<Arc<ServerStats>>,
    /// `--allow`: scrapers from elsewhere are closed without an answer.
    pub allow: Vec<Cidr>,
}

/// Binds `addr` and serves `/metrics` on a thread of its own.
pub fn start(addr: SocketAddr, src: Sources) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    let src = Arc::new(src);
    std::thread::Builder::new()
        .name("wb-recv-metrics".into())
        .spawn(move || {
            super::prom::serve(listener, "wb-recv-metrics", move |s| answer(s, &src));
        })?;
    Ok(local)
}

fn answer(stream: TcpStream, src: &Sources) {
    if !src.allow.is_empty() {
        let ok = stream.peer_addr().is_ok_and(|p| {
            let ip = match p.ip() {
                std::net::IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
                v4 => v4,
            };
            src.allow.iter().any(|c| c.contains(ip))
        });
        if !ok {
            return;
        }
    }
    let _ = match read_request(&stream) {
        None => respond(&stream, "400 Bad Request", "only GET requests are served\n"),
        Some(r) if r.path == "/metrics" => respond(&stream, "200 OK", &render(src)),
        Some(_) => respond(&stream, "404 Not Found", "wirebench recv serves /metrics\n"),
    };
}

/// The text of one scrape.
pub fn render(src: &Sources) -> String {
    let d = &src.daemon;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    let mut sessions = vec![
        (
            "{protocol=\"wirebench\",result=\"completed\"}".to_string(),
            ld(&d.sessions_completed),
        ),
        (
            "{protocol=\"wirebench\",result=\"failed\"}".to_string(),
            ld(&d.sessions_failed),
        ),
    ];
    let mut started = vec![(
        "{protocol=\"wirebench\"}".to_string(),
        ld(&d.sessions_started),
    )];
    let mut flows = vec![("{protocol=\"wirebench\"}".to_string(), ld(&d.flows))];
    let mut packets = vec![(
        "{protocol=\"wirebench\"}".to_string(),
        ld(&d.packets_received),
    )];
    let mut foreign = vec![
        (
            "{protocol=\"wirebench\",what=\"control_connection\"}".to_string(),
            ld(&d.foreign_control),
        ),
        (
            "{protocol=\"wirebench\",what=\"data_packet\"}".to_string(),
            ld(&d.foreign_packets),
        ),
    ];
    let mut refused = vec![
        (
            "{protocol=\"wirebench\",reason=\"allow_or_slots\"}".to_string(),
            ld(&d.refused),
        ),
        (
            "{protocol=\"wirebench\",reason=\"authentication\"}".to_string(),
            ld(&d.auth_failed),
        ),
    ];
    if let Some(i) = &src.iperf3 {
        sessions.push((
            "{protocol=\"iperf3\",result=\"completed\"}".into(),
            ld(&i.sessions_completed),
        ));
        sessions.push((
            "{protocol=\"iperf3\",result=\"failed\"}".into(),
            ld(&i.sessions_failed),
        ));
        started.push(("{protocol=\"iperf3\"}".into(), ld(&i.sessions_started)));
        flows.push(("{protocol=\"iperf3\"}".into(), ld(&i.streams)));
        packets.push(("{protocol=\"iperf3\"}".into(), ld(&i.datagrams_received)));
        foreign.push((
            "{protocol=\"iperf3\",what=\"connection_or_datagram\"}".into(),
            ld(&i.foreign),
        ));
        refused.push((
            "{protocol=\"iperf3\",reason=\"allow_slots_budget_or_unsupported\"}".into(),
            ld(&i.refused),
        ));
    }
    let mut o = String::new();
    family(
        &mut o,
        "wirebench_recv_sessions_started_total",
        "counter",
        "Sessions admitted (wirebench: reached Ready; iperf3: took a slot).",
        &rows(&started),
    );
    family(
        &mut o,
        "wirebench_recv_sessions_total",
        "counter",
        "Sessions that ended, by result.",
        &rows(&sessions),
    );
    family(
        &mut o,
        "wirebench_recv_sessions_active",
        "gauge",
        "wirebench sessions running now.",
        &[("", d.active.load(Ordering::Relaxed) as f64)],
    );
    family(
        &mut o,
        "wirebench_recv_flows_total",
        "counter",
        "Flows of the sessions started (iperf3: streams of the sessions that ran to their end).",
        &rows(&flows),
    );
    family(
        &mut o,
        "wirebench_recv_packets_received_total",
        "counter",
        "Data packets received (UDP datagrams, TCP records; iperf3: UDP datagrams), counted when a session ends.",
        &rows(&packets),
    );
    family(
        &mut o,
        "wirebench_recv_foreign_total",
        "counter",
        "Traffic that was not a session's: control connections and data packets of no flow.",
        &rows(&foreign),
    );
    family(
        &mut o,
        "wirebench_recv_refused_total",
        "counter",
        "Connections or sessions refused, by reason.",
        &rows(&refused),
    );
    let used = src.ledger.used();
    let total = src.ledger.budgets().total;
    for (name, help, u, t) in [
        (
            "wirebench_recv_budget_sockets",
            "Sockets held by running sessions (in_use) and the total budget (limit).",
            used.sockets,
            total.sockets,
        ),
        (
            "wirebench_recv_budget_threads",
            "Threads held by running sessions (in_use) and the total budget (limit).",
            used.threads,
            total.threads,
        ),
        (
            "wirebench_recv_budget_buffer_bytes",
            "Socket-buffer bytes held by running sessions (in_use) and the total budget (limit).",
            used.buffer_bytes,
            total.buffer_bytes,
        ),
    ] {
        family(
            &mut o,
            name,
            "gauge",
            help,
            &[
                ("{state=\"in_use\"}", u as f64),
                ("{state=\"limit\"}", t as f64),
            ],
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_carry_the_counters_and_budgets() {
        let daemon = Arc::new(DaemonStats::default());
        daemon.flows.store(3, Ordering::Relaxed);
        daemon.packets_received.store(2000, Ordering::Relaxed);
        let ledger = Ledger::new(wirebench_engine::budget::Budgets::default());
        let grant = ledger.reserve(wirebench_engine::budget::Resources {
            sockets: 2,
            buffer_bytes: 1 << 20,
            threads: 1,
        });
        assert!(grant.is_ok());
        let iperf3 = Arc::new(ServerStats::default());
        iperf3.datagrams_received.store(7, Ordering::Relaxed);
        let text = render(&Sources {
            daemon,
            ledger: ledger.clone(),
            iperf3: Some(iperf3),
            allow: Vec::new(),
        });
        for line in [
            "wirebench_recv_flows_total{protocol=\"wirebench\"} 3",
            "wirebench_recv_packets_received_total{protocol=\"wirebench\"} 2000",
            "wirebench_recv_packets_received_total{protocol=\"iperf3\"} 7",
            "wirebench_recv_budget_sockets{state=\"in_use\"} 2",
            "wirebench_recv_budget_buffer_bytes{state=\"in_use\"} 1048576",
            "# TYPE wirebench_recv_sessions_active gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        drop(grant);
        let text = render(&Sources {
            daemon: Arc::new(DaemonStats::default()),
            ledger,
            iperf3: None,
            allow: Vec::new(),
        });
        assert!(text.contains("wirebench_recv_budget_sockets{state=\"in_use\"} 0\n"));
        assert!(!text.contains("protocol=\"iperf3\""), "{text}");
    }
}
