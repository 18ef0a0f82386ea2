//! wirebench-pktlog: the per-packet log. It owns the binary format
//! (`wirebench.pktlog/1`, see `docs/logs.md`), a streaming writer with a
//! bounded buffer, and a reader that turns a truncated or damaged file into
//! a typed error naming the byte offset instead of a panic or silent garbage.
//!
//! It knows nothing of sockets: the engine hands it records, `wirebench
//! decode` reads them back. Kept apart from `wirebench-stats` because that
//! crate stays free of files.

#![warn(missing_docs)]

pub mod decode;
pub mod ditg;
pub mod export;
pub mod format;
pub mod merge;
pub mod read;
pub mod stream;
pub mod write;

pub use format::{FlowEnd, FlowMeta, LogFooter, LogMeta, LogSession, Record, Side};
pub use read::LogReader;
pub use write::LogWriter;

use thiserror::Error;

/// Everything that can go wrong reading or writing a log. Offsets are bytes
/// from the start of the file.
#[derive(Debug, Error)]
pub enum LogError {
    /// The file does not start with the log's signature.
    #[error("not a wirebench packet log (the first 8 bytes are not its signature)")]
    NotALog,
    /// Neither format was recognised from the first bytes.
    #[error(
        "neither a wirebench packet log nor a D-ITG binary log (ITGSend -l / ITGRecv -x); \
         name the format with --format if it is one of them"
    )]
    Unrecognised,
    /// A log version this reader does not know.
    #[error("packet log version {0} is not supported (this wirebench reads version 1)")]
    Version(u16),
    /// The header's metadata does not parse.
    #[error("packet log header: {0}")]
    Header(String),
    #[error("packet log truncated at byte {offset}: {what}")]
    /// The file ends inside a block.
    Truncated {
        /// Where the block began.
        offset: u64,
        /// Which block.
        what: &'static str,
    },
    #[error("packet log corrupt at byte {offset}: {what}")]
    /// A block's content is impossible.
    Corrupt {
        /// Where the block began.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
    #[error(
        "packet log ends after {records} records without its end block (the writer did not \
         finish: it crashed, was killed, or is still running)"
    )]
    /// The records end without the end block.
    Unfinished {
        /// Records read before the end of the file.
        records: u64,
    },
    /// An export could not be written as asked.
    #[error("{0}")]
    Export(String),
    /// Reading or writing failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
}

/// Reads until `buf` is full or the input ends; returns the bytes read
/// (fewer than `buf.len()` only at the end of the input).
pub(crate) fn read_up_to<R: std::io::Read>(inp: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match inp.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl LogError {
    pub(crate) fn io(what: &str, source: std::io::Error) -> Self {
        LogError::Io {
            what: what.to_string(),
            source,
        }
    }
}
