//! Helpers shared by the engine's loopback tests.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wirebench_engine::{Daemon, DaemonConfig};

/// A verbose receiver daemon on `port`, serving until the flag is set.
pub fn daemon(port: u16) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let d = Daemon::bind(DaemonConfig {
        port,
        verbose: true,
        ..DaemonConfig::default()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || d.serve_until(&s).unwrap());
    (stop, h)
}
