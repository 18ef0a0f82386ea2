//! Reader: validates the header, then yields records block by block,
//! checking each block's CRC-32 before handing out any of its records. Every
//! length read from the file is bounded before it is used, so a damaged file
//! costs at most one block of memory and ends in a [`LogError`] that names
//! the byte offset.

use crate::format::{
    LogFooter, LogMeta, Record, BLOCK_HEADER_LEN, BLOCK_TAG, END_TAG, HEADER_FIXED_LEN, MAGIC,
    MAX_BLOCK_RECORDS, MAX_JSON_LEN, RECORD_LEN, VERSION,
};
use crate::{read_up_to, LogError};
use std::io::Read;

/// Longest record a version-1 reader accepts; the fixed record may grow in
/// later minor revisions (fields appended), and readers skip what they do
/// not know.
const MAX_RECORD_LEN: usize = 1024;

/// Reads a log from any `Read` (wrap files in a `BufReader` or not: blocks
/// are read whole).
pub struct LogReader<R: Read> {
    inp: R,
    meta: LogMeta,
    record_len: usize,
    block: Vec<u8>,
    next_in_block: usize,
    in_block: usize,
    offset: u64,
    records: u64,
    footer: Option<LogFooter>,
    failed: bool,
}

/// Reads exactly `buf.len()` bytes. Ok(false) when the input ended before
/// the first byte (a clean end), a `Truncated` error when it ended inside.
fn read_full<R: Read>(
    inp: &mut R,
    buf: &mut [u8],
    offset: u64,
    what: &'static str,
) -> Result<bool, LogError> {
    let got = read_up_to(inp, buf).map_err(|e| LogError::io("reading packet log", e))?;
    if got == 0 && !buf.is_empty() {
        return Ok(false);
    }
    if got < buf.len() {
        return Err(LogError::Truncated {
            offset: offset + got as u64,
            what,
        });
    }
    Ok(true)
}

fn need<R: Read>(
    inp: &mut R,
    buf: &mut [u8],
    offset: u64,
    what: &'static str,
) -> Result<(), LogError> {
    if read_full(inp, buf, offset, what)? {
        Ok(())
    } else {
        Err(LogError::Truncated { offset, what })
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl<R: Read> LogReader<R> {
    /// Reads and checks the header.
    pub fn open(mut inp: R) -> Result<Self, LogError> {
        let mut fixed = [0u8; HEADER_FIXED_LEN];
        let got =
            read_up_to(&mut inp, &mut fixed).map_err(|e| LogError::io("reading packet log", e))?;
        let sig = got.min(MAGIC.len());
        if fixed[..sig] != MAGIC[..sig] {
            return Err(LogError::NotALog);
        }
        if got == 0 {
            return Err(LogError::Truncated {
                offset: 0,
                what: "empty file",
            });
        }
        if got < HEADER_FIXED_LEN {
            return Err(LogError::Truncated {
                offset: got as u64,
                what: "header",
            });
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        if version != VERSION {
            return Err(LogError::Version(version));
        }
        let record_len = usize::from(u16::from_le_bytes([fixed[10], fixed[11]]));
        if !(RECORD_LEN..=MAX_RECORD_LEN).contains(&record_len) {
            return Err(LogError::Header(format!(
                "record length {record_len} is outside {RECORD_LEN}..={MAX_RECORD_LEN}"
            )));
        }
        let meta_len = le_u32(&fixed[12..16]) as usize;
        if meta_len > MAX_JSON_LEN {
            return Err(LogError::Header(format!(
                "metadata length {meta_len} is more than {MAX_JSON_LEN} (damaged header)"
            )));
        }
        let mut rest = vec![0u8; meta_len + 4];
        need(&mut inp, &mut rest, HEADER_FIXED_LEN as u64, "metadata")?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&fixed);
        crc.update(&rest[..meta_len]);
        if crc.finalize() != le_u32(&rest[meta_len..]) {
            return Err(LogError::Corrupt {
                offset: 0,
                what: "header checksum mismatch".into(),
            });
        }
        let meta: LogMeta = serde_json::from_slice(&rest[..meta_len])
            .map_err(|e| LogError::Header(format!("metadata: {e}")))?;
        Ok(Self {
            inp,
            meta,
            record_len,
            block: Vec::new(),
            next_in_block: 0,
            in_block: 0,
            offset: (HEADER_FIXED_LEN + meta_len + 4) as u64,
            records: 0,
            footer: None,
            failed: false,
        })
    }

    /// The header's metadata.
    pub fn meta(&self) -> &LogMeta {
        &self.meta
    }

    /// The end block's footer, once [`LogReader::next_record`] returned
    /// `Ok(None)`.
    pub fn footer(&self) -> Option<&LogFooter> {
        self.footer.as_ref()
    }

    /// Records handed out so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The next record; `Ok(None)` after the end block. A file without an
    /// end block ends in [`LogError::Unfinished`].
    pub fn next_record(&mut self) -> Result<Option<Record>, LogError> {
        while self.next_in_block == self.in_block {
            if self.footer.is_some() {
                return Ok(None);
            }
            self.read_block()?;
        }
        let at = self.next_in_block * self.record_len;
        let mut b = [0u8; RECORD_LEN];
        b.copy_from_slice(&self.block[at..at + RECORD_LEN]);
        self.next_in_block += 1;
        self.records += 1;
        Ok(Some(Record::decode(&b)))
    }

    fn read_block(&mut self) -> Result<(), LogError> {
        let at = self.offset;
        let mut h = [0u8; BLOCK_HEADER_LEN];
        if !read_full(&mut self.inp, &mut h, at, "block header")? {
            return Err(LogError::Unfinished {
                records: self.records,
            });
        }
        let count = le_u32(&h[4..8]) as usize;
        let crc = le_u32(&h[8..12]);
        if h[0..4] == END_TAG {
            if count > MAX_JSON_LEN {
                return Err(LogError::Corrupt {
                    offset: at,
                    what: format!("end block footer length {count} is implausible"),
                });
            }
            let mut json = vec![0u8; count];
            need(&mut self.inp, &mut json, at + 16, "end block")?;
            if crc32fast::hash(&json) != crc {
                return Err(LogError::Corrupt {
                    offset: at,
                    what: "end block checksum mismatch".into(),
                });
            }
            let footer: LogFooter =
                serde_json::from_slice(&json).map_err(|e| LogError::Corrupt {
                    offset: at,
                    what: format!("end block: {e}"),
                })?;
            if footer.records != self.records {
                return Err(LogError::Corrupt {
                    offset: at,
                    what: format!(
                        "end block counts {} records, the file holds {}",
                        footer.records, self.records
                    ),
                });
            }
            self.offset = at + 16 + count as u64;
            let mut extra = [0u8; 1];
            if read_full(&mut self.inp, &mut extra, self.offset, "trailing data")? {
                return Err(LogError::Corrupt {
                    offset: self.offset,
                    what: "data after the end block".into(),
                });
            }
            self.footer = Some(footer);
            self.block.clear();
            self.in_block = 0;
            self.next_in_block = 0;
            return Ok(());
        }
        if h[0..4] != BLOCK_TAG {
            return Err(LogError::Corrupt {
                offset: at,
                what: format!("expected a block, found bytes {:02x?}", &h[0..4]),
            });
        }
        if count == 0 || count > MAX_BLOCK_RECORDS {
            return Err(LogError::Corrupt {
                offset: at,
                what: format!("block record count {count} is outside 1..={MAX_BLOCK_RECORDS}"),
            });
        }
        let len = count * self.record_len;
        self.block.resize(len, 0);
        need(&mut self.inp, &mut self.block, at + 16, "records")?;
        if crc32fast::hash(&self.block) != crc {
            return Err(LogError::Corrupt {
                offset: at,
                what: format!(
                    "block of {count} records (after record {}) fails its checksum",
                    self.records
                ),
            });
        }
        self.offset = at + 16 + len as u64;
        self.in_block = count;
        self.next_in_block = 0;
        Ok(())
    }
}

impl<R: Read> Iterator for LogReader<R> {
    type Item = Result<Record, LogError>;

    /// Records; stops after the first error.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = self.next_record().transpose();
        if matches!(r, Some(Err(_))) {
            self.failed = true;
        }
        r
    }
}
