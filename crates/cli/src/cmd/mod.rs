//! One module per subcommand; each owns its clap arguments and its `run`.
pub mod agent;
pub mod agent_install;
pub mod decode;
pub mod demo;
pub mod exporter;
pub mod flowargs;
pub mod live;
pub mod prom;
pub mod recv;
pub mod recv_metrics;
pub mod report;
pub mod results;
pub mod results_long;
pub mod rfc2544;
pub mod run;
pub mod send;
pub mod testbed;
