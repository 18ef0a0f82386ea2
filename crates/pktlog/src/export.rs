//! Exports of decoded logs for other tools: the raw records as CSV or
//! Apache Parquet (pandas, R arrow, DuckDB and Spark read it directly), and
//! the windowed series as CSV. All in SI-ish raw units: times in integer
//! nanoseconds (exact; `pd.to_datetime(df.tx_ns, unit="ns")` for wirebench
//! logs), rates in bit/s and packets/s, delays in seconds for the series.

use crate::decode::Window;
use crate::format::Record;
use crate::LogError;
use std::io::Write;

/// Column order of the raw record exports.
pub const RECORD_COLUMNS: [&str; 7] =
    ["flow", "seq", "size", "tx_ns", "rx_ns", "delay_ns", "flags"];

/// Streams raw records as CSV (RFC 4180; every field is a number, empty when
/// the record has no receive time / delay).
pub struct CsvRecords<W: Write> {
    out: W,
}

impl<W: Write> CsvRecords<W> {
    /// Writes the header line to `out`.
    pub fn new(mut out: W) -> Result<Self, LogError> {
        writeln!(out, "{}\r", RECORD_COLUMNS.join(","))
            .map_err(|e| LogError::io("writing CSV", e))?;
        Ok(Self { out })
    }

    /// Writes one record; `delay_ns` is its one-way delay when known.
    pub fn push(&mut self, r: &Record, delay_ns: Option<i64>) -> Result<(), LogError> {
        let res = match (r.received(), delay_ns) {
            (true, Some(d)) => writeln!(
                self.out,
                "{},{},{},{},{},{},{}\r",
                r.flow, r.seq, r.size, r.tx_ns, r.rx_ns, d, r.flags
            ),
            (true, None) => writeln!(
                self.out,
                "{},{},{},{},{},,{}\r",
                r.flow, r.seq, r.size, r.tx_ns, r.rx_ns, r.flags
            ),
            (false, _) => writeln!(
                self.out,
                "{},{},{},{},,,{}\r",
                r.flow, r.seq, r.size, r.tx_ns, r.flags
            ),
        };
        res.map_err(|e| LogError::io("writing CSV", e))
    }

    /// Flushes and hands back the writer.
    pub fn finish(mut self) -> Result<W, LogError> {
        self.out
            .flush()
            .map_err(|e| LogError::io("writing CSV", e))?;
        Ok(self.out)
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// The windowed series as CSV: `flow, t_s, packets, bitrate_bps,
/// packet_rate_pps, delay_mean_s, jitter_s, lost` (the last three empty for
/// sender logs).
pub fn series_csv<'a>(
    windows: impl Iterator<Item = &'a Window>,
    mut out: impl Write,
) -> Result<(), LogError> {
    let w = |e| LogError::io("writing CSV", e);
    writeln!(
        out,
        "flow,t_s,packets,bitrate_bps,packet_rate_pps,delay_mean_s,jitter_s,lost\r"
    )
    .map_err(w)?;
    for x in windows {
        writeln!(
            out,
            "{},{},{},{},{},{},{},{}\r",
            x.flow,
            x.t_s,
            x.packets,
            x.bitrate_bps,
            x.packet_rate_pps,
            opt(x.delay_mean_s),
            opt(x.jitter_s),
            opt(x.lost)
        )
        .map_err(w)?;
    }
    out.flush().map_err(w)
}

#[cfg(feature = "parquet")]
pub use self::pq::ParquetRecords;

#[cfg(feature = "parquet")]
mod pq {
    use super::*;
    use parquet::basic::Compression;
    use parquet::data_type::{Int32Type, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    use std::sync::Arc;

    /// Rows per row group: bounds memory (about 10 MB of buffered columns)
    /// while keeping groups large enough for good compression.
    const ROWS_PER_GROUP: usize = 262_144;

    /// The Parquet schema: unsigned logical types where the log's fields are
    /// unsigned, receive time and delay nullable.
    const SCHEMA: &str = "message wirebench_pktlog {
        REQUIRED INT32 flow (INTEGER(16,false));
        REQUIRED INT64 seq (INTEGER(64,false));
        REQUIRED INT32 size (INTEGER(32,false));
        REQUIRED INT64 tx_ns (INTEGER(64,false));
        OPTIONAL INT64 rx_ns (INTEGER(64,false));
        OPTIONAL INT64 delay_ns (INTEGER(64,true));
        REQUIRED INT32 flags (INTEGER(16,false));
    }";

    fn pe(e: parquet::errors::ParquetError) -> LogError {
        LogError::Export(format!("writing Parquet: {e}"))
    }

    /// Streams raw records into a Parquet file (Snappy-compressed columns,
    /// one row group per 262 144 records).
    pub struct ParquetRecords<W: Write + Send> {
        w: SerializedFileWriter<W>,
        flow: Vec<i32>,
        seq: Vec<i64>,
        size: Vec<i32>,
        tx: Vec<i64>,
        rx: Vec<i64>,
        rx_def: Vec<i16>,
        delay: Vec<i64>,
        delay_def: Vec<i16>,
        flags: Vec<i32>,
    }

    impl<W: Write + Send> ParquetRecords<W> {
        /// Starts a Parquet file on `out`.
        pub fn new(out: W) -> Result<Self, LogError> {
            let schema = Arc::new(parse_message_type(SCHEMA).map_err(pe)?);
            let props = Arc::new(
                WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_created_by(format!("wirebench {}", env!("CARGO_PKG_VERSION")))
                    .build(),
            );
            let w = SerializedFileWriter::new(out, schema, props).map_err(pe)?;
            Ok(Self {
                w,
                flow: Vec::with_capacity(ROWS_PER_GROUP),
                seq: Vec::with_capacity(ROWS_PER_GROUP),
                size: Vec::with_capacity(ROWS_PER_GROUP),
                tx: Vec::with_capacity(ROWS_PER_GROUP),
                rx: Vec::with_capacity(ROWS_PER_GROUP),
                rx_def: Vec::with_capacity(ROWS_PER_GROUP),
                delay: Vec::with_capacity(ROWS_PER_GROUP),
                delay_def: Vec::with_capacity(ROWS_PER_GROUP),
                flags: Vec::with_capacity(ROWS_PER_GROUP),
            })
        }

        /// Adds one record; `delay_ns` is its one-way delay when known.
        pub fn push(&mut self, r: &Record, delay_ns: Option<i64>) -> Result<(), LogError> {
            // Parquet has no unsigned physical types: the bits are stored
            // as signed and the logical type says to read them unsigned.
            self.flow.push(i32::from(r.flow));
            self.seq.push(r.seq as i64);
            self.size.push(r.size as i32);
            self.tx.push(r.tx_ns as i64);
            if r.received() {
                self.rx.push(r.rx_ns as i64);
                self.rx_def.push(1);
            } else {
                self.rx_def.push(0);
            }
            match delay_ns {
                Some(d) => {
                    self.delay.push(d);
                    self.delay_def.push(1);
                }
                None => self.delay_def.push(0),
            }
            self.flags.push(i32::from(r.flags));
            if self.flow.len() == ROWS_PER_GROUP {
                self.write_group()?;
            }
            Ok(())
        }

        fn write_group(&mut self) -> Result<(), LogError> {
            if self.flow.is_empty() {
                return Ok(());
            }
            let mut rg = self.w.next_row_group().map_err(pe)?;
            let mut i = 0;
            while let Some(mut col) = rg.next_column().map_err(pe)? {
                match i {
                    0 | 2 | 6 => {
                        let v = match i {
                            0 => &self.flow,
                            2 => &self.size,
                            _ => &self.flags,
                        };
                        col.typed::<Int32Type>()
                            .write_batch(v, None, None)
                            .map_err(pe)?;
                    }
                    1 | 3 => {
                        let v = if i == 1 { &self.seq } else { &self.tx };
                        col.typed::<Int64Type>()
                            .write_batch(v, None, None)
                            .map_err(pe)?;
                    }
                    4 => {
                        col.typed::<Int64Type>()
                            .write_batch(&self.rx, Some(&self.rx_def), None)
                            .map_err(pe)?;
                    }
                    _ => {
                        col.typed::<Int64Type>()
                            .write_batch(&self.delay, Some(&self.delay_def), None)
                            .map_err(pe)?;
                    }
                }
                col.close().map_err(pe)?;
                i += 1;
            }
            rg.close().map_err(pe)?;
            for v in [&mut self.flow, &mut self.size, &mut self.flags] {
                v.clear();
            }
            for v in [&mut self.seq, &mut self.tx, &mut self.rx, &mut self.delay] {
                v.clear();
            }
            self.rx_def.clear();
            self.delay_def.clear();
            Ok(())
        }

        /// Writes the last row group and the footer; returns the output.
        pub fn finish(mut self) -> Result<W, LogError> {
            self.write_group()?;
            self.w.into_inner().map_err(pe)
        }
    }
}
