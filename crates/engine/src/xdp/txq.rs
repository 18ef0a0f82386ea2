//! The sending queue of the AF_XDP sender's veth: owns the root qdisc a
//! session adds to its own interface, the journal that records it before
//! it exists, and removing it again.
//!
//! Why: AF_XDP in copy mode hands each frame straight to the driver, past
//! any qdisc. veth puts it on its peer's 256-frame ring; when that ring
//! is full, veth stops its transmit queue and answers busy (AF_XDP keeps
//! the frame and retries when the queue wakes) only if the device has a
//! qdisc, and with the kernel's default noqueue it drops the frame. A
//! receive half running in its own kernel thread (threaded NAPI) can fall
//! behind a sender on another CPU, so without a queue the sender loses
//! frames at its own host. A root qdisc is a setting others read (the
//! agent refuses link_rate on an interface with a configured root), so a
//! session adds one only to a veth whose root is the kernel's default
//! noqueue, under a handle of its own ([`HANDLE`]), and removes it when
//! its [`super::TxPort`] drops. A signal handler removes it by
//! [`restore_own`]; after a SIGKILL the next sender on the interface, or
//! [`super::cleanup`] (`send/recv --xdp-cleanup`), does, from the journal.

use super::napi::{journal_path, netns_ino, own_journals, read_journal};
use crate::plan::TxqUse;
use std::path::PathBuf;

/// Where the journals live, one file per (network namespace, interface).
const JOURNAL_DIR: &str = "/run/wirebench/xdp-txq";
/// The handle of a session's qdisc, `7762:` ("wb"): what tells it from a
/// root someone configured.
pub(crate) const HANDLE: u32 = 0x7762_0000;
/// The kind added: the kernel's own default for a device with a queue,
/// a plain FIFO that shapes and reorders nothing the probes measure
/// (priority bands by TOS only).
const KIND: &str = "pfifo_fast";
/// `TC_H_ROOT`: the parent of a root qdisc.
pub(crate) const TC_H_ROOT: u32 = 0xFFFF_FFFF;

/// What the sender did about its interface's queue.
#[derive(Debug)]
pub(crate) enum Txq {
    /// Added for the session; removed when this value drops.
    Added {
        /// Held for its `Drop`.
        _remove: Added,
    },
    /// Left as it was, and why.
    Left(String),
}

impl Txq {
    /// For the document's send path.
    pub(crate) fn describe(&self) -> String {
        match self {
            Txq::Added { .. } => {
                format!("sending queue {KIND} {:x}: for the session", HANDLE >> 16)
            }
            Txq::Left(why) => format!("no sending queue added ({why})"),
        }
    }
}

/// A root qdisc this session added; dropping it removes the qdisc and
/// the journal.
#[derive(Debug)]
pub(crate) struct Added {
    ifindex: u32,
    journal: PathBuf,
}

impl Drop for Added {
    fn drop(&mut self) {
        // A failed removal keeps the journal, so the next start retries.
        if remove(self.ifindex).is_ok() {
            let _ = std::fs::remove_file(&self.journal);
        }
    }
}

/// A journal's fields: the interface index and the process that added
/// the qdisc.
fn parse_journal(text: &str) -> Option<(u32, u32)> {
    let (mut idx, mut pid) = (None, None);
    for line in text.lines() {
        match line.split_once('=') {
            Some(("ifindex", v)) => idx = v.trim().parse().ok(),
            Some(("pid", v)) => pid = v.trim().parse().ok(),
            _ => {}
        }
    }
    Some((idx?, pid?))
}

/// Whether process `pid` still runs (this host's process table, which
/// `ip netns exec` shares).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// A route-netlink qdisc request of type `ty` for the root of `ifindex`
/// under [`HANDLE`], asking for an acknowledgement; with `kind`, a
/// TCA_KIND attribute.
fn request(ty: u16, flags: u16, ifindex: u32, kind: Option<&str>) -> Vec<u8> {
    const TCA_KIND: u16 = 1;
    // nlmsghdr (16) + tcmsg (20), then the attribute padded to 4 bytes.
    let mut m = vec![0u8; 36];
    m[4..6].copy_from_slice(&ty.to_ne_bytes());
    let flags = flags | (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
    m[6..8].copy_from_slice(&flags.to_ne_bytes());
    m[20..24].copy_from_slice(&ifindex.to_ne_bytes());
    m[24..28].copy_from_slice(&HANDLE.to_ne_bytes());
    m[28..32].copy_from_slice(&TC_H_ROOT.to_ne_bytes());
    if let Some(k) = kind {
        let len = 4 + k.len() + 1;
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&TCA_KIND.to_ne_bytes());
        m.extend_from_slice(k.as_bytes());
        m.resize(m.len() + 1 + (4 - len % 4) % 4, 0);
    }
    let total = m.len() as u32;
    m[0..4].copy_from_slice(&total.to_ne_bytes());
    m
}

/// The root qdisc of `ifindex`: its handle and kind (None when the
/// interface lists none, or is gone).
fn root(ifindex: u32) -> Result<Option<(u32, String)>, String> {
    Ok(super::qdiscs(ifindex)
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|q| q.parent == TC_H_ROOT)
        .map(|q| (q.handle, q.kind)))
}

/// Removes the session qdisc from the root of `ifindex` if it is there;
/// a root someone put in its place, or an interface since gone, is not
/// touched. Returns whether one was removed.
fn remove(ifindex: u32) -> Result<bool, String> {
    const RTM_DELQDISC: u16 = 37;
    if !matches!(root(ifindex)?, Some((HANDLE, _))) {
        return Ok(false);
    }
    // The kernel checks the handle too: a root replaced meanwhile is
    // refused (EINVAL), not removed.
    match super::sys::netlink_ack(&request(RTM_DELQDISC, 0, ifindex, None)) {
        Ok(()) => Ok(true),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::EINVAL | libc::ENODEV)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(format!("removing the session qdisc: {e}")),
    }
}

/// Removes the qdisc a killed sender left on `iface` (index `ifindex`)
/// by its journal; one of a sender still running is left to it. Returns
/// whether there was a dead sender's journal.
pub(crate) fn restore_stale(iface: &str, ifindex: u32) -> Result<bool, String> {
    let Some((journal, text)) = read_journal(JOURNAL_DIR, iface)? else {
        return Ok(false);
    };
    let parsed = parse_journal(&text);
    if let Some((_, pid)) = parsed {
        if pid != std::process::id() && alive(pid) {
            return Ok(false);
        }
    }
    // A journal of an interface since recreated (another index) is only
    // removed: the new one's root is not the session's.
    if let Some((idx, _)) = parsed.filter(|(idx, _)| *idx == ifindex) {
        remove(idx)?;
    }
    std::fs::remove_file(&journal).map_err(|e| format!("{}: {e}", journal.display()))?;
    Ok(true)
}

/// Removes every qdisc this process added (its journals), for a signal
/// handler about to end the process. Returns how many were removed.
pub(crate) fn restore_own() -> usize {
    own_journals(JOURNAL_DIR)
        .into_iter()
        .filter(|(_, path, text)| {
            parse_journal(text).is_some_and(|(idx, _)| remove(idx).is_ok())
                && std::fs::remove_file(path).is_ok()
        })
        .count()
}

/// Gives `iface` (index `ifindex`) a root qdisc for the session as
/// `mode` allows: [`TxqUse::Auto`] only on a veth whose root is the
/// kernel's default noqueue. The journal is written first.
pub(crate) fn add(iface: &str, ifindex: u32, mode: TxqUse) -> Txq {
    match try_add(iface, ifindex, mode) {
        Ok(t) => t,
        Err(why) => Txq::Left(why),
    }
}

fn try_add(iface: &str, ifindex: u32, mode: TxqUse) -> Result<Txq, String> {
    const RTM_NEWQDISC: u16 = 36;
    if mode == TxqUse::Keep {
        return Ok(Txq::Left("--xdp-txq keep".into()));
    }
    match super::link_kind(ifindex).map_err(|e| e.to_string())? {
        Some(k) if k == "veth" => {}
        k => {
            return Ok(Txq::Left(format!(
                "{iface} is no veth ({})",
                k.as_deref().unwrap_or("a device")
            )))
        }
    }
    match root(ifindex)? {
        // The kernel's default root: handle 0.
        Some((0, k)) if k == "noqueue" => {}
        Some((HANDLE, _)) => {
            return Ok(Txq::Left(format!(
                "{iface} has a running sender's session queue"
            )))
        }
        Some((h, k)) => {
            return Ok(Txq::Left(format!(
                "{iface} has its own root qdisc, {k} {:x}:",
                h >> 16
            )))
        }
        None => return Ok(Txq::Left(format!("{iface} lists no root qdisc"))),
    }
    let ino = netns_ino().map_err(|e| format!("network namespace: {e}"))?;
    let journal = journal_path(JOURNAL_DIR, ino, iface);
    std::fs::create_dir_all(JOURNAL_DIR).map_err(|e| format!("{JOURNAL_DIR}: {e}"))?;
    std::fs::write(
        &journal,
        format!("ifindex={ifindex}\npid={}\n", std::process::id()),
    )
    .map_err(|e| format!("{}: {e}", journal.display()))?;
    // EXCL: a root someone added since the check is refused, not replaced.
    let flags = (libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16;
    match super::sys::netlink_ack(&request(RTM_NEWQDISC, flags, ifindex, Some(KIND))) {
        Ok(()) => Ok(Txq::Added {
            _remove: Added { ifindex, journal },
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&journal);
            Err(format!("adding a {KIND} root to {iface}: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journals_parse_strictly() {
        assert_eq!(parse_journal("ifindex=7\npid=42\n"), Some((7, 42)));
        assert_eq!(parse_journal("pid=42\n"), None);
        assert_eq!(parse_journal("ifindex=7\n"), None);
        assert_eq!(parse_journal("ifindex=7\npid=x\n"), None);
    }

    #[test]
    fn requests_carry_the_root_the_handle_and_a_padded_kind() {
        let m = request(36, 0, 9, Some(KIND));
        assert_eq!(m.len() % 4, 0);
        assert_eq!(
            u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(u32::from_ne_bytes(m[20..24].try_into().unwrap()), 9);
        assert_eq!(u32::from_ne_bytes(m[24..28].try_into().unwrap()), HANDLE);
        assert_eq!(u32::from_ne_bytes(m[28..32].try_into().unwrap()), TC_H_ROOT);
        // The attribute: its length (header + name + NUL), type, name.
        assert_eq!(
            u16::from_ne_bytes([m[36], m[37]]) as usize,
            4 + KIND.len() + 1
        );
        assert_eq!(&m[40..40 + KIND.len()], KIND.as_bytes());
        assert_eq!(request(37, 0, 9, None).len(), 36);
    }

    #[test]
    fn loopback_is_left_alone_and_keep_touches_nothing() {
        let idx = super::super::ifindex("lo").unwrap();
        assert!(matches!(add("lo", idx, TxqUse::Keep), Txq::Left(w) if w == "--xdp-txq keep"));
        assert!(matches!(add("lo", idx, TxqUse::Auto), Txq::Left(w) if w.contains("no veth")));
    }
}
