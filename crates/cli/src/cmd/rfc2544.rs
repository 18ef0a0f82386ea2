//! `wirebench rfc2544`: RFC 2544 / RFC 5180 throughput, latency, frame-loss
//! and back-to-back searches from the command line. The flags are written
//! into a campaign file with an `[rfc2544]` block (stored with the results,
//! so `wirebench run` can repeat it exactly) and run by the campaign layer.

use crate::cmd::run::{binary_path, map_run_error};
use crate::exit::bad_input;
use anyhow::Context;
use std::path::PathBuf;
use wirebench_campaign::rfc2544::{run as run_rfc, summarize, text_tables};
use wirebench_campaign::runner::{install_signal_handlers, RunOptions};
use wirebench_campaign::{Campaign, CampaignError, Store};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  wirebench rfc2544 --testbed router --rate 100mbit --trial-s 5
  wirebench rfc2544 --loopback -4 --frames 64,1518,imix --tests throughput,latency --trial-s 2
  wirebench rfc2544 --hosts 192.0.2.7,2001:db8::7 --rate 1gbit --loss 0.1

Every trial is stored in the results store; `wirebench report` draws the tables and the
loss-vs-load chart. Where wirebench departs from the RFC: docs/rfc2544.md.")]
pub struct Args {
    /// Run on loopback (127.0.0.1 / ::1): no root, no line rate (the first trial is unpaced).
    #[arg(long, conflicts_with_all = ["testbed", "topology", "hosts"])]
    pub loopback: bool,
    /// Emulated test-bed preset (direct, router, two-routers; needs root). The default: router.
    #[arg(long, value_name = "PRESET", conflicts_with_all = ["topology", "hosts"])]
    pub testbed: Option<String>,
    /// Emulated test-bed from a topology file (sender `a`, receiver `b` unless --sender/--receiver).
    #[arg(long, value_name = "FILE", conflicts_with = "hosts")]
    pub topology: Option<PathBuf>,
    /// Test-bed node that sends.
    #[arg(long, value_name = "NODE", requires = "topology")]
    pub sender: Option<String>,
    /// Test-bed node that receives.
    #[arg(long, value_name = "NODE", requires = "topology")]
    pub receiver: Option<String>,
    /// Real hosts: the receiver's IPv4 and/or IPv6 address (comma-separated); `wirebench recv` must run there.
    #[arg(long, value_name = "ADDR[,ADDR6]")]
    pub hosts: Option<String>,
    /// Link rate (bit/s on the wire, e.g. 100mbit, 1gbit): sets the test-bed's links, and gives the
    /// line rate per frame size (without it the first trial is unpaced and the tester's maximum is the ceiling).
    #[arg(long, value_name = "RATE")]
    pub rate: Option<String>,
    /// Test-bed: every router forwards at most N packets/s out of each interface (docs/testbed.md).
    #[arg(long, value_name = "N")]
    pub forward_pps: Option<i64>,
    /// Link MTU (test-bed: applied; hosts: what the path has). Frames above MTU + 18 are refused.
    #[arg(long, value_name = "N")]
    pub mtu: Option<u32>,
    /// IPv4 only (default: IPv4 and IPv6 side by side, RFC 5180).
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Ethernet frame sizes in bytes, FCS included (default: RFC 2544's 64,128,256,512,1024,1280,1518),
    /// and `imix` (the simple IMIX 64:7,594:4,1518:1, or --imix). Jumbo sizes need --mtu. A size too
    /// small for the 24 B probe header is sent as the smallest that carries it.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub frames: Option<Vec<String>>,
    /// The IMIX of the `imix` frame entry: FRAME:WEIGHT pairs, e.g. 64:7,570:4,1518:1 (default 64:7,594:4,1518:1).
    #[arg(long, value_name = "MIX")]
    pub imix: Option<String>,
    /// Tests: throughput, latency, frame-loss, back-to-back (default: all).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub tests: Option<Vec<String>>,
    /// Length of each rate trial, seconds (RFC 2544: 60; shorter is allowed and recorded).
    #[arg(long, value_name = "S")]
    pub trial_s: Option<f64>,
    /// Learning frames before every trial: seconds of the trial's own traffic, not stored.
    #[arg(long, value_name = "S")]
    pub learning_s: Option<f64>,
    /// Loss that still passes a throughput trial, percent (RFC 2544: 0; e.g. 0.1 for a partial drop rate).
    #[arg(long, value_name = "PCT")]
    pub loss: Option<f64>,
    /// Throughput search resolution, percent of the line rate (default 0.5).
    #[arg(long, value_name = "PCT")]
    pub resolution: Option<f64>,
    /// At most this many search trials per frame size (default 30).
    #[arg(long, value_name = "N")]
    pub max_trials: Option<i64>,
    /// Run a lossy throughput trial again up to N times; it passes if a repeat does (default 0, as
    /// the RFC). For an emulated test-bed, where the tester shares the CPU with the device under test.
    #[arg(long, value_name = "N")]
    pub retries: Option<i64>,
    /// Frame-loss load step, percent (RFC 2544: 10 or finer).
    #[arg(long, value_name = "PCT")]
    pub step: Option<i64>,
    /// Back-to-back: repetitions averaged (RFC 2544 asks for 50; default 5).
    #[arg(long, value_name = "N")]
    pub b2b_repeats: Option<i64>,
    /// Back-to-back: longest burst tried, seconds at line rate (default 2).
    #[arg(long, value_name = "S")]
    pub b2b_longest_s: Option<f64>,
    /// How long the receiver waits for late frames after each trial, ms (RFC 2544: 2000).
    #[arg(long, value_name = "MS")]
    pub linger_ms: Option<u64>,
    /// Campaign name in the results store.
    #[arg(long, default_value = "rfc2544")]
    pub name: String,
    /// Test-bed name (namespaces wb-NAME-NODE).
    #[arg(long, value_name = "NAME", default_value = "rfc")]
    pub tb_name: String,
    /// Results store: an SQLite file, or a PostgreSQL database a lab shares,
    /// postgres://USER@HOST[:PORT]/DB (the password from PGPASSWORD or
    /// ~/.pgpass, never from the URL; docs/campaigns.md "Results store").
    /// Created if missing.
    #[arg(
        long,
        value_name = "FILE|URL",
        default_value = "wirebench.db",
        env = "WIREBENCH_DB",
        hide_env_values = true
    )]
    pub db: PathBuf,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The wirebench binary to run as sender and receiver (default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// No per-trial lines.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// The flag a campaign key came from, for error messages.
fn flag_of(key: &str) -> &'static str {
    match key.trim_start_matches("rfc2544.") {
        "ip" => "-4/-6",
        "frames" => "--frames",
        "imix" => "--imix",
        "tests" => "--tests",
        "trial_s" => "--trial-s",
        "learning_s" => "--learning-s",
        "loss_pct" => "--loss",
        "resolution_pct" => "--resolution",
        "max_trials" => "--max-trials",
        "retries" => "--retries",
        "step_pct" => "--step",
        "b2b_repeats" => "--b2b-repeats",
        "b2b_longest_s" => "--b2b-longest-s",
        "preset" => "--testbed",
        "file" => "--topology",
        "link_rate" => "--rate",
        "mtu" => "--mtu",
        "forward_pps" => "--forward-pps",
        "receiver" | "receiver6" => "--hosts",
        "linger_s" => "--linger-ms",
        "name" => "--name / --tb-name",
        _ => "",
    }
}

fn campaign_text(a: &Args) -> anyhow::Result<String> {
    use toml::Value as V;
    let mut top = toml::Table::new();
    top.insert("name".into(), V::String(a.name.clone()));
    if let Some(l) = a.linger_ms {
        top.insert("linger_s".into(), V::Float(l as f64 / 1000.0));
    }
    let mut target = toml::Table::new();
    let target_name = if a.loopback {
        if a.rate.is_some() || a.mtu.is_some() {
            crate::bail_input!("--rate/--mtu: loopback has no link settings to apply");
        }
        "loopback"
    } else if let Some(h) = &a.hosts {
        for addr in h.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let ip: std::net::IpAddr = addr
                .parse()
                .map_err(|_| bad_input(format!("--hosts: {addr:?} is not an IP address")))?;
            let k = if ip.is_ipv6() {
                "receiver6"
            } else {
                "receiver"
            };
            target.insert(k.into(), V::String(addr.to_string()));
        }
        "hosts"
    } else {
        match &a.topology {
            Some(f) => {
                let f = std::fs::canonicalize(f)
                    .map_err(|e| bad_input(format!("--topology: {}: {e}", f.display())))?;
                target.insert("file".into(), V::String(f.display().to_string()));
                for (k, v, d) in [("sender", &a.sender, "a"), ("receiver", &a.receiver, "b")] {
                    let v = v.clone().unwrap_or_else(|| d.to_string());
                    target.insert(k.into(), V::String(v));
                }
            }
            None => {
                let p = a.testbed.clone().unwrap_or_else(|| "router".into());
                target.insert("preset".into(), V::String(p));
            }
        }
        target.insert("name".into(), V::String(a.tb_name.clone()));
        "testbed"
    };
    if !a.loopback {
        if let Some(r) = &a.rate {
            target.insert("link_rate".into(), V::String(r.clone()));
        }
        if let Some(m) = a.mtu {
            target.insert("mtu".into(), V::Integer(i64::from(m)));
        }
    }
    if let Some(f) = a.forward_pps {
        if target_name != "testbed" {
            crate::bail_input!("--forward-pps: only an emulated test-bed has routers to cap");
        }
        target.insert("forward_pps".into(), V::Integer(f));
    }
    top.insert(target_name.into(), V::Table(target));
    let mut b = toml::Table::new();
    let ips: Vec<i64> = match (a.ipv4, a.ipv6) {
        (true, _) => vec![4],
        (_, true) => vec![6],
        _ => vec![4, 6],
    };
    b.insert(
        "ip".into(),
        V::Array(ips.into_iter().map(V::Integer).collect()),
    );
    if let Some(f) = &a.frames {
        let entries = f
            .iter()
            .map(|x| {
                let x = x.trim();
                match x.parse::<u32>() {
                    Ok(n) => Ok(V::Integer(i64::from(n))),
                    Err(_) if x == "imix" => Ok(V::String(x.to_string())),
                    Err(_) => Err(bad_input(format!(
                        "--frames: {x:?} is neither a frame size in bytes nor imix"
                    ))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        b.insert("frames".into(), V::Array(entries));
    }
    if let Some(m) = &a.imix {
        b.insert("imix".into(), V::String(m.clone()));
    }
    if let Some(t) = &a.tests {
        b.insert(
            "tests".into(),
            V::Array(t.iter().map(|x| V::String(x.trim().to_string())).collect()),
        );
    }
    let floats = [
        ("trial_s", a.trial_s),
        ("learning_s", a.learning_s),
        ("loss_pct", a.loss),
        ("resolution_pct", a.resolution),
        ("b2b_longest_s", a.b2b_longest_s),
    ];
    for (k, v) in floats {
        if let Some(v) = v {
            b.insert(k.into(), V::Float(v));
        }
    }
    for (k, v) in [
        ("max_trials", a.max_trials),
        ("retries", a.retries),
        ("step_pct", a.step),
        ("b2b_repeats", a.b2b_repeats),
    ] {
        if let Some(v) = v {
            b.insert(k.into(), V::Integer(v));
        }
    }
    top.insert("rfc2544".into(), V::Table(b));
    toml::to_string(&top).context("writing the campaign")
}

fn flag_error(e: CampaignError) -> anyhow::Error {
    match &e {
        CampaignError::Invalid { key, reason, .. } => {
            let flag = flag_of(key);
            if flag.is_empty() {
                bad_input(format!("{key}: {reason}"))
            } else {
                bad_input(format!("{flag}: {reason}"))
            }
        }
        CampaignError::Syntax { reason, .. } => bad_input(reason),
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let text = campaign_text(&a)?;
    let c = Campaign::parse(&text, "wirebench rfc2544").map_err(flag_error)?;
    // Validate the block now, so bad flags exit 2 before anything is built.
    wirebench_campaign::rfc2544::Rfc2544Config::from_campaign(&c).map_err(flag_error)?;
    let binary = binary_path(a.binary.clone())?;
    let store = Store::open(&a.db).map_err(crate::cmd::results::store_err)?;
    install_signal_handlers().map_err(anyhow::Error::new)?;
    let opts = RunOptions {
        binary,
        resume: false,
        progress: false,
        verbose: !a.quiet,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        progress_log: None,
        wait_lab: None,
    };
    let quiet = a.quiet;
    let mut say = |line: String| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let out = run_rfc(&c, &store, &opts, &mut say).map_err(map_run_error)?;
    if out.interrupted {
        eprintln!(
            "wirebench: interrupted; the trials so far are stored in {} (campaign {})",
            a.db.display(),
            out.campaign_id
        );
        std::process::exit(130);
    }
    print_summary(&store, out.campaign_id, a.json.as_deref())?;
    Ok(())
}

/// Prints the RFC tables of a stored RFC 2544 campaign (and writes JSON).
pub fn print_summary(
    store: &Store,
    campaign_id: i64,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let row = store
        .campaign(campaign_id)
        .map_err(anyhow::Error::new)?
        .context("the campaign vanished from the store")?;
    let s = summarize(store, &row)
        .map_err(anyhow::Error::new)?
        .context("not an RFC 2544 campaign")?;
    print!("{}", text_tables(&s));
    if let Some(p) = json {
        let text = serde_json::to_string_pretty(&s)?;
        wirebench_input::write_file(p, text.as_bytes())?;
    }
    Ok(())
}
