//! One runner per campaign: an exclusive lock on a file beside the store.
//!
//! Two runners of one campaign (say `wirebench run --resume` started twice)
//! would each find the same runs missing and run them all, measuring over
//! each other on the same links. So a runner holds an advisory lock
//! (`flock`; on Windows a file opened without sharing) on `STORE.NAME.lock`
//! for as long as it runs; a second runner of that campaign is refused at
//! once, naming the holder. The operating system drops the lock when its
//! holder dies, even by SIGKILL, so a crash never leaves a campaign locked.
//!
//! The lock belongs to the database, not to the name it was opened by: the
//! lock file sits beside the store's canonical path (symbolic links and
//! `..` resolved), and on Linux the runner also holds an open-file-
//! description lock on one byte of the database file itself, at an offset
//! far past SQLite's own lock bytes chosen by the campaign's name, so a
//! second name for the same inode (a hard link) is refused too.

use std::fs::File;
use std::path::{Path, PathBuf};

/// Held while a campaign runs; the lock file is removed when dropped.
#[derive(Debug)]
pub struct CampaignLock {
    path: PathBuf,
    file: Option<File>,
    /// The database file, holding the campaign's byte lock (Linux).
    db: Option<File>,
}

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockFailure {
    /// Another process holds it; its pid when it wrote one.
    Busy(Option<u32>),
    /// The lock file could not be opened, locked or written.
    Io(std::io::Error),
}

/// The lock file of campaign `name` in the store at `db`, beside the
/// store's canonical path when it exists.
pub fn lock_path(db: &Path, name: &str) -> PathBuf {
    let canonical = std::fs::canonicalize(db).ok();
    let db = canonical.as_deref().unwrap_or(db);
    let mut safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if safe != name {
        // Two names that read alike once made safe still get two files.
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        safe.push_str(&format!("-{:08x}", h as u32));
    }
    let mut file = db.as_os_str().to_owned();
    file.push(format!(".{safe}.lock"));
    PathBuf::from(file)
}

impl CampaignLock {
    /// Takes the lock without waiting.
    pub fn acquire(path: &Path) -> Result<CampaignLock, LockFailure> {
        // A holder that ends removes the file; one that opened it just
        // before then locks a file no longer in the directory, so it checks
        // and tries again on the new one.
        for _ in 0..16 {
            if let Some(lock) = sys::try_lock(path)? {
                return Ok(lock);
            }
        }
        Err(LockFailure::Busy(None))
    }

    /// Takes the lock of campaign `name` in the store at `db`: the lock
    /// file of [`lock_path`], and on Linux the campaign's byte of the
    /// database file (whatever name the file was reached by).
    pub fn acquire_for(db: &Path, name: &str) -> Result<CampaignLock, LockFailure> {
        let mut lock = Self::acquire(&lock_path(db, name))?;
        lock.db = db_lock::take(db, name)?;
        Ok(lock)
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CampaignLock {
    fn drop(&mut self) {
        // Unlinked while still locked (Unix), so no one can lock this
        // inode after us and believe it holds the campaign.
        #[cfg(unix)]
        {
            let _ = std::fs::remove_file(&self.path);
            drop(self.file.take());
            drop(self.db.take());
        }
        #[cfg(not(unix))]
        {
            drop(self.file.take());
            drop(self.db.take());
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn read_pid(f: &mut File) -> Option<u32> {
    use std::io::Read;
    let mut s = String::new();
    f.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

fn write_pid(f: &mut File) -> std::io::Result<()> {
    use std::io::{Seek, Write};
    f.set_len(0)?;
    f.seek(std::io::SeekFrom::Start(0))?;
    writeln!(f, "{}", std::process::id())?;
    f.flush()
}

#[cfg(unix)]
mod sys {
    use super::{read_pid, write_pid, CampaignLock, LockFailure};
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    use std::path::Path;

    /// Ok(None): the file was replaced while we locked it; try again.
    pub fn try_lock(path: &Path) -> Result<Option<CampaignLock>, LockFailure> {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(LockFailure::Io)?;
        // SAFETY: flock on a descriptor we own and keep open.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(LockFailure::Busy(read_pid(&mut f)));
            }
            return Err(LockFailure::Io(e));
        }
        let ours = f.metadata().map_err(LockFailure::Io)?;
        match std::fs::metadata(path) {
            Ok(m) if m.ino() == ours.ino() && m.dev() == ours.dev() => {}
            _ => return Ok(None),
        }
        write_pid(&mut f).map_err(LockFailure::Io)?;
        Ok(Some(CampaignLock {
            path: path.to_path_buf(),
            file: Some(f),
            db: None,
        }))
    }
}

#[cfg(windows)]
mod sys {
    use super::{read_pid, write_pid, CampaignLock, LockFailure};
    use std::os::windows::fs::OpenOptionsExt;
    use std::path::Path;

    /// Opened without sharing: a second open fails until we close it.
    pub fn try_lock(path: &Path) -> Result<Option<CampaignLock>, LockFailure> {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .share_mode(0)
            .open(path);
        let mut f = match opened {
            Ok(f) => f,
            // ERROR_SHARING_VIOLATION
            Err(e) if e.raw_os_error() == Some(32) => return Err(LockFailure::Busy(None)),
            Err(e) => return Err(LockFailure::Io(e)),
        };
        let _ = read_pid(&mut f);
        write_pid(&mut f).map_err(LockFailure::Io)?;
        Ok(Some(CampaignLock {
            path: path.to_path_buf(),
            file: Some(f),
            db: None,
        }))
    }
}

#[cfg(not(any(unix, windows)))]
mod sys {
    use super::{CampaignLock, LockFailure};
    use std::path::Path;

    /// No advisory locks here: runners are not kept apart.
    pub fn try_lock(path: &Path) -> Result<Option<CampaignLock>, LockFailure> {
        Ok(Some(CampaignLock {
            path: path.to_path_buf(),
            file: None,
            db: None,
        }))
    }
}

/// The campaign's byte lock on the database file itself.
#[cfg(target_os = "linux")]
mod db_lock {
    use super::LockFailure;
    use std::fs::File;
    use std::os::unix::io::AsRawFd;
    use std::path::Path;

    /// Offsets of the campaign bytes: from 2^41, far past SQLite's lock
    /// bytes (at 2^30) and any real database's size; advisory locks need
    /// no data there.
    const BASE: i64 = 1 << 41;

    /// Locks the campaign's byte; None when the store is not a file that
    /// can be opened for writing (a new store is created later).
    pub fn take(db: &Path, name: &str) -> Result<Option<File>, LockFailure> {
        let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).open(db) else {
            return Ok(None);
        };
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        // SAFETY: a plain-data struct, all fields set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = BASE + (h % (1 << 32)) as i64;
        fl.l_len = 1;
        // SAFETY: fcntl on a descriptor we own, with a valid flock struct;
        // an OFD lock belongs to this open file, so SQLite closing its own
        // descriptors of the same file does not drop it.
        let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if r == 0 {
            return Ok(Some(f));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => Err(LockFailure::Busy(None)),
            // A file system without them: the lock file alone keeps runners apart.
            Some(libc::EINVAL) | Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) => Ok(None),
            _ => Err(LockFailure::Io(e)),
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod db_lock {
    use super::LockFailure;
    use std::fs::File;
    use std::path::Path;

    /// No open-file-description locks here: the lock file keeps runners
    /// apart (symbolic links resolved, hard links not).
    pub fn take(_db: &Path, _name: &str) -> Result<Option<File>, LockFailure> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().unwrap();
        let p = lock_path(&dir.path().join("w.db"), "sweep");
        assert!(p.ends_with("w.db.sweep.lock"), "{}", p.display());
        let first = CampaignLock::acquire(&p).unwrap();
        match CampaignLock::acquire(&p) {
            #[cfg(unix)]
            Err(LockFailure::Busy(pid)) => assert_eq!(pid, Some(std::process::id())),
            #[cfg(not(unix))]
            Err(LockFailure::Busy(_)) => {}
            other => panic!("second lock taken: {other:?}"),
        }
        drop(first);
        assert!(!p.exists(), "lock file left behind");
        let again = CampaignLock::acquire(&p).unwrap();
        assert_eq!(again.path(), p);
    }

    #[cfg(unix)]
    #[test]
    fn a_store_reached_by_another_name_is_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        std::fs::write(&db, b"").unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let hard = dir.path().join("sub");
        std::fs::create_dir(&hard).unwrap();
        let hard = hard.join("hard.db");
        std::fs::hard_link(&db, &hard).unwrap();
        let first = CampaignLock::acquire_for(&db, "sweep").unwrap();
        let busy = |p: &Path| {
            matches!(
                CampaignLock::acquire_for(p, "sweep"),
                Err(LockFailure::Busy(_))
            )
        };
        assert!(busy(&link), "through a symbolic link");
        assert!(busy(&dir.path().join("sub/../w.db")), "through ..");
        #[cfg(target_os = "linux")]
        assert!(busy(&hard), "through a hard link");
        // Another campaign of the same store is free.
        let other = CampaignLock::acquire_for(&link, "other").unwrap();
        drop((first, other));
        let again = CampaignLock::acquire_for(&hard, "sweep").unwrap();
        drop(again);
    }

    #[test]
    fn names_become_one_safe_file_name_each() {
        let db = Path::new("/x/w.db");
        let a = lock_path(db, "a/b");
        let b = lock_path(db, "a b");
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(Path::new("/x")));
        assert!(a.to_string_lossy().starts_with("/x/w.db.a_b-"));
    }
}
