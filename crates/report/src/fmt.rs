//! Text helpers shared by the HTML, SVG and CSV writers: escaping, human units
//! and number formatting.
//!
//! Everything here is a pure function of its input so that the same campaign
//! always renders to the same bytes (no locale, no clock, no hash order).

use wirebench_schema::summary::ThroughputUnits;

/// Escapes text for HTML/SVG element content and double- or single-quoted
/// attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab/newline are not allowed in
            // XML and would break an SVG parsed on its own.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' && c != '\r' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A display scale for one metric: `shown = stored × factor`, in `unit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    pub factor: f64,
    pub unit: String,
}

impl Scale {
    pub fn apply(&self, v: f64) -> f64 {
        v * self.factor
    }
}

/// Chooses a human unit for values stored in the SI `unit`, given the largest
/// magnitude that will be shown (so every number of a chart or a table column
/// shares one unit).
pub fn scale_for(unit: &str, max_abs: f64) -> Scale {
    let m = if max_abs.is_finite() {
        max_abs.abs()
    } else {
        0.0
    };
    let s = |factor: f64, unit: &str| Scale {
        factor,
        unit: unit.to_string(),
    };
    match unit {
        "bit/s" | "bps" | "b/s" => {
            if m >= 1e9 {
                s(1e-9, "Gbit/s")
            } else if m >= 1e6 {
                s(1e-6, "Mbit/s")
            } else if m >= 1e3 {
                s(1e-3, "kbit/s")
            } else {
                s(1.0, "bit/s")
            }
        }
        "s" => {
            if m >= 2.0 {
                s(1.0, "s")
            } else if m >= 1e-3 || m == 0.0 {
                s(1e3, "ms")
            } else if m >= 1e-6 {
                s(1e6, "µs")
            } else {
                s(1e9, "ns")
            }
        }
        "ratio" => s(100.0, "%"),
        "share of one core" => s(100.0, "% of one core"),
        "share of all its cores" => s(100.0, "% of all cores"),
        "bytes" | "B" => {
            if m >= 1e9 {
                s(1e-9, "GB")
            } else if m >= 1e6 {
                s(1e-6, "MB")
            } else if m >= 1e4 {
                s(1e-3, "kB")
            } else {
                s(1.0, "B")
            }
        }
        other => s(1.0, other),
    }
}

/// [`scale_for`] with the campaign's throughput units: `Ditg` shows bit/s
/// as the studies' D-ITG figures, ITGDec's kbit/s called "Kbps" below 1
/// Mbps (the thesis's 73.6 Kbps of G.729.3) and kbit/s divided by 1024
/// called "Mbps" above (bit/s ÷ 1 024 000, S5); the forced units show
/// every throughput in the one unit asked for. Other units are unchanged.
pub fn scale_in(unit: &str, max_abs: f64, units: ThroughputUnits) -> Scale {
    use ThroughputUnits as U;
    if !matches!(unit, "bit/s" | "bps" | "b/s") {
        return scale_for(unit, max_abs);
    }
    let s = |factor: f64, unit: &str| Scale {
        factor,
        unit: unit.to_string(),
    };
    match units {
        U::Si => scale_for(unit, max_abs),
        U::Ditg if max_abs.is_finite() && max_abs.abs() < 1_024_000.0 => s(1e-3, DITG_KBPS),
        U::Ditg | U::DitgMbps => s(1.0 / 1_024_000.0, DITG_MBPS),
        U::DitgKbps => s(1e-3, DITG_KBPS),
        U::Bits => s(1.0, "bit/s"),
        U::Kbits => s(1e-3, "kbit/s"),
        U::Mbits => s(1e-6, "Mbit/s"),
        U::Gbits => s(1e-9, "Gbit/s"),
    }
}

/// The unit label of D-ITG's "Mbps" (kbit/s ÷ 1024).
pub const DITG_MBPS: &str = "Mbps, D-ITG: kbit/s ÷ 1024";
/// The unit label of D-ITG's "Kbps" (ITGDec's kbit/s).
pub const DITG_KBPS: &str = "Kbps, D-ITG";

/// Decimals needed to show `v` with `sig` significant digits.
pub fn decimals_for(v: f64, sig: i32) -> usize {
    if v == 0.0 || !v.is_finite() {
        return 0;
    }
    let mag = v.abs().log10().floor() as i32;
    (sig - 1 - mag).clamp(0, 9) as usize
}

/// Formats with `sig` significant digits, plain notation.
pub fn num(v: f64, sig: i32) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    no_negative_zero(format!("{:.*}", decimals_for(v, sig), v))
}

/// A formatted number that rounds to zero reads "0", never "-0" or
/// "-0.00" (a drop of -0.0001 packets is no drop).
pub fn no_negative_zero(s: String) -> String {
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

/// `mean ± ci` with the CI given to two significant digits and the mean to
/// the same decimal place (never fewer than the mean's own 3 digits).
pub fn mean_ci(mean: f64, ci: f64) -> String {
    if !mean.is_finite() {
        return "–".to_string();
    }
    let d = decimals_for(mean, 3).max(if ci > 0.0 { decimals_for(ci, 2) } else { 0 });
    let d = d.min(9);
    let m = no_negative_zero(format!("{:.*}", d, mean));
    if ci > 0.0 && ci.is_finite() {
        format!("{m} ± {:.*}", d, ci)
    } else {
        m
    }
}

/// [`mean_ci`] for a quantity that cannot leave `lo..=hi` (a ratio, a
/// share of all cores): `mean ± ci` while the interval stays inside, else
/// the mean with the interval cut at the range in brackets
/// (`66.0 [0–100]`), never `66 ± 593`.
pub fn mean_ci_in(mean: f64, ci: f64, lo: f64, hi: f64) -> String {
    if !mean.is_finite() || !ci.is_finite() || (mean - ci >= lo && mean + ci <= hi) {
        return mean_ci(mean, ci);
    }
    format!(
        "{} [{}–{}]",
        mean_ci(mean.clamp(lo, hi), 0.0),
        num((mean - ci).clamp(lo, hi) + 0.0, 3),
        num((mean + ci).clamp(lo, hi) + 0.0, 3)
    )
}

/// A signed percentage, e.g. `+25.3 %`.
pub fn pct(p: f64) -> String {
    if !p.is_finite() {
        return "–".to_string();
    }
    let d = if p.abs() >= 100.0 { 0 } else { 1 };
    let s = format!("{:+.*}", d, p);
    if s == "+0.0" || s == "-0.0" {
        "0.0 %".to_string()
    } else {
        format!("{s} %")
    }
}

/// A coordinate for SVG: two decimals are far below a pixel and keep files small.
pub fn px(v: f64) -> String {
    let s = format!("{:.2}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" || s.is_empty() {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Standard base64 (RFC 4648 §4, with padding), for `data:` links that let
/// a reader save one chart as its own file without a script.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                out.push(char::from(A[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A file name made of the text's letters, digits and dashes.
pub fn file_stem(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The `<svg>` element of a chart as a file of its own: the XML namespace an
/// SVG outside HTML needs, and an XML declaration.
pub fn standalone_svg(svg: &str) -> String {
    let ns = concat!("xmlns=\"http", "://www.w3.org/2000/svg\"");
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}\n",
        svg.replacen("<svg ", &format!("<svg {ns} "), 1)
    )
}

/// A readable name for a matrix axis used on the x axis of a chart.
pub fn axis_title(axis: &str) -> String {
    let a = axis.to_ascii_lowercase();
    if a.contains("payload") {
        "Payload size (bytes)".into()
    } else if a.contains("frame") {
        "Frame size (bytes)".into()
    } else if a == "mtu" || a.contains("mtu") {
        "MTU (bytes)".into()
    } else if a.contains("size") {
        format!("{axis} (bytes)")
    } else {
        axis.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<script>a&b\"'</script>"),
            "&lt;script&gt;a&amp;b&quot;&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn units_are_human() {
        assert_eq!(scale_for("bit/s", 9.4e8).unit, "Mbit/s");
        assert_eq!(scale_for("bit/s", 9.4e9).unit, "Gbit/s");
        assert_eq!(scale_for("s", 0.0123).unit, "ms");
        assert_eq!(scale_for("s", 12e-6).unit, "µs");
        assert_eq!(scale_for("ratio", 0.5).apply(0.5), 50.0);
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o, "{i:?}");
        }
        assert_eq!(file_stem("S5: IPv4 / IPv6"), "s5-ipv4-ipv6");
    }

    #[test]
    fn numbers() {
        assert_eq!(num(941.234, 3), "941");
        assert_eq!(num(0.012345, 3), "0.0123");
        assert_eq!(mean_ci(941.234, 0.52), "941.23 ± 0.52");
        assert_eq!(mean_ci(941.234, 12.0), "941 ± 12");
        assert_eq!(pct(25.04), "+25.0 %");
        assert_eq!(pct(-6.0), "-6.0 %");
        assert_eq!(px(1.0), "1");
        assert_eq!(px(1.255), "1.25");
        // A real negative stays negative; one that rounds to zero does not.
        assert_eq!(mean_ci(-0.0001, 0.0), "-0.000100");
        assert_eq!(mean_ci(-0.0, 0.0), "0");
        assert_eq!(mean_ci(-0.0, 0.01), "0.000 ± 0.010");
        assert_eq!(pct(-0.01), "0.0 %");
        assert_eq!(mean_ci(-0.4, 0.5), "-0.400 ± 0.500");
        assert_eq!(mean_ci_in(66.0, 593.0, 0.0, 100.0), "66.0 [0–100]");
        assert_eq!(mean_ci_in(20.3, 257.3, 0.0, 100.0), "20.3 [0–100]");
        assert_eq!(mean_ci_in(99.0, 2.0, 0.0, 100.0), "99.0 [97.0–100]");
        assert_eq!(mean_ci_in(50.0, 2.0, 0.0, 100.0), mean_ci(50.0, 2.0));
        assert!(!num(-1e-12, 3).starts_with('-'));
        assert_eq!(no_negative_zero("-0.00".into()), "0.00");
        assert_eq!(no_negative_zero("-0.01".into()), "-0.01");
    }
}
