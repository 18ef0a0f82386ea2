//! Application models against D-ITG 2.8.1's parameters and their analytic
//! means, over long schedules of the generator.

use wirebench_model::app::{AppOptions, APP_NAMES, DITG_APPS};
use wirebench_model::voip::CodecKind;
use wirebench_model::{App, DitgCodec, FlowSpec, RealCodec, MIN_PAYLOAD};
use wirebench_wire::Transport;

const SEED: u64 = 99;

/// Runs `n` departures: (seconds of schedule, packets, bytes, sizes).
fn run(spec: &FlowSpec, n: usize) -> (f64, usize, u64, Vec<u32>) {
    let mut g = spec.generator(SEED).unwrap();
    let mut ns = 0u64;
    let mut bytes = 0u64;
    let mut sizes = Vec::with_capacity(n);
    for _ in 0..n {
        let d = g.next();
        ns += d.gap_ns;
        bytes += d.size as u64;
        sizes.push(d.size);
    }
    (ns as f64 / 1e9, n, bytes, sizes)
}

#[test]
fn voip_presets_match_ditg() {
    // (codec, RTP, CRTP, RTP+VAD, CRTP+VAD, pps) from D-ITG 2.8.1; sizes
    // under wirebench's 24-byte probe header are raised to 24.
    let table = [
        (DitgCodec::G711_1, [92, 82, 64, 54], 100),
        (DitgCodec::G711_2, [172, 162, 116, 106], 50),
        (DitgCodec::G723_1, [42, 32, 31, 21], 26),
        (DitgCodec::G729_2, [32, 22, 25, 15], 50),
        (DitgCodec::G729_3, [42, 32, 31, 21], 33),
    ];
    for (codec, sizes, pps) in table {
        for (i, (crtp, vad)) in [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .enumerate()
        {
            assert_eq!(
                codec.ditg_size(crtp, vad),
                sizes[i],
                "{codec:?} crtp {crtp} vad {vad}"
            );
            let want = sizes[i].max(MIN_PAYLOAD);
            let spec = App::Voip { codec, crtp, vad }.spec().unwrap();
            // 60 s of schedule.
            let n = pps as usize * 60;
            let (secs, pk, bytes, all) = run(&spec, n);
            assert!(all.iter().all(|&s| s == want), "{codec:?}");
            let rate = pk as f64 / secs;
            assert!(
                (rate - pps as f64).abs() < 0.005 * pps as f64,
                "{codec:?} rate {rate}"
            );
            let bitrate = bytes as f64 * 8.0 / secs;
            let nominal = want as f64 * 8.0 * pps as f64;
            assert!(
                (bitrate - nominal).abs() < 0.005 * nominal,
                "{codec:?} {bitrate} vs {nominal}"
            );
            assert_eq!(spec.nominal_rate_pps(), Some(pps as f64));
            assert_eq!(spec.nominal_payload_bytes(), want as f64);
            assert_eq!(spec.app_transport(), Some(Transport::Udp));
            assert!(spec.voip_codec().is_some());
        }
    }
    let c = App::Voip {
        codec: DitgCodec::G729_2,
        crtp: false,
        vad: false,
    }
    .spec()
    .unwrap()
    .voip_codec()
    .unwrap();
    assert_eq!(c.kind, CodecKind::G729A);
    assert!((c.packet_ms - 20.0).abs() < 1e-9);
}

#[test]
fn dns() {
    // Constant 0.56 pps; size 100 + 220·U truncated: 100..=319, mean 209.5.
    let spec = App::Dns.spec().unwrap();
    let (secs, pk, _, sizes) = run(&spec, 50_000);
    assert!((pk as f64 / secs - 0.56).abs() < 1e-6);
    let mean = sizes.iter().map(|&s| s as f64).sum::<f64>() / pk as f64;
    assert!((mean - 209.5).abs() < 0.02 * 209.5, "{mean}");
    assert!(sizes.iter().all(|&s| (100..=319).contains(&s)));
    assert!((spec.nominal_payload_bytes() - 209.5).abs() < 1e-9);
    assert_eq!(spec.max_payload(), 320);
}

#[test]
fn quake3() {
    // IDT 0.6·Exp(4.29) + 0.4·10.75 ms: mean 6.874 ms → 145.48 pps.
    // Size N(64.151757, 3.2035755) truncated: mean 63.65.
    let spec = App::Quake3.spec().unwrap();
    let (secs, pk, _, sizes) = run(&spec, 200_000);
    let rate = pk as f64 / secs;
    assert!((rate - 1000.0 / 6.874).abs() < 0.02 * 145.48, "{rate}");
    assert!((spec.nominal_rate_pps().unwrap() - 1000.0 / 6.874).abs() < 1e-6);
    let mean = sizes.iter().map(|&s| s as f64).sum::<f64>() / pk as f64;
    assert!((mean - 63.65).abs() < 0.02 * 63.65, "{mean}");
}

fn median_gap_ms(spec: &FlowSpec, n: usize) -> f64 {
    let mut g = spec.generator(SEED).unwrap();
    let mut x: Vec<u64> = (0..n).map(|_| g.next().gap_ns).collect();
    x.sort_unstable();
    x[n / 2] as f64 / 1e6
}

#[test]
fn counter_strike_active() {
    // IDT Student-t μ 41.6994 ms (ν = 0.70: no mean, so the median is
    // checked: 23.98 pps); size mixture 0.3732·N(34.8352, 4.3915) +
    // 0.6268·N(49.4904, 3.6186): mean 44.021, truncated 43.52.
    let spec = App::CsActive.spec().unwrap();
    let med = median_gap_ms(&spec, 200_000);
    assert!((med - 41.6994).abs() < 0.01, "{med}");
    assert!((spec.nominal_rate_pps().unwrap() - 1000.0 / 41.6994).abs() < 1e-9);
    let (_, pk, _, sizes) = run(&spec, 200_000);
    let mean = sizes.iter().map(|&s| s as f64).sum::<f64>() / pk as f64;
    let want = 0.3732 * 34.8352 + 0.6268 * 49.4904 - 0.5;
    assert!((mean - want).abs() < 0.02 * want, "{mean} vs {want}");
    assert!((spec.nominal_payload_bytes() - want).abs() < 0.01);
}

#[test]
fn counter_strike_idle() {
    // IDT Student-t μ 41.6858 (ν 1.08: a mean exists, tails are extreme);
    // sizes discrete 27..35 with D-ITG's probabilities.
    let spec = App::CsIdle.spec().unwrap();
    let med = median_gap_ms(&spec, 200_000);
    assert!((med - 41.6858).abs() < 0.01, "{med}");
    let (secs, pk, _, sizes) = run(&spec, 200_000);
    let rate = pk as f64 / secs;
    assert!((rate - 1000.0 / 41.6858).abs() < 0.05 * 23.99, "{rate}");
    let probs = [
        (27, 0.8312),
        (28, 0.0018),
        (29, 0.0453),
        (30, 0.0195),
        (31, 0.0879),
        (32, 0.0024),
        (33, 0.0106),
        (35, 0.0013),
    ];
    let want: f64 = probs.iter().map(|(v, p)| *v as f64 * p).sum();
    let mean = sizes.iter().map(|&s| s as f64).sum::<f64>() / pk as f64;
    assert!((mean - want).abs() < 0.01 * want, "{mean} vs {want}");
    let share27 = sizes.iter().filter(|&&s| s == 27).count() as f64 / pk as f64;
    assert!((share27 - 0.8312).abs() < 0.005);
}

#[test]
fn telnet() {
    // IDT 1.1·Pareto(0.95, 1): median 1.1·2^(1/0.95) = 2.2817 ms, no mean.
    // Sizes 21 + D; 21..23 are raised to the 24-byte probe header.
    let spec = App::Telnet.spec().unwrap();
    assert_eq!(spec.app_transport(), Some(Transport::Tcp));
    assert_eq!(spec.nominal_rate_pps(), None);
    let med = median_gap_ms(&spec, 100_000);
    let want = 1.1 * 2f64.powf(1.0 / 0.95);
    assert!((med - want).abs() < 0.03 * want, "{med} vs {want}");
    let (_, pk, _, sizes) = run(&spec, 100_000);
    let w = [
        0.65, 0.13, 0.07, 0.05, 0.03, 0.01, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.005, 0.005,
        0.005,
    ];
    let want: f64 = w
        .iter()
        .enumerate()
        .map(|(d, p)| (21.0 + d as f64).max(24.0) * p)
        .sum();
    let mean = sizes.iter().map(|&s| s as f64).sum::<f64>() / pk as f64;
    assert!((mean - want).abs() < 0.01 * want, "{mean} vs {want}");
    assert!(
        (spec.nominal_payload_bytes() - want).abs() < 1e-9,
        "{}",
        spec.nominal_payload_bytes()
    );
}

#[test]
fn realistic_voip_and_opus() {
    // G.711 20 ms: 160 B + 12 B RTP at 50 pps; G.729 20 ms: 20 + 12;
    // G.723.1 30 ms: 24 + 12 at 33.3 pps; Opus 24 kbit/s 20 ms: 60 + 12.
    for (codec, ptime, size) in [
        (RealCodec::G711, 20, 172),
        (RealCodec::G729, 20, 32),
        (RealCodec::G723_1, 30, 36),
        (
            RealCodec::Opus {
                bitrate_bps: 24_000,
            },
            20,
            72,
        ),
    ] {
        let spec = App::VoipReal {
            codec,
            ptime_ms: ptime,
            crtp: false,
            vad: false,
        }
        .spec()
        .unwrap();
        let (secs, pk, _, sizes) = run(&spec, 3000);
        assert!(sizes.iter().all(|&s| s == size), "{codec:?}");
        assert!((pk as f64 / secs - 1000.0 / ptime as f64).abs() < 1e-3);
        assert!((spec.voip_codec().unwrap().packet_ms - ptime as f64).abs() < 1e-9);
    }
    // P.59 talkspurts: ON share 1.004/(1.004 + 1.587) = 0.3875 of 50 pps.
    let spec = App::VoipReal {
        codec: RealCodec::G711,
        ptime_ms: 20,
        crtp: false,
        vad: true,
    }
    .spec()
    .unwrap();
    let (secs, pk, _, _) = run(&spec, 200_000);
    let want = 50.0 * 1.004 / (1.004 + 1.587);
    assert!(
        (pk as f64 / secs - want).abs() < 0.03 * want,
        "{}",
        pk as f64 / secs
    );
    assert!((spec.nominal_rate_pps().unwrap() - want).abs() < 1e-9);
    // Bad packet times name --ptime; Opus bitrate out of range names --bitrate.
    let e = App::VoipReal {
        codec: RealCodec::G723_1,
        ptime_ms: 20,
        crtp: false,
        vad: false,
    }
    .spec()
    .unwrap_err();
    assert!(e.to_string().starts_with("--ptime:"), "{e}");
    let o = AppOptions {
        app: "opus".into(),
        bitrate_kbps: Some(1000.0),
        ..Default::default()
    };
    assert!(o.build().unwrap_err().to_string().starts_with("--bitrate:"));
    let o = AppOptions {
        app: "opus".into(),
        bitrate_kbps: Some(64.0),
        ..Default::default()
    };
    let spec = o.build().unwrap().spec().unwrap();
    assert_eq!(spec.max_payload(), 160 + 12);
}

#[test]
fn video_frames_split_back_to_back() {
    // 25 fps, log-normal frames mean 20 000 B sd 8 000, packets ≤ 1400 B.
    let o = AppOptions {
        app: "video".into(),
        fps: Some(25.0),
        frame_bytes: Some(20_000.0),
        frame_sd: Some(8_000.0),
        packet_max: Some(1400),
        ..Default::default()
    };
    let spec = o.build().unwrap().spec().unwrap();
    assert_eq!(spec.max_payload(), 1400);
    // Gap after a packet: 0 inside a frame, the frame interval after its
    // last packet.
    let mut g = spec.generator(SEED).unwrap();
    let (mut frames, mut bytes, mut ns, mut packets) = (0u64, 0u64, 0u64, 0u64);
    let mut frame_bytes = 0u64;
    let mut last_frame = Vec::new();
    while frames < 10_000 {
        let d = g.next();
        assert!(d.size <= 1400 && d.size >= MIN_PAYLOAD);
        frame_bytes += d.size as u64;
        bytes += d.size as u64;
        ns += d.gap_ns;
        packets += 1;
        if d.gap_ns != 0 {
            assert_eq!(d.gap_ns, 40_000_000);
            frames += 1;
            last_frame.push(frame_bytes);
            frame_bytes = 0;
        }
    }
    let mean_frame = last_frame.iter().sum::<u64>() as f64 / last_frame.len() as f64;
    assert!(
        (mean_frame - 20_000.0).abs() < 0.02 * 20_000.0,
        "{mean_frame}"
    );
    let bitrate = bytes as f64 * 8.0 / (ns as f64 / 1e9);
    assert!((bitrate - 4e6).abs() < 0.03 * 4e6, "{bitrate}");
    // Nominal packets per second ≈ 25 · E[ceil(F/1400)].
    let pps = spec.nominal_rate_pps().unwrap();
    let measured = packets as f64 / (ns as f64 / 1e9);
    assert!(
        (pps - measured).abs() < 0.03 * measured,
        "{pps} vs {measured}"
    );
}

#[test]
fn file_transfer_sums_exactly() {
    for (total, record) in [
        (5_000_000u64, 16_384u32),
        (100_010, 100),
        (50, 40),
        (24, 16_384),
    ] {
        let o = AppOptions {
            app: "file".into(),
            bytes: Some(total),
            record: Some(record),
            ..Default::default()
        };
        let spec = o.build().unwrap().spec().unwrap();
        assert_eq!(spec.transfer_bytes, Some(total));
        assert!(spec.is_max());
        assert_eq!(spec.app_transport(), Some(Transport::Tcp));
        let mut g = spec.generator(1).unwrap();
        let mut sent = 0u64;
        while sent < total {
            let d = g.next();
            assert!(
                d.size >= MIN_PAYLOAD && d.size <= record.max(MIN_PAYLOAD),
                "{d:?}"
            );
            sent += d.size as u64;
        }
        assert_eq!(sent, total, "record {record}");
    }
    let o = AppOptions {
        app: "file".into(),
        ..Default::default()
    };
    assert!(o.build().unwrap_err().to_string().starts_with("--bytes:"));
    let o = AppOptions {
        app: "dns".into(),
        codec: Some("G.711.1".into()),
        ..Default::default()
    };
    assert!(o.build().unwrap_err().to_string().starts_with("--codec:"));
    let o = AppOptions {
        app: "skype".into(),
        ..Default::default()
    };
    assert!(o.build().unwrap_err().to_string().starts_with("--app:"));
}

/// Campaigns sweep `DITG_APPS` passing at most `--codec`: each must build
/// from its name (and a codec for voip) alone, and be an `--app` name.
#[test]
fn ditg_apps_build_from_their_name_alone() {
    for name in DITG_APPS {
        assert!(APP_NAMES.split(' ').any(|n| n == name), "{name}");
        for codec in DitgCodec::ALL {
            let o = AppOptions {
                app: name.into(),
                codec: (name == "voip").then(|| codec.name().into()),
                ..Default::default()
            };
            assert!(o.build().is_ok(), "{name} {codec:?}: {:?}", o.build());
        }
    }
}
