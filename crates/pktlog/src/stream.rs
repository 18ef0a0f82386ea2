//! Logging from hot paths: each receive or send thread holds a
//! [`LogProducer`] that fills preallocated blocks of records and hands a full
//! block to one writer thread ([`LogSink`]), which encodes and writes it and
//! gives the empty block back. Per packet the producer only copies 32 bytes
//! into memory it already owns: no allocation, no lock, no syscall. Per
//! block (4096 packets) it does one channel send and one receive.
//!
//! If the disk cannot keep up and a producer has no empty block left, it
//! drops records rather than stall the measurement, and counts them; the
//! count lands in the log's footer (`dropped`) so an incomplete log is never
//! mistaken for a complete one.
//!
//! A log may have a size cap ([`LogCap`]: per file, and a budget shared by
//! every log of a daemon); records past it are not written and are counted
//! in the footer's `capped`, so a capped log is never mistaken for a whole one.
//!
//! Records of one producer stay in order; producers' blocks interleave, so a
//! log is ordered per flow (one producer per flow), not globally.

use crate::format::{LogFooter, LogMeta, Record, RECORD_LEN};
use crate::{LogError, LogWriter};
use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Records per block handed to the writer.
pub const BLOCK: usize = 4096;
/// Blocks each producer owns (its current one included): 8 × 128 KiB =
/// 1 MiB per flow, about 30 ms of writer stall at 1 Mpps.
pub const BLOCKS_PER_PRODUCER: usize = 8;

/// How much one log may hold: records past it are counted, not written.
#[derive(Debug, Clone, Default)]
pub struct LogCap {
    /// Most bytes of records in this file (None: no cap of its own).
    pub per_log_bytes: Option<u64>,
    /// Bytes left for every log sharing this budget (a daemon's total),
    /// taken from as records are written.
    pub shared_left: Option<Arc<AtomicU64>>,
}

impl LogCap {
    /// Records that may still be written of `want`, with `written` in
    /// this log already; takes them from the shared budget.
    fn take(&self, want: u64, written: u64) -> u64 {
        let rec = RECORD_LEN as u64;
        let mut n = want;
        if let Some(max) = self.per_log_bytes {
            n = n.min((max / rec).saturating_sub(written));
        }
        if let Some(left) = &self.shared_left {
            let got = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                Some(l - (l / rec).min(n) * rec)
            });
            let before = got.unwrap_or_else(|l| l);
            n = (before / rec).min(n);
        }
        n
    }
}

enum Msg {
    Meta(Box<LogMeta>),
    Block(Vec<Record>, Sender<Vec<Record>>),
    Finish(Box<LogFooter>),
}

/// The writer thread of one log file.
pub struct LogSink {
    tx: Sender<Msg>,
    handle: Option<JoinHandle<Result<u64, LogError>>>,
    dropped: Arc<AtomicU64>,
    capped: Arc<AtomicU64>,
}

/// The hot-path end: owned by one thread.
pub struct LogProducer {
    cur: Vec<Record>,
    free_tx: Sender<Vec<Record>>,
    free_rx: Receiver<Vec<Record>>,
    full: Sender<Msg>,
    dropped: Arc<AtomicU64>,
}

impl LogSink {
    /// Creates (truncates) `path` and starts the writer thread. Nothing is
    /// written before [`LogSink::start`] gives the metadata; blocks that
    /// arrive earlier wait.
    pub fn create(path: &Path) -> Result<Self, LogError> {
        let file = File::create(path)
            .map_err(|e| LogError::io(&format!("creating {}", path.display()), e))?;
        Self::start_writer(file, LogCap::default())
    }

    /// Creates a new file at `path` for a daemon: never an existing name
    /// and never through a symbolic link (O_EXCL | O_NOFOLLOW, mode 0640),
    /// so a file or link planted under the name is refused, not
    /// overwritten; `cap` bounds what it may hold.
    pub fn create_new(path: &Path, cap: LogCap) -> Result<Self, LogError> {
        let mut o = OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.custom_flags(libc::O_NOFOLLOW).mode(0o640);
        }
        let file = o
            .open(path)
            .map_err(|e| LogError::io(&format!("creating {}", path.display()), e))?;
        Self::start_writer(file, cap)
    }

    fn start_writer(file: File, cap: LogCap) -> Result<Self, LogError> {
        let (tx, rx) = channel::<Msg>();
        let capped = Arc::new(AtomicU64::new(0));
        let count = capped.clone();
        let handle = std::thread::Builder::new()
            .name("wb-log".into())
            .spawn(move || writer(BufWriter::with_capacity(1 << 20, file), rx, cap, &count))
            .map_err(|e| LogError::io("starting the log writer", e))?;
        Ok(Self {
            tx,
            handle: Some(handle),
            dropped: Arc::new(AtomicU64::new(0)),
            capped,
        })
    }

    /// Writes the header.
    pub fn start(&self, meta: LogMeta) {
        let _ = self.tx.send(Msg::Meta(Box::new(meta)));
    }

    /// A producer for one thread, with its blocks allocated now.
    pub fn producer(&self) -> LogProducer {
        let (free_tx, free_rx) = channel();
        for _ in 1..BLOCKS_PER_PRODUCER {
            let _ = free_tx.send(Vec::with_capacity(BLOCK));
        }
        LogProducer {
            cur: Vec::with_capacity(BLOCK),
            free_tx,
            free_rx,
            full: self.tx.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// Records not written so far because the log reached its cap.
    pub fn capped(&self) -> u64 {
        self.capped.load(Ordering::Relaxed)
    }

    /// Records dropped so far by producers already gone.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes the end block once every producer is dropped (drop them
    /// first: their last blocks are sent on drop). `footer.dropped` is set
    /// to the producers' count. Returns the records written.
    pub fn finish(self, footer: LogFooter) -> Result<u64, LogError> {
        self.finish_counted(footer).map(|(n, _)| n)
    }

    /// [`LogSink::finish`], also returning the records the cap kept out.
    pub fn finish_counted(mut self, mut footer: LogFooter) -> Result<(u64, u64), LogError> {
        footer.dropped = self.dropped();
        let _ = self.tx.send(Msg::Finish(Box::new(footer)));
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r.map(|n| (n, self.capped())),
            _ => Err(LogError::Export("the log writer thread failed".into())),
        }
    }
}

impl Drop for LogSink {
    fn drop(&mut self) {
        // Without finish (an error path): the writer writes what it has and
        // stops without an end block, so a reader reports the log unfinished.
        if let Some(h) = self.handle.take() {
            let (dead, _) = channel();
            self.tx = dead;
            let _ = h.join();
        }
    }
}

fn writer(
    out: BufWriter<File>,
    rx: Receiver<Msg>,
    cap: LogCap,
    capped_out: &AtomicU64,
) -> Result<u64, LogError> {
    let mut out = Some(out);
    let mut w: Option<LogWriter<BufWriter<File>>> = None;
    let mut pending: Vec<(Vec<Record>, Sender<Vec<Record>>)> = Vec::new();
    let mut capped = 0u64;
    let mut write = |w: &mut LogWriter<_>, mut b: Vec<Record>, back: Sender<Vec<Record>>| {
        let n = cap.take(b.len() as u64, w.records()) as usize;
        capped += (b.len() - n) as u64;
        capped_out.store(capped, Ordering::Relaxed);
        for r in &b[..n] {
            w.push(r)?;
        }
        b.clear();
        let _ = back.send(b);
        Ok::<(), LogError>(())
    };
    for msg in rx {
        match msg {
            Msg::Meta(m) => {
                if w.is_none() {
                    if let Some(o) = out.take() {
                        let mut lw = LogWriter::new(o, &m)?;
                        for (b, back) in pending.drain(..) {
                            write(&mut lw, b, back)?;
                        }
                        w = Some(lw);
                    }
                }
            }
            Msg::Block(b, back) => match w.as_mut() {
                Some(lw) => write(lw, b, back)?,
                None => pending.push((b, back)),
            },
            Msg::Finish(f) => {
                let Some(lw) = w.take() else {
                    return Err(LogError::Header(
                        "the log was finished before it was started".into(),
                    ));
                };
                let n = lw.records();
                let mut f = *f;
                f.capped = capped;
                lw.finish(f)?;
                return Ok(n);
            }
        }
    }
    // Every sender gone without Finish: keep what was written.
    if let Some(mut lw) = w {
        lw.flush()?;
        return Ok(lw.records());
    }
    Ok(0)
}

impl LogProducer {
    /// Logs one record. Never blocks, never allocates.
    #[inline]
    pub fn push(&mut self, r: Record) {
        if self.cur.len() == BLOCK && !self.ship() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.cur.push(r);
    }

    /// Swaps the full block for an empty one and sends it to the writer;
    /// false when no empty block is back yet.
    fn ship(&mut self) -> bool {
        let Ok(next) = self.free_rx.try_recv() else {
            return false;
        };
        let full = std::mem::replace(&mut self.cur, next);
        let n = full.len() as u64;
        if self
            .full
            .send(Msg::Block(full, self.free_tx.clone()))
            .is_err()
        {
            // The writer is gone (its file failed): the records are lost.
            self.dropped.fetch_add(n, Ordering::Relaxed);
        }
        true
    }
}

impl Drop for LogProducer {
    fn drop(&mut self) {
        if !self.cur.is_empty() {
            let b = std::mem::take(&mut self.cur);
            let n = b.len() as u64;
            if self.full.send(Msg::Block(b, self.free_tx.clone())).is_err() {
                self.dropped.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FlowMeta, Side, FLAG_RX};
    use crate::LogReader;

    fn meta() -> LogMeta {
        LogMeta {
            side: Side::Recv,
            meter: "owd".into(),
            session: 1,
            started_at: None,
            tool: "test".into(),
            delay_offset_ns: 0,
            sessions: Vec::new(),
            flows: (1..=3)
                .map(|id| FlowMeta {
                    id,
                    transport: "udp".into(),
                    ip_version: 4,
                    mtu: 1500,
                    src: None,
                    dst: None,
                })
                .collect(),
        }
    }

    #[test]
    fn three_threads_log_in_order_per_flow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wblog");
        let sink = LogSink::create(&path).unwrap();
        let producers: Vec<_> = (0..3).map(|_| sink.producer()).collect();
        // Records before the metadata wait for it.
        let threads: Vec<_> = producers
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                std::thread::spawn(move || {
                    for s in 0..20_000u64 {
                        p.push(Record {
                            flow: i as u16 + 1,
                            flags: FLAG_RX,
                            size: 100,
                            seq: s,
                            tx_ns: s,
                            rx_ns: s + 1,
                        });
                        if s % 2000 == 0 {
                            // Let the writer keep up: the test is about
                            // order, not about dropping.
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        sink.start(meta());
        for t in threads {
            t.join().unwrap();
        }
        let dropped = sink.dropped();
        let n = sink.finish(LogFooter::default()).unwrap();
        assert_eq!(n + dropped, 60_000);
        let mut r = LogReader::open(File::open(&path).unwrap()).unwrap();
        let mut next = [0u64; 4];
        while let Some(rec) = r.next_record().unwrap() {
            let f = rec.flow as usize;
            assert!(rec.seq >= next[f], "flow {f} out of order");
            next[f] = rec.seq + 1;
        }
        assert_eq!(r.footer().unwrap().dropped, dropped);
        if dropped == 0 {
            assert_eq!(&next[1..], &[20_000, 20_000, 20_000]);
        }
    }

    /// Logs `n` records of flow 1 through `sink` and finishes it.
    fn log_n(sink: LogSink, n: u64) -> u64 {
        sink.start(meta());
        let mut p = sink.producer();
        for s in 0..n {
            p.push(Record {
                flow: 1,
                seq: s,
                ..Record::default()
            });
            if s % 1000 == 999 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        drop(p);
        sink.finish(LogFooter::default()).unwrap()
    }

    #[test]
    fn a_daemon_log_never_opens_an_existing_name_or_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let taken = dir.path().join("taken.wblog");
        std::fs::write(&taken, b"an earlier session").unwrap();
        assert!(LogSink::create_new(&taken, LogCap::default()).is_err());
        assert_eq!(std::fs::read(&taken).unwrap(), b"an earlier session");
        #[cfg(unix)]
        {
            let link = dir.path().join("link.wblog");
            std::os::unix::fs::symlink(&target, &link).unwrap();
            assert!(LogSink::create_new(&link, LogCap::default()).is_err());
            // A dangling link is refused too (O_EXCL), not followed.
            let dangling = dir.path().join("dangling.wblog");
            std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
            assert!(LogSink::create_new(&dangling, LogCap::default()).is_err());
            assert!(!dir.path().join("nowhere").exists());
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    }

    #[test]
    fn a_capped_log_stops_at_its_cap_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let total = Arc::new(AtomicU64::new(1500 * RECORD_LEN as u64));
        let cap = |per: u64| LogCap {
            per_log_bytes: Some(per * RECORD_LEN as u64),
            shared_left: Some(total.clone()),
        };
        // Own cap 1000 of 3000 records; then the shared budget has 500 left.
        let a = dir.path().join("a.wblog");
        assert_eq!(
            log_n(LogSink::create_new(&a, cap(1000)).unwrap(), 3000),
            1000
        );
        let b = dir.path().join("b.wblog");
        assert_eq!(
            log_n(LogSink::create_new(&b, cap(1000)).unwrap(), 3000),
            500
        );
        assert_eq!(total.load(Ordering::Relaxed), 0);
        for (path, kept) in [(&a, 1000), (&b, 500)] {
            let mut r = LogReader::open(File::open(path).unwrap()).unwrap();
            let mut n = 0;
            while r.next_record().unwrap().is_some() {
                n += 1;
            }
            let f = r.footer().unwrap();
            assert_eq!(n, kept);
            assert_eq!(f.capped + f.dropped, 3000 - kept);
        }
    }

    #[test]
    fn a_sink_dropped_without_finish_leaves_an_unfinished_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wblog");
        let sink = LogSink::create(&path).unwrap();
        sink.start(meta());
        let mut p = sink.producer();
        p.push(Record::default());
        drop(p);
        drop(sink);
        let mut r = LogReader::open(File::open(&path).unwrap()).unwrap();
        assert_eq!(r.next_record().unwrap(), Some(Record::default()));
        assert!(matches!(
            r.next_record(),
            Err(LogError::Unfinished { records: 1 })
        ));
    }
}
