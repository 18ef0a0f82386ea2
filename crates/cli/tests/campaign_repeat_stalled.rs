//! `repeat_stalled` end to end on the emulated test-bed: a campaign run
//! during which the link emulator is held (SIGSTOP, as a hypervisor holds
//! a guest's CPU) is stored failed with the reason, made again, and the
//! repeat is what the campaign keeps, the attempt set aside travelling in
//! its counters. Needs root (namespaces).
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wirebench_campaign::{RunStatus, Store};

mod common;
use common::campaign;

/// The tests' beds (one each, as they may run at once): nothing else
/// uses these names.
const BED: &str = "stallrp";
const BED_RESUMED: &str = "stallrq";

/// One 2 s run of 2 000 datagrams/s over a 100 Mbit/s link delayed 20 ms,
/// so the emulator always naps towards a frame's deadline and a stop of
/// tens of ms ends past one; live intervals say when the traffic flows.
const FILE: &str = r#"
name = "stall-repeat"
repetitions = 1
duration_s = 2
linger_s = 0.3
interval_ms = 100
repeat_stalled = 1
[testbed]
preset = "direct"
name = "stallrp"
link_rate = "100mbit"
[matrix]
transport = ["udp"]
payload = [200]
pps = [2000]
delay = ["20ms"]
"#;

/// A campaign of [`FILE`] (its bed renamed `bed`) started in a temporary
/// directory with a progress log, its output piped.
struct Started {
    _dir: tempfile::TempDir,
    file: PathBuf,
    db: PathBuf,
    log: PathBuf,
    child: std::process::Child,
}

fn start(bed: &str) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stall.toml");
    std::fs::write(&file, FILE.replace(BED, bed)).unwrap();
    let db = dir.path().join("s.db");
    let log = dir.path().join("progress.jsonl");
    let child = campaign(&file, &db, &["--progress-log", log.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Started {
        _dir: dir,
        file,
        db,
        log,
        child,
    }
}

/// How many lines of the progress log contain `pat`.
fn events(log: &Path, pat: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(pat))
        .count()
}

/// How many runs the progress log says started.
fn run_starts(log: &Path) -> usize {
    events(log, "\"run_start\"")
}

/// The link emulators (`wb-link`) of bed `bed`'s only link.
fn emulators(bed: &str) -> Vec<i32> {
    let ns = wirebench_testbed::testbed::link_netns(bed, 0);
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", &ns])
        .output()
        .expect("ip netns pids");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p: &i32| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "wb-link")
        })
        .collect()
}

/// Holds bed `bed`'s emulators for `d`, as a host stall would.
fn hold(bed: &str, d: Duration) -> usize {
    let pids = emulators(bed);
    for &p in &pids {
        // SAFETY: kill(2) on a pid of this test's own bed; no memory involved.
        unsafe { libc::kill(p, libc::SIGSTOP) };
    }
    std::thread::sleep(d);
    for &p in &pids {
        // SAFETY: as above.
        unsafe { libc::kill(p, libc::SIGCONT) };
    }
    pids.len()
}

/// Holds bed `bed`'s emulators twice for 80 ms during the first run of the
/// campaign whose progress log is `log`; returns how many emulators were
/// held in all.
fn stall_first_run(log: &Path, bed: &str) -> usize {
    let t0 = Instant::now();
    while run_starts(log) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the first run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Held only once the first run's traffic flows (its first live
    // interval is in the log: a loaded machine may start the sender
    // late), then once more 300 ms later if the run still goes.
    while events(log, "\"interval\"") == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the first run's traffic never showed in the progress log"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut held = hold(bed, Duration::from_millis(80));
    std::thread::sleep(Duration::from_millis(300));
    if run_starts(log) == 1 {
        held += hold(bed, Duration::from_millis(80));
    }
    held
}

/// Waits up to 20 s for the progress log to announce a second run (the
/// repeat).
fn await_second_run(log: &Path) {
    let t = Instant::now();
    while run_starts(log) < 2 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_the_host_stalled_is_stored_failed_and_repeated() {
    if !wirebench_testkit::can_run_as_root(
        "a_run_the_host_stalled_is_stored_failed_and_repeated",
        "root (network namespaces)",
    ) {
        return;
    }
    let Started {
        _dir,
        db,
        log,
        child,
        ..
    } = start(BED);
    let (log2, db2) = (log.clone(), db.clone());
    let stopper = std::thread::spawn(move || {
        let held = stall_first_run(&log2, BED);
        // While the repeat runs, the attempt set aside is in the store,
        // failed, saying why.
        await_second_run(&log2);
        let store = Store::open_existing(&db2).unwrap();
        let c = store.latest().unwrap().unwrap();
        let during = store.runs(c.id).unwrap();
        (held, during)
    });
    let out = child.wait_with_output().unwrap();
    let (held, during) = stopper.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(held >= 1, "no wb-link emulator of {BED} was found to hold");

    assert_eq!(during.len(), 1, "{during:?}");
    assert_eq!(during[0].status, RunStatus::Failed);
    let why = during[0].error.clone().unwrap_or_default();
    assert!(
        why.starts_with("repeated (repeat_stalled): the link emulators stalled"),
        "{why}"
    );
    let (stalls, stall_s) =
        wirebench_campaign::stalls::run_stalls(during[0].counters.as_ref().unwrap());
    eprintln!("held the emulator {held} time(s); set aside: {why}");
    assert!(stalls > 0 && stall_s > 0.01, "{stalls} stalls, {stall_s} s");

    // The repeat replaced it: ok, carrying the attempt set aside with its
    // documents; the campaign is done, not incomplete.
    let store = Store::open_existing(&db).unwrap();
    let c = store.latest().unwrap().unwrap();
    assert_eq!(c.status, "done");
    let runs = store.runs(c.id).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let r = &runs[0];
    assert_eq!(r.status, RunStatus::Ok, "{:?}", r.error);
    let counters = r.counters.as_ref().unwrap();
    let aside = counters[wirebench_campaign::stalls::SET_ASIDE_KEY]
        .as_array()
        .expect("the attempt set aside is kept");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(aside[0]["error"].as_str(), Some(why.as_str()));
    assert_eq!(
        aside[0]["started_at"].as_str(),
        Some(during[0].started_at.as_str())
    );
    assert_eq!(
        aside[0]["result"]["schema"].as_str(),
        Some("wirebench.result/1")
    );
    assert_eq!(
        wirebench_campaign::stalls::run_stalls(&aside[0]["counters"]),
        (stalls, stall_s)
    );
    assert!(
        stdout.contains("1 run(s) repeated after a host stall"),
        "{stdout}"
    );
    assert!(stdout.contains("Repeated after a host stall"), "{stdout}");
    let progress = std::fs::read_to_string(&log).unwrap();
    assert!(progress.contains("stalled, repeating"), "{progress}");
    assert_eq!(run_starts(&log), 2, "{progress}");
}

/// Interrupted while the repeat runs, the campaign keeps the attempt set
/// aside as a failed row; `--resume` makes the run again and carries it.
#[test]
fn an_attempt_set_aside_survives_an_interrupt_and_resume_carries_it() {
    if !wirebench_testkit::can_run_as_root(
        "an_attempt_set_aside_survives_an_interrupt_and_resume_carries_it",
        "root (network namespaces)",
    ) {
        return;
    }
    let Started {
        _dir,
        file,
        db,
        log,
        child,
    } = start(BED_RESUMED);
    let held = stall_first_run(&log, BED_RESUMED);
    await_second_run(&log);
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the campaign this test started; no memory involved.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(
        held >= 1,
        "no wb-link emulator of {BED_RESUMED} was found to hold"
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open_existing(&db).unwrap();
    let c = store.latest().unwrap().unwrap();
    assert_eq!(c.status, "interrupted");
    let before = store.runs(c.id).unwrap();
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].status, RunStatus::Failed);
    let why = before[0].error.clone().unwrap_or_default();
    assert!(why.starts_with("repeated (repeat_stalled)"), "{why}");
    drop(store);

    let out = campaign(&file, &db, &["--resume"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open_existing(&db).unwrap();
    let c = store.latest().unwrap().unwrap();
    assert_eq!(c.status, "done");
    let runs = store.runs(c.id).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, RunStatus::Ok, "{:?}", runs[0].error);
    // A real host stall in the resumed run may set it aside once more:
    // then two attempts, the interrupted one first.
    let aside = runs[0].counters.as_ref().unwrap()[wirebench_campaign::stalls::SET_ASIDE_KEY]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!aside.is_empty(), "the attempt set aside was lost");
    assert_eq!(aside[0]["error"].as_str(), Some(why.as_str()));
    assert_eq!(
        aside[0]["started_at"].as_str(),
        Some(before[0].started_at.as_str())
    );
}
