//! The lateness a link emulator had when it sent each frame, published for
//! the emulator of the next link (issue 23: a hop does not inherit the
//! previous hop's late sends).
//!
//! On a chain of emulated links (a–r1–b) the second hop schedules a frame
//! from its arrival. If that arrival is the kernel's receive stamp, every
//! µs the first emulator sent the frame after its due time is carried
//! into the second hop's schedule: its wire stands idle for good and its
//! queue holds the largest such delay to the end of a saturating run. A
//! real wire would have delivered the frame when the first hop's model
//! said, so the second hop should schedule from that *virtual* arrival.
//!
//! Each emulator therefore writes, per direction, the due time and the
//! send time of the frames it sends into a small direct-mapped table in a
//! file of `/run/wirebench` (created and removed with the link's counters
//! file), keyed by a hash of the bytes that a router's forwarding leaves
//! alone ([`frame_key`]). The emulator of a link attached to the same node
//! looks a received frame up there and, when found, schedules it from its
//! kernel arrival minus that lateness ([`virtual_arrival`]). The table
//! needs no lock, allocation or system call per frame: an entry's key word
//! is cleared, the data words written, and the key written last with
//! release ordering; a reader loads the key word, the data, then the key
//! word again, and takes the data only if it did not change (a seqlock).
//! The key word also holds a count of the entry's rewrites
//! ([`GEN_SHIFT`]): with the key alone as the sequence, a reader held up
//! while the same key was written again (a retransmission; in the test,
//! keys that take turns) could pair one write's due time with another's
//! send time.

use std::hash::{DefaultHasher, Hasher};
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Entries per direction: at 148 800 frames/s (64 B at 100 Mbit/s) an
/// entry lives 55 ms before it is overwritten, far longer than a frame
/// takes through a router.
pub const LATE_ENTRIES: usize = 8192;
/// Words per entry: key, due time, send time.
const ENTRY_WORDS: usize = 3;
/// Size of a link's table file: both directions.
pub const LATE_FILE_BYTES: usize = 2 * LATE_ENTRIES * ENTRY_WORDS * 8;
/// The most lateness a hop gives back (ns): beyond, the frame is
/// scheduled as if it had been this late only.
pub const MAX_CREDIT_NS: u64 = 10_000_000;
/// The longest a frame may take from the previous emulator's send to its
/// arrival here (ns) for its entry to count: an older entry with the same
/// key is another frame's (a retransmission long ago, a hash collision).
pub const MAX_FORWARD_NS: u64 = 10_000_000;
/// How far a kernel stamp may read before the previous emulator's send
/// time (ns): the two clocks are the same (CLOCK_MONOTONIC), but a stamp
/// is converted from CLOCK_REALTIME with an offset read a little apart.
const STAMP_SLACK_NS: u64 = 20_000;

/// The key word's top 16 bits count the entry's rewrites; the key keeps
/// the low 48 (never 0).
const GEN_SHIFT: u32 = 48;
const KEY_MASK: u64 = (1 << GEN_SHIFT) - 1;

/// The part of a key the key word keeps.
fn tag(key: u64) -> u64 {
    (key & KEY_MASK).max(1)
}

/// Bytes of the transport header hashed: ports and sequence numbers (TCP:
/// also the acknowledgement, offset, flags and window, not its checksum).
const L4_BYTES: usize = 16;

/// The key of an Ethernet frame (as the emulator reads it, 14 B header
/// first) made of what survives IP forwarding: IPv4 total length, ID,
/// flags and fragment offset, protocol and addresses; IPv6 payload length,
/// next header and addresses; then the first 16 bytes after the IP header.
/// Never the MACs, the TTL or hop limit, or the IPv4 header checksum,
/// which a router rewrites. None for anything else (ARP, a truncated
/// header), which keeps its physical arrival. Never 0 (an empty entry).
pub fn frame_key(frame: &[u8]) -> Option<u64> {
    let ip = frame.get(14..)?;
    // std's hasher with its fixed keys: the same in every process of the
    // same build, which is all the emulators of a test-bed are.
    let mut h = DefaultHasher::new();
    let l4 = match frame.get(12..14)? {
        [0x08, 0x00] => {
            let ihl = (*ip.first()? as usize & 0x0f) * 4;
            if ihl < 20 || ip.len() < ihl {
                return None;
            }
            let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            let end = total.clamp(ihl, ip.len()).min(ihl + L4_BYTES);
            h.write_u8(4);
            h.write(&ip[2..8]);
            h.write_u8(ip[9]);
            h.write(&ip[12..20]);
            &ip[ihl..end]
        }
        [0x86, 0xdd] => {
            if ip.len() < 40 {
                return None;
            }
            let end = ip.len().min(40 + L4_BYTES);
            h.write_u8(6);
            h.write(&ip[4..7]);
            h.write(&ip[8..40]);
            &ip[40..end]
        }
        _ => return None,
    };
    h.write(l4);
    Some(h.finish().max(1))
}

/// When a frame found in the previous hop's table virtually arrived:
/// its kernel arrival `phys` less the lateness its previous emulator had
/// sending it (`sent` − `due`, at most [`MAX_CREDIT_NS`]), never before
/// that hop's due time. None when the entry cannot be this frame's (sent
/// after it arrived here, or more than [`MAX_FORWARD_NS`] before) or the
/// frame was not late.
pub fn virtual_arrival(phys: u64, due: u64, sent: u64) -> Option<u64> {
    if phys.saturating_add(STAMP_SLACK_NS) < sent
        || phys.saturating_sub(sent) > MAX_FORWARD_NS
        || sent <= due
    {
        return None;
    }
    let credit = (sent - due).min(MAX_CREDIT_NS);
    let v = phys.saturating_sub(credit).max(due);
    (v < phys).then_some(v)
}

/// One direction's table, in memory shared between processes (a mapped
/// file) or, in tests, a vector.
#[derive(Debug, Clone, Copy)]
pub struct LateTable {
    words: *const AtomicU64,
}

// SAFETY: the table is only touched through atomics, from any thread or
// process.
unsafe impl Send for LateTable {}
// SAFETY: as above.
unsafe impl Sync for LateTable {}

impl LateTable {
    /// Words one direction's table takes.
    pub const WORDS: usize = LATE_ENTRIES * ENTRY_WORDS;

    /// A table over `words`.
    ///
    /// # Safety
    /// `words` points at [`LateTable::WORDS`] aligned u64 words that stay
    /// mapped as long as the table is used.
    pub unsafe fn new(words: *const AtomicU64) -> LateTable {
        LateTable { words }
    }

    fn entry(&self, key: u64) -> &[AtomicU64] {
        let i = (key as usize % LATE_ENTRIES) * ENTRY_WORDS;
        // SAFETY: i + ENTRY_WORDS <= WORDS, within the words `new` was
        // promised.
        unsafe { std::slice::from_raw_parts(self.words.add(i), ENTRY_WORDS) }
    }

    /// Records that the frame with `key` was due at `due` and sent at
    /// `sent` (CLOCK_MONOTONIC ns). One writer per table.
    pub fn publish(&self, key: u64, due: u64, sent: u64) {
        let e = self.entry(key);
        // The only writer: the word it last stored.
        let gen = (e[0].load(Ordering::Relaxed) >> GEN_SHIFT).wrapping_add(1);
        e[0].store(0, Ordering::Relaxed);
        // The cleared key is visible before either data word changes.
        fence(Ordering::Release);
        e[1].store(due, Ordering::Relaxed);
        e[2].store(sent, Ordering::Relaxed);
        e[0].store(tag(key) | gen << GEN_SHIFT, Ordering::Release);
    }

    /// The due and send times of the frame with `key`, if its entry holds
    /// it and was not being rewritten while read.
    pub fn lookup(&self, key: u64) -> Option<(u64, u64)> {
        let e = self.entry(key);
        let word = e[0].load(Ordering::Acquire);
        if word & KEY_MASK != tag(key) {
            return None;
        }
        let (due, sent) = (e[1].load(Ordering::Relaxed), e[2].load(Ordering::Relaxed));
        // The data words are read before the key word is read again.
        fence(Ordering::Acquire);
        (e[0].load(Ordering::Relaxed) == word).then_some((due, sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame of IPv4/TCP with `ttl`, MACs `mac` and a header
    /// checksum made of `csum`; `seq` varies the segment.
    fn v4_tcp(ttl: u8, mac: u8, csum: u16, seq: u32, id: u16) -> Vec<u8> {
        let mut f = vec![mac; 12];
        f.extend([0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 60];
        ip.extend(id.to_be_bytes());
        ip.extend([0x40, 0, ttl, 6]);
        ip.extend(csum.to_be_bytes());
        ip.extend([10, 0, 0, 1, 10, 0, 1, 2]);
        f.extend(ip);
        let mut tcp = vec![0x9c, 0x40, 0x3e, 0x6f];
        tcp.extend(seq.to_be_bytes());
        tcp.extend([0, 0, 0, 1, 0x80, 0x10, 0x01, 0xf5, 0xab, 0xcd, 0, 0]);
        tcp.extend([1u8; 20]);
        f.extend(tcp);
        f
    }

    fn v6_udp(hop: u8, mac: u8, sport: u16) -> Vec<u8> {
        let mut f = vec![mac; 12];
        f.extend([0x86, 0xdd]);
        f.extend([0x60, 0, 0, 0, 0, 24, 17, hop]);
        f.extend([0xfd; 16]);
        f.extend([0xfe; 16]);
        f.extend(sport.to_be_bytes());
        f.extend([0x3e, 0x6f, 0, 24, 0x12, 0x34]);
        f.extend([7u8; 16]);
        f
    }

    #[test]
    fn a_forwarded_frame_keeps_its_key() {
        let k = frame_key(&v4_tcp(64, 0xaa, 0x1111, 1000, 7)).unwrap();
        // A router decrements the TTL, rewrites the checksum and the MACs.
        assert_eq!(frame_key(&v4_tcp(63, 0xbb, 0x1211, 1000, 7)), Some(k));
        // Another segment, another ID: another key.
        assert_ne!(frame_key(&v4_tcp(64, 0xaa, 0x1111, 1001, 7)), Some(k));
        assert_ne!(frame_key(&v4_tcp(64, 0xaa, 0x1111, 1000, 8)), Some(k));
        let k6 = frame_key(&v6_udp(64, 0xaa, 40000)).unwrap();
        assert_eq!(frame_key(&v6_udp(63, 0xcc, 40000)), Some(k6));
        assert_ne!(frame_key(&v6_udp(64, 0xaa, 40001)), Some(k6));
        assert_ne!(k, k6);
        // A changed address or payload byte within the first 16 of L4.
        let mut f = v4_tcp(64, 0xaa, 0x1111, 1000, 7);
        f[14 + 19] ^= 1;
        assert_ne!(frame_key(&f), Some(k));
        let mut f = v6_udp(64, 0xaa, 40000);
        f[54 + 9] ^= 1;
        assert_ne!(frame_key(&f), Some(k6));
        // Neither IP nor whole: no key.
        let mut arp = v4_tcp(64, 0xaa, 0x1111, 1000, 7);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(frame_key(&arp), None);
        assert_eq!(frame_key(&v4_tcp(64, 0, 0, 1, 1)[..30]), None);
        assert_eq!(frame_key(&v6_udp(64, 0, 1)[..50]), None);
    }

    /// 100 000 distinct segments: keys spread over the table's entries.
    #[test]
    fn keys_of_distinct_frames_differ() {
        let mut keys: Vec<u64> = (0..100_000u32)
            .map(|s| frame_key(&v4_tcp(64, 0, 0, s * 8948, s as u16)).unwrap())
            .collect();
        let mut per_entry = vec![0u32; LATE_ENTRIES];
        for k in &keys {
            per_entry[*k as usize % LATE_ENTRIES] += 1;
        }
        // 12.2 per entry on average; a fair hash stays far below 40.
        assert!(
            per_entry.iter().all(|&n| n < 40),
            "{:?}",
            per_entry.iter().max()
        );
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 100_000);
    }

    fn table(words: &[AtomicU64]) -> LateTable {
        assert_eq!(words.len(), LateTable::WORDS);
        // SAFETY: WORDS words that outlive the table in each test.
        unsafe { LateTable::new(words.as_ptr()) }
    }

    fn words() -> Vec<AtomicU64> {
        (0..LateTable::WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn write_read_overwrite() {
        let w = words();
        let t = table(&w);
        assert_eq!(t.lookup(12345), None);
        t.publish(12345, 100, 130);
        assert_eq!(t.lookup(12345), Some((100, 130)));
        // Another key in the same entry replaces it.
        let other = 12345 + LATE_ENTRIES as u64;
        t.publish(other, 200, 210);
        assert_eq!(t.lookup(12345), None);
        assert_eq!(t.lookup(other), Some((200, 210)));
        // The same key again: the newest times.
        t.publish(other, 300, 350);
        assert_eq!(t.lookup(other), Some((300, 350)));
    }

    /// A writer rewrites one entry with 64 keys in turn, the data words
    /// derived from the key, while a reader looks them up: every lookup that
    /// succeeds returns the data written with that key.
    #[test]
    fn a_reader_never_takes_a_torn_entry() {
        let w = words();
        let t = table(&w);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let keys: Vec<u64> = (1..=64u64).map(|i| i * LATE_ENTRIES as u64).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 0..200_000u64 {
                    let k = keys[(round % 64) as usize];
                    let due = k * 1_000_000 + round;
                    t.publish(k, due, due * 3);
                }
                stop.store(true, Ordering::Release);
            });
            let (mut found, mut reads) = (0u64, 0u64);
            // Reads while the writer runs, and at least one round after it
            // ended: the entry then holds its last key for good, so a
            // lookup must succeed however the threads were scheduled (a
            // reader that only ever ran mid-write once found nothing).
            loop {
                let ended = stop.load(Ordering::Acquire);
                for &k in &keys {
                    reads += 1;
                    if let Some((due, sent)) = t.lookup(k) {
                        found += 1;
                        assert_eq!(due / 1_000_000, k, "due of another key");
                        assert_eq!(sent, due * 3, "torn entry");
                    }
                }
                if ended && reads >= 1000 {
                    break;
                }
            }
            assert!(found > 0, "no lookup succeeded in {reads}");
        });
    }

    #[test]
    fn virtual_arrivals() {
        // Sent 40 µs late, forwarded in 25 µs: 40 µs earlier.
        assert_eq!(
            virtual_arrival(1_065_000, 1_000_000, 1_040_000),
            Some(1_025_000)
        );
        // Not late, or late by nothing: no change.
        assert_eq!(virtual_arrival(1_025_000, 1_000_000, 1_000_000), None);
        // An entry sent after the frame arrived (beyond the stamp's
        // slack) or long before is another frame's.
        assert_eq!(virtual_arrival(1_000_000, 900_000, 1_100_000), None);
        assert_eq!(virtual_arrival(50_000_000, 1_000, 2_000), None);
        // Stamped a little before the send (clock offsets): never earlier
        // than the previous hop's due time.
        assert_eq!(
            virtual_arrival(1_035_000, 1_000_000, 1_040_000),
            Some(1_000_000)
        );
        // Credit is bounded.
        let (due, sent) = (1_000_000_000, 1_030_000_000);
        assert_eq!(
            virtual_arrival(sent + 1_000, due, sent),
            Some(sent + 1_000 - MAX_CREDIT_NS)
        );
    }
}
