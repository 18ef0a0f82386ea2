//! Mutation fuzzing of the agent's request decoding (issue #30 item 6): an
//! agent reads these lines from its controller over SSH. Starting from the
//! corpus in tests/corpus/requests.jsonl (one line of every request),
//! 50 000 seeded mutations must each decode to a request or a typed error,
//! never a panic, and a decoded request must read back as itself. The
//! requests are decoded only, never executed: a mutated one could name
//! any address or interface.

use wirebench_agent::proto::Request;
use wirebench_testkit::fuzz;

const CORPUS: &str = include_str!("corpus/requests.jsonl");

fn check(input: &[u8]) {
    let Ok(line) = std::str::from_utf8(input) else {
        return;
    };
    if let Ok(req) = serde_json::from_str::<Request>(line) {
        let text = serde_json::to_string(&req).expect("a request serialises");
        let back: Request = serde_json::from_str(&text).expect("a request reads back");
        assert_eq!(back, req);
    }
}

#[test]
fn every_seed_request_decodes() {
    let corpus = fuzz::corpus_lines(CORPUS);
    assert!(corpus.len() >= 17);
    for c in &corpus {
        let line = std::str::from_utf8(c).unwrap();
        assert!(serde_json::from_str::<Request>(line).is_ok(), "{line}");
    }
}

#[test]
fn fifty_thousand_mutated_requests_never_panic() {
    let corpus = fuzz::corpus_lines(CORPUS);
    let ran = fuzz::run(&corpus, 0xa9e7_5eed, 50_000, check);
    assert!(ran.inputs >= 50_000);
}
