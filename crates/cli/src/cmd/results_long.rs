//! Tidy long rows of a campaign's runs for `results export --format long`
//! (CSV) and `--format parquet`: one row per run and metric, with the
//! campaign, the run, its axes (one column each), repetition, status,
//! start time, metric key, unit and value — the shape data-frame tools
//! (pandas, R, DuckDB) read without reshaping. Rows are written as they
//! come; Parquet buffers one row group at a time.

use super::results::Output;
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::io::Write;
use std::sync::Arc;
use wirebench_campaign::store::RunInfo;
use wirebench_campaign::CampaignRow;

/// Rows per Parquet row group: bounds what is buffered.
const ROWS_PER_GROUP: usize = 65_536;

/// The fixed columns before the axes, and after them.
const HEAD: [&str; 4] = ["campaign_id", "campaign", "run_id", "scenario"];
const TAIL: [&str; 6] = [
    "repetition",
    "status",
    "started_at",
    "metric",
    "unit",
    "value",
];

/// Columns of one buffered row group: integers, texts (axes may be
/// absent), values.
#[derive(Default)]
struct Group {
    ints: [Vec<i64>; 3],
    texts: Vec<Vec<ByteArray>>,
    defs: Vec<Vec<i16>>,
    values: Vec<f64>,
}

pub struct LongWriter {
    axes: Vec<String>,
    out: Output,
    parquet: Option<(SerializedFileWriter<Output>, Group)>,
}

fn pe(e: parquet::errors::ParquetError) -> anyhow::Error {
    anyhow::anyhow!("writing Parquet: {e}")
}

impl LongWriter {
    pub fn new(parquet: bool, axes: Vec<String>, mut out: Output) -> anyhow::Result<LongWriter> {
        if !parquet {
            let names: Vec<String> = HEAD
                .iter()
                .map(|s| s.to_string())
                .chain(axes.iter().map(|a| format!("axis_{a}")))
                .chain(TAIL.iter().map(|s| s.to_string()))
                .collect();
            let line: Vec<String> = names
                .iter()
                .map(|n| wirebench_report::csv_field(n))
                .collect();
            writeln!(out, "{}", line.join(","))?;
            return Ok(LongWriter {
                axes,
                out,
                parquet: None,
            });
        }
        let mut schema = String::from(
            "message wirebench_runs_long {
            REQUIRED INT64 campaign_id;
            REQUIRED BYTE_ARRAY campaign (UTF8);
            REQUIRED INT64 run_id;
            REQUIRED BYTE_ARRAY scenario (UTF8);\n",
        );
        for a in &axes {
            // Parquet names: the axis name with anything unusual made `_`.
            let name: String = a
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            schema.push_str(&format!("OPTIONAL BYTE_ARRAY axis_{name} (UTF8);\n"));
        }
        schema.push_str(
            "REQUIRED INT64 repetition;
            REQUIRED BYTE_ARRAY status (UTF8);
            REQUIRED BYTE_ARRAY started_at (UTF8);
            REQUIRED BYTE_ARRAY metric (UTF8);
            REQUIRED BYTE_ARRAY unit (UTF8);
            REQUIRED DOUBLE value;
        }",
        );
        let schema = Arc::new(parse_message_type(&schema).map_err(pe)?);
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_created_by(format!("wirebench {}", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        let n_text = 6 + axes.len();
        let w = SerializedFileWriter::new(out, schema, props).map_err(pe)?;
        let group = Group {
            texts: vec![Vec::new(); n_text],
            defs: vec![Vec::new(); axes.len()],
            ..Group::default()
        };
        Ok(LongWriter {
            axes,
            out: Output::open(None)?,
            parquet: Some((w, group)),
        })
    }

    /// One run's value of one metric.
    pub fn row(&mut self, c: &CampaignRow, r: &RunInfo, key: &str, v: f64) -> anyhow::Result<()> {
        let unit = wirebench_campaign::metrics::metric(key)
            .map(|m| m.unit)
            .unwrap_or("");
        let axes = self.axes.iter().map(|a| r.axes.get(a));
        let Some((w, g)) = self.parquet.as_mut() else {
            let mut line = vec![
                c.id.to_string(),
                wirebench_report::csv_field(&c.name),
                r.id.to_string(),
                wirebench_report::csv_field(&r.scenario_key),
            ];
            line.extend(axes.map(|x| {
                x.map(|s| wirebench_report::csv_field(s))
                    .unwrap_or_default()
            }));
            line.extend([
                (r.repetition + 1).to_string(),
                r.status.as_str().to_string(),
                wirebench_report::csv_field(&r.started_at),
                wirebench_report::csv_field(key),
                wirebench_report::csv_field(unit),
                format!("{v:?}"),
            ]);
            writeln!(self.out, "{}", line.join(","))?;
            return Ok(());
        };
        g.ints[0].push(c.id);
        g.ints[1].push(r.id);
        g.ints[2].push(i64::from(r.repetition) + 1);
        let b = |s: &str| ByteArray::from(s.as_bytes().to_vec());
        let texts = [
            c.name.as_str(),
            r.scenario_key.as_str(),
            r.status.as_str(),
            r.started_at.as_str(),
            key,
            unit,
        ];
        // Text buffers: campaign, scenario, status, started, metric,
        // unit; then one per axis.
        for (i, t) in texts.iter().enumerate() {
            g.texts[i].push(b(t));
        }
        for (j, x) in axes.enumerate() {
            match x {
                Some(s) => {
                    g.texts[6 + j].push(b(s));
                    g.defs[j].push(1);
                }
                None => g.defs[j].push(0),
            }
        }
        g.values.push(v);
        if g.values.len() == ROWS_PER_GROUP {
            write_group(w, g, &self.axes)?;
        }
        Ok(())
    }

    /// Ends the table; the output still has to be put in place.
    pub fn finish(self) -> anyhow::Result<Output> {
        match self.parquet {
            None => Ok(self.out),
            Some((mut w, mut g)) => {
                write_group(&mut w, &mut g, &self.axes)?;
                w.into_inner().map_err(pe)
            }
        }
    }
}

fn write_group(
    w: &mut SerializedFileWriter<Output>,
    g: &mut Group,
    axes: &[String],
) -> anyhow::Result<()> {
    if g.values.is_empty() {
        return Ok(());
    }
    let mut rg = w.next_row_group().map_err(pe)?;
    let mut i = 0;
    while let Some(mut col) = rg.next_column().map_err(pe)? {
        // Column order: campaign_id, campaign, run_id, scenario, axes…,
        // repetition, status, started_at, metric, unit, value.
        let n_axes = axes.len();
        match i {
            0 | 2 => {
                col.typed::<Int64Type>()
                    .write_batch(&g.ints[i / 2], None, None)
                    .map_err(pe)?;
            }
            1 | 3 => {
                col.typed::<ByteArrayType>()
                    .write_batch(&g.texts[i / 2], None, None)
                    .map_err(pe)?;
            }
            k if k >= 4 && k < 4 + n_axes => {
                let j = k - 4;
                col.typed::<ByteArrayType>()
                    .write_batch(&g.texts[6 + j], Some(&g.defs[j]), None)
                    .map_err(pe)?;
            }
            k if k == 4 + n_axes => {
                col.typed::<Int64Type>()
                    .write_batch(&g.ints[2], None, None)
                    .map_err(pe)?;
            }
            k if k < 4 + n_axes + 5 => {
                // status, started_at, metric, unit: text buffers 2 to 5.
                let t = k - (4 + n_axes) + 1;
                col.typed::<ByteArrayType>()
                    .write_batch(&g.texts[t], None, None)
                    .map_err(pe)?;
            }
            _ => {
                col.typed::<DoubleType>()
                    .write_batch(&g.values, None, None)
                    .map_err(pe)?;
            }
        }
        col.close().map_err(pe)?;
        i += 1;
    }
    rg.close().map_err(pe)?;
    g.ints.iter_mut().for_each(Vec::clear);
    g.texts.iter_mut().for_each(Vec::clear);
    g.defs.iter_mut().for_each(Vec::clear);
    g.values.clear();
    Ok(())
}
