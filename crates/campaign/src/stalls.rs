//! Host stalls in a test-bed run, and `repeat_stalled`: whether a run
//! during which the link emulators counted a stall is set aside and made
//! again.
//!
//! A stall (a link emulator's nap ending a ms or more after a frame was
//! due, `HOST_STALL_NS` in the test-bed) means the host held the
//! emulator's CPU: every figure of that run carries it, and no setting of
//! the run can avoid it. The runner stores such a run `failed` with an
//! error saying so and makes it again; the store keeps one row per
//! (scenario, repetition) and a retry replaces a failed row, so the
//! attempts set aside travel inside the next attempt's counters document
//! ([`SET_ASIDE_KEY`]) with their result and counters, and nothing
//! measured is dropped.

use crate::store::RunRow;
use serde_json::{json, Value};

/// How the error of a run set aside for a stall begins.
pub const REPEAT_ERROR_PREFIX: &str = "repeated (repeat_stalled)";

/// Key of a run's counters document listing the earlier attempts of the
/// same planned run that were set aside for a stall, oldest first.
pub const SET_ASIDE_KEY: &str = "stalled_attempts";

/// Stalls the link emulators counted over a run and their summed lateness
/// in seconds, from its counters document's `hops` (no hops: none).
pub fn run_stalls(counters: &Value) -> (u64, f64) {
    let hops = counters.get("hops").and_then(Value::as_array);
    hops.into_iter()
        .flatten()
        .filter_map(|h| {
            let n = h.get("stalls").and_then(Value::as_u64).filter(|n| *n > 0)?;
            let s = h.get("stall_s").and_then(Value::as_f64).unwrap_or(0.0);
            Some((n, s))
        })
        .fold((0, 0.0), |(n, s), (a, b)| (n + a, s + b))
}

/// The error a run that ended ok is stored with when it is set aside to
/// be made again: its hops counted a stall and the planned run has been
/// repeated `repeats_done` times, fewer than `budget` (`repeat_stalled`).
/// None: keep it (no stall, or the budget is spent, so the last attempt
/// is stored ok and its figure is never lost).
pub fn repeat_reason(counters: &Value, repeats_done: u32, budget: u32) -> Option<String> {
    if repeats_done >= budget {
        return None;
    }
    let (n, s) = run_stalls(counters);
    (n > 0).then(|| {
        format!(
            "{REPEAT_ERROR_PREFIX}: the link emulators stalled {n} time{} ({:.1} ms in all): the host held their CPU",
            if n == 1 { "" } else { "s" },
            s * 1e3
        )
    })
}

/// Whether a stored run is an attempt set aside for a stall (and so its
/// row is carried into the next attempt's counters when that replaces it).
pub fn is_set_aside(row: &RunRow) -> bool {
    row.status == crate::store::RunStatus::Failed
        && row
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with(REPEAT_ERROR_PREFIX))
}

/// The attempts set aside before the run that replaces `row`: those `row`
/// carried, then `row` itself (its error, times, command, result and
/// counters), oldest first.
pub fn set_aside(row: &RunRow) -> Vec<Value> {
    let mut counters = row.counters.clone();
    let mut out = counters
        .as_mut()
        .and_then(Value::as_object_mut)
        .and_then(|o| o.remove(SET_ASIDE_KEY))
        .and_then(|v| match v {
            Value::Array(a) => Some(a),
            _ => None,
        })
        .unwrap_or_default();
    out.push(json!({
        "error": row.error,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "command": row.command,
        "result": row.result,
        "counters": counters,
    }));
    out
}

/// How many attempts were set aside for a stall before the run with
/// these counters.
pub fn set_aside_count(counters: &Value) -> usize {
    counters
        .get(SET_ASIDE_KEY)
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RunStatus;

    fn counters(stalls: &[(u64, f64)]) -> Value {
        let hops: Vec<Value> = stalls
            .iter()
            .map(|(n, s)| {
                json!({"from": "a", "to": "b", "frames": 10, "queueing_s": 0.0,
                       "serialisation_s": 1e-5, "propagation_s": 0.0,
                       "stalls": n, "stall_s": s})
            })
            .collect();
        json!({ "hops": hops })
    }

    #[test]
    fn stalls_are_summed_over_hops() {
        assert_eq!(run_stalls(&json!({})), (0, 0.0));
        assert_eq!(run_stalls(&counters(&[(0, 0.0), (0, 0.0)])), (0, 0.0));
        let (n, s) = run_stalls(&counters(&[(2, 0.003), (0, 0.0), (1, 0.0018)]));
        assert_eq!(n, 3);
        assert!((s - 0.0048).abs() < 1e-12, "{s}");
        // Counters written before stalls were counted have no such keys.
        let old = json!({"hops": [{"from": "a", "to": "b", "frames": 3}]});
        assert_eq!(run_stalls(&old), (0, 0.0));
    }

    #[test]
    fn a_stalled_run_is_repeated_within_its_budget() {
        let c = counters(&[(2, 0.003), (1, 0.0018)]);
        let why = repeat_reason(&c, 0, 1).expect("repeated");
        assert_eq!(
            why,
            "repeated (repeat_stalled): the link emulators stalled 3 times (4.8 ms in all): the host held their CPU"
        );
        assert!(repeat_reason(&counters(&[(1, 0.002)]), 1, 2)
            .expect("second repeat")
            .contains("stalled 1 time (2.0 ms"));
        // The last allowed attempt is kept, stalled or not.
        assert_eq!(repeat_reason(&c, 1, 1), None);
        assert_eq!(repeat_reason(&c, 5, 5), None);
        // Off, or nothing stalled: kept.
        assert_eq!(repeat_reason(&c, 0, 0), None);
        assert_eq!(repeat_reason(&counters(&[(0, 0.0)]), 0, 3), None);
        assert_eq!(repeat_reason(&json!({}), 0, 3), None);
    }

    fn row(error: Option<&str>, status: RunStatus, counters: Option<Value>) -> RunRow {
        RunRow {
            id: 1,
            campaign_id: 1,
            scenario_key: "k".into(),
            axes: Default::default(),
            repetition: 0,
            status,
            result: Some(json!({"schema": "wirebench.result/1"})),
            counters,
            command: "send".into(),
            error: error.map(str::to_string),
            started_at: "t0".into(),
            ended_at: "t1".into(),
        }
    }

    #[test]
    fn set_aside_attempts_accumulate_oldest_first() {
        let why = repeat_reason(&counters(&[(1, 0.002)]), 0, 2).unwrap();
        let first = row(Some(&why), RunStatus::Failed, Some(counters(&[(1, 0.002)])));
        assert!(is_set_aside(&first));
        assert!(!is_set_aside(&row(
            Some("partial run"),
            RunStatus::Failed,
            None
        )));
        assert!(!is_set_aside(&row(None, RunStatus::Ok, None)));
        let carried = set_aside(&first);
        assert_eq!(carried.len(), 1);
        assert_eq!(carried[0]["error"], json!(why));
        assert_eq!(carried[0]["counters"]["hops"][0]["stalls"], json!(1));
        assert_eq!(carried[0]["result"]["schema"], json!("wirebench.result/1"));
        // The second attempt stalled too: it carries the first, and the
        // third carries both, the first not nested inside the second.
        let mut c2 = counters(&[(4, 0.01)]);
        c2[SET_ASIDE_KEY] = json!(carried);
        assert_eq!(set_aside_count(&c2), 1);
        let second = row(Some(&why), RunStatus::Failed, Some(c2));
        let both = set_aside(&second);
        assert_eq!(both.len(), 2);
        assert_eq!(both[0]["counters"]["hops"][0]["stalls"], json!(1));
        assert_eq!(both[1]["counters"]["hops"][0]["stalls"], json!(4));
        assert!(both[1]["counters"].get(SET_ASIDE_KEY).is_none());
        assert_eq!(set_aside_count(&json!({})), 0);
    }
}
