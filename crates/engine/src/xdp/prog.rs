//! The XDP program wirebench attaches, written as raw eBPF instructions so
//! that no compiler for the BPF target (clang, bpf-linker) is needed to
//! build wirebench.
//!
//! It looks at untagged Ethernet frames carrying UDP over IPv4 (no IP
//! options, no fragments) or IPv6 (UDP as the first next header), looks the
//! UDP destination port up in a 65 536-entry array (`ports`), and for a
//! port the session registered counts the frame and either steers it to
//! the AF_XDP socket of its receive queue (`XSKMAP`) or drops it
//! (the path-limit measurement). Every other frame is `XDP_PASS`: the
//! control connection and all other traffic reach the kernel untouched.
//! Instruction encoding: the kernel's Documentation/bpf/standardization.

use super::sys::Insn;

/// Name the program is loaded under; `--xdp-cleanup` looks for it.
pub(crate) const PROG_NAME: &str = "wirebench_xdp";

const XDP_DROP: i32 = 1;
const XDP_PASS: i32 = 2;
const HELPER_MAP_LOOKUP: i32 = 1;
const HELPER_REDIRECT_MAP: i32 = 51;
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
}

/// A jump target, resolved when the program is finished.
#[derive(Clone, Copy)]
enum Label {
    Pass,
    V4,
    Lookup,
}

struct Asm {
    code: Vec<Insn>,
    /// (instruction index, target)
    fixups: Vec<(usize, Label)>,
    at: [Option<usize>; 3],
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
const STX_W: u8 = 0x63;
const ATOMIC_ADD_DW: u8 = 0xdb;
const JA: u8 = 0x05;
const JEQ_IMM: u8 = 0x15;
const JNE_IMM: u8 = 0x55;
const JGT_REG: u8 = 0x2d;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// The program for map descriptors `ports` (array u32 → u64) and `xsks`
/// (XSKMAP, unused by [`Action::Drop`]).
pub(crate) fn program(ports: i32, xsks: i32, action: Action) -> Vec<Insn> {
    let mut a = Asm {
        code: Vec::with_capacity(48),
        fixups: Vec::new(),
        at: [None; 3],
    };
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
    }
    a.op(EXIT, 0, 0, 0, 0);
    a.label(Label::Pass);
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
        let p = program(3, 4, Action::Redirect);
        let pass = p.len() - 2;
        // The first bounds check goes to the final XDP_PASS.
        let j = &p[5];
        assert_eq!(j.code, JGT_REG);
        assert_eq!(5 + 1 + j.off as usize, pass);
        assert_eq!(p[pass].imm, XDP_PASS);
        // Every jump stays inside the program.
        for (i, x) in p.iter().enumerate() {
            if matches!(x.code, JA | JEQ_IMM | JNE_IMM | JGT_REG) {
                let t = i as i64 + 1 + i64::from(x.off);
                assert!(t > i as i64 && (t as usize) < p.len(), "jump {i} -> {t}");
            }
        }
    }

    #[test]
    fn drop_program_has_no_redirect() {
        let p = program(3, -1, Action::Drop);
        assert!(!p
            .iter()
            .any(|x| x.code == CALL && x.imm == HELPER_REDIRECT_MAP));
        assert!(p.iter().any(|x| x.code == MOV64_IMM && x.imm == XDP_DROP));
    }

    #[test]
    fn port_key_is_the_wire_order() {
        let k = port_key(0x1234);
        assert_eq!((k as u16).to_ne_bytes(), [0x12, 0x34]);
    }
}
