//! RFC 2544 §26-style results tables as text cells, from a campaign's
//! [`Rfc2544Summary`]: the HTML report draws them and the terminal prints
//! them ([`text_tables`]), so the two always agree.

use wirebench_schema::rfc2544::{Rfc2544Summary, SizeResult, Test};

fn us(s: f64) -> String {
    format!("{:.1}", s * 1e6)
}

/// One RFC 2544 §26-style results table as text cells, shared by the
/// terminal summary and the HTML report so the two always agree.
#[derive(Debug, Clone, PartialEq)]
pub struct RfcTable {
    /// The test the table reports.
    pub test: Test,
    /// Which table: `throughput`, `latency`, `frame_loss`, `back_to_back`,
    /// or `ip_side_by_side` (RFC 5180 / RFC 8219: the two stacks' throughput
    /// and latency per frame size in one row).
    pub id: &'static str,
    /// How many leading columns name the row (IP and frame size, or frame size).
    pub lead: usize,
    /// The caption: test, RFC section and the search's settings.
    pub title: String,
    /// Column names; the first `lead` name the row.
    pub header: Vec<String>,
    /// One row per size (or per frame size, side by side), as text.
    pub rows: Vec<Vec<String>>,
}

/// The frame size column: the nominal size, and the size sent when the
/// probe header made it grow; an IMIX with its mix and mean frame.
pub fn size_label(r: &SizeResult) -> String {
    r.spec.label()
}

/// A table of one row per size that has a result, led by IP and frame size.
fn per_size(
    s: &Rfc2544Summary,
    test: Test,
    title: String,
    columns: &[&str],
    cells: impl Fn(&SizeResult) -> Option<Vec<String>>,
) -> RfcTable {
    let mut header = vec!["IP".to_string(), "frame B".to_string()];
    header.extend(columns.iter().map(|c| c.to_string()));
    let rows = s
        .sizes
        .iter()
        .filter_map(|r| {
            let mut row = vec![format!("IPv{}", r.ip), size_label(r)];
            row.extend(cells(r)?);
            Some(row)
        })
        .collect();
    RfcTable {
        test,
        id: test.name(),
        lead: 2,
        title,
        header,
        rows,
    }
}

/// IPv4 and IPv6 side by side (RFC 5180 §5 / RFC 8219 report the two stacks
/// next to each other): per frame size, each stack's throughput, % of the
/// line rate, latency (RFC figure) and IPv6's throughput as % of IPv4's.
/// None unless both were searched.
fn ip_side_by_side(s: &Rfc2544Summary) -> Option<RfcTable> {
    let find = |ip: u8, key: &str| {
        s.sizes
            .iter()
            .find(|r| r.ip == ip && r.spec.key() == key && r.throughput.is_some())
    };
    let mut keys: Vec<String> = Vec::new();
    for r in &s.sizes {
        let k = r.spec.key();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let latency = s.tests.contains(&Test::Latency);
    let mut header: Vec<String> = [
        "frame B",
        "IPv4 frames/s",
        "IPv6 frames/s",
        "IPv4 % of line",
        "IPv6 % of line",
        "IPv6 / IPv4 %",
    ]
    .map(String::from)
    .to_vec();
    if latency {
        header.extend(["IPv4 latency µs", "IPv6 latency µs"].map(String::from));
    }
    let mut rows = Vec::new();
    for k in keys {
        let (Some(a), Some(b)) = (find(4, &k), find(6, &k)) else {
            continue;
        };
        let (Some(ta), Some(tb)) = (&a.throughput, &b.throughput) else {
            continue;
        };
        let pct = |r: &SizeResult| {
            r.pct_of_line
                .map(|p| format!("{p:.2}"))
                .unwrap_or_else(|| "-".into())
        };
        let mut row = vec![
            k.clone(),
            format!("{:.0}", ta.fps),
            format!("{:.0}", tb.fps),
            pct(a),
            pct(b),
            if ta.fps > 0.0 {
                format!("{:.1}", 100.0 * tb.fps / ta.fps)
            } else {
                "-".into()
            },
        ];
        if latency {
            let lat = |r: &SizeResult| {
                r.latency
                    .as_ref()
                    .map(|l| us(l.rfc2544_s))
                    .unwrap_or_else(|| "-".into())
            };
            row.extend([lat(a), lat(b)]);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return None;
    }
    Some(RfcTable {
        test: Test::Throughput,
        id: "ip_side_by_side",
        lead: 1,
        title: "IPv4 and IPv6 side by side (RFC 5180 §5, RFC 8219; a size is the nominal frame: IPv6's headers make 64 B frames 90 B, IPv4's 70 B)".into(),
        header,
        rows,
    })
}

/// The RFC 2544 §26 tables of the tests the campaign ran: throughput (fps,
/// % of line rate, bit/s at each layer), latency at that rate, frame-loss
/// rate per offered load and back-to-back.
pub fn tables(s: &Rfc2544Summary) -> Vec<RfcTable> {
    use crate::text::si;
    let mut out = Vec::new();
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map(f).unwrap_or_else(|| "-".into());
    if s.tests.contains(&Test::Throughput) {
        let title = format!(
            "Throughput (RFC 2544 §26.1, loss ≤ {} %, resolution {} % of the line rate, {} s trials)",
            s.loss_threshold * 100.0,
            s.resolution * 100.0,
            s.trial_s
        );
        let columns = [
            "frames/s",
            "% of line",
            "line rate fps",
            "payload",
            "IP",
            "Ethernet",
            "wire",
            "trials",
            "note",
        ];
        out.push(per_size(s, Test::Throughput, title, &columns, |r| {
            let t = r.throughput.as_ref()?;
            let rates = r.rates.unwrap_or(r.spec.rates(t.fps));
            let note: Vec<&str> = [
                (!t.verified, "not verified"),
                (!t.converged, "max trials reached"),
                (t.tester_limited, "tester-bound"),
            ]
            .into_iter()
            .filter_map(|(on, n)| on.then_some(n))
            .collect();
            Some(vec![
                format!("{:.0}", t.fps),
                opt(r.pct_of_line, &|p| format!("{p:.2}")),
                opt(r.line_fps, &|l| format!("{l:.0}")),
                si(rates.payload_bps, "bit/s"),
                si(rates.ip_bps, "bit/s"),
                si(rates.ethernet_bps, "bit/s"),
                si(rates.wire_bps, "bit/s"),
                t.trials.to_string(),
                note.join(", "),
            ])
        }));
        out.extend(ip_side_by_side(s));
    }
    if s.tests.contains(&Test::Latency) {
        let title = "Latency at the throughput rate (RFC 2544 §26.2; every frame of the verification trial, one-way, µs)".to_string();
        let columns = [
            "frames",
            "RFC 2544 (mean)",
            "min",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "PDV",
        ];
        out.push(per_size(s, Test::Latency, title, &columns, |r| {
            let l = r.latency.as_ref()?;
            let mut row = vec![l.packets.to_string()];
            row.extend(
                [
                    l.rfc2544_s,
                    l.min_s,
                    l.p50_s,
                    l.p90_s,
                    l.p99_s,
                    l.p999_s,
                    l.max_s,
                    l.pdv_s,
                ]
                .map(us),
            );
            Some(row)
        }));
    }
    if s.tests.contains(&Test::FrameLoss) {
        let title =
            "Frame-loss rate (RFC 2544 §26.3; loss % at each offered load, % of the line rate)"
                .to_string();
        let mut loads: Vec<u32> = s
            .sizes
            .iter()
            .flat_map(|r| r.frame_loss.iter().map(|p| p.percent))
            .collect();
        loads.sort_unstable_by(|a, b| b.cmp(a));
        loads.dedup();
        let columns: Vec<String> = loads.iter().map(|l| format!("{l} %")).collect();
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        out.push(per_size(s, Test::FrameLoss, title, &columns, |r| {
            if r.frame_loss.is_empty() {
                return None;
            }
            Some(
                loads
                    .iter()
                    .map(|l| {
                        let p = r.frame_loss.iter().find(|p| p.percent == *l);
                        opt(p.map(|p| p.loss_percent), &|v| format!("{v:.2}"))
                    })
                    .collect(),
            )
        }));
    }
    if s.tests.contains(&Test::BackToBack) {
        let title = "Back-to-back (RFC 2544 §26.4; longest burst at the line rate with no loss)"
            .to_string();
        let columns = [
            "mean frames",
            "min",
            "max",
            "repeats",
            "longest tried",
            "buffer ms",
        ];
        out.push(per_size(s, Test::BackToBack, title, &columns, |r| {
            let b = r.back_to_back.as_ref()?;
            Some(vec![
                format!("{:.1}", b.mean_frames),
                b.min_frames.to_string(),
                b.max_frames.to_string(),
                b.bursts.len().to_string(),
                b.longest_tried.to_string(),
                format!("{:.3}", b.implied_buffer_s * 1e3),
            ])
        }));
    }
    out
}

/// Total trials of the campaign and the line that says how long they took.
pub fn elapsed_line(s: &Rfc2544Summary) -> Option<String> {
    s.elapsed_s.map(|e| {
        format!(
            "{} trials in {:.0} s",
            s.sizes.iter().map(|r| r.trials).sum::<u32>(),
            e
        )
    })
}

/// The [`tables`] for a terminal.
pub fn text_tables(s: &Rfc2544Summary) -> String {
    let mut out = String::new();
    for t in tables(s) {
        out.push_str(&t.title);
        out.push('\n');
        let mut rows = vec![t.header];
        rows.extend(t.rows);
        out.push_str(&crate::text::render_rows(&rows));
        out.push('\n');
    }
    if let Some(l) = elapsed_line(s) {
        out.push_str(&l);
        out.push('\n');
    }
    out
}
