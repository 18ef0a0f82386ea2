//! RFC 2544 / RFC 5180 searches run as a campaign: the `[rfc2544]` block of
//! a campaign file (and `wirebench rfc2544`, which writes one). The search
//! logic is `wirebench_rfc2544` (pure); this module turns each step into a
//! real trial — `wirebench send` against `wirebench recv` on the campaign's
//! loopback, test-bed or hosts, through the runner's [`Session`] — and
//! stores every trial as a run. Results are never stored separately: they
//! are recomputed by replaying the stored trials through the same searches
//! ([`summarize`]), so a report always agrees with the trials it shows.

use crate::campaign::{Axis, Campaign, CampaignError, HostNode, NodeRole, RunLength, Target};
use crate::runner::{PlannedRun, RunError, RunOptions, Session};
use crate::store::{CampaignRow, RunStatus, Store, StoreError};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use wirebench_model::MIN_PAYLOAD;
pub use wirebench_report::rfc_tables::{elapsed_line, size_label, tables, text_tables, RfcTable};
use wirebench_rfc2544::search::{SearchError, TrialKind};
use wirebench_rfc2544::{
    BackToBack, FrameLoss, Latency, Throughput, ThroughputConfig, IMIX_NAME, RFC2544_SIZES,
};
/// The search types a [`Model`] for [`simulate`] speaks.
pub use wirebench_rfc2544::{FrameEntry, FrameSpec, Step, TestFrame, TrialOutcome};
pub use wirebench_schema::rfc2544::{Rfc2544Summary, SizeResult, Test};
use wirebench_stats::result::ResultDoc;
use wirebench_stats::IpVersion;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRfc {
    ip: Option<Vec<i64>>,
    frames: Option<Vec<toml::Value>>,
    imix: Option<String>,
    tests: Option<Vec<String>>,
    trial_s: Option<f64>,
    learning_s: Option<f64>,
    loss_pct: Option<f64>,
    resolution_pct: Option<f64>,
    max_trials: Option<i64>,
    step_pct: Option<i64>,
    b2b_repeats: Option<i64>,
    b2b_longest_s: Option<f64>,
    retries: Option<i64>,
}

/// A validated `[rfc2544]` block (see docs/rfc2544.md for every key).
#[derive(Debug, Clone, PartialEq)]
pub struct Rfc2544Config {
    /// IP versions to test (4, 6), in order.
    pub ips: Vec<u8>,
    /// Nominal frame sizes (Ethernet, FCS included) and IMIX entries.
    pub frames: Vec<FrameEntry>,
    /// Tests to run; latency needs throughput (it is measured at the found rate).
    pub tests: Vec<Test>,
    /// Length of one rate trial (RFC 2544 §24: 60 s).
    pub trial_s: f64,
    /// Learning frames before each trial (RFC 2544 §23): seconds of the
    /// trial's own traffic, not stored.
    pub learning_s: f64,
    /// Loss ratio that still passes a throughput trial (0 = RFC 2544).
    pub loss_threshold: f64,
    /// Bracket width where the throughput search stops, ratio of the ceiling.
    pub resolution: f64,
    /// Upper bound on search trials per throughput search.
    pub max_trials: u32,
    /// Repeats of a lossy throughput trial before it fails (0 = the RFC).
    pub retries: u32,
    /// Frame-loss load step, percent (RFC: 10 or finer).
    pub step_pct: u32,
    /// Back-to-back searches per frame size (their results are averaged).
    pub b2b_repeats: u32,
    /// Longest burst tried, seconds at the burst rate (RFC 2544 §26.4: 2 s).
    pub b2b_longest_s: f64,
    /// Link MTU (frames above MTU + 18 are refused).
    pub mtu: u32,
    /// Link rate, bit/s on the wire, when known: the line rate of each size.
    pub link_bps: Option<f64>,
}

impl Rfc2544Config {
    /// The campaign's `[rfc2544]` block; None when the campaign has none.
    pub fn from_campaign(c: &Campaign) -> Result<Option<Self>, CampaignError> {
        let Some((value, line)) = &c.rfc2544 else {
            return Ok(None);
        };
        let err = |key: &str, reason: String| CampaignError::Invalid {
            origin: c.origin.clone(),
            line: *line,
            key: format!("rfc2544.{key}"),
            reason,
        };
        let raw: RawRfc = value
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| err("", e.message().to_string()))?;
        let ips = match &raw.ip {
            None => vec![4, 6],
            Some(v) if v.is_empty() => return Err(err("ip", "empty list".into())),
            Some(v) => v
                .iter()
                .map(|&i| match i {
                    4 | 6 => Ok(i as u8),
                    _ => Err(err("ip", format!("IP version must be 4 or 6, got {i}"))),
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        if let Target::Hosts(h) = &c.target {
            if !h.nodes.is_empty() {
                nodes_fit(&h.nodes, &ips).map_err(|(key, reason)| err(key, reason))?;
            }
        }
        let (mtu, link_rate) = match &c.target {
            Target::Testbed(t) => (t.mtu.unwrap_or(1500), t.link_rate.clone()),
            Target::Hosts(h) => (h.mtu.unwrap_or(1500), h.link_rate.clone()),
            Target::Loopback => (65_535, None),
        };
        let link_bps = link_rate
            .as_deref()
            .and_then(crate::campaign::parse_link_rate);
        let imix = match &raw.imix {
            None => FrameEntry::simple_imix(),
            Some(t) => FrameEntry::parse_mix(t).map_err(|e| err("imix", e.to_string()))?,
        };
        let frames = match &raw.frames {
            None => RFC2544_SIZES.iter().map(|&f| FrameEntry::Size(f)).collect(),
            Some(v) if v.is_empty() => return Err(err("frames", "empty list".into())),
            Some(v) => v
                .iter()
                .map(|f| match f {
                    toml::Value::Integer(i) => u32::try_from(*i)
                        .map(FrameEntry::Size)
                        .map_err(|_| err("frames", format!("bad frame size {i}"))),
                    toml::Value::String(t) if t == IMIX_NAME => Ok(imix.clone()),
                    other => Err(err(
                        "frames",
                        format!("{other} is neither a frame size in bytes nor \"{IMIX_NAME}\""),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        if raw.imix.is_some() && !frames.iter().any(|f| matches!(f, FrameEntry::Mix(_))) {
            return Err(err(
                "imix",
                format!("a custom IMIX needs \"{IMIX_NAME}\" in frames"),
            ));
        }
        for f in &frames {
            for &ip in &ips {
                let key = if matches!(f, FrameEntry::Mix(_)) && raw.imix.is_some() {
                    "imix"
                } else {
                    "frames"
                };
                TestFrame::new(f, ip_version(ip), mtu, MIN_PAYLOAD)
                    .map_err(|e| err(key, format!("IPv{ip}: {e}")))?;
            }
        }
        let tests = match &raw.tests {
            None => Test::ALL.to_vec(),
            Some(v) if v.is_empty() => return Err(err("tests", "empty list".into())),
            Some(v) => {
                let mut t = v
                    .iter()
                    .map(|s| {
                        Test::parse(s).ok_or_else(|| {
                            err(
                                "tests",
                                format!("unknown test {s:?}; tests are throughput, latency, frame_loss, back_to_back"),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                t.sort();
                t.dedup();
                t
            }
        };
        if tests.contains(&Test::Latency) && !tests.contains(&Test::Throughput) {
            return Err(err(
                "tests",
                "latency is measured at the found throughput: add \"throughput\"".into(),
            ));
        }
        if link_bps.is_none()
            && !tests.contains(&Test::Throughput)
            && (tests.contains(&Test::FrameLoss) || tests.contains(&Test::BackToBack))
        {
            return Err(err(
                "tests",
                "without a known link rate the frame-loss and back-to-back loads are shares of the tester's maximum, which the throughput test measures: add \"throughput\" or give a link rate".into(),
            ));
        }
        let pos = |key: &str,
                   v: Option<f64>,
                   default: f64,
                   zero_ok: bool|
         -> Result<f64, CampaignError> {
            match v {
                None => Ok(default),
                Some(x) if x.is_finite() && (x > 0.0 || (zero_ok && x == 0.0)) && x <= 86_400.0 => {
                    Ok(x)
                }
                Some(x) => Err(err(
                    key,
                    format!(
                        "must be a number of seconds{}, got {x}",
                        if zero_ok { " ≥ 0" } else { " > 0" }
                    ),
                )),
            }
        };
        let int = |key: &str,
                   v: Option<i64>,
                   default: u32,
                   range: std::ops::RangeInclusive<u32>|
         -> Result<u32, CampaignError> {
            match v {
                None => Ok(default),
                Some(x) => u32::try_from(x)
                    .ok()
                    .filter(|x| range.contains(x))
                    .ok_or_else(|| {
                        err(
                            key,
                            format!("must be in {}..={}, got {x}", range.start(), range.end()),
                        )
                    }),
            }
        };
        let loss_pct = raw.loss_pct.unwrap_or(0.0);
        if !(0.0..100.0).contains(&loss_pct) {
            return Err(err(
                "loss_pct",
                format!("must be in 0..100 (percent), got {loss_pct}"),
            ));
        }
        let resolution_pct = raw.resolution_pct.unwrap_or(0.5);
        if !(resolution_pct > 0.0 && resolution_pct <= 50.0) {
            return Err(err(
                "resolution_pct",
                format!("must be in (0, 50] (percent of the line rate), got {resolution_pct}"),
            ));
        }
        let mut cfg = Rfc2544Config {
            ips,
            frames,
            tests,
            trial_s: pos("trial_s", raw.trial_s, 60.0, false)?,
            learning_s: pos("learning_s", raw.learning_s, 0.2, true)?,
            loss_threshold: loss_pct / 100.0,
            resolution: resolution_pct / 100.0,
            max_trials: int("max_trials", raw.max_trials, 30, 1..=1000)?,
            retries: int("retries", raw.retries, 0, 0..=10)?,
            step_pct: int("step_pct", raw.step_pct, 10, 1..=50)?,
            b2b_repeats: int("b2b_repeats", raw.b2b_repeats, 5, 1..=1000)?,
            b2b_longest_s: pos("b2b_longest_s", raw.b2b_longest_s, 2.0, false)?,
            mtu,
            link_bps,
        };
        if c.quick {
            // `--quick`: the same searches with 2 s trials and one burst series.
            cfg.trial_s = cfg.trial_s.min(2.0);
            cfg.b2b_repeats = 1;
        }
        Ok(Some(cfg))
    }

    fn throughput_config(&self, line_fps: Option<f64>) -> ThroughputConfig {
        ThroughputConfig {
            line_fps,
            loss_threshold: self.loss_threshold,
            resolution: self.resolution,
            max_trials: self.max_trials,
            retries: self.retries,
        }
    }

    fn has(&self, t: Test) -> bool {
        self.tests.contains(&t)
    }
}

/// A search through `[[hosts.node]]` agents measures one path: exactly one
/// sender node, whose receiver has an address of every IP version searched.
/// Err((key, reason)) otherwise.
fn nodes_fit(nodes: &[HostNode], ips: &[u8]) -> Result<(), (&'static str, String)> {
    let senders: Vec<&HostNode> = nodes
        .iter()
        .filter(|n| n.role == NodeRole::Sender)
        .collect();
    let [sender] = senders.as_slice() else {
        return Err((
            "",
            format!(
                "a search measures one path: [[hosts.node]] needs exactly one sender node, found {}",
                senders.len()
            ),
        ));
    };
    let Some(recv) = sender
        .to
        .as_deref()
        .and_then(|t| nodes.iter().find(|n| n.name == t))
    else {
        return Err(("", format!("sender node {} has no receiver", sender.name)));
    };
    for &ip in ips {
        let addr = if ip == 6 { recv.ipv6 } else { recv.ipv4 };
        if addr.is_none() {
            return Err((
                "ip",
                format!(
                    "IPv{ip} is searched but receiver node {} has no ipv{ip} address",
                    recv.name
                ),
            ));
        }
    }
    Ok(())
}

fn ip_version(ip: u8) -> IpVersion {
    if ip == 6 {
        IpVersion::V6
    } else {
        IpVersion::V4
    }
}

fn scenario_key(test: Test, ip: u8, frame: &TestFrame) -> String {
    format!("test={},ip={ip},frame={}", test.name(), frame.key())
}

/// What the search needs from a stored trial's result document.
pub fn outcome_of(doc: &ResultDoc, burst: Option<u64>, unpaced: bool) -> Option<TrialOutcome> {
    let flow = doc.flows.first()?;
    let packets = flow.sent.packets;
    let not_sent = flow.sent.not_sent;
    let received = flow.received.counts.unique;
    let duration_s = flow.sent.duration_s;
    let offered = match burst {
        Some(b) => b,
        None if unpaced => packets,
        None => packets + not_sent,
    };
    Some(TrialOutcome {
        offered,
        sent: packets,
        received,
        duration_s,
    })
}

/// [`outcome_of`] a stored document (None when it is not a result document
/// this version can read: the trial then counts as failed, not as loss).
fn stored_outcome(doc: &Value, burst: Option<u64>, unpaced: bool) -> Option<TrialOutcome> {
    outcome_of(&ResultDoc::from_stored(doc).ok()?, burst, unpaced)
}

// ------------------------------------------------------------ running

/// Trials of one search in one size, as the driver sees them.
trait Trials {
    /// Runs a trial; Ok(None) = interrupted.
    fn trial(
        &mut self,
        test: Test,
        ip: u8,
        spec: &TestFrame,
        step: Step,
        rep: u32,
    ) -> Result<Option<(TrialOutcome, Value)>, RunError>;
}

struct Live<'s, 'a> {
    sess: &'s mut Session<'a>,
    c: &'a Campaign,
    trial_s: f64,
    say: &'s mut dyn FnMut(String),
}

fn fmt_rate(fps: f64) -> String {
    // Enough digits for a rate pacer, few enough to read.
    format!("{:.3}", fps)
}

impl Trials for Live<'_, '_> {
    fn trial(
        &mut self,
        test: Test,
        ip: u8,
        spec: &TestFrame,
        step: Step,
        rep: u32,
    ) -> Result<Option<(TrialOutcome, Value)>, RunError> {
        let Step::Trial { fps, frames, kind } = step else {
            return Err(RunError::BadInput("no trial to run".into()));
        };
        let mut pick = BTreeMap::new();
        pick.insert(Axis::Ip, ip.to_string());
        if let Some(single) = spec.single() {
            pick.insert(Axis::Frame, single.frame.to_string());
        }
        pick.insert(
            Axis::Pps,
            fps.map(fmt_rate).unwrap_or_else(|| "max".to_string()),
        );
        let mut s = self.c.scenario_from(pick);
        s.key = scenario_key(test, ip, spec);
        s.settings.payload = spec.payload();
        s.settings.size_mix = spec.payload_mix();
        // Every trial sends one datagram per frame: the unpaced first
        // trial sets the search's ceiling, and with UDP GSO (`--max`'s
        // default) it could reach rates that the paced trials after it,
        // one frame at a time, cannot offer, so the search would never
        // verify. (A trial on the AF_XDP path is not segmented anyway.)
        s.settings.gso = Some(false);
        s.axes.insert("test".into(), test.name().into());
        s.axes.insert("frame".into(), spec.key());
        let (sent, payload) = match spec {
            TestFrame::Size(f) => (f.frame.to_string(), f.payload.to_string()),
            TestFrame::Mix(m) => (
                format!("{:.1}", m.mean_frame),
                spec.payload_mix().unwrap_or_default(),
            ),
        };
        s.axes.insert("frame_sent".into(), sent);
        s.axes.insert("payload".into(), payload);
        s.axes.insert("kind".into(), kind.as_str().into());
        if let Some(n) = frames {
            s.axes.insert("burst".into(), n.to_string());
        }
        // A paced trial is its frame count (rate × trial length): a timed
        // sender stops on time and calls frames still due then not sent,
        // which a zero-loss search would read as loss whenever the tester
        // started a few ms late. An unpaced trial is timed.
        let length = match (frames, fps) {
            (Some(count), _) => RunLength::Packets { count },
            (None, Some(f)) => RunLength::Packets {
                count: ((f * self.trial_s).round() as u64).max(1),
            },
            (None, None) => RunLength::Duration {
                seconds: self.trial_s,
            },
        };
        let pr = PlannedRun {
            scenario: s,
            repetition: rep,
        };
        // A trial that fails (not: loses frames) is tried once more: a
        // failure is the set-up's, and the search must not read it as loss.
        for attempt in 0..2 {
            let Some(run) = self.sess.run(&pr, length)? else {
                return Ok(None);
            };
            let outcome = run
                .result
                .as_ref()
                .filter(|_| run.status == RunStatus::Ok)
                .and_then(|d| stored_outcome(d, frames, fps.is_none()).map(|o| (o, d.clone())));
            if let Some((o, d)) = outcome {
                (self.say)(format!(
                    "{} IPv{ip} {} B {} {}: offered {} received {} loss {:.4} %",
                    test.name(),
                    spec.key(),
                    kind.as_str(),
                    match (fps, frames) {
                        (_, Some(n)) => format!("burst {n}"),
                        (Some(f), None) => format!("{f:.1} fps"),
                        (None, None) => "unpaced".into(),
                    },
                    o.offered,
                    o.received,
                    o.loss_ratio() * 100.0
                ));
                return Ok(Some((o, d)));
            }
            if attempt == 1 {
                return Err(RunError::Receiver(format!(
                    "{} trial {rep} failed twice: {}",
                    pr.scenario.key,
                    run.error.unwrap_or_default()
                )));
            }
        }
        Ok(None)
    }
}

/// Replays stored trials (in repetition order) instead of running them.
struct Replay<'r> {
    runs: &'r BTreeMap<(String, u32), Value>,
    missing: bool,
}

impl Trials for Replay<'_> {
    fn trial(
        &mut self,
        test: Test,
        ip: u8,
        spec: &TestFrame,
        step: Step,
        rep: u32,
    ) -> Result<Option<(TrialOutcome, Value)>, RunError> {
        let Step::Trial { fps, frames, .. } = step else {
            return Ok(None);
        };
        let key = scenario_key(test, ip, spec);
        let got = self
            .runs
            .get(&(key, rep))
            .and_then(|d| stored_outcome(d, frames, fps.is_none()).map(|o| (o, d.clone())));
        if got.is_none() {
            self.missing = true;
        }
        Ok(got)
    }
}

fn search_err(e: SearchError) -> RunError {
    RunError::BadInput(e.to_string())
}

/// The three searches as the driver sees them: the next step, and what a
/// trial measured.
trait Search {
    fn step(&self) -> Step;
    fn record_outcome(&mut self, o: TrialOutcome);
}

macro_rules! search_impl {
    ($($t:ty),*) => {$(
        impl Search for $t {
            fn step(&self) -> Step {
                self.next()
            }
            fn record_outcome(&mut self, o: TrialOutcome) {
                self.record(o)
            }
        }
    )*};
}
search_impl!(Throughput, FrameLoss, BackToBack);

/// Runs (or replays) one search to its end, numbering its trials from 0 (the
/// stored repetition). `seen` gets each trial's kind and result document.
/// Some(trials run), or None when interrupted / a stored trial is missing.
fn drive(
    s: &mut dyn Search,
    test: Test,
    ip: u8,
    spec: &TestFrame,
    t: &mut dyn Trials,
    mut seen: impl FnMut(TrialKind, Value),
) -> Result<Option<u32>, RunError> {
    let mut rep = 0;
    while let step @ Step::Trial { kind, .. } = s.step() {
        let Some((o, doc)) = t.trial(test, ip, spec, step, rep)? else {
            return Ok(None);
        };
        seen(kind, doc);
        s.record_outcome(o);
        rep += 1;
    }
    Ok(Some(rep))
}

/// Runs (or replays) every test of one size. None = interrupted / trials missing.
fn one_size(
    cfg: &Rfc2544Config,
    ip: u8,
    entry: &FrameEntry,
    t: &mut dyn Trials,
) -> Result<Option<SizeResult>, RunError> {
    let spec = TestFrame::new(entry, ip_version(ip), cfg.mtu, MIN_PAYLOAD)
        .map_err(|e| RunError::BadInput(e.to_string()))?;
    let line_fps = cfg.link_bps.map(|b| spec.line_rate_fps(b));
    let mut out = SizeResult {
        ip,
        spec: spec.clone(),
        line_fps,
        throughput: None,
        rates: None,
        pct_of_line: None,
        latency: None,
        frame_loss: Vec::new(),
        back_to_back: None,
        trials: 0,
        throughput_trials: Vec::new(),
    };
    let mut ceiling = line_fps;
    if cfg.has(Test::Throughput) {
        let mut s = Throughput::new(cfg.throughput_config(line_fps)).map_err(search_err)?;
        let mut verify_doc = None;
        let Some(n) = drive(&mut s, Test::Throughput, ip, &spec, t, |kind, doc| {
            if kind == TrialKind::Verify {
                verify_doc = Some(doc);
            }
        })?
        else {
            return Ok(None);
        };
        out.trials += n;
        out.throughput_trials = s.trials().to_vec();
        if let Some(r) = s.result() {
            ceiling = Some(r.ceiling_fps);
            out.rates = Some(spec.rates(r.fps));
            out.pct_of_line = line_fps.map(|l| 100.0 * r.fps / l);
            if cfg.has(Test::Latency) && r.verified {
                out.latency = verify_doc
                    .as_ref()
                    .and_then(|d| ResultDoc::from_stored(d).ok())
                    .and_then(|d| Latency::from_result(&d));
            }
            out.throughput = Some(*r);
        }
    }
    let Some(ceiling) = ceiling.filter(|c| *c > 0.0) else {
        return Ok(Some(out));
    };
    if cfg.has(Test::FrameLoss) {
        let mut fl = FrameLoss::new(ceiling, cfg.step_pct).map_err(search_err)?;
        let Some(n) = drive(&mut fl, Test::FrameLoss, ip, &spec, t, |_, _| {})? else {
            return Ok(None);
        };
        out.trials += n;
        out.frame_loss = fl.points().to_vec();
    }
    if cfg.has(Test::BackToBack) {
        let longest = (ceiling * cfg.b2b_longest_s).round().max(2.0) as u64;
        let mut b = BackToBack::new(ceiling, longest, cfg.resolution, cfg.b2b_repeats)
            .map_err(search_err)?;
        let Some(n) = drive(&mut b, Test::BackToBack, ip, &spec, t, |_, _| {})? else {
            return Ok(None);
        };
        out.trials += n;
        out.back_to_back = b.result();
    }
    Ok(Some(out))
}

/// What [`run`] did.
#[derive(Debug, Clone)]
pub struct RfcOutcome {
    /// The campaign's id in the store.
    pub campaign_id: i64,
    /// Ctrl-C (or an error) stopped the searches before the end.
    pub interrupted: bool,
}

/// Runs the campaign's `[rfc2544]` searches, storing every trial.
/// `say` gets one line per trial.
pub fn run(
    c: &Campaign,
    store: &Store,
    opts: &RunOptions,
    say: &mut dyn FnMut(String),
) -> Result<RfcOutcome, RunError> {
    let cfg = Rfc2544Config::from_campaign(c)
        .map_err(|e| RunError::BadInput(e.to_string()))?
        .ok_or_else(|| RunError::BadInput("the campaign has no [rfc2544] block".into()))?;
    if opts.resume {
        return Err(RunError::BadInput(
            "--resume is not supported for [rfc2544] searches: each trial depends on the last; run it again".into(),
        ));
    }
    if let Ok(Some(e)) = estimate(c) {
        say(format!(
            "RFC 2544 searches on {}: estimate {} (a typical search; the device decides)",
            c.target.describe(),
            e.describe()
        ));
    }
    let mut cc = c.clone();
    cc.warmup_s = cfg.learning_s;
    let mut sess = Session::open(&cc, store, opts, 0)?;
    let campaign_id = sess.campaign_id();
    let mut result = Ok(false);
    'outer: for &ip in &cfg.ips {
        for f in &cfg.frames {
            let mut live = Live {
                sess: &mut sess,
                c: &cc,
                trial_s: cfg.trial_s,
                say,
            };
            match one_size(&cfg, ip, f, &mut live) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    result = Ok(true);
                    break 'outer;
                }
                Err(e) => {
                    result = Err(e);
                    break 'outer;
                }
            }
        }
    }
    let interrupted = matches!(result, Ok(true)) || result.is_err();
    let closed = sess.close(interrupted);
    let interrupted = result?;
    closed?;
    Ok(RfcOutcome {
        campaign_id,
        interrupted,
    })
}

/// A device model for [`simulate`]: what one trial measures (the test, the
/// frame and the step the search asked for).
pub type Model<'m> = dyn FnMut(Test, &TestFrame, Step) -> TrialOutcome + 'm;

/// Delay every simulated frame has (one-way, seconds).
pub const SIMULATED_DELAY_S: f64 = 100e-6;

/// Trials answered by a [`Model`], stored like real ones.
struct Simulated<'s, 'm> {
    store: &'s Store,
    campaign_id: i64,
    model: &'s mut Model<'m>,
}

impl Trials for Simulated<'_, '_> {
    fn trial(
        &mut self,
        test: Test,
        ip: u8,
        spec: &TestFrame,
        step: Step,
        rep: u32,
    ) -> Result<Option<(TrialOutcome, Value)>, RunError> {
        let Step::Trial { kind, .. } = step else {
            return Ok(None);
        };
        let o = (self.model)(test, spec, step);
        let d = SIMULATED_DELAY_S;
        let mut flow = wirebench_stats::result::FlowResult::default();
        flow.sent.packets = o.sent;
        flow.sent.not_sent = o.offered.saturating_sub(o.sent);
        flow.sent.duration_s = o.duration_s;
        flow.received.counts.unique = o.received;
        flow.delay_s = wirebench_stats::DelayStats {
            min: d,
            mean: d,
            max: d,
            stddev: 0.0,
            p50: d,
            p90: d,
            p99: d,
            p999: d,
        };
        let doc = serde_json::to_value(ResultDoc::with_flows(vec![flow]))
            .map_err(|e| RunError::Receiver(format!("simulated trial: {e}")))?;
        let axes = BTreeMap::from([
            ("test".to_string(), test.name().to_string()),
            ("ip".to_string(), ip.to_string()),
            ("frame".to_string(), spec.key()),
            ("kind".to_string(), kind.as_str().to_string()),
        ]);
        let now = crate::env::now_rfc3339();
        self.store.record_run(&crate::store::NewRun {
            campaign_id: self.campaign_id,
            scenario_key: &scenario_key(test, ip, spec),
            axes: &axes,
            repetition: rep,
            status: RunStatus::Ok,
            result: Some(&doc),
            counters: None,
            command: "simulated",
            error: None,
            started_at: &now,
            ended_at: &now,
        })?;
        Ok(Some((o, doc)))
    }
}

/// Runs the campaign's `[rfc2544]` searches against a device model instead
/// of a network, storing every trial as [`run`] does (with a constant
/// [`SIMULATED_DELAY_S`] delay): the store, the replay and the reports can
/// then be checked against a device whose limits are known exactly, without
/// root or sockets. Returns the campaign id.
pub fn simulate(c: &Campaign, store: &Store, model: &mut Model<'_>) -> Result<i64, RunError> {
    let cfg = Rfc2544Config::from_campaign(c)
        .map_err(|e| RunError::BadInput(e.to_string()))?
        .ok_or_else(|| RunError::BadInput("the campaign has no [rfc2544] block".into()))?;
    let env = crate::summary::Environment {
        topology: c.target.describe(),
        tool_version: "simulated".into(),
        ..Default::default()
    };
    let started = crate::env::now_rfc3339();
    let campaign_id = store.create_campaign(&crate::store::NewCampaign {
        name: &c.name,
        origin: &c.origin,
        file_text: &c.text,
        started_at: &started,
        environment: &env,
        planned_runs: 0,
        quick: c.quick,
    })?;
    let mut sim = Simulated {
        store,
        campaign_id,
        model,
    };
    for &ip in &cfg.ips {
        for f in &cfg.frames {
            one_size(&cfg, ip, f, &mut sim)?;
        }
    }
    store.set_campaign_status(campaign_id, "done")?;
    Ok(campaign_id)
}

/// How many trials and how long a campaign's searches take, before they
/// run: the trials depend on the device, so this counts a typical search —
/// throughput: the line-rate trial, a bisection to the resolution and the
/// verification (2 + ⌈log2(1/resolution)⌉; a device that carries the line
/// rate needs 2); frame loss: every load step down to the smallest (at
/// most 100 / step). On a test-bed whose routers have a `forward_pps` cap
/// the device is known: throughput takes 4 trials (line rate, the rate the
/// router delivered, one step above, the verification) and frame loss the
/// loads above the cap plus the two lossless ones that end it (S5's
/// calibration search: 4 + 9 trials, as measured); back-to-back: per repetition a bisection of bursts of
/// half the longest on average. Each trial also has its learning frames,
/// the linger and the per-run cost of [`crate::estimate`].
pub fn estimate(c: &Campaign) -> Result<Option<crate::estimate::Estimate>, CampaignError> {
    let Some(cfg) = Rfc2544Config::from_campaign(c)? else {
        return Ok(None);
    };
    let bisect = (1.0 / cfg.resolution).log2().ceil();
    let trial = crate::estimate::run_cost_s(c, cfg.learning_s, cfg.trial_s);
    let loads = (100.0 / f64::from(cfg.step_pct)).ceil();
    // A test-bed whose routers are capped: the share of each size's line
    // rate they forward is known, and so are the searches' lengths.
    let cap_pps = match &c.target {
        Target::Testbed(t) => t.forward_pps,
        _ => None,
    };
    let mut trials = 0.0;
    let mut seconds = 0.0;
    for &ip in &cfg.ips {
        for entry in &cfg.frames {
            let cap = cap_pps.zip(cfg.link_bps).and_then(|(pps, bps)| {
                let spec = TestFrame::new(entry, ip_version(ip), cfg.mtu, MIN_PAYLOAD).ok()?;
                Some(pps as f64 / spec.line_rate_fps(bps))
            });
            if cfg.has(Test::Throughput) {
                let n = match cap {
                    // Line rate passes, then the verification.
                    Some(share) if share >= 1.0 => 2.0,
                    // Line rate, the rate the capped router delivered (its
                    // cap), one step above it, the verification.
                    Some(_) => 4.0,
                    None => 2.0 + bisect,
                };
                trials += n;
                seconds += n * trial;
            }
            if cfg.has(Test::FrameLoss) {
                let n = match cap {
                    // The loads above the cap lose, then two that do not.
                    Some(share) => {
                        (0..loads as u32)
                            .filter(|k| 1.0 - f64::from(k * cfg.step_pct) / 100.0 > share)
                            .count() as f64
                            + 2.0
                    }
                    None => loads,
                }
                .min(loads);
                trials += n;
                seconds += n * trial;
            }
            if cfg.has(Test::BackToBack) {
                let n = f64::from(cfg.b2b_repeats) * (1.0 + bisect);
                trials += n;
                seconds +=
                    n * crate::estimate::run_cost_s(c, cfg.learning_s, cfg.b2b_longest_s / 2.0);
            }
        }
    }
    let tests = [Test::Throughput, Test::FrameLoss, Test::BackToBack]
        .into_iter()
        .filter(|&t| cfg.has(t))
        .count();
    let builds = usize::from(matches!(c.target, Target::Testbed(_)));
    Ok(Some(crate::estimate::Estimate {
        runs: trials as usize,
        scenarios: tests * cfg.ips.len() * cfg.frames.len(),
        builds,
        seconds: seconds
            + builds as f64 * crate::estimate::TESTBED_BUILD_S
            + if builds > 0 && cfg.ips.first() == Some(&6) {
                crate::estimate::IPV6_FIRST_S
            } else {
                0.0
            },
    }))
}

/// Why an RFC 2544 campaign's results could not be recomputed.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// Reading the trials from the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored campaign file (id, reason) does not parse or validate.
    #[error("campaign {0}: {1}")]
    Campaign(i64, String),
}

/// Recomputes an RFC 2544 campaign's results from its stored trials.
/// Ok(None): the campaign is not an RFC 2544 one.
pub fn summarize(store: &Store, row: &CampaignRow) -> Result<Option<Rfc2544Summary>, SummaryError> {
    let bad = |m: String| SummaryError::Campaign(row.id, m);
    let c = Campaign::parse(&row.file_text, &row.origin).map_err(|e| bad(e.to_string()))?;
    let Some(mut cfg) = Rfc2544Config::from_campaign(&c).map_err(|e| bad(e.to_string()))? else {
        return Ok(None);
    };
    if row.quick {
        cfg.trial_s = cfg.trial_s.min(2.0);
        cfg.b2b_repeats = 1;
    }
    let runs = store.runs(row.id)?;
    let mut first: Option<String> = Some(row.started_at.clone());
    let mut last: Option<String> = None;
    let mut docs = BTreeMap::new();
    for r in &runs {
        if first.as_ref().is_none_or(|f| r.started_at < *f) {
            first = Some(r.started_at.clone());
        }
        if last.as_ref().is_none_or(|l| r.ended_at > *l) {
            last = Some(r.ended_at.clone());
        }
        if r.status == RunStatus::Ok {
            if let Some(d) = &r.result {
                docs.insert((r.scenario_key.clone(), r.repetition), d.clone());
            }
        }
    }
    let mut sizes = Vec::new();
    for &ip in &cfg.ips {
        for f in &cfg.frames {
            let mut rp = Replay {
                runs: &docs,
                missing: false,
            };
            if let Ok(Some(s)) = one_size(&cfg, ip, f, &mut rp) {
                sizes.push(s);
            }
        }
    }
    let ts = |s: &Option<String>| s.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
    let elapsed_s = match (ts(&first), ts(&last)) {
        (Some(a), Some(b)) => b.duration_since(a).ok().map(|d| d.as_secs_f64()),
        _ => None,
    };
    Ok(Some(Rfc2544Summary {
        campaign_id: row.id,
        name: row.name.clone(),
        target: c.target.describe(),
        link_bps: cfg.link_bps,
        mtu: cfg.mtu,
        trial_s: cfg.trial_s,
        loss_threshold: cfg.loss_threshold,
        resolution: cfg.resolution,
        tests: cfg.tests.clone(),
        sizes,
        elapsed_s,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Result<Option<Rfc2544Config>, CampaignError> {
        Rfc2544Config::from_campaign(&Campaign::parse(text, "c.toml")?)
    }

    #[test]
    fn block_defaults_follow_the_rfc() {
        let c = cfg("[testbed]\npreset = \"router\"\nlink_rate = \"100mbit\"\n[rfc2544]\n")
            .unwrap()
            .unwrap();
        let sizes: Vec<FrameEntry> = RFC2544_SIZES.iter().map(|&f| FrameEntry::Size(f)).collect();
        assert_eq!(c.frames, sizes);
        assert_eq!(c.ips, vec![4, 6]);
        assert_eq!(c.tests, Test::ALL.to_vec());
        assert_eq!((c.trial_s, c.loss_threshold, c.step_pct), (60.0, 0.0, 10));
        assert_eq!(c.link_bps, Some(100e6));
        assert_eq!(c.mtu, 1500);
        // A plain matrix campaign has no block.
        assert_eq!(
            cfg("[loopback]\n[matrix]\npayload = [100]\n").unwrap(),
            None
        );
    }

    #[test]
    fn block_errors_name_the_key_and_line() {
        let e = cfg("[testbed]\npreset = \"direct\"\n[rfc2544]\nframes = [2000]\n").unwrap_err();
        assert_eq!(e.line(), 3);
        assert!(e.to_string().contains("rfc2544.frames"), "{e}");
        let e = cfg("[loopback]\n[rfc2544]\nspeed = 1\n").unwrap_err();
        assert!(e.to_string().contains("speed"), "{e}");
        let e = cfg("[loopback]\n[rfc2544]\ntests = [\"frame_loss\"]\n").unwrap_err();
        assert!(e.to_string().contains("throughput"), "{e}");
        let e = cfg("[loopback]\n[matrix]\npayload = [100]\n[rfc2544]\n").unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
    }

    #[test]
    fn imix_entries_and_custom_mixes() {
        let c = cfg("[loopback]\n[rfc2544]\nframes = [64, \"imix\"]\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            c.frames,
            vec![FrameEntry::Size(64), FrameEntry::simple_imix()]
        );
        let c = cfg("[loopback]\n[rfc2544]\nframes = [\"imix\"]\nimix = \"64:7,570:4,1518:1\"\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            c.frames,
            vec![FrameEntry::Mix(vec![(64, 7), (570, 4), (1518, 1)])]
        );
        for (text, key) in [
            ("frames = [\"jumbo\"]\n", "rfc2544.frames"),
            ("frames = [64]\nimix = \"64:1\"\n", "rfc2544.imix"),
            ("frames = [\"imix\"]\nimix = \"64:7,570\"\n", "rfc2544.imix"),
        ] {
            let e = cfg(&format!("[loopback]\n[rfc2544]\n{text}")).unwrap_err();
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
        // Every part must fit the test-bed's MTU.
        let e = cfg("[testbed]\npreset = \"direct\"\n[rfc2544]\nframes = [\"imix\"]\nimix = \"64:7,9018:1\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("rfc2544.imix"), "{e}");
    }

    #[test]
    fn agent_nodes_need_one_path_with_every_ip() {
        let nodes = "[hosts]\nlink_rate = \"1gbit\"\n\
            [[hosts.node]]\nname = \"a\"\nlocal = true\nrole = \"sender\"\n\
            [[hosts.node]]\nname = \"b\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n";
        let c = cfg(&format!("{nodes}[rfc2544]\nip = [4]\n"))
            .unwrap()
            .unwrap();
        assert_eq!(c.link_bps, Some(1e9));
        // IPv6 (in the default [4, 6]) has no receiver address.
        let e = cfg(&format!("{nodes}[rfc2544]\n")).unwrap_err();
        assert!(e.to_string().contains("rfc2544.ip"), "{e}");
        assert!(e.to_string().contains("no ipv6 address"), "{e}");
        let two = format!(
            "{nodes}[[hosts.node]]\nname = \"c\"\nlocal = true\nrole = \"sender\"\n[rfc2544]\nip = [4]\n"
        );
        let e = cfg(&two).unwrap_err();
        assert!(
            e.to_string().contains("exactly one sender node, found 2"),
            "{e}"
        );
    }

    #[test]
    fn s5_calibration_example_searches_s5s_datagram() {
        let text = include_str!("../../../examples/s5-calibration-search.toml");
        let c = Campaign::parse(text, "s5-calibration-search.toml").unwrap();
        let Target::Testbed(t) = &c.target else {
            panic!("a test-bed campaign")
        };
        assert_eq!(t.forward_pps, Some(29_000));
        let cfg = Rfc2544Config::from_campaign(&c).unwrap().unwrap();
        assert_eq!(
            (cfg.ips.as_slice(), cfg.frames.as_slice()),
            (&[4u8][..], &[FrameEntry::Size(110)][..])
        );
        // The frame carries S5's 64 B payload, and 10 % steps of its line
        // rate are about S5's 10 000 packets/s steps.
        let spec = FrameSpec::new(110, IpVersion::V4, cfg.mtu, MIN_PAYLOAD).unwrap();
        assert_eq!((spec.frame, spec.payload), (110, 64));
        let line = spec.line_rate_fps(cfg.link_bps.unwrap());
        assert!((line / 10.0 - 9615.4).abs() < 0.1, "{line}");
    }

    #[test]
    fn outcome_counts_what_the_schedule_wanted() {
        let mut flow = wirebench_stats::result::FlowResult::default();
        flow.sent.packets = 990;
        flow.sent.not_sent = 10;
        flow.sent.duration_s = 1.0;
        flow.received.counts.unique = 985;
        let doc = ResultDoc::with_flows(vec![flow]);
        let o = outcome_of(&doc, None, false).unwrap();
        assert_eq!((o.offered, o.sent, o.received), (1000, 990, 985));
        assert_eq!(outcome_of(&doc, None, true).unwrap().offered, 990);
        assert_eq!(outcome_of(&doc, Some(5000), false).unwrap().offered, 5000);
    }
}
