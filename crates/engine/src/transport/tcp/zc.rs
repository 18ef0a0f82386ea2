//! A TCP flow's write buffers and, with `--zerocopy` (Linux MSG_ZEROCOPY),
//! the kernel's completions that say when a buffer may be written again.
//! A zero-copy send leaves the bytes in the flow's pages until the peer
//! has acknowledged them, so a buffer handed to the kernel rejoins the
//! pool only when completions cover every send made from it; without
//! zero-copy the pool is one buffer, free again as soon as a write
//! returns, and a send is a plain `write`.

use crate::net::{self, AsRawFd};
use std::io::{self, Write};
use wirebench_schema::result::ZeroCopy;

/// Buffers of a zero-copy flow: enough for a few writes to be in flight
/// (queued in the socket buffer, unacknowledged) while the next is filled.
pub(crate) const ZC_BUFFERS: usize = 4;

/// The zero-copy sends (by the kernel's numbering, widened to 64 bits)
/// that read from one buffer: a writer finishes a buffer before it takes
/// another, so they are consecutive.
#[derive(Clone, Copy, Default)]
struct Held {
    first: u64,
    end: u64,
    completed: u64,
    /// Handed back by the writer ([`WritePool::release`]).
    released: bool,
}

impl Held {
    fn busy(&self) -> bool {
        self.completed < self.end - self.first
    }
}

/// A flow's write buffers (allocated once) and its zero-copy accounting.
pub(crate) struct WritePool {
    bufs: Vec<Vec<u8>>,
    held: Vec<Held>,
    free: Vec<bool>,
    /// Sends go out with MSG_ZEROCOPY.
    on: bool,
    /// The kernel's number for the next zero-copy send.
    next_id: u64,
    /// None without `--zerocopy`.
    report: Option<ZeroCopy>,
}

impl WritePool {
    /// Buffers of `cap` bytes, each filled by `fill` once; with `zerocopy`,
    /// SO_ZEROCOPY on `fd` and [`ZC_BUFFERS`] of them, else (or when the
    /// kernel refuses) one.
    pub(crate) fn new(
        fd: net::RawFd,
        zerocopy: bool,
        cap: usize,
        fill: impl Fn(&mut [u8]),
    ) -> WritePool {
        let mut report = None;
        let mut on = false;
        if zerocopy {
            let mut r = ZeroCopy::default();
            match net::enable_zerocopy(fd) {
                Ok(()) => on = true,
                Err(e) => r.fallback = Some(format!("the kernel refuses SO_ZEROCOPY: {e}")),
            }
            report = Some(r);
        }
        let n = if on { ZC_BUFFERS } else { 1 };
        let bufs: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let mut b = vec![0u8; cap];
                fill(&mut b);
                b
            })
            .collect();
        WritePool {
            bufs,
            held: vec![Held::default(); n],
            free: vec![true; n],
            on,
            next_id: 0,
            report,
        }
    }

    pub(crate) fn buf(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i]
    }

    /// A free buffer, taking it out of the pool; reads the completions
    /// that came in first when some buffer is still with the kernel.
    /// None: every buffer is with the kernel ([`WritePool::wait`]).
    pub(crate) fn acquire(&mut self, fd: net::RawFd) -> Option<usize> {
        if self.free.iter().any(|f| !f) {
            self.reap(fd);
        }
        let i = self.free.iter().position(|&f| f)?;
        self.free[i] = false;
        self.held[i] = Held {
            first: self.next_id,
            end: self.next_id,
            completed: 0,
            released: false,
        };
        Some(i)
    }

    /// The writer is done with buffer `i`: it rejoins the pool now, or
    /// when the completions of its zero-copy sends are in.
    pub(crate) fn release(&mut self, i: usize) {
        self.held[i].released = true;
        if !self.held[i].busy() {
            self.free[i] = true;
        }
    }

    /// Bytes `range` of buffer `i` to the socket: one send, which may take
    /// part of them (as `write`). A zero-copy send the kernel refuses for
    /// want of buffer space (ENOBUFS) turns zero-copy off for the rest of
    /// the flow and goes out as a plain write.
    pub(crate) fn send<S: AsRawFd>(
        &mut self,
        s: &S,
        i: usize,
        range: std::ops::Range<usize>,
    ) -> io::Result<usize>
    where
        for<'a> &'a S: Write,
    {
        if self.on {
            match net::send_zerocopy(s.as_raw_fd(), &self.bufs[i][range.clone()]) {
                Ok(k) => {
                    // The kernel numbers a send that took bytes; one that
                    // took none (an error) gets no number.
                    if k > 0 {
                        self.held[i].end = self.next_id + 1;
                        self.next_id += 1;
                        if let Some(r) = &mut self.report {
                            r.used = true;
                            r.sends += 1;
                        }
                    }
                    return Ok(k);
                }
                Err(e) if net::is_nobufs(&e) => {
                    self.on = false;
                    if let Some(r) = &mut self.report {
                        r.fallback = Some(format!(
                            "a MSG_ZEROCOPY send failed ({e}): the socket's option memory \
                             (net.core.optmem_max) or locked-page limit is spent; \
                             plain writes from there on"
                        ));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let mut out = s;
        out.write(&self.bufs[i][range])
    }

    /// Reads the completions queued for the socket; buffers whose sends
    /// they all cover and that the writer released rejoin the pool.
    pub(crate) fn reap(&mut self, fd: net::RawFd) {
        let (held, free, report, next_id) = (
            &mut self.held,
            &mut self.free,
            &mut self.report,
            self.next_id,
        );
        let _ = net::zerocopy_completions(fd, |lo, hi, copied| {
            let (lo, hi) = (widen(lo, next_id), widen(hi, next_id));
            if hi < lo {
                return;
            }
            let n = hi - lo + 1;
            if let Some(r) = report.as_mut() {
                r.completed += n;
                if copied {
                    r.copied += n;
                }
            }
            for (h, f) in held.iter_mut().zip(free.iter_mut()) {
                let covered = (hi + 1).min(h.end).saturating_sub(lo.max(h.first));
                h.completed += covered;
                if covered > 0 && h.released && !h.busy() {
                    *f = true;
                }
            }
        });
    }

    /// Every buffer is with the kernel: waits up to `timeout_ms` for a
    /// completion (poll on POLLERR) and reads what came.
    pub(crate) fn wait(&mut self, fd: net::RawFd, timeout_ms: i32) {
        if net::wait_errqueue(fd, timeout_ms) {
            self.reap(fd);
        }
    }

    /// No buffer is free: the writer must [`WritePool::wait`].
    pub(crate) fn starved(&self) -> bool {
        !self.free.iter().any(|&f| f)
    }

    /// At the flow's end: waits up to `timeout_ms` in all for the
    /// completions of what is still with the kernel (a run's last writes
    /// are acknowledged within a round trip or so), and says what the
    /// kernel did. Buffers whose sends are still not complete then are
    /// leaked on drop rather than freed, so that their memory is never
    /// reused while the kernel may still send from it.
    pub(crate) fn finish(&mut self, fd: net::RawFd, timeout_ms: u64) -> Option<ZeroCopy> {
        let until = crate::clock::mono_ns() + timeout_ms * 1_000_000;
        self.reap(fd);
        while self.held.iter().any(Held::busy) {
            let now = crate::clock::mono_ns();
            if now >= until {
                break;
            }
            self.wait(fd, ((until - now) / 1_000_000).clamp(1, 100) as i32);
        }
        self.report.clone()
    }
}

impl Drop for WritePool {
    fn drop(&mut self) {
        if self.held.iter().any(Held::busy) {
            // The kernel holds these pages until the data is acknowledged
            // (or the connection is gone); the allocator must not hand
            // them out meanwhile.
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
    }
}

/// A 32-bit send number from the kernel as the 64-bit count: it names a
/// send already made, so it is at most 2^32 - 1 below `next`.
fn widen(id: u32, next: u64) -> u64 {
    next.wrapping_sub(u64::from((next as u32).wrapping_sub(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_numbers_widen_across_the_32_bit_wrap() {
        assert_eq!(widen(0, 1), 0);
        assert_eq!(widen(5, 10), 5);
        assert_eq!(widen(u32::MAX, 1 << 32), u32::MAX as u64);
        assert_eq!(widen(2, (1 << 32) + 5), (1 << 32) + 2);
        assert_eq!(widen(u32::MAX - 1, (1 << 32) + 5), u32::MAX as u64 - 1);
    }
}
