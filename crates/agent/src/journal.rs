//! The agent's journal on disk. Every change to the host (MTU, offloads,
//! a link-rate qdisc) is appended here, with the value before the first
//! change, and synced to disk *before* the change is made; so an agent that
//! dies without restoring (SIGKILL, the OOM killer, a reboot) leaves a
//! record, and the next agent on that node puts it back before it does
//! anything else. The in-memory journal of `server` restores a live
//! session; this one covers a dead one.
//!
//! One journal per network namespace (interface names repeat across
//! namespaces): `net-INODE.journal` beside `net-INODE.lock` in
//! `WIREBENCH_STATE_DIR`, `/var/lib/wirebench` for root, else
//! `$XDG_STATE_HOME/wirebench` or `~/.local/state/wirebench`
//! (`%LOCALAPPDATA%\wirebench` on Windows). An agent
//! that may change links holds an exclusive `flock` on the lock file for
//! its whole life (the kernel drops it when the process dies, however it
//! dies), so a journal whose lock can be taken belongs to a dead agent,
//! and a second controller is told who holds the node. Each entry names
//! the interface's MAC address: an entry whose interface is gone or is
//! another one now (a namespace whose inode was reused) is dropped, not
//! applied.

use crate::host;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// What an interface had before the first change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Before {
    /// The MTU it had.
    Mtu {
        /// Bytes.
        mtu: u32,
    },
    /// Short ethtool names (`tso`) and their values.
    Offloads {
        /// (name, on).
        features: Vec<(String, bool)>,
    },
    /// The kernel's default root qdisc (ours, a tbf, replaced it).
    DefaultRoot,
}

impl Before {
    fn key(&self) -> &'static str {
        match self {
            Before::Mtu { .. } => "mtu",
            Before::Offloads { .. } => "offloads",
            Before::DefaultRoot => "root",
        }
    }
}

/// One line of the journal: an interface and what it had.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Interface name.
    pub iface: String,
    /// The interface's MAC address when the entry was written.
    pub mac: Option<String>,
    /// What to put back.
    #[serde(flatten)]
    pub before: Before,
}

/// Why the journal could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading or writing it failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done (`writing`, ...).
        what: &'static str,
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Another live agent holds this node.
    #[error("this node is in use by another wirebench agent ({holder}); wait until its campaign ends, or ask its owner")]
    Busy {
        /// Its pid, host, user, controller and start.
        holder: String,
    },
}

/// The directory journals live in.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WIREBENCH_STATE_DIR") {
        return PathBuf::from(d);
    }
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return PathBuf::from("/var/lib/wirebench");
        }
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("wirebench");
    }
    // Windows has no HOME: its per-user state goes under LOCALAPPDATA (a
    // relative fallback would scatter lock files in whatever directory the
    // agent was started from).
    #[cfg(windows)]
    if let Some(d) = std::env::var_os("LOCALAPPDATA") {
        return PathBuf::from(d).join("wirebench");
    }
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .unwrap_or_else(|| std::env::temp_dir().into_os_string());
    PathBuf::from(home).join(".local/state/wirebench")
}

/// This network namespace's identity (its inode), "host" where there are
/// no namespaces.
fn netns_key() -> String {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| {
            let s = l.to_string_lossy().into_owned();
            let ino = s.strip_prefix("net:[")?.strip_suffix(']')?.to_string();
            Some(format!("net-{ino}"))
        })
        .unwrap_or_else(|| "host".into())
}

fn mac(iface: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The effective user's name from /etc/passwd (`ip netns exec` and
/// services may run without USER set).
fn user_of_euid() -> Option<String> {
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() }.to_string();
        let pw = std::fs::read_to_string("/etc/passwd").ok()?;
        pw.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2) == Some(&uid.as_str())).then(|| f[0].to_string())
        })
    }
    #[cfg(not(unix))]
    None
}

/// Who holds a node, written into the lock file for the next one to read.
fn holder_text() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .or_else(user_of_euid)
        .unwrap_or_else(|| "?".into());
    let from = std::env::var("SSH_CONNECTION")
        .ok()
        .and_then(|c| host::ssh_connection_addrs(&c))
        .map(|(c, _)| format!(", controller {c}"))
        .unwrap_or_default();
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "pid {} on {}, user {user}{from}, since unix time {since}",
        std::process::id(),
        host::hostname()
    )
}

/// A node's journal, held (locked) by this agent.
pub struct Journal {
    path: PathBuf,
    /// Held for the agent's life; closing it releases the lock.
    _lock: File,
    file: Option<File>,
    /// (kind, interface) already written: later changes keep the first
    /// "before".
    recorded: BTreeSet<(&'static str, String)>,
}

fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> JournalError {
    let path = path.display().to_string();
    move |source| JournalError::Io { what, path, source }
}

impl Journal {
    /// Takes this node's lock (Busy, naming the holder, when a live agent
    /// has it) and puts back whatever a dead agent's journal says;
    /// returns the journal and what was restored.
    pub fn open(dir: &std::path::Path) -> Result<(Journal, Vec<String>), JournalError> {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let key = netns_key();
        let lock_path = dir.join(format!("{key}.lock"));
        let mut lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io("opening", &lock_path))?;
        // A process forked by this one (or by the agent before us) holds
        // the lock's open file until it execs its program, so a lock
        // just released can read as held for a moment: try again over
        // ~200 ms before naming a holder.
        let mut held = try_lock(&lock);
        for _ in 0..20 {
            if !matches!(held, Err(LockErr::Held)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            held = try_lock(&lock);
        }
        held.map_err(|e| match e {
            LockErr::Held => JournalError::Busy {
                holder: std::fs::read_to_string(&lock_path)
                    .map(|s| s.trim().to_string())
                    .ok()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "holder unknown".into()),
            },
            LockErr::Io(e) => io("locking", &lock_path)(e),
        })?;
        let _ = lock.set_len(0);
        let _ = lock.write_all(holder_text().as_bytes());
        let mut j = Journal {
            path: dir.join(format!("{key}.journal")),
            _lock: lock,
            file: None,
            recorded: BTreeSet::new(),
        };
        let restored = j.recover()?;
        Ok((j, restored))
    }

    /// Entries of the journal on disk (a torn last line, from a crash
    /// while writing it, is skipped: its change was never made).
    fn entries(&self) -> Result<Vec<Entry>, JournalError> {
        match std::fs::read_to_string(&self.path) {
            Ok(t) => Ok(t
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io("reading", &self.path)(e)),
        }
    }

    /// Puts back every entry on disk (the first one of each interface and
    /// kind is the original) and removes the journal when all went back;
    /// a failure keeps it for the next try.
    pub fn recover(&mut self) -> Result<Vec<String>, JournalError> {
        let entries = self.entries()?;
        let mut seen = BTreeSet::new();
        let mut done = Vec::new();
        let mut failed = false;
        for e in entries {
            if !seen.insert((e.before.key(), e.iface.clone())) {
                continue;
            }
            let now = mac(&e.iface);
            if now.is_none() || (e.mac.is_some() && now != e.mac) {
                done.push(format!(
                    "dropped the journal entry of {} ({}): that interface is not here any more",
                    e.iface,
                    e.before.key()
                ));
                continue;
            }
            match crate::server::put_back(&e.iface, &e.before) {
                Ok(s) => done.push(format!("restored {s}")),
                Err(err) => {
                    failed = true;
                    done.push(format!("FAILED to restore: {err}"));
                }
            }
        }
        if !failed {
            self.clear()?;
        }
        Ok(done)
    }

    /// Forgets everything (after a restore that succeeded).
    pub fn clear(&mut self) -> Result<(), JournalError> {
        self.file = None;
        self.recorded.clear();
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("removing", &self.path)(e)),
        }
    }

    /// Writes `before` of `iface` to disk unless this session already
    /// did; returns once it is synced, so the change may follow.
    pub fn record(&mut self, iface: &str, before: Before) -> Result<(), JournalError> {
        let key = (before.key(), iface.to_string());
        if self.recorded.contains(&key) {
            return Ok(());
        }
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&self.path)
                .map_err(io("opening", &self.path))?;
            self.file = Some(f);
        }
        let entry = Entry {
            iface: iface.to_string(),
            mac: mac(iface),
            before,
        };
        let mut line = serde_json::to_string(&entry).unwrap_or_default();
        line.push('\n');
        if let Some(f) = self.file.as_mut() {
            f.write_all(line.as_bytes())
                .and_then(|_| f.sync_all())
                .map_err(io("writing", &self.path))?;
        }
        self.recorded.insert(key);
        Ok(())
    }

    /// The journal file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

#[cfg_attr(not(unix), allow(dead_code))]
enum LockErr {
    Held,
    Io(std::io::Error),
}

#[cfg(unix)]
fn try_lock(f: &File) -> Result<(), LockErr> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this File owns.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Err(LockErr::Held)
    } else {
        Err(LockErr::Io(e))
    }
}

/// Elsewhere the agent changes no links (docs/platforms.md): nothing to
/// guard.
#[cfg(not(unix))]
fn try_lock(_f: &File) -> Result<(), LockErr> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_name_their_kind() {
        let e = Entry {
            iface: "eth0".into(),
            mac: Some("aa:bb".into()),
            before: Before::Mtu { mtu: 1500 },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"iface":"eth0","mac":"aa:bb","kind":"mtu","mtu":1500}"#
        );
        assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), e);
        let r: Entry =
            serde_json::from_str(r#"{"iface":"eth1","mac":null,"kind":"default_root"}"#).unwrap();
        assert_eq!(r.before, Before::DefaultRoot);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_second_holder_is_told_who_holds_the_node_and_a_torn_line_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let (mut j, done) = Journal::open(d.path()).unwrap();
        assert!(done.is_empty());
        // An interface that does not exist here: written, then dropped on
        // recovery instead of applied.
        j.record("wbjnone0", Before::Mtu { mtu: 1500 }).unwrap();
        j.record("wbjnone0", Before::Mtu { mtu: 9000 }).unwrap();
        let text = std::fs::read_to_string(j.path()).unwrap();
        assert_eq!(text.lines().count(), 1, "only the first value: {text}");
        std::fs::OpenOptions::new()
            .append(true)
            .open(j.path())
            .unwrap()
            .write_all(b"{\"iface\":\"wbj")
            .unwrap();
        // flock is per open file: a second open in this process is a
        // second holder.
        match Journal::open(d.path()) {
            Err(JournalError::Busy { holder }) => {
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                )
            }
            other => panic!("{:?}", other.map(|(_, d)| d)),
        }
        let path = j.path().to_path_buf();
        drop(j);
        let (_j, done) = Journal::open(d.path()).unwrap();
        assert_eq!(done.len(), 1, "{done:?}");
        assert!(
            done[0].starts_with("dropped the journal entry of wbjnone0"),
            "{done:?}"
        );
        assert!(!path.exists());
    }
}
