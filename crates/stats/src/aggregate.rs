//! Run aggregation: what a scenario's repetitions say together (mean, sample
//! sd, median, range, 95 % Student-t confidence interval, coefficient of
//! variation), and percentage change against a baseline.

use serde::{Deserialize, Serialize};

/// Summary of one metric over the repetitions of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agg {
    /// Number of finite values used.
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 when n = 1.
    pub sd: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Half-width of the 95 % confidence interval of the mean:
    /// t_{0.975, n−1} · sd / √n; 0 when n = 1 (undefined, see docs).
    pub ci95: f64,
    /// sd / |mean|; 0 when the mean is 0.
    pub cv: f64,
    /// cv > 0.10 (or a zero mean with non-zero spread).
    pub cv_warning: bool,
}

/// Coefficient of variation above which a scenario is flagged as noisy.
pub const CV_WARNING: f64 = 0.10;

/// Aggregates `values`; NaN and infinite values are ignored. None when no
/// finite value remains.
pub fn aggregate(values: &[f64]) -> Option<Agg> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let nf = n as f64;
    let mean = v.iter().sum::<f64>() / nf;
    let sd = if n > 1 {
        (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (nf - 1.0)).sqrt()
    } else {
        0.0
    };
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    };
    let ci95 = if n > 1 {
        student_t_975(n - 1) * sd / nf.sqrt()
    } else {
        0.0
    };
    let (cv, cv_warning) = if mean != 0.0 {
        let cv = sd / mean.abs();
        (cv, cv > CV_WARNING)
    } else {
        (0.0, sd > 0.0)
    };
    Some(Agg {
        n,
        mean,
        sd,
        median,
        min: v[0],
        max: v[n - 1],
        ci95,
        cv,
        cv_warning,
    })
}

/// Two-sided 95 % Student t quantile (t_{0.975}) for `df` degrees of
/// freedom; infinite for df = 0.
pub fn student_t_975(df: usize) -> f64 {
    crate::tdist::t_quantile_two_sided(0.05, df)
}

/// 100 · (value − baseline) / baseline; None when the baseline is 0.
pub fn pct_change(value: f64, baseline: f64) -> Option<f64> {
    if baseline == 0.0 {
        None
    } else {
        Some(100.0 * (value - baseline) / baseline)
    }
}
