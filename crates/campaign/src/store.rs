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

use crate::summary::Environment;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Bumped when the schema changes incompatibly.
pub const SCHEMA_VERSION: i64 = 1;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("results store {path}: {source}")]
    Sql {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("results store {path}: schema version {found}, this wirebench reads {SCHEMA_VERSION}")]
    Version { path: String, found: i64 },
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
";

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
        let found: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        match found.and_then(|v| v.parse::<i64>().ok()) {
            None => {
                conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?1)",
                    params![SCHEMA_VERSION.to_string()],
                )
                .map_err(sql)?;
            }
            Some(v) if v != SCHEMA_VERSION => {
                return Err(StoreError::Version { path: p, found: v })
            }
            Some(_) => {}
        }
        Ok(Store { conn, path })
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

    /// All runs of a campaign in the order they were stored.
    pub fn runs(&self, campaign_id: i64) -> Result<Vec<RunRow>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, campaign_id, scenario_key, axes, repetition, status, result, counters,
                        command, error, started_at, ended_at
                 FROM runs WHERE campaign_id = ?1 ORDER BY id",
            )
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params![campaign_id], |r| {
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
            })
            .map_err(|e| self.sql(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.sql(e))?;
        Ok(rows)
    }

    /// One run by its id.
    pub fn run(&self, run_id: i64) -> Result<Option<RunRow>, StoreError> {
        let cid: Option<i64> = self
            .conn
            .query_row(
                "SELECT campaign_id FROM runs WHERE id = ?1",
                params![run_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        match cid {
            None => Ok(None),
            Some(c) => Ok(self.runs(c)?.into_iter().find(|r| r.id == run_id)),
        }
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
        crate::lock::CampaignLock::acquire(&lock).map_err(|f| match f {
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

    /// Commits one run. A failed run may be replaced by a later attempt; an
    /// `ok` run never is (returns false when the row was already `ok`).
    pub fn record_run(&self, run: &NewRun) -> Result<bool, StoreError> {
        let axes = serde_json::to_string(run.axes).unwrap_or_else(|_| "{}".into());
        let result = run.result.map(|v| v.to_string());
        let counters = run.counters.map(|v| v.to_string());
        let n = self
            .conn
            .execute(
                "INSERT INTO runs(campaign_id, scenario_key, axes, repetition, status, result, counters,
                                  command, error, started_at, ended_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT(campaign_id, scenario_key, repetition) DO UPDATE SET
                    axes = excluded.axes, status = excluded.status, result = excluded.result,
                    counters = excluded.counters, command = excluded.command, error = excluded.error,
                    started_at = excluded.started_at, ended_at = excluded.ended_at
                 WHERE runs.status != 'ok'",
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
            )
            .map_err(|e| self.sql(e))?;
        Ok(n == 1)
    }
}
