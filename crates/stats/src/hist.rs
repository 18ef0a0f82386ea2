//! A signed-value histogram built from two HDR histograms (3 significant
//! digits): one for values ≥ 0, one for the magnitudes of negative values.
//!
//! One-way delays go negative when the clocks are offset; clamping them to 0
//! would make the percentiles (and PDV = p99.9 − min) depend on the offset.
//! With the sign kept, every percentile moves with the offset exactly as the
//! exact min/mean/max do, and PDV stays offset-free.

use hdrhistogram::Histogram;

#[derive(Debug, Clone)]
pub(crate) struct SignedHist {
    pos: Histogram<u64>,
    neg: Histogram<u64>,
}

fn new_hist() -> Histogram<u64> {
    // sigfig 3 is within hdrhistogram's documented 0..=5, so this cannot fail.
    Histogram::new(3).expect("sigfig 3 is valid")
}

pub(crate) fn record(h: &mut Histogram<u64>, v: u64) {
    // Auto-resize covers values up to i64::MAX/2; beyond that, clamp.
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// The value of rank `j` (1-based) in ascending order: the highest value
/// equivalent to its bucket, as HdrHistogram reports percentiles.
fn rank_high(h: &Histogram<u64>, j: u64) -> u64 {
    let mut cum = 0u64;
    for v in h.iter_recorded() {
        cum = cum.saturating_add(v.count_at_value());
        if cum >= j {
            return h.highest_equivalent(v.value_iterated_to());
        }
    }
    h.max()
}

/// As [`rank_high`] but the lowest equivalent value (for negated magnitudes,
/// whose "highest" signed value is the lowest magnitude).
fn rank_low(h: &Histogram<u64>, j: u64) -> u64 {
    let mut cum = 0u64;
    for v in h.iter_recorded() {
        cum = cum.saturating_add(v.count_at_value());
        if cum >= j {
            return h.lowest_equivalent(v.value_iterated_to());
        }
    }
    h.min()
}

impl SignedHist {
    pub(crate) fn new() -> Self {
        Self {
            pos: new_hist(),
            neg: new_hist(),
        }
    }

    pub(crate) fn record(&mut self, v: i64) {
        if v >= 0 {
            record(&mut self.pos, v as u64);
        } else {
            record(&mut self.neg, v.unsigned_abs());
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.pos.len() + self.neg.len()
    }

    /// Values recorded above `v`, at the histogram's resolution (a value in
    /// the same bucket as `v` counts as not above).
    pub(crate) fn count_above(&self, v: i64) -> u64 {
        if v >= 0 {
            let at_or_below = self.pos.count_between(0, v as u64);
            self.pos.len().saturating_sub(at_or_below)
        } else {
            // Every non-negative value, and negatives of magnitude < |v|.
            let mag = v.unsigned_abs();
            let closer = if mag > 1 {
                self.neg.count_between(0, mag - 1)
            } else {
                0
            };
            self.pos.len() + closer
        }
    }

    /// The counts coarsened onto a [`crate::dist::Dist`] grid of `bits`:
    /// each HDR bucket (which nests in the coarser binary grid) goes whole
    /// to the dist bucket of its largest signed value.
    pub(crate) fn to_dist(&self, bits: u8) -> crate::dist::Dist {
        let pos = self.pos.iter_recorded().map(|v| {
            let hi = self.pos.highest_equivalent(v.value_iterated_to());
            (i64::try_from(hi).unwrap_or(i64::MAX), v.count_at_value())
        });
        let neg = self.neg.iter_recorded().map(|v| {
            let lo = self.neg.lowest_equivalent(v.value_iterated_to());
            (-(i64::try_from(lo).unwrap_or(i64::MAX)), v.count_at_value())
        });
        crate::dist::Dist::from_counts(bits, pos.chain(neg))
    }

    /// Nearest-rank quantile q ∈ [0, 1]: the value of rank ceil(q·N)
    /// (at least 1). None when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<i64> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        let k = ((q * n as f64).ceil() as u64).clamp(1, n);
        let n_neg = self.neg.len();
        if k <= n_neg {
            // k-th smallest signed value = (n_neg-k+1)-th smallest magnitude, negated.
            let mag = rank_low(&self.neg, n_neg - k + 1);
            Some(-(i64::try_from(mag).unwrap_or(i64::MAX)))
        } else {
            let v = rank_high(&self.pos, k - n_neg);
            Some(i64::try_from(v).unwrap_or(i64::MAX))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_above_is_signed() {
        let mut h = SignedHist::new();
        for v in -3..=6 {
            h.record(v);
        }
        // values -3..=6; above 2: 3 4 5 6
        assert_eq!(h.count_above(2), 4);
        assert_eq!(h.count_above(-1), 7); // 0..=6
        assert_eq!(h.count_above(-3), 9); // all but -3
        assert_eq!(h.count_above(-10), 10);
        assert_eq!(h.count_above(6), 0);
    }

    #[test]
    fn signed_quantiles() {
        let mut h = SignedHist::new();
        // -3 -2 -1 0 1 2 3 4 5 6 ; all small values are exact in HDR (3 digits)
        for v in -3..=6 {
            h.record(v);
        }
        assert_eq!(h.len(), 10);
        assert_eq!(h.quantile(0.0), Some(-3)); // rank 1
        assert_eq!(h.quantile(0.1), Some(-3)); // ceil(1.0)=1
        assert_eq!(h.quantile(0.2), Some(-2)); // rank 2
        assert_eq!(h.quantile(0.3), Some(-1));
        assert_eq!(h.quantile(0.5), Some(1)); // rank 5 -> 1
        assert_eq!(h.quantile(0.9), Some(5));
        assert_eq!(h.quantile(1.0), Some(6));
        assert_eq!(SignedHist::new().quantile(0.5), None);
    }

    #[test]
    fn three_significant_digits() {
        let mut h = SignedHist::new();
        h.record(1_234_567); // 1.234567 ms in ns
        let v = h.quantile(0.5).unwrap();
        assert!((v - 1_234_567).abs() <= 1_235, "{v}");
        let mut h = SignedHist::new();
        h.record(-1_234_567);
        let v = h.quantile(0.5).unwrap();
        assert!((v + 1_234_567).abs() <= 1_235, "{v}");
    }
}
