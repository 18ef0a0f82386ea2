//! Streaming writer: records go into one preallocated block buffer, and a
//! full block is checksummed and written in one call. Memory stays at one
//! block whatever the length of the run, and `push` never allocates.

use crate::format::{
    LogFooter, LogMeta, Record, BLOCK_HEADER_LEN, BLOCK_TAG, END_TAG, HEADER_FIXED_LEN, MAGIC,
    MAX_BLOCK_RECORDS, MAX_JSON_LEN, RECORD_LEN, VERSION,
};
use crate::LogError;
use std::io::Write;

/// Records per block by default: 4096 × 32 B = 128 KiB per write, large
/// enough that the write syscalls cost nothing per packet, small enough that
/// a crash loses little.
pub const DEFAULT_BLOCK_RECORDS: usize = 4096;

/// Writes a log to any `Write` (a file, a socket, a `Vec`).
pub struct LogWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    block_records: usize,
    in_block: usize,
    records: u64,
}

impl<W: Write> LogWriter<W> {
    /// Writes the header and returns a writer with the default block size.
    pub fn new(out: W, meta: &LogMeta) -> Result<Self, LogError> {
        Self::with_block_records(out, meta, DEFAULT_BLOCK_RECORDS)
    }

    /// As [`LogWriter::new`] with `block_records` records per block
    /// (1..=[`MAX_BLOCK_RECORDS`]).
    pub fn with_block_records(
        mut out: W,
        meta: &LogMeta,
        block_records: usize,
    ) -> Result<Self, LogError> {
        if block_records == 0 || block_records > MAX_BLOCK_RECORDS {
            return Err(LogError::Header(format!(
                "block size {block_records} records is outside 1..={MAX_BLOCK_RECORDS}"
            )));
        }
        let json = serde_json::to_vec(meta)
            .map_err(|e| LogError::Header(format!("cannot encode metadata: {e}")))?;
        if json.len() > MAX_JSON_LEN {
            return Err(LogError::Header(format!(
                "metadata is {} bytes, more than {MAX_JSON_LEN}",
                json.len()
            )));
        }
        let mut head = Vec::with_capacity(HEADER_FIXED_LEN + json.len() + 4);
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(RECORD_LEN as u16).to_le_bytes());
        head.extend_from_slice(&(json.len() as u32).to_le_bytes());
        head.extend_from_slice(&json);
        let crc = crc32fast::hash(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&head)
            .map_err(|e| LogError::io("writing packet log header", e))?;
        let mut buf = Vec::with_capacity(BLOCK_HEADER_LEN + block_records * RECORD_LEN);
        buf.resize(BLOCK_HEADER_LEN, 0);
        Ok(Self {
            out,
            buf,
            block_records,
            in_block: 0,
            records: 0,
        })
    }

    /// Appends one record; writes the block when it is full.
    pub fn push(&mut self, r: &Record) -> Result<(), LogError> {
        let mut enc = [0u8; RECORD_LEN];
        r.encode(&mut enc);
        self.buf.extend_from_slice(&enc);
        self.in_block += 1;
        self.records += 1;
        if self.in_block == self.block_records {
            self.write_block()?;
        }
        Ok(())
    }

    /// Records pushed so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes the records buffered so far as a (short) block and flushes the
    /// output, so a reader sees them now. Nothing happens when the block is
    /// empty.
    pub fn flush(&mut self) -> Result<(), LogError> {
        if self.in_block > 0 {
            self.write_block()?;
        }
        self.out
            .flush()
            .map_err(|e| LogError::io("flushing packet log", e))
    }

    fn write_block(&mut self) -> Result<(), LogError> {
        let crc = crc32fast::hash(&self.buf[BLOCK_HEADER_LEN..]);
        self.buf[0..4].copy_from_slice(&BLOCK_TAG);
        self.buf[4..8].copy_from_slice(&(self.in_block as u32).to_le_bytes());
        self.buf[8..12].copy_from_slice(&crc.to_le_bytes());
        self.buf[12..16].copy_from_slice(&0u32.to_le_bytes());
        self.out
            .write_all(&self.buf)
            .map_err(|e| LogError::io("writing packet log", e))?;
        self.buf.truncate(BLOCK_HEADER_LEN);
        self.in_block = 0;
        Ok(())
    }

    /// Writes the last block and the end block (`footer.records` is set to
    /// the number of records written), flushes, and returns the output.
    pub fn finish(mut self, mut footer: LogFooter) -> Result<W, LogError> {
        if self.in_block > 0 {
            self.write_block()?;
        }
        footer.records = self.records;
        let json = serde_json::to_vec(&footer)
            .map_err(|e| LogError::Header(format!("cannot encode footer: {e}")))?;
        if json.len() > MAX_JSON_LEN {
            return Err(LogError::Header(format!(
                "footer is {} bytes, more than {MAX_JSON_LEN}",
                json.len()
            )));
        }
        let mut end = Vec::with_capacity(BLOCK_HEADER_LEN + json.len());
        end.extend_from_slice(&END_TAG);
        end.extend_from_slice(&(json.len() as u32).to_le_bytes());
        end.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
        end.extend_from_slice(&0u32.to_le_bytes());
        end.extend_from_slice(&json);
        self.out
            .write_all(&end)
            .map_err(|e| LogError::io("writing packet log end", e))?;
        self.out
            .flush()
            .map_err(|e| LogError::io("flushing packet log", e))?;
        Ok(self.out)
    }
}
