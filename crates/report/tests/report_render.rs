//! Renders the report in headless Chromium and checks the screenshot shows
//! drawn charts (not a blank or broken page). CI installs chromium; a missing
//! browser is a failure, not a skip.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const CHROMIUM: &str = "/usr/bin/chromium";

fn screenshot(html: &Path, png: &Path, profile: &Path) {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} not found: install chromium (apt-get install chromium)"
    );
    let child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,3000")
        .arg(format!("file://{}", html.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium: install chromium (apt-get install chromium)");
    common::wait_chromium(child);
}

#[test]
fn chromium_renders_charts() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    let png = dir.path().join("shot.png");
    let s = vec![common::s5_like(common::S5_FILE), common::apps_like()];
    wirebench_report::write_html(&s, &html).unwrap();
    let t0 = Instant::now();
    screenshot(&html, &png, &dir.path().join("profile"));
    eprintln!("chromium screenshot in {:?}", t0.elapsed());
    if let Ok(keep) = std::env::var("WIREBENCH_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }

    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let (w, h) = (info.width as usize, info.height as usize);
    assert!(w >= 1000 && h >= 2000, "screenshot {w}x{h}");
    let ch = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected colour type {other:?}"),
    };
    let bytes = &buf[..info.buffer_size()];
    let mut non_white = 0usize;
    let mut colours = std::collections::BTreeSet::new();
    // Pixels close to the first two series colours (#0072B2, #D55E00): the
    // lines, markers and bars actually drew.
    let mut blue = 0usize;
    let mut vermillion = 0usize;
    for px in bytes.chunks_exact(ch) {
        let (r, g, b) = (px[0] as i32, px[1] as i32, px[2] as i32);
        if r < 245 || g < 245 || b < 245 {
            non_white += 1;
        }
        colours.insert((r >> 3, g >> 3, b >> 3));
        if r < 24 && (g - 0x72).abs() < 24 && (b - 0xB2).abs() < 24 {
            blue += 1;
        }
        if (r - 0xD5).abs() < 24 && (g - 0x5E).abs() < 24 && b < 24 {
            vermillion += 1;
        }
    }
    let share = non_white as f64 / (w * h) as f64;
    eprintln!(
        "non-white {:.1} %, {} distinct colours, blue {blue} px, vermillion {vermillion} px",
        share * 100.0,
        colours.len()
    );
    assert!(
        share > 0.04,
        "page looks blank: {:.2} % non-white",
        share * 100.0
    );
    assert!(
        colours.len() >= 20,
        "only {} distinct colours",
        colours.len()
    );
    assert!(
        blue > 500 && vermillion > 500,
        "series colours missing: {blue} / {vermillion}"
    );
}
