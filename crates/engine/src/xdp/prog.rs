//! The XDP program wirebench attaches, written as raw eBPF instructions so
//! that no compiler for the BPF target (clang, bpf-linker) is needed to
//! build wirebench.
//!
//! It looks at untagged Ethernet frames carrying UDP over IPv4 (no IP
//! options, no fragments) or IPv6 (UDP as the first next header), looks the
//! UDP destination port up in a 65 536-entry array (`ports`), and for a
//! port the session registered counts the frame and either steers it to
//! the AF_XDP socket of its receive queue (`XSKMAP`), drops it (the
//! path-limit measurement), or writes the frame's receive record into a
//! ring in an mmapable array map and drops it ([`Action::Records`]: the
//! receiver reads the records without the frame ever crossing an AF_XDP
//! ring). Every other frame is `XDP_PASS`: the control connection and all
//! other traffic reach the kernel untouched.
//! Instruction encoding: the kernel's Documentation/bpf/standardization.

use super::sys::{Insn, RECORD_COMMIT, RECORD_LEN};
use std::net::IpAddr;

/// A receive record as [`Action::Records`] writes it ([`RECORD_LEN`]
/// bytes; byte offsets). Multi-byte header fields are copied raw, in
/// network order, so the receiver parses them exactly as it parses a
/// frame off an AF_XDP ring.
pub(crate) mod rec {
    /// Receive time, `bpf_ktime_get_tai_ns` (u64, native order).
    pub const TIME: usize = 0;
    /// The UDP payload's first 24 bytes (the probe header), zeros when
    /// the frame holds fewer.
    pub const HEAD: usize = 8;
    /// The IP header's first 8 bytes (IPv4: version, TOS, total length,
    /// id, fragment; IPv6: version/class/label, payload length, next
    /// header, hop limit).
    pub const IP: usize = 32;
    /// The UDP header (ports, length, checksum).
    pub const UDP: usize = 40;
    /// The frame's length (u16, native order).
    pub const FRAME_LEN: usize = 48;
    /// IPv4: the TTL (IPv6's hop limit is in [`IP`]).
    pub const TTL: usize = 50;
    /// 1 when the source address is the session's sender's, else 0.
    pub const SRC_OK: usize = 51;
}

/// Records in the ring: 64 MiB, 0.2 s at the 5 Mpps live frames bring
/// (docs/engine.md, "Live frames"; 2^18 overran in 2 of 4 runs at load
/// 2.6, stalls of the reading thread), 0.7 s at 1.5 Mpps (the AF_XDP
/// path's 65 536 UMEM frames hold 44 ms).
pub(crate) const RING_RECORDS: u64 = 1 << 20;

/// Name the program is loaded under; `--xdp-cleanup` looks for it.
pub(crate) const PROG_NAME: &str = "wirebench_xdp";

const XDP_DROP: i32 = 1;
const XDP_PASS: i32 = 2;
const XDP_TX: i32 = 3;
const HELPER_MAP_LOOKUP: i32 = 1;
const HELPER_REDIRECT_MAP: i32 = 51;
const HELPER_KTIME_GET_TAI_NS: i32 = 208;
const ETH_P_IP_LE: i32 = 0x0008;
const ETH_P_IPV6_LE: i32 = 0xdd86;
const IPPROTO_UDP: i32 = 17;

/// What the program does with a frame of a registered port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// To the AF_XDP socket bound to the frame's receive queue (else pass).
    Redirect,
    /// Count and drop: what the path carries with no receiver behind it.
    Drop,
    /// Write the frame's receive record (time, probe header, IP and UDP
    /// headers, whether its source address is `from`) into the record
    /// ring and drop it.
    Records {
        /// The session's sender address.
        from: IpAddr,
    },
}

/// A jump target, resolved when the program is finished.
#[derive(Clone, Copy)]
enum Label {
    Pass,
    V4,
    Lookup,
    RecV6,
    V4Src,
    V6Src,
    NoHead,
    Commit,
}

const LABELS: usize = 8;

struct Asm {
    code: Vec<Insn>,
    /// (instruction index, target)
    fixups: Vec<(usize, Label)>,
    at: [Option<usize>; LABELS],
}

fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push(ins(code, dst, src, off, imm));
    }
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.code.len(), to));
        self.op(code, dst, src, 0, imm);
    }
    fn label(&mut self, l: Label) {
        self.at[l as usize] = Some(self.code.len());
    }
    /// `dst = map fd` (the two-slot BPF_LD_IMM64 with BPF_PSEUDO_MAP_FD).
    fn map(&mut self, dst: u8, fd: i32) {
        self.op(0x18, dst, 1, 0, fd);
        self.op(0, 0, 0, 0, 0);
    }
    /// `dst = &value of map fd (key 0)` (BPF_PSEUDO_MAP_VALUE, offset 0):
    /// a one-entry array's value without a helper call.
    fn map_value(&mut self, dst: u8, fd: i32) {
        self.op(0x18, dst, 2, 0, fd);
        self.op(0, 0, 0, 0, 0);
    }
    /// `dst = v` (the two-slot BPF_LD_IMM64).
    fn imm64(&mut self, dst: u8, v: u64) {
        self.op(0x18, dst, 0, 0, v as u32 as i32);
        self.op(0, 0, 0, 0, (v >> 32) as u32 as i32);
    }
    fn finish(mut self) -> Vec<Insn> {
        for (i, l) in std::mem::take(&mut self.fixups) {
            let target = self.at[l as usize].unwrap_or(i + 1);
            self.code[i].off = (target as i64 - i as i64 - 1) as i16;
        }
        self.code
    }
}

// Opcodes used (class | size/op | source).
const MOV64_REG: u8 = 0xbf;
const MOV64_IMM: u8 = 0xb7;
const ADD64_IMM: u8 = 0x07;
const AND64_IMM: u8 = 0x57;
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const LDX_DW: u8 = 0x79;
const STX_B: u8 = 0x73;
const STX_H: u8 = 0x6b;
const STX_W: u8 = 0x63;
const STX_DW: u8 = 0x7b;
const ST_B: u8 = 0x72;
const ST_DW: u8 = 0x7a;
const ADD64_REG: u8 = 0x0f;
const SUB64_REG: u8 = 0x1f;
const LSH64_IMM: u8 = 0x67;
const RSH64_IMM: u8 = 0x77;
const XOR64_IMM: u8 = 0xa7;
const MOV32_REG: u8 = 0xbc;
/// BPF_ALU | BPF_END | BPF_TO_BE: to network order (`imm` = bits).
const TO_BE: u8 = 0xdc;
/// BPF_ATOMIC on a u64; the operation is in `imm` (plain add: 0).
const ATOMIC_ADD_DW: u8 = 0xdb;
const ATOMIC_W: u8 = 0xc3;
const ATOMIC_FETCH_ADD: i32 = 0x01;
const ATOMIC_XCHG: i32 = 0xe1;
const JA: u8 = 0x05;
const JEQ_IMM: u8 = 0x15;
const JNE_IMM: u8 = 0x55;
const JNE_REG: u8 = 0x5d;
const JNE32_IMM: u8 = 0x56;
const JGT_REG: u8 = 0x2d;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// The program for map descriptors `ports` (array u32 → u64), `xsks`
/// (XSKMAP, used by [`Action::Redirect`] only) and `records` (a one-entry
/// mmapable array of `(RING_RECORDS + 1) * RECORD_LEN` bytes, used by
/// [`Action::Records`] only).
pub(crate) fn program(ports: i32, xsks: i32, records: i32, action: Action) -> Vec<Insn> {
    let mut a = Asm {
        code: Vec::with_capacity(128),
        fixups: Vec::new(),
        at: [None; LABELS],
    };
    let records_on = matches!(action, Action::Records { .. });
    // r6 = ctx; r2 = data; r3 = data_end (struct xdp_md).
    a.op(MOV64_REG, 6, 1, 0, 0);
    a.op(LDX_W, 2, 6, 0, 0);
    a.op(LDX_W, 3, 6, 4, 0);
    // Ethernet + IPv4 + UDP at least.
    a.op(MOV64_REG, 4, 2, 0, 0);
    a.op(ADD64_IMM, 4, 0, 0, 42);
    a.jump(JGT_REG, 4, 3, 0, Label::Pass);
    a.op(LDX_H, 5, 2, 12, 0);
    a.jump(JEQ_IMM, 5, 0, ETH_P_IP_LE, Label::V4);
    a.jump(JNE_IMM, 5, 0, ETH_P_IPV6_LE, Label::Pass);
    // IPv6: 14 + 40 + 8 bytes, next header UDP.
    a.op(MOV64_REG, 4, 2, 0, 0);
    a.op(ADD64_IMM, 4, 0, 0, 62);
    a.jump(JGT_REG, 4, 3, 0, Label::Pass);
    a.op(LDX_B, 5, 2, 20, 0);
    a.jump(JNE_IMM, 5, 0, IPPROTO_UDP, Label::Pass);
    a.op(LDX_H, 5, 2, 56, 0);
    if records_on {
        // r7 (kept across the lookup's call): 1 = IPv6.
        a.op(MOV64_IMM, 7, 0, 0, 1);
    }
    a.jump(JA, 0, 0, 0, Label::Lookup);
    // IPv4: header of 20 bytes, protocol UDP, not a fragment.
    a.label(Label::V4);
    a.op(LDX_B, 5, 2, 14, 0);
    a.op(AND64_IMM, 5, 0, 0, 0x0f);
    a.jump(JNE_IMM, 5, 0, 5, Label::Pass);
    a.op(LDX_B, 5, 2, 23, 0);
    a.jump(JNE_IMM, 5, 0, IPPROTO_UDP, Label::Pass);
    a.op(LDX_H, 5, 2, 20, 0);
    a.op(AND64_IMM, 5, 0, 0, 0xff3f);
    a.jump(JNE_IMM, 5, 0, 0, Label::Pass);
    a.op(LDX_H, 5, 2, 36, 0);
    if records_on {
        a.op(MOV64_IMM, 7, 0, 0, 0);
    }
    // ports[dst port as loaded]: 0 = not ours, else 1 + frames seen.
    a.label(Label::Lookup);
    a.op(STX_W, 10, 5, -4, 0);
    a.op(MOV64_REG, 2, 10, 0, 0);
    a.op(ADD64_IMM, 2, 0, 0, -4);
    a.map(1, ports);
    a.op(CALL, 0, 0, 0, HELPER_MAP_LOOKUP);
    a.jump(JEQ_IMM, 0, 0, 0, Label::Pass);
    a.op(LDX_DW, 1, 0, 0, 0);
    a.jump(JEQ_IMM, 1, 0, 0, Label::Pass);
    a.op(MOV64_IMM, 1, 0, 0, 1);
    a.op(ATOMIC_ADD_DW, 0, 1, 0, 0);
    match action {
        Action::Drop => a.op(MOV64_IMM, 0, 0, 0, XDP_DROP),
        Action::Redirect => {
            // bpf_redirect_map(xsks, rx_queue_index, XDP_PASS): a queue
            // without a socket passes the frame on.
            a.op(LDX_W, 2, 6, 16, 0);
            a.map(1, xsks);
            a.op(MOV64_IMM, 3, 0, 0, XDP_PASS);
            a.op(CALL, 0, 0, 0, HELPER_REDIRECT_MAP);
        }
        Action::Records { from } => records_tail(&mut a, records, from),
    }
    a.op(EXIT, 0, 0, 0, 0);
    a.label(Label::Pass);
    a.op(MOV64_IMM, 0, 0, 0, XDP_PASS);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

/// [`Action::Records`]' part after the port matched (r6 = ctx, r7 = 1
/// for IPv6): claim a record, write it, commit it, drop the frame. The
/// commit word follows [`super::sys::RecordRing`]'s protocol; both of its
/// writes are atomic exchanges, which order the record's writes between
/// them for any reader on any CPU.
fn records_tail(a: &mut Asm, records: i32, from: IpAddr) {
    let r = RECORD_LEN as i16;
    let commit = r + RECORD_COMMIT as i16;
    let at = |f: usize| r + f as i16;
    a.op(CALL, 0, 0, 0, HELPER_KTIME_GET_TAI_NS);
    a.op(MOV64_REG, 9, 0, 0, 0);
    // r1 = the record's index: fetch-add on the producer (header slot).
    a.map_value(8, records);
    a.op(MOV64_IMM, 1, 0, 0, 1);
    a.op(ATOMIC_ADD_DW, 8, 1, 0, ATOMIC_FETCH_ADD);
    a.op(STX_DW, 10, 1, -16, 0);
    // r8 = header slot + (index mod ring) * 64: the record is at r8 + 64.
    a.op(AND64_IMM, 1, 0, 0, (RING_RECORDS - 1) as i32);
    a.op(LSH64_IMM, 1, 0, 0, 6);
    a.op(ADD64_REG, 8, 1, 0, 0);
    // In progress: the index's low 32 bits.
    a.op(LDX_DW, 1, 10, -16, 0);
    a.op(ATOMIC_W, 8, 1, commit, ATOMIC_XCHG);
    a.op(STX_DW, 8, 9, at(rec::TIME), 0);
    a.op(ST_B, 8, 0, at(rec::SRC_OK), 0);
    a.op(LDX_W, 2, 6, 0, 0);
    a.op(LDX_W, 3, 6, 4, 0);
    a.op(MOV64_REG, 4, 3, 0, 0);
    a.op(SUB64_REG, 4, 2, 0, 0);
    a.op(STX_H, 8, 4, at(rec::FRAME_LEN), 0);
    a.op(MOV64_IMM, 1, 0, 0, 0);
    a.jump(JNE_IMM, 7, 0, 0, Label::RecV6);
    // IPv4: the headers end at 42 (checked before the lookup; again here
    // for the verifier, which forgot it across the call).
    headers_start(a, r, 42);
    a.op(LDX_B, 5, 2, 22, 0);
    a.op(STX_B, 8, 5, at(rec::TTL), 0);
    if let IpAddr::V4(v4) = from {
        a.op(LDX_W, 5, 2, 26, 0);
        let want = u32::from_ne_bytes(v4.octets()) as i32;
        a.jump(JNE32_IMM, 5, 0, want, Label::V4Src);
        a.op(MOV64_IMM, 1, 0, 0, 1);
        a.label(Label::V4Src);
    }
    head_and_commit(a, r, 42);
    // IPv6: the headers end at 62.
    a.label(Label::RecV6);
    headers_start(a, r, 62);
    a.op(ST_B, 8, 0, at(rec::TTL), 0);
    if let IpAddr::V6(v6) = from {
        let o = v6.octets();
        let (hi, lo) = o.split_at(8);
        for (off, half) in [(22, hi), (30, lo)] {
            let mut w = [0u8; 8];
            w.copy_from_slice(half);
            a.op(LDX_DW, 5, 2, off, 0);
            a.imm64(0, u64::from_ne_bytes(w));
            a.jump(JNE_REG, 5, 0, 0, Label::V6Src);
        }
        a.op(MOV64_IMM, 1, 0, 0, 1);
        a.label(Label::V6Src);
    }
    head_and_commit(a, r, 62);
    // A datagram shorter than a probe header: no header (zeros, which
    // no probe header decodes from).
    a.label(Label::NoHead);
    for k in 0..3 {
        a.op(ST_DW, 8, 0, at(rec::HEAD) + 8 * k, 0);
    }
    // Done: the index + 1.
    a.label(Label::Commit);
    a.op(LDX_DW, 1, 10, -16, 0);
    a.op(ADD64_IMM, 1, 0, 0, 1);
    a.op(ATOMIC_W, 8, 1, commit, ATOMIC_XCHG);
    a.op(MOV64_IMM, 0, 0, 0, XDP_DROP);
}

/// The start of [`records_tail`]'s IPv4 and IPv6 branches (r2 = data,
/// r3 = data_end, r8 = the header slot before the record at `r`): the
/// headers end at `udp_end` or the datagram has no header; the IP
/// header's first 8 bytes and the UDP header into the record; r4 =
/// data + `udp_end`.
fn headers_start(a: &mut Asm, r: i16, udp_end: i16) {
    let at = |f: usize| r + f as i16;
    a.op(MOV64_REG, 4, 2, 0, 0);
    a.op(ADD64_IMM, 4, 0, 0, i32::from(udp_end));
    a.jump(JGT_REG, 4, 3, 0, Label::NoHead);
    a.op(LDX_DW, 5, 2, 14, 0);
    a.op(STX_DW, 8, 5, at(rec::IP), 0);
    a.op(LDX_DW, 5, 2, udp_end - 8, 0);
    a.op(STX_DW, 8, 5, at(rec::UDP), 0);
}

/// The end of [`records_tail`]'s IPv4 and IPv6 branches (r1 = the source
/// verdict, r2 = data, r3 = data_end, r4 = data + `udp_end`, r8 = the
/// header slot before the record at `r`): the verdict, then the probe
/// header that follows the UDP header, if the datagram holds one.
fn head_and_commit(a: &mut Asm, r: i16, udp_end: i16) {
    let at = |f: usize| r + f as i16;
    a.op(STX_B, 8, 1, at(rec::SRC_OK), 0);
    a.op(ADD64_IMM, 4, 0, 0, 24);
    a.jump(JGT_REG, 4, 3, 0, Label::NoHead);
    for k in 0..3 {
        a.op(LDX_DW, 5, 2, udp_end + 8 * k, 0);
        a.op(STX_DW, 8, 5, at(rec::HEAD) + 8 * k, 0);
    }
    a.jump(JA, 0, 0, 0, Label::Commit);
}

/// Words of the live sender's state map ([`live_tx_program`]).
pub(crate) mod live {
    /// Program runs so far; each run takes the sequence number it held.
    pub const SEQ: usize = 0;
    /// Added to `bpf_ktime_get_tai_ns` to make the probe's transmit time
    /// (REALTIME minus TAI, as two's complement).
    pub const CLOCK: usize = 1;
    /// Words in the map's value.
    pub const WORDS: usize = 2;
}

/// The live-frame sender's program (run by `BPF_PROG_TEST_RUN` with live
/// frames, never attached): for a frame whose probe header starts at
/// `hl`, take the next sequence number (an atomic fetch-add on word
/// [`live::SEQ`] of the one-entry array `state`), stamp the probe with it
/// and with the time now (`bpf_ktime_get_tai_ns` plus word
/// [`live::CLOCK`]), and return `XDP_TX`, which live mode turns into a
/// transmission out of the interface the frame "arrived" on. With
/// `udp_sum` (IPv6, where the UDP checksum is mandatory) the checksum is
/// set from `udp_sum`, the one's-complement sum (as the program loads
/// 16-bit words, RFC 1071's order-independence) of the pseudo header and
/// the datagram with sequence and time zero, plus the two new fields.
pub(crate) fn live_tx_program(
    state: i32,
    hl: usize,
    udp_sum: Option<u16>,
    ifindex: u32,
) -> Vec<Insn> {
    use wirebench_wire::probe::field;
    let mut a = Asm {
        code: Vec::with_capacity(64),
        fixups: Vec::new(),
        at: [None; LABELS],
    };
    let seq_at = (hl + field::SEQ.start) as i16;
    let tx_at = (hl + field::TX_TIME.start) as i16;
    a.op(MOV64_REG, 6, 1, 0, 0);
    // Only frames "arriving" on the sending interface are ours: the
    // program is also attached where it sees other traffic
    // ([`super::live`], "the dispatcher"), which passes untouched.
    a.op(LDX_W, 2, 6, 12, 0);
    a.jump(JNE_IMM, 2, 0, ifindex as i32, Label::V4);
    a.op(CALL, 0, 0, 0, HELPER_KTIME_GET_TAI_NS);
    a.op(MOV64_REG, 9, 0, 0, 0);
    a.map_value(8, state);
    a.op(LDX_DW, 1, 8, (live::CLOCK * 8) as i16, 0);
    a.op(ADD64_REG, 9, 1, 0, 0);
    a.op(MOV64_IMM, 1, 0, 0, 1);
    a.op(
        ATOMIC_ADD_DW,
        8,
        1,
        (live::SEQ * 8) as i16,
        ATOMIC_FETCH_ADD,
    );
    // The frame must hold the probe header (it always does: user space
    // built it; the verifier wants to see the check).
    a.op(LDX_W, 2, 6, 0, 0);
    a.op(LDX_W, 3, 6, 4, 0);
    a.op(MOV64_REG, 4, 2, 0, 0);
    a.op(ADD64_IMM, 4, 0, 0, (hl + field::TX_TIME.end) as i32);
    a.jump(JGT_REG, 4, 3, 0, Label::Pass);
    a.op(TO_BE, 1, 0, 0, 32);
    a.op(STX_W, 2, 1, seq_at, 0);
    a.op(TO_BE, 9, 0, 0, 64);
    a.op(STX_DW, 2, 9, tx_at, 0);
    if let Some(sum) = udp_sum {
        // r5 = sum + the new words, folded to 16 bits.
        a.op(MOV64_IMM, 5, 0, 0, i32::from(sum));
        a.op(ADD64_REG, 5, 1, 0, 0);
        a.op(MOV32_REG, 0, 9, 0, 0);
        a.op(ADD64_REG, 5, 0, 0, 0);
        a.op(MOV64_REG, 0, 9, 0, 0);
        a.op(RSH64_IMM, 0, 0, 0, 32);
        a.op(ADD64_REG, 5, 0, 0, 0);
        for _ in 0..3 {
            a.op(MOV64_REG, 0, 5, 0, 0);
            a.op(RSH64_IMM, 0, 0, 0, 16);
            a.op(AND64_IMM, 5, 0, 0, 0xffff);
            a.op(ADD64_REG, 5, 0, 0, 0);
        }
        a.op(XOR64_IMM, 5, 0, 0, 0xffff);
        // A computed 0 is sent as all ones (RFC 768).
        a.jump(JNE_IMM, 5, 0, 0, Label::Commit);
        a.op(MOV64_IMM, 5, 0, 0, 0xffff);
        a.label(Label::Commit);
        a.op(STX_H, 2, 5, (hl - 2) as i16, 0);
    }
    a.op(MOV64_IMM, 0, 0, 0, XDP_TX);
    a.op(EXIT, 0, 0, 0, 0);
    a.label(Label::Pass);
    a.op(MOV64_IMM, 0, 0, 0, XDP_DROP);
    a.op(EXIT, 0, 0, 0, 0);
    a.label(Label::V4);
    a.op(MOV64_IMM, 0, 0, 0, XDP_PASS);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

/// The `ports` key of UDP port `port`: the two bytes as the program loads
/// them from the frame (network order read as a native u16).
pub(crate) fn port_key(port: u16) -> u32 {
    u32::from(u16::from_ne_bytes(port.to_be_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let p = program(3, 4, -1, Action::Redirect);
        let pass = p.len() - 2;
        // The first bounds check goes to the final XDP_PASS.
        let j = &p[5];
        assert_eq!(j.code, JGT_REG);
        assert_eq!(5 + 1 + j.off as usize, pass);
        assert_eq!(p[pass].imm, XDP_PASS);
        // Every jump stays inside the program.
        for (i, x) in p.iter().enumerate() {
            if matches!(
                x.code,
                JA | JEQ_IMM | JNE_IMM | JNE_REG | JNE32_IMM | JGT_REG
            ) {
                let t = i as i64 + 1 + i64::from(x.off);
                assert!(t > i as i64 && (t as usize) < p.len(), "jump {i} -> {t}");
            }
        }
    }

    #[test]
    fn drop_program_has_no_redirect() {
        let p = program(3, -1, -1, Action::Drop);
        assert!(!p
            .iter()
            .any(|x| x.code == CALL && x.imm == HELPER_REDIRECT_MAP));
        assert!(p.iter().any(|x| x.code == MOV64_IMM && x.imm == XDP_DROP));
    }

    #[test]
    fn record_program_jumps_stay_inside_and_it_drops() {
        for from in ["10.0.1.1", "fd00::1"] {
            let p = program(
                3,
                -1,
                5,
                Action::Records {
                    from: from.parse().unwrap(),
                },
            );
            for (i, x) in p.iter().enumerate() {
                if matches!(
                    x.code,
                    JA | JEQ_IMM | JNE_IMM | JNE_REG | JNE32_IMM | JGT_REG
                ) {
                    let t = i as i64 + 1 + i64::from(x.off);
                    assert!(
                        t > i as i64 && (t as usize) < p.len(),
                        "{from}: jump {i} -> {t}"
                    );
                }
            }
            assert!(p.iter().any(|x| x.code == MOV64_IMM && x.imm == XDP_DROP));
            assert!(!p
                .iter()
                .any(|x| x.code == CALL && x.imm == HELPER_REDIRECT_MAP));
        }
    }

    /// The kernel's verifier takes every program this module writes (root
    /// only: loading needs CAP_BPF), so a refusal fails here, not in a
    /// session.
    #[test]
    fn the_verifier_accepts_every_program() {
        use super::super::sys;
        use std::os::fd::AsRawFd;
        if !sys::is_root() {
            eprintln!("SKIPPED: needs root (loading BPF programs)");
            return;
        }
        let ports = sys::map_create(sys::MAP_ARRAY, 4, 8, 65536, "wb_t_ports").unwrap();
        let xsks = sys::map_create(sys::MAP_XSKMAP, 4, 4, 1, "wb_t_xsks").unwrap();
        let (records, ring) = super::super::records_map().unwrap();
        assert_eq!(ring.produced(), 0);
        let actions = [
            Action::Drop,
            Action::Redirect,
            Action::Records {
                from: "10.0.1.1".parse().unwrap(),
            },
            Action::Records {
                from: "fd00:0:0:1::1".parse().unwrap(),
            },
        ];
        for action in actions {
            let code = program(
                ports.as_raw_fd(),
                xsks.as_raw_fd(),
                records.as_raw_fd(),
                action,
            );
            if let Err((e, log)) = sys::prog_load(&code, PROG_NAME) {
                panic!("{action:?}: {e}\n{log}");
            }
        }
    }

    #[test]
    fn port_key_is_the_wire_order() {
        let k = port_key(0x1234);
        assert_eq!((k as u16).to_ne_bytes(), [0x12, 0x34]);
    }
}
