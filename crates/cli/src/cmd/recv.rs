//! `wirebench recv`: the receiver daemon. Binds the control port and serves
//! sessions until killed; all measurement logic is in
//! `wirebench_engine::recv`.

use crate::exit::bad_input;
use std::net::IpAddr;
use wirebench_engine::{Daemon, DaemonConfig};

#[derive(clap::Args)]
#[command(after_help = "\
The receiver listens on one TCP control port (default 5400, IPv4 and IPv6 on
the same socket). Each `wirebench send` opens a session on it; the data
sockets of its flows get ephemeral ports that the control session tells the
sender, so only the control port has to be reachable through a firewall that
allows related traffic. Sessions run one after another and several at once;
a sender that goes silent for 10 s is given up on. Traffic that is not a
wirebench session is counted as foreign and ignored.

Examples:
  wirebench recv                 # [::]:5400, dual-stack
  wirebench recv -B 192.0.2.7    # one address only
  wirebench recv -p 6000 -q
  wirebench recv --log-dir logs/ # per-packet log of every session")]
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
    #[arg(short = 'x', long = "log-dir", value_name = "DIR")]
    pub log_dir: Option<std::path::PathBuf>,
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
    let daemon = Daemon::bind(DaemonConfig {
        bind,
        port: args.port,
        verbose: !args.quiet,
        log_dir: args.log_dir.clone(),
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
            eprintln!("wirebench recv: listening on {a} (control, TCP)");
        }
    }
    daemon.serve()?;
    Ok(())
}
