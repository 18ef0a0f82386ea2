//! `wirebench agent --stdio`: the per-node agent a campaign drives over its
//! stdin/stdout (a pipe, `ip netns exec`, or an SSH session). The logic is
//! in `wirebench_agent::server`; this only wires the streams and signals.

use std::path::PathBuf;

#[derive(clap::Args)]
#[command(after_help = "\
The agent is started by `wirebench run` on every node of a campaign's
[hosts] (over SSH: `ssh HOST wirebench agent --stdio`) and speaks the
versioned agent protocol (JSON lines) on stdin/stdout. It starts receivers
and senders, samples CPU and interface counters, reports metadata, and sets
MTU/offloads/link rates only on interfaces both the node (--allow-iface,
/etc/wirebench/agent.toml: without either, none) and the campaign allow;
files named by the senders and receivers it starts must lie in its own
work directory; everything it changed is restored when the session ends,
its input closes, or it gets SIGHUP/SIGINT/SIGTERM (Windows: a console
Ctrl-C, Ctrl-Break or close event). Every change is first written to a journal on the node
(/var/lib/wirebench for root, else $XDG_STATE_HOME/wirebench or
~/.local/state/wirebench; WIREBENCH_STATE_DIR overrides), so what an agent
killed with SIGKILL left is put back by the next agent on that node before
anything else, or by hand with `wirebench agent --restore`. The interfaces
carrying the agent's own SSH connection are never changed. Changing links
needs CAP_NET_ADMIN; without it, and on Windows, the agent only observes.
`wirebench agent --install user@host [--to PATH] [-- SSH_OPTIONS]` copies
this binary to a node over SSH and checks the copy's version.
See docs/agents.md and docs/platforms.md.")]
pub struct Args {
    /// Speak the agent protocol on stdin/stdout.
    #[arg(long, conflicts_with = "restore")]
    pub stdio: bool,
    /// Put back what a dead agent's journal on this node (this network
    /// namespace) says it changed, print it, and exit.
    #[arg(long)]
    pub restore: bool,
    /// Interfaces a controller may change (MTU, offloads, link rate), as
    /// a comma-separated list or repeated; `*` for every one but the
    /// management path. With /etc/wirebench/agent.toml too, only those
    /// both allow. Without either the agent changes nothing. It is the
    /// node's word when the node fixes the command (authorized_keys
    /// `command=`, or a wrapper named by the campaign's `agent`).
    #[arg(long = "allow-iface", value_name = "IFACE[,IFACE...]")]
    pub allow_iface: Vec<String>,
    /// The wirebench binary receivers and senders run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Copy this binary to the node DEST (user@host) over SSH, as a
    /// campaign's node reaches it (BatchMode; give the node's ssh_options
    /// after `--`), check the copy's size and `--version`, and exit.
    #[arg(long, value_name = "DEST", conflicts_with_all = ["stdio", "restore"])]
    pub install: Option<String>,
    /// With --install: the path on the node.
    #[arg(long, value_name = "PATH", requires = "install", default_value = super::agent_install::DEFAULT_REMOTE_PATH)]
    pub to: String,
    /// With --install: options for ssh, e.g. `-- -p 2222 -i ~/.ssh/lab`.
    #[arg(last = true, value_name = "SSH_OPTIONS")]
    pub ssh_options: Vec<String>,
    /// Protocol version to claim (tests of the version check only).
    #[arg(long, hide = true)]
    pub protocol_version: Option<u32>,
    /// Protocol revision to claim (tests that play an older agent only).
    #[arg(long, hide = true)]
    pub protocol_revision: Option<u32>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.restore {
        return restore();
    }
    if let Some(dest) = &args.install {
        return super::agent_install::install(dest, &args.to, &args.ssh_options);
    }
    if !args.stdio {
        crate::bail_input!("`wirebench agent` needs --stdio (it is started by `wirebench run`, see docs/agents.md), --restore or --install DEST");
    }
    if let Some(status) = wirebench_agent::server::supervise_under_ssh() {
        std::process::exit(status);
    }
    let program = match args.binary {
        Some(p) => p,
        None => std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find this program's path: {e}"))?,
    };
    let node_allow = wirebench_agent::NodeAllow::load(
        &args.allow_iface,
        std::path::Path::new(wirebench_agent::policy::NODE_CONFIG),
    )
    .map_err(crate::exit::bad_input)?;
    let agent = wirebench_agent::Agent::new(wirebench_agent::AgentConfig {
        program,
        version: args
            .protocol_version
            .unwrap_or(wirebench_agent::AGENT_PROTOCOL_VERSION),
        revision: args
            .protocol_revision
            .unwrap_or(wirebench_agent::AGENT_PROTOCOL_REVISION),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        node_allow,
    });
    wirebench_agent::server::cleanup_on_signal(agent.shared())
        .map_err(|e| anyhow::anyhow!("installing signal handlers: {e}"))?;
    agent.serve(std::io::stdin(), std::io::stdout().lock());
    Ok(())
}

/// `--restore`: what the next agent would do first, by hand.
fn restore() -> anyhow::Result<()> {
    use wirebench_agent::journal::{state_dir, Journal};
    let dir = state_dir();
    let (held, done) = Journal::open(&dir, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    held.release();
    if done.is_empty() {
        println!(
            "nothing to restore: no journal of a dead agent in {}",
            dir.display()
        );
        return Ok(());
    }
    for d in &done {
        println!("{d}");
    }
    if done.iter().any(|d| d.starts_with("FAILED")) {
        anyhow::bail!(
            "some changes could not be put back; the journal in {} is kept for the next try",
            dir.display()
        );
    }
    Ok(())
}
