//! The Prometheus text exposition format (version 0.0.4) and the small
//! HTTP server side that `wirebench exporter` and `wirebench recv
//! --metrics` share: one GET per connection, bounded in size and time, so
//! a slow or hostile client costs one short-lived thread and nothing else.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Longest request line plus headers read.
const MAX_REQUEST: u64 = 16 << 10;
/// Time a client has to send its request, and to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A GET request, as far as the exporters need it.
pub struct Request {
    /// The path without the query.
    pub path: String,
    /// Query parameters, decoded.
    pub query: BTreeMap<String, String>,
    /// `X-Prometheus-Scrape-Timeout-Seconds`, when given and positive.
    pub timeout: Option<f64>,
}

/// Reads one request; None for anything that is not a GET within
/// [`MAX_REQUEST`] bytes and [`IO_TIMEOUT`].
pub fn read_request(stream: &TcpStream) -> Option<Request> {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let mut r = BufReader::new(stream.take(MAX_REQUEST));
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    if parts.next()? != "GET" {
        return None;
    }
    let target = parts.next()?;
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let query = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (unescape(k), unescape(v)))
        .collect();
    let mut timeout = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim()
                .eq_ignore_ascii_case("X-Prometheus-Scrape-Timeout-Seconds")
            {
                timeout = v.trim().parse::<f64>().ok().filter(|t| *t > 0.0);
            }
        }
    }
    Some(Request {
        path: path.to_string(),
        query,
        timeout,
    })
}

/// Percent-decoding of a URL query component (`+` is a space).
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => match s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes a whole answer in the text format's content type and closes.
pub fn respond(mut s: &TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Accepts connections for ever, each answered on its own thread by
/// `handle`; `name` names the threads.
pub fn serve(
    listener: TcpListener,
    name: &str,
    handle: impl Fn(TcpStream) + Send + Sync + 'static,
) {
    let handle = std::sync::Arc::new(handle);
    for conn in listener.incoming() {
        let Ok(stream) = conn else {
            // EMFILE and friends: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let h = handle.clone();
        let _ = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || h(stream));
    }
}

/// One metric family: its HELP and TYPE lines, then one sample per row
/// (`labels` is `""` or `{k="v",...}`).
pub fn family(o: &mut String, name: &str, kind: &str, help: &str, rows: &[(&str, f64)]) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in rows {
        let _ = writeln!(o, "{name}{labels} {}", num(*v));
    }
}

/// A gauge family.
pub fn gauge(o: &mut String, name: &str, help: &str, rows: &[(&str, f64)]) {
    family(o, name, "gauge", help, rows);
}

/// A sample value as Prometheus reads it.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Rows with owned label strings, borrowed for [`family`].
pub fn rows(v: &[(String, f64)]) -> Vec<(&str, f64)> {
    v.iter().map(|(l, x)| (l.as_str(), *x)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_numbers() {
        assert_eq!(unescape("127.0.0.1%3A5400"), "127.0.0.1:5400");
        assert_eq!(unescape("a+b%2"), "a b%2");
        assert_eq!(num(f64::NAN), "NaN");
        assert_eq!(num(f64::NEG_INFINITY), "-Inf");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(3.0), "3");
        let mut o = String::new();
        family(&mut o, "x_total", "counter", "Xs.", &[("{a=\"b\"}", 2.0)]);
        assert_eq!(
            o,
            "# HELP x_total Xs.\n# TYPE x_total counter\nx_total{a=\"b\"} 2\n"
        );
    }
}
