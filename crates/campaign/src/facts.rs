//! What a stored run's result says, read once when the run is stored: its
//! number for every metric of the table ([`crate::metrics::METRICS`]) and
//! the few facts a summary needs beside them (bound check, fragmentation,
//! the systems at both ends, whether the document carries series or
//! histograms). The store keeps these beside the document so that lists,
//! exports and reports never parse documents for them; only the figures
//! drawn from whole documents (distributions, time series) read documents,
//! one at a time.

use serde_json::Value;
use std::collections::BTreeMap;
use wirebench_stats::result::{ReadError, ResultDoc, SCHEMA};

/// How far a stored result reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Readable {
    /// No document, not JSON, or not of the result schema: an `ok` run with
    /// it is not finished (the store lists it as failed).
    No = 0,
    /// Of the result schema, but this version cannot read it as one (a key
    /// of the wrong type): the run is left out of statistics and named.
    SchemaOnly = 1,
    /// A result document this version reads.
    Yes = 2,
}

impl Readable {
    pub(crate) fn from_i64(v: i64) -> Readable {
        match v {
            2 => Readable::Yes,
            1 => Readable::SchemaOnly,
            _ => Readable::No,
        }
    }
}

/// The per-run facts a summary needs beside the metric values.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFacts {
    /// How far the document reads.
    pub readable: Readable,
    /// Why the document does not read (when it does not).
    pub why: Option<String>,
    /// The run's own bound check fired (`total.above_bound`).
    pub above_bound: bool,
    /// Some flow sent IP fragments.
    pub fragmented: bool,
    /// "Windows → Linux" ([`crate::analysis::systems`]).
    pub systems: Option<String>,
    /// Some flow carries per-interval figures.
    pub has_series: bool,
    /// Some flow carries a non-empty delay or |IPDV| histogram.
    pub has_dist: bool,
}

impl RunFacts {
    /// The facts of a run without a readable document.
    pub fn unreadable(readable: Readable, why: Option<String>) -> RunFacts {
        RunFacts {
            readable,
            why,
            above_bound: false,
            fragmented: false,
            systems: None,
            has_series: false,
            has_dist: false,
        }
    }

    /// Bit 1: series, bit 2: histograms (as stored).
    pub(crate) fn figures_bits(&self) -> i64 {
        i64::from(self.has_series) | (i64::from(self.has_dist) << 1)
    }
}

/// A stored run's metric values and facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// Metric key → value, for the metrics the document has a number for.
    pub metrics: BTreeMap<String, f64>,
    /// What else the summary needs to know about the run.
    pub facts: RunFacts,
}

/// Reads a stored document's text as a typed result. The common case
/// parses the text straight into the types; a document that fails is read
/// again through a JSON value so that the error is the same one
/// [`ResultDoc::from_stored`] gives (no positions in the text).
pub fn read_doc(text: &str) -> Result<ResultDoc, ReadError> {
    if let Ok(d) = serde_json::from_str::<ResultDoc>(text) {
        if d.schema == SCHEMA {
            return Ok(d);
        }
    }
    let v: Value = serde_json::from_str(text)?;
    ResultDoc::from_stored(&v)
}

/// The facts of a typed document.
pub fn doc_facts(doc: &ResultDoc) -> RunFacts {
    RunFacts {
        readable: Readable::Yes,
        why: None,
        above_bound: doc.total.above_bound == Some(true),
        fragmented: doc.flows.iter().any(|f| f.frames.fragmented > 0),
        systems: crate::analysis::systems(doc),
        has_series: doc.flows.iter().any(|f| !f.intervals.is_empty()),
        has_dist: doc.flows.iter().any(|f| {
            [&f.delay_hist, &f.ipdv_hist]
                .iter()
                .any(|h| h.as_ref().is_some_and(|d| d.count() > 0))
        }),
    }
}

/// Everything stored beside one run: `result` is its document as stored
/// (None: the run produced none), `counters` the test-bed's.
pub fn extract_stored(result: Option<&Value>, counters: Option<&Value>) -> Extracted {
    let none = |readable, why: &str| Extracted {
        metrics: BTreeMap::new(),
        facts: RunFacts::unreadable(readable, Some(why.to_string())),
    };
    let Some(v) = result else {
        return none(Readable::No, "missing or not JSON");
    };
    match ResultDoc::from_stored(v) {
        Ok(doc) => extract_doc(&doc, counters),
        Err(e @ ReadError::Schema(_)) => none(Readable::No, &e.to_string()),
        Err(e) => none(Readable::SchemaOnly, &e.to_string()),
    }
}

/// [`extract_stored`] of a document as stored text (a migration or repair
/// reads many: straight into the types, through a JSON value only when
/// that fails).
pub fn extract_text(result: Option<&str>, counters: Option<&Value>) -> Extracted {
    match result.map(read_doc) {
        Some(Ok(doc)) => extract_doc(&doc, counters),
        _ => {
            let v = result.and_then(|t| serde_json::from_str::<Value>(t).ok());
            extract_stored(v.as_ref(), counters)
        }
    }
}

/// [`extract_stored`] of a document already read.
pub fn extract_doc(doc: &ResultDoc, counters: Option<&Value>) -> Extracted {
    Extracted {
        metrics: crate::metrics::extract(doc, counters),
        facts: doc_facts(doc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wirebench_stats::result::FlowResult;

    #[test]
    fn facts_of_documents_and_non_documents() {
        let mut f = FlowResult::default();
        f.frames.fragmented = 3;
        f.throughput_bps.payload = 5.0;
        let mut doc = ResultDoc::with_flows(vec![f]);
        doc.total.above_bound = Some(true);
        let v = serde_json::to_value(&doc).unwrap();
        let e = extract_stored(Some(&v), None);
        assert_eq!(e.facts.readable, Readable::Yes);
        assert!(e.facts.above_bound && e.facts.fragmented);
        assert!(!e.facts.has_series && !e.facts.has_dist);
        assert_eq!(e.metrics["throughput_payload_bps"], 5.0);
        assert_eq!(read_doc(&v.to_string()).unwrap(), doc);

        let missing = extract_stored(None, None);
        assert_eq!(missing.facts.readable, Readable::No);
        assert!(missing.metrics.is_empty());
        let other = extract_stored(Some(&json!({"schema": "elsewhere/9"})), None);
        assert_eq!(other.facts.readable, Readable::No);
        let bad = json!({"schema": SCHEMA, "flows": [{"transport": "sctp"}]});
        let e = extract_stored(Some(&bad), None);
        assert_eq!(e.facts.readable, Readable::SchemaOnly);
        // The same words whichever way the document was read.
        let why = e.facts.why.unwrap();
        assert_eq!(why, read_doc(&bad.to_string()).unwrap_err().to_string());
        assert_eq!(
            why,
            ResultDoc::from_stored(&bad).unwrap_err().to_string(),
            "{why}"
        );
    }
}
