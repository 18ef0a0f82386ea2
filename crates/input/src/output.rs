//! Writing the files wirebench produces (result documents, HTML reports,
//! CSV/SVG/JSON exports, decoded logs) so that a failed write never
//! destroys what was there before.
//!
//! `std::fs::write` truncates the target first: on a full disk it leaves
//! a 0-byte file where the previous one had been, and a killed writer
//! leaves half a file that looks like a whole one. Every output
//! therefore goes to a temporary file in the target's directory (same file
//! system, so the rename is atomic), is flushed to the disk (`fsync`), and
//! only then renamed over the target. Until the rename, readers see the old
//! file; after it, the complete new one; never anything in between.
//!
//! A target that exists and is not a regular file (`/dev/stdout`, a FIFO,
//! `/dev/full`) cannot be replaced by a rename and is written in place.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// An output file could not be written (nothing was replaced).
#[derive(Debug, Error)]
#[error("{}: cannot write: {source}", path.display())]
pub struct OutputError {
    /// The file the caller asked for.
    pub path: PathBuf,
    /// What the system said.
    #[source]
    pub source: std::io::Error,
}

/// An output file being written: [`OutputFile::commit`] puts it in place;
/// dropping it without commit leaves the old file (if any) untouched and
/// removes the temporary one.
pub struct OutputFile {
    inner: Inner,
    path: PathBuf,
}

enum Inner {
    Temp(tempfile::NamedTempFile),
    Direct(File),
}

impl OutputFile {
    /// Starts writing `path`. Fails (naming the path) when its directory
    /// does not exist or is not writable, before anything is written.
    pub fn create(path: &Path) -> Result<OutputFile, OutputError> {
        let err = |source| OutputError {
            path: path.to_path_buf(),
            source,
        };
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(err)?;
            return Ok(OutputFile {
                inner: Inner::Direct(f),
                path: path.to_path_buf(),
            });
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // An output is an ordinary file: 0666 less the umask, as a plain
        // create gives, not the temporary file's private 0600.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let t = builder.tempfile_in(dir).map_err(err)?;
        Ok(OutputFile {
            inner: Inner::Temp(t),
            path: path.to_path_buf(),
        })
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A second handle on the file being written, for writers that want to
    /// own theirs (flush it before [`OutputFile::commit`]).
    pub fn handle(&self) -> Result<File, OutputError> {
        let f = match &self.inner {
            Inner::Temp(t) => t.as_file().try_clone(),
            Inner::Direct(f) => f.try_clone(),
        };
        f.map_err(|source| self.err(source))
    }

    fn err(&self, source: std::io::Error) -> OutputError {
        OutputError {
            path: self.path.clone(),
            source,
        }
    }

    /// Syncs the data to the disk and renames the file over the target.
    pub fn commit(self) -> Result<(), OutputError> {
        match self.inner {
            Inner::Direct(mut f) => f.flush().map_err(|source| OutputError {
                path: self.path,
                source,
            }),
            Inner::Temp(t) => {
                let path = self.path;
                let fail = |source| OutputError {
                    path: path.clone(),
                    source,
                };
                t.as_file().sync_all().map_err(fail)?;
                t.persist(&path).map_err(|e| fail(e.error))?;
                // The rename itself is durable once the directory is synced
                // (best effort: not every platform can open a directory).
                #[cfg(unix)]
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    if let Ok(d) = File::open(dir) {
                        let _ = d.sync_all();
                    }
                }
                Ok(())
            }
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.inner {
            Inner::Temp(t) => t.write(buf),
            Inner::Direct(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.inner {
            Inner::Temp(t) => t.flush(),
            Inner::Direct(f) => f.flush(),
        }
    }
}

/// Writes `bytes` as the whole new content of `path`: temporary file in the
/// same directory, fsync, rename. On any error the old file is unchanged.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let mut out = OutputFile::create(path)?;
    if let Err(source) = out.write_all(bytes) {
        return Err(out.err(source));
    }
    out.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.html");
        std::fs::write(&p, "old").unwrap();
        write_file(&p, b"new content").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new content");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn an_uncommitted_file_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.csv");
        std::fs::write(&p, "old").unwrap();
        let mut o = OutputFile::create(&p).unwrap();
        o.write_all(b"half").unwrap();
        drop(o);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/dir/out.json");
        let e = write_file(&p, b"x").unwrap_err();
        assert!(
            e.to_string().contains("no/such/dir/out.json: cannot write"),
            "{e}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dev_full_is_written_in_place_and_fails() {
        let e = write_file(Path::new("/dev/full"), &[b'x'; 100_000]).unwrap_err();
        assert!(e.to_string().starts_with("/dev/full: cannot write"), "{e}");
    }
}
