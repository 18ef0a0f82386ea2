//! The veth path's own limit, without wirebench's sessions: an AF_XDP
//! flood on one end, an XDP sink on the other (bench/compare.sh runs it
//! on the `direct` test-bed; docs/engine.md, "AF_XDP path").
//!
//! ```text
//! xdp_path flood IFACE SRC_IP:PORT DST_IP:PORT SIZE SECS [auto|keep]   (frames sent)
//! xdp_path sink IFACE PORT drop|count|records SECS [auto|on|off]   (frames/s seen)
//! xdp_path live IFACE SRC_IP:PORT DST_IP:PORT SIZE SECS FRAMES_PER_CALL   (frames sent)
//! ```
//! `live` sends by live frames (`send --xdp-tx live`'s sender, without a
//! session); `records` sinks with the receiver's record program (records
//! from 10.0.1.1, the test-bed's node a).
//! The flood's last argument is the sending queue on IFACE, as `send
//! --xdp-txq` (default auto: a session qdisc on a veth with noqueue).
//! The sink's last argument is threaded NAPI on IFACE, as `recv
//! --xdp-napi` (default auto: switched on a test-bed's own veth).
//! The flood's destination MAC is the neighbour entry of DST_IP on IFACE
//! (ping it first). Linux only; needs root.

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    use std::process::ExitCode;
    use wirebench_engine::xdp;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!(
            "usage: xdp_path flood IFACE SRC_IP:PORT DST_IP:PORT SIZE SECS [auto|keep]\n       xdp_path sink IFACE PORT drop|count|records SECS [auto|on|off]\n       xdp_path live IFACE SRC_IP:PORT DST_IP:PORT SIZE SECS FRAMES_PER_CALL"
        );
        ExitCode::from(2)
    };
    let num = |s: &str| s.parse::<f64>().ok();
    // The flood's addresses, its destination MAC from IFACE's neighbours.
    let endpoints = |iface: &str,
                     src: std::net::SocketAddr,
                     dst: std::net::SocketAddr|
     -> Result<xdp::Endpoints, String> {
        let idx = xdp::ifindex(iface).map_err(|e| e.to_string())?;
        let dst_mac = xdp::next_hop_mac(iface, idx, dst.ip())
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no neighbour entry for {} on {iface}", dst.ip()))?;
        Ok(xdp::Endpoints {
            src_mac: xdp::mac_of(iface).map_err(|e| e.to_string())?,
            dst_mac,
            src,
            dst,
        })
    };
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["flood", iface, src, dst, size, secs, txq @ ..] if txq.len() <= 1 => {
            let txq = match txq.first().copied().unwrap_or("auto") {
                "auto" => wirebench_engine::TxqUse::Auto,
                "keep" => wirebench_engine::TxqUse::Keep,
                _ => return usage(),
            };
            let (Ok(src), Ok(dst), Ok(size), Some(secs)) = (
                src.parse::<std::net::SocketAddr>(),
                dst.parse::<std::net::SocketAddr>(),
                size.parse::<u32>(),
                num(secs),
            ) else {
                return usage();
            };
            let run = || -> Result<(u64, String), String> {
                let ep = endpoints(iface, src, dst)?;
                let mut port = xdp::TxPort::open(iface, txq).map_err(|e| e.to_string())?;
                let sent = xdp::flood(&mut port, ep, size, secs)?;
                Ok((sent, port.describe()))
            };
            match run() {
                Ok((sent, mode)) => {
                    println!(
                        "flood: {sent} frames in {secs} s = {:.0} pps offered ({mode})",
                        sent as f64 / secs
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("xdp_path flood: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        ["live", iface, src, dst, size, secs, batch] => {
            let (Ok(src), Ok(dst), Ok(size), Some(secs), Ok(batch)) = (
                src.parse::<std::net::SocketAddr>(),
                dst.parse::<std::net::SocketAddr>(),
                size.parse::<u32>(),
                num(secs),
                batch.parse::<u32>(),
            ) else {
                return usage();
            };
            let run = || -> Result<(u64, u64), String> {
                let ep = endpoints(iface, src, dst)?;
                xdp::live_flood(iface, ep, size, secs, batch)
            };
            match run() {
                Ok((stamped, refused)) => {
                    println!(
                        "live: {stamped} frames stamped, {refused} refused by {iface}, in {secs} s = {:.0} pps sent",
                        (stamped - refused) as f64 / secs
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("xdp_path live: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        ["sink", iface, port, action, secs, napi @ ..] if napi.len() <= 1 => {
            let napi = match napi.first().copied().unwrap_or("auto") {
                "auto" => wirebench_engine::NapiUse::Auto,
                "on" => wirebench_engine::NapiUse::On,
                "off" => wirebench_engine::NapiUse::Off,
                _ => return usage(),
            };
            let action = match *action {
                "drop" => xdp::Action::Drop,
                "count" => xdp::Action::Redirect,
                // The receiver's default program (receive records, drop),
                // for frames from the test-bed's node a.
                "records" => xdp::Action::Records {
                    from: std::net::IpAddr::from([10, 0, 1, 1]),
                },
                _ => return usage(),
            };
            let (Ok(port), Some(secs)) = (port.parse::<u16>(), num(secs)) else {
                return usage();
            };
            match xdp::sink(iface, port, action, napi, secs, 10.0) {
                Ok(c) => {
                    let rate = |n: u64| n as f64 / c.secs.max(1e-9);
                    println!(
                        "sink: matched {} frames in {:.3} s = {:.0} pps; received {} = {:.0} pps; \
                         ring full {}, fill empty {}, dropped {} ({})",
                        c.matched,
                        c.secs,
                        rate(c.matched),
                        c.received,
                        rate(c.received),
                        c.stats.rx_ring_full,
                        c.stats.rx_fill_empty,
                        c.stats.rx_dropped,
                        c.mode
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("xdp_path sink: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => usage(),
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("xdp_path: AF_XDP is Linux only");
}
