//! `wirebench decode LOG`: per-packet logs (wirebench's own and D-ITG's
//! binary logs) to summaries, ITGDec-style windowed series, and raw record
//! exports (CSV, Parquet). One pass over the file feeds all of them.

use super::report::check_parent;
use crate::exit::bad_input;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use wirebench_input::OutputFile;
use wirebench_pktlog::decode::{decode, DecodeOptions, Decoded, FlowFigures, Format, Source};
use wirebench_pktlog::export::{series_csv, CsvRecords, ParquetRecords};
use wirebench_pktlog::{LogError, Side};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Recognise the format from the first bytes.
    Auto,
    /// wirebench.pktlog/1 (`wirebench send -l`, receiver logs).
    Wirebench,
    /// D-ITG binary log (ITGSend -l, ITGRecv -x).
    Ditg,
}

#[derive(clap::Args)]
pub struct Args {
    /// The log to decode.
    pub log: PathBuf,
    /// Format of LOG.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: FormatArg,
    /// MTU for the IP/Ethernet throughput of logs that do not record it (D-ITG's).
    #[arg(long, value_name = "BYTES", default_value_t = 1500,
          value_parser = clap::value_parser!(u32).range(68..=65535))]
    pub mtu: u32,
    /// Print the summary as JSON (`wirebench.decode/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Window length of the series in milliseconds (ITGDec's -b/-d/-j/-p argument).
    #[arg(short = 'w', long, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub window: Option<u64>,
    /// Write the windowed series: bitrate, packet rate, delay, jitter and loss per
    /// window and flow. FILE.json for JSON, anything else CSV, `-` CSV on stdout.
    /// Window 1000 ms unless --window.
    #[arg(long, value_name = "FILE")]
    pub series: Option<PathBuf>,
    /// Export every record: FILE.parquet (Apache Parquet) or FILE.csv; `-` CSV on stdout.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
}

fn is_stdout(p: &Path) -> bool {
    p.as_os_str() == "-"
}

fn ext(p: &Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

enum RecordSink {
    Csv(CsvRecords<BufWriter<Box<dyn Write + Send>>>),
    Parquet(Box<ParquetRecords<BufWriter<File>>>),
}

impl RecordSink {
    fn push(&mut self, r: &wirebench_pktlog::Record, d: Option<i64>) -> Result<(), LogError> {
        match self {
            RecordSink::Csv(c) => c.push(r, d),
            RecordSink::Parquet(p) => p.push(r, d),
        }
    }

    fn finish(self) -> Result<(), LogError> {
        match self {
            RecordSink::Csv(c) => c.finish().map(drop),
            RecordSink::Parquet(p) => p.finish().map(drop),
        }
    }
}

/// An output file, put in place only when everything was written (a
/// failed decode leaves an older file of that name as it was).
fn create(flag: &str, p: &Path) -> anyhow::Result<(OutputFile, File)> {
    let named = |e: wirebench_input::OutputError| bad_input(format!("{flag} {e}"));
    let o = OutputFile::create(p).map_err(named)?;
    let f = o.handle().map_err(named)?;
    Ok((o, f))
}

pub fn run(a: Args) -> anyhow::Result<()> {
    // Everything the user named is checked before the log is read.
    for (flag, p) in [("--series", &a.series), ("--records", &a.records)] {
        if let Some(p) = p {
            if !is_stdout(p) {
                check_parent(flag, p)?;
            }
        }
    }
    if let Some(p) = &a.records {
        if !is_stdout(p) && !matches!(ext(p).as_str(), "csv" | "parquet") {
            return Err(bad_input(format!(
                "--records {}: name a .csv or .parquet file (or - for CSV on stdout)",
                p.display()
            )));
        }
    }
    if a.series.as_deref().is_some_and(is_stdout) && a.records.as_deref().is_some_and(is_stdout) {
        return Err(bad_input(
            "--series - and --records - cannot both write to stdout",
        ));
    }
    let file = File::open(&a.log)
        .map_err(|e| bad_input(format!("cannot open log {}: {e}", a.log.display())))?;
    let format = match a.format {
        FormatArg::Auto => None,
        FormatArg::Wirebench => Some(Format::Wirebench),
        FormatArg::Ditg => Some(Format::DItg),
    };
    let named = |e: LogError| bad_input(format!("{}: {e}", a.log.display()));
    let mut src =
        Source::open(BufReader::with_capacity(1 << 20, file), format, a.mtu).map_err(named)?;

    let mut outputs: Vec<OutputFile> = Vec::new();
    let result = (|| -> anyhow::Result<Decoded> {
        let mut sink = match &a.records {
            None => None,
            Some(p) if is_stdout(p) => Some(RecordSink::Csv(
                CsvRecords::new(BufWriter::new(Box::new(std::io::stdout()) as Box<_>))
                    .map_err(anyhow::Error::new)?,
            )),
            Some(p) => {
                let (o, f) = create("--records", p)?;
                outputs.push(o);
                Some(if ext(p) == "parquet" {
                    RecordSink::Parquet(Box::new(
                        ParquetRecords::new(BufWriter::new(f)).map_err(anyhow::Error::new)?,
                    ))
                } else {
                    RecordSink::Csv(
                        CsvRecords::new(BufWriter::new(Box::new(f) as Box<_>))
                            .map_err(anyhow::Error::new)?,
                    )
                })
            }
        };
        let window_ms = a.window.or(a.series.as_ref().map(|_| 1000));
        let opts = DecodeOptions {
            window_ns: window_ms.map(|ms| ms * 1_000_000),
        };
        let dec = decode(&mut src, &opts, |r, d| match &mut sink {
            Some(s) => s.push(r, d),
            None => Ok(()),
        });
        let dec = match dec {
            Ok(d) => d,
            // Damage in the log is the input's fault; a failing output is not.
            Err(e @ LogError::Io { .. }) | Err(e @ LogError::Export(_)) => {
                return Err(anyhow::Error::new(e))
            }
            Err(e) => return Err(named(e)),
        };
        if let Some(s) = sink {
            s.finish().map_err(anyhow::Error::new)?;
        }
        if let Some(p) = &a.series {
            if is_stdout(p) {
                series_csv(dec.series(), std::io::stdout().lock())?;
            } else {
                let (o, f) = create("--series", p)?;
                outputs.push(o);
                let mut w = BufWriter::new(f);
                if ext(p) == "json" {
                    let v: Vec<_> = dec.series().collect();
                    serde_json::to_writer_pretty(&mut w, &v)?;
                    writeln!(w)?;
                } else {
                    series_csv(dec.series(), &mut w)?;
                }
                w.flush()?;
            }
        }
        Ok(dec)
    })();
    // On an error the outputs are dropped: nothing half-written stays
    // behind, and files of those names from before are untouched.
    let dec = result?;
    for o in outputs {
        o.commit()?;
    }

    let to_stdout = [&a.series, &a.records]
        .iter()
        .any(|p| p.as_deref().is_some_and(is_stdout));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&dec)?);
    } else if to_stdout {
        eprint!("{}", text_summary(&dec));
    } else {
        print!("{}", text_summary(&dec));
    }
    Ok(())
}

fn s6(x: f64) -> String {
    format!("{x:.6}")
}

fn flow_text(f: &FlowFigures, out: &mut String) {
    use std::fmt::Write as _;
    let m = &f.meta;
    let _ = writeln!(
        out,
        "flow {}  {} IPv{}  MTU {}  {} -> {}",
        m.id,
        m.transport,
        m.ip_version,
        m.mtu,
        m.src.as_deref().unwrap_or("?"),
        m.dst.as_deref().unwrap_or("?")
    );
    if let Some(r) = &f.received {
        let _ = writeln!(
            out,
            "  packets      {} (unique {}, duplicates {}, reordered {})",
            r.counts.packets, r.counts.unique, r.counts.duplicates, r.counts.reordered
        );
        let _ = writeln!(out, "  bytes        {}", r.counts.bytes);
        let _ = writeln!(
            out,
            "  lost         {}, {} bursts, longest {}",
            wirebench_stats::loss_text(r.counts.lost, r.counts.loss_ratio),
            r.counts.loss_bursts.count,
            r.counts.loss_bursts.max_len
        );
        let pps = if r.duration_s > 0.0 {
            r.counts.unique as f64 / r.duration_s
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  duration     {} s   bitrate {:.3} kbit/s   packet rate {:.3} pkt/s",
            s6(r.duration_s),
            r.throughput_bps.payload / 1e3,
            pps
        );
        let d = &r.delay_s;
        let _ = writeln!(
            out,
            "  delay        min {}  mean {}  max {}  sd {} s",
            s6(d.min),
            s6(d.mean),
            s6(d.max),
            s6(d.stddev)
        );
        let _ = writeln!(
            out,
            "               p50 {}  p90 {}  p99 {}  p99.9 {} s",
            s6(d.p50),
            s6(d.p90),
            s6(d.p99),
            s6(d.p999)
        );
        let j = &r.jitter_s;
        let _ = writeln!(
            out,
            "  jitter       mean |IPDV| {}  RFC 3550 {}  PDV p99.9 {} s",
            s6(j.mean_abs_ipdv),
            s6(j.rfc3550),
            s6(j.pdv_p999)
        );
        if r.counts.negative_delays > 0 {
            let _ = writeln!(
                out,
                "  negative delays: {} (clock offset larger than the delay)",
                r.counts.negative_delays
            );
        }
    }
    if let Some(s) = &f.sent {
        let _ = writeln!(
            out,
            "  sent         {} packets, {} bytes, not sent {}",
            s.packets, s.bytes, s.not_sent
        );
        let _ = writeln!(
            out,
            "  duration     {} s   rate {:.3} pkt/s   bitrate {:.3} kbit/s",
            s6(s.duration_s),
            s.rate_pps,
            s.throughput_bps.payload / 1e3
        );
    }
    if let Some(r) = &f.rtt {
        let d = &r.delay_s;
        let _ = writeln!(
            out,
            "  rtt          {} reflections  min {}  mean {}  max {}  p99 {} s",
            r.counts.unique,
            s6(d.min),
            s6(d.mean),
            s6(d.max),
            s6(d.p99)
        );
    }
}

fn text_summary(d: &Decoded) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let side = match d.side {
        Side::Send => "sender",
        Side::Recv => "receiver",
    };
    let fmt = match d.format {
        Format::Wirebench => "wirebench",
        Format::DItg => "D-ITG",
    };
    let _ = writeln!(
        out,
        "{fmt} {side} log, meter {}, {} records, {} flows{}",
        d.meter,
        d.records,
        d.flows.len(),
        d.started_at
            .as_deref()
            .map(|s| format!(", started {s}"))
            .unwrap_or_default()
    );
    if d.dropped > 0 {
        let _ = writeln!(
            out,
            "WARNING: the writer dropped {} records (it fell behind); the figures miss them",
            d.dropped
        );
    }
    if d.capped > 0 {
        let _ = writeln!(
            out,
            "WARNING: {} records were not logged (the log reached its size cap, recv --log-max); the figures miss them",
            d.capped
        );
    }
    if d.partial {
        let _ = writeln!(out, "note: the run was cut short (partial)");
    }
    for f in &d.flows {
        flow_text(f, &mut out);
    }
    let recv: Vec<_> = d.flows.iter().filter_map(|f| f.received.as_ref()).collect();
    if recv.len() > 1 {
        let unique: u64 = recv.iter().map(|r| r.counts.unique).sum();
        let lost: u64 = recv.iter().filter_map(|r| r.counts.lost).sum();
        let bytes: u64 = recv.iter().map(|r| r.counts.bytes).sum();
        let packets: u64 = recv.iter().map(|r| r.counts.packets).sum();
        let mean = if unique > 0 {
            recv.iter()
                .map(|r| r.delay_s.mean * r.counts.unique as f64)
                .sum::<f64>()
                / unique as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "total        {packets} packets, {bytes} bytes, {lost} lost, mean delay {} s",
            s6(mean)
        );
    }
    out
}
