//! `wirebench exporter`: a Prometheus exporter in the blackbox_exporter
//! pattern. `/probe?target=HOST[:PORT]&module=NAME` runs one short
//! measurement against a `wirebench recv` and answers its figures in the
//! Prometheus text format (base units); `/metrics` gives the exporter's own
//! counters. A small std HTTP/1.0-style server: one request per
//! connection, bounded request size and time, bounded concurrent probes.

use super::prom::{family, gauge, read_request, respond, rows, Request};
use crate::exit::bad_input;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wirebench_engine::plan::{FlowPlan, Hooks, SessionPlan, Stop};
use wirebench_engine::result::ResultDoc;
use wirebench_model::{dist::Dist, FlowSpec, IdtModel, SizeModel};
use wirebench_wire::{Direction, MeterMode, Transport};

#[derive(clap::Args)]
#[command(after_help = "\
Prometheus scrapes /probe with the target and module as URL parameters, as
for blackbox_exporter:

  scrape_configs:
    - job_name: wirebench
      metrics_path: /probe
      params: {module: [default]}
      static_configs: [{targets: ['192.0.2.7:5400']}]
      relabel_configs:
        - {source_labels: [__address__], target_label: __param_target}
        - {source_labels: [__param_target], target_label: instance}
        - {target_label: __address__, replacement: 127.0.0.1:9505}

Each probe is one wirebench session against the `wirebench recv` at the
target, cut to fit Prometheus' scrape timeout (the
X-Prometheus-Scrape-Timeout-Seconds header). A failed probe answers
wirebench_probe_success 0 and logs why on stderr. Metrics, the modules file
and the Grafana dashboard: docs/exporter.md.

Examples:
  wirebench exporter --listen 127.0.0.1:9505
  wirebench exporter --listen [::]:9505 --config modules.toml --max-probes 8
  curl 'http://127.0.0.1:9505/probe?target=192.0.2.7&module=voip'")]
pub struct Args {
    /// Address and port to serve HTTP on.
    #[arg(
        long = "listen",
        value_name = "ADDR:PORT",
        default_value = "127.0.0.1:9505"
    )]
    pub listen: String,
    /// Modules file (TOML): one table per module with model, rate_pps,
    /// payload_bytes, duration_ms, transport, meter, port, key_file. Without
    /// it, one module "default" (constant 100 pps x 512 B UDP for 1 s, owd).
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Probes running at once; more are answered 503 with
    /// wirebench_probe_success 0.
    #[arg(long = "max-probes", value_name = "N", default_value_t = 4)]
    pub max_probes: usize,
}

/// One probe module (a table of the modules file).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Module {
    /// "constant" or "poisson" inter-departure times.
    model: String,
    rate_pps: f64,
    payload_bytes: u32,
    duration_ms: u64,
    transport: String,
    meter: String,
    /// The receiver's control port when the target names none.
    port: u16,
    /// Pre-shared key file for a receiver that requires one.
    key_file: Option<PathBuf>,
}

impl Default for Module {
    fn default() -> Self {
        Module {
            model: "constant".into(),
            rate_pps: 100.0,
            payload_bytes: 512,
            duration_ms: 1000,
            transport: "udp".into(),
            meter: "owd".into(),
            port: wirebench_engine::DEFAULT_PORT,
            key_file: None,
        }
    }
}

/// A module checked once at start-up.
struct Ready {
    spec: FlowSpec,
    transport: Transport,
    meter: MeterMode,
    duration_ms: u64,
    port: u16,
    key: Option<wirebench_engine::Key>,
}

fn ready(name: &str, m: &Module) -> anyhow::Result<Ready> {
    let field = |f: &str, e: String| bad_input(format!("module {name:?}, {f}: {e}"));
    if !(m.rate_pps > 0.0 && m.rate_pps <= 1e6) {
        return Err(field(
            "rate_pps",
            format!("{} is not in (0, 1e6]", m.rate_pps),
        ));
    }
    let idt = match m.model.to_ascii_lowercase().as_str() {
        "constant" => IdtModel::Constant { pps: m.rate_pps },
        "poisson" => IdtModel::Random(Dist::Exponential {
            mean: 1000.0 / m.rate_pps,
        }),
        other => {
            return Err(field(
                "model",
                format!("{other:?}: expected constant or poisson"),
            ))
        }
    };
    let spec = FlowSpec::new(
        idt,
        SizeModel::Constant {
            bytes: m.payload_bytes,
        },
    )
    .map_err(|e| field("payload_bytes", e.to_string()))?;
    let transport = match m.transport.to_ascii_lowercase().as_str() {
        "udp" => Transport::Udp,
        "tcp" => Transport::Tcp,
        other => {
            return Err(field(
                "transport",
                format!("{other:?}: expected udp or tcp"),
            ))
        }
    };
    let meter = match m.meter.to_ascii_lowercase().as_str() {
        "owd" => MeterMode::Owd,
        "rtt" => MeterMode::Rtt,
        other => return Err(field("meter", format!("{other:?}: expected owd or rtt"))),
    };
    if m.duration_ms == 0 || m.duration_ms > 60_000 {
        return Err(field(
            "duration_ms",
            format!("{} is not in 1..=60000", m.duration_ms),
        ));
    }
    if m.port == 0 {
        return Err(field("port", "must be 1..65535".into()));
    }
    let key = match &m.key_file {
        Some(p) => crate::key::load(Some(p))?,
        None => None,
    };
    Ok(Ready {
        spec,
        transport,
        meter,
        duration_ms: m.duration_ms,
        port: m.port,
        key,
    })
}

/// Counters for `/metrics`.
#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    probes_ok: AtomicU64,
    probes_failed: AtomicU64,
    probes_refused: AtomicU64,
    bad_requests: AtomicU64,
    in_flight: AtomicUsize,
}

/// Cancel flags a probe's plan can point at (`Hooks::cancel` wants
/// a `'static`): one per concurrent probe slot, reused.
static CANCEL: [AtomicBool; MAX_SLOTS] = [const { AtomicBool::new(false) }; MAX_SLOTS];
const MAX_SLOTS: usize = 64;

struct Exporter {
    modules: BTreeMap<String, Ready>,
    counters: Counters,
    slots: std::sync::Mutex<Vec<usize>>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.max_probes == 0 || args.max_probes > MAX_SLOTS {
        return Err(bad_input(format!(
            "--max-probes: {} is not in 1..={MAX_SLOTS}",
            args.max_probes
        )));
    }
    let table: BTreeMap<String, Module> = match &args.config {
        None => BTreeMap::from([("default".to_string(), Module::default())]),
        Some(p) => {
            let text =
                wirebench_input::read_text(p).map_err(|e| bad_input(format!("--config: {e}")))?;
            toml::from_str(&text)
                .map_err(|e| bad_input(format!("--config {}: {e}", p.display())))?
        }
    };
    if table.is_empty() {
        return Err(bad_input("--config: no module in the file"));
    }
    let mut modules = BTreeMap::new();
    for (name, m) in &table {
        modules.insert(name.clone(), ready(name, m)?);
    }
    let listen: SocketAddr = args
        .listen
        .parse()
        .map_err(|_| bad_input(format!("--listen: not ADDR:PORT: {}", args.listen)))?;
    let listener =
        TcpListener::bind(listen).map_err(|e| bad_input(format!("--listen {listen}: {e}")))?;
    let ex = Arc::new(Exporter {
        modules,
        counters: Counters::default(),
        slots: std::sync::Mutex::new((0..args.max_probes).collect()),
    });
    eprintln!(
        "wirebench exporter: listening on {listen}; modules: {}",
        ex.modules.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    super::prom::serve(listener, "wb-exporter", move |stream| {
        let _ = handle(stream, &ex);
    });
    Ok(())
}

fn handle(stream: TcpStream, ex: &Exporter) -> std::io::Result<()> {
    ex.counters.requests.fetch_add(1, Ordering::Relaxed);
    let Some(req) = read_request(&stream) else {
        ex.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return respond(&stream, "400 Bad Request", "only GET requests are served\n");
    };
    match req.path.as_str() {
        "/metrics" => respond(&stream, "200 OK", &own_metrics(ex)),
        "/probe" => {
            let (status, body) = probe(&req, ex);
            respond(&stream, status, &body)
        }
        "/" => respond(
            &stream,
            "200 OK",
            "wirebench exporter: /probe?target=HOST[:PORT]&module=NAME, /metrics\n",
        ),
        _ => respond(&stream, "404 Not Found", "not found\n"),
    }
}

fn own_metrics(ex: &Exporter) -> String {
    let c = &ex.counters;
    let mut o = String::new();
    let mut m = |name: &str, kind: &str, help: &str, rows: &[(&str, u64)]| {
        let rows: Vec<(&str, f64)> = rows.iter().map(|&(l, v)| (l, v as f64)).collect();
        family(&mut o, name, kind, help, &rows);
    };
    m(
        "wirebench_exporter_http_requests_total",
        "counter",
        "HTTP requests received.",
        &[("", c.requests.load(Ordering::Relaxed))],
    );
    m(
        "wirebench_exporter_probes_total",
        "counter",
        "Probes by outcome: success, failure, refused (too many at once); bad_request counts any request that was not a GET, or named an unknown module or a bad target.",
        &[
            ("{result=\"success\"}", c.probes_ok.load(Ordering::Relaxed)),
            ("{result=\"failure\"}", c.probes_failed.load(Ordering::Relaxed)),
            ("{result=\"refused\"}", c.probes_refused.load(Ordering::Relaxed)),
            ("{result=\"bad_request\"}", c.bad_requests.load(Ordering::Relaxed)),
        ],
    );
    m(
        "wirebench_exporter_probes_in_flight",
        "gauge",
        "Probes running now.",
        &[("", c.in_flight.load(Ordering::Relaxed) as u64)],
    );
    o
}

/// Prometheus' default scrape timeout, when the header is missing.
const DEFAULT_TIMEOUT_S: f64 = 10.0;
/// Kept free of the scrape timeout for the answer to travel.
const ANSWER_MARGIN_S: f64 = 0.3;
/// Linger of a probe's receiver after the flow: short, the flow is short.
const PROBE_LINGER_MS: u64 = 100;
/// What a session costs besides its flow (handshake, clock offset
/// exchange, report), set aside from the timeout.
const SESSION_OVERHEAD_S: f64 = 0.5;

fn probe(req: &Request, ex: &Exporter) -> (&'static str, String) {
    let failed = |why: String| {
        eprintln!("wirebench exporter: probe failed: {why}");
        probe_failure()
    };
    let name = req.query.get("module").map_or("default", String::as_str);
    let Some(module) = ex.modules.get(name) else {
        ex.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return ("400 Bad Request", format!("unknown module {name:?}\n"));
    };
    let Some(target) = req.query.get("target").filter(|t| !t.is_empty()) else {
        ex.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return ("400 Bad Request", "target parameter is missing\n".into());
    };
    let Some((host, port)) = split_target(target, module.port) else {
        ex.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return (
            "400 Bad Request",
            format!("target {target:?}: not HOST[:PORT]\n"),
        );
    };
    let Some(slot) = ex.slots.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
        ex.counters.probes_refused.fetch_add(1, Ordering::Relaxed);
        eprintln!("wirebench exporter: probe of {target} refused: too many probes at once");
        return ("503 Service Unavailable", probe_failure());
    };
    ex.counters.in_flight.fetch_add(1, Ordering::Relaxed);
    let timeout = req.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
    let budget_s = timeout - ANSWER_MARGIN_S - SESSION_OVERHEAD_S - PROBE_LINGER_MS as f64 / 1e3;
    let duration_ms = (module.duration_ms as f64).min(budget_s * 1e3).floor();
    let t0 = Instant::now();
    let result = if duration_ms < 50.0 {
        Err(format!(
            "scrape timeout {timeout} s leaves no time for a measurement (needs about {:.1} s)",
            ANSWER_MARGIN_S + SESSION_OVERHEAD_S + 0.15
        ))
    } else {
        CANCEL[slot].store(false, Ordering::Relaxed);
        let mut plan = SessionPlan::new(
            host.clone(),
            vec![FlowPlan {
                spec: module.spec.clone(),
                transport: module.transport,
                stop: Stop::DurationMs(duration_ms as u64),
                seed: rand_seed(),
                opts: Default::default(),
                direction: Direction::Forward,
                meter: None,
            }],
        );
        plan.port = port;
        plan.meter = module.meter;
        plan.linger_ms = PROBE_LINGER_MS;
        plan.key = module.key.clone();
        plan.command = Some(format!("wirebench exporter probe {target} module {name}"));
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("wb-probe".into())
            .spawn(move || {
                let mut hooks = Hooks::default();
                hooks.cancel = Some(&CANCEL[slot]);
                let run = plan
                    .check()
                    .and_then(|p| wirebench_engine::run_checked(p, hooks));
                let _ = tx.send(run);
            });
        let wait = Duration::from_secs_f64((timeout - ANSWER_MARGIN_S).max(0.05));
        match spawned.map_err(|e| e.to_string()) {
            Err(e) => Err(format!("cannot start the probe: {e}")),
            Ok(_) => match rx.recv_timeout(wait) {
                Ok(Ok(doc)) => Ok(doc),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => {
                    // Stops its flow; the session ends on its own.
                    CANCEL[slot].store(true, Ordering::Relaxed);
                    Err(format!("no result within the scrape timeout ({timeout} s)"))
                }
            },
        }
    };
    ex.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    ex.slots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(slot);
    match result {
        Ok(doc) => {
            ex.counters.probes_ok.fetch_add(1, Ordering::Relaxed);
            ("200 OK", probe_metrics(&doc, t0.elapsed().as_secs_f64()))
        }
        Err(why) => {
            ex.counters.probes_failed.fetch_add(1, Ordering::Relaxed);
            ("200 OK", failed(format!("{target} (module {name}): {why}")))
        }
    }
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// HOST, HOST:PORT, [V6] or [V6]:PORT.
fn split_target(t: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = t.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok().filter(|&p| p != 0)?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match t.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((h, _)) if h.contains(':') => Some((t.to_string(), default_port)),
        Some((h, p)) => Some((h.to_string(), p.parse().ok().filter(|&p| p != 0)?)),
        None => Some((t.to_string(), default_port)),
    }
}

fn probe_failure() -> String {
    let mut o = String::new();
    gauge(
        &mut o,
        "wirebench_probe_success",
        "Whether the probe measured (1) or failed (0).",
        &[("", 0.0)],
    );
    o
}

/// The probe's figures, base units, one series per flow direction.
fn probe_metrics(doc: &ResultDoc, took_s: f64) -> String {
    let mut o = String::new();
    gauge(
        &mut o,
        "wirebench_probe_success",
        "Whether the probe measured (1) or failed (0).",
        &[("", 1.0)],
    );
    gauge(
        &mut o,
        "wirebench_probe_duration_seconds",
        "How long the probe took.",
        &[("", took_s)],
    );
    let dir = |d: Direction| match d {
        Direction::Forward => "forward",
        Direction::Reverse => "reverse",
    };
    let mut tput = Vec::new();
    let mut owd = Vec::new();
    let mut rtt = Vec::new();
    let mut jitter = Vec::new();
    let mut loss = Vec::new();
    let mut pk = Vec::new();
    for f in &doc.flows {
        let d = dir(f.direction);
        for (layer, v) in [
            ("payload", f.throughput_bps.payload),
            ("ip", f.throughput_bps.ip),
            ("ethernet", f.throughput_bps.ethernet),
            ("wire", f.throughput_bps.wire),
        ] {
            tput.push((format!("{{direction=\"{d}\",layer=\"{layer}\"}}"), v));
        }
        let quantiles = |s: &wirebench_stats::DelayStats| {
            [
                ("0", s.min),
                ("0.5", s.p50),
                ("0.9", s.p90),
                ("0.99", s.p99),
                ("0.999", s.p999),
                ("1", s.max),
            ]
        };
        if doc.meter == MeterMode::Owd {
            for (q, v) in quantiles(&f.delay_s) {
                owd.push((format!("{{direction=\"{d}\",quantile=\"{q}\"}}"), v));
            }
        }
        if let Some(r) = &f.rtt_s {
            for (q, v) in quantiles(r) {
                rtt.push((format!("{{direction=\"{d}\",quantile=\"{q}\"}}"), v));
            }
        }
        for (def, v) in [
            ("rfc3550", f.jitter_s.rfc3550),
            ("mean_abs_ipdv", f.jitter_s.mean_abs_ipdv),
            ("pdv_p999", f.jitter_s.pdv_p999),
        ] {
            jitter.push((format!("{{direction=\"{d}\",definition=\"{def}\"}}"), v));
        }
        loss.push((
            format!("{{direction=\"{d}\"}}"),
            f.received.counts.loss_ratio.unwrap_or(f64::NAN),
        ));
        pk.push((
            format!("{{direction=\"{d}\",what=\"sent\"}}"),
            f.sent.packets as f64,
        ));
        pk.push((
            format!("{{direction=\"{d}\",what=\"received\"}}"),
            f.received.counts.unique as f64,
        ));
        pk.push((
            format!("{{direction=\"{d}\",what=\"lost\"}}"),
            f.received.counts.lost.map_or(f64::NAN, |l| l as f64),
        ));
    }
    gauge(
        &mut o,
        "wirebench_throughput_bits_per_second",
        "Received throughput per layer (payload, ip, ethernet, wire).",
        &rows(&tput),
    );
    if !owd.is_empty() {
        gauge(&mut o, "wirebench_one_way_delay_seconds", "One-way delay quantiles (clock offset corrected when measurable; see wirebench_clock_offset_seconds).", &rows(&owd));
    }
    if !rtt.is_empty() {
        gauge(
            &mut o,
            "wirebench_rtt_seconds",
            "Round-trip time quantiles (the receiver's dwell time excluded).",
            &rows(&rtt),
        );
    }
    gauge(
        &mut o,
        "wirebench_jitter_seconds",
        "Jitter by definition: RFC 3550, mean |IPDV| (D-ITG), PDV = p99.9 - min delay (RFC 5481).",
        &rows(&jitter),
    );
    gauge(
        &mut o,
        "wirebench_loss_ratio",
        "Lost packets over packets sent (RFC 7680).",
        &rows(&loss),
    );
    gauge(
        &mut o,
        "wirebench_packets",
        "Packets sent, received and lost in the probe.",
        &rows(&pk),
    );
    gauge(
        &mut o,
        "wirebench_clock_offset_seconds",
        "Receiver clock minus sender clock as measured, and its error bound.",
        &[
            ("{what=\"offset\"}", doc.clock.offset_s),
            ("{what=\"error\"}", doc.clock.error_s),
        ],
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(split_target("h", 5400), Some(("h".into(), 5400)));
        assert_eq!(split_target("h:6000", 5400), Some(("h".into(), 6000)));
        assert_eq!(split_target("[::1]:7", 5400), Some(("::1".into(), 7)));
        assert_eq!(split_target("::1", 5400), Some(("::1".into(), 5400)));
        assert_eq!(split_target("h:0", 5400), None);
        assert_eq!(split_target("[::1]x", 5400), None);
    }

    #[test]
    fn modules_are_checked_naming_the_field() {
        let m = Module {
            model: "pareto".into(),
            ..Module::default()
        };
        let e = ready("x", &m)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("module \"x\", model"), "{e}");
        let m = Module {
            rate_pps: 0.0,
            ..Module::default()
        };
        assert!(ready("x", &m).is_err());
        assert!(ready("default", &Module::default()).is_ok());
    }

    #[test]
    fn failure_is_probe_success_zero() {
        assert_eq!(
            probe_failure(),
            "# HELP wirebench_probe_success Whether the probe measured (1) or failed (0).\n# TYPE wirebench_probe_success gauge\nwirebench_probe_success 0\n"
        );
    }
}
