//! The only `unsafe` of the AF_XDP path: the `bpf(2)` commands it needs
//! (maps, loading a program from raw instructions, XDP links) and the
//! AF_XDP socket with its UMEM and four shared rings.
//!
//! Everything here is fenced behind safe types: [`Xsk`] owns the socket,
//! the UMEM and the ring mappings and unmaps them on drop; rings hand out
//! copies of descriptors, never references into shared memory.
//! Layouts follow <linux/bpf.h> and <linux/if_xdp.h> (kernel UAPI).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

// bpf(2) commands (enum bpf_cmd).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_TEST_RUN: libc::c_int = 10;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_LINK_GET_FD_BY_ID: libc::c_int = 30;
const BPF_LINK_GET_NEXT_ID: libc::c_int = 31;
const BPF_LINK_DETACH: libc::c_int = 34;

/// enum bpf_prog_type: BPF_PROG_TYPE_XDP.
const PROG_TYPE_XDP: u32 = 6;
/// enum bpf_attach_type: BPF_XDP.
const ATTACH_XDP: u32 = 37;
/// enum bpf_link_type: BPF_LINK_TYPE_XDP.
const LINK_TYPE_XDP: u32 = 6;
/// Map types (enum bpf_map_type).
pub(crate) const MAP_ARRAY: u32 = 2;
pub(crate) const MAP_XSKMAP: u32 = 17;
/// BPF_F_MMAPABLE: an array map user space can map.
pub(crate) const MAP_F_MMAPABLE: u32 = 1 << 10;
/// XDP_FLAGS_DRV_MODE / XDP_FLAGS_SKB_MODE (<linux/if_link.h>).
pub(crate) const XDP_FLAGS_SKB: u32 = 1 << 1;
pub(crate) const XDP_FLAGS_DRV: u32 = 1 << 2;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    pub code: u8,
    /// dst register in the low nibble, src in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// The `bpf(2)` attribute union is 128+ bytes; every command here fills a
/// prefix of it and leaves the rest zero, as the kernel requires.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, at: usize, v: u32) -> Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(mut self, at: usize, name: &str) -> Attr {
        let n = name.len().min(15);
        self.0[at..at + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
    fn get_u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.0[at..at + 4]);
        u32::from_ne_bytes(b)
    }
}

fn bpf(cmd: libc::c_int, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, 8-aligned 128-byte buffer and its size is
    // passed; every pointer stored in it (by the callers below) points to a
    // buffer that outlives this call and has the length stored beside it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn fd_from(r: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel returned a new file descriptor that nothing else
    // owns; OwnedFd closes it exactly once.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// Creates a BPF map.
pub(crate) fn map_create(
    ty: u32,
    key: u32,
    value: u32,
    entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    map_create_flags(ty, key, value, entries, 0, name)
}

/// Creates a BPF map with `map_flags` (e.g. [`MAP_F_MMAPABLE`]).
pub(crate) fn map_create_flags(
    ty: u32,
    key: u32,
    value: u32,
    entries: u32,
    flags: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut a = Attr::new()
        .u32(0, ty)
        .u32(4, key)
        .u32(8, value)
        .u32(12, entries)
        .u32(16, flags)
        .name(28, name);
    bpf(BPF_MAP_CREATE, &mut a).map(fd_from)
}

/// Writes one map element (`key` and `value` sized as the map was created).
pub(crate) fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut a = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_ptr() as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Reads one map element into `value`, which must be the map's value size.
pub(crate) fn map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<()> {
    let mut a = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, key.as_ptr() as u64)
        .u64(16, value.as_mut_ptr() as u64);
    bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map(|_| ())
}

/// Loads an XDP program; on refusal the verifier's log comes with the error.
pub(crate) fn prog_load(insns: &[Insn], name: &str) -> Result<OwnedFd, (io::Error, String)> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 64 * 1024];
    let attr = |level: u32, log: &mut [u8]| {
        Attr::new()
            .u32(0, PROG_TYPE_XDP)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(24, level)
            .u32(28, if level > 0 { log.len() as u32 } else { 0 })
            .u64(
                32,
                if level > 0 {
                    log.as_mut_ptr() as u64
                } else {
                    0
                },
            )
            .name(48, name)
            .u32(68, ATTACH_XDP)
    };
    match bpf(BPF_PROG_LOAD, &mut attr(0, &mut log)) {
        Ok(fd) => Ok(fd_from(fd)),
        Err(e) => {
            // Again with the log, to say why.
            let _ = bpf(BPF_PROG_LOAD, &mut attr(1, &mut log)).map(fd_from);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((e, String::from_utf8_lossy(&log[..end]).into_owned()))
        }
    }
}

/// BPF_F_TEST_XDP_LIVE_FRAMES (<linux/bpf.h>, Linux 5.18).
const TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Bytes of `struct xdp_md` (data, data_end, data_meta, ingress_ifindex,
/// rx_queue_index, egress_ifindex).
const XDP_MD_LEN: usize = 24;

/// Runs XDP program `prog` `repeat` times in live-frame mode
/// (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`): each run gets
/// a frame initialised from `data` as if it arrived on `ifindex`, queue 0,
/// and what the program returns happens for real: `XDP_TX` becomes a
/// redirect out of `ifindex` (Documentation/bpf/bpf_prog_run.rst). The
/// kernel says nothing of frames the redirect could not hand over: the
/// caller reads the interface's counters. A signal ends the call early
/// (`EINTR`) after an unknown number of runs: the program counts them.
pub(crate) fn prog_run_live(
    prog: &OwnedFd,
    data: &[u8],
    ifindex: u32,
    repeat: u32,
) -> io::Result<()> {
    let mut ctx = [0u8; XDP_MD_LEN];
    ctx[4..8].copy_from_slice(&(data.len() as u32).to_ne_bytes());
    ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, data.len() as u32)
        .u64(16, data.as_ptr() as u64)
        .u32(32, repeat)
        .u32(40, XDP_MD_LEN as u32)
        .u64(48, ctx.as_ptr() as u64)
        .u32(64, TEST_XDP_LIVE_FRAMES);
    bpf(BPF_PROG_TEST_RUN, &mut a).map(|_| ())
}

/// Runs XDP program `prog` once on a copy of `data` (not live): its
/// return value, and the frame as the program left it in `out` (its
/// length returned).
#[cfg(test)]
pub(crate) fn prog_test_run_out(
    prog: &OwnedFd,
    data: &[u8],
    out: &mut [u8],
) -> io::Result<(u32, usize)> {
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, data.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, data.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, 1);
    bpf(BPF_PROG_TEST_RUN, &mut a)?;
    Ok((a.get_u32(4), a.get_u32(12) as usize))
}

/// Runs XDP program `prog` `repeat` times on the frame `data` in the
/// kernel (BPF_PROG_TEST_RUN, no interface involved): its return value
/// (tests).
#[cfg(test)]
pub(crate) fn prog_test_run(prog: &OwnedFd, data: &[u8], repeat: u32) -> io::Result<u32> {
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, data.len() as u32)
        .u64(16, data.as_ptr() as u64)
        .u32(32, repeat);
    bpf(BPF_PROG_TEST_RUN, &mut a)?;
    Ok(a.get_u32(4))
}

/// Attaches `prog` to interface `ifindex` through a BPF link: the
/// attachment lives exactly as long as the returned descriptor, so a
/// killed process leaves nothing attached.
pub(crate) fn xdp_link(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, ATTACH_XDP)
        .u32(12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(fd_from)
}

/// An XDP link of the system: its id, interface and program name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkInfo {
    pub id: u32,
    pub ifindex: u32,
    pub prog_name: String,
}

/// Every XDP link on the system (BPF_LINK_GET_NEXT_ID walk).
pub(crate) fn xdp_links() -> io::Result<Vec<LinkInfo>> {
    let mut out = Vec::new();
    let mut id = 0u32;
    loop {
        let mut a = Attr::new().u32(0, id);
        match bpf(BPF_LINK_GET_NEXT_ID, &mut a) {
            Ok(_) => id = a.get_u32(4),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
            Err(e) => return Err(e),
        }
        let Ok(fd) = bpf(BPF_LINK_GET_FD_BY_ID, &mut Attr::new().u32(0, id)).map(fd_from) else {
            continue;
        };
        // struct bpf_link_info: type, id, prog_id, then the union; for XDP
        // the union starts with ifindex (offset 16, after 4 bytes padding).
        let mut info = [0u8; 64];
        if obj_info(&fd, &mut info).is_err() {
            continue;
        }
        let word =
            |at: usize| u32::from_ne_bytes([info[at], info[at + 1], info[at + 2], info[at + 3]]);
        if word(0) != LINK_TYPE_XDP {
            continue;
        }
        out.push(LinkInfo {
            id,
            ifindex: word(16),
            prog_name: prog_name(word(8)).unwrap_or_default(),
        });
    }
}

/// The name of program `id` (struct bpf_prog_info: name at offset 64).
fn prog_name(id: u32) -> io::Result<String> {
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut Attr::new().u32(0, id)).map(fd_from)?;
    let mut info = [0u8; 256];
    obj_info(&fd, &mut info)?;
    let name = &info[64..80];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

fn obj_info(fd: &OwnedFd, info: &mut [u8]) -> io::Result<()> {
    let mut a = Attr::new()
        .u32(0, fd.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map(|_| ())
}

/// Detaches link `id` (its program leaves the interface; the link object
/// stays until its last holder closes it).
pub(crate) fn link_detach(id: u32) -> io::Result<()> {
    let fd = bpf(BPF_LINK_GET_FD_BY_ID, &mut Attr::new().u32(0, id)).map(fd_from)?;
    bpf(
        BPF_LINK_DETACH,
        &mut Attr::new().u32(0, fd.as_raw_fd() as u32),
    )
    .map(|_| ())
}

/// The interface index of `name`.
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is a NUL-terminated string alive for the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// Whether the process runs as root (what AF_XDP sockets and XDP
/// programs need, short of holding the capabilities one by one).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether interface `iface` holds address `ip` (getifaddrs).
pub(crate) fn iface_has(iface: &str, ip: std::net::IpAddr) -> io::Result<bool> {
    Ok(ifaces_with(ip)?.iter().any(|n| n == iface))
}

/// The names of the interfaces holding address `ip` (getifaddrs).
pub(crate) fn ifaces_with(ip: std::net::IpAddr) -> io::Result<Vec<String>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs built, alive until
        // freeifaddrs; its name is a NUL-terminated string and its address,
        // when not null, a sockaddr of the family it names.
        let (name, addr) = unsafe {
            let c = &*cur;
            cur = c.ifa_next;
            (std::ffi::CStr::from_ptr(c.ifa_name), c.ifa_addr)
        };
        if addr.is_null() {
            continue;
        }
        // SAFETY: as above; the family says which sockaddr it is.
        let a = unsafe {
            match i32::from((*addr).sa_family) {
                libc::AF_INET => {
                    let v = &*(addr as *const libc::sockaddr_in);
                    Some(std::net::IpAddr::from(v.sin_addr.s_addr.to_ne_bytes()))
                }
                libc::AF_INET6 => {
                    let v = &*(addr as *const libc::sockaddr_in6);
                    Some(std::net::IpAddr::from(v.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if a == Some(ip) {
            found.push(name.to_string_lossy().into_owned());
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// An anonymous shared mapping, unmapped on drop.
struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner
// to another thread moves the only handle to it.
unsafe impl Send for Mmap {}

impl Mmap {
    fn new(fd: Option<RawFd>, len: usize, offset: u64) -> io::Result<Mmap> {
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        // SAFETY: a fresh mapping at an address of the kernel's choice; it
        // overlaps nothing we hold and is unmapped once, in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing refers to
        // the mapping after its owner is dropped.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// The value of a one-entry BPF array created with [`MAP_F_MMAPABLE`]
/// whose value is `words` u64s, mapped into this process: counters a
/// program updates with atomic instructions and settings it reads.
pub(crate) struct Words {
    map: Mmap,
    words: usize,
}

impl Words {
    /// Maps `fd`, a one-entry mmapable array of `words` * 8 bytes.
    pub(crate) fn map(fd: &OwnedFd, words: usize) -> io::Result<Words> {
        let map = Mmap::new(Some(fd.as_raw_fd()), words * 8, 0)?;
        Ok(Words { map, words })
    }

    fn at(&self, i: usize) -> &AtomicU64 {
        let i = i.min(self.words - 1);
        // SAFETY: `i` < words, so the 8 bytes lie inside the live mapping,
        // 8-aligned (the kernel maps the value page-aligned); the program
        // touches them only with atomic instructions or plain loads.
        unsafe { &*(self.map.ptr.add(i * 8) as *const AtomicU64) }
    }

    /// Word `i` (the last one if `i` is past the end).
    pub(crate) fn load(&self, i: usize) -> u64 {
        self.at(i).load(Ordering::Acquire)
    }

    /// Sets word `i` (the last one if `i` is past the end).
    pub(crate) fn store(&self, i: usize, v: u64) {
        self.at(i).store(v, Ordering::Release)
    }
}

/// `SIOCETHTOOL` and the ethtool commands used (<linux/ethtool.h>).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;

/// Some of an interface's driver statistics (`ethtool -S`), summed: the
/// names are chosen once, then each [`EthStats::read`] is one ioctl into
/// a buffer allocated at the start.
pub(crate) struct EthStats {
    sock: OwnedFd,
    name: [u8; libc::IFNAMSIZ],
    /// `struct ethtool_stats`: cmd, n_stats, then n_stats u64s.
    buf: Vec<u64>,
    picked: Vec<usize>,
}

impl EthStats {
    /// The statistics of `iface` whose names `pick` accepts; an error
    /// when the driver has none of them.
    pub(crate) fn open(iface: &str, pick: impl Fn(&str) -> bool) -> io::Result<EthStats> {
        if iface.len() >= libc::IFNAMSIZ {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = fd_from(fd as libc::c_long);
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..iface.len()].copy_from_slice(iface.as_bytes());
        let mut s = EthStats {
            sock,
            name,
            buf: Vec::new(),
            picked: Vec::new(),
        };
        // struct ethtool_sset_info: cmd, reserved, sset_mask, data[1].
        let mut info = [0u32; 5];
        info[0] = ETHTOOL_GSSET_INFO;
        info[2] = 1 << ETH_SS_STATS;
        s.ioctl(info.as_mut_ptr() as *mut libc::c_void)?;
        let n = if info[2] & (1 << ETH_SS_STATS) != 0 {
            info[4] as usize
        } else {
            0
        };
        // struct ethtool_gstrings: cmd, string_set, len, then the names.
        let mut strings = vec![0u32; 3 + n * ETH_GSTRING_LEN / 4];
        strings[0] = ETHTOOL_GSTRINGS;
        strings[1] = ETH_SS_STATS;
        strings[2] = n as u32;
        s.ioctl(strings.as_mut_ptr() as *mut libc::c_void)?;
        let bytes: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        for (i, raw) in bytes.chunks_exact(ETH_GSTRING_LEN).enumerate() {
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            if pick(&String::from_utf8_lossy(&raw[..end])) {
                s.picked.push(i);
            }
        }
        if s.picked.is_empty() {
            return Err(io::ErrorKind::NotFound.into());
        }
        s.buf = vec![0u64; 1 + n];
        Ok(s)
    }

    fn ioctl(&self, data: *mut libc::c_void) -> io::Result<()> {
        // struct ifreq: the name, then ifr_data (a pointer) in the union.
        #[repr(C)]
        struct IfreqData {
            name: [u8; libc::IFNAMSIZ],
            data: *mut libc::c_void,
            _pad: [u8; 16],
        }
        let mut req = IfreqData {
            name: self.name,
            data,
            _pad: [0; 16],
        };
        // SAFETY: `req` is a live ifreq naming the interface, and `data`
        // points to a buffer the caller sized for the command it holds
        // (the kernel writes no more than the counts given in it).
        let r = unsafe { libc::ioctl(self.sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// The picked statistics' sum now.
    pub(crate) fn read(&mut self) -> io::Result<u64> {
        let n = self.buf.len() - 1;
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
        head[4..].copy_from_slice(&(n as u32).to_ne_bytes());
        self.buf[0] = u64::from_ne_bytes(head);
        let p = self.buf.as_mut_ptr() as *mut libc::c_void;
        self.ioctl(p)?;
        Ok(self.picked.iter().map(|&i| self.buf[1 + i]).sum())
    }
}

/// Bytes of one record in a [`RecordRing`], and of its header slot.
pub(crate) const RECORD_LEN: usize = 64;
/// Where a record's commit word (u32) sits: written last by the program.
pub(crate) const RECORD_COMMIT: usize = 60;

/// What reading a record of a [`RecordRing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The record, whole.
    Ready,
    /// Not committed yet: not written or still being written.
    NotYet,
    /// A later record took the slot before this one was read: the ring
    /// overran (the producer index says by how much).
    Lapped,
    /// Overwritten while it was being read: lost.
    Overwritten,
}

/// The receive records the XDP program appends to a one-entry BPF array
/// created with [`MAP_F_MMAPABLE`], mapped into this process: a header
/// slot whose first u64 is the producer index (the program claims a record
/// with an atomic fetch-add on it), then `size` records of
/// [`RECORD_LEN`] bytes, record `i` at slot `i % size`. The program
/// writes a record's commit word (`RECORD_COMMIT`) with an atomic exchange
/// before it writes the record (the claimed index, low 32 bits: "in
/// progress") and after (the index + 1: "done"), so a reader that sees the
/// same "done" word before and after copying a record copied it whole
/// (a seqlock); nothing is ever read through a reference into the map.
pub(crate) struct RecordRing {
    map: Mmap,
    mask: u64,
}

impl RecordRing {
    /// Maps `fd`, a one-entry mmapable array whose value is
    /// `(size + 1) * RECORD_LEN` bytes; `size` a power of two.
    pub(crate) fn map(fd: &OwnedFd, size: u64) -> io::Result<RecordRing> {
        if !size.is_power_of_two() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let len = (size as usize + 1) * RECORD_LEN;
        let map = Mmap::new(Some(fd.as_raw_fd()), len, 0)?;
        Ok(RecordRing {
            map,
            mask: size - 1,
        })
    }

    /// Records the ring holds.
    pub(crate) fn size(&self) -> u64 {
        self.mask + 1
    }

    /// Records claimed by the program so far (the producer index).
    pub(crate) fn produced(&self) -> u64 {
        // SAFETY: offset 0 of the live mapping, 8-aligned (the kernel maps
        // the array's value page-aligned); the program updates it only
        // with atomic instructions.
        unsafe { (*(self.map.ptr as *const AtomicU64)).load(Ordering::Acquire) }
    }

    fn commit(&self, at: usize) -> u32 {
        // SAFETY: `at` + 4 <= the mapping's length and 4-aligned (see
        // `read`); the program writes the word with atomic exchanges.
        unsafe { (*(self.map.ptr.add(at) as *const AtomicU32)).load(Ordering::Acquire) }
    }

    /// Copies record `seq` into `out` if it is committed and stays so
    /// while being copied.
    pub(crate) fn read(&self, seq: u64, out: &mut [u8; RECORD_LEN]) -> Slot {
        let at = (((seq & self.mask) as usize) + 1) * RECORD_LEN;
        let done = (seq as u32).wrapping_add(1);
        let c = self.commit(at + RECORD_COMMIT);
        if c != done {
            // A later lap's marks (its index, or its index + 1) are ahead
            // of this record's; an earlier lap's, or this one's "in
            // progress" (`seq`), behind.
            return if (c.wrapping_sub(done) as i32) > 0 {
                Slot::Lapped
            } else {
                Slot::NotYet
            };
        }
        // SAFETY: [at, at + RECORD_LEN) lies inside the mapping (slot <=
        // mask, the mapping holds mask + 2 slots); a volatile copy of
        // plain bytes the program may be rewriting concurrently, whose
        // consistency the commit word re-read below decides.
        let bytes =
            unsafe { std::ptr::read_volatile(self.map.ptr.add(at) as *const [u8; RECORD_LEN]) };
        std::sync::atomic::fence(Ordering::Acquire);
        if self.commit(at + RECORD_COMMIT) != done {
            return Slot::Overwritten;
        }
        *out = bytes;
        Slot::Ready
    }
}

/// TAI minus REALTIME in nanoseconds, a whole number of seconds (the
/// kernel keeps the TAI offset in seconds): turns the program's
/// `bpf_ktime_get_tai_ns` stamps into the realtime stamps probes carry.
pub(crate) fn tai_offset_ns() -> i64 {
    let now = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live timespec for the kernel to fill.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    let r0 = now(libc::CLOCK_REALTIME);
    let t = now(libc::CLOCK_TAI);
    let r1 = now(libc::CLOCK_REALTIME);
    let diff = t - (r0 + r1) / 2;
    // Rounded to the second: the two clocks differ by whole seconds.
    let secs = (diff + diff.signum() * 500_000_000) / 1_000_000_000;
    (secs * 1_000_000_000) as i64
}

/// One of the four rings shared with the kernel. `T` is the descriptor:
/// `u64` UMEM addresses (fill, completion) or `xdp_desc` (rx, tx).
struct Ring<T: Copy> {
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    /// Our copies of the indices: the shared ones are read only when the
    /// cached view runs out, so a batch costs two atomic accesses.
    prod: u32,
    cons: u32,
}

// SAFETY: the ring's pointers point into `map`, which moves with it.
unsafe impl<T: Copy> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, size: u32, pgoff: u64) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mmap::new(Some(fd), len, pgoff)?;
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this ring and
        // lie inside the mapping of `len` bytes; the kernel aligns the
        // index words to 4 bytes (they are u32s it updates atomically).
        let (producer, consumer, flags, descs) = unsafe {
            (
                map.ptr.add(off.producer as usize) as *const AtomicU32,
                map.ptr.add(off.consumer as usize) as *const AtomicU32,
                map.ptr.add(off.flags as usize) as *const AtomicU32,
                map.ptr.add(off.desc as usize) as *mut T,
            )
        };
        let mut r = Ring {
            _map: map,
            producer,
            consumer,
            flags,
            descs,
            mask: size - 1,
            size,
            prod: 0,
            cons: 0,
        };
        r.prod = r.load_prod();
        r.cons = r.load_cons();
        Ok(r)
    }

    fn load_prod(&self) -> u32 {
        // SAFETY: `producer` points into our live mapping (see `map`).
        unsafe { (*self.producer).load(Ordering::Acquire) }
    }

    fn load_cons(&self) -> u32 {
        // SAFETY: as `load_prod`.
        unsafe { (*self.consumer).load(Ordering::Acquire) }
    }

    fn need_wakeup(&self) -> bool {
        // SAFETY: as `load_prod`.
        unsafe { (*self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0 }
    }

    /// Producer side: room for up to `n` descriptors.
    fn free(&mut self, n: u32) -> u32 {
        let mut free = self.size - self.prod.wrapping_sub(self.cons);
        if free < n {
            self.cons = self.load_cons();
            free = self.size - self.prod.wrapping_sub(self.cons);
        }
        free.min(n)
    }

    /// Producer side: writes descriptor `i` of the reserved stretch.
    fn put(&mut self, i: u32, d: T) {
        let at = (self.prod.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `at` < size, inside the descriptor array; the slot is
        // ours until `submit` publishes it (the kernel consumed it: free).
        unsafe { self.descs.add(at).write_volatile(d) }
    }

    /// Producer side: publishes `n` written descriptors.
    fn submit(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.prod = self.prod.wrapping_add(n);
        // SAFETY: as `load_prod`; Release orders the descriptor writes
        // before the index the kernel reads.
        unsafe { (*self.producer).store(self.prod, Ordering::Release) }
    }

    /// Consumer side: descriptors ready, up to `n`.
    fn ready(&mut self, n: u32) -> u32 {
        let mut ready = self.prod.wrapping_sub(self.cons);
        if ready == 0 {
            self.prod = self.load_prod();
            ready = self.prod.wrapping_sub(self.cons);
        }
        ready.min(n)
    }

    /// Consumer side: descriptor `i` of the ready stretch.
    fn get(&self, i: u32) -> T {
        let at = (self.cons.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `at` < size; the kernel published this slot (Acquire in
        // `ready`) and does not touch it until `release`.
        unsafe { self.descs.add(at).read_volatile() }
    }

    /// Consumer side: hands `n` read descriptors back.
    fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cons = self.cons.wrapping_add(n);
        // SAFETY: as `submit`.
        unsafe { (*self.consumer).store(self.cons, Ordering::Release) }
    }
}

/// A received frame: where it lies in the UMEM and how long it is.
pub(crate) type Desc = libc::xdp_desc;

/// What a transmit wake-up left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kick {
    /// Nothing waits on the ring.
    Done,
    /// Frames wait on the ring (the kernel stopped at its budget or was busy).
    Pending,
    /// The driver dropped one frame; others may wait.
    Dropped,
}

/// How the socket was bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Copy,
    ZeroCopy,
}

/// Sizes of an [`Xsk`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct XskConfig {
    pub frames: u32,
    pub frame_size: u32,
    /// Descriptors per ring (power of two).
    pub ring: u32,
    pub rx: bool,
    pub tx: bool,
}

/// An AF_XDP socket bound to one queue of one interface, with its own
/// UMEM: `frames` chunks of `frame_size` bytes.
pub(crate) struct Xsk {
    // Field order is drop order: rings are unmapped before the socket is
    // closed, and the UMEM only after the socket released it.
    rx: Option<Ring<Desc>>,
    tx: Option<Ring<Desc>>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: OwnedFd,
    umem: Mmap,
    pub mode: Mode,
    /// Frames the driver refused after taking them off the tx ring
    /// (`sendto` said EBUSY: the kernel completed them unsent).
    pub driver_drops: u64,
    /// The kernel took `XDP_MAX_TX_SKB_BUDGET`: one `sendto` moves a
    /// whole batch, so EAGAIN means the queue is stopped, not a budget.
    big_budget: bool,
}

/// `XDP_MAX_TX_SKB_BUDGET` (<linux/if_xdp.h>, Linux 6.17): how many frames
/// one `sendto` may move in copy mode (32 without it).
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the type the option expects (callers
    // pass the UAPI struct or u32) and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt<T: Copy>(fd: RawFd, opt: libc::c_int, v: &mut T) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// AF_XDP socket statistics (`struct xdp_statistics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskStats {
    /// Frames dropped for other reasons than a full ring.
    pub rx_dropped: u64,
    /// Received descriptors the kernel found invalid.
    pub rx_invalid: u64,
    /// Transmit descriptors the kernel found invalid.
    pub tx_invalid: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Frames dropped because the fill ring had no free frame.
    pub rx_fill_empty: u64,
}

impl Xsk {
    /// Opens the socket, registers its UMEM, maps its rings and binds it to
    /// queue `queue` of `ifindex`: zero-copy when the driver offers it,
    /// else copy mode.
    pub(crate) fn open(ifindex: u32, queue: u32, cfg: XskConfig) -> io::Result<Xsk> {
        // SAFETY: plain socket(2); the descriptor is owned at once below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = fd_from(raw as libc::c_long);
        let len = cfg.frames as usize * cfg.frame_size as usize;
        let umem = Mmap::new(None, len, 0)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        let r = fd.as_raw_fd();
        setsockopt(r, libc::XDP_UMEM_REG, &reg)?;
        setsockopt(r, libc::XDP_UMEM_FILL_RING, &cfg.ring)?;
        setsockopt(r, libc::XDP_UMEM_COMPLETION_RING, &cfg.ring)?;
        if cfg.rx {
            setsockopt(r, libc::XDP_RX_RING, &cfg.ring)?;
        }
        let mut big_budget = false;
        if cfg.tx {
            setsockopt(r, libc::XDP_TX_RING, &cfg.ring)?;
            // One wake-up per batch instead of one per 32 frames; older
            // kernels refuse the option and keep their 32.
            big_budget = setsockopt(r, XDP_MAX_TX_SKB_BUDGET, &cfg.ring).is_ok();
        }
        // SAFETY: xdp_mmap_offsets is plain integers; all-zero is valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt(r, libc::XDP_MMAP_OFFSETS, &mut off)?;
        let fill = Ring::map(r, &off.fr, cfg.ring, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(r, &off.cr, cfg.ring, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = if cfg.rx {
            Some(Ring::map(
                r,
                &off.rx,
                cfg.ring,
                libc::XDP_PGOFF_RX_RING as u64,
            )?)
        } else {
            None
        };
        let tx = if cfg.tx {
            Some(Ring::map(
                r,
                &off.tx,
                cfg.ring,
                libc::XDP_PGOFF_TX_RING as u64,
            )?)
        } else {
            None
        };
        let bind = |flags: u16| {
            let sa = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: `sa` is a live sockaddr_xdp and its size is passed.
            let r = unsafe {
                libc::bind(
                    r,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        let mode = match bind(libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP) {
            Ok(()) => Mode::ZeroCopy,
            Err(_) => {
                bind(libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP)?;
                Mode::Copy
            }
        };
        Ok(Xsk {
            rx,
            tx,
            fill,
            comp,
            fd,
            umem,
            mode,
            driver_drops: 0,
            big_budget,
        })
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The bytes of frame `addr` (a UMEM offset from a descriptor or one of
    /// ours), `len` long; None when it lies outside the UMEM.
    pub(crate) fn frame(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let end = (addr as usize).checked_add(len)?;
        if end > self.umem.len {
            return None;
        }
        // SAFETY: [addr, end) lies inside the UMEM mapping (checked); the
        // kernel writes a frame only while it owns it (between the fill and
        // the rx ring), and the caller reads it after taking it from rx.
        Some(unsafe { std::slice::from_raw_parts(self.umem.ptr.add(addr as usize), len) })
    }

    /// Writable bytes of frame `addr`, `len` long; None outside the UMEM.
    pub(crate) fn frame_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let end = (addr as usize).checked_add(len)?;
        if end > self.umem.len {
            return None;
        }
        // SAFETY: as `frame`; `&mut self` makes this the only view, and the
        // caller writes only frames it has not handed to the kernel.
        Some(unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(addr as usize), len) })
    }

    /// Puts frames `addrs` on the fill ring (receive buffers for the
    /// kernel); returns how many fitted.
    pub(crate) fn fill(&mut self, addrs: &[u64]) -> usize {
        let n = self.fill.free(addrs.len() as u32);
        for (i, &a) in addrs[..n as usize].iter().enumerate() {
            self.fill.put(i as u32, a);
        }
        self.fill.submit(n);
        n as usize
    }

    /// Takes up to `out.len()` received descriptors off the rx ring.
    pub(crate) fn recv(&mut self, out: &mut [Desc]) -> usize {
        let Some(rx) = self.rx.as_mut() else { return 0 };
        let n = rx.ready(out.len() as u32);
        for (i, slot) in out[..n as usize].iter_mut().enumerate() {
            *slot = rx.get(i as u32);
        }
        rx.release(n);
        n as usize
    }

    /// Room on the tx ring, up to `n`.
    pub(crate) fn tx_room(&mut self, n: usize) -> usize {
        self.tx.as_mut().map_or(0, |t| t.free(n as u32) as usize)
    }

    /// Queues the descriptors on the tx ring (the caller asked
    /// [`Xsk::tx_room`] first) and kicks the kernel's transmit path;
    /// returns how many were queued and what the last kick left.
    pub(crate) fn send(&mut self, descs: &[Desc]) -> io::Result<(usize, Kick)> {
        let Some(tx) = self.tx.as_mut() else {
            return Ok((0, Kick::Done));
        };
        let n = tx.free(descs.len() as u32);
        for (i, &d) in descs[..n as usize].iter().enumerate() {
            tx.put(i as u32, d);
        }
        tx.submit(n);
        // Without the large budget copy mode moves 32 frames per call and
        // says EAGAIN while more wait; with it, EAGAIN means the queue is
        // stopped, which calling again at once does not change. A refused
        // frame ends the call early too.
        let mut last = Kick::Done;
        for _ in 0..n / 32 + 2 {
            last = self.kick()?;
            if last == Kick::Done || (last == Kick::Pending && self.big_budget) {
                break;
            }
        }
        Ok((n as usize, last))
    }

    /// Wakes the kernel's transmit path (copy mode needs a call per
    /// budget; zero-copy only when the ring asks for it).
    pub(crate) fn kick(&mut self) -> io::Result<Kick> {
        let Some(tx) = self.tx.as_ref() else {
            return Ok(Kick::Done);
        };
        if self.mode == Mode::ZeroCopy && !tx.need_wakeup() {
            return Ok(Kick::Done);
        }
        // SAFETY: a zero-length sendto with no buffer and no address is the
        // AF_XDP "transmit what is on the ring" call.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r >= 0 {
            return Ok(Kick::Done);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // The driver dropped the frame it was given (NET_XMIT_DROP;
            // veth: the peer's ring was full); the rest stay on the ring.
            Some(libc::EBUSY) => {
                self.driver_drops += 1;
                Ok(Kick::Dropped)
            }
            // Budget used up, queue stopped or out of buffers: the frames
            // stay on the ring, retried.
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(Kick::Pending),
            _ => Err(e),
        }
    }

    /// Takes up to `out.len()` completed transmit frames back.
    pub(crate) fn completed(&mut self, out: &mut [u64]) -> usize {
        let n = self.comp.ready(out.len() as u32);
        for (i, slot) in out[..n as usize].iter_mut().enumerate() {
            *slot = self.comp.get(i as u32);
        }
        self.comp.release(n);
        n as usize
    }

    /// Waits up to `ms` for received frames.
    pub(crate) fn wait_rx(&self, ms: i32) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, count 1.
        unsafe {
            libc::poll(&mut p, 1, ms);
        }
    }

    /// The socket's drop counters.
    pub(crate) fn stats(&self) -> XskStats {
        let mut s = libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        };
        let _ = getsockopt(self.fd.as_raw_fd(), libc::XDP_STATISTICS, &mut s);
        XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid: s.rx_invalid_descs,
            tx_invalid: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_empty: s.rx_fill_ring_empty_descs,
        }
    }
}

/// A route-netlink socket that has sent `req` and waits at most 2 s for
/// each reply.
fn netlink_send(req: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = fd_from(raw as libc::c_long);
    // SAFETY: `req` is a live buffer of its length.
    let r = unsafe {
        libc::send(
            fd.as_raw_fd(),
            req.as_ptr() as *const libc::c_void,
            req.len(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: a live timeval and its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    Ok(fd)
}

/// One reply datagram of `fd` into `buf`; its length.
fn netlink_recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The messages of one netlink reply datagram: (type, payload after the
/// 16-byte header) each, or None for a malformed one (the walk ends there).
fn netlink_messages(mut buf: &[u8]) -> impl Iterator<Item = Option<(u16, &[u8])>> {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let ty = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < 16 || len > buf.len() {
            buf = &[];
            return Some(None);
        }
        let body = &buf[16..len];
        buf = &buf[((len + 3) & !3).min(buf.len())..];
        Some(Some((ty, body)))
    })
}

/// Sends a route-netlink request that asks for an acknowledgement
/// (`NLM_F_ACK`) and returns the kernel's verdict: Ok, or the error
/// number its NLMSG_ERROR carried.
pub(crate) fn netlink_ack(req: &[u8]) -> io::Result<()> {
    let fd = netlink_send(req)?;
    let mut buf = [0u8; 4096];
    loop {
        let n = netlink_recv(&fd, &mut buf)?;
        for m in netlink_messages(&buf[..n]) {
            let Some((ty, body)) = m else {
                return Err(io::Error::other("malformed netlink reply"));
            };
            if ty == libc::NLMSG_ERROR as u16 && body.len() >= 4 {
                return match i32::from_ne_bytes([body[0], body[1], body[2], body[3]]) {
                    0 => Ok(()),
                    e => Err(io::Error::from_raw_os_error(-e)),
                };
            }
        }
    }
}

/// A raw route-netlink socket's request-reply exchange: sends `req`,
/// hands every reply message to `each` until the dump ends.
pub(crate) fn netlink_dump(req: &[u8], mut each: impl FnMut(u16, &[u8])) -> io::Result<()> {
    let fd = netlink_send(req)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = netlink_recv(&fd, &mut buf)?;
        for m in netlink_messages(&buf[..n]) {
            match m {
                Some((ty, _))
                    if ty == libc::NLMSG_DONE as u16 || ty == libc::NLMSG_ERROR as u16 =>
                {
                    return Ok(())
                }
                Some((ty, body)) => each(ty, body),
                None => return Ok(()),
            }
        }
    }
}
