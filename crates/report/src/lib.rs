//! Reports: turns [`CampaignSummary`] values (the aggregates the campaign layer
//! computes from the results store) into one self-contained HTML file with the
//! studies' chart families and tables, and into CSV and JSON exports.
//!
//! The report knows nothing of how runs were made: its only input is the
//! plain data in `wirebench_schema::summary` (plus, for the per-run export,
//! [`RunRecord`]s the caller reads from the store). Output is deterministic:
//! the same input gives the same bytes, so reports can be diffed and archived.

#![warn(missing_docs)]

pub mod combine;
mod dist;
mod export;
mod fmt;
mod html;
mod nodes;
pub mod plan;
mod rfc2544;
pub mod rfc_tables;
mod svg;
pub mod text;
mod timeseries;
mod wide;

use std::path::{Path, PathBuf};
pub use wirebench_schema::summary::CampaignSummary;

pub use combine::{combine, CombineError, CAMPAIGN_AXIS};
pub use export::{
    aggregates_csv, csv_field, runs_csv, runs_long_csv, to_json, write_csv, write_json, RunRecord,
    AGGREGATES_CSV, JSON_SCHEMA, RUNS_CSV, RUNS_LONG_CSV,
};
pub use fmt::esc as escape_html;

/// Errors of writing reports and exports.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be written (the previous one, if any, is intact).
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file asked for.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The summaries could not be encoded as JSON.
    #[error("cannot encode JSON: {0}")]
    Json(#[source] serde_json::Error),
}

/// Anything that is one or several campaign summaries, so that the render
/// functions take a single summary, a slice or a vector alike.
pub trait SummarySet {
    /// The summaries, in order.
    fn summaries(&self) -> &[CampaignSummary];
}

impl SummarySet for CampaignSummary {
    fn summaries(&self) -> &[CampaignSummary] {
        std::slice::from_ref(self)
    }
}

impl SummarySet for [CampaignSummary] {
    fn summaries(&self) -> &[CampaignSummary] {
        self
    }
}

impl SummarySet for Vec<CampaignSummary> {
    fn summaries(&self) -> &[CampaignSummary] {
        self
    }
}

impl<const N: usize> SummarySet for [CampaignSummary; N] {
    fn summaries(&self) -> &[CampaignSummary] {
        self
    }
}

/// The HTML report of one or more campaigns as a string.
pub fn render_html<S: SummarySet + ?Sized>(summaries: &S) -> String {
    html::document(summaries.summaries())
}

/// Writes [`render_html`] to `path` all or nothing (temporary file, fsync,
/// rename): on a full disk the previous report stays as it was.
pub fn write_html<S: SummarySet + ?Sized>(summaries: &S, path: &Path) -> Result<(), ReportError> {
    write_output(path, render_html(summaries).as_bytes())
}

/// Every file the report crate writes goes through here.
pub(crate) fn write_output(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    wirebench_input::write_file(path, bytes).map_err(|e| ReportError::Io {
        path: e.path,
        source: e.source,
    })
}
