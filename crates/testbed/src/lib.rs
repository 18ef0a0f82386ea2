//! Emulated test-beds in Linux network namespaces: hosts, routers and
//! switches (bridges) joined by veth links with a chosen MTU, link rate
//! (a token bucket that charges Ethernet's 24 B of preamble, FCS and gap),
//! wire timing and impairments (the user-space wire emulator: serialisation,
//! delay, jitter, loss, reorder, duplication, corruption; `emu`, `emu_run`)
//! and offloads; dual-stack addressing and routes; teardown that removes
//! exactly what was made. It knows nothing of traffic: the campaign layer
//! runs `wirebench send/recv` inside the nodes via [`Testbed::command`].
//!
//! ```no_run
//! use wirebench_testbed::{preset, parse_rate, LinkOpts, Testbed};
//! let o = LinkOpts { mtu: Some(1500), rate_bps: Some(parse_rate("100mbit")?), ..Default::default() };
//! wirebench_testbed::cleanup_on_signal()?;          // Ctrl-C removes what we build
//! let tb = Testbed::up("demo", &preset("router", &o)?)?;
//! let b = tb.addr("b", false)?;                      // 10.0.2.2
//! let before = tb.counters()?;
//! // ... run traffic with tb.command("a", "wirebench") ...
//! let drops = tb.counters()?.delta(&before).drop_sites();
//! tb.down()?;
//! # Ok::<(), wirebench_testbed::TestbedError>(())
//! ```

#![warn(missing_docs)]

pub mod aqm;
pub mod counters;
pub mod emu;
pub mod emu_late;
pub mod emu_run;
pub mod error;
pub mod os;
pub mod plan;
pub mod probe;
pub mod signal;
pub mod spec;
pub mod sys;
pub mod testbed;

pub use counters::{Counters, DropSite, IfaceCounters, QdiscCounters};
pub use emu_run::{hop_times, HopTime, SendError, WireCounters};
pub use error::TestbedError;
pub use plan::{IfacePlan, NodePlan, Plan, RoutePlan, SegmentPlan};
pub use probe::DfOutcome;
pub use signal::{cleanup_on_signal, interrupted};
pub use spec::{
    check_testbed_name, format_rate, load_file, parse_duration_ns, parse_loss_spec, parse_queue,
    parse_rate, parse_slack, parse_topology, preset, GeModel, Impairment, JitterDist, LinkOpts,
    LinkSpec, NodeKind, NodeSpec, QueueLimit, TopologySpec, DEFAULT_SLACK_NS, DEFAULT_TXQUEUELEN,
    PRESETS,
};
pub use testbed::{
    exists, list, rate_qdisc_lines, remove, state_path, LiveIface, PairCheck, Testbed, STATE_DIR,
    WIRE_MIN_FRAME, WIRE_OVERHEAD,
};

/// Default test-bed name.
pub const DEFAULT_NAME: &str = "wb";
