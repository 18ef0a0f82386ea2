//! The results store: one SQLite file holding every campaign and every run
//! with its full result document.
//!
//! Each run is its own transaction, committed the moment the run ends, so
//! a crash (even SIGKILL) loses at most the run in flight. The unique key
//! (campaign, scenario key, repetition) makes a repeated insert impossible,
//! and an `ok` run is never overwritten: that is what makes resume safe.
//! An `ok` run whose stored document no longer reads as a result (damaged
//! by hand, a disk, another program) is not finished: it is listed as
//! failed, and [`Store::requeue_unreadable`] lets a resume run it again.
//! One runner per campaign at a time: [`Store::lock_campaign`].
//!
//! Beside each run the store keeps what its document says
//! ([`crate::facts`]): one row per metric in `run_metrics` and the run's
//! facts in `run_facts`, written in the run's transaction. Lists, exports
//! and summaries read those and stream documents only for the figures
//! drawn from them, so their cost follows what is asked, not what is
//! stored. A store of schema 1 (before those tables) is copied aside and
//! filled in when first opened; a store extracted by a release with
//! another metric table is extracted again.

use crate::summary::Environment;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Bumped when the schema changes; older stores are migrated on open.
pub const SCHEMA_VERSION: i64 = 2;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("results store {path}: {source}")]
    Sql {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("results store {path}: schema version {found}, this wirebench reads {SCHEMA_VERSION} and older")]
    Version { path: String, found: i64 },
    #[error("results store {path}: cannot copy it to {backup} before migrating it: {source}")]
    Backup {
        path: String,
        backup: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("results store {0} does not exist")]
    Missing(String),
    #[error("no campaign {0:?} in the results store")]
    NoCampaign(String),
    #[error("campaign {name:?} is already being run{} (lock {lock}); two runners would repeat runs and measure over each other: wait for it to end, or stop it", holder.map(|p| format!(" by process {p}")).unwrap_or_default())]
    Busy {
        name: String,
        holder: Option<u32>,
        lock: String,
    },
    #[error("results store {path}: lock {lock}: {source}")]
    Lock {
        path: String,
        lock: String,
        #[source]
        source: std::io::Error,
    },
}

/// One campaign as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignRow {
    pub id: i64,
    pub name: String,
    /// Where the file came from (its path when run).
    pub origin: String,
    /// The campaign file exactly as it was run.
    pub file_text: String,
    pub started_at: String,
    pub environment: Environment,
    /// Scenarios × repetitions.
    pub planned_runs: i64,
    /// True when run with `--quick`.
    pub quick: bool,
    /// `running`, `done` or `interrupted`.
    pub status: String,
}

/// Outcome of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The sender produced a result document.
    Ok,
    /// The measurement failed (peer gone, tool error, timeout); `error` says why.
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
        }
    }
    fn parse(s: &str) -> RunStatus {
        if s == "ok" {
            RunStatus::Ok
        } else {
            RunStatus::Failed
        }
    }
}

/// One run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: i64,
    pub campaign_id: i64,
    pub scenario_key: String,
    pub axes: BTreeMap<String, String>,
    /// 0-based repetition index.
    pub repetition: u32,
    pub status: RunStatus,
    /// The `wirebench.result/1` document, when the run produced one.
    pub result: Option<serde_json::Value>,
    /// Per-node interface/qdisc counter deltas over the run (test-bed only).
    pub counters: Option<serde_json::Value>,
    /// The exact commands run (receiver and sender).
    pub command: String,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: String,
}

impl RunRow {
    /// The stored result document as types (None: the run produced none).
    /// The row keeps the JSON as it was written, so keys this version does
    /// not know stay in the store; readers go through this.
    pub fn result_doc(
        &self,
    ) -> Option<Result<wirebench_stats::result::ResultDoc, wirebench_stats::result::ReadError>>
    {
        self.result
            .as_ref()
            .map(wirebench_stats::result::ResultDoc::from_stored)
    }
}

/// One run as lists and summaries read it: everything but its documents,
/// with the facts and payload throughput extracted when it was stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    pub id: i64,
    pub campaign_id: i64,
    pub scenario_key: String,
    pub axes: BTreeMap<String, String>,
    pub repetition: u32,
    /// `failed` also for an `ok` run whose result no longer reads (as
    /// [`RunRow`]).
    pub status: RunStatus,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: String,
    pub facts: crate::facts::RunFacts,
    pub throughput_payload_bps: Option<f64>,
}

/// Which runs a list, export or summary reads: every condition given
/// must hold; `limit`/`offset` page through them in id order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub campaign_id: Option<i64>,
    pub status: Option<RunStatus>,
    /// Runs started at or after this RFC 3339 time (text order is time
    /// order for the UTC times the store holds).
    pub since: Option<String>,
    pub limit: Option<u64>,
    pub offset: u64,
}

impl RunFilter {
    /// The runs of one campaign.
    pub fn campaign(id: i64) -> RunFilter {
        RunFilter {
            campaign_id: Some(id),
            ..RunFilter::default()
        }
    }

    /// The WHERE condition on `runs r` and its parameters.
    fn sql(&self) -> (String, Vec<rusqlite::types::Value>) {
        use rusqlite::types::Value as V;
        let mut cond = vec!["1".to_string()];
        let mut args = Vec::new();
        if let Some(id) = self.campaign_id {
            args.push(V::Integer(id));
            cond.push(format!("r.campaign_id = ?{}", args.len()));
        }
        let readable =
            "(SELECT coalesce(max(f2.readable), 0) FROM run_facts f2 WHERE f2.run_id = r.id)";
        match self.status {
            Some(RunStatus::Ok) => cond.push(format!("(r.status = 'ok' AND {readable} > 0)")),
            Some(RunStatus::Failed) => cond.push(format!("(r.status != 'ok' OR {readable} = 0)")),
            None => {}
        }
        if let Some(t) = &self.since {
            args.push(V::Text(t.clone()));
            cond.push(format!("r.started_at >= ?{}", args.len()));
        }
        (cond.join(" AND "), args)
    }

    fn limit_sql(&self) -> String {
        match self.limit {
            Some(n) => format!("LIMIT {n} OFFSET {}", self.offset),
            None if self.offset > 0 => format!("LIMIT -1 OFFSET {}", self.offset),
            None => String::new(),
        }
    }
}

/// A campaign about to be recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewCampaign<'a> {
    pub name: &'a str,
    pub origin: &'a str,
    pub file_text: &'a str,
    pub started_at: &'a str,
    pub environment: &'a Environment,
    pub planned_runs: usize,
    pub quick: bool,
}

/// A run about to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun<'a> {
    pub campaign_id: i64,
    pub scenario_key: &'a str,
    pub axes: &'a BTreeMap<String, String>,
    pub repetition: u32,
    pub status: RunStatus,
    pub result: Option<&'a serde_json::Value>,
    pub counters: Option<&'a serde_json::Value>,
    pub command: &'a str,
    pub error: Option<&'a str>,
    pub started_at: &'a str,
    pub ended_at: &'a str,
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS campaigns (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT NOT NULL,
    origin       TEXT NOT NULL,
    file_text    TEXT NOT NULL,
    started_at   TEXT NOT NULL,
    environment  TEXT NOT NULL,
    planned_runs INTEGER NOT NULL,
    quick        INTEGER NOT NULL DEFAULT 0,
    status       TEXT NOT NULL DEFAULT 'running'
);
CREATE TABLE IF NOT EXISTS runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id  INTEGER NOT NULL REFERENCES campaigns(id) ON DELETE CASCADE,
    scenario_key TEXT NOT NULL,
    axes         TEXT NOT NULL,
    repetition   INTEGER NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    result       TEXT,
    counters     TEXT,
    command      TEXT NOT NULL,
    error        TEXT,
    started_at   TEXT NOT NULL,
    ended_at     TEXT NOT NULL,
    UNIQUE (campaign_id, scenario_key, repetition)
);
CREATE INDEX IF NOT EXISTS runs_by_campaign ON runs(campaign_id, scenario_key);
CREATE TABLE IF NOT EXISTS run_metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  REAL NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_facts (
    run_id      INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    readable    INTEGER NOT NULL,
    why         TEXT,
    above_bound INTEGER NOT NULL DEFAULT 0,
    fragmented  INTEGER NOT NULL DEFAULT 0,
    systems     TEXT,
    figures     INTEGER NOT NULL DEFAULT 0
);
";

/// The metric table's keys as stored with the extracted values: a store
/// extracted with another table is extracted again when opened.
fn metrics_signature() -> String {
    crate::metrics::METRICS
        .iter()
        .map(|m| m.key)
        .collect::<Vec<_>>()
        .join(",")
}

fn json_or_null(s: Option<String>) -> Option<serde_json::Value> {
    s.and_then(|t| serde_json::from_str(&t).ok())
}

/// The SQL test for a stored result that still reads as a result document
/// (the same test as [`unreadable`], done by SQLite without loading it).
/// (CASE, not AND: SQLite may evaluate json_extract on text that is not JSON,
/// and that is an error, not a false.)
const READABLE_SQL: &str = "(CASE WHEN json_valid(result)
     THEN json_extract(result, '$.schema') IS 'wirebench.result/1' ELSE 0 END)";

/// Why a stored `ok` result is not a result document, if it is not.
fn unreadable(v: Option<&serde_json::Value>) -> Option<&'static str> {
    match v {
        None => Some("missing or not JSON"),
        Some(d)
            if d.get("schema").and_then(serde_json::Value::as_str)
                != Some(wirebench_stats::result::SCHEMA) =>
        {
            Some("no `schema: wirebench.result/1`")
        }
        Some(_) => None,
    }
}

/// A run that was stored `ok` but whose result no longer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub scenario_key: String,
    pub repetition: u32,
    pub why: String,
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let p = path.display().to_string();
        let sql = |source| StoreError::Sql {
            path: p.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql)?;
        // WAL lets a report read while a campaign writes; FULL sync makes a
        // committed run survive a power cut, not only a killed process.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        conn.execute_batch(SCHEMA).map_err(sql)?;
        let store = Store { conn, path };
        store.upgrade()?;
        Ok(store)
    }

    fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
                params![key, value],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// A new store gets this schema; a store of schema 1 is copied aside
    /// and its runs' values extracted; a store extracted with another
    /// metric table is extracted again. Each in one transaction, so a
    /// crash leaves the store as it was.
    fn upgrade(&self) -> Result<(), StoreError> {
        let version = |s: &Store| -> Result<Option<i64>, StoreError> {
            Ok(s.meta("schema_version")?.and_then(|v| v.parse().ok()))
        };
        let signature = metrics_signature();
        let found = version(self)?;
        match found {
            Some(v) if !(1..=SCHEMA_VERSION).contains(&v) => {
                return Err(StoreError::Version {
                    path: self.path.display().to_string(),
                    found: v,
                })
            }
            Some(SCHEMA_VERSION) if self.meta("metrics")?.as_deref() == Some(&signature) => {
                return self.extract_missing();
            }
            Some(v) if v < SCHEMA_VERSION => self.backup(v)?,
            _ => {}
        }
        // IMMEDIATE: a second process opening the store at the same time
        // waits here and then finds the work done.
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(|e| self.sql(e))?;
        let now = version(self)?;
        if now != Some(SCHEMA_VERSION) || self.meta("metrics")?.as_deref() != Some(&signature) {
            if now.is_some() {
                self.extract_all()?;
            }
            self.set_meta("schema_version", &SCHEMA_VERSION.to_string())?;
            self.set_meta("metrics", &signature)?;
        }
        tx.commit().map_err(|e| self.sql(e))
    }

    /// Copies the store to `PATH.schemaV.bak` (the first free name) before
    /// a migration changes it; a store that cannot be copied is not
    /// migrated.
    fn backup(&self, from_version: i64) -> Result<(), StoreError> {
        let base = format!("{}.schema{from_version}.bak", self.path.display());
        let backup = (0..)
            .map(|n| match n {
                0 => base.clone(),
                n => format!("{base}.{n}"),
            })
            .find(|p| !Path::new(p).exists())
            .unwrap_or(base);
        self.conn
            .execute("VACUUM INTO ?1", params![backup])
            .map_err(|source| StoreError::Backup {
                path: self.path.display().to_string(),
                backup,
                source,
            })?;
        Ok(())
    }

    /// Extracts the values of runs stored without them (rows put in by
    /// another program, or copied by hand): counting both tables is cheap,
    /// so every open checks.
    fn extract_missing(&self) -> Result<(), StoreError> {
        let count = |t: &str| -> Result<i64, StoreError> {
            self.conn
                .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .map_err(|e| self.sql(e))
        };
        if count("runs")? == count("run_facts")? {
            return Ok(());
        }
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(|e| self.sql(e))?;
        self.extract_where("NOT EXISTS (SELECT 1 FROM run_facts f WHERE f.run_id = runs.id)")?;
        tx.commit().map_err(|e| self.sql(e))
    }

    /// (Re)writes every run's extracted values, one run at a time.
    fn extract_all(&self) -> Result<(), StoreError> {
        self.conn
            .execute_batch("DELETE FROM run_metrics; DELETE FROM run_facts;")
            .map_err(|e| self.sql(e))?;
        self.extract_where("1")
    }

    fn extract_where(&self, cond: &str) -> Result<(), StoreError> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT id, result, counters FROM runs WHERE {cond} ORDER BY id"
            ))
            .map_err(|e| self.sql(e))?;
        let mut rows = st.query([]).map_err(|e| self.sql(e))?;
        while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
            let id: i64 = r.get(0).map_err(|e| self.sql(e))?;
            let counters = json_or_null(r.get(2).map_err(|e| self.sql(e))?);
            let result = r.get_ref(1).map_err(|e| self.sql(e))?.as_str_or_null();
            let result = result.ok().flatten();
            let x = crate::facts::extract_text(result, counters.as_ref());
            self.write_extracted(id, &x)?;
        }
        Ok(())
    }

    /// Replaces a run's extracted values.
    fn write_extracted(&self, run_id: i64, x: &crate::facts::Extracted) -> Result<(), StoreError> {
        let sql = |e| self.sql(e);
        self.conn
            .prepare_cached("DELETE FROM run_metrics WHERE run_id = ?1")
            .and_then(|mut s| s.execute(params![run_id]))
            .map_err(sql)?;
        let mut put = self
            .conn
            .prepare_cached("INSERT INTO run_metrics(run_id, key, value) VALUES (?1, ?2, ?3)")
            .map_err(sql)?;
        for (k, v) in &x.metrics {
            put.execute(params![run_id, k, v]).map_err(sql)?;
        }
        let f = &x.facts;
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO run_facts(run_id, readable, why, above_bound, fragmented, systems, figures)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    f.readable as i64,
                    f.why,
                    f.above_bound,
                    f.fragmented,
                    f.systems,
                    f.figures_bits()
                ])
            })
            .map_err(sql)?;
        Ok(())
    }

    /// Opens an existing store; an error if the file is not there (readers
    /// should not create empty stores by typo).
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        if !path.as_ref().exists() {
            return Err(StoreError::Missing(path.as_ref().display().to_string()));
        }
        Store::open(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Records a new campaign and returns its id.
    pub fn create_campaign(&self, c: &NewCampaign) -> Result<i64, StoreError> {
        let env = serde_json::to_string(c.environment).unwrap_or_else(|_| "{}".into());
        let NewCampaign {
            name,
            origin,
            file_text,
            started_at,
            planned_runs,
            quick,
            ..
        } = *c;
        self.conn
            .execute(
                "INSERT INTO campaigns(name, origin, file_text, started_at, environment, planned_runs, quick, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running')",
                params![name, origin, file_text, started_at, env, planned_runs as i64, quick as i64],
            )
            .map_err(|e| self.sql(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Replaces the campaign's environment record (agent campaigns add
    /// every node's metadata once their agents answered).
    pub fn set_environment(&self, id: i64, env: &Environment) -> Result<(), StoreError> {
        let text = serde_json::to_string(env).unwrap_or_else(|_| "{}".into());
        self.conn
            .execute(
                "UPDATE campaigns SET environment = ?1 WHERE id = ?2",
                params![text, id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// A resumed campaign whose file grew: the new file text and plan.
    pub fn set_campaign_plan(
        &self,
        id: i64,
        file_text: &str,
        planned_runs: usize,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE campaigns SET file_text = ?1, planned_runs = ?2 WHERE id = ?3",
                params![file_text, planned_runs as i64, id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn set_campaign_status(&self, id: i64, status: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE campaigns SET status = ?1 WHERE id = ?2",
                params![status, id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    fn row_to_campaign(r: &rusqlite::Row) -> rusqlite::Result<CampaignRow> {
        let env: String = r.get(5)?;
        Ok(CampaignRow {
            id: r.get(0)?,
            name: r.get(1)?,
            origin: r.get(2)?,
            file_text: r.get(3)?,
            started_at: r.get(4)?,
            environment: serde_json::from_str(&env).unwrap_or_default(),
            planned_runs: r.get(6)?,
            quick: r.get::<_, i64>(7)? != 0,
            status: r.get(8)?,
        })
    }

    const CAMPAIGN_COLS: &'static str =
        "id, name, origin, file_text, started_at, environment, planned_runs, quick, status";

    /// All campaigns, oldest first.
    pub fn campaigns(&self) -> Result<Vec<CampaignRow>, StoreError> {
        let q = format!("SELECT {} FROM campaigns ORDER BY id", Self::CAMPAIGN_COLS);
        let mut st = self.conn.prepare(&q).map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([], Self::row_to_campaign)
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows)
    }

    pub fn campaign(&self, id: i64) -> Result<Option<CampaignRow>, StoreError> {
        let q = format!(
            "SELECT {} FROM campaigns WHERE id = ?1",
            Self::CAMPAIGN_COLS
        );
        self.conn
            .query_row(&q, params![id], Self::row_to_campaign)
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// A campaign by numeric id, or the latest one with that name.
    pub fn find_campaign(&self, name_or_id: &str) -> Result<CampaignRow, StoreError> {
        if let Ok(id) = name_or_id.parse::<i64>() {
            if let Some(c) = self.campaign(id)? {
                return Ok(c);
            }
        }
        self.latest_by_name(name_or_id)?
            .ok_or_else(|| StoreError::NoCampaign(name_or_id.to_string()))
    }

    pub fn latest_by_name(&self, name: &str) -> Result<Option<CampaignRow>, StoreError> {
        let q = format!(
            "SELECT {} FROM campaigns WHERE name = ?1 ORDER BY id DESC LIMIT 1",
            Self::CAMPAIGN_COLS
        );
        self.conn
            .query_row(&q, params![name], Self::row_to_campaign)
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// The latest campaign, if any.
    pub fn latest(&self) -> Result<Option<CampaignRow>, StoreError> {
        Ok(self.campaigns()?.pop())
    }

    /// All runs of a campaign in the order they were stored, with their
    /// documents (for one campaign's resume and RFC 2544 searches; lists,
    /// exports and reports read [`Store::for_each_run`] instead).
    pub fn runs(&self, campaign_id: i64) -> Result<Vec<RunRow>, StoreError> {
        self.run_rows("campaign_id = ?1", campaign_id)
    }

    /// One run by its id.
    pub fn run(&self, run_id: i64) -> Result<Option<RunRow>, StoreError> {
        Ok(self.run_rows("id = ?1", run_id)?.pop())
    }

    fn run_rows(&self, cond: &str, arg: i64) -> Result<Vec<RunRow>, StoreError> {
        let mut out = Vec::new();
        self.for_each_row(cond, arg, |r| {
            out.push(r);
            Ok::<_, StoreError>(())
        })?;
        Ok(out)
    }

    /// A campaign's runs with their documents, read one at a time in id
    /// order (exports of whole documents).
    pub fn for_each_run_row<E: From<StoreError>>(
        &self,
        campaign_id: i64,
        each: impl FnMut(RunRow) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each_row("campaign_id = ?1", campaign_id, each)
    }

    fn for_each_row<E: From<StoreError>>(
        &self,
        cond: &str,
        arg: i64,
        mut each: impl FnMut(RunRow) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT id, campaign_id, scenario_key, axes, repetition, status, result, counters,
                        command, error, started_at, ended_at
                 FROM runs WHERE {cond} ORDER BY id"
            ))
            .map_err(|e| self.sql(e))?;
        let mut rows = st.query(params![arg]).map_err(|e| self.sql(e))?;
        let row = |r: &rusqlite::Row| -> rusqlite::Result<RunRow> {
            let axes: String = r.get(3)?;
            let mut status = RunStatus::parse(&r.get::<_, String>(5)?);
            let result = json_or_null(r.get(6)?);
            let mut error: Option<String> = r.get(9)?;
            if status == RunStatus::Ok {
                if let Some(why) = unreadable(result.as_ref()) {
                    status = RunStatus::Failed;
                    error = Some(format!(
                        "the stored result no longer reads ({why}); `run --resume` runs it again"
                    ));
                }
            }
            Ok(RunRow {
                id: r.get(0)?,
                campaign_id: r.get(1)?,
                scenario_key: r.get(2)?,
                axes: serde_json::from_str(&axes).unwrap_or_default(),
                repetition: r.get::<_, i64>(4)? as u32,
                status,
                result,
                counters: json_or_null(r.get(7)?),
                command: r.get(8)?,
                error,
                started_at: r.get(10)?,
                ended_at: r.get(11)?,
            })
        };
        while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
            each(row(r).map_err(|e| self.sql(e))?)?;
        }
        Ok(())
    }

    /// How many runs the filter selects (before its limit and offset).
    pub fn count_runs(&self, filter: &RunFilter) -> Result<u64, StoreError> {
        let (cond, args) = filter.sql();
        self.conn
            .query_row(
                &format!("SELECT count(*) FROM runs r WHERE {cond}"),
                rusqlite::params_from_iter(args),
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(|e| self.sql(e))
    }

    /// Runs of the filter in id order, one at a time and without their
    /// documents (see [`RunInfo`]); `each` may stop the walk with an error.
    pub fn for_each_run<E: From<StoreError>>(
        &self,
        filter: &RunFilter,
        mut each: impl FnMut(RunInfo) -> Result<(), E>,
    ) -> Result<(), E> {
        let (cond, args) = filter.sql();
        let q = format!(
            "SELECT r.id, r.campaign_id, r.scenario_key, r.axes, r.repetition, r.status, r.error,
                    r.started_at, r.ended_at, f.readable, f.why, f.above_bound, f.fragmented,
                    f.systems, f.figures, m.value
             FROM runs r LEFT JOIN run_facts f ON f.run_id = r.id
             LEFT JOIN run_metrics m ON m.run_id = r.id AND m.key = 'throughput_payload_bps'
             WHERE {cond} ORDER BY r.id {}",
            filter.limit_sql()
        );
        let mut st = self.conn.prepare(&q).map_err(|e| self.sql(e))?;
        let mut rows = st
            .query(rusqlite::params_from_iter(args))
            .map_err(|e| self.sql(e))?;
        while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
            let info = Self::row_to_info(r).map_err(|e| self.sql(e))?;
            each(info)?;
        }
        Ok(())
    }

    fn row_to_info(r: &rusqlite::Row) -> rusqlite::Result<RunInfo> {
        use crate::facts::{Readable, RunFacts};
        let axes: String = r.get(3)?;
        let readable = Readable::from_i64(r.get::<_, Option<i64>>(9)?.unwrap_or(0));
        let why: Option<String> = r.get(10)?;
        let mut status = RunStatus::parse(&r.get::<_, String>(5)?);
        let mut error: Option<String> = r.get(6)?;
        if status == RunStatus::Ok && readable == Readable::No {
            status = RunStatus::Failed;
            error = Some(format!(
                "the stored result no longer reads ({}); `run --resume` runs it again",
                why.as_deref().unwrap_or("not a result document")
            ));
        }
        let figures = r.get::<_, Option<i64>>(14)?.unwrap_or(0);
        Ok(RunInfo {
            id: r.get(0)?,
            campaign_id: r.get(1)?,
            scenario_key: r.get(2)?,
            axes: serde_json::from_str(&axes).unwrap_or_default(),
            repetition: r.get::<_, i64>(4)? as u32,
            status,
            error,
            started_at: r.get(7)?,
            ended_at: r.get(8)?,
            facts: RunFacts {
                readable,
                why,
                above_bound: r.get::<_, Option<bool>>(11)?.unwrap_or(false),
                fragmented: r.get::<_, Option<bool>>(12)?.unwrap_or(false),
                systems: r.get(13)?,
                has_series: figures & 1 != 0,
                has_dist: figures & 2 != 0,
            },
            throughput_payload_bps: r.get(15)?,
        })
    }

    /// Every metric value of the filter's runs whose documents read, in
    /// run order then key order: (run id, metric key, value).
    pub fn for_each_value<E: From<StoreError>>(
        &self,
        filter: &RunFilter,
        mut each: impl FnMut(i64, &str, f64) -> Result<(), E>,
    ) -> Result<(), E> {
        let (cond, args) = filter.sql();
        let q = format!(
            "SELECT m.run_id, m.key, m.value FROM run_metrics m
             WHERE m.run_id IN (SELECT r.id FROM runs r WHERE {cond} ORDER BY r.id {})
             ORDER BY m.run_id, m.key",
            filter.limit_sql()
        );
        let mut st = self.conn.prepare(&q).map_err(|e| self.sql(e))?;
        let mut rows = st
            .query(rusqlite::params_from_iter(args))
            .map_err(|e| self.sql(e))?;
        while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
            let id: i64 = r.get(0).map_err(|e| self.sql(e))?;
            let key = r
                .get_ref(1)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(|e| self.sql(e))?;
            let v: f64 = r.get(2).map_err(|e| self.sql(e))?;
            each(id, key, v)?;
        }
        Ok(())
    }

    /// The test-bed counters of a campaign's runs that stored some, in run
    /// order: (run id, counters).
    pub fn for_each_counters<E: From<StoreError>>(
        &self,
        campaign_id: i64,
        mut each: impl FnMut(i64, serde_json::Value) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, counters FROM runs WHERE campaign_id = ?1 AND counters IS NOT NULL
                 ORDER BY id",
            )
            .map_err(|e| self.sql(e))?;
        let mut rows = st.query(params![campaign_id]).map_err(|e| self.sql(e))?;
        while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
            let id: i64 = r.get(0).map_err(|e| self.sql(e))?;
            if let Some(v) = json_or_null(r.get(1).map_err(|e| self.sql(e))?) {
                each(id, v)?;
            }
        }
        Ok(())
    }

    /// The result documents of a campaign's ok runs that carry series or
    /// histograms, read one at a time in run order: (run id, document).
    pub fn for_each_figures_doc<E: From<StoreError>>(
        &self,
        campaign_id: i64,
        mut each: impl FnMut(i64, &wirebench_stats::result::ResultDoc) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut st = self
            .conn
            .prepare(
                "SELECT r.id, r.result FROM runs r JOIN run_facts f ON f.run_id = r.id
                 WHERE r.campaign_id = ?1 AND r.status = 'ok' AND f.readable = 2 AND f.figures != 0
                 ORDER BY r.id",
            )
            .map_err(|e| self.sql(e))?;
        let mut rows = st.query(params![campaign_id]).map_err(|e| self.sql(e))?;
        while let Some(r) = rows.next().map_err(|e| self.sql(e))? {
            let id: i64 = r.get(0).map_err(|e| self.sql(e))?;
            let text = r
                .get_ref(1)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(|e| self.sql(e))?;
            // Damaged since it was stored: the figures go without it.
            if let Ok(doc) = crate::facts::read_doc(text) {
                each(id, &doc)?;
            }
        }
        Ok(())
    }

    /// Per campaign id: its runs that finished with a readable result.
    pub fn ok_counts(&self) -> Result<BTreeMap<i64, i64>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT r.campaign_id, count(*) FROM runs r JOIN run_facts f ON f.run_id = r.id
                 WHERE r.status = 'ok' AND f.readable > 0 GROUP BY r.campaign_id",
            )
            .map_err(|e| self.sql(e))?;
        let out = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.sql(e))?
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(out)
    }

    /// (scenario key, repetition) of every run that finished with a result
    /// that still reads as one.
    pub fn finished(&self, campaign_id: i64) -> Result<HashSet<(String, u32)>, StoreError> {
        let q = format!(
            "SELECT scenario_key, repetition FROM runs
             WHERE campaign_id = ?1 AND status = 'ok' AND {READABLE_SQL}"
        );
        let mut st = self.conn.prepare(&q).map_err(|e| self.sql(e))?;
        let set = st
            .query_map(params![campaign_id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u32))
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<HashSet<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(set)
    }

    /// Marks every `ok` run of the campaign whose stored result no longer
    /// reads as `failed` (saying why), so that the next attempt may replace
    /// it, and returns them.
    pub fn requeue_unreadable(&self, campaign_id: i64) -> Result<Vec<Unreadable>, StoreError> {
        let q = format!(
            "SELECT id, scenario_key, repetition, result FROM runs
             WHERE campaign_id = ?1 AND status = 'ok' AND NOT coalesce({READABLE_SQL}, 0)"
        );
        let mut st = self.conn.prepare(&q).map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params![campaign_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)? as u32,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for (id, scenario_key, repetition, text) in rows {
            let why = unreadable(json_or_null(text).as_ref())
                .unwrap_or("not a result document")
                .to_string();
            self.conn
                .execute(
                    "UPDATE runs SET status = 'failed', error = ?1 WHERE id = ?2",
                    params![
                        format!("the stored result no longer reads ({why}); run again by --resume"),
                        id
                    ],
                )
                .map_err(|e| self.sql(e))?;
            out.push(Unreadable {
                scenario_key,
                repetition,
                why,
            });
        }
        Ok(out)
    }

    /// Takes the campaign's runner lock (see [`crate::lock`]): held until
    /// the returned value is dropped; refused at once when another process
    /// holds it.
    pub fn lock_campaign(&self, name: &str) -> Result<crate::lock::CampaignLock, StoreError> {
        let lock = crate::lock::lock_path(&self.path, name);
        crate::lock::CampaignLock::acquire_for(&self.path, name).map_err(|f| match f {
            crate::lock::LockFailure::Busy(holder) => StoreError::Busy {
                name: name.to_string(),
                holder,
                lock: lock.display().to_string(),
            },
            crate::lock::LockFailure::Io(source) => StoreError::Lock {
                path: self.path.display().to_string(),
                lock: lock.display().to_string(),
                source,
            },
        })
    }

    /// Commits one run with its extracted values ([`crate::facts`]), in
    /// one transaction. A failed run may be replaced by a later attempt; an
    /// `ok` run never is (returns false when the row was already `ok`).
    pub fn record_run(&self, run: &NewRun) -> Result<bool, StoreError> {
        let axes = serde_json::to_string(run.axes).unwrap_or_else(|_| "{}".into());
        let result = run.result.map(|v| v.to_string());
        let counters = run.counters.map(|v| v.to_string());
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(|e| self.sql(e))?;
        let id: Option<i64> = self
            .conn
            .query_row(
                "INSERT INTO runs(campaign_id, scenario_key, axes, repetition, status, result, counters,
                                  command, error, started_at, ended_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT(campaign_id, scenario_key, repetition) DO UPDATE SET
                    axes = excluded.axes, status = excluded.status, result = excluded.result,
                    counters = excluded.counters, command = excluded.command, error = excluded.error,
                    started_at = excluded.started_at, ended_at = excluded.ended_at
                 WHERE runs.status != 'ok'
                 RETURNING id",
                params![
                    run.campaign_id,
                    run.scenario_key,
                    axes,
                    run.repetition as i64,
                    run.status.as_str(),
                    result,
                    counters,
                    run.command,
                    run.error,
                    run.started_at,
                    run.ended_at
                ],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        if let Some(id) = id {
            let x = crate::facts::extract_stored(run.result, run.counters);
            self.write_extracted(id, &x)?;
        }
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(id.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::Environment;

    fn doc(bps: f64) -> serde_json::Value {
        let mut f = wirebench_stats::result::FlowResult::default();
        f.throughput_bps.payload = bps;
        serde_json::to_value(wirebench_stats::result::ResultDoc::with_flows(vec![f])).unwrap()
    }

    fn put(
        s: &Store,
        cid: i64,
        rep: u32,
        status: RunStatus,
        d: Option<&serde_json::Value>,
    ) -> bool {
        s.record_run(&NewRun {
            campaign_id: cid,
            scenario_key: "k",
            axes: &BTreeMap::new(),
            repetition: rep,
            status,
            result: d,
            counters: None,
            command: "",
            error: None,
            started_at: "2026-01-01T00:00:00.000Z",
            ended_at: "2026-01-01T00:00:01.000Z",
        })
        .unwrap()
    }

    fn throughputs(s: &Store) -> Vec<(i64, f64)> {
        let mut v = Vec::new();
        s.for_each_value(&RunFilter::default(), |id, k, x| {
            if k == "throughput_payload_bps" {
                v.push((id, x));
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
        v
    }

    /// Values are extracted when a run is stored, replaced with a failed
    /// run's retry, and extracted again when the metric table changed.
    #[test]
    fn values_follow_the_stored_document_and_the_metric_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let s = Store::open(&path).unwrap();
        let env = Environment::default();
        let cid = s
            .create_campaign(&NewCampaign {
                name: "c",
                origin: "c.toml",
                file_text: "",
                started_at: "2026-01-01T00:00:00.000Z",
                environment: &env,
                planned_runs: 2,
                quick: false,
            })
            .unwrap();
        assert!(put(&s, cid, 0, RunStatus::Ok, Some(&doc(5.0))));
        assert!(put(&s, cid, 1, RunStatus::Failed, None));
        assert_eq!(throughputs(&s), [(1, 5.0)]);
        // An ok run is never replaced; a failed one is, with its values.
        assert!(!put(&s, cid, 0, RunStatus::Ok, Some(&doc(9.0))));
        assert!(put(&s, cid, 1, RunStatus::Ok, Some(&doc(7.0))));
        assert_eq!(throughputs(&s), [(1, 5.0), (2, 7.0)]);
        let ok = RunFilter {
            status: Some(RunStatus::Ok),
            ..RunFilter::default()
        };
        assert_eq!(s.count_runs(&ok).unwrap(), 2);

        // A store extracted with another metric table (or by hand).
        s.conn
            .execute_batch(
                "UPDATE meta SET value = 'older' WHERE key = 'metrics';
                 DELETE FROM run_metrics WHERE run_id = 2;
                 UPDATE run_metrics SET value = 1 WHERE run_id = 1;",
            )
            .unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(throughputs(&s), [(1, 5.0), (2, 7.0)]);
        assert!(!dir.path().join("s.db.schema2.bak").exists());

        // A run copied in by another program, without its values.
        s.conn
            .execute_batch(
                "INSERT INTO runs(campaign_id, scenario_key, axes, repetition, status, result,
                                  command, started_at, ended_at)
                 SELECT campaign_id, scenario_key, axes, 1000, status, result, command,
                        started_at, ended_at FROM runs WHERE id = 1",
            )
            .unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        let got: Vec<f64> = throughputs(&s).into_iter().map(|(_, v)| v).collect();
        assert_eq!(got, [5.0, 7.0, 5.0]);

        // A newer store is refused and left as it is.
        s.set_meta("schema_version", "3").unwrap();
        drop(s);
        match Store::open(&path) {
            Err(StoreError::Version { found: 3, .. }) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a schema-3 store opened"),
        }
        let c = Connection::open(&path).unwrap();
        let v: String = c
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, "3");
    }
}
