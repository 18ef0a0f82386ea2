//! `wirebench recv`: the receiver daemon. Binds the control port and serves
//! sessions until killed; all measurement logic is in
//! `wirebench_engine::recv`.

use crate::exit::bad_input;
use std::net::IpAddr;
use std::time::Duration;
use wirebench_engine::{budget, Cidr, Daemon, DaemonConfig, XdpUse};

#[derive(clap::Args)]
#[command(after_help = "\
The receiver listens on one TCP control port (default 5400, IPv4 and IPv6 on
the same socket). Each `wirebench send` opens a session on it; the data
sockets of its flows get ephemeral ports that the control session tells the
sender, so only the control port has to be reachable through a firewall that
allows related traffic. Sessions run one after another and several at once;
a sender that goes silent for 10 s is given up on. Traffic that is not a
wirebench session is counted as foreign and ignored.

On a shared network, give the receiver and its senders a key (--key-file, or
WIREBENCH_KEY) and restrict who may connect (--allow); with --require-auth
probes it serves only senders that MAC every probe (send --auth probes), so
no forged probe can enter a figure. See docs/security.md.
A connection has 5 s to complete its handshake; at most 8 per address and 64
in all may be in their handshake at once, and they never take the slots of
the (at most 64) running sessions.

Budgets: a session's sockets (one per flow, two for TCP, plus the control
connection), socket-buffer bytes (per flow 8 MiB UDP / 4 MiB TCP receive
buffer, or what the sender asks with --window; without --window, flows share
the session's budget when it is too small for that, and a TCP connection
keeps the kernel's autotuned buffer, which the budget counts at that size) and threads (one for the
session, one per TCP or reverse flow, UDP flows one each up to the CPUs, then
shared) are reserved at Hello, per session and in total over the sessions
running at once. A Hello over a budget is refused with a message naming it
(the sender exits 1).

Examples:
  wirebench recv                 # [::]:5400, dual-stack
  wirebench recv -B 192.0.2.7    # one address only
  wirebench recv -p 6000 -q
  wirebench recv --log-dir logs/ # per-packet log of every session (send -x NAME names it)
  WIREBENCH_KEY=$(cat key) wirebench recv --allow 192.0.2.0/24
  WIREBENCH_KEY=$(cat key) wirebench recv --require-auth probes
  wirebench recv --iperf3        # also an iperf3 server on 5201: iperf3 -c HOST works
  wirebench recv --metrics 127.0.0.1:9506   # Prometheus scrapes /metrics")]
pub struct Args {
    /// Address to bind (default: all IPv4 and IPv6 addresses).
    #[arg(short = 'B', value_name = "ADDR")]
    pub bind: Option<String>,
    /// Control port (TCP).
    #[arg(short = 'p', value_name = "PORT", default_value_t = wirebench_engine::DEFAULT_PORT)]
    pub port: u16,
    /// Do not log sessions on stderr.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Write a per-packet log of every session into DIR (session-<id>.wblog,
    /// the receiver side like D-ITG's -x; read it with `wirebench decode`).
    /// A sender may name its session's log (`send -x NAME`: a plain file
    /// name, written into DIR and nowhere else). A name already taken is
    /// never opened or followed (links included): the log goes to
    /// session-<id>-1.wblog (NAME-1), -2, ... instead.
    #[arg(short = 'x', long = "log-dir", value_name = "DIR")]
    pub log_dir: Option<std::path::PathBuf>,
    /// Most bytes one session's log may hold (32 bytes a packet; K, M, G:
    /// 1024s). Packets past it are not logged; the log's footer and stderr
    /// say how many.
    #[arg(long = "log-max", value_name = "BYTES", default_value = "1G", value_parser = parse_bytes)]
    pub log_max: u64,
    /// Most bytes all sessions' logs of this daemon may hold together.
    #[arg(long = "log-max-total", value_name = "BYTES", default_value = "10G", value_parser = parse_bytes)]
    pub log_max_total: u64,
    /// Refuse senders that name their session's log (`send -x NAME`);
    /// their sessions are refused, saying so. Without it a sender's name
    /// is taken, confined to --log-dir.
    #[arg(long = "no-log-names")]
    pub no_log_names: bool,
    /// Serve only senders that prove the pre-shared key in FILE (mode 600;
    /// HMAC challenge-response, the key never crosses the network). The key
    /// may instead be in the WIREBENCH_KEY environment variable.
    #[arg(long = "key-file", value_name = "FILE")]
    pub key_file: Option<std::path::PathBuf>,
    /// What senders must authenticate besides the handshake: `session`
    /// (the handshake only, the default with a key) or `probes` (every
    /// probe too: a sender without `send --auth probes` is refused, so no
    /// untagged probe is measured). Needs the key.
    #[arg(long = "require-auth", value_name = "session|probes", value_parser = ["session", "probes"])]
    pub require_auth: Option<String>,
    /// Accept control connections only from these address blocks
    /// (repeatable or comma-separated, e.g. 192.0.2.0/24,2001:db8::/32);
    /// others are closed without an answer.
    #[arg(long = "allow", value_name = "CIDR", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Sessions one sender address may run at once.
    #[arg(long = "max-per-peer", value_name = "N", default_value_t = wirebench_engine::gate::SESSIONS_PER_PEER)]
    pub max_per_peer: usize,
    /// Longest a session may last, in seconds; it is then ended with an
    /// error to its sender.
    #[arg(long = "max-session", value_name = "SECS", default_value_t = wirebench_engine::recv::MAX_SESSION.as_secs())]
    pub max_session: u64,
    /// Most sockets one session may hold.
    #[arg(long = "session-sockets", value_name = "N", default_value_t = budget::SESSION_BUDGET.sockets, help_heading = BUDGETS)]
    pub session_sockets: u64,
    /// Most socket-buffer bytes one session may ask for (K, M, G: 1024s).
    #[arg(long = "session-buffers", value_name = "BYTES", default_value = "1G", value_parser = parse_bytes, help_heading = BUDGETS)]
    pub session_buffers: u64,
    /// Most threads one session may cost.
    #[arg(long = "session-threads", value_name = "N", default_value_t = budget::SESSION_BUDGET.threads, help_heading = BUDGETS)]
    pub session_threads: u64,
    /// Most sockets all running sessions may hold together.
    #[arg(long = "total-sockets", value_name = "N", default_value_t = budget::TOTAL_BUDGET.sockets, help_heading = BUDGETS)]
    pub total_sockets: u64,
    /// Most socket-buffer bytes all running sessions may ask for together.
    #[arg(long = "total-buffers", value_name = "BYTES", default_value = "2G", value_parser = parse_bytes, help_heading = BUDGETS)]
    pub total_buffers: u64,
    /// Per cent of each total budget the sessions of one sender (an IPv4
    /// address or an IPv6 /64) may hold together, so one sender cannot
    /// take the whole receiver.
    #[arg(long = "peer-share", value_name = "PERCENT", default_value_t = budget::PEER_SHARE_PCT, value_parser = clap::value_parser!(u64).range(1..=100), help_heading = BUDGETS)]
    pub peer_share: u64,
    /// Most threads all running sessions may cost together.
    #[arg(long = "total-threads", value_name = "N", default_value_t = budget::TOTAL_BUDGET.threads, help_heading = BUDGETS)]
    pub total_threads: u64,
    /// Also serve unmodified iperf3 clients (3.x: TCP, UDP -b, -R, --bidir,
    /// -P, -l, -n/-k, -J) on PORT, TCP and UDP (default 5201), several at
    /// once, within the same --allow list, slots and budgets. Each session
    /// is logged on stderr and, with --iperf3-results, kept as a result
    /// document; UDP streams get per-datagram delay and jitter from
    /// iperf3's own send stamps (clock offset unknown). RSA authentication
    /// and SCTP are refused (docs/iperf3.md).
    #[arg(long = "iperf3", value_name = "PORT", num_args = 0..=1, default_missing_value = "5201")]
    pub iperf3: Option<u16>,
    /// Write each iperf3 session's result document (wirebench.result/1,
    /// iperf3-<ms>-<n>.json) into DIR.
    #[arg(long = "iperf3-results", value_name = "DIR", requires = "iperf3")]
    pub iperf3_results: Option<std::path::PathBuf>,
    /// Serve the receiver's counters at http://ADDR:PORT/metrics in the
    /// Prometheus text format: sessions started and ended, flows, data
    /// packets received, foreign traffic, refusals (wirebench and, with
    /// --iperf3, iperf3 sessions), and the budgets in use. Only addresses
    /// in --allow get an answer when it is given. docs/exporter.md.
    #[arg(long = "metrics", value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Receive by the AF_XDP path of IFACE (Linux, root): an XDP program
    /// steers a session's data port to AF_XDP sockets, everything else
    /// (control, other traffic) passes to the kernel. Taken for one-way
    /// sessions of one UDP flow, one session at a time; others use the
    /// socket path and the report says why. The program is removed when the
    /// session ends, and with the process however it ends (a BPF link).
    /// Without --xdp or --no-xdp the path is taken, as root, for senders
    /// that ask for it (`send` does where its half can run) on the
    /// interface holding the session's address, except a loopback device,
    /// whose one queue the sender's AF_XDP socket needs.
    #[arg(long = "xdp", value_name = "IFACE", conflicts_with = "no_xdp")]
    pub xdp: Option<String>,
    /// The socket path for every session, even for senders that ask for
    /// the AF_XDP path.
    #[arg(long = "no-xdp")]
    pub no_xdp: bool,
    /// Detach any wirebench XDP program still held on the --xdp interface
    /// (by a hung wirebench), remove the sending queue a killed `send
    /// --xdp` left on it, put back the threaded-NAPI setting a killed
    /// receiver left, say what was undone, and exit. `recv --xdp IFACE`
    /// does the same when it starts (`send --xdp-cleanup` is the same).
    #[arg(long = "xdp-cleanup", requires = "xdp")]
    pub xdp_cleanup: bool,
    /// Threaded NAPI on the receiving interface while an XDP session holds
    /// it (Linux): veth runs the receive half (XDP program, copy into the
    /// AF_XDP rings) in the sender's own transmit call, on the sender's
    /// CPU; threaded, it runs in a kernel thread the scheduler puts on
    /// another CPU: faster on a quiet host, slower on a busy one, where
    /// that thread waits behind other work. off (the default): never.
    /// auto: on a test-bed's own veth (`testbed exec`), for floods
    /// (`--max`) whose sender sends by AF_XDP (`send --xdp`, which gives
    /// its veth a sending queue for the session, so the faster receive
    /// half cannot make it drop; a paced flow gains nothing and its
    /// pacer loses to the thread's wake-ups), and only when at least 1.5 CPUs were idle in the 100 ms
    /// before the session (the thread needs a CPU of its own); a
    /// socket-path sender's session keeps it off. on: any interface, every
    /// session (a socket-path sender on a veth without a queue then loses
    /// 15-38 % of a --max run at its own host). The setting found is
    /// journalled and put back when the session ends or recv gets
    /// Ctrl-C/SIGTERM, and by the next start or --xdp-cleanup after a
    /// SIGKILL. The report's rx_timestamps says "threaded NAPI" when it ran
    /// so, and "NAPI not moved to a thread: …" when auto found no CPU to
    /// spare. docs/engine.md, "Threaded NAPI" (measurements).
    #[arg(long = "xdp-napi", value_name = "WHEN", default_value = "off")]
    pub xdp_napi: NapiArg,
    /// How an XDP session's frames reach the receiver (Linux). records:
    /// the XDP program itself writes each frame's receive record (time
    /// stamped in the program, probe header, IP and UDP headers) into a
    /// ring in a BPF map that recv reads without system calls, and drops
    /// the frame: no copy into AF_XDP rings, so the receive half costs
    /// about what an XDP drop costs; every check and statistic is the
    /// rings' (a ring overrun counts as the receiving host's drops). ring:
    /// every frame through AF_XDP receive rings. auto (the default):
    /// records, except for sessions whose probes carry MACs (--auth
    /// probes), which must be checked over the whole datagram and take the
    /// rings. docs/engine.md, "Receive records".
    #[arg(long = "xdp-rx", value_name = "HOW", default_value = "auto")]
    pub xdp_rx: XdpRxArg,
    /// UDP GRO on the sockets of bulk (--max) one-way UDP flows (Linux
    /// 5.0+): the kernel may hand over a run of same-size datagrams of one
    /// flow (a sender's UDP GSO send, or what the NIC coalesced) as one,
    /// which wirebench cuts apart and counts datagram by datagram (loss,
    /// order, duplicates, delay) as before. on (the default on Linux): the
    /// datagrams of one run share one kernel receive time, the run's, so
    /// their delays and jitter are those of the run, not of each datagram;
    /// off: every datagram is received, and stamped, on its own (the
    /// kernel cuts a segmented send apart on arrival). Paced flows and
    /// flows whose probes are reflected (-m rtt) never use it, so their
    /// per-packet timing stays per packet. docs/engine.md, "UDP
    /// segmentation offload".
    #[arg(long = "gro", value_name = "WHEN")]
    pub gro: Option<OnOff>,
    /// Answer senders like a receiver from before live intervals (tests of
    /// the sender's fallback only).
    #[arg(long = "no-live-intervals", hide = true)]
    pub no_live_intervals: bool,
}

/// `--gro`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `--xdp-rx`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum XdpRxArg {
    /// Records where the session allows, else rings.
    Auto,
    /// AF_XDP receive rings.
    Ring,
    /// Receive records written by the XDP program.
    Records,
}

/// `--xdp-napi`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum NapiArg {
    /// On a test-bed's own veth, for floods whose senders send by AF_XDP,
    /// when the host has a CPU to spare.
    Auto,
    /// On any interface.
    On,
    /// Never.
    Off,
}

const BUDGETS: &str = "Budgets (per session and over all sessions at once)";

/// A byte count with an optional K, M, G or T suffix (powers of 1024).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("not a byte count above 0 (K, M, G or T suffix): {s:?}"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bind = match &args.bind {
        None => None,
        Some(s) => Some(
            s.trim_matches(|c| c == '[' || c == ']')
                .parse::<IpAddr>()
                .map_err(|_| bad_input(format!("-B: not an IP address: {s}")))?,
        ),
    };
    if let Some(d) = &args.log_dir {
        if !d.is_dir() {
            return Err(bad_input(format!(
                "--log-dir {}: not an existing directory",
                d.display()
            )));
        }
    }
    let mut allow = Vec::new();
    for c in &args.allow {
        allow.push(
            c.trim()
                .parse::<Cidr>()
                .map_err(|e| bad_input(format!("--allow: {e}")))?,
        );
    }
    if args.max_per_peer == 0 {
        return Err(bad_input("--max-per-peer: must be at least 1"));
    }
    if args.max_session == 0 {
        return Err(bad_input("--max-session: must be at least 1 s"));
    }
    let budgets = budget::Budgets {
        session: budget::Resources {
            sockets: args.session_sockets,
            buffer_bytes: args.session_buffers,
            threads: args.session_threads,
        },
        total: budget::Resources {
            sockets: args.total_sockets,
            buffer_bytes: args.total_buffers,
            threads: args.total_threads,
        },
    };
    for (flag, n) in [
        ("--session-sockets", args.session_sockets),
        ("--session-threads", args.session_threads),
        ("--total-sockets", args.total_sockets),
        ("--total-threads", args.total_threads),
    ] {
        if n == 0 {
            return Err(bad_input(format!("{flag}: must be at least 1")));
        }
    }
    // A per-session budget beyond the total could never be used.
    for (flag, s, t) in [
        (
            "--session-sockets",
            args.session_sockets,
            args.total_sockets,
        ),
        (
            "--session-buffers",
            args.session_buffers,
            args.total_buffers,
        ),
        (
            "--session-threads",
            args.session_threads,
            args.total_threads,
        ),
    ] {
        if s > t {
            return Err(bad_input(format!(
                "{flag}: {s} is above its total ({})",
                flag.replace("session", "total")
            )));
        }
    }
    if let Some(d) = &args.iperf3_results {
        if !d.is_dir() {
            return Err(bad_input(format!(
                "--iperf3-results {}: not an existing directory",
                d.display()
            )));
        }
    }
    let metrics = match &args.metrics {
        None => None,
        Some(m) => Some(m.parse::<std::net::SocketAddr>().map_err(|_| {
            bad_input(format!(
                "--metrics: not ADDR:PORT (e.g. 127.0.0.1:9506): {m}"
            ))
        })?),
    };
    if args.iperf3 == Some(0) {
        return Err(bad_input("--iperf3: the port must be 1..65535"));
    }
    if let Some(iface) = &args.xdp {
        let said = xdp_cleanup(iface)?;
        if args.xdp_cleanup {
            println!("{said}");
            return Ok(());
        }
    }
    #[cfg(target_os = "linux")]
    if !args.no_xdp {
        restore_on_signals(None)?;
    }
    if args.gro == Some(OnOff::On) && !cfg!(target_os = "linux") {
        return Err(bad_input(
            "--gro on: UDP GRO is a Linux kernel feature; this system has none",
        ));
    }
    let key = crate::key::load(args.key_file.as_deref())?;
    let authenticated = key.is_some();
    if let (Some(mode), false) = (&args.require_auth, authenticated) {
        return Err(bad_input(format!(
            "--require-auth {mode}: needs the pre-shared key (--key-file FILE or WIREBENCH_KEY)"
        )));
    }
    let require_probe_auth = args.require_auth.as_deref() == Some("probes");
    let metrics_allow = allow.clone();
    let daemon = Daemon::bind(DaemonConfig {
        bind,
        port: args.port,
        verbose: !args.quiet,
        log_dir: args.log_dir.clone(),
        log_max_session: args.log_max,
        log_names: !args.no_log_names,
        peer_share_pct: args.peer_share,
        log_total_left: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(args.log_max_total)),
        key,
        require_probe_auth,
        allow,
        sessions_per_peer: args.max_per_peer,
        max_session: Duration::from_secs(args.max_session),
        budgets,
        live_intervals: !args.no_live_intervals,
        xdp: match (&args.xdp, args.no_xdp) {
            (Some(i), _) => XdpUse::Iface(i.clone()),
            (None, true) => XdpUse::Off,
            (None, false) => XdpUse::Auto,
        },
        xdp_napi: match args.xdp_napi {
            NapiArg::Auto => wirebench_engine::NapiUse::Auto,
            NapiArg::On => wirebench_engine::NapiUse::On,
            NapiArg::Off => wirebench_engine::NapiUse::Off,
        },
        xdp_rx: match args.xdp_rx {
            XdpRxArg::Auto => wirebench_engine::XdpRx::Auto,
            XdpRxArg::Ring => wirebench_engine::XdpRx::Ring,
            XdpRxArg::Records => wirebench_engine::XdpRx::Records,
        },
        udp_gro: args.gro != Some(OnOff::Off),
        ..DaemonConfig::default()
    })
    .map_err(|e| {
        if e.is_bad_input() {
            bad_input(format!("-p/-B: {e}"))
        } else {
            e.into()
        }
    })?;
    if !args.quiet {
        if let Some(a) = daemon.local_addr() {
            eprintln!(
                "wirebench recv: listening on {a} (control, TCP){}",
                if require_probe_auth {
                    ", senders must authenticate and MAC every probe"
                } else if authenticated {
                    ", senders must authenticate"
                } else {
                    ", no authentication (see --key-file)"
                }
            );
        }
    }
    let mut iperf3_stats = None;
    if let Some(port) = args.iperf3 {
        let server = wirebench_iperf3::server::Server::bind(
            wirebench_iperf3::server::ServerConfig {
                bind,
                port,
                verbose: !args.quiet,
                results_dir: args.iperf3_results.clone(),
                max_session: Duration::from_secs(args.max_session),
            },
            daemon.gate(),
            daemon.ledger(),
        )
        .map_err(|e| bad_input(format!("--iperf3 {port}: {e}")))?;
        if !args.quiet {
            if let Some(a) = server.local_addr() {
                eprintln!("wirebench recv: serving iperf3 clients on {a} (TCP and UDP)");
            }
        }
        iperf3_stats = Some(server.stats());
        std::thread::Builder::new()
            .name("wb-iperf3-accept".into())
            .spawn(move || {
                if let Err(e) = server.serve_until(&std::sync::atomic::AtomicBool::new(false)) {
                    eprintln!("wirebench recv: iperf3 server stopped: {e}");
                }
            })?;
    }
    if let Some(addr) = metrics {
        let src = super::recv_metrics::Sources {
            daemon: daemon.stats(),
            ledger: daemon.ledger(),
            iperf3: iperf3_stats,
            allow: metrics_allow,
        };
        let at = super::recv_metrics::start(addr, src)
            .map_err(|e| bad_input(format!("--metrics {addr}: {e}")))?;
        if !args.quiet {
            eprintln!("wirebench recv: Prometheus metrics on http://{at}/metrics");
        }
    }
    daemon.serve()?;
    Ok(())
}

/// Detaches what a hung wirebench left on `iface` (a killed one leaves no
/// program: its BPF link died with it), removes the sending queue and
/// restores the threaded-NAPI switch a killed one left; says what it did
/// in one line. A missing interface is bad input.
#[cfg(target_os = "linux")]
pub(crate) fn xdp_cleanup(iface: &str) -> anyhow::Result<String> {
    wirebench_engine::xdp::ifindex(iface).map_err(|e| bad_input(format!("--xdp: {e}")))?;
    let c = wirebench_engine::xdp::cleanup(iface)?;
    Ok(format!(
        "{iface}: {} wirebench XDP program(s) detached{}{}",
        c.programs,
        if c.txq_removed {
            ", sending queue removed"
        } else {
            ""
        },
        if c.napi_restored {
            ", threaded NAPI setting restored"
        } else {
            ""
        }
    ))
}

/// Ctrl-C and SIGTERM end the process as before (status 130, 143), after
/// putting back what a session changed on its interfaces (threaded NAPI,
/// a sending queue): the default action would end the process without
/// it (docs/engine.md, "Threaded NAPI", "Sending queue"). With
/// `first_ctrl_c`, the first Ctrl-C only sets that flag (the sender's
/// "stop the flows, keep the result"); the next one ends the process.
#[cfg(target_os = "linux")]
pub(crate) fn restore_on_signals(
    first_ctrl_c: Option<&'static std::sync::atomic::AtomicBool>,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::sync::atomic::Ordering;
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| anyhow::anyhow!("installing the signal handler: {e}"))?;
    std::thread::Builder::new()
        .name("wb-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGINT && first_ctrl_c.is_some_and(|f| !f.swap(true, Ordering::SeqCst)) {
                    continue;
                }
                wirebench_engine::xdp::restore_now();
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn xdp_cleanup(_iface: &str) -> anyhow::Result<String> {
    Err(bad_input("--xdp: AF_XDP is Linux only"))
}
