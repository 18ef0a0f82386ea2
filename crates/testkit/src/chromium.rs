//! Headless Chromium for the report tests: one launch with the flags this
//! machine's closed network needs (no background connections, a fresh
//! profile), bounded in time, so every test that renders a page loads it
//! the same way and none can hang the suite.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's Chromium (`scripts/setup` installs it).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Longest one page load may take.
const LIMIT: Duration = Duration::from_secs(30);

/// Loads `page` (a file) in a window `width` px wide with `extra`
/// arguments (`--dump-dom`, `--screenshot=FILE`), the profile under
/// `dir`; returns what Chromium printed. Panics when Chromium is missing,
/// fails, or takes longer than 30 s (killed then).
pub fn run(page: &Path, dir: &Path, width: u32, extra: &[&str]) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} not found: install chromium (scripts/setup)"
    );
    let out_file = dir.join("chromium.out");
    let out = std::fs::File::create(&out_file).expect("chromium output file");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--window-size={width},2000"))
        .args(extra)
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromium");
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(st) = child.try_wait().expect("waiting for chromium") {
            assert!(st.success(), "chromium exited with {st}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {} s", LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&out_file).unwrap_or_default()
}

/// The DOM of `html` after its scripts ran, loaded from a file under `dir`
/// in a window `width` px wide.
pub fn dump_dom(html: &str, dir: &Path, width: u32) -> String {
    let file = dir.join("page.html");
    std::fs::write(&file, html).expect("writing the page");
    run(&file, dir, width, &["--dump-dom"])
}

/// The integer that follows `key` in `text` (a probe's output).
pub fn number_after(text: &str, key: &str) -> i64 {
    let i = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in the page: the probe did not run"))
        + key.len();
    text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not followed by a number"))
}
