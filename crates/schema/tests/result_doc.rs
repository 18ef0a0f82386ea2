//! The result document is a contract with stored runs: documents written by
//! the engine before the typed contract (`data/result-v1-*.json`, real
//! loopback runs: UDP, VoIP and TCP flows with intervals; an RTT run) must
//! read into `ResultDoc` and write back with every key and value intact.

use serde_json::Value;
use wirebench_schema::result::ResultDoc;
use wirebench_schema::{IpVersion, MeterMode, Transport};

fn stored(name: &str) -> Value {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every key path of a JSON value, arrays walked element by element.
fn paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{k}");
                out.push(p.clone());
                paths(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                paths(x, format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Keys added to the document after the stored ones were written; an old
/// document reads them as their default (0 or ""), and writes them back so.
const ADDED_SINCE_STORED: &[&str] = &[
    "forged",
    "implausible_delays",
    "os",
    "send_path",
    "rx_timestamps",
    "clamped_draws",
    "sender_host",
    "sender_host_drops",
    "direction",
    "start_phase_s",
    "steal",
];

/// Removes the keys of `ADDED_SINCE_STORED` that hold their default value.
fn strip_added(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, x| {
                !(ADDED_SINCE_STORED.contains(&k.as_str())
                    && (x == &Value::from(0)
                        || x == &Value::from(0.0)
                        || x == &Value::from("")
                        || (k == "direction" && x == &Value::from("forward"))))
            });
            m.values_mut().for_each(strip_added);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_added),
        _ => {}
    }
}

fn round_trip(name: &str) -> ResultDoc {
    let original = stored(name);
    let doc: ResultDoc = serde_json::from_value(original.clone()).unwrap();
    let mut again = serde_json::to_value(&doc).unwrap();
    strip_added(&mut again);
    let (mut want, mut got) = (Vec::new(), Vec::new());
    paths(&original, String::new(), &mut want);
    paths(&again, String::new(), &mut got);
    let missing: Vec<_> = want.iter().filter(|p| !got.contains(p)).collect();
    let added: Vec<_> = got.iter().filter(|p| !want.contains(p)).collect();
    assert!(missing.is_empty(), "{name}: keys lost: {missing:?}");
    assert!(added.is_empty(), "{name}: keys added: {added:?}");
    assert_eq!(again, original, "{name}: a value changed on the way");
    doc
}

#[test]
fn stored_owd_document_reads_and_writes_back_every_key() {
    let doc = round_trip("result-v1-owd.json");
    assert_eq!(doc.meter, MeterMode::Owd);
    let t: Vec<Transport> = doc.flows.iter().map(|f| f.transport).collect();
    assert_eq!(t, [Transport::Udp, Transport::Udp, Transport::Tcp]);
    assert!(doc.flows.iter().all(|f| f.ip_version == IpVersion::V4));
    assert!(doc.flows[1].voip.is_some() && doc.flows[2].tcp.is_some());
    assert!(!doc.flows[0].intervals.is_empty());
    assert_eq!(
        doc.flows[0].received.counts.unique,
        doc.flows[0].sent.packets
    );
}

#[test]
fn stored_rtt_document_reads_and_writes_back_every_key() {
    let doc = round_trip("result-v1-rtt.json");
    assert_eq!(doc.meter, MeterMode::Rtt);
    assert!(doc.flows[0].rtt_s.is_some() && doc.flows[0].rtt_received.is_some());
}

#[test]
fn typed_fields_keep_their_json_spelling() {
    let mut v = stored("result-v1-owd.json");
    v["flows"][0]["ip_version"] = 6.into();
    v["flows"][0]["transport"] = "tcp".into();
    v["meter"] = "rtt".into();
    let doc: ResultDoc = serde_json::from_value(v).unwrap();
    assert_eq!(doc.flows[0].ip_version, IpVersion::V6);
    assert_eq!(doc.flows[0].transport, Transport::Tcp);
    let out = serde_json::to_value(&doc).unwrap();
    assert_eq!(out["flows"][0]["ip_version"], 6);
    assert_eq!(out["flows"][0]["transport"], "tcp");
    assert_eq!(out["meter"], "rtt");
    // Values outside the enums are refused, naming what was wrong.
    for (key, bad) in [("ip_version", Value::from(5)), ("transport", "sctp".into())] {
        let mut v = stored("result-v1-owd.json");
        v["flows"][0][key] = bad;
        let e = serde_json::from_value::<ResultDoc>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("4 or 6") || e.contains("sctp"), "{key}: {e}");
    }
}
