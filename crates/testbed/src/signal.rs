//! Ctrl-C safety. [`cleanup_on_signal`] installs SIGINT/SIGTERM handlers
//! once per process; from then on every test-bed this process is building
//! (inside [`crate::Testbed::up`]) or owns (returned by `up`, until `down` or
//! [`crate::Testbed::keep`]) is removed when such a signal arrives, and the
//! process exits with 128 + signal number.
//!
//! signal-hook's iterator receives the signals (its handler only writes to
//! a pipe, the one thing a signal handler may safely do); a watcher thread
//! does the teardown. To avoid racing a half-done build step, `up` runs each
//! step under [`step`], which the watcher takes (and never gives back)
//! before it cleans.
//!
//! Test-beds exist only on Linux; elsewhere there is nothing to clean up and
//! [`cleanup_on_signal`] installs nothing.

use crate::error::TestbedError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

static OWNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static STEP: Mutex<()> = Mutex::new(());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// Installs the SIGINT/SIGTERM cleanup (idempotent). Call it early in any
/// process that builds test-beds: the CLI's `testbed up`, a campaign run.
pub fn cleanup_on_signal() -> Result<(), TestbedError> {
    let mut result = Ok(());
    INSTALL.call_once(|| result = install());
    result
}

#[cfg(target_os = "linux")]
fn install() -> Result<(), TestbedError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| TestbedError::io("installing the signal handler", e))?;
    std::thread::Builder::new()
        .name("wb-testbed-signal".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                clean_up_and_exit(sig);
            }
        })
        .map_err(|e| TestbedError::io("starting the signal watcher", e))?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn install() -> Result<(), TestbedError> {
    Ok(())
}

/// Removes every owned test-bed and exits with 128 + `sig`.
#[cfg(target_os = "linux")]
fn clean_up_and_exit(sig: i32) -> ! {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // Wait for a running build step to finish, then hold the lock for good.
    let _held = STEP.lock().unwrap_or_else(|p| p.into_inner());
    let names: Vec<String> = OWNED.lock().map(|v| v.clone()).unwrap_or_default();
    for n in names {
        match crate::testbed::teardown(&n) {
            Ok(_) => eprintln!("wirebench: interrupted; removed test-bed `{n}`"),
            Err(e) => eprintln!("wirebench: interrupted; removing test-bed `{n}` failed: {e}"),
        }
    }
    std::process::exit(128 + sig);
}

/// Marks a test-bed as owned by this process (removed on a signal).
pub(crate) fn own(name: &str) {
    if let Ok(mut v) = OWNED.lock() {
        if !v.iter().any(|n| n == name) {
            v.push(name.to_string());
        }
    }
}

/// No longer removed on a signal (it was taken down, or is meant to stay).
pub(crate) fn disown(name: &str) {
    if let Ok(mut v) = OWNED.lock() {
        v.retain(|n| n != name);
    }
}

/// True once a SIGINT/SIGTERM was seen by the installed handler.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Runs one build step: keeps the watcher from tearing down in the middle of
/// it. After a signal, the step never starts: the calling thread waits for
/// the watcher, which removes the test-bed and ends the process.
pub(crate) fn step() -> MutexGuard<'static, ()> {
    let g = STEP.lock().unwrap_or_else(|p| p.into_inner());
    if interrupted() {
        drop(g);
        loop {
            std::thread::park();
        }
    }
    g
}
