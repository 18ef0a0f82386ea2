//! Campaigns: experiment matrices, the run loop, the results store and the
//! per-scenario aggregation that reports are drawn from.
//!
//! - [`campaign`]: the campaign file (TOML), validation, matrix expansion.
//! - [`store`]: the results store, SQLite or a shared PostgreSQL (one row per
//!   run, committed at once).
//! - [`lock`]: one runner per campaign at a time.
//! - [`facts`]: what a stored run's document says, read once when it is stored.
//! - [`runner`]: the run loop (test-bed reuse, subprocess send/recv, counters,
//!   progress, Ctrl-C, resume).
//! - [`rfc2544`]: RFC 2544 / RFC 5180 searches run as a campaign (`[rfc2544]`).
//! - [`adaptive`]: adaptive repetitions (run until the headline metric settles).
//! - [`estimate`]: runs and wall-clock time before a campaign starts.
//! - [`metrics`]: the metric table (family, unit, combine rule, direction,
//!   and which field of the typed result document each number comes from;
//!   `wirebench_schema::metrics`, re-exported).
//! - [`analysis`]: result documents (typed, `wirebench_schema::result`) →
//!   per-scenario statistics
//!   ([`summary::CampaignSummary`], the contract with the report layer,
//!   `wirebench_schema::summary`).
//! - [`series`]: a scenario's per-interval time series (`interval_ms`).
//! - [`stalls`]: host stalls in a test-bed run; `repeat_stalled`.
//! - [`dist`]: a scenario's delay and jitter distributions (merged histograms).
//! - [`env`](mod@env): where a campaign ran (kernel, CPU, version); UTC times.

#![warn(missing_docs)]

pub mod adaptive;
pub mod analysis;
pub mod campaign;
pub mod dist;
pub mod env;
pub mod estimate;
pub mod facts;
pub mod lock;
pub mod rfc2544;
pub mod runner;
pub mod series;
pub mod stalls;
pub mod store;

/// The metric table and the summary are the contract with the report layer.
pub use wirebench_schema::{metrics, summary};

pub use analysis::{summarize, AnalysisError};
pub use campaign::{Campaign, CampaignError, Scenario};
pub use store::{CampaignRow, RunRow, RunStatus, Store, StoreError};
