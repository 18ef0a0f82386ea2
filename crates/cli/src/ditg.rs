//! D-ITG command lines: ITGSend's and ITGRecv's options (the D-ITG 2.8.1
//! manual's, as `ITGSend -h` / `ITGRecv -h` list them) that clap would
//! misread or not know, rewritten into wirebench's own before parsing, or
//! refused with a message naming the option and why (exit 2). Kept apart
//! from the subcommands so that the one table of what maps where is here
//! and in docs/options.md, which a test walks.

use crate::exit::bad_input;
use std::ffi::OsString;

/// ITGSend's application-model words and wirebench's `--app` names.
const APPS: [(&str, &str); 6] = [
    ("voip", "voip"),
    ("dns", "dns"),
    ("telnet", "telnet"),
    ("quake3", "quake3"),
    ("csa", "csa"),
    ("csi", "csi"),
];

/// Rewrites `wirebench send|recv ARGS` where they use D-ITG's spelling;
/// other subcommands pass through. Notes for options that are accepted but
/// change nothing go to stderr.
pub fn translate(args: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let sub = args.get(1).and_then(|a| a.to_str()).unwrap_or("");
    let (head, rest) = args.split_at(args.len().min(2));
    let rest = match sub {
        "send" => send(rest)?,
        "recv" => recv(rest)?,
        _ => return Ok(args),
    };
    Ok(head.iter().cloned().chain(rest).collect())
}

fn note(sub: &str, msg: &str) {
    eprintln!("wirebench {sub}: note: {msg}");
}

/// The token after option `i`, as text.
fn value(args: &[OsString], i: usize) -> Option<&str> {
    args.get(i + 1).and_then(|a| a.to_str())
}

fn send(args: &[OsString]) -> anyhow::Result<Vec<OsString>> {
    let mut out: Vec<OsString> = Vec::with_capacity(args.len() + 2);
    let mut voip = false;
    let mut i = 0;
    // ITGSend's multi-flow mode: `ITGSend SCRIPT [log options]`.
    if let Some(first) = args.first().and_then(|a| a.to_str()) {
        let is_app = APPS.iter().any(|(w, _)| first.eq_ignore_ascii_case(w));
        if !first.starts_with('-') && !is_app {
            out.push("--script".into());
        }
    }
    while i < args.len() {
        let Some(a) = args[i].to_str() else {
            out.push(args[i].clone());
            i += 1;
            continue;
        };
        let v = value(args, i);
        // Options that only change name keep their value(s) as they are.
        let renamed = match a {
            "-sa" => Some("--bind"),
            "-sp" => Some("--cport"),
            "-rp" => Some("--data-port"),
            "-Sdp" => Some("-p"),
            "-i" => Some("--bind-dev"),
            "-s" => Some("--seed"),
            "-Ft" => Some("--idt-file"),
            "-Fs" => Some("--size-file"),
            "-x" if voip => Some("--codec"),
            "-VAD" if voip => Some("--vad"),
            _ => None,
        };
        if let Some(long) = renamed {
            out.push(long.into());
            i += 1;
            continue;
        }
        let skip =
            match a {
                "-Fp" => {
                    let Some(path) = v else {
                        return Err(bad_input("-Fp: missing the payload file"));
                    };
                    out.push("--payload".into());
                    out.push(format!("file:{path}").into());
                    2
                }
                "-h" if voip => match v.map(str::to_ascii_uppercase).as_deref() {
                    Some("RTP") => 2,
                    Some("CRTP") => {
                        out.push("--crtp".into());
                        2
                    }
                    _ => return Err(bad_input("-h: VoIP's protocol is RTP or CRTP")),
                },
                "-poll" => {
                    note(
                        "send",
                        "-poll (ITGSend's polling mode) ignored: flows are paced by their own \
                     threads or shared pacers (--pacers)",
                    );
                    1
                }
                "-j" => {
                    match v {
                        Some("1") => {
                            note(
                                "send",
                                "-j 1: the mean rate is always kept (every departure is scheduled \
                         from the start, t_k = t_0 + sum of IDTs)",
                            );
                            2
                        }
                        _ => return Err(bad_input(
                            "-j: only -j 1 (keep the mean rate): wirebench always schedules every \
                         departure from the start, so a late packet never shifts the ones after it",
                        )),
                    }
                }
                "-q" => {
                    if v.and_then(|n| n.parse::<u64>().ok()).is_none() {
                        return Err(bad_input("-q: expects the log buffer size in packets"));
                    }
                    note(
                        "send",
                        "-q (log buffer size) ignored: logs are written in blocks of 4096 records \
                     by a thread of their own",
                    );
                    2
                }
                "-T" => {
                    let proto = v.map(str::to_ascii_uppercase);
                    match proto.as_deref() {
                        Some("SCTP") | Some("DCCP") => {
                            return Err(bad_input(format!(
                            "-T {}: not supported: wirebench measures UDP, TCP and ICMP echo flows \
                             (SCTP and DCCP need kernel modules most hosts and middleboxes lack)",
                            v.unwrap_or_default()
                        )))
                        }
                        Some("ICMP") => {
                            // ITGSend's optional ICMP type: echo (8) is what is sent.
                            out.push("-T".into());
                            out.push(args[i + 1].clone());
                            match value(args, i + 1).map(|t| t.parse::<u8>()) {
                                Some(Ok(8)) => 3,
                                Some(Ok(t)) => {
                                    return Err(bad_input(format!(
                                        "-T ICMP {t}: only echo requests (type 8) are sent; \
                                     their replies give the round trip"
                                    )))
                                }
                                _ => 2,
                            }
                        }
                        _ => {
                            out.push(args[i].clone());
                            1
                        }
                    }
                }
                "-L" | "-X" => {
                    return Err(bad_input(format!(
                        "{a}: remote logging to an ITGLog server is not supported: write the log \
                     where it is made (send -l FILE, send -x NAME with recv --log-dir DIR)"
                    )))
                }
                "-Sda" => {
                    return Err(bad_input(
                        "-Sda: the control connection goes to the receiver's address (-a): the \
                     receiver takes data only from the address its control connection came from",
                    ))
                }
                "-Ssa" | "-Ssp" | "-Si" => {
                    return Err(bad_input(format!(
                    "{a}: the control connection leaves from the flows' own source (-sa/--bind, \
                     -i/--bind-dev; its port is the system's), because the receiver takes data \
                     only from that address"
                )))
                }
                "-H" => return Err(bad_input(
                    "-H: passive mode is not needed: the sender always connects to the receiver; \
                     for a receiver behind a NAT, run the test the other way (send -R from the \
                     host the receiver could not reach)",
                )),
                "-sk" | "-rk" => {
                    return Err(bad_input(format!(
                        "{a}: signalling packets on a serial line is not supported"
                    )))
                }
                "-Q" => {
                    return Err(bad_input(
                        "-Q: ITGSend's daemon mode (ITGapi) is not supported: `wirebench agent` \
                     is the remotely driven end (docs/agents.md)",
                    ))
                }
                "-p" if v
                    .and_then(|n| n.parse::<u16>().ok())
                    .is_some_and(|n| n <= 2) =>
                {
                    return Err(bad_input(format!(
                        "-p {}: here -p is the receiver's control port (D-ITG's -Sdp); ITGSend's \
                     -p payload metadata has no counterpart: every probe carries the full header",
                        v.unwrap_or_default()
                    )))
                }
                // `--app voip` is wirebench's own spelling of the same word.
                word if i > 0 && args[i - 1] == "--app" => {
                    out.push(word.into());
                    1
                }
                word => match APPS.iter().find(|(w, _)| word.eq_ignore_ascii_case(w)) {
                    Some((_, app)) => {
                        voip = *app == "voip";
                        out.push("--app".into());
                        out.push((*app).into());
                        1
                    }
                    None => {
                        out.push(args[i].clone());
                        1
                    }
                },
            };
        i += skip;
    }
    Ok(out)
}

fn recv(args: &[OsString]) -> anyhow::Result<Vec<OsString>> {
    let mut out: Vec<OsString> = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_str().unwrap_or("");
        let v = value(args, i);
        match a {
            "-a" => out.push("-B".into()),
            "-Sp" => out.push("-p".into()),
            // wirebench's -q is --quiet; ITGRecv's takes a number.
            "-q" if v.and_then(|n| n.parse::<u64>().ok()).is_some() => {
                note(
                    "recv",
                    "-q N (log buffer size) ignored: logs are written in blocks of 4096 \
                     records by a thread of their own",
                );
                i += 2;
                continue;
            }
            "-l" => {
                return Err(bad_input(
                    "-l: the receiver logs each session into a directory: --log-dir DIR (-x); \
                     a sender names its session's file with send -x NAME",
                ))
            }
            "-L" => {
                return Err(bad_input(
                    "-L: remote logging to an ITGLog server is not supported: --log-dir DIR \
                     keeps the logs on this host",
                ))
            }
            "-i" | "-Si" => {
                return Err(bad_input(format!(
                    "{a}: binding the receiver to an interface is not supported: bind it to \
                     that interface's address with -B ADDR"
                )))
            }
            "-H" | "-n" => {
                return Err(bad_input(format!(
                    "{a}: passive mode is not needed: the sender always connects; for a \
                     receiver behind a NAT run the test the other way (send -R)"
                )))
            }
            _ => out.push(args[i].clone()),
        }
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(line: &str) -> Result<String, String> {
        let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        translate(args)
            .map(|v| {
                v.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn itgsend_spellings_become_wirebench_options() {
        let ok = |a: &str, b: &str| assert_eq!(tr(a).as_deref(), Ok(b), "{a}");
        ok(
            "wb send -a h -sa 1.2.3.4 -sp 5 -rp 6000",
            "wb send -a h --bind 1.2.3.4 --cport 5 --data-port 6000",
        );
        ok(
            "wb send -a h -Sdp 9000 -i lo -s 7",
            "wb send -a h -p 9000 --bind-dev lo --seed 7",
        );
        ok(
            "wb send -a h -Ft f -Fs g -Fp p",
            "wb send -a h --idt-file f --size-file g --payload file:p",
        );
        ok(
            "wb send -a h VoIP -x G.729.2 -h CRTP -VAD",
            "wb send -a h --app voip --codec G.729.2 --crtp --vad",
        );
        ok(
            "wb send -a h DNS -x r.log",
            "wb send -a h --app dns -x r.log",
        );
        ok(
            "wb send -a h -x r.log VoIP",
            "wb send -a h -x r.log --app voip",
        );
        ok("wb send -a h -T ICMP 8 -z 3", "wb send -a h -T ICMP -z 3");
        ok("wb send -a h -poll -j 1 -q 50", "wb send -a h");
        ok(
            "wb send flows.txt -l s.log",
            "wb send --script flows.txt -l s.log",
        );
        ok("wb send -a h -p 5400", "wb send -a h -p 5400");
        ok(
            "wb recv -a 127.0.0.1 -Sp 9000 -q 50 -q",
            "wb recv -B 127.0.0.1 -p 9000 -q",
        );
        ok("wb decode -x -l", "wb decode -x -l");
    }

    #[test]
    fn what_cannot_map_is_refused_naming_the_option() {
        for (line, needle) in [
            ("wb send -a h -T SCTP 1 2", "-T SCTP"),
            ("wb send -a h -T dccp", "-T dccp"),
            ("wb send -a h -T ICMP 13", "-T ICMP 13"),
            ("wb send -a h -L 127.0.0.1 UDP", "-L:"),
            ("wb send -a h -Sda 10.0.0.1", "-Sda"),
            ("wb send -a h -j 0", "-j"),
            ("wb send -a h -p 2", "-p 2"),
            ("wb send -Q", "-Q"),
            ("wb recv -l r.log", "-l:"),
            ("wb recv -i eth0", "-i:"),
            ("wb recv -H 10.0.0.1", "-H:"),
        ] {
            let e = tr(line).expect_err(line);
            assert!(e.starts_with(needle), "{line}: {e}");
        }
    }
}
