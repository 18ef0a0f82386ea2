//! D-ITG and TOML scripts: what parses, and that every error names the file,
//! the line and the option or key.

use wirebench_model::script::{load, parse_ditg, parse_ditg_args, parse_toml};
use wirebench_model::{App, Dist, DitgCodec, IdtModel, SizeModel};
use wirebench_wire::{MeterMode, Transport};

#[test]
fn three_line_ditg_script() {
    // A comment, a blank line and no final newline: D-ITG would refuse the
    // first two and require the last; wirebench accepts them.
    let text = "# three flows\n\
                -a 10.0.0.2 -rp 9001 -T UDP -C 100 -c 512 -t 10000\n\
                \n\
                -a 10.0.0.2 -rp 9002 VoIP -x G.729.2 -h CRTP -VAD -t 10000 -m rttm\n\
                -a 10.0.0.3 -T TCP -E 50 -u 100 500 -d 2000 -z 300";
    let flows = parse_ditg(text, "s.ditg").unwrap();
    assert_eq!(flows.len(), 3);

    let f = &flows[0];
    assert_eq!(f.line, 2);
    assert_eq!(f.dest.as_deref(), Some("10.0.0.2"));
    assert_eq!(f.port, Some(9001));
    let g = parse_ditg_args(&["-a", "::1", "-sa", "::1", "-sp", "9000", "-rp", "40000"]).unwrap();
    assert_eq!(g.opts.bind, Some(std::net::Ipv6Addr::LOCALHOST.into()));
    assert_eq!((g.opts.cport, g.port), (Some(9000), Some(40000)));
    assert_eq!(f.transport, Some(Transport::Udp));
    assert_eq!(f.duration_ms, Some(10_000));
    assert_eq!(f.spec.idt, IdtModel::Constant { pps: 100.0 });
    assert_eq!(f.spec.size, SizeModel::Constant { bytes: 512 });
    assert_eq!(f.spec.start_delay_ms, 0);

    let f = &flows[1];
    assert_eq!(f.line, 4);
    assert_eq!(
        f.spec.app,
        Some(App::Voip {
            codec: DitgCodec::G729_2,
            crtp: true,
            vad: true
        })
    );
    assert_eq!(f.meter, Some(MeterMode::Rtt));
    assert_eq!(f.transport, None);
    assert_eq!(f.spec.app_transport(), Some(Transport::Udp));
    assert_eq!(f.spec.nominal_rate_pps(), Some(50.0));

    let f = &flows[2];
    assert_eq!(f.line, 5);
    assert_eq!(f.spec.start_delay_ms, 2000);
    assert_eq!(f.packets, Some(300));
    assert_eq!(f.transport, Some(Transport::Tcp));
    assert_eq!(
        f.spec.idt,
        IdtModel::Random(Dist::Exponential { mean: 20.0 })
    );
    assert_eq!(
        f.spec.size,
        SizeModel::Random(Dist::Uniform {
            min: 100.0,
            max: 500.0
        })
    );
}

#[test]
fn icmp_echo_flows_in_scripts() {
    // D-ITG's -T ICMP, any case, and TOML's transport = "icmp".
    let flows = parse_ditg("-a 127.0.0.1 -T ICMP -C 20 -c 64 -z 5\n", "s.ditg").unwrap();
    assert_eq!(flows[0].transport, Some(Transport::Icmp));
    let t = parse_toml(
        "[[flow]]\ndest = \"::1\"\ntransport = \"icmp\"\nidt = \"constant 100\"\npackets = 3\n",
        "s.toml",
    )
    .unwrap();
    assert_eq!(t[0].transport, Some(Transport::Icmp));
}

fn ditg_err(text: &str) -> String {
    parse_ditg(text, "flows.txt").unwrap_err().to_string()
}

#[test]
fn malformed_ditg_scripts_name_file_line_option() {
    let ok = "-a h -C 10\n";
    assert_eq!(
        ditg_err(&format!("{ok}-a h -Q 5\n")),
        "flows.txt:2: -Q: unknown option"
    );
    let e = ditg_err(&format!("{ok}{ok}-a h -l log.txt\n"));
    assert!(
        e.starts_with("flows.txt:3: -l: belongs on the ITGSend command line"),
        "{e}"
    );
    for opt in ["-L", "-x", "-X"] {
        let e = ditg_err(&format!("-a h {opt} foo"));
        assert!(
            e.starts_with(&format!("flows.txt:1: {opt}: belongs")),
            "{e}"
        );
    }
    let e = ditg_err(&format!("{ok}-a h -V 0 1\n"));
    assert!(e.starts_with("flows.txt:2: -V: shape"), "{e}");
    let e = ditg_err("-a h -E abc\n");
    assert!(e.starts_with("flows.txt:1: -E: "), "{e}");
    let e = ditg_err("-a h -U 10\n");
    assert!(e.starts_with("flows.txt:1: -U: "), "{e}");
    let e = ditg_err("-a h -C 10 -E 5\n");
    assert!(
        e.starts_with("flows.txt:1: -E: a second inter-departure model"),
        "{e}"
    );
    let e = ditg_err("-a h VoIP -x G.999 \n");
    assert!(e.starts_with("flows.txt:1: -x: unknown D-ITG codec"), "{e}");
    let e = ditg_err("-a h VoIP -C 10\n");
    assert!(e.starts_with("flows.txt:1: -C: VoIP fixes"), "{e}");
    let e = ditg_err("-a h -T SCTP\n");
    assert!(e.starts_with("flows.txt:1: -T: SCTP"), "{e}");
    let e = ditg_err("-a h -rp 70000\n");
    assert!(e.starts_with("flows.txt:1: -rp: "), "{e}");
    let e = ditg_err("-a h -rp 80\n");
    assert!(
        e.starts_with("flows.txt:1: -rp: ") && e.contains("privileged"),
        "{e}"
    );
    let e = ditg_err("-a h -sp 0\n");
    assert!(e.starts_with("flows.txt:1: -sp: "), "{e}");
    let e = ditg_err("-a h -sa nohost\n");
    assert!(e.starts_with("flows.txt:1: -sa: "), "{e}");
    let e = ditg_err("-a h -sa\n");
    assert!(e.starts_with("flows.txt:1: -sa: missing"), "{e}");
    let e = ditg_err("-a h -B C 100\n");
    assert!(e.starts_with("flows.txt:1: -B"), "{e}");
    let e = ditg_err("# only a comment\n\n");
    assert!(e.contains("no flows"), "{e}");
}

#[test]
fn ditg_args_core() {
    let f = parse_ditg_args(&[
        "-a", "::1", "-B", "E", "100", "W", "200", "2", "-G", "2", "5", "-w", "300", "1.5",
    ])
    .unwrap();
    let b = f.spec.burst.unwrap();
    assert_eq!(b.on_ms, Dist::Exponential { mean: 100.0 });
    assert_eq!(
        b.off_ms,
        Dist::Weibull {
            scale: 200.0,
            shape: 2.0
        }
    );
    assert_eq!(
        f.spec.idt,
        IdtModel::Random(Dist::Gamma {
            shape: 2.0,
            scale: 5.0
        })
    );
    assert_eq!(
        f.spec.size,
        SizeModel::Random(Dist::Weibull {
            scale: 300.0,
            shape: 1.5
        })
    );
    // Defaults of D-ITG: 1000 pps, 512 B.
    let f = parse_ditg_args(&["-a", "h"]).unwrap();
    assert_eq!(f.spec.idt, IdtModel::Constant { pps: 1000.0 });
    assert_eq!(f.spec.size, SizeModel::Constant { bytes: 512 });
    let e = parse_ditg_args(&["-O", "0"]).unwrap_err().to_string();
    assert!(e.starts_with("-O: "), "{e}");
    for app in ["DNS", "Telnet", "Quake3", "CSa", "CSi"] {
        assert!(parse_ditg_args(&["-a", "h", app])
            .unwrap()
            .spec
            .app
            .is_some());
    }
}

#[test]
fn toml_scripts() {
    let text = r#"
[[flow]]
dest = "10.0.0.2"
port = 9001
transport = "udp"
idt = "exponential 100"
size = "uniform 64 512"
duration_ms = 5000

[[flow]]
app = "voip"
codec = "G.711.2"
vad = true
start_delay_ms = 1000

[[flow]]
app = "file"
bytes = 5000000
meter = "rtt"
"#;
    let flows = parse_toml(text, "c.toml").unwrap();
    assert_eq!(flows.len(), 3);
    assert_eq!(flows[0].line, 2);
    assert_eq!(
        flows[0].spec.idt,
        IdtModel::Random(Dist::Exponential { mean: 10.0 })
    );
    assert_eq!(
        flows[0].spec.size,
        SizeModel::Random(Dist::Uniform {
            min: 64.0,
            max: 512.0
        })
    );
    assert_eq!(flows[0].duration_ms, Some(5000));
    assert_eq!(flows[1].line, 10);
    assert_eq!(flows[1].spec.start_delay_ms, 1000);
    assert_eq!(flows[1].spec.nominal_payload_bytes(), 116.0);
    assert_eq!(flows[2].spec.transfer_bytes, Some(5_000_000));
    assert_eq!(flows[2].meter, Some(MeterMode::Rtt));

    let e = |t: &str| parse_toml(t, "c.toml").unwrap_err().to_string();
    let bad = "[[flow]]\nidt = \"constant 10\"\n\n[[flow]]\nport = 1\nidt = \"pareto 0 1\"\n";
    let m = e(bad);
    assert!(m.starts_with("c.toml:6: idt: "), "{m}");
    let m = e("[[flow]]\nidt = \"constant 10\"\nspeed = 3\n");
    assert!(m.starts_with("c.toml:3: speed: unknown key"), "{m}");
    let m = e("[[flow]]\napp = \"voip\"\ncodec = \"G.7\"\n");
    assert!(m.starts_with("c.toml:3: codec: "), "{m}");
    let m = e("[[flow]]\nport = 70000\n");
    assert!(m.starts_with("c.toml:2: port: "), "{m}");
    let m = e("[[flow]]\nidt = \n");
    assert!(m.starts_with("c.toml:2: "), "{m}");
    let m = e("[[flow]]\ncodec = \"G.711.1\"\n");
    assert!(m.starts_with("c.toml:2: codec: only applies"), "{m}");
    // Source address, port and interface, and the receiver's data port.
    let f = &parse_toml(
        "[[flow]]\nbind = \"127.0.0.2\"\ncport = 9000\nbind_dev = \"lo\"\nport = 40000\n",
        "c.toml",
    )
    .unwrap()[0];
    assert_eq!(f.opts.bind, Some([127, 0, 0, 2].into()));
    assert_eq!(f.opts.cport, Some(9000));
    assert_eq!(f.opts.bind_dev.as_deref(), Some("lo"));
    assert_eq!(f.port, Some(40000));
    let m = e("[[flow]]\nport = 1000\n");
    assert!(
        m.starts_with("c.toml:2: port: ") && m.contains("privileged"),
        "{m}"
    );
    let m = e("[[flow]]\n\nbind = \"host\"\n");
    assert!(m.starts_with("c.toml:3: bind: "), "{m}");
    let m = e("[[flow]]\ncport = 0\n");
    assert!(m.starts_with("c.toml:2: cport: "), "{m}");
    let m = e("[[flow]]\nbind_dev = \"a/b\"\n");
    assert!(m.starts_with("c.toml:2: bind_dev: "), "{m}");
}

/// Issue #11 item 5 per flow: a TOML line's `payload` is that flow's
/// content (the command line's `--payload` for lines without one); a bad
/// value or a payload on a flow the receiver sends names the line and key.
#[test]
fn toml_payload_per_flow() {
    use wirebench_model::Payload;
    let dir = tempfile::tempdir().unwrap();
    let content = dir.path().join("content.bin");
    std::fs::write(&content, b"abc").unwrap();
    let text = format!(
        "[[flow]]\npayload = \"zeros\"\n\n[[flow]]\n\n[[flow]]\npayload = \"file:{}\"\n",
        content.display()
    );
    let flows = parse_toml(&text, "c.toml").unwrap();
    assert_eq!(flows[0].payload, Some(Payload::Zeros));
    assert_eq!(flows[1].payload, None);
    let Some(Payload::File { bytes, .. }) = &flows[2].payload else {
        panic!("{:?}", flows[2].payload);
    };
    assert_eq!(&bytes[..], b"abc");
    let e = |t: &str| parse_toml(t, "c.toml").unwrap_err().to_string();
    let m = e("[[flow]]\n\npayload = \"ones\"\n");
    assert!(
        m.starts_with("c.toml:3: payload: ") && m.contains("zeros"),
        "{m}"
    );
    let m = e("[[flow]]\npayload = 0\n");
    assert!(m.starts_with("c.toml:2: payload: "), "{m}");
    let m = e("[[flow]]\npayload = \"file:/dev/zero\"\n");
    assert!(
        m.starts_with("c.toml:2: payload: ") && m.contains("/dev/zero"),
        "{m}"
    );
    let m = e("[[flow]]\ndirection = \"reverse\"\npayload = \"random\"\n");
    assert!(
        m.starts_with("c.toml:3: payload: ") && m.contains("forward flows only"),
        "{m}"
    );
}

#[test]
fn load_picks_the_form_by_extension() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("a.toml");
    std::fs::write(&t, "[[flow]]\nidt = \"C 10\"\n").unwrap();
    assert_eq!(load(&t).unwrap().len(), 1);
    let d = dir.path().join("a.ditg");
    std::fs::write(&d, "-a h -C 10\n-a h -C 20\n").unwrap();
    assert_eq!(load(&d).unwrap().len(), 2);
    let e = load(&dir.path().join("missing")).unwrap_err().to_string();
    assert!(e.contains("missing") && e.contains("cannot read"), "{e}");
}
