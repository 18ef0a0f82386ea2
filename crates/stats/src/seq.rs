//! 32-bit wire sequence numbers back to 64 bits.
//!
//! The probe header carries 32 bits to stay within 24 bytes; at 10 Mpps that
//! wraps after ~7 minutes, so the receiver has to unwrap. Each new number is
//! placed in the 2^32 window centred on the highest number seen so far (the
//! serial-number arithmetic idea of RFC 1982), which is right as long as
//! reordering and loss bursts stay below 2^31 packets.

/// Turns a stream of 32-bit sequence numbers into monotone 64-bit ones.
#[derive(Debug, Clone, Default)]
pub struct SeqUnwrapper {
    highest: Option<u64>,
}

impl SeqUnwrapper {
    /// An unwrapper that has seen nothing yet.
    pub fn new() -> Self {
        Self { highest: None }
    }

    /// The 64-bit sequence number for `seq32`.
    ///
    /// A number "behind" the highest one seen (modulo 2^32) is a late,
    /// reordered packet and does not move the window; one "ahead" moves it.
    /// A late packet from before sequence 0 cannot exist (senders start at 0),
    /// so such a number is kept in the first epoch instead of going negative.
    pub fn unwrap(&mut self, seq32: u32) -> u64 {
        let (s, ahead) = self.place(seq32);
        if ahead {
            self.highest = Some(s);
        }
        s
    }

    /// What [`unwrap`](Self::unwrap) would return, without moving the window.
    pub fn peek(&self, seq32: u32) -> u64 {
        self.place(seq32).0
    }

    /// The 64-bit number for `seq32`, and whether it moves the window.
    fn place(&self, seq32: u32) -> (u64, bool) {
        let Some(hi) = self.highest else {
            return (u64::from(seq32), true);
        };
        let diff = i64::from(seq32.wrapping_sub(hi as u32) as i32);
        let cand = i128::from(hi) + i128::from(diff);
        if cand < 0 {
            return (u64::from(seq32), false);
        }
        (u64::try_from(cand).unwrap_or(u64::MAX), diff > 0)
    }

    /// Highest 64-bit sequence number produced so far.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_across_the_wrap() {
        let mut u = SeqUnwrapper::new();
        // Start 3 below the wrap: 2^32-3, -2, -1, then 0, 1 of the next epoch.
        let got: Vec<u64> = [u32::MAX - 2, u32::MAX - 1, u32::MAX, 0, 1]
            .iter()
            .map(|&s| u.unwrap(s))
            .collect();
        let base = 1u64 << 32;
        assert_eq!(got, vec![base - 3, base - 2, base - 1, base, base + 1]);
    }

    #[test]
    fn reordering_near_the_wrap() {
        let mut u = SeqUnwrapper::new();
        assert_eq!(u.unwrap(u32::MAX - 1), (1 << 32) - 2);
        // 1 arrives before 0xFFFF_FFFF and 0: jumps into the next epoch.
        assert_eq!(u.unwrap(1), (1 << 32) + 1);
        // the late ones must land in the old epoch / at 2^32, not 2^33.
        assert_eq!(u.unwrap(u32::MAX), (1 << 32) - 1);
        assert_eq!(u.unwrap(0), 1 << 32);
        assert_eq!(u.unwrap(2), (1 << 32) + 2);
        assert_eq!(u.highest(), Some((1 << 32) + 2));
    }

    #[test]
    fn several_wraps() {
        let mut u = SeqUnwrapper::new();
        let mut last = 0;
        // Steps of 2^30 wrap every 4 steps; 20 steps = 5 epochs.
        for k in 0u64..20 {
            let s = (k << 30) as u32;
            last = u.unwrap(s);
            assert_eq!(last, k << 30);
        }
        assert_eq!(last, 19 << 30);
    }

    #[test]
    fn late_packet_before_zero_stays_in_first_epoch() {
        let mut u = SeqUnwrapper::new();
        assert_eq!(u.unwrap(5), 5);
        // modular "behind" 5 but there is no epoch -1
        assert_eq!(u.unwrap(u32::MAX - 10), u64::from(u32::MAX - 10));
        // the window did not move: 6 is still 6
        assert_eq!(u.unwrap(6), 6);
    }
}
