//! `wirebench send`: builds a session plan from the command line (or a
//! script), runs it with `wirebench_engine::send::run`, and prints an
//! ITGDec-like summary or the `wirebench.result/1` JSON document.

use crate::exit::bad_input;
use anyhow::Context;
use signal_hook::consts::SIGINT;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};
use wirebench_engine::plan::{
    CheckedPlan, Family, FlowPlan, Hooks, Pacing, Phases, SessionPlan, Stop,
};
use wirebench_engine::result::{FlowResult, MarksSeen, ResultDoc, SockOpts};
use wirebench_engine::EngineError;
use wirebench_model::script::FlowDirection;
use wirebench_wire::{Direction, MeterMode, Transport};

use super::flowargs::{FlowArgs, SockArgs};
use super::live::{LivePrinter, Mode};
use wirebench_engine::live::Live;

/// `-T`: the workspace's one transport type, parsed by its own `FromStr`
/// (any case: D-ITG scripts write `-T UDP`).
fn parse_transport(s: &str) -> Result<Transport, String> {
    s.parse()
}

fn parse_meter(s: &str) -> Result<MeterMode, String> {
    s.parse()
}

#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  wirebench recv                                  # on the receiver
  wirebench send -a 192.0.2.7 -C 1000 -c 512 -t 10000
  wirebench send -a ::1 -T tcp --max -t 5000 --json result.json
  wirebench send -a rx -m rtt -C 50 -c 200 -z 500 --interval 1000
  wirebench send -a rx --flows 4 -C 2000 -c 1200 -k 1024
  wirebench send flows.ditg -l send.log -x recv.log   # ITGSend's spelling works too

D-ITG: ITGSend's options are accepted in its own spelling (-sa, -rp, -Ft,
-Fp, VoIP -x CODEC, -i, -Sdp, ...), rewritten to wirebench's; what cannot
map (-L/-X ITGLog, -H passive mode, -T SCTP/DCCP, ...) exits 2 saying why.
The full table: docs/options.md.

Stop conditions (one of): -t MS (default 10000), -z PACKETS, -k KBYTES (1 KB = 1024 B);
with -z and -k the flow generates exactly that many packets / bytes.
Exit status: 0 success, 1 measurement failed (receiver gone; a partial result is
still printed, marked \"partial\": true), 2 bad usage or input.")]
pub struct Args {
    /// Receiver host name or address (where `wirebench recv` runs).
    #[arg(short = 'a', value_name = "DEST")]
    pub dest: Option<String>,
    /// Receiver's control port (TCP); default 5400, or 5201 with --iperf3.
    #[arg(short = 'p', value_name = "PORT")]
    pub port: Option<u16>,
    /// DEST runs an unmodified iperf3 server (`iperf3 -s`), not wirebench:
    /// the flows (any model: -C, -E, --app voip, ...) go to it as iperf3
    /// streams with iperf3's UDP header, and the summary shows what that
    /// server measured (datagrams and bytes received, loss, RFC 3550
    /// jitter) beside wirebench's send figures; it reports no per-packet
    /// delay. With -R or --bidir the server sends constant streams (-C or
    /// --rate, -c, -t), measured here per datagram from its own send stamps
    /// (clock offset unknown). One transport per run. See docs/iperf3.md.
    #[arg(long = "iperf3")]
    pub iperf3: bool,
    /// Use IPv4 only when DEST resolves to both families.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Transport: UDP datagrams, or TCP records (each record framed by the
    /// probe header's length, so every record has a delay), or ICMP echo
    /// requests (D-ITG's -T ICMP): answered by DEST's own IP stack, so NO
    /// receiver daemon is needed; paced by the same models (-C, -c, -E, ...),
    /// round trip per echo. Needs a ping socket (the group within
    /// net.ipv4.ping_group_range) or root (raw socket); Linux only. Options
    /// that need a receiver (-R, --bidir, -m owd, --key-file, -l) are refused.
    /// Default: UDP, or what the application model implies.
    #[arg(short = 'T', value_parser = parse_transport, value_name = "udp|tcp|icmp")]
    pub transport: Option<Transport>,
    /// Meter: one-way delay, measured by the receiver (clocks corrected by
    /// the measured offset), or round trip (the receiver reflects each probe;
    /// its dwell time is excluded). Default: owd; rtt with -T icmp.
    #[arg(short = 'm', value_parser = parse_meter, value_name = "owd|rtt")]
    pub meter: Option<MeterMode>,
    #[command(flatten)]
    pub flow: FlowArgs,
    #[command(flatten)]
    pub sock: SockArgs,
    /// Generate for MS milliseconds (default 10000).
    #[arg(short = 't', value_name = "MS", group = "stop")]
    pub duration_ms: Option<u64>,
    /// Generate exactly PACKETS packets.
    #[arg(short = 'z', value_name = "PACKETS", group = "stop")]
    pub packets: Option<u64>,
    /// Generate exactly KBYTES × 1024 payload bytes (the last packet is shortened to fit).
    #[arg(short = 'k', value_name = "KBYTES", group = "stop")]
    pub kbytes: Option<u64>,
    /// Run N identical flows at once (each its own seed and data port).
    #[arg(long = "flows", value_name = "N", default_value_t = 1)]
    pub flows: u32,
    /// Flows from a file: a D-ITG script (one ITGSend option line per flow)
    /// or a wirebench TOML file with [[flow]] tables. Options a line leaves
    /// out come from the command line.
    #[arg(long = "script", value_name = "FILE", conflicts_with = "flows")]
    pub script: Option<PathBuf>,
    /// Per-interval figures every MS milliseconds (throughput, delay, jitter,
    /// loss; TCP: the sender's cwnd, rtt, retransmits), printed while the run
    /// goes on as the receiver streams them, and kept as a series in the
    /// result document.
    #[arg(long = "interval", value_name = "MS")]
    pub interval_ms: Option<u64>,
    /// Write newline-delimited JSON to stdout while the run goes on (like
    /// iperf3 3.17): {"event":"start"}, one {"event":"interval"} per flow and
    /// interval (every --interval MS, default 1000), and {"event":"end"}
    /// with the whole result document.
    #[arg(long = "json-stream")]
    pub json_stream: bool,
    /// Write the JSON result document to FILE; `-` or no value: to stdout
    /// (instead of the human summary).
    #[arg(long = "json", value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<String>,
    /// Seed of the random models (flow i uses SEED + i); random if not given.
    #[arg(long = "seed", value_name = "N")]
    pub seed: Option<u64>,
    /// After the last packet, how long the receiver keeps listening for
    /// stragglers before counting the missing packets as lost.
    #[arg(long = "linger", value_name = "MS", default_value_t = 2000)]
    pub linger_ms: u64,
    /// VoIP flows: depth of the fixed playout (jitter) buffer the E-model
    /// judges them against, in ms. Packets later than the fastest packet plus
    /// this count as lost; the mouth-to-ear delay includes it.
    #[arg(long = "jitter-buffer", value_name = "MS", default_value_t = wirebench_engine::plan::DEFAULT_JITTER_BUFFER_MS)]
    pub jitter_buffer_ms: u32,
    /// Per-packet log of what this sender sent and could not send (D-ITG's
    /// -l; default ITGSend.log in the current directory); read it with
    /// `wirebench decode FILE`. One file for the whole run, also when a
    /// script's flows go to several receivers (flows numbered as in the
    /// result). The receiver's side: -x, `wirebench recv --log-dir DIR`.
    #[arg(short = 'l', long = "log", value_name = "FILE", num_args = 0..=1, default_missing_value = "ITGSend.log")]
    pub log: Option<PathBuf>,
    /// Ask the receiver to log this run's packets under NAME (D-ITG's -x;
    /// default ITGRecv.log): a plain file name, written into the
    /// receiver's `recv --log-dir` (a receiver without one, or started with
    /// --no-log-names, refuses the run); if NAME is taken there, NAME-1,
    /// NAME-2, ... The name it used is printed and in the result
    /// (receiver.log). Read it with `wirebench decode`.
    #[arg(short = 'x', long = "recv-log", value_name = "NAME", num_args = 0..=1, default_missing_value = "ITGRecv.log")]
    pub recv_log: Option<String>,
    /// Authenticate with the pre-shared key in FILE (mode 600), and require
    /// the receiver to prove the same key. The key may instead be in the
    /// WIREBENCH_KEY environment variable; never give it on the command line.
    #[arg(long = "key-file", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// What the key authenticates: `session` (the handshake only, the
    /// default with a key) or `probes` (also a 16-byte MAC on every probe
    /// and reflection, keyed per session: the receiver counts probes without
    /// a valid one as forged, never as data; probes are at least 40 bytes).
    /// Needs the key (--key-file or WIREBENCH_KEY).
    #[arg(long = "auth", value_name = "session|probes", value_parser = ["session", "probes"])]
    pub auth: Option<String>,
    /// Threads that pace the paced one-way flows: `auto` (a thread per
    /// flow while they are fewer than the CPUs, else CPUs − 1 shared UDP
    /// pacers with a timer heap each and one writer for the TCP flows),
    /// `flow` (a thread per flow, however many), or a number of shared
    /// pacer threads (and as many TCP writers).
    #[arg(long = "pacers", value_name = "auto|flow|N", default_value = "auto", value_parser = parse_pacing)]
    pub pacing: Pacing,
    /// Where the flows start their schedules: `spread` (flow i of n starts
    /// i/n of most of its mean gap late, so that flows of one rate are not
    /// all due at the same instant and a pacer still rests in every gap) or
    /// `aligned` (all at once; to compare with).
    #[arg(long = "phases", value_name = "spread|aligned", default_value = "spread", value_parser = parse_phases)]
    pub phases: Phases,
    /// Reverse (iperf3 -R): the receiver sends the flows and this side
    /// receives and measures them. The receiver sends only to this host's
    /// address on the control connection, to the ports it announces.
    #[arg(short = 'R', long = "reverse", conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once (iperf3 --bidir): every flow runs forward and
    /// reverse, reported as two flows ("direction" in the result).
    #[arg(long = "bidir")]
    pub bidir: bool,
    /// The path's bottleneck link rate (`100mbit`, `1gbit`, bits on the
    /// wire, as `testbed up --rate`). The result then carries the payload
    /// throughput that link allows this traffic (total.upper_bound_bps) and
    /// flags a run that carried more than the link can by more than its
    /// uncertainty (total.above_bound; a warning in the summary).
    #[arg(long = "link-rate", value_name = "RATE", value_parser = parse_link_rate)]
    pub link_rate: Option<u64>,
    /// Send through an AF_XDP socket on IFACE (Linux, root): frames go
    /// straight to the driver's ring, past the socket layer, for small
    /// packets at line rate (`recv --xdp` is the receiving half; a plain
    /// `recv` takes it when asked). Taken for one forward one-way UDP flow
    /// to a neighbour on IFACE within its MTU; otherwise the socket path
    /// runs and the result's host.send_path says why. Frames the driver
    /// refuses (veth: the peer's ring full) count as the sending host's
    /// drops (total.sender_host_drops). `--xdp auto` lets the session find
    /// its interface (the one holding the session's address) and take the
    /// path where it pays: as root, for such a flow at --max or at least
    /// 50000 packets/s, on a link without a shaping qdisc (IPv4 loopback
    /// never: the kernel drops those frames); campaigns and RFC 2544 trials
    /// pass it for their fast UDP runs. Without --xdp the socket path runs.
    /// docs/engine.md, "AF_XDP path".
    #[arg(long = "xdp", value_name = "IFACE|auto", conflicts_with = "no_xdp")]
    pub xdp: Option<String>,
    /// The socket path only (the default; for scripts that want to say so):
    /// no AF_XDP socket here, and the receiver is not asked for its half.
    #[arg(long = "no-xdp")]
    pub no_xdp: bool,
    /// The sending queue of the --xdp interface (Linux). A veth hands
    /// frames to its peer's 256-frame ring; when that is full it holds the
    /// AF_XDP sender back only if it has a qdisc, and with the default
    /// noqueue it drops them (total.sender_host_drops). auto (the
    /// default): a veth whose root is the kernel's noqueue gets a
    /// pfifo_fast root (handle 7762:) for the session, removed at its end,
    /// on Ctrl-C/SIGTERM, and after a SIGKILL by the next `send --xdp` or
    /// --xdp-cleanup on it; any other root is left alone. keep: never.
    /// The result's host.send_path says which. docs/engine.md, "Sending
    /// queue".
    #[arg(long = "xdp-txq", value_name = "WHEN", default_value = "auto")]
    pub xdp_txq: TxqArg,
    /// How the --xdp sender hands frames over. live: live frames, a small
    /// XDP program that BPF_PROG_TEST_RUN runs once per frame and that
    /// stamps each copy of one prebuilt frame (sequence, transmit time
    /// when it ran) and transmits it, no skb and no copy on veth; only
    /// for a --max flood of one payload size without --auth probes, and
    /// only when the interface counts its XDP transmissions and the
    /// receiving end takes XDP frames. ring: the AF_XDP socket's
    /// transmit ring. auto (the default): live where it can, else ring;
    /// host.send_path says which and why. docs/engine.md, "Live frames".
    #[arg(long = "xdp-tx", value_name = "HOW", default_value = "auto")]
    pub xdp_tx: XdpTxArg,
    /// Remove what a killed `send --xdp` or `recv --xdp` left on the --xdp
    /// interface (sending queue, threaded-NAPI setting, a hung one's XDP
    /// program), say what was undone, and exit (as `recv --xdp-cleanup`).
    #[arg(long = "xdp-cleanup", requires = "xdp")]
    pub xdp_cleanup: bool,
}

/// `--xdp-tx`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum XdpTxArg {
    /// Live frames where they can go, else the ring.
    Auto,
    /// The AF_XDP transmit ring.
    Ring,
    /// Live frames (else the ring, saying why).
    Live,
}

/// `--xdp-txq`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum TxqArg {
    /// A session qdisc on a veth whose root is the kernel's noqueue.
    Auto,
    /// Never.
    Keep,
}

fn parse_link_rate(s: &str) -> Result<u64, String> {
    wirebench_testbed::parse_rate(s).map_err(|e| e.to_string())
}

fn parse_phases(s: &str) -> Result<Phases, String> {
    match s {
        "spread" => Ok(Phases::Spread),
        "aligned" => Ok(Phases::Aligned),
        _ => Err(format!("--phases: expected spread or aligned, got {s:?}")),
    }
}

fn parse_pacing(s: &str) -> Result<Pacing, String> {
    match s {
        "auto" => Ok(Pacing::Auto),
        "flow" => Ok(Pacing::PerFlow),
        n => match n.parse::<usize>() {
            Ok(k) if k >= 1 => Ok(Pacing::Shared(k)),
            _ => Err(format!(
                "--pacers: expected auto, flow or a number >= 1, got {s:?}"
            )),
        },
    }
}

/// The sessions of the run: one per receiver (a script may name several).
fn build_plans(args: &Args) -> anyhow::Result<Vec<CheckedPlan>> {
    if args.flows == 0 {
        crate::bail_input!("--flows: must be at least 1");
    }
    if args.port == Some(0) {
        crate::bail_input!("-p: the receiver's control port must be 1..65535");
    }
    let stop = match (args.duration_ms, args.packets, args.kbytes) {
        (Some(ms), _, _) => Stop::DurationMs(ms),
        (_, Some(n), _) => Stop::Packets(n),
        (_, _, Some(k)) => Stop::KBytes(k),
        _ => Stop::DurationMs(10_000),
    };
    let cli_transport = args.transport;
    let cli_opts = args.sock.to_opts();
    let seed = args.seed.unwrap_or_else(rand_seed);
    // ICMP echo flows measure round trips: -m rtt is implied (below), -m owd
    // refused (SessionPlan::check, naming -m).
    let meter = args.meter.unwrap_or_default();
    let dest = args.dest.clone();
    let mut script_meter: Option<MeterMode> = None;
    let mut flows = Vec::new();
    let cli_payload = match &args.flow.payload {
        Some(p) => wirebench_model::Payload::parse("--payload", p).map_err(bad_input)?,
        None => wirebench_model::Payload::Pattern,
    };
    let cli_direction = match (args.reverse, args.bidir) {
        (true, _) => FlowDirection::Reverse,
        (_, true) => FlowDirection::Bidir,
        _ => FlowDirection::Forward,
    };
    if let Some(path) = &args.script {
        let list = wirebench_model::script::load(path).map_err(bad_input)?;
        for (i, sf) in list.into_iter().enumerate() {
            // A line's meter is its flow's own (the receiver reflects only
            // rtt flows); the session's is the command line's.
            if sf.meter.is_some() {
                script_meter = sf.meter;
            }
            let stop = match (sf.duration_ms, sf.packets, sf.kbytes) {
                (Some(ms), _, _) => Stop::DurationMs(ms),
                (_, Some(n), _) => Stop::Packets(n),
                (_, _, Some(k)) => Stop::KBytes(k),
                _ => stop,
            };
            let transport = sf
                .transport
                .or(cli_transport)
                .or(sf.spec.app_transport())
                .unwrap_or(Transport::Udp);
            let mut spec = sf.spec;
            // The command line's -d and --payload for lines without their own.
            if spec.start_delay_ms == 0 {
                spec.start_delay_ms = args.flow.start_delay_ms.unwrap_or(0);
            }
            spec.payload = sf.payload.unwrap_or_else(|| cli_payload.clone());
            flows.push((
                FlowPlan {
                    spec,
                    transport,
                    stop,
                    seed: seed.wrapping_add(i as u64),
                    opts: SockOpts {
                        data_port: sf.port,
                        ..sf.opts
                    }
                    .over(&cli_opts),
                    direction: Direction::Forward,
                    meter: sf.meter,
                },
                sf.direction.unwrap_or(cli_direction),
                // A line's own -a wins: one session per receiver.
                sf.dest.or_else(|| dest.clone()),
            ));
        }
    } else {
        let mut spec = args.flow.to_spec()?;
        spec.start_delay_ms = args.flow.start_delay_ms.unwrap_or(0);
        spec.payload = cli_payload;
        let transport = cli_transport
            .or(spec.app_transport())
            .unwrap_or(Transport::Udp);
        for i in 0..args.flows {
            flows.push((
                FlowPlan {
                    spec: spec.clone(),
                    transport,
                    stop,
                    seed: seed.wrapping_add(u64::from(i)),
                    opts: cli_opts.clone(),
                    direction: Direction::Forward,
                    meter: None,
                },
                cli_direction,
                dest.clone(),
            ));
        }
    }
    if args.flows > 1 && (cli_opts.cport.is_some() || cli_opts.data_port.is_some()) {
        crate::bail_input!(
            "--cport/--data-port: one port is one flow; give each flow its own in a --script"
        );
    }
    // One session per receiver and source (address, interface: the
    // control connection leaves from the flows' source), in the order
    // they first appear.
    type Group = (
        (String, Option<std::net::IpAddr>, Option<String>),
        Vec<(FlowPlan, FlowDirection)>,
    );
    let mut groups: Vec<Group> = Vec::new();
    for (f, d, to) in flows {
        let Some(to) = to else {
            crate::bail_input!("-a: the receiver's address is required (e.g. -a 192.0.2.7)");
        };
        let key = (to, f.opts.bind, f.opts.bind_dev.clone());
        match groups.iter_mut().find(|(g, _)| *g == key) {
            Some((_, fl)) => fl.push((f, d)),
            None => groups.push((key, vec![(f, d)])),
        }
    }
    if groups.len() > 1 && args.json_stream {
        crate::bail_input!(
            "--json-stream: streams one session's intervals; this script needs {} (one per receiver and source address)",
            groups.len()
        );
    }
    // A session of ICMP echo flows (e.g. script lines with -T ICMP) measures
    // round trips unless a meter was asked for.
    let meter_given = args.meter.is_some() || script_meter.is_some();
    groups
        .into_iter()
        .map(|((to, _, _), fl)| {
            // Without -m, a session whose lines all name one meter has it.
            let first = fl.first().and_then(|(f, _)| f.meter);
            let m = if !meter_given && fl.iter().all(|(f, _)| f.transport == Transport::Icmp) {
                MeterMode::Rtt
            } else if args.meter.is_none()
                && first.is_some()
                && fl.iter().all(|(f, _)| f.meter == first)
            {
                first.unwrap_or(meter)
            } else {
                meter
            };
            session_plan(args, to, directed(fl), m)
        })
        .collect()
}

/// The session with one receiver: its flows and the command line's
/// session-wide options.
fn session_plan(
    args: &Args,
    dest: String,
    flows: Vec<FlowPlan>,
    meter: MeterMode,
) -> anyhow::Result<CheckedPlan> {
    let port = args.port.unwrap_or(if args.iperf3 {
        wirebench_iperf3::DEFAULT_PORT
    } else {
        wirebench_engine::DEFAULT_PORT
    });
    let mut plan = SessionPlan::new(dest, flows);
    plan.port = port;
    plan.family = if args.ipv4 {
        Family::V4
    } else if args.ipv6 {
        Family::V6
    } else {
        Family::Any
    };
    plan.meter = meter;
    plan.linger_ms = args.linger_ms;
    plan.jitter_buffer_ms = args.jitter_buffer_ms;
    plan.interval_ms = match (args.interval_ms, args.json_stream) {
        (None, true) => Some(1000),
        (ms, _) => ms,
    };
    plan.pacing = args.pacing;
    plan.phases = args.phases;
    plan.link_rate_bps = args.link_rate;
    // A plain `send` keeps to the socket path, so that a script comparing
    // the two paths (`--max` against `--max --xdp IFACE`) compares them.
    plan.xdp = match args.xdp.as_deref() {
        None => wirebench_engine::XdpUse::Off,
        Some("auto") => wirebench_engine::XdpUse::Auto,
        Some(i) => {
            check_xdp_iface(i)?;
            wirebench_engine::XdpUse::Iface(i.to_string())
        }
    };
    plan.xdp_txq = match args.xdp_txq {
        TxqArg::Auto => wirebench_engine::TxqUse::Auto,
        TxqArg::Keep => wirebench_engine::TxqUse::Keep,
    };
    plan.xdp_tx = match args.xdp_tx {
        XdpTxArg::Auto => wirebench_engine::XdpTx::Auto,
        XdpTxArg::Ring => wirebench_engine::XdpTx::Ring,
        XdpTxArg::Live => wirebench_engine::XdpTx::Live,
    };
    if args.json_stream && args.json.as_deref() == Some("-") {
        crate::bail_input!("--json-stream: stdout already carries the stream; give --json a FILE");
    }
    if let Some(p) = &args.log {
        super::report::check_parent("-l", p)?;
        plan.log = Some(p.clone());
    }
    if let Some(name) = &args.recv_log {
        wirebench_wire::limits::check_log_name(name).map_err(|e| bad_input(format!("-x: {e}")))?;
        plan.remote_log = Some(name.clone());
    }
    plan.key = crate::key::load(args.key_file.as_deref())?;
    if let Some(mode) = &args.auth {
        if plan.key.is_none() {
            crate::bail_input!(
                "--auth {mode}: needs the pre-shared key (--key-file FILE or WIREBENCH_KEY)"
            );
        }
        plan.auth_probes = mode == "probes";
    }
    plan.command = Some(std::env::args().collect::<Vec<_>>().join(" "));
    plan.check().map_err(bad_input)
}

/// The flows with their directions applied: a bidir flow becomes two,
/// forward then reverse, with the same model and seed.
fn directed(flows: Vec<(FlowPlan, FlowDirection)>) -> Vec<FlowPlan> {
    let mut out = Vec::with_capacity(flows.len());
    for (f, d) in flows {
        let reverse = FlowPlan {
            direction: Direction::Reverse,
            ..f.clone()
        };
        match d {
            FlowDirection::Forward => out.push(f),
            FlowDirection::Reverse => out.push(reverse),
            FlowDirection::Bidir => {
                out.push(f);
                out.push(reverse);
            }
        }
    }
    out
}

fn rand_seed() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u64::from_le_bytes(b) >> 1
}

/// Set by the first Ctrl-C: flows stop, the receiver's report is still
/// collected and printed as a partial result. A second Ctrl-C exits (130).
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.xdp_cleanup {
        let iface = args.xdp.as_deref().unwrap_or_default();
        if iface == "auto" {
            crate::bail_input!("--xdp-cleanup: name the interface (--xdp IFACE), not auto");
        }
        println!("{}", super::recv::xdp_cleanup(iface)?);
        return Ok(());
    }
    let plans = build_plans(&args)?;
    if args.iperf3 {
        return run_iperf3(&args, plans);
    }
    install_ctrl_c(args.xdp.is_some())?;
    let mut hooks = Hooks::default();
    hooks.cancel = Some(&**INTERRUPTED);
    for plan in &plans {
        // Resolve up front: an unresolvable name is the user's input.
        plan.resolve().map_err(bad_input)?;
    }
    // Prepare the JSON file before measuring, so a bad path costs no run;
    // the document goes to a temporary file renamed over FILE at the end,
    // so FILE is never left empty or half-written (refused connection,
    // kill, full disk).
    let mut json_out = match args.json.as_deref() {
        Some("-") | None => None,
        Some(path) => Some(JsonOut::prepare(path).map_err(bad_input)?),
    };
    // Live lines come from one receiver's stream; with several, the
    // series are in the document only.
    let printer = match plans.as_slice() {
        [one] => live_printer(&args, one, &mut hooks),
        _ => None,
    };
    let (doc, failure) = match wirebench_engine::run_many(plans, hooks) {
        Ok(doc) => (doc, None),
        Err(EngineError::Partial { reason, doc }) => (*doc, Some(reason)),
        Err(e) => {
            if let Some(p) = printer.as_ref().filter(|_| args.json_stream) {
                p.error_event(&e.to_string());
            }
            return Err(if e.is_bad_input() {
                bad_input(e)
            } else {
                e.into()
            });
        }
    };
    if args.xdp.is_some() && doc.host.send_path.contains("not used") {
        eprintln!("wirebench send: {}", doc.host.send_path);
    }
    // A zero-copy fallback is said once per reason, however many flows
    // it struck.
    let mut said: Vec<&str> = Vec::new();
    for f in &doc.flows {
        if let Some(why) = f.zerocopy.as_ref().and_then(|z| z.fallback.as_deref()) {
            if !said.contains(&why) {
                said.push(why);
                eprintln!("wirebench send: --zerocopy: flow {}: {why}", f.id);
            }
        }
        if let Some(why) = f.gso.as_ref().and_then(|g| g.fallback.as_deref()) {
            if !said.contains(&why) {
                said.push(why);
                eprintln!("wirebench send: --gso: flow {}: {why}", f.id);
            }
        }
    }
    // The summary is printed whatever then happens to the file.
    let live_printed = printer
        .as_ref()
        .is_some_and(|p| p.printed.load(std::sync::atomic::Ordering::Relaxed));
    let written = match printer.as_ref().filter(|_| args.json_stream) {
        Some(p) => {
            p.end_event(&doc);
            json_out.take().map_or(Ok(()), |f| f.write(&doc))
        }
        None => output(&args, &doc, json_out.take(), live_printed),
    };
    if let Some(reason) = failure {
        if let Err(e) = written {
            eprintln!("wirebench: {}", crate::exit::message(&e));
        }
        anyhow::bail!("measurement incomplete, partial result: {reason}");
    }
    written
}

/// The first Ctrl-C stops the flows (the result is still collected), a
/// second one exits at once; with --xdp (`xdp`), a second Ctrl-C or a
/// SIGTERM first removes the sending queue a session added.
fn install_ctrl_c(xdp: bool) -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    if xdp {
        return super::recv::restore_on_signals(Some(&**INTERRUPTED));
    }
    let _ = xdp;
    // The shutdown is registered first, so it sees the flag as the previous
    // Ctrl-C left it.
    signal_hook::flag::register_conditional_shutdown(SIGINT, 130, Arc::clone(&INTERRUPTED))
        .and_then(|_| signal_hook::flag::register(SIGINT, Arc::clone(&INTERRUPTED)))
        .context("installing the Ctrl-C handler")?;
    Ok(())
}

/// `--iperf3`: the plan against an iperf3 server, its figures beside ours.
fn run_iperf3(args: &Args, plans: Vec<CheckedPlan>) -> anyhow::Result<()> {
    let [plan] = <[CheckedPlan; 1]>::try_from(plans)
        .map_err(|_| bad_input("--iperf3: a script's flows must all go to one iperf3 server"))?;
    if args.interval_ms.is_some() || args.json_stream {
        crate::bail_input!("--iperf3: --interval and --json-stream need a wirebench receiver");
    }
    wirebench_iperf3::client::check(&plan).map_err(bad_input)?;
    install_ctrl_c(false)?;
    let addr = plan.resolve().map_err(bad_input)?;
    let json_out = match args.json.as_deref() {
        Some("-") | None => None,
        Some(path) => Some(JsonOut::prepare(path).map_err(bad_input)?),
    };
    let (doc, view) =
        wirebench_iperf3::client::run(&plan, addr, Some(&**INTERRUPTED)).map_err(|e| {
            if e.is_bad_input() {
                bad_input(e)
            } else {
                e.into()
            }
        })?;
    let jitter = view
        .results
        .streams
        .iter()
        .map(|s| s.jitter)
        .fold(0.0f64, f64::max);
    let lost: i64 = view.results.streams.iter().map(|s| s.errors).sum();
    let reverse = doc.flows.iter().any(|f| f.direction == Direction::Reverse);
    let forward = doc.flows.iter().any(|f| f.direction == Direction::Forward);
    let mut line = String::new();
    if forward {
        line = format!(
            "iperf3 server at {addr} measured: {} datagrams / {} bytes received, {lost} missing by its count, \
             jitter {} (RFC 3550, worst stream), server CPU {:.1} %; \
             delays of the flows we sent are not measured (an iperf3 server reports none)",
            view.packets_received,
            view.bytes_received,
            secs(jitter),
            view.results.cpu_util_total
        );
    }
    if reverse {
        if !line.is_empty() {
            line.push('\n');
        }
        line.push_str(&format!(
            "iperf3 server at {addr} sent the reverse flows (server CPU {:.1} %); they are measured here, \
             delays from its send stamps with the clock offset unknown (true one-way delays on one host, \
             only their variation between hosts)",
            view.results.cpu_util_total
        ));
    }
    if args.json.as_deref() == Some("-") {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    output(args, &doc, json_out, false)
}

/// Where `--json FILE` goes: created before the run (a bad path fails
/// first), written all or nothing after it (wirebench_input::OutputFile).
struct JsonOut(wirebench_input::OutputFile);

impl JsonOut {
    fn prepare(path: &str) -> Result<JsonOut, String> {
        wirebench_input::OutputFile::create(std::path::Path::new(path))
            .map(JsonOut)
            .map_err(|e| format!("--json {e}"))
    }

    /// Streams the document into the file: a pretty document of 10 000
    /// flows is ~150 MB of text, which as one string would be most of the
    /// sender's peak memory.
    fn write(self, doc: &ResultDoc) -> anyhow::Result<()> {
        let mut o = self.0;
        if let Err(e) = write_pretty(&mut o, doc) {
            anyhow::bail!("--json {}: cannot write: {e}", o.path().display());
        }
        o.commit().map_err(|e| anyhow::anyhow!("--json {e}"))
    }
}

/// The document as pretty JSON and a newline, through a buffer.
fn write_pretty(w: impl Write, doc: &ResultDoc) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(w);
    serde_json::to_writer_pretty(&mut w, doc)?;
    writeln!(w)?;
    w.flush()
}

/// The live output of `--interval` / `--json-stream`, registered in the
/// run's hooks (not when stdout carries the JSON document).
fn live_printer(args: &Args, plan: &SessionPlan, hooks: &mut Hooks) -> Option<Arc<LivePrinter>> {
    let mode = if args.json_stream {
        Mode::JsonStream
    } else if args.interval_ms.is_some() && args.json.as_deref() != Some("-") {
        Mode::Human
    } else {
        return None;
    };
    let p = Arc::new(LivePrinter::new(mode, plan.flows.len()));
    if mode == Mode::JsonStream {
        p.start_event(serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "dest": plan.dest,
            "port": plan.port,
            "meter": plan.meter,
            "flows": plan.flows.len(),
            "interval_ms": plan.interval_ms,
            "command": plan.command,
        }));
    }
    hooks.live = Some(Live(p.clone()));
    Some(p)
}

fn output(
    args: &Args,
    doc: &ResultDoc,
    file: Option<JsonOut>,
    live_printed: bool,
) -> anyhow::Result<()> {
    // Interval tables at the end only when they were not printed live.
    let tables = args.interval_ms.is_some() && !live_printed;
    match (args.json.as_deref(), file) {
        (Some(_), Some(f)) => {
            print!("{}", human(doc, tables));
            let _ = std::io::stdout().flush();
            f.write(doc)?;
        }
        (Some(_), None) => write_pretty(std::io::stdout().lock(), doc)?,
        (None, _) => print!("{}", human(doc, tables)),
    }
    Ok(())
}

pub(crate) fn secs(s: f64) -> String {
    let a = s.abs();
    if a >= 1.0 {
        format!("{s:.6} s")
    } else if a >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

pub(crate) fn bps(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.3} Gbit/s", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.3} Mbit/s", b / 1e6)
    } else {
        format!("{:.3} kbit/s", b / 1e3)
    }
}

fn flow_block(f: &FlowResult, intervals: bool) -> String {
    let mut s = String::new();
    let line = |s: &mut String, k: &str, v: String| s.push_str(&format!("{k:<26}= {v}\n"));
    s.push_str(&format!(
        "----------------------------------------------------------\nFlow {}  {}/IPv{}  {} -> {}  (MTU {}){}\n  {}, {}\n",
        f.id,
        f.transport,
        f.ip_version.number(),
        f.src,
        f.dst,
        f.mtu,
        match f.direction {
            Direction::Forward => "",
            Direction::Reverse => "  reverse: sent by the receiver",
        },
        f.requested.model,
        f.requested.stop
    ));
    line(&mut s, "Total time", format!("{:.6} s", f.sent.duration_s));
    line(
        &mut s,
        "Packets sent",
        format!(
            "{} ({:.1} pps), not sent {}",
            f.sent.packets, f.sent.rate_pps, f.sent.not_sent
        ),
    );
    line(
        &mut s,
        "Schedule error p50/p99/max",
        format!(
            "{} / {} / {}",
            secs(f.sent.schedule_error_s.p50),
            secs(f.sent.schedule_error_s.p99),
            secs(f.sent.schedule_error_s.max)
        ),
    );
    line(
        &mut s,
        "Packets received",
        format!(
            "{} ({} bytes), duplicates {}, reordered {}, foreign {}",
            f.received.counts.unique,
            f.received.counts.bytes,
            f.received.counts.duplicates,
            f.received.counts.reordered,
            f.received.foreign
        ),
    );
    line(
        &mut s,
        "Packets lost",
        format!(
            "{}: network {}, sender host {}, receiver host {}; bursts {} (max {})",
            wirebench_stats::loss_text(f.received.counts.lost, f.received.counts.loss_ratio),
            f.loss_split.network,
            f.loss_split.sender_host,
            f.loss_split.receiver_host,
            f.received.counts.loss_bursts.count,
            f.received.counts.loss_bursts.max_len
        ),
    );
    line(&mut s, "Minimum delay", secs(f.delay_s.min));
    line(&mut s, "Average delay", secs(f.delay_s.mean));
    line(&mut s, "Maximum delay", secs(f.delay_s.max));
    line(
        &mut s,
        "Delay p50/p99/p99.9",
        format!(
            "{} / {} / {}",
            secs(f.delay_s.p50),
            secs(f.delay_s.p99),
            secs(f.delay_s.p999)
        ),
    );
    line(&mut s, "Delay standard deviation", secs(f.delay_s.stddev));
    line(
        &mut s,
        "Jitter (mean |IPDV|)",
        format!(
            "{}  RFC 3550 {}  PDV {}",
            secs(f.jitter_s.mean_abs_ipdv),
            secs(f.jitter_s.rfc3550),
            secs(f.jitter_s.pdv_p999)
        ),
    );
    if f.received.counts.negative_delays > 0 {
        line(
            &mut s,
            "Negative delays",
            format!(
                "{} ({} beyond the offset's error bound: synchronise the clocks)",
                f.received.counts.negative_delays, f.received.negative_delays_beyond_error
            ),
        );
    }
    if f.received.counts.forged > 0 || f.received.implausible_delays > 0 {
        line(
            &mut s,
            "WARNING: forged",
            format!(
                "{} probes this sender cannot have sent, {} with impossible delays: \
                 someone injected packets (kept out of the counts; delays may be \
                 affected, see docs/security.md)",
                f.received.counts.forged, f.received.implausible_delays
            ),
        );
    }
    line(
        &mut s,
        "Average bitrate",
        format!(
            "{} payload, {} IP, {} Ethernet, {} wire",
            bps(f.throughput_bps.payload),
            bps(f.throughput_bps.ip),
            bps(f.throughput_bps.ethernet),
            bps(f.throughput_bps.wire)
        ),
    );
    line(
        &mut s,
        if f.transport == Transport::Tcp {
            "Frames per record"
        } else {
            "Frames per datagram"
        },
        format!(
            "{:.2} ({} fragmented)",
            f.frames.per_datagram, f.frames.fragmented
        ),
    );
    if let Some(m) = &f.received.marks {
        line(&mut s, "IP marking seen", marks_text(f.socket.as_ref(), m));
    }
    if let Some(r) = &f.rtt_s {
        line(
            &mut s,
            "Round trip min/avg/max",
            format!(
                "{} / {} / {} ({} reflected)",
                secs(r.min),
                secs(r.mean),
                secs(r.max),
                f.rtt_received.unwrap_or(0)
            ),
        );
    }
    if let Some(t) = &f.tcp {
        line(
            &mut s,
            "TCP",
            format!(
                "retransmits {}, srtt {}, cwnd {} B, mss {} B{}",
                t.retransmits,
                secs(t.rtt_s),
                t.cwnd_bytes,
                t.mss,
                f.tcp_cc
                    .as_deref()
                    .map(|c| format!(", cc {c}"))
                    .unwrap_or_default()
            ),
        );
    }
    if let Some(z) = &f.zerocopy {
        let mut t = if z.used {
            format!(
                "{} MSG_ZEROCOPY sends, {} completed, {} of them copied by the kernel",
                z.sends, z.completed, z.copied
            )
        } else {
            "not used".to_string()
        };
        if let Some(why) = &z.fallback {
            t.push_str(&format!("; plain writes: {why}"));
        }
        line(&mut s, "Zero-copy", t);
    }
    if let Some(g) = &f.gso {
        let mut t = if g.used {
            format!(
                "{} segmented sends of {:.1} datagrams on average ({} datagrams)",
                g.sends, g.segments_per_send, g.datagrams
            )
        } else {
            "not used".to_string()
        };
        if let Some(why) = &g.fallback {
            t.push_str(&format!("; plain sends: {why}"));
        }
        line(&mut s, "UDP GSO", t);
    }
    if let Some(v) = &f.voip {
        line(
            &mut s,
            "VoIP (E-model)",
            format!(
                "R = {:.1}, MOS = {:.2} (jitter buffer {}, {:.2} % late, mouth-to-ear {})",
                v.r_factor,
                v.mos,
                secs(v.jitter_buffer_s),
                v.late_share * 100.0,
                secs(v.mouth_to_ear_s)
            ),
        );
    }
    if let Some(c) = f.completion_s {
        line(&mut s, "Transfer completed in", secs(c));
    }
    if intervals && !f.intervals.is_empty() {
        s.push_str("  t_s       packets  throughput     delay_mean   jitter      lost\n");
        for iv in &f.intervals {
            s.push_str(&format!(
                "  {:<9.3} {:<8} {:<14} {:<12} {:<11} {}\n",
                iv.t_s,
                iv.packets,
                bps(iv.throughput_bps),
                secs(iv.delay_mean_s),
                secs(iv.jitter_s),
                iv.lost
            ));
        }
    }
    s
}

/// `DSCP ef x500; TTL 64; flow label 0x12345 (asked: DSCP ef, TTL 7)`.
fn marks_text(asked: Option<&SockOpts>, m: &MarksSeen) -> String {
    use wirebench_wire::sockopts::dscp_name;
    let dscp = |d: u8| match dscp_name(d) {
        Some(n) => n.to_string(),
        None => d.to_string(),
    };
    let mut parts: Vec<String> = Vec::new();
    if !m.dscp.is_empty() {
        let v: Vec<String> = m
            .dscp
            .iter()
            .map(|c| format!("{} x{}", dscp(c.dscp), c.packets))
            .collect();
        parts.push(format!("DSCP {}", v.join(", ")));
    }
    if m.ecn_marked > 0 {
        parts.push(format!("ECN set on {}", m.ecn_marked));
    }
    match (m.ttl_min, m.ttl_max) {
        (Some(a), Some(b)) if a == b => parts.push(format!("TTL {a}")),
        (Some(a), Some(b)) => parts.push(format!("TTL {a}..{b}")),
        _ => {}
    }
    if let Some(l) = m.flow_label {
        parts.push(format!("flow label {l:#x}"));
        if m.flow_label_other > 0 {
            parts.push(format!("{} with another label", m.flow_label_other));
        }
    }
    let mut s = parts.join("; ");
    if let Some(o) = asked {
        let mut a = Vec::new();
        if let Some(d) = o.dscp() {
            a.push(format!("DSCP {}", dscp(d)));
        }
        if let Some(t) = o.ttl {
            a.push(format!("TTL {t}"));
        }
        if let Some(l) = o.flow_label {
            a.push(format!("flow label {l:#x}"));
        }
        if !a.is_empty() {
            s.push_str(&format!(" (asked: {})", a.join(", ")));
        }
    }
    s
}

fn human(doc: &ResultDoc, intervals: bool) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "wirebench {} ({} meter), started {}; clock offset {} +/- {}{}\n",
        doc.tool.version,
        doc.meter,
        doc.started_at,
        secs(doc.clock.offset_s),
        secs(doc.clock.error_s),
        if doc.clock.applied {
            " (applied)"
        } else {
            " (within its error: not applied)"
        }
    ));
    if doc.partial {
        s.push_str(&format!(
            "PARTIAL RESULT: {}\n",
            doc.partial_reason.as_deref().unwrap_or("run ended early")
        ));
    }
    for f in &doc.flows {
        s.push_str(&flow_block(f, intervals));
    }
    let t = &doc.total;
    s.push_str("==========================================================\n");
    s.push_str(&format!(
        "TOTAL ({} flow{})\n",
        doc.flows.len(),
        if doc.flows.len() == 1 { "" } else { "s" }
    ));
    let line = |s: &mut String, k: &str, v: String| s.push_str(&format!("{k:<26}= {v}\n"));
    line(
        &mut s,
        "Packets sent / received",
        format!(
            "{} / {} (not sent {})",
            t.sent_packets, t.received_packets, t.not_sent
        ),
    );
    line(
        &mut s,
        "Packets lost",
        wirebench_stats::loss_text(t.lost, t.loss_ratio),
    );
    line(&mut s, "Average delay", secs(t.delay_mean_s));
    line(&mut s, "Maximum delay", secs(t.delay_max_s));
    line(
        &mut s,
        "Average bitrate",
        format!(
            "{} payload, {} wire",
            bps(t.throughput_bps.payload),
            bps(t.throughput_bps.wire)
        ),
    );
    if let Some(f) = &t.fairness {
        line(
            &mut s,
            "Fairness (Jain)",
            format!(
                "{:.3} over {} flows; slowest flow {} {}, fastest flow {} {} (payload, common span)",
                f.jain,
                f.flows,
                f.min_flow,
                bps(f.min_bps),
                f.max_flow,
                bps(f.max_bps)
            ),
        );
    }
    let retrans: u64 = doc
        .flows
        .iter()
        .filter_map(|f| f.tcp.map(|t| t.retransmits))
        .sum();
    if doc.flows.iter().any(|f| f.tcp.is_some()) {
        line(&mut s, "TCP retransmits", retrans.to_string());
    }
    if let (Some(link), Some(bound)) = (t.link_rate_bps, t.upper_bound_bps) {
        let pct = 100.0 * t.throughput_bps.wire / link;
        if t.above_bound == Some(true) {
            line(
                &mut s,
                "WARNING: above the bound",
                format!(
                    "{} on the wire is {pct:.2} % of the {} link (payload {} > bound {}), more than the {:.2} % \
                     uncertainty: no link carries that; a measurement or emulation error, not a result",
                    bps(t.throughput_bps.wire),
                    bps(link),
                    bps(t.throughput_bps.payload),
                    bps(bound),
                    t.bound_tolerance.unwrap_or(0.0) * 100.0
                ),
            );
        } else {
            line(
                &mut s,
                "Link bound",
                format!(
                    "{} payload on a {} link; wire {pct:.2} % of the link",
                    bps(bound),
                    bps(link)
                ),
            );
        }
    }
    line(
        &mut s,
        "CPU (share of one core)",
        format!(
            "sender {:.2} usr {:.2} sys; receiver {:.2} usr {:.2} sys; host softirq {:.2} steal {:.2}",
            doc.cpu.sender.user,
            doc.cpu.sender.system,
            doc.cpu.receiver.user,
            doc.cpu.receiver.system,
            doc.cpu.host.softirq,
            doc.cpu.host.steal
        ),
    );
    // The AF_XDP path where either end took it (why not, when it did not:
    // in the document, and on stderr for --xdp).
    if doc.host.send_path.starts_with("af_xdp") {
        line(&mut s, "Send path", doc.host.send_path.clone());
    }
    // AF_XDP rings ("af_xdp ring pick-up") or receive records ("xdp
    // program").
    let rx = &doc.receiver.host.rx_timestamps;
    if rx.starts_with("af_xdp") || rx.starts_with("xdp program") {
        line(
            &mut s,
            "Receive timestamps",
            doc.receiver.host.rx_timestamps.clone(),
        );
    }
    if doc.receiver.foreign_control > 0 {
        line(
            &mut s,
            "Foreign control conns",
            doc.receiver.foreign_control.to_string(),
        );
    }
    // -x: where each receiver logged its session (in its --log-dir).
    let logs: Vec<String> = if doc.sessions.is_empty() {
        doc.receiver.log.iter().cloned().collect()
    } else {
        doc.sessions
            .iter()
            .filter_map(|p| {
                p.receiver
                    .log
                    .as_ref()
                    .map(|l| format!("{l} at {}", p.dest))
            })
            .collect()
    };
    if !logs.is_empty() {
        line(
            &mut s,
            "Receiver log (-x)",
            format!("{} (in the receiver's --log-dir)", logs.join(", ")),
        );
    }
    s
}

/// `--xdp IFACE` names an interface of this host (a path that cannot be
/// taken for other reasons falls back to sockets and says why).
#[cfg(target_os = "linux")]
fn check_xdp_iface(iface: &str) -> anyhow::Result<()> {
    wirebench_engine::xdp::ifindex(iface).map_err(|e| bad_input(format!("--xdp: {e}")))?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn check_xdp_iface(_iface: &str) -> anyhow::Result<()> {
    Err(bad_input("--xdp: AF_XDP is Linux only"))
}
