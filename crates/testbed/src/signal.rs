//! Ctrl-C safety. [`cleanup_on_signal`] installs SIGINT/SIGTERM handlers
//! once per process; from then on every test-bed this process is building
//! (inside [`crate::Testbed::up`]) or owns (returned by `up`, until `down` or
//! [`crate::Testbed::keep`]) is removed when such a signal arrives, and the
//! process exits with 128 + signal number.
//!
//! The handler itself only writes the signal number to a pipe (the one thing
//! a signal handler may safely do); a watcher thread does the teardown. To
//! avoid racing a half-done build step, `up` runs each step under
//! [`step`], which the watcher takes (and never gives back) before it cleans.
//!
//! Test-beds exist only on Linux; elsewhere there is nothing to clean up and
//! [`cleanup_on_signal`] installs nothing.

use crate::error::TestbedError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

static OWNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static STEP: Mutex<()> = Mutex::new(());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
#[cfg(target_os = "linux")]
static PIPE_WR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
static INSTALL: Once = Once::new();

#[cfg(target_os = "linux")]
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WR.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is a local byte.
        unsafe {
            libc::write(fd, &b as *const u8 as *const libc::c_void, 1);
        }
    }
}

/// Installs the SIGINT/SIGTERM cleanup (idempotent). Call it early in any
/// process that builds test-beds: the CLI's `testbed up`, a campaign run.
pub fn cleanup_on_signal() -> Result<(), TestbedError> {
    let mut result = Ok(());
    INSTALL.call_once(|| result = install());
    result
}

#[cfg(not(target_os = "linux"))]
fn install() -> Result<(), TestbedError> {
    Ok(())
}

#[cfg(target_os = "linux")]
fn install() -> Result<(), TestbedError> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(TestbedError::io(
            "creating the signal pipe",
            std::io::Error::last_os_error(),
        ));
    }
    PIPE_WR.store(fds[1], Ordering::Relaxed);
    let rd = fds[0];
    std::thread::Builder::new()
        .name("wb-testbed-signal".into())
        .spawn(move || watch(rd))
        .map_err(|e| TestbedError::io("starting the signal watcher", e))?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a plain handler is valid; the
        // handler only calls write(2).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(TestbedError::io(
                    "installing the signal handler",
                    std::io::Error::last_os_error(),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn watch(rd: libc::c_int) {
    let mut b = 0u8;
    loop {
        // SAFETY: reading one byte into a local from our own pipe.
        let n = unsafe { libc::read(rd, &mut b as *mut u8 as *mut libc::c_void, 1) };
        if n == 1 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
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
    std::process::exit(128 + b as i32);
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
