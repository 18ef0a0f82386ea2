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
//! - `win`: the same on Windows, and its way of tying children to the
//!   agent and of cleaning up on console events.
//!
//! Design notes: the Agents section of DESIGN.md and `docs/agents.md`.

pub mod child;
pub mod client;
pub mod host;
pub mod journal;
pub mod proto;
pub mod server;
#[cfg(windows)]
mod win;

pub use client::{connect_all, for_each, AgentConn, AgentSpec, Channel, CALL_TIMEOUT};
pub use proto::{
    Allow, CpuDelta, CpuSample, HostMeta, Role, AGENT_PROTOCOL_REVISION, AGENT_PROTOCOL_VERSION,
};
pub use server::{Agent, AgentConfig, Shared};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum AgentError {
    #[error("node {node}: cannot start `{what}`: {source}")]
    Spawn {
        node: String,
        what: String,
        source: std::io::Error,
    },
    #[error("node {node} ({how}): the agent did not start: `{command}`: {reason}; {hint}")]
    NotStarted {
        node: String,
        how: String,
        command: String,
        reason: String,
        hint: String,
    },
    #[error("node {node} ({how}): the agent speaks agent protocol {theirs} (wirebench {their_release}), this controller speaks agent protocol {ours} (wirebench {our_release}); install wirebench {our_release} on that host")]
    Version {
        node: String,
        how: String,
        ours: u32,
        theirs: u32,
        their_release: String,
        our_release: String,
    },
    #[error("node {node}: agent lost: {reason}")]
    Lost { node: String, reason: String },
    #[error("node {node}: agent protocol: {message}")]
    Protocol { node: String, message: String },
    #[error("node {node}: {message}")]
    Remote { node: String, message: String },
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
            | AgentError::Remote { node, .. } => node,
        }
    }

    /// True when the agent (or its link) is gone, as opposed to an
    /// operation it refused.
    pub fn is_lost(&self) -> bool {
        matches!(self, AgentError::Lost { .. } | AgentError::Protocol { .. })
    }
}
