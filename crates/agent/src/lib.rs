//! wirebench-agent: the process a campaign runs on every node it uses —
//! sender, receiver, router — and the controller's way of reaching it.
//!
//! - [`proto`]: the versioned JSON-lines protocol between controller and
//!   agent;
//! - [`server`]: the agent (`wirebench agent --stdio`): starts and stops
//!   receivers and senders, samples CPU and interface counters, reports
//!   metadata, sets MTU and offloads where allowed and restores them, runs
//!   the path-MTU probe;
//! - [`client`]: the controller's connection, over a local child, `ip netns
//!   exec` or OpenSSH, with one code path above the transport;
//! - [`host`]: the host readers the agent uses;
//! - [`journal`]: the record on disk of every change, which outlives an
//!   agent that dies without restoring, and the node's lock;
//! - [`policy`]: the node's own rules, which no controller widens: the
//!   interfaces it lets be changed, the files a `start` may name;
//! - `win`: the same on Windows, and its way of tying children to the
//!   agent and of cleaning up on console events.
//!
//! Design notes: the Agents section of DESIGN.md and `docs/agents.md`.

#![warn(missing_docs)]

pub mod child;
pub mod client;
pub mod host;
pub mod journal;
pub mod policy;
pub mod proto;
pub mod server;
#[cfg(windows)]
mod win;

pub use client::{connect_all, for_each, AgentConn, AgentSpec, Channel, CALL_TIMEOUT};
pub use policy::NodeAllow;
pub use proto::{
    Allow, Controller, CpuDelta, CpuSample, HostMeta, Role, AGENT_PROTOCOL_REVISION,
    AGENT_PROTOCOL_VERSION,
};
pub use server::{Agent, AgentConfig, Shared};

use thiserror::Error;

/// What can go wrong between a controller and an agent; every message
/// names the node.
#[derive(Debug, Error)]
pub enum AgentError {
    /// The transport (ssh, ip, the binary) could not be started.
    #[error("node {node}: cannot start `{what}`: {source}")]
    Spawn {
        /// The node's name in the campaign.
        node: String,
        /// The command line.
        what: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The transport started but no agent answered (wirebench missing, SSH
    /// refused).
    #[error("node {node} ({how}): the agent did not start: `{command}`: {reason}; {hint}")]
    NotStarted {
        /// The node's name in the campaign.
        node: String,
        /// The channel (`ssh HOST`, `netns NS`, `local`).
        how: String,
        /// The remote command.
        command: String,
        /// Exit status and the end of its stderr.
        reason: String,
        /// What to do about it.
        hint: String,
    },
    /// The agent speaks another protocol version.
    #[error("node {node} ({how}): the agent speaks agent protocol {theirs} (wirebench {their_release}), this controller speaks agent protocol {ours} (wirebench {our_release}); install wirebench {our_release} on that host")]
    Version {
        /// The node's name in the campaign.
        node: String,
        /// The channel.
        how: String,
        /// This controller's protocol version.
        ours: u32,
        /// The agent's.
        theirs: u32,
        /// The agent's wirebench release.
        their_release: String,
        /// This controller's release.
        our_release: String,
    },
    /// The agent or its link went away.
    #[error("node {node}: agent lost: {reason}")]
    Lost {
        /// The node's name in the campaign.
        node: String,
        /// How it ended (exit status, signal, stderr).
        reason: String,
    },
    /// Another controller's campaign holds the node (its lab lock).
    #[error("node {node}: {message}")]
    Busy {
        /// The node's name in the campaign.
        node: String,
        /// The agent's message, naming the holder.
        message: String,
    },
    /// The agent answered something that is not the protocol.
    #[error("node {node}: agent protocol: {message}")]
    Protocol {
        /// The node's name in the campaign.
        node: String,
        /// What was wrong.
        message: String,
    },
    /// The agent refused or failed a request; the session goes on.
    #[error("node {node}: {message}")]
    Remote {
        /// The node's name in the campaign.
        node: String,
        /// The agent's message.
        message: String,
    },
}

impl AgentError {
    /// The node the error is about.
    pub fn node(&self) -> &str {
        match self {
            AgentError::Spawn { node, .. }
            | AgentError::NotStarted { node, .. }
            | AgentError::Version { node, .. }
            | AgentError::Lost { node, .. }
            | AgentError::Protocol { node, .. }
            | AgentError::Busy { node, .. }
            | AgentError::Remote { node, .. } => node,
        }
    }

    /// True when the agent (or its link) is gone, as opposed to an
    /// operation it refused.
    pub fn is_lost(&self) -> bool {
        matches!(self, AgentError::Lost { .. } | AgentError::Protocol { .. })
    }
}
