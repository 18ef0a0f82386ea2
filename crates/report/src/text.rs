//! Plain text for terminals: numbers with SI prefixes and left-aligned
//! columns, shared by the campaign's summaries, live progress and the RFC
//! 2544 tables so that every terminal table reads alike.

/// `v` in `unit` for a terminal: bit/s and seconds with an SI prefix, a
/// ratio as a percentage, anything else with three decimals.
pub fn si(v: f64, unit: &str) -> String {
    match unit {
        "bit/s" => {
            if v.abs() >= 1e9 {
                format!("{:.3} Gbit/s", v / 1e9)
            } else if v.abs() >= 1e6 {
                format!("{:.2} Mbit/s", v / 1e6)
            } else {
                format!("{:.1} kbit/s", v / 1e3)
            }
        }
        "s" => {
            if v.abs() >= 1.0 {
                format!("{v:.3} s")
            } else if v.abs() >= 1e-3 {
                format!("{:.3} ms", v * 1e3)
            } else {
                format!("{:.1} µs", v * 1e6)
            }
        }
        "ratio" => format!("{:.3} %", v * 100.0),
        _ => format!("{v:.3}"),
    }
}

/// Left-aligned columns, a rule under the header row.
pub fn render_rows(rows: &[Vec<String>]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let ncol = first.len();
    let widths: Vec<usize> = (0..ncol)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (n, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if n == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (ncol - 1)));
            out.push('\n');
        }
    }
    out
}
