//! Campaigns: experiment matrices, the run loop, the results store and the
//! per-scenario aggregation that reports are drawn from.

pub mod summary;
