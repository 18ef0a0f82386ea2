//! Property tests of the script parsers (issue #9, "Tests"): `--script`
//! takes any file, so any text must give a flow list or a typed
//! `ScriptError` naming the file and the line (and the option or key)
//! at fault, never a panic; a flow that parses must also be a model the
//! generator can run. Bounded to a few hundred cases each (about a
//! second for the file).

use proptest::prelude::*;
use wirebench_model::script::{parse_ditg, parse_toml, ScriptError, TOML_KEYS};
use wirebench_model::{MAX_GAP_NS, MAX_PAYLOAD, MIN_PAYLOAD};

/// ITGSend options (supported, refused and unknown ones).
const OPTIONS: &[&str] = &[
    "-a", "-rp", "-T", "-m", "-t", "-z", "-k", "-d", "-b", "-D", "-f", "-x", "-h", "-VAD", "-l",
    "-L", "-X", "-Ft", "-Fs", "-B", "VoIP", "DNS", "Telnet", "Quake3", "CSa", "CSi", "-C", "-c",
    "-E", "-e", "-U", "-u", "-N", "-n", "-V", "-v", "-O", "-o", "-Y", "-y", "-G", "-g", "-W", "-w",
    "-sp", "-sa", "-j", "-poll", "-i", "ICMP", "-q", "--", "-",
];

/// Values, with the numbers a careless parser mishandles.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "100",
    "512",
    "1000",
    "65535",
    "65536",
    "4294967296",
    "18446744073709551616",
    "1e308",
    "1e-300",
    "NaN",
    "inf",
    "-inf",
    "0.5",
    "0x10",
    "UDP",
    "tcp",
    "icmp",
    "owdm",
    "rttm",
    "RTP",
    "CRTP",
    "G.711.1",
    "G.729.2",
    "G.7",
    "10.0.0.2",
    "::1",
    "/dev/zero",
    "/nonexistent/x",
    "C",
    "E",
    "u",
    "é",
    "",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(OPTIONS).prop_map(str::to_string),
        4 => proptest::sample::select(VALUES).prop_map(str::to_string),
        1 => "[^ \t\r\n#]{1,6}",
    ]
}

/// A script line: tokens, sometimes a comment, sometimes blank.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::collection::vec(token(), 0..10).prop_map(|t| t.join(" ")),
        1 => Just(String::new()),
        1 => ".{0,20}".prop_map(|c| format!("# {c}")),
        1 => (proptest::collection::vec(token(), 1..6), ".{0,10}")
            .prop_map(|(t, c)| format!("{} #{c}", t.join(" "))),
    ]
}

/// The tokens of line `n` (1-based) the way the D-ITG parser sees them.
fn tokens_of(text: &str, n: usize) -> Vec<&str> {
    text.lines()
        .nth(n.wrapping_sub(1))
        .map(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect()
        })
        .unwrap_or_default()
}

/// A flow that parsed is a model the generator runs: sizes within the
/// payload range, gaps within the longest gap.
fn runs(spec: &wirebench_model::FlowSpec) -> Result<(), TestCaseError> {
    prop_assert!(spec.validate().is_ok(), "{spec:?}");
    let mut g = spec
        .generator(7)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    for _ in 0..64 {
        let d = g.next();
        prop_assert!(d.gap_ns <= MAX_GAP_NS, "gap {} in {spec:?}", d.gap_ns);
        prop_assert!(
            (MIN_PAYLOAD..=MAX_PAYLOAD).contains(&d.size),
            "size {} in {spec:?}",
            d.size
        );
    }
    Ok(())
}

/// A D-ITG error names the script and a line with tokens on it, and the
/// option it names is one of that line's tokens (or the burst's `-B`,
/// or the application word whose options are at fault).
fn check_ditg_error(text: &str, e: &ScriptError) -> Result<(), TestCaseError> {
    prop_assert_eq!(&e.origin, "s.ditg");
    let shown = e.to_string();
    prop_assert!(
        shown.starts_with(&format!("s.ditg:{}: ", e.line)),
        "{shown}"
    );
    if e.line == 0 {
        prop_assert_eq!(&e.reason, "no flows in script");
        prop_assert!(text.lines().all(|l| tokens_of(l, 1).is_empty()));
        return Ok(());
    }
    let toks = tokens_of(text, e.line);
    prop_assert!(!toks.is_empty(), "{shown}: line {} has no tokens", e.line);
    prop_assert!(!e.reason.is_empty(), "{shown}");
    if !e.option.is_empty() {
        prop_assert!(
            toks.contains(&e.option.as_str()),
            "{shown}: option {:?} is not on line {}: {toks:?}",
            e.option,
            e.line
        );
    }
    Ok(())
}

/// Lines that parse, and lines that do not with the option they must name.
const GOOD: &[&str] = &[
    "-a 10.0.0.2 -rp 9001 -T UDP -C 100 -c 512 -t 10000",
    "-a 10.0.0.2 -rp 9002 VoIP -x G.729.2 -h CRTP -VAD -t 10000 -m rttm",
    "-a 10.0.0.3 -T TCP -E 50 -u 100 500 -d 2000 -z 300",
    "-a ::1 -C 10 -B C 100 C 200 -t 1000",
    "DNS -t 1000",
    "-a 127.0.0.1 -O 1000 -n 500 50 -k 10",
];
const BAD: &[(&str, &str)] = &[
    ("-a 10.0.0.2 -C", "-C"),
    ("-a 10.0.0.2 -C 0", "-C"),
    ("-a 10.0.0.2 -C 10 -E 10", "-E"),
    ("-a 10.0.0.2 -rp 65536", "-rp"),
    ("-a 10.0.0.2 -c 10", "-c"),
    ("-a 10.0.0.2 -u 600 500", "-u"),
    ("-a 10.0.0.2 -T SCTP", "-T"),
    ("-a 10.0.0.2 -Ft /dev/zero", "-Ft"),
    ("-a 10.0.0.2 -l log", "-l"),
    ("-a 10.0.0.2 -C NaN", "-C"),
    ("-a 10.0.0.2 -B C NaN C 100", "-B"),
    ("-a 10.0.0.2 -B C 100 E inf", "-B"),
    ("-a 10.0.0.2 --frobnicate", "--frobnicate"),
    ("VoIP -x G.7", "-x"),
    ("VoIP DNS", "DNS"),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any text at all: a typed error or flows, never a panic.
    #[test]
    fn ditg_any_text(text in ".{0,200}") {
        match parse_ditg(&text, "s.ditg") {
            Ok(flows) => for f in &flows { runs(&f.spec)?; },
            Err(e) => check_ditg_error(&text, &e)?,
        }
    }

    /// Lines of ITGSend options and values in any order: every flow that
    /// parses runs, every refusal names its line and option.
    #[test]
    fn ditg_token_soup(lines in proptest::collection::vec(line(), 1..6)) {
        let text = lines.join("\n");
        match parse_ditg(&text, "s.ditg") {
            Ok(flows) => {
                let with_tokens: Vec<usize> = (1..=text.lines().count())
                    .filter(|&n| !tokens_of(&text, n).is_empty())
                    .collect();
                let got: Vec<usize> = flows.iter().map(|f| f.line).collect();
                prop_assert_eq!(got, with_tokens);
                for f in &flows { runs(&f.spec)?; }
            }
            Err(e) => check_ditg_error(&text, &e)?,
        }
    }

    /// Good lines with one bad line among them (and comments and blank
    /// lines around): the error names exactly that line and its option.
    #[test]
    fn ditg_names_the_bad_line(
        before in proptest::collection::vec(
            prop_oneof![proptest::sample::select(GOOD).prop_map(str::to_string),
                        Just(String::new()), Just("# note".to_string())], 0..5),
        bad in proptest::sample::select(BAD),
        after in proptest::collection::vec(proptest::sample::select(GOOD), 0..3),
    ) {
        let n = before.len() + 1;
        let mut lines = before;
        lines.push(bad.0.to_string());
        lines.extend(after.iter().map(|s| s.to_string()));
        let text = lines.join("\n");
        let e = parse_ditg(&text, "s.ditg").unwrap_err();
        prop_assert_eq!(e.line, n, "{}", e);
        prop_assert_eq!(&e.option, bad.1, "{}", e);
        prop_assert!(e.to_string().starts_with(&format!("s.ditg:{n}: {}: ", bad.1)), "{}", e);
    }
}

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(
            &[
                "\"udp\"",
                "\"tcp\"",
                "\"rtt\"",
                "\"owd\"",
                "\"reverse\"",
                "\"voip\"",
                "\"file\"",
                "\"video\"",
                "\"dns\"",
                "\"G.711.1\"",
                "\"constant 10\"",
                "\"exponential 100\"",
                "\"uniform 64 512\"",
                "\"pareto 0 1\"",
                "\"normal 1e308 1\"",
                "\"cauchy 1 -1\"",
                "\"constant NaN\"",
                "\"\"",
                "\"EF\"",
                "\"cubic\"",
                "\"C 10 C 20\"",
                "nan",
                "inf",
                "-inf",
                "1e308",
                "-1",
                "0",
                "1",
                "65536",
                "9223372036854775807",
                "true",
                "false",
                "[]",
                "[1, 2]",
                "{ a = 1 }",
                "1979-05-27",
            ][..]
        )
        .prop_map(str::to_string),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u16>().prop_map(|n| n.to_string()),
        "\"[a-z0-9 .]{0,12}\"",
    ]
}

/// A TOML script: `[[flow]]` tables of random keys and values, and now
/// and then a stray table, a bare key or a broken line.
fn toml_script() -> impl Strategy<Value = String> {
    // The keys of a `[[flow]]` table, and one that is not.
    let keys: Vec<&str> = TOML_KEYS.iter().copied().chain(["speed"]).collect();
    let entry = prop_oneof![
        8 => (proptest::sample::select(keys.clone()), toml_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => Just("[[flow]]".to_string()),
        1 => proptest::sample::select(&["[other]", "[[flows]]", "x = 1", "= 3", "idt =", "[[flow]", "# c", ""][..])
            .prop_map(str::to_string),
    ];
    proptest::collection::vec(
        (
            Just("[[flow]]".to_string()),
            proptest::collection::vec(entry, 0..6),
        ),
        0..4,
    )
    .prop_map(|tables| {
        let mut lines = Vec::new();
        for (h, es) in tables {
            lines.push(h);
            lines.extend(es);
        }
        lines.join("\n")
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any text, and TOML scripts of random keys and values: flows that
    /// run, or an error naming the file, a line of the text (0: the whole
    /// file) and, when it names a key, a line where that key or its
    /// table is.
    #[test]
    fn toml_any_script(text in prop_oneof![".{0,120}", toml_script()]) {
        match parse_toml(&text, "c.toml") {
            Ok(flows) => for f in &flows { runs(&f.spec)?; },
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.starts_with(&format!("c.toml:{}: ", e.line)), "{shown}");
                let n = text.lines().count().max(1);
                prop_assert!(e.line <= n, "{shown}: line {} of {n}", e.line);
                prop_assert!(!e.reason.is_empty(), "{shown}");
                if e.line > 0 && !e.option.is_empty() && e.option != "flow" {
                    let l = text.lines().nth(e.line - 1).unwrap_or("");
                    prop_assert!(
                        l.contains(e.option.as_str()) || l.trim_start().starts_with("[["),
                        "{shown}: line {} is {l:?}", e.line
                    );
                }
            }
        }
    }
}
