//! `wirebench demo`: the whole product in one command. As root it builds a
//! `router` test-bed, runs a short campaign (MTU 1500 vs 9000 × IPv4/IPv6 ×
//! UDP/TCP, 3 repetitions), writes the HTML report, prints the summary and
//! removes the test-bed; without root it says so and runs a loopback-only
//! version of the same idea.

use super::run::{binary_path, map_run_error};
use crate::exit::bad_input;
use std::path::PathBuf;
use wirebench_campaign::analysis::{summarize, text_table, DEFAULT_TABLE_METRICS};
use wirebench_campaign::runner::{install_signal_handlers, run_campaign, RunOptions};
use wirebench_campaign::{Campaign, Store};

/// The root demo: jumbo frames against fragmentation and MSS, both IP versions.
pub const DEMO_TESTBED: &str = r#"# wirebench demo: MTU 1500 vs 9000 through one router, Gigabit links.
# 8000-byte payloads: one frame at MTU 9000, six IP fragments (UDP) or six
# segments (TCP) at MTU 1500.
name = "demo"
description = "wirebench demo: MTU 1500 vs 9000 x IPv4/IPv6 x UDP/TCP through a router"
repetitions = 3
duration_s = 2
linger_s = 0.5
baseline = "mtu=1500"

[testbed]
preset = "router"
name = "wbdemo"
link_rate = "1gbit"
offloads = false

[matrix]
ip = [4, 6]
transport = ["udp", "tcp"]
payload = [8000]
pps = ["max"]
mtu = [1500, 9000]
"#;

/// Without root: the same comparison minus what needs a test-bed.
pub const DEMO_LOOPBACK: &str = r#"# wirebench demo (loopback: no root, so no test-bed and no MTU or link rate).
name = "demo-loopback"
description = "wirebench demo on loopback: IPv4/IPv6 x UDP/TCP"
repetitions = 3
duration_s = 2
linger_s = 0.5
baseline = "ip=4"

[loopback]

[matrix]
ip = [4, 6]
transport = ["udp", "tcp"]
payload = [1400]
pps = [20000]
"#;

#[derive(clap::Args)]
pub struct Args {
    /// Results store for the demo's runs.
    #[arg(long, value_name = "FILE", default_value = "wirebench-demo.db")]
    pub db: PathBuf,
    /// Where to write the HTML report.
    #[arg(
        short = 'o',
        long,
        value_name = "FILE",
        default_value = "wirebench-demo.html"
    )]
    pub output: PathBuf,
    /// Run the loopback version even as root.
    #[arg(long)]
    pub loopback: bool,
    /// The wirebench binary to run as sender and receiver (default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = wirebench_testbed::sys::is_root();
    let text = if root && !args.loopback {
        DEMO_TESTBED
    } else {
        if !root {
            eprintln!(
                "wirebench demo: not root, so no emulated test-bed (network namespaces need root); running the loopback version instead"
            );
        }
        DEMO_LOOPBACK
    };
    let c = Campaign::parse(text, "demo (built in)").map_err(bad_input)?;
    let binary = binary_path(args.binary)?;
    let store = Store::open(&args.db).map_err(crate::cmd::results::store_err)?;
    install_signal_handlers().map_err(anyhow::Error::new)?;
    eprintln!(
        "wirebench demo: {} scenarios × {} repetitions on {} (about {} s)",
        c.expand().len(),
        c.repetitions,
        c.target.describe(),
        c.planned_runs() * 4
    );
    let opts = RunOptions {
        binary,
        resume: false,
        progress: true,
        verbose: false,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        progress_log: None,
        wait_lab: None,
    };
    let out = run_campaign(&c, &store, &opts).map_err(map_run_error)?;
    if out.interrupted {
        eprintln!("wirebench demo: interrupted; the test-bed was removed");
        std::process::exit(130);
    }
    let summary = summarize(&store, &out.campaign_id.to_string()).map_err(anyhow::Error::new)?;
    wirebench_report::write_html(&summary, &args.output)?;
    println!("{}", text_table(&summary, DEFAULT_TABLE_METRICS));
    for n in &summary.notes {
        println!("note: {n}");
    }
    println!(
        "{} runs ok, {} failed; runs in {} (wirebench results list {} --db {})",
        out.ok,
        out.failed,
        args.db.display(),
        out.campaign_id,
        args.db.display()
    );
    println!("report: {}", args.output.display());
    if out.ok == 0 {
        anyhow::bail!("no run succeeded");
    }
    Ok(())
}
