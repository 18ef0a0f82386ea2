//! The bytes wirebench puts on the wire, and nothing else.
//!
//! Two things live here: the fixed 24-byte probe header carried at the start
//! of every UDP datagram and every TCP record, and the JSON-lines control
//! messages exchanged between `wirebench send` and `wirebench recv` on the
//! control connection. This crate knows nothing of sockets or clocks, so that
//! every decoding rule can be tested on plain byte slices. The HMAC rules
//! of authenticated sessions (`auth`) live here for the same reason.

#![warn(missing_docs)]

pub mod auth;
pub mod control;
pub mod limits;
pub mod probe;

/// Per-flow socket options and their parsers (shared with scripts and the CLI).
pub use wirebench_schema::opts as sockopts;

pub use control::{ControlMsg, Direction, FlowSetup, MeterMode, Transport, CONTROL_VERSION};
pub use probe::{
    ProbeError, ProbeHeader, Reflection, FLAG_HELLO, FLAG_LONG, FLAG_REFLECTED, FLAG_RTT,
    LONG_HEADER_LEN, MAGIC, MAX_TCP_RECORD, PROBE_HEADER_LEN, PROBE_VERSION, REFLECTION_LEN,
    RTT_MIN_LEN,
};
