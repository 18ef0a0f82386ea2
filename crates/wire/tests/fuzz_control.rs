//! Mutation fuzzing of the control-message decoder (issue #30 item 6): a
//! receiver decodes these lines from anyone who reaches its control port.
//! Starting from the corpus kept in tests/corpus/control.jsonl (one valid
//! line of every message, and the Hello whose `interval_ms` once wrapped),
//! 50 000 seeded mutations must each decode to a message or a typed error,
//! never a panic; a decoded message must pass or fail the receiver's
//! limits without a panic and read back as itself.

use std::time::Instant;
use wirebench_testkit::fuzz;
use wirebench_wire::control::{ControlError, ControlMsg};
use wirebench_wire::limits;

const CORPUS: &str = include_str!("corpus/control.jsonl");

fn check(input: &[u8]) {
    // As the receiver reads a line (engine ctl.rs): bytes made text lossily.
    let line = String::from_utf8_lossy(input);
    match ControlMsg::from_line(&line) {
        Ok(m) => {
            match &m {
                ControlMsg::Hello { flows, .. } => {
                    let _ = limits::check_flows(flows);
                }
                ControlMsg::ClockOffset {
                    offset_ns,
                    error_ns,
                } => {
                    let _ = limits::check_clock(*offset_ns, *error_ns);
                }
                _ => {}
            }
            let back = ControlMsg::from_line(&m.to_line());
            assert!(back.is_ok(), "{line:?} did not read back");
        }
        Err(ControlError::TooLong(_) | ControlError::Malformed(_)) => {}
    }
}

#[test]
fn every_seed_line_decodes() {
    let corpus = fuzz::corpus_lines(CORPUS);
    assert!(corpus.len() >= 15, "{} seed lines", corpus.len());
    for c in &corpus {
        let line = std::str::from_utf8(c).unwrap();
        assert!(ControlMsg::from_line(line).is_ok(), "{line}");
    }
}

#[test]
fn fifty_thousand_mutated_control_lines_never_panic() {
    let corpus = fuzz::corpus_lines(CORPUS);
    let t0 = Instant::now();
    let ran = fuzz::run(&corpus, 0x5eed_c0de, 50_000, check);
    assert!(ran.inputs >= 50_000);
    eprintln!(
        "fuzz: {} control lines in {:.2} s",
        ran.inputs,
        t0.elapsed().as_secs_f64()
    );
}
