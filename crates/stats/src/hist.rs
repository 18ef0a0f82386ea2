//! A compact histogram on the [`crate::dist::Dist`] grid of [`DIST_BITS`]
//! mantissa bits: every bucket holds the values that share their binary
//! exponent and top 8 bits, so it is at most 2^-7 ≈ 0.79 % of its values
//! wide and values below 256 are exact. It is the per-flow store of the
//! one-way delays, the |IPDV| values and the sender's schedule error.
//!
//! Why not HDR histograms: a dense HDR histogram costs its whole value range
//! up front (3 digits over a few ms: some 57 KiB per flow, two of them for
//! signed delays), which at thousands of flows was most of a receiver's
//! memory. Here only non-empty buckets are stored, 8 bytes each, in one
//! sorted vector: a flow of N packets costs at most 8·N bytes (times the
//! vector's spare capacity) and never more than the 14 848 buckets of the
//! whole signed range. Recording is a binary search (a cache-resident
//! vector of a few hundred entries for a real delay spread) and allocates
//! only when a value lands in a bucket never seen before.
//!
//! Values keep their sign: one-way delays go negative when the clocks are
//! offset; clamping them to 0 would make the percentiles (and PDV = p99.9 −
//! min) depend on the offset. With the sign kept, every percentile moves
//! with the offset as the exact min/mean/max do, and PDV stays offset-free.
//! A bucket stands for its largest signed value (for negative values, the
//! one nearest zero), as [`crate::dist::bucket_value`] defines it, so a
//! [`Dist`](crate::dist::Dist) built from this store is exact.

use crate::dist::{Dist, DIST_BITS};

/// Bits of a bucket entry that hold its count (the top 16 hold the key):
/// 2^48 packets in one bucket of one flow is 325 days at 10 Mpps.
const COUNT_BITS: u32 = 48;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
/// Keys are signed bucket indices (see [`key`]) stored offset by this so
/// that entries sort by key as plain integers.
const KEY_OFFSET: i32 = 1 << 15;

/// Index of a magnitude's bucket on the grid of [`DIST_BITS`] = 7 bits:
/// magnitudes below 256 are their own index; above, 128 buckets per binary
/// exponent e (8..=63): 256 + (e − 8)·128 + the 7 bits below the top one.
/// Monotone in `m`; at most 57·128 + 127 = 7 423.
fn index(m: u64) -> u32 {
    if m < 256 {
        return m as u32;
    }
    let e = 63 - m.leading_zeros();
    let shift = e - u32::from(DIST_BITS);
    (e - 6) * 128 + ((m >> shift) as u32 & 127)
}

/// Smallest and largest magnitude of bucket `idx` (inverse of [`index`]).
fn bounds(idx: u32) -> (u64, u64) {
    if idx < 256 {
        return (u64::from(idx), u64::from(idx));
    }
    let shift = idx / 128 - 1;
    let lo = (128 + u64::from(idx % 128)) << shift;
    (lo, lo.saturating_add((1u64 << shift) - 1))
}

/// Signed bucket key, ascending with the value: `index(v)` for v ≥ 0,
/// `−1 − index(|v|)` for v < 0.
fn key(v: i64) -> i32 {
    if v >= 0 {
        index(v as u64) as i32
    } else {
        -1 - index(v.unsigned_abs()) as i32
    }
}

/// The value a key's bucket stands for (see the module text).
fn key_value(k: i32) -> i64 {
    if k >= 0 {
        let (_, hi) = bounds(k as u32);
        i64::try_from(hi).unwrap_or(i64::MAX)
    } else {
        let (lo, _) = bounds((-1 - k) as u32);
        -(i64::try_from(lo).unwrap_or(i64::MAX))
    }
}

fn entry_key(e: u64) -> i32 {
    (e >> COUNT_BITS) as i32 - KEY_OFFSET
}

fn entry_count(e: u64) -> u64 {
    e & COUNT_MAX
}

/// Sparse log-grid histogram of signed values (see the module text).
#[derive(Debug, Clone, Default)]
pub(crate) struct LogHist {
    /// Non-empty buckets, ascending: (key + KEY_OFFSET) << 48 | count.
    entries: Vec<u64>,
    /// Position of the last bucket recorded into: consecutive values often
    /// share a bucket, which then costs one comparison.
    last: usize,
    n: u64,
}

impl LogHist {
    /// An empty histogram (allocates on its first value).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records one signed value.
    pub(crate) fn record(&mut self, v: i64) {
        self.record_key(key(v));
    }

    /// Records one non-negative value given as u64 (|IPDV|, lateness);
    /// values beyond i64::MAX share the top bucket.
    pub(crate) fn record_u64(&mut self, v: u64) {
        self.record(i64::try_from(v).unwrap_or(i64::MAX));
    }

    fn record_key(&mut self, k: i32) {
        self.n = self.n.saturating_add(1);
        let tag = ((k + KEY_OFFSET) as u64) << COUNT_BITS;
        if let Some(e) = self.entries.get_mut(self.last) {
            if *e & !COUNT_MAX == tag {
                if *e & COUNT_MAX < COUNT_MAX {
                    *e += 1;
                }
                return;
            }
        }
        match self
            .entries
            .binary_search_by(|e| (e & !COUNT_MAX).cmp(&tag))
        {
            Ok(i) => {
                if self.entries[i] & COUNT_MAX < COUNT_MAX {
                    self.entries[i] += 1;
                }
                self.last = i;
            }
            Err(i) => {
                self.entries.insert(i, tag | 1);
                self.last = i;
            }
        }
    }

    /// Values recorded.
    pub(crate) fn len(&self) -> u64 {
        self.n
    }

    /// Bytes held on the heap (the figure a flow's memory budget counts).
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<u64>()
    }

    /// (bucket value, count) of every non-empty bucket, ascending.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.entries
            .iter()
            .map(|&e| (key_value(entry_key(e)), entry_count(e)))
    }

    /// Values recorded above `v`, at the grid's resolution (a value in the
    /// same bucket as `v` counts as not above).
    pub(crate) fn count_above(&self, v: i64) -> u64 {
        let k = key(v);
        let i = self.entries.partition_point(|&e| entry_key(e) <= k);
        self.entries[i..]
            .iter()
            .fold(0u64, |a, &e| a.saturating_add(entry_count(e)))
    }

    /// The counts as a [`Dist`] on the grid of `bits` (≤ [`DIST_BITS`]:
    /// exact at DIST_BITS, coarsened below).
    pub(crate) fn to_dist(&self, bits: u8) -> Dist {
        Dist::from_counts(bits.min(DIST_BITS), self.buckets())
    }

    /// Nearest-rank quantile q ∈ [0, 1]: the bucket value of rank ceil(q·N)
    /// (at least 1). None when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<i64> {
        let n: u64 = self.entries.iter().map(|&e| entry_count(e)).sum();
        if n == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        let k = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut cum = 0u64;
        for &e in &self.entries {
            cum = cum.saturating_add(entry_count(e));
            if cum >= k {
                return Some(key_value(entry_key(e)));
            }
        }
        self.entries.last().map(|&e| key_value(entry_key(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::bucket_value;

    #[test]
    fn grid_is_the_dist_grid() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut vals = vec![
            0i64,
            1,
            -1,
            255,
            256,
            -256,
            1003,
            1004,
            i64::MAX,
            i64::MIN + 1,
        ];
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let shift = x % 63;
            vals.push((x >> shift) as i64 * if x & 1 == 0 { 1 } else { -1 });
        }
        for &v in &vals {
            assert_eq!(key_value(key(v)), bucket_value(v, DIST_BITS), "{v}");
        }
        // Keys ascend with values.
        vals.sort_unstable();
        assert!(vals.windows(2).all(|w| key(w[0]) <= key(w[1])));
        assert!(key(i64::MIN + 1) >= -KEY_OFFSET && key(i64::MAX) < KEY_OFFSET);
        assert_eq!(index(u64::MAX), 57 * 128 + 127);
    }

    #[test]
    fn count_above_is_signed() {
        let mut h = LogHist::new();
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
        let mut h = LogHist::new();
        // Small values are exact on the grid.
        for v in [6, -3, 2, -2, 0, 5, -1, 1, 3, 4] {
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
        assert_eq!(LogHist::new().quantile(0.5), None);
    }

    #[test]
    fn within_the_grid_width() {
        for v in [1_234_567i64, -1_234_567, 999, 77_777_777_777] {
            let mut h = LogHist::new();
            h.record(v);
            let q = h.quantile(0.5).unwrap();
            // The bucket value lies beyond v away from zero for positive
            // values, toward zero for negative ones, by < 2^-7 of |v|.
            assert!((q - v).abs() as f64 <= v.abs() as f64 / 128.0, "{v} {q}");
            assert!(if v > 0 { q >= v } else { q >= v && q < 0 }, "{v} {q}");
        }
    }

    /// Memory follows the buckets used, not the range: 100 000 delays
    /// spread over 1..2 ms fill at most the 128 buckets of that octave.
    #[test]
    fn memory_is_the_buckets_used() {
        let mut h = LogHist::new();
        let mut x: u64 = 88_172_645_463_325_252;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            h.record_u64(1 << 20 | (x % (1 << 20)));
        }
        assert_eq!(h.len(), 100_000);
        assert!(h.buckets().count() <= 128);
        assert!(h.heap_bytes() <= 128 * 8, "{}", h.heap_bytes());
        let d = h.to_dist(DIST_BITS);
        assert_eq!(d.count(), 100_000);
        assert_eq!(d.buckets_ns, h.buckets().collect::<Vec<_>>());
    }
}
