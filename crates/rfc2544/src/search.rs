//! The three searches of RFC 2544 §26 as state machines: `next()` says which
//! trial to run, `record()` takes what it measured, until `next()` is
//! [`Step::Done`]. Rates are Ethernet frames per second of one frame size.
//!
//! - [`Throughput`] (§26.1): the highest offered rate whose loss is at most
//!   a threshold (0 as the RFC; a partial-drop-rate threshold such as 0.1 %
//!   as TRex's PDR). One trial at the ceiling (the line rate, or unpaced when
//!   no line rate is known); if it loses, the next trial is at the rate that
//!   trial *delivered* (an overloaded device usually forwards about its
//!   limit), then steps that double while the outcome repeats and halve the
//!   bracket once it flips, until the bracket is at most `resolution` ×
//!   ceiling wide. A final verification trial at the found rate must pass;
//!   if it does not, the search goes on below it.
//! - [`FrameLoss`] (§26.3): 100 % of the ceiling, then down in steps (10 %
//!   by the RFC) until two consecutive trials lose nothing.
//! - [`BackToBack`] (§26.4): the longest burst at the ceiling rate that
//!   arrives complete, by bisection on the burst length, repeated and
//!   averaged.

use thiserror::Error;
pub use wirebench_schema::rfc2544::trial::{
    BackToBackResult, FrameLossPoint, ThroughputResult, TrialKind, TrialOutcome, TrialRecord,
};

/// A search's settings that cannot give an answer.
#[derive(Debug, Error, PartialEq)]
pub enum SearchError {
    /// The loss threshold is not a ratio below 1.
    #[error("loss threshold {0} is outside 0..1 (a ratio: 0.001 is 0.1 %)")]
    Threshold(f64),
    /// The resolution is not a share of the line rate in (0, 0.5].
    #[error("resolution {0} is outside (0, 0.5] (a ratio of the line rate: 0.005 is 0.5 %)")]
    Resolution(f64),
    /// The line rate is not a positive number.
    #[error("line rate {0} frames/s is not a positive number")]
    LineRate(f64),
    /// The frame-loss step is not 1..=50 %.
    #[error("step {0} % is outside 1..=50")]
    Step(u32),
    /// Back-to-back without a repetition or with a burst under 2 frames.
    #[error("back-to-back needs at least 1 repetition and a longest burst of at least 2 frames")]
    Burst,
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Run this trial and [`record`](Throughput::record) its outcome.
    Trial {
        /// Frames per second to offer; None: as fast as the tester can (unpaced).
        fps: Option<f64>,
        /// A burst of exactly this many frames; None: a trial of the configured length.
        frames: Option<u64>,
        /// Why the trial is run.
        kind: TrialKind,
    },
    /// The search has its answer.
    Done,
}

// ------------------------------------------------------------ throughput

/// Settings of a throughput search (§26.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputConfig {
    /// The line rate of this frame size. None: not known (loopback, a real
    /// path of unknown speed): the first trial is unpaced and what the
    /// tester sent becomes the ceiling.
    pub line_fps: Option<f64>,
    /// Largest loss ratio that still passes: 0 (RFC 2544) or e.g. 0.001.
    pub loss_threshold: f64,
    /// Stop when the bracket is at most this share of the ceiling wide.
    pub resolution: f64,
    /// Upper bound on search trials (max-rate and verification excluded);
    /// a search that hits it reports `converged = false`.
    pub max_trials: u32,
    /// A lossy trial is run again this many times and passes if a repeat
    /// does: for testers that share a host with the device (an emulated
    /// test-bed), where a busy moment of the tester reads as the device's
    /// loss. 0 (the RFC: one lossy trial fails the rate).
    pub retries: u32,
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        ThroughputConfig {
            line_fps: None,
            loss_threshold: 0.0,
            resolution: 0.005,
            max_trials: 30,
            retries: 0,
        }
    }
}

impl ThroughputConfig {
    /// Refuses settings a search cannot answer (see [`SearchError`]).
    pub fn validate(&self) -> Result<(), SearchError> {
        if !(0.0..1.0).contains(&self.loss_threshold) {
            return Err(SearchError::Threshold(self.loss_threshold));
        }
        if !(self.resolution > 0.0 && self.resolution <= 0.5) {
            return Err(SearchError::Resolution(self.resolution));
        }
        if let Some(l) = self.line_fps {
            if !(l.is_finite() && l > 0.0) {
                return Err(SearchError::LineRate(l));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    MaxRate,
    Search,
    Verify,
    Done,
}

/// The throughput search (§26.1) as a state machine (see the module text).
#[derive(Debug, Clone)]
pub struct Throughput {
    cfg: ThroughputConfig,
    phase: Phase,
    ceiling: f64,
    lo: Option<f64>,
    hi: Option<f64>,
    step: f64,
    probe: f64,
    last_pass: Option<bool>,
    search_trials: u32,
    verify_failures: u32,
    verify_outcome: Option<TrialOutcome>,
    converged: bool,
    retried: u32,
    trials: Vec<TrialRecord>,
    result: Option<ThroughputResult>,
}

/// Verification may fail this often before the search gives up and reports
/// the last rate as unverified (a device whose limit drifts would loop).
const MAX_VERIFY_FAILURES: u32 = 2;

impl Throughput {
    /// A search with `cfg`, refused when [`ThroughputConfig::validate`] is.
    pub fn new(cfg: ThroughputConfig) -> Result<Self, SearchError> {
        cfg.validate()?;
        Ok(Throughput {
            cfg,
            phase: Phase::MaxRate,
            ceiling: 0.0,
            lo: None,
            hi: None,
            step: 0.0,
            probe: 0.0,
            last_pass: None,
            search_trials: 0,
            verify_failures: 0,
            verify_outcome: None,
            converged: true,
            retried: 0,
            trials: Vec::new(),
            result: None,
        })
    }

    fn res_fps(&self) -> f64 {
        self.cfg.resolution * self.ceiling
    }

    /// The trial to run next, or [`Step::Done`].
    pub fn next(&self) -> Step {
        let trial = |fps, kind| Step::Trial {
            fps,
            frames: None,
            kind,
        };
        match self.phase {
            Phase::MaxRate => trial(self.cfg.line_fps, TrialKind::MaxRate),
            Phase::Search => trial(Some(self.probe), TrialKind::Search),
            Phase::Verify => trial(self.lo, TrialKind::Verify),
            Phase::Done => Step::Done,
        }
    }

    /// Every trial so far.
    pub fn trials(&self) -> &[TrialRecord] {
        &self.trials
    }

    /// The answer, once [`Throughput::next`] is [`Step::Done`].
    pub fn result(&self) -> Option<&ThroughputResult> {
        self.result.as_ref()
    }

    fn passes(&self, o: &TrialOutcome) -> bool {
        o.offered > 0 && o.loss_ratio() <= self.cfg.loss_threshold
    }

    /// Takes what the trial [`Throughput::next`] asked for measured.
    pub fn record(&mut self, o: TrialOutcome) {
        let Step::Trial { fps, frames, kind } = self.next() else {
            return;
        };
        let pass = self.passes(&o);
        self.trials.push(TrialRecord {
            kind,
            fps,
            frames,
            outcome: o,
            pass,
        });
        if !pass && self.retried < self.cfg.retries && o.sent > 0 {
            // Same step again (next() is unchanged).
            self.retried += 1;
            return;
        }
        self.retried = 0;
        match self.phase {
            Phase::MaxRate => {
                self.ceiling = self.cfg.line_fps.unwrap_or_else(|| o.sent_fps());
                if self.ceiling.is_nan() || self.ceiling <= 0.0 {
                    // Nothing could be sent at all: no rate passes.
                    self.finish(0.0, false);
                    return;
                }
                if pass {
                    self.lo = Some(self.ceiling);
                    self.phase = Phase::Verify;
                    return;
                }
                self.hi = Some(self.ceiling);
                self.step = self.res_fps();
                // What the overloaded device delivered is the best first guess.
                self.probe = o
                    .received_fps()
                    .clamp(self.res_fps(), self.ceiling - self.res_fps());
                self.phase = Phase::Search;
            }
            Phase::Search => {
                self.search_trials += 1;
                if pass {
                    self.lo = Some(self.probe);
                } else {
                    self.hi = Some(self.probe);
                }
                if self.last_pass == Some(pass) {
                    self.step *= 2.0;
                }
                self.last_pass = Some(pass);
                self.plan_probe();
            }
            Phase::Verify => {
                let lo = self.lo.unwrap_or(0.0);
                if pass {
                    self.verify_outcome = Some(o);
                    self.finish(lo, true);
                } else {
                    self.verify_failures += 1;
                    if self.verify_failures >= MAX_VERIFY_FAILURES {
                        self.verify_outcome = Some(o);
                        self.finish(lo, false);
                        return;
                    }
                    // The found rate did not hold: search on below it.
                    self.hi = Some(lo);
                    self.lo = None;
                    self.step = self.res_fps();
                    self.last_pass = Some(false);
                    self.plan_probe();
                }
            }
            Phase::Done => {}
        }
    }

    /// Picks the next search probe, or moves on to verification / done.
    fn plan_probe(&mut self) {
        let res = self.res_fps();
        let hi = self.hi.unwrap_or(self.ceiling);
        match self.lo {
            Some(lo) if hi - lo <= res * (1.0 + 1e-9) => {
                self.phase = Phase::Verify;
                return;
            }
            None if hi <= res * (1.0 + 1e-9) => {
                // The smallest rate tried lost too: the device passes nothing.
                self.finish(0.0, false);
                return;
            }
            _ => {}
        }
        if self.search_trials >= self.cfg.max_trials {
            self.converged = false;
            match self.lo {
                Some(_) => self.phase = Phase::Verify,
                None => self.finish(0.0, false),
            }
            return;
        }
        self.probe = match self.lo {
            None => (hi - self.step).max(res),
            Some(lo) => lo + self.step.min((hi - lo) / 2.0),
        };
        self.phase = Phase::Search;
    }

    fn finish(&mut self, fps: f64, verified: bool) {
        let tester_limited = self.cfg.line_fps.is_none() && self.hi.is_none() && fps > 0.0;
        self.result = Some(ThroughputResult {
            fps,
            failed_fps: self.hi,
            ceiling_fps: self.ceiling,
            tester_limited,
            verified,
            converged: self.converged,
            trials: self.trials.len() as u32,
            verify: self.verify_outcome,
        });
        self.phase = Phase::Done;
    }
}

// ------------------------------------------------------------ frame loss

/// §26.3: from 100 % of the ceiling down in `step` % until two consecutive
/// trials lose nothing (or the lowest step is reached).
#[derive(Debug, Clone)]
pub struct FrameLoss {
    ceiling: f64,
    step: u32,
    percent: u32,
    zero_streak: u32,
    points: Vec<FrameLossPoint>,
    done: bool,
}

impl FrameLoss {
    /// `ceiling_fps`: the line rate (or, unknown, the tester's maximum);
    /// `step`: percent per step, 10 by the RFC ("or finer").
    pub fn new(ceiling_fps: f64, step: u32) -> Result<Self, SearchError> {
        if !(ceiling_fps.is_finite() && ceiling_fps > 0.0) {
            return Err(SearchError::LineRate(ceiling_fps));
        }
        if !(1..=50).contains(&step) {
            return Err(SearchError::Step(step));
        }
        Ok(FrameLoss {
            ceiling: ceiling_fps,
            step,
            percent: 100,
            zero_streak: 0,
            points: Vec::new(),
            done: false,
        })
    }

    /// The load step to run next, or [`Step::Done`].
    pub fn next(&self) -> Step {
        if self.done {
            return Step::Done;
        }
        Step::Trial {
            fps: Some(self.ceiling * f64::from(self.percent) / 100.0),
            frames: None,
            kind: TrialKind::Load,
        }
    }

    /// Takes what the load step [`FrameLoss::next`] asked for measured.
    pub fn record(&mut self, o: TrialOutcome) {
        if self.done {
            return;
        }
        let loss = o.loss_ratio();
        self.points.push(FrameLossPoint {
            percent: self.percent,
            offered_fps: self.ceiling * f64::from(self.percent) / 100.0,
            loss_percent: loss * 100.0,
            outcome: o,
        });
        self.zero_streak = if o.offered > 0 && o.received >= o.offered {
            self.zero_streak + 1
        } else {
            0
        };
        if self.zero_streak >= 2 || self.percent <= self.step {
            self.done = true;
        } else {
            self.percent -= self.step;
        }
    }

    /// The curve, highest load first.
    pub fn points(&self) -> &[FrameLossPoint] {
        &self.points
    }
}

// ------------------------------------------------------------ back-to-back

/// §26.4: the longest burst at `fps` with no loss, by bisection on its
/// length (the first try is the longest allowed), repeated and averaged.
#[derive(Debug, Clone)]
pub struct BackToBack {
    fps: f64,
    longest: u64,
    res: u64,
    repeats: u32,
    lo: u64,
    hi: Option<u64>,
    probe: u64,
    found: Vec<u64>,
    trials: Vec<TrialRecord>,
}

impl BackToBack {
    /// Bursts of up to `longest` frames at `fps`, bisected until the bracket
    /// is at most `resolution` × `longest` frames (at least 1) wide,
    /// `repeats` times.
    pub fn new(fps: f64, longest: u64, resolution: f64, repeats: u32) -> Result<Self, SearchError> {
        if !(fps.is_finite() && fps > 0.0) {
            return Err(SearchError::LineRate(fps));
        }
        if !(resolution > 0.0 && resolution <= 0.5) {
            return Err(SearchError::Resolution(resolution));
        }
        if repeats == 0 || longest < 2 {
            return Err(SearchError::Burst);
        }
        let res = ((longest as f64 * resolution).round() as u64).max(1);
        Ok(BackToBack {
            fps,
            longest,
            res,
            repeats,
            lo: 0,
            hi: None,
            probe: longest,
            found: Vec::new(),
            trials: Vec::new(),
        })
    }

    /// The burst to send next, or [`Step::Done`].
    pub fn next(&self) -> Step {
        if self.found.len() as u32 >= self.repeats {
            return Step::Done;
        }
        Step::Trial {
            fps: Some(self.fps),
            frames: Some(self.probe),
            kind: TrialKind::Burst,
        }
    }

    /// Takes what the burst [`BackToBack::next`] asked for measured.
    pub fn record(&mut self, o: TrialOutcome) {
        if matches!(self.next(), Step::Done) {
            return;
        }
        let pass = o.offered > 0 && o.received >= o.offered;
        self.trials.push(TrialRecord {
            kind: TrialKind::Burst,
            fps: Some(self.fps),
            frames: Some(self.probe),
            outcome: o,
            pass,
        });
        if pass {
            self.lo = self.probe;
        } else {
            self.hi = Some(self.probe);
        }
        let done = match self.hi {
            None => true, // the longest burst passed
            Some(hi) => hi - self.lo <= self.res,
        };
        if done {
            self.found.push(self.lo);
            self.lo = 0;
            self.hi = None;
            self.probe = self.longest;
        } else {
            let hi = self.hi.unwrap_or(self.longest);
            self.probe = (self.lo + (hi - self.lo) / 2).max(1);
        }
    }

    /// Every burst so far.
    pub fn trials(&self) -> &[TrialRecord] {
        &self.trials
    }

    /// The result once every repetition is done.
    pub fn result(&self) -> Option<BackToBackResult> {
        if (self.found.len() as u32) < self.repeats {
            return None;
        }
        let n = self.found.len() as f64;
        let mean = self.found.iter().map(|&b| b as f64).sum::<f64>() / n;
        Some(BackToBackResult {
            bursts: self.found.clone(),
            mean_frames: mean,
            min_frames: self.found.iter().copied().min().unwrap_or(0),
            max_frames: self.found.iter().copied().max().unwrap_or(0),
            longest_tried: self.longest,
            fps: self.fps,
            implied_buffer_s: mean / self.fps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that forwards at most `cap` fps (a policer: excess is lost),
    /// tested with trials of `secs` seconds, optionally sent by a tester
    /// that cannot exceed `tester` fps.
    fn capped(cap: f64, tester: f64, secs: f64) -> impl FnMut(Step) -> TrialOutcome {
        move |s| {
            let Step::Trial { fps, frames, .. } = s else {
                panic!("trial after done")
            };
            let rate = fps.unwrap_or(tester).min(tester);
            let (offered, sent, d) = match frames {
                Some(n) => (n, n, n as f64 / rate),
                None => {
                    let offered = (fps.unwrap_or(rate) * secs).round() as u64;
                    (offered, (rate * secs).round() as u64, secs)
                }
            };
            let received = ((sent as f64).min(cap * d)).floor() as u64;
            TrialOutcome {
                offered: if fps.is_none() { sent } else { offered },
                sent,
                received,
                duration_s: d,
            }
        }
    }

    fn run_throughput(
        cfg: ThroughputConfig,
        mut dev: impl FnMut(Step) -> TrialOutcome,
    ) -> (ThroughputResult, Vec<TrialRecord>) {
        let mut s = Throughput::new(cfg).unwrap();
        for _ in 0..100 {
            match s.next() {
                Step::Done => break,
                step => s.record(dev(step)),
            }
        }
        (*s.result().expect("search finished"), s.trials().to_vec())
    }

    #[test]
    fn capped_device_found_within_resolution_in_few_trials() {
        let line = 148_809.5;
        for cap in [30_000.0, 45_678.0, 100_000.0, 148_000.0, 1_000.0] {
            let cfg = ThroughputConfig {
                line_fps: Some(line),
                ..Default::default()
            };
            let (r, trials) = run_throughput(cfg, capped(cap, f64::INFINITY, 5.0));
            assert!(
                r.fps <= cap && r.fps >= cap - 0.005 * line,
                "cap {cap}: {r:?}"
            );
            assert!(r.verified && r.converged && !r.tester_limited, "{r:?}");
            // max-rate, ~2 steps around the delivered rate, verification.
            assert!(
                trials.len() <= 6,
                "cap {cap}: {} trials {trials:#?}",
                trials.len()
            );
            assert_eq!(trials[0].kind, TrialKind::MaxRate);
            assert_eq!(trials.last().unwrap().kind, TrialKind::Verify);
        }
    }

    #[test]
    fn device_that_delivers_less_when_overloaded_still_converges() {
        // Forwards cap when not overloaded but collapses to 10 % of the
        // offered rate above it (receive livelock): the delivered-rate guess
        // is far off and the search must gallop and bisect.
        let cap = 60_000.0;
        let dev = move |s: Step| {
            let Step::Trial { fps, .. } = s else { panic!() };
            let f = fps.unwrap();
            let offered = (f * 2.0) as u64;
            let received = if f <= cap { offered } else { (f * 0.2) as u64 };
            TrialOutcome {
                offered,
                sent: offered,
                received,
                duration_s: 2.0,
            }
        };
        let cfg = ThroughputConfig {
            line_fps: Some(148_809.5),
            resolution: 0.001,
            ..Default::default()
        };
        let (r, trials) = run_throughput(cfg, dev);
        assert!(r.fps <= cap && r.fps >= cap - 148.9, "{r:?}");
        assert!(r.verified && r.converged);
        assert!(trials.len() <= 20, "{}", trials.len());
    }

    #[test]
    fn line_rate_passes_at_once() {
        let cfg = ThroughputConfig {
            line_fps: Some(8_127.0),
            ..Default::default()
        };
        let (r, trials) = run_throughput(cfg, capped(1e9, f64::INFINITY, 5.0));
        assert_eq!(r.fps, 8_127.0);
        assert_eq!(trials.len(), 2); // max-rate + verification
        assert!(r.verified && r.failed_fps.is_none());
    }

    #[test]
    fn unpaced_ceiling_is_the_tester() {
        // Loopback: no line rate, the tester sends 500 kpps, the path carries all.
        let cfg = ThroughputConfig::default();
        let (r, _) = run_throughput(cfg, capped(1e9, 500_000.0, 5.0));
        assert!((r.fps - 500_000.0).abs() < 1.0 && r.tester_limited, "{r:?}");
        // The path carries 200 kpps: found against the tester's ceiling.
        let (r, _) = run_throughput(cfg, capped(200_000.0, 500_000.0, 5.0));
        assert!(r.fps <= 200_000.0 && r.fps >= 200_000.0 - 2_500.0, "{r:?}");
        assert!(!r.tester_limited && (r.ceiling_fps - 500_000.0).abs() < 1.0);
    }

    #[test]
    fn pdr_threshold_accepts_small_loss() {
        // Loss grows 1 % per 1 % of overload: 0.1 % loss allowed -> ~0.1 % above cap.
        let cap: f64 = 50_000.0;
        let dev = move |s: Step| {
            let Step::Trial { fps, .. } = s else { panic!() };
            let f = fps.unwrap();
            let offered = (f * 10.0) as u64;
            let received = (cap.min(f) * 10.0) as u64;
            TrialOutcome {
                offered,
                sent: offered,
                received,
                duration_s: 10.0,
            }
        };
        let base = ThroughputConfig {
            line_fps: Some(148_809.5),
            resolution: 0.0001,
            ..Default::default()
        };
        let (ndr, _) = run_throughput(base, dev);
        let pdr_cfg = ThroughputConfig {
            loss_threshold: 0.001,
            ..base
        };
        let (pdr, _) = run_throughput(pdr_cfg, dev);
        assert!(ndr.fps <= cap, "{ndr:?}");
        assert!(pdr.fps > cap && pdr.fps <= cap / 0.999 + 1.0, "{pdr:?}");
    }

    #[test]
    fn nothing_passes() {
        let cfg = ThroughputConfig {
            line_fps: Some(10_000.0),
            resolution: 0.01,
            ..Default::default()
        };
        let (r, trials) = run_throughput(cfg, capped(0.0, f64::INFINITY, 1.0));
        assert_eq!(r.fps, 0.0);
        assert!(!r.verified);
        assert!(trials.len() < 15, "{}", trials.len());
    }

    #[test]
    fn verification_failure_searches_lower() {
        // Passes everything up to 40k during the search but the first
        // verification loses: the search continues below and verifies again.
        let mut verify_seen = 0;
        let mut dev = capped(40_000.0, f64::INFINITY, 1.0);
        let cfg = ThroughputConfig {
            line_fps: Some(100_000.0),
            ..Default::default()
        };
        let mut s = Throughput::new(cfg).unwrap();
        while let step @ Step::Trial { kind, .. } = s.next() {
            let mut o = dev(step);
            if kind == TrialKind::Verify {
                verify_seen += 1;
                if verify_seen == 1 {
                    o.received -= 1;
                }
            }
            s.record(o);
        }
        let r = s.result().unwrap();
        assert_eq!(verify_seen, 2);
        assert!(r.verified && r.fps < 40_000.0 && r.fps >= 39_000.0, "{r:?}");
    }

    #[test]
    fn failed_verification_of_the_line_rate_searches_below_it() {
        // The line-rate trial passes, its verification does not (a noisy
        // host): the search must go on below the line rate, not report 0.
        let mut s = Throughput::new(ThroughputConfig {
            line_fps: Some(84_459.5),
            ..Default::default()
        })
        .unwrap();
        let mut dev = capped(80_000.0, f64::INFINITY, 2.0);
        let mut first = true;
        while let step @ Step::Trial { kind, .. } = s.next() {
            let mut o = dev(step);
            if kind == TrialKind::MaxRate {
                o.received = o.offered;
            }
            if kind == TrialKind::Verify && first {
                first = false;
                o.received = o.offered / 2;
            }
            s.record(o);
        }
        let r = s.result().unwrap();
        assert!(r.verified && r.fps <= 80_000.0 && r.fps > 79_000.0, "{r:?}");
    }

    #[test]
    fn retries_absorb_a_single_noisy_trial() {
        // Every first attempt of a step at 8127 fps loses one frame; the
        // repeat is clean. With 1 retry the line rate is found in 4 trials.
        let cfg = ThroughputConfig {
            line_fps: Some(8_127.0),
            retries: 1,
            ..Default::default()
        };
        let mut s = Throughput::new(cfg).unwrap();
        let mut dev = capped(1e9, f64::INFINITY, 1.0);
        let mut odd = true;
        while let step @ Step::Trial { .. } = s.next() {
            let mut o = dev(step);
            if odd {
                o.received -= 1;
            }
            odd = !odd;
            s.record(o);
        }
        let r = s.result().unwrap();
        assert_eq!(r.fps, 8_127.0);
        assert!(r.verified);
        assert_eq!(s.trials().len(), 4);
        // Without retries the same noise costs the line rate.
        let mut s = Throughput::new(ThroughputConfig { retries: 0, ..cfg }).unwrap();
        let mut dev = capped(1e9, f64::INFINITY, 1.0);
        let mut odd = true;
        while let step @ Step::Trial { .. } = s.next() {
            let mut o = dev(step);
            if odd {
                o.received -= 1;
            }
            odd = !odd;
            s.record(o);
        }
        assert!(s.result().unwrap().fps < 8_127.0);
    }

    #[test]
    fn max_trials_bounds_the_search() {
        let cfg = ThroughputConfig {
            line_fps: Some(1e6),
            resolution: 1e-6,
            max_trials: 4,
            ..Default::default()
        };
        // Delivers half of what it is offered when overloaded, so the first
        // guess is far off and 4 steps cannot close a 1 fps bracket.
        let dev = |s: Step| {
            let Step::Trial { fps, .. } = s else { panic!() };
            let f = fps.unwrap();
            let offered = f as u64;
            let received = if f <= 333_333.0 { offered } else { offered / 2 };
            TrialOutcome {
                offered,
                sent: offered,
                received,
                duration_s: 1.0,
            }
        };
        let (r, trials) = run_throughput(cfg, dev);
        assert!(!r.converged && r.fps <= 333_333.0, "{r:?}");
        assert!(trials.len() <= 6);
    }

    #[test]
    fn bad_config_refused() {
        let c = |f: fn(&mut ThroughputConfig)| {
            let mut c = ThroughputConfig::default();
            f(&mut c);
            Throughput::new(c).err()
        };
        assert_eq!(
            c(|c| c.loss_threshold = 1.0),
            Some(SearchError::Threshold(1.0))
        );
        assert_eq!(
            c(|c| c.loss_threshold = -0.1),
            Some(SearchError::Threshold(-0.1))
        );
        assert_eq!(
            c(|c| c.resolution = 0.0),
            Some(SearchError::Resolution(0.0))
        );
        assert!(c(|c| c.line_fps = Some(f64::NAN)).is_some());
        assert!(FrameLoss::new(1000.0, 0).is_err());
        assert!(FrameLoss::new(0.0, 10).is_err());
        assert!(BackToBack::new(1000.0, 1, 0.01, 1).is_err());
        assert!(BackToBack::new(1000.0, 100, 0.01, 0).is_err());
    }

    #[test]
    fn frame_loss_curve_of_a_capped_device() {
        let line = 148_809.5;
        let cap = 30_000.0;
        let mut dev = capped(cap, f64::INFINITY, 5.0);
        let mut fl = FrameLoss::new(line, 10).unwrap();
        while let step @ Step::Trial { .. } = fl.next() {
            fl.record(dev(step));
        }
        let p = fl.points();
        // 100 % .. 20 % lose (20 % = 29 762 < cap passes) -> 100..30 lose,
        // 20 and 10 pass: stop after two zero-loss steps.
        let pcts: Vec<u32> = p.iter().map(|x| x.percent).collect();
        assert_eq!(pcts, vec![100, 90, 80, 70, 60, 50, 40, 30, 20, 10]);
        for x in p {
            let want = (1.0 - cap / x.offered_fps).max(0.0) * 100.0;
            assert!((x.loss_percent - want).abs() < 0.01, "{x:?} want {want}");
        }
    }

    #[test]
    fn frame_loss_stops_after_two_clean_steps() {
        let mut fl = FrameLoss::new(1000.0, 10).unwrap();
        let mut dev = capped(850.0, f64::INFINITY, 1.0);
        while let step @ Step::Trial { .. } = fl.next() {
            fl.record(dev(step));
        }
        let pcts: Vec<u32> = fl.points().iter().map(|x| x.percent).collect();
        assert_eq!(pcts, vec![100, 90, 80, 70]);
    }

    #[test]
    fn back_to_back_finds_the_buffer() {
        // A device with a 5 000-frame buffer draining at 50 kfps, bursts at
        // 148 809 fps: it holds bursts of B with B × (1 − 50k/148.8k) ≤ 5000.
        let line: f64 = 148_809.5;
        let drain: f64 = 50_000.0;
        let buffer: f64 = 5_000.0;
        let limit = (buffer / (1.0 - drain / line)).floor() as u64;
        let dev = |s: Step| {
            let Step::Trial { frames, .. } = s else {
                panic!()
            };
            let n = frames.unwrap();
            let backlog = n as f64 * (1.0 - drain / line);
            let lost = (backlog - buffer).max(0.0).ceil() as u64;
            TrialOutcome {
                offered: n,
                sent: n,
                received: n - lost.min(n),
                duration_s: n as f64 / line,
            }
        };
        let mut b = BackToBack::new(line, (line * 2.0) as u64, 0.001, 3).unwrap();
        let mut n = 0;
        while let step @ Step::Trial { .. } = b.next() {
            b.record(dev(step));
            n += 1;
        }
        let r = b.result().unwrap();
        assert_eq!(r.bursts.len(), 3);
        let res = ((line * 2.0) as u64 as f64 * 0.001).round() as u64;
        for &x in &r.bursts {
            assert!(x <= limit && x + res >= limit, "{x} vs {limit}");
        }
        assert!(n <= 3 * 12, "{n} trials");
        assert!((r.implied_buffer_s - r.mean_frames / line).abs() < 1e-12);
    }

    #[test]
    fn back_to_back_longest_passes() {
        let mut b = BackToBack::new(1000.0, 2000, 0.01, 2).unwrap();
        let mut dev = capped(1e9, f64::INFINITY, 1.0);
        let mut n = 0;
        while let step @ Step::Trial { .. } = b.next() {
            b.record(dev(step));
            n += 1;
        }
        assert_eq!(n, 2);
        let r = b.result().unwrap();
        assert_eq!(r.bursts, vec![2000, 2000]);
        assert_eq!(r.longest_tried, 2000);
    }
}
