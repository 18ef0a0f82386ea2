//! Random distributions shared by inter-departure times (milliseconds),
//! payload sizes (bytes) and ON/OFF durations (milliseconds).
//!
//! A [`Dist`] is plain data in the value's own unit; D-ITG's rate-based
//! flags (`-C -U -E -O`) are converted to it by [`crate::IdtModel::from_ditg`].
//! A `Sampler` is the prepared, allocation-free form the generator draws
//! from on the hot path.

use std::sync::Arc;

use rand::Rng;
use rand_distr::{Cauchy, Distribution, Exp1, Gamma, LogNormal, Normal, Pareto, Poisson, Weibull};

use crate::ModelError;

/// A distribution of values in the unit of its use (ms or bytes).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Dist {
    /// Always the same value.
    Constant {
        /// The value.
        value: f64,
    },
    /// Uniform on [min, max).
    Uniform {
        /// Lower bound (included).
        min: f64,
        /// Upper bound (excluded).
        max: f64,
    },
    /// Exponential with the given mean.
    Exponential {
        /// Mean (1/rate).
        mean: f64,
    },
    /// Normal (Gaussian).
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        sd: f64,
    },
    /// A Poisson count with mean `lambda`.
    Poisson {
        /// Mean count.
        lambda: f64,
    },
    /// `numerator / Poisson(lambda)`: D-ITG's `-O` inter-departure time. A
    /// zero count would be an infinite gap; it is drawn again (see docs).
    ReciprocalPoisson {
        /// The value divided by the count.
        numerator: f64,
        /// Mean of the Poisson count.
        lambda: f64,
    },
    /// `min · U^(−1/shape)`.
    Pareto {
        /// Shape α.
        shape: f64,
        /// Scale: the smallest value.
        min: f64,
    },
    /// Cauchy (Lorentz).
    Cauchy {
        /// Location (median).
        location: f64,
        /// Scale (half width at half maximum).
        scale: f64,
    },
    /// `scale · Gamma(shape)`.
    Gamma {
        /// Shape k.
        shape: f64,
        /// Scale θ.
        scale: f64,
    },
    /// `scale · (−ln U)^(1/shape)` (D-ITG's `-W scale shape`).
    Weibull {
        /// Scale λ.
        scale: f64,
        /// Shape k.
        shape: f64,
    },
    /// D-ITG's Student-t: `location + scale · Z · sqrt(dof / (2G))`,
    /// Z ~ N(0,1), G ~ Gamma(dof/2).
    StudentT {
        /// Location.
        location: f64,
        /// Scale.
        scale: f64,
        /// Degrees of freedom.
        dof: f64,
    },
    /// Log-normal given by its own mean and standard deviation.
    LogNormal {
        /// Mean of the values (not of their logarithm).
        mean: f64,
        /// Standard deviation of the values.
        sd: f64,
    },
    /// `values[i]` with probability `weights[i] / Σ weights`.
    Discrete {
        /// The values.
        values: Vec<f64>,
        /// Their weights (any positive scale).
        weights: Vec<f64>,
    },
    /// Component `i` chosen with probability `weight / Σ weights`.
    Mixture {
        /// (weight, distribution) pairs.
        parts: Vec<(f64, Dist)>,
    },
    /// Values read from a file, used in order and cycled (D-ITG `-Ft`/`-Fs`).
    File {
        /// The file the values came from, for messages and labels.
        path: String,
        /// The values, shared between flows that use the same file.
        #[serde(with = "shared_values")]
        values: Arc<[f64]>,
    },
    /// A mix of values in a fixed, evenly interleaved repeating order (a
    /// size mix such as IMIX, see [`Dist::mix`]): exact proportions in
    /// every cycle, no randomness.
    Sequence {
        /// The mix as given (`24:7,548:4,1472:1`), for messages and labels.
        mix: String,
        /// One cycle of the values.
        #[serde(with = "shared_values")]
        values: Arc<[f64]>,
    },
}

/// A file's values travel as a plain list (a reverse flow's model is sent
/// to the receiver, which draws from the same values).
mod shared_values {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(v: &Arc<[f64]>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[f64]>, D::Error> {
        Ok(Vec::<f64>::deserialize(d)?.into())
    }
}

/// Largest sum of the weights of a [`Dist::mix`] (one cycle's length).
pub const MAX_MIX_WEIGHT: u32 = 10_000;

fn bad(flag: &str, reason: impl Into<String>) -> ModelError {
    ModelError::BadParam {
        flag: flag.to_string(),
        reason: reason.into(),
    }
}

fn finite(flag: &str, what: &str, v: f64) -> Result<(), ModelError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(bad(
            flag,
            format!("{what} must be a finite number, got {v}"),
        ))
    }
}

fn positive(flag: &str, what: &str, v: f64) -> Result<(), ModelError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(bad(flag, format!("{what} must be > 0, got {v}")))
    }
}

impl Dist {
    /// Checks the parameters; `flag` names the option in the error.
    pub fn validate(&self, flag: &str) -> Result<(), ModelError> {
        match self {
            Dist::Constant { value } => finite(flag, "value", *value)?,
            Dist::Uniform { min, max } => {
                finite(flag, "minimum", *min)?;
                finite(flag, "maximum", *max)?;
                if min > max {
                    return Err(bad(flag, format!("minimum {min} is above maximum {max}")));
                }
            }
            Dist::Exponential { mean } => positive(flag, "mean", *mean)?,
            Dist::Normal { mean, sd } => {
                finite(flag, "mean", *mean)?;
                if !(sd.is_finite() && *sd >= 0.0) {
                    return Err(bad(
                        flag,
                        format!("standard deviation must be >= 0, got {sd}"),
                    ));
                }
            }
            Dist::Poisson { lambda } => positive(flag, "lambda (mean)", *lambda)?,
            Dist::ReciprocalPoisson { numerator, lambda } => {
                positive(flag, "lambda (mean)", *lambda)?;
                positive(flag, "numerator", *numerator)?;
            }
            Dist::Pareto { shape, min } => {
                positive(flag, "shape (alpha)", *shape)?;
                positive(flag, "minimum (scale)", *min)?;
            }
            Dist::Cauchy { location, scale } => {
                finite(flag, "location", *location)?;
                positive(flag, "scale", *scale)?;
            }
            Dist::Gamma { shape, scale } => {
                positive(flag, "shape (k)", *shape)?;
                positive(flag, "scale (theta)", *scale)?;
            }
            Dist::Weibull { scale, shape } => {
                positive(flag, "scale", *scale)?;
                positive(flag, "shape", *shape)?;
            }
            Dist::StudentT {
                location,
                scale,
                dof,
            } => {
                finite(flag, "location", *location)?;
                positive(flag, "scale", *scale)?;
                positive(flag, "degrees of freedom", *dof)?;
            }
            Dist::LogNormal { mean, sd } => {
                positive(flag, "mean", *mean)?;
                if !(sd.is_finite() && *sd >= 0.0) {
                    return Err(bad(
                        flag,
                        format!("standard deviation must be >= 0, got {sd}"),
                    ));
                }
            }
            Dist::Discrete { values, weights } => {
                if values.is_empty() || values.len() != weights.len() {
                    return Err(bad(flag, "needs as many weights as values, at least one"));
                }
                for v in values {
                    finite(flag, "value", *v)?;
                }
                weights_ok(flag, weights.iter().copied())?;
            }
            Dist::Mixture { parts } => {
                if parts.is_empty() {
                    return Err(bad(flag, "a mixture needs at least one component"));
                }
                weights_ok(flag, parts.iter().map(|p| p.0))?;
                for (_, d) in parts {
                    d.validate(flag)?;
                }
            }
            Dist::File { path: what, values } | Dist::Sequence { mix: what, values } => {
                if values.is_empty() {
                    return Err(bad(flag, format!("{what}: no values")));
                }
                for v in values.iter() {
                    finite(flag, "value", *v)?;
                }
            }
        }
        Ok(())
    }

    /// Reads one number per line (blank lines and `#` comments skipped).
    pub fn from_file(flag: &str, path: &str) -> Result<Dist, ModelError> {
        let text = wirebench_input::read_text(std::path::Path::new(path))
            .map_err(|e| bad(flag, e.to_string()))?;
        let mut values = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.split('#').next().unwrap_or("").trim();
            if t.is_empty() {
                continue;
            }
            let v: f64 = t
                .parse()
                .map_err(|_| bad(flag, format!("{path}:{}: not a number: {t:?}", i + 1)))?;
            if !v.is_finite() || v < 0.0 {
                return Err(bad(
                    flag,
                    format!("{path}:{}: values must be finite and >= 0, got {t}", i + 1),
                ));
            }
            values.push(v);
        }
        let d = Dist::File {
            path: path.to_string(),
            values: values.into(),
        };
        d.validate(flag)?;
        Ok(d)
    }

    /// A mix `VALUE:WEIGHT,...` (whole positive weights, e.g. IMIX's
    /// `64:7,594:4,1518:1`) as a [`Dist::Sequence`]: one cycle holds each
    /// value `weight` times, spread evenly by smooth weighted round-robin
    /// (7:4:1 → a b a a b a c a b a b a, repeated), so any stretch of packets
    /// has close to the mix's proportions and a whole cycle has them exactly.
    pub fn mix(flag: &str, text: &str) -> Result<Dist, ModelError> {
        let mut parts: Vec<(f64, u32)> = Vec::new();
        for item in text.split(',').map(str::trim) {
            let (v, w) = item.split_once(':').ok_or_else(|| {
                bad(
                    flag,
                    format!("{item:?}: write VALUE:WEIGHT, e.g. 64:7,594:4,1518:1"),
                )
            })?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(flag, format!("{item:?}: {v:?} is not a value >= 0")))?;
            let w: u32 = w
                .trim()
                .parse()
                .ok()
                .filter(|w| (1..=MAX_MIX_WEIGHT).contains(w))
                .ok_or_else(|| {
                    bad(
                        flag,
                        format!("{item:?}: the weight must be a whole number 1..={MAX_MIX_WEIGHT}"),
                    )
                })?;
            parts.push((v, w));
        }
        let total: u32 = parts.iter().map(|p| p.1).sum();
        if total > MAX_MIX_WEIGHT {
            return Err(bad(
                flag,
                format!("weights add up to {total}, more than {MAX_MIX_WEIGHT}"),
            ));
        }
        let mut credit = vec![0i64; parts.len()];
        let mut values = Vec::with_capacity(total as usize);
        for _ in 0..total {
            for (c, p) in credit.iter_mut().zip(&parts) {
                *c += i64::from(p.1);
            }
            // The first of the largest credits: ties go to the earlier part.
            let mut best = 0;
            for i in 1..credit.len() {
                if credit[i] > credit[best] {
                    best = i;
                }
            }
            credit[best] -= i64::from(total);
            values.push(parts[best].0);
        }
        let d = Dist::Sequence {
            mix: text.trim().to_string(),
            values: values.into(),
        };
        d.validate(flag)?;
        Ok(d)
    }

    /// The mean, where it exists (None for Cauchy, Pareto with shape ≤ 1,
    /// Student-t with dof ≤ 1).
    pub fn mean(&self) -> Option<f64> {
        Some(match self {
            Dist::Constant { value } => *value,
            Dist::Uniform { min, max } => (min + max) / 2.0,
            Dist::Exponential { mean } => *mean,
            Dist::Normal { mean, .. } => *mean,
            Dist::Poisson { lambda } => *lambda,
            Dist::ReciprocalPoisson { numerator, lambda } => {
                numerator * mean_reciprocal_poisson(*lambda)
            }
            Dist::Pareto { shape, min } => {
                if *shape <= 1.0 {
                    return None;
                }
                shape * min / (shape - 1.0)
            }
            Dist::Cauchy { .. } => return None,
            Dist::Gamma { shape, scale } => shape * scale,
            Dist::Weibull { scale, shape } => scale * ln_gamma(1.0 + 1.0 / shape).exp(),
            Dist::StudentT { location, dof, .. } => {
                if *dof <= 1.0 {
                    return None;
                }
                *location
            }
            Dist::LogNormal { mean, .. } => *mean,
            Dist::Discrete { values, weights } => {
                let w: f64 = weights.iter().sum();
                values.iter().zip(weights).map(|(v, p)| v * p).sum::<f64>() / w
            }
            Dist::Mixture { parts } => {
                let w: f64 = parts.iter().map(|p| p.0).sum();
                let mut m = 0.0;
                for (p, d) in parts {
                    m += p * d.mean()?;
                }
                m / w
            }
            Dist::File { values, .. } | Dist::Sequence { values, .. } => {
                values.iter().sum::<f64>() / values.len() as f64
            }
        })
    }

    /// The mean if it exists, else the location of the symmetric
    /// heavy-tailed laws (Cauchy, Student-t): the value a "nominal rate"
    /// is quoted from. None for Pareto with shape ≤ 1.
    pub fn typical(&self) -> Option<f64> {
        match self {
            Dist::Cauchy { location, .. } => Some(*location),
            Dist::StudentT { location, .. } => Some(*location),
            Dist::Mixture { parts } => {
                let w: f64 = parts.iter().map(|p| p.0).sum();
                let mut m = 0.0;
                for (p, d) in parts {
                    m += p * d.typical()?;
                }
                Some(m / w)
            }
            _ => self.mean(),
        }
    }

    /// Largest value the law can produce, if bounded.
    pub fn upper_bound(&self) -> Option<f64> {
        match self {
            Dist::Constant { value } => Some(*value),
            Dist::Uniform { max, .. } => Some(*max),
            Dist::Discrete { values, .. } => values.iter().copied().reduce(f64::max),
            Dist::File { values, .. } | Dist::Sequence { values, .. } => {
                values.iter().copied().reduce(f64::max)
            }
            Dist::ReciprocalPoisson { numerator, .. } => Some(*numerator),
            Dist::Mixture { parts } => {
                let mut m = f64::MIN;
                for (_, d) in parts {
                    m = m.max(d.upper_bound()?);
                }
                Some(m)
            }
            _ => None,
        }
    }

    /// Short text, `unit` appended to values ("ms", "B").
    pub fn describe(&self, unit: &str) -> String {
        match self {
            Dist::Constant { value } => format!("constant {value} {unit}"),
            Dist::Uniform { min, max } => format!("uniform {min}..{max} {unit}"),
            Dist::Exponential { mean } => format!("exponential mean {mean} {unit}"),
            Dist::Normal { mean, sd } => format!("normal mean {mean} sd {sd} {unit}"),
            Dist::Poisson { lambda } => format!("poisson mean {lambda} {unit}"),
            Dist::ReciprocalPoisson { numerator, lambda } => {
                format!("{numerator}/poisson({lambda}) {unit}")
            }
            Dist::Pareto { shape, min } => format!("pareto shape {shape} min {min} {unit}"),
            Dist::Cauchy { location, scale } => {
                format!("cauchy location {location} scale {scale} {unit}")
            }
            Dist::Gamma { shape, scale } => format!("gamma shape {shape} scale {scale} {unit}"),
            Dist::Weibull { scale, shape } => {
                format!("weibull scale {scale} shape {shape} {unit}")
            }
            Dist::StudentT {
                location,
                scale,
                dof,
            } => format!("student-t location {location} scale {scale} dof {dof} {unit}"),
            Dist::LogNormal { mean, sd } => format!("log-normal mean {mean} sd {sd} {unit}"),
            Dist::Discrete { values, .. } => {
                format!("discrete over {} values {unit}", values.len())
            }
            Dist::Mixture { parts } => {
                let p: Vec<String> = parts
                    .iter()
                    .map(|(w, d)| format!("{w}·{}", d.describe(unit)))
                    .collect();
                format!("mixture [{}]", p.join(" + "))
            }
            Dist::File { path, values } => format!("file {path} ({} values, cycled)", values.len()),
            Dist::Sequence { mix, .. } => format!("mix {mix} {unit}, interleaved"),
        }
    }

    /// `n` draws with the stream of `seed` (for tests and exploration; the
    /// generator draws one at a time without allocating).
    pub fn draws(&self, seed: u64, n: usize) -> Vec<f64> {
        let mut s = self.sampler();
        let mut r = crate::gen::rng(seed, 0);
        (0..n).map(|_| s.sample(&mut r)).collect()
    }

    /// Prepares the law for drawing. Call only after [`Dist::validate`].
    pub(crate) fn sampler(&self) -> Sampler {
        match self {
            Dist::Constant { value } => Sampler::Const(*value),
            Dist::Uniform { min, max } => Sampler::Uniform {
                min: *min,
                span: max - min,
            },
            Dist::Exponential { mean } => Sampler::Exp { mean: *mean },
            Dist::Normal { mean, sd } => match Normal::new(*mean, *sd) {
                Ok(n) => Sampler::Normal(n),
                Err(_) => Sampler::Const(*mean),
            },
            Dist::Poisson { lambda } => poisson(*lambda)
                .map(Sampler::Poisson)
                .unwrap_or(Sampler::Const(*lambda)),
            Dist::ReciprocalPoisson { numerator, lambda } => match poisson(*lambda) {
                Some(p) => Sampler::RecipPoisson {
                    numerator: *numerator,
                    p,
                },
                None => Sampler::Const(numerator / lambda),
            },
            Dist::Pareto { shape, min } => match Pareto::new(*min, *shape) {
                Ok(p) => Sampler::Pareto(p),
                Err(_) => Sampler::Const(*min),
            },
            Dist::Cauchy { location, scale } => match Cauchy::new(*location, *scale) {
                Ok(c) => Sampler::Cauchy(c),
                Err(_) => Sampler::Const(*location),
            },
            Dist::Gamma { shape, scale } => match Gamma::new(*shape, *scale) {
                Ok(g) => Sampler::Gamma(g),
                Err(_) => Sampler::Const(shape * scale),
            },
            Dist::Weibull { scale, shape } => match Weibull::new(*scale, *shape) {
                Ok(w) => Sampler::Weibull(w),
                Err(_) => Sampler::Const(*scale),
            },
            Dist::StudentT {
                location,
                scale,
                dof,
            } => match Gamma::new(dof / 2.0, 1.0) {
                Ok(g) => Sampler::StudentT {
                    location: *location,
                    scale: *scale,
                    dof: *dof,
                    g,
                },
                Err(_) => Sampler::Const(*location),
            },
            Dist::LogNormal { mean, sd } => {
                // Solve for the underlying normal's parameters from the
                // log-normal's own mean and sd.
                let s2 = (1.0 + (sd / mean).powi(2)).ln();
                let mu = mean.ln() - s2 / 2.0;
                match LogNormal::new(mu, s2.sqrt()) {
                    Ok(l) => Sampler::LogNormal(l),
                    Err(_) => Sampler::Const(*mean),
                }
            }
            Dist::Discrete { values, weights } => Sampler::Discrete {
                values: values.clone(),
                cdf: cdf(weights.iter().copied()),
            },
            Dist::Mixture { parts } => Sampler::Mixture {
                cdf: cdf(parts.iter().map(|p| p.0)),
                parts: parts.iter().map(|p| p.1.sampler()).collect(),
            },
            Dist::File { values, .. } | Dist::Sequence { values, .. } => Sampler::File {
                values: values.clone(),
                next: 0,
            },
        }
    }
}

fn weights_ok(flag: &str, w: impl Iterator<Item = f64>) -> Result<(), ModelError> {
    let mut sum = 0.0;
    for p in w {
        if !(p.is_finite() && p >= 0.0) {
            return Err(bad(flag, format!("weights must be >= 0, got {p}")));
        }
        sum += p;
    }
    if sum <= 0.0 {
        return Err(bad(flag, "weights must not all be zero"));
    }
    Ok(())
}

fn cdf(w: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut acc = 0.0;
    let mut c: Vec<f64> = w
        .map(|p| {
            acc += p;
            acc
        })
        .collect();
    for x in c.iter_mut() {
        *x /= acc;
    }
    c
}

fn poisson(lambda: f64) -> Option<Poisson<f64>> {
    Poisson::new(lambda).ok()
}

/// E[1/K | K ≥ 1] for K ~ Poisson(λ), summed in log space around the mode.
fn mean_reciprocal_poisson(lambda: f64) -> f64 {
    if lambda > 1e7 {
        return 1.0 / lambda;
    }
    let hi = (lambda + 40.0 * lambda.sqrt() + 40.0).ceil() as u64;
    let p0 = (-lambda).exp();
    let mut s = 0.0;
    for k in 1..=hi {
        let kf = k as f64;
        let lp = -lambda + kf * lambda.ln() - ln_gamma(kf + 1.0);
        s += lp.exp() / kf;
    }
    s / (1.0 - p0)
}

/// ln Γ(x): libm's lgamma (musl's implementation, ~1 ulp).
pub(crate) use libm::lgamma as ln_gamma;

/// A law ready to draw from: no allocation per draw.
#[derive(Debug, Clone)]
pub(crate) enum Sampler {
    Const(f64),
    Uniform {
        min: f64,
        span: f64,
    },
    Exp {
        mean: f64,
    },
    Normal(Normal<f64>),
    Poisson(Poisson<f64>),
    RecipPoisson {
        numerator: f64,
        p: Poisson<f64>,
    },
    Pareto(Pareto<f64>),
    Cauchy(Cauchy<f64>),
    Gamma(Gamma<f64>),
    Weibull(Weibull<f64>),
    StudentT {
        location: f64,
        scale: f64,
        dof: f64,
        g: Gamma<f64>,
    },
    LogNormal(LogNormal<f64>),
    Discrete {
        values: Vec<f64>,
        cdf: Vec<f64>,
    },
    Mixture {
        cdf: Vec<f64>,
        parts: Vec<Sampler>,
    },
    File {
        values: Arc<[f64]>,
        next: usize,
    },
}

fn pick(cdf: &[f64], u: f64) -> usize {
    // Few entries (≤ 15 in every preset): a linear scan beats a search.
    cdf.iter().position(|&c| u < c).unwrap_or(cdf.len() - 1)
}

impl Sampler {
    pub(crate) fn sample<R: Rng + ?Sized>(&mut self, rng: &mut R) -> f64 {
        match self {
            Sampler::Const(v) => *v,
            Sampler::Uniform { min, span } => *min + *span * rng.random::<f64>(),
            Sampler::Exp { mean } => {
                let e: f64 = Exp1.sample(rng);
                *mean * e
            }
            Sampler::Normal(n) => n.sample(rng),
            Sampler::Poisson(p) => p.sample(rng),
            Sampler::RecipPoisson { numerator, p } => {
                // A zero count means "no packet this second"; D-ITG would
                // divide by zero. Draw again (bounded), fall back to 1.
                for _ in 0..64 {
                    let k = p.sample(rng);
                    if k >= 1.0 {
                        return *numerator / k;
                    }
                }
                *numerator
            }
            Sampler::Pareto(p) => p.sample(rng),
            Sampler::Cauchy(c) => c.sample(rng),
            Sampler::Gamma(g) => g.sample(rng),
            Sampler::Weibull(w) => w.sample(rng),
            Sampler::StudentT {
                location,
                scale,
                dof,
                g,
            } => {
                let z: f64 = rng.sample(rand_distr::StandardNormal);
                let gv = g.sample(rng).max(f64::MIN_POSITIVE);
                *location + *scale * z * (*dof / (2.0 * gv)).sqrt()
            }
            Sampler::LogNormal(l) => l.sample(rng),
            Sampler::Discrete { values, cdf } => values[pick(cdf, rng.random::<f64>())],
            Sampler::Mixture { cdf, parts } => {
                let i = pick(cdf, rng.random::<f64>());
                parts[i].sample(rng)
            }
            Sampler::File { values, next } => {
                let v = values[*next];
                *next = (*next + 1) % values.len();
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_interleaves_exact_proportions() {
        let d = Dist::mix("--size-mix", "64:7, 594:4,1518:1").unwrap();
        let Dist::Sequence { values, mix } = &d else {
            panic!("{d:?}")
        };
        assert_eq!(mix, "64:7, 594:4,1518:1");
        let (a, b, c) = (64.0, 594.0, 1518.0);
        assert_eq!(&values[..], &[a, b, a, a, b, a, c, a, b, a, b, a]);
        assert!((d.mean().unwrap() - 4342.0 / 12.0).abs() < 1e-9);
        assert_eq!(d.upper_bound(), Some(1518.0));
        // Drawn in order and cycled, whatever the seed.
        let draws = d.draws(7, 24);
        assert_eq!(&draws[..12], &values[..]);
        assert_eq!(&draws[12..], &values[..]);
        for bad in ["", "64", "64:0", "64:x", "-1:2", "64:7,594", "64:10001"] {
            let e = Dist::mix("--size-mix", bad).unwrap_err().to_string();
            assert!(e.contains("--size-mix"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn ln_gamma_known_values() {
        assert!((ln_gamma(1.0)).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    #[test]
    fn reciprocal_poisson_mean_large_lambda() {
        // For large λ, E[1/K] ≈ 1/λ + 1/λ² .
        let m = mean_reciprocal_poisson(1000.0);
        assert!((m - (1.0 / 1000.0 + 1.0 / 1e6)).abs() < 1e-8, "{m}");
    }
}
