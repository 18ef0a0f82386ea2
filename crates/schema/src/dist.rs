//! Compact, mergeable distributions of a flow's one-way delays and |IPDV|
//! values, for CDF and histogram charts and percentiles over several flows
//! and repetitions.
//!
//! A [`Histogram`] holds counts on a power-of-two grid with `bits` mantissa
//! bits: every bucket holds values that share their binary exponent and top
//! `bits + 1` bits, so a bucket is at most 2^-bits of its values wide
//! (bits = 7: ≤ 0.79 %) and small values are exact. The receiver's per-flow
//! histograms are kept on the 7-bit grid itself, so a fresh dist is their
//! non-empty buckets, exactly. Grids of
//! fewer bits nest in grids of more, so two dists always merge exactly onto
//! the coarser of their grids — a sum of counts, not an approximation of
//! quantiles. The result document stays bounded: a dist never keeps more
//! buckets than asked (the grid coarsens until it fits).

use serde::{Deserialize, Serialize};

/// Mantissa bits of a fresh dist (bucket width ≤ 2^-7 ≈ 0.79 % of its values).
pub const DIST_BITS: u8 = 7;

/// Most buckets one flow's dist keeps in the result document when the
/// session has few flows.
pub const DIST_MAX_BUCKETS: usize = 256;

/// Largest `bits` a dist may claim (a document with more is read as this).
const MAX_BITS: u8 = 62;

/// A distribution as counts on a binary grid (see the module text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Histogram {
    /// Mantissa bits of the grid: a bucket is at most 2^-bits of its values wide.
    pub bits: u8,
    /// Non-empty buckets in ascending order: [value in ns, count]. The value
    /// is the bucket's largest signed value (for negative delays, the one
    /// nearest zero), as the engine reports percentiles.
    #[serde(deserialize_with = "exact_vec")]
    pub buckets_ns: Vec<(i64, u64)>,
}

/// A vector read without the spare room of its growth (up to half of it):
/// a sender holds every flow's dists at the end of a session.
fn exact_vec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(i64, u64)>, D::Error> {
    let mut v = Vec::<(i64, u64)>::deserialize(d)?;
    v.shrink_to_fit();
    Ok(v)
}

/// The value standing for `v`'s bucket on a grid of `bits` mantissa bits.
pub fn bucket_value(v: i64, bits: u8) -> i64 {
    let bits = bits.min(MAX_BITS);
    let m = v.unsigned_abs();
    let shift = if m == 0 {
        0
    } else {
        (63 - m.leading_zeros()).saturating_sub(u32::from(bits))
    };
    let lo = (m >> shift) << shift;
    if v >= 0 {
        // Largest value of the bucket: lo + width − 1, within i64 since v is.
        let hi = lo.saturating_add((1u64 << shift) - 1);
        i64::try_from(hi).unwrap_or(i64::MAX)
    } else {
        // Nearest zero: the smallest magnitude.
        -(i64::try_from(lo).unwrap_or(i64::MAX))
    }
}

/// Per-flow bucket budget for a session of `flows` flows, so that a report
/// of many flows stays a few MB (2^17 buckets per quantity in all, at least
/// 32 per flow).
pub fn per_flow_budget(flows: usize) -> usize {
    ((1usize << 17) / flows.max(1)).clamp(32, DIST_MAX_BUCKETS)
}

impl Histogram {
    /// Builds a dist on a grid of `bits` from (value, count) pairs in any order.
    pub fn from_counts(bits: u8, pairs: impl IntoIterator<Item = (i64, u64)>) -> Histogram {
        let bits = bits.min(MAX_BITS);
        let mut v: Vec<(i64, u64)> = pairs
            .into_iter()
            .filter(|&(_, c)| c > 0)
            .map(|(x, c)| (bucket_value(x, bits), c))
            .collect();
        v.sort_unstable_by_key(|p| p.0);
        let mut out: Vec<(i64, u64)> = Vec::with_capacity(v.len());
        for (x, c) in v {
            match out.last_mut() {
                Some(last) if last.0 == x => last.1 = last.1.saturating_add(c),
                _ => out.push((x, c)),
            }
        }
        // Coarsening merges buckets: without this a fitted histogram keeps
        // the room of the finer one it came from (up to twice its size, in
        // every flow's report).
        out.shrink_to_fit();
        Histogram {
            bits,
            buckets_ns: out,
        }
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.buckets_ns
            .iter()
            .fold(0u64, |a, &(_, c)| a.saturating_add(c))
    }

    /// The same counts on the coarser grid of `bits` (no-op when not coarser).
    pub fn coarsen(&mut self, bits: u8) {
        if bits >= self.bits && self.bits <= MAX_BITS {
            return;
        }
        *self = Histogram::from_counts(bits, std::mem::take(&mut self.buckets_ns));
    }

    /// Coarsens until at most `max` buckets remain (or the grid has 0 bits:
    /// then one bucket per power of two, a few dozen at most).
    pub fn fit(&mut self, max: usize) {
        while self.buckets_ns.len() > max && self.bits > 0 {
            self.coarsen(self.bits - 1);
        }
    }

    /// Adds `other`'s counts; both end on the coarser of the two grids.
    pub fn merge(&mut self, other: &Histogram) {
        let bits = self.bits.min(other.bits).min(MAX_BITS);
        let ascending = |b: &[(i64, u64)]| b.windows(2).all(|w| w[0].0 < w[1].0);
        if !ascending(&self.buckets_ns) || !ascending(&other.buckets_ns) {
            let pairs = std::mem::take(&mut self.buckets_ns)
                .into_iter()
                .chain(other.buckets_ns.iter().copied());
            *self = Histogram::from_counts(bits, pairs);
            return;
        }
        // A report merges thousands of runs into one dist: sorting the
        // whole of it again per run was most of its time. Both lists
        // ascend and `bucket_value` never reverses an order, so one pass
        // gives what `from_counts` would.
        let mine = std::mem::take(&mut self.buckets_ns);
        let mut out: Vec<(i64, u64)> = Vec::with_capacity(mine.len().max(other.buckets_ns.len()));
        let (mut a, mut b) = (mine.iter().peekable(), other.buckets_ns.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 <= y.0 => a.next(),
                (Some(_), None) => a.next(),
                (_, Some(_)) => b.next(),
                (None, None) => break,
            };
            let Some(&(v, c)) = next else { break };
            if c == 0 {
                continue;
            }
            let x = bucket_value(v, bits);
            match out.last_mut() {
                Some(last) if last.0 == x => last.1 = last.1.saturating_add(c),
                _ => out.push((x, c)),
            }
        }
        out.shrink_to_fit();
        *self = Histogram {
            bits,
            buckets_ns: out,
        };
    }

    /// Nearest-rank quantile q ∈ [0, 1] in seconds: the bucket value of rank
    /// ceil(q·N) (at least 1), as the engine computes its percentiles. None
    /// when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        let k = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut cum = 0u64;
        for &(v, c) in &self.buckets_ns {
            cum = cum.saturating_add(c);
            if cum >= k {
                return Some(v as f64 / 1e9);
            }
        }
        self.buckets_ns.last().map(|&(v, _)| v as f64 / 1e9)
    }

    /// The CDF as (value in s, share of values ≤ it) per bucket.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let n = self.count();
        if n == 0 {
            return Vec::new();
        }
        let mut cum = 0u64;
        self.buckets_ns
            .iter()
            .map(|&(v, c)| {
                cum = cum.saturating_add(c);
                (v as f64 / 1e9, cum as f64 / n as f64)
            })
            .collect()
    }
}

/// A scenario's distributions over all flows of all ok repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ScenarioDist {
    /// Runs that contributed a histogram.
    pub runs: usize,
    /// One-way delay (RTT for round-trip flows is not included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Histogram>,
    /// |IPDV| between consecutive packets of a flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipdv: Option<Histogram>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_binary_and_nested() {
        // Small values are exact.
        for v in [0i64, 1, 100, 255] {
            assert_eq!(bucket_value(v, 7), v);
        }
        // 1000 = 0b1111101000: exponent 9, shift 2 -> bucket 1000..=1003.
        assert_eq!(bucket_value(1000, 7), 1003);
        assert_eq!(bucket_value(1003, 7), 1003);
        assert_eq!(bucket_value(1004, 7), 1007);
        assert_eq!(bucket_value(-1003, 7), -1000);
        // Width ≤ 2^-7 of the value everywhere.
        for v in [300i64, 12_345, 987_654_321, 1 << 40] {
            let b = bucket_value(v, 7);
            assert!(b >= v && ((b - v) as f64) < v as f64 / 128.0, "{v} {b}");
            // Coarser grids contain finer buckets.
            assert_eq!(bucket_value(b, 5), bucket_value(v, 5));
        }
        assert_eq!(bucket_value(i64::MAX, 7), i64::MAX);
        assert!(bucket_value(i64::MIN, 7) < 0);
    }

    /// The one-pass merge gives what sorting every pair again gives, on
    /// equal and on different grids, negative values and zero counts too.
    #[test]
    fn merge_is_from_counts_of_both() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let mut pairs = |n: u64| -> Vec<(i64, u64)> {
                (0..n)
                    .map(|_| {
                        let r = next();
                        let v = (r >> (r % 50 + 10)) as i64 * if r & 1 == 0 { 1 } else { -1 };
                        (v, r % 4)
                    })
                    .collect()
            };
            let (pa, pb) = (pairs(23 + round % 37), pairs(round % 41));
            let a = Histogram::from_counts((round % 8) as u8 + 1, pa.iter().copied());
            let b = Histogram::from_counts((round % 5) as u8 + 3, pb.iter().copied());
            let mut m = a.clone();
            m.merge(&b);
            let bits = a.bits.min(b.bits);
            let whole =
                Histogram::from_counts(bits, a.buckets_ns.iter().chain(&b.buckets_ns).copied());
            assert_eq!(m, whole, "round {round}");
        }
    }

    #[test]
    fn merge_fit_and_quantiles() {
        let a = Histogram::from_counts(7, (1..=100).map(|i| (i * 1000, 1)));
        let b = Histogram::from_counts(5, (101..=200).map(|i| (i * 1000, 1)));
        let mut m = a.clone();
        m.merge(&b);
        assert_eq!(m.bits, 5);
        assert_eq!(m.count(), 200);
        // Rank 100 of 1..=200 µs: 100 µs, within 2^-5.
        let p50 = m.quantile(0.5).unwrap();
        assert!(
            (100e-6..100e-6 * (1.0 + 1.0 / 32.0)).contains(&p50),
            "{p50}"
        );
        let cdf = m.cdf();
        assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        let mut f = m.clone();
        f.fit(10);
        assert!(f.buckets_ns.len() <= 10, "{}", f.buckets_ns.len());
        assert_eq!(f.count(), 200);
        assert_eq!(Histogram::default().quantile(0.5), None);
        // Unsorted or oversized input from a document still works.
        let odd = Histogram {
            bits: 200,
            buckets_ns: vec![(5, 1), (-3, 2), (5, 1)],
        };
        let mut o = Histogram {
            bits: 7,
            ..Default::default()
        };
        o.merge(&odd);
        assert_eq!(o.buckets_ns, vec![(-3, 2), (5, 2)]);
    }
}
