//! One module per subcommand; each owns its clap arguments and its `run`.
pub mod agent;
pub mod decode;
pub mod demo;
pub mod flowargs;
pub mod recv;
pub mod report;
pub mod results;
pub mod run;
pub mod send;
pub mod testbed;
