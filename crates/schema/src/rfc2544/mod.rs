//! RFC 2544 / RFC 5180 results as a campaign summary carries them: the
//! tests, the frame sizes and IMIX (`frame`), the trials and the searches'
//! answers (`trial`), latency at the found rate (`latency`), and one
//! campaign's results per IP version and size ([`Rfc2544Summary`]).

pub mod frame;
pub mod latency;
pub mod trial;

pub use frame::TestFrame;
pub use latency::Latency;
pub use trial::{
    BackToBackResult, FrameLossPoint, ThroughputResult, TrialKind, TrialOutcome, TrialRecord,
};

use frame::LayerRates;
use serde::{Deserialize, Serialize};

/// The four benchmarks of RFC 2544 §26 wirebench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    Throughput,
    Latency,
    FrameLoss,
    BackToBack,
}

impl Test {
    pub const ALL: [Test; 4] = [
        Test::Throughput,
        Test::Latency,
        Test::FrameLoss,
        Test::BackToBack,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Test::Throughput => "throughput",
            Test::Latency => "latency",
            Test::FrameLoss => "frame_loss",
            Test::BackToBack => "back_to_back",
        }
    }
    /// The test of a name as [`Test::name`] writes it (`-` for `_` allowed).
    pub fn parse(s: &str) -> Option<Test> {
        Test::ALL
            .into_iter()
            .find(|t| t.name() == s.replace('-', "_"))
    }
}

/// Everything measured for one IP version and frame size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    pub ip: u8,
    /// The frame size or IMIX tested.
    pub spec: TestFrame,
    /// Line rate of the frame actually sent (a mix: of its mean frame),
    /// when the link rate is known.
    pub line_fps: Option<f64>,
    pub throughput: Option<ThroughputResult>,
    /// The throughput in bit/s at every layer.
    pub rates: Option<LayerRates>,
    /// Throughput as a percentage of the line rate.
    pub pct_of_line: Option<f64>,
    /// From every frame of the verification trial at the found rate.
    pub latency: Option<Latency>,
    pub frame_loss: Vec<FrameLossPoint>,
    pub back_to_back: Option<BackToBackResult>,
    /// Trials stored for this size, all tests.
    pub trials: u32,
    /// Search trials in order, for the record.
    pub throughput_trials: Vec<TrialRecord>,
}

/// An RFC 2544 campaign's results, recomputed from its stored trials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rfc2544Summary {
    pub campaign_id: i64,
    pub name: String,
    pub target: String,
    pub link_bps: Option<f64>,
    pub mtu: u32,
    pub trial_s: f64,
    pub loss_threshold: f64,
    pub resolution: f64,
    pub tests: Vec<Test>,
    pub sizes: Vec<SizeResult>,
    /// Wall-clock seconds from the campaign's first trial start to its last trial end.
    pub elapsed_s: Option<f64>,
}
