//! Writes a sample report from built-in study-shaped data:
//! `cargo run -p wirebench-report --example sample -- OUT.html`.
#[path = "../tests/common/mod.rs"]
mod common;

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sample-report.html".into());
    let s = vec![common::s5_like(common::S5_FILE), common::apps_like()];
    if let Err(e) = wirebench_report::write_html(&s, std::path::Path::new(&out)) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    println!("{out}");
}
