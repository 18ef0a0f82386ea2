//! Ctrl-C for a campaign: SIGINT/SIGTERM set a flag the run loop and the
//! child-process waits poll, so the run in flight is abandoned (not stored)
//! and the receiver and test-bed are stopped in order.

use super::RunError;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// SIGINT/SIGTERM set a flag the loop checks; the first one aborts the run
/// in flight (not stored) and tears down cleanly. A second one means the
/// user wants out now: the process exits with 130 at once, and a test-bed
/// left behind is removed by the next `up` of the same name.
pub fn install_signal_handlers() -> Result<(), RunError> {
    for sig in [SIGINT, SIGTERM] {
        // The shutdown is registered first, so it sees the flag as the
        // previous signal left it.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&STOP))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&STOP)))
            .map_err(|e| RunError::io("installing the Ctrl-C handler", e))?;
    }
    Ok(())
}

/// True once SIGINT/SIGTERM arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
