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
//! and a second controller is told who holds the node: the lock file
//! names the holder (agent pid, host, user, boot, and the controller's
//! host, pid and campaign) and is emptied when the holder ends in order,
//! so a holder named in a lock that can be taken is one that died (its
//! pid gone, or an earlier boot), and the next agent says it took over.
//! Each entry names
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
    #[error("this node is in use by {holder}; wait until it ends (`wirebench run --wait-lab`), or ask its owner")]
    Busy {
        /// Its pid, host, user, controller and start.
        holder: String,
    },
}

/// How the refusal of a held node begins (the controller tells it from
/// other refusals by it).
pub const BUSY_PREFIX: &str = "this node is in use by ";

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

/// Who holds a node: written into the lock file for the next one to
/// read, one JSON object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    /// The agent's process id.
    pub pid: u32,
    /// The node's host name.
    pub host: String,
    /// The agent's user.
    pub user: String,
    /// The address its SSH connection came from, if any.
    #[serde(default)]
    pub ssh_from: Option<String>,
    /// Unix time the lock was taken.
    pub since: u64,
    /// The kernel's boot id then (a lock from an earlier boot is stale).
    #[serde(default)]
    pub boot_id: String,
    /// The controller driving it, when it said (revision 3).
    #[serde(default)]
    pub controller: Option<crate::proto::Controller>,
}

impl Holder {
    /// This process, driven by `controller`.
    pub fn me(controller: Option<crate::proto::Controller>) -> Holder {
        Holder {
            pid: std::process::id(),
            host: host::hostname(),
            user: std::env::var("USER")
                .or_else(|_| std::env::var("LOGNAME"))
                .ok()
                .or_else(user_of_euid)
                .unwrap_or_else(|| "?".into()),
            ssh_from: std::env::var("SSH_CONNECTION")
                .ok()
                .and_then(|c| host::ssh_connection_addrs(&c))
                .map(|(c, _)| c.to_string()),
            since: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            boot_id: boot_id(),
            controller,
        }
    }

    /// `campaign "x" of controller ctl pid 77 (its agent: pid 4242 on r1,
    /// user root, since unix time 1795000000)`.
    pub fn describe(&self) -> String {
        let agent = format!(
            "pid {} on {}, user {}{}, since unix time {}",
            self.pid,
            self.host,
            self.user,
            self.ssh_from
                .as_deref()
                .map(|a| format!(", over SSH from {a}"))
                .unwrap_or_default(),
            self.since
        );
        match &self.controller {
            Some(c) => format!(
                "campaign {:?} of controller {} pid {} (its agent: {agent})",
                c.campaign, c.host, c.pid
            ),
            None => format!("another wirebench agent ({agent})"),
        }
    }

    /// Why a holder whose lock could be taken is gone.
    fn gone(&self) -> String {
        if !self.boot_id.is_empty() && self.boot_id != boot_id() {
            return "it is from before the node's last boot".into();
        }
        if !pid_alive(self.pid) {
            format!("its agent, pid {}, is gone", self.pid)
        } else {
            format!(
                "its agent ended without releasing it (pid {} is another process now)",
                self.pid
            )
        }
    }
}

/// The kernel's id of this boot ("" where there is none).
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn pid_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        // SAFETY: signal 0 only checks that the process exists.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// The holder a lock file names: its JSON, or the text of an older
/// release.
fn read_holder(text: &str) -> Option<Result<Holder, String>> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    Some(serde_json::from_str(t).map_err(|_| t.to_string()))
}

/// A node's journal, held (locked) by this agent.
pub struct Journal {
    path: PathBuf,
    /// Held for the agent's life; closing it releases the lock.
    lock: File,
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
    /// returns the journal and what was done (a stale lock taken over,
    /// what was restored).
    pub fn open(
        dir: &std::path::Path,
        controller: Option<crate::proto::Controller>,
    ) -> Result<(Journal, Vec<String>), JournalError> {
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
        let left = std::fs::read_to_string(&lock_path).unwrap_or_default();
        held.map_err(|e| match e {
            LockErr::Held => JournalError::Busy {
                holder: match read_holder(&left) {
                    Some(Ok(h)) => h.describe(),
                    Some(Err(text)) => format!("another wirebench agent ({text})"),
                    None => "another wirebench agent (holder unknown)".into(),
                },
            },
            LockErr::Io(e) => io("locking", &lock_path)(e),
        })?;
        // A holder still named: it never released the lock, it died.
        let took_over: Option<String> = match read_holder(&left) {
            Some(Ok(h)) => Some(format!(
                "took over the lab lock of {}: {}",
                h.describe(),
                h.gone()
            )),
            // An older release's text, never emptied: nothing to tell.
            Some(Err(_)) | None => None,
        };
        let _ = lock.set_len(0);
        let me = serde_json::to_string(&Holder::me(controller)).unwrap_or_default();
        let _ = lock.write_all(me.as_bytes());
        let _ = lock.sync_all();
        let mut j = Journal {
            path: dir.join(format!("{key}.journal")),
            lock,
            file: None,
            recorded: BTreeSet::new(),
        };
        let mut done = j.recover()?;
        done.extend(took_over);
        Ok((j, done))
    }

    /// Ends this holder's claim in order: the lock file names nobody, so
    /// the next agent does not take this one for dead; the lock itself
    /// goes with the file.
    pub fn release(self) {
        let _ = self.lock.set_len(0);
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
        let ctl = crate::proto::Controller {
            host: "ctlhost".into(),
            pid: 77,
            campaign: "lab-a".into(),
        };
        let (mut j, done) = Journal::open(d.path(), Some(ctl)).unwrap();
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
        match Journal::open(d.path(), None) {
            Err(e @ JournalError::Busy { .. }) => {
                let m = e.to_string();
                assert!(
                    m.starts_with(&format!(
                        "this node is in use by campaign \"lab-a\" of controller ctlhost pid 77 (its agent: pid {} on ",
                        std::process::id()
                    )),
                    "{m}"
                )
            }
            other => panic!("{:?}", other.map(|(_, d)| d)),
        }
        let path = j.path().to_path_buf();
        // Dropped without release: as if the agent had died.
        drop(j);
        let (j, done) = Journal::open(d.path(), None).unwrap();
        assert_eq!(done.len(), 2, "{done:?}");
        assert!(
            done[1].starts_with(
                "took over the lab lock of campaign \"lab-a\" of controller ctlhost pid 77"
            ),
            "{done:?}"
        );
        assert!(
            done[0].starts_with("dropped the journal entry of wbjnone0"),
            "{done:?}"
        );
        assert!(!path.exists());
        // Released in order: the next holder takes nothing over.
        j.release();
        let (j, done) = Journal::open(d.path(), None).unwrap();
        assert!(done.is_empty(), "{done:?}");
        j.release();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_lock_left_by_a_dead_pid_or_an_earlier_boot_is_taken_over_and_said_so() {
        let d = tempfile::tempdir().unwrap();
        let lock = d.path().join(format!("{}.lock", netns_key()));
        // A pid that cannot exist (above pid_max's ceiling).
        let dead = Holder {
            pid: 4_194_305,
            host: "r1".into(),
            user: "root".into(),
            ssh_from: Some("10.254.0.1".into()),
            since: 1,
            boot_id: boot_id(),
            controller: None,
        };
        std::fs::write(&lock, serde_json::to_string(&dead).unwrap()).unwrap();
        let (j, done) = Journal::open(d.path(), None).unwrap();
        assert_eq!(
            done,
            ["took over the lab lock of another wirebench agent (pid 4194305 on r1, user root, over SSH from 10.254.0.1, since unix time 1): its agent, pid 4194305, is gone"]
        );
        drop(j);
        let old_boot = Holder {
            pid: std::process::id(),
            boot_id: "an-earlier-boot".into(),
            ..dead
        };
        std::fs::write(&lock, serde_json::to_string(&old_boot).unwrap()).unwrap();
        let (j, done) = Journal::open(d.path(), None).unwrap();
        assert!(
            done[0].ends_with(": it is from before the node's last boot"),
            "{done:?}"
        );
        j.release();
    }
}
