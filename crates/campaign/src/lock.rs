//! One runner per campaign: an exclusive lock on a file beside the store.
//!
//! Three `wirebench run --resume` started together each ran all 17 missing
//! runs of a campaign (51 executions, measurements overlapping on the same
//! links): each read "not finished yet" before any had stored a run. A
//! runner now holds an advisory lock (`flock`; on Windows a file opened
//! without sharing) on `STORE.NAME.lock` for as long as it runs; a second
//! runner of that campaign is refused at once, naming the holder. The
//! operating system drops the lock when its holder dies, even by SIGKILL,
//! so a crash never leaves a campaign locked.

use std::fs::File;
use std::path::{Path, PathBuf};

/// Held while a campaign runs; the lock file is removed when dropped.
#[derive(Debug)]
pub struct CampaignLock {
    path: PathBuf,
    file: Option<File>,
}

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockFailure {
    /// Another process holds it; its pid when it wrote one.
    Busy(Option<u32>),
    Io(std::io::Error),
}

/// The lock file of campaign `name` in the store at `db`.
pub fn lock_path(db: &Path, name: &str) -> PathBuf {
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
        }
        #[cfg(not(unix))]
        {
            drop(self.file.take());
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
        }))
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
