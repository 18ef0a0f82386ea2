//! What the XDP tests (xdp.rs, xdp_live.rs) share: whether they may run
//! (root), waiting for a condition, and the BPF objects a test can see
//! without bpftool (the program and map ids a process holds, from its
//! fdinfo, and whether the kernel still has an id) for their "nothing
//! left after SIGKILL" checks.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

/// Whether the test runs as root (namespaces, XDP).
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Waits up to 5 s for `cond`.
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The BPF programs and maps process `pid` holds: (prog ids, map ids),
/// from /proc/PID/fdinfo.
pub fn bpf_ids(pid: u32) -> (Vec<u32>, Vec<u32>) {
    let (mut progs, mut maps) = (Vec::new(), Vec::new());
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (progs, maps);
    };
    for fd in fds.flatten() {
        let Ok(link) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let link = link.to_string_lossy().into_owned();
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        let Ok(text) = std::fs::read_to_string(info) else {
            continue;
        };
        let id = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse::<u32>().ok())
        };
        match link.as_str() {
            "anon_inode:bpf-prog" => progs.extend(id("prog_id:")),
            "anon_inode:bpf-map" => maps.extend(id("map_id:")),
            _ => {}
        }
    }
    (progs, maps)
}

/// Whether the kernel still has BPF object `id` (`cmd`: 13 program, 14
/// map, BPF_*_GET_FD_BY_ID): anything but ENOENT counts as there.
pub fn bpf_id_exists(cmd: libc::c_long, id: u32) -> bool {
    let mut attr = [0u64; 16];
    attr[0] = u64::from(id);
    // SAFETY: bpf(2) with a zeroed 128-byte attribute holding the id;
    // the kernel reads no more than the size passed.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 128u32) };
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just returned to us.
        unsafe { libc::close(fd as libc::c_int) };
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT)
}
