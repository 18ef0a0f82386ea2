//! Runs chosen one at a time by the caller instead of a plan: the RFC 2544
//! searches decide each trial from the last. Same bed, receiver, sender
//! child processes and store as [`super::run_campaign`], so a trial is
//! exactly a campaign run.

use super::bed::{make_bed, Bed};
use super::one_run::{Ctx, RunEnd};
use super::order::PlannedRun;
use super::signals::stop_requested;
use super::{RunError, RunOptions};
use crate::campaign::{Campaign, RunLength};
use crate::env;
use crate::store::{NewCampaign, RunStatus, Store};
use serde_json::Value;

/// A campaign opened in the store with its test-bed, making runs one at a
/// time as the caller asks for them.
pub struct Session<'a> {
    ctx: Ctx<'a>,
    bed: Box<dyn Bed>,
    campaign_id: i64,
    failed: usize,
}

/// One stored run of a [`Session`].
#[derive(Debug, Clone)]
pub struct SessionRun {
    /// How the run ended.
    pub status: RunStatus,
    /// The sender's result document, when it wrote one.
    pub result: Option<Value>,
    /// Why a failed run failed.
    pub error: Option<String>,
}

impl<'a> Session<'a> {
    /// Creates the campaign row and the bed (nothing is built before the first run).
    pub fn open(
        c: &'a Campaign,
        store: &'a Store,
        opts: &'a RunOptions,
        planned_runs: usize,
    ) -> Result<Session<'a>, RunError> {
        let mut env_ = env::collect(&c.target.describe(), &opts.tool_version);
        env_.extra
            .insert("command".into(), opts.command_line.clone());
        env_.extra
            .insert("binary".into(), opts.binary.display().to_string());
        let bed = make_bed(c, &opts.binary)?;
        let started = env::now_rfc3339();
        let campaign_id = store.create_campaign(&NewCampaign {
            name: &c.name,
            origin: &c.origin,
            file_text: &c.text,
            started_at: &started,
            environment: &env_,
            planned_runs,
            quick: c.quick,
        })?;
        let work = std::env::temp_dir().join(format!(
            "wirebench-session-{}-{campaign_id}",
            std::process::id()
        ));
        std::fs::create_dir_all(&work)
            .map_err(|e| RunError::io(format!("creating {}", work.display()), e))?;
        Ok(Session {
            ctx: Ctx::new(c, store, opts, work),
            bed,
            campaign_id,
            failed: 0,
        })
    }

    /// The campaign's id in the store.
    pub fn campaign_id(&self) -> i64 {
        self.campaign_id
    }

    /// Runs and stores one run of `length` (with the campaign's warm-up).
    /// Ok(None): interrupted (SIGINT/SIGTERM), nothing stored.
    pub fn run(
        &mut self,
        pr: &PlannedRun,
        length: RunLength,
    ) -> Result<Option<SessionRun>, RunError> {
        let status =
            match self
                .ctx
                .one_run(self.bed.as_mut(), self.campaign_id, pr, length, None)?
            {
                RunEnd::Interrupted => return Ok(None),
                RunEnd::Stored(st) => st,
                // Not asked for (repeats_done None); stored failed all the same.
                RunEnd::SetAside(_) => RunStatus::Failed,
            };
        let result: Option<Value> = std::fs::read_to_string(self.ctx.work().join("result.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let error = match status {
            RunStatus::Ok => None,
            RunStatus::Failed => {
                self.failed += 1;
                self.ctx
                    .store()
                    .runs(self.campaign_id)?
                    .into_iter()
                    .rev()
                    .find(|r| r.scenario_key == pr.scenario.key && r.repetition == pr.repetition)
                    .and_then(|r| r.error)
            }
        };
        Ok(Some(SessionRun {
            status,
            result,
            error,
        }))
    }

    /// Stops the receiver, removes the bed and marks the campaign `done`,
    /// `incomplete` (a run failed) or `interrupted`. Call it on every path:
    /// the bed is only removed here.
    pub fn close(mut self, interrupted: bool) -> Result<(), RunError> {
        self.ctx.stop_receiver();
        let down = self.bed.teardown();
        let _ = std::fs::remove_dir_all(self.ctx.work());
        let status = if interrupted || stop_requested() {
            "interrupted"
        } else if self.failed > 0 {
            "incomplete"
        } else {
            "done"
        };
        self.ctx
            .store()
            .set_campaign_status(self.campaign_id, status)?;
        down
    }
}
