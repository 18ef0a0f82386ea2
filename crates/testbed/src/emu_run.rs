//! The forwarding process of the user-space link emulator. One process per
//! emulated link lives in the link's own namespace (`wb-<name>-_l<i>`),
//! between two veth ends `wire0` and `wire1`; it takes every frame from an
//! AF_PACKET socket's receive ring (PACKET_MMAP) on one end, asks
//! [`crate::emu::Wire`] when it reaches the far end, holds it until then
//! and writes it to the other end, frames due together in one `sendmmsg`.
//!
//! Why a forked process and not a thread or a helper program: the test-bed
//! outlives `wirebench testbed up`, and the library must work in any
//! process that links it (the CLI, a campaign, a test binary) without
//! knowing where an executable is. So `up` opens the sockets and allocates
//! every buffer, then forks twice; the grandchild (re-parented to init,
//! in its own session) runs a loop that only makes system calls on memory
//! allocated before the fork, which is what is safe in the child of a
//! threaded process. It is in the link's namespace, so `down` (which kills
//! every process in the test-bed's namespaces) ends it, as does a later
//! `up`/`down` after a killed controller; when its interfaces vanish (their
//! namespace deleted by someone else) its sockets fail and it exits.
//!
//! Timing follows the engine's clock discipline, written afresh here (the
//! test-bed does not depend on the engine): absolute deadlines on
//! CLOCK_MONOTONIC, sleep in `ppoll` until [`SPIN_NS`] before the next
//! deadline (timer slack set to 1 ns; [`LONE_LEAD_NS`] for a frame alone
//! on an idle wire, whose wake-up an idle VM makes late), then spin on
//! the clock while watching the rings (memory, no system call). Arrival times are the
//! kernel's receive timestamps, so a frame read late is still scheduled
//! from when it arrived; a frame the emulator of the link before sent
//! late is scheduled from when that link's model delivered it
//! ([`crate::emu_late`]).

#[cfg(target_os = "linux")]
pub(crate) use imp::*;

/// Counter words per direction in an emulator's counters file: frames in,
/// delivered, lost (loss model), queue drops, buffer drops, then the
/// frames timed and their summed queueing, serialisation and propagation
/// nanoseconds (so a reader's difference of two snapshots gives the means
/// over any span without a per-frame system call), then CoDel's drops,
/// the wire's short idle gaps and the summed lateness of its sends, then
/// the frames scheduled from a virtual arrival and their summed credit,
/// then the loop's naps for this direction's frames that ended more than
/// [`HOST_STALL_NS`] late and their summed lateness.
pub const COUNTERS: usize = 16;

/// A nap of the emulator that ends this much after its deadline is a
/// stall, not a wake-up: a timer here is late by tens of µs, at worst a
/// few hundred (docs/testbed.md); a ms means its CPU was held (a
/// hypervisor that did not run the vCPU, kernel work on it, the kernel's
/// real-time throttle). Counted per direction ([`WireCounters::stalls`])
/// so that a run knows its figures carry one.
pub const HOST_STALL_NS: u64 = 1_000_000;

/// An idle gap on a wire shorter than this counts in
/// [`WireCounters::idle_ns`]: a stall of the frames' source inside a run,
/// not the pause between two runs.
pub const IDLE_GAP_MAX_NS: u64 = 100_000_000;

/// A managed queue (`aqm`) for both directions of a link, as the
/// emulator is told it (the forwarding loop is Linux-only).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Aqm {
    /// CoDel or FQ-CoDel and its parameters.
    pub(crate) spec: crate::spec::AqmSpec,
    /// Frames queued at most.
    pub(crate) limit_frames: usize,
    /// Bytes queued at most.
    pub(crate) limit_bytes: u64,
    /// Seed of the flow hash.
    pub(crate) perturb: u64,
}

/// One direction's counters, read from the file the emulator updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WireCounters {
    /// Frames that reached the wire from the sending end.
    pub frames_in: u64,
    /// Frames delivered to the far end (a duplicate counts twice).
    pub delivered: u64,
    /// Frames the loss model dropped (random or Gilbert–Elliott).
    pub lost: u64,
    /// Frames dropped because the wire's queue was full.
    pub queue_drops: u64,
    /// Frames dropped because every frame buffer was in flight.
    pub buffer_drops: u64,
    /// Frames whose time on the wire is summed below (those the loss model
    /// and the queue let through; a duplicate counts once).
    #[serde(default)]
    pub timed: u64,
    /// Summed time from a frame's arrival at the wire to the start of its
    /// serialisation, waiting behind the frames before it (ns).
    #[serde(default)]
    pub queueing_ns: u64,
    /// Summed serialisation time, `max(len + 24, 84) × 8 / rate` (ns).
    #[serde(default)]
    pub serialisation_ns: u64,
    /// Summed time from a frame's last bit to its delivery: the delay, its
    /// jitter draw, and any wait not to overtake the frame before (ns).
    #[serde(default)]
    pub propagation_ns: u64,
    /// Frames CoDel dropped at the head of a managed queue (`aqm` links).
    #[serde(default)]
    pub aqm_drops: u64,
    /// Summed time the wire stood idle between a frame and the next one
    /// when the gap was under [`IDLE_GAP_MAX_NS`] (ns): in a saturating
    /// run, the time its source (the sending host, the hop before) did not
    /// keep it busy, lost for good by the frames behind.
    #[serde(default)]
    pub idle_ns: u64,
    /// Summed time from each sent frame's due time to its send (ns): the
    /// emulator's own wake-up and batching lateness, the sum of what
    /// [`SendError`] counts (a duplicate counts twice).
    #[serde(default)]
    pub late_ns: u64,
    /// Frames scheduled from their virtual arrival: found in the previous
    /// hop's lateness table ([`crate::emu_late`]), that hop having sent
    /// them late.
    #[serde(default)]
    pub virtual_frames: u64,
    /// Summed time those frames' virtual arrival was before their kernel
    /// arrival (ns): the previous hop's lateness given back.
    #[serde(default)]
    pub credit_ns: u64,
    /// Naps the loop took for a frame of this direction that ended over
    /// [`HOST_STALL_NS`] after their deadline: its CPU was held.
    #[serde(default)]
    pub stalls: u64,
    /// Their summed lateness (ns).
    #[serde(default)]
    pub stall_ns: u64,
}

impl WireCounters {
    /// What happened between snapshot `before` and this one (an emulator
    /// restarted in between reads as counting from zero).
    pub fn delta(&self, before: &WireCounters) -> WireCounters {
        if self.frames_in < before.frames_in {
            return *self;
        }
        WireCounters {
            frames_in: self.frames_in - before.frames_in,
            delivered: self.delivered.saturating_sub(before.delivered),
            lost: self.lost.saturating_sub(before.lost),
            queue_drops: self.queue_drops.saturating_sub(before.queue_drops),
            buffer_drops: self.buffer_drops.saturating_sub(before.buffer_drops),
            timed: self.timed.saturating_sub(before.timed),
            queueing_ns: self.queueing_ns.saturating_sub(before.queueing_ns),
            serialisation_ns: self
                .serialisation_ns
                .saturating_sub(before.serialisation_ns),
            propagation_ns: self.propagation_ns.saturating_sub(before.propagation_ns),
            aqm_drops: self.aqm_drops.saturating_sub(before.aqm_drops),
            idle_ns: self.idle_ns.saturating_sub(before.idle_ns),
            late_ns: self.late_ns.saturating_sub(before.late_ns),
            virtual_frames: self.virtual_frames.saturating_sub(before.virtual_frames),
            credit_ns: self.credit_ns.saturating_sub(before.credit_ns),
            stalls: self.stalls.saturating_sub(before.stalls),
            stall_ns: self.stall_ns.saturating_sub(before.stall_ns),
        }
    }

    /// Mean queueing, serialisation and propagation per timed frame, in
    /// seconds; None without a timed frame.
    pub fn mean_split_s(&self) -> Option<[f64; 3]> {
        (self.timed > 0).then(|| {
            let n = self.timed as f64 * 1e9;
            [
                self.queueing_ns as f64 / n,
                self.serialisation_ns as f64 / n,
                self.propagation_ns as f64 / n,
            ]
        })
    }
}

/// Where the frames crossing one direction of an emulated link spent
/// their time over a span (two snapshots of [`WireCounters`]): the means,
/// per frame delivered, of queueing behind earlier frames on the wire,
/// serialisation and propagation. Their sum is the hop's share of the
/// one-way delay; time in a node's own transmit queue (its qdisc, before
/// the wire) and in its network stack is not in it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HopTime {
    /// Node the frames left.
    pub from: String,
    /// Node they reached.
    pub to: String,
    /// Frames timed (delivered at least once).
    pub frames: u64,
    /// Mean wait for the wire (s).
    pub queueing_s: f64,
    /// Mean serialisation (s).
    pub serialisation_s: f64,
    /// Mean propagation: delay, jitter, and waiting not to overtake (s).
    pub propagation_s: f64,
    /// Stalls over the span ([`WireCounters::stalls`]): the hop's times,
    /// and every figure of a run over it, carry them.
    #[serde(default)]
    pub stalls: u64,
    /// Their summed lateness (s).
    #[serde(default)]
    pub stall_s: f64,
}

/// The per-hop split between two snapshots of every link's wire counters
/// (as [`crate::Testbed::wire_counters`] returns them, in link order):
/// one entry per emulated direction that carried a frame or stalled (a
/// direction with stalls and no frame has `frames` 0 and zero means).
pub fn hop_times(
    links: &[crate::spec::LinkSpec],
    before: &[Option<[WireCounters; 2]>],
    after: &[Option<[WireCounters; 2]>],
) -> Vec<HopTime> {
    let mut out = Vec::new();
    for (li, l) in links.iter().enumerate() {
        let (Some(Some(b)), Some(Some(a))) = (before.get(li), after.get(li)) else {
            continue;
        };
        for k in 0..2 {
            let d = a[k].delta(&b[k]);
            // A direction that timed no frame but stalled is kept, with
            // no means: the stall is the run's to know.
            let split = d.mean_split_s().or((d.stalls > 0).then_some([0.0; 3]));
            if let Some([q, s, p]) = split {
                out.push(HopTime {
                    from: l.endpoints[k].clone(),
                    to: l.endpoints[1 - k].clone(),
                    frames: d.timed,
                    queueing_s: q,
                    serialisation_s: s,
                    propagation_s: p,
                    stalls: d.stalls,
                    stall_s: d.stall_ns as f64 / 1e9,
                });
            }
        }
    }
    out
}

/// Buckets of one direction's [`SendError`] histogram in the counters
/// file, after both directions' [`COUNTERS`] words. 8 per power of two
/// (each at most 1/8 of its lower edge wide) up to 2^32 ns (4.3 s); a
/// larger value counts in the last. Both directions' histograms and
/// counters fit the file's one page.
pub const SEND_ERROR_BUCKETS: usize = 240;

/// Histogram bucket of an error of `ns`: exact below 16 ns, then 8
/// buckets per power of two.
pub fn send_error_bucket(ns: u64) -> usize {
    if ns < 8 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize;
    let i = ((e - 2) << 3) + ((ns >> (e - 3)) & 7) as usize;
    i.min(SEND_ERROR_BUCKETS - 1)
}

/// The smallest error (ns) bucket `i` counts; bucket `i + 1` starts where
/// it ends.
pub fn send_error_bucket_low(i: usize) -> u64 {
    if i < 8 {
        return i as u64;
    }
    let (e, sub) = (i / 8 + 2, (i % 8) as u64);
    (8 + sub) << (e - 3)
}

/// The emulator's own error in time for one direction: for every frame
/// it sent, the time it handed the frame to the far end's kernel minus
/// the model's due time (the frame's kernel receive stamp + queueing +
/// serialisation + delay and jitter), in a fixed log-bucket histogram
/// the emulator keeps in its counters file (no allocation or system call
/// per frame). A frame is never sent before its due time, so the error
/// is what the emulator added to the configured delay: its wake-up, a
/// frame read late from its ring, and the frames before it in one
/// `sendmmsg` (whose duration is shared evenly among the frames it sent,
/// as the kernel hands them to the far end one after the other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    /// Frames per bucket ([`send_error_bucket`]).
    pub buckets: [u64; SEND_ERROR_BUCKETS],
}

impl Default for SendError {
    fn default() -> SendError {
        SendError {
            buckets: [0; SEND_ERROR_BUCKETS],
        }
    }
}

impl SendError {
    /// Frames counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// What was counted between snapshot `before` and this one (an
    /// emulator restarted in between reads as counting from zero).
    pub fn delta(&self, before: &SendError) -> SendError {
        if self.buckets.iter().zip(&before.buckets).any(|(a, b)| a < b) {
            return self.clone();
        }
        let mut d = SendError::default();
        for (i, o) in d.buckets.iter_mut().enumerate() {
            *o = self.buckets[i] - before.buckets[i];
        }
        d
    }

    /// The `q` quantile (0–1) in ns, as the upper edge of the bucket that
    /// holds it (so at most 1/8 above the frame's error, never below);
    /// None without a frame.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest k with k >= q·n.
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(if i + 1 < SEND_ERROR_BUCKETS {
                    send_error_bucket_low(i + 1)
                } else {
                    u64::MAX
                });
            }
        }
        None
    }
}

/// A counters file's words (0 past its end: a file of an older emulator).
fn counter_words(path: &std::path::Path) -> Option<impl Fn(usize) -> u64> {
    let b = std::fs::read(path).ok()?;
    if b.len() < 2 * COUNTERS * 8 {
        return None;
    }
    Some(move |i: usize| {
        b.get(i * 8..i * 8 + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_ne_bytes)
            .unwrap_or(0)
    })
}

/// Reads the emulator's own send error from its counters file:
/// [first→second, second→first].
pub fn read_send_errors(path: &std::path::Path) -> Option<[SendError; 2]> {
    let w = counter_words(path)?;
    let dir = |d: usize| {
        let mut h = SendError::default();
        for (i, b) in h.buckets.iter_mut().enumerate() {
            *b = w(2 * COUNTERS + d * SEND_ERROR_BUCKETS + i);
        }
        h
    };
    Some([dir(0), dir(1)])
}

/// Reads an emulator's counters file: [first→second, second→first].
pub fn read_counters(path: &std::path::Path) -> Option<[WireCounters; 2]> {
    let w = counter_words(path)?;
    let dir = |d: usize| WireCounters {
        frames_in: w(d * COUNTERS),
        delivered: w(d * COUNTERS + 1),
        lost: w(d * COUNTERS + 2),
        queue_drops: w(d * COUNTERS + 3),
        buffer_drops: w(d * COUNTERS + 4),
        timed: w(d * COUNTERS + 5),
        queueing_ns: w(d * COUNTERS + 6),
        serialisation_ns: w(d * COUNTERS + 7),
        propagation_ns: w(d * COUNTERS + 8),
        aqm_drops: w(d * COUNTERS + 9),
        idle_ns: w(d * COUNTERS + 10),
        late_ns: w(d * COUNTERS + 11),
        virtual_frames: w(d * COUNTERS + 12),
        credit_ns: w(d * COUNTERS + 13),
        stalls: w(d * COUNTERS + 14),
        stall_ns: w(d * COUNTERS + 15),
    };
    Some([dir(0), dir(1)])
}

/// How long before a deadline the loop stops sleeping and spins: a
/// wake-up from `ppoll` is late by µs to tens of µs. Fixed: a lead
/// learnt from late wake-ups (up to 200 µs) made sparse frames punctual
/// on an idle VM but spent the spin budget on a saturated jumbo link,
/// and a 5 MiB TCP transfer at 1 Gbit/s lost 0.5 % (docs/testbed.md).
const SPIN_NS: u64 = 15_000;
/// The lead for a lone frame: the only frame the emulator holds, on a
/// wire that stood idle at least this long before it (probes, a ping, a
/// transfer's first segments). An idle VM whose host parks the vCPU
/// wakes `ppoll` tens of µs late (the hop's own send error read p50
/// 27 µs, p99 360 µs with [`SPIN_NS`] alone, quiet host), so such a
/// frame is woken for this long before its deadline. Only there: a
/// saturated wire's frames follow each other without a gap and keep
/// [`SPIN_NS`], and these spins draw on their own budget
/// ([`LONE_SHARE_PCT`]), never on the one a backlog needs (a lead learnt
/// for every frame spent it and slowed a 1 Gbit/s jumbo transfer).
const LONE_LEAD_NS: u64 = 150_000;
/// The share of the time (%) lone frames' long spins may take, saved up
/// to [`LONE_BUDGET_NS`]: a flood of lone frames (10 000/s, each alone)
/// would otherwise spin a core; past it they get [`SPIN_NS`].
const LONE_SHARE_PCT: i64 = 5;
/// Lone-frame spin time the loop may save up (ns): a few frames' worth.
const LONE_BUDGET_NS: i64 = 1_000_000;
/// The share of the time (%) the loop may spin, over a moving
/// [`SPIN_BUDGET_NS`]: with frames due every few µs it would otherwise
/// spin on a core the hosts on both ends need. Past it, the loop naps
/// for at least the link's `slack` and sends what is due on waking
/// (late by up to the slack and the wake-up, in one `sendmmsg`), which
/// keeps the link's rate (deadlines are absolute); a sparse frame's
/// spin (probes, one flow's ACKs) is always within the budget, so its
/// time stays exact.
const SPIN_SHARE_PCT: i64 = 20;
/// The shortest sleep once the spin budget is spent, unless the link
/// says otherwise (its `slack`, [`crate::spec::DEFAULT_SLACK_NS`]): on a
/// saturated wire the frames due during a nap leave on waking, so a
/// send's error there is at most the nap plus the wake-up. Each nap
/// costs the hosts a timer and two context switches: 10-15 µs naps
/// left a host's UDP sender at 1 Gbit/s of 1518 B 1-3 % short of the
/// link (7 of 8 runs, docs/testbed.md), 50 µs naps in none of 6; 5 µs
/// spent the kernel's real-time budget (stalls of 30-50 ms).
#[cfg(test)]
const NAP_NS: u64 = crate::spec::DEFAULT_SLACK_NS;
/// Spin time the loop may save up while sleeping (ns).
const SPIN_BUDGET_NS: i64 = 1_000_000;
/// A sleep shorter than this ends at its deadline, not at the arrival of
/// a frame in a direction that holds frames: a direction's frames cannot
/// be due before those it already holds, its ring keeps them with their
/// kernel timestamps, and waking for each arrival would double the
/// wake-ups at a high frame rate. A direction holding none (the ACKs
/// against a bulk flow) still wakes the loop when a frame arrives.
const QUIET_NS: u64 = 200_000;

/// What the forwarding loop does next ([`Spin::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) enum Step {
    /// Something is due: deliver it now.
    Deliver,
    /// Stay awake: the next deadline is nearer than a worthwhile sleep.
    Spin,
    /// Sleep this long (ns); `frames` when a frame's arrival should wake
    /// the loop too.
    Sleep { ns: u64, frames: bool },
}

/// The loop's spin budget: [`SPIN_SHARE_PCT`] of the time passing, spent
/// by spinning, saved up to [`SPIN_BUDGET_NS`].
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct Spin {
    left: i64,
    /// The lone frames' budget ([`LONE_SHARE_PCT`]).
    lone_left: i64,
    last: u64,
    /// Which budget the last step's spin is charged to.
    spun: Spun,
    /// The shortest sleep past the budget (ns): the link's `slack`.
    nap: u64,
}

/// Which budget a spin draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Spun {
    No,
    Near,
    Lone,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl Spin {
    pub(crate) fn new(now: u64, nap: u64) -> Spin {
        Spin {
            left: SPIN_BUDGET_NS,
            lone_left: LONE_BUDGET_NS,
            last: now,
            spun: Spun::No,
            nap,
        }
    }

    /// Accounts the time since the last call (spent spinning if the last
    /// step was [`Step::Spin`], on the budget it drew on) and decides the
    /// next step for the earliest deadline `next`; `lone` when that
    /// deadline is a lone frame's ([`LONE_LEAD_NS`]).
    pub(crate) fn step(&mut self, now: u64, next: Option<u64>, lone: bool) -> Step {
        let dt = now.saturating_sub(self.last) as i64;
        self.last = now;
        let (near, far) = match self.spun {
            Spun::No => (0, 0),
            Spun::Near => (dt, 0),
            Spun::Lone => (0, dt),
        };
        self.left = (self.left + dt * SPIN_SHARE_PCT / 100 - near).min(SPIN_BUDGET_NS);
        self.lone_left = (self.lone_left + dt * LONE_SHARE_PCT / 100 - far).min(LONE_BUDGET_NS);
        let (spin_ns, nap_ns) = (SPIN_NS, self.nap);
        self.spun = Spun::No;
        let lone = lone && self.lone_left > 0;
        // A sleep shorter than the nap costs what it saves: spin through it
        // while the budget lasts, else nap past it.
        let ns = match next {
            Some(t) if t <= now => return Step::Deliver,
            Some(t) if lone && t <= now + LONE_LEAD_NS + nap_ns => {
                self.spun = Spun::Lone;
                return Step::Spin;
            }
            Some(t) if lone => t - LONE_LEAD_NS - now,
            Some(t) if t <= now + spin_ns + nap_ns && self.left > 0 => {
                self.spun = Spun::Near;
                return Step::Spin;
            }
            Some(t) if t <= now + spin_ns + nap_ns => (t - now).max(nap_ns),
            Some(t) => t - spin_ns - now,
            None => 1_000_000_000,
        };
        Step::Sleep {
            ns,
            frames: next.is_none() || ns >= QUIET_NS,
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{Aqm, Spin, Step};
    use crate::aqm::{flow_hash, AqmQueue};
    use crate::emu::{Fate, ManagedWire, Wire, ETH_HEADER};
    use crate::emu_late::{frame_key, virtual_arrival, LateTable, LATE_FILE_BYTES};
    use crate::error::TestbedError;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    /// Frames (copies included) sent in one `sendmmsg` call at most.
    const SEND_BATCH: usize = 64;

    /// SCHED_FIFO priority of the forwarding process: above the senders and
    /// receivers that run at 50 (`chrt -f 50`, wirebench's and the tests'
    /// real-time threads), as a wire does not wait for the hosts.
    const EMULATOR_RT_PRIORITY: i32 = 70;

    /// Frames held per direction when the link's rate and delay do not ask
    /// for more.
    const MIN_SLOTS: usize = 1024;
    /// Memory for held frames per direction, at most.
    const MAX_HELD_BYTES: usize = 64 << 20;

    /// How many frames one direction must be able to hold: everything in
    /// flight over `delay` plus up to 8 jitters at the link rate in
    /// minimum-size frames, plus the queue, within [`MAX_HELD_BYTES`].
    pub(crate) fn slots_for(w: &Wire, slot_size: usize) -> usize {
        let span_ns = w.imp.delay_ns + 8 * w.imp.jitter_ns + 2_000_000;
        let in_flight = match w.rate_bps {
            Some(r) => (r as u128 * span_ns as u128 / 8 / 1_000_000_000 / 84) as usize,
            None => (span_ns / 1_000) as usize, // 1 Mpps without a rate
        };
        (in_flight + w.queue_frames + 64)
            .max(MIN_SLOTS)
            .min(MAX_HELD_BYTES / slot_size)
    }

    fn cvt(rc: libc::c_int, what: &str) -> Result<libc::c_int, TestbedError> {
        if rc < 0 {
            Err(TestbedError::io(what, std::io::Error::last_os_error()))
        } else {
            Ok(rc)
        }
    }

    fn setopt(fd: RawFd, level: i32, opt: i32, val: i32, what: &str) -> Result<(), TestbedError> {
        // SAFETY: a valid fd and a pointer to a local int of the right size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                &val as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        cvt(rc, what).map(|_| ())
    }

    /// Memory of each end's receive ring (as the socket buffer it replaces).
    const RING_BYTES: usize = 8 << 20;
    /// Frames each receive ring holds at least, however large the MTU.
    const RING_MIN_FRAMES: usize = 256;

    /// A PACKET_MMAP receive ring (TPACKET_V2, kernel
    /// Documentation/networking/packet_mmap.rst) on one packet socket: the
    /// kernel writes each frame and its receive time into memory shared
    /// with us, so taking a frame costs no system call and the spin before
    /// a deadline polls memory, not the socket. Frames sit in blocks of
    /// whole pages; a frame never straddles two blocks.
    pub(crate) struct Ring {
        base: *mut u8,
        size: usize,
        frame_size: usize,
        per_block: usize,
        block_size: usize,
        frames: usize,
        /// The next frame the kernel fills (it fills them in order).
        next: usize,
    }

    /// One frame the kernel handed over: where its bytes are in the ring
    /// and what the kernel says of it.
    struct RingFrame {
        hdr: *mut libc::tpacket2_hdr,
        /// Length on the wire.
        len: usize,
        /// Bytes in the ring (less than `len` when the frame did not fit).
        snap: usize,
        data: *const u8,
        /// Kernel receive time, CLOCK_REALTIME ns.
        stamp: i64,
    }

    impl Ring {
        /// Sets up the ring for frames of up to `frame_bytes` on `fd`.
        fn new(fd: RawFd, frame_bytes: usize, what: &str) -> Result<Ring, TestbedError> {
            setopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_VERSION,
                libc::tpacket_versions::TPACKET_V2 as i32,
                what,
            )?;
            let align = |x: usize, a: usize| x.div_ceil(a) * a;
            // The kernel puts the MAC header at TPACKET_ALIGN(hdrlen + 16)
            // − 14 and truncates what does not fit in the frame.
            let frame_size = align(
                align(libc::TPACKET2_HDRLEN + 16, libc::TPACKET_ALIGNMENT) + frame_bytes,
                libc::TPACKET_ALIGNMENT,
            );
            // SAFETY: sysconf with a constant name.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
            let block_size = align(frame_size.max(64 << 10), page);
            let per_block = block_size / frame_size;
            let blocks = (RING_BYTES / block_size).max(RING_MIN_FRAMES.div_ceil(per_block));
            let req = libc::tpacket_req {
                tp_block_size: block_size as u32,
                tp_block_nr: blocks as u32,
                tp_frame_size: frame_size as u32,
                tp_frame_nr: (blocks * per_block) as u32,
            };
            // SAFETY: a valid fd and a pointer to a local tpacket_req.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_PACKET,
                    libc::PACKET_RX_RING,
                    &req as *const libc::tpacket_req as *const libc::c_void,
                    std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
                )
            };
            cvt(rc, what)?;
            let size = block_size * blocks;
            // SAFETY: maps the ring the kernel just allocated for fd; the
            // length is the ring's size, as packet_mmap requires.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(TestbedError::io(what, std::io::Error::last_os_error()));
            }
            Ok(Ring {
                base: base as *mut u8,
                size,
                frame_size,
                per_block,
                block_size,
                frames: blocks * per_block,
                next: 0,
            })
        }

        fn status(hdr: *mut libc::tpacket2_hdr) -> &'static AtomicU32 {
            // SAFETY: hdr points at a frame header inside the mapping,
            // which lives as long as the process that uses it (the parent
            // unmaps only when dropping a ring it no longer reads); the
            // status word is an aligned u32 the kernel also accesses
            // atomically.
            unsafe { &*(std::ptr::addr_of_mut!((*hdr).tp_status) as *const AtomicU32) }
        }

        /// The next frame, if the kernel has filled it.
        fn peek(&self) -> Option<RingFrame> {
            let off = (self.next / self.per_block) * self.block_size
                + (self.next % self.per_block) * self.frame_size;
            // SAFETY: off + frame_size <= size by construction.
            let hdr = unsafe { self.base.add(off) } as *mut libc::tpacket2_hdr;
            // Acquire: the frame's bytes are written before its status.
            if Self::status(hdr).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return None;
            }
            // SAFETY: a frame handed to user space: its header is ours to
            // read until released, and tp_mac + tp_snaplen lies within the
            // frame (the kernel truncates to fit).
            unsafe {
                let h = &*hdr;
                Some(RingFrame {
                    hdr,
                    len: h.tp_len as usize,
                    snap: (h.tp_snaplen as usize).min(self.frame_size - h.tp_mac as usize),
                    data: (hdr as *const u8).add(h.tp_mac as usize),
                    stamp: h.tp_sec as i64 * 1_000_000_000 + h.tp_nsec as i64,
                })
            }
        }

        /// Gives the frame `peek` returned back to the kernel.
        fn release(&mut self, f: RingFrame) {
            Self::status(f.hdr).store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next = (self.next + 1) % self.frames;
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, unmapped once. Only the
            // parent drops a ring; the forwarding process exits with _exit.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.size) };
        }
    }

    /// An AF_PACKET socket bound to interface `dev` of the calling thread's
    /// namespace: every frame received there (into a [`Ring`] of frames
    /// up to `frame_bytes`), none it sends itself, each with its kernel
    /// receive timestamp.
    fn packet_socket(dev: &str, frame_bytes: usize) -> Result<(OwnedFd, i32, Ring), TestbedError> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // Protocol 0 until bound: no frame of another interface reaches
        // the ring before `bind` names this one.
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, 0) };
        let fd = cvt(fd, "opening an AF_PACKET socket")?;
        // SAFETY: fd was just returned by socket(2) and is ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let name = std::ffi::CString::new(dev)
            .map_err(|_| TestbedError::Invalid(format!("interface name {dev:?}")))?;
        // SAFETY: a NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(TestbedError::io(
                format!("finding interface {dev}"),
                std::io::Error::last_os_error(),
            ));
        }
        let raw = fd.as_raw_fd();
        let what = format!("setting up the packet socket on {dev}");
        // Frames we send on this end must not come back to us as received.
        setopt(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            1,
            &what,
        )?;
        setopt(raw, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1, &what)?;
        // Stamps each frame when the device hands it to the stack, before
        // the ring's own (later) clock read.
        setopt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1, &what)?;
        setopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20, &what)?;
        let ring = Ring::new(raw, frame_bytes, &what)?;
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex;
        // SAFETY: sa is a valid sockaddr_ll and the length is its size.
        let rc = unsafe {
            libc::bind(
                raw,
                &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        cvt(rc, &what)?;
        Ok((fd, ifindex, ring))
    }

    /// Counters of one direction, in a file shared with readers
    /// ([`super::read_counters`]), laid out as [`super::COUNTERS`] says.
    pub(crate) const COUNTERS: usize = super::COUNTERS;
    /// Size of the counters file: one page.
    const COUNTERS_BYTES: usize = 4096;

    /// The counter words and the send error histogram of one direction,
    /// in the shared mapping.
    struct Counts {
        words: *const AtomicU64,
        errors: *const AtomicU64,
    }

    /// Both directions' counters and histograms fit the mapped page.
    const _: () = assert!((2 * COUNTERS + 2 * super::SEND_ERROR_BUCKETS) * 8 <= COUNTERS_BYTES);

    impl Counts {
        fn add(&self, k: usize, n: u64) {
            // SAFETY: the mapping holds COUNTERS_BYTES for the life of the
            // process (never unmapped), k < COUNTERS, and AtomicU64 has
            // the alignment of the page-aligned u64 words.
            unsafe { (*self.words.add(k)).fetch_add(n, Ordering::Relaxed) };
        }

        /// Counts one frame sent `ns` after its due time.
        fn sent_late(&self, ns: u64) {
            self.add(11, ns);
            let i = super::send_error_bucket(ns);
            // SAFETY: as in `add`; i < SEND_ERROR_BUCKETS.
            unsafe { (*self.errors.add(i)).fetch_add(1, Ordering::Relaxed) };
        }
    }

    /// One frame held by the emulator.
    #[derive(Debug, Clone, Copy, Default)]
    struct Held {
        at: u64,
        /// Index of the buffer slot holding the bytes.
        slot: u32,
        len: u32,
        copies: u8,
        /// Asked to be passed by the next frame.
        reorder: bool,
        /// Its wire stood idle at least [`super::LONE_LEAD_NS`] before it.
        idle_before: bool,
    }

    /// How one direction queues: drop-tail, every frame's fate decided on
    /// arrival, or a managed queue that decides when the wire is free.
    enum Queue {
        Tail(Wire),
        Managed(ManagedWire),
    }

    /// The frames of one direction between reading and sending: held in a
    /// FIFO of delivery times (frames never overtake but by `reorder`)
    /// whose bytes sit in slots taken from a LIFO free list, so only as
    /// many slots are ever touched as were held at once.
    struct Store {
        tx: RawFd,
        held: Vec<Held>,
        head: usize,
        len: usize,
        free: Vec<u32>,
        slot_size: usize,
        data: Vec<u8>,
        /// Length of the frame in each slot.
        slot_len: Vec<u32>,
        /// Key of the frame in each slot ([`frame_key`]; 0: none).
        slot_key: Vec<u64>,
        /// Where this direction publishes its sends' lateness.
        late: LateTable,
        /// Each message's key.
        keys: Vec<u64>,
        /// When the last frame timed left the wire (ns).
        last_end: u64,
        /// One `sendmmsg` call's messages and their buffers.
        batch: Vec<libc::mmsghdr>,
        iov: Vec<libc::iovec>,
        /// Each message's due time.
        due: Vec<u64>,
        counts: Counts,
    }

    impl Store {
        /// Acts on a frame's fate: counts it, frees its slot when it is
        /// dropped, holds it for delivery otherwise.
        fn settle(&mut self, slot: u32, fate: Fate) {
            match fate {
                Fate::Lost => self.counts.add(2, 1),
                Fate::QueueFull => self.counts.add(3, 1),
                Fate::AqmDrop => self.counts.add(9, 1),
                Fate::Deliver {
                    arrival,
                    at,
                    start,
                    end,
                    copies,
                    corrupt_bit,
                    reorder,
                } => {
                    let gap = start.saturating_sub(self.last_end);
                    if gap < super::IDLE_GAP_MAX_NS {
                        self.counts.add(10, gap);
                    }
                    self.last_end = end;
                    self.counts.add(5, 1);
                    self.counts.add(6, start.saturating_sub(arrival));
                    self.counts.add(7, end - start);
                    self.counts.add(8, at - end);
                    if let Some(b) = corrupt_bit {
                        let i =
                            slot as usize * self.slot_size + ETH_HEADER as usize + (b / 8) as usize;
                        self.data[i] ^= 1 << (b % 8);
                    }
                    let n = self.held.len();
                    let tail = (self.head + self.len) % n;
                    let prev = (tail + n - 1) % n;
                    let mut h = Held {
                        at,
                        slot,
                        len: self.slot_len[slot as usize],
                        copies,
                        reorder,
                        idle_before: gap >= super::LONE_LEAD_NS,
                    };
                    if self.len > 0 && self.held[prev].reorder {
                        // The previous frame asked to be passed: this
                        // one takes its (earlier) delivery time.
                        let p = &mut self.held[prev];
                        std::mem::swap(&mut p.slot, &mut h.slot);
                        std::mem::swap(&mut p.len, &mut h.len);
                        std::mem::swap(&mut p.copies, &mut h.copies);
                        p.reorder = false;
                        h.reorder = false;
                    }
                    self.held[tail] = h;
                    self.len += 1;
                    return;
                }
            }
            self.free.push(slot);
        }

        /// Sends every frame due at `now`, those due together in one
        /// system call.
        fn deliver(&mut self, now: u64) {
            while self.len > 0 && self.held[self.head].at <= now {
                // Slots are freed only after the call that sends them.
                let (mut n, mut taken) = (0, 0);
                let (mut head, mut len) = (self.head, self.len);
                while len > 0 && self.held[head].at <= now {
                    let h = self.held[head];
                    if n + h.copies as usize > SEND_BATCH {
                        break;
                    }
                    let off = h.slot as usize * self.slot_size;
                    for _ in 0..h.copies {
                        self.iov[n] = libc::iovec {
                            iov_base: self.data[off..].as_mut_ptr() as *mut libc::c_void,
                            iov_len: h.len as usize,
                        };
                        self.due[n] = h.at;
                        self.keys[n] = self.slot_key[h.slot as usize];
                        n += 1;
                    }
                    self.counts.add(1, h.copies as u64);
                    head = (head + 1) % self.held.len();
                    len -= 1;
                    taken += 1;
                }
                for (m, v) in self.batch.iter_mut().zip(self.iov.iter_mut()).take(n) {
                    m.msg_hdr.msg_iov = v;
                    m.msg_hdr.msg_iovlen = 1;
                }
                let mut sent = 0;
                while sent < n {
                    let t0 = mono();
                    // Before the call: the far end's kernel may forward a
                    // frame to the next emulator before the call returns.
                    for i in sent..n {
                        if self.keys[i] != 0 {
                            self.late.publish(self.keys[i], self.due[i], t0);
                        }
                    }
                    // A full socket buffer or a vanished peer loses the
                    // frames, as a wire would; the receive side notices a
                    // vanished interface.
                    // SAFETY: n - sent live mmsghdrs, each naming one iovec
                    // over a held frame's bytes.
                    let r = unsafe {
                        libc::sendmmsg(
                            self.tx,
                            self.batch[sent..].as_mut_ptr(),
                            (n - sent) as libc::c_uint,
                            libc::MSG_DONTWAIT,
                        )
                    };
                    if r > 0 {
                        // The kernel hands the frames of one call to the
                        // far end one after the other (and runs the far
                        // end's receive work for each in between): frame i
                        // of r left at the start of its share of the call.
                        let (r, span) = (r as u64, mono() - t0);
                        for i in 0..r {
                            let at = t0 + span * i / r;
                            self.counts
                                .sent_late(at.saturating_sub(self.due[sent + i as usize]));
                        }
                    }
                    // A frame the kernel refused is skipped, not retried.
                    sent += if r > 0 { r as usize } else { 1 };
                }
                for _ in 0..taken {
                    self.free.push(self.held[self.head].slot);
                    self.head = (self.head + 1) % self.held.len();
                    self.len -= 1;
                }
            }
        }
    }

    /// What one direction shares with other processes: its counters, the
    /// table where it publishes its sends' lateness, and the tables of
    /// the links that deliver to the node it receives from.
    struct Shared {
        counts: Counts,
        late: LateTable,
        from: Vec<LateTable>,
    }

    /// One direction: frames read on `rx`, queued and timed by `queue`,
    /// held and written on the other end by `store`.
    struct Dir {
        queue: Queue,
        rx: RawFd,
        ring: Ring,
        store: Store,
        /// Seed of the flow hash (FQ-CoDel's perturbation).
        perturb: u64,
        /// The lateness tables of the links whose frames reach this
        /// direction through the node it receives from.
        from: Vec<LateTable>,
    }

    impl Dir {
        fn new(
            wire: Wire,
            aqm: Option<&Aqm>,
            rx: RawFd,
            ring: Ring,
            tx: RawFd,
            slot_size: usize,
            shared: Shared,
        ) -> Dir {
            let Shared { counts, late, from } = shared;
            let mut wire = wire;
            if let Some(a) = aqm {
                // Sizes the slots; a byte limit alone counts no frames.
                wire.queue_frames = a.limit_frames.min(1 << 20);
            }
            let n = slots_for(&wire, slot_size);
            let queue = match aqm {
                Some(a) => Queue::Managed(ManagedWire::new(
                    wire,
                    AqmQueue::new(&a.spec, n, a.limit_frames, a.limit_bytes),
                )),
                None => Queue::Tail(wire),
            };
            Dir {
                queue,
                rx,
                ring,
                store: Store {
                    tx,
                    held: vec![Held::default(); n],
                    head: 0,
                    len: 0,
                    free: (0..n as u32).rev().collect(),
                    slot_size,
                    data: vec![0u8; n * slot_size],
                    slot_len: vec![0; n],
                    slot_key: vec![0; n],
                    late,
                    keys: vec![0; SEND_BATCH],
                    last_end: 0,
                    // SAFETY: mmsghdr and iovec are plain data; zeroed is
                    // a valid value (null pointers, zero lengths).
                    batch: vec![unsafe { std::mem::zeroed() }; SEND_BATCH],
                    // SAFETY: as above.
                    iov: vec![unsafe { std::mem::zeroed() }; SEND_BATCH],
                    due: vec![0; SEND_BATCH],
                    counts,
                },
                perturb: aqm.map_or(0, |a| a.perturb),
                from,
            }
        }

        /// The next time something is due: a delivery, or the wire taking
        /// a frame from a managed queue.
        fn next_at(&self) -> Option<u64> {
            let st = &self.store;
            let held = (st.len > 0).then(|| st.held[st.head].at);
            let start = match &self.queue {
                Queue::Managed(m) => m.next_start(),
                Queue::Tail(_) => None,
            };
            match (held, start) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }

        /// Whether this direction holds one frame, and that one came to
        /// an idle wire (a managed queue's frames wait for the wire: not
        /// lone).
        fn lone(&self) -> bool {
            let st = &self.store;
            let waiting = match &self.queue {
                Queue::Managed(m) => m.next_start().is_some(),
                Queue::Tail(_) => false,
            };
            st.len == 1 && st.held[st.head].idle_before && !waiting
        }

        /// Lets the managed queue's wire run to `now`, then sends every
        /// frame due.
        fn deliver(&mut self, now: u64) {
            if let Queue::Managed(m) = &mut self.queue {
                let st = &mut self.store;
                m.advance(now, |slot, fate| st.settle(slot, fate));
            }
            self.store.deliver(now);
        }

        /// Takes up to `batch` frames from the receive ring, stopping
        /// early once the clock reaches `until` (checked every 8 frames);
        /// `clock_off` is CLOCK_REALTIME − CLOCK_MONOTONIC. Returns how
        /// many it took.
        fn receive(&mut self, clock_off: i64, now: u64, batch: usize, until: u64) -> usize {
            let mut taken = 0;
            while taken < batch {
                if taken % 8 == 7 && until != u64::MAX && mono() >= until {
                    break;
                }
                let Some(f) = self.ring.peek() else { break };
                taken += 1;
                let st = &mut self.store;
                if f.len > st.slot_size || f.len < ETH_HEADER as usize || f.snap < f.len {
                    // Larger than the link's MTU (a GSO packet): not a frame.
                    self.ring.release(f);
                    continue;
                }
                st.counts.add(0, 1);
                let Some(slot) = st.free.pop() else {
                    // Every buffer is in flight: the frame is dropped.
                    st.counts.add(4, 1);
                    self.ring.release(f);
                    continue;
                };
                let len = f.len;
                let off = slot as usize * st.slot_size;
                // SAFETY: f.data holds f.snap == len bytes of the ring
                // until released; the slot holds slot_size >= len bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(f.data, st.data[off..off + len].as_mut_ptr(), len)
                };
                let mut arrival = mono_stamp(f.stamp, clock_off, now).unwrap_or(now);
                self.ring.release(f);
                st.slot_len[slot as usize] = len as u32;
                let key = frame_key(&st.data[off..off + len]).unwrap_or(0);
                st.slot_key[slot as usize] = key;
                // Scheduled from when the previous hop's model delivered
                // it, not from when its emulator got round to it.
                if key != 0 {
                    if let Some(v) = self.from.iter().find_map(|t| {
                        let (due, sent) = t.lookup(key)?;
                        virtual_arrival(arrival, due, sent)
                    }) {
                        st.counts.add(12, 1);
                        st.counts.add(13, arrival - v);
                        arrival = v;
                    }
                }
                match &mut self.queue {
                    Queue::Tail(w) => {
                        let fate = w.admit(arrival, len as u32);
                        st.settle(slot, fate);
                    }
                    Queue::Managed(m) => {
                        let hash = flow_hash(&st.data[off..off + len], self.perturb);
                        m.enqueue(slot, arrival, len as u32, hash, |s, f| st.settle(s, f));
                    }
                }
            }
            taken
        }
    }

    /// A kernel receive time (CLOCK_REALTIME ns) on CLOCK_MONOTONIC;
    /// `clock_off` is realtime − monotonic, read just before. None when
    /// implausible (more than a second from `now`), and the caller uses
    /// `now`.
    fn mono_stamp(real: i64, clock_off: i64, now: u64) -> Option<u64> {
        let mono = real - clock_off;
        if mono <= 0 {
            return None;
        }
        let mono = mono as u64;
        // A frame stamped after `now` arrived while we read.
        (mono.abs_diff(now) < 1_000_000_000).then_some(mono)
    }

    fn clock(id: libc::clockid_t) -> i64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid timespec.
        unsafe { libc::clock_gettime(id, &mut ts) };
        ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    }

    fn mono() -> u64 {
        clock(libc::CLOCK_MONOTONIC) as u64
    }

    /// Whether interface `ifindex` still exists in our namespace.
    fn iface_exists(fd: RawFd, ifindex: i32) -> bool {
        // SAFETY: ifreq is plain data; zeroed is valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_ifru.ifru_ifindex = ifindex;
        // SAFETY: SIOCGIFNAME reads ifindex and writes the name into ifr.
        unsafe { libc::ioctl(fd, libc::SIOCGIFNAME, &mut ifr) >= 0 }
    }

    /// Maps `len` bytes of `f` shared (read and write): what the
    /// emulator and other processes see alike.
    fn map_shared(
        f: &std::fs::File,
        len: usize,
        what: &'static str,
    ) -> Result<*mut libc::c_void, TestbedError> {
        // SAFETY: a fresh shared mapping of `len` bytes of an open file
        // the caller sized to at least that.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(TestbedError::io(what, std::io::Error::last_os_error()));
        }
        Ok(p)
    }

    /// Maps the counters file (created by the caller) shared: the emulator
    /// writes, `status` reads the file. The mapping is never unmapped (it
    /// lives as long as the emulator; in the parent it is one page).
    fn map_counters(f: std::fs::File) -> Result<*const AtomicU64, TestbedError> {
        let what = "mapping the emulator's counters";
        f.set_len(COUNTERS_BYTES as u64)
            .map_err(|e| TestbedError::io(what, e))?;
        Ok(map_shared(&f, COUNTERS_BYTES, what)? as *const AtomicU64)
    }

    /// A shared mapping of a lateness table file, unmapped when the
    /// parent drops it (the forwarding process exits without dropping).
    struct Mapped {
        base: *mut libc::c_void,
    }

    impl Mapped {
        /// Maps `f` ([`LATE_FILE_BYTES`] long, as the test-bed made it).
        fn new(f: &std::fs::File) -> Result<Mapped, TestbedError> {
            let what = "mapping a link's lateness table";
            let len = f.metadata().map_err(|e| TestbedError::io(what, e))?.len();
            if len != LATE_FILE_BYTES as u64 {
                return Err(TestbedError::Invalid(format!(
                    "a lateness table of {len} B, not {LATE_FILE_BYTES}"
                )));
            }
            Ok(Mapped {
                base: map_shared(f, LATE_FILE_BYTES, what)?,
            })
        }

        /// Direction `d`'s table.
        fn table(&self, d: usize) -> LateTable {
            // SAFETY: the mapping holds both directions' words, page
            // aligned, and the Emulator keeps it (the forwarding process
            // for its whole life).
            unsafe { LateTable::new((self.base as *const AtomicU64).add(d * LateTable::WORDS)) }
        }
    }

    impl Drop for Mapped {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.base, LATE_FILE_BYTES) };
        }
    }

    /// A link's lateness tables as its emulator is given them: its own
    /// file (both directions), and for each direction the files of the
    /// links delivering to the node that direction receives from, with
    /// the direction of each that does.
    pub(crate) struct LateFiles {
        /// This link's table file.
        pub(crate) own: std::fs::File,
        /// Per direction: (neighbour's file, its direction into the node).
        pub(crate) from: [Vec<(std::fs::File, usize)>; 2],
    }

    /// Everything the forwarding loop needs, made before the fork.
    pub(crate) struct Emulator {
        socks: [OwnedFd; 2],
        ifindex: [i32; 2],
        dirs: [Dir; 2],
        /// Kept mapped while the tables in `dirs` are used.
        _maps: Vec<Mapped>,
        /// A CPU latency request (`/dev/cpu_dma_latency`), when the host
        /// offers one: see [`CpuLatency`].
        qos: Option<OwnedFd>,
        /// The link's `slack` (ns): the spin loop's nap.
        slack_ns: u64,
    }

    impl Emulator {
        /// Opens the two ends (`a`, `b` of the calling thread's namespace)
        /// and allocates the buffers. `wires[0]` carries a→b, `[1]` b→a.
        pub(crate) fn open(
            ends: [&str; 2],
            wires: [Wire; 2],
            aqm: Option<Aqm>,
            mtu: u32,
            counters: std::fs::File,
            late: LateFiles,
            slack_ns: u64,
        ) -> Result<Emulator, TestbedError> {
            let slot = (mtu + ETH_HEADER) as usize;
            // Opening it asks nothing yet (the kernel's default request);
            // the loop asks for 0 µs while frames flow (CpuLatency).
            let qos = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/cpu_dma_latency")
                .ok()
                .map(OwnedFd::from);
            let own = Mapped::new(&late.own)?;
            let mut maps = Vec::new();
            let mut from: [Vec<LateTable>; 2] = [Vec::new(), Vec::new()];
            for (d, list) in late.from.iter().enumerate() {
                for (f, nd) in list {
                    let m = Mapped::new(f)?;
                    from[d].push(m.table(*nd));
                    maps.push(m);
                }
            }
            let [from0, from1] = from;
            let (a, ia, ra) = packet_socket(ends[0], slot)?;
            let (b, ib, rb) = packet_socket(ends[1], slot)?;
            let base = map_counters(counters)?;
            // SAFETY: offsets within the mapping (the assertion at Counts).
            let counts = |d: usize| unsafe {
                Counts {
                    words: base.add(d * COUNTERS),
                    errors: base.add(2 * COUNTERS + d * super::SEND_ERROR_BUCKETS),
                }
            };
            let [w0, w1] = wires;
            let dirs = [
                Dir::new(
                    w0,
                    aqm.as_ref(),
                    a.as_raw_fd(),
                    ra,
                    b.as_raw_fd(),
                    slot,
                    Shared {
                        counts: counts(0),
                        late: own.table(0),
                        from: from0,
                    },
                ),
                Dir::new(
                    w1,
                    aqm.as_ref(),
                    b.as_raw_fd(),
                    rb,
                    a.as_raw_fd(),
                    slot,
                    Shared {
                        counts: counts(1),
                        late: own.table(1),
                        from: from1,
                    },
                ),
            ];
            Ok(Emulator {
                socks: [a, b],
                ifindex: [ia, ib],
                dirs,
                _maps: {
                    maps.push(own);
                    maps
                },
                qos,
                slack_ns,
            })
        }

        /// Starts the forwarding process (see the module comment) and
        /// returns its pid once it runs. The calling thread must be in the
        /// link's namespace.
        pub(crate) fn spawn(mut self) -> Result<i32, TestbedError> {
            let mut pipe = [0i32; 2];
            // SAFETY: pipe2 writes two fds into the array.
            let rc = unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) };
            cvt(rc, "creating a pipe")?;
            // SAFETY: both fds were just created and are ours.
            let (rd, wr) =
                unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
            let devnull = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map_err(|e| TestbedError::io("opening /dev/null", e))?;
            // SAFETY: fork(2). The child only makes system calls and touches
            // memory allocated before the fork (see `child`).
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(TestbedError::io(
                    "forking the link emulator",
                    std::io::Error::last_os_error(),
                ));
            }
            if pid == 0 {
                self.child(wr.as_raw_fd(), devnull.as_raw_fd());
            }
            drop(wr);
            let mut status = 0;
            // SAFETY: waiting for our own child, which exits at once.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            // The grandchild writes its pid once it is ready.
            let mut pfd = libc::pollfd {
                fd: rd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 5000) };
            let mut buf = [0u8; 4];
            // SAFETY: reading into a 4-byte local buffer.
            let n = unsafe { libc::read(rd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, 4) };
            if n != 4 {
                return Err(TestbedError::Probe(
                    "the link emulator did not start".into(),
                ));
            }
            Ok(i32::from_ne_bytes(buf))
        }

        /// The forked child: detaches, forks the emulator proper and exits.
        fn child(&mut self, ready: RawFd, devnull: RawFd) -> ! {
            // SAFETY: all of these are system calls on integers or on memory
            // allocated before the fork; nothing here allocates or locks.
            unsafe {
                libc::setsid();
                if libc::fork() != 0 {
                    libc::_exit(0);
                }
                // Keep the two sockets (at 3 and 4), the ready pipe (5) and
                // /dev/null on 0-2; close everything else we inherited
                // (a caller's pipes must see EOF when it exits).
                let s0 = libc::fcntl(self.socks[0].as_raw_fd(), libc::F_DUPFD, 64);
                let s1 = libc::fcntl(self.socks[1].as_raw_fd(), libc::F_DUPFD, 64);
                let rp = libc::fcntl(ready, libc::F_DUPFD, 64);
                let dn = libc::fcntl(devnull, libc::F_DUPFD, 64);
                let qf = self
                    .qos
                    .as_ref()
                    .map_or(-1, |q| libc::fcntl(q.as_raw_fd(), libc::F_DUPFD, 64));
                for fd in 0..3 {
                    libc::dup2(dn, fd);
                }
                libc::dup2(s0, 3);
                libc::dup2(s1, 4);
                libc::dup2(rp, 5);
                let qos_fd = if qf >= 0 && libc::dup2(qf, 6) == 6 {
                    6
                } else {
                    -1
                };
                libc::syscall(libc::SYS_close_range, 7u32, u32::MAX, 0u32);
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
                // A wire's timing must not depend on the host's load: on a
                // busy machine a normal task wakes milliseconds late (20 ms
                // of delay read 21.9 ms at the median at load 13 on 2
                // cores). Real-time priority where allowed; the loop
                // sleeps whenever no deadline is within SPIN_NS, and the
                // kernel's real-time throttle bounds it in any case.
                let p = libc::sched_param {
                    sched_priority: EMULATOR_RT_PRIORITY,
                };
                libc::sched_setscheduler(0, libc::SCHED_FIFO, &p);
                libc::prctl(
                    libc::PR_SET_NAME,
                    c"wb-link".as_ptr() as u64,
                    0u64,
                    0u64,
                    0u64,
                );
                for d in &mut self.dirs {
                    d.rx = if d.rx == self.socks[0].as_raw_fd() {
                        3
                    } else {
                        4
                    };
                    d.store.tx = if d.rx == 3 { 4 } else { 3 };
                }
                let pid = libc::getpid().to_ne_bytes();
                libc::write(5, pid.as_ptr() as *const libc::c_void, 4);
                libc::close(5);
                self.forward(CpuLatency::new(qos_fd));
                libc::_exit(0)
            }
        }

        /// The forwarding loop; returns when an interface is gone.
        fn forward(&mut self, mut cpu: CpuLatency) {
            let mut last_check = mono();
            let mut spin = Spin::new(last_check, self.slack_ns);
            loop {
                let mut now = mono();
                for d in &mut self.dirs {
                    d.deliver(now);
                }
                // The realtime offset only when a frame waits: in the spin
                // before a deadline the loop reads one clock per turn.
                if self.dirs.iter().any(|d| d.ring.peek().is_some()) {
                    cpu.busy(now);
                    let off = clock(libc::CLOCK_REALTIME) - clock(libc::CLOCK_MONOTONIC);
                    // A flood of arrivals (a sender far above the link's
                    // rate) must not hold up a frame due meanwhile.
                    let until = [self.dirs[0].next_at(), self.dirs[1].next_at()]
                        .into_iter()
                        .flatten()
                        .min()
                        .unwrap_or(u64::MAX);
                    for d in &mut self.dirs {
                        d.receive(off, now, 64, until);
                    }
                    now = mono();
                }
                let ats = [self.dirs[0].next_at(), self.dirs[1].next_at()];
                let next = ats.into_iter().flatten().min();
                if now - last_check > 1_000_000_000 {
                    last_check = now;
                    if self.gone() {
                        return;
                    }
                }
                // Alone: the one frame held in either direction.
                let lone = match ats {
                    [Some(_), None] => self.dirs[0].lone(),
                    [None, Some(_)] => self.dirs[1].lone(),
                    _ => false,
                };
                let (wait, quiet) = match spin.step(now, next, lone) {
                    Step::Deliver | Step::Spin => continue,
                    Step::Sleep { ns, frames } => (ns, !frames),
                };
                if next.is_none() {
                    cpu.idle(now);
                }
                let mut fds = [0, 1].map(|k| {
                    let d = &self.dirs[k];
                    let watch = !quiet || d.next_at().is_none();
                    libc::pollfd {
                        fd: d.rx,
                        events: if watch { libc::POLLIN } else { 0 },
                        revents: 0,
                    }
                });
                if fds
                    .iter()
                    .zip(&self.dirs)
                    .any(|(f, d)| f.events != 0 && d.ring.peek().is_some())
                {
                    continue;
                }
                let ts = libc::timespec {
                    tv_sec: (wait / 1_000_000_000) as libc::time_t,
                    tv_nsec: (wait % 1_000_000_000) as libc::c_long,
                };
                // SAFETY: two valid pollfds and a valid timespec.
                unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
                // A nap that ended far past its deadline for a frame due,
                // whatever ended it (the timer, a frame that arrived while
                // we were not run): something held our CPU.
                {
                    let late = mono().saturating_sub(now + wait);
                    let k = match ats {
                        [Some(a), Some(b)] => Some(usize::from(b < a)),
                        [Some(_), None] => Some(0),
                        [None, Some(_)] => Some(1),
                        [None, None] => None,
                    };
                    if let (Some(k), true) = (k, late > super::HOST_STALL_NS) {
                        self.dirs[k].store.counts.add(14, 1);
                        self.dirs[k].store.counts.add(15, late);
                    }
                }
                if fds
                    .iter()
                    .any(|f| f.revents & (libc::POLLERR | libc::POLLNVAL) != 0)
                {
                    // A socket whose interface went away reports an error
                    // at once and for good; one still there only had its
                    // error read (and cleared) here.
                    if self.gone() {
                        return;
                    }
                    for f in &fds {
                        sock_error(f.fd);
                    }
                }
            }
        }

        /// Whether either end's interface is gone.
        fn gone(&self) -> bool {
            !iface_exists(3, self.ifindex[0]) || !iface_exists(3, self.ifindex[1])
        }
    }

    /// How long a link must carry nothing before its emulator lets the
    /// CPUs sleep deeply again (ns).
    const CPU_LATENCY_HOLD_NS: u64 = 1_000_000_000;

    /// The emulator's request to the kernel's CPU latency QoS
    /// (`/dev/cpu_dma_latency`, the interface cyclictest uses): 0 µs while
    /// the link carries frames, so the CPUs idle by polling rather than by
    /// halting the (virtual) CPU. A halted vCPU's timer and the packet
    /// interrupts that wake the hosts reach it tens of µs later: a timed
    /// sleep's wake-up on this KVM guest read p50 32-36 µs late halted, 21-24 µs
    /// polling (`bench/cpu_wakeup.py`, docs/testbed.md). The
    /// request goes back to "no constraint" after a second without frames,
    /// and the kernel drops it when the process exits, however it exits.
    pub(crate) struct CpuLatency {
        fd: RawFd,
        held: bool,
        last: u64,
    }

    impl CpuLatency {
        fn new(fd: RawFd) -> CpuLatency {
            CpuLatency {
                fd,
                held: false,
                last: 0,
            }
        }

        fn set(&mut self, us: i32) {
            let v = us.to_ne_bytes();
            // SAFETY: writes 4 bytes from a local array to our own fd.
            unsafe { libc::write(self.fd, v.as_ptr() as *const libc::c_void, 4) };
        }

        /// A frame is held or arriving at `now`.
        fn busy(&mut self, now: u64) {
            self.last = now;
            if !self.held && self.fd >= 0 {
                self.set(0);
                self.held = true;
            }
        }

        /// Nothing held at `now`.
        fn idle(&mut self, now: u64) {
            if self.held && now.saturating_sub(self.last) > CPU_LATENCY_HOLD_NS {
                // The kernel's "no constraint" (PM_QOS_DEFAULT_VALUE).
                self.set(2_000_000_000);
                self.held = false;
            }
        }
    }

    /// Reads and so clears a socket's pending error.
    fn sock_error(fd: RawFd) {
        let mut v: libc::c_int = 0;
        let mut l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a local int and its length.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut v as *mut libc::c_int as *mut libc::c_void,
                &mut l,
            )
        };
    }
}

/// Test-beds are Linux-only ([`crate::os::supported`] refuses elsewhere
/// before anything is built); this stand-in keeps the crate building there.
#[cfg(not(target_os = "linux"))]
pub(crate) struct Emulator;

/// A link's lateness table files (unused off Linux).
#[cfg(not(target_os = "linux"))]
#[allow(dead_code)]
pub(crate) struct LateFiles {
    pub(crate) own: std::fs::File,
    pub(crate) from: [Vec<(std::fs::File, usize)>; 2],
}

#[cfg(not(target_os = "linux"))]
impl Emulator {
    pub(crate) fn open(
        _ends: [&str; 2],
        _wires: [crate::emu::Wire; 2],
        _aqm: Option<crate::emu_run::Aqm>,
        _mtu: u32,
        _counters: std::fs::File,
        _late: LateFiles,
        _slack_ns: u64,
    ) -> Result<Emulator, crate::error::TestbedError> {
        Err(crate::error::TestbedError::Unsupported(
            std::env::consts::OS,
        ))
    }

    pub(crate) fn spawn(self) -> Result<i32, crate::error::TestbedError> {
        Err(crate::error::TestbedError::Unsupported(
            std::env::consts::OS,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::LinkSpec;

    fn wc(timed: u64, q: u64, s: u64, p: u64) -> WireCounters {
        WireCounters {
            frames_in: timed,
            delivered: timed,
            timed,
            queueing_ns: q,
            serialisation_ns: s,
            propagation_ns: p,
            ..Default::default()
        }
    }

    /// Runs the loop's decisions against frames due every `gap` ns: a
    /// spin turn takes 300 ns, a delivery 100 ns, a sleep ends `late` ns
    /// after its time. Returns the share of the time spun, the latest
    /// delivery after its deadline and the time the `n` frames took.
    fn simulate(gap: u64, n: u64, late: u64) -> (f64, u64, u64) {
        simulate_with(Spin::new(1_000_000_000, NAP_NS), gap, n, late, false)
    }

    /// [`simulate`] from a loop in state `spin`, every frame `lone` or
    /// none.
    fn simulate_with(mut spin: Spin, gap: u64, n: u64, late: u64, lone: bool) -> (f64, u64, u64) {
        let start = 1_000_000_000;
        spin.last = start;
        let (mut now, mut due) = (start, start + gap);
        let (mut sent, mut spun, mut worst) = (0, 0, 0);
        while sent < n {
            match spin.step(now, Some(due), lone) {
                Step::Deliver => {
                    worst = worst.max(now - due);
                    due += gap;
                    sent += 1;
                    now += 100;
                }
                Step::Spin => {
                    now += 300;
                    spun += 300;
                }
                Step::Sleep { ns, .. } => {
                    now += ns + late;
                }
            }
        }
        (spun as f64 / (now - start) as f64, worst, now - start)
    }

    /// Sparse frames (2 000/s, the bench's probes) are each delivered at
    /// their deadline, spinning within the budget, when wake-ups are
    /// late by less than SPIN_NS.
    #[test]
    fn sparse_frames_leave_on_time() {
        let (share, worst, _) = simulate(500_000, 10_000, SPIN_NS - 1_000);
        assert!(worst <= 300, "a sparse frame left {worst} ns late");
        assert!(share < 0.05, "spun {share:.3} of the time");
    }

    /// Lone frames (the L1 check's 100/s) on a VM that wakes the loop
    /// 80 µs late leave at their deadline: the loop wakes LONE_LEAD_NS
    /// early for them; with the short lead they would leave late.
    #[test]
    fn lone_frames_leave_on_time_on_a_late_waking_host() {
        let late = 80_000;
        let spin = Spin::new(1_000_000_000, NAP_NS);
        let (share, worst, _) = simulate_with(spin, 10_000_000, 1_000, late, true);
        assert!(worst <= 300, "a lone frame left {worst} ns late");
        assert!(share < 0.02, "spun {share:.3} of the time");
        let (_, worst, _) = simulate_with(spin, 10_000_000, 1_000, late, false);
        assert!(
            worst >= late - SPIN_NS,
            "the short lead left {worst} ns late"
        );
    }

    /// A flood of lone frames (10 000/s) spins at most LONE_SHARE_PCT of
    /// the time more than with the short lead alone (unbounded, their
    /// 150 µs lead would spin the whole time), and keeps its rate.
    #[test]
    fn a_lone_frame_flood_spins_within_its_own_budget() {
        let (gap, n) = (100_000, 100_000);
        for late in [1_000, 30_000, 80_000] {
            let spin = Spin::new(1_000_000_000, NAP_NS);
            let (short, _, _) = simulate_with(spin, gap, n, late, false);
            let (long, _, took) = simulate_with(spin, gap, n, late, true);
            let extra = LONE_SHARE_PCT as f64 / 100.0 + 0.01;
            assert!(
                long <= short + extra,
                "late {late}: spun {long:.3} against {short:.3} with the short lead"
            );
            assert!(
                took <= n * gap + NAP_NS + late + gap,
                "{took} ns for {n} frames"
            );
        }
    }

    /// Dense frames (148 809/s: 64 B at 100 Mbit/s) keep their rate while
    /// the loop spins no more than its share; each is late by at most a
    /// nap and a wake-up.
    #[test]
    fn dense_frames_keep_the_rate_within_the_spin_budget() {
        let (gap, n, late) = (6_720, 1_000_000, 30_000);
        let (share, worst, took) = simulate(gap, n, late);
        let limit = SPIN_SHARE_PCT as f64 / 100.0;
        assert!(share <= limit + 0.01, "spun {share:.3} of the time");
        assert!(
            share >= limit - 0.05,
            "spun only {share:.3}: the budget is idle"
        );
        assert!(worst <= NAP_NS + late + gap, "a frame left {worst} ns late");
        assert!(
            took <= n * gap + NAP_NS + late + gap,
            "{took} ns for {n} frames"
        );
    }

    /// A link's slack is its nap: on a saturated wire (1 Gbit/s of
    /// 1518 B) the latest send is within the slack, a wake-up and a frame,
    /// for every slack the file accepts, and the spin budget holds.
    #[test]
    fn the_slack_bounds_a_saturated_wire_s_lateness() {
        let (gap, n, late) = (12_300, 200_000, 16_000);
        for nap in [1_000, 10_000, NAP_NS, 50_000, 1_000_000] {
            let spin = Spin::new(1_000_000_000, nap);
            let (share, worst, took) = simulate_with(spin, gap, n, late, false);
            assert!(worst <= nap + late + gap, "slack {nap}: {worst} ns late");
            assert!(took <= n * gap + nap + late + gap, "slack {nap}: {took} ns");
            assert!(
                share <= SPIN_SHARE_PCT as f64 / 100.0 + 0.01,
                "slack {nap}: spun {share:.3}"
            );
        }
    }

    /// What the loop sleeps on: a far deadline wakes on frames too, a near
    /// one (its frames cannot be due before it) only on time, and with
    /// nothing held it waits a second for frames.
    #[test]
    fn sleeps_wake_on_frames_only_when_far() {
        let now = 10_000_000_000;
        let mut spin = Spin::new(now, NAP_NS);
        assert_eq!(spin.step(now, Some(now), false), Step::Deliver);
        assert_eq!(
            spin.step(now, Some(now + 1_000_000), false),
            Step::Sleep {
                ns: 1_000_000 - SPIN_NS,
                frames: true
            }
        );
        assert_eq!(
            spin.step(now, None, false),
            Step::Sleep {
                ns: 1_000_000_000,
                frames: true
            }
        );
        assert_eq!(spin.step(now, Some(now + SPIN_NS), false), Step::Spin);
        // A lone frame's deadline is woken for LONE_LEAD_NS early.
        assert_eq!(
            spin.step(now, Some(now + 1_000_000), true),
            Step::Sleep {
                ns: 1_000_000 - LONE_LEAD_NS,
                frames: true
            }
        );
        assert_eq!(spin.step(now, Some(now + LONE_LEAD_NS), true), Step::Spin);
        // Spent: a deadline 100 µs away is slept to without waking on frames.
        let mut spent = Spin::new(now, NAP_NS);
        spent.left = 0;
        spent.lone_left = 0;
        assert_eq!(
            spent.step(now, Some(now + 100_000), true),
            Step::Sleep {
                ns: 100_000 - SPIN_NS,
                frames: false
            }
        );
        assert_eq!(
            spent.step(now, Some(now + 5_000), false),
            Step::Sleep {
                ns: NAP_NS,
                frames: false
            }
        );
    }

    /// Every error falls in the bucket whose edges hold it, the buckets
    /// tile 0..2^32 ns without gap or overlap, and none is wider than an
    /// eighth of its lower edge (exact below 16 ns).
    #[test]
    fn send_error_buckets_tile_the_range() {
        for i in 0..SEND_ERROR_BUCKETS - 1 {
            let (lo, hi) = (send_error_bucket_low(i), send_error_bucket_low(i + 1));
            assert!(hi > lo, "bucket {i}: {lo}..{hi}");
            assert_eq!(send_error_bucket(lo), i, "low edge of {i}");
            assert_eq!(send_error_bucket(hi - 1), i, "high edge of {i}");
            assert!(lo < 16 || (hi - lo) * 8 <= lo, "bucket {i} {lo}..{hi}");
        }
        assert_eq!(send_error_bucket(15), 15);
        assert_eq!(
            send_error_bucket_low(SEND_ERROR_BUCKETS - 1),
            (1u64 << 32) - (1 << 28)
        );
        assert_eq!(send_error_bucket(1 << 32), SEND_ERROR_BUCKETS - 1);
        assert_eq!(send_error_bucket(u64::MAX), SEND_ERROR_BUCKETS - 1);
        // 50 µs lies in a bucket 4 096 ns wide: 49 152..53 248.
        let i = send_error_bucket(50_000);
        assert_eq!(
            (send_error_bucket_low(i), send_error_bucket_low(i + 1)),
            (49_152, 53_248)
        );
    }

    /// Quantiles are the upper edge of the bucket holding the rank, never
    /// below the true value and at most an eighth above it.
    #[test]
    fn send_error_quantiles() {
        let mut h = SendError::default();
        assert_eq!(h.quantile_ns(0.5), None);
        // 98 frames 1 µs late, one 30 µs, one 2 ms.
        for ns in std::iter::repeat_n(1_000, 98).chain([30_000, 2_000_000]) {
            h.buckets[send_error_bucket(ns)] += 1;
        }
        assert_eq!(h.count(), 100);
        let p50 = h.quantile_ns(0.5).unwrap();
        assert!((1_000..=1_125).contains(&p50), "{p50}");
        // The 99th of 100 is the 30 µs frame, the 100th the 2 ms one.
        let p99 = h.quantile_ns(0.99).unwrap();
        assert!((30_000..=33_750).contains(&p99), "{p99}");
        let max = h.quantile_ns(1.0).unwrap();
        assert!((2_000_000..=2_250_000).contains(&max), "{max}");
        assert_eq!(h.quantile_ns(0.0), h.quantile_ns(0.01));
        // The difference of two snapshots counts what came between.
        let mut later = h.clone();
        later.buckets[send_error_bucket(500_000)] += 3;
        let d = later.delta(&h);
        assert_eq!(d.count(), 3);
        let p50 = d.quantile_ns(0.5).unwrap();
        assert!((500_000..=562_500).contains(&p50), "{p50}");
        // An emulator restarted in between counts from zero.
        assert_eq!(d.delta(&h), d);
    }

    /// The split is the difference of two snapshots divided by the frames
    /// timed between them; directions without traffic and links without
    /// an emulator give nothing.
    #[test]
    fn hop_times_from_two_snapshots() {
        let links = [LinkSpec::new("a", "r1"), LinkSpec::new("r1", "b")];
        let before = [Some([wc(10, 1_000, 2_000, 3_000), wc(0, 0, 0, 0)]), None];
        let after = [
            Some([
                wc(
                    110,
                    1_000 + 100 * 50_000,
                    2_000 + 100 * 123_040,
                    3_000 + 100 * 20_000_000,
                ),
                wc(0, 0, 0, 0),
            ]),
            None,
        ];
        let h = hop_times(&links, &before, &after);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(
            (h[0].from.as_str(), h[0].to.as_str(), h[0].frames),
            ("a", "r1", 100)
        );
        assert!((h[0].queueing_s - 50e-6).abs() < 1e-12);
        assert!((h[0].serialisation_s - 123.04e-6).abs() < 1e-12);
        assert!((h[0].propagation_s - 20e-3).abs() < 1e-12);
        // An emulator restarted between the snapshots counts from zero.
        let d = wc(5, 50, 60, 70).delta(&wc(10, 1, 1, 1));
        assert_eq!(d, wc(5, 50, 60, 70));
    }

    /// `bench/link_emulator.sh` reads the counters file by word offsets:
    /// its layout constants must be this file's (a stale count once
    /// shifted its histogram by four buckets, half an octave).
    #[test]
    fn the_emulator_bench_reads_this_counters_layout() {
        let bench = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/link_emulator.sh");
        let text = std::fs::read_to_string(bench).expect("bench/link_emulator.sh");
        let want = format!("COUNTERS, BUCKETS = {COUNTERS}, {SEND_ERROR_BUCKETS}");
        assert!(
            text.lines().any(|l| l.starts_with(&want)),
            "bench/link_emulator.sh must say `{want}`"
        );
    }
}
