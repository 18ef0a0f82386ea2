//! wirebench-engine: the part of wirebench that touches sockets and clocks.
//!
//! It owns the receiver daemon ([`recv::Daemon`]), the sender
//! ([`send::run`] driven by a [`plan::SessionPlan`]), the control session
//! between them, the pacer (absolute schedule, sleep-then-spin, `sendmmsg`
//! batches), the receive path (`recvmmsg` batches, kernel timestamps), RTT
//! reflection, TCP record framing, and the host counters read around a run
//! (UDP buffer drops, CPU, TCP_INFO, path MTU). Statistics are computed by
//! `wirebench-stats`; the engine only feeds it timestamps and sizes, and
//! assembles the `wirebench.result/1` document (`assemble`; the types are
//! `wirebench_schema::result`).
//! Protocol and design notes: `docs/engine.md`.

#![warn(missing_docs)]

mod assemble;
mod auth;
pub mod budget;
pub mod clock;
pub mod ctl;
pub mod gate;
pub mod live;
pub mod multi;
mod net;
mod pacing;
pub mod plan;
mod records;
pub mod recv;
mod reverse;
mod rtt;
pub mod send;
mod session;
mod sockopt;
pub mod sys;
pub mod transport;
#[cfg(target_os = "linux")]
pub mod xdp;

pub use assemble::rfc3339;
pub use multi::run_many;
/// The batched datagram receive (`recvmmsg` with kernel stamps on Linux,
/// one datagram a call elsewhere), for receive loops outside the engine
/// (the iperf3 server).
pub use net::{enable_rx_timestamps, AsRawFd, RecvBatch};
pub use plan::{
    CheckedPlan, FlowPlan, Hooks, NapiUse, SessionPlan, Stop, TxqUse, XdpRx, XdpTx, XdpUse,
};
pub use recv::{Daemon, DaemonConfig, DaemonStats};
pub use send::{run, run_checked};
pub use wirebench_schema::result::ResultDoc;
pub use wirebench_wire::auth::{Cidr, Key};

/// The result document's types under the engine's name, for code that
/// names them through the engine; new code names `wirebench_schema::result`.
pub use wirebench_schema::result;

use thiserror::Error;

/// Default control port (TCP).
pub const DEFAULT_PORT: u16 = 5400;

/// What can go wrong in a run or in the receiver daemon.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The plan asks for something impossible (the CLI maps this to exit 2).
    #[error("{0}")]
    BadPlan(String),
    /// The destination could not be resolved (bad input too).
    #[error("cannot resolve {0}")]
    Resolve(String),
    /// Binding failed, e.g. the port is in use.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// A connection to the receiver failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The peer broke the control protocol.
    #[error("control protocol: {0}")]
    Protocol(String),
    /// The receiver refused the session, saying why.
    #[error("receiver refused: {0}")]
    Remote(String),
    /// The peer went away mid-session.
    #[error("peer gone: {0}")]
    PeerGone(String),
    /// The run failed part-way; the document holds what was measured, with
    /// `partial: true`.
    #[error("measurement incomplete: {reason}")]
    Partial {
        /// Why the run is incomplete.
        reason: String,
        /// What was measured.
        doc: Box<ResultDoc>,
    },
}

impl EngineError {
    /// An [`EngineError::Io`] while doing `what`.
    pub fn io(what: &str, source: std::io::Error) -> Self {
        EngineError::Io {
            what: what.to_string(),
            source,
        }
    }

    /// True when the error is the user's input rather than a failed measurement.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            EngineError::BadPlan(_) | EngineError::Resolve(_) | EngineError::Bind { .. }
        )
    }
}
