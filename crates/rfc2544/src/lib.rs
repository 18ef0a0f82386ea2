//! RFC 2544 / RFC 5180 benchmark searches as pure logic: which rate or burst
//! to try next, when to stop, and what the answer is. No sockets, no clocks:
//! a caller runs each trial (on loopback, a test-bed or real hosts) and feeds
//! the outcome back, so the searches are unit-tested against simulated
//! devices and the trial runner stays a thin loop.
//!
//! - [`frame`]: RFC 2544 frame sizes and IMIX, frame size ↔ UDP payload for IPv4 and
//!   IPv6, line rate and per-layer bit rates (on top of the Ethernet framing
//!   model); it is `wirebench_schema::rfc2544::frame`, since a campaign
//!   summary stores test frames.
//! - [`search`]: throughput (§26.1), frame-loss rate (§26.3) and
//!   back-to-back (§26.4) searches; the outcomes and answers they trade in
//!   are `wirebench_schema::rfc2544::trial`.
//! - [`latency`]: latency at the found throughput (§26.2) from every
//!   packet's delay in a result document (`wirebench_schema::rfc2544::latency`).

#![warn(missing_docs)]

pub mod search;

/// The frame sizes and the latency figure are part of the summary contract.
pub use wirebench_schema::rfc2544::{frame, latency};

pub use frame::{
    FrameEntry, FrameError, FrameSpec, LayerRates, MixPart, MixSpec, TestFrame, IMIX_NAME,
    RFC2544_SIZES, SIMPLE_IMIX,
};
pub use latency::Latency;
pub use search::{
    BackToBack, BackToBackResult, FrameLoss, FrameLossPoint, Step, Throughput, ThroughputConfig,
    ThroughputResult, TrialOutcome,
};
