//! Round trip and damage: every record written comes back bit for bit, and a
//! truncated, flipped or foreign file ends in a typed error, never a panic
//! or a silently shortened log.

use wirebench_pktlog::format::{FLAG_LAST, FLAG_RX, MAGIC};
use wirebench_pktlog::{
    FlowEnd, FlowMeta, LogError, LogFooter, LogMeta, LogReader, LogWriter, Record, Side,
};

fn meta() -> LogMeta {
    LogMeta {
        side: Side::Recv,
        meter: "owd".into(),
        session: 0xdead_beef,
        started_at: Some("2026-11-22T17:00:00Z".into()),
        tool: "wirebench test".into(),
        delay_offset_ns: -1234,
        sessions: Vec::new(),
        flows: vec![FlowMeta {
            id: 1,
            transport: "udp".into(),
            ip_version: 4,
            mtu: 1500,
            src: Some("127.0.0.1:40000".into()),
            dst: None,
        }],
    }
}

fn records(n: u64) -> Vec<Record> {
    (0..n)
        .map(|i| Record {
            flow: (i % 3) as u16 + 1,
            flags: if i + 1 == n {
                FLAG_RX | FLAG_LAST
            } else {
                FLAG_RX
            },
            size: 24 + (i % 1000) as u32,
            seq: i * 7 + (1 << 40),
            tx_ns: 1_700_000_000_000_000_000 + i * 1_000_003,
            rx_ns: 1_700_000_000_000_050_000 + i * 1_000_011,
        })
        .collect()
}

fn write(recs: &[Record], block: usize) -> Vec<u8> {
    let mut w = LogWriter::with_block_records(Vec::new(), &meta(), block).unwrap();
    for r in recs {
        w.push(r).unwrap();
    }
    w.finish(LogFooter {
        flows: vec![FlowEnd {
            id: 1,
            sent: Some(recs.len() as u64 + 5),
            not_sent: 2,
        }],
        ..Default::default()
    })
    .unwrap()
}

fn read_all(bytes: &[u8]) -> Result<(LogMeta, Vec<Record>, LogFooter), LogError> {
    let mut r = LogReader::open(bytes)?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record()? {
        out.push(rec);
    }
    Ok((r.meta().clone(), out, r.footer().cloned().unwrap()))
}

#[test]
fn round_trip_across_block_boundaries() {
    for (n, block) in [(0, 4), (1, 4), (4, 4), (5, 4), (10_000, 4096), (333, 1)] {
        let recs = records(n);
        let bytes = write(&recs, block);
        let (m, back, footer) = read_all(&bytes).unwrap();
        assert_eq!(m, meta());
        assert_eq!(back, recs, "n={n} block={block}");
        assert_eq!(footer.records, n);
        assert_eq!(footer.flows[0].sent, Some(n + 5));
        assert_eq!(footer.flows[0].not_sent, 2);
    }
}

#[test]
fn record_is_32_bytes_and_size_is_predictable() {
    // header (16) + meta + crc (4) + blocks (16 + 32 n) + end (16 + footer)
    let bytes = write(&records(4096), 4096);
    let meta_len = serde_json::to_vec(&meta()).unwrap().len();
    let footer_len = bytes.len() - (16 + meta_len + 4) - (16 + 32 * 4096) - 16;
    assert!(footer_len < 200, "footer {footer_len}");
    assert_eq!(&bytes[..8], &MAGIC);
}

#[test]
fn delay_uses_the_offset_and_keeps_the_sign() {
    let r = Record {
        flags: FLAG_RX,
        tx_ns: 1_000,
        rx_ns: 900,
        ..Default::default()
    };
    assert_eq!(r.delay_ns(0), Some(-100));
    assert_eq!(r.delay_ns(-150), Some(50));
    let unsent = Record { flags: 0, ..r };
    assert_eq!(unsent.delay_ns(0), None);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = write(&records(50), 16);
    for cut in 0..bytes.len() {
        let res = read_all(&bytes[..cut]);
        match res {
            Err(LogError::Truncated { .. } | LogError::Unfinished { .. }) => {}
            other => panic!("cut at {cut}: expected truncation, got {other:?}"),
        }
    }
}

#[test]
fn a_log_without_end_block_says_the_writer_did_not_finish() {
    // What a crashed writer leaves: the header and whole blocks.
    let mut out = Vec::new();
    {
        let mut w = LogWriter::with_block_records(&mut out, &meta(), 8).unwrap();
        for r in records(20) {
            w.push(&r).unwrap();
        }
        w.flush().unwrap();
    }
    let mut r = LogReader::open(&out[..]).unwrap();
    let mut n = 0;
    let err = loop {
        match r.next_record() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("no end block, yet the reader ended cleanly"),
            Err(e) => break e,
        }
    };
    assert_eq!(n, 20, "the records before the cut are still readable");
    assert!(matches!(err, LogError::Unfinished { records: 20 }), "{err}");
    assert!(err.to_string().contains("without its end block"));
}

#[test]
fn every_single_bit_flip_is_caught_or_harmless() {
    let recs = records(40);
    let bytes = write(&recs, 16);
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            match read_all(&b) {
                Err(_) => {}
                // A flip in a reserved field changes nothing we read.
                Ok((m, back, _)) => {
                    assert_eq!(back, recs, "flip at byte {i} went unnoticed");
                    assert_eq!(m, meta(), "flip at byte {i} went unnoticed");
                }
            }
        }
    }
}

#[test]
fn foreign_and_garbage_files_are_refused() {
    assert!(matches!(
        read_all(b"flowId seqNum txTime rxTime\n1 0 1.0 2.0\n"),
        Err(LogError::NotALog)
    ));
    assert!(matches!(read_all(&[]), Err(LogError::Truncated { .. })));
    let mut garbage = vec![0u8; 4096];
    let mut x = 12345u32;
    for b in &mut garbage {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        *b = (x >> 16) as u8;
    }
    assert!(matches!(read_all(&garbage), Err(LogError::NotALog)));
    // Our signature followed by garbage: a header error, not a panic or
    // a huge allocation.
    let mut g = MAGIC.to_vec();
    g.extend_from_slice(&[1, 0, 32, 0, 0xff, 0xff, 0xff, 0x7f]);
    g.extend_from_slice(&garbage);
    let e = read_all(&g).unwrap_err();
    assert!(matches!(e, LogError::Header(_)), "{e}");
    // A newer version is named.
    let mut v = write(&records(1), 4);
    v[8] = 9;
    assert!(matches!(read_all(&v), Err(LogError::Version(9))));
    // Bytes after the end block.
    let mut t = write(&records(3), 4);
    t.push(0);
    let e = read_all(&t).unwrap_err();
    assert!(e.to_string().contains("after the end block"), "{e}");
}

#[test]
fn damaged_block_count_is_bounded() {
    let bytes = write(&records(10), 16);
    let meta_len = serde_json::to_vec(&meta()).unwrap().len();
    let block_at = 16 + meta_len + 4;
    let mut b = bytes.clone();
    b[block_at + 4..block_at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = read_all(&b).unwrap_err();
    assert!(e.to_string().contains("record count"), "{e}");
    assert!(e.to_string().contains(&format!("byte {block_at}")), "{e}");
}
