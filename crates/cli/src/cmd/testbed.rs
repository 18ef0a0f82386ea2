//! `wirebench testbed`: build, inspect, use and remove emulated test-beds.
//! All the work is in `wirebench_testbed`; this file parses flags, turns
//! the library's typed errors into exit codes (bad input → 2) and prints.

use crate::exit::bad_input;
use std::path::Path;
use wirebench_testbed::{
    self as tb, format_rate, LinkOpts, NodeKind, Testbed, TestbedError, DEFAULT_NAME, PRESETS,
};

#[derive(clap::Args)]
#[command(after_help = "\
Presets: direct (a — b), router (a — r1 — b), two-routers (a — r1 — r2 — b);
or a TOML topology file (hosts, routers, switches, links with their own MTU,
rate and offloads; see docs/testbed.md). Every link gets 10.0.N.0/24 and
fd00:0:0:N::/64; node names resolve inside every node.

A rated link takes each frame's serialisation time (wire bytes x 8 / rate)
like Ethernet, and delay, jitter and loss work on any kernel: a user-space
link emulator in the link's own namespace does them (`status` names each
link's backend).

Examples:
  wirebench testbed up router --rate 100mbit --mtu 1500
  wirebench testbed up router --rate 100mbit --delay 20ms --jitter 2ms --loss 1%
  wirebench testbed check
  wirebench testbed exec a -- wirebench send -a b -C 1000 -c 1408 -t 5000
  wirebench testbed status --counters
  wirebench testbed down")]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Sub,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Build a test-bed (replacing an earlier one of the same name).
    Up(Box<UpArgs>),
    /// Show nodes, interfaces, addresses, MTUs, rates and offloads.
    Status(StatusArgs),
    /// Check that every host reaches every host over IPv4 and IPv6, and measure each path MTU.
    Check(NameArg),
    /// Run a command inside a node (its network namespace).
    Exec(ExecArgs),
    /// Remove a test-bed and everything it created.
    Down(DownArgs),
}

#[derive(clap::Args)]
pub struct NameArg {
    /// Test-bed name (1–12 lowercase letters or digits).
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// A preset (direct, router, two-routers) or a TOML topology file.
    #[arg(value_name = "PRESET|FILE")]
    pub topology: String,
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
    /// MTU of every link (68–65535); overrides the file.
    #[arg(long, value_name = "N")]
    pub mtu: Option<u32>,
    /// Link rate of every link, e.g. 100mbit, 1gbit; overrides the file.
    #[arg(long, value_name = "RATE")]
    pub rate: Option<String>,
    /// Segmentation/receive offloads on every link (default off).
    #[arg(long, value_name = "on|off")]
    pub offloads: Option<OnOff>,
    /// Packet-rate cap of every router: at most N packets/s forwarded out
    /// of each of its interfaces, whatever their size (a software router);
    /// overrides the file's `forward_pps`.
    #[arg(long, value_name = "N")]
    pub forward_pps: Option<u64>,
    /// Queue length (packets) of every shaped interface of every node
    /// (default 1000, like a NIC's txqueuelen); overrides the file.
    #[arg(long, value_name = "N")]
    pub txqueuelen: Option<u32>,
    /// Propagation delay of every link, each way, e.g. 20ms, 250us. With
    /// any of the impairment flags, every link gets exactly the flags given
    /// (the file's delay/jitter/loss/... are replaced). Works on any
    /// kernel: the user-space link emulator does it (docs/testbed.md).
    #[arg(long, value_name = "TIME", help_heading = "Impairments")]
    pub delay: Option<String>,
    /// Jitter added to the delay (needs --delay), e.g. 2ms.
    #[arg(long, value_name = "TIME", help_heading = "Impairments")]
    pub jitter: Option<String>,
    /// Law of the jitter: uniform (delay ± jitter), normal or pareto
    /// (jitter = standard deviation).
    #[arg(long, value_name = "LAW", help_heading = "Impairments")]
    pub distribution: Option<String>,
    /// Frame loss each way: "1%", or Gilbert-Elliott bursts
    /// "gemodel P R [1-H [1-K]]" (netem's order, e.g. "gemodel 1% 25%").
    #[arg(long, value_name = "LOSS", help_heading = "Impairments")]
    pub loss: Option<String>,
    /// Fraction of frames delivered after the frame behind them, e.g. 1%.
    #[arg(long, value_name = "PCT", help_heading = "Impairments")]
    pub reorder: Option<String>,
    /// Fraction of frames delivered twice.
    #[arg(long, value_name = "PCT", help_heading = "Impairments")]
    pub duplicate: Option<String>,
    /// Fraction of frames with one bit flipped past the Ethernet header.
    #[arg(long, value_name = "PCT", help_heading = "Impairments")]
    pub corrupt: Option<String>,
    /// Drop-tail queue at each end of every rated link: packets (1000p),
    /// bytes (256KiB) or time at the link rate (20ms); overrides txqueuelen.
    #[arg(long, value_name = "SIZE")]
    pub queue: Option<String>,
    /// CoDel or FQ-CoDel on every rated link's queue, run by the link
    /// emulator (the queue then lives there, not at the hosts):
    /// "codel", "fq_codel", optionally "fq_codel target 5ms interval
    /// 100ms quantum 1514 flows 1024" (RFC 8289/8290 defaults).
    #[arg(long, value_name = "AQM")]
    pub aqm: Option<String>,
    /// How late the link emulator may send a frame on a saturated rated
    /// link, to leave the hosts CPU (1us-1ms; default 50us). Shorter is
    /// more exact and costs the hosts CPU; it also times a link with the
    /// emulator where tbf alone would be the default (docs/testbed.md).
    #[arg(long, value_name = "DUR")]
    pub slack: Option<String>,
}

impl UpArgs {
    /// The impairment the flags ask for; None when no flag is given.
    fn impairment(&self) -> anyhow::Result<Option<tb::Impairment>> {
        let given = [
            &self.delay,
            &self.jitter,
            &self.distribution,
            &self.loss,
            &self.reorder,
            &self.duplicate,
            &self.corrupt,
        ]
        .iter()
        .any(|f| f.is_some());
        if !given {
            return Ok(None);
        }
        let time = |flag: &str, v: &Option<String>| -> anyhow::Result<u64> {
            v.as_deref()
                .map(|t| tb::parse_duration_ns(t).map_err(|e| bad_input(format!("--{flag}: {e}"))))
                .unwrap_or(Ok(0))
        };
        let frac = |flag: &str, v: &Option<String>| -> anyhow::Result<f64> {
            match v.as_deref() {
                None => Ok(0.0),
                Some(t) => match tb::parse_loss_spec(t) {
                    Ok((p, None)) => Ok(p),
                    Ok(_) => Err(bad_input(format!("--{flag}: a fraction like 1%"))),
                    Err(e) => Err(bad_input(format!("--{flag}: {e}"))),
                },
            }
        };
        let mut imp = tb::Impairment {
            delay_ns: time("delay", &self.delay)?,
            jitter_ns: time("jitter", &self.jitter)?,
            reorder: frac("reorder", &self.reorder)?,
            duplicate: frac("duplicate", &self.duplicate)?,
            corrupt: frac("corrupt", &self.corrupt)?,
            ..Default::default()
        };
        if let Some(l) = &self.loss {
            (imp.loss, imp.gemodel) =
                tb::parse_loss_spec(l).map_err(|e| bad_input(format!("--loss: {e}")))?;
        }
        if let Some(d) = &self.distribution {
            imp.dist =
                tb::spec::parse_dist(d).map_err(|e| bad_input(format!("--distribution: {e}")))?;
        }
        imp.check()
            .map_err(|(f, m)| bad_input(format!("--{f}: {m}")))?;
        Ok(Some(imp))
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
    /// Also per-interface packets, bytes, drops and qdisc drops, and per
    /// emulated wire and direction its frames, drops, where their time
    /// went, and the emulator's own error per frame (send minus the
    /// model's due time: mean, p50, p99).
    #[arg(long)]
    pub counters: bool,
    /// Print JSON (plan, live state, counters) instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct ExecArgs {
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
    /// Node to run in.
    pub node: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(clap::Args)]
pub struct DownArgs {
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
    /// Remove every test-bed that has a state file.
    #[arg(long, conflicts_with = "name")]
    pub all: bool,
}

/// Bad input → exit 2; anything else → exit 1.
fn map(e: TestbedError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e)
    } else {
        e.into()
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.cmd {
        Sub::Up(a) => up(*a),
        Sub::Status(a) => status(a),
        Sub::Check(a) => check(a),
        Sub::Exec(a) => exec(a),
        Sub::Down(a) => down(a),
    }
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    tb::check_testbed_name(&a.name).map_err(|e| bad_input(format!("--name: {e}")))?;
    let rate_bps = match &a.rate {
        Some(r) => Some(tb::parse_rate(r).map_err(|e| bad_input(format!("--rate: {e}")))?),
        None => None,
    };
    if let Some(m) = a.mtu {
        if !(tb::spec::MTU_MIN..=tb::spec::MTU_MAX).contains(&m) {
            return Err(bad_input(format!(
                "--mtu {m}: outside {}..={}",
                tb::spec::MTU_MIN,
                tb::spec::MTU_MAX
            )));
        }
    }
    if let Some(p) = a.forward_pps {
        if !(tb::spec::FORWARD_PPS_MIN..=tb::spec::FORWARD_PPS_MAX).contains(&p) {
            return Err(bad_input(format!(
                "--forward-pps {p}: outside {}..={} packets/s",
                tb::spec::FORWARD_PPS_MIN,
                tb::spec::FORWARD_PPS_MAX
            )));
        }
    }
    if let Some(q) = a.txqueuelen {
        if !(tb::spec::TXQUEUELEN_MIN..=tb::spec::TXQUEUELEN_MAX).contains(&q) {
            return Err(bad_input(format!(
                "--txqueuelen {q}: outside {}..={} packets",
                tb::spec::TXQUEUELEN_MIN,
                tb::spec::TXQUEUELEN_MAX
            )));
        }
    }
    // Options this command has no flag for (campaign axes such as a link
    // delay) keep their defaults.
    let slack_ns = match &a.slack {
        Some(v) => Some(tb::parse_slack(v).map_err(|e| bad_input(format!("--slack: {e}")))?),
        None => None,
    };
    #[allow(clippy::needless_update)]
    let o = LinkOpts {
        mtu: a.mtu,
        rate_bps,
        offloads: a.offloads.map(|x| matches!(x, OnOff::On)),
        forward_pps: a.forward_pps,
        txqueuelen: a.txqueuelen,
        slack_ns,
        ..LinkOpts::default()
    };
    let imp = a.impairment()?;
    let queue = match &a.queue {
        Some(q) => Some(tb::parse_queue(q).map_err(|e| bad_input(format!("--queue: {e}")))?),
        None => None,
    };
    let aqm = match &a.aqm {
        Some(q) => Some(tb::spec::parse_aqm(q).map_err(|e| bad_input(format!("--aqm: {e}")))?),
        None => None,
    };
    let mut spec = if PRESETS.contains(&a.topology.as_str()) {
        tb::preset(&a.topology, &o).map_err(map)?
    } else if Path::new(&a.topology).exists() || a.topology.ends_with(".toml") {
        tb::load_file(Path::new(&a.topology), &o).map_err(map)?
    } else {
        return Err(bad_input(format!(
            "`{}` is neither a preset ({}) nor a topology file",
            a.topology,
            PRESETS.join(", ")
        )));
    };
    if let Some(i) = &imp {
        spec.impair_all(i);
    }
    if let Some(q) = queue {
        spec.queue_all(q);
    }
    if let Some(q) = aqm {
        spec.aqm_all(q);
    }
    spec.validate().map_err(map)?;
    tb::cleanup_on_signal()?;
    let replacing = tb::exists(&a.name);
    let t = Testbed::up(&a.name, &spec).map_err(map)?;
    // It is meant to outlive this command.
    t.keep();
    if replacing {
        eprintln!("wirebench: replaced the earlier test-bed `{}`", a.name);
    }
    print_plan(&t, None);
    println!(
        "test-bed `{}` is up; `wirebench testbed check --name {0}` verifies it, `wirebench testbed down --name {0}` removes it",
        a.name
    );
    Ok(())
}

fn attach(name: &str) -> anyhow::Result<Testbed> {
    tb::check_testbed_name(name).map_err(|e| bad_input(format!("--name: {e}")))?;
    Testbed::attach(name).map_err(|e| {
        let others: Vec<String> = tb::list().into_iter().filter(|n| n != name).collect();
        if matches!(e, TestbedError::NotUp(..)) && !others.is_empty() {
            anyhow::anyhow!(
                "{e} (test-beds up: {}; pick one with --name)",
                others.join(", ")
            )
        } else {
            map(e)
        }
    })
}

fn print_plan(
    t: &Testbed,
    live: Option<
        &std::collections::BTreeMap<String, std::collections::BTreeMap<String, tb::LiveIface>>,
    >,
) {
    println!("test-bed `{}` ({})", t.name(), t.spec().source);
    println!(
        "{:<8} {:<7} {:<16} {:<6} {:<12} {:>6} {:>9} {:<9} {:<15} ipv6",
        "node", "kind", "netns", "iface", "peer", "mtu", "rate", "offloads", "ipv4"
    );
    for n in &t.plan().nodes {
        for f in &n.ifaces {
            let li = live
                .and_then(|l| l.get(&n.name))
                .and_then(|m| m.get(&f.name));
            let mtu = match li {
                Some(l) if l.mtu != f.mtu => format!("{}!={}", l.mtu, f.mtu),
                _ => f.mtu.to_string(),
            };
            let offloads = match li {
                Some(l) if !l.offloads.is_empty() => {
                    let on: Vec<&str> = l
                        .offloads
                        .iter()
                        .filter(|(_, v)| **v)
                        .map(|(k, _)| k.as_str())
                        .collect();
                    if on.is_empty() {
                        "off".to_string()
                    } else {
                        on.join(",")
                    }
                }
                _ => (if f.offloads { "on" } else { "off" }).to_string(),
            };
            let state = match li {
                Some(l) if !l.up => " DOWN",
                None if live.is_some() => " MISSING",
                _ => "",
            };
            println!(
                "{:<8} {:<7} {:<16} {:<6} {:<12} {:>6} {:>9} {:<9} {:<15} {}{}",
                n.name,
                n.kind.as_str(),
                n.netns,
                f.name,
                format!("{}/{}", f.peer_node, f.peer_iface),
                mtu,
                f.rate_bps.map(format_rate).unwrap_or_else(|| "-".into()),
                offloads,
                f.v4.map(|a| format!("{a}/24"))
                    .unwrap_or_else(|| "-".into()),
                f.v6.map(|a| format!("{a}/64"))
                    .unwrap_or_else(|| "-".into()),
                state
            );
        }
        if let Some(spec) = t.spec().node(&n.name) {
            if let Some(p) = spec.forward_pps {
                println!(
                    "{:<8} {:<7} {:<16} {:<6} forwards at most {p} packets/s out of each interface",
                    n.name, "", "", "*"
                );
            }
            if spec.txqueuelen.is_some() {
                println!(
                    "{:<8} {:<7} {:<16} {:<6} queues {} packets per shaped interface",
                    n.name,
                    "",
                    "",
                    "*",
                    spec.queue_len()
                );
            }
        }
        if n.kind == NodeKind::Switch {
            println!(
                "{:<8} {:<7} {:<16} {:<6} bridges {}",
                n.name,
                "",
                "",
                "br0",
                n.ifaces
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    let routers = t.routers();
    if !routers.is_empty() {
        println!("routers (forwarding on): {}", routers.join(", "));
    }
    for (li, l) in t.spec().links.iter().enumerate() {
        let backend = t.backends().get(li).map(|b| b.as_str()).unwrap_or("?");
        println!("link {}: {backend}{}", l.label(), link_detail(l));
    }
}

/// What a link does beyond its rate, for `status` (`, delay 20ms ± 2ms
/// normal, loss 1%, queue 20ms`).
fn link_detail(l: &tb::LinkSpec) -> String {
    let mut s = String::new();
    let ms = |ns: u64| format!("{}ms", ns as f64 / 1e6);
    let pct = |p: f64| format!("{}%", (p * 1e6).round() / 1e4);
    if let Some(r) = l.rate_bps {
        s.push_str(&format!(", {}", format_rate(r)));
    }
    if let Some(i) = &l.impairment {
        if i.delay_ns > 0 {
            s.push_str(&format!(", delay {}", ms(i.delay_ns)));
            if i.jitter_ns > 0 {
                s.push_str(&format!(" ± {} {}", ms(i.jitter_ns), i.dist.as_str()));
            }
        }
        if let Some(g) = i.gemodel {
            s.push_str(&format!(
                ", loss gemodel p {} r {} bad {} good {}",
                pct(g.p),
                pct(g.r),
                pct(g.loss_bad),
                pct(g.loss_good)
            ));
        } else if i.loss > 0.0 {
            s.push_str(&format!(", loss {}", pct(i.loss)));
        }
        for (name, v) in [
            ("reorder", i.reorder),
            ("duplicate", i.duplicate),
            ("corrupt", i.corrupt),
        ] {
            if v > 0.0 {
                s.push_str(&format!(", {name} {}", pct(v)));
            }
        }
    }
    if let Some(q) = l.queue {
        s.push_str(&match q {
            tb::QueueLimit::Packets(n) => format!(", queue {n}p"),
            tb::QueueLimit::Bytes(b) => format!(", queue {b} B"),
            tb::QueueLimit::Time(ns) => format!(", queue {}", ms(ns)),
        });
    }
    if let Some(a) = l.aqm {
        s.push_str(&format!(", aqm {}", a.as_text()));
    }
    if let Some(n) = l.slack_ns {
        s.push_str(&format!(", slack {}us", n as f64 / 1e3));
    }
    if let Some(t) = &l.trace {
        for (k, t) in t.iter().enumerate() {
            s.push_str(&format!(
                ", trace {}→{} {} ({} mean)",
                l.endpoints[k],
                l.endpoints[1 - k],
                t.path.display(),
                tb::format_rate(t.mean_bps() as u64)
            ));
        }
    }
    s
}

fn status(a: StatusArgs) -> anyhow::Result<()> {
    let t = attach(&a.name)?;
    let live = t.live().map_err(map)?;
    let counters = if a.counters {
        Some(t.counters().map_err(map)?)
    } else {
        None
    };
    if a.json {
        let doc = serde_json::json!({
            "name": t.name(),
            "spec": t.spec(),
            "plan": t.plan(),
            "backends": t.backends(),
            "live": live,
            "counters": counters,
            "wire_counters": counters.as_ref().map(|_| t.wire_counters()),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    print_plan(&t, Some(&live));
    if let Some(c) = counters {
        println!();
        println!(
            "{:<8} {:<6} {:>10} {:>13} {:>8} {:>10} {:>13} {:>8} {:>8} {:>10} {:>9}",
            "node",
            "iface",
            "rx_pkts",
            "rx_bytes",
            "rx_drop",
            "tx_pkts",
            "tx_bytes",
            "tx_drop",
            "qdisc",
            "q_drops",
            "q_backlog"
        );
        for (node, ifs) in &c.nodes {
            for (iface, x) in ifs {
                println!(
                    "{:<8} {:<6} {:>10} {:>13} {:>8} {:>10} {:>13} {:>8} {:>8} {:>10} {:>9}",
                    node,
                    iface,
                    x.rx_packets,
                    x.rx_bytes,
                    x.rx_dropped,
                    x.tx_packets,
                    x.tx_bytes,
                    x.tx_dropped,
                    x.qdisc.kind,
                    x.qdisc.drops,
                    x.qdisc.backlog_bytes
                );
            }
        }
        // What each emulated wire did: frames in, delivered, lost by the
        // loss model, dropped by its queue or for want of buffers, and
        // where a delivered frame's time went (means since `up`).
        for ((l, w), e) in t
            .spec()
            .links
            .iter()
            .zip(t.wire_counters())
            .zip(t.send_errors())
        {
            let Some(w) = w else { continue };
            for (k, c) in w.iter().enumerate() {
                let (from, to) = (&l.endpoints[k], &l.endpoints[1 - k]);
                let split = match c.mean_split_s() {
                    Some([q, s, p]) => format!(
                        "; per frame: queueing {:.1} µs, serialisation {:.1} µs, propagation {:.1} µs",
                        q * 1e6,
                        s * 1e6,
                        p * 1e6
                    ),
                    None => String::new(),
                };
                let aqm = if c.aqm_drops > 0 {
                    format!(", CoDel drops {}", c.aqm_drops)
                } else {
                    String::new()
                };
                // The emulator's own error: each frame's send minus its due
                // time, as a mean and from its histogram.
                let err = e.as_ref().map(|e| &e[k]);
                let idle = match err.map(|h| (h.count(), h.quantile_ns(0.5), h.quantile_ns(0.99))) {
                    Some((n, Some(p50), Some(p99))) => format!(
                        "; idle in short gaps {:.3} ms, sent late by {:.1} µs mean, p50 ≤ {:.1} µs, p99 ≤ {:.1} µs",
                        c.idle_ns as f64 / 1e6,
                        c.late_ns as f64 / n as f64 / 1e3,
                        p50 as f64 / 1e3,
                        p99 as f64 / 1e3
                    ),
                    _ => String::new(),
                };
                // Frames scheduled from the previous hop's model rather
                // than from its emulator's late send (docs/testbed.md).
                let virt = if c.virtual_frames > 0 {
                    format!(
                        "; {} from the hop before's schedule, {:.1} µs earlier mean",
                        c.virtual_frames,
                        c.credit_ns as f64 / c.virtual_frames as f64 / 1e3
                    )
                } else {
                    String::new()
                };
                // Naps that ended a ms or more late: something held the
                // emulator's CPU, and the wire's time with it.
                let stall = if c.stalls > 0 {
                    format!("; stalls {} ({:.1} ms)", c.stalls, c.stall_ns as f64 / 1e6)
                } else {
                    String::new()
                };
                println!(
                    "wire {from}→{to}: in {}, delivered {}, lost {}, queue drops {}, buffer drops {}{aqm}{split}{idle}{virt}{stall}",
                    c.frames_in, c.delivered, c.lost, c.queue_drops, c.buffer_drops
                );
            }
        }
    }
    Ok(())
}

fn check(a: NameArg) -> anyhow::Result<()> {
    let t = attach(&a.name)?;
    let checks = t.check().map_err(map)?;
    let mut failed = 0;
    for c in &checks {
        let fam = if c.v6 { "IPv6" } else { "IPv4" };
        let to = c
            .to_addr
            .map(|x| x.to_string())
            .unwrap_or_else(|| "-".into());
        if let Some(why) = &c.skipped {
            println!("{:>6} → {:<6} {fam} {to:<16} skipped: {why}", c.from, c.to);
            continue;
        }
        let echo = match c.rtt_s {
            Some(r) => format!("echo {:.3} ms", r * 1e3),
            None => "NO ECHO".into(),
        };
        let mtu = match (c.path_mtu, c.expected_mtu) {
            (Some(m), Some(e)) if m == e => format!("path MTU {m}"),
            (Some(m), Some(e)) => format!("path MTU {m}, EXPECTED {e}"),
            (None, _) => "path MTU not measured".into(),
            (Some(m), None) => format!("path MTU {m}"),
        };
        let ok = c.ok();
        if !ok {
            failed += 1;
        }
        println!(
            "{:>6} → {:<6} {fam} {to:<16} {echo}, {mtu}  {}",
            c.from,
            c.to,
            if ok { "ok" } else { "FAILED" }
        );
    }
    if failed > 0 {
        anyhow::bail!(
            "{failed} of {} checks failed on test-bed `{}`",
            checks.len(),
            t.name()
        );
    }
    println!("all {} checks passed", checks.len());
    Ok(())
}

fn exec(a: ExecArgs) -> anyhow::Result<()> {
    let t = attach(&a.name)?;
    let (prog, rest) = a
        .command
        .split_first()
        .ok_or_else(|| bad_input("exec: no command given after --"))?;
    let mut cmd = t.command(&a.node, prog).map_err(map)?;
    cmd.args(rest);
    // The command takes this process's place (as `ip netns exec` itself
    // does), so a signal meant for `testbed exec` (SIGTERM from a
    // supervisor, SIGHUP of a closed terminal) reaches the command and
    // none is left running without its parent. exec only returns on
    // failure.
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = cmd.exec();
        anyhow::bail!("running `{prog}` in {}: {e}", a.node)
    }
    #[cfg(not(unix))]
    {
        let status = cmd
            .status()
            .map_err(|e| anyhow::anyhow!("running `{prog}` in {}: {e}", a.node))?;
        match status.code() {
            Some(0) => Ok(()),
            Some(c) => std::process::exit(c),
            None => std::process::exit(1),
        }
    }
}

fn down(a: DownArgs) -> anyhow::Result<()> {
    let names = if a.all {
        tb::list()
    } else {
        tb::check_testbed_name(&a.name).map_err(|e| bad_input(format!("--name: {e}")))?;
        vec![a.name.clone()]
    };
    for n in names {
        if tb::remove(&n).map_err(map)? {
            println!("removed test-bed `{n}`");
        } else {
            println!("no test-bed named `{n}` was up");
        }
    }
    Ok(())
}
