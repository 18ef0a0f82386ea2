//! One sender log from several: a run whose flows go to several receivers
//! runs one session each, and each session's sender writes its own log;
//! [`merge`] joins them into the single file `send -l FILE` promised, with
//! the flows renumbered 1.. across the run in the order given (the result
//! document's numbering), so the log and the document name flows alike.
//!
//! Only whole logs (with their end block) are joined: a damaged part is an
//! error naming it, never a silently shorter log.

use crate::format::{FlowEnd, LogFooter, LogMeta, LogSession};
use crate::{LogError, LogReader, LogWriter};
use std::io::{BufReader, Write};
use std::path::Path;

/// Reads each part (one session's sender log each, in run order) and
/// writes one log to `out`: the parts' flows renumbered consecutively,
/// `meta.sessions` saying which flows came from which session and
/// receiver, the footers' counts added. Returns the footer written.
pub fn merge<W: Write>(parts: &[&Path], out: W) -> Result<LogFooter, LogError> {
    let open = |p: &Path| -> Result<LogReader<BufReader<std::fs::File>>, LogError> {
        let f = std::fs::File::open(p)
            .map_err(|e| LogError::io(&format!("opening {}", p.display()), e))?;
        LogReader::open(BufReader::with_capacity(1 << 20, f)).map_err(|e| named(p, e))
    };
    // The header needs every part's flows before any record is written.
    let mut metas = Vec::with_capacity(parts.len());
    for p in parts {
        metas.push(open(p)?.meta().clone());
    }
    let Some(first) = metas.first() else {
        return Err(LogError::Header("no logs to merge".into()));
    };
    let mut meta = LogMeta {
        flows: Vec::new(),
        sessions: Vec::new(),
        ..first.clone()
    };
    if metas.iter().any(|m| m.side != first.side) {
        return Err(LogError::Header(
            "the logs to merge are not all from one side".into(),
        ));
    }
    if metas.iter().any(|m| m.meter != first.meter) {
        // Sessions to different receivers may meter differently; each
        // flow's records (reflections or not) still say which it was.
        meta.meter = "mixed".into();
    }
    // Per part: its flow ids and the id each becomes.
    let mut maps: Vec<Vec<(u16, u16)>> = Vec::with_capacity(parts.len());
    for m in &metas {
        let mut map = Vec::with_capacity(m.flows.len());
        let mut ids = Vec::with_capacity(m.flows.len());
        for f in &m.flows {
            let id = u16::try_from(meta.flows.len() + 1)
                .map_err(|_| LogError::Header("more than 65535 flows in one log".into()))?;
            map.push((f.id, id));
            ids.push(id);
            meta.flows.push(crate::FlowMeta { id, ..f.clone() });
        }
        meta.sessions.push(LogSession {
            session: m.session,
            dest: m.flows.iter().find_map(|f| f.dst.clone()),
            flows: ids,
        });
        maps.push(map);
    }
    let mut w = LogWriter::new(out, &meta)?;
    let mut footer = LogFooter::default();
    for ((p, map), m) in parts.iter().zip(&maps).zip(&metas) {
        let mut r = open(p)?;
        let to = |id: u16| {
            map.iter()
                .find(|(from, _)| *from == id)
                .map(|(_, to)| *to)
                .ok_or_else(|| LogError::Corrupt {
                    offset: 0,
                    what: format!(
                        "{}: a record of flow {id}, which its header does not list",
                        p.display()
                    ),
                })
        };
        while let Some(mut rec) = r.next_record().map_err(|e| named(p, e))? {
            rec.flow = to(rec.flow)?;
            w.push(&rec)?;
        }
        let Some(f) = r.footer() else {
            return Err(named(
                p,
                LogError::Unfinished {
                    records: r.records(),
                },
            ));
        };
        footer.dropped += f.dropped;
        footer.capped += f.capped;
        footer.partial |= f.partial;
        for e in &f.flows {
            footer.flows.push(FlowEnd {
                id: to(e.id)?,
                ..*e
            });
        }
        debug_assert_eq!(m.flows.len(), map.len());
    }
    let records = w.records();
    w.finish(footer.clone())?;
    footer.records = records;
    Ok(footer)
}

/// The error with the part's path in front, so a damaged part is named.
fn named(p: &Path, e: LogError) -> LogError {
    match e {
        LogError::Io { what, source } => LogError::Io {
            what: format!("{}: {what}", p.display()),
            source,
        },
        other => LogError::Header(format!("{}: {other}", p.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Record, Side, FLAG_NOT_SENT};
    use crate::FlowMeta;

    fn part(dir: &Path, name: &str, session: u32, dst: &str, flows: &[u16]) -> std::path::PathBuf {
        let meta = LogMeta {
            side: Side::Send,
            meter: "owd".into(),
            session,
            started_at: None,
            tool: "test".into(),
            delay_offset_ns: 0,
            flows: flows
                .iter()
                .map(|&id| FlowMeta {
                    id,
                    transport: "udp".into(),
                    ip_version: 4,
                    mtu: 1500,
                    src: None,
                    dst: Some(dst.into()),
                })
                .collect(),
            sessions: Vec::new(),
        };
        let path = dir.join(name);
        let mut w = LogWriter::new(std::fs::File::create(&path).unwrap(), &meta).unwrap();
        for &id in flows {
            for seq in 0..3u64 {
                w.push(&Record {
                    flow: id,
                    flags: if seq == 2 { FLAG_NOT_SENT } else { 0 },
                    size: 100 * u32::from(id),
                    seq,
                    tx_ns: seq,
                    rx_ns: 0,
                })
                .unwrap();
            }
        }
        let footer = LogFooter {
            flows: flows
                .iter()
                .map(|&id| FlowEnd {
                    id,
                    sent: Some(2),
                    not_sent: 1,
                })
                .collect(),
            dropped: u64::from(session),
            ..Default::default()
        };
        w.finish(footer).unwrap();
        path
    }

    #[test]
    fn flows_are_renumbered_in_run_order_and_counts_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let a = part(dir.path(), "a", 1, "192.0.2.1", &[1, 2]);
        let b = part(dir.path(), "b", 2, "192.0.2.2", &[1]);
        let mut out = Vec::new();
        let footer = merge(&[&a, &b], &mut out).unwrap();
        assert_eq!(footer.records, 9);
        assert_eq!(footer.dropped, 3);
        let mut r = LogReader::open(&out[..]).unwrap();
        let meta = r.meta().clone();
        let ids: Vec<u16> = meta.flows.iter().map(|f| f.id).collect();
        assert_eq!(ids, [1, 2, 3]);
        assert_eq!(meta.flows[2].dst.as_deref(), Some("192.0.2.2"));
        assert_eq!(meta.sessions.len(), 2);
        assert_eq!(meta.sessions[1].flows, [3]);
        assert_eq!(meta.sessions[1].dest.as_deref(), Some("192.0.2.2"));
        let recs: Vec<Record> = r.by_ref().map(|x| x.unwrap()).collect();
        // Flow 1 of the second part is flow 3 now; its records kept their
        // own sizes (100 x its old id).
        let third: Vec<&Record> = recs.iter().filter(|x| x.flow == 3).collect();
        assert_eq!(third.len(), 3);
        assert!(third.iter().all(|x| x.size == 100));
        assert_eq!(recs.iter().filter(|x| x.flow == 2).count(), 3);
        let f = r.footer().unwrap();
        let ends: Vec<u16> = f.flows.iter().map(|e| e.id).collect();
        assert_eq!(ends, [1, 2, 3]);
    }

    #[test]
    fn an_unfinished_part_is_named_not_merged() {
        let dir = tempfile::tempdir().unwrap();
        let a = part(dir.path(), "a", 1, "192.0.2.1", &[1]);
        let b = part(dir.path(), "b", 2, "192.0.2.2", &[1]);
        let bytes = std::fs::read(&b).unwrap();
        std::fs::write(&b, &bytes[..bytes.len() - 20]).unwrap();
        let e = merge(&[&a, &b], Vec::new()).unwrap_err().to_string();
        assert!(e.contains(&b.display().to_string()), "{e}");
    }
}
