//! Ctrl-C for a campaign: SIGINT/SIGTERM set a flag the run loop and the
//! child-process waits poll, so the run in flight is abandoned (not stored)
//! and the receiver and test-bed are stopped in order.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    if STOP.swap(true, Ordering::SeqCst) {
        // A second Ctrl-C: the user wants out now. The test-bed is left
        // behind and removed by the next `up` of the same name.
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// SIGINT/SIGTERM set a flag the loop checks; the first one aborts the run
/// in flight (not stored) and tears down cleanly.
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only touches an
        // atomic (and _exit) is valid and async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once SIGINT/SIGTERM arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
