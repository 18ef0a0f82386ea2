//! `wirebench`: the command line. The only layer that turns typed errors into
//! messages and exit codes: 0 success, 1 the measurement failed, 2 bad usage
//! or bad input (clap's own usage errors already exit 2).

mod cmd;
mod ditg;
mod exit;
mod key;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "wirebench",
    version,
    about = "Network performance test-bed: modelled traffic, per-packet measurement, emulated topologies, campaigns and reports",
    long_about = None,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Receiver daemon: serves measurement sessions on the control port (IPv4 and IPv6).
    Recv(cmd::recv::Args),
    /// Send modelled traffic to a receiver and measure every packet.
    Send(Box<cmd::send::Args>),
    /// Build, inspect and remove emulated test-beds in network namespaces.
    Testbed(cmd::testbed::Args),
    /// Run a campaign (an experiment matrix) and store every run.
    Run(cmd::run::Args),
    /// RFC 2544 / RFC 5180 searches: throughput, latency, frame-loss rate and back-to-back per frame size, IPv4 and IPv6.
    Rfc2544(Box<cmd::rfc2544::Args>),
    /// Look inside the results store without SQL.
    Results(cmd::results::Args),
    /// Write the HTML report, CSV and JSON exports from the results store.
    Report(cmd::report::Args),
    /// Build a router test-bed, run a short campaign and write a report.
    Demo(cmd::demo::Args),
    /// Per-node agent a campaign drives over stdin/stdout (locally, in a namespace or over SSH).
    Agent(cmd::agent::Args),
    /// Prometheus exporter: /probe?target=HOST&module=NAME runs one short measurement, /metrics its own counters.
    Exporter(cmd::exporter::Args),
    /// Decode a per-packet log (wirebench's or D-ITG's): summary, windowed series, CSV/Parquet export.
    Decode(cmd::decode::Args),
}

fn main() {
    let args = match ditg::translate(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => std::process::exit(exit::code_for(Err(e))),
    };
    let matches = negative_values(Cli::command()).get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Recv(a) => cmd::recv::run(a),
        Command::Send(a) => cmd::send::run(*a),
        Command::Testbed(a) => cmd::testbed::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Rfc2544(a) => cmd::rfc2544::run(*a),
        Command::Results(a) => cmd::results::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Decode(a) => cmd::decode::run(a),
        Command::Exporter(a) => cmd::exporter::run(a),
    };
    std::process::exit(exit::code_for(result));
}

/// Every option that takes a value accepts one that looks negative, so
/// `-t -1` gets the option's own range message naming `-t` (exit 2), not
/// clap's "unexpected argument '-1'", which named no flag.
fn negative_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() && !a.is_positional() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negative_values)
}
