//! Reading the files a user names on the command line or in a campaign
//! (topology files, D-ITG and TOML scripts, `--idt-file`/`--size-file`
//! value lists, campaign files), with limits.
//!
//! `std::fs::read_to_string` reads whatever it is given for as long as it
//! yields bytes: `/dev/zero` grows without end (gigabytes in seconds), and
//! a FIFO blocks forever. Every input file is therefore required to be a regular
//! file of at most [`MAX_INPUT_BYTES`], checked before and while reading.
//! It lives in its own crate because the model, test-bed and campaign
//! crates all read such files and share no other dependency.
//!
//! The files wirebench writes go through [`output`] (temporary file, fsync,
//! rename), so a full disk or a kill never leaves a truncated output.

#![warn(missing_docs)]

pub mod output;
pub use output::{write_file, OutputError, OutputFile};

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Largest input file accepted: far beyond any real topology, script or
/// value list (a million values of a `--size-file` are about 8 MB).
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// Why an input file was not read; every variant names the file.
#[derive(Debug, Error)]
pub enum InputError {
    /// The system refused (missing, no permission, I/O error).
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file named.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A directory, FIFO, device or socket.
    #[error("{}: not a regular file ({kind})", path.display())]
    NotRegular {
        /// The file named.
        path: PathBuf,
        /// What it is instead ("directory", "FIFO", ...).
        kind: &'static str,
    },
    /// Above [`MAX_INPUT_BYTES`], before or while reading.
    #[error("{}: larger than the {} MiB limit for input files", path.display(), MAX_INPUT_BYTES >> 20)]
    TooLarge {
        /// The file named.
        path: PathBuf,
    },
    /// Read as text but not UTF-8.
    #[error("{}: not UTF-8 text", path.display())]
    NotText {
        /// The file named.
        path: PathBuf,
    },
}

impl InputError {
    /// The message without the file name, for callers that print the
    /// name themselves.
    pub fn reason(&self) -> String {
        let full = self.to_string();
        let path = match self {
            InputError::Io { path, .. }
            | InputError::NotRegular { path, .. }
            | InputError::TooLarge { path }
            | InputError::NotText { path } => path.display().to_string(),
        };
        full.strip_prefix(&format!("{path}: "))
            .unwrap_or(&full)
            .to_string()
    }
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else {
        "not a plain file"
    }
}

/// Reads `path` as UTF-8 text if it is a regular file of at most
/// [`MAX_INPUT_BYTES`].
pub fn read_text(path: &Path) -> Result<String, InputError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|_| InputError::NotText {
        path: path.to_path_buf(),
    })
}

/// Reads `path` as bytes if it is a regular file of at most
/// [`MAX_INPUT_BYTES`].
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Looked at before opening: opening a FIFO would block.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(InputError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.len() > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let f = File::open(path).map_err(io)?;
    // The file may have been swapped or may still grow (and /proc files
    // say 0 bytes): the read itself is bounded too.
    let mut bytes = Vec::new();
    f.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_small_text_only() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok.txt");
        std::fs::write(&ok, "1\n2\n").unwrap();
        assert_eq!(read_text(&ok).unwrap(), "1\n2\n");
        let big = dir.path().join("big");
        let f = File::create(&big).unwrap();
        f.set_len(MAX_INPUT_BYTES + 1).unwrap();
        assert!(matches!(read_text(&big), Err(InputError::TooLarge { .. })));
        let bin = dir.path().join("bin");
        std::fs::write(&bin, [0xff, 0xfe, 0]).unwrap();
        assert!(matches!(read_text(&bin), Err(InputError::NotText { .. })));
        let e = read_text(dir.path()).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        assert!(matches!(
            read_text(&dir.path().join("missing")),
            Err(InputError::Io { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_are_refused_without_blocking() {
        let e = read_text(Path::new("/dev/zero")).unwrap_err();
        assert!(
            e.to_string()
                .contains("/dev/zero: not a regular file (a character device)"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: plain libc call on a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read_text(&fifo),
            Err(InputError::NotRegular { .. })
        ));
    }
}
