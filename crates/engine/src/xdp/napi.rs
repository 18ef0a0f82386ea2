//! Threaded NAPI on the interface the AF_XDP receiver listens on: owns
//! the switch (`/sys/class/net/IFACE/threaded`), the journal that records
//! the interface's own setting before it is changed, and putting that
//! setting back.
//!
//! Why: veth runs its peer's receive (the XDP program and, for AF_XDP in
//! copy mode, the copy into the UMEM) in the softirq of the sender's own
//! transmit, on the sender's CPU; with threaded NAPI that half runs in a
//! kernel thread the scheduler can put on another CPU. The switch is a
//! setting of the interface, so it is made only as `--xdp-napi` allows
//! (off by default), with `auto` only on a test-bed's own veth (a
//! namespace `wb-<bed>-<node>` of a test-bed with a state file) and for a
//! sender that asked for the XDP path (which gives its veth a sending
//! queue, see `txq`) on a host with a CPU to spare (`spare_cpus`: on a
//! busy one the kernel thread waits behind other work), always journalled first, and undone when the
//! session's [`super::Steer`] drops. A SIGKILL leaves the journal behind;
//! the next [`super::Steer`] on the interface, or [`super::cleanup`]
//! (`recv --xdp-cleanup`), restores from it.
//!
//! The kernel thread keeps the default priority, below the receiver's own
//! thread (`clock::raise_priority`): when the two share a CPU, what waits
//! is veth's 256-frame ring, which stops the sender's queue when full if
//! the sending veth has a qdisc (else it drops there), and not the AF_XDP
//! ring, which drops.
//!
//! A veth has NAPI instances only while an XDP program is attached (or GRO
//! is on), and the kernel refuses the write (EOPNOTSUPP) without one, so
//! both switching and restoring happen while a program is attached.

use crate::plan::NapiUse;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Where the journals live, one file per (network namespace, interface).
const JOURNAL_DIR: &str = "/run/wirebench/xdp-napi";
/// Where `ip netns` keeps its namespace handles.
const NETNS_DIR: &str = "/run/netns";
/// Where the test-beds keep their state files (`<bed>.json`).
const TESTBED_DIR: &str = "/run/wirebench";

/// What the receiver did about threaded NAPI on its interface.
#[derive(Debug)]
pub(crate) enum Napi {
    /// Switched on here; restored when this value drops.
    Switched {
        /// Held for its `Drop`.
        _restore: Threaded,
    },
    /// Already threaded by its owner: used as it is, not touched.
    Already,
    /// Left as it was, and why.
    Left(String),
    /// `auto` would have switched it but the host had no CPU to spare.
    Busy(String),
}

impl Napi {
    /// For the receive-timestamp description ("threaded NAPI" or not).
    pub(crate) fn describe(&self) -> Option<String> {
        match self {
            Napi::Switched { .. } => Some("threaded NAPI".into()),
            Napi::Already => Some("threaded NAPI (already on)".into()),
            Napi::Busy(why) => Some(format!("NAPI not moved to a thread: {why}")),
            Napi::Left(_) => None,
        }
    }
}

/// An interface switched to threaded NAPI; dropping it writes the
/// journalled setting back and removes the journal.
#[derive(Debug)]
pub(crate) struct Threaded {
    sysfs: PathBuf,
    original: String,
    journal: PathBuf,
}

impl Drop for Threaded {
    fn drop(&mut self) {
        // A failed write keeps the journal, so the next start restores it.
        if std::fs::write(&self.sysfs, &self.original).is_ok() {
            let _ = std::fs::remove_file(&self.journal);
        }
    }
}

/// The inode of this process's network namespace.
pub(super) fn netns_ino() -> std::io::Result<u64> {
    Ok(std::fs::metadata("/proc/self/ns/net")?.ino())
}

/// Whether `iface` of this process's network namespace (inode `ino`) is
/// one a test-bed made: the namespace is a node's (`wb-<bed>-<node>` in
/// `ip netns`), and `<bed>`'s state file lists `iface` among that node's
/// interfaces. An interface someone else added to a node's namespace is
/// not the test-bed's.
fn testbed_iface(ino: u64, iface: &str) -> bool {
    testbed_node_with(ino, |st, netns| state_lists(st, netns, iface))
}

/// Whether this process runs in a test-bed node's namespace (`wb-<bed>-<node>`
/// in `ip netns`, a node of `<bed>`'s state file): there the namespace and
/// its `lo` are the test-bed's own.
pub(super) fn in_testbed_node() -> bool {
    netns_ino().is_ok_and(|ino| {
        testbed_node_with(ino, |st, netns| {
            st["plan"]["nodes"]
                .as_array()
                .is_some_and(|nodes| nodes.iter().any(|n| n["netns"] == netns))
        })
    })
}

/// Whether the namespace of inode `ino` is a node's (`wb-<bed>-<node>` in
/// `ip netns`) whose bed's state document passes `test(state, netns)`.
fn testbed_node_with(ino: u64, test: impl Fn(&serde_json::Value, &str) -> bool) -> bool {
    let Some(netns) = std::fs::read_dir(NETNS_DIR).ok().and_then(|d| {
        d.filter_map(|e| e.ok()).find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name.starts_with("wb-") && std::fs::metadata(e.path()).is_ok_and(|m| m.ino() == ino))
                .then_some(name)
        })
    }) else {
        return false;
    };
    let Ok(beds) = std::fs::read_dir(TESTBED_DIR) else {
        return false;
    };
    beds.filter_map(|e| e.ok()).any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(bed) = name.strip_suffix(".json") else {
            return false;
        };
        netns.starts_with(&format!("wb-{bed}-"))
            && std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_some_and(|st| test(&st, &netns))
    })
}

/// Whether a test-bed state document lists interface `iface` on the node
/// whose namespace is `netns` (`plan.nodes[].netns`, `.ifaces[].name`).
fn state_lists(st: &serde_json::Value, netns: &str, iface: &str) -> bool {
    st["plan"]["nodes"].as_array().is_some_and(|nodes| {
        nodes.iter().any(|n| {
            n["netns"] == netns
                && n["ifaces"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|f| f["name"] == iface))
        })
    })
}

/// The journal of `iface` in the namespace `ino` under `dir`.
pub(super) fn journal_path(dir: &str, ino: u64, iface: &str) -> PathBuf {
    PathBuf::from(dir).join(format!("{ino}-{iface}"))
}

/// The sysfs switch of `iface`, after checking that this process's sysfs
/// shows the interface of its own namespace (index `ifindex`): sysfs is
/// mounted per namespace (`ip netns exec` remounts it), a plain `setns`
/// would show another one's.
fn sysfs_switch(iface: &str, ifindex: u32) -> Result<PathBuf, String> {
    let dir = PathBuf::from(format!("/sys/class/net/{iface}"));
    let idx = std::fs::read_to_string(dir.join("ifindex"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if idx.trim().parse::<u32>().ok() != Some(ifindex) {
        return Err(format!(
            "{} belongs to another network namespace",
            dir.display()
        ));
    }
    Ok(dir.join("threaded"))
}

/// A journal's fields: interface index and the setting to restore.
fn parse_journal(text: &str) -> Option<(u32, String)> {
    let (mut idx, mut orig) = (None, None);
    for line in text.lines() {
        match line.split_once('=') {
            Some(("ifindex", v)) => idx = v.trim().parse().ok(),
            Some(("threaded", v)) => orig = Some(v.trim().to_string()),
            _ => {}
        }
    }
    Some((idx?, orig.filter(|o| !o.is_empty() && o.len() < 8)?))
}

/// The journal of `iface` in this process's network namespace under
/// `dir`: its path and text, None when there is none.
pub(super) fn read_journal(dir: &str, iface: &str) -> Result<Option<(PathBuf, String)>, String> {
    let ino = netns_ino().map_err(|e| format!("network namespace: {e}"))?;
    let journal = journal_path(dir, ino, iface);
    match std::fs::read_to_string(&journal) {
        Ok(t) => Ok(Some((journal, t))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", journal.display())),
    }
}

/// The journals under `dir` of this process's network namespace that
/// this process wrote (`pid=` its own): interface, path and text each.
pub(super) fn own_journals(dir: &str) -> Vec<(String, PathBuf, String)> {
    let (Ok(ino), Ok(entries)) = (netns_ino(), std::fs::read_dir(dir)) else {
        return Vec::new();
    };
    let prefix = format!("{ino}-");
    let me = format!("pid={}", std::process::id());
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let iface = name.strip_prefix(&prefix)?.to_string();
            let text = std::fs::read_to_string(e.path()).ok()?;
            text.lines()
                .any(|l| l == me)
                .then(|| (iface, e.path(), text))
        })
        .collect()
}

/// Restores `iface` (index `ifindex`) from a journal a killed receiver
/// left, while a program is attached (see the module's doc). Returns
/// whether there was one. A journal of an interface since recreated
/// (another index) is only removed: the new one has its own setting.
pub(crate) fn restore_stale(iface: &str, ifindex: u32) -> Result<bool, String> {
    let Some((journal, text)) = read_journal(JOURNAL_DIR, iface)? else {
        return Ok(false);
    };
    if let Some((idx, orig)) = parse_journal(&text) {
        if idx == ifindex {
            let sw = sysfs_switch(iface, ifindex)?;
            std::fs::write(&sw, &orig)
                .map_err(|e| format!("restoring {} to {orig}: {e}", sw.display()))?;
        }
    }
    std::fs::remove_file(&journal).map_err(|e| format!("{}: {e}", journal.display()))?;
    Ok(true)
}

/// Puts back every switch this process made (its journals), for a
/// signal handler about to end the process: its programs are still
/// attached, so the writes work. Returns how many were put back.
pub(crate) fn restore_own() -> usize {
    let mut n = 0;
    for (iface, path, text) in own_journals(JOURNAL_DIR) {
        let Some((idx, orig)) = parse_journal(&text) else {
            continue;
        };
        let Ok(sw) = sysfs_switch(&iface, idx) else {
            continue;
        };
        if std::fs::write(&sw, &orig).is_ok() && std::fs::remove_file(&path).is_ok() {
            n += 1;
        }
    }
    n
}

/// Whether a journal waits for `iface` in this namespace.
pub(crate) fn stale(iface: &str) -> bool {
    netns_ino().is_ok_and(|ino| journal_path(JOURNAL_DIR, ino, iface).exists())
}

/// Switches `iface` (index `ifindex`, a program attached) to threaded
/// NAPI as `mode` allows: [`NapiUse::Auto`] only on a test-bed's own
/// veth, [`NapiUse::On`] on any interface. The setting found is
/// journalled before it is changed.
pub(crate) fn switch(iface: &str, ifindex: u32, mode: NapiUse) -> Napi {
    match mode {
        NapiUse::Off => return Napi::Left("--xdp-napi off".into()),
        NapiUse::On => {}
        NapiUse::Auto => {
            match super::link_kind(ifindex) {
                Ok(Some(k)) if k == "veth" => {}
                Ok(k) => {
                    return Napi::Left(format!(
                        "{iface} is no veth ({})",
                        k.as_deref().unwrap_or("a device")
                    ))
                }
                Err(e) => return Napi::Left(e.to_string()),
            }
            if !netns_ino().is_ok_and(|ino| testbed_iface(ino, iface)) {
                return Napi::Left(format!(
                    "{iface} is not a test-bed's (--xdp-napi on switches it all the same)"
                ));
            }
            if let Err(why) = spare_cpus() {
                return Napi::Busy(why);
            }
        }
    }
    match try_switch(iface, ifindex) {
        Ok(n) => n,
        Err(e) => Napi::Left(e),
    }
}

/// Idle CPUs `auto` needs when the session starts: one for the sender's
/// thread (whose transmit call runs veth's receive half when unthreaded)
/// and one for the NAPI thread, less a half for noise. Below it the
/// kernel thread, at the default priority, waits behind other work
/// (docs/engine.md, "Threaded NAPI": a third of the rate lost at load 4-5
/// on 2 CPUs).
const SPARE_CPUS: f64 = 1.5;

/// How long the host's idle time is sampled before deciding.
const SAMPLE_MS: u64 = 100;

/// Ok when the host has [`SPARE_CPUS`] idle CPUs over [`SAMPLE_MS`]
/// (`/proc/stat`), else why threaded NAPI is not worth switching on.
fn spare_cpus() -> Result<(), String> {
    let read = || std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"));
    let a = read()?;
    std::thread::sleep(std::time::Duration::from_millis(SAMPLE_MS));
    let b = read()?;
    let idle = idle_cpus(&a, &b).ok_or("/proc/stat: no cpu line")?;
    if idle >= SPARE_CPUS {
        Ok(())
    } else {
        Err(format!(
            "{idle:.1} CPUs idle, fewer than the {SPARE_CPUS} --xdp-napi auto needs"
        ))
    }
}

/// CPUs idle between two `/proc/stat` snapshots: the idle and iowait
/// share of all CPU time (the first line), times the CPUs listed.
fn idle_cpus(before: &str, after: &str) -> Option<f64> {
    let parse = |s: &str| -> Option<(u64, u64, usize)> {
        let mut lines = s.lines();
        let f: Vec<u64> = lines
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        let cpus = lines.filter(|l| l.starts_with("cpu")).count();
        let idle = f.get(3)? + f.get(4).copied().unwrap_or(0);
        // guest and guest_nice are already counted in user and nice.
        let total: u64 = f.iter().take(8).sum();
        Some((idle, total, cpus))
    };
    let (i0, t0, _) = parse(before)?;
    let (i1, t1, cpus) = parse(after)?;
    let dt = t1.checked_sub(t0).filter(|&d| d > 0)?;
    Some(i1.saturating_sub(i0) as f64 / dt as f64 * cpus as f64)
}

fn try_switch(iface: &str, ifindex: u32) -> Result<Napi, String> {
    let sw = sysfs_switch(iface, ifindex)?;
    let original = std::fs::read_to_string(&sw)
        .map_err(|e| format!("{}: {e}", sw.display()))?
        .trim()
        .to_string();
    if original != "0" {
        return Ok(Napi::Already);
    }
    let ino = netns_ino().map_err(|e| format!("network namespace: {e}"))?;
    let journal = journal_path(JOURNAL_DIR, ino, iface);
    std::fs::create_dir_all(JOURNAL_DIR).map_err(|e| format!("{JOURNAL_DIR}: {e}"))?;
    std::fs::write(
        &journal,
        format!(
            "ifindex={ifindex}\nthreaded={original}\npid={}\n",
            std::process::id()
        ),
    )
    .map_err(|e| format!("{}: {e}", journal.display()))?;
    let t = Threaded {
        sysfs: sw,
        original,
        journal,
    };
    match std::fs::write(&t.sysfs, "1") {
        Ok(()) => Ok(Napi::Switched { _restore: t }),
        Err(e) => {
            let msg = format!("{}: {e}", t.sysfs.display());
            // Nothing changed: drop writes the same setting back and
            // removes the journal.
            drop(t);
            Err(msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journals_parse_strictly() {
        assert_eq!(
            parse_journal("ifindex=7\nthreaded=0\n"),
            Some((7, "0".to_string()))
        );
        assert_eq!(parse_journal("threaded=0\n"), None);
        assert_eq!(parse_journal("ifindex=7\n"), None);
        assert_eq!(parse_journal("ifindex=x\nthreaded=0\n"), None);
        assert_eq!(parse_journal("ifindex=7\nthreaded=\n"), None);
    }

    #[test]
    fn a_process_outside_every_bed_is_in_no_test_bed_node() {
        // The test runs in the host's (or CI container's) own namespace,
        // never a `wb-<bed>-<node>` one: its lo is not a test-bed's.
        assert!(!in_testbed_node());
    }

    #[test]
    fn only_interfaces_a_state_file_lists_on_the_node_are_a_beds() {
        let st = serde_json::json!({"plan": {"nodes": [
            {"netns": "wb-t-a", "ifaces": [{"name": "eth0"}]},
            {"netns": "wb-t-b", "ifaces": [{"name": "eth0"}, {"name": "eth1"}]}
        ]}});
        assert!(state_lists(&st, "wb-t-a", "eth0"));
        assert!(state_lists(&st, "wb-t-b", "eth1"));
        assert!(!state_lists(&st, "wb-t-a", "eth1"));
        assert!(!state_lists(&st, "wb-t-c", "eth0"));
        assert!(!state_lists(&serde_json::json!({}), "wb-t-a", "eth0"));
    }

    #[test]
    fn idle_cpus_count_idle_and_iowait_of_all_cpus() {
        let a = "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2\ncpu1 1 2\nintr 5\n";
        // 1000 ticks more, 600 of them idle and 100 iowait: 0.7 of 2 CPUs.
        let b = "cpu  250 0 250 1400 100 0 0 0 0 0\ncpu0 1 2\ncpu1 1 2\nintr 5\n";
        let idle = idle_cpus(a, b).unwrap();
        assert!((idle - 1.4).abs() < 1e-9, "{idle}");
        assert!(idle < SPARE_CPUS);
        let quiet = "cpu  100 0 100 1800 0 0 0 0 0 0\ncpu0 1 2\ncpu1 1 2\n";
        assert!(idle_cpus(a, quiet).unwrap() >= SPARE_CPUS);
        // No time passed, or no cpu line: no answer rather than a guess.
        assert_eq!(idle_cpus(a, a), None);
        assert_eq!(idle_cpus("intr 5\n", b), None);
    }

    #[test]
    fn foreign_interfaces_are_left_alone_by_default() {
        // Loopback is no veth and no test-bed's: auto never touches it.
        let idx = super::super::ifindex("lo").unwrap();
        assert!(matches!(switch("lo", idx, NapiUse::Auto), Napi::Left(_)));
        assert!(matches!(switch("lo", idx, NapiUse::Off), Napi::Left(_)));
    }
}
