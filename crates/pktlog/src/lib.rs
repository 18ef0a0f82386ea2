//! wirebench-pktlog: the per-packet log. It owns the binary format
//! (`wirebench.pktlog/1`, see `docs/logs.md`), a streaming writer with a
//! bounded buffer, and a reader that turns a truncated or damaged file into
//! a typed error naming the byte offset instead of a panic or silent garbage.
//!
//! It knows nothing of sockets: the engine hands it records, `wirebench
//! decode` reads them back. Kept apart from `wirebench-stats` because that
//! crate stays free of files.

pub mod decode;
pub mod ditg;
pub mod export;
pub mod format;
pub mod read;
pub mod stream;
pub mod write;

pub use format::{FlowEnd, FlowMeta, LogFooter, LogMeta, Record, Side};
pub use read::LogReader;
pub use write::LogWriter;

use thiserror::Error;

/// Everything that can go wrong reading or writing a log. Offsets are bytes
/// from the start of the file.
#[derive(Debug, Error)]
pub enum LogError {
    #[error("not a wirebench packet log (the first 8 bytes are not its signature)")]
    NotALog,
    #[error(
        "neither a wirebench packet log nor a D-ITG binary log (ITGSend -l / ITGRecv -x); \
         name the format with --format if it is one of them"
    )]
    Unrecognised,
    #[error("packet log version {0} is not supported (this wirebench reads version 1)")]
    Version(u16),
    #[error("packet log header: {0}")]
    Header(String),
    #[error("packet log truncated at byte {offset}: {what}")]
    Truncated { offset: u64, what: &'static str },
    #[error("packet log corrupt at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    #[error(
        "packet log ends after {records} records without its end block (the writer did not \
         finish: it crashed, was killed, or is still running)"
    )]
    Unfinished { records: u64 },
    #[error("{0}")]
    Export(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
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
