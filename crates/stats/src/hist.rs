//! A compact histogram on the [`crate::dist::Histogram`] grid of [`DIST_BITS`]
//! mantissa bits: every bucket holds the values that share their binary
//! exponent and top 8 bits, so it is at most 2^-7 ≈ 0.79 % of its values
//! wide and values below 256 are exact. It is the per-flow store of the
//! one-way delays, the |IPDV| values and the sender's schedule error.
//!
//! Why not HDR histograms: a dense HDR histogram costs its whole value range
//! up front (3 digits over a few ms: some 57 KiB per flow, two of them for
//! signed delays), which at thousands of flows was most of a receiver's
//! memory. Here only non-empty buckets are stored, 4 bytes each, in one
//! sorted vector grown by a quarter at a time: a flow of N packets costs
//! at most 4·N bytes (times ≤ 1.25 spare capacity) and never more than
//! the 14 848 buckets of the whole signed range. Recording is a binary search (a cache-resident
//! vector of a few hundred entries for a real delay spread) and allocates
//! only when a value lands in a bucket never seen before.
//!
//! Values keep their sign: one-way delays go negative when the clocks are
//! offset; clamping them to 0 would make the percentiles (and PDV = p99.9 −
//! min) depend on the offset. With the sign kept, every percentile moves
//! with the offset as the exact min/mean/max do, and PDV stays offset-free.
//! A bucket stands for its largest signed value (for negative values, the
//! one nearest zero), as [`crate::dist::bucket_value`] defines it, so a
//! [`Histogram`](crate::dist::Histogram) built from this store is exact.

use crate::dist::{Histogram, DIST_BITS};

/// Bits of a bucket entry that hold its count; the top 14 hold the key.
/// A bucket that counts past [`COUNT_MAX`] carries the excess to
/// `LogHist::carry` (2^18 packets: 26 s of a 10 kpps flow in one bucket):
/// 4-byte entries instead of 8 halve a flow's histograms, which at 60
/// flows were most of the memory each flow costs at either end.
const COUNT_BITS: u32 = 18;
const COUNT_MAX: u32 = (1 << COUNT_BITS) - 1;
/// Keys are signed bucket indices (see [`key`]) stored offset by this so
/// that entries sort by key as plain integers: −7 424..=7 423 becomes
/// 0..=14 847, which fits the 14 key bits.
const KEY_OFFSET: i32 = 7424;

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

fn entry_key(e: u32) -> i32 {
    (e >> COUNT_BITS) as i32 - KEY_OFFSET
}

fn entry_count(e: u32) -> u64 {
    u64::from(e & COUNT_MAX)
}

/// Sparse log-grid histogram of signed values (see the module text).
#[derive(Debug, Clone, Default)]
pub(crate) struct LogHist {
    /// Non-empty buckets, ascending: (key + KEY_OFFSET) << 18 | count mod
    /// 2^18 (see [`COUNT_BITS`]).
    entries: Vec<u32>,
    /// Counts beyond an entry's 18 bits, by key ascending: rare (a bucket
    /// that got 2^18 values), so a few entries at most.
    carry: Vec<(i32, u64)>,
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
        let tag = ((k + KEY_OFFSET) as u32) << COUNT_BITS;
        let i = match self.entries.get(self.last) {
            Some(e) if *e & !COUNT_MAX == tag => self.last,
            _ => match self
                .entries
                .binary_search_by(|e| (e & !COUNT_MAX).cmp(&tag))
            {
                Ok(i) => i,
                Err(i) => {
                    if self.entries.len() == self.entries.capacity() {
                        // Grow by a quarter, not the doubling of a plain
                        // insert: the spare room is memory every flow
                        // holds (a delay spread of a few octaves is
                        // hundreds of buckets).
                        self.entries.reserve_exact(self.entries.len() / 4 + 8);
                    }
                    self.entries.insert(i, tag);
                    i
                }
            },
        };
        self.last = i;
        let e = &mut self.entries[i];
        if *e & COUNT_MAX < COUNT_MAX {
            *e += 1;
        } else {
            *e &= !COUNT_MAX;
            self.carry_over(k);
        }
    }

    /// Adds 2^18 values to bucket `k`'s carry (its entry wrapped to 0).
    fn carry_over(&mut self, k: i32) {
        let step = u64::from(COUNT_MAX) + 1;
        match self.carry.binary_search_by(|&(ck, _)| ck.cmp(&k)) {
            Ok(j) => self.carry[j].1 = self.carry[j].1.saturating_add(step),
            Err(j) => self.carry.insert(j, (k, step)),
        }
    }

    /// (key, count) of every non-empty bucket, ascending, carries added.
    fn counts(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        let mut carry = self.carry.iter().peekable();
        self.entries.iter().map(move |&e| {
            let k = entry_key(e);
            let mut c = entry_count(e);
            while let Some(&&(ck, extra)) = carry.peek() {
                if ck > k {
                    break;
                }
                if ck == k {
                    c = c.saturating_add(extra);
                }
                carry.next();
            }
            (k, c)
        })
    }

    /// Values recorded.
    pub(crate) fn len(&self) -> u64 {
        self.n
    }

    /// Bytes held on the heap (the figure a flow's memory budget counts).
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<u32>()
            + self.carry.capacity() * std::mem::size_of::<(i32, u64)>()
    }

    /// (bucket value, count) of every non-empty bucket, ascending.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.counts().map(|(k, c)| (key_value(k), c))
    }

    /// Values recorded above `v`, at the grid's resolution (a value in the
    /// same bucket as `v` counts as not above).
    pub(crate) fn count_above(&self, v: i64) -> u64 {
        let k = key(v);
        self.counts()
            .filter(|&(ek, _)| ek > k)
            .fold(0u64, |a, (_, c)| a.saturating_add(c))
    }

    /// The counts as a [`Histogram`] on the grid of `bits` (≤ [`DIST_BITS`]:
    /// exact at DIST_BITS, coarsened below).
    pub(crate) fn to_dist(&self, bits: u8) -> Histogram {
        Histogram::from_counts(bits.min(DIST_BITS), self.buckets())
    }

    /// Nearest-rank quantile q ∈ [0, 1]: the bucket value of rank ceil(q·N)
    /// (at least 1). None when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<i64> {
        let n: u64 = self.counts().fold(0u64, |a, (_, c)| a.saturating_add(c));
        if n == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        let k = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut cum = 0u64;
        for (key, c) in self.counts() {
            cum = cum.saturating_add(c);
            if cum >= k {
                return Some(key_value(key));
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
        assert!(h.heap_bytes() <= 128 * 4 * 5 / 4, "{}", h.heap_bytes());
        let d = h.to_dist(DIST_BITS);
        assert_eq!(d.count(), 100_000);
        assert_eq!(d.buckets_ns, h.buckets().collect::<Vec<_>>());
        // A wide spread (lateness on a busy host: 1 ns to 10 ms, ~1 200
        // buckets) stays within 4 bytes per bucket and a quarter spare.
        let mut h = LogHist::new();
        for v in 1..=10_000_000u64 {
            if v < 300 || v % 997 == 0 {
                h.record_u64(v);
            }
        }
        let used = h.buckets().count();
        assert!(used > 1_000, "{used}");
        assert!(
            h.heap_bytes() <= used * 4 * 5 / 4 + 64,
            "{} for {used}",
            h.heap_bytes()
        );
    }

    /// A bucket past 2^18 values carries the excess: counts, quantiles and
    /// the dist stay exact, beside buckets that never carried.
    #[test]
    fn counts_carry_past_the_entry_bits() {
        let mut h = LogHist::new();
        let big = 3 * (u64::from(COUNT_MAX) + 1) + 5;
        for _ in 0..big {
            h.record(1000);
        }
        for v in [-7, 5, 2_000_000, i64::MIN + 1, i64::MAX] {
            h.record(v);
        }
        for _ in 0..(u64::from(COUNT_MAX) + 2) {
            h.record(-7);
        }
        let b: Vec<(i64, u64)> = h.buckets().collect();
        let k1000 = bucket_value(1000, DIST_BITS);
        assert_eq!(
            b,
            vec![
                (bucket_value(i64::MIN + 1, DIST_BITS), 1),
                (-7, u64::from(COUNT_MAX) + 3),
                (5, 1),
                (k1000, big),
                (bucket_value(2_000_000, DIST_BITS), 1),
                (bucket_value(i64::MAX, DIST_BITS), 1),
            ]
        );
        assert_eq!(h.len(), b.iter().map(|x| x.1).sum::<u64>());
        assert_eq!(h.count_above(999), big + 2);
        assert_eq!(h.count_above(5), big + 2);
        assert_eq!(h.quantile(0.5), Some(k1000));
        assert_eq!(h.quantile(0.0), Some(bucket_value(i64::MIN + 1, DIST_BITS)));
        assert_eq!(h.to_dist(DIST_BITS).count(), h.len());
    }
}
