//! The results store: every campaign and every run with its full result
//! document, in one SQLite file (the embedded default) or in a PostgreSQL
//! database a lab shares ([`postgres`]); both hold the same tables and
//! answer every query the same (the SQL is written once, `db`).
//!
//! Each run is its own transaction, committed the moment the run ends, so
//! a crash (even SIGKILL) loses at most the run in flight. The unique key
//! (campaign, scenario key, repetition) makes a repeated insert impossible,
//! and an `ok` run is never overwritten: that is what makes resume safe.
//! An `ok` run whose stored document no longer reads as a result (damaged
//! by hand, a disk, another program) is not finished: it is listed as
//! failed, and [`Store::requeue_unreadable`] lets a resume run it again.
//! One runner per campaign at a time: [`Store::lock_campaign`], a lock
//! file beside an SQLite store, an advisory lock in PostgreSQL, so that
//! several controllers sharing one database keep the rule.
//!
//! Beside each run the store keeps what its document says
//! ([`crate::facts`]): one row per metric in `run_metrics` and the run's
//! facts in `run_facts`, written in the run's transaction. The documents
//! themselves live in `run_docs`, apart from the short `runs` rows that
//! lists walk. Lists, exports and summaries read those and stream
//! documents only for the figures drawn from them, so their cost follows
//! what is asked, not what is stored. A store of an older schema (1:
//! before those tables; 2: documents in `runs`) is copied aside and
//! migrated when first opened; a store extracted by a release with
//! another metric table is extracted again.

mod db;
pub mod postgres;

use crate::summary::Environment;
use db::{Conn, DbError, Dialect, Row, Val};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Bumped when the schema changes; older stores are migrated on open.
pub const SCHEMA_VERSION: i64 = 3;

/// Why the results store could not be opened, read or written.
#[derive(Debug, Error)]
pub enum StoreError {
    /// An SQLite statement failed.
    #[error("results store {path}: {source}")]
    Sql {
        /// The store's file.
        path: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    #[error("results store {path}: schema version {found}, this wirebench reads {SCHEMA_VERSION} and older")]
    /// The store was written by a newer wirebench.
    Version {
        /// The store's file or URL.
        path: String,
        /// The schema version it holds.
        found: i64,
    },
    #[error("results store {path}: cannot copy it to {backup} before migrating it: {source}")]
    /// The copy taken before a migration could not be written.
    Backup {
        /// The store's file.
        path: String,
        /// Where the copy was to go.
        backup: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    #[error("results store {url}: {source}")]
    /// A PostgreSQL statement failed.
    Pg {
        /// The store's URL (without a password).
        url: String,
        /// The PostgreSQL error.
        #[source]
        source: ::postgres::Error,
    },
    #[error("results store {url}: cannot connect{hint}: {source}")]
    /// The PostgreSQL server could not be reached or refused the login.
    Connect {
        /// The store's URL (without a password).
        url: String,
        /// Where the password came from, or how to give one.
        hint: String,
        /// The PostgreSQL error.
        #[source]
        source: ::postgres::Error,
    },
    #[error("results store {url}: {why}")]
    /// The `postgres://` URL does not parse.
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    #[error("results store {0}: a callback of a streamed read used the store (it is busy until the read ends)")]
    /// A streamed read's callback used the store (the store's file or URL).
    Reentered(String),
    #[error("results store {0} does not exist")]
    /// Opening an existing store: there is none (its file or URL).
    Missing(String),
    #[error("no campaign {0:?} in the results store")]
    /// No campaign has that name or id.
    NoCampaign(String),
    #[error("campaign {name:?} is already being run{} (lock {lock}); two runners would repeat runs and measure over each other: wait for it to end, or stop it", holder.map(|p| format!(" by process {p}")).unwrap_or_default())]
    /// Another runner holds the campaign's lock.
    Busy {
        /// The campaign's name.
        name: String,
        /// The holder's pid, when it wrote one.
        holder: Option<u32>,
        /// The lock file.
        lock: String,
    },
    #[error("results store {path}: lock {lock}: {source}")]
    /// The lock file could not be opened, locked or written.
    Lock {
        /// The store's file.
        path: String,
        /// The lock file.
        lock: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One campaign as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignRow {
    /// The campaign's id in the store.
    pub id: i64,
    /// The campaign's name.
    pub name: String,
    /// Where the file came from (its path when run).
    pub origin: String,
    /// The campaign file exactly as it was run.
    pub file_text: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// The machine and tools it ran with.
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
    /// The status as stored (`ok`, `failed`).
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
    /// The run's id in the store.
    pub id: i64,
    /// Its campaign's id.
    pub campaign_id: i64,
    /// The scenario's key.
    pub scenario_key: String,
    /// Axis name → value text of the scenario.
    pub axes: BTreeMap<String, String>,
    /// 0-based repetition index.
    pub repetition: u32,
    /// How the run ended.
    pub status: RunStatus,
    /// The `wirebench.result/1` document, when the run produced one.
    pub result: Option<serde_json::Value>,
    /// Per-node interface/qdisc counter deltas over the run (test-bed only).
    pub counters: Option<serde_json::Value>,
    /// The exact commands run (receiver and sender).
    pub command: String,
    /// Why a failed run failed.
    pub error: Option<String>,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// When it ended (RFC 3339, UTC).
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
    /// The run's id in the store.
    pub id: i64,
    /// Its campaign's id.
    pub campaign_id: i64,
    /// The scenario's key.
    pub scenario_key: String,
    /// Axis name → value text of the scenario.
    pub axes: BTreeMap<String, String>,
    /// 0-based repetition index.
    pub repetition: u32,
    /// `failed` also for an `ok` run whose result no longer reads (as
    /// [`RunRow`]).
    pub status: RunStatus,
    /// Why a failed run failed.
    pub error: Option<String>,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// When it ended (RFC 3339, UTC).
    pub ended_at: String,
    /// What its document says beside the metric values.
    pub facts: crate::facts::RunFacts,
    /// Payload throughput of the run, bit/s (all flows), when it has one.
    pub throughput_payload_bps: Option<f64>,
}

/// Which runs a list, export or summary reads: every condition given
/// must hold; `limit`/`offset` page through them in id order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Only this campaign's runs.
    pub campaign_id: Option<i64>,
    /// Only runs of this status (an `ok` run whose result no longer reads counts as failed).
    pub status: Option<RunStatus>,
    /// Runs started at or after this RFC 3339 time (text order is time
    /// order for the UTC times the store holds).
    pub since: Option<String>,
    /// At most this many runs.
    pub limit: Option<u64>,
    /// Runs to skip first.
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
    fn sql(&self) -> (String, Vec<Val>) {
        let mut cond = vec!["1 = 1".to_string()];
        let mut args = Vec::new();
        if let Some(id) = self.campaign_id {
            args.push(Val::from(id));
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
            args.push(Val::from(t.as_str()));
            cond.push(format!("r.started_at >= ?{}", args.len()));
        }
        (cond.join(" AND "), args)
    }

    fn limit_sql(&self, dialect: Dialect) -> String {
        match (self.limit, dialect) {
            (Some(n), _) => format!("LIMIT {n} OFFSET {}", self.offset),
            (None, _) if self.offset == 0 => String::new(),
            (None, Dialect::Sqlite) => format!("LIMIT -1 OFFSET {}", self.offset),
            (None, Dialect::Postgres) => format!("OFFSET {}", self.offset),
        }
    }
}

/// A campaign about to be recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewCampaign<'a> {
    /// The campaign's name.
    pub name: &'a str,
    /// Where the file came from (its path).
    pub origin: &'a str,
    /// The campaign file exactly as run.
    pub file_text: &'a str,
    /// When it started (RFC 3339, UTC).
    pub started_at: &'a str,
    /// The machine and tools it runs with.
    pub environment: &'a Environment,
    /// Scenarios × repetitions.
    pub planned_runs: usize,
    /// Run with `--quick`.
    pub quick: bool,
}

/// A run about to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun<'a> {
    /// Its campaign's id.
    pub campaign_id: i64,
    /// The scenario's key.
    pub scenario_key: &'a str,
    /// Axis name → value text of the scenario.
    pub axes: &'a BTreeMap<String, String>,
    /// 0-based repetition index.
    pub repetition: u32,
    /// How the run ended.
    pub status: RunStatus,
    /// The sender's result document, when it wrote one.
    pub result: Option<&'a serde_json::Value>,
    /// Per-node counter deltas over the run (test-bed only).
    pub counters: Option<&'a serde_json::Value>,
    /// The exact commands run (receiver and sender).
    pub command: &'a str,
    /// Why a failed run failed.
    pub error: Option<&'a str>,
    /// When the run started (RFC 3339, UTC).
    pub started_at: &'a str,
    /// When it ended (RFC 3339, UTC).
    pub ended_at: &'a str,
}

/// An open results store: an SQLite file or a PostgreSQL database.
pub struct Store {
    conn: Conn,
    /// The file, or the URL of a PostgreSQL store (which never holds a
    /// password, so it may be shown).
    path: PathBuf,
    pg: Option<postgres::Target>,
}

/// True when `target` names a PostgreSQL database (`postgres://…` or
/// `postgresql://…`) rather than an SQLite file.
pub fn is_postgres(target: &Path) -> bool {
    target.to_str().is_some_and(postgres::is_url)
}

/// The schema-3 tables as SQLite spells them ([`postgres::SCHEMA`] for
/// PostgreSQL).
const SQLITE_SCHEMA: &str = "
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
    command      TEXT NOT NULL,
    error        TEXT,
    started_at   TEXT NOT NULL,
    ended_at     TEXT NOT NULL,
    UNIQUE (campaign_id, scenario_key, repetition)
);
CREATE INDEX IF NOT EXISTS runs_by_campaign ON runs(campaign_id, scenario_key);
CREATE INDEX IF NOT EXISTS runs_in_order ON runs(campaign_id, id);
CREATE TABLE IF NOT EXISTS run_docs (
    run_id   INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    counters TEXT,
    result   TEXT
);
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

fn json_or_null(s: Option<&str>) -> Option<serde_json::Value> {
    s.and_then(|t| serde_json::from_str(t).ok())
}

/// The SQL test for a stored result (`d`, its `run_docs` row) that still
/// reads as a result document (the same test as [`unreadable`], done by
/// the database without loading it): true or false, never null.
/// (CASE, not AND: SQLite may evaluate json_extract on text that is not JSON,
/// and that is an error, not a false.)
fn readable_sql(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => {
            "(CASE WHEN json_valid(d.result)
             THEN json_extract(d.result, '$.schema') IS 'wirebench.result/1' ELSE 0 END)"
        }
        Dialect::Postgres => "wirebench_readable(d.result)",
    }
}

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
    /// The run's scenario key.
    pub scenario_key: String,
    /// Its 0-based repetition index.
    pub repetition: u32,
    /// Why the result does not read.
    pub why: String,
}

/// A transaction on the store's connection, rolled back when dropped
/// before [`Tx::commit`] (an error on the way out of it).
struct Tx<'a> {
    store: &'a Store,
    open: bool,
}

impl Tx<'_> {
    fn commit(mut self) -> Result<(), StoreError> {
        self.open = false;
        self.store
            .conn
            .batch("COMMIT")
            .map_err(|e| self.store.err(e))
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.store.conn.batch("ROLLBACK");
        }
    }
}

impl Store {
    /// Opens (creating if needed) the store at `target`: an SQLite file,
    /// or a PostgreSQL database named by a `postgres://` URL ([`is_postgres`]).
    pub fn open(target: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_as(target.as_ref(), true)
    }

    fn open_as(target: &Path, create: bool) -> Result<Store, StoreError> {
        if is_postgres(target) {
            return Store::open_postgres(target.to_str().unwrap_or_default(), create);
        }
        if !create && !target.exists() {
            return Err(StoreError::Missing(target.display().to_string()));
        }
        let path = target.to_path_buf();
        let p = path.display().to_string();
        let sql = |source| StoreError::Sql {
            path: p.clone(),
            source,
        };
        let conn = rusqlite::Connection::open(&path).map_err(sql)?;
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
        conn.execute_batch(SQLITE_SCHEMA).map_err(sql)?;
        let store = Store {
            conn: Conn::Lite(conn),
            path,
            pg: None,
        };
        store.upgrade()?;
        Ok(store)
    }

    fn open_postgres(url: &str, create: bool) -> Result<Store, StoreError> {
        let target = postgres::Target::parse(url)?;
        let mut client = target.connect()?;
        let found: bool = client
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("{}.meta", postgres::SCHEMA_NAME)],
            )
            .and_then(|r| r.try_get(0))
            .map_err(|e| target.err(e))?;
        if !found && !create {
            return Err(StoreError::Missing(format!(
                "{url} (no {} schema in that database)",
                postgres::SCHEMA_NAME
            )));
        }
        if !found {
            // Serialised: two controllers opening a new database at once
            // would otherwise both create the same tables.
            let mut tx = client.transaction().map_err(|e| target.err(e))?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[&postgres::UPGRADE_LOCK],
            )
            .and_then(|_| {
                tx.batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {0}; SET LOCAL search_path TO {0}; {1}",
                    postgres::SCHEMA_NAME,
                    postgres::SCHEMA
                ))
            })
            .map_err(|e| target.err(e))?;
            tx.commit().map_err(|e| target.err(e))?;
        }
        let store = Store {
            conn: Conn::pg(client),
            path: PathBuf::from(url),
            pg: Some(target),
        };
        store.upgrade()?;
        Ok(store)
    }

    /// Begins a transaction; `for_write` makes SQLite take its write lock
    /// now (a second writer waits here, not at its first write), and makes
    /// PostgreSQL serialise it with other controllers' upgrades.
    fn begin(&self, upgrade: bool) -> Result<Tx<'_>, StoreError> {
        let sql = match self.conn.dialect() {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        };
        self.conn.batch(sql).map_err(|e| self.err(e))?;
        let tx = Tx {
            store: self,
            open: true,
        };
        if upgrade && self.conn.dialect() == Dialect::Postgres {
            self.conn
                .execute(
                    "SELECT pg_advisory_xact_lock(?1)",
                    &[Val::from(postgres::UPGRADE_LOCK)],
                )
                .map_err(|e| self.err(e))?;
        }
        Ok(tx)
    }

    fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .first(
                "SELECT value FROM meta WHERE key = ?1",
                &[Val::from(key)],
                |r| r.string(0),
            )
            .map_err(|e| self.err(e))
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO meta(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                &[Val::from(key), Val::from(value)],
            )
            .map_err(|e| self.err(e))?;
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
        // A second process opening the store at the same time waits here
        // and then finds the work done.
        let tx = self.begin(true)?;
        let now = version(self)?;
        let extracted_with = self.meta("metrics")?;
        if now != Some(SCHEMA_VERSION) || extracted_with.as_deref() != Some(&signature) {
            if now.is_some_and(|v| v < 3) {
                self.move_documents()?;
            }
            if now.is_some() && extracted_with.as_deref() != Some(&signature) {
                self.extract_all()?;
            }
            self.set_meta("schema_version", &SCHEMA_VERSION.to_string())?;
            self.set_meta("metrics", &signature)?;
        }
        tx.commit()?;
        self.extract_missing()
    }

    /// Schema 3 keeps the documents out of `runs` (in `run_docs`), so that
    /// a scan of the runs reads their few short columns only; SQLite
    /// otherwise walks each document's overflow pages to reach the
    /// columns stored after it. Runs in the upgrade's transaction.
    fn move_documents(&self) -> Result<(), StoreError> {
        let sql = |e| self.err(e);
        let has_docs = match self.conn.dialect() {
            Dialect::Sqlite => {
                "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'result'"
            }
            Dialect::Postgres => {
                "SELECT count(*) FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = 'runs'
                   AND column_name = 'result'"
            }
        };
        if self.conn.first(has_docs, &[], |r| r.int(0)).map_err(sql)? != Some(1) {
            return Ok(());
        }
        if self.conn.dialect() == Dialect::Postgres {
            // A schema-2 database has every table but this one.
            self.conn.batch(postgres::SCHEMA).map_err(sql)?;
        }
        self.conn
            .batch(
                "INSERT INTO run_docs(run_id, counters, result)
                     SELECT id, counters, result FROM runs WHERE true
                     ON CONFLICT(run_id) DO NOTHING;
                 ALTER TABLE runs DROP COLUMN result;
                 ALTER TABLE runs DROP COLUMN counters;",
            )
            .map_err(sql)
    }

    /// Copies the store to `PATH.schemaV.bak` (the first free name) before
    /// a migration changes it; a store that cannot be copied is not
    /// migrated. (A PostgreSQL store is the server's to back up: its
    /// migration is one transaction, undone whole if it fails.)
    fn backup(&self, from_version: i64) -> Result<(), StoreError> {
        let Conn::Lite(conn) = &self.conn else {
            return Ok(());
        };
        let base = format!("{}.schema{from_version}.bak", self.path.display());
        let backup = (0..)
            .map(|n| match n {
                0 => base.clone(),
                n => format!("{base}.{n}"),
            })
            .find(|p| !Path::new(p).exists())
            .unwrap_or(base);
        conn.execute("VACUUM INTO ?1", [&backup])
            .map_err(|source| StoreError::Backup {
                path: self.path.display().to_string(),
                backup,
                source,
            })?;
        Ok(())
    }

    /// Extracts the values of runs stored without them (rows put in by
    /// another program, or copied by hand): counting both tables is cheap,
    /// so every open checks (in one statement, so that runs committed
    /// meanwhile by another controller count in both).
    fn extract_missing(&self) -> Result<(), StoreError> {
        let missing = self
            .conn
            .first(
                "SELECT (SELECT count(*) FROM runs) - (SELECT count(*) FROM run_facts)",
                &[],
                |r| r.int(0),
            )
            .map_err(|e| self.err(e))?;
        if missing == Some(0) {
            return Ok(());
        }
        let tx = self.begin(true)?;
        self.extract_where("NOT EXISTS (SELECT 1 FROM run_facts f WHERE f.run_id = runs.id)")?;
        tx.commit()
    }

    /// (Re)writes every run's extracted values, one run at a time.
    fn extract_all(&self) -> Result<(), StoreError> {
        self.conn
            .batch("DELETE FROM run_metrics; DELETE FROM run_facts;")
            .map_err(|e| self.err(e))?;
        self.extract_where("1 = 1")
    }

    fn extract_where(&self, cond: &str) -> Result<(), StoreError> {
        // Read first, written after: PostgreSQL's connection cannot write
        // while it streams. Ids only, then one document at a time.
        let mut ids = Vec::new();
        self.each(
            &format!("SELECT id FROM runs WHERE {cond} ORDER BY id"),
            &[],
            |r| {
                ids.push(r.int(0).map_err(|e| self.err(e))?);
                Ok::<_, StoreError>(())
            },
        )?;
        for id in ids {
            let x = self
                .conn
                .first(
                    "SELECT d.result, d.counters FROM runs r
                     LEFT JOIN run_docs d ON d.run_id = r.id WHERE r.id = ?1",
                    &[Val::from(id)],
                    |r| {
                        let counters = json_or_null(r.opt_str(1)?);
                        Ok(crate::facts::extract_text(r.opt_str(0)?, counters.as_ref()))
                    },
                )
                .map_err(|e| self.err(e))?;
            if let Some(x) = x {
                self.write_extracted(id, &x)?;
            }
        }
        Ok(())
    }

    /// Replaces a run's extracted values.
    fn write_extracted(&self, run_id: i64, x: &crate::facts::Extracted) -> Result<(), StoreError> {
        let sql = |e| self.err(e);
        let id = Val::from(run_id);
        self.conn
            .execute(
                "DELETE FROM run_metrics WHERE run_id = ?1",
                std::slice::from_ref(&id),
            )
            .map_err(sql)?;
        for (k, v) in &x.metrics {
            self.conn
                .execute(
                    "INSERT INTO run_metrics(run_id, key, value) VALUES (?1, ?2, ?3)",
                    &[id.clone(), Val::from(k.as_str()), Val::from(*v)],
                )
                .map_err(sql)?;
        }
        let f = &x.facts;
        self.conn
            .execute(
                "INSERT INTO run_facts(run_id, readable, why, above_bound, fragmented, systems, figures)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT(run_id) DO UPDATE SET readable = excluded.readable,
                    why = excluded.why, above_bound = excluded.above_bound,
                    fragmented = excluded.fragmented, systems = excluded.systems,
                    figures = excluded.figures",
                &[
                    id,
                    Val::from(f.readable as i64),
                    Val::from(f.why.as_deref()),
                    Val::from(i64::from(f.above_bound)),
                    Val::from(i64::from(f.fragmented)),
                    Val::from(f.systems.as_deref()),
                    Val::from(f.figures_bits()),
                ],
            )
            .map_err(sql)?;
        Ok(())
    }

    /// Opens an existing store; an error if the file (or, in PostgreSQL,
    /// the store's schema) is not there: readers should not create empty
    /// stores by typo.
    pub fn open_existing(target: impl AsRef<Path>) -> Result<Store, StoreError> {
        Store::open_as(target.as_ref(), false)
    }

    /// The store's file, or its PostgreSQL URL (which holds no password).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: DbError) -> StoreError {
        let path = self.path.display().to_string();
        match e {
            DbError::Lite(source) => StoreError::Sql { path, source },
            DbError::Pg(source) => StoreError::Pg { url: path, source },
            DbError::Reentered => StoreError::Reentered(path),
        }
    }

    /// Streams a query's rows to `each` (see [`Conn::each`]).
    fn each<E: From<StoreError>>(
        &self,
        sql: &str,
        params: &[Val],
        mut each: impl FnMut(&Row) -> Result<(), E>,
    ) -> Result<(), E> {
        /// A database error and the callback's own, kept apart.
        enum Either<E> {
            Db(DbError),
            Caller(E),
        }
        impl<E> From<DbError> for Either<E> {
            fn from(e: DbError) -> Self {
                Either::Db(e)
            }
        }
        self.conn
            .each(sql, params, |r| each(r).map_err(Either::Caller))
            .map_err(|e| match e {
                Either::Db(d) => E::from(self.err(d)),
                Either::Caller(c) => c,
            })
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
        let id = self
            .conn
            .first(
                "INSERT INTO campaigns(name, origin, file_text, started_at, environment, planned_runs, quick, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running') RETURNING id",
                &[
                    Val::from(name),
                    Val::from(origin),
                    Val::from(file_text),
                    Val::from(started_at),
                    Val::from(env),
                    Val::from(planned_runs as i64),
                    Val::from(i64::from(quick)),
                ],
                |r| r.int(0),
            )
            .map_err(|e| self.err(e))?;
        id.ok_or_else(|| StoreError::NoCampaign(name.to_string()))
    }

    fn update_campaign(&self, sql: &str, params: &[Val]) -> Result<(), StoreError> {
        self.conn.execute(sql, params).map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Replaces the campaign's environment record (agent campaigns add
    /// every node's metadata once their agents answered).
    pub fn set_environment(&self, id: i64, env: &Environment) -> Result<(), StoreError> {
        let text = serde_json::to_string(env).unwrap_or_else(|_| "{}".into());
        self.update_campaign(
            "UPDATE campaigns SET environment = ?1 WHERE id = ?2",
            &[Val::from(text), Val::from(id)],
        )
    }

    /// A resumed campaign whose file grew: the new file text and plan.
    pub fn set_campaign_plan(
        &self,
        id: i64,
        file_text: &str,
        planned_runs: usize,
    ) -> Result<(), StoreError> {
        self.update_campaign(
            "UPDATE campaigns SET file_text = ?1, planned_runs = ?2 WHERE id = ?3",
            &[
                Val::from(file_text),
                Val::from(planned_runs as i64),
                Val::from(id),
            ],
        )
    }

    /// Sets a campaign's status (`running`, `done`, `interrupted`).
    pub fn set_campaign_status(&self, id: i64, status: &str) -> Result<(), StoreError> {
        self.update_campaign(
            "UPDATE campaigns SET status = ?1 WHERE id = ?2",
            &[Val::from(status), Val::from(id)],
        )
    }

    fn row_to_campaign(r: &Row) -> Result<CampaignRow, DbError> {
        Ok(CampaignRow {
            id: r.int(0)?,
            name: r.string(1)?,
            origin: r.string(2)?,
            file_text: r.string(3)?,
            started_at: r.string(4)?,
            environment: serde_json::from_str(r.str(5)?).unwrap_or_default(),
            planned_runs: r.int(6)?,
            quick: r.int(7)? != 0,
            status: r.string(8)?,
        })
    }

    const CAMPAIGN_COLS: &'static str =
        "id, name, origin, file_text, started_at, environment, planned_runs, quick, status";

    fn campaign_rows(&self, cond: &str, params: &[Val]) -> Result<Vec<CampaignRow>, StoreError> {
        let mut out = Vec::new();
        self.each(
            &format!("SELECT {} FROM campaigns {cond}", Self::CAMPAIGN_COLS),
            params,
            |r| {
                out.push(Self::row_to_campaign(r).map_err(|e| self.err(e))?);
                Ok::<_, StoreError>(())
            },
        )?;
        Ok(out)
    }

    /// All campaigns, oldest first.
    pub fn campaigns(&self) -> Result<Vec<CampaignRow>, StoreError> {
        self.campaign_rows("ORDER BY id", &[])
    }

    /// The campaign with that id, if any.
    pub fn campaign(&self, id: i64) -> Result<Option<CampaignRow>, StoreError> {
        Ok(self.campaign_rows("WHERE id = ?1", &[Val::from(id)])?.pop())
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

    /// The newest campaign of that name, if any.
    pub fn latest_by_name(&self, name: &str) -> Result<Option<CampaignRow>, StoreError> {
        Ok(self
            .campaign_rows(
                "WHERE name = ?1 ORDER BY id DESC LIMIT 1",
                &[Val::from(name)],
            )?
            .pop())
    }

    /// The latest campaign, if any.
    pub fn latest(&self) -> Result<Option<CampaignRow>, StoreError> {
        Ok(self.campaign_rows("ORDER BY id DESC LIMIT 1", &[])?.pop())
    }

    /// All runs of a campaign in the order they were stored, with their
    /// documents (for one campaign's resume and adaptive rounds; lists,
    /// exports and reports read [`Store::for_each_run`] instead).
    pub fn runs(&self, campaign_id: i64) -> Result<Vec<RunRow>, StoreError> {
        self.run_rows("r.campaign_id = ?1", campaign_id)
    }

    /// One run by its id.
    pub fn run(&self, run_id: i64) -> Result<Option<RunRow>, StoreError> {
        Ok(self.run_rows("r.id = ?1", run_id)?.pop())
    }

    /// The stored run of one planned run (scenario, repetition from 0) of
    /// a campaign, if any (the store keeps at most one: a retry replaces
    /// a failed row).
    pub fn run_of(
        &self,
        campaign_id: i64,
        scenario_key: &str,
        repetition: u32,
    ) -> Result<Option<RunRow>, StoreError> {
        let id = self
            .conn
            .first(
                "SELECT id FROM runs
                 WHERE campaign_id = ?1 AND scenario_key = ?2 AND repetition = ?3",
                &[
                    Val::from(campaign_id),
                    Val::from(scenario_key),
                    Val::from(i64::from(repetition)),
                ],
                |r| r.int(0),
            )
            .map_err(|e| self.err(e))?;
        match id {
            Some(id) => self.run(id),
            None => Ok(None),
        }
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
        self.for_each_row("r.campaign_id = ?1", campaign_id, each)
    }

    fn for_each_row<E: From<StoreError>>(
        &self,
        cond: &str,
        arg: i64,
        mut each: impl FnMut(RunRow) -> Result<(), E>,
    ) -> Result<(), E> {
        let row = |r: &Row| -> Result<RunRow, DbError> {
            let mut status = RunStatus::parse(r.str(5)?);
            let result = json_or_null(r.opt_str(6)?);
            let mut error = r.opt_string(9)?;
            if status == RunStatus::Ok {
                if let Some(why) = unreadable(result.as_ref()) {
                    status = RunStatus::Failed;
                    error = Some(format!(
                        "the stored result no longer reads ({why}); `run --resume` runs it again"
                    ));
                }
            }
            Ok(RunRow {
                id: r.int(0)?,
                campaign_id: r.int(1)?,
                scenario_key: r.string(2)?,
                axes: serde_json::from_str(r.str(3)?).unwrap_or_default(),
                repetition: r.int(4)? as u32,
                status,
                result,
                counters: json_or_null(r.opt_str(7)?),
                command: r.string(8)?,
                error,
                started_at: r.string(10)?,
                ended_at: r.string(11)?,
            })
        };
        self.each(
            &format!(
                "SELECT r.id, r.campaign_id, r.scenario_key, r.axes, r.repetition, r.status,
                        d.result, d.counters, r.command, r.error, r.started_at, r.ended_at
                 FROM runs r LEFT JOIN run_docs d ON d.run_id = r.id
                 WHERE {cond} ORDER BY r.id"
            ),
            &[Val::from(arg)],
            |r| each(row(r).map_err(|e| self.err(e))?),
        )
    }

    /// How many runs the filter selects (before its limit and offset).
    pub fn count_runs(&self, filter: &RunFilter) -> Result<u64, StoreError> {
        let (cond, args) = filter.sql();
        self.conn
            .first(
                &format!("SELECT count(*) FROM runs r WHERE {cond}"),
                &args,
                |r| r.int(0),
            )
            .map(|n| n.unwrap_or(0) as u64)
            .map_err(|e| self.err(e))
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
            filter.limit_sql(self.conn.dialect())
        );
        self.each(&q, &args, |r| {
            each(Self::row_to_info(r).map_err(|e| self.err(e))?)
        })
    }

    fn row_to_info(r: &Row) -> Result<RunInfo, DbError> {
        use crate::facts::{Readable, RunFacts};
        let readable = Readable::from_i64(r.opt_int(9)?.unwrap_or(0));
        let why = r.opt_string(10)?;
        let mut status = RunStatus::parse(r.str(5)?);
        let mut error = r.opt_string(6)?;
        if status == RunStatus::Ok && readable == Readable::No {
            status = RunStatus::Failed;
            error = Some(format!(
                "the stored result no longer reads ({}); `run --resume` runs it again",
                why.as_deref().unwrap_or("not a result document")
            ));
        }
        let figures = r.opt_int(14)?.unwrap_or(0);
        Ok(RunInfo {
            id: r.int(0)?,
            campaign_id: r.int(1)?,
            scenario_key: r.string(2)?,
            axes: serde_json::from_str(r.str(3)?).unwrap_or_default(),
            repetition: r.int(4)? as u32,
            status,
            error,
            started_at: r.string(7)?,
            ended_at: r.string(8)?,
            facts: RunFacts {
                readable,
                why,
                above_bound: r.opt_int(11)?.unwrap_or(0) != 0,
                fragmented: r.opt_int(12)?.unwrap_or(0) != 0,
                systems: r.opt_string(13)?,
                has_series: figures & 1 != 0,
                has_dist: figures & 2 != 0,
            },
            throughput_payload_bps: r.opt_real(15)?,
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
            filter.limit_sql(self.conn.dialect())
        );
        self.each(&q, &args, |r| {
            let (id, key, v) = (|| Ok::<_, DbError>((r.int(0)?, r.str(1)?, r.real(2)?)))()
                .map_err(|e| self.err(e))?;
            each(id, key, v)
        })
    }

    /// The test-bed counters of a campaign's runs that stored some, in run
    /// order: (run id, counters).
    pub fn for_each_counters<E: From<StoreError>>(
        &self,
        campaign_id: i64,
        mut each: impl FnMut(i64, serde_json::Value) -> Result<(), E>,
    ) -> Result<(), E> {
        self.each(
            "SELECT r.id, d.counters FROM runs r JOIN run_docs d ON d.run_id = r.id
             WHERE r.campaign_id = ?1 AND d.counters IS NOT NULL ORDER BY r.id",
            &[Val::from(campaign_id)],
            |r| {
                let (id, v) = (|| Ok::<_, DbError>((r.int(0)?, json_or_null(r.opt_str(1)?))))()
                    .map_err(|e| self.err(e))?;
                match v {
                    Some(v) => each(id, v),
                    None => Ok(()),
                }
            },
        )
    }

    /// The result documents of a campaign's ok runs that carry series or
    /// histograms, read one at a time in run order: (run id, document).
    pub fn for_each_figures_doc<E: From<StoreError>>(
        &self,
        campaign_id: i64,
        mut each: impl FnMut(i64, &wirebench_stats::result::ResultDoc) -> Result<(), E>,
    ) -> Result<(), E> {
        self.each(
            "SELECT r.id, d.result FROM runs r JOIN run_facts f ON f.run_id = r.id
             JOIN run_docs d ON d.run_id = r.id
             WHERE r.campaign_id = ?1 AND r.status = 'ok' AND f.readable = 2 AND f.figures != 0
             ORDER BY r.id",
            &[Val::from(campaign_id)],
            |r| {
                let (id, text) =
                    (|| Ok::<_, DbError>((r.int(0)?, r.opt_str(1)?)))().map_err(|e| self.err(e))?;
                // Damaged since it was stored: the figures go without it.
                match text.map(crate::facts::read_doc) {
                    Some(Ok(doc)) => each(id, &doc),
                    _ => Ok(()),
                }
            },
        )
    }

    /// Per campaign id: its runs that finished with a readable result.
    pub fn ok_counts(&self) -> Result<BTreeMap<i64, i64>, StoreError> {
        let mut out = BTreeMap::new();
        self.each(
            "SELECT r.campaign_id, count(*) FROM runs r JOIN run_facts f ON f.run_id = r.id
             WHERE r.status = 'ok' AND f.readable > 0 GROUP BY r.campaign_id",
            &[],
            |r| {
                out.insert(
                    r.int(0).map_err(|e| self.err(e))?,
                    r.int(1).map_err(|e| self.err(e))?,
                );
                Ok::<_, StoreError>(())
            },
        )?;
        Ok(out)
    }

    /// (scenario key, repetition) of every run that finished with a result
    /// that still reads as one.
    pub fn finished(&self, campaign_id: i64) -> Result<HashSet<(String, u32)>, StoreError> {
        let q = format!(
            "SELECT r.scenario_key, r.repetition FROM runs r LEFT JOIN run_docs d ON d.run_id = r.id
             WHERE r.campaign_id = ?1 AND r.status = 'ok' AND {}",
            readable_sql(self.conn.dialect())
        );
        let mut set = HashSet::new();
        self.each(&q, &[Val::from(campaign_id)], |r| {
            set.insert((
                r.string(0).map_err(|e| self.err(e))?,
                r.int(1).map_err(|e| self.err(e))? as u32,
            ));
            Ok::<_, StoreError>(())
        })?;
        Ok(set)
    }

    /// Marks every `ok` run of the campaign whose stored result no longer
    /// reads as `failed` (saying why), so that the next attempt may replace
    /// it, and returns them.
    pub fn requeue_unreadable(&self, campaign_id: i64) -> Result<Vec<Unreadable>, StoreError> {
        let q = format!(
            "SELECT r.id, r.scenario_key, r.repetition, d.result FROM runs r
             LEFT JOIN run_docs d ON d.run_id = r.id
             WHERE r.campaign_id = ?1 AND r.status = 'ok' AND NOT {}",
            readable_sql(self.conn.dialect())
        );
        let mut rows = Vec::new();
        self.each(&q, &[Val::from(campaign_id)], |r| {
            let row = (|| {
                let why = unreadable(json_or_null(r.opt_str(3)?).as_ref())
                    .unwrap_or("not a result document");
                Ok::<_, DbError>((r.int(0)?, r.string(1)?, r.int(2)? as u32, why))
            })();
            rows.push(row.map_err(|e| self.err(e))?);
            Ok::<_, StoreError>(())
        })?;
        let mut out = Vec::new();
        for (id, scenario_key, repetition, why) in rows {
            self.conn
                .execute(
                    "UPDATE runs SET status = 'failed', error = ?1 WHERE id = ?2",
                    &[
                        Val::from(format!(
                            "the stored result no longer reads ({why}); run again by --resume"
                        )),
                        Val::from(id),
                    ],
                )
                .map_err(|e| self.err(e))?;
            out.push(Unreadable {
                scenario_key,
                repetition,
                why: why.to_string(),
            });
        }
        Ok(out)
    }

    /// Takes the campaign's runner lock (see [`crate::lock`]; in
    /// PostgreSQL an advisory lock every controller of the database
    /// sees): held until the returned value is dropped; refused at once
    /// when another process holds it.
    pub fn lock_campaign(&self, name: &str) -> Result<StoreLock, StoreError> {
        if let Some(pg) = &self.pg {
            return pg.lock(name).map(StoreLock::Postgres);
        }
        let lock = crate::lock::lock_path(&self.path, name);
        crate::lock::CampaignLock::acquire_for(&self.path, name)
            .map(StoreLock::File)
            .map_err(|f| match f {
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
        let tx = self.begin(false)?;
        let id = self
            .conn
            .first(
                "INSERT INTO runs(campaign_id, scenario_key, axes, repetition, status,
                                  command, error, started_at, ended_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(campaign_id, scenario_key, repetition) DO UPDATE SET
                    axes = excluded.axes, status = excluded.status,
                    command = excluded.command, error = excluded.error,
                    started_at = excluded.started_at, ended_at = excluded.ended_at
                 WHERE runs.status != 'ok'
                 RETURNING id",
                &[
                    Val::from(run.campaign_id),
                    Val::from(run.scenario_key),
                    Val::from(axes),
                    Val::from(i64::from(run.repetition)),
                    Val::from(run.status.as_str()),
                    Val::from(run.command),
                    Val::from(run.error),
                    Val::from(run.started_at),
                    Val::from(run.ended_at),
                ],
                |r| r.int(0),
            )
            .map_err(|e| self.err(e))?;
        if let Some(id) = id {
            self.conn
                .execute(
                    "INSERT INTO run_docs(run_id, counters, result) VALUES (?1, ?2, ?3)
                     ON CONFLICT(run_id) DO UPDATE SET
                        counters = excluded.counters, result = excluded.result",
                    &[Val::from(id), Val::from(counters), Val::from(result)],
                )
                .map_err(|e| self.err(e))?;
            let x = crate::facts::extract_stored(run.result, run.counters);
            self.write_extracted(id, &x)?;
        }
        tx.commit()?;
        Ok(id.is_some())
    }
}

/// A campaign's runner lock, whichever store holds it; released when
/// dropped (and by the OS or the server when its holder dies).
#[derive(Debug)]
pub enum StoreLock {
    /// A lock file beside an SQLite store.
    File(crate::lock::CampaignLock),
    /// A PostgreSQL advisory lock.
    Postgres(postgres::CampaignLock),
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
            .batch(
                "UPDATE meta SET value = 'older' WHERE key = 'metrics';
                 DELETE FROM run_metrics WHERE run_id = 2;
                 UPDATE run_metrics SET value = 1 WHERE run_id = 1;",
            )
            .unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(throughputs(&s), [(1, 5.0), (2, 7.0)]);
        assert!(!dir.path().join("s.db.schema3.bak").exists());

        // A run copied in by another program, without its values.
        s.conn
            .batch(
                "INSERT INTO runs(campaign_id, scenario_key, axes, repetition, status,
                                  command, started_at, ended_at)
                 SELECT campaign_id, scenario_key, axes, 1000, status, command,
                        started_at, ended_at FROM runs WHERE id = 1;
                 INSERT INTO run_docs(run_id, result)
                 SELECT last_insert_rowid(), result FROM run_docs WHERE run_id = 1;",
            )
            .unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        let got: Vec<f64> = throughputs(&s).into_iter().map(|(_, v)| v).collect();
        assert_eq!(got, [5.0, 7.0, 5.0]);

        // A newer store is refused and left as it is.
        s.set_meta("schema_version", "4").unwrap();
        drop(s);
        match Store::open(&path) {
            Err(StoreError::Version { found: 4, .. }) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a schema-4 store opened"),
        }
        let c = rusqlite::Connection::open(&path).unwrap();
        let v: String = c
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, "4");
    }
}
