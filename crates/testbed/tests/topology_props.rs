//! Property tests of topology files (issue #9, "Tests"): `testbed up FILE`
//! takes any file, so any text must give a topology that passes the same
//! checks `up` applies, or a typed `TestbedError` naming the file (and,
//! for a bad field, its line and name), never a panic. Nothing is built:
//! these run without root in well under a second.

use proptest::prelude::*;
use std::path::Path;
use wirebench_testbed::error::TestbedError;
use wirebench_testbed::spec::{parse_topology, LinkOpts};

/// Node names: good ones, and ones the checks must refuse.
const NAMES: &[&str] = &[
    "a",
    "b",
    "c",
    "r1",
    "r2",
    "sw",
    "",
    "a b",
    "-x",
    "名前",
    "averyveryverylongnodenamethatisfartoolong",
];

const KINDS: &[&str] = &["\"host\"", "\"router\"", "\"switch\"", "\"hub\"", "1"];

/// Values of every link and node field, with the edges of their ranges
/// and the wrong TOML types.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "68",
    "1500",
    "9000",
    "65536",
    "1000",
    "29000",
    "9223372036854775807",
    "1e308",
    "nan",
    "true",
    "\"100mbit\"",
    "\"1gbit\"",
    "\"10Mbit/s\"",
    "\"100mbps\"",
    "\"1e400bit\"",
    "\"-5mbit\"",
    "\"10ms\"",
    "\"250us\"",
    "\"61s\"",
    "\"nanms\"",
    "\"0.5%\"",
    "\"101%\"",
    "0.5",
    "\"\"",
    "[]",
    "{ a = 1 }",
];

const LINK_KEYS: &[&str] = &[
    "mtu", "rate", "offloads", "delay", "jitter", "loss", "speed",
];
const NODE_KEYS: &[&str] = &["forward_pps", "txqueuelen", "colour"];

fn kv(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        proptest::sample::select(keys),
        proptest::sample::select(VALUES),
    )
        .prop_map(|(k, v)| format!("{k} = {v}"))
}

/// The key of a `key = value` line.
fn key_of(line: &str) -> &str {
    line.split('=').next().unwrap_or("").trim()
}

/// Up to `n` field lines, each key once (TOML refuses a key given twice).
fn fields(keys: &'static [&'static str], n: usize) -> impl Strategy<Value = Vec<String>> {
    proptest::collection::btree_map(
        proptest::sample::select(keys),
        proptest::sample::select(VALUES),
        0..n,
    )
    .prop_map(|m| m.into_iter().map(|(k, v)| format!("{k} = {v}")).collect())
}

fn node() -> impl Strategy<Value = String> {
    (
        proptest::sample::select(NAMES),
        proptest::sample::select(KINDS),
        fields(NODE_KEYS, 2),
    )
        .prop_map(|(name, kind, extra)| {
            let mut l = vec!["[[node]]".to_string(), format!("name = {name:?}")];
            l.push(format!("kind = {kind}"));
            l.extend(extra);
            l.join("\n")
        })
}

fn link() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(proptest::sample::select(NAMES), 0..4),
        fields(LINK_KEYS, 3),
    )
        .prop_map(|(eps, extra)| {
            let eps: Vec<String> = eps.iter().map(|e| format!("{e:?}")).collect();
            let mut l = vec![
                "[[link]]".to_string(),
                format!("endpoints = [{}]", eps.join(", ")),
            ];
            l.extend(extra);
            l.join("\n")
        })
}

/// Topologies that are fine, as tables (header first).
const BASES: &[&[&str]] = &[
    &[
        "[[node]]\nname = \"a\"\nkind = \"host\"",
        "[[node]]\nname = \"b\"\nkind = \"host\"",
        "[[link]]\nendpoints = [\"a\", \"b\"]",
    ],
    &[
        "[defaults]\nmtu = 1500",
        "[[node]]\nname = \"a\"\nkind = \"host\"",
        "[[node]]\nname = \"r1\"\nkind = \"router\"",
        "[[node]]\nname = \"b\"\nkind = \"host\"",
        "[[link]]\nendpoints = [\"a\", \"r1\"]",
        "[[link]]\nendpoints = [\"r1\", \"b\"]",
    ],
    &[
        "[[node]]\nname = \"a\"\nkind = \"host\"",
        "[[node]]\nname = \"b\"\nkind = \"host\"",
        "[[node]]\nname = \"c\"\nkind = \"host\"",
        "[[node]]\nname = \"sw\"\nkind = \"switch\"",
        "[[link]]\nendpoints = [\"a\", \"sw\"]",
        "[[link]]\nendpoints = [\"b\", \"sw\"]",
        "[[link]]\nendpoints = [\"c\", \"sw\"]",
    ],
];

/// Field lines that are fine in a link or [defaults] (or a router).
const GOOD_FIELDS: &[&str] = &[
    "mtu = 9000",
    "rate = \"100mbit\"",
    "rate = 1000000",
    "delay = \"10ms\"",
    "jitter = \"1ms\"",
    "loss = \"0.5%\"",
    "loss = 0.01",
    "offloads = true",
    "forward_pps = 29000",
    "txqueuelen = 1000",
];

/// A good topology changed a little: field lines (good or wild) added to
/// its tables, and now and then a wild node or link table.
fn mutated() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        3 => proptest::sample::select(GOOD_FIELDS).prop_map(str::to_string),
        1 => kv(LINK_KEYS),
        1 => kv(NODE_KEYS),
    ];
    (
        proptest::sample::select(BASES),
        proptest::collection::vec((any::<prop::sample::Index>(), field), 0..3),
        proptest::option::of(prop_oneof![node(), link()]),
    )
        .prop_map(|(base, fields, extra)| {
            let mut tables: Vec<Vec<String>> = base
                .iter()
                .map(|t| t.lines().map(str::to_string).collect())
                .collect();
            for (i, f) in fields {
                let t = &mut tables[i.index(base.len())];
                if !t.iter().any(|l| key_of(l) == key_of(&f)) {
                    t.push(f);
                }
            }
            let mut out: Vec<String> = tables.into_iter().map(|t| t.join("\n")).collect();
            out.extend(extra);
            out.join("\n")
        })
}

/// A topology-shaped file: sometimes [defaults], nodes, links.
fn topology() -> impl Strategy<Value = String> {
    (
        proptest::option::of(fields(LINK_KEYS, 3)),
        proptest::collection::vec(node(), 0..5),
        proptest::collection::vec(link(), 0..5),
    )
        .prop_map(|(defaults, nodes, links)| {
            let mut out = Vec::new();
            if let Some(d) = defaults {
                out.push("[defaults]".to_string());
                out.extend(d);
            }
            out.extend(nodes);
            out.extend(links);
            out.join("\n")
        })
}

/// A line-and-field error names the file, a line of it and a field that
/// is written on that line (or the table it belongs to starts there);
/// any other error names the file.
fn check_error(text: &str, e: &TestbedError) -> Result<(), TestCaseError> {
    let shown = e.to_string();
    match e {
        TestbedError::File {
            path,
            line,
            field,
            msg,
        } => {
            prop_assert_eq!(path.as_path(), Path::new("t.toml"));
            prop_assert!(
                shown.starts_with(&format!("t.toml:{line}: field `{field}`: ")),
                "{shown}"
            );
            let n = text.lines().count().max(1);
            prop_assert!((1..=n).contains(line), "{shown}: line {line} of {n}");
            prop_assert!(!field.is_empty() && !msg.is_empty(), "{shown}");
            let l = text.lines().nth(line - 1).unwrap_or("");
            // Syntax errors name the line's text (escaped if it is only
            // blanks or control characters).
            let escaped = l.escape_debug().to_string();
            prop_assert!(
                l.contains(field.as_str())
                    || escaped.contains(field.as_str())
                    || field == "(empty line)"
                    || l.trim_start().starts_with('['),
                "{shown}: line {line} is {l:?}"
            );
        }
        TestbedError::Invalid(m) => {
            prop_assert!(m.contains("t.toml"), "{shown}");
        }
        other => prop_assert!(false, "unexpected error kind: {other:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any text, and topology-shaped files of random nodes, links and
    /// values: a topology that passes validate() (what `up` checks before
    /// it creates anything), or a typed error naming file, line and field.
    #[test]
    fn any_topology_file(text in prop_oneof![1 => ".{0,120}", 2 => topology(), 3 => mutated()]) {
        let o = LinkOpts::default();
        match parse_topology(&text, Path::new("t.toml"), &o) {
            Ok(spec) => {
                prop_assert!(spec.validate().is_ok(), "{text}");
                for l in &spec.links {
                    prop_assert!(l.endpoints.iter().all(|e| spec.node(e).is_some()));
                }
            }
            Err(e) => check_error(&text, &e)?,
        }
    }
}
