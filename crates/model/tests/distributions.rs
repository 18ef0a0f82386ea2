//! Every distribution against its analytic moments (or, for heavy tails,
//! quantiles) over 100 000 draws of a fixed seed; D-ITG's flag semantics;
//! clamping; reproducibility.

use wirebench_model::{Dist, FlowSpec, IdtModel, SizeModel, MAX_PAYLOAD, MIN_PAYLOAD};

const N: usize = 100_000;
const SEED: u64 = 20_260_421;

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let v = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, v)
}

fn quantile(x: &[f64], q: f64) -> f64 {
    let mut s = x.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s[((s.len() - 1) as f64 * q).round() as usize]
}

/// Share of draws at or below `v`.
fn cdf(x: &[f64], v: f64) -> f64 {
    x.iter().filter(|&&a| a <= v).count() as f64 / x.len() as f64
}

/// Mean within 5 standard errors, variance within `var_tol` relative.
fn check_moments(name: &str, d: &Dist, mean: f64, var: f64, var_tol: f64) {
    let x = d.draws(SEED, N);
    let (m, v) = mean_var(&x);
    let se = (var / N as f64).sqrt();
    assert!(
        (m - mean).abs() < 5.0 * se,
        "{name}: mean {m} vs {mean} (se {se})"
    );
    assert!(
        (v - var).abs() < var_tol * var,
        "{name}: variance {v} vs {var}"
    );
}

#[test]
fn constant() {
    let x = Dist::Constant { value: 7.5 }.draws(SEED, 1000);
    assert!(x.iter().all(|&v| v == 7.5));
}

#[test]
fn uniform() {
    let d = Dist::Uniform {
        min: 2.0,
        max: 10.0,
    };
    check_moments("uniform", &d, 6.0, 64.0 / 12.0, 0.02);
    let x = d.draws(SEED, N);
    assert!(x.iter().all(|&v| (2.0..10.0).contains(&v)));
}

#[test]
fn exponential() {
    check_moments(
        "exponential",
        &Dist::Exponential { mean: 4.0 },
        4.0,
        16.0,
        0.04,
    );
}

#[test]
fn normal() {
    check_moments(
        "normal",
        &Dist::Normal {
            mean: 50.0,
            sd: 3.0,
        },
        50.0,
        9.0,
        0.02,
    );
}

#[test]
fn poisson() {
    check_moments("poisson", &Dist::Poisson { lambda: 12.0 }, 12.0, 12.0, 0.03);
    let x = Dist::Poisson { lambda: 12.0 }.draws(SEED, 1000);
    assert!(x.iter().all(|v| v.fract() == 0.0 && *v >= 0.0));
}

#[test]
fn reciprocal_poisson_is_ditg_minus_o() {
    // D-ITG -O λ: IDT = 1000 / K, K ~ Poisson(λ), a zero count drawn again.
    // E[IDT] = 1000 · Σ_{k≥1} p(k)/k / (1 − p(0)), summed here independently.
    let lambda: f64 = 5.0;
    let (mut p, mut s) = ((-lambda).exp(), 0.0);
    let p0 = p;
    for k in 1..200 {
        p *= lambda / k as f64;
        s += p / k as f64;
    }
    let want = 1000.0 * s / (1.0 - p0);
    let m = IdtModel::from_ditg('O', &[lambda]).unwrap();
    let IdtModel::Random(d) = &m else { panic!() };
    let x = d.draws(SEED, N);
    let (mean, var) = mean_var(&x);
    assert!(
        (mean - want).abs() < 5.0 * (var / N as f64).sqrt(),
        "{mean} vs {want}"
    );
    assert!((d.mean().unwrap() - want).abs() < 1e-6 * want);
    // Values are 1000/k only: never a Poisson *process*.
    assert!(x
        .iter()
        .all(|v| (1000.0 / v - (1000.0 / v).round()).abs() < 1e-9));
    // Its rate is therefore not λ: 1000/E[IDT] ≠ 5 pps.
    let spec = FlowSpec::new(m, SizeModel::Constant { bytes: 100 }).unwrap();
    assert!((spec.nominal_rate_pps().unwrap() - 1000.0 / want).abs() < 1e-9);
}

#[test]
fn pareto() {
    // shape 3, minimum 2: mean 3, median 2·2^(1/3).
    let d = Dist::Pareto {
        shape: 3.0,
        min: 2.0,
    };
    let x = d.draws(SEED, N);
    let (m, _) = mean_var(&x);
    assert!((m - 3.0).abs() < 0.03, "{m}");
    assert!(x.iter().all(|&v| v >= 2.0));
    let med = 2.0 * 2f64.powf(1.0 / 3.0);
    assert!((cdf(&x, med) - 0.5).abs() < 0.01);
    // Heavy tail (shape 0.95, Telnet's): no mean, check quantiles
    // F(x) = 1 − (xm/x)^α.
    let d = Dist::Pareto {
        shape: 0.95,
        min: 1.1,
    };
    assert_eq!(d.mean(), None);
    let x = d.draws(SEED, N);
    for q in [0.25f64, 0.5, 0.9, 0.99] {
        let xq = 1.1 * (1.0 - q).powf(-1.0 / 0.95);
        assert!((cdf(&x, xq) - q).abs() < 0.01, "q{q}");
    }
}

#[test]
fn cauchy() {
    // Quartiles at location ± scale.
    let d = Dist::Cauchy {
        location: 10.0,
        scale: 2.0,
    };
    let x = d.draws(SEED, N);
    assert!((quantile(&x, 0.5) - 10.0).abs() < 0.05);
    assert!((cdf(&x, 8.0) - 0.25).abs() < 0.01);
    assert!((cdf(&x, 12.0) - 0.75).abs() < 0.01);
}

#[test]
fn gamma() {
    check_moments(
        "gamma",
        &Dist::Gamma {
            shape: 2.0,
            scale: 3.0,
        },
        6.0,
        18.0,
        0.04,
    );
}

#[test]
fn weibull_is_scale_then_shape() {
    // -W 2 1.5: scale 2, shape 1.5. Mean 2·Γ(1+1/1.5) = 1.805490,
    // variance 4·(Γ(1+2/1.5) − Γ(1+1/1.5)²) = 4·(1.190639 − 0.815008) = 1.502524.
    let m = IdtModel::from_ditg('W', &[2.0, 1.5]).unwrap();
    let IdtModel::Random(d) = m else { panic!() };
    assert_eq!(
        d,
        Dist::Weibull {
            scale: 2.0,
            shape: 1.5
        }
    );
    check_moments("weibull", &d, 1.805490, 1.502524, 0.03);
    // Median = scale·(ln 2)^(1/shape).
    let x = d.draws(SEED, N);
    assert!((cdf(&x, 2.0 * 2f64.ln().powf(1.0 / 1.5)) - 0.5).abs() < 0.01);
}

#[test]
fn student_t_ditg_form() {
    // ν = 5: mean μ, variance σ²ν/(ν−2) = 4·5/3.
    let d = Dist::StudentT {
        location: 10.0,
        scale: 2.0,
        dof: 5.0,
    };
    check_moments("student-t", &d, 10.0, 20.0 / 3.0, 0.06);
    // ν = 1 is Cauchy: quartiles at μ ± σ.
    let x = Dist::StudentT {
        location: 0.0,
        scale: 1.0,
        dof: 1.0,
    }
    .draws(SEED, N);
    assert!((cdf(&x, -1.0) - 0.25).abs() < 0.01);
    assert!((cdf(&x, 1.0) - 0.75).abs() < 0.01);
    // ν = 2: P(T ≤ t) = ½ + t/(2·sqrt(2 + t²)); at t = 2: 0.908248.
    let x = Dist::StudentT {
        location: 0.0,
        scale: 1.0,
        dof: 2.0,
    }
    .draws(SEED, N);
    assert!((cdf(&x, 2.0) - 0.908248).abs() < 0.01);
}

#[test]
fn log_normal() {
    check_moments(
        "log-normal",
        &Dist::LogNormal {
            mean: 1000.0,
            sd: 400.0,
        },
        1000.0,
        160_000.0,
        0.06,
    );
}

#[test]
fn discrete_and_mixture() {
    let d = Dist::Discrete {
        values: vec![1.0, 2.0, 5.0],
        weights: vec![0.5, 0.3, 0.2],
    };
    let x = d.draws(SEED, N);
    for (v, p) in [(1.0, 0.5), (2.0, 0.3), (5.0, 0.2)] {
        let f = x.iter().filter(|&&a| a == v).count() as f64 / N as f64;
        assert!((f - p).abs() < 0.01, "{v}: {f}");
    }
    // Mixture: mean Σwμ, variance Σw(σ²+μ²) − mean².
    let d = Dist::Mixture {
        parts: vec![
            (
                0.3,
                Dist::Normal {
                    mean: 10.0,
                    sd: 1.0,
                },
            ),
            (
                0.7,
                Dist::Normal {
                    mean: 20.0,
                    sd: 2.0,
                },
            ),
        ],
    };
    let mean = 0.3 * 10.0 + 0.7 * 20.0;
    let var = 0.3 * (1.0 + 100.0) + 0.7 * (4.0 + 400.0) - mean * mean;
    check_moments("mixture", &d, mean, var, 0.03);
}

#[test]
fn file_values_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("idt.txt");
    std::fs::write(&p, "1.5\n# comment\n2\n\n3\n").unwrap();
    let d = Dist::from_file("-Ft", p.to_str().unwrap()).unwrap();
    assert_eq!(d.draws(1, 7), vec![1.5, 2.0, 3.0, 1.5, 2.0, 3.0, 1.5]);
    std::fs::write(&p, "1\nabc\n").unwrap();
    let e = Dist::from_file("-Ft", p.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("-Ft:") && e.contains(":2:"), "{e}");
}

fn gaps_ms(spec: &FlowSpec, n: usize) -> Vec<f64> {
    let mut g = spec.generator(SEED).unwrap();
    (0..n).map(|_| g.next().gap_ns as f64 / 1e6).collect()
}

#[test]
fn ditg_rate_flags() {
    let sized = |m| FlowSpec::new(m, SizeModel::Constant { bytes: 100 }).unwrap();
    // -E 200: Poisson process, mean IDT 5 ms, sd 5 ms.
    let x = gaps_ms(&sized(IdtModel::from_ditg('E', &[200.0]).unwrap()), N);
    let (m, v) = mean_var(&x);
    assert!(
        (m - 5.0).abs() < 0.05 && (v.sqrt() - 5.0).abs() < 0.1,
        "{m} {v}"
    );
    // -U 100 1000: IDT uniform in [1, 10] ms.
    let x = gaps_ms(
        &sized(IdtModel::from_ditg('U', &[100.0, 1000.0]).unwrap()),
        N,
    );
    assert!(x.iter().all(|&v| (1.0..=10.0).contains(&v)));
    assert!((mean_var(&x).0 - 5.5).abs() < 0.05);
    // -C 300: 300 pps exactly over a long schedule (fractional ns carried).
    let x = gaps_ms(&sized(IdtModel::from_ditg('C', &[300.0]).unwrap()), 300_000);
    let total: f64 = x.iter().sum();
    assert!((total - 1_000_000.0).abs() < 1e-3, "{total}");
    // Errors name the flag.
    let e = IdtModel::from_ditg('V', &[0.0, 1.0])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("-V:"), "{e}");
    let e = SizeModel::from_ditg('v', &[-1.0, 1.0])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("-v:"), "{e}");
    let e = IdtModel::from_ditg('U', &[100.0]).unwrap_err().to_string();
    assert!(e.starts_with("-U:") && e.contains("2 value"), "{e}");
    let e = IdtModel::from_ditg('U', &[1000.0, 100.0])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("-U:"), "{e}");
    let e = SizeModel::from_ditg('c', &[10.0]).unwrap_err().to_string();
    assert!(e.starts_with("-c:"), "{e}");
    let e = IdtModel::from_ditg('W', &[1.0, -2.0])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("-W:") && e.contains("shape"), "{e}");
}

#[test]
fn negative_draws_are_clamped_and_counted() {
    // Normal IDT mean 0.5 ms, sd 1 ms: P(X < 0) = Φ(−0.5) = 0.3085.
    let spec = FlowSpec::new(
        IdtModel::Random(Dist::Normal { mean: 0.5, sd: 1.0 }),
        SizeModel::Constant { bytes: 100 },
    )
    .unwrap();
    let mut g = spec.generator(SEED).unwrap();
    let mut zero = 0;
    for _ in 0..N {
        if g.next().gap_ns == 0 {
            zero += 1;
        }
    }
    let share = g.clamps() as f64 / N as f64;
    assert!((share - 0.3085).abs() < 0.01, "{share}");
    assert_eq!(zero as u64, g.clamps());
}

#[test]
fn sizes_truncated_and_clamped() {
    // -n 100 10: truncation lowers the mean by ½ byte.
    let spec = FlowSpec::new(
        IdtModel::Constant { pps: 10.0 },
        SizeModel::from_ditg('n', &[100.0, 10.0]).unwrap(),
    )
    .unwrap();
    let mut g = spec.generator(SEED).unwrap();
    let x: Vec<f64> = (0..N).map(|_| g.next().size as f64).collect();
    assert!((mean_var(&x).0 - 99.5).abs() < 0.2);
    assert!((spec.nominal_payload_bytes() - 99.5).abs() < 1e-9);
    // -n 20 40: many draws below 24 (clamped up), some negative (counted).
    let spec = FlowSpec::new(
        IdtModel::Constant { pps: 10.0 },
        SizeModel::from_ditg('n', &[20.0, 40.0]).unwrap(),
    )
    .unwrap();
    let mut g = spec.generator(SEED).unwrap();
    let mut sizes = Vec::new();
    for _ in 0..N {
        sizes.push(g.next().size);
    }
    assert!(sizes.iter().all(|&s| s >= MIN_PAYLOAD));
    let neg = g.clamps() as f64 / N as f64; // Φ(−0.5) = 0.3085
    assert!((neg - 0.3085).abs() < 0.01, "{neg}");
    // -e 100000: large draws capped at 64000.
    let spec = FlowSpec::new(
        IdtModel::Constant { pps: 10.0 },
        SizeModel::from_ditg('e', &[100_000.0]).unwrap(),
    )
    .unwrap();
    let mut g = spec.generator(SEED).unwrap();
    let s: Vec<u32> = (0..10_000).map(|_| g.next().size).collect();
    assert!(s.iter().all(|&v| v <= MAX_PAYLOAD) && s.contains(&MAX_PAYLOAD));
    assert_eq!(spec.max_payload(), MAX_PAYLOAD);
}

#[test]
fn same_seed_same_sequence() {
    let spec = FlowSpec::new(
        IdtModel::from_ditg('E', &[1000.0]).unwrap(),
        SizeModel::from_ditg('u', &[100.0, 1000.0]).unwrap(),
    )
    .unwrap();
    let run = |seed| {
        let mut g = spec.generator(seed).unwrap();
        (0..1000).map(|_| g.next()).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    // Changing the size law leaves the departure times alone (separate streams).
    let other = FlowSpec {
        size: SizeModel::from_ditg('e', &[300.0]).unwrap(),
        ..spec.clone()
    };
    let mut a = spec.generator(7).unwrap();
    let mut b = other.generator(7).unwrap();
    for _ in 0..1000 {
        assert_eq!(a.next().gap_ns, b.next().gap_ns);
    }
}

#[test]
fn on_off_bursts() {
    // 1000 pps during ON = constant 100 ms, OFF = constant 400 ms:
    // an ON period holds a packet at its start and one per ms up to its end
    // (101), then the OFF period is one 400 ms gap. 10 100 departures: 100
    // OFF gaps, 100·400 ms + 10 000·1 ms = 50 s.
    let mut spec = FlowSpec::constant(1000.0, 100).unwrap();
    spec.burst = Some(wirebench_model::Burst::from_ditg(&["C", "100", "C", "400"]).unwrap());
    spec.validate().unwrap();
    let mut g = spec.generator(1).unwrap();
    let mut t = 0u64;
    let mut long_gaps = Vec::new();
    for _ in 0..10_100 {
        let d = g.next();
        if d.gap_ns > 2_000_000 {
            long_gaps.push(d.gap_ns);
        }
        t += d.gap_ns;
    }
    assert_eq!(long_gaps.len(), 100);
    assert!(long_gaps.iter().all(|&x| x == 400_000_000), "{long_gaps:?}");
    assert_eq!(t, 50_000_000_000);
    // Exponential ON/OFF: the long-run rate is the ON share of the rate.
    let mut spec = FlowSpec::constant(100.0, 100).unwrap();
    spec.burst = Some(wirebench_model::Burst::from_ditg(&["E", "2000", "E", "3000"]).unwrap());
    let mut g = spec.generator(SEED).unwrap();
    let n = 200_000;
    let total: u64 = (0..n).map(|_| g.next().gap_ns).sum();
    let rate = n as f64 / (total as f64 / 1e9);
    assert!((rate - 40.0).abs() < 2.0, "{rate}");
    assert!((spec.nominal_rate_pps().unwrap() - 40.0).abs() < 1e-9);
    // Bad -B arguments name -B.
    for bad in [
        &["C", "100"][..],
        &["Q", "1", "C", "1"],
        &["C", "x", "C", "1"],
        &["V", "0", "1", "C", "1"],
    ] {
        let e = wirebench_model::Burst::from_ditg(bad)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("-B"), "{e}");
    }
}
