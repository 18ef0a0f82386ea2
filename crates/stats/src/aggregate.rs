//! Run aggregation: what a scenario's repetitions say together (mean, sample
//! sd, median, range, 95 % Student-t confidence interval, coefficient of
//! variation), and percentage change against a baseline.

use serde::{Deserialize, Serialize};
use wirebench_schema::summary::MetricStats;

/// Summary of one metric over the repetitions of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agg {
    /// Number of finite values used.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 when n = 1.
    pub sd: f64,
    /// Median (mean of the middle two for even n).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Half-width of the 95 % confidence interval of the mean:
    /// t_{0.975, n−1} · sd / √n; 0 when n = 1 (undefined, see docs).
    pub ci95: f64,
    /// sd / |mean|; 0 when the mean is 0.
    pub cv: f64,
    /// cv > 0.10 (or a zero mean with non-zero spread).
    pub cv_warning: bool,
}

/// A scenario's figures as the campaign summary carries them (no baseline yet).
impl From<Agg> for MetricStats {
    fn from(a: Agg) -> Self {
        MetricStats {
            n: a.n,
            mean: a.mean,
            sd: a.sd,
            median: a.median,
            min: a.min,
            max: a.max,
            ci95: a.ci95,
            cv: a.cv,
            cv_warning: a.cv_warning,
            pct_vs_baseline: None,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn student_t_reference_values() {
        // Published two-sided 95 % values (any t table).
        for (df, want) in [
            (1, 12.706_204_736),
            (2, 4.302_652_730),
            (3, 3.182_446_305),
            (4, 2.776_445_105),
            (5, 2.570_581_836),
            (9, 2.262_157_163),
            (30, 2.042_272_456),
            (100, 1.983_971_519),
            (1000, 1.962_339_081),
        ] {
            let t = student_t_975(df);
            assert!(close(t, want, 1e-7), "df {df}: {t} vs {want}");
        }
        // Large df tends to the normal 1.959964; monotone decreasing.
        assert!(close(student_t_975(1001), 1.962_335, 1e-5));
        assert!(close(student_t_975(1_000_000_000), 1.959_964, 1e-6));
        assert!(student_t_975(1001) < student_t_975(1000));
        assert!(student_t_975(0).is_infinite());
    }

    #[test]
    fn aggregate_hand_values() {
        // 10 12 14 16 18: mean 14; squared deviations 16+4+0+4+16 = 40,
        // sd = sqrt(40/4) = 3.1622777; median 14;
        // ci95 = t(4) * sd / sqrt(5) = 2.7764451 * 1.4142136 = 3.9264863;
        // cv = 3.1622777 / 14 = 0.2258770 > 0.10 -> warning.
        let a = aggregate(&[18.0, 10.0, 14.0, 12.0, 16.0]).unwrap();
        assert_eq!(a.n, 5);
        assert!(close(a.mean, 14.0, 1e-12));
        assert!(close(a.sd, 10f64.sqrt(), 1e-12));
        assert!(close(a.median, 14.0, 0.0));
        assert_eq!((a.min, a.max), (10.0, 18.0));
        assert!(close(a.ci95, 3.926_486_3, 1e-6), "{}", a.ci95);
        assert!(close(a.cv, 0.225_877_0, 1e-6));
        assert!(a.cv_warning);
    }

    #[test]
    fn aggregate_even_count_nan_and_low_cv() {
        // 100 101 102 103 + NaN: median (101+102)/2 = 101.5, mean 101.5,
        // sd = sqrt((2.25+0.25+0.25+2.25)/3) = 1.2909944, cv = 0.0127192.
        let a = aggregate(&[103.0, f64::NAN, 100.0, 102.0, 101.0]).unwrap();
        assert_eq!(a.n, 4);
        assert!(close(a.median, 101.5, 0.0));
        assert!(close(a.sd, 1.290_994_4, 1e-6));
        // ci95 = 3.1824463 * 1.2909944 / 2 = 2.0542602
        assert!(close(a.ci95, 2.054_260_2, 1e-6), "{}", a.ci95);
        assert!(close(a.cv, 0.012_719_2, 1e-6));
        assert!(!a.cv_warning);
    }

    #[test]
    fn aggregate_edges() {
        assert!(aggregate(&[]).is_none());
        assert!(aggregate(&[f64::NAN, f64::INFINITY]).is_none());
        let a = aggregate(&[42.0]).unwrap();
        assert_eq!(
            (a.n, a.sd, a.ci95, a.cv, a.median),
            (1, 0.0, 0.0, 0.0, 42.0)
        );
        assert!(!a.cv_warning);
        // zero mean with spread: cv undefined -> 0 and flagged
        let a = aggregate(&[-1.0, 1.0]).unwrap();
        assert_eq!(a.cv, 0.0);
        assert!(a.cv_warning);
        // JSON round trip keeps every field (all finite)
        let j = serde_json::to_string(&a).unwrap();
        let b: Agg = serde_json::from_str(&j).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn pct_change_values() {
        assert_eq!(pct_change(110.0, 100.0), Some(10.0));
        assert_eq!(pct_change(75.0, 100.0), Some(-25.0));
        assert_eq!(pct_change(-2.0, -4.0), Some(-50.0));
        assert_eq!(pct_change(1.0, 0.0), None);
    }
}
