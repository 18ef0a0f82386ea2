//! wirebench-iperf3: iperf3's protocol on the wire, both ways.
//!
//! [`server`] serves unmodified iperf3 clients beside `wirebench recv`
//! (`recv --iperf3`), within the daemon's `--allow` list and budgets, and
//! records every session as a `wirebench.result/1` document with per-packet
//! delay and jitter of UDP streams from iperf3's own send stamps.
//! [`client`] runs wirebench's traffic models against an unmodified
//! `iperf3 -s` (`send --iperf3`) and reads back what that server measured.
//! Wire format: [`proto`]; the mapping and its limits: docs/iperf3.md.

#![warn(missing_docs)]

pub mod client;
mod measure;
pub mod proto;
pub mod server;

use thiserror::Error;

/// The iperf3 port a server listens on when none is given.
pub const DEFAULT_PORT: u16 = 5201;

/// What went wrong talking iperf3.
#[derive(Debug, Error)]
pub enum Iperf3Error {
    /// The control connection failed or closed.
    #[error("iperf3 control connection: {0}")]
    Control(std::io::Error),
    /// The peer said something iperf3 never says.
    #[error("iperf3 protocol: {0}")]
    Protocol(String),
    /// The peer asked for something wirebench does not map (SCTP, RSA
    /// authentication, ...).
    #[error("cannot serve: {0}")]
    Unsupported(String),
    /// The iperf3 server refused the test.
    #[error("the iperf3 server refused: {0}")]
    Refused(String),
    /// Binding, connecting or another socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the address.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The request is not something the iperf3 protocol can carry (the
    /// CLI maps this to exit 2).
    #[error("{0}")]
    BadPlan(String),
    /// Budgets, `--allow` or slots refused the session.
    #[error("refused: {0}")]
    Admission(String),
}

impl Iperf3Error {
    pub(crate) fn control(e: std::io::Error) -> Self {
        Iperf3Error::Control(e)
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Iperf3Error::Io {
            what: what.into(),
            source,
        }
    }

    /// True when the error is the user's input rather than a failed run.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Iperf3Error::BadPlan(_))
    }
}

/// A result document with what every iperf3 run states the same way: the
/// schema, tool, start time, one-way meter, this host, and how the clock
/// offset was (not) measured.
fn doc_shell(started_real: u64, clock_method: &str) -> wirebench_engine::ResultDoc {
    use wirebench_engine::result::{ClockInfo, Tool, SCHEMA};
    wirebench_engine::ResultDoc {
        schema: SCHEMA.into(),
        tool: Tool {
            name: "wirebench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at: wirebench_engine::rfc3339(started_real),
        meter: wirebench_wire::MeterMode::Owd,
        host: wirebench_engine::sys::host_info(),
        clock: ClockInfo {
            method: clock_method.into(),
            ..ClockInfo::default()
        },
        ..wirebench_engine::ResultDoc::default()
    }
}
