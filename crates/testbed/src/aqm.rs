//! The queue of an emulated link under active queue management: CoDel
//! (RFC 8289) on one FIFO, or FQ-CoDel (RFC 8290): flows hashed into
//! queues, served by deficit round robin with new flows first, CoDel in
//! each. The kernel qdiscs of the same names are missing on this kernel
//! (and on many container kernels), so the link emulator runs them itself.
//!
//! Frames are named by the emulator's buffer slot (`u32`); the queue keeps
//! its links and times in arrays indexed by slot, allocated once, so
//! enqueue and dequeue never allocate. It does no I/O and keeps no clock:
//! the caller says when a frame arrived and when the wire asks for the
//! next one, which lets the tests drive it through exact timelines.

use crate::spec::AqmSpec;

/// No slot / no flow.
const NONE: u32 = u32::MAX;

/// CoDel's per-queue state (RFC 8289 §5: `first_above_time`, `drop_next`,
/// `count`, `lastcount`, `dropping`).
#[derive(Debug, Clone, Copy, Default)]
struct Codel {
    first_above: Option<u64>,
    drop_next: u64,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

/// Which DRR list a flow is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    None,
    New,
    Old,
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    head: u32,
    tail: u32,
    bytes: u64,
    deficit: i64,
    /// Next flow on the same DRR list.
    next: u32,
    on: On,
    codel: Codel,
}

/// A singly linked list of flows: DRR only ever takes from the front and
/// appends at the back.
#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

/// One direction's managed queue.
#[derive(Debug, Clone)]
pub struct AqmQueue {
    target: u64,
    interval: u64,
    quantum: i64,
    flows: Vec<Flow>,
    new: List,
    old: List,
    /// Per slot: the next frame of the same flow, its arrival, its length.
    next: Vec<u32>,
    arrival: Vec<u64>,
    len: Vec<u32>,
    frames: usize,
    bytes: u64,
    limit_frames: usize,
    limit_bytes: u64,
    /// Largest frame seen: a queue holding at most one is never a
    /// standing queue (RFC 8289 §4.4, `maxpacket`).
    maxpacket: u64,
}

impl AqmQueue {
    /// A queue for frames held in `slots` buffer slots, dropping beyond
    /// `limit_frames` frames or `limit_bytes` bytes.
    pub fn new(spec: &AqmSpec, slots: usize, limit_frames: usize, limit_bytes: u64) -> AqmQueue {
        let flow = Flow {
            head: NONE,
            tail: NONE,
            bytes: 0,
            deficit: 0,
            next: NONE,
            on: On::None,
            codel: Codel::default(),
        };
        let empty = List {
            head: NONE,
            tail: NONE,
        };
        AqmQueue {
            target: spec.target_ns,
            interval: spec.interval_ns,
            quantum: spec.quantum as i64,
            flows: vec![flow; spec.flows.max(1) as usize],
            new: empty,
            old: empty,
            next: vec![NONE; slots],
            arrival: vec![0; slots],
            len: vec![0; slots],
            frames: 0,
            bytes: 0,
            limit_frames: limit_frames.max(1),
            limit_bytes: limit_bytes.max(1),
            maxpacket: 0,
        }
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.frames
    }

    /// No frame waiting.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// The flow queue of a frame whose 5-tuple hashes to `hash`.
    fn flow_of(&self, hash: u32) -> u32 {
        // Lemire's multiply-shift: an unbiased-enough map onto 0..flows
        // without a division.
        ((hash as u64 * self.flows.len() as u64) >> 32) as u32
    }

    fn push(list: &mut List, flows: &mut [Flow], f: u32, on: On) {
        flows[f as usize].next = NONE;
        flows[f as usize].on = on;
        if list.tail == NONE {
            list.head = f;
        } else {
            flows[list.tail as usize].next = f;
        }
        list.tail = f;
    }

    fn pop(list: &mut List, flows: &mut [Flow]) {
        let f = list.head;
        list.head = flows[f as usize].next;
        if list.head == NONE {
            list.tail = NONE;
        }
        flows[f as usize].next = NONE;
        flows[f as usize].on = On::None;
    }

    /// Takes the head frame of flow `f` off its queue.
    fn take(&mut self, f: u32) -> Option<u32> {
        let fl = &mut self.flows[f as usize];
        let s = fl.head;
        if s == NONE {
            return None;
        }
        fl.head = self.next[s as usize];
        if fl.head == NONE {
            fl.tail = NONE;
        }
        let l = self.len[s as usize] as u64;
        fl.bytes -= l;
        self.bytes -= l;
        self.frames -= 1;
        Some(s)
    }

    /// Queues the frame in `slot` (its 5-tuple hashed to `hash`). Frames
    /// dropped to keep the limit (this one for plain CoDel, tail drop; the
    /// head of the longest flow for FQ-CoDel, RFC 8290 §4.1) go to
    /// `dropped`.
    pub fn enqueue(
        &mut self,
        slot: u32,
        arrival: u64,
        len: u32,
        hash: u32,
        mut dropped: impl FnMut(u32),
    ) {
        let single = self.flows.len() == 1;
        if single
            && (self.frames >= self.limit_frames || self.bytes + len as u64 > self.limit_bytes)
        {
            dropped(slot);
            return;
        }
        let f = self.flow_of(hash);
        let s = slot as usize;
        self.next[s] = NONE;
        self.arrival[s] = arrival;
        self.len[s] = len;
        self.maxpacket = self.maxpacket.max(len as u64);
        let fl = &mut self.flows[f as usize];
        if fl.tail == NONE {
            fl.head = slot;
        } else {
            self.next[fl.tail as usize] = slot;
        }
        fl.tail = slot;
        fl.bytes += len as u64;
        self.frames += 1;
        self.bytes += len as u64;
        if fl.on == On::None {
            fl.deficit = self.quantum;
            Self::push(&mut self.new, &mut self.flows, f, On::New);
        }
        while self.frames > self.limit_frames || self.bytes > self.limit_bytes {
            let Some(fat) = self.fattest() else { break };
            match self.take(fat) {
                Some(s) => dropped(s),
                None => break,
            }
        }
    }

    /// The flow holding the most bytes (every non-empty flow is on a list).
    fn fattest(&self) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        for list in [self.new, self.old] {
            let mut f = list.head;
            while f != NONE {
                let b = self.flows[f as usize].bytes;
                if best.is_none_or(|(bb, _)| b > bb) {
                    best = Some((b, f));
                }
                f = self.flows[f as usize].next;
            }
        }
        best.map(|(_, f)| f)
    }

    /// RFC 8289 `dodequeue`: the head frame of flow `f` and whether its
    /// sojourn has been above target for an interval.
    fn do_dequeue(&mut self, f: u32, now: u64) -> (Option<u32>, bool) {
        let Some(s) = self.take(f) else {
            self.flows[f as usize].codel.first_above = None;
            return (None, false);
        };
        let sojourn = now.saturating_sub(self.arrival[s as usize]);
        let backlog = self.flows[f as usize].bytes;
        let c = &mut self.flows[f as usize].codel;
        let mut ok = false;
        if sojourn < self.target || backlog <= self.maxpacket {
            c.first_above = None;
        } else {
            match c.first_above {
                None => c.first_above = Some(now + self.interval),
                Some(t) => ok = now >= t,
            }
        }
        (Some(s), ok)
    }

    /// `t + interval / sqrt(count)` (RFC 8289 §5.5).
    fn control_law(&self, t: u64, count: u32) -> u64 {
        t + (self.interval as f64 / (count.max(1) as f64).sqrt()) as u64
    }

    /// RFC 8289 `dequeue` on flow `f` at `now`.
    fn codel_dequeue(&mut self, f: u32, now: u64, dropped: &mut impl FnMut(u32)) -> Option<u32> {
        let (mut p, mut ok) = self.do_dequeue(f, now);
        let Some(_) = p else {
            self.flows[f as usize].codel.dropping = false;
            return None;
        };
        let c = self.flows[f as usize].codel;
        if c.dropping {
            if !ok {
                self.flows[f as usize].codel.dropping = false;
            }
            while self.flows[f as usize].codel.dropping
                && now >= self.flows[f as usize].codel.drop_next
            {
                if let Some(s) = p {
                    dropped(s);
                }
                self.flows[f as usize].codel.count += 1;
                (p, ok) = self.do_dequeue(f, now);
                let c = self.flows[f as usize].codel;
                if !ok || p.is_none() {
                    self.flows[f as usize].codel.dropping = false;
                } else {
                    self.flows[f as usize].codel.drop_next = self.control_law(c.drop_next, c.count);
                }
            }
        } else if ok {
            if let Some(s) = p {
                dropped(s);
            }
            (p, _) = self.do_dequeue(f, now);
            let c = self.flows[f as usize].codel;
            let delta = c.count.saturating_sub(c.lastcount);
            // Re-entering the dropping state soon after leaving it resumes
            // near the old drop rate rather than from one.
            let recent = (now as i128 - c.drop_next as i128) < 16 * self.interval as i128;
            let count = if delta > 1 && recent { delta } else { 1 };
            let drop_next = self.control_law(now, count);
            let c = &mut self.flows[f as usize].codel;
            c.dropping = true;
            c.count = count;
            c.lastcount = count;
            c.drop_next = drop_next;
        }
        p
    }

    /// The frame the wire takes at `now` (its slot, arrival and length),
    /// after any CoDel drops (to `dropped`); None when nothing waits.
    pub fn dequeue(&mut self, now: u64, mut dropped: impl FnMut(u32)) -> Option<(u32, u64, u32)> {
        loop {
            let (f, from_new) = if self.new.head != NONE {
                (self.new.head, true)
            } else if self.old.head != NONE {
                (self.old.head, false)
            } else {
                return None;
            };
            if self.flows[f as usize].deficit <= 0 {
                self.flows[f as usize].deficit += self.quantum;
                let list = if from_new {
                    &mut self.new
                } else {
                    &mut self.old
                };
                Self::pop(list, &mut self.flows);
                Self::push(&mut self.old, &mut self.flows, f, On::Old);
                continue;
            }
            match self.codel_dequeue(f, now, &mut dropped) {
                Some(s) => {
                    self.flows[f as usize].deficit -= self.len[s as usize] as i64;
                    return Some((s, self.arrival[s as usize], self.len[s as usize]));
                }
                None => {
                    let list = if from_new {
                        &mut self.new
                    } else {
                        &mut self.old
                    };
                    Self::pop(list, &mut self.flows);
                    // An emptied new flow goes to the back of the old list
                    // (so it cannot come back as new at once and jump the
                    // queue again, RFC 8290 §4.2); an old one leaves.
                    if from_new && self.old.head != NONE {
                        Self::push(&mut self.old, &mut self.flows, f, On::Old);
                    }
                }
            }
        }
    }
}

/// Offsets in an Ethernet frame (IEEE 802.3; IPv4 RFC 791, IPv6 RFC 8200).
mod field {
    pub const ETHERTYPE: usize = 12;
    pub const L3: usize = 14;
    pub const V4_PROTO: usize = L3 + 9;
    pub const V4_ADDRS: std::ops::Range<usize> = L3 + 12..L3 + 20;
    pub const V6_NEXT: usize = L3 + 6;
    pub const V6_ADDRS: std::ops::Range<usize> = L3 + 8..L3 + 40;
    pub const V6_L4: usize = L3 + 40;
}

/// Hash of a frame's flow (addresses, protocol and, for TCP and UDP, the
/// ports) for FQ-CoDel's queues; frames that are not IP (ARP, foreign
/// protocols) hash by their EtherType. `perturb` is a per-link seed, as
/// fq_codel's hash perturbation.
pub fn flow_hash(frame: &[u8], perturb: u64) -> u32 {
    let mut h = perturb ^ 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: &[u8]| {
        // FNV-1a: short keys, no allocation, good enough spread for 1024
        // buckets.
        for &x in b {
            h = (h ^ x as u64).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let Some(et) = frame.get(field::ETHERTYPE..field::ETHERTYPE + 2) else {
        return 0;
    };
    mix(et);
    let (proto, l4) = match u16::from_be_bytes([et[0], et[1]]) {
        0x0800 => {
            let (Some(p), Some(a), Some(&vihl)) = (
                frame.get(field::V4_PROTO),
                frame.get(field::V4_ADDRS),
                frame.get(field::L3),
            ) else {
                return fold(h);
            };
            mix(a);
            (*p, field::L3 + (vihl & 0x0f) as usize * 4)
        }
        0x86dd => {
            let (Some(p), Some(a)) = (frame.get(field::V6_NEXT), frame.get(field::V6_ADDRS)) else {
                return fold(h);
            };
            mix(a);
            (*p, field::V6_L4)
        }
        _ => return fold(h),
    };
    mix(&[proto]);
    if matches!(proto, 6 | 17) {
        if let Some(ports) = frame.get(l4..l4 + 4) {
            mix(ports);
        }
    }
    fold(h)
}

fn fold(h: u64) -> u32 {
    (h ^ (h >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{AqmKind, AqmSpec};

    const MS: u64 = 1_000_000;

    /// A standing queue whose every frame has waited 50 ms: drops start one
    /// interval after the sojourn first exceeds target, then come at
    /// interval/√n (RFC 8289 §5.5): 100, 70.7, 57.7, 50, 44.7 … ms apart.
    #[test]
    fn codel_drops_a_standing_queue_at_interval_over_sqrt_n() {
        let spec = AqmSpec::new(AqmKind::Codel);
        let mut q = AqmQueue::new(&spec, 64, 64, u64::MAX);
        let mut slot_free: Vec<u32> = (0..64).collect();
        let mut drops: Vec<u64> = Vec::new();
        let step = MS / 10;
        let start = 1_000 * MS;
        let mut t = start;
        while t < start + 1_000 * MS {
            // Keep 20 frames queued, each stamped 50 ms ago.
            while q.len() < 20 {
                let s = slot_free.pop().expect("slots");
                q.enqueue(s, t - 50 * MS, 1514, 7, |_| panic!("limit"));
            }
            let mut dropped_now = Vec::new();
            let got = q.dequeue(t, |s| dropped_now.push(s));
            for s in dropped_now {
                drops.push(t);
                slot_free.push(s);
            }
            slot_free.push(got.expect("a frame").0);
            t += step;
        }
        assert!(drops.len() >= 10, "{drops:?}");
        // The first drop: one interval after the first dequeue above target.
        assert_eq!(drops[0], start + 100 * MS);
        for (n, w) in drops.windows(2).enumerate() {
            let want = 100.0 / ((n + 1) as f64).sqrt();
            let got = (w[1] - w[0]) as f64 / MS as f64;
            assert!(
                (got - want).abs() <= 0.1 + 1e-9,
                "gap {n}: {got} ms, want {want}"
            );
        }
    }

    /// Below target, or with a single frame queued, nothing is dropped.
    #[test]
    fn codel_leaves_a_short_queue_alone() {
        let spec = AqmSpec::new(AqmKind::Codel);
        let mut q = AqmQueue::new(&spec, 8, 8, u64::MAX);
        for k in 0..100_000u64 {
            let t = k * MS;
            q.enqueue(0, t.saturating_sub(4 * MS), 1514, 1, |_| panic!("limit"));
            q.enqueue(1, t.saturating_sub(4 * MS), 1514, 1, |_| panic!("limit"));
            assert!(q.dequeue(t, |_| panic!("dropped below target")).is_some());
            assert!(q.dequeue(t, |_| panic!("dropped below target")).is_some());
        }
        // One frame of 200 ms sojourn at a time: not a standing queue.
        for k in 0..10_000u64 {
            let t = k * MS;
            q.enqueue(0, t.saturating_sub(200 * MS), 1514, 1, |_| panic!());
            assert!(q.dequeue(t, |_| panic!("dropped a lone frame")).is_some());
        }
    }

    /// Tail drop at the frame limit for CoDel; the head of the longest
    /// flow for FQ-CoDel, so a short flow keeps its frames.
    #[test]
    fn overflow_drops() {
        let mut q = AqmQueue::new(&AqmSpec::new(AqmKind::Codel), 8, 3, u64::MAX);
        let mut d = Vec::new();
        for s in 0..5 {
            q.enqueue(s, 0, 100, 1, |x| d.push(x));
        }
        assert_eq!(d, [3, 4]);
        let mut q = AqmQueue::new(&AqmSpec::new(AqmKind::FqCodel), 8, 3, u64::MAX);
        let mut d = Vec::new();
        q.enqueue(0, 0, 100, 1, |x| d.push(x));
        q.enqueue(1, 0, 100, 1, |x| d.push(x));
        q.enqueue(2, 0, 100, 0x8000_0000, |x| d.push(x));
        q.enqueue(3, 0, 100, 1, |x| d.push(x));
        assert_eq!(d, [0]);
        let order: Vec<u32> = std::iter::from_fn(|| q.dequeue(0, |_| {}).map(|f| f.0)).collect();
        // Round robin with a 1514 B quantum: flow 1 sends its two frames
        // first (it was first on the new list), then flow 2.
        assert_eq!(order, [1, 3, 2]);
        // Byte limit.
        let mut q = AqmQueue::new(&AqmSpec::new(AqmKind::Codel), 8, 8, 250);
        let mut d = Vec::new();
        for s in 0..3 {
            q.enqueue(s, 0, 100, 1, |x| d.push(x));
        }
        assert_eq!(d, [2]);
    }

    /// A wire of 10 Mbit/s shared for 20 s by a bulk flow that behaves
    /// like a TCP sender (1514 B frames, a window grown by one frame per
    /// window delivered and halved on a drop, acknowledged the moment a
    /// frame leaves) and a sparse one (100 B every 10 ms). Returns the
    /// sojourns (ns) of the sparse flow's frames and of the bulk flow's
    /// after its first 2 s, and how many sparse frames were dropped.
    fn two_flows(spec: &AqmSpec) -> (Vec<u64>, Vec<u64>, usize) {
        let rate = 10_000_000u64;
        let wire = |len: u32| (len as u64 + 24) * 8 * 1_000_000_000 / rate;
        let slots = 4096;
        let mut q = AqmQueue::new(spec, slots, 1000, u64::MAX);
        let mut free: Vec<u32> = (0..slots as u32).collect();
        let mut sparse_slot = vec![false; slots];
        let (mut sparse, mut bulk) = (Vec::new(), Vec::new());
        let (mut window, mut in_flight, mut sparse_lost) = (2.0f64, 0usize, 0usize);
        let (mut next_sparse, mut busy) = (MS + 3, MS);
        let end = 20_000 * MS;
        while busy < end {
            let mut drops = Vec::new();
            while (in_flight as f64) < window.floor() {
                let s = free.pop().expect("slots");
                sparse_slot[s as usize] = false;
                in_flight += 1;
                q.enqueue(s, busy, 1514, 0x9abc_def0, |x| drops.push(x));
            }
            if next_sparse <= busy || q.is_empty() {
                let t = next_sparse;
                busy = busy.max(t);
                next_sparse += 10 * MS;
                let s = free.pop().expect("slots");
                sparse_slot[s as usize] = true;
                q.enqueue(s, t, 100, 0x1234_5678, |x| drops.push(x));
            } else if let Some((s, arr, len)) = q.dequeue(busy, |s| drops.push(s)) {
                if sparse_slot[s as usize] {
                    sparse.push(busy - arr);
                } else {
                    in_flight -= 1;
                    window += 1.0 / window;
                    if busy > 2_000 * MS {
                        bulk.push(busy - arr);
                    }
                }
                busy += wire(len);
                free.push(s);
            }
            for s in drops {
                if sparse_slot[s as usize] {
                    sparse_lost += 1;
                } else {
                    in_flight -= 1;
                    window = (window / 2.0).max(2.0);
                }
                free.push(s);
            }
        }
        (sparse, bulk, sparse_lost)
    }

    fn median(v: &mut [u64]) -> u64 {
        v.sort_unstable();
        v[v.len() / 2]
    }

    /// RFC 8290's point: a sparse flow beside a bulk one is served at once
    /// (it is new every time it shows up), while under plain CoDel it waits
    /// behind the bulk flow's standing queue, which CoDel holds near its
    /// target rather than letting the window fill the 1000-frame limit
    /// (1.2 s of queue).
    #[test]
    fn fq_codel_isolates_a_sparse_flow() {
        let (sparse, mut bulk, lost) = two_flows(&AqmSpec::new(AqmKind::FqCodel));
        let worst = *sparse.iter().max().expect("sparse frames");
        assert_eq!(lost, 0);
        assert!(sparse.len() > 1990, "{}", sparse.len());
        // At most one bulk frame (1.23 ms on the wire) ahead of it.
        assert!(worst <= 1_240_000, "sparse flow waited {worst} ns");
        let m = median(&mut bulk);
        eprintln!("fq_codel: sparse worst {worst} ns, bulk median {m} ns");
        assert!((2 * MS..20 * MS).contains(&m), "bulk median sojourn {m}");
        let (mut sparse, mut bulk, _) = two_flows(&AqmSpec::new(AqmKind::Codel));
        let m = median(&mut sparse);
        assert!(m > 3 * MS, "under plain CoDel the sparse flow queues: {m}");
        let mb = median(&mut bulk);
        eprintln!("codel: sparse median {m} ns, bulk median {mb} ns");
        // The same flows with a target no queue reaches is drop-tail: the
        // queue grows with the window (by one frame per window, no slow
        // start here) toward the 1000-frame limit, 1.2 s.
        let mut never = AqmSpec::new(AqmKind::Codel);
        (never.target_ns, never.interval_ns) = (60_000 * MS, 60_000 * MS);
        let (_, mut bulk, _) = two_flows(&never);
        let mt = median(&mut bulk);
        eprintln!("drop-tail: bulk median {mt} ns");
        assert!(mt > 10 * mb, "drop-tail bulk median {mt}");
        assert!((2 * MS..20 * MS).contains(&mb), "codel bulk median {mb}");
    }

    #[test]
    fn flows_hash_by_five_tuple() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f[34..38].copy_from_slice(&[0x13, 0x88, 0x13, 0x89]);
        let a = flow_hash(&f, 1);
        assert_eq!(a, flow_hash(&f, 1));
        let mut g = f.clone();
        g[35] ^= 1; // another source port
        assert_ne!(a, flow_hash(&g, 1));
        let mut g = f.clone();
        g[50] ^= 1; // payload only
        assert_eq!(a, flow_hash(&g, 1));
        assert_ne!(a, flow_hash(&f, 2));
        // Truncated and foreign frames hash without a panic.
        assert_eq!(flow_hash(&f[..10], 1), 0);
        let _ = flow_hash(&f[..20], 1);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let _ = flow_hash(&arp, 1);
    }
}
