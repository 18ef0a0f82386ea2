//! Clocks and waiting.
//!
//! Two clocks on purpose: timestamps that cross the network are
//! CLOCK_REALTIME (the only clock two hosts can be compared on, after the
//! offset exchange), while the send schedule runs on CLOCK_MONOTONIC so that
//! an NTP step during a run cannot make the pacer burst or stall.
//!
//! Linux reads the clocks with clock_gettime and sleeps with an absolute
//! clock_nanosleep; other systems use the standard library's SystemTime
//! (realtime) and Instant (monotonic: QueryPerformanceCounter on Windows)
//! and relative sleeps, with a spin window as wide as their timers are
//! coarse.

#[cfg(target_os = "linux")]
mod imp {
    /// Below this distance from a deadline the pacer spins instead of sleeping:
    /// a timer wake-up on a loaded VM is routinely late by tens of microseconds.
    pub const SPIN_NS: u64 = 60_000;

    fn now(clock: libc::clockid_t) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live timespec for the kernel to fill; on these
        // clocks clock_gettime cannot fail with a valid pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// Nanoseconds since the Unix epoch (CLOCK_REALTIME).
    #[inline]
    pub fn realtime_ns() -> u64 {
        now(libc::CLOCK_REALTIME)
    }

    /// Nanoseconds on CLOCK_MONOTONIC.
    #[inline]
    pub fn mono_ns() -> u64 {
        now(libc::CLOCK_MONOTONIC)
    }

    /// Sleeps on the monotonic clock until `deadline` (absolute), without spinning.
    pub fn sleep_until(deadline: u64) {
        let ts = libc::timespec {
            tv_sec: (deadline / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
        };
        loop {
            // SAFETY: `ts` is a live timespec read by the kernel; no
            // remainder is asked for (null), which TIMER_ABSTIME does not use.
            let r = unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            if r != libc::EINTR {
                break;
            }
        }
    }

    /// Makes timer wake-ups of the calling thread as precise as the kernel
    /// allows (the default 50 µs slack would be added to every sleep).
    pub fn tighten_timer_slack() {
        // SAFETY: PR_SET_TIMERSLACK takes an integer and touches no memory of ours.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
        }
    }

    /// Asks for a higher CFS weight (nice -10) for the calling thread, so that
    /// a busy host (compilers, other tests) preempts the pacer less often.
    /// Silently stays at the current priority without the privilege.
    pub fn raise_priority() {
        // SAFETY: gettid and setpriority take and return integers only; a
        // refused priority is an error return, not undefined behaviour.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, -10);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    /// Below this distance from a deadline the pacer spins instead of
    /// sleeping. Windows timers tick at 1 ms at best (after timeBeginPeriod),
    /// so the spin window is wider there.
    #[cfg(windows)]
    pub const SPIN_NS: u64 = 2_000_000;
    /// Below this distance from a deadline the pacer spins instead of
    /// sleeping.
    #[cfg(not(windows))]
    pub const SPIN_NS: u64 = 200_000;

    fn base() -> std::time::Instant {
        static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        *BASE.get_or_init(std::time::Instant::now)
    }

    /// Nanoseconds since the Unix epoch (the system's wall clock).
    #[inline]
    pub fn realtime_ns() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }

    /// Nanoseconds on a monotonic clock (since the first call in this process).
    #[inline]
    pub fn mono_ns() -> u64 {
        base().elapsed().as_nanos() as u64
    }

    /// Sleeps until `deadline` (absolute, [`mono_ns`]), without spinning.
    pub fn sleep_until(deadline: u64) {
        let now = mono_ns();
        if deadline > now {
            std::thread::sleep(std::time::Duration::from_nanos(deadline - now));
        }
    }

    /// Windows: asks for 1 ms timer resolution (the default tick is 15.6 ms).
    /// Other systems: nothing to do.
    pub fn tighten_timer_slack() {
        #[cfg(windows)]
        // SAFETY: no pointers; the request lasts for the process's life.
        unsafe {
            windows_sys::Win32::Media::timeBeginPeriod(1);
        }
    }

    /// Windows: above-normal priority for the calling thread; elsewhere the
    /// priority stays (lowering nice needs privileges and per-thread calls
    /// that differ between the BSDs).
    pub fn raise_priority() {
        #[cfg(windows)]
        // SAFETY: the pseudo-handle of the calling thread is always valid.
        unsafe {
            use windows_sys::Win32::System::Threading::{
                GetCurrentThread, SetThreadPriority, THREAD_PRIORITY_ABOVE_NORMAL,
            };
            SetThreadPriority(GetCurrentThread(), THREAD_PRIORITY_ABOVE_NORMAL);
        }
    }
}

pub use imp::*;

/// Waits until `deadline` on the monotonic clock: sleeps until [`SPIN_NS`]
/// before it, then spins. Returns the monotonic time at return.
pub fn wait_until(deadline: u64) -> u64 {
    wait_until_spin(deadline, SPIN_NS)
}

/// [`wait_until`] with a chosen spin window (0: sleep only). Spinning only
/// pays while the pacer threads have a core each; beyond that they would
/// take turns burning each other's CPU.
pub fn wait_until_spin(deadline: u64, spin_ns: u64) -> u64 {
    let mut t = mono_ns();
    if t + spin_ns < deadline {
        sleep_until(deadline - spin_ns);
        t = mono_ns();
    }
    while t < deadline {
        std::hint::spin_loop();
        t = mono_ns();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_never_returns_early() {
        for _ in 0..20 {
            let d = mono_ns() + 200_000;
            let t = wait_until(d);
            assert!(t >= d);
        }
    }

    #[test]
    fn realtime_is_epoch_based() {
        // After 2020-01-01.
        assert!(realtime_ns() > 1_577_836_800_000_000_000);
    }
}
