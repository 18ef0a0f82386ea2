//! The timing and impairment model of the user-space link emulator: what
//! happens to one frame on one direction of a link. It owns the wire's
//! clock (when the frame's last bit leaves, given the frames before it),
//! the propagation delay and its jitter law, the loss models (random and
//! Gilbert–Elliott), reordering, duplication and corruption. It does no
//! I/O and never allocates, so the forwarding loop (`emu_run`) can call it
//! per frame, and the laws are tested here against their parameters.
//!
//! A frame of `len` bytes (as the kernel counts it: the 14 B Ethernet
//! header included) occupies the wire for `(max(len + 24, 84)) × 8 / rate`
//! (IEEE 802.3 preamble, FCS and inter-frame gap; the minimum frame), starts
//! when both it has arrived and the frame before it has left, and reaches
//! the far end `delay + jitter` after its last bit. Frames never overtake
//! each other on a wire, so a jitter sample that would deliver a frame
//! before its predecessor delivers it with its predecessor (unlike netem,
//! whose jitter reorders); reordering is its own, explicit knob.

use crate::aqm::AqmQueue;
use crate::spec::{Impairment, JitterDist, TRACE_OPPORTUNITY_BYTES};
use crate::testbed::{WIRE_MIN_FRAME, WIRE_OVERHEAD};
use rand::distr::Open01;
use rand::{Rng as _, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Pareto, StandardNormal};

/// The wire's seeded draws (loss, jitter, duplication, corruption,
/// reordering): ChaCha8 from `rand_chacha`, the generator the traffic
/// models use too; a draw is a few ns and allocates nothing.
#[derive(Debug, Clone)]
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// A generator starting from `seed` (the same seed, the same draws).
    pub fn new(seed: u64) -> Rng {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in the open interval (0, 1): never 0, so `ln` is finite.
    pub fn unit(&mut self) -> f64 {
        self.0.sample(Open01)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        self.0.sample(StandardNormal)
    }

    /// Pareto with scale `xm` and shape `a` (0 when they are no law).
    fn pareto(&mut self, xm: f64, a: f64) -> f64 {
        Pareto::new(xm, a).map_or(0.0, |d| self.0.sample(d))
    }
}

/// Shape of the Pareto law used for `distribution = "pareto"`: heavy-tailed
/// with a finite variance, so `jitter` can be its standard deviation.
pub const PARETO_SHAPE: f64 = 3.0;

/// One draw of the jitter added to the propagation delay, in ns (may be
/// negative): zero mean and `jitter_ns` spread under the chosen law.
/// - uniform: U(−j, +j) (netem's default);
/// - normal: N(0, j²);
/// - pareto: a Pareto(x_m, α = 3) variable minus its mean, x_m chosen so
///   that its standard deviation is j (x_m = j·(α−1)·√(α−2)/√α); the
///   long tail is on the late side.
pub fn jitter_sample(rng: &mut Rng, dist: JitterDist, jitter_ns: u64) -> f64 {
    let j = jitter_ns as f64;
    if j == 0.0 {
        return 0.0;
    }
    match dist {
        JitterDist::Uniform => (2.0 * rng.unit() - 1.0) * j,
        JitterDist::Normal => rng.normal() * j,
        JitterDist::Pareto => {
            let a = PARETO_SHAPE;
            let xm = pareto_scale(j);
            rng.pareto(xm, a) - a * xm / (a - 1.0)
        }
    }
}

/// x_m of the Pareto(α = 3) law whose standard deviation is `sd`.
pub fn pareto_scale(sd: f64) -> f64 {
    let a = PARETO_SHAPE;
    sd * (a - 1.0) * (a - 2.0).sqrt() / a.sqrt()
}

/// What the wire does with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Dropped before the wire: the emulator's queue was full.
    QueueFull,
    /// Dropped by CoDel at the head of the queue (`aqm` links).
    AqmDrop,
    /// Lost on the wire (it took its wire time, nobody receives it).
    Lost,
    /// Delivered at `at` (ns, the caller's clock), `copies` times (2 when
    /// duplicated); `corrupt_bit` flips that bit of the frame, counted from
    /// the end of the Ethernet header; `reorder` asks the caller to send it
    /// after the next frame instead of before. `start` and `end` are when
    /// its first bit went onto the wire and its last bit left, so the
    /// caller can split the frame's time into queueing (arrival → start),
    /// serialisation (start → end) and propagation (end → at).
    Deliver {
        /// Arrival at the wire's queue.
        arrival: u64,
        /// Delivery time.
        at: u64,
        /// Start of serialisation.
        start: u64,
        /// End of serialisation.
        end: u64,
        /// How many copies arrive.
        copies: u8,
        /// The bit to flip, if the frame is corrupted.
        corrupt_bit: Option<u32>,
        /// Send after the next frame.
        reorder: bool,
    },
}

/// Ethernet header bytes in every frame the kernel hands us.
pub const ETH_HEADER: u32 = 14;

/// Wire time of `bytes` bytes at `rate_bps`, exact to the picosecond when
/// accumulated through [`Wire`] (the remainder is carried).
fn wire_bytes(frame_len: u32) -> u64 {
    (frame_len + WIRE_OVERHEAD).max(WIRE_MIN_FRAME) as u64
}

/// The delivery opportunities of a trace-driven direction, cycled: which
/// one is next and how many bytes it still carries. Opportunities that
/// pass while nothing waits are lost, as in Mahimahi.
#[derive(Debug, Clone)]
pub struct TraceClock {
    ms: Vec<u64>,
    period_ns: u64,
    cycle: u64,
    idx: usize,
    left: u32,
}

impl TraceClock {
    /// Cycles through `ms` (non-decreasing, the last one the period,
    /// as [`crate::spec::LinkTrace`] checks).
    pub fn new(ms: Vec<u64>) -> TraceClock {
        let period_ns = ms.last().copied().unwrap_or(1).max(1) * 1_000_000;
        TraceClock {
            ms,
            period_ns,
            cycle: 0,
            idx: 0,
            left: TRACE_OPPORTUNITY_BYTES,
        }
    }

    fn at(&self) -> u64 {
        self.cycle * self.period_ns + self.ms[self.idx] * 1_000_000
    }

    fn step(&mut self) {
        self.idx += 1;
        if self.idx == self.ms.len() {
            self.idx = 0;
            self.cycle += 1;
        }
        self.left = TRACE_OPPORTUNITY_BYTES;
    }

    /// When the last of `bytes` (ready from `start`) has been carried.
    pub fn carry(&mut self, start: u64, bytes: u32) -> u64 {
        if self.at() < start {
            // Skip what passed while the wire was idle, without walking.
            self.cycle = start / self.period_ns;
            let off = start - self.cycle * self.period_ns;
            self.idx = self.ms.partition_point(|&m| m * 1_000_000 < off);
            if self.idx == self.ms.len() {
                self.idx = 0;
                self.cycle += 1;
            }
            self.left = TRACE_OPPORTUNITY_BYTES;
        }
        let mut need = bytes.max(1);
        loop {
            let take = need.min(self.left);
            self.left -= take;
            need -= take;
            if need == 0 {
                let t = self.at();
                if self.left == 0 {
                    self.step();
                }
                return t;
            }
            self.step();
        }
    }
}

/// One direction of one link: its clock, its queue limit and its laws.
#[derive(Debug, Clone)]
pub struct Wire {
    /// Link rate in bit/s on the wire; None: no rate limit.
    pub rate_bps: Option<u64>,
    /// Delay, jitter, loss and the other laws of this direction.
    pub imp: Impairment,
    /// Most frames waiting for or on the wire; more are dropped (drop-tail).
    pub queue_frames: usize,
    rng: Rng,
    /// When the last frame admitted leaves the wire (ns).
    busy_until: u64,
    /// Remainder of busy_until in units of 1/rate ns (bits × 1e9 mod rate).
    busy_rem: u64,
    /// Delivery time of the last frame delivered, so none overtakes it.
    last_at: u64,
    /// Gilbert–Elliott: in the bad state.
    bad: bool,
    /// Capacity from a trace instead of `rate_bps`.
    pub trace: Option<TraceClock>,
    /// Ends of wire time of the frames still queued or on the wire, oldest
    /// first (a ring of `queue_frames` + 1 entries).
    ends: Vec<u64>,
    ends_head: usize,
    ends_len: usize,
}

impl Wire {
    /// One direction at `rate_bps` with `imp`, a queue of `queue_frames` frames, its draws seeded by `seed`.
    pub fn new(rate_bps: Option<u64>, imp: Impairment, queue_frames: usize, seed: u64) -> Wire {
        let queue_frames = queue_frames.max(1);
        Wire {
            rate_bps,
            imp,
            queue_frames,
            rng: Rng::new(seed),
            busy_until: 0,
            busy_rem: 0,
            last_at: 0,
            bad: false,
            trace: None,
            ends: vec![0; queue_frames + 1],
            ends_head: 0,
            ends_len: 0,
        }
    }

    /// Frames queued or on the wire at `now`.
    pub fn backlog(&mut self, now: u64) -> usize {
        while self.ends_len > 0 && self.ends[self.ends_head] <= now {
            self.ends_head = (self.ends_head + 1) % self.ends.len();
            self.ends_len -= 1;
        }
        self.ends_len
    }

    /// Whether the loss model drops the next frame.
    fn lose(&mut self) -> bool {
        match self.imp.gemodel {
            Some(g) => {
                // Transition first, then draw the loss of this frame in the
                // state it finds (netem's gemodel order).
                if self.bad {
                    if self.rng.chance(g.r) {
                        self.bad = false;
                    }
                } else if self.rng.chance(g.p) {
                    self.bad = true;
                }
                let p = if self.bad { g.loss_bad } else { g.loss_good };
                self.rng.chance(p)
            }
            None => self.rng.chance(self.imp.loss),
        }
    }

    /// Admits a frame of `len` bytes that arrived at `arrival` (ns), on a
    /// drop-tail wire (one without `aqm`): its whole fate is known at once.
    pub fn admit(&mut self, arrival: u64, len: u32) -> Fate {
        if self.backlog(arrival) >= self.queue_frames {
            return Fate::QueueFull;
        }
        let start = arrival.max(self.busy_until);
        self.transmit(arrival, start, len)
    }

    /// Puts a frame on the wire at `start` (the wire is free by then):
    /// its serialisation, then the loss model and the delay laws.
    fn transmit(&mut self, arrival: u64, start: u64, len: u32) -> Fate {
        let end = if let Some(t) = &mut self.trace {
            // A trace carries IP packets: the Ethernet header is ours.
            t.carry(start, len.saturating_sub(ETH_HEADER))
        } else {
            match self.rate_bps {
                Some(r) if start == self.busy_until => {
                    let bits = wire_bytes(len) * 8 * 1_000_000_000 + self.busy_rem;
                    self.busy_rem = bits % r;
                    start + bits / r
                }
                Some(r) => {
                    let bits = wire_bytes(len) * 8 * 1_000_000_000;
                    self.busy_rem = bits % r;
                    start + bits / r
                }
                None => start,
            }
        };
        self.busy_until = end;
        let tail = (self.ends_head + self.ends_len) % self.ends.len();
        self.ends[tail] = end;
        self.ends_len += 1;
        if self.lose() {
            return Fate::Lost;
        }
        let prop = self.imp.delay_ns as f64
            + jitter_sample(&mut self.rng, self.imp.dist, self.imp.jitter_ns);
        let at = (end + prop.max(0.0) as u64).max(self.last_at);
        self.last_at = at;
        let copies = if self.rng.chance(self.imp.duplicate) {
            2
        } else {
            1
        };
        let payload_bits = len.saturating_sub(ETH_HEADER) * 8;
        let corrupt_bit = (payload_bits > 0 && self.rng.chance(self.imp.corrupt))
            .then(|| (self.rng.next_u64() % payload_bits as u64) as u32);
        let reorder = self.rng.chance(self.imp.reorder);
        Fate::Deliver {
            arrival,
            at,
            start,
            end,
            copies,
            corrupt_bit,
            reorder,
        }
    }
}

/// One direction of a link whose queue is managed (`aqm`): frames wait in
/// the [`AqmQueue`] until the wire is free, and the queue picks which one
/// goes next (FQ-CoDel's round robin, CoDel's drops at the head), so a
/// frame's fate is only known when the wire takes it. The caller feeds
/// arrivals in order with [`ManagedWire::enqueue`] and lets time pass with
/// [`ManagedWire::advance`]; both report each frame's fate by its slot.
#[derive(Debug, Clone)]
pub struct ManagedWire {
    /// The wire after the queue (its own queue limit unused).
    pub wire: Wire,
    queue: AqmQueue,
    /// Time the queue has been run to: a frame stamped earlier than this
    /// (read late) is queued as if it arrived now, since the wire's
    /// choices up to here are made.
    clock: u64,
}

impl ManagedWire {
    /// A managed direction: `wire` behind `queue`.
    pub fn new(wire: Wire, queue: AqmQueue) -> ManagedWire {
        ManagedWire {
            wire,
            queue,
            clock: 0,
        }
    }

    /// When the wire next takes a frame from the queue; None when empty.
    pub fn next_start(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.wire.busy_until.max(self.clock))
    }

    /// Frames waiting for the wire.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Runs the wire up to `now`: each frame it starts sending before then
    /// gets its fate.
    pub fn advance(&mut self, now: u64, mut fate: impl FnMut(u32, Fate)) {
        while !self.queue.is_empty() {
            let t = self.wire.busy_until.max(self.clock);
            if t > now {
                break;
            }
            self.clock = t;
            // The wire's ring of frames in flight only serves drop-tail's
            // backlog; keep it from filling.
            self.wire.backlog(t);
            let next = self.queue.dequeue(t, |s| fate(s, Fate::AqmDrop));
            if let Some((slot, arrival, len)) = next {
                let f = self.wire.transmit(arrival, t, len);
                fate(slot, f);
            }
        }
        self.clock = self.clock.max(now);
    }

    /// Queues the frame in `slot` that arrived at `arrival`, after running
    /// the wire up to then; `hash` is its flow ([`crate::aqm::flow_hash`]).
    pub fn enqueue(
        &mut self,
        slot: u32,
        arrival: u64,
        len: u32,
        hash: u32,
        mut fate: impl FnMut(u32, Fate),
    ) {
        self.advance(arrival, &mut fate);
        let arrival = arrival.max(self.clock);
        self.queue
            .enqueue(slot, arrival, len, hash, |s| fate(s, Fate::QueueFull));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::GeModel;

    fn imp() -> Impairment {
        Impairment::default()
    }

    fn at(f: Fate) -> u64 {
        match f {
            Fate::Deliver { at, .. } => at,
            other => panic!("{other:?}"),
        }
    }

    /// A lone 1518 B frame (1514 B as the kernel counts it) takes 1538 B of
    /// wire time: 123.04 µs at 100 Mbit/s; back-to-back frames queue behind
    /// it and the total is exact over many frames (no rounding drift).
    #[test]
    fn serialisation_and_queueing() {
        let mut w = Wire::new(Some(100_000_000), imp(), 1000, 1);
        assert_eq!(at(w.admit(1_000_000, 1514)), 1_000_000 + 123_040);
        // Arrives while the first is on the wire: starts when it ends,
        // after 123 030 ns of queueing and before its own 123 040 ns.
        match w.admit(1_000_010, 1514) {
            Fate::Deliver { at, start, end, .. } => {
                assert_eq!(start, 1_000_000 + 123_040);
                assert_eq!(end, 1_000_000 + 2 * 123_040);
                assert_eq!(at, end);
            }
            other => panic!("{other:?}"),
        }
        // A 60 B frame is charged the 84 B minimum: 6.72 µs.
        let mut w = Wire::new(Some(100_000_000), imp(), 1000, 1);
        assert_eq!(at(w.admit(0, 60)), 6_720);
        // 1 000 000 frames of 1042 B at 1 Gbit/s: 1066 B × 8 ns each exactly.
        let mut w = Wire::new(Some(1_000_000_000), imp(), 2_000_000, 1);
        let mut last = 0;
        for _ in 0..1_000_000 {
            last = at(w.admit(0, 1042));
        }
        assert_eq!(last, 1_000_000 * 1066 * 8);
        // A rate that does not divide: 3 bit/s... 7 frames of 84 B at
        // 333 333 bit/s, remainders carried.
        let mut w = Wire::new(Some(333_333), imp(), 100, 1);
        let mut last = 0;
        for _ in 0..7 {
            last = at(w.admit(0, 60));
        }
        assert_eq!(last, 7 * 84 * 8 * 1_000_000_000 / 333_333);
    }

    /// A trace of 4 opportunities in a 4 ms period ([1, 1, 2, 4]): full
    /// frames take one each, small ones share one, opportunities that pass
    /// while the wire is idle are lost, and a saturating sender gets the
    /// trace's mean rate (12 Mbit/s of IP packets) exactly.
    #[test]
    fn trace_driven_wire() {
        const MS: u64 = 1_000_000;
        let mut w = Wire::new(None, imp(), 100_000, 1);
        w.trace = Some(TraceClock::new(vec![1, 1, 2, 4]));
        // 1514 B frames (1500 B IP) all ready at 0: one per opportunity.
        let got: Vec<u64> = (0..6).map(|_| at(w.admit(0, 1514))).collect();
        assert_eq!(got, [MS, MS, 2 * MS, 4 * MS, 5 * MS, 5 * MS]);
        // Idle until 9.5 ms: the opportunities at 6 and 8 ms are lost;
        // the next is at 10 ms (the third period's second line).
        assert_eq!(at(w.admit(9 * MS + MS / 2, 1514)), 10 * MS);
        // 164 B frames (150 B IP): ten share one opportunity.
        let mut w = Wire::new(None, imp(), 100_000, 1);
        w.trace = Some(TraceClock::new(vec![1, 1, 2, 4]));
        let got: Vec<u64> = (0..11).map(|_| at(w.admit(0, 164))).collect();
        assert_eq!(got[9], MS);
        assert_eq!(got[10], MS);
        // A 9014 B frame (9000 B IP) takes six opportunities: 1, 1, 2, 4,
        // then 5 and 5 ms.
        let mut w = Wire::new(None, imp(), 100_000, 1);
        w.trace = Some(TraceClock::new(vec![1, 1, 2, 4]));
        assert_eq!(at(w.admit(0, 9014)), 5 * MS);
        // Saturated for 10 000 periods: 40 000 frames in 40 s.
        let mut w = Wire::new(None, imp(), 100_000, 1);
        w.trace = Some(TraceClock::new(vec![1, 1, 2, 4]));
        let mut last = 0;
        for _ in 0..40_000 {
            last = at(w.admit(0, 1514));
        }
        assert_eq!(last, 40_000 * MS);
        let bps = 40_000.0 * 1500.0 * 8.0 / (last as f64 / 1e9);
        let t = crate::spec::LinkTrace::parse("1\n1\n2\n4\n", std::path::Path::new("t")).unwrap();
        assert_eq!(bps, t.mean_bps());
    }

    /// A managed wire starts each frame when the wire is free and no
    /// earlier: frames queued at once go back to back, `advance` starts
    /// none after `now`, and a frame reaching an idle wire starts on arrival.
    #[test]
    fn managed_wire_takes_frames_when_free() {
        use crate::spec::{AqmKind, AqmSpec};
        let wire = Wire::new(Some(100_000_000), imp(), 1000, 1);
        let q = AqmQueue::new(&AqmSpec::new(AqmKind::FqCodel), 16, 1000, u64::MAX);
        let mut m = ManagedWire::new(wire, q);
        let mut fates: Vec<(u32, Fate)> = Vec::new();
        m.enqueue(0, 1_000, 1514, 1, |s, f| fates.push((s, f)));
        m.enqueue(1, 1_000, 1514, 2, |s, f| fates.push((s, f)));
        // The second arrival runs the wire to 1 µs first: the idle wire
        // has taken the first frame then, the second waits.
        assert_eq!(fates.len(), 1);
        m.advance(1_000, |s, f| fates.push((s, f)));
        assert_eq!(fates.len(), 1);
        assert_eq!(m.next_start(), Some(1_000 + 123_040));
        m.advance(1_000 + 123_039, |s, f| fates.push((s, f)));
        assert_eq!(fates.len(), 1);
        m.advance(1_000 + 123_040, |s, f| fates.push((s, f)));
        let starts: Vec<(u32, u64)> = fates
            .iter()
            .map(|&(s, f)| match f {
                Fate::Deliver { start, arrival, .. } => {
                    assert_eq!(arrival, 1_000);
                    (s, start)
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(starts, [(0, 1_000), (1, 1_000 + 123_040)]);
        assert_eq!(m.next_start(), None);
        // Idle wire: a frame arriving at 1 ms starts at 1 ms.
        fates.clear();
        m.enqueue(2, 1_000_000, 100, 3, |s, f| fates.push((s, f)));
        m.advance(2_000_000, |s, f| fates.push((s, f)));
        assert!(matches!(
            fates[..],
            [(
                2,
                Fate::Deliver {
                    start: 1_000_000,
                    ..
                }
            )]
        ));
    }

    /// Hop 2 of a saturated 1 Gbit/s jumbo path gets hop 1's frames back
    /// to back in the model (due every 72.304 µs) but each sent late by
    /// hop 1's emulator (0-300 µs), then forwarded in 20 µs. Scheduled
    /// from the kernel arrival, hop 2's wire idles at every late send and
    /// ends with the largest lateness still queued; scheduled from the
    /// virtual arrival (arrival − lateness, as `emu_late` gives it) it
    /// stays back to back and ends one serialisation after hop 1.
    #[test]
    fn a_virtual_arrival_keeps_the_previous_hops_schedule() {
        let ser = 9038 * 8;
        let (t0, fwd, n) = (1_000_000u64, 20_000u64, 1000u64);
        let late = |k: u64| [0, 40_000, 5_000, 300_000, 10_000, 0, 120_000][(k % 7) as usize];
        let mut phys = Wire::new(Some(1_000_000_000), imp(), 10_000, 1);
        let mut virt = Wire::new(Some(1_000_000_000), imp(), 10_000, 1);
        let (mut end_p, mut end_v, mut idle_v, mut prev_v) = (0, 0, 0, 0);
        for k in 0..n {
            let due = t0 + (k + 1) * ser;
            let arrival = due + late(k) + fwd;
            let v =
                crate::emu_late::virtual_arrival(arrival, due, due + late(k)).unwrap_or(arrival);
            assert_eq!(v, due + fwd);
            end_p = match phys.admit(arrival, 9014) {
                Fate::Deliver { end, .. } => end,
                other => panic!("{other:?}"),
            };
            match virt.admit(v, 9014) {
                Fate::Deliver { start, end, .. } => {
                    if k > 0 {
                        idle_v += start - prev_v;
                    }
                    prev_v = end;
                    end_v = end;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(idle_v, 0);
        assert_eq!(end_v, t0 + (n + 1) * ser + fwd);
        // From the kernel arrival the last frame leaves at least the
        // largest lateness later.
        assert!(end_p >= end_v + 300_000, "{end_p} vs {end_v}");
    }

    #[test]
    fn drop_tail_queue() {
        let mut w = Wire::new(Some(100_000_000), imp(), 3, 1);
        let fates: Vec<Fate> = (0..5).map(|_| w.admit(0, 1514)).collect();
        assert!(matches!(fates[2], Fate::Deliver { .. }));
        assert_eq!(fates[3], Fate::QueueFull);
        assert_eq!(fates[4], Fate::QueueFull);
        // Once the first has left, one more fits.
        assert!(matches!(w.admit(123_040, 1514), Fate::Deliver { .. }));
        assert_eq!(w.admit(123_040, 1514), Fate::QueueFull);
    }

    #[test]
    fn delay_and_fifo_order() {
        let mut i = imp();
        i.delay_ns = 20_000_000;
        i.jitter_ns = 5_000_000;
        // Frames 1 ms apart under ±5 ms of jitter: none overtakes another.
        let mut w = Wire::new(None, i, 100_000, 7);
        let mut prev = 0;
        for k in 0..10_000u64 {
            let a = at(w.admit(k * 1_000_000, 100));
            assert!(a >= prev, "overtook");
            assert!(a >= k * 1_000_000 + 15_000_000);
            prev = a;
        }
        // Frames 20 ms apart never meet: the mean is the delay (uniform
        // ±5 ms has sd 2.89 ms; over 10 000 frames 0.1 ms is 3.5 standard
        // errors).
        let mut w = Wire::new(None, i, 100_000, 7);
        let mut sum = 0.0;
        for k in 0..10_000u64 {
            sum += (at(w.admit(k * 20_000_000, 100)) - k * 20_000_000) as f64;
        }
        let mean = sum / 10_000.0 / 1e6;
        assert!((mean - 20.0).abs() < 0.1, "{mean}");
    }

    /// Kolmogorov–Smirnov statistic of `xs` against the CDF `f`.
    fn ks(xs: &mut [f64], f: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(|a, b| a.total_cmp(b));
        let n = xs.len() as f64;
        xs.iter()
            .enumerate()
            .map(|(i, &x)| {
                let c = f(x);
                (c - i as f64 / n).abs().max((c - (i + 1) as f64 / n).abs())
            })
            .fold(0.0, f64::max)
    }

    /// Normal CDF via the complementary error function (Abramowitz and
    /// Stegun 7.1.26 is too coarse for a KS test; this is W. J. Cody's
    /// rational approximation through libm's erfc).
    fn phi(z: f64) -> f64 {
        0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
    }

    /// Critical value of the one-sample KS statistic at α = 0.001:
    /// 1.949 / √n (Smirnov's asymptotic law).
    fn ks_crit(n: usize) -> f64 {
        1.949 / (n as f64).sqrt()
    }

    fn draws(dist: JitterDist, j: u64, n: usize, seed: u64) -> Vec<f64> {
        let mut r = Rng::new(seed);
        (0..n).map(|_| jitter_sample(&mut r, dist, j)).collect()
    }

    #[test]
    fn jitter_laws_pass_kolmogorov_smirnov() {
        let n = 20_000;
        let j = 2_000_000.0;
        for seed in [1, 2, 3] {
            let mut u = draws(JitterDist::Uniform, 2_000_000, n, seed);
            let d = ks(&mut u, |x| ((x + j) / (2.0 * j)).clamp(0.0, 1.0));
            assert!(d < ks_crit(n), "uniform seed {seed}: D = {d}");
            let mut g = draws(JitterDist::Normal, 2_000_000, n, seed);
            let d = ks(&mut g, |x| phi(x / j));
            assert!(d < ks_crit(n), "normal seed {seed}: D = {d}");
            let mut p = draws(JitterDist::Pareto, 2_000_000, n, seed);
            let xm = pareto_scale(j);
            let shift = PARETO_SHAPE * xm / (PARETO_SHAPE - 1.0);
            let d = ks(&mut p, |x| {
                let y = x + shift;
                if y < xm {
                    0.0
                } else {
                    1.0 - (xm / y).powf(PARETO_SHAPE)
                }
            });
            assert!(d < ks_crit(n), "pareto seed {seed}: D = {d}");
            // Zero mean, spread j (the Pareto sample sd converges slowly:
            // its fourth moment is infinite).
            let mean = p.iter().sum::<f64>() / n as f64;
            assert!(mean.abs() < 0.05 * j, "pareto mean {mean}");
        }
        // The test can fail: a normal law is not uniform.
        let mut g = draws(JitterDist::Normal, 2_000_000, n, 1);
        let d = ks(&mut g, |x| ((x + j) / (2.0 * j)).clamp(0.0, 1.0));
        assert!(d > ks_crit(n), "KS cannot tell normal from uniform: {d}");
    }

    #[test]
    fn random_loss_rate() {
        let mut i = imp();
        i.loss = 0.01;
        let mut w = Wire::new(None, i, 10, 11);
        let n = 200_000;
        let lost = (0..n).filter(|&k| w.admit(k, 100) == Fate::Lost).count() as f64;
        // Binomial: sd = sqrt(n p (1-p)) = 44.5; 5 sd.
        assert!((lost - 2000.0).abs() < 223.0, "{lost}");
    }

    /// Gilbert–Elliott with loss only in the bad state: the loss rate is the
    /// bad state's share p/(p+r), and loss bursts last 1/r frames on average
    /// (a burst is a run of bad-state frames).
    #[test]
    fn gilbert_elliott_bursts() {
        let g = GeModel {
            p: 0.01,
            r: 0.25,
            loss_bad: 1.0,
            loss_good: 0.0,
        };
        let mut i = imp();
        i.gemodel = Some(g);
        let mut w = Wire::new(None, i, 10, 5);
        let n = 1_000_000u64;
        let mut lost = 0u64;
        let mut bursts = 0u64;
        let mut prev = false;
        for k in 0..n {
            let l = w.admit(k, 100) == Fate::Lost;
            lost += l as u64;
            if l && !prev {
                bursts += 1;
            }
            prev = l;
        }
        let rate = lost as f64 / n as f64;
        let want = g.p / (g.p + g.r);
        assert!((rate - want).abs() < 0.1 * want, "loss {rate} vs {want}");
        let mean_burst = lost as f64 / bursts as f64;
        assert!(
            (mean_burst - 1.0 / g.r).abs() < 0.1 / g.r,
            "burst {mean_burst} vs {}",
            1.0 / g.r
        );
        // Random loss at the same rate has bursts of about 1/(1-p).
        let mut i = imp();
        i.loss = want;
        let mut w = Wire::new(None, i, 10, 5);
        let (mut lost, mut bursts, mut prev) = (0u64, 0u64, false);
        for k in 0..n {
            let l = w.admit(k, 100) == Fate::Lost;
            lost += l as u64;
            bursts += (l && !prev) as u64;
            prev = l;
        }
        assert!((lost as f64 / bursts as f64) < 1.1, "random loss bursts");
    }

    #[test]
    fn reorder_duplicate_corrupt_fractions() {
        let mut i = imp();
        i.reorder = 0.05;
        i.duplicate = 0.02;
        i.corrupt = 0.01;
        let mut w = Wire::new(None, i, 10, 9);
        let n = 200_000u64;
        let (mut re, mut dup, mut cor) = (0u64, 0u64, 0u64);
        for k in 0..n {
            if let Fate::Deliver {
                copies,
                corrupt_bit,
                reorder,
                ..
            } = w.admit(k, 1514)
            {
                re += reorder as u64;
                dup += (copies == 2) as u64;
                if let Some(b) = corrupt_bit {
                    assert!(b < 1500 * 8);
                    cor += 1;
                }
            }
        }
        let near = |x: u64, p: f64| {
            let m = n as f64 * p;
            (x as f64 - m).abs() < 5.0 * (m * (1.0 - p)).sqrt()
        };
        assert!(near(re, 0.05), "{re}");
        assert!(near(dup, 0.02), "{dup}");
        assert!(near(cor, 0.01), "{cor}");
    }
}
