//! Test support for the workspace's timing-sensitive tests (a dev-dependency
//! only). A test that checks a rate, a delay or a time can fail on a busy
//! 2-core machine for reasons that are not the code's: other processes (or
//! the hypervisor) held the CPU while the measurement ran. This crate reads
//! how long runnable tasks waited for a CPU during a measurement (Linux
//! pressure stall information, `/proc/pressure/cpu`, plus steal time from
//! `/proc/stat`), watches for the machine itself not being run (a sleeper
//! thread at the top real-time priority that wakes tens of ms late: a
//! hypervisor can hold a guest without any steal time showing), and offers
//! [`measure`]: a timing check that is run once more only when its failed
//! run shows such contention or such a stall (or, with [`measure_seeing`],
//! when the run itself saw the host stall), and fails outright otherwise. Exact counts that do not depend on the scheduler belong
//! outside it (plain asserts), so they are never retried.
//!
//! It also owns the one skip rule ([`can_run`]): a test that cannot run on
//! this host says so and is counted, and fails under `CI=true`.
//!
//! [`pg`] starts a real PostgreSQL server for the results-store tests.

#![warn(missing_docs)]

pub mod chromium;
pub mod fuzz;
#[cfg(unix)]
pub mod pg;

use std::time::{Duration, Instant};

/// Share of a run's wall time during which runnable tasks waited for a CPU
/// (or the virtual CPUs were stolen) from which the host, not the code, is
/// taken to have disturbed a failed timing check. A quiet 2-core machine
/// running one loopback session stays well below it (the session's own
/// threads fit the cores); a busy one (other builds, CPU hogs, a noisy
/// neighbour) is far above it.
pub const CONTENDED: f64 = 0.10;

/// Counters read at the start of a measurement.
#[derive(Debug, Clone, Copy)]
pub struct Contention {
    at: Instant,
    waited_us: Option<u64>,
    steal_ticks: Option<u64>,
}

impl Contention {
    /// Starts watching now.
    pub fn start() -> Contention {
        Contention {
            at: Instant::now(),
            waited_us: psi_some_total_us(),
            steal_ticks: steal_ticks(),
        }
    }

    /// How much of the time since [`Contention::start`] runnable tasks
    /// waited for a CPU, plus the share of the CPUs stolen by the
    /// hypervisor; `None` where neither counter exists (not Linux, or a
    /// kernel without pressure stall information).
    pub fn share(&self) -> Option<f64> {
        let wall = self
            .at
            .elapsed()
            .max(Duration::from_millis(1))
            .as_secs_f64();
        let waited = match (self.waited_us, psi_some_total_us()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e6 / wall),
            _ => None,
        };
        let stolen = match (self.steal_ticks, steal_ticks()) {
            // USER_HZ is 100 on every Linux ABI; summed over the CPUs.
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 100.0 / wall / cpus() as f64),
            _ => None,
        };
        match (waited, stolen) {
            (None, None) => None,
            (w, s) => Some(w.unwrap_or(0.0) + s.unwrap_or(0.0)),
        }
    }
}

/// Runs `attempt`, a measurement whose timing checks return `Err(why)`.
/// When it fails while [`Contention::share`] shows the CPU contended for at
/// least [`CONTENDED`] of the attempt, it prints that and runs the attempt
/// once more, whose result stands; otherwise the failure stands at once.
/// A wrong rate, delay or count fails both attempts, so a bug is never
/// hidden; one stall of a busy host does not fail the suite.
pub fn measure<T>(what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    measure_by(what, Contention::share, None, || {
        attempt().map_err(|why| (why, None))
    })
}

/// [`measure`] for a run that can see the host stall by itself: a link
/// kept saturated, say, whose arrivals stop for longer than its queue and
/// token bucket can explain, because a kernel timer or softirq ran late.
/// A failed `attempt` returns `Err((why, Some(evidence)))` when it saw such
/// stalls account for its failure; that failure is measured once more, as
/// one under contention is, and the evidence is printed. A failure without
/// evidence, and without contention, stands at once.
pub fn measure_seeing<T>(
    what: &str,
    attempt: impl FnMut() -> Result<T, (String, Option<String>)>,
) -> T {
    measure_by(what, Contention::share, None, attempt)
}

/// [`measure_seeing`] with the contention read by `share`, and the
/// [`StallWatch`] sleeper's latest wake-up (ms) given as `held` instead of
/// measured (tests inject both).
fn measure_by<T>(
    what: &str,
    share: impl FnOnce(&Contention) -> Option<f64>,
    held: Option<f64>,
    mut attempt: impl FnMut() -> Result<T, (String, Option<String>)>,
) -> T {
    let c = Contention::start();
    let watch = held.is_none().then(StallWatch::start);
    let first = attempt();
    let held_ms = match watch {
        Some(w) => w.stop(),
        None => held,
    };
    let (why, seen) = match first {
        Ok(v) => return v,
        Err(e) => e,
    };
    // A guest the hypervisor did not run shows neither as CPU pressure nor,
    // on every host, as steal time: the sleeper at top priority saw it.
    let seen = seen.or_else(|| {
        held_ms.filter(|&ms| ms >= HELD_MS).map(|ms| {
            format!("a 2 ms sleeper at top real-time priority in this process woke {ms:.1} ms late")
        })
    });
    let share = share(&c);
    let blame = match (share, seen) {
        (Some(s), _) if s >= CONTENDED => Ok(format!(
            "runnable tasks waited for a CPU {:.0} % of the run",
            s * 100.0
        )),
        (_, Some(evidence)) => Ok(format!("the run saw the host stall: {evidence}")),
        (Some(s), None) => Err(format!(
            "CPU contention during the run {:.1} %: too little to blame the host",
            s * 100.0
        )),
        (None, None) => Err("CPU contention cannot be read on this host".to_string()),
    };
    match blame {
        Ok(blame) => {
            eprintln!("{what}: failed while {blame} ({why}); measuring once more");
            match attempt() {
                Ok(v) => v,
                Err((again, _)) => panic!("{what}: {again} (and before, while {blame}: {why})"),
            }
        }
        Err(not) => panic!("{what}: {why} ({not})"),
    }
}

/// How late (ms) the [`StallWatch`] sleeper must wake for a failed
/// measurement to be blamed on the host: ten times the worst wake-up of a
/// top-priority thread on a busy 2-core VM.
const HELD_MS: f64 = 10.0;

/// A thread at the top real-time priority (where the host allows it) that
/// sleeps 2 ms at a time during a measurement and keeps its latest wake-up:
/// nothing in the guest but interrupts comes before it, so waking tens of
/// ms late means the machine itself was not run (a hypervisor holding the
/// virtual CPUs, which the steal counter does not always show).
struct StallWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    worst_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StallWatch {
    fn start() -> StallWatch {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let worst_us = Arc::new(AtomicU64::new(0));
        let (s, w) = (stop.clone(), worst_us.clone());
        let thread = std::thread::Builder::new()
            .name("stall-watch".into())
            .spawn(move || {
                top_priority_thread();
                let period = Duration::from_millis(2);
                while !s.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    std::thread::sleep(period);
                    let late = t.elapsed().saturating_sub(period).as_micros() as u64;
                    w.fetch_max(late, Ordering::Relaxed);
                }
            })
            .ok();
        StallWatch {
            stop,
            worst_us,
            thread,
        }
    }

    /// Stops the sleeper; its latest wake-up (ms), None if it never ran.
    fn stop(mut self) -> Option<f64> {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.take()?;
        t.join().ok()?;
        Some(self.worst_us.load(Ordering::Relaxed) as f64 / 1e3)
    }
}

/// SCHED_FIFO 99 for the calling thread where the host allows it.
fn top_priority_thread() {
    #[cfg(target_os = "linux")]
    {
        let p = libc::sched_param { sched_priority: 99 };
        // SAFETY: pid 0 is the calling thread; `p` is a valid sched_param
        // that outlives the call, which only reads it.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
    }
}

/// Puts the calling thread at real-time priority (SCHED_FIFO 50, as
/// `chrt -f 50`) where the host allows it (Linux as root); returns whether
/// it did. A test's own sender or receiver thread then measures what the
/// code does, not how long a busy host left it waiting for a CPU.
pub fn realtime_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        let p = libc::sched_param { sched_priority: 50 };
        // SAFETY: pid 0 is the calling thread; `p` is a valid sched_param
        // that outlives the call, which only reads it.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// `check(cond, why)`: `Err(why)` unless `cond`, for use inside [`measure`].
pub fn check(cond: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(why())
    }
}

/// Microseconds some runnable task waited for a CPU since boot.
fn psi_some_total_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix("total="))?
        .parse()
        .ok()
}

/// Steal time of all CPUs since boot, in USER_HZ ticks.
fn steal_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    line.split_whitespace().nth(8)?.parse().ok()
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Skips counted so far in this test binary (see [`can_run`]).
static SKIPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a test that needs something this host may lack (root, a
/// program, a kernel feature) can run: `ok` says whether it is there. When
/// it is not, the test is skipped — it should return at once — and the
/// skip is counted and printed with the running count, so that a run that
/// skipped reads as one; under `CI=true` a missing need is a failure
/// instead (this panics), because a CI run that passes by skipping has
/// tested nothing. The Linux net selftests do the same with their own
/// skip exit code (`tools/testing/selftests/net/forwarding/lib.sh`).
pub fn can_run(test: &str, ok: bool, needs: &str) -> bool {
    can_run_in(test, ok, needs, ci())
}

fn can_run_in(test: &str, ok: bool, needs: &str, ci: bool) -> bool {
    if ok {
        return true;
    }
    assert!(
        !ci,
        "{test} cannot run here: it needs {needs} (CI=true counts a skip as a failure)"
    );
    let n = SKIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    eprintln!("SKIP ({n} skipped in this test binary): {test} needs {needs}");
    false
}

/// [`can_run`] for tests that need root (network namespaces, veth, tc,
/// raw sockets).
pub fn can_run_as_root(test: &str, needs: &str) -> bool {
    can_run(test, is_root(), needs)
}

/// Skips counted so far in this test binary.
pub fn skipped() -> usize {
    SKIPS.load(std::sync::atomic::Ordering::Relaxed)
}

/// True under a CI run (`CI=true`, as GitHub Actions and most CI set it).
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// The process runs as root.
pub fn is_root() -> bool {
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }
    #[cfg(not(unix))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_missing_need_is_a_counted_skip_and_a_failure_under_ci() {
        assert!(can_run_in("t", true, "nothing", true));
        let before = skipped();
        assert!(!can_run_in("t", false, "a unicorn", false));
        assert!(skipped() > before);
        let under_ci = std::panic::catch_unwind(|| can_run_in("t", false, "a unicorn", true));
        let msg = under_ci.expect_err("CI=true must fail, not skip");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("needs a unicorn") && msg.contains("CI=true"),
            "{msg}"
        );
    }

    #[test]
    fn check_gives_the_reason() {
        assert_eq!(check(true, || "no".into()), Ok(()));
        assert_eq!(check(false, || "no".into()), Err("no".into()));
    }

    /// Busy threads beyond the cores make runnable tasks wait: the share
    /// reads that contention (on Linux with pressure stall information).
    #[test]
    fn busy_threads_beyond_the_cores_read_as_contention() {
        if !can_run(
            "busy_threads_beyond_the_cores_read_as_contention",
            psi_some_total_us().is_some(),
            "/proc/pressure/cpu (Linux pressure stall information)",
        ) {
            return;
        }
        let c = Contention::start();
        let stop = Arc::new(AtomicBool::new(false));
        let hogs: Vec<_> = (0..cpus() * 2 + 1)
            .map(|_| {
                let s = stop.clone();
                std::thread::spawn(move || {
                    while !s.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        for h in hogs {
            h.join().unwrap();
        }
        let s = c.share().unwrap();
        assert!(s >= CONTENDED, "contention share {s}");
    }

    /// Runs `measure_by` with this contention and attempts that fail
    /// `fails` times; returns the attempts made and whether it passed.
    fn run(share: Option<f64>, fails: u32) -> (u32, bool) {
        run_seeing(share, None, fails)
    }

    /// [`run`] whose failed attempts report `seen` as host evidence.
    fn run_seeing(share: Option<f64>, seen: Option<&str>, fails: u32) -> (u32, bool) {
        run_held(share, seen, 0.0, fails)
    }

    /// [`run_seeing`] whose stall watcher woke `held` ms late.
    fn run_held(share: Option<f64>, seen: Option<&str>, held: f64, fails: u32) -> (u32, bool) {
        let mut n = 0;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            measure_by(
                "t",
                |_| share,
                Some(held),
                || {
                    n += 1;
                    check(n > fails, || format!("attempt {n} wrong"))
                        .map_err(|why| (why, seen.map(str::to_string)))
                },
            )
        }));
        (n, r.is_ok())
    }

    /// A failure is measured once more only under contention, and the
    /// second result stands.
    #[test]
    fn only_a_contended_failure_is_measured_again() {
        assert_eq!(run(Some(0.5), 0), (1, true));
        assert_eq!(run(Some(0.5), 1), (2, true));
        assert_eq!(run(Some(0.5), 2), (2, false));
        assert_eq!(run(Some(CONTENDED * 0.9), 1), (1, false));
        assert_eq!(run(None, 1), (1, false));
    }

    /// A failure the run itself saw the host cause is measured once more
    /// even without contention; the second result still stands.
    #[test]
    fn a_failure_with_host_evidence_is_measured_again() {
        let quiet = Some(CONTENDED * 0.1);
        assert_eq!(run_seeing(quiet, Some("stalls"), 0), (1, true));
        assert_eq!(run_seeing(quiet, Some("stalls"), 1), (2, true));
        assert_eq!(run_seeing(quiet, Some("stalls"), 2), (2, false));
        assert_eq!(run_seeing(None, Some("stalls"), 1), (2, true));
        assert_eq!(run_seeing(quiet, None, 1), (1, false));
    }

    /// A failure during which the top-priority sleeper woke HELD_MS or
    /// more late (the machine itself was not run) is measured once more;
    /// a shorter delay is no evidence.
    #[test]
    fn a_failure_while_the_machine_was_held_is_measured_again() {
        let quiet = Some(CONTENDED * 0.1);
        assert_eq!(run_held(quiet, None, HELD_MS * 4.0, 1), (2, true));
        assert_eq!(run_held(quiet, None, HELD_MS * 4.0, 2), (2, false));
        assert_eq!(run_held(quiet, None, HELD_MS * 0.5, 1), (1, false));
        assert_eq!(run_held(None, None, HELD_MS, 1), (2, true));
    }

    /// The real sleeper runs and reports a wake-up, which on a working
    /// machine is far below HELD_MS most of the time (not asserted: a held
    /// machine is what it detects).
    #[test]
    fn the_stall_watch_reports_its_latest_wake_up() {
        let w = StallWatch::start();
        std::thread::sleep(Duration::from_millis(20));
        let ms = w.stop().expect("the sleeper ran");
        assert!(ms >= 0.0 && ms.is_finite(), "{ms}");
    }
}
